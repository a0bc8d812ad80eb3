"""``python -m strata``: the ``strata`` command (how ``strata run --dedicate`` starts its second application)."""

from strata.cli import app

app(prog_name="strata")

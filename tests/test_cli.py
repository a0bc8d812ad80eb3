"""The CLI: version, schema, generate → validate round trips for every example and generator."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from strata import __version__
from strata.cli import app
from strata.generators import GENERATORS
from strata.model import load_scenario

from .conftest import EXAMPLES

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and __version__ in result.stdout


def test_schema_is_json_schema():
    result = runner.invoke(app, ["schema"])
    schema = json.loads(result.stdout)
    assert schema["type"] == "object" and "cluster" in schema["properties"]
    assert "from" in json.dumps(schema["$defs"]["Stream"])


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_validate(example):
    result = runner.invoke(app, ["validate", str(example)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_generators_validate_and_are_seeded(tmp_path, kind):
    out = tmp_path / f"{kind}.yaml"
    assert runner.invoke(app, ["generate", kind, "--seed", "3", "-o", str(out)]).exit_code == 0
    assert runner.invoke(app, ["validate", str(out)]).exit_code == 0
    again = runner.invoke(app, ["generate", kind, "--seed", "3"])
    assert yaml.safe_load(again.stdout) == yaml.safe_load(out.read_text())
    other = runner.invoke(app, ["generate", kind, "--seed", "4"])
    assert kind in ("multi-tenant", "skewed") or other.stdout != again.stdout


def test_lsd_and_dac_shapes(tmp_path):
    lsd = load_scenario(_write(tmp_path, "lsd", GENERATORS["lsd"](seed=2)))
    assert len(lsd.jobs) == 104
    assert sum(len(j.templates[0].operators) for j in lsd.jobs) == 737
    assert sum(st.is_external for j in lsd.jobs for st in j.templates[0].streams) > 30
    dac = load_scenario(_write(tmp_path, "dac", GENERATORS["dac"](seed=2)))
    assert len(dac.jobs) == 6 and sum(len(j.templates[0].operators) for j in dac.jobs) == 51
    costs = [op.cost_per_record for j in dac.jobs for op in j.templates[0].operators if op.kind == "map"]
    assert max(costs) / min(costs) > 100  # cpu needs differ by orders of magnitude


def test_generate_knobs_and_bad_knob(tmp_path):
    result = runner.invoke(app, ["generate", "skewed", "--set", "zipf_s=1.5", "--set", "instances=4"])
    doc = yaml.safe_load(result.stdout)
    assert doc["jobs"][0]["templates"][0]["operators"][0]["source"]["keys"]["zipf_s"] == 1.5
    assert runner.invoke(app, ["generate", "skewed", "--set", "colour=red"]).exit_code == 2
    assert runner.invoke(app, ["generate", "nope"]).exit_code == 2


def _write(tmp_path, name, doc):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path

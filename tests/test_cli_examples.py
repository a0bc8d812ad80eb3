"""The package carries its examples (issue 16, deliverable 6): strata examples, strata demo's default spec,
tables whole off a terminal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from typer.testing import CliRunner

import strata
from strata.cli import app

from .conftest import EXAMPLES, ROOT

runner = CliRunner()
STRATA = Path(sys.executable).with_name("strata")


def test_examples_live_in_the_package_and_the_repository_points_at_them():
    packaged = Path(strata.__file__).parent / "examples"
    assert {p.name for p in packaged.glob("*.yaml")} >= {"demo.yaml", "pipeline.yaml"}
    assert (ROOT / "examples").resolve() == packaged.resolve()  # one copy: examples/ is a link
    assert EXAMPLES.resolve() == packaged.resolve()


def test_examples_lists_prints_and_copies(tmp_path):
    listed = runner.invoke(app, ["examples"])
    assert listed.exit_code == 0 and "demo" in listed.output and "pipeline" in listed.output
    printed = runner.invoke(app, ["examples", "pipeline"])
    assert yaml.safe_load(printed.output)["name"] == "pipeline"
    out = tmp_path / "mine.yaml"
    copied = runner.invoke(app, ["examples", "demo", "-o", str(out)])
    assert copied.exit_code == 0 and yaml.safe_load(out.read_text())["name"] == "demo"
    missing = runner.invoke(app, ["examples", "nope"])
    assert missing.exit_code == 2 and "expected one of demo, pipeline" in missing.output


def test_demo_default_spec_is_found_from_any_directory(tmp_path, monkeypatch):
    import strata.cli as cli

    seen = {}

    def fake_load(spec):
        seen["spec"] = spec
        raise SystemExit(0)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "load", fake_load)
    runner.invoke(app, ["demo", "--out", str(tmp_path / "run")])
    assert seen["spec"][0] == Path(strata.__file__).parent / "examples" / "demo.yaml"


def test_tables_are_not_cut_off_a_terminal(tmp_path):
    proc = subprocess.run(
        [str(STRATA), "validate", str(EXAMPLES / "demo.yaml")], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "target latency s" in proc.stdout and "Spark and simulator" in proc.stdout and "…" not in proc.stdout

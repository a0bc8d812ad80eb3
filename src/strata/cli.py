"""The ``strata`` command line (typer + rich).

Bad input is reported as located problems on stderr with exit code 2; later
issues add ``plan``, ``simulate``, ``run``, ``demo`` and ``report`` here.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console
from rich.table import Table

from strata import __version__
from strata.model import Scenario, SpecError, load_scenario, scenario_schema
from strata.spark.conf import SparkSettings

app = typer.Typer(
    name="strata",
    help="Strata: a hierarchical, multi-objective scheduler for stream processing on Spark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Off a terminal (a pipe, a file, CI) rich would cut tables to 80 columns; print them whole instead.
console = Console(width=None if sys.stdout.isatty() else 240)
errors = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        console.print(f"strata {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Strata: plan, simulate and run streaming jobs under one scheduler hierarchy."""


def fail(err: SpecError) -> typer.Exit:
    """Print every located problem and return the exit to raise (code 2)."""
    for problem in err.problems:
        errors.print(f"[bold red]error[/] {problem}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


def load(spec: list[Path]) -> Scenario:
    """Load spec files or exit 2 with located errors."""
    try:
        return load_scenario(*spec)
    except SpecError as err:
        raise fail(err) from None


SpecArg = Annotated[list[Path], typer.Argument(help="Scenario spec file(s) (YAML); several are merged.")]


def writable(path: Path | None, option: str, directory: bool = False) -> None:
    """Exit 2 now, before any work, if ``path`` (a file, or with ``directory`` a directory made on
    demand) cannot be written: its nearest existing ancestor must be a directory we can create files in."""
    if path is None:
        return
    path = Path(path)
    problem = None
    if directory and path.exists() and not path.is_dir():
        problem = "an existing file, not a directory"
    elif not directory and path.is_dir():
        problem = "a directory, not a file"
    else:
        base = path if directory and path.is_dir() else path.parent
        while not base.exists() and base != base.parent:
            if not directory:
                problem = f"no directory {str(base)!r}"
                break
            base = base.parent
        if problem is None and not base.is_dir():
            problem = f"{str(base)!r} is a file, not a directory"
        elif problem is None:
            try:
                fd, probe = tempfile.mkstemp(prefix=".strata-probe-", dir=base)
                os.close(fd)
                os.unlink(probe)
            except OSError as e:
                problem = f"{str(base)!r} is not writable ({e.strerror or e})"
    if problem is not None:
        errors.print(
            f"[bold red]error[/] {option} {path}: expected a writable {'directory' if directory else 'file'}; "
            f"found {problem}",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=2)


ENGINES = ("spark", "sim")


@app.command()
def validate(
    spec: Annotated[
        list[Path],
        typer.Argument(
            help="Scenario spec file(s) (YAML) and/or Python files declaring jobs (strata.job). Complete YAML "
            "files (cluster and jobs) are validated one by one; parts of one scenario are merged when no file is "
            "complete on its own, or with --merge. With Python files, all the files are one run, as `strata run` "
            "takes them."
        ),
    ],
    engine: Annotated[
        str | None,
        typer.Option(help="spark or sim: what that engine cannot run is an error (exit 2), not a note."),
    ] = None,
    merge: Annotated[bool, typer.Option("--merge", help="Merge all files into one scenario.")] = False,
) -> None:
    """Check spec files and Python jobs files (no Spark is started); per job, whether it runs on Spark, in the
    simulator, or both (and why not); print a summary, or every problem with its location (exit 2)."""
    from strata.model.spec import group_files
    from strata.model.user import split_files

    if engine is not None and engine not in ENGINES:
        errors.print(f"[bold red]error[/] --engine: expected spark or sim; found {engine!r}")
        raise typer.Exit(code=2)
    yaml_files, python_files = split_files(spec)
    if python_files:
        if _validate_run(list(yaml_files), list(python_files), engine):
            raise typer.Exit(code=2)
        return
    groups, note = group_files(spec, merge)
    if note:
        console.print(note, highlight=False)
    failed = False
    for files in groups:
        try:
            scenario = load_scenario(*files)
        except SpecError as err:
            fail(err)
            failed = True
            continue
        failed |= _validate_one(scenario, files, engine)
    if failed:
        raise typer.Exit(code=2)


def _validate_run(yaml_files: list[Path], python_files: list[Path], engine: str | None) -> bool:
    """Python jobs files (with any YAML files) as `strata run` loads them (:func:`strata.model.user.load_python_run`),
    without Spark: each file runs once, its declarations are checked; True when that fails."""
    from strata.model.user import SessionNeeded, load_python_run

    if len(yaml_files) + len(python_files) > 1:
        console.print(f"{len(yaml_files) + len(python_files)} files validated as one run, as `strata run` takes them")
    try:
        scenario = load_python_run(python_files, yaml_files, python_files[0].stem)
    except SessionNeeded as err:  # loads under `strata run`, which has the session: not this file's mistake
        for p in err.problems:
            errors.print(
                f"[yellow]warning[/] not validated without Spark: {p}; `strata run` checks it (or make it inside a "
                "template, as examples/platform/jobs.py does, and validate again)",
                highlight=False,
                soft_wrap=True,
            )
        return False
    except SpecError as err:
        fail(err)
        return True
    return _validate_one(scenario, yaml_files, engine, python_files)


def _python_refusals(scenario: Scenario, engine: str | None) -> list:
    """With ``--engine sim``, each Python job located at its declaration: the simulator runs what YAML operators
    describe, not a user's query."""
    from strata.model import Located

    refused = []
    for job in scenario.jobs if engine == "sim" else ():
        if job.declared is not None:
            file, _, line = job.declared.origin.rpartition(":")
            refused.append(
                Located(
                    file,
                    int(line),
                    (),
                    f"job {job.id!r}: a job the simulator can run (its operators in a YAML spec)",
                    "a Python query (it runs on Spark only)",
                )
            )
    return refused


def _engine_problems(scenario: Scenario, files: list[Path]) -> dict[str, list]:
    """What each engine refuses, as located problems: Spark's checks are the ones `strata run` makes
    (:func:`strata.spark.pipelines.check_template`) plus an SQL check that needs no session; the
    simulator needs its trace files. Python jobs are Spark's to analyse when it builds them."""
    from strata.model import Problem, locate_problems
    from strata.model.job import OperatorKind
    from strata.spark.pipelines import check_template

    base = files[0].parent if files else Path()
    spark: list[Problem] = []
    sim: list[Problem] = []
    for j, job in enumerate(scenario.jobs):
        if job.declared is not None:
            continue
        for t, tpl in enumerate(job.templates):
            here = ("jobs", j, "templates", t)
            spark.extend(check_template(job, tpl, here))
            for i, op in enumerate(tpl.operators):
                at = (*here, "operators", i)
                if op.kind is OperatorKind.FILTER and op.predicate:
                    spark.extend(Problem((*at, "predicate"), exp, found) for exp, found in _sql_problems(op.predicate))
                for k, text in enumerate(op.expressions or []):
                    spark.extend(Problem((*at, "expressions", k), exp, found) for exp, found in _sql_problems(text))
                arrivals = op.source.arrivals if op.kind is OperatorKind.SOURCE else None
                if arrivals is not None and arrivals.process == "trace":
                    path = Path(arrivals.path)
                    if not (path if path.is_absolute() else base / path).is_file():
                        sim.append(Problem((*at, "source", "arrivals", "path"), "an existing trace file", repr(path)))
    return {name: (locate_problems(files, ps).problems if ps else []) for name, ps in (("spark", spark), ("sim", sim))}


_SQL_EXTRA = {  # SQL functions with no pyspark.sql.functions namesake
    "if",
    "ifnull",
    "nvl",
    "nvl2",
    "nullif",
    "coalesce",
    "cast",
    "try_cast",
    "case",
    "in",
    "not",
    "and",
    "or",
    "exists",
    "interval",
    "array",
    "map",
    "struct",
    "named_struct",
    "int",
    "double",
    "float",
    "string",
    "bigint",
    "boolean",
    "decimal",
    "date",
    "timestamp",
    "mod",
    "div",
    "power",
    "pow",
    "rand",
    "randn",
    "uuid",
    "left",
    "right",
    "any",
    "every",
    "some",
    "count_if",
    "typeof",
    "positive",
    "negative",
    "sign",
    "ln",
    "rlike",
    "like",
}


def _sql_problems(text: str) -> list[tuple[str, str]]:
    """Spark SQL mistakes visible without a session: unbalanced brackets or quotes, an expression
    ending in an operator, a call to a function Spark does not have."""
    import re

    out = []
    depth, quote = 0, None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                break
    if quote or depth:
        out.append(("a Spark SQL expression with balanced brackets and quotes", repr(text)))
    bare = re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", "''", text).strip()
    if re.search(r"([-+*/%<>=!&|^~]|\b(and|or|not)\b)$", bare, re.IGNORECASE) or re.search(r"[<>=!]{3,}", bare):
        out.append(("a complete Spark SQL expression", repr(text)))
    try:
        from pyspark.sql import functions as sql_functions
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return out
    for name in re.findall(r"\b([A-Za-z_][A-Za-z_0-9]*)\s*\(", bare):
        if name.lower() not in _SQL_EXTRA and not hasattr(sql_functions, name.lower()):
            out.append(("functions Spark SQL knows", f"unknown function {name!r} in {text!r}"))
    return out


def _unreproducible(scenario: Scenario, files: list[Path]) -> list:
    """Located warnings for SQL that no replay or recomputation reproduces (:mod:`strata.spark.replay`)."""
    from strata.model import Problem, locate_problems
    from strata.spark.replay import sql_calls

    found = []
    for j, job in enumerate(scenario.jobs):
        for t, tpl in enumerate(job.templates):
            for i, op in enumerate(tpl.operators):
                at = ("jobs", j, "templates", t, "operators", i)
                texts = [(("predicate",), op.predicate)] if op.predicate else []
                texts += [(("expressions", k), text) for k, text in enumerate(op.expressions or [])]
                for where, text in texts:
                    if calls := sql_calls(text):
                        found.append(
                            Problem(
                                (*at, *where),
                                "a deterministic expression (exactly once holds only if a replay writes the same "
                                "rows; e.g. pmod(id, 10) = 0 to sample)",
                                f"{', '.join(c + '()' for c in calls)} in {text!r}",
                            )
                        )
    return locate_problems(files, found).problems if found else []


def _validate_one(scenario: Scenario, files: list[Path], engine: str | None, python_files: Sequence[Path] = ()) -> bool:
    """The summary of one valid scenario (its YAML ``files``; its Python jobs from ``python_files``) with each job's
    engines; True when ``engine``'s refusals fail it."""
    refused = _engine_problems(scenario, files)
    refused["sim"] += _python_refusals(scenario, engine)
    by_job: dict[str, dict[str, int]] = {}
    ids = _job_ids(scenario, files)
    for name, problems in refused.items():
        for p in problems:
            if len(p.path) > 1 and p.path[0] == "jobs" and isinstance(p.path[1], int):
                job = ids.get((p.file, p.path[1]), "?")
                by_job.setdefault(job, {}).setdefault(name, 0)
                by_job[job][name] += 1
    title = ", ".join(str(f) for f in [*files, *python_files])
    table = Table(title=f"{scenario.name} ({title}): valid", show_lines=False)
    for col in ("job", "rank", "required", "templates", "PEs (first)", "target latency s", "runs on"):
        table.add_column(col)
    for job in scenario.jobs:
        no = by_job.get(job.id, {})
        engines = [e for e in ENGINES if e not in no]
        runs = " and ".join("Spark" if e == "spark" else "simulator" for e in engines) or "neither"
        if job.declared is not None:
            runs = f"Spark only (Python query, {Path(job.declared.origin).name})"
        elif no:
            runs += "; not " + ", ".join(
                f"{'Spark' if e == 'spark' else 'simulator'} ({n} problem{'s' if n > 1 else ''} below)"
                for e, n in no.items()
            )
        table.add_row(
            job.id,
            str(job.rank),
            "yes" if job.required else "",
            str(len(job.templates)),
            str(len(job.templates[0].operators)),
            f"{job.target_latency_s:g}",
            runs,
        )
    console.print(table)
    cl = scenario.cluster
    console.print(
        f"cluster: {len(cl.all_nodes)} nodes, {cl.total_cores:g} cores, "
        f"{cl.total_memory / 2**30:.1f} GiB{'' if files else ' (this machine: no YAML spec)'}; "
        f"{len(scenario.jobs)} jobs"
    )
    if python_jobs := sum(job.declared is not None for job in scenario.jobs):
        console.print(
            f"{python_jobs} Python job(s): each query is built and analysed by Spark when it runs (`strata run`), "
            "not here; Spark's analysis errors and expressions no replay reproduces (not verifiable on Spark) are "
            "reported then",
            highlight=False,
        )
    for name, problems in refused.items():
        is_error = engine == name
        for p in problems:
            label = "[bold red]error[/]" if is_error else "[yellow]note[/]"
            where = "Spark (strata run)" if name == "spark" else "the simulator"
            errors.print(f"{label} {where}: {p}", highlight=False, soft_wrap=True)
    for p in _unreproducible(scenario, files):
        errors.print(f"[yellow]warning[/] not verifiable on Spark: {p}", highlight=False, soft_wrap=True)
    return bool(engine and refused.get(engine))


def _job_ids(scenario: Scenario, files: list[Path]) -> dict[tuple[str, int], str]:
    """(file, index in its jobs list) → the job id in the merged scenario."""
    from strata.model.spec import _read

    out, offset = {}, 0
    for f in files:
        n = len(_read(f).data.get("jobs") or [])
        out.update({(str(f), i): scenario.jobs[offset + i].id for i in range(n)})
        offset += n
    return out


@app.command()
def schema() -> None:
    """Print the JSON Schema of scenario spec files."""
    typer.echo(json.dumps(scenario_schema(), indent=2))


@app.command()
def generate(
    kind: Annotated[str, typer.Argument(help="lsd, dac, multi-tenant or skewed")],
    seed: Annotated[int, typer.Option(help="Random seed; the same seed gives the same spec.")] = 1,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write here instead of stdout.")] = None,
    param: Annotated[list[str] | None, typer.Option("--set", help="Generator knob, e.g. --set nodes=30")] = None,
) -> None:
    """Write a generated scenario spec (seeded, reproducible)."""
    from strata.generators import GENERATORS

    if kind not in GENERATORS:
        errors.print(f"[bold red]error[/] generate: expected one of {', '.join(GENERATORS)}; found {kind!r}")
        raise typer.Exit(code=2)
    writable(out, "--out")
    knobs = {}
    for item in param or []:
        key, sep, value = item.partition("=")
        if not sep:
            errors.print(f"[bold red]error[/] --set: expected KNOB=VALUE; found {item!r}")
            raise typer.Exit(code=2)
        knobs[key] = yaml.safe_load(value)
    try:
        document = GENERATORS[kind](seed=seed, **knobs)
    except TypeError as e:
        errors.print(f"[bold red]error[/] --set: {e}")
        raise typer.Exit(code=2) from None
    Scenario.model_validate(document)
    text = yaml.safe_dump(document, sort_keys=False, width=120)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        console.print(f"wrote {out} ({len(document['jobs'])} jobs)")


RunSpecArg = Annotated[
    list[Path] | None,
    typer.Argument(
        help="Scenario spec file(s) (YAML; several are merged) and/or Python files declaring jobs (strata.job); "
        "without YAML, the cluster is this machine."
    ),
]
ConfOption = Annotated[
    list[str] | None,
    typer.Option(
        "--conf",
        help="A Spark setting KEY=VALUE (repeatable), as spark-submit --conf takes it; over --properties-file, "
        "over $SPARK_CONF_DIR/spark-defaults.conf, over Strata's defaults (Strata says which few it keeps).",
    ),
]
PropertiesOption = Annotated[
    Path | None,
    typer.Option(
        "--properties-file", help="A Spark properties file (spark-defaults.conf format), as spark-submit takes it."
    ),
]
VerboseOption = Annotated[
    bool,
    typer.Option(
        "--verbose", help="Spark's own log lines on the terminal too (always in the run directory's spark.log)."
    ),
]


def spark_settings(conf: list[str] | None, properties_file: Path | None, verbose: bool) -> SparkSettings:
    """The user's Spark settings (spark-submit's precedence), or exit 2 naming the bad option or file; one note
    per setting Strata keeps its own value of."""
    from strata.spark.conf import ConfError, user_conf
    from strata.spark.session import strata_owned

    try:
        merged = user_conf(conf or (), properties_file)
    except ConfError as err:
        errors.print(f"[bold red]error[/] {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None
    for line in strata_owned(merged):
        errors.print(f"[yellow]note[/] {line}", highlight=False, soft_wrap=True)
    return SparkSettings(tuple(merged.items()), verbose)


@app.command()
def run(
    spec: RunSpecArg = None,
    duration: Annotated[float, typer.Option(help="Seconds to run before stopping cleanly.")] = 120.0,
    master: Annotated[
        str | None,
        typer.Option(help="Spark master URL (default: --conf spark.master, spark-submit's, else embedded local[*])."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Run directory: sinks, checkpoints, state, metrics, Spark's log (default runs/latest; a jobs "
            "program run as `python jobs.py`: runs/<program>)."
        ),
    ] = None,
    sink: Annotated[str, typer.Option(help="parquet (idempotent per batch), memory or console.")] = "parquet",
    control: Annotated[
        bool,
        typer.Option(
            "--control/--no-control",
            help="Strata in control (admission, templates, pools, rate caps, gate, key-group moves, learning); "
            "--no-control: plain Spark for comparison.",
        ),
    ] = True,
    fresh: Annotated[
        list[str] | None,
        typer.Option(
            help="Start this job afresh (repeatable; 'all' for every job) when OUT holds an earlier run of it: "
            "its old checkpoint and outputs are kept aside, never mixed."
        ),
    ] = None,
    jobs: Annotated[
        list[str] | None,
        typer.Option(
            "--jobs", help="Run only this job (repeatable); e.g. a latency-critical job in an application of its own."
        ),
    ] = None,
    skip_jobs: Annotated[list[str] | None, typer.Option("--skip-jobs", help="Leave this job out (repeatable).")] = None,
    cells: Annotated[
        int | None,
        typer.Option(
            help="At most this many Spark applications (cells, each with a CPU share the OS enforces) for the "
            "jobs; L0 places the jobs onto them (default: what the machine fits). 1: every job in one "
            'application, as plain Spark runs them (docs/spark.md, "Cells").',
        ),
    ] = None,
    dedicate: Annotated[
        list[str] | None,
        typer.Option(
            help="Pin this job (repeatable) to a cell (Spark application) of its own; L0 places the others "
            '(docs/spark.md, "Cells").'
        ),
    ] = None,
    meta: Annotated[
        str,
        typer.Option(
            help="The meta level: off (the levels' own composition, edf/aggressive), adaptive (it chooses the "
            "gate's strategy and L1's preset every window, switching only on evidence beyond its measured noise), "
            'or a composition dispatch/balancing run fixed (docs/hierarchy.md, "The meta level on Spark").',
        ),
    ] = "off",
    conf: ConfOption = None,
    properties_file: PropertiesOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Run every job on Spark Structured Streaming under Strata's control loop, with a live view; metrics to OUT.

    A jobs program calling strata.main() runs this same command on the jobs it declared: python jobs.py
    --duration 60, or under spark-submit."""
    from strata.control.controller import HierarchyConfig
    from strata.control.meta import OFF, with_meta
    from strata.model.user import declared_here
    from strata.runners.live import RunRequest, run_live

    declared = declared_here()  # jobs declared by this process's own program (strata.main()), else none
    program = Path(sys.argv[0])
    files = list(spec or ())
    if not files and not declared:
        errors.print("[bold red]error[/] strata run: expected spec or jobs files (YAML, .py); found none")
        raise typer.Exit(code=2)
    if sink not in ("parquet", "memory", "console"):
        errors.print(f"[bold red]error[/] --sink: expected parquet, memory or console; found {sink!r}")
        raise typer.Exit(code=2)
    if duration <= 0:
        errors.print(f"[bold red]error[/] --duration: expected seconds > 0; found {duration:g}")
        raise typer.Exit(code=2)
    if dedicate and jobs:
        errors.print("[bold red]error[/] --dedicate: expected no --jobs with it; found --jobs")
        raise typer.Exit(code=2)
    if cells is not None and cells < 1:
        errors.print(f"[bold red]error[/] --cells: expected a number of applications ≥ 1; found {cells}")
        raise typer.Exit(code=2)
    if dedicate and (cells == 1 or not control):
        given = "--cells 1" if cells == 1 else "--no-control"
        errors.print(f"[bold red]error[/] --dedicate: expected cells (a job pinned to its own); found {given}")
        raise typer.Exit(code=2)
    try:
        with_meta(HierarchyConfig(), meta)
    except ValueError as err:
        errors.print(f"[bold red]error[/] --{err}")
        raise typer.Exit(code=2) from None
    if meta != OFF and not control:
        errors.print(f"[bold red]error[/] --meta: expected Strata in control; found --no-control with {meta!r}")
        raise typer.Exit(code=2)
    settings = spark_settings(conf, properties_file, verbose)
    out = out or (Path("runs") / (program.stem or "jobs") if declared else Path("runs/latest"))
    fleet = control and cells != 1  # plain Spark (--no-control) is one application, as a team runs it
    if fleet and declared:
        # the other cells are other processes: they declare the jobs by running the program's file
        if program.suffix != ".py" or not program.is_file():
            errors.print(
                f"[bold red]error[/] strata run: expected a jobs program file to start cells from; found "
                f"{program} (--cells 1 runs the jobs declared here in one application)"
            )
            raise typer.Exit(code=2)
        files, declared = [program, *files], []
    try:
        request = RunRequest(
            tuple(files),
            duration,
            master,
            out,
            sink,
            control,
            tuple(fresh or ()),
            tuple(jobs or ()),
            tuple(skip_jobs or ()),
            tuple(dedicate or ()),
            settings,
            meta,
        )
        if fleet:
            from strata.runners.fleet import run_fleet

            code = run_fleet(request, console, errors, cells)
        else:
            code = run_live(request, console, errors, declared)
    except SpecError as err:
        raise fail(err) from None
    raise typer.Exit(code=code)


HEADROOM_HELP = (
    "Cpu each PE holds above what its planned rate needs, as a share of that need (Options.headroom, ≥ 0; "
    "0.25: utilisation 0.8 at the planned rate). Default 0: SODA's fluid plan."
)


def _check_headroom(headroom: float) -> None:
    """``--headroom``: a finite share ≥ 0, else exit 2."""
    if not 0 <= headroom < math.inf:
        errors.print(f"[bold red]error[/] --headroom: expected a share ≥ 0 (e.g. 0.25); found {headroom:g}")
        raise typer.Exit(code=2)


@app.command("plan")
def plan_command(
    spec: SpecArg,
    budget: Annotated[str, typer.Option(help="Time for the whole epoch, e.g. 30s, 500ms, 2m.")] = "30s",
    previous: Annotated[
        Path | None, typer.Option(help="The previous epoch's plan (JSON) to plan incrementally.")
    ] = None,
    out: Annotated[Path | None, typer.Option("--json", help="Write the full plan as JSON here.")] = None,
    batch: Annotated[
        int,
        typer.Option(
            min=1,
            help="Records per source message of the engine that will run the plan (`strata simulate --batch`; "
            "1 for Spark): windows emit per key seen, so their projected output depends on it.",
        ),
    ] = 1,
    headroom: Annotated[float, typer.Option(help=HEADROOM_HELP)] = 0.0,
) -> None:
    """Run SODA's four phases (admission, templates, cpu, placement) and summarise the plan."""
    from strata.plan import Options, Plan, PlanError, plan
    from strata.plan.summary import parse_budget, tables

    scenario = load(spec)
    writable(out, "--json")
    _check_headroom(headroom)
    try:
        seconds = parse_budget(budget)
        before = Plan.load(previous) if previous is not None else None
        with console.status(
            f"planning {len(scenario.jobs)} jobs: admission, templates, cpu, placement (budget {seconds:g} s)"
        ):
            result = plan(scenario, before, Options(budget_s=seconds, batch=batch, headroom=headroom))
    except (ValueError, PlanError) as err:
        for problem in getattr(err, "problems", [str(err)]):
            errors.print(f"[bold red]error[/] {problem}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None
    for table in tables(result):
        console.print(table)
    if out is not None:
        result.to_json(out)
        console.print(f"wrote {out}")


@app.command()
def simulate(
    spec: SpecArg,
    duration: Annotated[float, typer.Option(help="Simulated seconds.")] = 600.0,
    seed: Annotated[int, typer.Option(help="Random seed; the same seed gives the same metrics.")] = 1,
    out: Annotated[Path | None, typer.Option(help="Write the metrics tables (Parquet) and summary.json here.")] = None,
    batch: Annotated[int, typer.Option(help="Records per source message (1 = exact; more = faster, coarser).")] = 1,
    plan: Annotated[
        Path | None,
        typer.Option(
            help="Run a plan from 'strata plan --json': its admitted jobs, templates and placement, with the "
            "plan's traffic model (locality-first routing of unkeyed streams, key groups apportioned by cpu: "
            "SimOptions(routing='local')); each instance runs its planned cpu share first and idle cores after, PEs "
            "it gives no cpu are not run, and a source it reads below its offer is capped at the plan's rate. Prints "
            "planned and realised stream affinity and importance side by side."
        ),
    ] = None,
    fail: Annotated[
        list[str] | None,
        typer.Option(help="Node failure NODE@DOWN[:UP] in simulated seconds (repeatable); without UP it stays down."),
    ] = None,
    recovery: Annotated[
        bool,
        typer.Option(help="Upstream backup, checkpoints and replay: a failed node's instances restart elsewhere."),
    ] = False,
    checkpoint_interval: Annotated[float, typer.Option(help="Seconds between state checkpoints (--recovery).")] = 5.0,
    control: Annotated[
        bool,
        typer.Option(
            "--control/--no-control",
            help="Run Strata's controller (plan, pacing, balancing, dispatch, learning); --no-control: plain FIFO "
            "dispatch on round-robin placement (or --plan's).",
        ),
    ] = True,
    window: Annotated[float, typer.Option(help="Control window in simulated seconds.")] = 5.0,
    epoch: Annotated[float, typer.Option(help="Seconds between full SODA epochs.")] = 60.0,
    pacing: Annotated[
        str,
        typer.Option(help="L0 rate caps at the sources: off (default), shares (work conserving) or plan (SODA's)."),
    ] = "off",
    headroom: Annotated[
        float, typer.Option(help=HEADROOM_HELP + " For the controller's plans; a --plan keeps its own.")
    ] = 0.0,
) -> None:
    """Simulate the scenario on its cluster message by message, under Strata's control loop (or --no-control)."""
    from strata.control.controller import HierarchyConfig
    from strata.plan import PlanError
    from strata.runners.sim_loop import simulate as simulate_scenario
    from strata.sim.assignment import plan_file
    from strata.sim.options import SimOptions
    from strata.sim.terminal import calibrate, duration_text, progress_bar, summary_tables

    scenario = load(spec)
    if not 0 < duration < 1e15:
        errors.print(f"[bold red]error[/] --duration: expected seconds > 0 (and finite); found {duration:g}")
        raise typer.Exit(code=2)
    writable(out, "--out", directory=True)
    _check_headroom(headroom)
    if headroom and plan is not None:
        errors.print(
            "[bold red]error[/] --headroom: a plan given with --plan runs as it was made (plan it with "
            "'strata plan --headroom'); --headroom sets the controller's plans"
        )
        raise typer.Exit(code=2)
    try:
        templates, placement, sources = plan_file(plan) if plan is not None else (None, None, {})
        base = SimOptions(seed=seed, batch=batch, base_dir=spec[0].parent)
        cal = calibrate(scenario, base, max_sim_s=duration / 4)
        eta = cal.estimate(duration)
        console.print(
            f"calibration: {cal.sim_s:.3g} simulated s in {cal.wall_s:.1f} s ({cal.events_per_s:,.0f} events/s, "
            f"no controller): {duration:g} simulated s will take about {duration_text(eta)}",
            highlight=False,
        )
        if eta > 3600:
            console.print(
                f"[yellow]note[/] this run will take about {duration_text(eta)}; a shorter --duration or a larger "
                "--batch (records per message) is faster",
                highlight=False,
            )
        config = HierarchyConfig(window_s=window, epoch_s=epoch, pacing=pacing)
        config = replace(config, plan=replace(config.plan, headroom=headroom))
        decided: list[int] = [0]

        def count(obs, decisions) -> None:
            decided[0] += 0 if decisions.empty() else 1

        with progress_bar(console, duration, cal.events_per_s) as tick:
            engine, controller = simulate_scenario(
                scenario,
                duration,
                control=control and plan is None,
                config=config,
                seed=seed,
                templates=templates,
                placement=placement,
                progress=tick,
                on_step=count,
                options=replace(
                    base,
                    failures=[_failure(text) for text in fail or []],
                    recovery="replay" if recovery else None,
                    checkpoint_interval=checkpoint_interval,
                    **(_as_planned(scenario, templates, sources) if plan is not None else {}),
                ),
            )
    except (ValueError, PlanError) as err:
        errors.print(f"[bold red]error[/] {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None
    sim = engine.sim
    for table in summary_tables(sim):
        console.print(table)
    if plan is not None:
        _plan_vs_realised(plan, sim, duration)
    log = getattr(controller, "log", None)
    if log is not None:
        replans = sum(1 for entry in log if entry.replanned)
        moves = sum(entry.key_group_moves for entry in log)
        placed = sum(entry.placement_moves for entry in log)
        console.print(
            f"controller: {len(log)} steps, {replans} (re)plans, {placed} instance moves, {moves} key-group moves, "
            f"{decided[0]} steps changed something; dispatch {controller.dispatch}, "
            f"admitted {', '.join(sorted(controller.plan.templates)) or 'none'}"
        )
    elif plan is not None:
        console.print(
            "no controller (--plan): FIFO dispatch on the plan's placement, each instance's cpu share first and idle "
            "cores after; PEs given no cpu not run; sources read at most at the plan's rates"
        )
    else:
        console.print("no controller (--no-control): FIFO dispatch, the placement given")
    if out is not None:
        sim.metrics.write(out)
        if log is not None:
            from dataclasses import asdict

            import pandas as pd

            pd.DataFrame([asdict(entry) for entry in log]).to_csv(Path(out) / "controller.csv", index=False)
        console.print(
            f"wrote {out}/ (latency, timeseries, importance, nodes, instances, imbalance, network, "
            "drops, migrations, conservation; summary.json" + ("; controller.csv)" if log is not None else ")")
        )


def _as_planned(scenario: Scenario, templates: dict[str, str], sources: dict[str, float]) -> dict[str, object]:
    """How ``strata simulate --plan`` runs a plan: its traffic model (``routing="local"``), each instance's cpu
    share first and any idle core of its node after (``enforce_shares`` with ``borrow_idle``), and each source the
    plan reads below what its spec offers capped at the plan's rate from the start (the plan's admission)."""
    from strata.model import joined_graph

    graph = joined_graph(scenario, templates)
    caps = {pe: r for pe, r in sources.items() if pe in graph and r < graph.nodes[pe]["op"].source.rate * (1 - 1e-9)}
    return {"routing": "local", "enforce_shares": True, "borrow_idle": True, "rate_limits": caps}


def _plan_vs_realised(path: Path, sim, duration: float) -> None:
    """The plan's projections next to what the simulation realised (``strata simulate --plan``)."""
    planned = json.loads(path.read_text())  # plan_file has read it: a valid plan, perhaps without projections
    warm = duration / 4
    realised_aff = sim.metrics.summary()["stream_affinity"]
    realised_imp = sim.metrics.mean_importance(warm)
    table = Table(title=f"plan vs simulation (routing=local; importance of the rates after {warm:g} s)")
    for col in ("", "planned", "realised", "realised / planned"):
        table.add_column(col, justify="right" if col else "left")
    for name, p, r in (
        ("stream affinity", planned.get("affinity"), realised_aff),
        ("importance", planned.get("importance"), realised_imp),
    ):
        known = isinstance(p, int | float)
        table.add_row(name, f"{p:.4g}" if known else "-", f"{r:.4g}", f"{r / p:.3f}" if known and p else "-")
    console.print(table)


def _failure(text: str) -> tuple[str, float, float | None]:
    """``NODE@DOWN[:UP]`` → the simulator's ``(node, down_at, up_at)``."""
    node, _, times = text.partition("@")
    down, _, up = times.partition(":")
    try:
        down_at, up_at = float(down), float(up) if up else None
    except ValueError:
        raise ValueError(f"--fail: expected NODE@DOWN[:UP] in seconds; found {text!r}") from None
    if not node or down_at < 0 or (up_at is not None and up_at <= down_at):
        raise ValueError(f"--fail: expected NODE@DOWN[:UP] with 0 <= DOWN < UP; found {text!r}")
    return node, down_at, up_at


@app.command()
def produce(
    out: Annotated[Path, typer.Argument(help="Directory to fill: OUT/events and OUT/clicks.")],
    duration: Annotated[float, typer.Option(help="Seconds of records to write, in real time.")] = 120.0,
    rate: Annotated[float, typer.Option(help="Mean records/s (bursts at --burst x this).")] = 300.0,
    burst: Annotated[float, typer.Option(help="Burst factor: --on s of every --period s at this x rate.")] = 3.0,
    period: Annotated[float, typer.Option(help="Seconds between bursts.")] = 20.0,
    on: Annotated[float, typer.Option(help="Seconds a burst lasts.")] = 5.0,
    keys: Annotated[int, typer.Option(help="Distinct keys (Zipf-distributed).")] = 200,
    zipf: Annotated[float, typer.Option(help="Zipf exponent of the keys (0: uniform).")] = 1.1,
    seed: Annotated[int, typer.Option(help="Seed: the same seed writes the same records.")] = 5,
) -> None:
    """Write JSON files into OUT/events and OUT/clicks at seeded, bursty rates (the platform example's input)."""
    import time

    from pydantic import ValidationError

    from strata.model import SourceSpec
    from strata.runners.producer import platform_input

    writable(out, "OUT", directory=True)
    try:
        arrivals = {"process": "onoff", "period_s": period, "on_s": on, "burst_factor": burst}
        source = SourceSpec(rate=rate, arrivals=arrivals, keys={"count": keys, "zipf_s": zipf}, seed=seed)
    except ValidationError as err:
        first = err.errors()[0]
        option = {"rate": "--rate", "keys": "--keys/--zipf", "arrivals": "--burst/--period/--on"}.get(
            str(first["loc"][0]), str(first["loc"][0])
        )
        errors.print(f"[bold red]error[/] {option}: expected {first['msg'].lower()}; found {first.get('input')!r}")
        raise typer.Exit(code=2) from None
    producers = platform_input(out, source, time.time(), duration)
    for p in producers:
        p.start()
    console.print(f"writing {out}/events and {out}/clicks for {duration:g} s (Ctrl-C stops)")
    try:
        for p in producers:
            p.join()
    except KeyboardInterrupt:
        for p in producers:
            p.stop()
    console.print(f"wrote {producers[0].written:,} events in {producers[0].files} files")


@app.command()
def demo(
    spec: Annotated[
        Path | None, typer.Argument(help="Scenario spec (YAML); default: the packaged demo.yaml (strata examples).")
    ] = None,
    duration: Annotated[float, typer.Option(help="Seconds of input measured per mode.")] = 30.0,
    seed: Annotated[int, typer.Option(help="Added to every source's seed: same seed, same input.")] = 0,
    out: Annotated[Path, typer.Option(help="Run directory: sinks, state, metrics, report.html.")] = Path("runs/demo"),
    warmup: Annotated[bool, typer.Option(help="Warm the Python workers up before the measured runs.")] = True,
    conf: ConfOption = None,
    properties_file: PropertiesOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Plain Spark (FIFO; FAIR pools by hand; critical jobs in their own application) vs `strata run` (Strata's
    cells), same seeded input: side-by-side table and an HTML report."""
    from strata.model import locate_problems
    from strata.report import write_report
    from strata.report.console import side_by_side, verification_line
    from strata.report.tables import verdict
    from strata.runners.demo import DemoConfig, run_demo
    from strata.runners.fleet import CellLost
    from strata.spark.java import JavaError
    from strata.spark.pipelines import PipelineProblems

    if duration <= 0:
        errors.print(f"[bold red]error[/] --duration: expected seconds > 0; found {duration:g}")
        raise typer.Exit(code=2)
    writable(out, "--out", directory=True)
    settings = spark_settings(conf, properties_file, verbose)
    if spec is None:
        spec = _example("demo")
    scenario = load([spec])
    console.print(
        f"[bold]strata demo[/] {scenario.name}: {len(scenario.jobs)} jobs, "
        f"{scenario.cluster.total_cores:g} cores; plain Spark (FIFO, FAIR by hand, critical jobs in their own "
        f"application), then Strata's cells as `strata run` makes them ({duration:g} s each)"
    )

    def tick(mode: str, obs, decisions, row: dict) -> None:
        p99 = "  ".join(f"{k[4:]} p99 {v:.1f}s" for k, v in row.items() if k.startswith("p99:") and v is not None)
        console.print(f"  [dim]{mode:8s} t={row['t']:5.1f}s[/]  {p99}", highlight=False)

    try:
        result = run_demo(
            scenario,
            out,
            DemoConfig(duration_s=duration, seed=seed, warmup=warmup),
            on_step=tick,
            on_phase=lambda text: console.print(f"[cyan]▸[/] {text}"),
            spark_settings=settings,
            console=console,
            errors=errors,
        )
    except PipelineProblems as err:  # an expression Spark cannot analyse, found when its query is built
        raise fail(locate_problems([spec], err.problems)) from None
    except SpecError as err:  # the same, found by `strata run` analysing the spec the demo wrote for its cells
        raise fail(err) from None
    except (ValueError, JavaError) as err:  # JavaError: Java missing or too old, with the install hint
        errors.print(f"[bold red]error[/] {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None
    except CellLost as err:  # an application of the hand deployment ended or stopped answering
        errors.print(f"[bold red]error[/] {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=1) from None
    console.print(
        side_by_side(
            result.summary,
            result.decisions,
            f"{scenario.name}: plain Spark (FIFO; FAIR pools by hand; critical jobs in their own application) vs "
            "Strata's cells",
        )
    )
    console.print(verification_line(result.checks))
    console.print(
        f"report: {write_report(out)}  (timings: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in result.timings.items())
        + ")"
    )
    raise typer.Exit(code=1 if verdict(result.checks).bad else 0)


def _examples() -> dict[str, Path]:
    """The example specs shipped in the package (strata/examples/*.yaml), by name."""
    from importlib.resources import files

    root = Path(str(files("strata") / "examples"))
    return {p.stem: p for p in sorted(root.glob("*.yaml"))}


def _example(name: str) -> Path:
    found = _examples()
    if name.removesuffix(".yaml") not in found:
        errors.print(f"[bold red]error[/] example: expected one of {', '.join(found)}; found {name!r}")
        raise typer.Exit(code=2)
    return found[name.removesuffix(".yaml")]


@app.command()
def examples(
    name: Annotated[str | None, typer.Argument(help="An example to print or copy (e.g. demo).")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Copy the example here.")] = None,
) -> None:
    """List the example specs shipped with strata; with NAME print one (or copy it with -o FILE)."""
    if name is None:
        table = Table(title="examples (strata examples NAME -o FILE copies one out)")
        for col in ("name", "description", "path"):
            table.add_column(col)
        for stem, path in _examples().items():
            data = yaml.safe_load(path.read_text()) or {}
            table.add_row(stem, str(data.get("description", "")), str(path))
        console.print(table)
        return
    path = _example(name)
    if out is None:
        typer.echo(path.read_text(), nl=False)
        return
    writable(out, "--out")
    out.write_text(path.read_text())
    console.print(f"wrote {out}: try `strata validate {out}` or `strata simulate {out} --duration 30`")


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="A run directory written by `strata demo`.")]) -> None:
    """Rebuild RUN_DIR/report.html (self-contained: opens in a browser with no server) from its metrics."""
    from strata.report import write_report
    from strata.report.tables import ReportError

    try:
        path = write_report(run_dir)
    except ReportError as err:
        errors.print(f"[bold red]error[/] {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None
    console.print(f"wrote {path}")

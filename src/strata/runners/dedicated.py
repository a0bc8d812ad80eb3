"""``strata run --dedicate JOB``: some jobs in a Spark application of their own, the others here under ``nice``.

Inside one Spark application the gate and the FAIR pools decide which batches run, but not the driver's own work
for each query (listing, planning, offset and commit logs run on the query's thread, outside any pool), and Spark
cannot preempt a task (docs/spark.md, "A dedicated application"). The dedicated jobs therefore run in a child
``strata run --jobs ...`` at this process's priority, started before this process lowers its own with
``os.nice`` — and so before its JVM starts, which inherits it: the kernel's scheduler then gives the dedicated
application's JVM and Python workers the cores whenever it has work, and this application everything else.
Each application runs its own control loop; the child's metrics and report go to ``OUT/dedicated``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from strata.runners.live import RunRequest, run_live

BULK_NICE = 10  # CFS weight 110 against 1024 at nice 0: a contended core goes ~90% to the dedicated application
DEDICATED = "dedicated"  # the child's run directory under OUT, and its log OUT/dedicated.log
GRACE_S = 120.0  # how long past its own end the child may take to drain and write its metrics


def run_dedicated(request: RunRequest, console: Console, errors: Console) -> int:
    """Run ``request.dedicated`` in a child application and the other jobs here at nice +:data:`BULK_NICE`; the
    worse of the two exit codes. The child gets SIGTERM (it drains as on Ctrl-C) if this run ends early."""
    out = Path(request.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = request.dedicated
    child_request = replace(request, out=out / DEDICATED, only=jobs, skip=(), dedicated=())
    log = out / f"{DEDICATED}.log"
    with log.open("w") as sink_file:
        child = subprocess.Popen(
            [sys.executable, "-m", "strata", *child_request.argv()],
            stdin=subprocess.DEVNULL,
            stdout=sink_file,
            stderr=subprocess.STDOUT,
        )
    started = time.time()
    os.nice(BULK_NICE)
    console.print(
        f"[cyan]▸[/] {', '.join(jobs)}: a Spark application of its own (pid {child.pid}; {out / DEDICATED}, log "
        f"{log}); the other jobs here at nice +{BULK_NICE}",
        highlight=False,
    )
    try:
        code = run_live(request, console, errors)
    except BaseException:
        child.send_signal(signal.SIGTERM)
        _wait(child, GRACE_S)
        raise
    if time.time() < started + request.duration_s:  # stopped early (a signal, or no query could start): so is the child
        child.send_signal(signal.SIGTERM)
    child_code = _wait(child, max(0.0, started + request.duration_s - time.time()) + GRACE_S)
    if child_code:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        errors.print(f"[bold red]the dedicated application exited {child_code}[/]: see {log}", highlight=False)
        for line in tail:
            errors.print(f"  {line}", highlight=False, soft_wrap=True)
    else:
        console.print(f"the dedicated application ({', '.join(jobs)}) finished: report in {out / DEDICATED}")
    return max(code, child_code)


def _wait(child: subprocess.Popen, timeout_s: float) -> int:
    """The child's exit code; killed (exit 1) if it has not ended within ``timeout_s``."""
    try:
        return child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        return 1

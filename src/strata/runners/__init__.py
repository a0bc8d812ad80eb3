"""The applications that run the one control loop against an engine (DESIGN.md, "Layout").

``strata.control`` is the pure loop and the Controller; a *runner* is a program
that builds an engine, hands it and a controller to
:func:`strata.control.loop.run` and deals with the world around it: sessions,
console views, signals, child processes, run directories.

- :mod:`~strata.runners.spark_loop`: one scenario on Spark under the loop (``strata run --cells 1``, the demo's
  session modes);
- :mod:`~strata.runners.live`: ``strata run --cells 1``: one Spark application with its console view and resume;
- :mod:`~strata.runners.fleet`: ``strata run``: the jobs as cells (Spark applications with OS-enforced CPU
  shares, or on a standalone cluster their own cores: :mod:`~strata.runners.shares`) under one hierarchy;
  :mod:`~strata.runners.cell`: one cell;
- :mod:`~strata.runners.warmup`: every Spark application's queries warmed before its sources' epoch, and the
  epoch's lead from what the warm-up measured (the demo's session, every cell);
- :mod:`~strata.runners.sim_loop`: ``strata simulate``: the loop on the discrete-event simulator;
- :mod:`~strata.runners.demo`: ``strata demo``: plain Spark (FIFO, FAIR by hand, the hand deployment) vs Strata's
  cells on the same seeded input; :mod:`~strata.runners.dedicated`: the hand deployment (critical jobs in an
  application of their own) as a fleet of plain cells;
- :mod:`~strata.runners.producer`: seeded files for user queries to read (the platform example, benchmarks);
- :mod:`~strata.runners.autoflow`: AutoFlow's routing experiments on the simulator (benchmarks, tests).

Top of the stack (only :mod:`strata.cli` and :mod:`strata.api` sit above): a runner may use every package
below it; nothing below imports a runner.
"""

"""Experiment harnesses on top of the control loop: AutoFlow's experiments on the simulator.

Top of the stack with :mod:`strata.runners` (only :mod:`strata.cli` and
:mod:`strata.api` sit above): a harness may use every package below it;
nothing below imports a harness.
"""

"""Experiment harnesses on top of the control loop: the Spark demo's A/B run and AutoFlow's experiments.

Top of the stack (only :mod:`strata.cli` sits above): a harness may use every
package below it; nothing below imports a harness.
"""

"""A small builder for linear and mixed-integer programs, solved by HiGHS (highspy).

The planner's phases write their models through :class:`Program`: columns and
rows are appended as plain Python data, then passed to HiGHS in one call. The
same model can be re-solved with a row bound changed (warm-started), which is how
macroQ traces a component's importance curve over its cpu budget (SODA §4.1).

Note: OR-Tools and highspy each carry their own HiGHS; importing both into one
process fails on clashing symbols, so the planner uses highspy only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import highspy
import numpy as np

INF = highspy.kHighsInf


@dataclass(frozen=True)
class Solution:
    """What a solve returned: status name, objective (in the program's sense), values, row duals."""

    status: str  # "optimal", "time-limit" (with an incumbent), "infeasible", "failed"
    objective: float
    x: np.ndarray
    row_dual: np.ndarray
    mip_gap: float = 0.0

    @property
    def usable(self) -> bool:
        return self.status in ("optimal", "time-limit")


class Program:
    """Columns and rows of one model; ``maximize`` flips the objective sense."""

    def __init__(self, maximize: bool = True):
        self.maximize = maximize
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.cost: list[float] = []
        self.integer: list[bool] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []
        self._starts: list[int] = [0]
        self._index: list[int] = []
        self._value: list[float] = []
        self._highs: highspy.Highs | None = None

    @property
    def n_cols(self) -> int:
        return len(self.cost)

    @property
    def n_rows(self) -> int:
        return len(self.row_lower)

    def var(self, lower: float = 0.0, upper: float = INF, cost: float = 0.0, integer: bool = False) -> int:
        self.lower.append(lower)
        self.upper.append(upper)
        self.cost.append(cost)
        self.integer.append(integer)
        self._highs = None
        return len(self.cost) - 1

    def binary(self, cost: float = 0.0) -> int:
        return self.var(0.0, 1.0, cost, integer=True)

    def row(self, coefs: Mapping[int, float], lower: float = -INF, upper: float = INF) -> int:
        """Add lower ≤ Σ coef × x ≤ upper; returns the row index."""
        for col, coef in coefs.items():
            if coef:
                self._index.append(col)
                self._value.append(float(coef))
        self._starts.append(len(self._index))
        self.row_lower.append(lower)
        self.row_upper.append(upper)
        self._highs = None
        return len(self.row_lower) - 1

    def add_cost(self, col: int, cost: float) -> None:
        self.cost[col] += cost
        self._highs = None

    def _build(self, time_limit: float | None, mip_gap: float) -> highspy.Highs:
        lp = highspy.HighsLp()
        lp.num_col_ = self.n_cols
        lp.num_row_ = self.n_rows
        lp.col_cost_ = np.asarray(self.cost, dtype=float)
        lp.col_lower_ = np.asarray(self.lower, dtype=float)
        lp.col_upper_ = np.asarray(self.upper, dtype=float)
        lp.row_lower_ = np.asarray(self.row_lower, dtype=float)
        lp.row_upper_ = np.asarray(self.row_upper, dtype=float)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.num_col_ = self.n_cols
        lp.a_matrix_.num_row_ = self.n_rows
        lp.a_matrix_.start_ = np.asarray(self._starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.asarray(self._index, dtype=np.int32)
        lp.a_matrix_.value_ = np.asarray(self._value, dtype=float)
        lp.sense_ = highspy.ObjSense.kMaximize if self.maximize else highspy.ObjSense.kMinimize
        if any(self.integer):
            lp.integrality_ = [
                highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous for i in self.integer
            ]
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("random_seed", 0)
        h.setOptionValue("threads", 1)
        h.setOptionValue("mip_rel_gap", mip_gap)
        if time_limit is not None:
            h.setOptionValue("time_limit", max(1e-3, float(time_limit)))
        h.passModel(lp)
        return h

    def solve(
        self,
        time_limit: float | None = None,
        mip_gap: float = 1e-6,
        start: Mapping[int, float] | None = None,
        presolve: bool = True,
    ) -> Solution:
        """Solve (or re-solve after :meth:`set_row_bounds`, warm-started).

        ``start`` gives values of some columns (e.g. every binary) of a known feasible answer: a
        MIP start, which HiGHS completes and uses as its first incumbent. ``presolve=False`` turns
        HiGHS's presolve off (a cross-check: HiGHS 1.14's presolve has returned a worse MIP answer
        as optimal).
        """
        if self.n_cols == 0:
            return Solution("optimal", 0.0, np.zeros(0), np.zeros(self.n_rows))
        if self._highs is None:
            self._highs = self._build(time_limit, mip_gap)
        elif time_limit is not None:
            self._highs.setOptionValue("time_limit", max(1e-3, float(time_limit)))
        h = self._highs
        h.setOptionValue("presolve", "on" if presolve else "off")
        if start:
            cols = sorted(start)
            h.setSolution(
                len(cols), np.asarray(cols, dtype=np.int32), np.asarray([start[c] for c in cols], dtype=float)
            )
        h.run()
        status = h.getModelStatus()
        info = h.getInfo()
        sol = h.getSolution()
        has_value = bool(sol.value_valid) or info.primal_solution_status == 2
        if status == highspy.HighsModelStatus.kOptimal:
            name = "optimal"
        elif status == highspy.HighsModelStatus.kTimeLimit and has_value:
            name = "time-limit"
        elif status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
            name = "infeasible"
        else:
            name = "failed"
        x = np.asarray(sol.col_value, dtype=float) if has_value else np.zeros(self.n_cols)
        duals = np.asarray(sol.row_dual, dtype=float) if sol.dual_valid else np.zeros(self.n_rows)
        gap = float(info.mip_gap) if any(self.integer) else 0.0
        return Solution(name, float(info.objective_function_value), x, duals, gap)

    def set_row_bounds(self, row: int, lower: float, upper: float) -> None:
        self.row_lower[row] = lower
        self.row_upper[row] = upper
        if self._highs is not None:
            self._highs.changeRowBounds(row, lower, upper)

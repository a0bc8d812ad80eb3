"""Both optimisation back-ends load and solve in one process (highspy 1.15 and OR-Tools 9.15 clash)."""

from __future__ import annotations


def test_highs_and_cp_sat_in_one_process():
    import highspy
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    x = model.new_int_var(0, 3, "x")
    model.maximize(x)
    solver = cp_model.CpSolver()
    assert solver.solve(model) == cp_model.OPTIMAL and solver.value(x) == 3

    highs = highspy.Highs()
    highs.setOptionValue("output_flag", False)
    highs.addVar(0.0, 10.0)
    highs.changeColCost(0, -1.0)
    highs.run()
    assert highs.getInfo().objective_function_value == -10.0

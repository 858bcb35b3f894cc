"""Clock planners: choose a clock configuration per kernel (or per group of kernels).

* :func:`solve` — global planner: least energy within a time budget (``waste``, ``relaxed``),
  least energy·time^n (``edp``, ``ed2p``), or least time under an energy cap (``time``), at
  ``iteration`` / ``pass`` / ``layer`` / ``kernel`` granularity, optionally tying identical
  invocations; ``method="fast"`` (Lagrangian on convex hulls + repair, certified gap bound) or
  ``method="milp"`` (exact, scipy HiGHS);
* :func:`solve_local` — each kernel alone within its own time bound;
* :func:`pareto_frontier` — least energy over a range of allowed slowdowns;
* :func:`plan_switch_aware` — switch-aware phases (:mod:`.switching`: a DP over clock states).

All functions are pure: they read a :class:`~joulebound.gpumodel.characterization.Characterization`
and return a :class:`~joulebound.planning.plan.Plan` (or arrays).
"""

from joulebound.planning.solve.hull import Options, pareto_options
from joulebound.planning.solve.mckp import FastMCKP
from joulebound.planning.solve.milp import solve_milp
from joulebound.planning.solve.objectives import (
    METHODS,
    OBJECTIVES,
    Frontier,
    pareto_frontier,
    solve,
    solve_local,
)
from joulebound.planning.solve.problem import (
    GRANULARITIES,
    aggregate,
    align,
    baseline_column,
    baseline_totals,
    granularity_groups,
    planning_columns,
)
from joulebound.planning.solve.solution import MCKPSolution
from joulebound.planning.solve.switching import plan_switch_aware

__all__ = [
    "GRANULARITIES", "METHODS", "OBJECTIVES", "FastMCKP", "Frontier",
    "MCKPSolution", "Options", "aggregate", "align", "baseline_column", "baseline_totals",
    "granularity_groups", "pareto_frontier", "pareto_options", "plan_switch_aware",
    "planning_columns", "solve", "solve_local", "solve_milp",
]

"""Planning objectives over a Characterization, returning :class:`~joulebound.planning.plan.Plan`.

* ``waste`` — least energy with no slowdown: total time <= T_auto (Spaan et al.'s "strict");
* ``relaxed`` — least energy with total time <= (1 + slowdown) · T_auto;
* ``edp`` / ``ed2p`` — least energy·time (energy·time²), optionally capped by a slowdown;
* ``time`` — least time with energy <= energy_cap · E_auto.

T_auto / E_auto are the modeled totals at the baseline column (the governor, "auto", when
characterized, else the top clocks). Each objective works at any granularity
(:func:`~.problem.granularity_groups`). ``method="fast"`` uses the Lagrangian solver
(:mod:`.mckp`, certified gap bound in ``plan.meta``); ``method="milp"`` the exact HiGHS
reference (:mod:`.milp`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MEASURED, MODELED
from joulebound.core.vocab import SOLVER_OBJECTIVES
from joulebound.gpumodel.characterization import Characterization
from joulebound.planning.plan import Plan
from joulebound.planning.solve.hull import pareto_options
from joulebound.planning.solve.mckp import FastMCKP
from joulebound.planning.solve.milp import solve_milp
from joulebound.planning.solve.problem import (
    aggregate,
    baseline_column,
    baseline_totals,
    granularity_groups,
    planning_columns,
)
from joulebound.planning.solve.solution import MCKPSolution
from joulebound.workload.trace import Trace

OBJECTIVES: tuple[str, ...] = SOLVER_OBJECTIVES
#: relative slack on budgets for float summation order (sums over groups vs. over kernels)
REL_TOL = 1e-12
METHODS: tuple[str, ...] = ("fast", "milp")


def _infeasible(what: str, need: float, have: float, base: float, granularity: str,
                flag: str) -> JouleboundError:
    smallest = need / base - 1.0
    # the suggestion: the smallest feasible value rounded up to 0.01 % (a value that works,
    # negative too: a plan can be faster than auto)
    suggest = math.ceil(smallest * 1e4 + 1e-6) / 100
    return JouleboundError(
        f"the {what} {have:.6g} is below the least achievable {need:.6g} at {granularity} "
        f"granularity; the smallest feasible {flag} is {smallest:+.4%} "
        f"(pass {flag} {suggest:g}% or more).")


def plan_provenance(char: Characterization, kernel_choice: np.ndarray) -> str:
    """``"measured"`` when every chosen cell and the whole baseline column were measured, else
    ``"modeled"`` (a plan's totals and deltas are only as measured as all the cells they add)."""
    rows = np.arange(char.n_kernels)
    measured = char.sensor_measured
    used = measured[rows, kernel_choice]
    return MEASURED if used.all() and measured[:, baseline_column(char)].all() else MODELED


def _plan(char: Characterization, kernel_choice: np.ndarray, *, granularity: str,
          objective: str, slowdown: float, meta: dict) -> Plan:
    rows = np.arange(char.n_kernels)
    t = float(char.time_s[rows, kernel_choice].sum())
    e = float(char.energy_j[rows, kernel_choice].sum())
    tb, eb = baseline_totals(char)
    prov = plan_provenance(char, kernel_choice)
    return Plan(device=char.device, kernel_names=list(char.kernel_names), configs=list(char.configs),
                choice=kernel_choice, granularity=granularity, objective=objective,
                slowdown=float(slowdown), predicted_time_s=t, predicted_energy_j=e,
                baseline_time_s=tb, baseline_energy_j=eb, provenance=prov,
                meta={"baseline_config": char.configs[baseline_column(char)].label, **meta})


@dataclass
class _Grouped:
    groups: np.ndarray
    cols: np.ndarray
    t: np.ndarray   # (G, C') aggregated time (s)
    e: np.ndarray   # (G, C') aggregated energy (J)

    def expand(self, group_choice: np.ndarray) -> np.ndarray:
        """Kernel-level column indices (into char.configs) from per-group local columns."""
        return self.cols[np.asarray(group_choice)[self.groups]]


def _grouped(char: Characterization, granularity: str, trace: Trace | None, groups: np.ndarray | None,
             tie: bool, allow_auto: bool) -> _Grouped:
    if groups is None:
        groups = granularity_groups(granularity, char.n_kernels, trace, tie)
    groups = np.asarray(groups, np.int64)
    if groups.shape != (char.n_kernels,):
        raise JouleboundError(f"groups has shape {groups.shape}, expected ({char.n_kernels},)")
    cols = planning_columns(char, allow_auto)
    if granularity == "kernel" and not tie and np.array_equal(groups, np.arange(char.n_kernels)):
        if len(cols) == char.n_configs:          # no copy of a possibly large table
            t, e = char.time_s, char.energy_j
        else:
            t, e = char.time_s[:, cols], char.energy_j[:, cols]
    else:
        n = int(groups.max()) + 1 if len(groups) else 0
        t = aggregate(char.time_s[:, cols], groups, n)
        e = aggregate(char.energy_j[:, cols], groups, n)
    return _Grouped(groups, cols, t, e)


#: the exact reference's (``method="milp"``) HiGHS limit when none is given (s)
MILP_TIME_LIMIT_S = 60.0


def _solve_budget(gp: _Grouped, budget: float, method: str, tol: float, time_limit_s: float | None,
                  fast: FastMCKP | None = None) -> MCKPSolution:
    if method == "milp":
        return solve_milp(gp.t, gp.e, budget,
                          time_limit_s=MILP_TIME_LIMIT_S if time_limit_s is None else time_limit_s)
    fast = fast or FastMCKP(gp.t, gp.e)
    return fast.solve(budget, tol=tol, time_limit_s=time_limit_s)


def _limit_meta(sols: list[MCKPSolution]) -> dict:
    """``plan.meta`` keys on the exact solver's time limit: ``solver_time_limit_s`` (s, the
    largest HiGHS ran under; ``None`` when no exact solver ran) and ``time_limit_hit``."""
    limits = [s.time_limit_s for s in sols if s.time_limit_s is not None]
    return {"solver_time_limit_s": max(limits) if limits else None,
            "time_limit_hit": any(s.time_limit_hit for s in sols)}


def solve(char: Characterization, *, objective: str = "waste", slowdown: float | None = None,
          energy_cap: float | None = None, granularity: str = "kernel", trace: Trace | None = None,
          groups: np.ndarray | None = None, tie: bool = False, method: str = "fast",
          allow_auto: bool = True, tol: float = 1e-4, time_limit_s: float | None = None) -> Plan:
    """Choose a clock configuration per group of kernels for ``objective``.

    Args:
        char: time (s) and energy (J) per kernel × configuration, rows in trace order.
        objective: one of :data:`OBJECTIVES`.
        slowdown: allowed slowdown ε against T_auto (0.01 = 1 %); ``waste`` forces 0,
            ``relaxed`` requires it, ``edp``/``ed2p`` use it as an optional cap.
        energy_cap: for ``time``: energy allowed as a fraction of the baseline energy (0.9).
        granularity: ``iteration``, ``pass``, ``layer`` or ``kernel`` (pass/layer need ``trace``).
        trace: the kernels' trace (phases, layers, signatures), aligned with ``char``'s rows.
        groups: explicit group id per kernel (overrides ``granularity``'s grouping).
        tie: one configuration for identical invocations (needs ``trace``).
        method: ``fast`` (Lagrangian + repair, certified gap) or ``milp`` (exact HiGHS).
        allow_auto: whether the governor column may be chosen for a group.
        tol: fast solver: gap bound above which the core is re-solved exactly.
        time_limit_s: HiGHS wall-clock limit per MILP solve (s). ``None``: the fast solver's
            core re-solve gets a budget proportional to its size, at most 1.5 s
            (:func:`~.mckp.core_time_budget`); the exact ``milp`` method 60 s. ``plan.meta``
            says the limit (``solver_time_limit_s``) and whether HiGHS hit it
            (``time_limit_hit``; the plan is then HiGHS's incumbent or the greedy, still within
            the certified ``gap_bound``).

    Raises:
        JouleboundError: unknown objective/method, or an infeasible budget (the message gives the
            smallest feasible slowdown / energy cap).
    """
    if objective not in OBJECTIVES:
        raise JouleboundError(f"unknown objective {objective!r}; one of {', '.join(OBJECTIVES)}")
    if method not in METHODS:
        raise JouleboundError(f"unknown method {method!r}; one of {', '.join(METHODS)}")
    t_start = time.perf_counter()
    gp = _grouped(char, granularity, trace, groups, tie, allow_auto)
    tb, eb = baseline_totals(char)
    meta: dict = {"method": method, "n_groups": int(gp.t.shape[0]), "tie": tie}
    if objective == "time":
        if energy_cap is None:
            raise JouleboundError("objective 'time' needs energy_cap (a fraction of the baseline "
                                  "energy, e.g. 0.9 for 10 % less)")
        cap = energy_cap * eb * (1.0 + REL_TOL)
        emin = float(np.min(gp.e, axis=1).sum())
        if cap < emin:
            raise _infeasible("energy cap (J)", emin, cap, eb, granularity, "--energy-cap -1 +")
        # least time under an energy cap: the same knapsack with the roles swapped
        swapped = _Grouped(gp.groups, gp.cols, gp.e, gp.t)
        sol = _solve_budget(swapped, cap, method, tol, time_limit_s)
        meta.update(energy_cap_j=cap, lower_bound_s=sol.lower_bound, solver=sol.method,
                    **_limit_meta([sol]))
        meta["solve_time_s"] = time.perf_counter() - t_start
        return _plan(char, gp.expand(sol.choice), granularity=granularity, objective="time",
                     slowdown=float("nan"), meta=meta)
    if objective == "waste":
        slowdown = 0.0 if slowdown is None else slowdown
    if objective == "relaxed" and slowdown is None:
        raise JouleboundError("objective 'relaxed' needs a slowdown (e.g. 0.01 for 1 %)")
    tmin = float(np.min(gp.t, axis=1).sum())
    if objective in ("edp", "ed2p"):
        power = 1 if objective == "edp" else 2
        cap_t = np.inf if slowdown is None else (1.0 + slowdown) * tb * (1.0 + REL_TOL)
        if cap_t < tmin:
            raise _infeasible("time budget (s)", tmin, cap_t, tb, granularity, "--slowdown")
        fast = FastMCKP(gp.t, gp.e)
        # E·T^n along one straight piece of the LP path is least at one of its ends (for n = 1
        # a concave parabola, for n = 2 a cubic whose interior turning point is a maximum), so
        # the path's vertices hold the best of all its integer points
        pt, pe = fast.path()
        score = pe * pt**power
        score[pt > cap_t * (1 + 1e-12)] = np.inf
        i = int(np.argmin(score))
        best_sel = fast.sel_at_prefix(fast.vertex_prefix(i))
        best = MCKPSolution(fast.choice(best_sel), *fast.totals(best_sel), float("nan"),
                            float(fast.s_rate[i - 1]) if i > 0 else 0.0, "hull-path")
        # polish: the least energy within the best point's time (repair uses non-hull options)
        polished = []
        for b in {pt[i], pt[max(i - 1, 0)], pt[min(i + 1, len(pt) - 1)]}:
            if b < tmin or b > cap_t:
                continue
            s = fast.solve(float(b), tol=tol, time_limit_s=time_limit_s)
            polished.append(s)
            if s.energy * s.time**power < best.energy * best.time**power:
                best = s
        meta.update(solver=best.method, score=best.energy * best.time**power,
                    budget_s=None if not np.isfinite(cap_t) else cap_t, **_limit_meta(polished))
        meta["solve_time_s"] = time.perf_counter() - t_start
        return _plan(char, gp.expand(best.choice), granularity=granularity, objective=objective,
                     slowdown=float("nan") if slowdown is None else slowdown, meta=meta)
    assert slowdown is not None
    budget = (1.0 + slowdown) * tb * (1.0 + REL_TOL)
    if budget < tmin:
        raise _infeasible("time budget (s)", tmin, budget, tb, granularity, "--slowdown")
    sol = _solve_budget(gp, budget, method, tol, time_limit_s)
    meta.update(solver=sol.method, budget_s=budget, lower_bound_j=sol.lower_bound,
                gap_bound=sol.gap_bound, multiplier_j_per_s=sol.multiplier, **_limit_meta([sol]))
    meta["solve_time_s"] = time.perf_counter() - t_start
    return _plan(char, gp.expand(sol.choice), granularity=granularity, objective=objective,
                 slowdown=slowdown, meta=meta)


def solve_local(char: Characterization, slowdown: float = 0.0, allow_auto: bool = True,
                chunk_rows: int = 8192) -> Plan:
    """Each kernel takes its lowest-energy configuration within its own time bound.

    The bound of kernel k is (1 + slowdown) · t[k, baseline]; the baseline column always
    qualifies, so the plan never runs any kernel slower than allowed (and the total neither).
    """
    t0 = time.perf_counter()
    b = baseline_column(char)
    cols = planning_columns(char, allow_auto)
    choice = np.empty(char.n_kernels, np.int64)
    for lo in range(0, char.n_kernels, chunk_rows):
        t = char.time_s[lo:lo + chunk_rows]
        e = char.energy_j[lo:lo + chunk_rows][:, cols]
        ok = t[:, cols] <= (1.0 + slowdown) * t[:, b:b + 1]
        masked = np.where(ok, e, np.inf)
        pick = cols[np.argmin(masked, axis=1)]
        none = ~ok.any(axis=1)
        pick[none] = b
        choice[lo:lo + chunk_rows] = pick
    return _plan(char, choice, granularity="kernel", objective="local", slowdown=slowdown,
                 meta={"method": "local", "solve_time_s": time.perf_counter() - t0})


@dataclass
class Frontier:
    """Time–energy Pareto frontier of plans over allowed slowdowns (modeled).

    Attributes:
        slowdown: (n,) ε values (relative to T_auto).
        time_s, energy_j: (n,) planned totals per ε.
        baseline_time_s, baseline_energy_j: totals at the baseline column.
        granularity: grouping the plans used.
        path_time_s, path_energy_j: every integer point on the Lagrangian hull path (dense curve).
    """

    slowdown: np.ndarray
    time_s: np.ndarray
    energy_j: np.ndarray
    baseline_time_s: float
    baseline_energy_j: float
    granularity: str
    path_time_s: np.ndarray
    path_energy_j: np.ndarray

    @property
    def energy_delta(self) -> np.ndarray:
        return self.energy_j / self.baseline_energy_j - 1.0

    @property
    def time_delta(self) -> np.ndarray:
        return self.time_s / self.baseline_time_s - 1.0


def pareto_frontier(char: Characterization, slowdowns: np.ndarray | list[float] | None = None, *,
                    granularity: str = "kernel", trace: Trace | None = None,
                    groups: np.ndarray | None = None, tie: bool = False,
                    allow_auto: bool = True, tol: float = 1e-4) -> Frontier:
    """Least energy at each allowed slowdown ε (fast solver; one hull build for all ε).

    ε values below the smallest feasible one are skipped (not an error).
    """
    if slowdowns is None:
        slowdowns = np.concatenate([np.linspace(-0.05, 0.0, 6), np.linspace(0.0025, 0.1, 40)])
    gp = _grouped(char, granularity, trace, groups, tie, allow_auto)
    tb, eb = baseline_totals(char)
    fast = FastMCKP(options=pareto_options(gp.t, gp.e))
    eps, ts, es = [], [], []
    for s in np.asarray(slowdowns, float):
        budget = (1.0 + s) * tb * (1.0 + REL_TOL)
        if budget < fast.tmin:
            continue
        sol = fast.solve(budget, tol=tol)
        eps.append(s)
        ts.append(sol.time)
        es.append(sol.energy)
    pt, pe = fast.path()
    return Frontier(np.array(eps), np.array(ts), np.array(es), tb, eb, granularity, pt, pe)

"""Exact MCKP reference with scipy's MILP interface to HiGHS.

Binary ``x[p]`` per option point, one per group (equality rows), total time within the budget.
Only Pareto-efficient options are given to the solver (a dominated option is never needed in an
optimum), which keeps instances of thousands of kernels × hundreds of clock pairs small.
Coefficients are scaled to O(1) so HiGHS's absolute tolerances act as relative ones.
"""

from __future__ import annotations

import warnings

import numpy as np

from joulebound.planning.solve.hull import pareto_options
from joulebound.planning.solve.solution import MCKPSolution


def milp_points(group: np.ndarray, t: np.ndarray, e: np.ndarray, budget: float, *,
                time_limit_s: float | None = None, rel_gap: float = 1e-6) -> np.ndarray | None:
    """Indices (into the point arrays) of the optimal option per group, or None if HiGHS fails
    (:func:`milp_points_status` also says whether HiGHS stopped at its time limit)."""
    return milp_points_status(group, t, e, budget, time_limit_s=time_limit_s, rel_gap=rel_gap)[0]


def milp_points_status(group: np.ndarray, t: np.ndarray, e: np.ndarray, budget: float, *,
                       time_limit_s: float | None = None, rel_gap: float = 1e-6
                       ) -> tuple[np.ndarray | None, bool]:
    """``(selection, hit_limit)``: the indices (into the point arrays) of the best option per
    group HiGHS found (``None`` if it found none), and whether it stopped at ``time_limit_s``
    rather than at ``rel_gap`` (its selection is then its incumbent, not a proven optimum).

    Args:
        group: (N,) group id per point; ids need not be contiguous.
        t, e: (N,) time (s) and energy (J) per point.
        budget: total time allowed (s).
        time_limit_s: HiGHS wall-clock limit; the best solution found so far is returned.
        rel_gap: relative MIP gap at which HiGHS stops (HiGHS proves MCKP gaps below ~1e-7
            only slowly; 1e-6 is far inside the 0.1 % the fast solver is held to).
    """
    n = len(t)
    if n == 0:
        return np.zeros(0, np.int64), False
    _, gid = np.unique(group, return_inverse=True)
    n_groups = int(gid.max()) + 1
    # time above each group's fastest option: the all-fastest choice uses 0 of the slack, the
    # budget becomes the slack itself, and HiGHS's tolerances act on the slack, not the total
    t_fast = np.full(n_groups, np.inf)
    np.minimum.at(t_fast, gid, t)
    extra = t - t_fast[gid]
    slack = budget - float(t_fast.sum())
    if slack < 0:
        return None, False
    sel, hit = None, False
    for _ in range(4):              # shrink the slack if HiGHS returns a slightly infeasible x
        sel, hit_now = _highs(gid, n_groups, extra, e, slack, time_limit_s, rel_gap)
        hit = hit or hit_now
        if sel is None:
            return None, hit
        over = float(extra[sel].sum()) - slack
        if over <= 0:
            return sel, hit
        slack -= 2 * over
        if slack < 0:
            break
    return (sel if sel is not None and float(t[sel].sum()) <= budget else None), hit


def _highs(gid: np.ndarray, n_groups: int, extra: np.ndarray, e: np.ndarray, slack: float,
           time_limit_s: float | None, rel_gap: float) -> tuple[np.ndarray | None, bool]:
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array

    usable = np.flatnonzero(extra <= slack)    # an option needing more than the slack is out
    g, x_t, x_e = gid[usable], extra[usable], e[usable]
    n = len(usable)
    scale_t = slack if slack > 0 else 1.0
    e_scale = float(np.mean(np.abs(x_e))) * n_groups or 1.0
    a_eq = csr_array((np.ones(n), (g, np.arange(n))), shape=(n_groups, n))
    cons = [LinearConstraint(a_eq, 1.0, 1.0),
            LinearConstraint(csr_array((x_t / scale_t)[None, :]), -np.inf, slack / scale_t)]
    # HiGHS's own switches silence it (scipy passes options it does not know to HiGHS verbatim,
    # with a RuntimeWarning saying so): nothing reaches the process's stdout, which may carry a
    # table or --json, and nothing of the process's output is redirected meanwhile
    options: dict = {"mip_rel_gap": rel_gap, "disp": False, "output_flag": False,
                     "log_to_console": False}
    if time_limit_s is not None:
        options["time_limit"] = float(time_limit_s)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unrecognized options", category=RuntimeWarning)
        res = milp(c=x_e / e_scale, constraints=cons, integrality=np.ones(n), bounds=Bounds(0, 1),
                   options=options)
    hit = res.status == 1          # scipy: "iteration or time limit reached"
    if res.x is None:
        return None, hit
    x = res.x
    # the largest x per group (x is 0/1 up to HiGHS's integrality tolerance)
    order = np.lexsort((-x, g))
    _, first = np.unique(g[order], return_index=True)
    return usable[order[first]], hit


def solve_milp(time_gc: np.ndarray, energy_gc: np.ndarray, budget: float, *,
               time_limit_s: float | None = None, rel_gap: float = 1e-6) -> MCKPSolution:
    """Exact minimum-energy choice per row of (G, C) arrays with total time <= ``budget``.

    Raises ``ValueError`` when the budget is infeasible or HiGHS returns no solution.
    """
    o = pareto_options(time_gc, energy_gc, dedup=False)   # one binary per option of every group
    tmin = float(o.t[o.fastest()].sum())
    if budget < tmin:
        raise ValueError(f"budget {budget!r} below the fastest possible total {tmin!r}")
    sel, hit = milp_points_status(o.group, o.t, o.e, budget, time_limit_s=time_limit_s,
                                  rel_gap=rel_gap)
    if sel is None:
        raise ValueError("HiGHS returned no solution (time limit too short?)")
    sel = sel[np.argsort(o.group[sel])]
    t, e = float(o.t[sel].sum()), float(o.e[sel].sum())
    return MCKPSolution(o.col[sel].astype(np.int64), t, e, float("nan"), float("nan"), "milp",
                        time_limit_s=time_limit_s, time_limit_hit=hit)

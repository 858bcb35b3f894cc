"""Global clock choice as a multiple-choice knapsack (MCKP): a fast Lagrangian solver.

Problem: groups ``g`` (kernels, or sets of kernels tied to one clock configuration) each pick one
option ``c`` (a clock configuration) with time ``t[g, c]`` (s) and energy ``e[g, c]`` (J);
minimise the total energy subject to ``sum_g t[g, c_g] <= budget``.

The fast solver works on each group's lower convex hull (:mod:`.hull`):

1. start every group at its lowest-energy option; if that meets the budget it is optimal;
2. otherwise buy back time with hull moves (one hull vertex faster) in order of increasing
   energy per second saved — the greedy solution of the LP relaxation. The move that crosses
   the budget is the only fractional one; its slope is the critical Lagrange multiplier
   ``lambda*`` (J/s) and the LP value is a certified **lower bound** on the optimum;
3. round: take that last move whole ("up"), or skip it and cover the rest with the next moves
   of other groups ("down"); repair each by spending the leftover slack on the best
   energy-lowering changes among *all* Pareto options (not only hull vertices); keep the better;
4. if the result is still more than ``tol`` above the LP bound, solve the "core" exactly — the
   groups whose hull moves lie nearest ``lambda*`` (all groups for small instances) — with
   scipy's HiGHS MILP while every other group keeps its choice (Pisinger's core idea).

The returned :class:`MCKPSolution` always meets the budget (totals recomputed from the chosen
options) and carries the LP lower bound, so every solve reports its own optimality-gap bound.
"""

from __future__ import annotations

import numpy as np

from .hull import Options, pareto_options
from .milp import milp_points
from .solution import MCKPSolution


def _segments(o: Options, hv: np.ndarray | None = None,
              hg: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Hull moves of every group: (group, time saved, energy added, energy per time saved)."""
    if hv is None or hg is None:
        hv = np.flatnonzero(o.hull)
        hg = o.group[hv]
    same = hg[1:] == hg[:-1]
    fast_pt, slow_pt = hv[:-1][same], hv[1:][same]
    dt = o.t[slow_pt] - o.t[fast_pt]
    de = o.e[fast_pt] - o.e[slow_pt]
    return hg[:-1][same], dt, de, de / dt


class FastMCKP:
    """Lagrangian MCKP solver over precomputed hulls; build once, solve for many budgets.

    Args:
        time_gc, energy_gc: (G, C) arrays; non-finite cells are unavailable options.
        options: precomputed :func:`~.hull.pareto_options` of the same arrays (optional).
    """

    def __init__(self, time_gc: np.ndarray | None = None, energy_gc: np.ndarray | None = None,
                 options: Options | None = None) -> None:
        if options is None:
            if time_gc is None or energy_gc is None:
                raise ValueError("pass time_gc and energy_gc, or options")
            options = pareto_options(time_gc, energy_gc)
        o = self.opts = options
        self.G = o.n_groups
        self.point_group = o.group
        hv = np.flatnonzero(o.hull)
        hg = self.point_group[hv]
        self.hptr = np.zeros(self.G + 1, np.int64)
        np.cumsum(np.bincount(hg, minlength=self.G), out=self.hptr[1:])
        self.hv = hv
        if o.types is not None and o.type_of is not None:
            # sort the distinct rows' hull moves once, then give each move to every group of
            # its type (equal rates stay adjacent; same order as sorting all copies)
            u_grp, u_dt, u_de, u_rate = _segments(o.types)
            order = np.argsort(u_rate, kind="stable")
            u_grp, u_dt, u_de, u_rate = u_grp[order], u_dt[order], u_de[order], u_rate[order]
            by_type = np.argsort(o.type_of, kind="stable")
            tptr = np.zeros(o.types.n_groups + 1, np.int64)
            np.cumsum(np.bincount(o.type_of, minlength=o.types.n_groups), out=tptr[1:])
            n_copy = tptr[u_grp + 1] - tptr[u_grp]
            total = int(n_copy.sum())
            base = np.repeat(tptr[u_grp] - np.concatenate([[0], np.cumsum(n_copy)[:-1]]), n_copy)
            self.seg_group = by_type[base + np.arange(total)]
            self.seg_dt = np.repeat(u_dt, n_copy)
            self.seg_de = np.repeat(u_de, n_copy)
            self.seg_rate = np.repeat(u_rate, n_copy)
        else:
            grp, dt, de, rate = _segments(o, hv, hg)
            order = np.argsort(rate, kind="stable")
            self.seg_group, self.seg_dt = grp[order], dt[order]
            self.seg_de, self.seg_rate = de[order], rate[order]
        self.cum_dt = np.cumsum(self.seg_dt)
        self.cum_de = np.cumsum(self.seg_de)
        cheap = o.cheapest()
        fast = o.fastest()
        self.t0 = float(o.t[cheap].sum())
        self.e0 = float(o.e[cheap].sum())
        self.tmin = float(o.t[fast].sum())
        self.emax_at_tmin = float(o.e[fast].sum())

    # -- helpers ------------------------------------------------------------------------------
    def _sel_from_moves(self, moves: np.ndarray) -> np.ndarray:
        """Point index per group after ``moves[g]`` hull moves from the cheapest vertex."""
        return self.hv[self.hptr[1:] - 1 - moves]

    def _moves_of_prefix(self, n: int) -> np.ndarray:
        return np.bincount(self.seg_group[:n], minlength=self.G)

    def totals(self, sel: np.ndarray) -> tuple[float, float]:
        """Exact (time, energy) of a selection of point indices."""
        return float(self.opts.t[sel].sum()), float(self.opts.e[sel].sum())

    def choice(self, sel: np.ndarray) -> np.ndarray:
        return self.opts.col[sel].astype(np.int64)

    def path(self) -> tuple[np.ndarray, np.ndarray]:
        """(time, energy) after each prefix of hull moves: the integer points of the LP path."""
        t = np.concatenate([[self.t0], self.t0 - self.cum_dt])
        e = np.concatenate([[self.e0], self.e0 + self.cum_de])
        return t, e

    def sel_at_prefix(self, n: int) -> np.ndarray:
        return self._sel_from_moves(self._moves_of_prefix(n))

    def repair(self, sel: np.ndarray, budget: float, rounds: int = 8) -> np.ndarray:
        """Spend leftover slack on energy-lowering option changes (any Pareto option)."""
        o = self.opts
        g_of = self.point_group
        n = len(o.t)
        sel = sel.copy()
        pool = np.arange(n)
        for _ in range(rounds):
            slack = budget - float(o.t[sel].sum())
            if slack <= 0 or len(pool) == 0:
                break
            gp = g_of[pool]
            dt = o.t[pool] - o.t[sel[gp]]
            de = o.e[pool] - o.e[sel[gp]]
            ok = (dt <= slack) & (de < 0)
            idx, dt, de = pool[ok], dt[ok], de[ok]
            if len(idx) == 0:
                break
            order = np.argsort(de, kind="stable")               # biggest saving first
            idx, dt, de = idx[order], dt[order], de[order]
            gi = g_of[idx]
            first_pos = np.full(self.G, len(idx))
            np.minimum.at(first_pos, gi, np.arange(len(idx)))   # best change per group
            first = np.sort(first_pos[first_pos < len(idx)])
            best, bdt = idx[first], dt[first]                   # still sorted by saving
            fits = np.cumsum(bdt) <= slack
            if not fits[0]:
                break
            take = best[fits]
            sel[g_of[take]] = take
            # next round: the remaining candidates plus every option of the changed groups
            changed = np.zeros(self.G, bool)
            changed[g_of[take]] = True
            mask = changed[g_of]
            mask[idx] = True
            pool = np.flatnonzero(mask)
        return sel

    def _core_milp(self, sel: np.ndarray, budget: float, f: int, n_core: int,
                   time_limit_s: float) -> np.ndarray | None:
        """Re-solve the groups whose hull moves are nearest the critical one exactly."""
        if self.G <= n_core:
            core = np.arange(self.G)
        else:
            lo, hi = max(0, f - n_core), min(len(self.seg_group), f + n_core)
            window = self.seg_group[lo:hi]
            dist = np.abs(np.arange(lo, hi) - f)
            order = np.argsort(dist, kind="stable")
            _, first = np.unique(window[order], return_index=True)
            core = window[order][np.sort(first)][:n_core]
        o = self.opts
        mask = np.zeros(self.G, bool)
        mask[core] = True
        fixed_t = float(o.t[sel[~mask]].sum())
        pts = np.flatnonzero(mask[self.point_group])
        sub = milp_points(self.point_group[pts], o.t[pts], o.e[pts], budget - fixed_t,
                          time_limit_s=time_limit_s)
        if sub is None:
            return None
        new = sel.copy()
        new[self.point_group[pts[sub]]] = pts[sub]
        return new

    # -- solve --------------------------------------------------------------------------------
    def solve(self, budget: float, *, tol: float = 1e-4, repair: bool = True,
              core: bool = True, n_core: int = 48, time_limit_s: float = 10.0) -> MCKPSolution:
        """Minimum-energy choice with total time <= ``budget``.

        Raises ``ValueError`` when ``budget`` is below the fastest possible total (callers turn
        that into a user-facing error with the smallest feasible slowdown).
        """
        o = self.opts
        if budget < self.tmin:
            raise ValueError(f"budget {budget!r} below the fastest possible total {self.tmin!r}")
        if self.t0 <= budget:
            sel = o.cheapest()
            t, e = self.totals(sel)
            return MCKPSolution(self.choice(sel), t, e, e, 0.0, "unconstrained")
        need = self.t0 - budget
        f = int(np.searchsorted(self.cum_dt, need, side="left"))
        f = min(f, len(self.cum_dt) - 1)
        prev_dt = self.cum_dt[f - 1] if f > 0 else 0.0
        prev_de = self.cum_de[f - 1] if f > 0 else 0.0
        frac = min(1.0, max(0.0, (need - prev_dt) / self.seg_dt[f]))
        lower = self.e0 + prev_de + frac * self.seg_de[f]
        lam = float(self.seg_rate[f])

        candidates: list[tuple[np.ndarray, str]] = []
        # "up": take the crossing move whole (and further moves if rounding left us over)
        n = f + 1
        sel_up = self.sel_at_prefix(n)
        while self.totals(sel_up)[0] > budget and n < len(self.cum_dt):
            n += 1
            sel_up = self.sel_at_prefix(n)
        if self.totals(sel_up)[0] > budget:
            sel_up = o.fastest()
        candidates.append((sel_up, "greedy"))
        # "down": skip the crossing move, cover the rest with later moves of other groups
        if f + 1 < len(self.seg_group):
            gf = self.seg_group[f]
            later = np.flatnonzero(self.seg_group[f + 1:] != gf) + f + 1
            cum = np.cumsum(self.seg_dt[later])
            k = int(np.searchsorted(cum, need - prev_dt, side="left"))
            if k < len(later):
                moves = self._moves_of_prefix(f) + np.bincount(self.seg_group[later[:k + 1]],
                                                               minlength=self.G)
                sel_down = self._sel_from_moves(np.minimum(moves, self.hptr[1:] - self.hptr[:-1] - 1))
                if self.totals(sel_down)[0] <= budget:
                    candidates.append((sel_down, "greedy"))
        if repair:
            candidates = [(self.repair(s, budget), "greedy+repair") for s, _ in candidates]
        sel, method = min(candidates, key=lambda c: self.totals(c[0])[1])
        t, e = self.totals(sel)
        if core and lower > 0 and e / lower - 1.0 > tol:
            better = self._core_milp(sel, budget, f, n_core, time_limit_s)
            if better is not None:
                tb, eb = self.totals(better)
                if tb <= budget and eb < e:
                    sel, method, t, e = better, "core-milp", tb, eb
        return MCKPSolution(self.choice(sel), t, e, float(lower), lam, method)

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
   scipy's HiGHS MILP while every other group keeps its choice (Pisinger's core idea). HiGHS
   runs under a small wall-clock budget (:func:`core_time_budget`: proportional to the core's
   option points, at most :data:`CORE_TIME_CAP_S`), so the fast solver never waits on it; when
   it stops at that limit its incumbent is used only if better than the greedy, and the solution
   says the limit was hit (``time_limit_hit``).

The returned :class:`MCKPSolution` always meets the budget (totals recomputed from the chosen
options) and carries the LP lower bound, so every solve reports its own optimality-gap bound.

Repeated rows (groups of one *type*: identical options) are never expanded. Their hull moves have
equal rates, so in the greedy order all copies of a type's move are adjacent: the LP path is kept
per type move with its number of copies, a prefix of it is "every move before s, and the first q
copies of move s", and the repair works on classes (type, current option) with their counts.
Work and memory are O(groups + distinct rows' options), not O(groups × options).
"""

from __future__ import annotations

import numpy as np

from joulebound.planning.solve.hull import Options, pareto_options
from joulebound.planning.solve.milp import milp_points_status
from joulebound.planning.solve.solution import MCKPSolution

#: the core re-solve's HiGHS budget: this many seconds at most (s)
CORE_TIME_CAP_S = 1.5
#: ... and below the cap, a base plus this much per option point of the core (s)
CORE_TIME_BASE_S = 0.25
CORE_TIME_PER_POINT_S = 2e-3


def core_time_budget(n_points: int) -> float:
    """HiGHS wall-clock budget (s) for a core of ``n_points`` option points: 0.25 s + 2 ms per
    point, at most 1.5 s (cores of 48 groups have a few hundred points and solve in ~0.02 s)."""
    return min(CORE_TIME_CAP_S, CORE_TIME_BASE_S + CORE_TIME_PER_POINT_S * n_points)


class FastMCKP:
    """Lagrangian MCKP solver over precomputed hulls; build once, solve for many budgets.

    Args:
        time_gc, energy_gc: (G, C) arrays; non-finite cells are unavailable options.
        options: precomputed :func:`~.hull.pareto_options` of the same arrays (optional).

    Selections (``sel``) are (G,) arrays of point indices into the options' (distinct-row)
    point arrays: ``opts.t[sel]`` is the time of each group's chosen option.
    """

    def __init__(self, time_gc: np.ndarray | None = None, energy_gc: np.ndarray | None = None,
                 options: Options | None = None) -> None:
        if options is None:
            if time_gc is None or energy_gc is None:
                raise ValueError("pass time_gc and energy_gc, or options")
            options = pareto_options(time_gc, energy_gc)
        o = self.opts = options
        n_t = self.T = o.n_rows
        self.type_of = (np.arange(n_t, dtype=np.int64) if o.type_of is None
                        else np.asarray(o.type_of, np.int64))
        self.G = len(self.type_of)
        cnt = self.count = np.bincount(self.type_of, minlength=n_t)
        self.members = np.argsort(self.type_of, kind="stable")      # groups of each type, in order
        self.tptr = np.zeros(n_t + 1, np.int64)
        np.cumsum(cnt, out=self.tptr[1:])
        self.point_type = o.group
        hv = np.flatnonzero(o.hull)
        hg = self.point_type[hv]
        self.hptr = np.zeros(n_t + 1, np.int64)
        np.cumsum(np.bincount(hg, minlength=n_t), out=self.hptr[1:])
        self.hv = hv
        self.n_moves = self.hptr[1:] - self.hptr[:-1] - 1            # hull moves per type
        # hull moves of every type, by increasing energy per second saved (stable: a type's moves
        # keep their order, copies of one move stay adjacent)
        same = hg[1:] == hg[:-1]
        fast_pt, slow_pt = hv[:-1][same], hv[1:][same]
        dt = o.t[slow_pt] - o.t[fast_pt]
        de = o.e[fast_pt] - o.e[slow_pt]
        rate = de / dt
        order = np.argsort(rate, kind="stable")
        self.s_type = hg[:-1][same][order]
        self.s_dt, self.s_de, self.s_rate = dt[order], de[order], rate[order]
        self.s_n = cnt[self.s_type]
        self.cum_n = np.cumsum(self.s_n)                    # expanded moves up to each type move
        self.cum_dt = np.cumsum(self.s_dt * self.s_n)
        self.cum_de = np.cumsum(self.s_de * self.s_n)
        cheap = o.cheapest()[self.type_of]
        fast = o.fastest()[self.type_of]
        self.t0 = float(o.t[cheap].sum())
        self.e0 = float(o.e[cheap].sum())
        self.tmin = float(o.t[fast].sum())
        self.emax_at_tmin = float(o.e[fast].sum())

    # -- helpers ------------------------------------------------------------------------------
    @property
    def n_path(self) -> int:
        """Number of (expanded) hull moves: prefixes 0..n_path are the LP path's integer points."""
        return int(self.cum_n[-1]) if len(self.cum_n) else 0

    def _copies(self, u: int) -> np.ndarray:
        return self.members[self.tptr[u]:self.tptr[u + 1]]

    def _moves(self, s_full: int, q: int = 0) -> np.ndarray:
        """(G,) hull moves per group: every type move before ``s_full``, plus the first ``q``
        copies of move ``s_full``."""
        m_type = np.bincount(self.s_type[:s_full], minlength=self.T)
        moves = m_type[self.type_of]
        if q > 0 and s_full < len(self.s_type):
            moves[self._copies(int(self.s_type[s_full]))[:q]] += 1
        return moves

    def _split(self, n: int) -> tuple[int, int]:
        """Expanded prefix length ``n`` as (type moves taken whole, copies of the next one)."""
        s = int(np.searchsorted(self.cum_n, n, side="right"))
        return s, n - (int(self.cum_n[s - 1]) if s > 0 else 0)

    def _sel_from_moves(self, moves: np.ndarray) -> np.ndarray:
        """Point index per group after ``moves[g]`` hull moves from the cheapest vertex."""
        return self.hv[self.hptr[self.type_of + 1] - 1 - moves]

    def totals(self, sel: np.ndarray) -> tuple[float, float]:
        """Exact (time, energy) of a selection of point indices."""
        return float(self.opts.t[sel].sum()), float(self.opts.e[sel].sum())

    def choice(self, sel: np.ndarray) -> np.ndarray:
        return self.opts.col[sel].astype(np.int64)

    def path(self) -> tuple[np.ndarray, np.ndarray]:
        """(time, energy) at the LP path's vertices: before any move and after each type move with
        all its copies. The integer points between two vertices lie on the straight line joining
        them (the copies of one move change time and energy by equal steps)."""
        t = np.concatenate([[self.t0], self.t0 - self.cum_dt])
        e = np.concatenate([[self.e0], self.e0 + self.cum_de])
        return t, e

    def vertex_prefix(self, i: int) -> int:
        """Expanded prefix length at path vertex ``i`` (of :meth:`path`)."""
        return int(self.cum_n[i - 1]) if i > 0 else 0

    def sel_at_prefix(self, n: int) -> np.ndarray:
        """Selection after the first ``n`` (expanded) hull moves of the greedy order."""
        return self._sel_from_moves(self._moves(*self._split(n)))

    def repair(self, sel: np.ndarray, budget: float, rounds: int = 8) -> np.ndarray:
        """Spend leftover slack on energy-lowering option changes (any Pareto option).

        Groups on the same option of the same type form a class; each round takes, biggest
        saving first, every class's best change that fits the slack, for as many of its groups as
        fit (the first ones by index)."""
        o = self.opts
        sel = sel.copy()
        for _ in range(rounds):
            slack = budget - float(o.t[sel].sum())
            if slack <= 0:
                break
            cls, inv, n_cls = np.unique(sel, return_inverse=True, return_counts=True)
            inv = inv.reshape(-1)
            ty = self.point_type[cls]
            n_opt = self.opts.ptr[ty + 1] - self.opts.ptr[ty]
            ci = np.repeat(np.arange(len(cls)), n_opt)                   # class of each candidate
            cand = np.repeat(self.opts.ptr[ty] - np.concatenate([[0], np.cumsum(n_opt)[:-1]]),
                             n_opt) + np.arange(int(n_opt.sum()))
            dt = o.t[cand] - o.t[cls[ci]]
            de = o.e[cand] - o.e[cls[ci]]
            ok = (dt <= slack) & (de < 0)
            if not ok.any():
                break
            ci, cand, dt, de = ci[ok], cand[ok], dt[ok], de[ok]
            order = np.lexsort((cand, de))                               # biggest saving first
            ci, cand, dt, de = ci[order], cand[order], dt[order], de[order]
            _, first = np.unique(ci, return_index=True)                  # best change per class
            first = np.sort(first)                                       # still by saving
            bc, bpt, bdt = ci[first], cand[first], dt[first]
            take = np.minimum(n_cls[bc], np.floor(slack / bdt)).astype(np.int64)
            used = np.cumsum(take * bdt)
            # a prefix of the changes (group by group) that fits: whole classes, then part of one
            whole = used <= slack
            k = int(np.argmin(whole)) if not whole.all() else len(bc)
            take[k:] = 0
            if k < len(bc):
                left = slack - (float(used[k - 1]) if k > 0 else 0.0)
                take[k] = min(int(n_cls[bc[k]]), int(np.floor(left / bdt[k])))
            if take.sum() == 0:
                break
            new_pt = np.full(len(cls), -1, np.int64)
            full = take == n_cls[bc]
            new_pt[bc[full & (take > 0)]] = bpt[full & (take > 0)]
            mask = new_pt[inv] >= 0
            sel[mask] = new_pt[inv[mask]]
            for j in np.flatnonzero(~full & (take > 0)):                 # at most one class
                groups = np.flatnonzero(inv == bc[j])[:take[j]]
                sel[groups] = bpt[j]
        return sel

    def _core_groups(self, f: int, n_core: int) -> np.ndarray:
        """The groups whose hull moves lie nearest the critical (expanded) move ``f``."""
        if self.G <= n_core:
            return np.arange(self.G)
        lo, hi = max(0, f - n_core), min(self.n_path, f + n_core)
        pos = np.arange(lo, hi)
        s = np.searchsorted(self.cum_n, pos, side="right")
        copy = pos - np.where(s > 0, self.cum_n[np.maximum(s - 1, 0)], 0)
        window = self.members[self.tptr[self.s_type[s]] + copy]
        order = np.argsort(np.abs(pos - f), kind="stable")
        _, first = np.unique(window[order], return_index=True)
        return window[order][np.sort(first)][:n_core]

    def _core_milp(self, sel: np.ndarray, budget: float, f: int, n_core: int,
                   time_limit_s: float | None) -> tuple[np.ndarray | None, float, bool]:
        """Re-solve the groups whose hull moves are nearest the critical one exactly:
        ``(new selection or None, HiGHS's time limit in s, whether HiGHS hit it)``;
        ``time_limit_s`` ``None`` is :func:`core_time_budget` of the core's points."""
        core = self._core_groups(f, n_core)
        o = self.opts
        mask = np.zeros(self.G, bool)
        mask[core] = True
        fixed_t = float(o.t[sel[~mask]].sum())
        ty = self.type_of[core]
        n_opt = o.ptr[ty + 1] - o.ptr[ty]
        gid = np.repeat(core, n_opt)
        pts = np.repeat(o.ptr[ty] - np.concatenate([[0], np.cumsum(n_opt)[:-1]]), n_opt) \
            + np.arange(int(n_opt.sum()))
        limit = core_time_budget(len(pts)) if time_limit_s is None else float(time_limit_s)
        sub, hit = milp_points_status(gid, o.t[pts], o.e[pts], budget - fixed_t, time_limit_s=limit)
        if sub is None:
            return None, limit, hit
        new = sel.copy()
        new[gid[sub]] = pts[sub]
        return new, limit, hit

    # -- solve --------------------------------------------------------------------------------
    def solve(self, budget: float, *, tol: float = 1e-4, repair: bool = True,
              core: bool = True, n_core: int = 48, time_limit_s: float | None = None
              ) -> MCKPSolution:
        """Minimum-energy choice with total time <= ``budget``.

        ``time_limit_s``: HiGHS's wall-clock limit for the core re-solve (s); ``None`` (the
        default) is :func:`core_time_budget` of the core's size. The solution reports the limit
        and whether it was hit; its gap bound (against the LP bound) holds either way.

        Raises ``ValueError`` when ``budget`` is below the fastest possible total (callers turn
        that into a user-facing error with the smallest feasible slowdown).
        """
        o = self.opts
        if budget < self.tmin:
            raise ValueError(f"budget {budget!r} below the fastest possible total {self.tmin!r}")
        if self.t0 <= budget or not len(self.cum_dt):
            sel = o.cheapest()[self.type_of]
            t, e = self.totals(sel)
            return MCKPSolution(self.choice(sel), t, e, e, 0.0, "unconstrained")
        need = self.t0 - budget
        s = min(int(np.searchsorted(self.cum_dt, need, side="left")), len(self.cum_dt) - 1)
        before_dt = float(self.cum_dt[s - 1]) if s > 0 else 0.0
        before_de = float(self.cum_de[s - 1]) if s > 0 else 0.0
        dt_s, de_s, n_s = float(self.s_dt[s]), float(self.s_de[s]), int(self.s_n[s])
        # the crossing copy j of move s: the first whose cumulative time saving reaches ``need``
        j = int(min(max(np.ceil((need - before_dt) / dt_s) - 1, 0), n_s - 1))
        prev_dt, prev_de = before_dt + j * dt_s, before_de + j * de_s
        frac = min(1.0, max(0.0, (need - prev_dt) / dt_s))
        lower = self.e0 + prev_de + frac * de_s
        lam = float(self.s_rate[s])
        f = self.vertex_prefix(s) + j                   # expanded index of the crossing move

        candidates: list[tuple[np.ndarray, str]] = []
        # "up": take the crossing move whole (and further moves if rounding left us over)
        n = f + 1
        sel_up = self.sel_at_prefix(n)
        while self.totals(sel_up)[0] > budget and n < self.n_path:
            n += 1
            sel_up = self.sel_at_prefix(n)
        if self.totals(sel_up)[0] > budget:
            sel_up = o.fastest()[self.type_of]
        candidates.append((sel_up, "greedy"))
        # "down": skip the crossing move, cover the rest with later moves of other groups
        sel_down = self._down(s, j, need - prev_dt)
        if sel_down is not None and self.totals(sel_down)[0] <= budget:
            candidates.append((sel_down, "greedy"))
        if repair:
            candidates = [(self.repair(c, budget), "greedy+repair") for c, _ in candidates]
        sel, method = min(candidates, key=lambda c: self.totals(c[0])[1])
        t, e = self.totals(sel)
        limit, hit = None, False
        if core and lower > 0 and e / lower - 1.0 > tol:
            better, limit, hit = self._core_milp(sel, budget, f, n_core, time_limit_s)
            if better is not None:
                tb, eb = self.totals(better)
                if tb <= budget and eb < e:
                    sel, method, t, e = better, "core-milp", tb, eb
        return MCKPSolution(self.choice(sel), t, e, float(lower), lam, method,
                            time_limit_s=limit, time_limit_hit=hit)

    def _down(self, s: int, j: int, rest: float) -> np.ndarray | None:
        """Without copy ``j`` of move ``s`` (group ``gf``): the first ``j`` copies of ``s`` and
        every move before it, plus the following moves of groups other than ``gf`` until they
        save ``rest`` more seconds; ``None`` when they cannot."""
        u = int(self.s_type[s])
        gf = int(self._copies(u)[j])
        # copies after j in move s, then every later move, each weighted by its copies but gf's
        w = self.s_n[s + 1:] - (self.s_type[s + 1:] == u)
        cum = np.concatenate([[(self.s_n[s] - j - 1) * self.s_dt[s]],
                              (self.s_n[s] - j - 1) * self.s_dt[s]
                              + np.cumsum(w * self.s_dt[s + 1:])])
        k = int(np.searchsorted(cum, rest, side="left"))
        if k >= len(cum):
            return None
        if k == 0:                                   # within move s: copies j+1 .. j+c
            c = int(np.ceil(rest / self.s_dt[s]))
            moves = self._moves(s, min(j + 1 + c, int(self.s_n[s])))
        else:                                        # up to move s+k: its first c copies but gf's
            sk = s + k
            c = int(np.ceil((rest - cum[k - 1]) / self.s_dt[sk]))
            if int(self.s_type[sk]) == u and np.flatnonzero(self._copies(u) == gf)[0] < c:
                c += 1
            moves = self._moves(sk, min(c, int(self.s_n[sk])))
        moves[gf] = int(np.count_nonzero(self.s_type[:s] == u))   # gf keeps its moves before s
        return self._sel_from_moves(np.minimum(moves, self.n_moves[self.type_of]))

"""Switch-aware clock planning: a dynamic program over clock states along the kernel sequence.

Spaan et al. pick one clock pair per kernel as if switching were free. Real clock changes take
latency ``L`` (6 ms on H200 to 150 ms on Turing; NVML set-calls 10–20 ms) and one cannot start
before the previous one has taken effect. This planner returns *phases* — runs of consecutive
kernels at one clock configuration — such that

* every phase after the first lasts at least ``D = max(L, min_dwell_s)`` at its own clocks, so a
  controller that knows the schedule can issue each request ``L`` ahead of its phase and every
  switch lands on time (see :mod:`joulebound.planning.simulate`);
* every switch optionally costs energy ``switch_energy_j`` (J) and a stall ``switch_time_s`` (s);
* total time (kernels + stalls) stays within ``(1 + slowdown) · T_auto`` and energy is least.

Method: Lagrangian relaxation of the time budget. For a multiplier ``λ`` (J/s) the DP minimises
``Σ (e + λ t) + n_switches · (E_sw + λ T_sw)`` exactly over all phase structures meeting the dwell
rule. States are the clock configurations; a phase entered at kernel ``s`` comes from the best
state at ``s - 1`` (the "stay vs. switch from best" trick), and the best plan ending at ``k`` in
``c`` is the least such entry up to the latest start whose phase lasts ``D`` by ``k``, plus a
prefix sum. That latest start only moves forward, so one pointer per configuration absorbs the
entries as it passes them: O(K·C) per multiplier, with (C × multipliers) working state, compiled
(:mod:`.dp_kernel`; :func:`dp_lagrangian`). Each kernel keeps the best state and its phase start,
so the plan is read back phase by phase.

``λ`` is searched in three stages, several ``λ`` per DP pass: a bracket of the budget from a DP on
a coarse share of the configurations (cheap), one DP on all of them on a grid around it (widened
until it brackets the budget), then a finer grid between the two bracketing plans with a DP on
the configurations they use. The two plans nearest the budget on either side are spliced
(:func:`mix_plans`: the slower, cheaper one wherever it fits), and a repair moves whole phases to
cheaper configurations while slack remains (:func:`phase_repair`, many phases per round). The
iteration-level plan (one phase) is always a candidate, so the result is never worse than it.
With no switch costs and no dwell (``L = 0``) the problem is exactly the switch-free knapsack and
:func:`~joulebound.planning.solve.solve` answers it.

Plans repeat every iteration (``cyclic``, the default): the first phase must last ``D`` too and
the switch back to it at the iteration boundary is charged. The DP plans one iteration with a
free first phase; a first phase shorter than ``D`` is joined to the second afterwards
(:func:`lengthen_first_phase`), not optimised jointly.
"""

from __future__ import annotations

import logging
import time as _time

import numpy as np

from joulebound.core.errors import JouleboundError
from joulebound.gpumodel.characterization import Characterization
from joulebound.planning.plan import Plan
from joulebound.planning.solve.objectives import REL_TOL, plan_provenance, solve
from joulebound.planning.solve.problem import baseline_column, baseline_totals, planning_columns

_log = logging.getLogger(__name__)

def dp_lagrangian(t: np.ndarray, e: np.ndarray, lams: np.ndarray, dwell_s: float,
                  switch_energy_j: float = 0.0, switch_time_s: float = 0.0, *,
                  columns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact minimiser of ``Σ e + λ Σ t + n_sw (E_sw + λ T_sw)`` under the dwell rule, per ``λ``.

    Args:
        t, e: (K, C) time (s) and energy (J) per kernel × configuration (read in place, never
            copied; non-float64 tables are converted once).
        lams: (L,) multipliers (J/s), >= 0.
        dwell_s: minimum duration of every phase but the first (s).
        columns: the columns of ``t``/``e`` to plan over (default: all); choices index them.

    Returns:
        ``(choice, value)``: (L, K) configuration column per kernel, and (L,) optimal values.

    With ``Q_c[s]`` the cost of kernels ``0..s-1`` at configuration ``c`` (prefix sums of
    ``e + λ t``) and ``h[k]`` the optimum up to kernel ``k``, a phase in ``c`` entered at
    kernel ``s`` from the best state at ``s - 1`` has the "entry" ``E[s, c] = h[s-1] + sw -
    Q_c[s]``, and the best plan ending at ``k`` in ``c`` costs ``M[s_max(k, c), c] + Q_c[k+1]``
    where ``M`` is the running minimum of ``E`` over ``s`` (``E[0, c] = 0``: the first phase
    needs no dwell) and ``s_max(k, c)`` the latest start whose phase lasts ``dwell_s`` by
    ``k``. ``s_max`` only grows with ``k``, so one pointer per configuration absorbs the
    entries as it advances and only the running minimum (and the start attaining it, the
    earliest on ties) is kept: O(K·C·L) time, O(C·L) working state plus O(K·L) pointers
    (:func:`~joulebound.planning.solve.dp_kernel.dp_forward`, compiled). Each kernel records the
    best state and its phase start, and the plan is read back phase by phase.
    """
    from joulebound.planning.solve.dp_kernel import LANES, dp_backtrack, dp_forward

    lams = np.asarray(lams, np.float64)
    t = np.asarray(t, np.float64)
    e = np.asarray(e, np.float64)
    k_n = t.shape[0]
    sel = np.arange(t.shape[1]) if columns is None else np.asarray(columns, np.int64)
    n_l = len(lams)
    if np.any(lams < 0) or not np.all(np.isfinite(lams)):
        raise JouleboundError(f"multipliers must be finite and >= 0, got {lams}")
    sw = switch_energy_j + lams * switch_time_s                      # (L,)
    # lanes of LANES multipliers: pad with the last one (computed, then ignored)
    n_pad = -(-max(n_l, 1) // LANES) * LANES
    pad = np.full(n_pad - n_l, lams[-1] if n_l else 0.0)
    lams_p = np.concatenate([lams, pad])
    sw_p = np.concatenate([sw, switch_energy_j + pad * switch_time_s])
    idx_t = np.int32 if k_n < 2**31 - 1 else np.int64
    best_c = np.empty((k_n, n_l), np.int32)       # best state after kernel k
    best_start = np.empty((k_n, n_l), idx_t)      # ... and the start of its phase
    values, finite = dp_forward(t, e, sel, lams_p, sw_p, n_l, float(dwell_s), best_c, best_start)
    if not finite:
        raise JouleboundError("the time/energy table has NaN or infinite entries in the planned "
                              "columns; the switch-aware DP needs finite values")
    return dp_backtrack(best_c, best_start), values


def useful_columns(t: np.ndarray, e: np.ndarray, columns: np.ndarray | None = None, *,
                   sample_rows: int = 128) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Columns not dominated by another, and the column totals, in one pass over the table.

    A column is dominated when another is no slower and no costlier on every kernel (identical
    columns: the first is kept). Such a column never improves a plan (up to the dwell rule: its
    dominator is never slower, so a phase can only get shorter). Candidates come from an evenly
    spaced sample of ``sample_rows`` rows; each dropped column's dominator (one the sample keeps)
    is then checked on every row, and the column is kept if the check fails. So a column is
    dropped only when truly dominated; one the sample's choice of dominator misses is kept (it
    costs DP time, never plan quality).

    Returns:
        ``(keep, time_s, energy_j)``: positions into ``columns`` (default: all columns) of the
        kept ones, and the (len(columns),) sums of time (s) and energy (J) over the kernels.
    """
    from joulebound.planning.solve.dp_kernel import column_scan

    t = np.asarray(t, np.float64)
    e = np.asarray(e, np.float64)
    sel = np.arange(t.shape[1]) if columns is None else np.asarray(columns, np.int64)
    k_n, c_n = t.shape[0], len(sel)
    dropped = np.zeros(c_n, bool)
    a = b = np.zeros(0, np.int64)
    if c_n >= 2 and k_n:
        rows = np.unique(np.linspace(0, k_n - 1, min(k_n, sample_rows)).round().astype(np.int64))
        both = np.unique(np.concatenate([t[rows][:, sel], e[rows][:, sel]], axis=1), axis=0)
        ts, es = both[:, :c_n], both[:, c_n:]        # the distinct sampled rows
        dom = np.ones((c_n, c_n), bool)              # dom[a, b]: a <= b on every sampled row
        for lo in range(0, len(ts), 16):
            ta, ea = ts[lo:lo + 16], es[lo:lo + 16]
            dom &= ((ta[:, :, None] <= ta[:, None, :]) & (ea[:, :, None] <= ea[:, None, :])).all(0)
        np.fill_diagonal(dom, False)
        same = dom & dom.T                           # identical on the sample: first one wins
        beats = dom & (~same | (np.arange(c_n)[:, None] < np.arange(c_n)[None, :]))
        dropped = beats.any(0)
        # a dominator the sample keeps: "beats" is a strict partial order, so one exists
        b = np.flatnonzero(dropped)
        a = np.argmax(beats[:, b] & ~dropped[:, None], axis=0)
    sum_t, sum_e, ok = column_scan(t, e, sel, sel[a], sel[b])
    dropped[b[~ok]] = False
    return np.flatnonzero(~dropped), sum_t, sum_e


def _totals(t: np.ndarray, e: np.ndarray, choice: np.ndarray, sw_e: float, sw_t: float,
            sel: np.ndarray | None = None, cyclic: bool = False
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time s, energy J, switches) of each plan, switch costs included: ``choice`` is (K,) or
    (L, K), kernel ``k`` at column ``sel[choice[..., k]]`` (``sel`` default: all columns); one
    pass over the table for all plans. ``cyclic``: the plan repeats, so a last phase unlike the
    first switches back to it. Returns floats/int for one plan, (L,) arrays for L."""
    from joulebound.planning.solve.dp_kernel import plan_sums

    sel = np.arange(t.shape[1]) if sel is None else np.asarray(sel, np.int64)
    ch = np.asarray(choice, np.int64)
    ch2 = np.atleast_2d(ch)
    tt, ee, n_sw = plan_sums(np.asarray(t, np.float64), np.asarray(e, np.float64), sel, ch2)
    if cyclic and ch2.shape[1]:
        n_sw = n_sw + (ch2[:, 0] != ch2[:, -1])
    tt, ee = tt + n_sw * sw_t, ee + n_sw * sw_e
    if ch.ndim == 1:
        return float(tt[0]), float(ee[0]), int(n_sw[0])
    return tt, ee, n_sw


def _boundaries(choice: np.ndarray) -> np.ndarray:
    """0, the first kernel of every phase after the first, and K."""
    return np.concatenate([[0], np.flatnonzero(np.diff(choice)) + 1, [len(choice)]])


def _pick_nonadjacent(phase: np.ndarray, order: np.ndarray, n_p: int,
                      cyclic: bool = False) -> np.ndarray:
    """Positions (into ``phase``), taken in ``order``, of moves on pairwise non-adjacent phases
    (``cyclic``: the first and the last phase are neighbours too)."""
    blocked = np.zeros(n_p + 2, bool)
    out = []
    for i in order:
        p = int(phase[i]) + 1
        if not blocked[p]:
            out.append(i)
            blocked[p - 1:p + 2] = True
            if cyclic and p == 1:
                blocked[n_p] = True
            if cyclic and p == n_p:
                blocked[1] = True
    return np.asarray(out, np.int64)


def lengthen_first_phase(t: np.ndarray, choice: np.ndarray, dwell_s: float,
                         columns: np.ndarray | None = None) -> np.ndarray:
    """``choice`` (indexing ``columns`` of ``t``) with a first phase shorter than ``dwell_s`` (s)
    given the second phase's configuration, which it then joins.

    A training loop repeats the plan every iteration, so a controller also switches back to the
    first phase's clocks at the iteration boundary; that switch lands on time only if the first
    phase, like every other, lasts the dwell. The DP needs no dwell of the first phase (it plans
    one iteration on its own), and may keep a short one; joined to the second phase it lasts at
    least as long as the second, which meets the dwell.
    """
    sel = np.arange(t.shape[1]) if columns is None else np.asarray(columns, np.int64)
    b = _boundaries(choice)
    if len(b) <= 2:
        return choice
    end = int(b[1])
    if float(np.asarray(t[:end, sel[choice[0]]], np.float64).sum()) >= dwell_s:
        return choice
    out = choice.copy()
    out[:end] = choice[end]
    return out


def phase_repair(t: np.ndarray, e: np.ndarray, choice: np.ndarray, budget: float, dwell_s: float,
                 sw_e: float = 0.0, sw_t: float = 0.0, rounds: int = 200, *,
                 columns: np.ndarray | None = None, cyclic: bool = False) -> np.ndarray:
    """Move whole phases to configurations that save energy while time slack and dwell allow.

    ``cyclic``: the plan repeats every iteration (the first phase must last the dwell too, and
    a last phase unlike the first is followed by a switch back to it).

    ``choice`` indexes ``columns`` of ``t``/``e`` (default: all columns); so does the result.
    A phase is only ever moved whole, so phases merge but never split: its sums at every
    configuration are taken once (one pass over the table, O(phases · C) memory) and added on
    merges. Each round makes many moves at once, on phases no two of which are neighbours (so
    each move's change in switches is exact): every move that saves energy without costing
    time, else the moves that save the most energy per second of slack, best first, while the
    slack lasts. Rounds repeat until no move helps (at most ``rounds``).
    """
    from joulebound.planning.solve.dp_kernel import segment_sums

    sel = np.arange(t.shape[1]) if columns is None else np.asarray(columns, np.int64)
    c_n = len(sel)
    choice = np.asarray(choice, np.int64)
    a = _boundaries(choice)[:-1]                                 # phase starts
    cur = choice[a]
    tp, ep = segment_sums(np.asarray(t, np.float64), np.asarray(e, np.float64), sel, a)
    cfg = np.arange(c_n)[None, :]
    n_rounds = 0
    for _ in range(rounds):
        n_rounds += 1
        n_p = len(a)
        rows = np.arange(n_p)
        tt, ee = tp[rows, cur], ep[rows, cur]
        n_sw = n_p - 1 + int(cyclic and cur[0] != cur[-1])
        tot_t = float(tt.sum()) + n_sw * sw_t
        tot_e = float(ee.sum()) + n_sw * sw_e
        slack = budget - tot_t
        wrap = cyclic and n_p > 1                # phase 0 follows the last one
        prev_c = np.concatenate([[cur[-1] if wrap else -1], cur[:-1]])
        next_c = np.concatenate([cur[1:], [cur[0] if wrap else -1]])
        # switches around phase p after moving it to each configuration, minus before
        d_sw = (((prev_c[:, None] >= 0) & (prev_c[:, None] != cfg)).astype(np.int8)
                + ((next_c[:, None] >= 0) & (next_c[:, None] != cfg))
                - (((prev_c >= 0) & (prev_c != cur)).astype(np.int8)
                   + ((next_c >= 0) & (next_c != cur)))[:, None])
        d_t = tp - tt[:, None]
        d_e = ep - ee[:, None]
        if sw_t:
            d_t += d_sw * sw_t
        if sw_e:
            d_e += d_sw * sw_e
        ok = (d_e < -1e-15 * max(abs(tot_e), 1.0)) & (d_t <= slack)
        ok[0 if cyclic else 1:] &= tp[0 if cyclic else 1:] >= dwell_s
        ok[rows, cur] = False
        if not ok.any():
            break
        free = ok & (d_t <= 0)
        if free.any():                           # save energy and time: the biggest saving
            score = np.where(free, d_e, np.inf)
        else:                                    # most energy per second of slack
            score = np.where(ok, d_e / np.maximum(d_t, 1e-300), np.inf)
        move = score.argmin(1)
        phase = np.flatnonzero(np.isfinite(score[rows, move]))
        move = move[phase]
        take = _pick_nonadjacent(phase, np.argsort(score[phase, move], kind="stable"), n_p,
                                 wrap)
        if not free.any():                       # ... while the slack lasts
            used = np.cumsum(d_t[phase[take], move[take]])
            take = take[:max(1, int(np.searchsorted(used, slack, side="right")))]
            # ... unless the single biggest saving beats them all (much slack, few phases)
            p1, c1 = divmod(int(np.argmin(np.where(ok, d_e, np.inf))), c_n)
            if d_e[p1, c1] < d_e[phase[take], move[take]].sum():
                phase, move, take = np.array([p1]), np.array([c1]), np.array([0])
        cur = cur.copy()
        cur[phase[take]] = move[take]
        keep = np.concatenate([[True], cur[1:] != cur[:-1]])    # merge with equal neighbours
        if not keep.all():
            tp = np.add.reduceat(tp, np.flatnonzero(keep), axis=0)
            ep = np.add.reduceat(ep, np.flatnonzero(keep), axis=0)
        a, cur = a[keep], cur[keep]
    _log.debug("phase repair: %d rounds, %d phases left", n_rounds, len(a))
    return np.repeat(cur, np.diff(np.concatenate([a, [len(choice)]])))


def _phases_last(d: np.ndarray, plan: np.ndarray, dwell_s: float) -> bool:
    """Whether every phase of ``plan`` after the first lasts ``dwell_s`` (``d``: each kernel's
    duration at its chosen configuration, s)."""
    cuts = _boundaries(plan)
    return bool((np.add.reduceat(d, cuts[:-1])[1:] >= dwell_s).all()) if len(cuts) > 2 else True


def _cuts_keeping_dwell(cand: np.ndarray, starts: np.ndarray, d: np.ndarray,
                        dwell_s: float) -> np.ndarray:
    """The cuts among sorted ``cand`` that split no phase of a plan (phase starts ``starts``,
    durations ``d`` per kernel, s) into a piece shorter than ``dwell_s``: scanning each phase,
    a cut is kept when the piece since the previous kept cut (or the phase start; not counted
    for the plan's first phase, which needs no dwell) and the rest of the phase both last it."""
    pre = np.concatenate([[0.0], np.cumsum(d)])
    phase = np.searchsorted(starts, cand, side="right") - 1
    ends = np.append(starts[1:], len(d))
    keep = np.ones(len(cand), bool)
    inside = np.flatnonzero(cand != starts[phase])
    last_phase, last = -1, 0
    for i in inside:
        p, s = int(phase[i]), int(cand[i])
        if p != last_phase:
            last_phase, last = p, int(starts[p])
        if ((last == 0 or pre[s] - pre[last] >= dwell_s)
                and pre[ends[p]] - pre[s] >= dwell_s):
            last = s
        else:
            keep[i] = False
    return cand[keep]


def mix_plans(t: np.ndarray, e: np.ndarray, cheap: np.ndarray, fast: np.ndarray, budget: float,
              sw_e: float = 0.0, sw_t: float = 0.0, *, dwell_s: float = 0.0,
              columns: np.ndarray | None = None) -> np.ndarray:
    """The least-energy splice of two plans within ``budget``: ``fast`` (within budget) where
    ``cheap`` (slower, cheaper in energy) does not fit.

    The plans are cut at their phase starts, except where a cut would leave a piece of the
    other plan's phase shorter than ``dwell_s`` (s); between two cuts either plan is kept, so
    every phase of the result is made of pieces that each last the dwell (checked again on the
    result). Segments of ``cheap`` that save energy without costing time are always taken, then
    those that save the most energy per second, as many as fit in the budget (switches at the
    cuts counted exactly; the result's totals rechecked in one pass). Choices index
    ``columns`` (default all).
    """
    sel = np.arange(t.shape[1]) if columns is None else np.asarray(columns, np.int64)
    k_n = len(fast)
    if k_n == 0 or np.array_equal(cheap, fast):
        return fast.copy()
    rows = np.arange(k_n)
    d_c = np.asarray(t[rows, sel[cheap]], np.float64)
    d_f = np.asarray(t[rows, sel[fast]], np.float64)
    st_c, st_f = _boundaries(cheap)[:-1], _boundaries(fast)[:-1]
    cut = np.union1d(st_c, st_f)
    cut = _cuts_keeping_dwell(cut, st_c, d_c, dwell_s)
    cut = _cuts_keeping_dwell(cut, st_f, d_f, dwell_s)        # (cut[0] == 0 stays)
    both = np.zeros(k_n, bool)
    both[cut] = True
    seg = np.cumsum(both) - 1                                   # segment of every kernel
    start_c = np.zeros(k_n, np.int64)
    start_f = np.zeros(k_n, np.int64)
    start_c[st_c] = 1
    start_f[st_f] = 1
    start_c[cut], start_f[cut] = 1, 1                           # (counted at the cuts below)
    # per segment: time/energy and switches inside it under either plan; the switch at a cut
    # depends on the plans on both sides
    seg_t = np.stack([np.add.reduceat(d_f, cut), np.add.reduceat(d_c, cut)])
    seg_e = np.stack([np.add.reduceat(np.asarray(e[rows, sel[fast]], np.float64), cut),
                      np.add.reduceat(np.asarray(e[rows, sel[cheap]], np.float64), cut)])
    inner = np.stack([np.add.reduceat(start_f, cut), np.add.reduceat(start_c, cut)]) - 1
    first = np.stack([fast[cut], cheap[cut]])
    last_k = np.append(cut[1:], k_n) - 1
    last = np.stack([fast[last_k], cheap[last_k]])
    d_t = seg_t[1] - seg_t[0] + (inner[1] - inner[0]) * sw_t
    d_e = seg_e[1] - seg_e[0] + (inner[1] - inner[0]) * sw_e
    free = (d_e < 0) & (d_t <= 0)
    paid = np.flatnonzero((d_e < 0) & (d_t > 0))
    paid = paid[np.argsort(d_e[paid] / d_t[paid], kind="stable")]
    idx = np.arange(len(cut))

    def take(n: int) -> np.ndarray:
        out = free.copy()
        out[paid[:n]] = True
        return out.astype(np.int64)

    def time_of(n: int) -> float:
        w = take(n)
        n_sw = int(inner[w, idx].sum()) + int(np.count_nonzero(last[w[:-1], idx[:-1]]
                                                                != first[w[1:], idx[1:]]))
        return float(seg_t[w, idx].sum()) + n_sw * sw_t

    lo, hi = -1, len(paid)                # the most segments that fit (time grows with n)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if time_of(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    while lo >= 0:                        # recheck in row order (the sums' rounding differs)
        w = take(lo)[seg] == 1
        out = np.where(w, cheap, fast)
        if (_totals(t, e, out, sw_e, sw_t, sel)[0] <= budget
                and _phases_last(np.where(w, d_c, d_f), out, dwell_s)):
            return out
        lo -= 1
    return fast.copy()


#: DP states of the λ search's first stage (evenly spaced over the DP's configurations)
COARSE_COLUMNS = 24


def _bracket(evaluate, lams: np.ndarray, lam_top: float, n_lambda: int,
             rounds: int) -> tuple[float, float, int]:
    """Multiplier bracket ``(lo, hi)``: ``lo`` the largest tried λ whose plan is over budget
    (0 if none), ``hi`` the smallest within it (inf if none); refined ``rounds - 1`` times on a
    linear grid; raised geometrically while no plan fits. ``evaluate(lams)`` returns one
    within-budget flag per λ. Returns the bracket and the number of DP passes."""
    lo, hi = 0.0, np.inf
    passes = 0
    for r in range(rounds + 2):
        fit = evaluate(lams)
        passes += 1
        for lam, ok in zip(lams, fit, strict=True):
            if ok:
                hi = min(hi, float(lam))
            else:
                lo = max(lo, float(lam))
        if r + 1 >= rounds and np.isfinite(hi):
            break
        if not np.isfinite(hi):
            lams = max(float(lams[-1]), lam_top) * np.geomspace(2.0, 2.0**12, n_lambda)
            continue
        lams = np.linspace(lo, hi, n_lambda + 2)[1:-1]
    return lo, hi, passes


def plan_switch_aware(char: Characterization, *, slowdown: float = 0.0,
                      switch_latency_s: float = 0.0, min_dwell_s: float = 0.0,
                      switch_energy_j: float = 0.0, switch_time_s: float = 0.0,
                      allow_auto: bool = True, n_lambda: int = 12, full_lambda: int = 4,
                      rounds: int = 2, repair: bool = True, dp_columns: int = 0,
                      cyclic: bool = True) -> Plan:
    """Least-energy phases within ``(1 + slowdown) · T_auto`` under switch latency and dwell.

    Args:
        char: time (s) / energy (J) per kernel × configuration, rows in execution order.
        slowdown: allowed slowdown ε (0.01 = 1 %).
        switch_latency_s: clock-switch latency L (s); every phase lasts >= L (with
            ``cyclic=False``, every phase after the first).
        min_dwell_s: an extra minimum phase duration (s); the rule uses max(L, min_dwell_s).
        switch_energy_j / switch_time_s: energy (J) and stall (s) charged per switch.
        n_lambda: multipliers per DP pass on a share of the configurations (cheap).
        full_lambda: multipliers of the DP pass on all of them (the costly one).
        rounds: DP passes of the multiplier search on a coarse share of the configurations,
            and again on the configurations the bracketing plans use (the full DP runs once
            in between, again only if its grid misses the bracket).
        repair: move whole phases to cheaper configurations while slack remains.
        dp_columns: at most this many configurations as DP states (evenly spaced over the useful
            ones; 0: all); the phase repair then considers every useful configuration.
        cyclic: the plan is repeated every iteration, as a training loop runs it (the default):
            the first phase lasts the dwell too, so that the switch back to its clocks at the
            iteration boundary lands on time, and that switch, when the last phase's clocks
            differ, is charged and counted (``meta["n_switches"]`` is per iteration).
            ``False`` plans one iteration on its own.

    Returns:
        A :class:`Plan` with ``granularity="phase"``; predicted totals include switch costs;
        ``meta`` holds the dwell, switch costs, multiplier bracket and the number of DP passes.
    """
    t_start, cpu_start = _time.perf_counter(), _time.process_time()
    dwell = max(switch_latency_s, min_dwell_s)
    tb, eb = baseline_totals(char)
    budget = (1.0 + slowdown) * tb * (1.0 + REL_TOL)
    base_meta = {"min_dwell_s": dwell, "switch_energy_j": switch_energy_j,
                 "switch_time_s": switch_time_s, "cyclic": cyclic}
    if dwell == 0 and switch_energy_j == 0 and switch_time_s == 0:
        plan = solve(char, objective="relaxed" if slowdown else "waste", slowdown=slowdown,
                     allow_auto=allow_auto)
        plan.granularity = "phase"
        plan.meta.update(base_meta, dp="separable: switches are free, solved as the knapsack")
        return plan
    t, e = char.time_s, char.energy_j            # plans below index ``cols``
    cols = planning_columns(char, allow_auto)
    keep, tot_t, tot_e = useful_columns(t, e, cols)
    cols, tot_t, tot_e = cols[keep], tot_t[keep], tot_e[keep]
    if not (np.isfinite(tot_t).all() and np.isfinite(tot_e).all()):
        raise JouleboundError("the characterization has NaN or infinite time/energy cells; "
                              "re-run characterize or drop those configurations")
    # one phase: the best single configuration within budget (always includes the baseline)
    feas = np.flatnonzero(tot_t <= budget)
    if len(feas) == 0:
        tmin = float(tot_t.min())
        raise JouleboundError(
            f"no clock plan meets the time budget {budget:.6g} s; the smallest feasible slowdown "
            f"is {tmin / tb - 1:+.4%}")
    one = int(feas[np.argmin(tot_e[feas])])
    _log.debug("switch-aware plan: %d kernels, %d useful configurations of %d (%.2f CPU s)",
               char.n_kernels, len(cols), char.n_configs, _time.process_time() - cpu_start)
    # the DP's states: every useful configuration, or an evenly spaced share of them (plus the
    # one-phase best) when there are more than dp_columns; the phase repair below then moves
    # each phase to the best of *all* useful configurations, so a plan is never worse for it
    sub = np.arange(len(cols))
    if dp_columns and len(cols) > dp_columns:
        sub = np.union1d(np.linspace(0, len(cols) - 1, dp_columns).round().astype(np.int64), [one])
    dwell_dp = dwell * (1 + 1e-9)   # a hair longer than the rule so float sums never undercut it
    plans: dict[float, tuple[float, float, np.ndarray]] = {}    # λ -> (T s, E J, plan)
    passes = {"coarse": 0, "full": 0, "refine": 0}

    def evaluate(states: np.ndarray, stage: str):
        """DP over ``states`` (positions in ``cols``) for some λ; records the plans unless
        ``stage`` is "coarse" (a share of the states only locates the bracket)."""
        def run(lams: np.ndarray) -> np.ndarray:
            t0 = _time.process_time()
            ch, _ = dp_lagrangian(t, e, lams, dwell_dp, switch_energy_j, switch_time_s,
                                  columns=cols[states])
            ch = states[ch]
            if cyclic:
                ch = np.stack([lengthen_first_phase(t, c, dwell_dp, cols) for c in ch])
            tt, ee, _ = _totals(t, e, ch, switch_energy_j, switch_time_s, cols, cyclic)
            passes[stage] += 1
            if stage != "coarse":
                for i, lam in enumerate(lams):
                    plans[float(lam)] = (float(tt[i]), float(ee[i]), ch[i])
            _log.debug("DP pass (%s, %d states, %d multipliers): %.2f CPU s", stage,
                       len(states), len(lams), _time.process_time() - t0)
            return tt <= budget
        return run

    # the multiplier search. Stage 1: bracket the budget with a DP on a coarse share of the
    # states (a few columns: cheap); stage 2: one DP on all states over a geometric grid around
    # that bracket, widened until it brackets the budget; stage 3: refine the bracket with a DP
    # on the configurations its two plans use (between them, plans from a subset of the states
    # are valid candidates, at a fraction of the cost)
    scale = eb / tb                                             # average power (J/s)
    grid0 = np.concatenate([[0.0], scale * np.geomspace(1 / 16, 64.0, n_lambda - 1)])
    coarse = sub
    if len(sub) > COARSE_COLUMNS + 1:
        coarse = np.union1d(sub[np.linspace(0, len(sub) - 1, COARSE_COLUMNS).round()
                                .astype(np.int64)], [one] if one in sub else [])
    full = len(coarse) == len(sub)
    lo, hi, _ = _bracket(evaluate(coarse, "full" if full else "coarse"), grid0, scale, n_lambda,
                         rounds)
    _log.debug("multiplier bracket on %d states: [%.6g, %.6g] J/s", len(coarse), lo, hi)
    if not full:
        top = hi if np.isfinite(hi) else scale * 64.0
        bottom = lo if lo > 0 else top / 64.0
        lams = np.geomspace(bottom / 1.5, top * 1.5, full_lambda)
        if lo == 0:
            lams[0] = 0.0
        for _ in range(4):
            fit = evaluate(sub, "full")(lams)
            if fit.any() and not fit.all() or fit.all() and lams[0] == 0:
                break
            if not fit.any():
                lams = lams[-1] * np.geomspace(2.0, 2.0**12, full_lambda)
            else:
                lams = np.concatenate([[0.0], lams[0] * np.geomspace(2.0**-10, 0.5,
                                                                      full_lambda - 1)])

    def split() -> tuple[dict, dict]:
        return ({lam: v for lam, v in plans.items() if v[0] <= budget},
                {lam: v for lam, v in plans.items() if v[0] > budget})

    inside, over = split()
    if inside and over and not full:
        used = np.union1d(np.union1d(np.unique(over[max(over)][2]),
                                     np.unique(inside[min(inside)][2])), coarse)
        for _ in range(rounds if len(used) < len(sub) else 0):
            evaluate(used, "refine")(np.linspace(max(over), min(inside), n_lambda + 2)[1:-1])
            inside, over = split()
    lo = max(over) if over else 0.0
    hi = min(inside) if inside else np.inf
    candidates = [np.full(char.n_kernels, one, np.int64)]
    if inside:
        ranked = sorted(inside.values(), key=lambda v: v[1])
        best = ranked[0][2]
        if over:        # splice the over-budget plan nearest the bracket into the best one
            mixed = mix_plans(t, e, over[lo][2], best, budget, switch_energy_j, switch_time_s,
                              dwell_s=dwell_dp, columns=cols)
            if cyclic:
                mixed = lengthen_first_phase(t, mixed, dwell_dp, cols)
            if _totals(t, e, mixed, switch_energy_j, switch_time_s, cols, cyclic)[0] <= budget:
                best = mixed
        # repair the cheapest few others too: as many as ~2e7 kernel × configuration cells of
        # work allow (all of them on small problems, where a repaired plan from a farther
        # multiplier is sometimes best; none on large ones, where the splice is)
        n_more = int(np.clip(2e7 / (char.n_kernels * len(cols)), 0, len(ranked) - 1))
        candidates += [best] + [v[2] for v in ranked[1:1 + n_more]]
    if repair:
        t0 = _time.process_time()
        candidates[1:] = [phase_repair(t, e, c, budget, dwell_dp, switch_energy_j,
                                       switch_time_s, columns=cols, cyclic=cyclic)
                          for c in candidates[1:]]
        _log.debug("phase repair of %d plans: %.2f CPU s", len(candidates) - 1,
                   _time.process_time() - t0)
    tt, ee, n_sw = _totals(t, e, np.stack(candidates), switch_energy_j, switch_time_s, cols,
                           cyclic)
    i = int(np.argmin(np.where(tt <= budget, ee, np.inf)))     # (the one-phase plan fits)
    choice = cols[candidates[i]]
    prov = plan_provenance(char, choice)
    return Plan(device=char.device, kernel_names=list(char.kernel_names),
                configs=list(char.configs), choice=choice, granularity="phase",
                objective="relaxed" if slowdown else "waste", slowdown=slowdown,
                switch_latency_s=switch_latency_s, predicted_time_s=float(tt[i]),
                predicted_energy_j=float(ee[i]), baseline_time_s=tb, baseline_energy_j=eb,
                provenance=prov,
                meta={**base_meta, "baseline_config": char.configs[baseline_column(char)].label,
                      "dp_passes": sum(passes.values()), "dp_passes_by_stage": dict(passes),
                      "lambda_bracket_j_per_s": [lo, hi],
                      "dp_columns": len(sub), "useful_columns": len(cols),
                      "budget_s": budget, "n_switches": int(n_sw[i]),
                      "solve_time_s": _time.perf_counter() - t_start})

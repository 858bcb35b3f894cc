"""Switch-aware clock planning: a dynamic program over clock states along the kernel sequence.

Spaan et al. pick one clock pair per kernel as if switching were free. Real clock changes take
latency ``L`` (6 ms on H200 to 150 ms on Turing; NVML set-calls 10–20 ms) and one cannot start
before the previous one has taken effect. This planner returns *phases* — runs of consecutive
kernels at one clock configuration — such that

* every phase after the first lasts at least ``D = max(L, min_dwell_s)`` at its own clocks, so a
  controller that knows the schedule can issue each request ``L`` ahead of its phase and every
  switch lands on time (see :mod:`joulebound.dvfs.simulate`);
* every switch optionally costs energy ``switch_energy_j`` (J) and a stall ``switch_time_s`` (s);
* total time (kernels + stalls) stays within ``(1 + slowdown) · T_auto`` and energy is least.

Method: Lagrangian relaxation of the time budget. For a multiplier ``λ`` (J/s) the DP minimises
``Σ (e + λ t) + n_switches · (E_sw + λ T_sw)`` exactly over all phase structures meeting the dwell
rule. States are the clock configurations; a phase entered at kernel ``s`` comes from the best
state at ``s - 1`` (the "stay vs. switch from best" trick), and the best plan ending at ``k`` in
``c`` is the least such entry up to the latest start whose phase lasts ``D`` by ``k``, plus a
prefix sum: O(K·C) overall, computed in blocks of kernels vectorized over configurations and
``λ``, chunk by chunk (no K × C arrays; :func:`dp_lagrangian`). Each entry keeps its phase
start and each kernel the best state's, so the plan is read back phase by phase. ``λ`` is
searched on a grid refined around the budget (several ``λ`` per DP pass, vectorized), the best
feasible plan is kept, and a repair pass moves whole phases to cheaper configurations while
slack remains. The iteration-level plan (one phase) is always a candidate, so the result is never
worse than it. With no switch costs and no dwell (``L = 0``) the problem is exactly the
switch-free knapsack and :func:`~joulebound.dvfs.solve.solve` answers it.

Plans repeat every iteration (``cyclic``, the default): the first phase must last ``D`` too and
the switch back to it at the iteration boundary is charged. The DP plans one iteration with a
free first phase; a first phase shorter than ``D`` is joined to the second afterwards
(:func:`lengthen_first_phase`), not optimised jointly.
"""

from __future__ import annotations

import time as _time

import numpy as np

from ...errors import JouleboundError
from ..characterization import Characterization
from ..plan import Plan
from .hull import unique_rows
from .objectives import REL_TOL, plan_provenance, solve
from .problem import baseline_column, baseline_totals, planning_columns

#: published clock-switch latencies (s) usable as presets (DESIGN.md; Spaan et al. and others)
LATENCY_PRESETS: dict[str, float] = {
    "h200": 6e-3, "nvml-set-call-low": 10e-3, "nvml-set-call-high": 20e-3, "turing": 150e-3,
}


def parse_duration(text: str | float) -> float:
    """Seconds from ``"10ms"``, ``"150 ms"``, ``"1.5s"``, ``"200us"`` or a number (seconds);
    see :func:`joulebound.units.parse_duration`."""
    from ...units import parse_duration as _parse

    return _parse(text)


def _prefix_rows(x: np.ndarray, carry: np.ndarray) -> np.ndarray:
    """Rows ``carry, carry + x[0], ...``: the running sum continued from ``carry``, added in the
    same order as one ``np.cumsum`` over the whole table (so chunked sums are bit-identical)."""
    out = np.empty((len(x) + 1, x.shape[1]))
    out[0] = carry
    out[1:] = x
    np.cumsum(out, axis=0, out=out)
    return out


def dp_lagrangian(t: np.ndarray, e: np.ndarray, lams: np.ndarray, dwell_s: float,
                  switch_energy_j: float = 0.0, switch_time_s: float = 0.0, *,
                  columns: np.ndarray | None = None,
                  chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Exact minimiser of ``Σ e + λ Σ t + n_sw (E_sw + λ T_sw)`` under the dwell rule, per ``λ``.

    Args:
        t, e: (K, C) time (s) and energy (J) per kernel × configuration (read a chunk of rows
            at a time; never copied whole).
        lams: (L,) multipliers (J/s), >= 0.
        dwell_s: minimum duration of every phase but the first (s).
        columns: the columns of ``t``/``e`` to plan over (default: all); choices index them.
        chunk: kernels whose prefix sums and dwell windows are prepared at once.

    Returns:
        ``(choice, value)``: (L, K) configuration column per kernel, and (L,) optimal values.

    With ``Q_c[s]`` the cost of kernels ``0..s-1`` at configuration ``c`` (prefix sums of
    ``e + λ t``) and ``h[k]`` the optimum up to kernel ``k``, a phase in ``c`` entered at
    kernel ``s`` from the best state at ``s - 1`` has the "entry" ``E[s, c] = h[s-1] + sw -
    Q_c[s]``, and the best plan ending at ``k`` in ``c`` costs ``M[s_max(k, c), c] + Q_c[k+1]``
    where ``M`` is the running minimum of ``E`` over ``s`` (``E[0, c] = 0``: the first phase
    needs no dwell) and ``s_max(k, c)`` the latest start whose phase lasts ``dwell_s`` by
    ``k``. ``h[k]`` depends on ``h`` only up to ``max_c s_max(k, c) - 1``, so kernels come in
    blocks (up to the next one that reaches a not yet computed entry) that are computed at
    once for every configuration and ``λ``: O(K·C·L) work, O((chunk + window)·C·L) memory.
    Each entry keeps the start of its phase (the earliest on ties, as a phase that is not
    switched keeps its start); each kernel records the best state and its phase start, and
    the plan is read back phase by phase.
    """
    lams = np.asarray(lams, np.float64)
    k_n = t.shape[0]
    sel = np.arange(t.shape[1]) if columns is None else np.asarray(columns, np.int64)
    c_n, n_l = len(sel), len(lams)
    whole = columns is None or (c_n == t.shape[1] and np.array_equal(sel, np.arange(c_n)))
    sw = switch_energy_j + lams * switch_time_s                      # (L,)
    idx_t = np.int32 if k_n < 2**31 - 1 else np.int64
    best_c = np.empty((k_n, n_l), np.int32)       # best state after kernel k
    best_start = np.empty((k_n, n_l), idx_t)      # ... and the start of its phase
    # entries' running minimum M and its phase start A, rows s = base .. (window + chunk)
    cap = 2 * chunk + 2
    m_buf = np.empty((cap, c_n, n_l))
    a_buf = np.empty((cap, c_n, n_l), idx_t)
    m_buf[0] = 0.0
    a_buf[0] = 0
    base = 0                                      # s of row 0 of m_buf / a_buf / prefix rows
    p_buf = np.zeros((cap, c_n, 2))               # prefix sums (time, energy) before kernel s
    weights = np.stack([lams, np.ones(n_l)])      # (2, L): Q = λ · PT + PE
    ar_c = np.arange(c_n)
    ar_l = np.arange(n_l)
    s_index = np.empty((chunk, 1, 1), idx_t)
    h = np.zeros(n_l)
    prev_smax = np.zeros(c_n, np.int64)           # s_max(lo - 1, c)
    for lo in range(0, k_n, chunk):
        hi = min(k_n, lo + chunk)
        tc = np.asarray(t[lo:hi] if whole else t[lo:hi][:, sel], np.float64)
        ec = np.asarray(e[lo:hi] if whole else e[lo:hi][:, sel], np.float64)
        new_base = int(prev_smax.min())           # no later kernel reaches an entry before it
        keep = lo - new_base + 1                  # rows new_base .. lo
        old = slice(new_base - base, lo - base + 1)
        if keep + (hi - lo) > cap:                # grow: a dwell longer than a chunk
            cap = 2 * (keep + (hi - lo))
            m2, a2 = np.empty((cap, c_n, n_l)), np.empty((cap, c_n, n_l), idx_t)
            p2 = np.empty((cap, c_n, 2))
            m2[:keep], a2[:keep], p2[:keep] = m_buf[old], a_buf[old], p_buf[old]
            m_buf, a_buf, p_buf = m2, a2, p2
        elif new_base > base:
            m_buf[:keep], a_buf[:keep], p_buf[:keep] = m_buf[old], a_buf[old], p_buf[old]
        base = new_base
        # prefix rows s = lo+1 .. hi continue row s = lo, added in np.cumsum's order
        p_buf[keep:keep + hi - lo, :, 0] = tc
        p_buf[keep:keep + hi - lo, :, 1] = ec
        run_rows = p_buf[keep - 1:keep + hi - lo]
        np.cumsum(run_rows, axis=0, out=run_rows)
        pre = p_buf
        pt = pre[:, :, 0]
        m_flat = m_buf.reshape(cap * c_n, n_l)
        a_flat = a_buf.reshape(cap * c_n, n_l)
        # s_max(k, c) for k in lo..hi-1: the latest s >= 1 with PT[s] + dwell <= PT[k+1]
        # (as min_block_end: the block from s ends by k), else 0; never beyond k
        s0 = max(base, 1)
        ends = (pt[s0 - base:hi - base] + dwell_s).T.copy()      # (C, n): PT[s] + dwell
        reach_t = pt[lo + 1 - base:hi + 1 - base].T.copy()       # (C, hi - lo): PT[k + 1]
        smax = np.empty((c_n, hi - lo), np.int64)
        for j in range(c_n):
            smax[j] = np.searchsorted(ends[j], reach_t[j], side="right")
        smax = smax.T + (s0 - 1)
        np.maximum(smax, 0, out=smax)
        np.minimum(smax, np.arange(lo, hi)[:, None], out=smax)
        prev_smax = smax[-1]
        reach = smax.max(axis=1)                  # nondecreasing in k
        a = lo
        while a < hi:
            b = lo + int(np.searchsorted(reach, a, side="right"))   # first k reaching past a
            b = max(min(b, hi), a + 1)
            rows = slice(a + 1 - base, b + 1 - base)                 # prefix rows s = a+1..b
            q = (pre[rows].reshape(-1, 2) @ weights).reshape(b - a, c_n, n_l)   # Q[k + 1]
            sm = smax[a - lo:b - lo]                                 # (B, C)
            flat = (sm - base) * c_n + ar_c
            v = m_flat.take(flat.ravel(), axis=0).reshape(b - a, c_n, n_l)
            v += q
            bc = v.argmin(axis=1)                                    # (B, L)
            cell = (np.arange(b - a)[:, None] * c_n + bc) * n_l + ar_l   # (B, L) into v
            hb = v.ravel()[cell]
            best_c[a:b] = bc
            best_start[a:b] = a_flat.ravel()[flat.ravel()[cell // n_l] * n_l + ar_l]
            h = hb[-1]
            n_new = min(b, k_n - 1) - a                              # entries s = a+1..
            s_index[:n_new] = np.arange(a + 1, a + 1 + n_new)[:, None, None]
            if n_new > 0:
                ent = (hb[:n_new] + sw)[:, None, :] - q[:n_new]
                r0 = a + 1 - base                                    # row of entry s = a + 1
                for r in range(n_new):
                    np.minimum(m_buf[r0 + r - 1], ent[r], out=m_buf[r0 + r])
                # an entry starts a new phase where it is strictly below the running minimum
                # (ties keep the earlier start); starts only grow, so a maximum carries them
                new_start = (ent < m_buf[r0 - 1:r0 - 1 + n_new]) * s_index[:n_new]
                for r in range(n_new):
                    np.maximum(a_buf[r0 + r - 1], new_start[r], out=a_buf[r0 + r])
            a = b
    values = h.copy()
    choice = np.empty((n_l, k_n), np.int64)
    for li in range(n_l):
        end = k_n
        c = int(best_c[k_n - 1, li])
        s0 = int(best_start[k_n - 1, li])
        while True:
            choice[li, s0:end] = c
            if s0 == 0:
                break
            end = s0
            c, s0 = int(best_c[s0 - 1, li]), int(best_start[s0 - 1, li])
    return choice, values


def useful_columns(t: np.ndarray, e: np.ndarray, max_work: float = 3e8) -> np.ndarray:
    """Columns not dominated on every kernel by another column (slower and costlier everywhere).

    Such a column never improves a plan (up to the dwell rule: its dominator is never slower, so
    a phase can only get shorter). Checked on the distinct rows; skipped (all columns kept) when
    rows × columns² exceeds ``max_work``.
    """
    reps, _ = unique_rows(t, e)
    c_n = t.shape[1]
    if len(reps) * c_n * c_n > max_work:
        return np.arange(c_n)
    tu, eu = t[reps], e[reps]
    dom = np.ones((c_n, c_n), bool)                  # dom[a, b]: a <= b on every kernel
    for lo in range(0, len(reps), 64):
        ta, ea = tu[lo:lo + 64], eu[lo:lo + 64]
        dom &= ((ta[:, :, None] <= ta[:, None, :]) & (ea[:, :, None] <= ea[:, None, :])).all(0)
    np.fill_diagonal(dom, False)
    same = dom & dom.T                               # identical columns: keep the first
    lower = np.arange(c_n)[:, None] < np.arange(c_n)[None, :]
    dominated = (dom & ~same).any(0) | (same & lower).any(0)
    return np.flatnonzero(~dominated)


def _totals(t: np.ndarray, e: np.ndarray, choice: np.ndarray, sw_e: float,
            sw_t: float, cyclic: bool = False) -> tuple[float, float, int]:
    """(time s, energy J, switches) of ``choice`` (columns of ``t``/``e``, one per kernel);
    ``cyclic``: the plan repeats, so a last phase unlike the first switches back to it."""
    rows = np.arange(len(choice))
    n_sw = int(np.count_nonzero(np.diff(choice))) + int(cyclic and choice[0] != choice[-1])
    return (float(t[rows, choice].sum()) + n_sw * sw_t,
            float(e[rows, choice].sum()) + n_sw * sw_e, n_sw)


def _prefix_at(x: np.ndarray, columns: np.ndarray, at: np.ndarray,
               chunk: int = 4096) -> np.ndarray:
    """(len(at), C) sums of ``x[:i, columns]`` for each sorted row index ``i`` in ``at``, the
    same floats as a whole-table ``np.cumsum`` (summed chunk by chunk, never all rows at once)."""
    out = np.empty((len(at), len(columns)))
    carry = np.zeros(len(columns))
    k_n = x.shape[0]
    for lo in range(0, k_n, chunk):
        hi = min(k_n, lo + chunk)
        pref = _prefix_rows(np.asarray(x[lo:hi][:, columns], np.float64), carry)
        i0, i1 = np.searchsorted(at, [lo, hi])
        out[i0:i1] = pref[at[i0:i1] - lo]
        carry = pref[-1]
    out[np.searchsorted(at, k_n):] = carry
    return out


def _boundaries(choice: np.ndarray) -> np.ndarray:
    """0, the first kernel of every phase after the first, and K."""
    return np.concatenate([[0], np.flatnonzero(np.diff(choice)) + 1, [len(choice)]])


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
    if float(t[:end, sel[choice[0]]].sum()) >= dwell_s:
        return choice
    out = choice.copy()
    out[:end] = choice[end]
    return out


def phase_repair(t: np.ndarray, e: np.ndarray, choice: np.ndarray, budget: float, dwell_s: float,
                 sw_e: float = 0.0, sw_t: float = 0.0, rounds: int = 50, *,
                 columns: np.ndarray | None = None,
                 prefix: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                 cyclic: bool = False) -> np.ndarray:
    """Move whole phases to configurations that save energy while time slack and dwell allow.

    ``cyclic``: the plan repeats every iteration (the first phase must last the dwell too, and
    a last phase unlike the first is followed by a switch back to it).

    ``choice`` indexes ``columns`` of ``t``/``e`` (default: all columns); so does the result.
    A phase is only ever moved whole, so phases merge but never split: sums of ``t``/``e`` are
    needed only at the first plan's phase boundaries (O(phases · C) memory, one pass over K).
    ``prefix``: ``(at, pt, pe)`` from :func:`_prefix_at` at sorted rows ``at`` that include
    those boundaries (to share one pass among several plans).
    """
    k_n = t.shape[0]
    sel = np.arange(t.shape[1]) if columns is None else np.asarray(columns, np.int64)
    c_n = len(sel)
    choice = choice.copy()
    if prefix is None:
        at = _boundaries(choice)
        pt, pe = _prefix_at(t, sel, at), _prefix_at(e, sel, at)
    else:
        at, pt, pe = prefix
    rows_k = np.arange(k_n)
    tg, eg = t[rows_k, sel[choice]], e[rows_k, sel[choice]]     # (K,) at the chosen configs
    a = _boundaries(choice)[:-1]                                 # phase starts
    cur = choice[a]
    for _ in range(rounds):
        # == _totals(t, e, sel[choice], ..., cyclic), from O(K) sums
        n_sw = len(a) - 1 + int(cyclic and cur[0] != cur[-1])
        tot_t, tot_e = float(tg.sum()) + n_sw * sw_t, float(eg.sum()) + n_sw * sw_e
        slack = budget - tot_t
        b = np.concatenate([a[1:], [k_n]])
        ia, ib = np.searchsorted(at, a), np.searchsorted(at, b)
        tp = pt[ib] - pt[ia]                     # (P, C) phase time at each config
        ep = pe[ib] - pe[ia]
        n_p = len(a)
        rows = np.arange(n_p)
        wrap = cyclic and n_p > 1                # phase 0 follows the last one
        prev_c = np.concatenate([[cur[-1] if wrap else -1], cur[:-1]])
        next_c = np.concatenate([cur[1:], [cur[0] if wrap else -1]])
        cfg = np.arange(c_n)[None, :]
        # switches around phase p before/after the change
        before = ((prev_c >= 0) & (prev_c != cur)).astype(int) + \
                 ((next_c >= 0) & (next_c != cur)).astype(int)
        after = ((prev_c[:, None] >= 0) & (prev_c[:, None] != cfg)).astype(int) + \
                ((next_c[:, None] >= 0) & (next_c[:, None] != cfg)).astype(int)
        d_sw = after - before[:, None]
        d_t = tp - tp[rows, cur][:, None] + d_sw * sw_t
        d_e = ep - ep[rows, cur][:, None] + d_sw * sw_e
        ok = (d_t <= slack) & (d_e < -1e-15 * max(abs(tot_e), 1.0))
        ok[0 if cyclic else 1:] &= tp[0 if cyclic else 1:] >= dwell_s
        ok[rows, cur] = False
        if not ok.any():
            break
        flat = np.where(ok, d_e, np.inf)
        p, c = np.unravel_index(int(np.argmin(flat)), flat.shape)
        span = slice(int(a[p]), int(b[p]))
        choice[span] = c
        tg[span], eg[span] = t[span, sel[c]], e[span, sel[c]]
        cur[p] = c
        keep = np.concatenate([[True], cur[1:] != cur[:-1]])   # merge with equal neighbours
        a, cur = a[keep], cur[keep]
    return choice


def plan_switch_aware(char: Characterization, *, slowdown: float = 0.0,
                      switch_latency_s: float = 0.0, min_dwell_s: float = 0.0,
                      switch_energy_j: float = 0.0, switch_time_s: float = 0.0,
                      allow_auto: bool = True, n_lambda: int = 12, rounds: int = 2,
                      repair: bool = True, dp_columns: int = 0, cyclic: bool = True) -> Plan:
    """Least-energy phases within ``(1 + slowdown) · T_auto`` under switch latency and dwell.

    Args:
        char: time (s) / energy (J) per kernel × configuration, rows in execution order.
        slowdown: allowed slowdown ε (0.01 = 1 %).
        switch_latency_s: clock-switch latency L (s); every phase lasts >= L (with
            ``cyclic=False``, every phase after the first).
        min_dwell_s: an extra minimum phase duration (s); the rule uses max(L, min_dwell_s).
        switch_energy_j / switch_time_s: energy (J) and stall (s) charged per switch.
        n_lambda, rounds: multipliers per DP pass and refinement passes of the λ search.
        dp_columns: at most this many configurations as DP states (evenly spaced over the useful
            ones; 0: all); the phase repair then considers every useful configuration.
        cyclic: the plan is repeated every iteration, as a training loop runs it (the default):
            the first phase lasts the dwell too, so that the switch back to its clocks at the
            iteration boundary lands on time, and that switch, when the last phase's clocks
            differ, is charged and counted (``meta["n_switches"]`` is per iteration).
            ``False`` plans one iteration on its own.

    Returns:
        A :class:`Plan` with ``granularity="phase"``; predicted totals include switch costs;
        ``meta`` holds the dwell, switch costs, multiplier and the number of DP passes.
    """
    t_start = _time.perf_counter()
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
    cols = planning_columns(char, allow_auto)
    whole = len(cols) == char.n_configs          # no column copy of the (K, C) tables
    cols = cols[useful_columns(char.time_s if whole else char.time_s[:, cols],
                               char.energy_j if whole else char.energy_j[:, cols])]
    t, e = char.time_s, char.energy_j            # plans below index ``cols``
    candidates: list[np.ndarray] = []
    # one phase: the best single configuration within budget (always includes the baseline)
    tot_t, tot_e = t.sum(0)[cols], e.sum(0)[cols]
    feas = np.flatnonzero(tot_t <= budget)
    if len(feas) == 0:
        tmin = float(tot_t.min())
        raise JouleboundError(
            f"no clock plan meets the time budget {budget:.6g} s; the smallest feasible slowdown "
            f"is {tmin / tb - 1:+.4%}")
    one = int(feas[np.argmin(tot_e[feas])])
    candidates.append(np.full(char.n_kernels, one, np.int64))
    # the DP's states: every useful configuration, or an evenly spaced share of them (plus the
    # one-phase best) when there are more than dp_columns; the phase repair below then moves
    # each phase to the best of *all* useful configurations, so a plan is never worse for it
    sub = np.arange(len(cols))
    if dp_columns and len(cols) > dp_columns:
        sub = np.union1d(np.linspace(0, len(cols) - 1, dp_columns).round().astype(np.int64), [one])
    # multiplier scale: the switch-free critical multiplier (the LP's: no exact core re-solve,
    # which would only polish a plan that is not used), else average power
    try:
        free = solve(char, objective="relaxed", slowdown=slowdown, allow_auto=allow_auto,
                     tol=float("inf"))
        lam0 = float(free.meta.get("multiplier_j_per_s") or 0.0)
    except JouleboundError:
        lam0 = 0.0
    if lam0 <= 0:
        lam0 = eb / tb
    lams = np.concatenate([[0.0], lam0 * np.geomspace(0.25, 64.0, n_lambda - 1)])
    lo, hi = 0.0, np.inf
    passes = 0
    found: list[tuple[float, np.ndarray]] = []
    for r in range(rounds + 2):
        # the planner's dwell is a hair longer than the rule so float sums never undercut it
        ch, _ = dp_lagrangian(t, e, lams, dwell * (1 + 1e-9), switch_energy_j, switch_time_s,
                              columns=cols[sub])
        ch = sub[ch]
        passes += 1
        for lam, c in zip(lams, ch, strict=True):
            if cyclic:
                c = lengthen_first_phase(t, c, dwell * (1 + 1e-9), cols)
            tt, ee, _ = _totals(t, e, cols[c], switch_energy_j, switch_time_s, cyclic)
            if tt <= budget:
                hi = min(hi, lam)
                found.append((ee, c))
            else:
                lo = max(lo, lam)
        if r + 1 >= rounds and np.isfinite(hi):
            break
        if not np.isfinite(hi):
            lams = lams[-1] * np.geomspace(2.0, 2.0**12, n_lambda)
            continue
        lams = np.linspace(lo, hi, n_lambda + 2)[1:-1]
    candidates += [c for _, c in sorted(found, key=lambda x: x[0])[:3]]
    if repair:
        at = np.unique(np.concatenate([_boundaries(c) for c in candidates]))
        prefix = (at, _prefix_at(t, cols, at), _prefix_at(e, cols, at))
        candidates = [phase_repair(t, e, c, budget, dwell * (1 + 1e-9), switch_energy_j,
                                   switch_time_s, columns=cols, prefix=prefix, cyclic=cyclic)
                      for c in candidates]
    best = min(candidates, key=lambda c: _totals(t, e, cols[c], switch_energy_j,
                                                 switch_time_s, cyclic)[1])
    tt, ee, n_sw = _totals(t, e, cols[best], switch_energy_j, switch_time_s, cyclic)
    choice = cols[best]
    prov = plan_provenance(char, choice)
    return Plan(device=char.device, kernel_names=list(char.kernel_names),
                configs=list(char.configs), choice=choice, granularity="phase",
                objective="relaxed" if slowdown else "waste", slowdown=slowdown,
                switch_latency_s=switch_latency_s, predicted_time_s=tt, predicted_energy_j=ee,
                baseline_time_s=tb, baseline_energy_j=eb, provenance=prov,
                meta={**base_meta, "baseline_config": char.configs[baseline_column(char)].label,
                      "dp_passes": passes, "lambda_bracket_j_per_s": [lo, hi],
                      "dp_columns": len(sub), "useful_columns": len(cols),
                      "budget_s": budget, "n_switches": n_sw,
                      "solve_time_s": _time.perf_counter() - t_start})

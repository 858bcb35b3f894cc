"""The kernel model of :mod:`.kernel` over a whole kernel × config table, at ~15-25 ns a cell.

:func:`~.kernel.kernel_time_energy` evaluates the model cell by cell (two fractional powers per
cell, the V–f curve and the memory voltage per cell, a 22-step bisection over the
power-capped cells). :func:`fill_table` computes the same figures for a (K, C) table, written in
place into the caller's arrays, a cache-sized chunk of rows at a time:

* everything that depends on the config alone (clock ratios, the V–f and memory-voltage terms,
  static power) is a per-config vector computed once (:class:`ConfigTerms`), and energy is
  ``P·t`` expanded into ``t·(static + a·core_base) + a·(core_util·tc + mem_util·tm)``, which
  needs no division by ``t``;
* the smooth maximum ``big·(1 + s^p)^(1/p)`` (``s = small/big`` in [0, 1]) is the only
  transcendental per cell; it is read from a table of ``g(s) = (1 + s^p)^(1/p)`` on a uniform
  grid in ``s``, linearly interpolated (:func:`smooth_max_table`: relative error < 1e-8,
  checked when the table is built; 4e-9 at the shipped p = 9.9);
* the power-capped clock of a kernel depends on the memory clock and on which domains are
  governed, not on the requested core clock: the cap is solved once per (kernel, config group)
  by safeguarded Newton steps on the float64 model (to < 1e-9 MHz, far below the bisection's
  step), and each capped cell gets the clock the 22-step bisection of ``kernel_time_energy``
  returns — the highest point of its grid ``f_min + k·(f_req - f_min)/2^22`` at or below that
  root — with time and power from the first-order expansion about the root (second-order term
  < 1e-11 relative). Cells within 1e-6 of the limit by the tabulated path are decided by the
  float64 model. This assumes, as the bisection does, that power rises with the core clock.

Cell for cell the result is within 1e-8 relative of ``kernel_time_energy`` (pinned at 1e-7 in
``tests/test_characterize_reference.py``). A negative launch overhead (outside the expansion's
assumptions) falls back to ``kernel_time_energy``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from .kernel import KernelWork, kernel_time_energy, memory_scale
from .params import DeviceParams

log = logging.getLogger(__name__)

BAND = 1e-6              # relative margin around the power limit decided in float64
TABLE_TOL = 1e-8         # relative error of the tabulated smooth maximum
TINY_S = 1e-300          # stand-in memory time (s) of a kernel with no work at all
BATCH_CELLS = 1 << 14    # capped-cell candidates gathered before their cap is solved
DYN_GRID_MHZ = np.linspace(0.0, 4000.0, 401)    # for the first guess of the capped clock
NEWTON_DONE_MHZ = 1e-6   # a Newton step this small leaves an error ~1e-13 MHz after it
ROOT_BLOCK = 2048        # (kernel, config group) power-cap roots solved at a time


def smooth_max_table(p: float, tol: float = TABLE_TOL) -> tuple[np.ndarray, np.ndarray]:
    """``(g, dg)``: ``g(s) = (1 + s^p)^(1/p)`` on the uniform grid ``s = i/N`` (i = 0..N) and the
    increments ``g[i+1] - g[i]`` (0 at ``i = N``), for linear interpolation in ``s`` in [0, 1].

    ``N`` (a power of two from 1024) is doubled until the interpolation error, checked at three
    points inside every interval against the exact formula, is below ``tol`` relative: N = 8192
    at the shipped p = 9.9 (error 4e-9).
    """
    n = 1024
    while True:
        grid = np.arange(n + 1) / n
        g = (1.0 + grid ** p) ** (1.0 / p)
        dg = np.append(np.diff(g), 0.0)
        u = (np.arange(n)[:, None] + np.array([0.25, 0.5, 0.75])[None, :]).reshape(-1)
        exact = (1.0 + (u / n) ** p) ** (1.0 / p)
        i = u.astype(np.intp)
        err = np.abs((g[i] + (u - i) * dg[i]) / exact - 1.0).max()
        if err < tol or n >= 1 << 17:
            return g, dg
        n *= 2


@dataclass(frozen=True)
class ConfigTerms:
    """Per-config factors of the model, arrays of shape (C,).

    Attributes:
        f_mhz, m_mhz: requested core clock (the governor's ceiling when auto) and memory clock.
        core_auto, mem_auto: whether that domain is left to the governor.
        core_ratio: ``f_max / f`` (compute time and core-following memory time scale by it).
        mem_ratio: ``m_max / (η_m·m)`` (memory time that follows the memory clock).
        static_w: ``idle + mem_static·Vm(m)²·m/m_max`` (W).
        core_base_w, core_util_w: core dynamic power at activity 1: the part paid whatever the
            compute share, and the part per unit compute share ``tc/t`` (W), governor extra
            included.
        mem_util_w: memory dynamic power per unit memory share ``tm/t`` (W).
        gov: ``1 + δ_auto`` where the core is governed, else 1.
        group: index of the config's (memory clock, core auto, memory auto) group, numbered by
            first appearance: configs in one group share the power-capped clock of a kernel.
        below: the next lower requested core clock in the config's group (MHz; -inf if none).
    """

    f_mhz: np.ndarray
    m_mhz: np.ndarray
    core_auto: np.ndarray
    mem_auto: np.ndarray
    core_ratio: np.ndarray
    mem_ratio: np.ndarray
    static_w: np.ndarray
    core_base_w: np.ndarray
    core_util_w: np.ndarray
    mem_util_w: np.ndarray
    gov: np.ndarray
    group: np.ndarray
    below: np.ndarray


def config_terms(f_mhz: np.ndarray, m_mhz: np.ndarray, f_max: float, m_max: float,
                 params: DeviceParams, core_auto: np.ndarray, mem_auto: np.ndarray
                 ) -> ConfigTerms:
    """:class:`ConfigTerms` of configs with requested clocks ``f_mhz``, ``m_mhz`` (MHz)."""
    f = np.asarray(f_mhz, float).reshape(-1)
    m = np.asarray(m_mhz, float).reshape(-1)
    ca = np.broadcast_to(np.asarray(core_auto, bool), f.shape).copy()
    ma = np.broadcast_to(np.asarray(mem_auto, bool), f.shape).copy()
    gov = 1.0 + np.where(ca, params.auto_power_frac, 0.0)
    dyn = params.core_dyn_w * params.vf.dynamic_scale(f) * gov
    ms = memory_scale(m, m_max, params)
    m_eff = np.where(ma, params.auto_mem_eff, 1.0) * m
    _, first, inv = np.unique(np.stack([m, ca, ma], axis=1), axis=0, return_index=True,
                              return_inverse=True)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    group = rank[inv.reshape(-1)]
    below = np.full(len(f), -np.inf)
    for g in range(len(first)):
        cols = np.flatnonzero(group == g)
        clocks = np.unique(f[cols])
        pos = np.searchsorted(clocks, f[cols])              # index of each config's clock
        below[cols] = np.where(pos > 0, clocks[np.maximum(pos - 1, 0)], -np.inf)
    return ConfigTerms(
        f_mhz=f, m_mhz=m, core_auto=ca, mem_auto=ma, core_ratio=f_max / f,
        mem_ratio=m_max / m_eff, static_w=params.idle_w + params.mem_static_w * ms,
        core_base_w=dyn * params.core_base_frac, core_util_w=dyn * (1 - params.core_base_frac),
        mem_util_w=params.mem_dyn_w * ms, gov=gov, group=group, below=below)


@dataclass
class _Rows:
    """Per-kernel inputs of the fast path: compute time, memory time split into the part that
    follows the memory clock (``a``) and the part that follows the core clock (``b``), activity."""

    tc: np.ndarray
    a: np.ndarray
    b: np.ndarray
    act: np.ndarray


def _rows(keys: np.ndarray) -> _Rows:
    tc, tm, act, lam = (np.ascontiguousarray(keys[:, i], float) for i in range(4))
    a, b = tm * (1.0 - lam), tm * lam
    a[(tc == 0) & (tm == 0)] = TINY_S      # no work: a vanishing memory time keeps s = 0/big
    return _Rows(tc, a, b, act)


@dataclass
class _Cells:
    """Float64 model inputs of 1-D cells: the kernel's (``tc``, ``a``, ``b``, ``act`` as in
    :class:`_Rows`) and the config's (``mem_ratio``, ``static_w``, ``mem_util_w`` as in
    :class:`ConfigTerms`; ``core_w = core_dyn·gov``)."""

    tc: np.ndarray
    a: np.ndarray
    b: np.ndarray
    act: np.ndarray
    mem_ratio: np.ndarray
    static_w: np.ndarray
    mem_util_w: np.ndarray
    core_w: np.ndarray

    @classmethod
    def of(cls, rows: _Rows, row: np.ndarray, ct: ConfigTerms, col: np.ndarray,
           params: DeviceParams) -> _Cells:
        return cls(rows.tc[row], rows.a[row], rows.b[row], rows.act[row], ct.mem_ratio[col],
                   ct.static_w[col], ct.mem_util_w[col], params.core_dyn_w * ct.gov[col])

    def take(self, i: np.ndarray) -> _Cells:
        return _Cells(*(getattr(self, k)[i] for k in self.__dataclass_fields__))


def _state(f: np.ndarray, c: _Cells, f_max: float, params: DeviceParams, slopes: bool = True
           ) -> tuple[np.ndarray, ...]:
    """The float64 model at core clock ``f`` (MHz) for 1-D cells ``c``: ``(P, t)`` in W and s,
    and with ``slopes`` also ``(dP/df, dt/df)`` per MHz."""
    u = f_max / f
    tc = c.tc * u
    tm = c.a * c.mem_ratio + c.b * u
    p = params.overlap_p
    big = np.maximum(tc, tm)
    s = np.minimum(tc, tm) / big
    x = s ** p
    gp = 1.0 + x
    g = gp ** (1.0 / p)
    body = big * g
    t = params.launch_overhead_s + body
    dyn, ddyn = params.vf.dynamic_scale_and_slope(f)
    k = c.core_w * dyn
    beta = params.core_base_frac
    uc, um = tc / t, tm / t
    pw = c.static_w + c.act * (k * (beta + (1 - beta) * uc) + c.mem_util_w * um)
    if not slopes:
        return pw, t
    # d body = (big/body)^(p-1)·d big + (small/body)^(p-1)·d small, with
    # (big/body)^(p-1) = g/(1 + s^p) and (small/body)^(p-1) = s^(p-1)·g/(1 + s^p)
    dtc = -tc / f
    dtm = -c.b * u / f
    w_big = g / gp
    with np.errstate(divide="ignore", invalid="ignore"):
        w_small = np.where(s > 0, x / s, 0.0) * w_big
    tc_big = tc >= tm
    dt = np.where(tc_big, w_big * dtc + w_small * dtm, w_small * dtc + w_big * dtm)
    dk = c.core_w * ddyn
    duc = (dtc - uc * dt) / t
    dum = (dtm - um * dt) / t
    dpw = c.act * (dk * (beta + (1 - beta) * uc) + k * (1 - beta) * duc + c.mem_util_w * dum)
    return pw, t, dpw, dt


def _cap_roots(lo: np.ndarray, hi: np.ndarray, x0: np.ndarray, f_lo: float, c: _Cells,
               f_max: float, params: DeviceParams) -> tuple[np.ndarray, ...]:
    """Per (kernel, config group) ``c``, with ``P(lo) <= limit < P(hi)`` known where
    ``lo > f_lo`` (else ``lo == f_lo`` and unknown) and a first guess ``x0``: the clock ``f0``
    where power meets the limit (``f_lo`` where even ``f_lo`` is over it), and the model at the
    last clock evaluated, ``xe``, within 1e-6 MHz of it: ``(f0, xe, P, t, dP/df, dt/df)``.

    Safeguarded Newton on ``P(f) = limit``: a step that leaves the bracket is replaced by
    bisection (or, below an unknown ``f_lo``, by ``f_lo`` itself); a pair is done on the limit
    to rounding (8 ulp), at ``f_lo`` over the limit, or with a Newton step < 1e-6 MHz, whose end
    is ``f0`` (quadratic convergence: the error after it is ~1e-13 MHz); at most 60 steps.
    Every pair is stepped together (no gathers of the unfinished ones: they finish within a
    step of each other)."""
    limit = params.power_limit_w
    n = len(lo)
    lo = lo.astype(float)
    hi = np.maximum(hi, lo)          # capped below f_lo (f_req < f_lo): the answer is f_lo
    lo_known = lo > f_lo
    x = np.where(np.isfinite(x0), np.clip(x0, lo, hi), hi)
    done = np.zeros(n, bool)
    xe, pe, te, dpe, dte = (np.empty(n) for _ in range(5))
    tol = 8 * np.finfo(float).eps * limit
    for _ in range(60):
        if done.all():
            break
        pw, t, dpw, dt = _state(x, c, f_max, params)
        for keep, new in ((xe, x), (pe, pw), (te, t), (dpe, dpw), (dte, dt)):
            np.copyto(keep, new, where=~done)
        over = pw > limit
        pinned = over & (x <= f_lo)             # over the limit even at f_lo: stays there
        hi = np.where(over, x, hi)
        lo = np.where(over, lo, x)
        lo_known |= ~over
        with np.errstate(divide="ignore", invalid="ignore"):
            nxt = x - (pw - limit) / dpw
        newton = (nxt >= lo) & (nxt <= hi)
        # below an unknown f_lo, try f_lo itself (is the kernel over the limit even there?)
        bottom = ~lo_known & (nxt < lo)
        stay = (np.abs(pw - limit) <= tol) | pinned
        conv = stay | (newton & (np.abs(nxt - x) < NEWTON_DONE_MHZ))
        x = np.where(done | stay, x,
                     np.where(newton, nxt, np.where(bottom, f_lo, 0.5 * (lo + hi))))
        done |= conv
    else:
        bad = np.flatnonzero(~done)
        if (lo[bad] > f_lo).any():     # a bracket that was not one: again from f_lo up
            again = _cap_roots(np.full(len(bad), f_lo), hi[bad], hi[bad], f_lo, c.take(bad),
                               f_max, params)
            for keep, new in zip((x, xe, pe, te, dpe, dte), again, strict=True):
                keep[bad] = new
        else:
            log.warning("power-cap solve: %d kernel/config groups not converged in 60 steps",
                        len(bad))
    return x, xe, pe, te, dpe, dte


def _settle(flat: np.ndarray, p_fast: np.ndarray, rows: _Rows, ct: ConfigTerms,
            f_max: float, params: DeviceParams, f_min: float, iters: int, t_flat: np.ndarray,
            e_flat: np.ndarray, capped_rows: np.ndarray) -> None:
    """Cells ``flat`` (increasing indices into the flattened table) whose power by the tabulated
    path, ``p_fast``, is near or over the limit — all such cells of the rows they are in —:
    decide them in float64, solve the cap of those over it, write their time and energy and
    count them per row into ``capped_rows``."""
    limit = params.power_limit_w
    c_n = len(ct.f_mhz)
    row = ((flat + 0.5) * (1.0 / c_n)).astype(np.intp)   # flat // c_n, without integer division
    col = flat - row * c_n
    near = np.flatnonzero(p_fast <= limit * (1.0 + BAND))
    if len(near):
        r, c = row[near], col[near]
        pw, t = _state(ct.f_mhz[c], _Cells.of(rows, r, ct, c, params), f_max, params,
                       slopes=False)
        under = pw <= limit
        t_flat[flat[near[under]]] = t[under]
        e_flat[flat[near[under]]] = (pw * t)[under]
        if under.any():
            keep = np.ones(len(row), bool)
            keep[near[under]] = False
            flat, row, col, p_fast = flat[keep], row[keep], col[keep], p_fast[keep]
    if not len(row):
        return
    # runs of one kernel and one config group (configs listed group by group keep row-major
    # cells sorted; otherwise sort them)
    key = row * (int(ct.group.max()) + 1) + ct.group[col]
    if not np.all(key[1:] >= key[:-1]):
        order = np.argsort(key, kind="stable")
        flat, row, col, p_fast, key = (a[order] for a in (flat, row, col, p_fast, key))
    starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
    counts = np.diff(np.append(starts, len(key)))
    f_req = ct.f_mhz[col]
    # the root lies below the lowest capped clock of the run and above the next lower clock of
    # its group (uncapped: not in the run), if that is above f_min
    hi = np.minimum.reduceat(f_req, starts)
    lo = np.maximum(np.minimum.reduceat(ct.below[col], starts), f_min)
    pairs = _Cells.of(rows, row[starts], ct, col[starts], params)
    # first guess: the clock where the dynamic power, scaled as V(f)²·f from the lowest capped
    # clock (power p_hi there), meets the limit
    p_hi = np.minimum.reduceat(p_fast, starts)
    dyn_grid = params.vf.dynamic_scale(DYN_GRID_MHZ)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = params.vf.dynamic_scale(hi) * (limit - pairs.static_w) / (p_hi - pairs.static_w)
    x0 = np.interp(want, dyn_grid, DYN_GRID_MHZ)
    # a block of pairs at a time: the solve's temporaries stay in cache
    f0, xe, p0, t0, dp0, dt0 = (np.concatenate(a) for a in zip(*(
        _cap_roots(lo[b:b + ROOT_BLOCK], hi[b:b + ROOT_BLOCK], x0[b:b + ROOT_BLOCK], f_min,
                   pairs.take(slice(b, b + ROOT_BLOCK)), f_max, params)
        for b in range(0, len(starts), ROOT_BLOCK)), strict=True))
    # the bisection of kernel_time_energy on [f_min, f_req] returns the highest point of its
    # grid at or below the root: f_min itself when even f_min is over the limit, or when
    # f_req <= f_min
    step = (f_req - f_min) / 2.0 ** iters
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step > 0, (np.repeat(f0, counts) - f_min) / step, 0.0)
    d = f_min + np.clip(np.floor(q), 0, 2 ** iters - 1) * step - np.repeat(xe, counts)
    t = np.repeat(t0, counts) + np.repeat(dt0, counts) * d
    t_flat[flat] = t
    e_flat[flat] = (np.repeat(p0, counts) + np.repeat(dp0, counts) * d) * t
    first = int(row.min())
    capped_rows[first:int(row.max()) + 1] += np.bincount(row - first)


def fill_table(keys: np.ndarray, ct: ConfigTerms, f_max: float, m_max: float,
               params: DeviceParams, time_out: np.ndarray, energy_out: np.ndarray,
               f_min: float | None = None, iters: int = 22, chunk_cells: int = 1 << 15
               ) -> np.ndarray:
    """Time (s) and energy (J) of kernels ``keys`` (R, 4: compute time, memory time, activity,
    core-following memory share, as ``characterize._work_keys``) at configs ``ct``, written into
    ``time_out`` and ``energy_out`` (C-contiguous (R, C) float64).

    Args:
        f_max, m_max: the GPU's top core and memory clocks (MHz).
        params: model parameters (power limit included).
        f_min: lowest core clock the cap may push to (default 20 % of ``f_max``).
        iters: the bisection steps of :func:`~.kernel.kernel_time_energy` whose capped clock is
            reproduced (grid ``(f_req - f_min)/2^iters``).
        chunk_cells: cells modeled at a time (temporaries: 4 float64 and 1 index arrays of
            that size, 1.25 MiB at the default; the result does not depend on it).

    Returns:
        Power-capped cells per kernel row, shape (R,).
    """
    n, c_n = keys.shape[0], len(ct.f_mhz)
    f_min = float(f_min) if f_min is not None else 0.2 * f_max
    capped_rows = np.zeros(n, np.int64)
    if params.launch_overhead_s < 0 or not (time_out.flags.c_contiguous
                                            and energy_out.flags.c_contiguous):
        return _fill_reference(keys, ct, f_max, m_max, params, time_out, energy_out, f_min,
                               iters, chunk_cells)
    rows = _rows(keys)
    uniform = bool(np.all(rows.act == 1.0))
    per = max(1, min(n, int(chunk_cells) // max(c_n, 1)))
    fr, mr = ct.core_ratio[None, :], ct.mem_ratio[None, :]
    s_base = (ct.static_w + ct.core_base_w)[None, :]
    static, core_base = ct.static_w[None, :], ct.core_base_w[None, :]
    core_util, mem_util = ct.core_util_w[None, :], ct.mem_util_w[None, :]
    near_limit = params.power_limit_w * (1.0 - BAND)
    g_tab, g_step = smooth_max_table(params.overlap_p)
    n_tab = float(len(g_tab) - 1)
    g_line = g_tab - np.arange(len(g_tab)) * g_step        # interval i: g = g_line[i] + u·g_step[i]
    a_b, b_b, c_b, w_b = (np.empty((per, c_n)) for _ in range(4))
    i_b = np.empty((per, c_n), np.intp)
    t_flat, e_flat = time_out.reshape(-1), energy_out.reshape(-1)
    pending: list[tuple[np.ndarray, np.ndarray]] = []
    n_pending = 0
    ov = params.launch_overhead_s
    for lo in range(0, n, per):
        r = min(per, n - lo)
        a, b, c, i, w = a_b[:r], b_b[:r], c_b[:r], i_b[:r], w_b[:r]
        t, e = time_out[lo:lo + r], energy_out[lo:lo + r]
        np.multiply(rows.tc[lo:lo + r, None], fr, out=a)      # tc
        np.multiply(rows.a[lo:lo + r, None], mr, out=b)
        np.multiply(rows.b[lo:lo + r, None], fr, out=c)
        np.add(b, c, out=b)                                   # tm
        np.multiply(b, mem_util, out=e)
        np.multiply(a, core_util, out=c)
        np.add(e, c, out=e)                                   # core_util·tc + mem_util·tm
        np.maximum(a, b, out=c)                               # big
        np.minimum(a, b, out=a)
        np.divide(a, c, out=a)                                # s = small/big in [0, 1]
        np.multiply(a, n_tab, out=a)                          # u = N·s
        np.copyto(i, a, casting="unsafe")                     # its interval (floor: u >= 0)
        np.take(g_step, i, out=w, mode="clip")               # (i <= N: clip never clips)
        np.multiply(a, w, out=a)
        np.take(g_line, i, out=w, mode="clip")
        np.add(a, w, out=a)                                   # g(s) = (1 + s^p)^(1/p)
        np.multiply(a, c, out=a)                              # body = big·g(s)
        np.add(a, ov, out=t)
        if uniform:
            np.multiply(t, s_base, out=a)
            np.add(e, a, out=e)
        else:
            np.multiply(t, core_base, out=a)
            np.add(e, a, out=e)
            np.multiply(e, rows.act[lo:lo + r, None], out=e)
            np.multiply(t, static, out=a)
            np.add(e, a, out=e)
        x = a
        np.multiply(t, near_limit, out=x)
        hot = np.greater(e, x)
        if hot.any():
            idx = np.flatnonzero(hot)
            p_fast = e.reshape(-1)[idx] / t.reshape(-1)[idx]       # from the chunk, in cache
            idx += lo * c_n
            pending.append((idx, p_fast))
            n_pending += len(idx)
            if n_pending >= BATCH_CELLS:
                _settle(*_joined(pending), rows, ct, f_max, params, f_min, iters, t_flat,
                        e_flat, capped_rows)
                pending, n_pending = [], 0
    if pending:
        _settle(*_joined(pending), rows, ct, f_max, params, f_min, iters, t_flat, e_flat,
                capped_rows)
    return capped_rows


def _joined(pending: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    return (np.concatenate([i for i, _ in pending]), np.concatenate([p for _, p in pending]))


def _fill_reference(keys: np.ndarray, ct: ConfigTerms, f_max: float, m_max: float,
                    params: DeviceParams, time_out: np.ndarray, energy_out: np.ndarray,
                    f_min: float, iters: int, chunk_cells: int) -> np.ndarray:
    """:func:`fill_table` through :func:`~.kernel.kernel_time_energy`, a chunk at a time."""
    n, c_n = keys.shape[0], len(ct.f_mhz)
    per = max(1, int(chunk_cells) // max(c_n, 1))
    capped_rows = np.zeros(n, np.int64)
    for lo in range(0, n, per):
        k = keys[lo:lo + per]
        w = KernelWork(k[:, :1], k[:, 1:2], k[:, 2:3], k[:, 3:4])
        out = kernel_time_energy(w, ct.f_mhz[None, :], ct.m_mhz[None, :], f_max, m_max, params,
                                 f_min=f_min, iters=iters, core_auto=ct.core_auto[None, :],
                                 mem_auto=ct.mem_auto[None, :])
        time_out[lo:lo + per], energy_out[lo:lo + per] = out["time_s"], out["energy_j"]
        capped_rows[lo:lo + per] = out["capped"].sum(axis=1)
    return capped_rows

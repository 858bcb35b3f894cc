"""Compiled inner loop of :func:`~joulebound.gpumodel.kernel_table.fill_table`: the kernel
model's uncapped time (s) and energy (J) of a block of kernel rows at every configuration.

Per cell the model is two dozen flops and one read of the smooth-maximum table. As numpy
ufuncs over a chunk that is two dozen passes over the chunk's temporaries plus two gathers;
compiled with numba it is one pass that writes each cell once, and the power cap of the few
cells over the limit is solved per kernel right after its row (measured on one core, GPT-3-XL
distinct kernels × 524 configurations: ~33 ns a cell as numpy, ~15 compiled, cap solve
included), which is most of ``characterize`` on a profiled trace of distinct kernels. The arithmetic is the numpy path's, operation for
operation and in the same order (no fast-math, no fused multiply-add), so the table is the
same bit for bit.

Compiled on first use and cached on disk (``cache=True``): the first call in a fresh
environment compiles for a few seconds, later processes load the cached machine code.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def _uncapped(x_tc: float, x_a: float, x_b: float, x_kn: float, core_ratio: float,
              mem_ratio: float, core_util: float, mem_util: float, g_line: np.ndarray,
              g_step: np.ndarray, n_tab: float, q_line: np.ndarray, q_step: np.ndarray,
              n_q: float, overhead_s: float) -> tuple[float, float]:
    """One cell, uncapped: time (s) and the activity-scaled part of its energy,
    ``core_util·tc + mem_util·tm`` (J), before the static and core-base terms.

    ``x_kn``: the kernel's memory-level-parallelism knee κ; the memory-clock part of its memory
    time scales by ``S_q(mem_ratio, κ·core_ratio)`` (the ``q_*`` table; exactly ``mem_ratio``
    at κ = 0)."""
    t_c = x_tc * core_ratio
    y = x_kn * core_ratio
    big_m = max(mem_ratio, y)
    v = min(mem_ratio, y) / big_m * n_q
    iv = int(v)
    mem = (v * q_step[iv] + q_line[iv]) * big_m
    t_m = x_a * mem + x_b * core_ratio
    e = t_m * mem_util + t_c * core_util
    big = max(t_c, t_m)
    u = min(t_c, t_m) / big * n_tab
    i = int(u)
    return (u * g_step[i] + g_line[i]) * big + overhead_s, e


@numba.njit(cache=True, nogil=True)
def fill_rows(tc: np.ndarray, ma: np.ndarray, mb: np.ndarray, kn: np.ndarray, act: np.ndarray,
              lo: int, hi: int, core_ratio: np.ndarray, mem_ratio: np.ndarray,
              core_util: np.ndarray, mem_util: np.ndarray, static: np.ndarray,
              core_base: np.ndarray, static_base: np.ndarray, uniform: bool, g_line: np.ndarray,
              g_step: np.ndarray, n_tab: float, q_line: np.ndarray, q_step: np.ndarray,
              n_q: float, overhead_s: float, near_limit_w: float, time_out: np.ndarray,
              energy_out: np.ndarray, hot_cell: np.ndarray, hot_power: np.ndarray) -> int:
    """Rows ``lo .. hi-1`` of the table, uncapped, into ``time_out`` / ``energy_out``.

    Args:
        tc, ma, mb, kn, act: per kernel (R,): compute time, memory time following the memory
            clock, memory time following the core clock (s, at the top clocks), the
            memory-level-parallelism knee κ (fraction of the top core clock), activity.
        core_ratio, mem_ratio, core_util, mem_util, static, core_base: per configuration (C,),
            as :class:`~joulebound.gpumodel.kernel_table.ConfigTerms` (W for the powers);
            ``static_base = static + core_base``.
        uniform: every activity is 1 (static and core-base power then added as one term).
        g_line, g_step: the smooth-maximum table: ``g = g_line[i] + u·g_step[i]`` on interval
            ``i = floor(u)``, ``u = n_tab · small/big``; ``q_line, q_step, n_q``: the same for
            the knee's exponent ``mlp_q``.
        overhead_s: launch overhead (s); near_limit_w: power (W) from which a cell is listed.
        time_out, energy_out: (R, C) results (s, J).
        hot_cell, hot_power: out: the cells (flat index from row ``lo``) whose power reaches
            ``near_limit_w``, and that power (W); room for ``(hi - lo)·C``.

    Returns:
        The number of such cells.
    """
    c_n = core_ratio.shape[0]
    n_hot = 0
    for k in range(lo, hi):
        x_tc, x_a, x_b, x_kn, x_act = tc[k], ma[k], mb[k], kn[k], act[k]
        t_row, e_row = time_out[k], energy_out[k]
        # one loop without branches on the cell (it vectorizes), then the scan for hot cells
        if uniform:
            for j in range(c_n):
                t, e = _uncapped(x_tc, x_a, x_b, x_kn, core_ratio[j], mem_ratio[j],
                                 core_util[j], mem_util[j], g_line, g_step, n_tab, q_line,
                                 q_step, n_q, overhead_s)
                t_row[j] = t
                e_row[j] = e + t * static_base[j]
        else:
            for j in range(c_n):
                t, e = _uncapped(x_tc, x_a, x_b, x_kn, core_ratio[j], mem_ratio[j],
                                 core_util[j], mem_util[j], g_line, g_step, n_tab, q_line,
                                 q_step, n_q, overhead_s)
                t_row[j] = t
                e_row[j] = (e + t * core_base[j]) * x_act + t * static[j]
        base = (k - lo) * c_n
        for j in range(c_n):
            if e_row[j] > t_row[j] * near_limit_w:
                hot_cell[n_hot] = base + j
                hot_power[n_hot] = e_row[j] / t_row[j]
                n_hot += 1
    return n_hot


_LOGE2 = float(np.log(2.0))


@numba.njit(cache=True, nogil=True, inline="always")
def _softplus(z: float) -> float:
    """``log(1 + e^z)``, as numpy's ``logaddexp(0, z)``."""
    if z == 0.0:
        return _LOGE2
    if z < 0.0:
        return np.log1p(np.exp(z))
    return z + np.log1p(np.exp(-z))


@numba.njit(cache=True, nogil=True)
def vf_terms(knee_mhz: float, v_min: float, max_mhz: float, smooth_mhz: float) -> np.ndarray:
    """A :class:`~joulebound.gpumodel.vf.VFCurve` as :func:`vf_dynamic_and_slope` takes it:
    ``(knee_mhz, v_min, max_mhz, w, w·softplus((max_mhz - knee_mhz)/w))``,
    ``w = max(smooth_mhz, 1e-6)``."""
    w = max(smooth_mhz, 1e-6)
    return np.array([knee_mhz, v_min, max_mhz, w, w * _softplus((max_mhz - knee_mhz) / w)])


@numba.njit(cache=True, nogil=True, error_model="numpy")
def vf_dynamic_and_slope(f: float, vf: np.ndarray) -> tuple[float, float]:
    """:meth:`~joulebound.gpumodel.vf.VFCurve.dynamic_scale_and_slope` at one clock ``f``
    (MHz); ``vf`` from :func:`vf_terms` (pinned against the numpy method in the tests)."""
    knee, v_min, f_top, w, over_max = vf[0], vf[1], vf[2], vf[3], vf[4]
    z = (f - knee) / w
    sp = _softplus(z)
    v = v_min + (1.0 - v_min) * (w * sp) / over_max
    dv = (1.0 - v_min) * np.exp(z - sp) / over_max
    return v ** 2 * (f / f_top), (2.0 * v * dv * f + v * v) / f_top


@numba.njit(cache=True, nogil=True, error_model="numpy")
def model_state(f: float, tc: float, ma: float, mb: float, kn: float, act: float,
                mem_ratio: float, static_w: float, mem_util_w: float, core_w: float,
                model: np.ndarray, vf: np.ndarray) -> tuple[float, float, float, float]:
    """The float64 kernel model of one cell at core clock ``f`` (MHz): ``(P, t, dP/df, dt/df)``
    in W, s, W/MHz and s/MHz.

    Cell inputs as :class:`~joulebound.gpumodel.kernel_table._Cells` (``core_w`` is
    ``core_dyn_w · gov``; ``kn`` the memory-level-parallelism knee κ); ``model = (f_max MHz,
    overlap_p, launch_overhead_s, core_base_frac, mlp_q)``; ``vf`` as
    :func:`vf_dynamic_and_slope`."""
    f_max, p, overhead, beta, q = model[0], model[1], model[2], model[3], model[4]
    u = f_max / f
    t_c = tc * u
    y = kn * u
    if y > 0.0:
        big_m = max(mem_ratio, y)
        r = min(mem_ratio, y) / big_m
        mem = big_m * (1.0 + r ** q) ** (1.0 / q)
        dmem = -((y / mem) ** (q - 1.0)) * y / f            # d S_q(mem_ratio, κ·f_max/f)/df
    else:
        mem = mem_ratio
        dmem = 0.0
    t_m = ma * mem + mb * u
    big = t_c if t_c >= t_m else t_m
    small = t_m if t_c >= t_m else t_c
    s = small / big
    x = s ** p
    gp = 1.0 + x
    g = gp ** (1.0 / p)
    t = overhead + big * g
    dyn, ddyn = vf_dynamic_and_slope(f, vf)
    k = core_w * dyn
    uc = t_c / t
    um = t_m / t
    pw = static_w + act * (k * (beta + (1 - beta) * uc) + mem_util_w * um)
    # d body = (big/body)^(p-1)·d big + (small/body)^(p-1)·d small, with
    # (big/body)^(p-1) = g/(1 + s^p) and (small/body)^(p-1) = s^(p-1)·g/(1 + s^p)
    dtc = -t_c / f
    dtm = -mb * u / f + ma * dmem
    w_big = g / gp
    w_small = (x / s if s > 0 else 0.0) * w_big
    if t_c >= t_m:
        dt = w_big * dtc + w_small * dtm
    else:
        dt = w_small * dtc + w_big * dtm
    dk = core_w * ddyn
    duc = (dtc - uc * dt) / t
    dum = (dtm - um * dt) / t
    dpw = act * (dk * (beta + (1 - beta) * uc) + k * (1 - beta) * duc + mem_util_w * dum)
    return pw, t, dpw, dt


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _newton(a: float, b: float, x: float, f_lo: float, limit_w: float, tc: float, ma: float,
            mb: float, kn: float, act: float, mem_ratio: float, static_w: float, mem_util_w: float,
            core_w: float, model: np.ndarray, vf: np.ndarray, newton_done_mhz: float,
            out: np.ndarray) -> int:
    """Safeguarded Newton on ``P(f) = limit_w`` for one (kernel, config group), into ``out =
    (f0, xe, P, t, dP/df, dt/df, hi)``: the root ``f0`` (MHz), the last clock evaluated ``xe``
    and the model there, and the bracket's final upper end.

    With ``P(a) <= limit < P(b)`` known where ``a > f_lo`` (else ``a == f_lo`` and unknown)
    and a first guess ``x``: a step that leaves the bracket is replaced by bisection (or, below
    an unknown ``f_lo``, by ``f_lo`` itself); the pair is done on the limit to rounding (8 ulp),
    at ``f_lo`` over the limit, or with a Newton step < ``newton_done_mhz``, whose end is
    ``f0`` (quadratic convergence: the error after it is ~1e-13 MHz at 1e-6); at most 60 steps.

    Returns 0 when converged; 1 when not, from a bracket that was not one (``a > f_lo``: solve
    it again from ``f_lo``); 2 when not, from ``f_lo`` (``out`` holds the last step)."""
    tol = 8 * np.finfo(np.float64).eps * limit_w
    if b < a:
        b = a                                   # capped below f_lo: the answer is f_lo
    known = a > f_lo
    if np.isfinite(x):
        x = min(max(x, a), b)
    else:
        x = b
    done = False
    for _ in range(60):
        pw, t, dpw, dt = model_state(x, tc, ma, mb, kn, act, mem_ratio, static_w, mem_util_w,
                                     core_w, model, vf)
        out[1], out[2], out[3], out[4], out[5] = x, pw, t, dpw, dt
        over = pw > limit_w
        pinned = over and x <= f_lo             # over the limit even at f_lo: stays there
        if over:
            b = x
        else:
            a = x
            known = True
        nxt = x - (pw - limit_w) / dpw
        newton = nxt >= a and nxt <= b
        # below an unknown f_lo, try f_lo itself (is the kernel over the limit even there?)
        bottom = (not known) and nxt < a
        stay = abs(pw - limit_w) <= tol or pinned
        done = stay or (newton and abs(nxt - x) < newton_done_mhz)
        if not stay:
            x = nxt if newton else (f_lo if bottom else 0.5 * (a + b))
        if done:
            break
    out[0] = x
    out[6] = b
    if done:
        return 0
    return 1 if a > f_lo else 2


@numba.njit(cache=True, nogil=True, error_model="numpy")
def settle_rows(hot_cell: np.ndarray, hot_power: np.ndarray, lo: int, tc: np.ndarray,
                ma: np.ndarray, mb: np.ndarray, kn: np.ndarray, act: np.ndarray, f_mhz: np.ndarray,
                mem_ratio: np.ndarray, static_w: np.ndarray, mem_util_w: np.ndarray,
                core_w: np.ndarray, group: np.ndarray, below: np.ndarray, f_min: float,
                iters: int, limit_w: float, band: float, model: np.ndarray, vf: np.ndarray,
                dyn_grid: np.ndarray, grid_mhz: np.ndarray, newton_done_mhz: float,
                time_out: np.ndarray, energy_out: np.ndarray, capped_rows: np.ndarray) -> int:
    """The cells of rows ``lo ..`` that :func:`fill_rows` listed as near or over the power
    limit (``hot_cell``, increasing flat indices from row ``lo``; ``hot_power`` their power by
    the tabulated path, W): decided in float64, and the power cap of those over the limit
    solved once per (kernel, config group) and written into ``time_out`` / ``energy_out``.

    Within 1e-6 of the limit by the tabulated path a cell is decided by :func:`model_state`
    at its requested clock (under it: that time and energy). The capped clock of a kernel
    depends on the memory clock and the governed domains (the config ``group``), not on the
    requested core clock: its root lies below the group's lowest capped clock and above the
    next lower clock (``below``; no lower than ``f_min``); the first guess is where the dynamic
    power, scaled as V(f)²·f from the lowest capped clock, meets the limit; it is then solved
    by :func:`_newton`. Each capped cell gets the clock that the ``iters``-step bisection of
    :func:`~joulebound.gpumodel.kernel.kernel_time_energy` returns — the highest point of its
    grid ``f_min + k·(f_req - f_min)/2^iters`` at or below the root — with time and power from
    the first-order expansion about the root. ``capped_rows[row]`` counts the capped cells.

    Returns the number of (kernel, group) solves that did not converge in 60 steps."""
    c_n = f_mhz.shape[0]
    n = hot_cell.shape[0]
    n_groups = 0
    for j in range(c_n):
        n_groups = max(n_groups, group[j] + 1)
    cells = np.empty(c_n, np.int64)               # capped cells of one row (columns)
    powers = np.empty(c_n)
    keys = np.empty(c_n, np.int64)
    out = np.empty(7)
    n_bad = 0
    top = 2.0 ** iters - 1
    i = 0
    while i < n:
        row = hot_cell[i] // c_n
        k = lo + row
        m = 0
        while i < n and hot_cell[i] // c_n == row:
            j = hot_cell[i] - row * c_n
            p_fast = hot_power[i]
            i += 1
            if p_fast <= limit_w * (1.0 + band):        # near the limit: decide in float64
                pw, t, _, _ = model_state(f_mhz[j], tc[k], ma[k], mb[k], kn[k], act[k],
                                          mem_ratio[j], static_w[j], mem_util_w[j], core_w[j],
                                          model, vf)
                if pw <= limit_w:
                    time_out[k, j] = t
                    energy_out[k, j] = pw * t
                    continue
            cells[m] = j
            powers[m] = p_fast
            keys[m] = group[j]
            m += 1
        if m == 0:
            continue
        order = np.argsort(keys[:m], kind="mergesort")    # runs of one group, stable
        s = 0
        while s < m:
            g = keys[order[s]]
            e_ = s
            hi = np.inf
            lo_c = np.inf
            p_hi = np.inf
            while e_ < m and keys[order[e_]] == g:
                j = cells[order[e_]]
                hi = min(hi, f_mhz[j])
                lo_c = min(lo_c, below[j])
                p_hi = min(p_hi, powers[order[e_]])
                e_ += 1
            j0 = cells[order[s]]
            a = max(lo_c, f_min)
            dyn_hi, _ = vf_dynamic_and_slope(hi, vf)
            want = dyn_hi * (limit_w - static_w[j0]) / (p_hi - static_w[j0])
            x0 = np.interp(want, dyn_grid, grid_mhz)
            flag = _newton(a, hi, x0, f_min, limit_w, tc[k], ma[k], mb[k], kn[k], act[k],
                           mem_ratio[j0], static_w[j0], mem_util_w[j0], core_w[j0], model, vf,
                           newton_done_mhz, out)
            if flag == 1:                               # a bracket that was not one
                b = out[6]
                flag = _newton(f_min, b, b, f_min, limit_w, tc[k], ma[k], mb[k], kn[k], act[k],
                               mem_ratio[j0], static_w[j0], mem_util_w[j0], core_w[j0], model,
                               vf, newton_done_mhz, out)
            if flag != 0:
                n_bad += 1
            f0, xe, p0, t0, dp0, dt0 = out[0], out[1], out[2], out[3], out[4], out[5]
            for r in range(s, e_):
                j = cells[order[r]]
                step = (f_mhz[j] - f_min) / 2.0 ** iters
                q = (f0 - f_min) / step if step > 0 else 0.0
                d = f_min + min(max(np.floor(q), 0.0), top) * step - xe
                t = t0 + dt0 * d
                time_out[k, j] = t
                energy_out[k, j] = (p0 + dp0 * d) * t
            capped_rows[k] += e_ - s
            s = e_
    return n_bad

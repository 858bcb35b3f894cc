"""The kernel model of :mod:`.kernel` over a whole kernel × config table, at ~15 ns a cell.

:func:`~.kernel.kernel_time_energy` evaluates the model cell by cell (two fractional powers per
cell, the V–f curve and the memory voltage per cell, a 22-step bisection over the
power-capped cells). :func:`fill_table` computes the same figures for a (K, C) table, written in
place into the caller's arrays, a cache-sized chunk of rows at a time by compiled loops
(:mod:`.cells_kernel`, numba):

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
  by safeguarded Newton steps on the float64 model, right after its chunk of rows is written
  (to < 1e-9 MHz, far below the bisection's step), and each capped cell gets the clock the 22-step bisection of ``kernel_time_energy``
  returns — the highest point of its grid ``f_min + k·(f_req - f_min)/2^22`` at or below that
  root — with time and power from the first-order expansion about the root (second-order term
  < 1e-11 relative). Cells within 1e-6 of the limit by the tabulated path are decided by the
  float64 model. This assumes, as the bisection does, that power rises with the core clock.

Cell for cell the result is within 1e-8 relative of ``kernel_time_energy`` (pinned at 1e-7 in
``tests/test_gpumodel_reference.py``). A negative launch overhead (outside the expansion's
assumptions) falls back to ``kernel_time_energy``. The compiled loops do the numpy
evaluation's arithmetic operation for operation (it was checked bit for bit on GPT-3-XL tables
when they replaced it); their first call in a process costs ~1 s of numba start-up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from joulebound.gpumodel.kernel import (
    KernelWork,
    gap_power,
    kernel_time_energy,
    knee_norm,
    memory_scale,
    with_host_gaps,
)
from joulebound.gpumodel.params import DeviceParams

log = logging.getLogger(__name__)

BAND = 1e-6              # relative margin around the power limit decided in float64
TABLE_TOL = 1e-8         # relative error of the tabulated smooth maximum
TINY_S = 1e-300          # stand-in memory time (s) of a kernel with no work at all
DYN_GRID_MHZ = np.linspace(0.0, 4000.0, 401)    # for the first guess of the capped clock
NEWTON_DONE_MHZ = 1e-6   # a Newton step this small leaves an error ~1e-13 MHz after it


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
    ms = memory_scale(m, m_max, params, ma)
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


#: columns of the per-kernel model inputs (``characterize._work_keys``)
KEY_COLUMNS = ("tc_max", "tm_max", "activity", "lam", "knee", "host_s")


@dataclass
class _Rows:
    """Per-kernel inputs of the fast path: compute time, memory time split into the part that
    follows the memory clock (``a``, divided by the knee's top-clock factor ``S_q(1, κ)``) and
    the part that follows the core clock (``b``), the memory-level-parallelism knee, activity,
    host dispatch time (s)."""

    tc: np.ndarray
    a: np.ndarray
    b: np.ndarray
    kn: np.ndarray
    act: np.ndarray
    host: np.ndarray


def _rows(keys: np.ndarray, q: float) -> _Rows:
    tc, tm, act, lam, kn, host = (np.ascontiguousarray(keys[:, i], float) for i in range(6))
    a, b = tm * (1.0 - lam) / knee_norm(kn, q), tm * lam
    a[(tc == 0) & (tm == 0)] = TINY_S      # no work: a vanishing memory time keeps s = 0/big
    return _Rows(tc, a, b, kn, act, host)


def keys_work(keys: np.ndarray) -> KernelWork:
    """The :class:`~.kernel.KernelWork` of per-kernel model inputs ``keys`` (R, 6), as (R, 1)
    columns to broadcast against (1, C) configs."""
    return KernelWork(*(keys[:, i:i + 1] for i in range(len(KEY_COLUMNS))))


def add_host_gaps(host_s: np.ndarray, ct: ConfigTerms, m_max: float, params: DeviceParams,
                  time_out: np.ndarray, energy_out: np.ndarray) -> None:
    """In place: where a kernel's host dispatch time ``host_s`` (R,) exceeds its modeled time, its
    time becomes ``host_s`` and the GPU's idle power at the config's clocks
    (:func:`~.kernel.gap_power`) is paid for the difference."""
    rows = np.flatnonzero(host_s > 0)
    if not len(rows):
        return
    pg = gap_power(ct.f_mhz, ct.m_mhz, m_max, params, ct.mem_auto)
    time_out[rows], energy_out[rows] = with_host_gaps(time_out[rows], energy_out[rows],
                                                      host_s[rows, None], pg[None, :])


def fill_table(keys: np.ndarray, ct: ConfigTerms, f_max: float, m_max: float,
               params: DeviceParams, time_out: np.ndarray, energy_out: np.ndarray,
               f_min: float | None = None, iters: int = 22, chunk_cells: int = 1 << 15
               ) -> np.ndarray:
    """Time (s) and energy (J) of kernels ``keys`` (R, 6: compute time, memory time, activity,
    core-following memory share, memory-level-parallelism knee, host dispatch time, as
    ``characterize._work_keys``) at configs ``ct``, written into ``time_out`` and
    ``energy_out`` (C-contiguous (R, C) float64).

    Args:
        f_max, m_max: the GPU's top core and memory clocks (MHz).
        params: model parameters (power limit included).
        f_min: lowest core clock the cap may push to (default 20 % of ``f_max``).
        iters: the bisection steps of :func:`~.kernel.kernel_time_energy` whose capped clock is
            reproduced (grid ``(f_req - f_min)/2^iters``).
        chunk_cells: cells modeled at a time (its near-limit cells are then settled while
            its rows are in cache; buffers: 1 float64 and 1 index array of that size, 0.5 MiB
            at the default; the result does not depend on it).

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
    from joulebound.gpumodel.cells_kernel import (  # numba: compiled on first use
        fill_rows,
        settle_rows,
        vf_terms,
    )

    rows = _rows(keys, params.mlp_q)
    uniform = bool(np.all(rows.act == 1.0))
    per = max(1, min(n, int(chunk_cells) // max(c_n, 1)))
    limit = params.power_limit_w
    g_tab, g_step = smooth_max_table(params.overlap_p)
    n_tab = float(len(g_tab) - 1)
    g_line = g_tab - np.arange(len(g_tab)) * g_step        # interval i: g = g_line[i] + u·g_step[i]
    q_tab, q_step = smooth_max_table(params.mlp_q)
    n_q = float(len(q_tab) - 1)
    q_line = q_tab - np.arange(len(q_tab)) * q_step
    vf = params.vf
    model = np.array([f_max, params.overlap_p, params.launch_overhead_s, params.core_base_frac,
                      params.mlp_q])
    vf_t = vf_terms(vf.knee_mhz, vf.v_min, vf.max_mhz, vf.smooth_mhz)
    core_w = params.core_dyn_w * ct.gov
    static_base = ct.static_w + ct.core_base_w
    dyn_grid = vf.dynamic_scale(DYN_GRID_MHZ)
    hot_cell = np.empty(per * c_n, np.int64)
    hot_power = np.empty(per * c_n)
    n_bad = 0
    for lo in range(0, n, per):
        hi = min(n, lo + per)
        n_hot = fill_rows(rows.tc, rows.a, rows.b, rows.kn, rows.act, lo, hi, ct.core_ratio,
                          ct.mem_ratio, ct.core_util_w, ct.mem_util_w, ct.static_w,
                          ct.core_base_w, static_base, uniform, g_line, g_step, n_tab,
                          q_line, q_step, n_q, float(params.launch_overhead_s),
                          limit * (1.0 - BAND), time_out, energy_out, hot_cell, hot_power)
        if n_hot:      # the chunk's rows are still in cache
            n_bad += settle_rows(hot_cell[:n_hot], hot_power[:n_hot], lo, rows.tc, rows.a,
                                 rows.b, rows.kn, rows.act, ct.f_mhz, ct.mem_ratio, ct.static_w,
                                 ct.mem_util_w, core_w, ct.group, ct.below, f_min, iters,
                                 limit, BAND, model, vf_t, dyn_grid, DYN_GRID_MHZ,
                                 NEWTON_DONE_MHZ, time_out, energy_out, capped_rows)
    if n_bad:
        log.warning("power-cap solve: %d kernel/config groups not converged in 60 steps", n_bad)
    add_host_gaps(rows.host, ct, m_max, params, time_out, energy_out)
    return capped_rows


def _fill_reference(keys: np.ndarray, ct: ConfigTerms, f_max: float, m_max: float,
                    params: DeviceParams, time_out: np.ndarray, energy_out: np.ndarray,
                    f_min: float, iters: int, chunk_cells: int) -> np.ndarray:
    """:func:`fill_table` through :func:`~.kernel.kernel_time_energy`, a chunk at a time."""
    n, c_n = keys.shape[0], len(ct.f_mhz)
    per = max(1, int(chunk_cells) // max(c_n, 1))
    capped_rows = np.zeros(n, np.int64)
    for lo in range(0, n, per):
        w = keys_work(keys[lo:lo + per])
        out = kernel_time_energy(w, ct.f_mhz[None, :], ct.m_mhz[None, :], f_max, m_max, params,
                                 f_min=f_min, iters=iters, core_auto=ct.core_auto[None, :],
                                 mem_auto=ct.mem_auto[None, :])
        time_out[lo:lo + per], energy_out[lo:lo + per] = out["time_s"], out["energy_j"]
        capped_rows[lo:lo + per] = out["capped"].sum(axis=1)
    return capped_rows

"""Vectorized kernel time and power at (core, memory) clocks, with power-limit capping.

Everything broadcasts: pass per-kernel arrays of shape ``(K, 1)`` and per-config arrays of shape
``(1, C)`` to get ``(K, C)`` results.

Time (roofline with partial overlap)::

    tc = flops / (peak * eff * f/f_max)                          compute part, core clock
    tm = bytes / (bw_eff * BW_max) * ((1-λ) m_max/m + λ f_max/f) memory part, mostly memory clock
    t  = overhead + (tc**p + tm**p)**(1/p)                        smooth max = overlap

Power::

    P = idle + core_dyn * (base + (1-base) * tc/t) * V(f)**2 f/f_max
             + (mem_static + mem_dyn * tm/t) * Vm(m)**2 m/m_max

Power cap: when ``P(f) > limit`` the GPU runs at the highest clock ``f_eff < f`` with
``P(f_eff) = limit`` (solved by vectorized bisection), so time stops falling above that clock —
what the Perseus A40 stage profiles show above ~1485 MHz. Energy = P · t.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .params import DeviceParams


@dataclass
class KernelWork:
    """Per-kernel model inputs (arrays of equal length K).

    Attributes:
        tc_max: compute time (s) at the top core clock (FLOPs / achieved FLOP/s).
        tm_max: memory time (s) at the top clocks (bytes / achieved bandwidth).
        activity: optional per-kernel multiplier (>= 0) of the dynamic (core and memory) power,
            1.0 = the device's calibrated average; fitted from measurements by
            :func:`joulebound.dvfs.model.calibrate.fit_kernel`.
    """

    tc_max: np.ndarray
    tm_max: np.ndarray
    activity: np.ndarray | None = None


def memory_voltage(mem_mhz: np.ndarray, max_mem_mhz: float, params: DeviceParams) -> np.ndarray:
    """Relative memory voltage at memory clock(s) ``mem_mhz`` (MHz)."""
    m = np.asarray(mem_mhz, float)
    return np.where(m < params.mem_low_frac * max_mem_mhz, params.mem_low_v, 1.0)


def kernel_time(work: KernelWork, f_mhz: np.ndarray, m_mhz: np.ndarray, f_max: float,
                m_max: float, params: DeviceParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Time (s) of each kernel at core clock ``f_mhz`` and memory clock ``m_mhz`` (MHz).

    Returns ``(t, tc, tm)``: total time and its compute and memory parts (s), broadcast shape.
    """
    f = np.asarray(f_mhz, float)
    m = np.asarray(m_mhz, float)
    lam = params.core_mem_frac
    tc = work.tc_max * (f_max / f)
    tm = work.tm_max * ((1.0 - lam) * (m_max / m) + lam * (f_max / f))
    p = params.overlap_p
    big = np.maximum(tc, tm)
    safe = np.where(big > 0, big, 1.0)
    body = np.where(big > 0, safe * ((tc / safe) ** p + (tm / safe) ** p) ** (1.0 / p), 0.0)
    return params.launch_overhead_s + body, tc, tm


def kernel_power(t: np.ndarray, tc: np.ndarray, tm: np.ndarray, f_mhz: np.ndarray,
                 m_mhz: np.ndarray, f_max: float, m_max: float,
                 params: DeviceParams, activity: np.ndarray | float = 1.0) -> np.ndarray:
    """Average board power (W) while a kernel with parts ``(t, tc, tm)`` runs (uncapped);
    ``activity`` scales the dynamic terms."""
    f = np.asarray(f_mhz, float)
    m = np.asarray(m_mhz, float)
    u_c = np.clip(tc / t, 0.0, 1.0)
    u_m = np.clip(tm / t, 0.0, 1.0)
    core = params.core_dyn_w * (params.core_base_frac + (1 - params.core_base_frac) * u_c) \
        * params.vf.dynamic_scale(f)
    vm = memory_voltage(m, m_max, params)
    mem = (params.mem_static_w + params.mem_dyn_w * u_m) * vm ** 2 * (m / m_max)
    return params.idle_w + activity * (core + mem)


def kernel_time_energy(work: KernelWork, f_mhz: np.ndarray, m_mhz: np.ndarray, f_max: float,
                       m_max: float, params: DeviceParams, f_min: float | None = None,
                       iters: int = 30) -> dict[str, np.ndarray]:
    """Time (s), energy (J), power (W) and effective core clock (MHz) under the power limit.

    Args:
        work: per-kernel compute/memory times at top clocks (shape ``(K, 1)`` arrays to broadcast
            against ``(1, C)`` clocks).
        f_mhz, m_mhz: requested core and memory clocks (MHz).
        f_max, m_max: the GPU's top core and memory clocks (MHz).
        params: model parameters (power limit included).
        f_min: lowest core clock the cap may push to (default 20 % of ``f_max``).
        iters: bisection steps for the capped clock (30 gives < 1e-6 MHz).

    Returns:
        dict with ``time_s``, ``energy_j``, ``power_w``, ``f_eff_mhz``, ``capped`` (bool).
    """
    f_req = np.asarray(f_mhz, float)
    m = np.asarray(m_mhz, float)
    t, tc, tm = kernel_time(work, f_req, m, f_max, m_max, params)
    act = 1.0 if work.activity is None else np.asarray(work.activity, float)
    p = kernel_power(t, tc, tm, f_req, m, f_max, m_max, params, act)
    f_req, m, t = np.broadcast_arrays(f_req, m, t)
    p = np.broadcast_to(p, t.shape)
    capped = p > params.power_limit_w
    f_eff = np.array(f_req, dtype=float)
    if capped.any():
        lo = np.full(int(capped.sum()), f_min if f_min is not None else 0.2 * f_max)
        hi = f_req[capped].copy()
        tc0 = np.broadcast_to(work.tc_max, t.shape)[capped]
        tm0 = np.broadcast_to(work.tm_max, t.shape)[capped]
        sub = KernelWork(tc0, tm0)
        ac = np.broadcast_to(act, t.shape)[capped]
        mc = m[capped]
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            tt, cc, mm = kernel_time(sub, mid, mc, f_max, m_max, params)
            over = kernel_power(tt, cc, mm, mid, mc, f_max, m_max, params, ac) \
                > params.power_limit_w
            hi = np.where(over, mid, hi)
            lo = np.where(over, lo, mid)
        f_eff[capped] = lo
        t = np.array(t)
        p = np.array(p)
        tt, cc, mm = kernel_time(sub, lo, mc, f_max, m_max, params)
        t[capped] = tt
        p[capped] = kernel_power(tt, cc, mm, lo, mc, f_max, m_max, params, ac)
    return {"time_s": t, "energy_j": p * t, "power_w": p, "f_eff_mhz": f_eff, "capped": capped}

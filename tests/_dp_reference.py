"""The switch-aware DP as it was before the block-vectorized rewrite (one Python step per kernel,
pending phase entries in a ring buffer): the reference the fast DP must match plan for plan."""

from __future__ import annotations

import numpy as np


def min_block_end(t: np.ndarray, dwell_s: float) -> np.ndarray:
    """(K, C) index ``m`` of the last kernel of the shortest run starting at ``j`` that lasts at
    least ``dwell_s`` at configuration ``c``; ``K`` where the rest of the iteration is shorter."""
    k, c = t.shape
    pt = np.zeros((k + 1, c))
    np.cumsum(t, axis=0, out=pt[1:])
    out = np.empty((k, c), np.int64)
    for j in range(c):
        col = pt[:, j]
        out[:, j] = np.searchsorted(col, col[:-1] + dwell_s, side="left") - 1
    out = np.maximum(out, np.arange(k)[:, None])
    out[out >= k] = k
    return out


def reference_dp_lagrangian(t: np.ndarray, e: np.ndarray, lams: np.ndarray, dwell_s: float,
                  switch_energy_j: float = 0.0, switch_time_s: float = 0.0,
                  block_end: np.ndarray | None = None,
                  chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Exact minimiser of ``Σ e + λ Σ t + n_sw (E_sw + λ T_sw)`` under the dwell rule, per ``λ``.

    Args:
        t, e: (K, C) time (s) and energy (J) per kernel × configuration.
        lams: (L,) multipliers (J/s), >= 0.
        dwell_s: minimum duration of every phase but the first (s).
        block_end: precomputed :func:`min_block_end` (optional).
        chunk: kernels whose step costs are prepared at once (memory ``chunk × C × L``).

    Returns:
        ``(choice, value)``: (L, K) configuration column per kernel, and (L,) optimal values.

    A phase entered at kernel ``j`` comes from the best state at ``j - 1`` (any configuration:
    with switch costs >= 0, "switching" to the configuration one is already in is never better
    than staying, so excluding it changes nothing). Each state keeps the start of its current
    phase; each step records the best state and the start of *its* phase. Backtracking then
    jumps phase by phase: O(K·L) memory for the pointers and O(phases) time, with no copies.
    """
    t = np.asarray(t, np.float64)
    e = np.asarray(e, np.float64)
    lams = np.asarray(lams, np.float64)
    k_n, c_n = t.shape
    n_l = len(lams)
    if block_end is None:
        block_end = min_block_end(t, dwell_s)
    cols = np.arange(c_n)
    # cost of the minimum block entered at j in config c (inf where it cannot complete)
    valid = block_end < k_n
    end1 = np.where(valid, block_end, k_n - 1) + 1
    pt = np.zeros((k_n + 1, c_n))
    pe = np.zeros((k_n + 1, c_n))
    np.cumsum(t, axis=0, out=pt[1:])
    np.cumsum(e, axis=0, out=pe[1:])
    blk_t = np.where(valid, pt[end1, cols] - pt[:-1], 0.0)
    blk_e = np.where(valid, pe[end1, cols] - pe[:-1], np.inf)
    del pt, pe, end1
    sw = switch_energy_j + lams * switch_time_s                      # (L,)
    # pending entries live in a ring buffer of W rows: a block started at j ends by j + W - 1
    span = (block_end - np.arange(k_n)[:, None])[valid]
    w = int(span.max()) + 1 if span.size else 1
    slots = np.where(valid, block_end, 0) % w
    ring = np.full((w, c_n, n_l), np.inf)            # best entry arriving at a slot, per state
    ring_start = np.zeros((w, c_n, n_l), np.int64)   # ... and the kernel its phase started at
    best_c = np.zeros((k_n, n_l), np.int32)          # best state after kernel k
    best_start = np.zeros((k_n, n_l), np.int64)      # ... and the start of its phase
    ar_l = np.arange(n_l)
    v = e[0][:, None] + t[0][:, None] * lams[None, :]                 # (C, L)
    start = np.zeros((c_n, n_l), np.int64)
    for lo in range(0, k_n, chunk):
        hi = min(k_n, lo + chunk)
        step = e[lo:hi, :, None] + t[lo:hi, :, None] * lams[None, None, :]      # (S, C, L)
        jhi = min(k_n, hi + 1)
        enter = (blk_e[lo + 1:jhi, :, None] + blk_t[lo + 1:jhi, :, None] * lams[None, None, :]
                 + sw[None, None, :])                                           # block at k+1
        for k in range(lo, hi):
            if k > 0:                     # stay (v + this kernel) or a block arriving here
                slot = k % w
                pk = ring[slot]
                v += step[k - lo]
                fp = pk < v
                np.copyto(v, pk, where=fp)
                np.copyto(start, ring_start[slot], where=fp)
                pk.fill(np.inf)
            b = v.argmin(axis=0)                                          # (L,)
            h = v[b, ar_l]
            best_c[k] = b
            best_start[k] = start[b, ar_l]
            j = k + 1
            if j >= k_n:
                break
            cand = enter[k - lo]                                          # (C, L)
            cand += h                       # entering j from the best state (enter is scratch)
            sl = slots[j]                   # (C,) slot where each state's block ends
            cur = ring[sl, cols]
            better = cand < cur
            np.copyto(cur, cand, where=better)
            ring[sl, cols] = cur
            cs = ring_start[sl, cols]
            cs[better] = j
            ring_start[sl, cols] = cs
    values = v.min(axis=0)
    choice = np.empty((n_l, k_n), np.int64)
    for li in range(n_l):
        c = int(np.argmin(v[:, li]))
        end = k_n
        s0 = int(start[c, li])
        while True:
            choice[li, s0:end] = c
            if s0 == 0:
                break
            end = s0
            c, s0 = int(best_c[s0 - 1, li]), int(best_start[s0 - 1, li])
    return choice, values

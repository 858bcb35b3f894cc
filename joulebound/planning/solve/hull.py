"""Per-group Pareto options and lower convex hulls, in compressed (CSR) form.

For every group (a kernel, or a set of kernels that must share one clock configuration) the
options are points ``(time_s, energy_j)``, one per clock configuration. Only the Pareto-efficient
points can be optimal (an option that is slower *and* costs more energy than another never is),
and the Lagrangian solver only needs the lower convex hull of those. Both are computed for all
groups at once with vectorized numpy — no Python loop over groups:

1. sort each row by time (chunks of rows keep the temporaries small);
2. Pareto filter: keep a point when its energy is strictly below every faster point's;
3. hull: repeatedly drop every point that is not strictly convex with its current neighbours
   (slope in >= slope out). A point that fails the test is never a hull vertex, so dropping all
   of them at once is safe; a few passes reach the hull.

Storage is CSR: ``ptr[r]:ptr[r+1]`` indexes the points of row ``r``, ordered fastest first. Rows
are the distinct (time, energy) rows of the input when it repeats rows (every layer and iteration
of a transformer runs the same kernels), with ``type_of`` giving each group its row: repeated rows
are never expanded back into per-group points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Options:
    """Pareto-efficient options of every row, fastest first within a row.

    Attributes:
        ptr: (R+1,) offsets into the point arrays.
        t: (N,) time of each point (s).
        e: (N,) energy of each point (J).
        col: (N,) column (configuration index) of each point.
        hull: (N,) True where the point is a vertex of its row's lower convex hull.
        type_of: (G,) row of every group when rows were deduplicated (groups with identical
            options share a row); ``None``: one row per group.
    """

    ptr: np.ndarray
    t: np.ndarray
    e: np.ndarray
    col: np.ndarray
    hull: np.ndarray
    type_of: np.ndarray | None = None

    @property
    def n_rows(self) -> int:
        """Number of rows of options (distinct rows when deduplicated)."""
        return len(self.ptr) - 1

    @property
    def n_groups(self) -> int:
        """Number of groups the options describe."""
        return self.n_rows if self.type_of is None else len(self.type_of)

    @property
    def group(self) -> np.ndarray:
        """(N,) row of each point (its group when ``type_of`` is None)."""
        return np.repeat(np.arange(self.n_rows), np.diff(self.ptr))

    def fastest(self) -> np.ndarray:
        """(R,) index (into the point arrays) of each row's fastest option."""
        return self.ptr[:-1].copy()

    def cheapest(self) -> np.ndarray:
        """(R,) index of each row's lowest-energy option (the slowest Pareto point)."""
        return self.ptr[1:] - 1


def unique_rows(time_s: np.ndarray, energy_j: np.ndarray,
                chunk_rows: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Representative row per distinct (time, energy) row and the type of every row.

    Rows are hashed by a random projection, then every row is compared exactly with its
    representative (a hash collision only costs an extra type). Returns ``(reps, inverse)`` with
    ``time_s[reps[inverse[g]]] == time_s[g]`` for every ``g``.
    """
    g_n, c_n = time_s.shape
    rng = np.random.default_rng(12345)
    w1, w2 = rng.uniform(0.5, 1.5, c_n), rng.uniform(0.5, 1.5, c_n)
    h = np.asarray(time_s @ w1 + 1e3 * (energy_j @ w2), np.float64)
    odd = ~np.isfinite(h)
    if odd.any():                               # NaN / inf cells: hash a cleaned copy
        rows = np.flatnonzero(odd)
        t = np.nan_to_num(np.asarray(time_s[rows], np.float64), nan=-1.0, posinf=-2.0)
        e = np.nan_to_num(np.asarray(energy_j[rows], np.float64), nan=-1.0, posinf=-2.0)
        h[rows] = t @ w1 + 1e3 * (e @ w2)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    rep_of = first[inverse]
    same = np.empty(g_n, bool)
    for lo in range(0, g_n, chunk_rows):
        r = rep_of[lo:lo + chunk_rows]
        a_t, a_e = time_s[lo:lo + chunk_rows], energy_j[lo:lo + chunk_rows]
        same[lo:lo + chunk_rows] = (a_t == time_s[r]).all(1) & (a_e == energy_j[r]).all(1)
    if odd.any():
        rows = np.flatnonzero(odd & ~same)
        a_t, b_t = time_s[rows], time_s[rep_of[rows]]
        a_e, b_e = energy_j[rows], energy_j[rep_of[rows]]
        same[rows] = (((a_t == b_t) | (np.isnan(a_t) & np.isnan(b_t))).all(1)
                      & ((a_e == b_e) | (np.isnan(a_e) & np.isnan(b_e))).all(1))
    reps = first.astype(np.int64)
    bad = np.flatnonzero(~same)
    if len(bad):
        inverse[bad] = len(reps) + np.arange(len(bad))
        reps = np.concatenate([reps, bad])
    return reps, inverse.astype(np.int64)


def pareto_options(time_s: np.ndarray, energy_j: np.ndarray, chunk_rows: int = 8192,
                   dedup: bool = True) -> Options:
    """Pareto-efficient options and hull flags of every row of ``time_s``/``energy_j`` (G, C).

    Non-finite cells (NaN, inf) are treated as unavailable. Every row needs at least one finite
    cell. Works in float64 internally; inputs may be float32. With ``dedup`` (default), identical
    rows — every layer and iteration of a transformer repeats the same kernels — are solved once:
    the result holds the distinct rows' options and ``type_of`` (exact).
    """
    time_s = np.asarray(time_s)
    energy_j = np.asarray(energy_j)
    if dedup and time_s.shape[0] > 64:
        reps, inverse = unique_rows(time_s, energy_j, chunk_rows)
        if len(reps) < 0.5 * time_s.shape[0]:
            o = pareto_options(time_s[reps], energy_j[reps], chunk_rows, dedup=False)
            o.type_of = inverse
            return o
    G, C = time_s.shape
    parts_row, parts_col, parts_t, parts_e = [], [], [], []
    for lo in range(0, G, chunk_rows):
        t = np.asarray(time_s[lo:lo + chunk_rows], dtype=np.float64)
        e = np.asarray(energy_j[lo:lo + chunk_rows], dtype=np.float64)
        bad = ~(np.isfinite(t) & np.isfinite(e))
        if bad.any():
            t = np.where(bad, np.inf, t)
            e = np.where(bad, np.inf, e)
        order = np.argsort(t, axis=1)
        es = np.take_along_axis(e, order, axis=1)
        runmin = np.minimum.accumulate(es, axis=1)
        keep = np.empty_like(es, dtype=bool)
        keep[:, 0] = np.isfinite(es[:, 0])
        keep[:, 1:] = es[:, 1:] < runmin[:, :-1]
        r, c = np.nonzero(keep)
        cols = order[r, c]
        parts_row.append(r + lo)
        parts_col.append(cols.astype(np.int32))
        parts_t.append(t[r, cols])
        parts_e.append(es[r, c])
    row = np.concatenate(parts_row) if parts_row else np.zeros(0, np.int64)
    col = np.concatenate(parts_col) if parts_col else np.zeros(0, np.int32)
    pt = np.concatenate(parts_t) if parts_t else np.zeros(0)
    pe = np.concatenate(parts_e) if parts_e else np.zeros(0)
    # equal times inside a row: the earlier point (higher energy) is dominated
    if len(row) > 1:
        dup = np.zeros(len(row), bool)
        dup[:-1] = (row[:-1] == row[1:]) & (pt[:-1] == pt[1:])
        if dup.any():
            keep = ~dup
            row, col, pt, pe = row[keep], col[keep], pt[keep], pe[keep]
    counts = np.bincount(row, minlength=G)
    if G and counts.min() == 0:
        missing = np.flatnonzero(counts == 0)
        raise ValueError(f"rows {missing[:10].tolist()} have no finite (time, energy) option")
    ptr = np.zeros(G + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    hull = _hull_flags(row, pt, pe)
    return Options(ptr=ptr, t=pt, e=pe, col=col, hull=hull)


def _hull_flags(row: np.ndarray, t: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Lower-convex-hull flags of CSR points (sorted by row, then time ascending)."""
    n = len(row)
    idx = np.arange(n)
    r, tt, ee = row, t, e
    while len(idx) >= 3:
        dt = tt[1:] - tt[:-1]
        de = ee[1:] - ee[:-1]
        same = r[1:] == r[:-1]
        # interior point j has neighbours j-1 and j+1 in its own group; it is not strictly
        # convex when slope(j-1, j) >= slope(j, j+1), i.e. de[j-1]*dt[j] >= de[j]*dt[j-1]
        viol = same[:-1] & same[1:] & (de[:-1] * dt[1:] >= de[1:] * dt[:-1])
        if not viol.any():
            break
        keep = np.ones(len(idx), bool)
        keep[1:-1] = ~viol
        idx, r, tt, ee = idx[keep], r[keep], tt[keep], ee[keep]
    flags = np.zeros(n, bool)
    flags[idx] = True
    return flags

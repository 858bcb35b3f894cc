"""Compiled inner loop of the switch-aware DP (:func:`~joulebound.planning.solve.switching.dp_lagrangian`).

Why compiled, and why this shape: the DP's recurrence is sequential along the kernels (the best
plan ending at kernel ``k`` needs the optimum at earlier kernels, up to the latest phase start
whose phase lasts the dwell by ``k``), and per kernel it does a handful of flops on each
configuration × multiplier pair. One numpy call per kernel costs more in overhead than the
arithmetic; vectorizing blocks of kernels in numpy (the previous implementation) needs
(window × configurations × multipliers) buffers that stream through memory. Compiled with numba,
the loop keeps only (configurations × multipliers) state, which stays in cache, and reads each
table row twice: at the head and, a dwell later, at the phase-start pointer.

The per-multiplier work runs four multipliers per AVX-width vector (``_lanes_*``, small LLVM
intrinsics): numba's auto-vectorizer leaves loops of a dozen multipliers scalar (it needs ~20
iterations to pay for its aliasing checks), and a running minimum written back through a
``select`` becomes a masked store, which is slow on x86. The intrinsics use plain IEEE ``fadd`` /
``fmul`` in the same order as scalar code (no contraction, no reassociation) and ``minnum``
only where both operands are ordinary numbers, so results equal the scalar loop's bit for bit.

Rows are prefetched a few kernels ahead (``_prefetch``): a pass over a share of the columns
otherwise waits on memory for every row.

Compiled on first use and cached on disk (``cache=True``): the first call in a fresh
environment compiles (~6 CPU s for all of this module), later processes load the cached machine
code (~1.4 s with numba's import; docs/benchmarks.md, *Scaling*).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from llvmlite.binding import llvm_version_info
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: multipliers per vector (four float64 in an AVX register; SSE-only machines split it in two)
LANES = 4

_V = ir.VectorType(ir.DoubleType(), LANES)
_VI = ir.VectorType(ir.IntType(64), LANES)


def _ptr(context, builder, ty, val):
    return context.make_array(ty)(context, builder, value=val).data


def _vec(builder, base, index, vty):
    """Pointer to the ``vty`` vector starting at element ``index`` of ``base``."""
    return builder.bitcast(builder.gep(base, [index]), vty.as_pointer())


def _splat(builder, value, vty):
    out = ir.Constant(vty, ir.Undefined)
    for i in range(LANES):
        out = builder.insert_element(out, value, ir.Constant(ir.IntType(32), i))
    return out


def _minnum(builder, x, y):
    """Elementwise minimum of two NaN-free vectors (``vminpd``: no masked store)."""
    mod = builder.module
    name = f"llvm.minnum.v{LANES}f64"
    fn = mod.globals.get(name) or ir.Function(mod, ir.FunctionType(_V, [_V, _V]), name=name)
    return builder.call(fn, [x, y], fastmath=("nnan",))


@intrinsic
def _prefetch(typingctx, arr, i, j):
    """Hint the CPU to fetch ``arr[i, j]`` into cache (``llvm.prefetch``; no effect on results):
    rows read a few kernels ahead, one cache line per configuration, hide the memory latency
    of rows only some of whose columns are read."""
    sig = types.void(arr, i, j)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, value=args[0])
        ptr = cgutils.get_item_pointer2(context, builder, ary.data, cgutils.unpack_tuple(
            builder, ary.shape), cgutils.unpack_tuple(builder, ary.strides),
            signature.args[0].layout, [args[1], args[2]], wraparound=False)
        mod = builder.module
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        name = "llvm.prefetch.p0" if llvm_version_info[0] >= 15 else "llvm.prefetch"
        fn = mod.globals.get(name) or ir.Function(
            mod, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), name=name)
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _lanes_argmin(typingctx, m, off, lams, x, y, best, arg, c):
    """For ``j < len(best)``: ``v = m[off + j] + (lams[j] * x + y)``; where ``v < best[j]``,
    ``best[j], arg[j] = v, c`` (the lowest ``c`` on ties: strict comparison)."""
    sig = types.void(m, off, lams, x, y, best, arg, c)

    def codegen(context, builder, signature, args):
        m_, off_, lams_, x_, y_, best_, arg_, c_ = args
        ty = signature.args
        pm, pl = _ptr(context, builder, ty[0], m_), _ptr(context, builder, ty[2], lams_)
        pb, pa = _ptr(context, builder, ty[5], best_), _ptr(context, builder, ty[6], arg_)
        n = context.make_array(ty[5])(context, builder, value=best_).nitems
        groups = builder.udiv(n, ir.Constant(n.type, LANES))
        xv, yv, cv = _splat(builder, x_, _V), _splat(builder, y_, _V), _splat(builder, c_, _VI)
        with cgutils.for_range(builder, groups) as loop:
            j = builder.mul(loop.index, ir.Constant(n.type, LANES))
            vm = builder.load(_vec(builder, pm, builder.add(off_, j), _V), align=8)
            vl = builder.load(_vec(builder, pl, j, _V), align=8)
            v = builder.fadd(vm, builder.fadd(builder.fmul(vl, xv), yv))
            bp, ap = _vec(builder, pb, j, _V), _vec(builder, pa, j, _VI)
            vb, va = builder.load(bp, align=8), builder.load(ap, align=8)
            lower = builder.fcmp_ordered("<", v, vb)
            builder.store(_minnum(builder, v, vb), bp, align=8)
            builder.store(builder.select(lower, cv, va), ap, align=8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _lanes_absorb(typingctx, m, a, off, hr, hoff, sw, lams, pt, pe, s):
    """Absorb the entry of a phase starting at kernel ``s``: for ``j < len(sw)``,
    ``v = hr[hoff + j] + sw[j] - (lams[j] * pt + pe)``; where ``v < m[off + j]``,
    ``m[off + j], a[off + j] = v, s`` (earlier starts kept on ties)."""
    sig = types.void(m, a, off, hr, hoff, sw, lams, pt, pe, s)

    def codegen(context, builder, signature, args):
        m_, a_, off_, hr_, hoff_, sw_, lams_, pt_, pe_, s_ = args
        ty = signature.args
        pm, pa = _ptr(context, builder, ty[0], m_), _ptr(context, builder, ty[1], a_)
        ph, psw = _ptr(context, builder, ty[3], hr_), _ptr(context, builder, ty[5], sw_)
        pl = _ptr(context, builder, ty[6], lams_)
        n = context.make_array(ty[5])(context, builder, value=sw_).nitems
        groups = builder.udiv(n, ir.Constant(n.type, LANES))
        tv, ev, sv = _splat(builder, pt_, _V), _splat(builder, pe_, _V), _splat(builder, s_, _VI)
        with cgutils.for_range(builder, groups) as loop:
            j = builder.mul(loop.index, ir.Constant(n.type, LANES))
            vh = builder.load(_vec(builder, ph, builder.add(hoff_, j), _V), align=8)
            vs = builder.load(_vec(builder, psw, j, _V), align=8)
            vl = builder.load(_vec(builder, pl, j, _V), align=8)
            v = builder.fsub(builder.fadd(vh, vs), builder.fadd(builder.fmul(vl, tv), ev))
            mp = _vec(builder, pm, builder.add(off_, j), _V)
            ap = _vec(builder, pa, builder.add(off_, j), _VI)
            vm, va = builder.load(mp, align=8), builder.load(ap, align=8)
            lower = builder.fcmp_ordered("<", v, vm)
            builder.store(_minnum(builder, v, vm), mp, align=8)
            builder.store(builder.select(lower, sv, va), ap, align=8)
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(cache=True, nogil=True)
def dp_forward(t: np.ndarray, e: np.ndarray, sel: np.ndarray, lams: np.ndarray, sw: np.ndarray,
               n_l: int, dwell_s: float, best_c: np.ndarray,
               best_start: np.ndarray) -> tuple[np.ndarray, bool]:
    """Forward pass of the exact DP for every multiplier at once.

    Args:
        t, e: (K, C_all) time (s) and energy (J) per kernel × configuration (float64, NaN-free).
        sel: (C,) the columns planned over (int64).
        lams, sw: (Lp,) multipliers (J/s) and switch costs ``E_sw + λ T_sw`` (J), padded to a
            multiple of :data:`LANES` (the padding lanes are computed and ignored).
        n_l: the number of real multipliers (<= Lp).
        dwell_s: minimum duration of every phase but the first (s).
        best_c, best_start: (K, n_l) outputs: for each kernel, the column (index into ``sel``)
            of the best plan ending there and the first kernel of its last phase.

    Returns:
        ``(values, finite)``: (n_l,) optimal values ``Σ e + λ Σ t + n_sw · sw``, and whether
        every column of ``sel`` summed to a finite time and energy (the values are meaningless
        otherwise).

    State per configuration ``c``: the prefix sums ``PT_c, PE_c`` at the head (``k + 1``) and
    at the pointer ``p_c = s_max(k, c)`` (the latest start whose phase lasts ``dwell_s`` by
    ``k``, at most ``k``; 0 when none), and per ``λ`` the running minimum ``M`` of the entries
    ``E[s] = h[s-1] + sw - λ PT_c[s] - PE_c[s]`` over ``s <= p_c`` (``E[0] = 0``) with the ``s``
    attaining it (the earliest on ties). Then ``h[k] = min_c M_c + λ PT_c[k+1] + PE_c[k+1]``
    (the lowest column on ties). Both prefix sums are running sums in row order, the same
    floats as ``np.cumsum`` over the whole table. ``h`` is kept in a ring of rows from the
    lowest pointer on (grown when a dwell spans more kernels than it holds).
    """
    k_n = t.shape[0]
    c_n = sel.shape[0]
    lp = lams.shape[0]
    head_t = np.zeros(c_n)
    head_e = np.zeros(c_n)
    ptr_t = np.zeros(c_n)
    ptr_e = np.zeros(c_n)
    ptr = np.zeros(c_n, np.int64)
    m = np.zeros(c_n * lp)                     # running minimum of the entries, (C, Lp)
    a = np.zeros(c_n * lp, np.int64)           # ... and the phase start attaining it
    ring = 64                                  # a power of two
    hr = np.empty(ring * lp)                   # h[s] at row s & (ring - 1)
    best = np.empty(lp)
    arg = np.empty(lp, np.int64)
    ahead = min(k_n - 1, 8)
    for k in range(k_n):
        low = k
        pre = min(k + ahead, k_n - 1)
        for c in range(c_n):
            col = sel[c]
            _prefetch(t, pre, col)
            _prefetch(e, pre, col)
            ht = head_t[c] + t[k, col]
            head_t[c] = ht
            head_e[c] += e[k, col]
            p = ptr[c]
            if p < k:
                pt = ptr_t[c]
                pe = ptr_e[c]
                # advance while the phase from the next start still lasts the dwell by k
                while p < k:
                    nt = pt + t[p, col]
                    if nt + dwell_s > ht:
                        break
                    pt = nt
                    pe += e[p, col]
                    p += 1
                    _lanes_absorb(m, a, c * lp, hr, ((p - 1) & (ring - 1)) * lp, sw, lams,
                                  pt, pe, p)
                ptr_t[c] = pt
                ptr_e[c] = pe
                ptr[c] = p
            low = min(low, p)
        for li in range(lp):
            best[li] = np.inf
            arg[li] = 0
        for c in range(c_n):
            _lanes_argmin(m, c * lp, lams, head_t[c], head_e[c], best, arg, c)
        if k - low + 1 > ring:                 # keep rows low .. k: grow the ring
            grown = 2 * ring
            while k - low + 1 > grown:
                grown *= 2
            h2 = np.empty(grown * lp)
            for s in range(low, k):
                r2, r1 = (s & (grown - 1)) * lp, (s & (ring - 1)) * lp
                for li in range(lp):
                    h2[r2 + li] = hr[r1 + li]
            hr = h2
            ring = grown
        row = (k & (ring - 1)) * lp
        for li in range(lp):
            hr[row + li] = best[li]
        for li in range(n_l):
            bc = arg[li]
            best_c[k, li] = bc
            best_start[k, li] = a[bc * lp + li]
    out = np.zeros(n_l)
    for li in range(n_l if k_n else 0):
        out[li] = best[li]
    total = 0.0
    for c in range(c_n):
        total += head_t[c] + head_e[c]
    return out, total - total == 0.0          # False when a sum is NaN or infinite


@numba.njit(cache=True, nogil=True)
def dp_backtrack(best_c: np.ndarray, best_start: np.ndarray) -> np.ndarray:
    """(L, K) column per kernel read back phase by phase from :func:`dp_forward`'s pointers."""
    k_n, n_l = best_c.shape
    choice = np.empty((n_l, k_n), np.int64)
    if k_n == 0:
        return choice
    for li in range(n_l):
        end = k_n
        c = best_c[k_n - 1, li]
        s0 = best_start[k_n - 1, li]
        while True:
            choice[li, s0:end] = c
            if s0 == 0:
                break
            end = s0
            c, s0 = best_c[s0 - 1, li], best_start[s0 - 1, li]
    return choice


@numba.njit(cache=True, nogil=True)
def plan_sums(t: np.ndarray, e: np.ndarray, sel: np.ndarray,
              choice: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Σ t, Σ e, switches) of each plan ``choice[i]`` (kernel ``k`` at column
    ``sel[choice[i, k]]``), (L,) each; one pass over the rows for all plans, sums in row order
    (s, J)."""
    n_p, k_n = choice.shape
    tt = np.zeros(n_p)
    ee = np.zeros(n_p)
    n_sw = np.zeros(n_p, np.int64)
    for k in range(k_n):
        pre = min(k + 8, k_n - 1)
        for i in range(n_p):
            col = sel[choice[i, k]]
            _prefetch(t, pre, sel[choice[i, pre]])
            _prefetch(e, pre, sel[choice[i, pre]])
            tt[i] += t[k, col]
            ee[i] += e[k, col]
            if k and choice[i, k] != choice[i, k - 1]:
                n_sw[i] += 1
    return tt, ee, n_sw


@numba.njit(cache=True, nogil=True)
def segment_sums(t: np.ndarray, e: np.ndarray, sel: np.ndarray,
                 starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, C) sums of ``t`` and ``e`` over the row segments ``starts[p] .. starts[p + 1] - 1``
    (the last runs to the end; ``starts[0] == 0``, increasing) at every column of ``sel``:
    one pass over the rows, in row order (s, J)."""
    k_n = t.shape[0]
    c_n = sel.shape[0]
    p_n = starts.shape[0]
    st = np.zeros((p_n, c_n))
    se = np.zeros((p_n, c_n))
    for p in range(p_n):
        hi = starts[p + 1] if p + 1 < p_n else k_n
        for k in range(starts[p], hi):
            for c in range(c_n):
                col = sel[c]
                st[p, c] += t[k, col]
                se[p, c] += e[k, col]
    return st, se


@numba.njit(cache=True, nogil=True)
def column_scan(t: np.ndarray, e: np.ndarray, sel: np.ndarray, a: np.ndarray,
                b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One pass over the rows: the sums of ``t`` and ``e`` (s, J) at every column of ``sel``, in
    row order, and for each pair ``i`` whether column ``a[i]`` is no slower and no costlier than
    column ``b[i]`` on every row (``a``/``b`` index the table's columns)."""
    k_n = t.shape[0]
    c_n = sel.shape[0]
    p_n = a.shape[0]
    st = np.zeros(c_n)
    se = np.zeros(c_n)
    ok = np.ones(p_n, np.bool_)
    for k in range(k_n):
        pre = min(k + 8, k_n - 1)
        for c in range(c_n):
            col = sel[c]
            _prefetch(t, pre, col)
            _prefetch(e, pre, col)
            st[c] += t[k, col]
            se[c] += e[k, col]
        for i in range(p_n):
            ok[i] &= (t[k, a[i]] <= t[k, b[i]]) & (e[k, a[i]] <= e[k, b[i]])
    return st, se, ok

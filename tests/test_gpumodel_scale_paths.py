"""The paths rewritten for scale compute what they computed before.

* ``characterize`` models rows a chunk at a time (and distinct rows in place): cell for cell the
  figures of the reference method of the one evaluator (:func:`evaluate`, ``method="reference"``) within 1e-7, the same bits
  at any chunk size, on GPT-3-XL × RTX 3080 Ti and on a 10^4-kernel trace with measured
  durations (every row distinct, as imported traces are).
* ``Trace.save`` writes every field of every kernel, as the dataclass has them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from joulebound.gpumodel import characterize
from joulebound.gpumodel.characterize import (
    evaluate,
    planning_configs,
    resolve_clocks,
    trace_work,
)
from joulebound.gpumodel.params import params_for
from joulebound.hw.catalog import get_device
from joulebound.workload.analytic import build_trace
from joulebound.workload.trace import Trace


def _whole_table(trace: Trace, device: str) -> tuple[np.ndarray, np.ndarray, float]:
    """The reference method: the model's formulas over the distinct rows at once, expanded."""
    spec = get_device(device)
    prm = params_for(spec)
    cfgs, _ = planning_configs(spec, prm)
    rc = resolve_clocks(spec, cfgs, prm)
    out = evaluate(trace_work(trace, spec, prm), rc, spec, prm, method="reference")
    return out.time_s, out.energy_j, out.capped_fraction


def _measured_trace(iterations: int) -> Trace:
    tr = build_trace("gpt3-xl", iterations=iterations)
    rng = np.random.default_rng(3)
    dur = 1e-5 + rng.lognormal(-9.5, 1.2, len(tr))           # every kernel its own duration
    return dataclasses.replace(tr, kernels=[dataclasses.replace(k, duration_s=float(d))
                                            for k, d in zip(tr.kernels, dur, strict=True)])


@pytest.mark.parametrize("case", ["gpt3-xl", "measured-10k"])
def test_chunked_characterize_matches_the_whole_table_model(case) -> None:
    """Within 1e-7 of ``kernel_time_energy`` on the whole table (the tabulated smooth maximum,
    see ``kernel_table``), and bit for bit the same whatever the chunk size."""
    tr = build_trace("gpt3-xl") if case == "gpt3-xl" else _measured_trace(11)
    t_ref, e_ref, capped_ref = _whole_table(tr, "rtx3080ti")
    first = None
    for chunk in (1 << 15, 1 << 20, 40_000):   # default, one chunk, 78 rows (a partial last)
        ch = characterize(tr, "rtx3080ti", chunk_cells=chunk)
        assert np.abs(ch.time_s / t_ref - 1).max() < 1e-7
        assert np.abs(ch.energy_j / e_ref - 1).max() < 1e-7
        assert ch.meta["capped_cells_fraction"] == capped_ref
        if first is None:
            first = ch
        assert np.array_equal(ch.time_s, first.time_s)
        assert np.array_equal(ch.energy_j, first.energy_j)
    assert ch.meta["n_unique_kernels"] == (28 if case == "gpt3-xl" else len(tr))
    if case == "measured-10k":
        assert len(tr) > 10_000 and capped_ref > 0     # the power-cap bisection is exercised


@pytest.mark.parametrize("p", [1.0, 2.0, 4.0, 9.887837481596064, 19.1])
def test_smooth_max_table_is_within_its_tolerance(p) -> None:
    from joulebound.gpumodel.kernel_table import TABLE_TOL, smooth_max_table

    g, dg = smooth_max_table(p)
    n = len(g) - 1
    s = np.concatenate([np.random.default_rng(1).random(200_000), [0.0, 1.0, 1 - 1e-12]])
    u = s * n
    i = u.astype(np.intp)
    exact = (1.0 + s ** p) ** (1.0 / p)
    assert np.abs((g[i] + (u - i) * dg[i]) / exact - 1).max() < TABLE_TOL


def test_dynamic_scale_slope_is_the_derivative() -> None:
    vf = params_for(get_device("rtx3080ti")).vf
    f = np.linspace(150.0, 2100.0, 400)
    d, slope = vf.dynamic_scale_and_slope(f)
    assert np.array_equal(d, vf.dynamic_scale(f))
    h = 1e-3
    fd = (vf.dynamic_scale(f + h) - vf.dynamic_scale(f - h)) / (2 * h)
    assert np.abs(slope / fd - 1).max() < 1e-7


@pytest.mark.parametrize("device", ["rtx3080ti", "h200-sxm", "a100-sxm4-80gb"])
def test_compiled_vf_curve_is_the_numpy_curve(device) -> None:
    """The compiled cap solve evaluates the V–f curve itself (one clock at a time); it must be
    :meth:`VFCurve.dynamic_scale_and_slope`, knee, floor and both sides of the corner
    included."""
    from joulebound.gpumodel.cells_kernel import vf_dynamic_and_slope, vf_terms

    vf = params_for(get_device(device)).vf
    terms = vf_terms(vf.knee_mhz, vf.v_min, vf.max_mhz, vf.smooth_mhz)
    f = np.concatenate([np.linspace(100.0, 2200.0, 300), [vf.knee_mhz, vf.max_mhz]])
    got = np.array([vf_dynamic_and_slope(x, terms) for x in f])
    want = np.stack(vf.dynamic_scale_and_slope(f), axis=1)
    assert np.abs(got / want - 1).max() < 1e-14


def test_fill_table_falls_back_to_the_reference_model() -> None:
    """Parameters outside the fast path (a negative launch overhead): kernel_time_energy."""
    from joulebound.gpumodel.kernel import kernel_time_energy
    from joulebound.gpumodel.kernel_table import config_terms, fill_table

    spec = get_device("rtx3080ti")
    prm = dataclasses.replace(params_for(spec), launch_overhead_s=-1e-7)
    cfgs, _ = planning_configs(spec, prm)
    rc = resolve_clocks(spec, cfgs, prm)
    w = trace_work(_measured_trace(1), spec, prm)
    from joulebound.gpumodel.characterize import _work_keys
    from joulebound.gpumodel.kernel_table import keys_work

    keys = _work_keys(w, prm)
    ct = config_terms(rc.core_mhz, rc.mem_mhz, spec.max_core_mhz, spec.max_mem_mhz, prm,
                      rc.core_auto, rc.mem_auto)
    t, e = np.empty((len(keys), len(cfgs))), np.empty((len(keys), len(cfgs)))
    capped = fill_table(keys, ct, spec.max_core_mhz, spec.max_mem_mhz, prm, t, e)
    ref = kernel_time_energy(keys_work(keys), rc.core_mhz[None], rc.mem_mhz[None], spec.max_core_mhz,
                             spec.max_mem_mhz, prm, core_auto=rc.core_auto[None],
                             mem_auto=rc.mem_auto[None])
    assert np.array_equal(t, ref["time_s"]) and np.array_equal(e, ref["energy_j"])
    assert np.array_equal(capped, ref["capped"].sum(axis=1))


def test_trace_file_has_every_kernel_field() -> None:
    tr = _measured_trace(1)
    tr.kernels[3].meta["op"] = "aten::mm"
    doc = tr.to_json()
    assert doc["kernels"] == [dataclasses.asdict(k) for k in tr.kernels]


def test_kernel_time_is_the_two_power_formula_bit_for_bit() -> None:
    """kernel_time computes ``big·((tc/big)^p + (tm/big)^p)^(1/p)`` with one power fewer: the
    same floats, including ties (tc == tm), zero parts and no work at all."""
    from joulebound.gpumodel.kernel import KernelWork, kernel_time

    prm = params_for(get_device("rtx3080ti"))
    rng = np.random.default_rng(0)
    tc = np.concatenate([rng.lognormal(-9, 2, 4000), [0.0, 1e-5, 0.0, 3e-4]])[:, None]
    tm = np.concatenate([rng.lognormal(-9, 2, 4000), [0.0, 0.0, 2e-6, 3e-4]])[:, None]
    f = np.linspace(210, 2100, 37)[None, :]
    m = np.repeat([405.0, 5001.0, 9501.0], 37 // 3 + 1)[None, :37]
    t, tc_f, tm_f = kernel_time(KernelWork(tc, tm, lam=np.full_like(tc, 0.3)), f, m, 2100.0,
                                9501.0, prm)
    p = prm.overlap_p
    big = np.maximum(tc_f, tm_f)
    safe = np.where(big > 0, big, 1.0)
    ref = prm.launch_overhead_s + np.where(
        big > 0, safe * ((tc_f / safe) ** p + (tm_f / safe) ** p) ** (1.0 / p), 0.0)
    assert np.array_equal(t, ref)


def _repeated(n_types: int, copies: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n_types`` distinct rows of the planner tests' smooth-roofline generator, each repeated
    ``copies`` times in a shuffled order (a trace's layers and iterations)."""
    from _plan_synth import synth_char

    ch = synth_char(n_types, seed=seed)
    rows = np.random.default_rng(seed).permutation(np.repeat(np.arange(n_types), copies))
    return ch.time_s[rows], ch.energy_j[rows]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_solver_on_repeated_rows_never_expands_them_and_stays_near_optimal(seed) -> None:
    from joulebound.planning.solve import FastMCKP, solve_milp
    from joulebound.planning.solve.hull import pareto_options

    t, e = _repeated(9, 24, seed)                               # 216 groups, 9 distinct rows
    o = pareto_options(t, e)
    assert o.n_rows == 9 and o.n_groups == 216 and len(o.t) < 9 * t.shape[1]
    dedup, per_group = FastMCKP(options=o), FastMCKP(options=pareto_options(t, e, dedup=False))
    for eps in (0.003, 0.02, 0.08):
        budget = (1 + eps) * t[:, 0].sum()
        a = dedup.solve(budget)
        b = per_group.solve(budget)
        exact = solve_milp(t, e, budget)
        rows = np.arange(len(t))
        for sol in (a, b):
            assert t[rows, sol.choice].sum() <= budget * (1 + 1e-12)
            assert e[rows, sol.choice].sum() == pytest.approx(sol.energy, rel=1e-12)
            assert sol.lower_bound <= exact.energy * (1 + 1e-9)       # a true lower bound
            assert sol.energy <= exact.energy * (1 + 1e-3)
        assert a.lower_bound == pytest.approx(b.lower_bound, rel=1e-9)   # the same LP
    # the LP path: vertices per distinct move; every integer point lies between two of them
    pt, pe = dedup.path()
    qt, qe = per_group.path()
    assert pt[0] == pytest.approx(qt[0]) and pt[-1] == pytest.approx(qt[-1])
    assert np.all(np.diff(pt) <= 0) and np.all(np.diff(pe) >= 0)
    assert len(pt) < len(qt)
    for n in (0, 17, dedup.n_path // 2, dedup.n_path):
        sel = dedup.sel_at_prefix(n)
        assert dedup.totals(sel)[0] == pytest.approx(float(np.interp(
            n, [dedup.vertex_prefix(i) for i in range(len(pt))], pt)), rel=1e-9)


def _stream(n_iters: int, perturbed: bool) -> list[int]:
    from joulebound.testing.streams import DEFAULT_PERTURBATION, Perturbation, perturbed_stream

    iteration = list(range(300))
    spec = DEFAULT_PERTURBATION if perturbed else Perturbation()
    keys, _ = perturbed_stream(iteration, n_iters, spec, seed=5)
    return keys.tolist()


def test_predictor_history_is_a_fixed_ring_and_bounded() -> None:
    """The history stays at most ``max_history`` ops at every op and then holds exactly the
    newest ``max_history``, in storage allocated once (never replaced or resized), and the
    bounded predictor predicts as an unbounded one does."""
    from joulebound.runtime.nextop import NextKernelPredictor

    keys = _stream(40, perturbed=False)                          # 12,000 ops, steady
    small, big = NextKernelPredictor(max_history=2000), NextKernelPredictor()
    rings = [(r, r.obj, r.nbytes) for r in (small._hist, small._labels, small._prev)]
    longest = 0
    for i, k in enumerate(keys):
        assert small.prediction == big.prediction
        small.observe(k)
        big.observe(k)
        longest = max(longest, len(small))
        assert len(small) == min(i + 1, 2000)
    assert longest == 2000
    assert small.recent(5000)[0] == keys[-2000:]
    assert [(r, r.obj, r.nbytes) for r in (small._hist, small._labels, small._prev)] == rings
    assert small.stats.accuracy == big.stats.accuracy


def test_predictor_observe_allocates_nothing_that_grows() -> None:
    """Past the history bound, no ``observe()`` allocates more than a few KiB (no list growing
    or being rebuilt, no compaction copy: a growing 4096-op history re-allocates tens of KiB at
    once) and the Python heap does not grow with the stream, only with the distinct keys
    (tracemalloc, perturbed stream: resyncs, relocks and Markov fallbacks included)."""
    import tracemalloc

    from joulebound.runtime.nextop import NextKernelPredictor

    keys = _stream(80, perturbed=True)      # ~25,000 ops: two epochs (all keys) seen first
    pred = NextKernelPredictor(max_history=4096)
    warm = 16_000
    for k in keys[:warm]:
        pred.observe(k)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        worst = 0
        for k in keys[warm:]:
            cur = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            pred.observe(k)
            worst = max(worst, tracemalloc.get_traced_memory()[1] - cur)
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert len(keys) - warm > 2 * 4096 and pred.stats.resyncs > 0
    assert worst <= 4096, f"one observe() allocated {worst} B"
    # the only Python objects kept are one position per distinct key (``_last``: replaced as
    # the key recurs, counted as growth when an untraced one is replaced); a history in lists
    # would add ~40 B per op (~350 KiB here)
    bound = 4096 + 48 * len(pred._last)
    assert grown <= bound, f"the heap grew {grown} B over {len(keys) - warm} ops (> {bound})"


def test_predictor_compaction_keeps_labels_and_perturbed_accuracy() -> None:
    from joulebound.runtime.nextop import NextKernelPredictor

    keys = _stream(80, perturbed=True)      # ~25,000 ops; an epoch (its odd last batch) is 7,500
    small, big = NextKernelPredictor(max_history=20_000), NextKernelPredictor()
    for k in keys:
        small.observe(k)
        big.observe(k)
    assert len(small) <= 20_000 < len(big)
    assert small.stats.accuracy >= big.stats.accuracy - 0.005  # the dropped half is rarely needed
    labelled = NextKernelPredictor(max_history=1500)
    for i, k in enumerate(keys):
        labelled.observe(k)
        labelled.set_last_label(i % 1000)    # the controller writes the newest op's label
    _, window = labelled.recent(1500)
    assert window == [i % 1000 for i in range(len(keys) - 1500, len(keys))]   # none lost

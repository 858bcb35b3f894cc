"""THE kernel model has one entry point, ``joulebound.gpumodel.evaluate``, with two methods of
the same formulas: the numpy reference (the specification) and the compiled fast path (issue 29:
the model was written three times, pinned equal by a fixture)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import joulebound
from joulebound.gpumodel import (
    evaluate,
    params_for,
    planning_configs,
    resolve_clocks,
    trace_work,
)
from joulebound.hw.catalog import get_device
from joulebound.workload.analytic import build_trace


@pytest.mark.parametrize("model, device", [("gpt2-small", "rtx3080ti"),
                                           ("bert-base", "a100-sxm4-80gb"),
                                           ("gpt2-small", "a40")])
def test_fast_and_reference_methods_agree(model, device):
    """Cell for cell within 1e-7 relative on every planning config of a real device (power-capped
    cells included), with the same distinct rows and the same share of capped cells."""
    spec = get_device(device)
    prm = params_for(spec)
    cfgs, _ = planning_configs(spec, prm)
    rc = resolve_clocks(spec, cfgs, prm)
    work = trace_work(build_trace(model), spec, prm)
    fast = evaluate(work, rc, spec, prm)
    ref = evaluate(work, rc, spec, prm, method="reference")
    assert fast.time_s.shape == ref.time_s.shape == (len(work.tc_max), len(cfgs))
    assert np.abs(fast.time_s / ref.time_s - 1).max() < 1e-7
    assert np.abs(fast.energy_j / ref.energy_j - 1).max() < 1e-7
    assert fast.n_unique == ref.n_unique
    assert fast.capped_fraction == pytest.approx(ref.capped_fraction)
    assert ref.power_w is not None and np.allclose(ref.power_w * ref.time_s, ref.energy_j)


@pytest.mark.parametrize("device, dispatch_s", [("h200-sxm", 8e-6), ("rtx3080ti", 2e-5)])
def test_fast_and_reference_agree_with_the_knee_and_host_gaps(device, dispatch_s):
    """The memory-level-parallelism knee (default bytes per SM-cycle: κ > 0 for every streaming
    kernel) and host-dispatch gaps (a framework cost per launch that exceeds the small kernels'
    time) through both methods: the same cells within 1e-7, capped cells included."""
    from joulebound.gpumodel.params import default_params

    spec = get_device(device)
    prm = default_params(spec)
    prm = prm.with_limit(0.55 * prm.power_limit_w)      # a low limit: many capped cells
    cfgs, _ = planning_configs(spec, prm)
    rc = resolve_clocks(spec, cfgs, prm)
    tr = build_trace("gpt2-small", batch=2, seq=256)
    tr.meta["host_dispatch_s"] = dispatch_s
    work = trace_work(tr, spec, prm)
    assert np.asarray(work.knee).max() > 0.1 and work.host_s is not None
    assert (np.asarray(work.host_s) > 0).all()
    fast = evaluate(work, rc, spec, prm)
    ref = evaluate(work, rc, spec, prm, method="reference")
    assert np.abs(fast.time_s / ref.time_s - 1).max() < 1e-7
    assert np.abs(fast.energy_j / ref.energy_j - 1).max() < 1e-7
    assert fast.capped_fraction == pytest.approx(ref.capped_fraction) and fast.capped_fraction > 0.05
    # some kernels wait for the host at some configs, others not: both branches exercised
    waits = np.isclose(ref.time_s, dispatch_s, rtol=0, atol=1e-15)
    assert 0 < waits.mean() < 1


def test_an_unknown_method_is_refused():
    spec = get_device("rtx3080ti")
    prm = params_for(spec)
    rc = resolve_clocks(spec, [joulebound.ClockConfig()], prm)
    with pytest.raises(ValueError, match="method"):
        evaluate(trace_work(build_trace("gpt2-small"), spec, prm), rc, spec, prm, method="numba")


def test_no_product_module_outside_gpumodel_bypasses_the_evaluator():
    """Outside ``joulebound.gpumodel`` the product reaches the model through ``evaluate`` /
    ``characterize``: nothing imports the table method or the numba loops, and nothing but the
    evaluator's own module calls the reference formulas on a whole table."""
    pkg = Path(joulebound.__file__).parent
    private = {"fill_table", "config_terms", "fill_rows", "settle_rows"}
    bad = []
    for path in pkg.rglob("*.py"):
        rel = path.relative_to(pkg).as_posix()
        if rel.startswith("gpumodel/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and "gpumodel" in node.module:
                names = {a.name for a in node.names}
                if names & (private | {"kernel_time_energy"}) or node.module.endswith(
                        ("kernel_table", "cells_kernel")):
                    bad.append(f"{rel}:{node.lineno} imports {sorted(names)} from {node.module}")
    assert bad == [], bad

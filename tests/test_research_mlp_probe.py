"""Issue 26: the memory-level-parallelism knee of the kernel model, on a real GPU.

joulebound's read-only probe of an H200 (``docs/measurements/h200-2026-12-04.json``): streaming
bandwidth vs the number of SMs issuing requests at the governor's clock. One Little's-law knee
with two parameters (bytes per SM-cycle, exponent) describes it; without the knee — bandwidth
independent of how many SMs issue, what the old linear-λ model assumed for streaming kernels —
the model is off by an order of magnitude. The fit is in-sample (it sets the product's
defaults), so the test also pins the product's defaults to it.
"""

from __future__ import annotations

import pytest

from joulebound.gpumodel.params import DEFAULT_MLP_BYTES_PER_CYCLE, DEFAULT_MLP_Q, default_params
from joulebound.hw.catalog import get_device

mlp_probe = pytest.importorskip("research.mlp_probe")


def test_one_knee_describes_the_measured_bandwidth_curve():
    b, q, mape = mlp_probe.fit()
    assert mape <= 5.0
    n, bw, f, peak = mlp_probe.load()
    flat = mlp_probe.predict(n, 0.0, q, f, peak)
    assert (abs(flat / bw - 1)).mean() > 1.0           # the knee removed: > 100 % error


def test_product_defaults_are_the_probe_fit():
    b, q, _ = mlp_probe.fit()
    assert DEFAULT_MLP_BYTES_PER_CYCLE["elementwise"] == pytest.approx(b, rel=0.05)
    assert DEFAULT_MLP_Q == pytest.approx(q, abs=0.1)
    prm = default_params(get_device("h200-sxm"))
    assert prm.mlp("elementwise") == DEFAULT_MLP_BYTES_PER_CYCLE["elementwise"]


def test_knee_clock_of_an_h200_streaming_kernel():
    """f_knee = achieved bandwidth / (SMs x B): on an H200 a streaming kernel can no longer keep
    HBM3e busy below about half its top clock (the probe: 3.5 TB/s from 132 SMs at 1980 MHz)."""
    from joulebound.gpumodel.kernel import mlp_knee

    spec = get_device("h200-sxm")
    prm = default_params(spec)
    kappa = float(mlp_knee(prm.bw("elementwise") * spec.mem_bandwidth_bps, spec.sm_count,
                           spec.max_core_mhz, prm.mlp("elementwise")))
    assert 0.35 <= kappa <= 0.65

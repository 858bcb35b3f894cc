"""Shipped device parameters: present, labeled, used by characterize."""

from __future__ import annotations

import pytest

from joulebound.gpumodel import characterize, default_params, load_shipped, shipped_names
from joulebound.gpumodel.params import DeviceParams
from joulebound.hw.catalog import get_device
from joulebound.workload.analytic import build_trace


def test_shipped_files_with_provenance():
    assert {"a100-sxm4-80gb", "a40", "a100-pcie-80gb", "rtx3080ti"} <= set(shipped_names())
    for name in ("a100-sxm4-80gb", "a40", "a100-pcie-80gb"):
        p = load_shipped(name)
        assert p.calibration == "fit" and p.heldout["time_mape"] > 0 and p.sources
    t = load_shipped("rtx3080ti")
    assert t.calibration == "published" and t.provenance == "modeled"
    assert t.heldout["check"] == "spaan-table1"
    # the A100-PCIe shares the SXM kernel fit's V-f shape (same GA100 die), with its own limit
    pcie, sxm = load_shipped("a100-pcie-80gb"), load_shipped("a100-sxm4-80gb")
    assert pcie.vf.knee_mhz == pytest.approx(sxm.vf.knee_mhz) and pcie.power_limit_w == 300.0


def test_params_round_trip():
    p = load_shipped("a40")
    assert DeviceParams.from_json(p.to_json()) == p


def test_characterize_uses_shipped_and_caps_gpt3xl():
    spec = get_device("rtx3080ti")
    tr = build_trace("gpt3-xl")
    ch = characterize(tr, spec)
    assert ch.meta["params_calibration"] == "published"
    auto = ch.auto_index
    # GEMMs under the governor hit the board limit; streaming elementwise kernels do not
    names = ch.kernel_names
    g = next(i for i, k in enumerate(tr.kernels) if k.category == "gemm")
    e = next(i for i, k in enumerate(tr.kernels) if k.name.startswith("residual"))
    limit = load_shipped("rtx3080ti").power_limit_w
    assert ch.energy_j[g, auto] / ch.time_s[g, auto] == pytest.approx(limit, rel=0.01)
    assert ch.energy_j[e, auto] / ch.time_s[e, auto] < 0.95 * limit
    assert len(names) == len(tr)
    dflt = characterize(tr, spec, params=default_params(spec))
    assert dflt.meta["params_calibration"] == "none"

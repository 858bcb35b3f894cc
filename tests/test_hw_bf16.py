"""Issue 28 item 12 (part): GPUs without bf16 units (Volta, Turing, Pascal) have no bf16 rate.

The catalog lists no ``bf16`` peak for them; bf16 math then runs at the fp32 rate (emulated), not
at the fp16 tensor rate (another number format), and ``devices`` shows no bf16 figure."""

from __future__ import annotations

import json

import pytest

from joulebound.hw.catalog import get_device

NO_BF16 = ("v100-pcie", "v100-sxm2", "p100-pcie", "t4", "rtx6000", "rtx2080ti")


@pytest.mark.parametrize("name", NO_BF16)
def test_bf16_on_a_gpu_without_bf16_units_runs_at_the_fp32_rate(name):
    spec = get_device(name)
    assert "bf16" not in spec.peak_flops
    assert spec.peak("bf16") == spec.peak("fp32") < spec.peak("fp16")


def test_gpus_with_bf16_keep_their_rate():
    spec = get_device("a100-sxm4-80gb")
    assert spec.peak("bf16") == spec.peak_flops["bf16"] > spec.peak("fp32")


def test_devices_list_shows_no_bf16_figure_for_them(capsys):
    from joulebound.cli import main

    assert main(["devices", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    for name in NO_BF16:
        assert rows[name]["bf16_tflops"] is None
    assert rows["a100-sxm4-80gb"]["bf16_tflops"] > 100

"""One clock-pair rule (core.clocks.is_supported), used by every place that checks a pair:
the device spec, the calibration design, the clock helper and the calibration's clock list
(issue 29: it was written four times)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulebound.core.clocks import ClockConfig, is_supported
from joulebound.core.errors import JouleboundError
from joulebound.hw.catalog import get_device
from joulebound.measure.calibrate.design import validate_pair

TABLE = {9501: [2100, 1890, 1500, 210], 5001: [1500, 810]}


@pytest.mark.parametrize("cfg, ok", [
    (ClockConfig(), True), (ClockConfig(None, 9501), True), (ClockConfig(None, 7000), False),
    (ClockConfig(2100, 9501), True), (ClockConfig(2100, 5001), False),
    (ClockConfig(810, None), True),          # listed at some memory clock
    (ClockConfig(811, None), False), (ClockConfig(1500, 5001), True),
])
def test_the_rule(cfg, ok):
    assert is_supported(cfg, TABLE) is ok


@settings(max_examples=200, deadline=None, derandomize=True)
@given(core=st.one_of(st.none(), st.sampled_from([210, 810, 811, 1500, 1890, 2100, 3000])),
       mem=st.one_of(st.none(), st.sampled_from([5001, 7000, 9501])))
def test_every_checker_agrees_with_the_rule(core, mem):
    cfg = ClockConfig(core, mem)
    ok = is_supported(cfg, TABLE)
    try:
        validate_pair(cfg, TABLE)
        design_ok = True
    except JouleboundError:
        design_ok = False
    assert design_ok is ok


def test_the_spec_uses_the_rule_on_its_own_table():
    spec = get_device("rtx3080ti")
    for cfg in [*spec.clock_pairs(include_auto=True), ClockConfig(5, None),
                ClockConfig(None, 1), ClockConfig(1, max(spec.supported_clocks))]:
        assert spec.supports(cfg) is is_supported(cfg, spec.supported_clocks)


def test_the_helper_refuses_what_the_rule_refuses(tmp_path, monkeypatch):
    """The privileged helper's request check follows the same rule on the live GPU's table."""
    from joulebound.runtime.helper import ClockHelper
    from joulebound.testing.fakenvml import FakeNvml

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    h = ClockHelper(tmp_path / "clocks.sock", nvml=FakeNvml(n_gpus=1), check_privileges=False)
    table = h.supported(0)
    mems = sorted(table)
    cores = sorted(table[mems[-1]])
    cases = [ClockConfig(cores[-1], mems[-1]), ClockConfig(cores[0], None),
             ClockConfig(cores[-1] + 1, mems[-1]), ClockConfig(None, mems[-1] + 1),
             ClockConfig(None, mems[0]), ClockConfig()]
    for cfg in cases:
        try:
            h.validate(0, cfg.core_mhz, cfg.mem_mhz)
            ok = True
        except Exception as exc:   # the helper's request error
            assert "not supported" in str(exc)
            ok = False
        assert ok is is_supported(cfg, table), cfg


@pytest.mark.parametrize("bad", [[float("inf"), None], [{}, None], ["x", 1], [True, 1],
                                 [1.5, 1], [float("nan"), 1]])
def test_a_plan_file_with_a_bad_clock_is_an_error_naming_the_field(tmp_path, bad):
    """Fuzzed plan JSON crashed in ClockConfig.from_json (issue 30 item 13: OverflowError /
    TypeError tracebacks); every bad clock is now a SchemaError naming 'configs'."""
    import json

    from joulebound.core.errors import SchemaError
    from joulebound.planning.plan import Plan

    path = tmp_path / "p.json"
    path.write_text(json.dumps({"schema": "joulebound.plan", "version": 1, "name": "p",
                                "kernels": ["a"], "configs": [bad], "choice": [0]}))
    with pytest.raises(SchemaError, match="configs"):
        Plan.load(path)
    assert ClockConfig.from_json([1410, "1593"]) == ClockConfig(1410, 1593)
    assert ClockConfig.from_json([1410.0, None]) == ClockConfig(1410, None)

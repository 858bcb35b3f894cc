"""benchmarks/gpu_check.py is read-only: no NVML set/reset calls, no nvidia-smi setting flags;
its measurement code runs against a fake pynvml (so the first GPU run does not fail on a typo)."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
import time
import types
from pathlib import Path

import pytest

from joulebound.testing.fakenvml import FakeGPU, FakeNvml

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"
#: the script and the probe module it runs (both read-only)
SOURCE = SCRIPT.read_text() + (SCRIPT.parent / "gpu_physics.py").read_text()

#: nvidia-smi options that change GPU state (nvidia-smi --help, "Device Modification Options").
SMI_SETTERS = {"-pm", "--persistence-mode", "-e", "--ecc-config", "-p", "--reset-ecc-errors",
               "-c", "--compute-mode", "-dm", "--driver-model", "-fdm", "--force-driver-model",
               "--gom", "-r", "--gpu-reset", "-vm", "--virt-mode", "-lgc", "--lock-gpu-clocks",
               "-rgc", "--reset-gpu-clocks", "-lmc", "--lock-memory-clocks", "-rmc",
               "--reset-memory-clocks", "-ac", "--applications-clocks", "-rac",
               "--reset-applications-clocks", "-acp", "--applications-clocks-permission", "-pl",
               "--power-limit", "-cc", "--cuda-clocks", "-am", "--accounting-mode", "-caa",
               "--clear-accounted-apps", "--auto-boost-default", "--auto-boost-permission",
               "-mig", "--multi-instance-gpu", "-gpc", "--gpu-power-cap"}


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_nvml_setter_is_named_anywhere():
    setters = re.findall(r"nvml[A-Za-z]*(?:Set|Reset|Clear|Enable|Disable)[A-Za-z]*", SOURCE)
    assert setters == []


def test_no_nvidia_smi_setting_flag_and_only_the_query_is_run():
    tree = ast.parse(SOURCE)
    consts = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
              and isinstance(n.value, str)}
    assert not consts & SMI_SETTERS
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
             and n.func.value.id in ("subprocess", "os")]
    spawners = [c for c in calls if c.func.attr in
                ("run", "call", "check_call", "check_output", "Popen", "system", "popen")]
    assert spawners, "expected the nvidia-smi query"
    for c in spawners:
        assert isinstance(c.args[0], ast.Name) and c.args[0].id == "_SMI_QUERY"
    mod = load_script()
    assert mod._SMI_QUERY == ["nvidia-smi", "-q", "-x", "-d", "SUPPORTED_CLOCKS"]


def test_readonly_proxy_refuses_setters():
    mod = load_script()
    fake = types.SimpleNamespace(nvmlDeviceGetPowerUsage=lambda h: 1,
                                 nvmlDeviceSetGpuLockedClocks=lambda *a: None)
    ro = mod.ReadOnlyNVML(fake)
    assert ro.nvmlDeviceGetPowerUsage(0) == 1
    for name in ("nvmlDeviceSetGpuLockedClocks", "nvmlDeviceResetGpuLockedClocks",
                 "nvmlDeviceSetPowerManagementLimit", "nvmlDeviceSetApplicationsClocks",
                 "nvmlDeviceClearEccErrorCounts", "nvmlDeviceSetPersistenceMode"):
        with pytest.raises(PermissionError, match="read-only"):
            getattr(ro, name)


def _fake_nv() -> FakeNvml:
    """A GPU drawing a constant 150 W; the counter follows wall time."""
    gpu = FakeGPU("GPU-fake", energy_mj=0, power_mw=150_000, name="fake", clock=time.perf_counter)
    return FakeNvml(gpus=[gpu], supported={3201: [1980, 1965, 345], 405: [405]})


def test_counter_vs_power_section_runs_on_a_fake(tmp_path, monkeypatch):
    mod = load_script()
    fake = _fake_nv()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    from joulebound.hw.gpu import Nvml

    ro = mod._install_readonly_nvml()
    dev = Nvml(ro).open(0)
    r = mod.counter_vs_power(dev, 0.3, lambda s: time.sleep(s) or {}, tmp_path, "idle")
    assert r["counter_j"] == pytest.approx(150 * r["seconds"], rel=0.05)
    assert r["power_over_counter"] == pytest.approx(1.0, rel=0.1)
    assert r["meter_j"] == pytest.approx(r["counter_j"], rel=0.1)
    assert r["meter_source"] == "nvml.energy_counter"
    assert (tmp_path / "power_trace_idle.csv").read_text().startswith("t_s,power_w,counter_j")
    p = mod.update_periods(dev, 0.05)
    assert p["polls"] > 5 and p["counter_changes"] > 1


def test_info_section_reads_clock_table_on_a_fake(tmp_path, monkeypatch):
    mod = load_script()
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nv())
    monkeypatch.setattr(mod, "_SMI_QUERY", [sys.executable, "-c", "print('<xml/>')"])
    ro = mod._install_readonly_nvml()
    d = mod.info(ro, 0, tmp_path)
    assert d["name"] == "fake" and d["uuid"] == "GPU-fake"
    assert d["supported_clocks"] == {"3201": [1980, 1965, 345], "405": [405]}
    assert d["supported_clocks_summary"]["3201"] == {"n": 3, "min": 345, "max": 1980}
    assert d["sm_clock_mhz"] == 1980                         # the fake's default (top) clock
    assert d["driver"] == "550.54.15"  # the fake's driver version, as pynvml returns it
    assert (tmp_path / "supported_clocks.json").exists()
    assert (tmp_path / "nvidia-smi-supported-clocks.xml").read_text().strip() == "<xml/>"
    assert "mem_clocks_match" in d["catalog_h200_sxm"]


def test_rehearsal_runs_the_nvml_sections_without_a_gpu(tmp_path, monkeypatch, capsys):
    """``--rehearse``: the testing package's fake NVML behind the read-only proxy; the idle
    section's counter reads the fake's 150 W and the meter agrees within its stated bound. The script's ``main()``
    runs in this process (torch is loaded already: a child would pay its import, ~7 CPU-s); its
    ``python benchmarks/gpu_check.py`` entry point is checked with ``--help``. ``pynvml`` and
    ``CUDA_VISIBLE_DEVICES``, which the script sets, are restored afterwards."""
    import json
    import subprocess

    entry = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                           text=True, timeout=60)
    assert entry.returncode == 0 and "--rehearse" in entry.stdout, entry.stderr[-2000:]
    # recorded so that teardown undoes what the script sets (delitem/delenv of an absent name
    # record nothing: the script's fake pynvml and GPU UUID would leak into later tests)
    if "pynvml" not in sys.modules:
        monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.delitem(sys.modules, "pynvml")
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        if var not in os.environ:
            monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    out = tmp_path / "out"
    assert load_script().main(["--rehearse", "--quick", "--idle-s", "0.3",
                               "--calibrate-budget-s", "2", "--out", str(out)]) == 0
    assert "[gpu_check] calibrate_auto ..." in capsys.readouterr().out
    res = json.loads((out / "gpu_check.json").read_text())
    assert res["rehearsal"] is True and res["info"]["uuid"] == "GPU-rehearsal"
    idle = res["idle"]
    assert idle["avg_power_w_counter"] == pytest.approx(150, rel=0.02)
    # the meter's window on the fake's 150 W, within the meter's own error bound (a thread
    # stalled between two counter reads widens a step's bracket: under load the meter was seen
    # 7 J off the 45.6 J with a 16.6 J bound, never outside it in 100 windows under 4 CPU hogs)
    true_j = 150.0 * idle["meter_s"]
    assert abs(idle["meter_j"] - true_j) <= idle["meter_uncertainty_j"] + 1e-6
    assert idle["meter_uncertainty_j"] < true_j          # a bound that says something
    assert res["bert"] == {"skipped": "rehearsal without a GPU"}
    cal = res["calibrate_auto"]           # read-only calibration, replayed on CPU against the fake
    assert "error" not in cal, cal
    assert cal["measured_cells"] > 0 and cal["clock_switches"] == 0

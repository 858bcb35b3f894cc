"""Read-only check of joulebound's energy measurement on a lent NVIDIA GPU (written for an H200).

READ-ONLY: this script never calls an NVML set/reset/clear function and never runs nvidia-smi
with a setting flag. It reaches NVML only through :class:`ReadOnlyNVML`, which refuses any
function whose name sets, resets, clears, enables or disables something, and it installs that
proxy as ``pynvml`` so joulebound's own NVML backend goes through it too.
``tests/test_energy_gpu_check.py`` greps this file for forbidden calls and flags.

The GPU is found through joulebound's device layer (:mod:`joulebound.hw.gpu`): ``--gpu``
is the GPU as CUDA numbers it (an index into ``CUDA_VISIBLE_DEVICES`` when set, else the NVML
index) or a UUID; the script then sets ``CUDA_VISIBLE_DEVICES`` to that GPU's UUID, so torch and the
energy meter use exactly that GPU. Reads go through :class:`~joulebound.hw.gpu.GpuDevice`
(energy in mJ, power in W).

What it measures (GPU 0 unless ``--gpu``), results under ``--out`` (default ``$OUT`` or
``./gpu_check_out``):

1. ``info``: name, UUID, driver/NVML versions, power limit (read), current/max clocks, MIG mode,
   energy-counter support, the supported clock table (NVML) and its agreement with joulebound's
   catalog entry; ``nvidia-smi -q -x -d SUPPORTED_CLOCKS`` saved raw for ``joulebound devices``.
2. ``update_periods``: how often the energy counter and the power field change (polling every
   ~1 ms), idle and under load.
3. ``idle`` and ``load``: energy from the counter vs the trapezoid integral of power sampled every
   10 ms, over ``--idle-s`` idle seconds and ``--load-s`` seconds of bf16 GEMMs (8192^3); plus
   joulebound's EnergyMeter (nvml backend) over the same windows, which must equal the counter.
4. ``short_windows``: 40 windows of 20 ms under load: how often the raw counter did not move, and
   what the meter reported (flags) instead of zero.
5. ``bert_step``: one BERT-base (MLM, batch 8, seq 512, bf16 autocast, AdamW) training step
   profiled with torch.profiler and turned into a joulebound Trace (saved), with the analytic
   trace's FLOPs beside it; energy per step measured over 20 steps (10 with ``--quick``).
6. ``mlp`` and ``host_bound`` (:mod:`benchmarks.gpu_physics`): streaming bandwidth vs the number of SMs
   issuing requests (memory-level parallelism), and eager host-bound ops vs CUDA-graph replay
   (µs per op, average power, the governor's SM clock) beside idle; ``hf_dispatch``: an eager
   Hugging Face GPT-2 training step's host cost per kernel (wall vs the profiler's GPU busy time).

Rehearsal without a GPU: ``--rehearse`` puts :class:`joulebound.testing.fakenvml.FakeNvml` (one
GPU drawing a steady 150 W) behind the read-only proxy, so the NVML sections (info, update periods,
idle) run on CPU before device time is spent; the CUDA sections are recorded as skipped.

Run: ``python benchmarks/gpu_check.py --out "$OUT"`` (about 3-4 minutes, the read-only calibration included); ``--quick`` shortens
every timed section (idle 2 s, load 4 s, 1 s update-period polls, 20 short windows, 10 metered BERT
steps) so that it and ``benchmarks/gpu_sweep.py --budget-s 150`` fit together in about 5 minutes.
Every section is guarded: a failure is recorded in the JSON and the next section runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: NVML functions this script may never call (matched on the name).
_FORBIDDEN = re.compile(r"^nvml\w*?(Set|Reset|Clear|Enable|Disable|Register|Create|Destroy|"
                        r"Modify|Remove|Discover|Inject)")
#: the only nvidia-smi argument lists this script runs (queries).
_SMI_QUERY = ["nvidia-smi", "-q", "-x", "-d", "SUPPORTED_CLOCKS"]


class ReadOnlyNVML:
    """``pynvml`` with every state-changing function refused (PermissionError)."""

    def __init__(self, nv: Any) -> None:
        self._nv = nv

    def __getattr__(self, name: str) -> Any:
        if _FORBIDDEN.match(name):
            raise PermissionError(f"gpu_check is read-only: refusing pynvml.{name}")
        return getattr(self._nv, name)


def _install_rehearsal_nvml() -> Any:
    """A fake ``pynvml`` (:mod:`joulebound.testing.fakenvml`) installed as ``pynvml``: one
    H200-named GPU drawing 150 W, its energy counter following wall time."""
    from joulebound.testing.fakenvml import FakeGPU, FakeNvml

    gpu = FakeGPU("GPU-rehearsal", energy_mj=0, power_mw=150_000, name="NVIDIA H200 (fake)",
                  clock=time.perf_counter)
    fake = FakeNvml(gpus=[gpu], supported={3201: [1980, 1965, 345], 405: [405]})
    sys.modules["pynvml"] = fake  # type: ignore[assignment]
    return fake


def _install_readonly_nvml() -> Any:
    import pynvml

    ro = ReadOnlyNVML(pynvml)
    sys.modules["pynvml"] = ro  # type: ignore[assignment]
    return ro


def _t(x: Any) -> Any:
    return x.decode() if isinstance(x, bytes) else x


def _try(fn: Any) -> Any:
    """``fn()``, or ``"unavailable: <why>"`` when the query is missing or not supported."""
    try:
        return fn()
    except Exception as exc:  # NVML NOT_SUPPORTED etc.
        return f"unavailable: {exc}"


# -- 1. info -----------------------------------------------------------------------------------
def info(nv: Any, h: Any, out: Path) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": _t(nv.nvmlDeviceGetName(h)), "uuid": _t(nv.nvmlDeviceGetUUID(h)),
        "driver": _t(_try(lambda: nv.nvmlSystemGetDriverVersion())),
        "nvml": _t(_try(lambda: nv.nvmlSystemGetNVMLVersion())),
        "power_limit_w": _try(lambda: nv.nvmlDeviceGetPowerManagementLimit(h) / 1000),
        "power_limit_constraints_w": _try(
            lambda: [x / 1000 for x in nv.nvmlDeviceGetPowerManagementLimitConstraints(h)]),
        "enforced_power_limit_w": _try(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000),
        "sm_clock_mhz": _try(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
        "mem_clock_mhz": _try(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
        "max_sm_clock_mhz": _try(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
        "max_mem_clock_mhz": _try(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
        "mig_mode": _try(lambda: nv.nvmlDeviceGetMigMode(h)),
        "energy_counter_mj": _try(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h)),
        "power_w": _try(lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000),
    }
    table: dict[int, list[int]] = {}
    try:
        for m in nv.nvmlDeviceGetSupportedMemoryClocks(h):
            table[int(m)] = sorted((int(c) for c in nv.nvmlDeviceGetSupportedGraphicsClocks(h, m)),
                                   reverse=True)
    except Exception as exc:
        d["supported_clocks_error"] = str(exc)
    d["supported_clocks"] = {str(k): v for k, v in table.items()}
    d["supported_clocks_summary"] = {str(m): {"n": len(v), "min": min(v), "max": max(v)}
                                     for m, v in table.items() if v}
    (out / "supported_clocks.json").write_text(json.dumps(d["supported_clocks"], indent=1))
    try:  # raw XML for `joulebound devices` import (a query: no setting flag)
        xml = subprocess.run(_SMI_QUERY, capture_output=True, text=True, timeout=60).stdout
        (out / "nvidia-smi-supported-clocks.xml").write_text(xml)
    except Exception as exc:
        d["nvidia_smi_error"] = str(exc)
    try:
        from joulebound.hw.catalog import get_device

        spec = get_device("h200-sxm")
        ours = {int(k): sorted(v, reverse=True) for k, v in spec.supported_clocks.items()}
        d["catalog_h200_sxm"] = {
            "tables_constructed": spec.tables_constructed,
            "mem_clocks_match": sorted(ours) == sorted(table),
            "core_clocks_match_at_top_mem": bool(table) and
            ours.get(max(table), []) == table.get(max(table), []),
            "catalog_summary": {str(m): {"n": len(v), "min": min(v), "max": max(v)}
                                for m, v in ours.items() if v}}
    except Exception as exc:
        d["catalog_h200_sxm"] = f"unavailable: {exc}"
    return d


# -- 2. update periods -------------------------------------------------------------------------
def update_periods(dev: Any, seconds: float) -> dict[str, Any]:
    """Poll counter and power every ~1 ms; median time between value changes."""
    import numpy as np

    nv, h = dev.nv, dev.handle
    t_e, t_p = [], []
    last_e = last_p = None
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        e = dev.energy_mj()
        p = dev.power_w()
        n += 1
        if e != last_e:
            t_e.append(t)
            last_e = e
        if p != last_p:
            t_p.append(t)
            last_p = p
        time.sleep(0.001)

    def med(ts: list[float]) -> float | None:
        return float(np.median(np.diff(ts[1:]))) if len(ts) > 2 else None

    d: dict[str, Any] = {"polls": n, "poll_period_s": seconds / max(n, 1),
                         "counter_changes": len(t_e), "counter_period_s": med(t_e),
                         "power_changes": len(t_p), "power_period_s": med(t_p)}
    # NVML field values: instantaneous vs averaged power (GA100+ GetPowerUsage is an average)
    fields = [getattr(nv, f, None) for f in ("NVML_FI_DEV_POWER_INSTANT",
                                             "NVML_FI_DEV_POWER_AVERAGE")]
    if all(f is not None for f in fields):
        try:
            t_i: list[float] = []
            last_i = None
            end = time.perf_counter() + min(seconds, 1.0)
            inst, avg = [], []
            while time.perf_counter() < end:
                vals = nv.nvmlDeviceGetFieldValues(h, fields)
                t = time.perf_counter()
                vi, va = vals[0].value.uiVal, vals[1].value.uiVal
                inst.append(vi / 1000)
                avg.append(va / 1000)
                if vi != last_i:
                    t_i.append(t)
                    last_i = vi
                time.sleep(0.001)
            d.update(instant_power_period_s=med(t_i), instant_power_w_mean=float(np.mean(inst)),
                     average_power_w_mean=float(np.mean(avg)))
        except Exception as exc:
            d["field_values_error"] = str(exc)
    return d


# -- 3. counter vs integrated power -------------------------------------------------------------
class _PowerPoller(threading.Thread):
    def __init__(self, dev: Any, interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.dev, self.interval = dev, interval
        self.rows: list[tuple[float, float, float]] = []
        self.stop_ev = threading.Event()

    def run(self) -> None:
        while not self.stop_ev.is_set():
            self.rows.append((time.perf_counter(), self.dev.power_w(),
                              self.dev.energy_mj() / 1000))
            self.stop_ev.wait(self.interval)


def counter_vs_power(dev: Any, seconds: float, work: Any, out: Path,
                     label: str) -> dict[str, Any]:
    import numpy as np

    from joulebound.energy.meter import EnergyMeter

    meter = EnergyMeter("nvml", gpus=[0], interval_s=0.01)
    poller = _PowerPoller(dev)
    poller.start()
    time.sleep(0.05)
    meter.begin_window(label)
    e0 = dev.energy_mj()
    t0 = time.perf_counter()
    extra = work(seconds)
    e1 = dev.energy_mj()
    t1 = time.perf_counter()
    res = meter.end_window(label)
    poller.stop_ev.set()
    poller.join()
    meter.close()
    rows = np.array([r for r in poller.rows if t0 <= r[0] <= t1])
    e_power = float(np.trapezoid(rows[:, 1], rows[:, 0])) if len(rows) > 1 else None
    e_counter = (e1 - e0) / 1000
    with open(out / f"power_trace_{label}.csv", "w") as f:
        f.write("t_s,power_w,counter_j\n")
        for r in poller.rows:
            f.write(f"{r[0] - t0:.4f},{r[1]:.3f},{r[2]:.3f}\n")
    return {"seconds": t1 - t0, "counter_j": e_counter, "power_integral_j": e_power,
            "power_over_counter": (e_power / e_counter) if e_power and e_counter else None,
            "avg_power_w_counter": e_counter / (t1 - t0), "meter_j": res.energy_j,
            "meter_uncertainty_j": res.energy_uncertainty_j, "meter_s": res.duration_s,
            "meter_flags": res.flags, "meter_source": res.devices[0].source,
            "meter_peak_w": res.devices[0].peak_power_w, "n_power_samples": int(len(rows)),
            **(extra or {})}


def gemm_work(seconds: float, n: int = 8192) -> dict[str, Any]:
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    k = 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            a @ b
        k += 10
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return {"gemms": k, "achieved_tflops": 2 * n**3 * k / dt / 1e12}


def short_windows(dev: Any, n: int = 40, dur: float = 0.02) -> dict[str, Any]:
    import torch

    from joulebound.energy.meter import EnergyMeter

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    meter = EnergyMeter("nvml", gpus=[0], interval_s=0.01)
    zero_raw = 0
    flags: dict[str, int] = {}
    energies = []
    for i in range(n):
        e0 = dev.energy_mj()
        meter.begin_window(f"s{i}")
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < dur:
            a @ a
            torch.cuda.synchronize()
        r = meter.end_window(f"s{i}")
        zero_raw += int(dev.energy_mj() == e0)
        energies.append(r.energy_j)
        for f in r.flags:
            flags[f] = flags.get(f, 0) + 1
    meter.close()
    return {"windows": n, "window_s": dur, "raw_counter_unchanged": zero_raw,
            "meter_zero_results": sum(1 for e in energies if e == 0), "meter_flags": flags,
            "meter_energy_j_median": sorted(energies)[len(energies) // 2]}


# -- 5. BERT-base step --------------------------------------------------------------------------
def bert_step(out: Path, steps: int = 20) -> dict[str, Any]:
    import torch
    from transformers import BertConfig, BertForMaskedLM

    from joulebound.energy.meter import EnergyMeter
    from joulebound.workload.capture import profile_steps

    torch.manual_seed(0)
    batch, seq = 8, 512
    model = BertForMaskedLM(BertConfig()).cuda()  # bert-base shape, random weights (no download)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 30522, (batch, seq), device="cuda")

    def step(i: int) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    tr = profile_steps(step, steps=1, warmup=2, name="bert-base-hf-b8-s512",
                       chrome_out=out / "bert_base_step.chrome.json")
    tr.save(out / "bert_base_step.trace.json")
    meter = EnergyMeter("nvml", gpus=[0], interval_s=0.05)
    for i in range(3):
        step(i)
    meter.begin_window("steps")
    for i in range(steps):
        step(i)
    res = meter.end_window("steps")
    meter.close()
    d: dict[str, Any] = {
        "kernels": len(tr), "kind": tr.meta.get("kind"),
        "kernel_time_s": float(sum(k.duration_s or 0 for k in tr.kernels)),
        "flops_from_shapes": tr.total_flops, "bytes_from_shapes": tr.total_bytes,
        "categories": dict(tr.count_by("category")), "phases": dict(tr.count_by("phase")),
        "metered_steps": steps, "step_time_s_measured": res.duration_s / steps,
        "step_energy_j_measured": None if res.energy_j is None else res.energy_j / steps,
        "energy_flags": res.flags}
    try:
        from joulebound.workload.analytic import build_trace

        an = build_trace("bert-base", batch=batch, seq=seq, dtype="bf16")
        d["analytic_flops_modeled"] = an.total_flops
        d["analytic_kernels"] = len(an)
        d["flops_ratio_profiled_over_analytic"] = tr.total_flops / an.total_flops
    except Exception as exc:
        d["analytic"] = f"unavailable: {exc}"
    return d


# -- 6. read-only calibration -------------------------------------------------------------------
def calibrate_auto(nv: Any, gpu: Any, out: Path, budget_s: float, rehearse: bool) -> dict[str, Any]:
    """``joulebound calibrate --clocks auto`` through this script's read-only NVML proxy."""
    import torch

    from joulebound.measure.calibrate.backends import NvmlBackend
    from joulebound.measure.calibrate.calibration import calibrate
    from joulebound.measure.calibrate.measure import WindowSettings
    from joulebound.runtime.controller import trace_from_ops
    from joulebound.runtime.hooks import OpStream

    if rehearse:
        from joulebound.testing.demo_gpt import TinyGPTConfig, make_step

        step_fn, _ = make_step(TinyGPTConfig())
        steps = [lambda: step_fn()] * 3
        device, torch_device = "h200-sxm", "cpu"
    else:
        from transformers import BertConfig, BertForMaskedLM

        torch.manual_seed(0)
        model = BertForMaskedLM(BertConfig()).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(0, 30522, (8, 512), device="cuda")

        def one() -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        steps = [one] * 3
        device, torch_device = "h200-sxm", "cuda:0"
    for s in steps[:-1]:
        s()
    with OpStream(record=True, capture_args=True) as rec:
        steps[-1]()
    if torch_device.startswith("cuda"):
        torch.cuda.synchronize()
    specs = {rec.name(k): v for k, v in rec.arg_specs.items()}
    trace = trace_from_ops([rec.name(k) for k in rec.keys], "bert-base-b8-s512-step", specs)
    trace.save(out / "calibrate_ops.json")
    be = NvmlBackend(0, nvml=nv, torch_device=torch_device)
    try:
        ws = WindowSettings(sensor_period_s=be.sensor_period_s, k_periods=5, repeats=1,
                            warmup_s=0.1)
        res = calibrate(trace, device, be, clocks="auto", budget_s=budget_s, window=ws)
    finally:
        be.close()
    res.char.save(out / "calibrate_auto.npz")
    d = res.to_json()
    (out / "calibrate_auto.json").write_text(json.dumps(d, indent=1, default=str))
    err = d["model_error_at_auto"]
    return {k: d[k] for k in ("gpu", "distinct_kernels", "replayable_kernels", "measured_cells",
                              "gpu_seconds", "wall_s", "clock_switches", "not_measured_budget")} | {
        "time_mape": err.get("time_mape"), "energy_mape": err.get("energy_mape"),
        "worst": [{k: w[k] for k in ("name", "time_error", "energy_error")}
                  for w in err.get("worst", [])],
        "not_replayable": [(u["name"], u["reason"]) for u in d["not_replayable"]],
        "temperature_c": [c["temperature_c"] for c in d["cells"][:5]],
        "sm_mhz": sorted({c["sm_mhz"] for c in d["cells"] if c["sm_mhz"] is not None})[-3:],
        "ops_recorded": len(trace)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT", "gpu_check_out"))
    p.add_argument("--gpu", default="0", help="the GPU: CUDA-visible index (through "
                   "CUDA_VISIBLE_DEVICES when set) or UUID")
    p.add_argument("--idle-s", type=float, default=None, help="idle window (s; 5, --quick 2)")
    p.add_argument("--load-s", type=float, default=None, help="GEMM window (s; 10, --quick 4)")
    p.add_argument("--quick", action="store_true",
                   help="shorter sections (about half the time), for a device budget shared with "
                        "gpu_sweep.py")
    p.add_argument("--skip", action="append", default=[],
                   help="section(s) to skip: info, periods, idle, load, short, bert, calibrate, "
                        "mlp, host_bound, hf_dispatch")
    p.add_argument("--calibrate-budget-s", type=float, default=None,
                   help="device time for the read-only calibration (s; 120, --quick 60, "
                        "--rehearse 5)")
    p.add_argument("--rehearse", action="store_true",
                   help="no GPU: a fake NVML (joulebound.testing.fakenvml) behind the read-only "
                        "proxy; the CUDA sections (load, periods_load, short, bert) are skipped")
    a = p.parse_args(argv)
    idle_s = a.idle_s if a.idle_s is not None else (2.0 if a.quick else 5.0)
    load_s = a.load_s if a.load_s is not None else (4.0 if a.quick else 10.0)
    poll_s = 1.0 if a.quick else 2.0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from joulebound.hw.gpu import Nvml

    if a.rehearse:
        _install_rehearsal_nvml()
        a.skip += ["load", "periods_load", "short", "bert", "mlp", "host_bound", "hf_dispatch", "hf_grid", "wrapper_host", "dtensor_tp", "compiled_grid"]
    nv = _install_readonly_nvml()
    session = Nvml(nv)
    dev = session.open(int(a.gpu) if a.gpu.isdigit() else a.gpu)
    h = dev.handle
    # torch and the meter see exactly this GPU (by UUID: no numbering ambiguity)
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    os.environ["CUDA_VISIBLE_DEVICES"] = dev.uuid
    results: dict[str, Any] = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "host": platform.node(), "python": platform.python_version(),
                               "quick": a.quick, "rehearsal": a.rehearse}

    def section(name: str, fn: Any, *args: Any) -> None:
        if name in a.skip or name.split("_")[0] in a.skip:  # "periods" skips periods_idle/_load
            if a.rehearse:
                results[name] = {"skipped": "rehearsal without a GPU"}
                (out / "gpu_check.json").write_text(json.dumps(results, indent=1, default=str))
            return
        t0 = time.perf_counter()
        print(f"[gpu_check] {name} ...", flush=True)
        try:
            results[name] = fn(*args)
        except Exception as exc:
            results[name] = {"error": f"{type(exc).__name__}: {exc}",
                             "traceback": traceback.format_exc()[-2000:]}
        results[name + "_wall_s"] = time.perf_counter() - t0
        (out / "gpu_check.json").write_text(json.dumps(results, indent=1, default=str))

    section("info", info, nv, h, out)
    section("periods_idle", update_periods, dev, poll_s)
    section("idle", counter_vs_power, dev, idle_s, lambda s: time.sleep(s) or {}, out, "idle")
    section("load", counter_vs_power, dev, load_s, gemm_work, out, "load")

    def periods_load() -> dict[str, Any]:
        th = threading.Thread(target=gemm_work, args=(poll_s + 1.0,), daemon=True)
        th.start()
        time.sleep(0.5)
        r = update_periods(dev, poll_s)
        th.join()
        return r

    section("periods_load", periods_load)
    section("short", short_windows, dev, 20 if a.quick else 40)
    section("bert", bert_step, out, 10 if a.quick else 20)
    cal_budget = a.calibrate_budget_s if a.calibrate_budget_s is not None else (
        5.0 if a.rehearse else 60.0 if a.quick else 120.0)
    section("calibrate_auto", calibrate_auto, nv, dev, out, cal_budget, a.rehearse)
    from benchmarks import gpu_physics  # read-only probes of the kernel model's mechanisms

    section("mlp", gpu_physics.mlp, dev, a.quick)
    section("host_bound", gpu_physics.host, dev, a.quick)
    section("hf_dispatch", gpu_physics.hf_dispatch, dev, a.quick)
    section("hf_grid", gpu_physics.hf_grid, dev, a.quick)
    section("wrapper_host", gpu_physics.wrapper_host, dev, a.quick)
    section("dtensor_tp", gpu_physics.dtensor_tp_host, dev, a.quick)
    section("compiled_grid", gpu_physics.compiled_grid, dev, a.quick, out)
    session.close()
    print(json.dumps({k: v for k, v in results.items() if k != "info"}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

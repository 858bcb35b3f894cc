"""Energy meter overheads: begin/end window cost (µs per pair) and sampler CPU use (% of a core).

The NVML rows use a minimal in-process fake ``pynvml`` (each call returns at once), so they
measure joulebound's own overhead; a real driver call adds its own latency (measured on a GPU by
``benchmarks/gpu_check.py``).
"""

from __future__ import annotations

import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np


def _fake_pynvml(n_gpus: int = 1) -> types.ModuleType:
    """The real ``pynvml``'s constants and error classes with instant stand-ins for the calls a
    meter makes: one fake for joulebound and the peers (Zeus needs the constants)."""
    import pynvml as real

    nv = types.ModuleType("pynvml")
    nv.__dict__.update({k: v for k, v in real.__dict__.items() if not k.startswith("__")})
    state = {"e": 0}

    def energy(h):                 # a counter that steps at every read (7 mJ)
        state["e"] += 7
        return state["e"]

    nv.nvmlInit = nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: n_gpus
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-fake-{h}"
    nv.nvmlDeviceGetName = lambda h: "NVIDIA A100-SXM4-80GB"
    nv.nvmlDeviceGetArchitecture = lambda h: 7
    nv.nvmlSystemGetDriverVersion = lambda: "550.00"
    nv.nvmlDeviceGetMigMode = lambda h: [0, 0]
    nv.nvmlDeviceGetTotalEnergyConsumption = energy
    nv.nvmlDeviceGetPowerUsage = lambda h: 250_000
    return nv


def _nvml_calls(nv: types.ModuleType, make_pair, n: int = 100) -> dict[str, float]:
    """NVML calls per begin + end pair (by function name), over ``n`` pairs after 20 of warm-up:
    each of the fake's functions wrapped in a counter, then a meter made (``make_pair() ->
    (begin, end, close)``, so it holds the counting functions), then the functions put back."""
    from collections import Counter

    calls: Counter[str] = Counter()
    names = [k for k, v in vars(nv).items() if k.startswith("nvml") and callable(v)]
    saved = {k: getattr(nv, k) for k in names}

    def counted(name, fn):
        def call(*a):
            calls[name] += 1
            return fn(*a)
        return call

    for k in names:
        setattr(nv, k, counted(k, saved[k]))
    try:
        begin, end, close = make_pair()
        for _ in range(20):
            begin()
            end()
        calls.clear()
        for _ in range(n):
            begin()
            end()
        counts = {k: c / n for k, c in sorted(calls.items())}
        close()
    finally:
        for k, v in saved.items():
            setattr(nv, k, v)
    return counts


def _bytecodes(pair) -> tuple[int, int]:
    """Python bytecode instructions executed by one ``pair()`` and the Python function calls
    among them (``sys.settrace`` opcode and call events, ``pair`` itself not counted): the
    interpreter's work, independent of the machine's load."""
    count = [0, -1]

    def trace(frame, event, arg):
        frame.f_trace_opcodes = True
        if event == "opcode":
            count[0] += 1
        elif event == "call":
            count[1] += 1
        return trace

    sys.settrace(trace)
    try:
        pair()
    finally:
        sys.settrace(None)
    return count[0], count[1]


def _pair_us(meter, n: int = 2000) -> tuple[float, float, float]:
    """CPU µs of one begin_window + end_window pair: (median, min, max) of 7 runs of ``n``."""
    def end() -> None:
        meter.end_window("w")
        meter.results.clear()

    return _pair_cpu(lambda: meter.begin_window("w"), end, n=n)


def _pair_cpu(begin, end, n: int = 2000, repeats: int = 7) -> tuple[float, float, float]:
    """(median, min, max) CPU µs of one begin + end pair over ``repeats`` runs of ``n`` pairs."""
    for _ in range(200):
        begin()
        end()
    reps = []
    for _r in range(repeats):
        c0 = time.process_time()
        for _i in range(n):
            begin()
            end()
        reps.append((time.process_time() - c0) / n * 1e6)
    return float(np.median(reps)), min(reps), max(reps)


def _read_jb(res) -> float:
    """What a user reads of every window, as for :func:`_read_zeus`: total energy (J) and
    duration (s)."""
    return res.energy_j + res.duration_s


def _read_zeus(res) -> float:
    """Zeus's ``Measurement``: ``total_energy`` (J, summed over GPUs when first read) and
    ``time`` (s)."""
    return res.total_energy + res.time


def _read_jb_devices(res) -> float:
    """:func:`_read_jb` and every GPU's energy (J) and the uncertainty (J): joulebound computes
    the per-device figures when they are first read."""
    return res.energy_j + res.duration_s + res.energy_uncertainty_j + sum(
        d.energy_j for d in res.devices)


def _read_zeus_devices(res) -> float:
    """:func:`_read_zeus` and every GPU's energy (J)."""
    return res.total_energy + res.time + sum(res.gpu_energy.values())


def _paired(jb_pair, z_pair) -> tuple[list[float], list[float]]:
    """9 alternating runs of 2000 pairs each: joulebound's and Zeus's CPU µs per pair."""
    jb, zs = [], []
    for _ in range(9):
        jb.append(_pair_cpu(*jb_pair, repeats=1)[0])
        zs.append(_pair_cpu(*z_pair, repeats=1)[0])
    return jb, zs


def _peer_rows(nv: types.ModuleType) -> tuple[list[tuple[str, tuple[float, float, float] | str]],
                                              dict[str, tuple[float, float, float]],
                                              list[tuple[str, str, int]]]:
    """joulebound and Zeus (1 and 8 GPUs) and CodeCarbon (tasks), in this run, same fake NVML
    ``nv``.

    joulebound's and Zeus's runs alternate (one run of 2000 pairs each, 9 times), so a change of
    the machine's load hits both; besides each meter's median, the median (min–max) of the 9
    paired ratios per GPU count, for the pair reading each window's total energy and duration
    and for the pair reading every GPU's energy too; and per meter the NVML calls and Python
    bytecodes of one pair."""
    import logging

    from joulebound.energy.meter import EnergyMeter

    rows: list[tuple[str, tuple[float, float, float] | str]] = []
    ratios: dict[str, tuple[float, float, float]] = {}
    work: list[tuple[str, str, int]] = []
    for n in (1, 8):
        m = EnergyMeter("nvml", gpus=list(range(n)), interval_s=0)
        jb_pair = (lambda m=m: m.begin_window("w", sync=False),
                   lambda m=m: (_read_jb(m.end_window("w", sync=False)), m.results.clear()))
        jb_dev = (jb_pair[0],
                  lambda m=m: (_read_jb_devices(m.end_window("w", sync=False)),
                               m.results.clear()))
        try:
            logging.getLogger("zeus").setLevel(logging.ERROR)
            from zeus.monitor import ZeusMonitor

            z = ZeusMonitor(gpu_indices=list(range(n)), cpu_indices=[], approx_instant_energy=False)
            z_pair = (lambda z=z: z.begin_window("w", sync_execution=False),
                      lambda z=z: _read_zeus(z.end_window("w", sync_execution=False)))
            z_dev = (z_pair[0],
                     lambda z=z: _read_zeus_devices(z.end_window("w", sync_execution=False)))
        except Exception as exc:  # noqa: BLE001 - a peer missing is reported, not fatal
            rows.append((f"joulebound EnergyMeter, {n} GPU(s), sync off", _pair_cpu(*jb_pair)))
            rows.append((f"Zeus, {n} GPU(s)", f"not measured ({type(exc).__name__}: {exc})"))
            m.close()
            continue
        jb, zs = _paired(jb_pair, z_pair)
        jb_d, zs_d = _paired(jb_dev, z_dev)
        def make_jb(n=n):
            mm = EnergyMeter("nvml", gpus=list(range(n)), interval_s=0)
            return (lambda: mm.begin_window("w", sync=False),
                    lambda: (_read_jb(mm.end_window("w", sync=False)), mm.results.clear()),
                    mm.close)

        def make_z(n=n):
            zz = ZeusMonitor(gpu_indices=list(range(n)), cpu_indices=[],
                             approx_instant_energy=False)
            return (lambda: zz.begin_window("w", sync_execution=False),
                    lambda: _read_zeus(zz.end_window("w", sync_execution=False)), lambda: None)

        for meter, pair, make in (("joulebound", jb_pair, make_jb), ("Zeus", z_pair, make_z)):
            calls = _nvml_calls(nv, make)
            work.append((f"{meter}, {n} GPU{'s' if n > 1 else ''}",
                         ", ".join(f"{v:g} × `{k}`" for k, v in calls.items()) or "none",
                         _bytecodes(lambda pair=pair: (pair[0](), pair[1]()))))
        m.close()
        rows.append((f"joulebound EnergyMeter, {n} GPU(s), sync off",
                     (float(np.median(jb)), min(jb), max(jb))))
        rows.append((f"Zeus {_version('zeus')} ZeusMonitor, {n} GPU(s), sync off",
                     (float(np.median(zs)), min(zs), max(zs))))
        rows.append((f"joulebound EnergyMeter, {n} GPU(s), every GPU's figures read too",
                     (float(np.median(jb_d)), min(jb_d), max(jb_d))))
        rows.append((f"Zeus {_version('zeus')} ZeusMonitor, {n} GPU(s), every GPU's figure "
                     "read too", (float(np.median(zs_d)), min(zs_d), max(zs_d))))
        for key, a, b in ((f"{n}", jb, zs), (f"{n} devices", jb_d, zs_d)):
            r = np.array(a) / np.array(b)
            ratios[key] = (float(np.median(r)), float(r.min()), float(r.max()))
    try:
        logging.getLogger("codecarbon").setLevel(logging.ERROR)
        from codecarbon import OfflineEmissionsTracker

        with tempfile.TemporaryDirectory() as d:
            cc = OfflineEmissionsTracker(country_iso_code="USA", save_to_file=False,
                                         output_dir=d, log_level="error", gpu_ids=[0])
            cc.start()
            rows.append((f"CodeCarbon {_version('codecarbon')} start_task/stop_task, 1 GPU",
                         _pair_cpu(lambda: cc.start_task("w"), lambda: cc.stop_task("w"),
                                   n=20, repeats=5)))
            cc.stop()
    except Exception as exc:  # noqa: BLE001
        rows.append(("CodeCarbon", f"not measured ({type(exc).__name__}: {exc})"))
    return rows, ratios, work


def _version(dist: str) -> str:
    from importlib.metadata import version

    try:
        return version(dist)
    except Exception:  # noqa: BLE001
        return "?"


def _sampler_cpu(meter_factory, hz: float, seconds: float = 3.0) -> tuple[float, float]:
    """(% of one core used by the sampler thread, achieved rate Hz) over ``seconds``."""
    meter = meter_factory(1.0 / hz)
    n0 = meter.sampler.n_reads
    c0, t0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    c1, t1 = time.process_time(), time.perf_counter()
    rate = (meter.sampler.n_reads - n0) / (t1 - t0)
    meter.close()
    return 100.0 * (c1 - c0) / (t1 - t0), rate


def run() -> str:
    from joulebound.energy.meter import EnergyMeter
    from joulebound.energy.simulated import SimulatedBackend

    old = sys.modules.get("pynvml")
    nv = sys.modules["pynvml"] = _fake_pynvml(8)
    rows = []
    try:
        m = EnergyMeter("none", interval_s=0)
        rows.append(("none (time only)", _pair_us(m)))
        m = EnergyMeter(SimulatedBackend(power=lambda t: 250.0), gpus="all", interval_s=0)
        rows.append(("simulated, 1 GPU", _pair_us(m)))
        for n in (1, 8):
            m = EnergyMeter("nvml", gpus=list(range(n)), interval_s=0)
            rows.append((f"nvml counter (fake pynvml), {n} GPU{'s' if n > 1 else ''}", _pair_us(m)))
            m.close()
        m = EnergyMeter("nvml", gpus=[0], interval_s=0.01)
        rows.append(("nvml counter (fake pynvml), 1 GPU, sampler at 100 Hz", _pair_us(m)))
        m.close()
        with tempfile.TemporaryDirectory() as d:
            m = EnergyMeter("nvml", gpus=[0], interval_s=0, store=Path(d) / "b.db")
            rows.append(("nvml counter (fake pynvml), 1 GPU, + SQLite commit per window",
                         _pair_us(m, n=500)))
            m.close()

        peers, paired, work = _peer_rows(nv)
        cpu_rows = []
        for label, gpus, store in (("1 GPU", [0], False), ("8 GPUs", list(range(8)), False),
                                   ("8 GPUs + SQLite store", list(range(8)), True)):
            for hz in (10, 100):
                with tempfile.TemporaryDirectory() as d:
                    def factory(iv, gpus=gpus, store=store, d=d):
                        return EnergyMeter("nvml", gpus=gpus, interval_s=iv,
                                           store=Path(d) / "s.db" if store else None)
                    pct, rate = _sampler_cpu(factory, hz)
                cpu_rows.append((label, hz, pct, rate))
    finally:
        if old is None:
            sys.modules.pop("pynvml", None)
        else:
            sys.modules["pynvml"] = old

    out = ["## Energy meter (`bench_energy`)", "",
           "CPU time of one `begin_window` + `end_window` pair (median (min–max) of 7 runs of "
           "2000 pairs; 500 with the SQLite commit; measured). NVML rows use an in-process fake "
           "`pynvml`: joulebound's own overhead, without the driver call.", "",
           "| backend | µs per begin/end pair |", "|---|---:|"]
    out += [f"| {b} | {r[0]:.1f} ({r[1]:.1f}–{r[2]:.1f}) |" for b, r in rows]
    out += ["", "Side by side, the same fake `pynvml` (its energy counter steps at every read: "
            "each edge of joulebound's is then a counter step to apportion, its costliest case), "
            "CPU time per begin + end pair (median (min–max) of 9 runs of 2000 pairs, "
            "joulebound's and Zeus's runs alternating; CodeCarbon 5 × 20; measured in this "
            "run). Both meters' pairs read each window's total energy and duration (joulebound "
            "`energy_j`, `duration_s`; Zeus `total_energy`, `time`), so work a meter defers to "
            "a field's first read is counted; the \"every GPU's figures\" rows read each GPU's "
            "energy too (joulebound's per-device figures and uncertainty are computed when "
            "first read; Zeus's `gpu_energy`):",
            "", "| meter | µs per begin/end pair |", "|---|---:|"]
    for label, r in peers:
        out.append(f"| {label} | {r if isinstance(r, str) else f'{r[0]:.1f} ({r[1]:.1f}–{r[2]:.1f})'} |")

    def ratio(key: str) -> str:
        med, lo, hi = paired[key]
        return f"{med:.2f}× ({lo:.2f}–{hi:.2f}; {'met' if med <= 1 else 'NOT met'})"

    gpus = sorted({k.split()[0] for k in paired}, key=int)
    if gpus:
        out += ["", "joulebound / Zeus, median (min–max) of the 9 paired runs' CPU-time ratios, "
                "same run (target ≤ 1): " + ", ".join(
                    f"{g} GPU{'s' if g != '1' else ''} {ratio(g)}" for g in gpus)
                + "; every GPU's figures read too: " + ", ".join(
                    f"{g} GPU{'s' if g != '1' else ''} {ratio(g + ' devices')}" for g in gpus)
                + "."]
    out += ["", "Like for like: per window, both meters read each GPU's counter once per edge "
            "(the NVML calls below) and return a result object. Zeus then takes each GPU's "
            "counter difference (a dict) and sums it when `total_energy` is first read; "
            "joulebound also apportions each counter step by time at both edges (the "
            "counter's interpolation, the bound's terms), holds its sampler lock, watches the "
            "window's peak power, keeps the result in `meter.results` (a bounded deque) and "
            "takes the total as the difference of the two edges' sums. Only the per-device "
            "figures (energy, average and peak power, readings, source) and the uncertainty, "
            "none of which but the energy is in Zeus's `Measurement`, are computed when first "
            "read — the \"every GPU's figures\" rows count that."]
    if work:
        out += ["", "Work per begin + end pair (total energy and duration read), counted: NVML "
                "calls into the fake (the same driver work for both), and the Python bytecode "
                "instructions and function calls executed (`sys.settrace` opcode and call "
                "events over one pair, the fake's and the harness's calls included: the "
                "interpreter's work, "
                "independent of the machine's load; a Python call costs several bytecodes' "
                "time, so the CPU-time ratio above, not the bytecode count, is the measure):", "",
                "| meter | NVML calls per pair | bytecodes per pair | Python calls per pair |",
                "|---|---|---:|---:|"]
        out += [f"| {label} | {calls} | {ops[0]:,} | {ops[1]} |" for label, calls, ops in work]
    out += ["", "Background sampler CPU use over 3 s (process CPU time while the main thread "
            "sleeps, % of one core; measured), fake `pynvml`:", "",
            "| channels | target Hz | CPU % of one core | achieved Hz |", "|---|---:|---:|---:|"]
    out += [f"| {lab} | {hz} | {pct:.2f} | {rate:.1f} |" for lab, hz, pct, rate in cpu_rows]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(run())

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
from collections.abc import Callable
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


PROCESSES = 5
"""Fresh processes per figure (:mod:`benchmarks.timing`): the per-pair costs and the paired
comparison with the peers."""
PROCESSES_SAMPLER = 3
"""... per sampler row (3 s each)."""


def _install_fake(n_gpus: int = 8) -> types.ModuleType:
    """A fresh fake ``pynvml`` in ``sys.modules`` (a benchmark child's whole life)."""
    nv = sys.modules["pynvml"] = _fake_pynvml(n_gpus)
    return nv


def pair_case(kind: str) -> Callable[[], object]:
    """One ``begin_window`` + ``end_window`` pair of the meter ``kind`` (built here, in a fresh
    process, with the fake ``pynvml``): ``none``, ``simulated``, ``nvml-1``, ``nvml-8``,
    ``nvml-1-sampler`` (sampler thread at 100 Hz) or ``nvml-1-sqlite`` (a SQLite commit per
    window)."""
    import atexit
    import shutil

    from joulebound.energy.meter import EnergyMeter
    from joulebound.energy.simulated import SimulatedBackend

    _install_fake(8)
    if kind == "none":
        m = EnergyMeter("none", interval_s=0)
    elif kind == "simulated":
        m = EnergyMeter(SimulatedBackend(power=lambda t: 250.0), gpus="all", interval_s=0)
    elif kind in ("nvml-1", "nvml-8"):
        m = EnergyMeter("nvml", gpus=list(range(int(kind[-1]))), interval_s=0)
    elif kind == "nvml-1-sampler":
        m = EnergyMeter("nvml", gpus=[0], interval_s=0.01)
    elif kind == "nvml-1-sqlite":
        d = tempfile.mkdtemp(prefix="jb-bench-energy-")
        atexit.register(shutil.rmtree, d, True)
        m = EnergyMeter("nvml", gpus=[0], interval_s=0, store=Path(d) / "b.db")
    else:
        raise ValueError(f"no meter kind {kind!r}")
    atexit.register(m.close)
    begin, end, results = m.begin_window, m.end_window, m.results

    def pair() -> None:
        begin("w")
        end("w")
        results.clear()
    return pair


def _pair_cpu(begin, end, n: int = 2000, repeats: int = 7) -> list[float]:
    """CPU µs of one begin + end pair in each of ``repeats`` runs of ``n`` pairs (after 200
    pairs of warm-up)."""
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
    return reps


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
        jb += _pair_cpu(*jb_pair, repeats=1)
        zs += _pair_cpu(*z_pair, repeats=1)
    return jb, zs


def _pairs(n: int) -> tuple[dict, dict]:
    """joulebound's and Zeus's begin/end pairs on ``n`` fake GPUs (the fake installed first):
    ``{"total": (begin, end), "devices": (begin, end), "make": factory}`` each; the "devices"
    pair reads every GPU's figures too; ``make()`` builds a new meter's (begin, end, close)."""
    import logging

    from joulebound.energy.meter import EnergyMeter

    logging.getLogger("zeus").setLevel(logging.ERROR)
    from zeus.monitor import ZeusMonitor

    m = EnergyMeter("nvml", gpus=list(range(n)), interval_s=0)
    z = ZeusMonitor(gpu_indices=list(range(n)), cpu_indices=[], approx_instant_energy=False)

    def make_jb():
        mm = EnergyMeter("nvml", gpus=list(range(n)), interval_s=0)
        return (lambda: mm.begin_window("w", sync=False),
                lambda: (_read_jb(mm.end_window("w", sync=False)), mm.results.clear()), mm.close)

    def make_z():
        zz = ZeusMonitor(gpu_indices=list(range(n)), cpu_indices=[], approx_instant_energy=False)
        return (lambda: zz.begin_window("w", sync_execution=False),
                lambda: _read_zeus(zz.end_window("w", sync_execution=False)), lambda: None)

    jb = {"total": (lambda: m.begin_window("w", sync=False),
                    lambda: (_read_jb(m.end_window("w", sync=False)), m.results.clear())),
          "devices": (lambda: m.begin_window("w", sync=False),
                      lambda: (_read_jb_devices(m.end_window("w", sync=False)),
                               m.results.clear())),
          "make": make_jb}
    zs = {"total": (lambda: z.begin_window("w", sync_execution=False),
                    lambda: _read_zeus(z.end_window("w", sync_execution=False))),
          "devices": (lambda: z.begin_window("w", sync_execution=False),
                      lambda: _read_zeus_devices(z.end_window("w", sync_execution=False))),
          "make": make_z}
    return jb, zs


def peer_case(n: int, read: str) -> dict[str, float]:
    """In a fresh process: joulebound's and Zeus's pairs on ``n`` fake GPUs (``read``:
    ``"total"`` or ``"devices"``), 9 alternating runs of 2000 pairs each, so a change of the
    machine's load hits both: each meter's µs per pair and the 9 paired ratios."""
    _install_fake(8)
    jb, zs = _pairs(n)
    a, b = _paired(jb[read], zs[read])
    return {"jb": a, "zeus": b, "ratio": (np.array(a) / np.array(b)).tolist()}


def work_case() -> list[tuple[str, str, list[int]]]:
    """NVML calls, Python bytecodes and calls per begin + end pair (total read), joulebound and
    Zeus on 1 and 8 GPUs, after 200 pairs of warm-up: counts, the same in every process."""
    nv = _install_fake(8)
    work = []
    for n in (1, 8):
        jb, zs = _pairs(n)
        for meter, pairs in (("joulebound", jb), ("Zeus", zs)):
            calls = _nvml_calls(nv, pairs["make"])
            begin, end = pairs["total"]
            for _ in range(200):          # past the first windows' one-off work
                begin()
                end()
            work.append((f"{meter}, {n} GPU{'s' if n > 1 else ''}",
                         ", ".join(f"{v:g} × `{k}`" for k, v in calls.items()) or "none",
                         list(_bytecodes(lambda begin=begin, end=end: (begin(), end())))))
    return work


def codecarbon_case() -> list[float]:
    """CodeCarbon's ``start_task`` + ``stop_task``, µs per pair in each of 5 runs of 20."""
    import logging

    _install_fake(8)
    logging.getLogger("codecarbon").setLevel(logging.ERROR)
    from codecarbon import OfflineEmissionsTracker

    with tempfile.TemporaryDirectory() as d:
        cc = OfflineEmissionsTracker(country_iso_code="USA", save_to_file=False, output_dir=d,
                                     log_level="error", gpu_ids=[0])
        cc.start()
        try:
            return _pair_cpu(lambda: cc.start_task("w"), lambda: cc.stop_task("w"), n=20,
                             repeats=5)
        finally:
            cc.stop()


def sampler_case(n_gpus: int, store: bool, hz: float, seconds: float = 3.0) -> list[float]:
    """[% of one core used by the sampler thread, achieved rate Hz] over ``seconds`` of a main
    thread asleep (process CPU time), in a fresh process."""
    from joulebound.energy.meter import EnergyMeter

    _install_fake(8)
    with tempfile.TemporaryDirectory() as d:
        meter = EnergyMeter("nvml", gpus=list(range(n_gpus)), interval_s=1.0 / hz,
                            store=Path(d) / "s.db" if store else None)
        n0 = meter.sampler.n_reads
        c0, t0 = time.process_time(), time.perf_counter()
        time.sleep(seconds)
        c1, t1 = time.process_time(), time.perf_counter()
        rate = (meter.sampler.n_reads - n0) / (t1 - t0)
        meter.close()
    return [100.0 * (c1 - c0) / (t1 - t0), rate]


def _version(dist: str) -> str:
    from importlib.metadata import version

    try:
        return version(dist)
    except Exception:
        return "?"


def run() -> str:
    from .timing import fmt, fresh_cpu_runs, fresh_results, in_fresh_process, spread

    kinds = {"none (time only)": "none", "simulated, 1 GPU": "simulated",
             "nvml counter (fake pynvml), 1 GPU": "nvml-1",
             "nvml counter (fake pynvml), 8 GPUs": "nvml-8",
             "nvml counter (fake pynvml), 1 GPU, sampler at 100 Hz": "nvml-1-sampler",
             "nvml counter (fake pynvml), 1 GPU, + SQLite commit per window": "nvml-1-sqlite"}
    own = fresh_cpu_runs({label: ("benchmarks.bench_energy:pair_case", (kind,))
                          for label, kind in kinds.items()}, processes=PROCESSES)
    out = ["## Energy meter (`bench_energy`)", "",
           "CPU time of one `begin_window` + `end_window` pair (results cleared), µs: each row "
           f"in {PROCESSES} fresh processes (rounds interleaved across the rows; in each, "
           "5 runs, each looped to >= 50 ms, after a warm-up pair), the median (min–max) of "
           "all the runs pooled; measured. NVML rows use an in-process "
           "fake `pynvml`: joulebound's own overhead, without the driver call.", "",
           "| backend | µs per begin/end pair |", "|---|---:|"]
    out += [f"| {label} | {fmt(own[label], '.1f', 1e6)} |" for label in kinds]
    try:
        import codecarbon  # noqa: F401
        import zeus  # noqa: F401
    except ImportError as exc:
        out += ["", f"Peers not measured ({exc}): `pip install -e .[bench]`."]
        return "\n".join(out)
    cases = {(n, read): ("benchmarks.bench_energy:peer_case", (n, read))
             for n in (1, 8) for read in ("total", "devices")}
    peers = fresh_results(cases, processes=PROCESSES)
    cc = spread([x for r in fresh_results(
        {"cc": ("benchmarks.bench_energy:codecarbon_case", ())}, processes=3)["cc"] for x in r])
    work = in_fresh_process("benchmarks.bench_energy:work_case")

    def fig(n: int, read: str, key: str) -> tuple[float, float, float]:
        return spread([x for r in peers[(n, read)] for x in r[key]])

    out += ["", "Side by side, the same fake `pynvml` (its energy counter steps at every read: "
            "each edge of joulebound's is then a counter step to apportion, its costliest case), "
            f"CPU time per begin + end pair, µs: in each of {PROCESSES} fresh processes per row "
            "pair, 9 runs of 2000 pairs, joulebound's and Zeus's runs alternating; the table "
            "gives the median (min–max) of all the runs pooled (CodeCarbon: 3 processes of 5 × "
            "20 tasks). Both meters' pairs read each window's "
            "total energy and duration (joulebound `energy_j`, `duration_s`; Zeus "
            "`total_energy`, `time`), so work a meter defers to a field's first read is "
            "counted; the \"every GPU's figures\" rows read each GPU's energy too "
            "(joulebound's per-device figures and uncertainty are computed when first read; "
            "Zeus's `gpu_energy`):", "", "| meter | µs per begin/end pair |", "|---|---:|"]
    zv = _version("zeus")
    for n in (1, 8):
        for read, what in (("total", "sync off"), ("devices", "every GPU's figures read too")):
            out.append(f"| joulebound EnergyMeter, {n} GPU(s), {what} | {fmt(fig(n, read, 'jb'))} |")
            out.append(f"| Zeus {zv} ZeusMonitor, {n} GPU(s), {what} | {fmt(fig(n, read, 'zeus'))} |")
    out.append(f"| CodeCarbon {_version('codecarbon')} start_task/stop_task, 1 GPU | {fmt(cc)} |")

    def ratio(n: int, read: str) -> str:
        med, lo, hi = fig(n, read, "ratio")
        return (f"{n} GPU{'s' if n != 1 else ''} {med:.2f}× ({lo:.2f}–{hi:.2f}; "
                f"{'met' if med <= 1 else 'NOT met'})")

    out += ["", f"joulebound / Zeus CPU time per pair, the ratio of each paired run (9 in each of "
            f"{PROCESSES} processes), median (min–max) over them all (target ≤ 1, on the "
            "median): "
            + ", ".join(ratio(n, "total") for n in (1, 8)) + "; every GPU's figures read too: "
            + ", ".join(ratio(n, "devices") for n in (1, 8)) + "."]
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
    samplers = {(label, hz): ("benchmarks.bench_energy:sampler_case", (n, store, hz))
                for label, n, store in (("1 GPU", 1, False), ("8 GPUs", 8, False),
                                        ("8 GPUs + SQLite store", 8, True))
                for hz in (10, 100)}
    got = fresh_results(samplers, processes=PROCESSES_SAMPLER)
    out += ["", "Background sampler CPU use over 3 s (process CPU time while the main thread "
            f"sleeps, % of one core; measured), fake `pynvml`; median (min–max) over "
            f"{PROCESSES_SAMPLER} fresh processes per row:", "",
            "| channels | target Hz | CPU % of one core | achieved Hz |", "|---|---:|---:|---:|"]
    for (label, hz), runs in got.items():
        pct = spread([r[0] for r in runs])
        rate = spread([r[1] for r in runs])
        out.append(f"| {label} | {hz} | {fmt(pct, '.2f')} | {fmt(rate)} |")
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(run())

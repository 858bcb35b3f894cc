"""The meter's window-edge path: what an edge reads (NVML calls per edge), the per-device figures
computed when first read (the same figures as at once), and the cases that leave the batched
path — a GPU without a counter next to one with, a counter wrapping or lost for an edge, the
background sampler folding readings in concurrently. Fake NVML and manual clocks throughout."""

from __future__ import annotations

import dataclasses
import pickle
import time
from collections.abc import Callable

import numpy as np
import pytest

from joulebound.energy.meter import EnergyMeter
from joulebound.energy.results import Deferred, DeviceEnergy, WindowResult, window_result
from joulebound.testing.clock import ManualClock as Clock
from joulebound.testing.fakenvml import FakeGPU


def _figures(r: WindowResult) -> tuple:
    return (r.name, r.start_s, r.end_s, r.duration_s, r.energy_j, r.energy_uncertainty_j,
            r.cpu_energy_j, sorted(r.flags), r.provenance,
            [dataclasses.astuple(d) for d in r.devices])


def test_an_edge_reads_each_counter_once_and_nothing_else(fake):
    """Once the counters' rates are known, a begin + end pair on 8 GPUs makes exactly one NVML
    counter call per GPU per edge — no power read, no other NVML call — as Zeus does."""
    gpus = [FakeGPU(f"GPU-{k}", energy_mj=1_000_000 + k) for k in range(8)]
    nv = fake(gpus)
    clock = Clock(100.0)
    m = EnergyMeter("nvml", gpus="all", interval_s=0, clock=clock)
    for k in range(53):                      # the first edge reads power to seed the rates
        if k == 3:
            m.begin_window("outer")
        m.begin_window("w")
        for g in gpus:
            g.energy_mj += 1_000             # 100 W each
        clock.t += 0.01
        m.end_window("w")
    outer = m.end_window("outer")
    assert outer.energy_j == pytest.approx(8 * 100 * 0.5, abs=outer.energy_uncertainty_j)
    nv.calls.clear()
    for _ in range(50):
        m.begin_window("w")
        clock.t += 0.01
        m.end_window("w")
    assert nv.count("nvmlDeviceGetTotalEnergyConsumption") == 50 * 2 * 8
    assert len(nv.calls) == 50 * 2 * 8, sorted(set(nv.calls))
    m.close()


def _drive(m: EnergyMeter, gpus: list[FakeGPU], clock: Clock, rng: np.random.Generator,
           steps: int, p_step: float, p_sample: float,
           on_end: Callable[[WindowResult], None] | None = None) -> list[WindowResult]:
    """Nested and overlapping windows on ``gpus`` for ``steps`` random events: time advances,
    each counter steps with probability ``p_step``, power moves, the driver reloads GPU 0 half
    way (a counter reset), the sampler reads with probability ``p_sample``. ``on_end(result)``
    is called as each window ends; the meter is closed at the end; returns the results."""
    results: list[WindowResult] = []
    opened: list[str] = []
    for k in range(steps):
        clock.t += float(rng.choice([1e-4, 4e-3, 0.03, 0.12]))
        for g in gpus:
            if rng.random() < p_step:
                g.energy_mj += int(rng.integers(1, 20_000))
            g.power_mw = int(rng.integers(50_000, 300_000))
        if k == steps // 2:
            gpus[0].energy_mj = 500                  # the driver reloaded: a reset
        u = rng.random()
        if u < p_sample:
            m.sampler.sample_now()
        elif opened and (u < 0.5 or len(opened) > 3):
            results.append(m.end_window(opened.pop(int(rng.integers(len(opened))))))
            if on_end is not None:
                on_end(results[-1])
        else:
            m.begin_window(f"w{k}")
            opened.append(f"w{k}")
    m.close()
    return results


def _run(fake, read_at_once: bool, seed: int = 5) -> list[tuple]:
    """Nested and overlapping windows on two fake GPUs with random counter steps, power reads and
    a driver reset; each window's figures read at once, or only after the meter is closed."""
    gpus = [FakeGPU(f"GPU-{k}", energy_mj=3_000_000 + 11 * k, power_mw=120_000) for k in range(2)]
    fake(gpus)
    clock = Clock(100.0)
    m = EnergyMeter("nvml", gpus=[0, 1], interval_s=0, clock=clock)
    out: list[tuple] = []
    results = _drive(m, gpus, clock, np.random.default_rng(seed), 600, 0.4, 0.08,
                     (lambda r: out.append(_figures(r))) if read_at_once else None)
    return out if read_at_once else [_figures(r) for r in results]


def test_device_figures_computed_when_read_equal_those_read_at_once(fake):
    """A window's per-device figures and uncertainty are computed when first read, from what
    its edges kept: reading them only after hundreds of later edges (other windows, sampler
    reads, a counter reset) gives exactly the figures read right after the window ended."""
    at_once, later = _run(fake, True), _run(fake, False)
    assert len(at_once) == len(later) > 200
    for a, b in zip(at_once, later, strict=True):
        assert a == b
    assert any("counter_reset" in w[7] for w in at_once)
    assert any(d[7] > 1 for w in at_once for d in w[9])        # sampler reads in a window


def test_a_result_is_complete_when_copied_pickled_or_compared_before_its_devices_are_read(fake):
    g = FakeGPU("GPU-a", energy_mj=7_000_000)
    fake([g])
    clock = Clock(100.0)
    m = EnergyMeter("nvml", interval_s=0, clock=clock)
    m.begin_window("warm")
    clock.t += 0.2
    m.end_window("warm")
    rs = []
    for _ in range(4):
        m.begin_window("w")
        g.energy_mj += 30_000
        clock.t += 0.3
        rs.append(m.end_window("w"))
    a, b, c, d = rs
    assert isinstance(a.__dict__["devices"], Deferred)        # not computed yet
    restored = pickle.loads(pickle.dumps(a))
    as_dict = b.to_dict()
    replaced = dataclasses.replace(c, name="c")
    assert restored == a and type(restored.devices[0]) is DeviceEnergy
    assert as_dict["devices"][0]["energy_j"] == pytest.approx(b.energy_j)
    assert as_dict["energy_uncertainty_j"] == b.energy_uncertainty_j
    assert WindowResult.from_dict(as_dict) == b
    assert replaced.devices == c.devices and replaced.name == "c"
    assert d.energy_uncertainty_j == pytest.approx(sum(x.uncertainty_j for x in d.devices))
    assert d.devices is d.devices                              # computed once, then kept
    m.close()


def test_window_result_builds_what_the_dataclass_builds():
    dev = [DeviceEnergy("GPU-x", 0, 1.0, 2.0, None, "nvml.energy_counter")]
    args = ("w", 1.0, 1.5, 0.5, 1.0, dev, "measured", ["short_window"], None, 3, "h", "nvml", 0.25)
    fast, slow = window_result(*args), WindowResult(*args)
    assert fast == slow and dataclasses.asdict(fast) == dataclasses.asdict(slow)
    assert vars(fast) == vars(slow)


def test_nested_windows_on_the_batched_path_telescope_exactly(fake):
    """Contiguous windows inside an enclosing one, on 2 GPUs: they sum to its energy (per GPU
    and in total), and a window overlapping the enclosing one's end gets its own interval."""
    gpus = [FakeGPU(f"GPU-{k}", energy_mj=2_000_000) for k in range(2)]
    fake(gpus)
    clock = Clock(100.0)
    m = EnergyMeter("nvml", gpus=[0, 1], interval_s=0, clock=clock)
    m.begin_window("warm")
    clock.t += 0.1
    m.end_window("warm")
    fast0 = m.sampler._fast_edges
    m.begin_window("outer")
    parts = []
    for k in range(40):
        m.begin_window("step")
        if k == 30:
            m.begin_window("overlap")           # runs past the outer window's end
        clock.t += 0.025
        for j, g in enumerate(gpus):
            g.energy_mj += 2_500 * (j + 1)       # 100 W and 200 W in steps of 25 ms
        parts.append(m.end_window("step"))
    outer = m.end_window("outer")
    clock.t += 0.1
    gpus[0].energy_mj += 10_000
    gpus[1].energy_mj += 20_000
    overlap = m.end_window("overlap")
    assert m.sampler._fast_edges - fast0 == 2 * 40 + 4           # every edge batched
    assert sum(r.energy_j for r in parts) == pytest.approx(outer.energy_j, rel=1e-12)
    for j in range(2):
        assert sum(r.devices[j].energy_j for r in parts) == \
            pytest.approx(outer.devices[j].energy_j, rel=1e-12)
    assert outer.energy_j == pytest.approx(300.0, abs=outer.energy_uncertainty_j)
    assert overlap.start_s == parts[30].start_s and overlap.end_s == clock.t
    assert overlap.energy_j == pytest.approx(sum(r.energy_j for r in parts[30:]) + 30.0,
                                             abs=overlap.energy_uncertainty_j)
    m.close()


def test_a_gpu_without_counter_beside_one_with_is_metered_by_power(fake):
    """One GPU with a counter and one without (pre-Volta): the first by its counter, the second
    by integrating power; the window's total is their sum, each labeled with its source."""
    new = FakeGPU("GPU-new", energy_mj=4_000_000, power_mw=150_000)
    old = FakeGPU("GPU-old", counter="unsupported", power_mw=100_000)
    fake([new, old])
    clock = Clock(0.0)
    m = EnergyMeter("nvml", gpus=[0, 1], interval_s=0, clock=clock)
    m.begin_window("outer")
    m.begin_window("w")
    clock.t = 1.0
    new.energy_mj += 150_000                 # 150 J
    old.power_mw = 300_000
    m.sampler.sample_now()
    clock.t = 2.0
    new.energy_mj += 150_000
    r = m.end_window("w")
    outer = m.end_window("outer")
    a, b = r.devices
    assert (a.source, b.source) == ("nvml.energy_counter", "nvml.power_integration")
    assert a.energy_j == pytest.approx(300.0, abs=a.uncertainty_j)
    assert b.energy_j == pytest.approx(0.5 * (100 + 300) * 1.0 + 300 * 1.0)   # trapezoid
    assert r.energy_j == pytest.approx(a.energy_j + b.energy_j)
    assert b.peak_power_w == pytest.approx(300.0) and b.n_samples == 2
    assert outer.energy_j == pytest.approx(r.energy_j, rel=1e-9)
    m.close()


def test_a_counter_wrapping_or_lost_for_one_edge_leaves_the_batched_path_for_that_edge(fake):
    """On the batched path, two GPUs at 100 W: a counter wrapping around inside a window is
    unwrapped and flagged; a counter failing at one end edge gives that GPU's energy from power
    (flagged ``read_error``) while the other keeps its counter; the next window is batched and
    clean again."""
    top = 1 << 64
    gpus = [FakeGPU("GPU-0", energy_mj=top - 60_000, power_mw=100_000),
            FakeGPU("GPU-1", energy_mj=1_000_000, power_mw=100_000)]
    fake(gpus)
    clock = Clock(0.0)
    m = EnergyMeter("nvml", gpus=[0, 1], interval_s=0, clock=clock)

    def half_second() -> None:
        clock.t += 0.5
        for g in gpus:
            g.energy_mj = (g.energy_mj + 50_000) % top      # 50 J, wrapping like the counter

    m.begin_window("warm")
    half_second()
    m.end_window("warm")
    fast0 = m.sampler._fast_edges
    m.begin_window("wrap")
    half_second()                                           # GPU 0: top - 10 J -> 40 J
    wrap = m.end_window("wrap")
    assert m.sampler._fast_edges == fast0 + 2
    assert "counter_wraparound" in wrap.flags and "counter_reset" not in wrap.flags
    assert [d.energy_j for d in wrap.devices] == pytest.approx([50.0, 50.0])
    m.begin_window("lost")
    half_second()
    gpus[0].counter = "lost"
    lost = m.end_window("lost")
    assert "read_error" in lost.flags and lost.energy_j is not None
    assert [d.source for d in lost.devices] == ["nvml.energy_counter->power_integration",
                                                "nvml.energy_counter"]
    assert [d.energy_j for d in lost.devices] == pytest.approx([50.0, 50.0])
    gpus[0].counter = "ok"
    m.begin_window("clean")
    half_second()
    clean = m.end_window("clean")
    assert m.sampler._fast_edges == fast0 + 5               # only the lost end edge was not
    assert not {"read_error", "counter_wraparound"} & set(clean.flags)
    assert clean.energy_j == pytest.approx(100.0, abs=clean.energy_uncertainty_j)
    m.close()


def test_windows_telescope_while_the_sampler_thread_reads_concurrently(fake):
    """The background sampler at 500 Hz folds readings in while 200 contiguous windows open and
    close on the batched path: they still sum to the enclosing window (within one counter
    step), and every window counts the sampler's readings that fell in it."""
    gpus = [FakeGPU(f"GPU-{k}", power_mw=200_000, clock=time.perf_counter) for k in range(2)]
    fake(gpus)
    m = EnergyMeter("nvml", gpus=[0, 1], interval_s=0.002)
    m.begin_window("outer")
    reads0 = m.sampler.n_reads
    parts = []
    for _ in range(200):
        m.begin_window("w")
        time.sleep(0.0005)
        parts.append(m.end_window("w"))
    reads = m.sampler.n_reads - reads0
    outer = m.end_window("outer")
    m.close()
    assert m.sampler._fast_edges >= 400 and reads > 20 and not m.lost_anything
    # between contiguous windows only the microseconds of the gaps are not in any window
    gaps = parts[0].start_s - outer.start_s + outer.end_s - parts[-1].end_s + sum(
        b.start_s - a.end_s for a, b in zip(parts, parts[1:], strict=False))
    total = sum(r.energy_j for r in parts)
    assert outer.energy_j - 400.0 * gaps - outer.energy_uncertainty_j <= total
    assert total <= outer.energy_j + outer.energy_uncertainty_j
    # the outer window counts every inner edge and every sampler reading; the inner ones theirs
    n_outer = outer.devices[0].n_samples
    assert 2 * 200 + 1 + reads - 1 <= n_outer <= 2 * 200 + 1 + reads + 1
    assert 200 <= sum(r.devices[0].n_samples for r in parts) <= 200 + reads + 1


def _run_paths(fake, batched: bool, n_gpus: int, seed: int) -> tuple[list[tuple], int]:
    """Nested and overlapping windows on ``n_gpus`` fake GPUs whose counters step at most edges
    (the batched path's costliest case: every edge apportions a step), with sampler reads and a
    driver reset; ``batched=False`` keeps every edge on the channel-by-channel path. Returns
    every window's figures, read when the meter is closed, and the batched edges."""
    gpus = [FakeGPU(f"GPU-{k}", energy_mj=3_000_000 + 11 * k, power_mw=120_000)
            for k in range(n_gpus)]
    fake(gpus)
    clock = Clock(100.0)
    m = EnergyMeter("nvml", gpus="all", interval_s=0, clock=clock)
    if not batched:
        m.sampler._batch_read = None
    results = _drive(m, gpus, clock, np.random.default_rng(seed), 400, 0.8, 0.05)
    return [_figures(r) for r in results], m.sampler._fast_edges


@pytest.mark.parametrize("n_gpus", [1, 3])
def test_the_batched_edge_gives_the_figures_of_the_channel_by_channel_edge(fake, n_gpus):
    """The batched window edge (one counter call per GPU, the apportioning folded in at once,
    the totals from the edges' sums) gives each window the figures the general path gives —
    channel by channel through the counter tracks — on the same readings: the same per-device
    energies, uncertainties, reading counts, peaks and flags, and the same totals (to float
    rounding)."""
    fast, n_fast = _run_paths(fake, True, n_gpus, seed=11)
    slow, n_slow = _run_paths(fake, False, n_gpus, seed=11)
    assert n_slow == 0 and n_fast > 300 and len(fast) == len(slow) > 150
    assert any("counter_reset" in w[7] for w in fast)
    for a, b in zip(fast, slow, strict=True):
        if n_gpus == 1:
            assert a == b                                         # one GPU: exactly
        else:
            assert a[:4] == b[:4] and a[5:] == b[5:]              # devices exactly the same
            assert a[4] == pytest.approx(b[4], rel=1e-12, abs=1e-9)   # the total: rounding

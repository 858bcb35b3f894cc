"""characterize(): shapes, roofline behaviour across clocks, power capping, measured durations."""

from __future__ import annotations

import numpy as np
import pytest
from _model_fixtures import ga102_spec, small_trace

from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import JouleboundError
from joulebound.gpumodel import characterize, default_params, kernel_time_energy
from joulebound.gpumodel.kernel import KernelWork
from joulebound.workload.trace import Kernel, Trace


@pytest.fixture(scope="module")
def char():
    return characterize(small_trace(), ga102_spec())


def cell(ch, k, core, mem):
    c = ch.config_index(ClockConfig(core, mem))
    return ch.time_s[k, c], ch.energy_j[k, c]


def test_shape_auto_first_all_modeled(char):
    # auto, auto/MEM for the 3 memory clocks measured on GDDR6X, CORE/auto for the 127 core
    # clocks, and every pair at those 3 memory clocks; 810 and 405 MHz are untested on GDDR6X
    assert char.time_s.shape == (6, 1 + 3 + 127 + 127 * 3)
    assert char.configs[0] == ClockConfig()
    assert ClockConfig(None, 5001) in char.configs and ClockConfig(1050, None) in char.configs
    assert not any(c.mem_mhz in (810, 405) for c in char.configs)
    assert char.meta["untested_mem_mhz_excluded"] == [810, 405]
    full = characterize(small_trace(), ga102_spec(), allow_untested=True)
    assert any(c.mem_mhz == 810 for c in full.configs)
    assert not any(c.mem_mhz == 405 and c.core_mhz > 420 for c in full.configs
                   if c.core_mhz and c.mem_mhz)
    assert not char.measured.any() and char.provenance() == "modeled"
    assert np.all(char.time_s > 0) and np.all(char.energy_j > 0)
    # identical invocations (qkv_gemm layer 0 and 1) share identical rows
    np.testing.assert_array_equal(char.time_s[0], char.time_s[3])


def test_compute_bound_follows_core_clock(char):
    t_hi, _ = cell(char, 0, 2100, 9501)
    t_lo, _ = cell(char, 0, 1050, 9501)
    assert t_lo / t_hi == pytest.approx(2.0, rel=0.03)
    t_mem_lo, _ = cell(char, 0, 2100, 5001)
    assert t_mem_lo / t_hi < 1.02  # memory clock barely matters for a GEMM


def test_memory_bound_follows_memory_clock(char):
    t_hi, _ = cell(char, 1, 2100, 9501)
    t_core_lo, _ = cell(char, 1, 1050, 9501)
    t_mem_lo, _ = cell(char, 1, 2100, 5001)
    assert t_core_lo / t_hi < 1.35          # only the L2 / core-domain part slows
    assert t_mem_lo / t_hi > 1.5            # DRAM bandwidth halves


def test_energy_optimum_below_top_clock_for_gemm(char):
    row = char.energy_j[0, 1:]
    cores = np.array([c.core_mhz for c in char.configs[1:]])
    assert cores[np.argmin(row)] < 2100
    # a lower memory clock saves energy on a compute-bound kernel at the same core clock
    _, e_hi = cell(char, 0, 1500, 9501)
    _, e_lo = cell(char, 0, 1500, 5001)
    assert e_lo < e_hi


def test_power_cap_flattens_time_and_holds_power():
    spec = ga102_spec()
    prm = default_params(spec).with_limit(150.0)
    ch = characterize(small_trace(), spec, params=prm)
    row_t = np.array([cell(ch, 0, f, 9501)[0] for f in range(1200, 2101, 15)])
    row_p = np.array([cell(ch, 0, f, 9501)[1] for f in range(1200, 2101, 15)]) / row_t
    assert np.all(row_p <= 150.0 + 1e-3)
    # above the capped clock time no longer falls
    assert row_t[-1] == pytest.approx(row_t[-10], rel=1e-6)
    # non-increasing within the bisection's precision (< 0.001 MHz of the capped clock)
    assert np.all(np.diff(row_t) <= 1e-6 * row_t[0])
    assert ch.meta["capped_cells_fraction"] > 0


def test_kernel_time_energy_vectorized_matches_scalar():
    spec = ga102_spec()
    prm = default_params(spec)
    w = KernelWork(np.array([[1e-3], [1e-5]]), np.array([[1e-4], [2e-4]]))
    f = np.array([[900.0, 1500.0, 2100.0]])
    m = np.array([[9501.0, 5001.0, 810.0]])
    out = kernel_time_energy(w, f, m, 2100, 9501, prm)
    for i in range(2):
        for j in range(3):
            one = kernel_time_energy(KernelWork(w.tc_max[i], w.tm_max[i]), f[0, j], m[0, j],
                                     2100, 9501, prm)
            assert out["energy_j"][i, j] == pytest.approx(float(np.ravel(one["energy_j"])[0]))


def test_measured_duration_is_kept_at_auto():
    k = Kernel("g", "gemm", "forward", 0, flops=1e11, bytes=1e8, duration_s=5e-3)
    ch = characterize(Trace([k]), ga102_spec())
    assert ch.time_s[0, ch.auto_index] == pytest.approx(5e-3, rel=1e-3)
    assert ch.time_s[0, ch.config_index(ClockConfig(1050, 9501))] > 8e-3


def test_cpu_op_durations_do_not_set_gpu_time():
    """A trace profiled on the CPU (kind cpu) carries CPU op times: the GPU model ignores them."""
    k = Kernel("g", "gemm", "forward", 0, flops=1e11, bytes=1e8, duration_s=5e-3)
    spec = ga102_spec()
    cpu = characterize(Trace([k], meta={"kind": "cpu"}), spec)
    bare = characterize(Trace([Kernel("g", "gemm", "forward", 0, flops=1e11, bytes=1e8)]), spec)
    assert np.array_equal(cpu.time_s, bare.time_s) and np.array_equal(cpu.energy_j, bare.energy_j)
    assert cpu.time_s[0, cpu.auto_index] != pytest.approx(5e-3, rel=1e-2)


def test_unsupported_config_is_named():
    with pytest.raises(JouleboundError, match="1234/9501"):
        characterize(small_trace(), ga102_spec(), configs=[ClockConfig(1234, 9501)])


def test_saving_to_a_folder_or_under_a_file_is_a_user_error(char, tmp_path):
    with pytest.raises(JouleboundError, match="is a folder"):
        char.save(tmp_path)
    (tmp_path / "f").write_text("")
    with pytest.raises(JouleboundError, match="cannot write"):
        char.save(tmp_path / "f" / "c.npz")

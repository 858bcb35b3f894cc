"""Issue 26: the RTX 3080 Ti model must choose the clocks the measurement chose.

Spaan et al.'s Table 1 gives, per forward kernel, the (memory, core) pair their solver picked
over the whole measured sweep — the revealed optimum of ``E + λ·T`` for one common λ. The product
model (the shipped RTX 3080 Ti parameters) is checked on the decision, not only on its error at
the published pairs: its own best pair over the same sweep, at the λ that best explains the
published choices, must be the published pair or one clock step from it in >= 80 % of rows
(the issue's target). The energy it claims beyond the published optimum (issue target: <= 1 pp on
average) is held at <= 5 pp here — 7.8 pp before the low-clock physics; the rest is open (the
GEMM rows: the model finds locking the core near the governor's clock at 5001 MHz memory cheaper
than the solver did).
"""

from __future__ import annotations

import numpy as np
import pytest

from joulebound.gpumodel.params import params_for
from joulebound.hw.catalog import get_device

spaan = pytest.importorskip("research.spaan")

WITHIN_ONE_STEP = 0.8       # the target, met
BEYOND_PP = 5.0             # regression bound (issue target 1 pp, open)


@pytest.fixture(scope="module")
def setup(shared_data):
    return spaan.setup(shared_data)


def test_swept_configs_are_the_papers_sweep():
    cfgs = spaan.swept_configs()
    assert len(cfgs) == 5 * 11 + 2            # 405 MHz memory only with core 210 / 420
    assert all(c.mem_mhz != 405 or (c.core_mhz or 9999) <= 420 for c in cfgs)


def test_clock_steps_place_a_governed_core_at_its_clock():
    from joulebound.core.clocks import ClockConfig

    auto, c1890, c1680 = ClockConfig(None, 5001), ClockConfig(1890, 5001), ClockConfig(1680, 5001)
    assert spaan._step(auto, c1890, 1950.0) == 1      # 1950 MHz lies between 1890 and 2100
    assert spaan._step(auto, c1680, 1950.0) == 2
    # a governed memory clock sits at the top memory clock, one step from it when locked there
    assert spaan._step(ClockConfig(1890, None), ClockConfig(1890, 9501), 1950.0) == 1
    assert spaan._step(ClockConfig(1890, None), c1890, 1950.0) == 2


def test_model_best_pairs_are_the_published_choices(setup):
    ch = spaan.choices(setup, params_for(get_device("rtx3080ti")))
    table = ch.rows(setup)
    far = [f"row {r['row']} {r['kernel']}: paper {r['paper_config']}, model {r['model_best_config']}"
           for r in table if r["steps"] > 1]
    assert ch.within_one_step >= WITHIN_ONE_STEP, far
    assert float(np.mean(ch.beyond_pp)) <= BEYOND_PP, [(r["row"], round(r["beyond_pp"], 2))
                                                       for r in table]

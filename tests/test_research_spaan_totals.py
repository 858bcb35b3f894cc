"""Issue 26: the calibrated RTX 3080 Ti model's plans against Spaan et al.'s published totals —
held out, never fitted. Kernel level: within ±2 pp of the solver estimate (−15.64 %) and ±3 pp
of the measured −14.6 %, both inside our 5–95 % range over the parameter draws (met). Pass level:
the issue's target is ±1.5 pp of −2.07 %; the model saves −5.6 % (outside its range) — pinned
here as a known miss that must not grow (≤ 4 pp), see docs/validation.md.
"""

from __future__ import annotations

import pytest

spaan = pytest.importorskip("research.spaan")


@pytest.fixture(scope="module")
def totals():
    return {(t.granularity, t.slowdown, t.published_pct): t for t in spaan.totals()}


def test_kernel_level_matches_the_published_totals(totals):
    for key in (("kernel", 0.0, -15.64), ("kernel", 0.0, -14.6), ("kernel", 0.006, -14.6)):
        t = totals[key]
        assert t.within_target, (key, t.gap_pp)
        assert t.inside_range, (key, t.lo_pct, t.hi_pct)
        assert abs(t.modeled_time_pct - 100 * t.slowdown) < 0.05


def test_pass_level_known_miss_does_not_grow(totals):
    t = totals[("pass", 0.0, -2.07)]
    assert t.modeled_pct < t.published_pct           # the model saves more than measured
    assert abs(t.gap_pp) <= 4.0, t.gap_pp

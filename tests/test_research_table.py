"""`joulebound validate` table: readable at 100 columns (check names never truncated)."""

from __future__ import annotations

import io

from rich.console import Console

from joulebound.cli.validate import results_table
from research.result import CheckResult


def _rows() -> list[CheckResult]:
    pub = {"value": 4.6, "source": "Guerreiro et al., TPDS 2019"}
    return [
        CheckResult("perseus-stage", "A100-SXM4-80GB", "all stages", 0.17, 1.32, 1.35, 5.99, 1120),
        CheckResult("perseus-stage", "A40", "baseline t=a+b/f, P=c+d*f^3", 2.51, 5.69, 8.49,
                    11.78, 1824),
        CheckResult("perseus-kernel", "A100-SXM4-80GB", "kernel model, held-out model and "
                    "clocks", 0.86, 3.11, 3.27, 8.5, 1120),
        CheckResult("spaan-table1", "RTX 3080 Ti", "19 forward kernels, leave-one-row-out",
                    1.37, 4.4, 5.18, 17.0, 19),
        CheckResult("perseus-plans", "A100-PCIe-80GB", "all 4 workloads", 0.73, 1.25, 2.04, 3.39,
                    66),
        CheckResult("guerreiro", "GTX Titan X", "35 real apps (all 64 clock pairs)", None, 7.44,
                    None, 27.51, 2240, energy_quantity="power", published=pub),
        CheckResult("zeus-power-limit", "RTX 6000", "all (52 workloads)", 5.89, 4.31, 66.86,
                    23.69, 358, energy_quantity="avg_power"),
    ]


def test_table_fits_100_columns_with_full_check_names_and_values():
    buf = io.StringIO()
    Console(file=buf, width=100, color_system=None).print(results_table(_rows()))
    text = buf.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    for check in ("perseus-kernel", "spaan-table1", "perseus-plans", "guerreiro",
                  "zeus-power-limit"):
        assert check in text                      # not cut to "perseus-…"
    for cell in ("A100-SXM4-80GB", "A100-PCIe-80GB", "1824", "2240", "4.31 (avgP)", "7.44 (P)",
                 "66.86", "4.6", "all stages"):
        assert cell in text
    assert "…" not in text

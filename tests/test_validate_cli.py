"""Issue 28 item 10: ``validate`` says per row whether it is held-out or in-sample (its footer
said "all held-out" above in-sample rows), names each check on stderr as it starts (it ran
~90 s silently without a terminal), and the docs' held-out figures cannot drift from the shipped
parameters."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

from rich.console import Console

from joulebound.cli import main
from joulebound.cli.validate import HELD_OUT, IN_SAMPLE, results_table, row_splits
from research.result import CheckResult

ROOT = Path(__file__).resolve().parent.parent


def _r(check: str, workload: str, note: str = "") -> CheckResult:
    return CheckResult(check, "GPU", workload, 1.0, 2.0, 3.0, 4.0, 10, note=note)


def test_rows_are_split_into_held_out_and_in_sample():
    rows = [_r("perseus-stage", "all stages", "3 calibration clocks per stage, 1120 held-out"),
            _r("perseus-stage", "reference: 4-param fit on ALL clocks", "noise floor"),
            _r("perseus-stage", "gpt3-175b", "subset of the row above"),
            _r("spaan-table1", "19 forward kernels, leave-one-row-out"),
            _r("spaan-table1", "19 forward kernels, in-sample"),
            _r("energaizer-idle", "idle at 1980 MHz", "H100 fit: ...; in-sample 2.32 %"),
            _r("mlp-probe", "bandwidth vs SMs issuing, knee fitted (in-sample)"),
            _r("mlp-probe", "same, without the knee (B = 0)")]
    assert row_splits(rows) == [HELD_OUT, IN_SAMPLE, HELD_OUT, HELD_OUT, IN_SAMPLE, HELD_OUT,
                                IN_SAMPLE, IN_SAMPLE]
    buf = io.StringIO()
    Console(file=buf, width=160, color_system=None).print(results_table(rows))
    text = buf.getvalue()
    assert "fit on ALL clocks (in-sample)" in text and "without the knee (B = 0) (in-sample)" in text
    assert "in-sample (in-sample)" not in text and "(held-out" not in text.split("\n", 1)[1]
    assert "held-out unless the workload says in-sample" in text


def test_validate_names_each_check_on_stderr_and_labels_rows(shared_data, capsys):
    assert main(["validate", "--data", str(shared_data), "--only", "guerreiro"]) == 0
    cap = capsys.readouterr()
    assert "validate: " in cap.err and "guerreiro" in cap.err.lower()   # a line per check
    out = " ".join(cap.out.split())
    assert "All errors are on held-out points" not in out
    assert "except the rows whose workload says in-sample" in out
    assert main(["validate", "--data", str(shared_data), "--only", "guerreiro", "--json"]) == 0
    cap = capsys.readouterr()
    assert {r["split"] for r in json.loads(cap.out)} == {HELD_OUT}
    assert "guerreiro" in cap.err.lower()


def _shipped_heldout() -> dict:
    doc = json.loads((ROOT / "joulebound" / "gpumodel" / "params" / "rtx3080ti.json").read_text())
    h = doc["heldout"]
    assert h["check"] == "spaan-table1" and "leave-one-row-out" in h["workload"]
    return h


def test_readme_and_validation_page_quote_the_shipped_heldout_figures():
    """README's validation table, docs/validation.md's results block (written by
    `validate --write-docs docs`) and its prose quote the leave-one-row-out figures the shipped
    rtx3080ti.json carries (written by `validate --write-params` from the same run)."""
    h = _shipped_heldout()
    t2, e2 = f"{h['time_mape']:.2f}", f"{h['energy_mape']:.2f}"
    t1, e1 = f"{h['time_mape']:.1f}", f"{h['energy_mape']:.1f}"
    readme = (ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines()
               if line.startswith("|") and "leave-one-row-out" in line and "Spaan" in line)
    m = re.search(r"([\d.]+) % time, ([\d.]+) % energy", row)
    assert m and m.groups() == (t2, e2), (row, t2, e2)
    page = (ROOT / "docs" / "validation.md").read_text()
    block = page.split("<!-- validate:results -->", 1)[1].split("<!-- /validate:results -->", 1)[0]
    cells = next([c.strip() for c in line.split("|")] for line in block.splitlines()
                 if line.startswith("| spaan-table1") and "leave-one-row-out" in line)
    assert cells[4:6] == [t2, e2], (cells, t2, e2)
    quoted = re.findall(r"leave-one-row-out ([\d.]+) % time / ([\d.]+) % energy", page) + [
        m.groups() for m in re.finditer(r"([\d.]+) % time / ([\d.]+) % energy, leave-one-row-out",
                                        page)]
    assert quoted and all(q == (t1, e1) for q in quoted), (quoted, t1, e1)

"""The HTML reports checked in a real headless Chromium (Debian's package; `make test` installs it
where it runs as root): they open with the terminal's conclusion, every section title is unique,
no numeric cell wraps, no horizontal overflow at 1100 px, every figure loads; plus a screenshot.
One browser launch checks all pages, a second takes the screenshot."""

from __future__ import annotations

import sys

import pytest

from tests._browser import check_pages, chromium, screenshot

pytestmark = pytest.mark.skipif(
    chromium() is None, reason="no Chromium on this machine: `apt-get install chromium` (make "
    "test does it when run as root) to check the HTML reports in a real browser")

CONTROL = """<!doctype html><html><body><h1>t</h1><h2>same</h2><h2>same</h2>
<table style='width:30px'><tr><td style='width:30px'>12,345.678 J</td></tr></table></body></html>"""


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_reports_in_a_real_browser(tmp_path, capsys, monkeypatch):
    from joulebound.cli import main

    monkeypatch.setenv("COLUMNS", "100")
    assert main(["plan", "gpt2-small", "--device", "rtx3080ti", "--slowdown", "1%",
                 "--granularity", "pass", "--report", str(tmp_path / "plan")]) == 0
    plan_out = _flat(capsys.readouterr().out)
    db = tmp_path / "runs.db"
    assert main(["measure", "--backend", "simulated", "--db", str(db), "--interval", "0.02",
                 "--", sys.executable, "-c", "import time; time.sleep(0.3)"]) == 0
    assert main(["report", str(db), "-o", str(tmp_path / "run"), "--carbon-intensity",
                 "WORLD"]) == 0
    run_out = _flat(capsys.readouterr().out)
    db2 = tmp_path / "cpu.db"
    assert main(["measure", "--backend", "cpu-model", "--db", str(db2), "--interval", "0.02",
                 "--", sys.executable, "-c", "import time; time.sleep(0.3)"]) == 0
    assert main(["report", str(db), str(db2), "-o", str(tmp_path / "cmp")]) == 0
    cmp_out = _flat(capsys.readouterr().out)
    (tmp_path / "control.html").write_text(CONTROL)

    res = check_pages({"plan": tmp_path / "plan" / "index.html",
                       "run": tmp_path / "run" / "index.html",
                       "cmp": tmp_path / "cmp" / "index.html",
                       "control": tmp_path / "control.html"}, folder=tmp_path)
    # the checks can fail: the control page has a wrapped number and a repeated title
    assert res["control"]["wrapped"] and res["control"]["dup"] == ["same"]
    for name, out in (("plan", plan_out), ("run", run_out), ("cmp", cmp_out)):
        page = res[name]
        assert "error" not in page, page
        assert page["first_after_h1"] == "conclusion", name
        assert _flat(page["conclusion"]) in out, (name, page["conclusion"])
        assert page["dup"] == [], (name, page["titles"])
        assert page["wrapped"] == [], (name, page["wrapped"])
        assert not page["overflow"], name
        assert page["images"] and all(w > 0 for _src, w in page["images"]), page["images"]
    assert {"Summary", "Host vs GPU", "Power timeline per device",
            "Windows and their nesting"} <= set(res["run"]["titles"])
    assert {"Runs side by side", "Change against the first run"} <= set(res["cmp"]["titles"])

    png = screenshot(tmp_path / "run" / "index.html", tmp_path / "run.png", height=900)
    import matplotlib.image as mpimg

    img = mpimg.imread(png)
    assert img.shape[0] == 900 and img.shape[1] == 1100
    assert img[..., :3].std() > 0.05   # not a blank page

"""Kernel trace capture with torch.profiler (CPU ops): the API and `joulebound profile`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from joulebound.core.errors import JouleboundError  # noqa: E402
from joulebound.workload.capture import StepProfiler, profile_steps, run_script  # noqa: E402
from joulebound.workload.trace import Trace  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = """
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 64); y = torch.randint(0, 10, (32,))
for i in range(int(sys.argv[1])):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward(); opt.step(); opt.zero_grad()
print("finished")
"""


def _mlp_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def step(i: int) -> None:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    return step


def _check_mlp_trace(tr: Trace, steps: int) -> None:
    assert tr.meta["source"] == "torch.profiler" and tr.meta["kind"] == "cpu"
    assert tr.meta["profiled_steps"] == steps
    gemm = [k for k in tr.kernels if k.category == "gemm"]
    # per step: 2 forward linears + 3 backward mm (dX of layer 2, dW of both)
    assert len(gemm) == 5 * steps
    fwd = [k.flops for k in gemm if k.phase == "forward"]
    # first layer: 2*32*64*128 FLOP matmul (+ 32*128 bias adds)
    assert min(abs(f - 2 * 32 * 64 * 128) for f in fwd) <= 32 * 128
    assert {"forward", "backward", "optimizer"} <= set(tr.phases())
    assert all(k.duration_s is not None and k.duration_s >= 0 for k in tr.kernels)


def test_profile_steps_api_builds_a_trace(tmp_path):
    tr = profile_steps(_mlp_step(), steps=2, warmup=1, chrome_out=tmp_path / "raw.json")
    _check_mlp_trace(tr, 2)
    assert "traceEvents" in json.loads((tmp_path / "raw.json").read_text())
    with pytest.raises(JouleboundError, match="steps must be >= 1"):
        profile_steps(_mlp_step(), steps=0)


def test_runner_stops_script_after_capture_and_reports_too_few_steps(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    prof = StepProfiler(tmp_path / "t.json", steps=1, warmup=1)
    assert run_script([str(script), "50"], prof) == 0
    assert prof.n == 2                      # stopped right after the recorded step
    _check_mlp_trace(Trace.load(tmp_path / "t.json"), 1)
    with pytest.raises(JouleboundError, match="made 1 optimizer step.*3 are needed"):
        run_script([str(script), "1"], StepProfiler(tmp_path / "u.json", steps=2, warmup=1))
    assert not (tmp_path / "u.json").exists()


def test_profile_cli_end_to_end(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "trace.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c",
                        "import sys; from joulebound.cli import main; sys.exit(main(sys.argv[1:]))",
                        "profile", "--steps", "1", "--warmup", "0", "-o", str(out), "--json", "--",
                        sys.executable, str(script), "5"],
                       env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["kernels"] == len(Trace.load(out)) and doc["kind"] == "cpu"
    assert doc["categories"]["gemm"] == 5 and "finished" not in p.stdout
    # the capture's progress line is a log record of the child, shown on its stderr
    assert f"joulebound profile: {doc['kernels']} kernels over 1 step(s)" in p.stderr
    # Kineto's USDT probe notices (profiler_start/stop) are not shown (issue 28 item 11)
    assert "USDT:" not in p.stderr


def test_profile_cli_table_header_is_one_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100")
    p = subprocess.run([sys.executable, "-c",
                        "import sys; from joulebound.cli import main; sys.exit(main(sys.argv[1:]))",
                        "profile", "--steps", "1", "--warmup", "0", "-o", "t.json", "--",
                        sys.executable, str(script), "5"],
                       env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Trace t.json (cpu kernels, 1 step(s))" in p.stdout.splitlines()
    assert "(measured)" in p.stdout and "(modeled from shapes)" in p.stdout


def test_the_usdt_filter_drops_only_whole_usdt_lines_and_passes_the_rest_at_once():
    """Chunks split anywhere: partial lines (progress bars) pass through as they come."""
    from joulebound.cli.profile import UsdtFilter

    stream = (b"step 1\rstep 2\r"
              b"USDT:2026-12-04 17:34:30 15047:15047 SyncActivityProfilerHandler.cpp:52] "
              b"profiler_start\nloss 0.5\nUSDT is a word\nUS\nUSDT:x profiler_stop\n"
              b"done, no newline")
    want = b"step 1\rstep 2\rloss 0.5\nUSDT is a word\nUS\ndone, no newline"
    for cut in (1, 2, 3, 7, 64):
        f = UsdtFilter()
        got = b"".join(f.feed(stream[i:i + cut]) for i in range(0, len(stream), cut)) + f.flush()
        assert got == want, cut
    f = UsdtFilter()
    assert f.feed(b"partial progress") == b"partial progress"      # not held back

"""``joulebound profile -- python train.py``: capture a kernel Trace from real training steps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

HELP = """Run a training script under torch.profiler for N optimizer steps and write a joulebound
Trace (kernels with measured durations; FLOPs and bytes from recorded shapes — modeled).

How: the script runs as __main__ inside joulebound's runner (python -m
joulebound.workload.capture), which registers a global optimizer-step hook; every
optimizer.step() advances the profiler schedule (--skip untraced, --warmup discarded, --steps
recorded). When the steps are recorded the trace is written and the script is stopped (exit 0),
unless --keep-running. CUDA kernels are captured when CUDA is available, CPU ops otherwise.

The command must be `python SCRIPT ARGS` or `python -m MODULE ARGS` (one process). For torchrun
jobs, use joulebound.workload.capture.profile_steps() inside the script instead.

--json prints: out, kernels, steps, kind ("gpu"|"cpu"), total_flops, total_bytes,
duration_s (sum of measured kernel durations), phases {phase: count}, categories {category:
count}, exit_code.

Example: joulebound profile --steps 2 -o bert.trace.json -- python train.py --batch 32"""


def profile_command(
    cmd: Annotated[list[str], typer.Argument(help="python SCRIPT ARGS (after --).",
                                             show_default=False)],
    steps: Annotated[int, typer.Option(help="Optimizer steps to record.", min=1)] = 1,
    warmup: Annotated[int, typer.Option(help="Profiled-but-discarded steps first.", min=0)] = 1,
    skip: Annotated[int, typer.Option(help="Unprofiled steps before warmup.", min=0)] = 0,
    out: Annotated[Path, typer.Option("-o", "--out", help="Trace JSON to write.")] = Path(
        "trace.json"),
    chrome: Annotated[Path | None, typer.Option(help="Also keep the raw Chrome trace.")] = None,
    keep_running: Annotated[bool, typer.Option(help="Let the script finish after capture.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    from joulebound.cli._common import console, print_json
    from joulebound.core.errors import JouleboundError

    if not cmd:
        raise JouleboundError("no command given: joulebound profile -- python train.py ARGS")
    exe = Path(cmd[0]).name
    if not exe.startswith("python"):
        raise JouleboundError(f"joulebound profile runs Python scripts: expected `python SCRIPT "
                              f"ARGS` or `python -m MODULE`, got {cmd[0]!r}. For torchrun jobs "
                              "call joulebound.workload.capture.profile_steps() in the script")
    if out.exists():
        out.unlink()  # never report a stale trace
    argv = [cmd[0], "-m", "joulebound.workload.capture", "--steps", str(steps), "--warmup",
            str(warmup), "--skip", str(skip), "-o", str(out)]
    if chrome is not None:
        argv += ["--chrome", str(chrome)]
    if keep_running:
        argv.append("--keep-running")
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    rc = _call_without_usdt(argv + ["--", *cmd[1:]], env)
    if not out.exists():
        raise JouleboundError(f"no trace was written (the script exited with code {rc}); see "
                              "the messages above")
    from joulebound.workload.trace import Trace

    tr = Trace.load(out)
    durs = [k.duration_s for k in tr.kernels if k.duration_s is not None]
    doc = {"out": str(out), "kernels": len(tr), "steps": steps, "kind": tr.meta.get("kind"),
           "total_flops": tr.total_flops, "total_bytes": tr.total_bytes,
           "duration_s": float(sum(durs)), "phases": dict(tr.count_by("phase")),
           "categories": dict(tr.count_by("category")), "exit_code": rc}
    if as_json:
        print_json(doc)
    else:
        from rich.table import Table

        # a line of its own: as the narrow table's title it wrapped mid-phrase
        console.print(f"Trace {out} ({doc['kind']} kernels, {steps} step(s))", highlight=False)
        t = Table()
        t.add_column("category")
        t.add_column("kernels", justify="right")
        for c, n in sorted(doc["categories"].items(), key=lambda x: -x[1]):
            t.add_row(c, str(n))
        console.print(t)
        console.print(f"{len(tr)} kernels; kernel time {doc['duration_s'] * 1e3:.2f} ms "
                      f"(measured); {tr.total_flops:.3g} FLOP, {tr.total_bytes:.3g} bytes "
                      "(modeled from shapes); phases "
                      + ", ".join(f"{k} {v}" for k, v in doc["phases"].items()))
    if rc != 0:
        raise SystemExit(rc)
    sys.stdout.flush()


class UsdtFilter:
    """The child's stderr less Kineto's ``USDT:`` lines: recent torch.profiler builds print
    ``USDT:<time> <pid> SyncActivityProfilerHandler.cpp:52] profiler_start`` (and ``_stop``) for
    USDT probes on every profiler start and stop, and Kineto's log level cannot hide them without
    hiding its errors too. A line is dropped only when it starts with ``USDT:``; everything else
    passes as soon as it comes (a progress bar's partial line is held for at most 4 bytes, while
    it could still be the start of ``USDT:``)."""

    MARK = b"USDT:"

    def __init__(self) -> None:
        self.mode = "start"       # at a line start | "pass" the line on | "drop" it
        self.held = b""

    def feed(self, chunk: bytes) -> bytes:
        """What of ``chunk`` to show now."""
        out = bytearray()
        for piece in chunk.splitlines(keepends=True):
            if self.mode == "pass":
                out += piece
            elif self.mode == "start":
                line = self.held + piece
                self.held = b""
                if line.startswith(self.MARK):
                    self.mode = "drop"
                elif self.MARK.startswith(line):
                    self.held = line          # "US": could still become "USDT:"
                else:
                    out += line
                    self.mode = "pass"
            if piece.endswith((b"\n", b"\r")):
                self.mode = "start"
        return bytes(out)

    def flush(self) -> bytes:
        """What is still held at the end of the stream."""
        held, self.held = self.held, b""
        return held


def _call_without_usdt(argv: list[str], env: dict[str, str]) -> int:
    """``subprocess.call(argv)`` with the child's stderr shown through :class:`UsdtFilter`."""
    import threading

    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr

    def pump() -> None:
        f = UsdtFilter()
        dst = sys.stderr.buffer
        while chunk := os.read(err.fileno(), 65536):
            out = f.feed(chunk)
            if out:
                dst.write(out)
                dst.flush()
        dst.write(f.flush())
        dst.flush()

    t = threading.Thread(target=pump, name="profile-stderr", daemon=True)
    t.start()
    try:
        rc = proc.wait()
    except BaseException:       # as subprocess.call: the child does not outlive us
        proc.kill()
        proc.wait()
        raise
    finally:
        t.join(timeout=5)
        err.close()
    return rc


def register(app: typer.Typer) -> None:
    from joulebound.cli._common import reflow

    app.command("profile", help=reflow(HELP), context_settings={"ignore_unknown_options": True})(
        profile_command)

"""Capture a joulebound :class:`~joulebound.workload.trace.Trace` from real training steps.

Two ways, both built on ``torch.profiler`` (CPU activities always, CUDA when available,
``record_shapes=True`` so FLOPs and bytes can be derived) and on the Kineto importer
:mod:`joulebound.workload.kineto` (the profile is exported as a Chrome trace, then imported):

**API** — you own the loop::

    from joulebound.workload.capture import profile_steps
    trace = profile_steps(lambda i: train_step(batch), steps=1, warmup=1)

**Unmodified script** — ``joulebound profile --steps N -o trace.json -- python train.py ARGS``
runs ``python -m joulebound.workload.capture --steps N -o trace.json -- train.py ARGS``: the script
runs as ``__main__`` (``runpy``) after a *global optimizer-step hook*
(``torch.optim.optimizer.register_optimizer_step_post_hook``) has been installed. Every
``optimizer.step()`` of any optimizer advances the profiler schedule (``skip`` untraced steps,
``warmup`` steps, then ``steps`` recorded ones), so one profiled step is everything between two
optimizer steps: data loading, forward, loss, backward, optimizer. After the last recorded step
the trace is written and, unless ``keep_running``, the script is stopped with exit code 0
(``SystemExit`` raised from the optimizer hook; ``finally`` blocks still run).

Limits (honest): a script with several optimizers (GANs) advances the schedule once per optimizer;
scripts launched by ``torchrun``/``accelerate`` are not wrapped (profile one process by running
the script with ``python`` directly, or use the API inside the script); a script that never calls
``optimizer.step()`` gives an error that says so. Without CUDA, the trace holds CPU ops (kind
``"cpu"``), which is what the tests use.
"""

from __future__ import annotations

import argparse
import logging
import os
import runpy
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from joulebound.core.errors import JouleboundError
from joulebound.core.logs import show_progress
from joulebound.workload.trace import Trace

log = logging.getLogger("joulebound.workload.capture")  # also when run as __main__


def _activities() -> list[Any]:
    import torch
    from torch.profiler import ProfilerActivity

    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    return acts


def _to_trace(prof: Any, name: str, chrome_out: str | Path | None, steps: int) -> Trace:
    """Export ``prof`` as a Chrome trace and import it with the Kineto importer."""
    from joulebound.workload.kineto import load_chrome_trace

    if chrome_out is not None:
        path = Path(chrome_out)
        prof.export_chrome_trace(str(path))
        tr = load_chrome_trace(path, name=name)
    else:
        with tempfile.TemporaryDirectory(prefix="joulebound-prof-") as d:
            path = Path(d) / "trace.json"
            prof.export_chrome_trace(str(path))
            tr = load_chrome_trace(path, name=name)
            tr.meta["file"] = None
    tr.meta.update(source="torch.profiler", profiled_steps=steps, device=_device_name())
    return tr


def _device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.cuda.current_device())
    return "cpu"


def profile_steps(step_fn: Callable[[int], Any], steps: int = 1, warmup: int = 1, skip: int = 0,
                  name: str = "torch.profiler", chrome_out: str | Path | None = None) -> Trace:
    """Run ``step_fn(i)`` for ``skip + warmup + steps`` iterations, profiling the last ``steps``.

    Args:
        step_fn: one training step (forward, backward, optimizer step); gets the iteration index.
        steps: recorded steps (the trace holds all of their kernels, in order).
        warmup: profiled-but-discarded steps before recording (lets allocators/cuDNN settle).
        skip: unprofiled steps first.
        name: the trace name.
        chrome_out: also keep the raw Chrome trace here.

    Returns the imported :class:`Trace` (``meta["source"] == "torch.profiler"``).
    """
    from torch.profiler import profile, schedule

    if steps < 1:
        raise JouleboundError(f"steps must be >= 1, got {steps}")
    if warmup < 0 or skip < 0:
        raise JouleboundError("warmup and skip must be >= 0")
    captured: list[Any] = []
    sched = schedule(wait=skip, warmup=warmup, active=steps, repeat=1)
    with profile(activities=_activities(), schedule=sched, record_shapes=True,
                 on_trace_ready=captured.append) as prof:
        for i in range(skip + warmup + steps):
            step_fn(i)
            prof.step()
    if not captured:  # pragma: no cover - schedule always fires after the active steps
        raise JouleboundError("torch.profiler produced no trace")
    return _to_trace(captured[0], name, chrome_out, steps)


class _Done(SystemExit):
    """Raised from the optimizer hook to stop the script once the trace is written."""


class StepProfiler:
    """Advance a ``torch.profiler`` schedule on every ``optimizer.step()`` of any optimizer.

    ``install()`` starts the profiler and registers the global post-step hook; the trace is saved
    to ``out`` (joulebound Trace JSON) when the schedule completes. ``finish()`` is called at exit
    to report a script that stopped too early.
    """

    def __init__(self, out: str | Path, steps: int = 1, warmup: int = 1, skip: int = 0,
                 chrome_out: str | Path | None = None, keep_running: bool = False,
                 name: str | None = None) -> None:
        if steps < 1:
            raise JouleboundError(f"--steps must be >= 1, got {steps}")
        self.out = Path(out)
        self.steps, self.warmup, self.skip = steps, warmup, skip
        self.chrome_out = chrome_out
        self.keep_running = keep_running
        self.name = name or self.out.name.removesuffix(".gz").removesuffix(".json")
        self.n = 0
        self.trace: Trace | None = None
        self._prof: Any = None
        self._handle: Any = None

    @property
    def total(self) -> int:
        return self.skip + self.warmup + self.steps

    def install(self) -> StepProfiler:
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.profiler import profile, schedule

        self._captured: list[Any] = []
        self._prof = profile(activities=_activities(), record_shapes=True,
                             schedule=schedule(wait=self.skip, warmup=self.warmup,
                                               active=self.steps, repeat=1),
                             on_trace_ready=self._captured.append)
        self._prof.start()
        self._handle = register_optimizer_step_post_hook(self._hook)
        return self

    def _hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.trace is not None:
            return
        self.n += 1
        self._prof.step()
        if self.n >= self.total:
            self._finish_capture()
            if not self.keep_running:
                raise _Done(0)

    def _finish_capture(self) -> None:
        self._prof.stop()
        self._handle.remove()
        if not self._captured:  # pragma: no cover
            raise JouleboundError("torch.profiler produced no trace")
        self.trace = _to_trace(self._captured[0], self.name, self.chrome_out, self.steps)
        self.trace.save(self.out)
        ks = self.trace
        log.info("joulebound profile: %d kernels over %d step(s) (%s, %.3g FLOP modeled from "
                 "shapes) -> %s", len(ks), self.steps, ks.meta.get("kind"), ks.total_flops,
                 self.out)

    def finish(self) -> None:
        """Called after the script returns: a missing trace is an error that says why."""
        if self.trace is not None:
            return
        if self._prof is not None:
            self._prof.stop()
            self._handle.remove()
        raise JouleboundError(
            f"the script made {self.n} optimizer step(s) but {self.total} are needed "
            f"(skip {self.skip} + warmup {self.warmup} + steps {self.steps}); no trace written. "
            "Does it call optimizer.step()? Lower --warmup/--steps or train longer")


def run_script(argv: Sequence[str], profiler: StepProfiler) -> int:
    """Run ``argv`` (``script.py ARGS`` or ``-m module ARGS``) as ``__main__`` under ``profiler``."""
    argv = list(argv)
    if not argv:
        raise JouleboundError("no script given: joulebound profile -- python train.py ARGS")
    profiler.install()
    old_argv = sys.argv
    code = 0
    try:
        if argv[0] == "-m":
            if len(argv) < 2:
                raise JouleboundError("-m needs a module name")
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            script = Path(argv[0])
            if not script.exists():
                raise JouleboundError(f"script {script} does not exist")
            sys.argv = [str(script), *argv[1:]]
            sys.path.insert(0, str(script.resolve().parent))
            runpy.run_path(str(script), run_name="__main__")
    except _Done:
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old_argv
    profiler.finish()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m joulebound.workload.capture [--steps N] -o trace.json -- script.py ARGS``."""
    p = argparse.ArgumentParser(prog="python -m joulebound.workload.capture",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--skip", type=int, default=0)
    p.add_argument("-o", "--out", default="trace.json")
    p.add_argument("--chrome", default=None, help="also keep the raw Chrome trace here")
    p.add_argument("--keep-running", action="store_true")
    p.add_argument("script", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    show_progress()
    script = a.script[1:] if a.script[:1] == ["--"] else a.script
    prof = StepProfiler(a.out, steps=a.steps, warmup=a.warmup, skip=a.skip, chrome_out=a.chrome,
                        keep_running=a.keep_running)
    try:
        return run_script(script, prof)
    except JouleboundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("JOULEBOUND_PROFILING", "1")
    sys.exit(main())

"""Plan a sweep and run it through torchrun, resumably, with a progress bar.

:func:`run_sweep` saves the plan in the store, skips configurations that already have a row,
groups the rest into launches by world size (``single`` configurations ride in the smallest
multi-rank launch when ``pack`` is on, otherwise they get a plain one-process launch), and starts
each launch as

    python -m torch.distributed.run --nproc-per-node N --standalone -m joulebound.measure.sweep.worker ...

(``--standalone`` rendezvouses on a free local port, so concurrent sweeps do not clash; pass
``torchrun_args`` such as ``--nnodes 2 --rdzv-endpoint host:29400`` for multi-node). A launch that
dies (a crash, an OOM-kill, a hung collective hitting its timeout) gets the configuration it was
running recorded as failed with the tail of its log, and the rest of its configurations are
relaunched. The runner itself never holds results in memory: a SIGKILLed sweep loses only the
configuration in flight, and a re-run finishes the rest (each configuration ends up exactly once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.jobs.runstore import SweepStore
from joulebound.workload.grid import SweepConfig


def plan_launches(configs: list[SweepConfig], pack: bool = True) -> list[tuple[int, list[SweepConfig]]]:
    """Group configurations into launches ``(world_size, configs)``, smallest world first.

    With ``pack``, world-size-1 configurations join the smallest multi-rank launch (saving one
    interpreter + torch start-up); they still run on one rank.
    """
    by_world: OrderedDict[int, list[SweepConfig]] = OrderedDict()
    for c in sorted(configs, key=lambda c: c.world_size):
        by_world.setdefault(c.world_size, []).append(c)
    multi = [w for w in by_world if w > 1]
    if pack and 1 in by_world and multi:
        singles = by_world.pop(1)
        by_world[multi[0]] = singles + by_world[multi[0]]
    return list(by_world.items())


def _device_kind(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


#: EnergyMeter backends a sweep's ranks can use (``replay`` needs a recorded file, so it is not one).
ENERGY_BACKENDS: tuple[str, ...] = ("auto", "nvml", "none", "simulated")


def check_energy_backend(energy: str) -> None:
    """Fail before anything runs when ``energy`` is not a backend the sweep ranks can use."""
    if energy not in ENERGY_BACKENDS:
        raise JouleboundError(f"--energy {energy!r} is not a sweep energy backend."
                              f"{did_you_mean(energy, ENERGY_BACKENDS)}")


def check_resources(configs: list[SweepConfig], device: str, torchrun_args: list[str] | None) -> None:
    """Fail before anything runs when the machine has fewer GPUs than a configuration needs."""
    if not configs:
        return
    need = max(c.world_size for c in configs)
    if device == "cuda" and not torchrun_args:
        import torch

        have = torch.cuda.device_count()
        if need > have:
            raise JouleboundError(f"the sweep needs {need} GPUs per launch (--gpus) but this machine "
                                  f"has {have} visible; lower --gpus or use --torchrun-args for multi-node")


def _tail(path: Path, n: int = 2000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-n:].strip()


def _read_progress(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill
            continue
    return out


def _worker_env(world: int, device: str) -> dict[str, str]:
    env = dict(os.environ)
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, world)))
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def launch_command(world: int, worker_args: list[str], torchrun_args: list[str] | None = None) -> list[str]:
    """The command of one launch: torchrun for N > 1 (or multi-node), a plain process for 1."""
    if world == 1 and not torchrun_args:
        return [sys.executable, "-m", "joulebound.measure.sweep.worker", *worker_args]
    rdzv = torchrun_args if torchrun_args else ["--standalone"]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world), *rdzv,
            "-m", "joulebound.measure.sweep.worker", *worker_args]


def run_sweep(configs: list[SweepConfig], db: str | Path, sweep: str, *,
              retry_failed: bool = False, device: str = "auto", energy: str = "auto",
              pack: bool = True, torchrun_args: list[str] | None = None,
              timeout_s: float = 600.0, progress: bool = True,
              on_update: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run every configuration of ``sweep`` that has no row yet; returns a summary dict.

    Args:
        configs: from :meth:`~joulebound.workload.grid.Grid.expand` (already validated).
        db: SQLite file (created if missing).
        sweep: sweep name (rows are keyed by ``(sweep, config_id)``).
        retry_failed: also re-run configurations recorded as failed.
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        energy: EnergyMeter backend for the ranks (``"auto"``: NVML if readable, else time only).
        pack: run ``single`` configurations inside the smallest multi-rank launch.
        torchrun_args: rendezvous options replacing ``--standalone`` (multi-node).
        timeout_s: collective timeout inside a launch (s).
        progress: show a rich progress bar (stderr) with ETA.
        on_update: callback ``(done, total)`` after each finished configuration.

    Returns:
        ``{"sweep", "db", "planned", "skipped", "ran", "ok", "failed", "launches", "wall_s"}``.
    """
    check_energy_backend(energy)
    store = SweepStore(db)
    kind = _device_kind(device)
    check_resources(configs, kind, torchrun_args)
    store.save_plan(sweep, configs)
    done = store.done_ids(sweep, include_failed=not retry_failed)
    todo = [c for c in configs if c.config_id not in done]
    total = len(configs)
    launches = plan_launches(todo, pack=pack)
    summary: dict[str, Any] = {"sweep": sweep, "db": str(db), "planned": total,
                               "skipped": total - len(todo), "ran": 0, "ok": 0, "failed": 0,
                               "launches": 0}
    t_start = time.perf_counter()
    bar = _Bar(total, total - len(todo), enabled=progress)
    try:
        with tempfile.TemporaryDirectory(prefix="joulebound-sweep-") as tmp:
            tmpd = Path(tmp)
            for world, group in launches:
                remaining = group
                while remaining:
                    n = summary["launches"]
                    summary["launches"] += 1
                    plan_f, prog_f = tmpd / f"plan{n}.json", tmpd / f"progress{n}.jsonl"
                    cur_f, log_f = tmpd / f"current{n}.txt", tmpd / f"launch{n}.log"
                    plan_f.write_text(json.dumps([c.to_dict() for c in remaining]))
                    args = ["--plan", str(plan_f), "--db", str(db), "--sweep", sweep,
                            "--progress", str(prog_f), "--current", str(cur_f),
                            "--energy", energy, "--device", kind, "--timeout-s", str(timeout_s),
                            "--watch-pid", str(os.getpid())]
                    cmd = launch_command(world, args, torchrun_args)
                    seen = 0
                    with open(log_f, "wb") as log:
                        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                env=_worker_env(world, kind))
                        try:
                            while proc.poll() is None:
                                time.sleep(0.3)
                                seen = _advance(prog_f, seen, bar, summary, cur_f, on_update)
                        except BaseException:
                            proc.terminate()
                            try:
                                proc.wait(timeout=10)
                            except subprocess.TimeoutExpired:
                                proc.kill()
                            raise
                    rc = proc.returncode
                    seen = _advance(prog_f, seen, bar, summary, cur_f, on_update)
                    finished = {p["config_id"] for p in _read_progress(prog_f)}
                    left = [c for c in remaining if c.config_id not in finished]
                    if not left:
                        break
                    tail = _tail(log_f)
                    current = cur_f.read_text().strip() if cur_f.exists() else None
                    # the configuration in flight; with none (a start-up error, or a launch that
                    # ended without recording its rest) every remaining one is failed
                    crashed = [c for c in left if c.config_id == current] or left
                    why = (f"worker launch (world size {world}) exited with status {rc} while running "
                           f"this configuration; log tail:\n{tail}")
                    for c in crashed:
                        store.record(sweep, c, status="failed", error=why,
                                     env={"world_size": c.world_size, "config": c.to_dict()})
                        summary["ran"] += 1
                        summary["failed"] += 1
                        bar.advance(c.config_id, "failed")
                        if on_update:
                            on_update(bar.done, total)
                    ids = {c.config_id for c in crashed}
                    remaining = [c for c in left if c.config_id not in ids]
    finally:
        bar.close()
    summary["wall_s"] = time.perf_counter() - t_start
    return summary


def _advance(prog_f: Path, seen: int, bar: _Bar, summary: dict[str, Any], cur_f: Path,
             on_update: Callable[[int, int], None] | None) -> int:
    lines = _read_progress(prog_f)
    for p in lines[seen:]:
        summary["ran"] += 1
        summary["ok" if p["status"] == "ok" else "failed"] += 1
        bar.advance(p["config_id"], p["status"])
        if on_update:
            on_update(bar.done, bar.total)
    if cur_f.exists():
        bar.describe(cur_f.read_text().strip())
    return len(lines)


class _Bar:
    """A rich progress bar (stderr) with ETA; a no-op when disabled."""

    def __init__(self, total: int, done: int, enabled: bool) -> None:
        self.total, self.done = total, done
        self.progress = None
        if enabled:
            from joulebound.core.progress import progress_bar

            self.progress = progress_bar("sweep")
            self.progress.start()
            self.task = self.progress.add_task("starting", total=total, completed=done)

    def advance(self, config_id: str, status: str) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress.update(self.task, advance=1, description=f"{status}: {config_id}")

    def describe(self, text: str) -> None:
        if self.progress is not None and text:
            self.progress.update(self.task, description=f"running {text}")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()

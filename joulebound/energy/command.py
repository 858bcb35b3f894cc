"""Run a command under an :class:`~joulebound.energy.meter.EnergyMeter` (``joulebound measure``).

The child runs in joulebound's process group with inherited stdin/stdout/stderr. Signals:

- ``SIGTERM`` (and ``SIGHUP``) sent to joulebound are forwarded to the child;
- ``SIGINT``: a Ctrl-C typed in a terminal already reaches the child (same foreground process
  group), so it is forwarded only when joulebound is *not* the terminal's foreground job (e.g.
  ``kill -INT``), never twice.

joulebound then waits for the child, ends the window and records the exit status. The run row is
written before the child starts and the samples every second, so even if joulebound itself is
killed the store keeps the run (status ``running``) and its samples.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import JouleboundError
from .meter import EnergyMeter, WindowResult
from .status import FAILED, from_returncode


@dataclass
class CommandResult:
    """What ``joulebound measure`` reports.

    Attributes:
        command: the argv that ran.
        exit_code: the child's status as a shell reports it (``128 + N`` when killed by signal N).
        signal: the signal that ended the child, if any.
        window: the measured window over the child's lifetime.
        notes: sensor notes (why no sensor, MIG, fallbacks).
        run_id / db: where it was stored (``db`` is ``None`` without ``--db``).
    """

    command: list[str]
    exit_code: int
    signal: int | None
    window: WindowResult
    notes: list[str]
    run_id: str
    db: str | None

    #: the modeled CPU's TDP (W) when CPU/DRAM energy is modeled, for its interval
    cpu_tdp_w: float | None = None
    carbon: Any = None   # a joulebound.energy.carbon.CarbonIntensity or None

    @property
    def cpu_energy_interval_j(self) -> tuple[float, float] | None:
        """``(low, high)`` of a modeled CPU+DRAM energy (J); ``None`` when measured or absent."""
        w = self.window
        if self.cpu_tdp_w is None or w.cpu_energy_j is None or w.cpu_provenance != "modeled":
            return None
        from .cpu_model import cpu_energy_interval_j

        cpu = sum(d.energy_j or 0.0 for d in w.devices if d.kind == "cpu")
        lo, hi = cpu_energy_interval_j(cpu, w.duration_s, self.cpu_tdp_w)
        rest = w.cpu_energy_j - cpu
        return lo + rest, hi + rest

    def to_json(self) -> dict[str, Any]:
        w = self.window
        gpu = [d for d in w.devices if d.kind == "gpu"]
        ci = self.carbon
        return {"command": self.command, "exit_code": self.exit_code, "signal": self.signal,
                "duration_s": w.duration_s, "duration_provenance": "measured",
                "energy_j": w.energy_j, "cpu_energy_j": w.cpu_energy_j,
                "cpu_provenance": w.cpu_provenance,
                "cpu_energy_interval_j": self.cpu_energy_interval_j,
                "avg_power_w": w.avg_power_w, "peak_power_w": w.peak_power_w,
                "provenance": w.provenance if gpu else None, "flags": w.flags,
                "carbon_intensity_g_per_kwh": ci.g_per_kwh if ci else None,
                "carbon_source": ci.describe() if ci else None,
                "gco2e": ci.grams(w.energy_j) if ci else None,
                "cpu_gco2e": ci.grams(w.cpu_energy_j) if ci else None,
                "devices": [d.__dict__ for d in w.devices], "notes": self.notes,
                "backend": w.backend, "run_id": self.run_id, "db": self.db}


def _in_foreground() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def run_command(cmd: Sequence[str], backend: str = "auto", gpus: Sequence[int] | str | None = "all",
                interval_s: float = 0.1, db: str | Path | None = None,
                window: str = "command", child_stdout: int | None = None,
                **backend_kwargs: Any) -> CommandResult:
    """Run ``cmd``, measuring it as one window; returns when the child exits.

    ``child_stdout``: file descriptor for the child's stdout (e.g. 2 to send it to stderr so
    that joulebound's own stdout stays machine-readable); None inherits joulebound's stdout."""
    if not cmd:
        raise JouleboundError("no command given: joulebound measure -- CMD ARGS")
    meter = EnergyMeter(backend, gpus=gpus, interval_s=interval_s, store=db,
                        command=shlex.join(cmd), **backend_kwargs)
    meter.begin_window(window, sync=False)
    try:
        proc = subprocess.Popen(list(cmd), stdout=child_stdout)
    except OSError as exc:
        meter.end_window(window, sync=False, cancel=True)
        meter.close(status=FAILED, exit_code=127)
        raise JouleboundError(f"cannot run {cmd[0]!r}: {exc.strerror or exc}") from exc

    def forward(signum: int, _frame: object) -> None:
        if signum == signal.SIGINT and _in_foreground():
            return  # the terminal delivered it to the child already
        if proc.poll() is None:
            proc.send_signal(signum)

    old = {}
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            old[s] = signal.signal(s, forward)
        except ValueError:  # not the main thread
            pass
    try:
        while True:
            try:
                rc = proc.wait()
                break
            except KeyboardInterrupt:  # pragma: no cover - handler replaced above
                continue
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    res = meter.end_window(window, sync=False)
    tdp = _modeled_tdp(meter.backend)
    sig = -rc if rc < 0 else None
    code = 128 + sig if sig is not None else rc
    status, _ = from_returncode(rc)
    if sig is not None:
        meter.backend.notes.append(f"the command was killed by {signal.Signals(sig).name}")
    notes = meter.notes
    meter.close(status=status, exit_code=code)
    return CommandResult(command=list(cmd), exit_code=code, signal=sig, window=res, notes=notes,
                         run_id=meter.run_id, db=str(db) if db is not None else None,
                         cpu_tdp_w=tdp)


def _modeled_tdp(backend: Any) -> float | None:
    """The TDP (W) of a modeled-CPU part of ``backend``, if it has one."""
    from .cpu_model import CpuModelBackend

    for p in [backend, *getattr(backend, "parts", [])]:
        if isinstance(p, CpuModelBackend):
            return p.info.tdp_w
    return None

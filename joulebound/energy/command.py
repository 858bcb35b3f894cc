"""Run a command under an :class:`~joulebound.energy.meter.EnergyMeter` (``joulebound measure``).

The command runs with inherited stdin/stdout/stderr, as in a shell. Which processes a signal
reaches — the whole command, not only its first process (``measure -- bash train.sh`` must stop the
training that ``bash`` started, not leave it running unmetered):

- when joulebound leads its own process group (an interactive shell's job), the command stays in
  it, so the terminal's Ctrl-C, Ctrl-Z and reads work as usual; a signal sent to joulebound is
  passed to every process of that group;
- otherwise (started by a script, a scheduler, ``subprocess``) the command gets a process group of
  its own and a signal sent to joulebound is passed to that group (never to the caller's). When
  joulebound's group is the terminal's foreground group (``bash -c 'joulebound measure -- CMD;
  echo done'``), that group is made the terminal's foreground group while the command runs, as a
  shell does for a job, so the command reads the terminal and Ctrl-C reaches it; the terminal is
  handed back when it ends, and a Ctrl-Z that stops the command stops joulebound's job too (the
  command is continued, with the terminal, when that job is).

Signals passed on: ``SIGTERM``, ``SIGHUP``, ``SIGQUIT`` and ``SIGINT`` (a Ctrl-C typed at the
terminal already reaches the command's group: it is not sent twice). If the command has not ended
``kill_after_s`` seconds after such a signal, its process group is sent ``SIGKILL`` (said so in the
notes). joulebound then ends the window and records the exit status. A command that does not exist
exits 127 and one that cannot be executed 126, as in a shell. The run row is written before the
command starts and the samples every second, so even if joulebound itself is killed the store keeps
the run and its samples: the next open of the store marks it ``lost`` (its process is gone). A
SIGKILLed ``measure`` leaves no command running unmetered: a watcher forked before the command
starts (:mod:`joulebound.core.deathwatch`; own session, stop signals ignored) sends SIGKILL, when
joulebound dies before the command ended, to the command's first process, every descendant of it
and, when it had one of its own, its process group. Where no watcher can be forked, the first
process alone gets SIGKILL with joulebound (Linux ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from joulebound.core import deathwatch
from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MEASURED, MODELED
from joulebound.energy.meter import PARENT_RUN_ENV, EnergyMeter
from joulebound.energy.results import WindowResult
from joulebound.energy.status import FAILED, from_returncode
from joulebound.energy.store import pid_start

#: signals passed on to the command
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class CommandNotRunnable(JouleboundError):
    """The command does not exist (``code`` 127) or cannot be executed (126), as a shell says."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class CommandResult:
    """What ``joulebound measure`` reports.

    Attributes:
        command: the argv that ran.
        exit_code: the child's status as a shell reports it (``128 + N`` when killed by signal N).
        signal: the signal that ended the child, if any.
        window: the measured window over the child's lifetime.
        notes: sensor notes (why no sensor, MIG, fallbacks) and anything lost.
        run_id / db: where it was stored (``db`` is ``None`` without ``--db``).
        losses: :attr:`EnergyMeter.losses` (failed reads, samples/windows not stored).
        stopped_by: the signal joulebound received and passed on, if any.
        killed: True when the command's group had to be sent SIGKILL.
    """

    command: list[str]
    exit_code: int
    signal: int | None
    window: WindowResult
    notes: list[str]
    run_id: str
    db: str | None
    losses: dict[str, int] = field(default_factory=dict)
    stopped_by: str | None = None
    killed: bool = False

    @property
    def lost_anything(self) -> bool:
        return any(self.losses.values())

    #: the modeled CPU's TDP (W) when CPU/DRAM energy is modeled, for its interval
    cpu_tdp_w: float | None = None
    carbon: Any = None   # a joulebound.energy.carbon.CarbonIntensity or None

    @property
    def cpu_energy_interval_j(self) -> tuple[float, float] | None:
        """``(low, high)`` of a modeled CPU+DRAM energy (J); ``None`` when measured or absent."""
        w = self.window
        if self.cpu_tdp_w is None or w.cpu_energy_j is None or w.cpu_provenance != MODELED:
            return None
        from joulebound.energy.cpu_model import cpu_energy_interval_j

        cpu = sum(d.energy_j or 0.0 for d in w.devices if d.kind == "cpu")
        lo, hi = cpu_energy_interval_j(cpu, w.duration_s, self.cpu_tdp_w)
        rest = w.cpu_energy_j - cpu
        return lo + rest, hi + rest

    def to_json(self) -> dict[str, Any]:
        w = self.window
        gpu = [d for d in w.devices if d.kind == "gpu"]
        ci = self.carbon
        return {"command": self.command, "exit_code": self.exit_code, "signal": self.signal,
                "duration_s": w.duration_s, "duration_provenance": MEASURED,
                "energy_j": w.energy_j, "energy_uncertainty_j": w.energy_uncertainty_j,
                "cpu_energy_j": w.cpu_energy_j, "cpu_provenance": w.cpu_provenance,
                "cpu_energy_interval_j": self.cpu_energy_interval_j,
                "avg_power_w": w.avg_power_w, "peak_power_w": w.peak_power_w,
                "provenance": w.provenance if gpu else None, "flags": w.flags,
                "carbon_intensity_g_per_kwh": ci.g_per_kwh if ci else None,
                "carbon_source": ci.describe() if ci else None,
                "gco2e": ci.grams(w.energy_j) if ci else None,
                "cpu_gco2e": ci.grams(w.cpu_energy_j) if ci else None,
                "devices": [asdict(d) for d in w.devices], "notes": self.notes,
                "losses": self.losses, "stopped_by": self.stopped_by, "killed": self.killed,
                "backend": w.backend, "run_id": self.run_id, "db": self.db}


def _in_foreground() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def _foreground_terminal() -> int | None:
    """The fd (0) of the terminal whose foreground process group is ours, else ``None``."""
    try:
        if os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp():
            return 0
    except OSError:
        pass
    return None


def _give_terminal(fd: int, pgid: int) -> None:
    """Make ``pgid`` the foreground process group of terminal ``fd`` (as a shell does for a
    job). SIGTTOU is blocked meanwhile: a background caller may hand the terminal back."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
    try:
        os.tcsetpgrp(fd, pgid)
    except OSError:
        pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every live process (Linux ``/proc``; empty
    elsewhere)."""
    out: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for d in names:
        if not d.isdigit():
            continue
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != "Z":
            out[int(d)] = (int(fields[1]), int(fields[2]))
    return out


def _end_orphaned_command(told: bytes) -> int:  # pragma: no cover - runs in the watcher
    """The watcher's ``on_death``: ``measure`` died before its command ended. SIGKILL the
    command: its first process and every descendant (``/proc``), and its process group when it
    had one of its own (``told``: ``"PID PGID OWN_GROUP START"``); nothing when that pid is now
    another process's."""
    try:
        pid, pgid, own, start = (int(x) for x in told.split(b"\n", 1)[0].split())
    except ValueError:
        return 0          # died before the command started: nothing to end
    now = pid_start(pid)
    if now is not None and start >= 0 and now != start:
        return 0          # the command ended and its pid (so its group id) went to another process
    ended: set[int] = set()
    for _ in range(3):    # again: a process may have forked while the first pass ran
        table = _process_table()
        tree, todo = ({pid} if pid in table else set()), [pid]
        while todo:
            parent = todo.pop()
            for p, (pp, _g) in table.items():
                if pp == parent and p not in tree:
                    tree.add(p)
                    todo.append(p)
        if not own:
            tree |= {p for p, (_pp, g) in table.items() if g == pgid}
        fresh = tree - ended
        for p in fresh:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        ended |= fresh
        if not own:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        if not fresh:
            break
        time.sleep(0.02)
    deathwatch.say(f"joulebound measure ended before its command (pid {pid}) did: the command was "
                   f"sent SIGKILL ({len(ended)} process(es)); its run is marked lost when the "
                   "store is next opened")
    return 0


def _start_watch(notes: list[str]) -> deathwatch.DeathWatch | None:
    """The watcher that ends the command if ``measure`` dies first (see the module docs);
    ``None`` with a note when it cannot be started."""
    try:
        return deathwatch.start(_end_orphaned_command)
    except OSError as exc:
        notes.append(f"no watcher could be started ({exc}): if joulebound is killed, only the "
                     "command's first process is ended with it (Linux)")
        return None


def _die_with_parent() -> Any:
    """A ``preexec_fn`` that makes the child get SIGKILL when joulebound dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``), or ``None`` where that is not available: the fallback when no
    watcher could be started. The libc call is looked up here, in the parent: the child only
    makes the system call (and kills itself if the parent is already gone)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig, sigkill = 1, int(signal.SIGKILL)

    def pre() -> None:
        prctl(pr_set_pdeathsig, sigkill, 0, 0, 0)
        if os.getppid() != parent:       # joulebound died before the call: do as it would have
            os.kill(os.getpid(), sigkill)

    return pre


def check_runnable(cmd: Sequence[str], env: dict[str, str] | None = None) -> str:
    """The executable ``cmd[0]`` names, or :class:`CommandNotRunnable` (127 / 126)."""
    name = cmd[0]
    path = name if "/" in name else shutil.which(name, path=(env or os.environ).get("PATH"))
    if path is None or not os.path.lexists(path):
        raise CommandNotRunnable(f"{name}: command not found", 127)
    if os.path.isdir(path):
        raise CommandNotRunnable(f"{name}: is a directory", 126)
    if not os.access(path, os.X_OK):
        raise CommandNotRunnable(f"{name}: permission denied (not executable; chmod +x it or run "
                                 "it through its interpreter, e.g. bash script.sh)", 126)
    return path


def _group_members(pgid: int) -> list[int]:
    """PIDs in process group ``pgid`` (Linux ``/proc``; empty elsewhere)."""
    out = []
    try:
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if len(fields) > 3 and int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d))
    except OSError:
        pass
    return out


class _Forwarder:
    """Passes stop signals to the command's processes; no locks, plain flags only."""

    def __init__(self, proc: subprocess.Popen, own_group: bool) -> None:
        self.proc = proc
        self.own_group = own_group           # the command shares our group (we lead it)
        self.pgid = os.getpgrp() if own_group else proc.pid
        self.first_signal: int | None = None
        self.t_signal: float | None = None
        self._expect: dict[int, int] = {}

    def handler(self, signum: int, _frame: object) -> None:
        if self._expect.get(signum, 0) > 0:    # our own killpg reaching us
            self._expect[signum] -= 1
            return
        if self.first_signal is None:
            self.first_signal = signum
            self.t_signal = time.monotonic()
        if signum == signal.SIGINT and self.own_group and _in_foreground():
            return   # the terminal delivered it to the whole group already
        self.send(signum)

    def send(self, signum: int) -> None:
        try:
            if self.own_group:
                self._expect[signum] = self._expect.get(signum, 0) + 1
                os.killpg(self.pgid, signum)
            else:
                os.killpg(self.pgid, signum)
        except (ProcessLookupError, PermissionError):
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(signum)

    def alive(self) -> bool:
        """Any process of the command left (the direct child, or its group)."""
        if self.proc.poll() is None:
            return True
        if self.own_group:
            return any(p != os.getpid() for p in _group_members(self.pgid))
        try:
            os.killpg(self.pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return bool(_group_members(self.pgid)) or not os.path.isdir("/proc")

    def kill(self) -> None:
        """SIGKILL every process of the command (never joulebound itself)."""
        if self.own_group:
            for pid in _group_members(self.pgid):
                if pid != os.getpid():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                if self.proc.poll() is None:
                    self.proc.kill()
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)


def run_command(cmd: Sequence[str], backend: str = "auto", gpus: Sequence[int] | str | None = "all",
                interval_s: float = 0.1, db: str | Path | None = None,
                window: str = "command", child_stdout: int | None = None,
                kill_after_s: float = 30.0, **backend_kwargs: Any) -> CommandResult:
    """Run ``cmd``, measuring it as one window; returns when the command (all of it) ended.

    ``child_stdout``: file descriptor for the child's stdout (e.g. 2 to send it to stderr so
    that joulebound's own stdout stays machine-readable); None inherits joulebound's stdout.
    ``kill_after_s``: after a stop signal was passed on, SIGKILL the command's process group
    when it is still running this many seconds later.

    Raises:
        CommandNotRunnable: the command does not exist (127) or cannot be executed (126).
    """
    if not cmd:
        raise JouleboundError("no command given: joulebound measure -- CMD ARGS")
    if not kill_after_s > 0:
        raise JouleboundError(f"--kill-after must be > 0 s, got {kill_after_s}")
    check_runnable(cmd)
    meter = EnergyMeter(backend, gpus=gpus, interval_s=interval_s, store=db,
                        command=shlex.join(cmd), **backend_kwargs)
    own_group = os.getpgrp() == os.getpid()
    # not leading our group but in the terminal's foreground (`bash -c 'measure ...; echo'`): the
    # command's own group gets the terminal while it runs, as a shell gives it to a job
    tty = None if own_group else _foreground_terminal()
    watch = _start_watch(meter.backend.notes)
    _charge_children_only(meter.backend)
    meter.begin_window(window, sync=False)
    try:
        proc = subprocess.Popen(list(cmd), stdout=child_stdout,
                                env={**os.environ, PARENT_RUN_ENV: meter.run_id} if db is not None
                                else None,
                                process_group=None if own_group else 0,
                                preexec_fn=_die_with_parent() if watch is None else None)
    except OSError as exc:
        if watch is not None:
            watch.done()
        meter.end_window(window, sync=False, cancel=True)
        code = 127 if exc.errno == errno.ENOENT else 126
        meter.close(status=FAILED, exit_code=code)
        raise CommandNotRunnable(f"{cmd[0]}: {exc.strerror or exc}", code) from exc
    if watch is not None:     # pid, group, whether in our group, start time (pid reuse)
        start = pid_start(proc.pid)
        watch.tell(f"{proc.pid} {os.getpgrp() if own_group else proc.pid} {int(own_group)} "
                   f"{-1 if start is None else start}\n".encode())
    if tty is not None:
        _give_terminal(tty, proc.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGCONT)   # in case it read the terminal before it had it
    fwd = _Forwarder(proc, own_group)
    old = _forward_signals(fwd)
    try:
        killed = _wait(proc, fwd, kill_after_s, tty)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if tty is not None:
            _give_terminal(tty, os.getpgrp())
    rc = proc.wait()
    if watch is not None:
        watch.done()
    res = meter.end_window(window, sync=False)
    tdp = _modeled_tdp(meter.backend)
    sig = -rc if rc < 0 else None
    code = 128 + sig if sig is not None else rc
    status, _ = from_returncode(rc)
    if sig is not None:
        meter.backend.notes.append(f"the command was killed by {signal.Signals(sig).name}")
    stopped = signal.Signals(fwd.first_signal).name if fwd.first_signal else None
    if killed:
        meter.backend.notes.append(
            f"the command did not stop within {kill_after_s:g} s of {stopped}: its process group "
            "was sent SIGKILL")
    meter.close(status=status, exit_code=code)
    # notes and losses read together, after the close flushed the last samples: the note's
    # count of samples not stored is the one in ``losses`` (read before, it missed the last batch)
    return CommandResult(command=list(cmd), exit_code=code, signal=sig, window=res,
                         notes=meter.notes, run_id=meter.run_id,
                         db=str(db) if db is not None else None, cpu_tdp_w=tdp,
                         losses=meter.losses, stopped_by=stopped, killed=killed)


def _forward_signals(fwd: _Forwarder) -> dict[int, Any]:
    """Route :data:`FORWARDED` signals to ``fwd`` (those inherited as ignored stay ignored: the
    caller does not want them to stop us); returns the handlers to restore."""
    old = {}
    for s in FORWARDED:
        try:
            if signal.getsignal(s) is signal.SIG_IGN:
                continue
            old[s] = signal.signal(s, fwd.handler)
        except ValueError:  # not the main thread
            pass
    return old


def _stopped(pid: int) -> bool:
    """Whether child ``pid`` was just stopped (Ctrl-Z, SIGTTIN); consumes that report only
    (``False`` where ``waitid`` is missing, e.g. macOS)."""
    if not hasattr(os, "waitid"):
        return False
    try:
        info = os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG)
    except (ChildProcessError, OSError):
        return False
    return info is not None and info.si_code == os.CLD_STOPPED


def _job_stop(tty: int, pgid: int) -> None:
    """The command (process group ``pgid``, holding terminal ``tty``) was stopped at the
    terminal: take the terminal back and stop joulebound's own group, as the command alone would
    have stopped its job; once resumed (``fg``), give the terminal back and continue the
    command. (A stop signal to an orphaned group is discarded: then it simply continues.)"""
    _give_terminal(tty, os.getpgrp())
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(os.getpgrp(), signal.SIGTSTP)
    _give_terminal(tty, pgid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGCONT)


def _wait(proc: subprocess.Popen, fwd: _Forwarder, kill_after_s: float,
          tty: int | None = None) -> bool:
    """Wait until the command ended, or, once a stop signal was passed on, until its whole
    process group did; SIGKILL the group ``kill_after_s`` after the signal. ``tty``: the terminal
    the command's group was given (its stops are passed on to joulebound's job). Returns whether
    it had to be killed."""
    killed = False
    rc: int | None = None
    while True:
        try:
            rc = proc.wait(timeout=0.1) if rc is None else rc
        except subprocess.TimeoutExpired:
            if tty is not None and _stopped(proc.pid):
                _job_stop(tty, proc.pid)
        if fwd.t_signal is None:
            if rc is not None:
                break
            continue
        if not fwd.alive():
            break
        if not killed and time.monotonic() - fwd.t_signal >= kill_after_s:
            fwd.kill()
            killed = True
        if killed and rc is not None and time.monotonic() - fwd.t_signal > kill_after_s + 5:
            break       # unkillable leftovers (another user's?): stop waiting for them
        if rc is not None:
            time.sleep(0.05)
    return killed


def _charge_children_only(backend: Any) -> None:
    """A modeled CPU part of ``backend`` counts the command's process tree, not joulebound's own
    process (its sampling thread) that launched it."""
    from joulebound.energy.cpu_model import CpuModelBackend

    for p in [backend, *getattr(backend, "parts", [])]:
        if isinstance(p, CpuModelBackend):
            p.exclude_root()


def _modeled_tdp(backend: Any) -> float | None:
    """The TDP (W) of a modeled-CPU part of ``backend``, if it has one."""
    from joulebound.energy.cpu_model import CpuModelBackend

    for p in [backend, *getattr(backend, "parts", [])]:
        if isinstance(p, CpuModelBackend):
            return p.info.tdp_w
    return None

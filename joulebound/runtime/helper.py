"""Privileged clock helper: training never needs root.

A small daemon, started once with privileges (root or CAP_SYS_ADMIN), owns GPU clock control.
Training processes ask it for switches over a Unix-domain socket:

* **who may connect** is decided by the socket file's permissions (``mode``, default 0660, and
  ``group``, resolved before anything is bound). A world-writable mode (e.g. 777) is refused
  without ``insecure=True`` (``--insecure``). The socket is bound under a temporary name, given its
  mode and group, then renamed into place, so it never exists with the wrong permissions;
* **one helper per socket**: a second helper on the same path (a live socket, or a helper holding
  ``<socket>.lock``) refuses to start instead of taking over; a stale socket file is replaced;
* **nothing written through a planted link**: the socket folder must belong to the helper's user
  (or root) and be writable by nobody else (:func:`helper_folder`), and ``<socket>.lock`` is
  opened with ``O_NOFOLLOW``/``O_EXCL`` and checked before a byte is written
  (:func:`~joulebound.hw.gpu.open_lock_file`);
* **GPUs are addressed by UUID** (``"gpu": "GPU-..."``; an NVML index is accepted too). The client
  resolves its own CUDA numbering (``CUDA_VISIBLE_DEVICES``) to a UUID from the helper's ``hello``;
* **every request is validated** strictly (``bool`` is not an index, MHz are positive integers)
  against the device's supported clocks; lines are at most :data:`MAX_LINE` bytes, JSON at most
  :data:`MAX_DEPTH` deep, numbers short; bad requests get an error reply, never a traceback;
* a GPU is **owned** by the client that first locked it, for as long as that client stays connected
  (a reset to the defaults keeps ownership; ``release`` gives it up); others get "busy". The
  helper also holds the GPU's :class:`~joulebound.hw.gpu.GpuLock`, so an in-process
  ``--actuator nvml`` and the helper never control one GPU together. A ``joulebound run`` told
  "busy" trains on without changing clocks (:class:`HelperActuator`, ``skip_when_busy``);
* **rate-limited per GPU** (token bucket: ``burst`` switches, refilled one per
  ``min_interval_s``), whoever asks and however often they reconnect; resets are never throttled.
  A throttled switch is answered ``"code": "rate_limited"`` with ``retry_after_s``: the client
  defers it and reports how many were deferred — training never stops for it;
* **connections**: a real listen backlog (:data:`BACKLOG`) and at most ``max_clients`` at once,
  lowered to fit the process's file-descriptor limit with :data:`FD_RESERVE` descriptors kept free
  for NVML and the GPU locks (more connections are told so and closed at once, in the accepting
  thread); at the fd limit it backs off instead of spinning. A connection that owns no GPU and
  sends no request for ``idle_timeout_s`` is told (``"code": "idle"``) and closed — an owner's
  never is; each connection is answered at most ``request_rate`` requests per second (more wait);
  a request for what the owner's GPU already has (a reset at the defaults, the same pair) makes no
  NVML call, so a flooding client costs no NVML calls beyond its rate-limited switches;
* **clients survive a helper restart**: :class:`HelperActuator` with ``reconnect`` (what
  ``joulebound run`` uses) trains on at the defaults when the connection is lost and reconnects
  with backoff (:data:`RECONNECT_RETRY_S`);
* **when a client disconnects or dies** (EOF on the socket, also after SIGKILL, since the kernel
  closes its socket) the helper resets the clocks of every GPU that client had locked. On
  SIGTERM (always, also when inherited as ignored), SIGINT, SIGHUP or SIGQUIT (unless inherited as
  ignored) it stops accepting, refuses further switches, closes every client connection, waits for
  the handler threads, resets every GPU it touched and exits.

Protocol: one JSON object per line, one reply per request::

    {"op": "hello"}   -> {"ok": true, "version": 2, "gpus": {UUID: {"index", "name", "mig",
                          "supported": {mem MHz: [core MHz, ...]}}}, "limits": {...}}
    {"op": "set", "gpu": "GPU-...", "core": 1410, "mem": 1593}   (null = leave to the governor)
    {"op": "reset", "gpu": "GPU-..."}       default clocks, ownership kept
    {"op": "release", "gpu": "GPU-..."}     default clocks, ownership given up
    replies: {"ok": true} | {"ok": false, "error": "...", "code": "invalid" | "busy" |
             "rate_limited" | "nvml" | "lock" | "stopping", "retry_after_s": s}
    unsolicited, before the helper closes a connection: {"ok": false, "code": "idle", ...}

Run: ``sudo joulebound clock-helper --socket /run/joulebound/clocks.sock --group users``
(or ``python -m joulebound.runtime.helper ...``). Client side: :class:`HelperActuator`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import logging
import os
import signal
import socket
import socketserver
import stat
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joulebound.core.clocks import AUTO, ClockConfig, is_supported
from joulebound.core.errors import GpuBusy, JouleboundError
from joulebound.hw import gpu as gpu_layer
from joulebound.runtime.actuators import PERMISSION_HELP, Actuator, ChannelClosed, SwitchRecord
from joulebound.runtime.guard import STOP_SIGNALS, guard

log = logging.getLogger(__name__)

#: longest request line accepted (bytes, newline included)
MAX_LINE = 4096
#: deepest JSON nesting accepted in a request
MAX_DEPTH = 4
#: listen backlog (connections waiting to be accepted)
BACKLOG = 128
#: longest integer literal accepted (digits)
MAX_INT_DIGITS = 12
#: a client told "busy" asks for the GPU again after this long (s), doubling each time ...
BUSY_RETRY_S = 1.0
#: ... up to this (s)
BUSY_RETRY_MAX_S = 30.0
#: a client that lost the helper (restart, crash) tries to reconnect after this long (s),
#: doubling each time up to :data:`BUSY_RETRY_MAX_S`; a failed try is one ``connect()``
RECONNECT_RETRY_S = 0.5
#: a connection that owns no GPU and sends no request for this long is closed (s)
IDLE_TIMEOUT_S = 60.0
#: requests answered per second on one connection (token bucket; more are answered later) ...
REQUEST_RATE = 500.0
#: ... after a burst of this many
REQUEST_BURST = 200
#: file descriptors kept free for NVML, GPU lock files and the server (plus 2 per GPU): the
#: client cap is lowered to fit the process's fd limit, so clients can never starve them
FD_RESERVE = 16
#: a reply the client does not read within this long closes its connection (s)
SEND_TIMEOUT_S = 30.0


class _Bucket:
    """Token bucket: ``burst`` tokens, one more every ``interval_s`` seconds."""

    def __init__(self, burst: int, interval_s: float) -> None:
        self.burst = max(1, int(burst))
        self.interval = max(0.0, float(interval_s))
        self.tokens = float(self.burst)
        self.t = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        if self.interval > 0:
            self.tokens = min(self.burst, self.tokens + (now - self.t) / self.interval)
        else:
            self.tokens = self.burst
        self.t = now

    def take(self) -> bool:
        self._refill()
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    def wait_s(self) -> float:
        """Seconds until the next token (0 when one is there)."""
        self._refill()
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) * self.interval


class _RequestError(Exception):
    def __init__(self, message: str, code: str = "invalid", **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.extra = extra


@dataclass
class _GpuState:
    phys: gpu_layer.PhysicalGpu
    bucket: _Bucket
    mu: threading.Lock = field(default_factory=threading.Lock)
    device: gpu_layer.GpuDevice | None = None
    owner: int | None = None
    lock: gpu_layer.GpuLock | None = None
    supported: dict[int, list[int]] | None = None
    touched: bool = False
    #: the clocks this helper last applied (AUTO after a reset), ``None`` when unknown: a
    #: request for what is already applied makes no NVML call (a flood of resets costs nothing)
    applied: ClockConfig | None = None


def _json_depth(text: str) -> int:
    """Deepest ``[``/``{`` nesting of a JSON text, strings skipped (for the depth bound)."""
    depth = best = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


def _parse_int(s: str) -> int:
    if len(s.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"number {s[:16]}... is too long")
    return int(s)


def _parse_constant(s: str) -> Any:
    raise ValueError(f"{s} is not allowed")


def parse_request(raw: bytes) -> Any:
    """One request line -> its JSON value; :class:`_RequestError` for anything malformed."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _RequestError(f"request is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if _json_depth(text) > MAX_DEPTH:
        raise _RequestError(f"request nests deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, parse_int=_parse_int, parse_constant=_parse_constant)
    except (ValueError, RecursionError) as exc:
        raise _RequestError(f"not JSON ({exc})") from None


def _strict_mhz(name: str, v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise _RequestError(f"{name} must be a positive integer MHz or null, got {v!r}")
    return v


def parse_mode(mode: str | int, insecure: bool = False) -> int:
    """Socket file mode from an octal string (``"660"``) or int; refuses world-writable modes
    without ``insecure``."""
    if isinstance(mode, str):
        try:
            value = int(mode, 8)
        except ValueError:
            raise JouleboundError(f"--mode {mode!r} is not an octal file mode such as 660") from None
    else:
        value = int(mode)
    if not 0 <= value <= 0o777:
        raise JouleboundError(f"--mode {oct(value)[2:]} is not a file mode (000..777)")
    if value & 0o002 and not insecure:
        raise JouleboundError(f"--mode {oct(value)[2:]} lets every user on this machine change "
                              "GPU clocks (world-writable socket); use 660 with --group, or pass "
                              "--insecure if that is really intended")
    if not value & 0o600:
        raise JouleboundError(f"--mode {oct(value)[2:]}: the owner must be able to use the socket")
    return value


def resolve_group(group: str | int | None) -> int | None:
    """A group name or gid -> gid (checked before the socket is bound)."""
    if group is None:
        return None
    import grp

    if isinstance(group, int) and not isinstance(group, bool):
        gid = group
    elif isinstance(group, str) and group.strip().isdigit():
        gid = int(group.strip())
    elif isinstance(group, str) and group.strip():
        try:
            return grp.getgrnam(group.strip()).gr_gid
        except KeyError:
            raise JouleboundError(f"--group {group!r}: no such group on this machine "
                                  "(see `getent group`)") from None
    else:
        raise JouleboundError(f"--group {group!r}: give a group name or a numeric gid")
    try:
        grp.getgrgid(gid)
    except KeyError:
        raise JouleboundError(f"--group {gid}: no group has this gid (see `getent group`)") \
            from None
    return gid


def helper_folder(folder: Path) -> Path:
    """The socket folder, resolved, if the helper may work in it: it must exist, belong to root
    or this user and be writable by nobody else (so no other user can plant a symlink or a file
    at ``<socket>.lock`` or at the socket's temporary name, or rename them), and no folder above
    it may be writable by every user unless sticky (``/tmp``). Returns the real path (symlinks
    resolved once: everything after uses it).

    Raises:
        JouleboundError: what is wrong and how to fix it.
    """
    if not folder.is_dir():
        raise JouleboundError(f"--socket folder {folder} does not exist (create it, e.g. "
                              "`sudo mkdir -p /run/joulebound`)")
    real = Path(os.path.realpath(folder))
    st = os.stat(real)
    fix = (f"use a folder only the helper's user can write, e.g. `sudo mkdir -p /run/joulebound` "
           f"(root, mode 755), or `chmod go-w {real}`")
    if st.st_uid not in (0, os.geteuid()):
        raise JouleboundError(f"--socket folder {real} belongs to uid {st.st_uid}, not to the "
                              f"helper's user (uid {os.geteuid()}) or root: its owner could "
                              f"plant files the helper writes through; {fix}")
    if st.st_mode & 0o022:
        raise JouleboundError(f"--socket folder {real} is writable by other users (mode "
                              f"{stat.S_IMODE(st.st_mode):o}): they could plant a symlink at the "
                              f"helper's lock file or socket; {fix}")
    for up in real.parents:
        ust = os.stat(up)
        if ust.st_mode & stat.S_IWOTH and not ust.st_mode & stat.S_ISVTX:
            raise JouleboundError(f"--socket folder {real}: {up} above it is writable by every "
                                  f"user (not sticky), so anyone could swap the folder; {fix}")
    return real


class _Server(socketserver.ThreadingUnixStreamServer):
    request_queue_size = BACKLOG
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = False
    helper: ClockHelper | None = None

    def verify_request(self, request: Any, client_address: Any) -> bool:
        # in the accepting thread, before a handler thread exists: over the cap (or stopping) a
        # connection is told and closed at once, so the helper never holds more client fds
        # than the cap allows (the fds NVML and the GPU locks need stay free)
        h = self.helper
        return h is None or h._admit(request)

    def get_request(self) -> Any:
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                time.sleep(0.05)   # at the fd limit: back off instead of spinning on accept()
            raise


class ClockHelper:
    """The helper daemon's state and socket server.

    Args:
        socket_path: where to create the Unix socket; its folder must exist, belong to the
            helper's user or root and be writable by nobody else (:func:`helper_folder`).
        nvml: NVML module (default ``pynvml``; tests pass :class:`FakeNvml`).
        mode: socket file permissions (who may connect), octal string or int.
        group: group name or gid to own the socket (``None``: the helper's group).
        burst / min_interval_s: rate limit per GPU.
        check_privileges: refuse to start without root / CAP_SYS_ADMIN.
        max_clients: connections served at once.
        insecure: allow a world-writable socket mode.
    """

    def __init__(self, socket_path: str | Path, nvml: Any = None, mode: int | str = 0o660,
                 group: str | int | None = None, burst: int = 50, min_interval_s: float = 0.005,
                 check_privileges: bool = True, max_clients: int = 256,
                 insecure: bool = False, idle_timeout_s: float | None = IDLE_TIMEOUT_S,
                 request_rate: float = REQUEST_RATE, request_burst: int = REQUEST_BURST) -> None:
        self.mode = parse_mode(mode, insecure)
        self.gid = resolve_group(group)
        if isinstance(burst, bool) or int(burst) < 1:
            raise JouleboundError(f"--burst must be at least 1, got {burst!r}")
        if float(min_interval_s) < 0:
            raise JouleboundError(f"--min-interval must be >= 0 s, got {min_interval_s!r}")
        if idle_timeout_s is not None and not float(idle_timeout_s) > 0:
            raise JouleboundError(f"--idle-timeout must be > 0 s, got {idle_timeout_s!r}")
        if not float(request_rate) > 0 or int(request_burst) < 1:
            raise JouleboundError(f"--request-rate must be > 0 per s (got {request_rate!r}) "
                                  f"and the request burst >= 1 (got {request_burst!r})")
        if isinstance(max_clients, bool) or int(max_clients) < 1:
            raise JouleboundError(f"--max-clients must be at least 1, got {max_clients!r}")
        if check_privileges and not gpu_layer.has_clock_privileges():
            raise JouleboundError("the clock helper must start with root or CAP_SYS_ADMIN "
                                  "(e.g. `sudo joulebound clock-helper ...`)")
        self.path = helper_folder(Path(socket_path).parent) / Path(socket_path).name
        gpu_layer.lock_dir()      # the machine's GPU lock folder is usable: fail now, not later
        self.burst = int(burst)
        self.min_interval_s = float(min_interval_s)
        self.idle_timeout_s = None if idle_timeout_s is None else float(idle_timeout_s)
        self.request_rate = float(request_rate)
        self.request_burst = int(request_burst)
        self._session = gpu_layer.Nvml(nvml)
        self.nvml = self._session.nv
        self._gpus = {g.uuid: _GpuState(g, _Bucket(self.burst, self.min_interval_s))
                      for g in self._session.gpus()}
        self._by_index = {st.phys.nvml_index: st for st in self._gpus.values()}
        self.n_gpus = len(self._gpus)
        #: clients served at once: ``max_clients``, lowered to fit the fd limit
        self.max_clients = self._fd_cap(int(max_clients))
        self._mu = threading.Lock()
        self._stopping = False
        self._next_client = 0
        self._admitted = 0                  # connections accepted and not yet finished
        self._clients: dict[int, socket.socket] = {}
        self._threads: dict[int, threading.Thread] = {}
        #: connections closed for idleness, requests delayed by the per-connection rate
        self.idle_closed = 0
        self.requests_delayed = 0
        #: the stop signals :meth:`serve_forever` waits for, and those it leaves ignored
        self.stop_signals: list[signal.Signals] = []
        self.ignored_signals: list[signal.Signals] = []
        self.resets = 0
        self.rate_limited = 0
        self.log: list[dict[str, Any]] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lockfd: int | None = None

    def _fd_cap(self, wanted: int) -> int:
        """``wanted`` clients, lowered so that they and :data:`FD_RESERVE` (+2 per GPU) fit the
        fd limit (the soft limit is raised towards the hard one first)."""
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            used = len(os.listdir("/proc/self/fd"))
        except OSError:
            used = 32
        reserve = FD_RESERVE + 2 * self.n_gpus
        need = used + reserve + wanted
        inf = resource.RLIM_INFINITY
        if soft != inf and soft < need and (hard == inf or hard > soft):
            new = need if hard == inf else min(need, hard)
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
                soft = new
        if soft == inf:
            return wanted
        cap = min(wanted, soft - used - reserve)
        if cap < 1:
            raise JouleboundError(f"the helper's file-descriptor limit ({soft}) leaves no room for "
                                  f"clients ({used} in use, {reserve} kept for NVML and the GPU "
                                  "locks); raise it, e.g. `ulimit -n 1024` before starting it")
        if cap < wanted:
            log.warning("clock helper: serving at most %d clients (fd limit %d), not %d",
                        cap, soft, wanted)
        return cap

    def _admit(self, conn: socket.socket) -> bool:
        """Accept ``conn`` as a client, or tell it why not (non-blocking) and refuse it."""
        with self._mu:
            ok = not self._stopping and self._admitted < self.max_clients
            if ok:
                self._admitted += 1
        if not ok:
            why = ("the clock helper is stopping" if self._stopping else
                   f"the clock helper serves at most {self.max_clients} clients")
            with contextlib.suppress(OSError):
                conn.setblocking(False)
                conn.send((json.dumps({"ok": False, "code": "busy", "error": why}) + "\n")
                          .encode())
        return ok

    def owns_any(self, client: int) -> bool:
        """Whether ``client`` owns a GPU now."""
        with self._mu:
            return any(st.owner == client for st in self._gpus.values())

    # -- GPUs -------------------------------------------------------------------------------
    def _state(self, gpu: Any) -> _GpuState:
        if isinstance(gpu, bool):
            raise _RequestError(f"gpu must be a UUID or an NVML index, got {gpu!r}")
        if isinstance(gpu, int):
            st = self._by_index.get(gpu)
            if st is None:
                raise _RequestError(f"gpu {gpu} does not exist (NVML indices 0..{self.n_gpus - 1})")
            return st
        if isinstance(gpu, str):
            st = self._gpus.get(gpu)
            if st is None:
                raise _RequestError(f"gpu {gpu[:64]!r} is not a GPU of this machine "
                                    f"(UUIDs: {', '.join(self._gpus)})")
            return st
        raise _RequestError(f"gpu must be a UUID string or an NVML index, got {type(gpu).__name__}")

    def _device(self, st: _GpuState) -> gpu_layer.GpuDevice:
        if st.device is None:
            st.device = self._session.open(st.phys)
        return st.device

    def supported(self, gpu: Any) -> dict[int, list[int]]:
        """Memory MHz -> supported core MHz of ``gpu`` (UUID or NVML index; cached)."""
        st = self._state(gpu)
        if st.supported is None:
            st.supported = self._device(st).supported_clocks()
        return st.supported

    def validate(self, gpu: Any, core: Any, mem: Any) -> ClockConfig:
        """The requested config, checked against ``gpu``'s supported clocks."""
        st = self._state(gpu)
        core, mem = _strict_mhz("core", core), _strict_mhz("mem", mem)
        table = self.supported(st.phys.uuid)
        name = st.phys.describe()
        cfg = ClockConfig(core, mem)
        if is_supported(cfg, table):
            return cfg
        if mem is not None and mem not in table:
            raise _RequestError(f"memory clock {mem} MHz is not supported by {name} "
                                f"(supported: {sorted(table, reverse=True)})")
        mems = [mem] if mem is not None else list(table)
        ok = sorted({c for m in mems for c in table[m]}, reverse=True)
        raise _RequestError(f"core clock {core} MHz is not supported by {name}"
                            f"{' at memory ' + str(mem) + ' MHz' if mem else ''} "
                            f"(supported: {ok[:8]}{' ...' if len(ok) > 8 else ''})")

    def _set(self, st: _GpuState, cfg: ClockConfig) -> bool:
        """Lock ``cfg``; False when the memory clock could not be locked (pre-Ampere)."""
        dev = self._device(st)
        st.touched = True
        st.applied = None                 # unknown until the calls below succeed
        if cfg.core_mhz is None:
            dev.reset_core()
        else:
            dev.lock_core(cfg.core_mhz)
        if cfg.mem_mhz is None:
            with contextlib.suppress(Exception):   # not supported before Ampere
                dev.reset_memory()
            return True
        try:
            dev.lock_memory(cfg.mem_mhz)
        except Exception as exc:
            if not gpu_layer.is_not_supported(self.nvml, exc):
                raise
            return False
        st.applied = cfg
        return True

    def _reset(self, st: _GpuState) -> list[str]:
        st.applied = None
        errs = self._device(st).reset_clocks()
        self.resets += 1
        if not errs:
            st.applied = AUTO
        for e in errs:
            log.warning("%s: %s", st.phys.describe(), e)
        return errs

    def reset_gpu(self, gpu: Any) -> None:
        """Restore default clocks of ``gpu`` (best effort, never raises)."""
        try:
            st = self._state(gpu)
            with st.mu:
                self._reset(st)
        except Exception:
            log.exception("reset of %r failed", gpu)

    def reset_all(self, timeout_s: float = 10.0) -> None:
        """Refuse further switches, then reset every GPU this helper touched."""
        with self._mu:
            self._stopping = True
        for st in self._gpus.values():
            if not st.touched:
                continue
            got = st.mu.acquire(timeout=timeout_s)
            try:
                with contextlib.suppress(Exception):
                    self._reset(st)
            finally:
                if got:
                    st.mu.release()
            with self._mu:
                st.owner = None
                if st.lock is not None:
                    st.lock.release()
                    st.lock = None

    # -- requests ---------------------------------------------------------------------------
    def hello(self) -> dict[str, Any]:
        gpus = {}
        for uuid, st in self._gpus.items():
            try:
                sup = {str(m): cs for m, cs in self.supported(uuid).items()}
            except Exception as exc:
                sup = {}
                log.warning("supported clocks of %s: %s", st.phys.describe(), exc)
            gpus[uuid] = {"index": st.phys.nvml_index, "name": st.phys.name,
                          "mig": list(st.phys.mig_uuids), "supported": sup}
        return {"ok": True, "version": 2, "gpus": gpus,
                "limits": {"burst": self.burst, "min_interval_s": self.min_interval_s}}

    def handle(self, client: int, req: Any) -> dict[str, Any]:
        """Answer one request from ``client`` (never raises)."""
        try:
            return self._handle(client, req)
        except _RequestError as exc:
            return {"ok": False, "error": str(exc), "code": exc.code, **exc.extra}
        except Exception as exc:
            log.exception("request %r failed", req)
            return {"ok": False, "error": f"NVML refused: {exc}", "code": "nvml"}

    def _handle(self, client: int, req: Any) -> dict[str, Any]:
        if not isinstance(req, dict) or not isinstance(req.get("op"), str):
            raise _RequestError("request must be a JSON object with an 'op' string")
        op = req["op"]
        if op == "hello":
            return self.hello()
        if op not in ("set", "reset", "release"):
            raise _RequestError(f"unknown op {op[:32]!r} (hello, set, reset, release)")
        if "gpu" not in req:
            raise _RequestError("'gpu' is required (a UUID from hello)")
        st = self._state(req["gpu"])
        cfg = self.validate(st.phys.uuid, req.get("core"), req.get("mem")) if op == "set" \
            else AUTO
        name = st.phys.describe()
        with self._mu:
            if self._stopping:
                raise _RequestError("the clock helper is stopping", "stopping")
            if st.owner is not None and st.owner != client:
                raise _RequestError(f"{name} is in use by another client", "busy")
            if st.owner is None:
                if op != "set":
                    return {"ok": True, "note": "not owned: nothing to reset"}
                lk = gpu_layer.GpuLock(st.phys.uuid, owner="joulebound clock-helper")
                try:
                    lk.acquire()
                except gpu_layer.GpuBusy as exc:
                    raise _RequestError(str(exc), "busy") from None
                except JouleboundError as exc:     # the lock folder or file is not safe
                    raise _RequestError(str(exc), "lock") from None
                st.owner, st.lock = client, lk
            elif st.applied == cfg:
                # this owner's GPU is already there: no NVML call, no token (coalesced)
                if op == "release":
                    st.owner = None
                    if st.lock is not None:
                        st.lock.release()
                        st.lock = None
                return {"ok": True, "note": "already applied"}
            if op == "set" and not st.bucket.take():
                self.rate_limited += 1
                wait = st.bucket.wait_s()
                raise _RequestError(f"rate limited on {name}: at most {self.burst} switches in a "
                                    f"burst, then one per {self.min_interval_s:g} s",
                                    "rate_limited", retry_after_s=round(wait, 6))
        with st.mu:
            if op == "set" and self._stopping:
                raise _RequestError("the clock helper is stopping", "stopping")
            if cfg.is_auto:
                self._reset(st)
                st.touched = True
                mem_ok = True
            else:
                mem_ok = self._set(st, cfg)
        if op == "release":
            self._give_up(st, client)
        entry = {"t": time.time(), "client": client, "gpu": st.phys.uuid, "op": op,
                 "config": cfg.label}
        if not mem_ok:
            entry["note"] = "memory lock unsupported"
        self.log.append(entry)
        if len(self.log) > 10_000:
            del self.log[:5_000]
        return {"ok": True} if mem_ok else {"ok": True, "memory_locked": False}

    def _give_up(self, st: _GpuState, client: int) -> None:
        with self._mu:
            if st.owner == client:
                st.owner = None
                if st.lock is not None:
                    st.lock.release()
                    st.lock = None

    def client_gone(self, client: int) -> None:
        """Reset every GPU the client had locked and give them up."""
        with self._mu:
            owned = [st for st in self._gpus.values() if st.owner == client]
        for st in owned:
            with st.mu:
                with contextlib.suppress(Exception):
                    self._reset(st)
            self._give_up(st, client)

    # -- server -----------------------------------------------------------------------------
    def _serve_connection(self, conn: socket.socket) -> None:
        """Serve one client (admitted by :meth:`_admit`) until it disconnects, sends a line over
        :data:`MAX_LINE`, stays idle past the idle timeout while owning no GPU, or the helper
        stops. Requests beyond the per-connection rate are answered later (backpressure)."""
        import select

        with self._mu:
            client = self._next_client
            self._next_client += 1
            self._clients[client] = conn
            self._threads[client] = threading.current_thread()
        conn.settimeout(SEND_TIMEOUT_S)      # a client that never reads its replies is dropped
        bucket = _Bucket(self.request_burst, 1.0 / self.request_rate)
        poller = select.poll()
        poller.register(conn, select.POLLIN | select.POLLPRI)

        def reply(doc: dict[str, Any]) -> None:
            conn.sendall((json.dumps(doc) + "\n").encode())

        buf = bytearray()
        last = time.monotonic()               # the last complete request (or the connect)
        try:
            while True:
                nl = buf.find(b"\n")
                if nl < 0 or nl >= MAX_LINE:
                    if len(buf) >= MAX_LINE:
                        reply({"ok": False, "code": "invalid",
                               "error": f"request longer than {MAX_LINE} bytes; connection "
                                        "closed"})
                        break
                    wait_ms = None
                    if self.idle_timeout_s is not None:
                        wait_ms = max(0, int((last + self.idle_timeout_s - time.monotonic())
                                             * 1000) + 1)
                    if not poller.poll(wait_ms):
                        if self.owns_any(client):   # an owner's session is never timed out
                            last = time.monotonic()
                            continue
                        with self._mu:
                            self.idle_closed += 1
                        reply({"ok": False, "code": "idle",
                               "error": f"connection closed: idle for {self.idle_timeout_s:g} "
                                        "s (no request, no GPU owned); reconnect to continue"})
                        break
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                    continue
                line = bytes(buf[:nl + 1])
                del buf[:nl + 1]
                last = time.monotonic()
                if not line.strip():
                    continue
                if not bucket.take():         # over the per-connection rate: answer later
                    with self._mu:
                        self.requests_delayed += 1
                    time.sleep(bucket.wait_s())
                    bucket.take()
                try:
                    req = parse_request(line)
                except _RequestError as exc:
                    reply({"ok": False, "error": str(exc), "code": exc.code})
                    continue
                reply(self.handle(client, req))
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            self.client_gone(client)
            with self._mu:
                self._clients.pop(client, None)
                self._threads.pop(client, None)
                self._admitted -= 1

    def _take_path(self) -> None:
        """Refuse to start on a live socket; replace a stale one."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        # never through a symlink, only our own plain file, in the folder checked at start
        dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |
                      os.O_CLOEXEC)
        try:
            fd = gpu_layer.open_lock_file(dfd, lock_path.name, f"the helper's lock file "
                                          f"{lock_path}")
        finally:
            os.close(dfd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise JouleboundError(f"another clock helper is already serving {self.path} "
                                  f"(it holds {lock_path}); stop it first, or use another "
                                  "--socket") from None
        self._lockfd = fd
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        if self.path.exists() or self.path.is_symlink():
            if not stat.S_ISSOCK(os.lstat(self.path).st_mode):
                self._drop_lock()
                raise JouleboundError(f"{self.path} exists and is not a socket; choose another "
                                      "--socket path")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.settimeout(1.0)
            try:
                probe.connect(str(self.path))
            except (ConnectionRefusedError, FileNotFoundError):
                self.path.unlink(missing_ok=True)      # stale: nobody listens
            except OSError:
                self._drop_lock()
                raise JouleboundError(f"{self.path} is a socket in use; stop the process that "
                                      "listens on it or use another --socket") from None
            else:
                probe.close()
                self._drop_lock()
                raise JouleboundError(f"a clock helper is already listening on {self.path}; "
                                      "stop it first (it resets the clocks it set) or use "
                                      "another --socket")
            finally:
                probe.close()

    def _drop_lock(self) -> None:
        if self._lockfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lockfd)
            self._lockfd = None

    def _make_server(self) -> _Server:
        helper = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                helper._serve_connection(self.request)

        self._take_path()
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            server = _Server(str(tmp), Handler)
            server.helper = self
        except OSError as exc:
            self._drop_lock()
            raise JouleboundError(f"cannot create the socket {self.path}: {exc}") from exc
        try:
            os.chmod(tmp, self.mode)
            if self.gid is not None:
                try:
                    os.chown(tmp, -1, self.gid)
                except PermissionError as exc:
                    raise JouleboundError(f"cannot give {self.path} to group {self.gid} ({exc}); "
                                          "run the helper as root") from exc
            os.replace(tmp, self.path)
        except BaseException:
            server.server_close()
            tmp.unlink(missing_ok=True)
            self._drop_lock()
            raise
        return server

    def start(self) -> ClockHelper:
        """Serve in a background thread (tests, embedding)."""
        self._server = self._make_server()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={
            "poll_interval": 0.1}, daemon=True, name="joulebound-clock-helper")
        self._thread.start()
        return self

    def serve_forever(self, on_ready: Any = None) -> int:
        """Serve until a stop signal; then stop in order and reset every touched GPU. Returns the
        signal number.

        SIGTERM always stops it: a daemon must be stoppable by ``kill`` and service managers, so
        a SIGTERM inherited as ignored is reset to its default first. SIGINT, SIGHUP and SIGQUIT
        stop it too, except those inherited as ignored (``nohup``, ``cmd &``), which stay
        ignored: :attr:`stop_signals` and :meth:`stop_help` say which.

        Signals are blocked in every thread and taken with ``sigwait`` in this one: no signal
        handler runs at all, so none can race the handler threads."""
        ignored = [s for s in STOP_SIGNALS if signal.getsignal(s) is signal.SIG_IGN]
        if signal.SIGTERM in ignored:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self.ignored_signals = [s for s in ignored if s != signal.SIGTERM]
        self.stop_signals = [s for s in STOP_SIGNALS if s not in self.ignored_signals]
        sigs = set(self.stop_signals)
        old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
        try:
            self.start()
            if on_ready is not None:
                on_ready(self)
            signum = signal.sigwait(sigs)
            log.info("clock helper: %s, stopping", signal.Signals(signum).name)
            return int(signum)
        finally:
            self.close()
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def stop_help(self) -> str:
        """Which signals stop the helper, in words (true once :meth:`serve_forever` runs)."""
        sigs = self.stop_signals or [signal.SIGTERM]
        names = [s.name for s in sigs]
        text = (names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1])
        text += " stops it" if len(names) == 1 else " stop it"
        if self.ignored_signals:
            ign = [s.name for s in self.ignored_signals]
            both = ign[0] if len(ign) == 1 else ", ".join(ign[:-1]) + " and " + ign[-1]
            text += (f" ({both} {'was' if len(ign) == 1 else 'were'} inherited as ignored and "
                     "stay ignored)")
        return text

    def close(self) -> None:
        """Stop accepting, refuse switches, close every client, wait for the handler threads,
        reset every touched GPU, remove the socket (idempotent)."""
        with self._mu:
            self._stopping = True
            conns = list(self._clients.values())
        if self._server is not None:
            if self._thread is not None:
                self._server.shutdown()
                self._thread.join()
                self._thread = None
            self._server.server_close()
            self._server = None
            with contextlib.suppress(OSError):
                self.path.unlink()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + 5.0
        while True:
            with self._mu:
                threads = [t for t in self._threads.values() if t is not threading.current_thread()]
            if not threads or time.monotonic() > deadline:
                break
            threads[0].join(timeout=max(0.0, deadline - time.monotonic()))
        self.reset_all()
        self._drop_lock()
        self._session.close()


class HelperActuator(Actuator):
    """Actuator that asks the clock helper over its Unix socket (no privileges needed).

    Args:
        socket_path: the helper's socket.
        gpu: the GPU as CUDA numbers it in this process (index into ``CUDA_VISIBLE_DEVICES``,
            else NVML index) or a UUID; resolved against the helper's GPU list to a UUID.
        timeout_s: per-request timeout (s).
        connect_timeout_s: how long to keep trying while the helper's backlog is full (s).
        env: environment for ``CUDA_VISIBLE_DEVICES`` (default ``os.environ``).
        skip_when_busy: when another owner holds the GPU (the helper answers ``busy``), skip the
            switch instead of raising :class:`~joulebound.core.errors.GpuBusy`: training goes on
            without changing clocks, the GPU is asked for again after a backoff
            (:data:`BUSY_RETRY_S`, doubling up to :data:`BUSY_RETRY_MAX_S`), and :attr:`skipped`
            / :attr:`notes` say how many switches were skipped (``joulebound run`` sets it;
            calibration, which must not measure at clocks it did not set, keeps the error).
        reconnect: when the connection to the helper is lost (the helper restarted, crashed or
            is stopping), skip switches instead of raising: training goes on at the default
            clocks (the helper resets a lost client's GPU), the connection is tried again after
            a backoff (:data:`RECONNECT_RETRY_S`, doubling up to :data:`BUSY_RETRY_MAX_S`; a
            try is one ``connect()``, so training is not held up), and the plan is applied
            again once it is back; :attr:`notes` say how often it was lost and how many
            switches were skipped. ``None`` (default): the same as ``skip_when_busy``.

    A switch the helper's rate limit refuses is **deferred**, not an error: it is retried once the
    helper says a token is back (at the next op or switch), a newer switch replaces it, and
    :attr:`notes` say how many were deferred. Training never stops for the limit. A connection
    the helper closed for idleness (it owned no GPU) is reopened at the next request, in every
    mode.
    """

    name = "helper"

    def __init__(self, socket_path: str | Path, gpu: int | str = 0, timeout_s: float = 5.0,
                 connect_timeout_s: float = 30.0, env: dict[str, str] | None = None,
                 install_signal_handlers: bool = True, skip_when_busy: bool = False,
                 reconnect: bool | None = None) -> None:
        super().__init__()
        self._closed = True
        self.skip_when_busy = bool(skip_when_busy)
        self.reconnect = self.skip_when_busy if reconnect is None else bool(reconnect)
        self.timeout_s = float(timeout_s)
        self._down = False                 # the connection is lost: switches are skipped
        self._down_until = 0.0             # monotonic s: next reconnect try
        self._down_wait = RECONNECT_RETRY_S
        self._lost_why: str | None = None
        self._lost_first_op = -1
        #: times the connection was lost / reopened after a loss; switches skipped meanwhile
        self.losses = 0
        self.reconnects = 0
        self.skipped_disconnected = 0
        self.skipped_busy = 0
        self._busy_until = 0.0             # monotonic s: do not ask for the GPU before this
        self._busy_wait = BUSY_RETRY_S
        self._busy_why: str | None = None
        self._busy_first_op = -1
        self._owned_after_busy = False
        self.socket_path = str(socket_path)
        self.sock = self._connect(self.socket_path, timeout_s, connect_timeout_s)
        self._rf = self.sock.makefile("rb")
        self._io = threading.Lock()
        self.notes: list[str] = []
        self.deferred = 0
        self.superseded = 0
        self._pending: ClockConfig | None = None
        self._retry_at = 0.0
        self._closed = False
        try:
            self.hello = self._request({"op": "hello"})
            phys = [gpu_layer.PhysicalGpu(int(d["index"]), uuid, str(d.get("name", "GPU")),
                                          tuple(d.get("mig") or ()))
                    for uuid, d in self.hello["gpus"].items()]
            phys.sort(key=lambda p: p.nvml_index)
            self.phys = gpu_layer.resolve(gpu, phys, env)
        except BaseException:
            self._shutdown_socket()
            raise
        self.gpu = gpu
        self.uuid = self.phys.uuid
        ref = weakref.ref(self)

        def close_in_child() -> None:
            # forked children (DataLoader workers) must not keep the connection open: the helper
            # resets the clocks when the connection closes, i.e. when this process dies
            obj = ref()
            if obj is not None:
                obj._closed = True
                with contextlib.suppress(OSError):
                    obj._rf.close()
                    obj.sock.close()

        os.register_at_fork(after_in_child=close_in_child)
        if install_signal_handlers:
            guard().register(self)

    @staticmethod
    def _connect(path: str, timeout_s: float, connect_timeout_s: float) -> socket.socket:
        deadline = time.monotonic() + connect_timeout_s
        delay = 0.005
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout_s)
            try:
                sock.connect(path)
                return sock
            except PermissionError as exc:
                sock.close()
                raise JouleboundError(f"{path}: permission denied; ask the admin to add you to "
                                      "the helper socket's group") from exc
            except (BlockingIOError, InterruptedError, TimeoutError) as exc:
                sock.close()      # backlog full (EAGAIN): the helper is busy accepting, retry
                if time.monotonic() > deadline:
                    raise JouleboundError(f"the clock helper at {path} did not accept the "
                                          f"connection within {connect_timeout_s:g} s") from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
            except OSError as exc:
                sock.close()
                raise JouleboundError(f"cannot reach the clock helper at {path} ({exc}); start "
                                      f"it first. {PERMISSION_HELP}") from exc

    def _exchange(self, req: dict[str, Any]) -> dict[str, Any]:
        """Send ``req`` and read its reply (under ``_io``). Raises :class:`_Lost` when the
        connection is gone (also when the helper is stopping or closed it for idleness),
        :class:`ChannelClosed` when this actuator was closed meanwhile."""
        try:
            self.sock.sendall((json.dumps(req) + "\n").encode())
        except OSError as exc:
            if self._closed:
                raise ChannelClosed from None
            raise _Lost(self._parting_words() or {"error": str(exc)}) from None
        try:
            line = self._rf.readline(1 << 20)
        except OSError as exc:
            if self._closed:
                raise ChannelClosed from None
            raise _Lost({"error": str(exc)}) from None
        if not line:
            if self._closed:
                raise ChannelClosed
            raise _Lost({"error": "the clock helper closed the connection"})
        try:
            resp = json.loads(line)
        except ValueError:
            raise _Lost({"error": f"unreadable reply {line[:80]!r}"}) from None
        if not isinstance(resp, dict):
            raise _Lost({"error": f"unreadable reply {line[:80]!r}"})
        if not resp.get("ok") and resp.get("code") in ("idle", "stopping"):
            raise _Lost(resp)
        return resp

    def _reopen(self) -> None:
        """A new connection and ``hello`` (under ``_io``); the GPU must still be served."""
        sock = self._connect(self.socket_path, self.timeout_s, min(1.0, self.timeout_s))
        old_sock, old_rf = self.sock, self._rf
        self.sock, self._rf = sock, sock.makefile("rb")
        with contextlib.suppress(OSError):
            old_rf.close()
            old_sock.close()
        if self._closed:                   # closed (e.g. by a signal) while connecting
            self._shutdown_socket()
            raise ChannelClosed
        hello = self._exchange({"op": "hello"})
        if not hello.get("ok"):
            raise _Lost(hello)
        if self.uuid not in (hello.get("gpus") or {}):
            raise _Lost({"error": f"the helper no longer serves {self.phys.describe()}"})
        self.hello = hello

    def _request(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        with self._io:
            if self._closed and op != "hello":
                raise ChannelClosed
            try:
                try:
                    resp = self._exchange(req)
                except _Lost as lost:
                    if lost.code != "idle" or op == "hello":
                        raise
                    # closed for idleness (this client owned nothing): reopen, ask again once
                    try:
                        self._reopen()
                    except JouleboundError as exc:
                        raise _Lost({"error": str(exc)}) from None
                    resp = self._exchange(req)
            except _Lost as lost:
                if self.reconnect and op != "hello":
                    raise
                raise JouleboundError(f"the clock helper connection failed: {lost}") from None
        if not resp.get("ok") and resp.get("code") == "busy" and op != "hello":
            if self.skip_when_busy:
                return resp
            raise GpuBusy(f"clock helper refused {req}: {resp.get('error')}")
        if not resp.get("ok") and resp.get("code") != "rate_limited":
            raise JouleboundError(f"clock helper refused {req}: {resp.get('error')}")
        return resp

    def supported_clocks(self) -> dict[int, list[int]] | None:
        """The GPU's live clock table as the helper read it from NVML (memory MHz -> core MHz),
        ``None`` when the helper could not read it."""
        sup = self.hello["gpus"].get(self.uuid, {}).get("supported") or {}
        return {int(m): [int(c) for c in cs] for m, cs in sup.items()} or None

    def describe_gpu(self) -> str:
        return self.phys.describe()

    def _parting_words(self) -> dict[str, Any] | None:
        """What the helper sent before closing the connection (``{"error", "code"}``), if any."""
        try:
            line = self._rf.readline(1 << 16)
            doc = json.loads(line) if line else None
            return doc if isinstance(doc, dict) and "error" in doc else None
        except (OSError, ValueError, AttributeError):
            return None

    def set_clocks(self, config: ClockConfig) -> bool:
        if self._closed or not self.in_owner_process:
            return False
        if self._down:
            if config == self.current:     # AUTO: what the helper left the GPU at
                return False
            if time.monotonic() < self._down_until or not self._try_reconnect():
                self.skipped += 1
                self.skipped_disconnected += 1
                return False
        if config == self.current:
            self._pending = None          # already there: a deferred switch is moot
            return False
        if self._busy_until and time.monotonic() < self._busy_until:
            self.skipped += 1             # another owner has the GPU: ask again later
            self.skipped_busy += 1
            self._pending = None          # skipped, so not retried (and not counted again)
            return False
        if self._pending is not None:
            if config != self._pending:
                self.superseded += 1
            if time.monotonic() < self._retry_at and not config.is_auto:
                self._pending = config    # still throttled: keep the newest target
                return False
        try:
            return super().set_clocks(config)
        except ChannelClosed:
            return False
        except (_Deferred, _Skipped):
            return False
        except _Lost as lost:
            self._went_down(str(lost))
            self.skipped += 1
            self.skipped_disconnected += 1
            return False

    def _went_down(self, why: str) -> None:
        """The connection is lost: train on at the defaults, try again after a backoff."""
        self._down = True
        self.losses += 1
        if self._lost_why is None:
            self._lost_why, self._lost_first_op = why, self.n_ops
        log.warning("clock helper connection lost (%s); training goes on at the default clocks "
                    "and reconnects with backoff", why)
        self._shutdown_socket()
        if self.current != AUTO:          # the helper resets a lost client's GPU
            self.switches.append(SwitchRecord(time.monotonic() - self._t0, AUTO, self.n_ops))
            self.current = AUTO
        self._pending = None
        self._busy_until = 0.0
        self._down_wait = RECONNECT_RETRY_S
        self._down_until = time.monotonic() + self._down_wait

    def _try_reconnect(self) -> bool:
        """One try to reach the helper again (a ``connect()`` and ``hello``); backoff on failure."""
        with self._io:
            if self._closed:
                return False
            try:
                self._reopen()
            except (JouleboundError, _Lost, ChannelClosed, OSError) as exc:
                self._down_wait = min(self._down_wait * 2, BUSY_RETRY_MAX_S)
                self._down_until = time.monotonic() + self._down_wait
                log.debug("clock helper still unreachable (%s); next try in %g s", exc,
                          self._down_wait)
                return False
        self._down = False
        self.reconnects += 1
        log.warning("clock helper reconnected; the plan applies again")
        return True

    def on_op(self, label: int) -> None:
        super().on_op(label)
        if self._pending is not None and time.monotonic() >= self._retry_at:
            self.set_clocks(self._pending)

    def _apply(self, config: ClockConfig) -> None:
        if config.is_auto:
            resp = self._request({"op": "reset", "gpu": self.uuid})
        else:
            resp = self._request({"op": "set", "gpu": self.uuid, "core": config.core_mhz,
                                  "mem": config.mem_mhz})
        if resp.get("ok"):
            self._pending = None
            if self._busy_until:
                self._busy_until = 0.0
                self._owned_after_busy = True
            return
        if resp.get("code") == "busy" and config.is_auto:
            return                       # not ours (another owner has it): nothing to reset
        if resp.get("code") == "busy":   # another owner: skip, ask again after a backoff
            self._pending = None
            self.skipped += 1
            self.skipped_busy += 1
            if self._busy_why is None:
                self._busy_why = str(resp.get("error"))
                self._busy_first_op = self.n_ops
                log.warning("clock helper: %s; training goes on without changing clocks",
                            self._busy_why)
            self._busy_until = time.monotonic() + self._busy_wait
            self._busy_wait = min(self._busy_wait * 2, BUSY_RETRY_MAX_S)
            raise _Skipped
        # rate limited: defer (resets are never limited)
        if self._pending is None or self._pending != config:
            self.deferred += 1
        self._pending = config
        self._retry_at = time.monotonic() + float(resp.get("retry_after_s") or 0.0)
        raise _Deferred

    def rate_limit_note(self) -> str | None:
        """What the helper's rate limit did, in words (``None`` when it never applied)."""
        if not self.deferred:
            return None
        lim = self.hello.get("limits", {})
        return (f"clock helper rate limit (burst {lim.get('burst')}, then one switch per "
                f"{lim.get('min_interval_s')} s per GPU): {self.deferred} switch(es) deferred, "
                f"{self.superseded} replaced by a newer one before they could be applied")

    def busy_note(self) -> str | None:
        """What a busy GPU did to this run, in words (``None`` when it never was)."""
        if self._busy_why is None:
            return None
        then = ("the GPU was obtained later and the plan applied from then on"
                if self._owned_after_busy else "this run never obtained it")
        return (f"{self.phys.describe()} was busy when this run first switched clocks (at op "
                f"{self._busy_first_op:,}): {self._busy_why}. Training went on without changing "
                f"clocks (at the defaults or the other owner's); {self.skipped_busy:,} switch(es) "
                f"skipped while it was asked for again with backoff ({BUSY_RETRY_S:g} s doubling "
                f"to {BUSY_RETRY_MAX_S:g} s); {then}")

    def reconnect_note(self) -> str | None:
        """What a lost helper connection did to this run, in words (``None`` when never lost)."""
        if not self.losses:
            return None
        state = "connected" if not self._down else "still unreachable"
        return (f"the clock helper connection was lost {self.losses:,} time(s) (first at op "
                f"{self._lost_first_op:,}: {self._lost_why}); training went on without changing "
                f"clocks (at the defaults: a helper that stops or loses a client resets its GPU; "
                f"one killed with SIGKILL cannot) and reconnected "
                f"{self.reconnects:,} time(s), trying again with backoff "
                f"({RECONNECT_RETRY_S:g} s doubling to {BUSY_RETRY_MAX_S:g} s); "
                f"{self.skipped_disconnected:,} switch(es) skipped while disconnected; "
                f"{state} at the end")

    def _shutdown_socket(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._rf.close()
        with contextlib.suppress(OSError):
            self.sock.close()

    def emergency_close(self, timeout_s: float = 5.0) -> None:
        """Close from any thread: the helper resets this client's GPUs when the connection
        drops, so shutting the socket down is the restore (no lock needed)."""
        if self._closed or not self.in_owner_process:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        if self.current != AUTO:
            self.switches.append(SwitchRecord(time.monotonic() - self._t0, AUTO, self.n_ops))
        self.current = AUTO
        guard().unregister(self)

    def close(self) -> None:
        if self._closed or not self.in_owner_process:
            return
        for note in (self.rate_limit_note(), self.busy_note(), self.reconnect_note()):
            if note and note not in self.notes:
                self.notes.append(note)
        try:
            if self.current != AUTO and not self._down:
                with contextlib.suppress(ChannelClosed, JouleboundError, _Lost):
                    self._request({"op": "release", "gpu": self.uuid})
                self.switches.append(SwitchRecord(time.monotonic() - self._t0, AUTO, self.n_ops))
                self.current = AUTO
        finally:
            self._closed = True
            self._shutdown_socket()
            guard().unregister(self)


class _Deferred(Exception):
    """A switch the helper's rate limit deferred."""


class _Skipped(Exception):
    """A switch skipped: another owner holds the GPU."""


class _Lost(Exception):
    """The helper connection is gone (``doc``: what the helper said, if anything)."""

    def __init__(self, doc: dict[str, Any]) -> None:
        super().__init__(str(doc.get("error")))
        self.code = doc.get("code")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="joulebound privileged clock helper")
    ap.add_argument("--socket", default="/run/joulebound/clocks.sock")
    ap.add_argument("--group", default=None, help="group allowed to connect")
    ap.add_argument("--mode", default="660", help="socket permissions (octal)")
    ap.add_argument("--burst", type=int, default=50)
    ap.add_argument("--min-interval", type=float, default=0.005)
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--max-clients", type=int, default=256)
    ap.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT_S)
    ap.add_argument("--request-rate", type=float, default=REQUEST_RATE)
    a = ap.parse_args(argv)
    try:
        h = ClockHelper(a.socket, mode=a.mode, group=a.group, burst=a.burst,
                        min_interval_s=a.min_interval, insecure=a.insecure,
                        max_clients=a.max_clients, idle_timeout_s=a.idle_timeout,
                        request_rate=a.request_rate)
        h.serve_forever(on_ready=lambda h: log.warning("clock helper listening on %s; %s",
                                                       h.path, h.stop_help()))
    except JouleboundError as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()

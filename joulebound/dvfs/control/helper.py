"""Privileged clock helper: training never needs root.

A small daemon, started once with privileges (root or CAP_SYS_ADMIN), owns GPU clock control.
Training processes ask it for switches over a Unix-domain socket:

* **who may connect** is decided by the socket file's permissions (``mode``, default 0660, and
  ``group``): only users in that group can open it;
* **every request is validated** against the device's supported clocks (read from NVML:
  ``nvmlDeviceGetSupportedMemoryClocks`` / ``nvmlDeviceGetSupportedGraphicsClocks``);
* **rate-limited** per client (token bucket: ``burst`` switches, refilled one per
  ``min_interval_s``); requests over the limit are refused, not queued;
* a GPU is **owned** by the client that first locked it; others get "busy";
* **when the client disconnects or dies** (EOF on the socket, also after SIGKILL, since the kernel
  closes its socket) the helper resets the clocks of every GPU that client had locked; on SIGTERM
  or SIGINT the helper resets all GPUs it touched and exits.

Protocol: one JSON object per line, one reply per request::

    {"op": "hello"}                                  -> {"ok": true, "gpus": {...supported...}}
    {"op": "set", "gpu": 0, "core": 1410, "mem": 1593}   (null = leave to the governor)
    {"op": "reset", "gpu": 0}
    replies: {"ok": true} | {"ok": false, "error": "..."}

Run: ``sudo joulebound clock-helper --socket /run/joulebound/clocks.sock --group users``
(or ``python -m joulebound.dvfs.control.helper ...``). Client side: :class:`HelperActuator`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import socketserver
import stat
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from ...clocks import AUTO, ClockConfig
from ...errors import JouleboundError
from .actuators import (
    PERMISSION_HELP,
    Actuator,
    _has_cap_sys_admin,
    _is_not_supported,
    load_nvml,
    reset_locks,
)


class _Bucket:
    """Token bucket: ``burst`` tokens, one more every ``interval_s`` seconds."""

    def __init__(self, burst: int, interval_s: float) -> None:
        self.burst = max(1, burst)
        self.interval = max(0.0, interval_s)
        self.tokens = float(self.burst)
        self.t = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        if self.interval > 0:
            self.tokens = min(self.burst, self.tokens + (now - self.t) / self.interval)
        else:
            self.tokens = self.burst
        self.t = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class ClockHelper:
    """The helper daemon's state and socket server.

    Args:
        socket_path: where to create the Unix socket (its directory must exist).
        nvml: NVML module (default ``pynvml``; tests pass :class:`FakeNvml`).
        mode: socket file permissions (who may connect).
        group: group name or gid to own the socket (``None``: the helper's group).
        burst / min_interval_s: rate limit per client.
        check_privileges: refuse to start without root / CAP_SYS_ADMIN.
    """

    def __init__(self, socket_path: str | Path, nvml: Any = None, mode: int = 0o660,
                 group: str | int | None = None, burst: int = 50, min_interval_s: float = 0.005,
                 check_privileges: bool = True) -> None:
        if check_privileges and not _has_cap_sys_admin():
            raise JouleboundError("the clock helper must start with root or CAP_SYS_ADMIN "
                                  "(e.g. `sudo joulebound clock-helper ...`)")
        self.nvml = load_nvml(nvml)
        self.path = Path(socket_path)
        self.mode = mode
        self.group = group
        self.burst = burst
        self.min_interval_s = min_interval_s
        self.n_gpus = int(self.nvml.nvmlDeviceGetCount())
        self._supported: dict[int, dict[int, list[int]]] = {}
        self._owner: dict[int, int] = {}          # gpu -> client id
        self._touched: set[int] = set()
        self._mu = threading.Lock()
        self._next_client = 0
        self.resets = 0
        self.log: list[dict[str, Any]] = []
        self._server: socketserver.ThreadingUnixStreamServer | None = None
        self._thread: threading.Thread | None = None

    # -- clocks -----------------------------------------------------------------------------
    def supported(self, gpu: int) -> dict[int, list[int]]:
        """Memory MHz -> supported core MHz of ``gpu`` (cached)."""
        if gpu not in self._supported:
            h = self.nvml.nvmlDeviceGetHandleByIndex(gpu)
            table = {}
            for m in self.nvml.nvmlDeviceGetSupportedMemoryClocks(h):
                table[int(m)] = [int(c) for c in
                                 self.nvml.nvmlDeviceGetSupportedGraphicsClocks(h, m)]
            self._supported[gpu] = table
        return self._supported[gpu]

    def validate(self, gpu: Any, core: Any, mem: Any) -> ClockConfig:
        if not isinstance(gpu, int) or not 0 <= gpu < self.n_gpus:
            raise ValueError(f"gpu must be an index 0..{self.n_gpus - 1}, got {gpu!r}")
        for name, v in (("core", core), ("mem", mem)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise ValueError(f"{name} must be a positive integer MHz or null, got {v!r}")
        table = self.supported(gpu)
        if mem is not None and mem not in table:
            raise ValueError(f"memory clock {mem} MHz is not supported by GPU {gpu} "
                             f"(supported: {sorted(table, reverse=True)})")
        if core is not None:
            mems = [mem] if mem is not None else list(table)
            if not any(core in table[m] for m in mems):
                ok = sorted({c for m in mems for c in table[m]}, reverse=True)
                raise ValueError(f"core clock {core} MHz is not supported by GPU {gpu}"
                                 f"{' at memory ' + str(mem) + ' MHz' if mem else ''} "
                                 f"(supported: {ok[:8]}{' ...' if len(ok) > 8 else ''})")
        return ClockConfig(core, mem)

    def _set(self, gpu: int, cfg: ClockConfig) -> bool:
        """Lock ``cfg`` on ``gpu``; returns False when the memory clock could not be locked."""
        nv = self.nvml
        h = nv.nvmlDeviceGetHandleByIndex(gpu)
        self._touched.add(gpu)
        if cfg.core_mhz is None:
            nv.nvmlDeviceResetGpuLockedClocks(h)
        else:
            nv.nvmlDeviceSetGpuLockedClocks(h, cfg.core_mhz, cfg.core_mhz)
        if cfg.mem_mhz is None:
            try:
                nv.nvmlDeviceResetMemoryLockedClocks(h)
            except Exception:  # noqa: BLE001 - not supported before Ampere
                pass
        else:
            try:
                nv.nvmlDeviceSetMemoryLockedClocks(h, cfg.mem_mhz, cfg.mem_mhz)
            except Exception as exc:  # noqa: BLE001
                if not _is_not_supported(nv, exc):
                    raise
                return False     # pre-Ampere: core clock only
        return True

    def reset_gpu(self, gpu: int) -> None:
        """Restore default clocks of ``gpu`` (best effort, never raises)."""
        nv = self.nvml
        try:
            h = nv.nvmlDeviceGetHandleByIndex(gpu)
        except Exception:  # noqa: BLE001
            return
        reset_locks(nv, h)
        self.resets += 1

    def reset_all(self) -> None:
        for g in sorted(self._touched):
            self.reset_gpu(g)
        with self._mu:
            self._owner.clear()

    # -- requests ---------------------------------------------------------------------------
    def handle(self, client: int, bucket: _Bucket, req: Any) -> dict[str, Any]:
        """Answer one request from ``client``."""
        if not isinstance(req, dict) or "op" not in req:
            return {"ok": False, "error": "request must be a JSON object with an 'op' field"}
        op = req["op"]
        if op == "hello":
            return {"ok": True, "gpus": {str(g): {str(m): cs for m, cs in
                                                  self.supported(g).items()}
                                         for g in range(self.n_gpus)}}
        if op not in ("set", "reset"):
            return {"ok": False, "error": f"unknown op {op!r} (hello, set, reset)"}
        gpu = req.get("gpu", 0)
        try:
            cfg = self.validate(gpu, req.get("core"), req.get("mem")) if op == "set" else AUTO
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        if not isinstance(gpu, int) or not 0 <= gpu < self.n_gpus:
            return {"ok": False, "error": f"gpu must be an index 0..{self.n_gpus - 1}"}
        with self._mu:
            owner = self._owner.get(gpu)
            if owner is not None and owner != client:
                return {"ok": False, "error": f"GPU {gpu} is in use by another client"}
            if not bucket.take():
                return {"ok": False, "error": f"rate limited: at most {self.burst} switches in "
                                              f"a burst, then one per {self.min_interval_s} s"}
            try:
                if cfg.is_auto:
                    self.reset_gpu(gpu)
                    self._owner.pop(gpu, None)
                else:
                    mem_ok = self._set(gpu, cfg)
                    self._owner[gpu] = client
                    if not mem_ok:
                        self.log.append({"t": time.time(), "client": client, "gpu": gpu,
                                         "config": cfg.label, "note": "memory lock unsupported"})
                        return {"ok": True, "memory_locked": False}
            except Exception as exc:  # noqa: BLE001 - NVML errors go back to the client
                return {"ok": False, "error": f"NVML refused: {exc}"}
            self.log.append({"t": time.time(), "client": client, "gpu": gpu,
                             "config": cfg.label})
        return {"ok": True}

    def client_gone(self, client: int) -> None:
        """Reset every GPU the client had locked."""
        with self._mu:
            gpus = [g for g, c in self._owner.items() if c == client]
            for g in gpus:
                self.reset_gpu(g)
                del self._owner[g]

    # -- server -----------------------------------------------------------------------------
    def _make_server(self) -> socketserver.ThreadingUnixStreamServer:
        helper = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                with helper._mu:
                    client = helper._next_client
                    helper._next_client += 1
                bucket = _Bucket(helper.burst, helper.min_interval_s)
                try:
                    for line in self.rfile:
                        try:
                            req = json.loads(line)
                        except json.JSONDecodeError:
                            resp = {"ok": False, "error": "not JSON"}
                        else:
                            resp = helper.handle(client, bucket, req)
                        self.wfile.write((json.dumps(resp) + "\n").encode())
                        self.wfile.flush()
                except (ConnectionError, OSError):
                    pass
                finally:
                    helper.client_gone(client)

        if self.path.exists() or self.path.is_symlink():
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                self.path.unlink()
            else:
                raise JouleboundError(f"{self.path} exists and is not a socket; choose another "
                                      "--socket path")
        server = socketserver.ThreadingUnixStreamServer(str(self.path), Handler)
        server.daemon_threads = True
        os.chmod(self.path, self.mode)
        if self.group is not None:
            import grp

            gid = self.group if isinstance(self.group, int) else grp.getgrnam(self.group).gr_gid
            os.chown(self.path, -1, gid)
        return server

    def start(self) -> ClockHelper:
        """Serve in a background thread (tests, embedding)."""
        self._server = self._make_server()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="joulebound-clock-helper")
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until SIGTERM / SIGINT; resets every touched GPU on the way out."""
        self._server = self._make_server()

        def stop(signum: int, frame: Any) -> None:
            threading.Thread(target=self._server.shutdown, daemon=True).start()  # type: ignore[union-attr]

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            self._server.serve_forever()
        finally:
            self.close()

    def close(self) -> None:
        if self._server is not None:
            if self._thread is not None:
                self._server.shutdown()
                self._thread.join()
                self._thread = None
            self._server.server_close()
            self._server = None
        self.reset_all()
        try:
            self.path.unlink()
        except OSError:
            pass


class HelperActuator(Actuator):
    """Actuator that asks the clock helper over its Unix socket (no privileges needed)."""

    name = "helper"

    def __init__(self, socket_path: str | Path, gpu: int = 0, timeout_s: float = 5.0) -> None:
        super().__init__()
        self.gpu = gpu
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        try:
            self.sock.connect(str(socket_path))
        except PermissionError as exc:
            raise JouleboundError(f"{socket_path}: permission denied; ask the admin to add you "
                                  "to the helper socket's group") from exc
        except OSError as exc:
            raise JouleboundError(f"cannot reach the clock helper at {socket_path} ({exc}); "
                                  f"start it first. {PERMISSION_HELP}") from exc
        self._rf = self.sock.makefile("r", encoding="utf-8")
        self.hello = self._request({"op": "hello"})
        # forked children (DataLoader workers) must not keep the connection open: the helper
        # resets the clocks when the connection closes, i.e. when this process dies
        ref = weakref.ref(self)

        def close_in_child() -> None:
            obj = ref()
            if obj is not None:
                obj._rf.close()
                obj.sock.close()
                obj._closed = True

        os.register_at_fork(after_in_child=close_in_child)

    def _request(self, req: dict[str, Any]) -> dict[str, Any]:
        self.sock.sendall((json.dumps(req) + "\n").encode())
        line = self._rf.readline()
        if not line:
            raise JouleboundError("the clock helper closed the connection")
        resp = json.loads(line)
        if not resp.get("ok"):
            raise JouleboundError(f"clock helper refused {req}: {resp.get('error')}")
        return resp

    def _apply(self, config: ClockConfig) -> None:
        if config.is_auto:
            self._request({"op": "reset", "gpu": self.gpu})
        else:
            self._request({"op": "set", "gpu": self.gpu, "core": config.core_mhz,
                           "mem": config.mem_mhz})

    def close(self) -> None:
        if self._closed:
            return
        try:
            super().close()
        finally:
            self._rf.close()
            self.sock.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="joulebound privileged clock helper")
    ap.add_argument("--socket", default="/run/joulebound/clocks.sock")
    ap.add_argument("--group", default=None, help="group allowed to connect")
    ap.add_argument("--mode", default="660", help="socket permissions (octal)")
    ap.add_argument("--burst", type=int, default=50)
    ap.add_argument("--min-interval", type=float, default=0.005)
    a = ap.parse_args(argv)
    ClockHelper(a.socket, mode=int(a.mode, 8), group=a.group, burst=a.burst,
                min_interval_s=a.min_interval).serve_forever()


if __name__ == "__main__":
    main()

"""SQLite store of measurement runs, windows and power samples (WAL mode).

Tables:

- ``runs(run_id, started_at, ended_at, status, command, exit_code, backend, provenance, rank, host,
  devices_json, notes_json, meta_json)`` — one row per meter (per rank);
- ``windows(id, run_id, name, rank, host, start_s, end_s, duration_s, energy_j, cpu_energy_j,
  provenance, flags_json, devices_json)`` — committed as each window ends, so a crash loses at most
  the windows still open;
- ``samples(run_id, t_s, uuid, kind, power_w, energy_j)`` — the sampler's series, committed about
  every second.

Times are seconds since the Unix epoch; energy J; power W. The same file may hold other helpers'
tables (e.g. ``sweep_results``). Several processes may write one file (WAL + busy timeout).

**Lost runs.** Each run records its owner process in ``meta_json["owner"]`` (``pid``, its start
time ``pid_start`` in clock ticks since boot, its PID namespace ``pid_ns``, the machine's
``boot_id`` from ``/proc/sys/kernel/random/boot_id``, ``host``). A run still ``running`` whose
owner on this host is gone (no such process, another process under that pid, or the machine
rebooted since) was killed without closing it (SIGKILL, a crash, power loss): every writable open
of the store marks it ``lost`` (``ended_at`` = its last sample; its samples and windows are
kept) and a read-only open reports it ``lost`` without writing. Runs of other hosts or PID
namespaces are left alone (their owners cannot be checked from here). A run marked lost whose
owner was in fact alive still ends normally: its close writes its real status.

Opening, integrity and versions are :mod:`joulebound.core.sqlitedb`'s, shared with the sweep store:
every open checks the header and the schema, and runs ``PRAGMA quick_check`` (every page) on a file
up to ``FULL_CHECK_MAX_BYTES`` (64 MiB); a larger one is checked page by page on demand
(:meth:`Store.check_integrity`, ``joulebound runs DB --check``), since that reads the whole file.
A damaged file is refused with a message (never written into, never a raw sqlite traceback). The schema version (:data:`SCHEMA_VERSION`) is recorded in the
file's ``joulebound_schema`` table as component ``energy`` (and, for older releases, as ``PRAGMA
user_version``); a file from a newer joulebound is refused, an unversioned one from before
versioning is stamped when it is opened for writing.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from joulebound.core import sqlitedb
from joulebound.core.errors import JouleboundError
from joulebound.energy.results import DeviceEnergy, WindowResult

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, started_at REAL, ended_at REAL, status TEXT, command TEXT,
  exit_code INTEGER, backend TEXT, provenance TEXT, rank INTEGER, host TEXT,
  devices_json TEXT, notes_json TEXT, meta_json TEXT);
CREATE TABLE IF NOT EXISTS windows (
  id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, name TEXT, rank INTEGER, host TEXT,
  start_s REAL, end_s REAL, duration_s REAL, energy_j REAL, cpu_energy_j REAL, provenance TEXT,
  flags_json TEXT, devices_json TEXT);
CREATE INDEX IF NOT EXISTS windows_run ON windows(run_id);
CREATE TABLE IF NOT EXISTS samples (
  run_id TEXT, t_s REAL, uuid TEXT, kind TEXT, power_w REAL, energy_j REAL);
CREATE INDEX IF NOT EXISTS samples_run ON samples(run_id, t_s);
"""
TABLES = ("runs", "windows", "samples")
#: environment variable naming the default store of ``measure`` and ``runs`` (else ``runs.db`` in
#: the current folder)
DB_ENV = "JOULEBOUND_DB"


def default_store_path() -> str:
    """The store ``joulebound measure`` records into and ``joulebound runs`` lists when no file
    is given: ``$JOULEBOUND_DB``, else ``runs.db`` in the current folder."""
    return os.environ.get(DB_ENV) or "runs.db"
#: this store's name in the file's schema table (:mod:`joulebound.core.sqlitedb`)
COMPONENT = "energy"
#: schema version of the tables above (also written as ``PRAGMA user_version``)
SCHEMA_VERSION = 1


def _boot_id() -> str | None:
    """This boot of the machine (``/proc/sys/kernel/random/boot_id``; ``None`` off Linux)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def pid_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat`` field 22);
    ``None`` when there is no such process or no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _pid_ns() -> str | None:
    """This process's PID namespace (``/proc/self/ns/pid``), ``None`` where unknown: a pid means
    something only inside its namespace (containers sharing a host name)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def owner_record() -> dict[str, Any]:
    """This process as the owner of a run: ``pid``, ``pid_start``, ``pid_ns``, ``boot_id``,
    ``host``."""
    pid = os.getpid()
    return {"pid": pid, "pid_start": pid_start(pid), "pid_ns": _pid_ns(), "boot_id": _boot_id(),
            "host": socket.gethostname()}


def owner_gone(owner: Any, host: str | None = None, boot_id: str | None = None) -> bool:
    """True when ``owner`` (an :func:`owner_record`) is certainly gone: it ran on this host and
    the machine rebooted since, or its pid is free or taken by a later process. False when it
    may be alive or cannot be checked (another host, no ``/proc``, no owner recorded)."""
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int):
        return False
    host = socket.gethostname() if host is None else host
    if owner.get("host") != host:
        return False
    boot = _boot_id() if boot_id is None else boot_id
    if owner.get("boot_id") and boot and owner["boot_id"] != boot:
        return True
    pid = owner["pid"]
    if pid <= 0 or owner.get("pid_ns") != _pid_ns():    # another container's pid: unknowable
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass                     # alive, another user's
    start = pid_start(pid)
    return start is not None and owner.get("pid_start") is not None and \
        start != owner["pid_start"]


def _number(v: Any, what: str, optional: bool = False) -> float | None:
    """``v`` (a stored number) as a float; ``None`` allowed when ``optional``.

    Raises:
        ValueError: ``v`` is text, a blob or NULL where a number must be (``what`` names it).
    """
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{what} is {'NULL' if v is None else repr(v)[:40]}, not a number")
    return float(v)


def _json(v: Any, what: str, kind: type) -> Any:
    """``v`` (a JSON text or NULL) parsed, of type ``kind``; NULL reads as an empty one."""
    if v is None:
        return kind()
    if not isinstance(v, str):
        raise ValueError(f"{what} is {v!r}, not JSON text")
    try:
        doc = json.loads(v)
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON ({exc})") from None
    if not isinstance(doc, kind):
        raise ValueError(f"{what} is a JSON {type(doc).__name__}, not a {kind.__name__}")
    return doc


def run_row_problem(r: dict[str, Any]) -> str | None:
    """What is wrong with a ``runs`` row (a dict of its columns), in words; ``None`` when it can
    be read: ``run_id`` text, times numbers (or NULL), text columns text (or NULL), integers
    integers (or NULL), ``notes_json`` a JSON list, ``devices_json`` a list, ``meta_json`` an
    object."""
    try:
        if not isinstance(r.get("run_id"), str) or not r["run_id"]:
            raise ValueError(f"run_id is {r.get('run_id')!r}, not text")
        for k in ("started_at", "ended_at"):
            _number(r.get(k), k, optional=True)
        for k in ("status", "command", "backend", "provenance", "host"):
            if r.get(k) is not None and not isinstance(r[k], str):
                raise ValueError(f"{k} is {r[k]!r}, not text")
        for k in ("exit_code", "rank"):
            if r.get(k) is not None and (isinstance(r[k], bool) or not isinstance(r[k], int)):
                raise ValueError(f"{k} is {r[k]!r}, not an integer")
        notes = _json(r.get("notes_json"), "notes_json", list)
        if not all(isinstance(n, str) for n in notes):
            raise ValueError("notes_json is not a list of texts")
        _json(r.get("devices_json"), "devices_json", list)
        _json(r.get("meta_json"), "meta_json", dict)
    except ValueError as exc:
        return str(exc)
    return None


def _window_from_row(r: tuple) -> WindowResult:
    """A :class:`WindowResult` from a ``windows`` row (the columns :meth:`Store.windows` selects).

    Raises:
        ValueError, TypeError: a field that cannot be read (the message says which).
    """
    if not isinstance(r[0], str):
        raise ValueError(f"name is {r[0]!r}, not text")
    start, end = _number(r[1], "start_s"), _number(r[2], "end_s")
    duration = _number(r[3], "duration_s")
    energy, cpu = _number(r[4], "energy_j", True), _number(r[8], "cpu_energy_j", True)
    flags = _json(r[7], "flags_json", list)
    if not all(isinstance(f, str) for f in flags):
        raise ValueError("flags_json is not a list of texts")
    devs = []
    for d in _json(r[5], "devices_json", list):
        if not isinstance(d, dict):
            raise ValueError(f"devices_json holds {d!r}, not an object")
        try:
            dev = DeviceEnergy(**d)
        except TypeError as exc:
            raise ValueError(f"devices_json: {exc}") from None
        for k in ("energy_j", "avg_power_w", "peak_power_w", "uncertainty_j"):
            _number(getattr(dev, k), f"devices_json {k}", optional=True)
        devs.append(dev)
    gpu = [d for d in devs if d.kind == "gpu"]
    unc = (float(sum(d.uncertainty_j or 0.0 for d in gpu))
           if energy is not None and gpu and any(d.uncertainty_j is not None for d in gpu)
           else None)
    # the GPU energy's label; none without a GPU (stores before 0.x wrote the backend's label,
    # e.g. "modeled" for a CPU-only run, which labeled no figure)
    prov = (r[6] if isinstance(r[6], str) and r[6] and (gpu or (energy is not None and not devs))
            else None)
    return WindowResult(name=r[0], start_s=start, end_s=end, duration_s=duration,
                        energy_j=energy, devices=devs, provenance=prov, flags=flags,
                        cpu_energy_j=cpu, rank=r[9] if isinstance(r[9], int) else 0,
                        host=r[10] if isinstance(r[10], str) else "",
                        energy_uncertainty_j=unc)


class Store:
    """A measurement database at ``path`` (created when missing).

    Thread-safe (one connection guarded by a lock); each write is its own transaction.
    """

    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        """Open (or, unless ``readonly``, create) the store; ``readonly`` never adds tables."""
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            raise JouleboundError(f"store {self.path}: folder {self.path.parent} does not exist")
        self._con = sqlitedb.connect(self.path, what="store", readonly=readonly,
                                     check_same_thread=False)
        try:
            if readonly and not set(TABLES) <= sqlitedb.table_names(self._con):
                raise JouleboundError(
                    f"store {self.path}: not a joulebound measurement store (no runs/windows/"
                    "samples tables); it is written by joulebound measure --db, "
                    "EnergyMeter(store=...) or the Hugging Face callback")
            sqlitedb.require_schema(
                sqlitedb.schema_version(self._con, COMPONENT, user_version=True),
                SCHEMA_VERSION, self.path, "store", "record to a new file (e.g. --db new.db)")
            if not readonly:
                sqlitedb.enable_writes(self._con)
                with sqlitedb.transaction(self._con):  # tables and version in one commit
                    for stmt in SCHEMA.split(";"):
                        if stmt.strip():
                            self._con.execute(stmt)
                    sqlitedb.stamp_schema(self._con, COMPONENT, SCHEMA_VERSION)
                # older joulebound releases read the version here
                self._con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.OperationalError as exc:
            self._con.close()
            raise JouleboundError(f"store {self.path}: cannot be opened for writing ({exc}); is "
                                  "the disk full or the folder read-only?") from None
        except sqlite3.DatabaseError as exc:
            self._con.close()
            raise JouleboundError(f"store {self.path}: not a usable SQLite database ({exc}); "
                                  "record to a new file instead (e.g. --db new.db)") from None
        except BaseException:
            self._con.close()
            raise
        self._lock = threading.Lock()
        self._readonly = readonly
        #: rows that could not be read (badly written by another program, edited by hand): each
        #: was skipped, and a note here says which and why (:meth:`runs`, :meth:`windows`)
        self.skipped_rows: list[str] = []
        #: run ids found lost at this open (marked so unless read-only)
        self.lost: list[str] = []
        try:
            self.lost = self.mark_lost()
        except (JouleboundError, sqlite3.Error) as exc:   # never a reason to refuse the store
            log.warning("store %s: runs whose process is gone could not be marked lost (%s)",
                        self.path, exc)

    def _lost_runs(self) -> list[str]:
        """Runs still ``running`` whose owner process is gone (see the module docs)."""
        rows = self.query("SELECT run_id, meta_json FROM runs WHERE status='running'")
        host, boot = socket.gethostname(), _boot_id()
        out = []
        for run_id, meta in rows:
            try:
                owner = json.loads(meta or "{}").get("owner")
            except (ValueError, AttributeError):
                continue
            if owner_gone(owner, host, boot):
                out.append(run_id)
        return out

    def mark_lost(self) -> list[str]:
        """Mark ``lost`` every run whose owner is gone (``ended_at``: its last sample; samples
        and windows kept); read-only: only find them. Returns their run ids."""
        lost = self._lost_runs()
        if self._readonly or not lost:
            return lost
        for run_id in lost:
            self._write("UPDATE runs SET status='lost', ended_at=(SELECT MAX(t_s) FROM samples "
                        "WHERE samples.run_id=runs.run_id) WHERE run_id=? AND status='running'",
                        (run_id,))
        return lost

    def _write(self, sql: str, rows: list[tuple] | tuple) -> None:
        with sqlitedb.transaction(self._con, self._lock):
            if isinstance(rows, list):
                self._con.executemany(sql, rows)
            else:
                self._con.execute(sql, rows)

    # -- writes -------------------------------------------------------------------------------
    def begin_run(self, run_id: str, *, backend: str = "", provenance: str | None = "", command: str = "",
                  notes: list[str] | None = None, rank: int = 0, host: str = "",
                  devices: list[dict[str, Any]] | None = None,
                  meta: dict[str, Any] | None = None) -> None:
        self._write("INSERT OR REPLACE INTO runs (run_id, started_at, status, command, backend, "
                    "provenance, rank, host, devices_json, notes_json, meta_json) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (run_id, time.time(), "running", command, backend, provenance, rank, host,
                     json.dumps(devices or []), json.dumps(notes or []),
                     json.dumps({"owner": owner_record(), **(meta or {})})))

    def end_run(self, run_id: str, *, status: str = "finished", exit_code: int | None = None,
                notes: list[str] | None = None, meta: dict[str, Any] | None = None) -> None:
        sets = ["ended_at=?", "status=?"]
        vals: list[Any] = [time.time(), status]
        if exit_code is not None:
            sets.append("exit_code=?")
            vals.append(exit_code)
        if notes is not None:
            sets.append("notes_json=?")
            vals.append(json.dumps(notes))
        if meta is not None:
            sets.append("meta_json=?")
            vals.append(json.dumps(meta))
        self._write(f"UPDATE runs SET {', '.join(sets)} WHERE run_id=?", (*vals, run_id))

    def update_meta(self, run_id: str, extra: dict[str, Any]) -> None:
        """Merge ``extra`` into the run's ``meta_json`` (keys replaced, others kept: the owner
        record stays), e.g. the training log a callback adds at train end."""
        with sqlitedb.transaction(self._con, self._lock):
            row = self._con.execute("SELECT meta_json FROM runs WHERE run_id=?",
                                    (run_id,)).fetchone()
            try:
                meta = json.loads(row[0] or "{}") if row else {}
            except ValueError:
                meta = {}
            meta = {**(meta if isinstance(meta, dict) else {}), **extra}
            self._con.execute("UPDATE runs SET meta_json=? WHERE run_id=?",
                              (json.dumps(meta), run_id))

    def add_window(self, run_id: str, w: WindowResult) -> None:
        from dataclasses import asdict

        self._write("INSERT INTO windows (run_id, name, rank, host, start_s, end_s, duration_s, "
                    "energy_j, cpu_energy_j, provenance, flags_json, devices_json) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (run_id, w.name, w.rank, w.host, w.start_s, w.end_s, w.duration_s, w.energy_j,
                     w.cpu_energy_j, w.provenance, json.dumps(w.flags),
                     json.dumps([asdict(d) for d in w.devices])))

    def add_samples(self, run_id: str,
                    rows: list[tuple[float, str, str, float | None, float | None]]) -> None:
        """Append samples ``(t_s, uuid, kind, power_w, energy_j)``."""
        if rows:
            self._write("INSERT INTO samples (run_id, t_s, uuid, kind, power_w, energy_j) "
                        "VALUES (?,?,?,?,?,?)", [(run_id, *r) for r in rows])

    # -- reads --------------------------------------------------------------------------------
    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._con.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                raise JouleboundError(f"store {self.path}: cannot be read ({exc}); it may be "
                                      "damaged: try `sqlite3 FILE .recover`") from None

    def runs(self) -> list[dict[str, Any]]:
        """The run rows, oldest first, as dicts of the ``runs`` columns. A row whose fields
        cannot be read (:func:`run_row_problem`) is skipped with a note in :attr:`skipped_rows`."""
        with self._lock:
            try:
                cur = self._con.execute("SELECT rowid, * FROM runs ORDER BY started_at")
                cols = [c[0] for c in cur.description]
                rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
            except sqlite3.DatabaseError as exc:
                raise JouleboundError(f"store {self.path}: cannot be read ({exc}); it may be "
                                      "damaged: try `sqlite3 FILE .recover`") from None
        out = []
        for r in rows:
            rowid = r.pop("rowid")
            why = run_row_problem(r)
            if why is None:
                out.append(r)
            else:
                self._skip(f"run row {rowid} (run_id {str(r.get('run_id'))[:40]!r}): {why}")
        if self._readonly and self.lost:        # found at open, not written: report them so
            lost = set(self.lost)
            for r in out:
                if r["run_id"] in lost and r["status"] == "running":
                    r["status"] = "lost"
        return out

    def windows(self, run_id: str | None = None) -> list[WindowResult]:
        """Windows as :class:`~joulebound.energy.results.WindowResult` (all runs or one)."""
        sql = ("SELECT name, start_s, end_s, duration_s, energy_j, devices_json, provenance, "
               "flags_json, cpu_energy_j, rank, host, run_id, id FROM windows")
        rows = self.query(sql + (" WHERE run_id=? ORDER BY id" if run_id else " ORDER BY id"),
                          (run_id,) if run_id else ())
        out = []
        for r in rows:
            try:
                out.append(_window_from_row(r))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                self._skip(f"window row {r[12]} (run {str(r[11])[:40]!r}, window "
                           f"{str(r[0])[:40]!r}): {exc}")
        return out

    def _skip(self, what: str) -> None:
        """Note a row that was skipped (once per row)."""
        note = (f"store {self.path}: {what}; that row was skipped (it was not written by "
                "joulebound as it is now, or was changed since)")
        if note not in self.skipped_rows:
            self.skipped_rows.append(note)
            log.info("%s", note)          # callers show skipped_rows (the runs/report commands)

    def frame(self, table: str) -> pd.DataFrame:
        """One table as a pandas DataFrame."""
        import pandas as pd

        if table not in TABLES:
            raise JouleboundError(f"unknown table {table!r}; one of {', '.join(TABLES)}")
        with self._lock:
            return pd.read_sql_query(f"SELECT * FROM {table}", self._con)

    def export(self, folder: str | Path, fmt: str = "csv") -> list[Path]:
        """Write ``runs``, ``windows`` and ``samples`` to ``folder`` as CSV or Parquet files."""
        if fmt not in ("csv", "parquet"):
            raise JouleboundError(f"export format must be 'csv' or 'parquet', got {fmt!r}")
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for t in TABLES:
            df = self.frame(t)
            p = out / f"{t}.{fmt}"
            if fmt == "csv":
                df.to_csv(p, index=False)
            else:
                df.to_parquet(p, index=False)
            paths.append(p)
        return paths

    def check_integrity(self) -> None:
        """SQLite's ``quick_check`` of every page of the file (seconds for a GB store; an open
        checks every page only of small files, :func:`joulebound.core.sqlitedb.check_readable`).

        Raises:
            JouleboundError: the file is damaged (naming what SQLite found).
        """
        sqlitedb.check_integrity(self._con, self.path, "store",
                                 "record to a new file instead (e.g. --db new.db)")

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

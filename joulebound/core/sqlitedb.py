"""One SQLite helper for joulebound's stores (the measurement store and the sweep store).

Both stores may live in one file, so each keeps its schema version in a shared table,
``joulebound_schema(component, version)`` (:func:`schema_version`, :func:`stamp_schema`); a file
written by a newer joulebound is refused with a message (:func:`require_schema`) instead of being
misread or written into. Every connection is opened the same way (:func:`connect`): explicit
transactions, a busy timeout so that several processes can write one file, and a check before
anything is read or written (a file that is not SQLite, or whose schema is damaged, is refused;
a file up to :data:`FULL_CHECK_MAX_BYTES` also gets SQLite's ``quick_check`` of every page, a
larger one only on demand, :func:`check_integrity`, since that reads the whole file: seconds for a
GB store); writers then switch to WAL journaling (:func:`enable_writes`). Writes go through :func:`transaction`
(``BEGIN IMMEDIATE``: the write lock is taken up front, so concurrent writers queue instead of
failing mid-transaction).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from joulebound.core.errors import JouleboundError

log = logging.getLogger(__name__)

#: the table that records each store's schema version in a file
SCHEMA_TABLE = "joulebound_schema"
#: seconds a connection waits for another process's write lock
BUSY_TIMEOUT_S = 60.0
#: a file up to this size gets ``PRAGMA quick_check`` on every open (it reads every page: about
#: 1 s per GB when cached, far more from disk); a larger one gets the header and schema check,
#: and the full one on demand (``joulebound runs DB --check``)
FULL_CHECK_MAX_BYTES = 64 * 2**20
#: the first 16 bytes of every SQLite 3 database file
SQLITE_MAGIC = b"SQLite format 3\x00"


def check_integrity(con: sqlite3.Connection, path: str | Path, what: str = "store",
                    fix: str = "record to a new file instead (e.g. --db new.db)") -> None:
    """Refuse a damaged SQLite file (``PRAGMA quick_check``) with a message saying what to do.

    Raises:
        JouleboundError: the file is not a database or fails the check.
    """
    try:
        rows = [r[0] for r in con.execute("PRAGMA quick_check(5)").fetchall()]
    except sqlite3.DatabaseError as exc:
        raise JouleboundError(f"{what} {path}: not an SQLite database, or not a usable one "
                              f"({exc}); {fix}") from None
    if rows != ["ok"]:
        raise JouleboundError(f"{what} {path} is damaged (SQLite quick_check: "
                              f"{'; '.join(str(r) for r in rows)}); it was not written to. Keep it "
                              f"for inspection, {fix}, and try "
                              f"`sqlite3 {path} .recover` to salvage its rows")


def check_readable(con: sqlite3.Connection, path: str | Path, what: str = "store",
                   fix: str = "record to a new file instead (e.g. --db new.db)") -> None:
    """The check of every open: ``path`` is an SQLite file whose schema can be read; when it is
    at most :data:`FULL_CHECK_MAX_BYTES`, also :func:`check_integrity` (every page). A damaged
    page of a larger file is met when it is read (SQLite refuses it then: ``database disk image
    is malformed``); :func:`check_integrity` finds it up front, on demand.

    Raises:
        JouleboundError: not a database, its schema unreadable, or (small files) damaged.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        with p.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError:
        size, head = 0, SQLITE_MAGIC       # a new file (SQLite creates it), or one we cannot stat
    if size and head != SQLITE_MAGIC:
        raise JouleboundError(f"{what} {path}: not an SQLite database (its first bytes are "
                              f"{head[:16]!r}); {fix}")
    try:
        con.execute("SELECT count(*), max(length(sql)) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise JouleboundError(f"{what} {path}: not an SQLite database, or not a usable one "
                              f"({exc}); {fix}") from None
    if size <= FULL_CHECK_MAX_BYTES:
        check_integrity(con, path, what, fix)


def connect(path: str | Path, *, what: str = "store", readonly: bool = False,
            fix: str = "record to a new file instead (e.g. --db new.db)",
            check_same_thread: bool = True) -> sqlite3.Connection:
    """Open ``path`` the way every joulebound store does: explicit transactions
    (``isolation_level=None``), a busy timeout of :data:`BUSY_TIMEOUT_S`, the check of
    :func:`check_readable` (the full integrity check for files up to
    :data:`FULL_CHECK_MAX_BYTES`). Nothing is written: a writer calls :func:`enable_writes` after checking the schema version.

    Args:
        path: the SQLite file; created (empty) when missing unless ``readonly``.
        what: how messages name the file (``"store"``, ``"sweep database"``).
        readonly: open with ``mode=ro`` (nothing is created or written).
        fix: what the user should do when the file is unusable (ends the error message).
        check_same_thread: passed to :func:`sqlite3.connect` (``False`` for a connection shared
            by threads behind a lock).

    Raises:
        JouleboundError: the file cannot be opened, is not SQLite or is damaged.
    """
    try:
        if readonly:
            con = _connect_readonly(path, what, check_same_thread)
        else:
            con = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                  check_same_thread=check_same_thread)
    except sqlite3.Error as exc:
        raise JouleboundError(f"{what} {path}: cannot be opened ({exc})") from None
    try:
        check_readable(con, path, what, fix)
        con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    except BaseException:
        con.close()
        raise
    return con


def _connect_readonly(path: str | Path, what: str, check_same_thread: bool) -> sqlite3.Connection:
    """``mode=ro``; a WAL store that cannot be read so -- SQLite needs to create its ``-shm``
    file beside it, which fails on a read-only mount (``unable to open database file``) or in a
    folder the reader cannot write (someone else's results: ``readonly``) -- is opened
    ``immutable`` when it was closed cleanly (no ``-wal`` with content beside it): nobody can be
    writing a file whose folder cannot be written."""
    kw = {"uri": True, "timeout": BUSY_TIMEOUT_S, "isolation_level": None,
          "check_same_thread": check_same_thread}
    con = sqlite3.connect(f"file:{_uri_path(path)}?mode=ro", **kw)
    try:
        con.execute("PRAGMA schema_version").fetchone()
        return con
    except sqlite3.Error as exc:
        if not isinstance(exc, sqlite3.OperationalError) or _writable_place(path):
            return con   # not this case: the integrity check names the problem
        con.close()
        wal = Path(f"{path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise JouleboundError(
                f"{what} {path}: its last writes are still in {path}-wal and the folder cannot be "
                "written (a read-only mount or another user's folder), so SQLite cannot read "
                "them; copy the file and its -wal file to a writable folder and open the "
                "copy") from None
        log.info("%s %s: WAL file where nothing can be written (%s), opened immutable", what,
                 path, exc)
        return sqlite3.connect(f"file:{_uri_path(path)}?mode=ro&immutable=1", **kw)


def _writable_place(path: str | Path) -> bool:
    """Whether SQLite can create its side files for ``path``: the folder can be written and the
    file system is not mounted read-only."""
    folder = Path(path).parent
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        pass
    return os.access(folder, os.W_OK)


def _uri_path(path: str | Path) -> str:
    """``path`` for an SQLite ``file:`` URI (``?`` and ``#`` in names would end the path)."""
    from urllib.parse import quote

    return quote(str(Path(path).absolute()))


@contextlib.contextmanager
def reading(path: str | Path, what: str = "store") -> Iterator[None]:
    """Reads of ``path`` inside: a damaged page SQLite meets (``database disk image is
    malformed``: a large file is not checked page by page when it is opened, see
    :func:`check_readable`) becomes one line naming the file and what to do."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError):
            raise
        raise JouleboundError(f"{what} {path} is damaged: SQLite met a bad page while reading "
                              f"it ({exc}). `joulebound runs {path} --check` checks the whole "
                              f"file; try `sqlite3 {path} .recover` to salvage its rows") from None


def enable_writes(con: sqlite3.Connection) -> None:
    """WAL journaling (readers never block the writer; it persists in the file) with
    ``synchronous=NORMAL`` (a commit survives a crash of the process, not of the machine)."""
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")


def table_names(con: sqlite3.Connection) -> set[str]:
    """Names of the tables in the connection's main database."""
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def schema_version(con: sqlite3.Connection, component: str,
                   user_version: bool = False) -> int | None:
    """The schema version ``component`` (``"energy"``, ``"sweep"``) recorded in the file, or
    ``None`` when it never stamped one (a new file, or one written before versioning). With
    ``user_version`` the file's ``PRAGMA user_version`` counts too (how the measurement store
    recorded its version before the table existed): the larger of the two is answered."""
    found: list[int] = []
    if SCHEMA_TABLE in table_names(con):
        row = con.execute(f"SELECT version FROM {SCHEMA_TABLE} WHERE component = ?",
                          (component,)).fetchone()
        if row is not None:
            found.append(int(row[0]))
    if user_version:
        v = int(con.execute("PRAGMA user_version").fetchone()[0])
        if v:
            found.append(v)
    return max(found) if found else None


def require_schema(version: int | None, supported: int, path: str | Path, what: str,
                   fix: str) -> None:
    """Refuse a file whose schema ``version`` is newer than this joulebound reads.

    Raises:
        JouleboundError: naming both versions and what to do (``fix``).
    """
    if version is not None and version > supported:
        raise JouleboundError(f"{what} {path} was written by a newer joulebound (schema version "
                              f"{version}, this one reads up to {supported}); upgrade "
                              f"joulebound, or {fix}")


def stamp_schema(con: sqlite3.Connection, component: str, version: int) -> None:
    """Record ``component``'s schema ``version`` in the file (inside the caller's transaction
    when there is one)."""
    con.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (component TEXT PRIMARY KEY, "
                "version INTEGER NOT NULL)")
    con.execute(f"INSERT INTO {SCHEMA_TABLE} (component, version) VALUES (?, ?) "
                "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                (component, version))


@contextlib.contextmanager
def transaction(con: sqlite3.Connection,
                lock: threading.Lock | None = None) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; rolled back on any exception (the original error is
    kept even when SQLite already rolled back, e.g. on a full disk). ``lock`` serialises
    threads sharing ``con``."""
    with lock if lock is not None else contextlib.nullcontext():
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                con.execute("ROLLBACK")
            raise

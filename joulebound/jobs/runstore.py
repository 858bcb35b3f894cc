"""SQLite store of sweep results: one row per (sweep, configuration), never lost, never doubled.

Table ``sweep_results`` (the contract shared with the scaling helper, see the brief):

======================  ========================================================================
column                  meaning
======================  ========================================================================
config_id, sweep        identity; ``UNIQUE(sweep, config_id)``
arch … dtype            the shape (arch, layers, hidden, heads, ff, seq, batch, dtype)
strategy, world_size    ``single``/``ddp``/``fsdp``/``tp`` and ranks
steps                   measured optimizer steps (warm-up excluded)
status, error           ``"ok"`` or ``"failed"`` (with the error text)
time_s                  wall time of the measured steps (s), measured
energy_j                energy of the measured steps over every GPU of the job, counted once (J);
                        NULL when no sensor
energy_provenance       ``"measured"`` / ``"modeled"`` (simulated meter) / NULL
tokens                  real (non-padding) tokens processed in the measured steps, all ranks
padded_tokens           token positions processed including padding (= steps × batch × seq)
throughput_tok_s        tokens / time_s (real tokens per second)
speedup                 work-normalized speedup: throughput / throughput of the ``single`` run of
                        the same shape in the same sweep (NULL until that run exists)
peak_mem_bytes          peak memory per rank, max over ranks (kind in env_json["peak_mem_kind"])
env_json                environment: device, GPU names, driver, torch, world size, backend, ...
created_at              UTC ISO time the row was written
======================  ========================================================================

Writes are single transactions with ``INSERT … ON CONFLICT(sweep, config_id) DO UPDATE``: a sweep
killed at any point (even SIGKILL) and re-run ends with every configuration exactly once. A second
table ``sweep_plan`` remembers each sweep's planned configurations (for ``sweep status``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from joulebound.core import sqlitedb
from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.workload.grid import SweepConfig

COLUMNS: tuple[str, ...] = (
    "config_id", "sweep", "arch", "layers", "hidden", "heads", "ff", "seq", "batch", "dtype",
    "strategy", "world_size", "steps", "status", "error", "time_s", "energy_j",
    "energy_provenance", "tokens", "padded_tokens", "throughput_tok_s", "speedup",
    "peak_mem_bytes", "env_json", "created_at",
)
SHAPE_COLUMNS: tuple[str, ...] = ("arch", "layers", "hidden", "heads", "ff", "seq", "batch", "dtype",
                                  "steps")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sweep_results (
    config_id TEXT NOT NULL,
    sweep TEXT NOT NULL,
    arch TEXT, layers INTEGER, hidden INTEGER, heads INTEGER, ff INTEGER, seq INTEGER,
    batch INTEGER, dtype TEXT, strategy TEXT, world_size INTEGER, steps INTEGER,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
    error TEXT,
    time_s REAL, energy_j REAL, energy_provenance TEXT,
    tokens INTEGER, padded_tokens INTEGER, throughput_tok_s REAL, speedup REAL,
    peak_mem_bytes INTEGER, env_json TEXT, created_at TEXT,
    UNIQUE (sweep, config_id)
);
CREATE TABLE IF NOT EXISTS sweep_plan (
    sweep TEXT NOT NULL,
    config_id TEXT NOT NULL,
    position INTEGER,
    config_json TEXT NOT NULL,
    UNIQUE (sweep, config_id)
);
"""


#: this store's name in the file's schema table (:mod:`joulebound.core.sqlitedb`)
COMPONENT = "sweep"
#: schema version of the tables above
SCHEMA_VERSION = 1
_WHAT = "sweep database"
_FIX = "pass a new file name or a store written by `joulebound sweep --db`"


def _connect(path: str | Path, readonly: bool = False) -> sqlite3.Connection:
    return sqlitedb.connect(path, what=_WHAT, readonly=readonly, fix=_FIX)


def _check_version(con: sqlite3.Connection, path: str | Path) -> None:
    sqlitedb.require_schema(sqlitedb.schema_version(con, COMPONENT), SCHEMA_VERSION, path, _WHAT,
                            "record to a new file (e.g. --db new.db)")


def _table_names(path: Path) -> set[str]:
    """Names of the tables in the SQLite file ``path``, opened read-only (nothing is created);
    a file from a newer joulebound is refused.

    Raises:
        JouleboundError: the file is not a usable SQLite database, or is too new.
    """
    if Path(path).is_dir():
        raise JouleboundError(f"{path} is a folder; pass the SQLite file written by `joulebound sweep --db`")
    con = _connect(path, readonly=True)
    try:
        names = sqlitedb.table_names(con)
        _check_version(con, path)
        return names
    except sqlite3.DatabaseError as exc:  # includes OperationalError (unreadable file)
        raise JouleboundError(f"{path}: not an SQLite database ({exc}); {_FIX}") from None
    finally:
        con.close()


class SweepStore:
    """The sweep tables in one SQLite file (may be shared with the energy store's tables).

    Args:
        path: the ``.db`` file; created with its tables when missing.
        create: when False, the file must already hold the sweep tables (read-only use, e.g.
            ``sweep status``); nothing is created.
    """

    def __init__(self, path: str | Path, create: bool = True) -> None:
        self.path = Path(path)
        if not create:
            if not self.path.exists():
                raise JouleboundError(f"--db {self.path}: no such file (run `joulebound sweep --db {self.path}` first)")
            names = _table_names(self.path)
            if not {"sweep_results", "sweep_plan"} <= names:
                raise JouleboundError(f"--db {self.path}: holds no sweep tables (sweep_results, sweep_plan); "
                                      "is it a joulebound sweep database?")
            return
        if self.path.parent and not self.path.parent.exists():
            raise JouleboundError(f"--db {self.path}: folder {self.path.parent} does not exist")
        if self.path.is_dir():
            raise JouleboundError(f"--db {self.path} is a folder; pass a file name such as "
                                  f"{self.path / 'runs.db'}")
        con = _connect(self.path)
        try:
            _check_version(con, self.path)
            sqlitedb.enable_writes(con)
            with sqlitedb.transaction(con):  # tables and version in one commit
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        con.execute(stmt)
                sqlitedb.stamp_schema(con, COMPONENT, SCHEMA_VERSION)
        except sqlite3.DatabaseError as exc:
            raise JouleboundError(f"--db {self.path}: not an SQLite database ({exc}); {_FIX}") from None
        finally:
            con.close()

    # -- plan ----------------------------------------------------------------------------------
    def save_plan(self, sweep: str, configs: Iterable[SweepConfig]) -> None:
        """Remember the planned configurations of ``sweep`` (idempotent)."""
        con = _connect(self.path)
        try:
            with sqlitedb.transaction(con):
                start = con.execute("SELECT COALESCE(MAX(position), -1) + 1 FROM sweep_plan "
                                    "WHERE sweep = ?", (sweep,)).fetchone()[0]
                for i, cfg in enumerate(configs):
                    con.execute("INSERT OR IGNORE INTO sweep_plan (sweep, config_id, position, "
                                "config_json) VALUES (?, ?, ?, ?)",
                                (sweep, cfg.config_id, start + i,
                                 json.dumps(cfg.to_dict(), sort_keys=True)))
        finally:
            con.close()

    def plan(self, sweep: str) -> list[SweepConfig]:
        """The planned configurations of ``sweep`` in plan order."""
        con = _connect(self.path)
        try:
            rows = con.execute("SELECT config_json FROM sweep_plan WHERE sweep = ? ORDER BY position",
                               (sweep,)).fetchall()
        finally:
            con.close()
        return [SweepConfig.from_dict(json.loads(r[0])) for r in rows]

    # -- results ---------------------------------------------------------------------------------
    def record(self, sweep: str, cfg: SweepConfig, *, status: str, error: str | None = None,
               time_s: float | None = None, energy_j: float | None = None,
               energy_provenance: str | None = None, tokens: int | None = None,
               padded_tokens: int | None = None, peak_mem_bytes: int | None = None,
               env: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write (or overwrite) the row of ``cfg`` in one transaction; returns the row.

        Throughput is ``tokens / time_s``; the speedup is filled against the ``single`` run of the
        same shape when it exists, and a new ``single`` row fills the speedup of its multi-rank
        siblings.
        """
        if status not in ("ok", "failed"):
            raise ValueError(f"status must be 'ok' or 'failed', got {status!r}")
        thr = tokens / time_s if (status == "ok" and tokens and time_s) else None
        row: dict[str, Any] = {
            "config_id": cfg.config_id, "sweep": sweep, "arch": cfg.stored_arch, "layers": cfg.layers,
            "hidden": cfg.hidden, "heads": cfg.heads, "ff": cfg.ff, "seq": cfg.seq,
            "batch": cfg.global_batch, "dtype": cfg.dtype, "strategy": cfg.strategy,
            "world_size": cfg.world_size, "steps": cfg.steps, "status": status, "error": error,
            "time_s": time_s, "energy_j": energy_j, "energy_provenance": energy_provenance,
            "tokens": tokens, "padded_tokens": padded_tokens, "throughput_tok_s": thr,
            "speedup": None, "peak_mem_bytes": peak_mem_bytes,
            "env_json": json.dumps(env or {}, sort_keys=True, default=str),
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        shape_where = " AND ".join(f"{c} = ?" for c in SHAPE_COLUMNS)
        shape_vals = [row[c] for c in SHAPE_COLUMNS]
        con = _connect(self.path)
        try:
            with sqlitedb.transaction(con):
                if thr is not None:
                    row["speedup"] = self._speedup_against_single(con, sweep, cfg, thr,
                                                                  shape_where, shape_vals)
                cols = ", ".join(COLUMNS)
                marks = ", ".join("?" for _ in COLUMNS)
                updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS
                                    if c not in ("sweep", "config_id"))
                con.execute(f"INSERT INTO sweep_results ({cols}) VALUES ({marks}) "
                            f"ON CONFLICT (sweep, config_id) DO UPDATE SET {updates}",
                            [row[c] for c in COLUMNS])
                if cfg.strategy == "single":
                    con.execute(
                        f"UPDATE sweep_results SET speedup = CASE WHEN ? IS NULL THEN NULL "
                        f"ELSE throughput_tok_s / ? END WHERE sweep = ? AND {shape_where} "
                        "AND strategy != 'single' AND status = 'ok'",
                        [thr, thr, sweep, *shape_vals])
        finally:
            con.close()
        return row

    @staticmethod
    def _speedup_against_single(con: sqlite3.Connection, sweep: str, cfg: SweepConfig,
                                thr: float, shape_where: str, shape_vals: list[Any]
                                ) -> float | None:
        """Work-normalized speedup of a run with throughput ``thr`` against the latest ``ok``
        single-GPU run of the same shape (1 for a single run; ``None`` before one exists)."""
        if cfg.strategy == "single":
            return 1.0
        base = con.execute(
            f"SELECT throughput_tok_s FROM sweep_results WHERE sweep = ? AND {shape_where} "
            "AND strategy = 'single' AND status = 'ok' ORDER BY created_at DESC LIMIT 1",
            [sweep, *shape_vals]).fetchone()
        return thr / base[0] if base and base[0] else None

    def done_ids(self, sweep: str, include_failed: bool = True) -> set[str]:
        """Config ids of ``sweep`` that already have a row (``ok``, and ``failed`` if asked)."""
        con = _connect(self.path)
        try:
            q = "SELECT config_id FROM sweep_results WHERE sweep = ?"
            if not include_failed:
                q += " AND status = 'ok'"
            return {r[0] for r in con.execute(q, (sweep,))}
        finally:
            con.close()

    def rows(self, sweep: str | None = None) -> list[dict[str, Any]]:
        """All result rows (of one sweep when given) as dicts."""
        con = _connect(self.path)
        con.row_factory = sqlite3.Row
        try:
            if sweep is None:
                cur = con.execute("SELECT * FROM sweep_results ORDER BY sweep, created_at")
            else:
                cur = con.execute("SELECT * FROM sweep_results WHERE sweep = ? ORDER BY created_at",
                                  (sweep,))
            return [dict(r) for r in cur]
        finally:
            con.close()

    def status(self) -> list[dict[str, Any]]:
        """Per sweep: planned, ok, failed, pending counts and rows per strategy."""
        con = _connect(self.path)
        try:
            sweeps = [r[0] for r in con.execute(
                "SELECT sweep FROM sweep_plan UNION SELECT sweep FROM sweep_results ORDER BY 1")]
            out = []
            for s in sweeps:
                planned = {r[0] for r in con.execute("SELECT config_id FROM sweep_plan WHERE sweep = ?", (s,))}
                res = con.execute("SELECT config_id, status, strategy, world_size FROM sweep_results "
                                  "WHERE sweep = ?", (s,)).fetchall()
                done = {r[0] for r in res}
                by_strategy: dict[str, dict[str, int]] = {}
                for _, st, strat, w in res:
                    key = f"{strat}@{w}"
                    by_strategy.setdefault(key, {"ok": 0, "failed": 0})[st] += 1
                out.append({"sweep": s, "planned": len(planned | done),
                            "ok": sum(1 for r in res if r[1] == "ok"),
                            "failed": sum(1 for r in res if r[1] == "failed"),
                            "pending": len(planned - done), "by_strategy": by_strategy})
            return out
        finally:
            con.close()


def load_results(path: str | Path, sweep: str | None = None, ok_only: bool = False):
    """The ``sweep_results`` table as a :class:`pandas.DataFrame` (columns in :data:`COLUMNS`).

    Args:
        path: SQLite file written by ``joulebound sweep``.
        sweep: keep only this sweep's rows.
        ok_only: drop failed configurations.

    Raises:
        JouleboundError: the file does not exist, is not SQLite or holds no ``sweep_results``
            table; :class:`~joulebound.core.errors.SchemaError` when the table lacks a column.
    """
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise JouleboundError(f"{path}: no such sweep database (run `joulebound sweep --db {path}` first)")
    if "sweep_results" not in _table_names(path):
        raise JouleboundError(f"{path}: no 'sweep_results' table; is this a joulebound sweep database?")
    con = _connect(path, readonly=True)
    try:
        have = {r[1] for r in con.execute("PRAGMA table_info(sweep_results)")}
        missing = [c for c in COLUMNS if c not in have]
        if missing:
            raise SchemaError(path, f"sweep_results.{missing[0]}",
                              f"required column is missing (missing: {', '.join(missing)}); the "
                              "table must have the columns of joulebound.jobs.runstore.COLUMNS")
        q, args = "SELECT * FROM sweep_results", []
        conds = []
        if sweep is not None:
            conds.append("sweep = ?")
            args.append(sweep)
        if ok_only:
            conds.append("status = 'ok'")
        if conds:
            q += " WHERE " + " AND ".join(conds)
        df = pd.read_sql_query(q + " ORDER BY sweep, created_at, config_id", con, params=args)
    finally:
        con.close()
    return df[list(COLUMNS)]

"""Replay a recorded power/energy log as if it were live (for tests, demos, re-analysis).

Accepted logs:

- CSV or JSON-lines with columns ``t_s`` (s), ``uuid``, ``power_w`` (W) and optionally
  ``energy_j`` (cumulative J), ``kind`` (gpu/cpu/dram) and ``provenance``;
- a joulebound SQLite store (``.db``): the ``samples`` of one run (default: the latest run that has
  samples), with the run's provenance.

Provenance is whatever the log says (a ``provenance`` column or the store's run); a log without one
must be given ``provenance=`` explicitly — replay never guesses.

Time mapping: the first read at meter time ``t_start`` maps to the log's first timestamp; after that
``t_log = t_log0 + (t - t_start) * speed``. Past the end of the log the counter stops (noted).
Energy is the log's ``energy_j`` column when present (interpolated), else the trapezoid integral of
``power_w``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import ALL as PROVENANCES
from joulebound.energy.base import Backend, Channel


class ReplayBackend(Backend):
    """Replays per-device series ``{uuid: (t_s, power_w, energy_j or None)}``."""

    name = "replay"

    def __init__(self, series: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]],
                 provenance: str, kinds: dict[str, str] | None = None, speed: float = 1.0,
                 source: str = "replay", sensor_period_s: float | None = None) -> None:
        super().__init__()
        if provenance not in PROVENANCES:
            raise JouleboundError(f"replay: provenance must be one of {PROVENANCES}, "
                                  f"got {provenance!r}")
        if not series:
            raise JouleboundError(f"replay: {source} has no samples")
        if speed <= 0:
            raise JouleboundError(f"replay: speed must be > 0, got {speed}")
        self.provenance = provenance
        self.speed = float(speed)
        self._t: list[np.ndarray] = []
        self._p: list[np.ndarray] = []
        self._e: list[np.ndarray] = []
        kinds = kinds or {}
        t_first = min(float(np.min(s[0])) for s in series.values())
        for k, (uuid, (t, p, e)) in enumerate(series.items()):
            order = np.argsort(t, kind="stable")
            t, p = np.asarray(t, float)[order], np.asarray(p, float)[order]
            if e is None or np.isnan(np.asarray(e, float)).all():
                cum = np.concatenate([[0.0], np.cumsum(0.5 * (p[1:] + p[:-1]) * np.diff(t))])
            else:
                cum = np.asarray(e, float)[order]
                cum = cum - cum[0]
            self._t.append(t)
            self._p.append(p)
            self._e.append(cum)
            self.channels.append(Channel(uuid=uuid, index=k, kind=kinds.get(uuid, "gpu"),  # type: ignore[arg-type]
                                         name=uuid, source="replay",
                                         sensor_period_s=sensor_period_s))
        self.t_log0 = t_first
        self.t_end = max(float(t[-1]) for t in self._t)
        self.t_start: float | None = None
        self.notes.append(f"replaying {source} ({len(series)} device(s), "
                          f"{self.t_end - self.t_log0:.1f} s of log, provenance {provenance})")

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, provenance: str | None = None, run_id: str | None = None,
             speed: float = 1.0) -> ReplayBackend:
        """Open a CSV / JSON-lines log or a store ``.db``."""
        import pandas as pd

        path = Path(path)
        if not path.exists():
            raise JouleboundError(f"replay: {path} does not exist")
        if path.suffix in (".db", ".sqlite", ".sqlite3"):
            from joulebound.energy.store import Store

            st = Store(path, readonly=True)  # replaying never writes to the log
            if run_id is None:
                rows = st.query("SELECT run_id FROM samples GROUP BY run_id "
                                "ORDER BY MAX(t_s) DESC LIMIT 1")
                if not rows:
                    raise JouleboundError(f"replay: {path} has no samples to replay")
                run_id = rows[0][0]
            prov = st.query("SELECT provenance FROM runs WHERE run_id=?", (run_id,))
            df = pd.read_sql_query("SELECT t_s, uuid, kind, power_w, energy_j FROM samples "
                                   "WHERE run_id=?", st._con, params=(run_id,))
            st.close()
            if provenance is None and prov and prov[0][0]:
                provenance = prov[0][0]
        elif path.suffix in (".jsonl", ".ndjson"):
            df = pd.DataFrame([json.loads(x) for x in path.read_text().splitlines() if x.strip()])
        else:
            df = pd.read_csv(path)
        for col in ("t_s", "uuid", "power_w"):
            if col not in df.columns:
                raise JouleboundError(f"replay: {path}: missing column {col!r} (need t_s, uuid, "
                                      "power_w; optional energy_j, kind, provenance)")
        if provenance is None:
            if "provenance" in df.columns and df["provenance"].nunique() == 1:
                provenance = str(df["provenance"].iloc[0])
            else:
                raise JouleboundError(f"replay: {path} says nothing about provenance; add a "
                                      "'provenance' column (measured/modeled) or pass provenance=")
        series = {}
        kinds = {}
        for uuid, g in df.groupby("uuid", sort=False):
            e = g["energy_j"].to_numpy(float) if "energy_j" in g else None
            p = g["power_w"].to_numpy(float)
            if np.isnan(p).all() and e is not None:  # energy-only log: derive power
                t = g["t_s"].to_numpy(float)
                p = np.gradient(e, t) if len(t) > 1 else np.zeros_like(e)
            series[str(uuid)] = (g["t_s"].to_numpy(float), np.nan_to_num(p), e)
            if "kind" in g:
                kinds[str(uuid)] = str(g["kind"].iloc[0])
        return cls(series, provenance, kinds=kinds, speed=speed, source=str(path))

    # -- reads --------------------------------------------------------------------------------
    def _tlog(self, t: float) -> float:
        if self.t_start is None:
            self.t_start = t
        tl = self.t_log0 + (t - self.t_start) * self.speed
        if tl > self.t_end and not any("past the end" in n for n in self.notes):
            self.notes.append("replay ran past the end of the log; energy stops there")
        return min(tl, self.t_end)

    def has_counter(self, i: int) -> bool:
        return True

    def read_power_w(self, i: int, t: float) -> float | None:
        return float(np.interp(self._tlog(t), self._t[i], self._p[i]))

    def read_energy_j(self, i: int, t: float) -> float | None:
        # the log's joules happened over log seconds; reported as-is (speed only compresses time)
        return float(np.interp(self._tlog(t), self._t[i], self._e[i]))

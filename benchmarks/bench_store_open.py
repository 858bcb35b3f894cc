"""Opening a large measurement store: what every ``runs``, ``report`` and ``measure --db`` pays
before it reads or writes anything.

A synthetic store of ``JOULEBOUND_BENCH_STORE_MB`` (default 1024) MB is built once in a temporary
folder: 200 runs of ``joulebound measure`` shape (one row each, three windows each) and their
power samples (one GPU, the ``samples`` table and its index: almost all of the file), written
through :class:`joulebound.energy.store.Store`'s own schema. Then, each as a fresh process
(interpreter start and imports included) interleaved over ``JOULEBOUND_BENCH_STORE_PROCS``
(default 3) rounds: ``Store(db, readonly=True)``, ``Store(db)`` (a writer's open), and the
whole ``joulebound runs DB`` command; the page cache is warm (the file was just written or
read), as on a machine that uses its store. Issue 30 item 14: the integrity check on every
open (``PRAGMA quick_check``, which reads every page) cost 1.8-30 s on a 1.5 GB store.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.timing import fmt, spread

OPEN = ("import sys; from joulebound.energy.store import Store; "
        "Store(sys.argv[1], readonly=sys.argv[2] == 'ro').close()")
CASES = {
    "Store(db, readonly=True)": [sys.executable, "-c", OPEN, "{db}", "ro"],
    "Store(db) (a writer's open)": [sys.executable, "-c", OPEN, "{db}", "rw"],
    "joulebound runs DB": [sys.executable, "-c", "import sys; from joulebound.cli import main; "
                           "sys.exit(main(sys.argv[1:]))", "runs", "{db}"],
    "joulebound runs DB --check (every page, on demand)":
        [sys.executable, "-c", "import sys; from joulebound.cli import main; "
         "sys.exit(main(sys.argv[1:]))", "runs", "{db}", "--check"],
    "python -c 'import joulebound.energy.store' (floor)":
        [sys.executable, "-c", "import joulebound.energy.store"],
}


def build_store(db: Path, mb: int) -> tuple[int, int]:
    """A store of about ``mb`` MB at ``db`` (runs, windows, samples); returns its size in bytes
    and its number of power samples."""
    import sqlite3
    import uuid

    from joulebound.energy.store import Store

    Store(db).close()                       # schema, version stamp, WAL
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA synchronous=OFF")
    gpu = f"GPU-{uuid.UUID(int=1)}"
    per_run = max(1, mb * 1024 * 1024 // 200 // 138)   # ~138 bytes per sample row with its index
    t0 = 1.7e9
    for r in range(200):
        rid = f"run-{r:04d}-{uuid.UUID(int=r + 2).hex[:12]}"
        con.execute("BEGIN")
        con.execute("INSERT INTO runs (run_id, started_at, ended_at, status, command, exit_code, "
                    "backend, provenance, rank, host, devices_json, notes_json, meta_json) VALUES "
                    "(?, ?, ?, 'finished', 'python train.py', 0, 'nvml', 'measured', 0, 'bench', "
                    "'[]', '[]', '{}')", (rid, t0, t0 + per_run * 0.01))
        for w, name in enumerate(("train", "epoch 1", "eval")):
            con.execute("INSERT INTO windows (run_id, name, rank, host, start_s, end_s, duration_s, "
                        "energy_j, cpu_energy_j, provenance, flags_json, devices_json) VALUES "
                        "(?, ?, 0, 'bench', ?, ?, ?, ?, NULL, 'measured', '[]', '[]')",
                        (rid, name, t0 + w, t0 + w + 1, 1.0, 300.0))
        con.executemany("INSERT INTO samples (run_id, t_s, uuid, kind, power_w, energy_j) "
                        "VALUES (?, ?, ?, 'gpu', ?, ?)",
                        ((rid, t0 + i * 0.01, gpu, 300.0 + i % 7, i * 3.0) for i in range(per_run)))
        con.execute("COMMIT")
        t0 += per_run * 0.01 + 60
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return db.stat().st_size, 200 * per_run


def run() -> str:
    mb = int(os.environ.get("JOULEBOUND_BENCH_STORE_MB", 1024))
    n = int(os.environ.get("JOULEBOUND_BENCH_STORE_PROCS", 3))
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "runs.db"
        size, samples = build_store(db, mb)
        times: dict[str, list[float]] = {k: [] for k in CASES}
        for _ in range(n):
            for name, argv in CASES.items():
                w0 = time.perf_counter()
                subprocess.run([a.format(db=db) for a in argv], capture_output=True, check=True)
                times[name].append(time.perf_counter() - w0)
    lines = ["## Opening a large store (`bench_store_open`)", "",
             f"Wall time of a fresh process that opens a synthetic measurement store of "
             f"{size / 2**30:.2f} GiB (200 runs, {samples / 1e6:.1f} M power samples; page "
             f"cache warm), s: median (min–max) of {n} runs, the cases interleaved; measured. "
             "The last row is the interpreter and import floor. Issue 30 item 14: `PRAGMA "
             "quick_check` on every open read the whole file (1.8–30 s at 1.5 GB); the open now "
             "reads the header and the schema, and the full check runs on demand "
             "(`joulebound runs DB --check`, the fourth row: what every open paid before). "
             "Before (commit e77bbea, this benchmark on a 1.45 GiB store of 11.3 M samples): "
             "`Store(db, readonly=True)` 1.62 (1.16–2.11) s, `Store(db)` 1.41 (1.18–1.53) s, "
             "`joulebound runs DB` 1.59 (1.37–1.98) s, the floor 0.06 (0.05–0.09) s.", "",
             "| open | wall s |", "|---|---:|"]
    for name, ts in times.items():
        lines.append(f"| {name} | {fmt(spread(ts), '.2f')} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(run())

"""Tables of jobs in and predictions out: ``joulebound predict --jobs jobs.csv`` / ``advise --jobs``.

Input CSV: one job per row; the columns are the single-job options without the leading dashes
(``-`` or ``_`` both work): ``model`` (or ``arch``), ``preset``, ``layers``, ``hidden``, ``heads``,
``seq``, ``batch`` (per GPU), ``global_batch``, ``grad_accum``, ``ff``, ``vocab``, ``dtype``,
``recompute`` (true/false or none/selective/full), ``distributed_optimizer``,
``sequence_parallel``, ``flash_attention`` (true/false/auto), ``optimizer``, ``device``, ``gpus``,
``strategy``, ``tp``, ``pp``, ``clocks``,
``power_limit`` (W), ``interconnect``, ``inter_node``, ``gpus_per_node``, ``nics_per_node``,
``tokens``, ``name``, ``hf_config`` (a Hugging Face ``config.json`` path), ``kv_heads``,
``lora_rank``, ``lora_targets`` (``q;v``); for ``advise`` also ``deadline`` (s or 90m/12h/2d), ``max_gpus``,
``strategies`` (``ddp;fsdp``). An empty cell (or a missing column) takes the value of the command
line option. A row that is wrong gets its error in the ``error`` column; the other rows are
still predicted.

Output CSV columns (:data:`PREDICT_COLUMNS`): units s and J, every figure modeled.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.core.provenance import MODELED
from joulebound.jobs.job import JOB_FIELDS, Job, recompute_mode

_INT = {"layers", "hidden", "heads", "seq", "batch", "global_batch", "grad_accum", "ff", "vocab",
        "gpus", "tp", "pp", "gpus_per_node", "nics_per_node", "max_gpus", "kv_heads", "lora_rank"}
_FLOAT = {"power_limit_w", "tokens"}
#: the optimized stack's yes/no columns (``flash_attention`` also ``auto``)
_SWITCHES = ("distributed_optimizer", "sequence_parallel", "flash_attention")
_ALIAS = {"model": "arch", "power_limit": "power_limit_w", "per_device_train_batch_size": "batch"}
ADVISE_ONLY = ("deadline", "max_gpus", "strategies")
JOB_COLUMNS = tuple(sorted(set(JOB_FIELDS) - {"pp_stages"} | {"model", "preset", "power_limit",
                                                              "hf_config", "kv_heads",
                                                              "lora_rank", "lora_targets"}))

PREDICT_COLUMNS = ("row", "name", "error", "strategy", "gpus", "nodes", "device", "micro_batch",
                   "grad_accum", "global_batch", "tokens_per_step", "steps", "time_s", "time_lo_s",
                   "time_hi_s", "gpu_energy_j", "gpu_energy_lo_j", "gpu_energy_hi_j", "host_energy_j",
                   "host_energy_lo_j", "host_energy_hi_j",
                   "total_energy_j", "total_energy_lo_j", "total_energy_hi_j", "energy_per_token_j",
                   "step_time_s", "comm_share", "fits_memory", "memory_gib", "warnings", "provenance")


def _key(col: str) -> str:
    k = col.strip().lower().replace("-", "_").lstrip("_")
    return _ALIAS.get(k, k)


def _value(key: str, text: str, row: int) -> object:
    t = text.strip()
    try:
        if key in _INT:
            f = float(t)
            if not math.isfinite(f) or f != int(f):
                raise ValueError
            return int(f)
        if key in _FLOAT:
            return float(t)
        if key == "recompute":  # true/false (full) or a mode: none, selective, full
            return recompute_mode(t)
        if key in _SWITCHES:
            low = t.lower()
            if low in ("1", "true", "yes", "y", "on"):
                return True
            if low in ("0", "false", "no", "n", "off"):
                return False
            if key == "flash_attention" and low == "auto":
                return None
            raise ValueError
    except ValueError:
        what = "an integer" if key in _INT else "a number" if key in _FLOAT else "true/false"
        raise JouleboundError(f"row {row}: column {key!r} must be {what}, got {t!r}") from None
    return t


#: one row of a jobs table: (job or None, extra advise columns, error)
Row = tuple[Job | None, dict, str]


def read_jobs(path: str | Path, defaults: dict, advise: bool = False) -> list[Row]:
    """``[(job or None, extra advise columns, error)]`` per row of the CSV (see module docstring);
    :func:`iter_jobs` as a list."""
    return list(iter_jobs(path, defaults, advise))


def iter_jobs(path: str | Path, defaults: dict, advise: bool = False) -> Iterator[Row]:
    """``(job or None, extra advise columns, error)`` per row of the CSV (see module docstring),
    built as they are asked for: a table of any length is never held whole.

    ``defaults`` are the command-line values (Job fields, ``preset``); a row's cells override them.
    The whole file is checked here, before the first row is built (one quick pass of csv): an
    unknown column (named, with the valid ones listed), a line csv cannot read (a cell over its
    128 KiB limit: row and column named), an undecodable file or a table without rows raise
    before anything is predicted or written."""
    p = Path(path)
    if not p.is_file():
        raise JouleboundError(f"--jobs {p}: file not found (a CSV with one job per row)")
    header = None
    n = 0
    for cells in _csv_rows(p):
        if header is None:
            header = cells
            keys = [_key(h) for h in header]
            valid = (set(JOB_COLUMNS) | {"power_limit_w", "arch"}
                     | (set(ADVISE_ONLY) if advise else set()))
            bad = [h for h, k in zip(header, keys, strict=True) if k not in valid]
            if bad:
                raise JouleboundError(f"--jobs {p}: unknown column(s) {', '.join(map(repr, bad))}."
                                      + did_you_mean(_key(bad[0]), sorted(valid)))
        elif any(c.strip() for c in cells):
            n += 1
    if header is None:
        raise JouleboundError(f"--jobs {p}: empty file; the first line names the columns")
    if not n:
        raise JouleboundError(f"--jobs {p}: no job rows after the header")
    return _job_rows(p, keys, defaults)


def _csv_rows(p: Path) -> Iterator[list[str]]:
    """The rows of the CSV file ``p`` (the header first), read line by line; a line csv cannot
    read or an undecodable file raise one line naming the row (:func:`_csv_error`)."""
    try:
        fh = p.open(encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise JouleboundError(f"--jobs {p}: cannot be read ({exc})") from None
    with fh:
        lines = _Lines(fh, p)
        rd = csv.reader(lines)
        header: list[str] | None = None
        i = 0
        while True:
            try:
                cells = next(rd)
            except StopIteration:
                return
            except csv.Error as exc:
                where = None if header is None else (i + 1, header)
                raise _csv_error(p, exc, lines.last, rd.line_num, where) from None
            if header is None:
                header = cells
            else:
                i += 1
            yield cells


class _Lines:
    """The lines of an open CSV file for :func:`csv.reader`, keeping the last one read (to name
    the column of a cell csv refuses) and turning a decoding error into one line."""

    def __init__(self, fh: TextIO, path: Path) -> None:
        self.fh, self.path, self.last = fh, path, ""

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        try:
            line = next(self.fh)
        except UnicodeDecodeError as exc:
            raise JouleboundError(f"--jobs {self.path}: cannot be read ({exc})") from None
        self.last = line
        return line


def _job_rows(p: Path, keys: list[str], defaults: dict) -> Iterator[Row]:
    """The rows of :func:`iter_jobs` after its header, as jobs (or errors)."""
    from joulebound.jobs.job import job_from_options

    rows = _csv_rows(p)
    next(rows)      # the header, checked by iter_jobs
    for i, cells in enumerate(rows, start=1):
        if not any(c.strip() for c in cells):
            continue
        extra: dict = {}
        try:
            if len(cells) != len(keys):
                raise JouleboundError(f"row {i}: {len(cells)} cells for {len(keys)} columns")
            opts = dict(defaults)
            for k, c in zip(keys, cells, strict=True):
                if not c.strip():
                    continue
                if k in ADVISE_ONLY:
                    extra[k] = c.strip()
                else:
                    opts[k] = _value(k, c, i)
            opts.setdefault("name", f"row{i}")
            if not opts.get("name"):
                opts["name"] = f"row{i}"
            yield job_from_options(**opts), extra, ""
        except JouleboundError as exc:
            msg = str(exc)
            yield None, extra, msg if msg.startswith("row ") else f"row {i}: {msg}"


def _csv_error(path: Path, exc: csv.Error, line: str, line_no: int,
               where: tuple[int, list[str]] | None) -> JouleboundError:
    """The one-line error for a line csv refused (``line``, number ``line_no``; ``where`` = the
    data row's number and the header, ``None`` for the header): a cell over csv's field limit
    (:func:`csv.field_size_limit`, 128 KiB) names its column and says how long it is."""
    limit = csv.field_size_limit()
    row = f"row {where[0]}" if where else "the header"
    if "field limit" not in str(exc):
        return JouleboundError(f"--jobs {path}: {row} (line {line_no}) cannot be read as CSV "
                               f"({exc})")
    col = ""
    try:  # the same line parsed again without the limit, only to name the column
        csv.field_size_limit(max(limit, len(line) + 1))
        cells = next(csv.reader([line]), [])
    except csv.Error:
        cells = []
    finally:
        csv.field_size_limit(limit)
    long = [k for k, c in enumerate(cells) if len(c) > limit]
    if long:
        k = long[0]
        name = where[1][k] if where and k < len(where[1]) else f"#{k + 1}"
        col = f", column {name!r}"
    return JouleboundError(f"--jobs {path}: {row}{col}: a cell longer than {limit} characters "
                           "(csv's limit); a job's cells are short names and numbers — check "
                           "that the file is a jobs table with one job per line")


def prediction_row(i: int, p, error: str = "") -> dict:
    """One output row (:data:`PREDICT_COLUMNS`) of a Prediction (or of an error)."""
    if p is None:
        return {"row": i, "error": error, "provenance": MODELED}
    st = p.step
    return {"row": i, "name": p.name, "error": "", "strategy": p.strategy, "gpus": p.gpus,
            "nodes": p.nodes, "device": p.device, "micro_batch": p.micro_batch,
            "grad_accum": p.grad_accum, "global_batch": p.global_batch,
            "tokens_per_step": p.tokens_per_step, "steps": p.steps, "time_s": p.time_s,
            "time_lo_s": p.time_lo_s, "time_hi_s": p.time_hi_s, "gpu_energy_j": p.gpu_energy_j,
            "gpu_energy_lo_j": p.gpu_energy_lo_j, "gpu_energy_hi_j": p.gpu_energy_hi_j,
            "host_energy_j": p.host_energy_j, "host_energy_lo_j": p.host_energy_lo_j,
            "host_energy_hi_j": p.host_energy_hi_j, "total_energy_j": p.total_energy_j,
            "total_energy_lo_j": p.total_energy_lo_j, "total_energy_hi_j": p.total_energy_hi_j,
            "energy_per_token_j": p.energy_per_token_j, "step_time_s": st["time_s"],
            "comm_share": st["comm_s"] / st["time_s"], "fits_memory": p.fits_memory,
            "memory_gib": p.memory["total"] / 2**30, "warnings": " | ".join(p.warnings),
            "provenance": MODELED}


def write_csv(path: str | Path, rows: Iterable[dict],
              columns: tuple[str, ...] = PREDICT_COLUMNS) -> int:
    """Write ``rows`` (any iterable: consumed as it is written) as CSV to ``path``; returns how
    many. The rows go to ``PATH.part`` first, renamed to ``path`` once all are written, so an
    error part way leaves no half table under the name asked for."""
    p = Path(path)
    if p.is_dir():
        raise JouleboundError(f"-o {p} is a folder; pass a file name such as {p / 'predictions.csv'}")
    part = p.with_name(p.name + ".part")
    n = 0
    try:
        with part.open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
                n += 1
        os.replace(part, p)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise JouleboundError(f"-o {p}: cannot write ({exc.strerror})") from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return n

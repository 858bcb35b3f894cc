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
from collections.abc import Iterator
from pathlib import Path

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


def read_jobs(path: str | Path, defaults: dict, advise: bool = False
              ) -> list[tuple[Job | None, dict, str]]:
    """``[(job or None, extra advise columns, error)]`` per row of the CSV (see module docstring).

    ``defaults`` are the command-line values (Job fields, ``preset``); a row's cells override them.
    Unknown columns raise (naming them and listing the valid ones)."""
    from joulebound.jobs.job import job_from_options

    p = Path(path)
    if not p.is_file():
        raise JouleboundError(f"--jobs {p}: file not found (a CSV with one job per row)")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise JouleboundError(f"--jobs {p}: cannot be read ({exc})") from None
    lines = text.splitlines()
    rd = csv.reader(lines)
    try:
        header = next(rd)
    except StopIteration:
        raise JouleboundError(f"--jobs {p}: empty file; the first line names the columns") from None
    except csv.Error as exc:
        raise _csv_error(p, exc, lines, 1, None) from None
    keys = [_key(h) for h in header]
    valid = set(JOB_COLUMNS) | {"power_limit_w", "arch"} | (set(ADVISE_ONLY) if advise else set())
    bad = [h for h, k in zip(header, keys, strict=True) if k not in valid]
    if bad:
        raise JouleboundError(f"--jobs {p}: unknown column(s) {', '.join(map(repr, bad))}."
                              + did_you_mean(_key(bad[0]), sorted(valid)))
    out = []
    for i, cells in enumerate(_rows(rd, p, lines, header), start=1):
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
            out.append((job_from_options(**opts), extra, ""))
        except JouleboundError as exc:
            msg = str(exc)
            out.append((None, extra, msg if msg.startswith("row ") else f"row {i}: {msg}"))
    if not out:
        raise JouleboundError(f"--jobs {p}: no job rows after the header")
    return out


def _rows(rd: Iterator[list[str]], path: Path, lines: list[str], header: list[str]
          ) -> Iterator[list[str]]:
    """The data rows of ``rd`` (a csv reader past the header); a row csv cannot read raises
    one line naming the row and column (:func:`_csv_error`)."""
    i = 0
    while True:
        try:
            cells = next(rd)
        except StopIteration:
            return
        except csv.Error as exc:
            raise _csv_error(path, exc, lines, getattr(rd, "line_num", 0), (i + 1, header)) from None
        i += 1
        yield cells


def _csv_error(path: Path, exc: csv.Error, lines: list[str], line_no: int,
               where: tuple[int, list[str]] | None) -> JouleboundError:
    """The one-line error for a line csv refused (``line_no``, 1-based; ``where`` = the data
    row's number and the header, ``None`` for the header): a cell over csv's field limit
    (:func:`csv.field_size_limit`, 128 KiB) names its column and says how long it is."""
    limit = csv.field_size_limit()
    row = f"row {where[0]}" if where else "the header"
    if "field limit" not in str(exc):
        return JouleboundError(f"--jobs {path}: {row} (line {line_no}) cannot be read as CSV "
                               f"({exc})")
    col = ""
    line = lines[line_no - 1] if 0 < line_no <= len(lines) else ""
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


def write_csv(path: str | Path, rows: list[dict], columns: tuple[str, ...] = PREDICT_COLUMNS) -> None:
    p = Path(path)
    if p.is_dir():
        raise JouleboundError(f"-o {p} is a folder; pass a file name such as {p / 'predictions.csv'}")
    try:
        with p.open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    except OSError as exc:
        raise JouleboundError(f"-o {p}: cannot write ({exc.strerror})") from None

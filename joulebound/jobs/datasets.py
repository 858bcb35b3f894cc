"""Loaders that put every energy dataset into one schema (one row = one measured configuration).

Common schema (units):

==================  ==========================================================================
column              meaning
==================  ==========================================================================
dataset             source name (``mayaki_ecai2025``, ``zeus_nsdi23``, ``perseus``, ``sweep``)
family              grouping key for grouped cross-validation (same model shape family)
arch                ``bert`` | ``gpt`` | ``t5`` | ``bloom``
layers, hidden,     L, d, attention heads h, feed-forward width ff
heads, ff
params              total weights incl. embeddings (parameters)
seq, batch          S tokens per sequence; B sequences per step (global, all ranks)
dtype               training dtype (``fp32`` uses TF32 tensor cores where the GPU has them)
device              GPU name (a device-catalog name, :func:`joulebound.jobs.lawinputs.law_device`)
peak_flops          dense peak FLOP/s of one GPU as the dataset states it (or the datasheet)
mem_bw, tdp_w       DRAM bandwidth (bytes/s) and board power (W) of one GPU (datasheet)
strategy            ``single`` | ``ddp`` | ``fsdp`` | ``tp`` | ``pp``
gpus                number of GPUs of the job (N)
unit                what one row's time/energy covers: ``step`` (optimizer step) or ``iteration``
time_s              wall time of one unit (s), measured
energy_j            energy of one unit summed over all GPUs (J); NaN when no sensor
energy_provenance   ``measured`` (sensor) / NaN
speedup             work-normalized speedup vs 1 GPU when the dataset has it, else NaN
==================  ==========================================================================

Which rows are dropped (and why) is returned by each loader in ``df.attrs["dropped"]`` as
``{reason: count}`` and printed by ``joulebound fit``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.core.provenance import MEASURED
from joulebound.jobs.lawinputs import law_device, law_peak

REQUIRED = ("layers", "hidden", "heads", "seq", "batch", "device", "peak_flops", "strategy", "gpus",
            "time_s", "energy_j")
DATASETS = ("mayaki_ecai2025", "zeus_nsdi23", "perseus", "sweep")


def validate(df: pd.DataFrame, source: str = "dataset", need: tuple[str, ...] = REQUIRED) -> pd.DataFrame:
    """Check the common schema; raises :class:`SchemaError` naming the first missing column."""
    for col in need:
        if col not in df.columns:
            raise SchemaError(source, col, f"required column is missing (have: {', '.join(map(str, df.columns))})")
    for col in ("layers", "hidden", "seq", "batch", "gpus"):
        if col in df and len(df) and (pd.to_numeric(df[col], errors="coerce") <= 0).any():
            row = int(np.flatnonzero((pd.to_numeric(df[col], errors="coerce") <= 0).to_numpy())[0])
            what = "GPU count must be an integer >= 1" if col == "gpus" else "must be > 0"
            raise SchemaError(source, col, f"{what} (row {row} has {df[col].iloc[row]})")
    return df


def read_csv_checked(path: Path) -> pd.DataFrame:
    """A CSV file as a DataFrame; a file that is not UTF-8, empty, or has a row whose field count
    differs from the header's raises :class:`SchemaError` naming the file and the line (pandas
    would otherwise shift the columns silently, or print a parser traceback)."""
    import csv
    import io

    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SchemaError(path, "<file>", f"byte {exc.start} is not UTF-8; save the file as UTF-8 "
                          "CSV") from None
    except OSError as exc:
        raise JouleboundError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    width = None
    try:
        reader = csv.reader(io.StringIO(text, newline=""))
        for row in reader:
            if not row:
                continue
            if width is None:
                width = len(row)
            elif len(row) != width:
                raise SchemaError(path, f"line {reader.line_num}",
                                  f"{len(row)} fields but the header has {width}: a misaligned row "
                                  "or header (a missing or extra comma, an unquoted comma in a "
                                  "value); fix that line")
    except csv.Error as exc:
        raise SchemaError(path, "<file>", f"not valid CSV ({exc})") from None
    if width is None:
        raise SchemaError(path, "<file>", "empty file: expected a header line and data rows")
    try:
        return pd.read_csv(io.StringIO(text), index_col=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise SchemaError(path, "<file>", f"not a readable CSV ({exc})") from None


def _numeric(raw: pd.DataFrame, path: Path, col: str, *, integer: bool = False,
             missing_ok: bool = False) -> pd.Series:
    """Column ``col`` as numbers; the first cell that is not a finite number (or, with
    ``integer``, not a whole number > 0) raises :class:`SchemaError` naming its line and column.
    Blank cells are NaN when ``missing_ok``."""
    vals = pd.to_numeric(raw[col], errors="coerce")
    text = raw[col].astype(str).str.strip()
    blank = raw[col].isna() | text.eq("")
    bad = (vals.isna() & ~blank) | (vals.notna() & ~np.isfinite(vals.astype(float)))
    if not missing_ok:
        bad |= blank
    if integer:
        bad |= vals.notna() & ((vals <= 0) | (vals != vals.round()))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        cell = "" if blank.iloc[i] else raw[col].iloc[i]
        want = "a whole number > 0" if integer else "a finite number"
        raise SchemaError(path, f"line {i + 2}, column {col}",
                          f"{cell!r} is not {want}; fill in or fix the cell (or delete the row)")
    return vals


def _hw_cols(df: pd.DataFrame) -> pd.DataFrame:
    if (df["device"] == "cpu").any():  # CPU sweep runs: no GPU figures (speedup laws only)
        gpu = df[df["device"] != "cpu"].copy()
        cpu = df[df["device"] == "cpu"].copy()
        cpu["mem_bw"] = cpu["tdp_w"] = cpu["peak_flops"] = np.nan
        if len(gpu):
            gpu = _hw_cols(gpu)
        return pd.concat([gpu, cpu]).sort_index()
    hws = {d: law_device(d) for d in df["device"].unique()}
    df["mem_bw"] = df["device"].map(lambda d: float(hws[d].mem_bandwidth_bps))
    df["tdp_w"] = df["device"].map(lambda d: float(hws[d].power_limit_default_w))
    if "peak_flops" not in df:
        df["peak_flops"] = [law_peak(hws[d].peak_flops, t, hws[d].name)
                            for d, t in zip(df["device"], df["dtype"], strict=True)]
    return df


# -- Mayaki & Charpenay, ECAI 2025 -------------------------------------------------------------
MAYAKI_FILE = "SubsetDataForTransformer_energyModel.csv"
_MAYAKI_NEED = ("duration", "energy_joules", "num_layers", "d_model", "num_attention_heads",
                "seq_length", "batch_size", "params", "model", "source", "peak")


def load_mayaki(path: str | Path) -> pd.DataFrame:
    """``mayaki_ecai2025/SubsetDataForTransformer_energyModel.csv`` → common schema.

    Column mapping: ``num_layers``→layers, ``d_model``→hidden, ``num_attention_heads``→heads,
    ``seq_length``→seq, ``batch_size``→batch, ``params``→params, ``model``→arch, ``peak``
    (TFLOP/s) ×1e12→peak_flops_dataset, ``duration``→time_s, ``energy_joules``→energy_j.
    ``source`` ``a100`` → ``a100-pcie-80gb``; ``grid`` → ``rtx2080ti`` (the repository's HEF file
    and paper name the RTX 2080 Ti — an assumption, the Subset does not say). ``peak_flops`` is the
    device's peak from :func:`~joulebound.jobs.lawinputs.law_peak` (TF32 on the A100 = the dataset's
    156 TFLOP/s; the 2080 Ti's FP32 peak from the device catalog, not the Subset's 11.34), so that
    the fitted laws and ``joulebound predict`` use the same peak for a device. ff = 2048 (the parameter counts fit PyTorch's ``nn.TransformerEncoderLayer`` default
    exactly for the GPT rows: params = L·(4d² + 4105d + 2048) + 2000d + 1000).

    Units, inferred (not documented upstream): ``duration`` is seconds per training step
    (forward + backward): 6·params·B·S FLOPs / duration reaches at most 0.33 of the A100's TF32
    peak and 0.47 of the 2080 Ti's; ``energy_joules`` is the step's energy (J), so
    energy/duration ≈ 97 W (A100) and ≈ 83 W (2080 Ti) — CodeCarbon GPU+CPU+RAM.
    Per-op ``HEF_*``/``duration_*``/``FLOPs_*`` and the ``total_*_kWh`` columns are not used.

    Dropped: rows with non-positive or missing duration/energy (none in the published file);
    exact duplicate configurations are kept (they are repeats, grouped in the same family).
    """
    p = Path(path)
    if p.is_dir():
        p = p / MAYAKI_FILE
    if not p.exists():
        raise JouleboundError(f"Mayaki ECAI 2025 file not found: {p}")
    raw = read_csv_checked(p)
    for c in _MAYAKI_NEED:
        if c not in raw:
            raise SchemaError(p, c, "required column is missing from the Mayaki ECAI 2025 file")
    for c in ("model", "source"):
        empty = raw[c].isna() | raw[c].astype(str).str.strip().eq("")
        if empty.any():
            i = int(np.flatnonzero(empty.to_numpy())[0])
            raise SchemaError(p, f"line {i + 2}, column {c}", "empty cell; fill it in")
    num = {c: _numeric(raw, p, c, integer=True)
           for c in ("num_layers", "d_model", "num_attention_heads", "seq_length", "batch_size")}
    num.update({c: _numeric(raw, p, c) for c in ("params", "peak")})
    dur = _numeric(raw, p, "duration", missing_ok=True)
    en = _numeric(raw, p, "energy_joules", missing_ok=True)
    ok = (dur > 0) & (en > 0)
    raw = raw[ok]
    device = raw["source"].map({"a100": "a100-pcie-80gb", "grid": "rtx2080ti"}).fillna(raw["source"])
    known: set[str] = set()  # each device looked up once (a catalog copy each), not per row
    for i, d in zip(raw.index, device, strict=True):
        if d in known:
            continue
        try:
            law_device(str(d))
        except JouleboundError as exc:
            raise SchemaError(p, f"line {int(i) + 2}, column source", str(exc)) from None
        known.add(d)
    df = pd.DataFrame({
        "dataset": "mayaki_ecai2025",
        "arch": raw["model"].astype(str),
        "layers": num["num_layers"][ok].astype(int), "hidden": num["d_model"][ok].astype(int),
        "heads": num["num_attention_heads"][ok].astype(int), "ff": 2048,
        "params": num["params"][ok].astype(float), "seq": num["seq_length"][ok].astype(int),
        "batch": num["batch_size"][ok].astype(int), "dtype": "fp32",
        "device": device.astype(str),
        "peak_flops_dataset": num["peak"][ok].astype(float) * 1e12,
        "strategy": "single", "gpus": 1, "unit": "step",
        "time_s": dur[ok].astype(float), "energy_j": en[ok].astype(float),
        "energy_provenance": MEASURED, "speedup": np.nan,
    })
    df["family"] = "L" + df["layers"].astype(str) + "_d" + df["hidden"].astype(str)
    df = _hw_cols(df).reset_index(drop=True)
    df.attrs["dropped"] = {"non-positive or missing duration/energy": int((~ok).sum())}
    df.attrs["source"] = str(p)
    return df


# -- Zeus NSDI'23 ------------------------------------------------------------------------------
#: Published dataset sizes and the sequence lengths of the Zeus BERT recipes (assumptions: the
#: trace does not record them; see docs/scaling.md).
ZEUS_BERT = {"squad": {"samples": 88_524, "seq": 384}, "sentiment140": {"samples": 1_600_000, "seq": 128}}
ZEUS_GPUS = {"a40": ("a40", 300), "v100": ("v100-pcie", 250), "rtx6000": ("rtx6000", 260),
             "p100": ("p100-pcie", 250)}


def load_zeus(path: str | Path) -> pd.DataFrame:
    """``zeus_nsdi23/summary_power_<gpu>.csv`` BERT-base rows → common schema (one row per
    GPU × dataset × batch size at the GPU's maximum power limit).

    ``time_s`` = time_per_epoch · B / samples (seconds per step) and ``energy_j`` = average_power ·
    time_s, with ``samples`` and ``seq`` from :data:`ZEUS_BERT` (SQuAD v1.1 features at
    max_seq_length 384; Sentiment140's 1.6 M tweets at 128 — assumptions, the trace does not say).
    BERT-base: L = 12, d = 768, h = 12, ff = 3072, 110 M parameters, fp32, 1 GPU.

    Dropped: non-transformer workloads (ShuffleNet, ResNet-50, DeepSpeech2, NCF); rows below the
    GPU's maximum power limit (the energy laws have no power-limit term; the power-limit sweep is
    the DVFS side's data).
    """
    p = Path(path)
    files = sorted(p.glob("summary_power_*.csv")) if p.is_dir() else [p]
    if not files or not all(f.exists() for f in files):
        raise JouleboundError(f"no Zeus summary_power_*.csv files under {p}")
    rows, dropped = [], {"non-transformer workload": 0, "below the maximum power limit": 0}
    for f in files:
        gpu = f.stem.replace("summary_power_", "")
        raw = read_csv_checked(f)
        for c in ("dataset", "network", "batch_size", "power_limit", "time_per_epoch", "average_power"):
            if c not in raw:
                raise SchemaError(f, c, "required column is missing from the Zeus power trace")
        bert = raw["network"].str.contains("bert", case=False)
        dropped["non-transformer workload"] += int((~bert).sum())
        raw = raw[bert]
        top = raw["power_limit"] == raw["power_limit"].max()
        dropped["below the maximum power limit"] += int((~top).sum())
        for _, r in raw[top].iterrows():
            meta = ZEUS_BERT.get(r["dataset"])
            if meta is None:
                continue
            t = r["time_per_epoch"] * r["batch_size"] / meta["samples"]
            dev = ZEUS_GPUS.get(gpu, (gpu, None))[0]
            rows.append({"dataset": "zeus_nsdi23", "family": f"bert-base/{r['dataset']}/{dev}",
                         "arch": "bert", "layers": 12, "hidden": 768, "heads": 12, "ff": 3072,
                         "params": 110e6, "seq": meta["seq"], "batch": int(r["batch_size"]),
                         "dtype": "fp32", "device": dev, "strategy": "single", "gpus": 1,
                         "unit": "step", "time_s": t, "energy_j": t * r["average_power"],
                         "energy_provenance": MEASURED, "speedup": np.nan})
    df = _hw_cols(pd.DataFrame(rows))
    df.attrs["dropped"] = dropped
    df.attrs["source"] = str(p)
    return df


# -- Perseus (SOSP'24) ---------------------------------------------------------------------------
#: Published model shapes (GPT-3 paper Table 2.1; Megatron BERT; T5 and BLOOM model cards).
#: T5-3B counts encoder + decoder layers (24 + 24). Sequence lengths are the Merak defaults as far
#: as the artifact shows (assumption).
PERSEUS_MODELS = {
    "gpt3-xl": dict(arch="gpt", layers=24, hidden=2048, heads=16, ff=8192, params=1.3e9, seq=1024),
    "gpt3-2.7b": dict(arch="gpt", layers=32, hidden=2560, heads=32, ff=10240, params=2.7e9, seq=1024),
    "gpt3-6.7b": dict(arch="gpt", layers=32, hidden=4096, heads=32, ff=16384, params=6.7e9, seq=1024),
    "bert-huge-uncased": dict(arch="bert", layers=24, hidden=2048, heads=32, ff=8192, params=1.3e9, seq=512),
    "t5-3b": dict(arch="t5", layers=48, hidden=1024, heads=32, ff=16384, params=2.9e9, seq=512),
    "bloom-3b": dict(arch="bloom", layers=30, hidden=2560, heads=32, ff=10240, params=3.0e9, seq=1024),
}
_PERSEUS_GPU = {"A100": "a100-pcie-80gb", "A40": "a40"}


def load_perseus(path: str | Path) -> pd.DataFrame:
    """Perseus pipeline-parallel runs → common schema, one row per (GPU, model) at maximum clocks.

    Sources: ``derived/perseus_plan_summary.csv`` (method ``perseus``, ``plan_role ==
    warmup_maxfreq``, averaged over the warm-up plans; for the 3D GPT-3 6.7B run, which has no
    warm-up, plan index 0 — its fastest plan) and ``zeus_power_limit/<GPU>/zeus_global.csv`` rows
    with every stage at the maximum power limit. ``time_s`` is one iteration (s), ``energy_j`` the
    iteration energy summed over all GPUs (J); batch = microbatch size × microbatches × dp;
    gpus = dp·pp·tp; strategy ``pp`` (``tp`` dominates nothing here: the only tp>1 run is 3D and is
    labeled ``pp``).

    Dropped: Wide-ResNet (not a transformer); EnvPipe rows and Perseus plans below maximum clocks
    (the energy laws have no clock term); power-limit rows below the maximum limit.
    """
    p = Path(path)
    summ = p / "derived" / "perseus_plan_summary.csv"
    if not summ.exists():
        raise JouleboundError(f"Perseus plan summary not found: {summ}")
    raw = read_csv_checked(summ)
    need = ("method", "gpu", "model", "dp", "pp", "tp", "microbatch_size", "num_microbatches",
            "plan_index", "plan_role", "iter_time_s", "iter_energy_j")
    for c in need:
        if c not in raw:
            raise SchemaError(summ, c, "required column is missing from the Perseus plan summary")
    dropped = {"not a transformer (wide-resnet)": int((~raw["model"].isin(PERSEUS_MODELS)).sum())}
    raw = raw[raw["model"].isin(PERSEUS_MODELS)]
    keep = (raw["method"] == "perseus") & ((raw["plan_role"] == "warmup_maxfreq")
                                           | ((raw["model"] == "gpt3-6.7b") & (raw["plan_index"] == 0)))
    dropped["EnvPipe rows and plans below maximum clocks"] = int((~keep).sum())
    sel = raw[keep]
    g = sel.groupby(["gpu", "model", "dp", "pp", "tp", "microbatch_size", "num_microbatches"],
                    as_index=False)[["iter_time_s", "iter_energy_j"]].mean()
    g["origin"] = "plan_summary"
    frames = [g]
    for gpu in ("A100", "A40"):
        f = p / "zeus_power_limit" / gpu / "zeus_global.csv"
        if not f.exists():
            continue
        z = read_csv_checked(f)
        lim = [c for c in z.columns if c.startswith("power_limit_")]
        zmax = z[lim].replace(0.0, np.nan).max(axis=1)
        top = (z[lim].replace(0.0, np.nan).min(axis=1) == zmax) & (zmax == zmax.max())
        dropped["power-limit rows below the maximum limit"] = dropped.get(
            "power-limit rows below the maximum limit", 0) + int((~top).sum())
        z = z[top & z["model_name"].isin(PERSEUS_MODELS)]
        frames.append(pd.DataFrame({"gpu": gpu, "model": z["model_name"], "dp": z["dp"], "pp": z["pp"],
                                    "tp": z["tp"], "microbatch_size": z["microbatch_size"],
                                    "num_microbatches": z["num_microbatches"], "iter_time_s": z["time"],
                                    "iter_energy_j": z["energy"], "origin": "zeus_power_limit"}))
    allr = pd.concat(frames, ignore_index=True)
    rows = []
    for _, r in allr.iterrows():
        m = PERSEUS_MODELS[r["model"]]
        dev = _PERSEUS_GPU[r["gpu"]]
        rows.append({"dataset": "perseus", "family": r["model"], **m,
                     "batch": int(r["microbatch_size"] * r["num_microbatches"] * r["dp"]),
                     "dtype": "fp16", "device": dev, "strategy": "pp",
                     "gpus": int(r["dp"] * r["pp"] * r["tp"]), "unit": "iteration",
                     "time_s": float(r["iter_time_s"]), "energy_j": float(r["iter_energy_j"]),
                     "energy_provenance": MEASURED, "speedup": np.nan, "origin": r["origin"]})
    df = _hw_cols(pd.DataFrame(rows))
    df.attrs["dropped"] = dropped
    df.attrs["source"] = str(p)
    return df


# -- the project's sweep store ------------------------------------------------------------------
def load_sweep(path: str | Path, device: str | None = None) -> pd.DataFrame:
    """A sweep store (SQLite ``runs.db``, table ``sweep_results``) → common schema.

    ``world_size``→gpus; ``time_s`` is the measured steps' wall time and ``steps`` their number,
    so ``time_s``/``energy_j`` here are **per step** (divided by ``steps``);
    ``speedup`` is the sweep's work-normalized speedup. ``device`` is the ``device`` argument when
    given, else ``env_json["gpu"]`` (the CUDA product name, resolved by the device catalog), else
    ``cpu`` when ``env_json["device_type"] == "cpu"`` (CPU/gloo runs: no GPU peak, so only the
    speedup laws apply); a row naming none of these raises.

    Dropped: rows with status other than ``ok`` (failed runs) and rows with no time.
    """
    from joulebound.jobs.runstore import load_results

    p = Path(path)
    if not p.exists():
        raise JouleboundError(f"sweep store not found: {p}")
    raw = load_results(p)  # every column of sweep_results, or a SchemaError naming the missing one
    ok = (raw["status"] == "ok") & raw["time_s"].notna() & (pd.to_numeric(raw["time_s"], errors="coerce") > 0)
    dropped = {"status not ok or no time": int((~ok).sum())}
    raw = raw[ok].copy()
    steps = pd.to_numeric(raw["steps"], errors="coerce").fillna(1.0).clip(lower=1.0)
    import json

    devs = []
    for _, r in raw.iterrows():
        dev = device
        if dev is None and isinstance(r.get("env_json"), str):
            try:
                env = json.loads(r["env_json"])
            except ValueError:
                env = {}
            dev = env.get("gpu") or env.get("device") or env.get("gpu_name")
            if dev is None and env.get("device_type") == "cpu":
                dev = "cpu"
        if dev is not None and dev != "cpu":
            dev = law_device(dev).name
        devs.append(dev)
    if any(d is None for d in devs):
        raise JouleboundError(f"{p}: some sweep rows do not name their GPU (env_json has no "
                              "'device'); pass the device explicitly (joulebound fit --device NAME).")
    from joulebound.jobs.strategy import normalize_strategy

    df = pd.DataFrame({
        "dataset": "sweep", "config_id": raw["config_id"].astype(str),
        "arch": raw["arch"].astype(str), "layers": raw["layers"].astype(int),
        "hidden": raw["hidden"].astype(int), "heads": raw["heads"].astype(int),
        "ff": pd.to_numeric(raw["ff"], errors="coerce").fillna(4 * raw["hidden"]).astype(int),
        "seq": raw["seq"].astype(int), "batch": raw["batch"].astype(int),
        "dtype": raw["dtype"].fillna("fp32").astype(str), "device": devs,
        "strategy": [normalize_strategy(s) if int(w) > 1 or s not in (None, "") else "single"
                     for s, w in zip(raw["strategy"].fillna("single"), raw["world_size"], strict=True)],
        "gpus": raw["world_size"].astype(int), "unit": "step",
        "time_s": raw["time_s"].astype(float) / steps.to_numpy(),
        "energy_j": pd.to_numeric(raw["energy_j"], errors="coerce") / steps.to_numpy(),
        "energy_provenance": raw["energy_provenance"],
        "speedup": pd.to_numeric(raw["speedup"], errors="coerce"),
    })
    df["family"] = (df["arch"] + "/L" + df["layers"].astype(str) + "_d" + df["hidden"].astype(str)
                    + "_S" + df["seq"].astype(str) + "_B" + df["batch"].astype(str))
    df = _hw_cols(df).reset_index(drop=True)
    df.attrs["dropped"] = dropped
    df.attrs["source"] = str(p)
    return df


def load(path: str | Path, device: str | None = None) -> pd.DataFrame:
    """Load any supported dataset: the shared data folder (all three open datasets), one
    sub-folder (``mayaki_ecai2025``, ``zeus_nsdi23``, ``perseus``), a Mayaki CSV, or a sweep
    SQLite store. Returns the common schema; ``attrs["dropped"]`` per dataset."""
    p = Path(path)
    if not p.exists():
        raise JouleboundError(f"data path not found: {p}. Pass the shared data folder, one of its "
                              f"sub-folders ({', '.join(DATASETS[:3])}) or a sweep runs.db.")
    if p.is_file():
        if p.suffix in (".db", ".sqlite", ".sqlite3"):
            return load_sweep(p, device)
        if p.name.startswith("summary_power_"):
            return load_zeus(p)
        if p.suffix.lower() != ".csv":
            raise JouleboundError(f"{p}: not a supported data file (a sweep store .db/.sqlite, a "
                                  "Mayaki ECAI CSV, a Zeus summary_power_*.csv) nor a data folder")
        return load_mayaki(p)
    name = p.name
    if name == "mayaki_ecai2025" or (p / MAYAKI_FILE).exists():
        return load_mayaki(p)
    if name == "zeus_nsdi23" or list(p.glob("summary_power_*.csv")):
        return load_zeus(p)
    if name == "perseus" or (p / "derived" / "perseus_plan_summary.csv").exists():
        return load_perseus(p)
    subs = [(s, p / s) for s in DATASETS[:3] if (p / s).exists()]
    if not subs:
        raise JouleboundError(f"{p}: no known dataset here (expected one of {', '.join(DATASETS[:3])}, "
                              "a Mayaki CSV or a sweep .db)")
    frames, dropped = [], {}
    for s, sp in subs:
        f = load(sp)
        frames.append(f)
        dropped.update({f"{s}: {k}": v for k, v in f.attrs.get("dropped", {}).items()})
    df = pd.concat(frames, ignore_index=True)
    df.attrs["dropped"] = dropped
    df.attrs["source"] = str(p)
    return df

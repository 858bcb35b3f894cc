"""What ``joulebound fit`` computes: the energy laws, speedup laws and the mechanistic predictor
fitted on measured data and evaluated (pure library; the command only parses and prints).

:func:`fit_data` is the whole command: per data set of ``data`` (:func:`fit_dataset`) the chosen
law's coefficients, every law's grouped K-fold evaluation and the speedup laws
(:func:`speedup_rows`); on the shared data folder (or when asked) the mechanistic predictor
calibrated and validated on every cut (:func:`mechanistic_fit`), the chosen law beside it on the
same cuts; ``save`` writes the fitted pre-run law or mechanistic calibration (the
:class:`~joulebound.jobs.predictor.JobPredictor` files ``--coefficients`` reads). Progress
messages go to ``progress`` (a callable taking a string), never to the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MODELED

Progress = Callable[[str], None] | None
MECHANISTIC = "mechanistic"


def speedup_rows(df: pd.DataFrame) -> list[dict]:
    """A speedup law per (family, strategy) fitted to per-step times over GPU counts."""
    from joulebound.jobs.speedup import fit_speedup

    out = []
    for (fam, strat), g in df[df["strategy"] != "single"].groupby(["family", "strategy"]):
        base = df[(df["family"] == fam) & (df["gpus"] == 1)]
        if g["speedup"].notna().any():
            n, s = g["gpus"].to_numpy(float), g["speedup"].to_numpy(float)
        elif len(base):
            t1 = float(base["time_s"].mean())  # same global batch: work per step is equal
            n, s = g["gpus"].to_numpy(float), t1 / g["time_s"].to_numpy(float)
        else:
            continue
        if len(np.unique(n[n > 1])) < 1:
            continue
        try:
            fit = fit_speedup(strat, n, s)
        except (RuntimeError, ValueError, JouleboundError) as exc:
            out.append({"family": fam, "strategy": strat, "note": f"fit failed: {exc}"})
            continue
        out.append({"family": fam, "strategy": strat, **fit.to_json()})
    return out


def fit_dataset(df: pd.DataFrame, law_name: str, laws: tuple[str, ...], k: int,
                progress: Progress = None) -> dict:
    """One data set's record: speedup laws, ``law_name``'s coefficients and every law's
    evaluation (modeled vs measured energy, grouped ``k``-fold by family)."""
    from joulebound.jobs.evaluate import evaluate
    from joulebound.jobs.laws import make_law

    rec: dict = {"dataset": str(df["dataset"].iloc[0]) if len(df) else "?",
                 "source": df.attrs.get("source"), "rows": len(df),
                 "dropped": df.attrs.get("dropped", {}), "law": law_name, "notes": []}
    rec["speedup"] = speedup_rows(df) if len(df) and (df["gpus"] > 1).any() else []
    if not rec["speedup"]:
        rec["notes"].append("no runtimes over GPU counts (with a 1-GPU run of the same shape): "
                            "speedup laws not fitted")
    has_e = df["energy_j"].notna() & (df["energy_j"] > 0)
    if "energy_provenance" in df and (has_e & (df["energy_provenance"] == MODELED)).any():
        n_mod = int((has_e & (df["energy_provenance"] == MODELED)).sum())
        rec["notes"].append(f"{n_mod} rows have modeled (simulated-meter) energy: left out, the energy "
                            "laws are fitted on measured energy only")
        has_e &= df["energy_provenance"] != MODELED
    if df["peak_flops"].isna().any() and has_e.any():
        rec["notes"].append(f"{int(df['peak_flops'].isna().sum())} CPU rows have no GPU peak: left out "
                            "of the energy laws")
        has_e &= df["peak_flops"].notna()
    if not has_e.any():
        rec["notes"].append("no row has measured energy_j (no sensor): energy laws need energy; only "
                            "the speedup laws were fitted")
        return rec
    if (~has_e).any():
        rec["notes"].append(f"{int((~has_e).sum())} rows without energy_j left out of the energy laws")
    de = df[has_e].copy()
    de.attrs = df.attrs
    multi = de[de["gpus"] > 1]
    if len(multi) and multi["speedup"].notna().all() and "paper-speedup" not in laws:
        laws = (*laws, "paper-speedup")  # the paper's own η = S(N)/N is available
    law = make_law(law_name).fit(de)
    rec["coefficients"] = law.coef_table().to_dict("records")
    rec["cov_type"] = getattr(law, "cov_type_", None)
    rec["adj_r2"] = law.rsquared_adj_
    if progress:
        progress(f"evaluating {len(laws)} laws on {rec['dataset']} (grouped {k}-fold)…")
    table = evaluate(de, laws, k=k, progress=(lambda n: progress(f"evaluated {n}")) if progress else None)
    rec["evaluation"] = table.replace({np.nan: None}).to_dict("records")
    if de["family"].nunique() < 5:
        rec["notes"].append(f"only {de['family'].nunique()} configuration families: held-out "
                            "figures rest on very few groups")
    return rec


def open_data_root(data: Path) -> tuple[Path | None, str | None]:
    """(shared data folder, only this data set) for ``data``: the folder, one of its
    sub-folders, or neither (a sweep store or a single file)."""
    from joulebound.jobs.calibrate import DATASETS

    if data.is_dir() and data.name in DATASETS:
        return data.parent, data.name
    if data.is_dir() and any((data / d).exists() for d in DATASETS):
        return data, None
    return None, None


def mechanistic_fit(data: Path, device: str | None, law: str, want_legacy: bool, save: Path | None,
                    progress: Progress = None) -> dict:
    """Calibrate the mechanistic predictor on ``data``, run every validation cut, and (when
    asked) the legacy ``law`` on the same cuts; write ``save`` (``law`` mechanistic)."""
    from joulebound.jobs import calibrate as cal
    from joulebound.jobs.host import mayaki_host_watts
    from joulebound.jobs.predictors import MechanisticPredictor

    root, only = open_data_root(data)
    skipped: list[str] = []
    if root is not None:
        obs = [o for o in cal.load_observations(root) if only is None or o.dataset == only]
    elif data.is_file():
        obs = cal.sweep_obs(data, device, skipped)
    else:
        obs = []
    if not obs:
        note = ("no GPU rows with measured time for the mechanistic predictor (CPU or "
                "time-only sweeps feed the speedup laws only)")
        if save is not None and law == MECHANISTIC:
            raise JouleboundError(f"--save {save}: nothing to save, {note}; calibrate on a GPU sweep "
                                  "(joulebound sweep on a GPU) or on the shared data folder (--data)")
        return {"note": note}
    prep = cal.prepare(obs)
    host = (mayaki_host_watts(root / "mayaki_ecai2025")
            if root is not None and (root / "mayaki_ecai2025").exists() else None)
    # the user's own sweep: their framework
    pred = MechanisticPredictor(framework_known=root is None, host=host).fit(prep)
    prm = pred.params_
    cuts = cal.cuts(prep, progress and (lambda m: progress(f"cut {m}")))
    prm.provenance["data"] = str(data)
    prm.provenance["cuts"] = [{k: v for k, v in c.items() if k != "params"} for c in cuts]
    out: dict = {"params": prm.to_json(), "cuts": cuts, "targets": cal.TARGETS}
    if want_legacy and law != MECHANISTIC:
        out["legacy_cuts"] = {law: cal.legacy_cuts(prep, law, progress and (lambda m: progress(f"cut {m}")))}
    if save is not None and law == MECHANISTIC:
        _write(save, prm.to_json())
    out["rows"] = int(len(prep))
    out["skipped"] = skipped
    out["datasets"] = sorted({str(d) for d in np.unique(prep.col("dataset"))})
    return out


def _write(path: Path, doc: dict) -> None:
    try:
        path.write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as exc:
        raise JouleboundError(f"--save {path}: cannot write ({exc.strerror})") from None


def save_prerun(df: pd.DataFrame, data: Path, folds: int, save: Path) -> None:
    """Fit the pre-run law on the rows of ``df`` with measured energy, measure its held-out
    error and write the coefficients file ``save`` (:func:`~joulebound.jobs.defaults.law_record`)."""
    from joulebound.jobs.defaults import law_record

    de = df[df["energy_j"].notna() & (df["energy_j"] > 0) & df["peak_flops"].notna()]
    if "energy_provenance" in de:
        de = de[de["energy_provenance"] != MODELED]
    if de.empty:
        raise JouleboundError("--save needs rows with measured energy; this data has none")
    rec = law_record(de.reset_index(drop=True), f"{data} ({len(de)} rows with measured energy)",
                     k=min(folds, int(de["family"].nunique())))
    _write(save, rec)


def check_request(law: str, laws: tuple[str, ...], folds: int, save: Path | None) -> None:
    """Refuse a bad ``fit`` request before anything is read: folds < 2, an unknown law, a
    ``save`` path that is a folder."""
    from joulebound.jobs.laws import make_law

    if folds < 2:
        raise JouleboundError(f"--folds must be >= 2 for a held-out evaluation (got {folds})")
    if law.strip().lower() != MECHANISTIC:
        make_law(law)  # validate the name early
    for x in laws:
        make_law(x)
    if save is not None and save.is_dir():
        raise JouleboundError(f"--save {save} is a folder; pass a file name such as {save / 'law.json'}")


def fit_data(data: Path | None, law: str = "prerun", laws: tuple[str, ...] = (), folds: int = 5,
             device: str | None = None, cuts: bool | None = None, save: Path | None = None,
             progress: Progress = None) -> dict:
    """``joulebound fit``: ``{"datasets": [fit_dataset records], "published": the paper's own
    figures, "saved": save path or None, "mechanistic": mechanistic_fit record or None}``.

    ``law`` ``mechanistic`` fits only the mechanistic predictor; ``cuts`` (default: on for the
    shared data folder and for ``mechanistic``) runs the mechanistic predictor's cuts."""
    from joulebound.jobs import datasets
    from joulebound.jobs.evaluate import PUBLISHED

    check_request(law, laws, folds, save)
    mech_only = law.strip().lower() == MECHANISTIC
    if data is None:
        from joulebound.core.datapath import find_data

        data = find_data()
    if not data.exists():
        datasets.load(data, device=device)  # the loader's message for a missing path
    root, only = open_data_root(data)
    run_cuts = cuts if cuts is not None else (mech_only or (root is not None and only is None))
    run_cuts = run_cuts or (mech_only and save is not None)  # --save needs the calibration
    mech = None
    if run_cuts:
        if progress:
            progress("mechanistic predictor: calibrating and running the cuts…")
        mech = mechanistic_fit(data, device, law.strip().lower(), True, save, progress)
    recs = []
    if not mech_only:
        df = datasets.load(data, device=device)
        for _, g in df.groupby("dataset", sort=False):
            g = g.reset_index(drop=True)
            g.attrs = {"source": df.attrs.get("source"),
                       "dropped": {k.split(": ", 1)[-1]: v for k, v in df.attrs.get("dropped", {}).items()
                                   if df["dataset"].nunique() == 1 or k.startswith(str(g["dataset"].iloc[0]))}}
            recs.append(fit_dataset(g, law, laws, folds, progress))
        if save is not None:
            save_prerun(df, data, folds, save)
    return {"datasets": recs, "published": PUBLISHED, "saved": str(save) if save else None,
            "mechanistic": mech}

"""Built-in fitted coefficients (package data) and the one-configuration predictor.

``joulebound/jobs/data/prerun_default.json`` holds the pre-run law fitted on the Mayaki ECAI
2025 data with its provenance: which data (file, rows, families), the held-out error measured by
grouped 5-fold cross-validation, and the split-conformal half-width ``q90_log`` used for the
90 % interval. Regenerate with ``python -m joulebound.jobs.defaults --data ../shared/data``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.core.provenance import MODELED
from joulebound.jobs.design import prepare
from joulebound.jobs.strategy import check_gpus, normalize_strategy

if TYPE_CHECKING:  # pragma: no cover - the estimators import scikit-learn: only when used
    from joulebound.jobs.laws import PreRunLaw

DEFAULT_FILE = "prerun_default.json"

#: Architecture defaults for ``--model`` (vocabulary for the embedding / LM-head FLOPs).
MODEL_DEFAULTS = {"bert": {"vocab": 30522}, "gpt": {"vocab": 50257}, "t5": {"vocab": 32128}}


def default_path() -> Path:
    return Path(str(resources.files("joulebound.jobs") / "data" / DEFAULT_FILE))


def load_default(path: str | Path | None = None) -> tuple[PreRunLaw, dict]:
    """The built-in pre-run law (or one saved by ``joulebound fit --save``) and its record."""
    from joulebound.jobs.laws import PreRunLaw

    p = Path(path) if path else default_path()
    if not p.exists():
        raise JouleboundError(f"coefficients file not found: {p}" + ("" if path else
                              "; reinstall joulebound or run python -m joulebound.jobs.defaults "
                              "--data ../shared/data"))
    if not p.is_file():
        raise JouleboundError(f"coefficients {p} is not a file; pass the JSON written by "
                              "`joulebound fit --save FILE`")
    try:
        d = json.loads(p.read_text())
        return PreRunLaw.from_json(d["law"]), d
    except OSError as exc:
        raise JouleboundError(f"{p}: cannot be read ({exc.strerror})") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise JouleboundError(f"{p}: not a joulebound coefficients file ({exc})") from None


def law_record(df: pd.DataFrame, data_desc: str, k: int = 5) -> dict:
    """Fit the pre-run law on ``df``, measure its grouped K-fold error, return the JSON record."""
    from joulebound.jobs.evaluate import cross_validate
    from joulebound.jobs.laws import PreRunLaw
    from joulebound.jobs.metrics import conformal_quantile

    law = PreRunLaw().fit(df)
    cv = cross_validate(df, "prerun", k=k)
    y = np.log(df["energy_j"].to_numpy(float))
    q = conformal_quantile(np.abs(y - cv["oof_log_pred"]), 0.1) if "oof_log_pred" in cv else None
    return {
        "schema": "joulebound.scaling.default/1",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "law": law.to_json(),
        "q90_log": q,
        "provenance": {
            "data": data_desc,
            "rows": len(df), "families": int(df["family"].nunique()),
            "devices": sorted(df["device"].unique()),
            "heldout": {"method": f"grouped {cv.get('k')}-fold by configuration family",
                        "r2_log": cv.get("r2_log"), "rmse_log": cv.get("rmse_log"),
                        "mape": cv.get("mape"), "conformal_coverage_90": cv.get("conformal_coverage")},
            "q90_log_method": "90 % quantile of |out-of-fold log residual|",
        },
    }


def fit_default(data: str | Path, out: str | Path | None = None) -> dict:
    """Fit the pre-run law on the Mayaki data, measure its held-out error, write the JSON."""
    from joulebound.jobs.datasets import load_mayaki

    df = load_mayaki(Path(data) / "mayaki_ecai2025" if (Path(data) / "mayaki_ecai2025").exists() else data)
    rec = law_record(df, "mayaki_ecai2025/SubsetDataForTransformer_energyModel.csv (MansMayaki/"
                         "MLEnergyConsumption @ 609d971, MIT; Mayaki & Charpenay, ECAI 2025)")
    rec["provenance"]["energy_basis"] = ("J per training step, CodeCarbon GPU+CPU+RAM, single GPU "
                                         "(about 97 W on the A100, 83 W on the 2080 Ti)")
    path = Path(out) if out else default_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=1) + "\n")
    return rec


@dataclass
class Prediction:
    """Energy and time of a whole training job (modeled), with a 90 % interval on energy."""

    energy_j: float
    energy_lo_j: float
    energy_hi_j: float
    time_s: float
    steps: float
    energy_per_step_j: float
    eta_hw: float
    eta_par: float
    law: str = "prerun (built-in, fitted on mayaki_ecai2025)"
    provenance: str = MODELED
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def config_frame(*, model: str = "bert", layers: int, hidden: int, heads: int, seq: int, batch: int,
                 gpus: int = 1, strategy: str = "single", device: str = "rtx2080ti",
                 dtype: str = "fp32", ff: int | None = None, vocab: int | None = None,
                 params: float | None = None, peak_flops: Mapping[str, float] | None = None,
                 mem_bw: float | None = None, tdp_w: float | None = None) -> pd.DataFrame:
    """One-row common-schema frame for a configuration (``params`` defaults to the standard count
    from the shape and vocabulary: L·(4d² + 2d·ff) + (vocab + seq)·d). ``peak_flops`` (dtype ->
    FLOP/s), ``mem_bw`` (bytes/s) and ``tdp_w`` (W) give the figures of a device outside the
    catalog (e.g. a TPU, named ``device``); by default the catalog's
    (:func:`~joulebound.jobs.lawinputs.law_device`)."""
    from joulebound.jobs.lawinputs import law_device, law_peak
    from joulebound.jobs.proxies import total_params

    n = int(check_gpus(gpus))
    strategy = normalize_strategy(strategy)
    if n == 1:
        strategy = "single"
    elif strategy == "single":
        raise JouleboundError(f"strategy 'single' needs --gpus 1 (got {n}); choose ddp, fsdp, tp or pp")
    for name, v in (("layers", layers), ("hidden", hidden), ("heads", heads), ("seq", seq), ("batch", batch),
                    ("ff", ff), ("vocab", vocab)):
        if v is not None and int(v) < 1:
            raise JouleboundError(f"--{name} must be >= 1 (got {v})")
    if hidden % heads:
        raise JouleboundError(f"--heads {heads} does not divide --hidden {hidden} (head size must be an "
                              f"integer); pick heads among {[h for h in range(1, hidden + 1) if hidden % h == 0][:12]}")
    arch = model.lower()
    if arch not in MODEL_DEFAULTS:
        raise JouleboundError(f"unknown --model {model!r}." + did_you_mean(arch, list(MODEL_DEFAULTS)))
    vocab = vocab if vocab is not None else MODEL_DEFAULTS[arch]["vocab"]
    ff = ff if ff is not None else 4 * hidden
    if peak_flops is None:
        spec = law_device(device)
        name, peak_flops = spec.name, spec.peak_flops
        mem_bw, tdp_w = float(spec.mem_bandwidth_bps), float(spec.power_limit_default_w)
    else:
        name = device
    return pd.DataFrame([{
        "dataset": "query", "family": "query", "arch": arch, "layers": layers, "hidden": hidden,
        "heads": heads, "ff": ff,
        "params": float(params) if params else float(total_params(layers, hidden, ff, vocab, seq)),
        "seq": seq, "batch": batch, "dtype": dtype, "device": name,
        "peak_flops": law_peak(peak_flops, dtype, name), "mem_bw": mem_bw, "tdp_w": tdp_w,
        "strategy": strategy, "gpus": n}])


def predict_job(tokens: float, law: PreRunLaw | None = None, q90_log: float | None = None,
                coefficients: str | Path | None = None, **config) -> Prediction:  # noqa: ANN003
    """Energy (J) and time (s) to train on ``tokens`` tokens with the configuration ``config``
    (keywords of :func:`config_frame`), from the built-in pre-run law unless ``law`` or a
    ``coefficients`` file (``joulebound fit --save``) is given."""
    label = "prerun (built-in, fitted on mayaki_ecai2025)"
    if law is None:
        law, rec = load_default(coefficients)
        q90_log = rec.get("q90_log") if q90_log is None else q90_log
        if coefficients:
            label = f"prerun ({coefficients}: {rec.get('provenance', {}).get('data', '?')})"
    if not np.isfinite(tokens) or tokens <= 0:
        raise JouleboundError(f"--tokens must be a finite number > 0 (got {tokens})")
    df = config_frame(**config)
    d = prepare(df, need_energy=False)
    e_step = float(law.predict(df)[0])
    eta, hw, par = law.eta_hat(d)
    t_step = float(law.eff_.time(d)[0] / (d["gpus"].iloc[0] * par[0]))
    steps = float(tokens) / float(d["batch"].iloc[0] * d["seq"].iloc[0])
    q = float(q90_log or 0.0)
    law_warnings = law.prediction_warnings(df)
    warn = [w for w in law_warnings if not w.startswith("strategy")]
    if len(warn) < len(law_warnings):
        warn.append("Ψ(strategy) = 0: this law was fitted without multi-GPU energy runs (none in the "
                    "open data); the strategy enters only through the predicted η̂_par")
    if coefficients is None and (d["params"].iloc[0] > 1.5e8 or d["gpus"].iloc[0] > 1):
        warn.append("outside the fitted data (single-GPU models <= 144 M parameters): "
                    "the multi-GPU part comes from the communication model, not from measurements")
    return Prediction(energy_j=e_step * steps, energy_lo_j=e_step * steps * np.exp(-q),
                      energy_hi_j=e_step * steps * np.exp(q), time_s=t_step * steps, steps=steps,
                      energy_per_step_j=e_step, eta_hw=float(hw[0]), eta_par=float(par[0]),
                      law=label, warnings=warn)


def _main() -> None:  # pragma: no cover - maintenance entry point
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=None,
                    help="shared data folder (default: $JOULEBOUND_DATA or ../shared/data)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    from joulebound.core.datapath import find_data

    a.data = find_data(a.data)
    rec = fit_default(a.data, a.out)
    print(json.dumps(rec["provenance"], indent=1))


if __name__ == "__main__":  # pragma: no cover
    _main()

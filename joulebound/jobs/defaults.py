"""The pre-run law's coefficients file: the built-in one (package data) and ``fit --save``'s.

``joulebound/jobs/data/prerun_default.json`` holds the pre-run law fitted on the Mayaki ECAI
2025 data with its provenance: which data (file, rows, families), the held-out error measured by
grouped 5-fold cross-validation, and the split-conformal half-width ``q90_log`` used for the
90 % interval. Regenerate with ``python -m joulebound.jobs.defaults --data ../shared/data``.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from joulebound.core.errors import JouleboundError

if TYPE_CHECKING:  # pragma: no cover - the estimators import scikit-learn: only when used
    import pandas as pd

    from joulebound.jobs.laws import PreRunLaw
    from joulebound.jobs.prediction import JobPrediction

DEFAULT_FILE = "prerun_default.json"
#: schema id of a pre-run law coefficients file
LAW_SCHEMA = "joulebound.scaling.default/1"


def default_path() -> Path:
    return Path(str(resources.files("joulebound.jobs") / "data" / DEFAULT_FILE))


def is_law_file(path: str | Path | None) -> bool:
    """True for a pre-run law coefficients file (``fit --save`` without ``--law mechanistic``)."""
    if path is None or not Path(path).is_file():
        return False
    try:
        return json.loads(Path(path).read_text()).get("schema") == LAW_SCHEMA
    except (OSError, ValueError, AttributeError):
        return False


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
        return PreRunLaw.from_record(d, path or None), d
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
        "schema": LAW_SCHEMA,
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


def predict_job(tokens: float, law: PreRunLaw | None = None, q90_log: float | None = None,
                coefficients: str | Path | None = None, **config: Any) -> JobPrediction:
    """Energy (J) and time (s) to train on ``tokens`` tokens with the configuration ``config``
    (keywords of :func:`~joulebound.jobs.design.config_frame`), from the built-in pre-run law
    unless ``law`` (with ``q90_log``, the half-width of its 90 % interval of log E) or a
    ``coefficients`` file (``joulebound fit --save``) is given."""
    if law is None:
        law, _ = load_default(coefficients)
    elif q90_log is not None:
        law = copy.copy(law)
        law.q90_log_ = q90_log
    return law.predict_config(tokens, **config)


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

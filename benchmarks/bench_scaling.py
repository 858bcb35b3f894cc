"""Scaling-model speed: fitting the laws, grouped cross-validation, and pricing a job.

Targets (interactive use): `joulebound predict` under 50 ms of model time; an `advise` grid of
10 candidates under 1 s; fitting the pre-run law on the 1,576 Mayaki rows under 2 s.
"""

from __future__ import annotations

import time


def _t(fn, reps: int = 3) -> float:  # noqa: ANN001
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run() -> str:
    from joulebound.datapath import find_data
    from joulebound.scaling import advisor
    from joulebound.scaling.datasets import load
    from joulebound.scaling.defaults import load_default, predict_job
    from joulebound.scaling.evaluate import cross_validate
    from joulebound.scaling.laws import make_law

    cfg = dict(model="bert", layers=12, hidden=768, heads=12, seq=128, batch=32, device="rtx2080ti")
    law, rec = load_default()
    rows = [("predict one job (built-in law)", _t(lambda: predict_job(1e8, law=law, q90_log=0.1, gpus=4,
                                                                      strategy="fsdp", **cfg)), "< 0.05 s"),
            ("advise: 10 candidates", _t(lambda: advisor.advise(1e8, 7200, 8, **cfg), 1), "< 1 s")]
    data = find_data(required=False)
    extra = ""
    if data is not None:
        df = load(data / "mayaki_ecai2025")
        make_law("paper").fit(df)  # warm-up: imports statsmodels once
        for name in ("powerlaw", "paper", "prerun", "roofline", "hgb"):
            rows.append((f"fit `{name}` on Mayaki (1,576 rows)", _t(lambda n=name: make_law(n).fit(df), 1),
                         "< 2 s" if name == "prerun" else ""))
        t0 = time.perf_counter()
        cv = cross_validate(df, "prerun", k=5)
        rows.append(("grouped 5-fold CV + conformal, `prerun`", time.perf_counter() - t0, ""))
        extra = (f"\n\nHeld-out (grouped 5-fold by (L, d)) R² of log E of the pre-run law in the same run: "
                 f"{cv['r2_log']:.3f}, MAPE {cv['mape'] * 100:.1f} % (modeled vs measured).")
    lines = ["## Scaling model", "", "| operation | time (s), best of runs | target |", "|---|---|---|"]
    lines += [f"| {a} | {b:.4f} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + extra

"""Memory-level parallelism on a real GPU: streaming bandwidth vs the number of SMs issuing
requests, measured by joulebound's read-only probe on an H200 (2026-12-04).

PRODUCT: sets the kernel model's default bytes per SM-cycle (``mlp_bytes_per_cycle``) and knee
exponent (``mlp_q``) — :data:`joulebound.gpumodel.params.DEFAULT_MLP_BYTES_PER_CYCLE` and
``DeviceParams.mlp_q`` — and checks that the knee's mechanism reproduces the measured curve.

Data: ``docs/measurements/h200-2026-12-04.json`` (ours; ``benchmarks/gpu_physics.py``): a
persistent Triton kernel ``y = 2x`` over 4 GiB of fp32 on ``n`` CTAs of 8 warps (one per SM
up to 132), timed by CUDA events at the governor's 1980 MHz. The clock cannot be lowered on a
lent GPU (read-only rules), so the SM count stands in for it: the knee model says ``n`` SMs keeping
``B`` bytes each in flight per cycle at clock ``f`` draw ``BW(n) = BW_peak / S_q(1, BW_peak /
(n·B·f))`` — the same ``S_q`` with which the kernel model slows a streaming kernel below its knee
clock ``f_knee = BW / (n_SM·B)``.

The fit is **in-sample** (``B`` and ``q`` come from this curve); what it shows is that one
Little's-law knee with two parameters describes the curve from 1 to 528 CTAs, and that without
the knee (``B = 0``: bandwidth independent of the issuing SMs) the error is two orders of
magnitude larger.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

PROBE = Path(__file__).resolve().parent.parent / "docs" / "measurements" / "h200-2026-12-04.json"


def load(path: Path = PROBE, warps: int = 8, block: int = 4096
         ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """``(CTAs, GB/s, SM clock MHz, peak GB/s)`` of one (warps, block) series; CTAs beyond the
    SM count (several per SM) are left out: the model's ``B`` is per SM."""
    d = json.loads(Path(path).read_text())
    rows = [r for r in d["mlp"]["rows"] if r["warps"] == warps and r["block"] == block]
    n_sm = d["mlp"]["n_sm"]
    peak = max(r["gbps"] for r in rows)
    rows = [r for r in rows if r["ctas"] <= n_sm]
    n = np.array([r["ctas"] for r in rows], float)
    bw = np.array([r["gbps"] for r in rows], float)
    f = float(np.median([r["sm_clock_mhz"] for r in rows]))
    return n, bw, f, peak


def predict(n: np.ndarray, b: float, q: float, f_mhz: float, peak: float) -> np.ndarray:
    """Bandwidth (GB/s) of ``n`` SMs keeping ``b`` bytes in flight per cycle (``b = 0``: peak)."""
    if b <= 0:
        return np.full(len(n), peak)
    from joulebound.gpumodel.kernel import smooth_max  # the kernel model's knee

    issue = n * b * f_mhz * 1e6 / 1e9                  # GB/s the SMs could draw
    return peak / smooth_max(np.ones(len(n)), peak / issue, q)


def fit(path: Path = PROBE) -> tuple[float, float, float]:
    """``(B bytes per SM-cycle, q, MAPE %)`` fitted on the log bandwidth."""
    from scipy.optimize import least_squares

    n, bw, f, peak = load(path)

    def r(x: np.ndarray) -> np.ndarray:
        return np.log(predict(n, x[0], x[1], f, peak) / bw)

    sol = least_squares(r, [32.0, 3.0], bounds=([1.0, 1.0], [512.0, 16.0]))
    b, q = float(sol.x[0]), float(sol.x[1])
    return b, q, float(100 * np.mean(np.abs(predict(n, b, q, f, peak) / bw - 1)))


def run(path: Path = PROBE) -> list:  # list[CheckResult]
    from research.result import CheckResult

    n, bw, f, peak = load(path)
    b, q, _ = fit(path)
    return [
        CheckResult.from_arrays(
            "mlp-probe", "H200", "streaming bandwidth vs SMs issuing, knee fitted (in-sample)",
            None, None, predict(n, b, q, f, peak), bw, energy_quantity="bandwidth",
            provenance="measured (joulebound probe, H200, 2026-12-04) vs modeled, in-sample",
            note=f"B = {b:.1f} bytes per SM-cycle, q = {q:.2f} at {f:.0f} MHz; these set the "
                 "kernel model's defaults"),
        CheckResult.from_arrays(
            "mlp-probe", "H200", "same, without the knee (B = 0)",
            None, None, predict(n, 0.0, q, f, peak), bw, energy_quantity="bandwidth",
            provenance="measured vs modeled (ablation)",
            note="bandwidth independent of the SMs issuing requests: what the linear-λ model "
                 "assumes for a streaming kernel"),
    ]

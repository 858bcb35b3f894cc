"""Synthetic common-schema rows for the energy-law tests (shapes only; each test adds energy)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def synth(n: int = 400, seed: int = 0, n_families: int = 40, device: str = "a100-pcie-80gb") -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    L = rng.choice([2, 4, 6, 8, 12, 16], n)
    d = rng.choice([128, 256, 384, 512, 768, 1024], n)
    fam = rng.integers(0, n_families, n)
    df = pd.DataFrame({
        "layers": L, "hidden": d, "heads": rng.choice([2, 4, 8], n), "ff": 4 * d,
        "seq": rng.choice([128, 256, 512, 1024], n), "batch": rng.choice([8, 16, 32, 64], n),
        "dtype": "fp32", "device": device, "peak_flops": 156e12, "strategy": "single", "gpus": 1,
        "family": [f"f{i}" for i in fam],
    })
    df["params"] = df["layers"] * 12 * df["hidden"] ** 2 + 30522 * df["hidden"]
    return df

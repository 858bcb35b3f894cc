"""Order-of-magnitude checks at frontier scale, as the paper did.

T5-11B uses 128 heads of width 128 (attention width 16,384 ≠ d), so its parameter count is
taken from the paper (11e9) rather than from the d²-shape formula.

We predict the training energy of GPT-3 175B (V100) and T5-11B (TPU v3) from their published
configurations and hardware, two ways:

* **law** — the built-in pre-run law (fitted on single-GPU models ≤ 144 M parameters) extrapolated;
* **physics** — board power × GPU-seconds, with GPU-seconds = total training FLOPs /
  (peak × η̂_hw) and η̂_hw from the law's efficiency model (an upper bound on utilisation: no
  communication, pipeline bubbles or restarts).

Beside them, Patterson et al. 2021 ("Carbon Emissions and Large Neural Network Training",
arXiv 2104.10350, Table 4), labeled published: GPT-3 1,287 MWh; T5 (11B) 85.7 MWh. Published
inputs used (same source): GPT-3 on 10,000 V100s, 3.14e23 FLOPs, 330 W average per processor;
T5 on 512 TPU v3, 4.05e22 FLOPs, 310 W average. Energies include datacenter PUE (1.10 for
both), which we do not model.
"""

from __future__ import annotations

import numpy as np

from joulebound.core.provenance import MODELED, PUBLISHED
from joulebound.jobs.defaults import load_default
from joulebound.jobs.design import config_frame, prepare
from joulebound.jobs.lawinputs import law_device, law_peak

PATTERSON = "Patterson et al. 2021, arXiv 2104.10350, Table 4"

CASES = {
    "gpt3-175b": {
        "config": dict(model="gpt", layers=96, hidden=12288, heads=96, seq=2048, batch=1536,
                       ff=4 * 12288, vocab=50257, dtype="fp16", device="v100-sxm2"),
        "tokens": 300e9, "chips": 10_000, "strategy": "tp",
        "published": {"energy_mwh": 1287.0, "flops": 3.14e23, "avg_power_w": 330.0, "pue": 1.10,
                      "source": PATTERSON, "provenance": PUBLISHED},
    },
    "t5-11b": {
        "config": dict(model="t5", layers=48, hidden=1024, heads=128, seq=512, batch=2048,
                       ff=65536, vocab=32128, params=11e9, dtype="bf16", device="tpu-v3"),
        # 2^20 steps x 2^11 sequences x 512 tokens (Raffel et al. 2020, sec. 3.7)
        "tokens": 2**40, "chips": 512, "strategy": "tp",
        "published": {"energy_mwh": 85.7, "flops": 4.05e22, "avg_power_w": 310.0, "pue": 1.10,
                      "source": PATTERSON, "provenance": PUBLISHED},
    },
}

#: TPU v3 per chip (Google Cloud TPU documentation: 123 TFLOP/s bf16, 900 GB/s HBM); power is
#: Patterson's measured average, used as the "board power" since no TDP is published.
#: Sources: Google Cloud TPU docs; Patterson et al. 2021 (power).
TPU_V3 = {"peak_flops": {"bf16": 123e12, "fp32": 123e12 / 8}, "mem_bw": 900e9, "tdp_w": 310.0}


def check(name: str) -> dict:
    """Our two predictions for one case beside the published figure (MWh)."""
    case = CASES[name]
    law, _ = load_default()
    cfg = dict(case["config"])
    if cfg["device"] == "tpu-v3":  # the TPU is only known here
        figs = TPU_V3
    else:
        spec = law_device(cfg["device"])
        cfg["device"] = spec.name
        figs = {"peak_flops": spec.peak_flops, "mem_bw": float(spec.mem_bandwidth_bps),
                "tdp_w": float(spec.power_limit_default_w)}
    df = config_frame(**cfg, **figs)  # the frame carries peak, bandwidth and power: no lookups after
    d = prepare(df, need_energy=False)
    e_step = float(law.predict(df)[0])
    eta_hw = float(law.eff_.eta(d)[0])
    steps = case["tokens"] / (cfg["batch"] * cfg["seq"])
    flops = float(d["F_train"].iloc[0]) * steps
    gpu_s = flops / (law_peak(figs["peak_flops"], cfg["dtype"], cfg["device"]) * eta_hw)
    physics_mwh = gpu_s * figs["tdp_w"] / 3.6e9
    law_mwh = e_step * steps / 3.6e9
    pub = case["published"]
    return {"case": name, "device": cfg["device"], "tokens": case["tokens"], "our_flops": flops,
            "eta_hw_hat": eta_hw, "law_mwh": law_mwh, "physics_mwh": physics_mwh,
            "published": pub, "law_ratio": law_mwh / pub["energy_mwh"],
            "physics_ratio": physics_mwh / pub["energy_mwh"],
            "flops_ratio": flops / pub["flops"], "provenance": MODELED,
            "log10_off_law": float(np.log10(law_mwh / pub["energy_mwh"])),
            "log10_off_physics": float(np.log10(physics_mwh / pub["energy_mwh"]))}


def check_all() -> list[dict]:
    return [check(n) for n in CASES]

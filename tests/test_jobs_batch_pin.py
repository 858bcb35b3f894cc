"""``predict --jobs`` batching: a varied table of jobs predicted together gives, row by row, the
figures pinned in ``tests/data/mech_batch_pin.json`` (within 1e-7 relative: the GPU model's
table evaluation, ``dvfs.model.kernel_table``, equals the per-cell model it replaced within 1e-8,
pinned by tests/test_gpumodel_reference.py).

The pinned figures were written by the per-shape code path (one analytic trace per job shape,
characterized on the GPU model) before the op table was vectorized over jobs; a change to the
batching that moves any prediction fails here. A deliberate change of the *model* (the GPU model,
the calibration) moves them too: regenerate with
``python tests/test_jobs_batch_pin.py --regen`` and say so in the commit.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from joulebound.jobs import stepcost
from joulebound.jobs.job import Job
from joulebound.jobs.mechanistic import predict_many

PIN = Path(__file__).parent / "data" / "mech_batch_pin.json"
FIELDS = ("time_s", "time_lo_s", "time_hi_s", "gpu_energy_j", "gpu_energy_lo_j", "gpu_energy_hi_j",
          "host_energy_j", "total_energy_j", "total_energy_hi_j", "energy_per_token_j")
STEP = ("time_s", "compute_s", "overhead_s", "comm_s", "bubble_s", "busy_energy_j", "wait_energy_j")


def jobs() -> list[Job | None]:
    """Every architecture, dtype, recompute, optimizer and strategy; several GPUs, a power limit,
    locked clocks, repeated and distinct shapes, one impossible job."""
    out: list[Job | None] = []
    devs = ["a40", "a100-sxm4-80gb", "v100-sxm2-32gb", "rtx2080ti", "h100-sxm", "p100-pcie-16gb"]
    i = 0
    for arch in ("bert", "gpt"):
        for dtype in ("fp32", "tf32", "fp16", "bf16"):
            for rec in (False, True):
                for strategy, gpus in (("single", 1), ("ddp", 4), ("fsdp", 8), ("tp", 2), ("pp", 4)):
                    dev = devs[i % len(devs)]
                    if dev in ("v100-sxm2-32gb", "rtx2080ti", "p100-pcie-16gb") and dtype in ("tf32", "bf16"):
                        dev = "a40"
                    L, d, h = (4 + 4 * (i % 5), 256 * (1 + i % 4), 4 * (1 + i % 4))
                    out.append(Job(arch=arch, layers=L, hidden=d, heads=h, seq=128 << (i % 3),
                                   batch=1 + 3 * (i % 7), dtype=dtype, recompute=rec, gpus=gpus,
                                   strategy=strategy, device=dev, tokens=1e8,
                                   optimizer="sgd" if i % 9 == 4 else "adamw", name=f"j{i}"))
                    i += 1
    out.append(Job(layers=12, hidden=768, heads=12, seq=512, batch=8, device="a40", power_limit_w=200,
                   name="plim"))
    out.append(Job(layers=12, hidden=768, heads=12, seq=512, batch=8, device="a40", clocks="1200",
                   name="clk"))
    out.append(Job(layers=12, hidden=768, heads=12, seq=512, batch=8, device="a40", gpus=8, tp=2, pp=2,
                   strategy="ddp", name="hybrid"))
    out.append(Job(layers=2, hidden=768, heads=12, seq=512, batch=8, device="a40", gpus=8,
                   strategy="pp", name="bad"))
    out.append(None)
    return out


def _figures(preds: list) -> list:
    rows = []
    for p in preds:
        if isinstance(p, str) or p is None:
            rows.append(p or "")
            continue
        rows.append({**{f: getattr(p, f) for f in FIELDS}, **{"step_" + f: p.step[f] for f in STEP},
                     "memory_total": p.memory["total"], "warnings": len(p.warnings)})
    return rows


def current() -> list:
    stepcost._TRACES.clear()
    return _figures(predict_many(jobs()))


def test_batched_predictions_equal_the_pinned_per_shape_figures():
    pinned = json.loads(PIN.read_text())
    got = current()
    assert len(got) == len(pinned)
    for i, (g, p) in enumerate(zip(got, pinned, strict=True)):
        if isinstance(p, str):
            assert isinstance(g, str) and (g == "") == (p == ""), (i, g, p)
            continue
        assert isinstance(g, dict), (i, g)
        for k, v in p.items():
            assert math.isclose(g[k], v, rel_tol=1e-7, abs_tol=1e-12), (i, k, g[k], v)


def test_one_job_alone_gives_the_figures_it_gets_in_a_table():
    js = [j for j in jobs() if j is not None][:40:7]
    together = _figures(predict_many(js))
    for j, t in zip(js, together, strict=True):
        stepcost._TRACES.clear()
        alone = _figures(predict_many([j]))[0]
        if isinstance(t, str):
            assert alone == t
            continue
        for k, v in t.items():
            assert alone[k] == pytest.approx(v, rel=1e-12, abs=1e-15), (j.name, k)


@pytest.mark.parametrize("arch", ["bert", "gpt"])
@pytest.mark.parametrize("dtype, rec", [("fp32", False), ("bf16", True)])
def test_op_table_vectorized_over_shapes_equals_build_trace_shape_by_shape(arch, dtype, rec):
    import numpy as np

    from joulebound.workload.analytic import ModelConfig, build_table, build_trace

    shapes = [(768, 12, 3072, 30522, 512, 8), (256, 4, 1000, 50257, 128, 3), (1600, 25, 6400, 1000, 1024, 1)]
    cols = list(zip(*shapes, strict=True))
    tpl, flops, nbytes, params = build_table(arch, 2, dtype, rec, hidden=cols[0], heads=cols[1], ff=cols[2],
                                             vocab=cols[3], seq=cols[4], batch=cols[5])
    for i, sh in enumerate(shapes):
        cfg = ModelConfig(arch, 2, *sh, dtype, rec)
        ks = build_trace(cfg).kernels
        assert [(k.name, k.category, k.phase, k.layer, k.dtype, bool(k.meta.get("recompute"))) for k in ks] == \
            [(k.name, k.category, k.phase, k.layer, k.dtype, bool(k.meta.get("recompute"))) for k in tpl]
        assert np.array_equal([k.flops for k in ks], flops[:, i])
        assert np.array_equal([k.bytes for k in ks], nbytes[:, i])
        assert params[i] == cfg.params()


if __name__ == "__main__" and "--regen" in sys.argv:
    PIN.write_text(json.dumps(current(), indent=0) + "\n")
    print(f"wrote {PIN}")

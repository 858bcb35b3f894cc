"""Read-only probes of two mechanisms of the kernel model, on a lent GPU at its default clocks.

READ-ONLY like :mod:`gpu_check` (which runs these as its ``mlp`` and ``host_bound`` sections): NVML is
only read (clocks, energy counter) through the read-only proxy ``gpu_check`` installs; no clock
or power setting is changed. The clocks stay with the GPU's own governor throughout.

1. ``mlp`` — memory-level parallelism. A streaming kernel (Triton, ``y = 2x``, fp32, 2 GiB
   read + 2 GiB written) launched on ``n`` persistent CTAs (one per SM up to the SM count), each
   looping over tiles: achieved DRAM bandwidth vs the number of SMs issuing requests, for two
   warp counts per CTA. Little's law: an SM keeps a bounded number of bytes in flight, so the
   bandwidth one SM draws is about ``bytes in flight / latency`` and grows with the rate the SM
   issues requests (its core clock). The SM count at which the curve saturates, ``n_sat``, gives
   the core clock below which a kernel that uses all SMs can no longer saturate DRAM:
   ``f_knee ≈ f_now · n_sat / n_SM``. This is what the kernel model's memory-level-parallelism
   knee (``mlp_knee``) stands for; the clock cannot be lowered here, so the SM count stands in.
2. ``host_bound`` — host-bound execution. Eager PyTorch ops on tiny tensors (the GPU waits on the
   host between kernels) vs the same ops replayed from a CUDA graph (no host): wall time per op,
   the GPU's average power from the energy counter and the SM clock the governor chose, beside
   the idle power and clock. This is the kernel model's host-dispatch gap and the power the GPU
   draws in it.
"""

from __future__ import annotations

import time
from typing import Any


def _clock(dev: Any, domain: str = "SM") -> int | None:
    """The current ``SM`` or ``MEM`` clock (MHz) read through NVML, or ``None``."""
    try:
        nv = dev.session.nv
        return int(nv.nvmlDeviceGetClockInfo(dev.handle, getattr(nv, f"NVML_CLOCK_{domain}")))
    except Exception:
        return None


def _sm_clock(dev: Any) -> int | None:
    return _clock(dev, "SM")


def mlp(dev: Any, quick: bool = False) -> dict[str, Any]:
    """Achieved streaming bandwidth (GB/s) vs the number of CTAs (one per SM) and warps/CTA."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        start = pid * BLOCK
        step = nprog * BLOCK
        for off in range(start, n, step):
            idx = off + tl.arange(0, BLOCK)
            m = idx < n
            v = tl.load(x_ptr + idx, mask=m)
            tl.store(y_ptr + idx, v * 2.0, mask=m)

    props = torch.cuda.get_device_properties(0)
    n_sm = int(props.multi_processor_count)
    n = (1 << 29) if not quick else (1 << 28)            # fp32 elements: 2 GiB (1 GiB quick)
    x = torch.ones(n, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    counts = sorted({1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, n_sm, 2 * n_sm, 4 * n_sm})
    rows: list[dict[str, Any]] = []
    for warps in (4, 8):
        for block in (1024, 4096):
            for c in counts:
                def launch(c: int = c, warps: int = warps, block: int = block) -> None:
                    scale[(c,)](x, y, n, BLOCK=block, num_warps=warps)
                launch()
                torch.cuda.synchronize()
                reps = 3 if c >= 16 else 1
                ev0, ev1 = torch.cuda.Event(True), torch.cuda.Event(True)
                clk = _sm_clock(dev)
                ev0.record()
                for _ in range(reps):
                    launch()
                ev1.record()
                ev1.synchronize()
                t = ev0.elapsed_time(ev1) / 1e3 / reps
                rows.append({"ctas": c, "warps": warps, "block": block, "time_s": t,
                             "gbps": 2 * 4 * n / t / 1e9, "sm_clock_mhz": clk,
                             "sm_clock_after_mhz": _sm_clock(dev), "mem_clock_mhz": _clock(dev, "MEM")})
    ref = torch.cuda.Event(True), torch.cuda.Event(True)
    ref[0].record()
    y.copy_(x)
    ref[1].record()
    ref[1].synchronize()
    copy_gbps = 2 * 4 * n / (ref[0].elapsed_time(ref[1]) / 1e3) / 1e9
    summary = {}
    for warps in (4, 8):
        for block in (1024, 4096):
            rs = [r for r in rows if r["warps"] == warps and r["block"] == block]
            peak = max(r["gbps"] for r in rs)
            sat = min((r["ctas"] for r in rs if r["gbps"] >= 0.9 * peak), default=None)
            one = next(r["gbps"] for r in rs if r["ctas"] == 1)
            summary[f"w{warps}_b{block}"] = {
                "peak_gbps": peak, "n_sat_90pct": sat, "gbps_one_sm": one,
                "knee_frac_of_clock": (sat / n_sm) if sat else None}
    return {"n_sm": n_sm, "bytes_moved": 8 * n, "torch_copy_gbps": copy_gbps,
            "rows": rows, "summary": summary,
            "how": "persistent Triton kernel y=2x on n CTAs; time by CUDA events; default clocks"}


def _metered(dev: Any, fn: Any, seconds: float) -> dict[str, Any]:
    """Run ``fn()`` repeatedly for about ``seconds`` s; energy counter, wall time, SM clocks."""
    import torch

    torch.cuda.synchronize()
    clocks: list[int] = []
    e0 = dev.energy_mj()
    t0 = time.perf_counter()
    calls = 0
    while time.perf_counter() - t0 < seconds:
        ops = fn()
        calls += ops
        c = _sm_clock(dev)
        if c is not None:
            clocks.append(c)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    e1 = dev.energy_mj()
    dt = t1 - t0
    clocks.sort()
    return {"seconds": dt, "ops": calls, "us_per_op": 1e6 * dt / max(calls, 1),
            "avg_power_w": (e1 - e0) / 1e3 / dt,
            "sm_clock_median_mhz": clocks[len(clocks) // 2] if clocks else None,
            "sm_clock_min_mhz": clocks[0] if clocks else None,
            "sm_clock_max_mhz": clocks[-1] if clocks else None}


def host(dev: Any, quick: bool = False) -> dict[str, Any]:
    """Host-bound eager ops vs graph replay: µs per op, average power, the governor's clock."""
    import torch

    secs = 2.0 if quick else 4.0
    res: dict[str, Any] = {}
    per = 200                                    # ops per call
    time.sleep(1.0)
    res["idle"] = _metered(dev, lambda: (time.sleep(0.01), 0)[1], secs)
    for label, numel in (("tiny", 1024), ("small", 1 << 20), ("medium", 1 << 24)):
        x = torch.zeros(numel, device="cuda", dtype=torch.float32)

        def eager(x: torch.Tensor = x) -> int:
            for _ in range(per):
                x.add_(1.0)
            return per

        eager()
        res[f"eager_{label}"] = _metered(dev, eager, secs)
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            eager()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            for _ in range(per):
                x.add_(1.0)

        def replay(g: Any = g) -> int:
            g.replay()
            torch.cuda.synchronize()
            return per

        replay()
        res[f"graph_{label}"] = _metered(dev, replay, secs)
        res[f"graph_{label}"]["bytes_per_op"] = 8 * numel
        del g, x
        torch.cuda.empty_cache()
    time.sleep(1.0)
    res["idle_after"] = _metered(dev, lambda: (time.sleep(0.01), 0)[1], secs / 2)
    res["how"] = ("x.add_(1.0) on fp32 tensors of 1 Ki / 1 Mi / 16 Mi elements, 200 ops per "
                  "call: eager (host launches each) vs a CUDA graph of the same 200 ops; power "
                  "= energy-counter difference / wall time; SM clock read once per call (NVML)")
    return res


def hf_dispatch(dev: Any, quick: bool = False) -> dict[str, Any]:
    """Host dispatch cost per kernel of an eager Hugging Face training step (GPT-2 124 M, random
    weights, bf16 autocast, AdamW): wall time per step vs the GPU's busy time from torch.profiler,
    at a host-bound shape (batch 1 × 128) and a GPU-bound one (batch 8 × 1024). Where the GPU
    waits for the host, ``(wall - busy) / kernels`` is the host's cost per launched kernel beyond
    the GPU's own time — the framework-mode figure the job predictor's host model needs."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    out: dict[str, Any] = {"model": "gpt2 (124 M), random init, bf16 autocast, AdamW",
                           "torch": torch.__version__}
    steps = 5 if quick else 10
    for label, (b, s) in (("host_bound", (1, 128)), ("gpu_bound", (8, 1024))):
        x = torch.randint(0, 50257, (b, s), device="cuda")

        def step(x: Any = x) -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x, labels=x).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        e0 = dev.energy_mj()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / steps
        joules = (dev.energy_mj() - e0) / 1e3 / steps
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        kern = [e for e in prof.events() if e.device_type.name == "CUDA"]
        busy = sum(e.device_time_total for e in kern) / 1e6 if kern else None
        n = len(kern)
        out[label] = {"batch": b, "seq": s, "step_s": wall, "step_j": joules, "kernels": n,
                      "gpu_busy_s": busy,
                      "host_s_per_kernel_beyond_gpu": ((wall - busy) / n) if busy and n else None,
                      "wall_per_kernel_s": wall / n if n else None}
    return out


def hf_grid(dev: Any, quick: bool = False) -> dict[str, Any]:
    """Measured time and GPU energy per training step of eager Hugging Face models on a grid of
    batch × sequence (GPT-2 124 M and BERT-base, random weights, bf16 autocast, AdamW), from
    host-bound to GPU-bound shapes: held-out data for the job predictor's ``hf`` framework
    (host dispatch per kernel vs the kernels' GPU time) on a GPU it was not calibrated on.
    Energy from the NVML energy counter over ≥ 1 s of steps; clocks as the driver chose them."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    grid = [(1, 128), (4, 128), (16, 128), (2, 512), (8, 512), (4, 1024), (16, 1024)]
    if quick:
        grid = grid[::2]
    out: dict[str, Any] = {"what": "eager HF step, bf16 autocast, AdamW (foreach default), random init",
                           "torch": torch.__version__, "rows": []}
    for name, make, vocab in (("gpt2", lambda: GPT2LMHeadModel(GPT2Config()), 50257),
                              ("bert-base", lambda: BertForMaskedLM(BertConfig()), 30522)):
        model = make().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for b, s in grid:
            if name == "bert-base" and s > 512:
                continue
            x = torch.randint(0, vocab, (b, s), device="cuda")

            def step(x: Any = x, model: Any = model, opt: Any = opt) -> None:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(input_ids=x, labels=x).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            for _ in range(3):
                step()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            e0 = dev.energy_mj()
            n = 0
            while time.perf_counter() - t0 < (0.6 if quick else 1.2) or n < 5:
                step()
                n += 1
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / n
            joules = (dev.energy_mj() - e0) / 1e3 / n
            out["rows"].append({"model": name, "batch": b, "seq": s, "steps": n, "step_s": wall,
                                "step_j": joules, "sm_clock_mhz": _sm_clock(dev)})
        del model, opt
        torch.cuda.empty_cache()
    return out


def wrapper_host(dev: Any, quick: bool = False) -> dict[str, Any]:
    """Host cost of the data-parallel wrappers, measured at world size 1 (one process, NCCL
    group of one rank, so no real communication): eager Hugging Face GPT-2 (124 M, bf16
    autocast, AdamW) bare, under DDP (``find_unused_parameters`` off and on — Hugging Face's
    Trainer turns it on for models without gradient checkpointing) and under FSDP2
    (``fully_shard`` on each of the 12 blocks and the root: 13 units), at a host-bound shape
    (batch 1 × 128) and a GPU-bound one (8 × 1024). ``(t_wrapped - t_bare)`` per step (and per
    FSDP unit) is the wrapper's host cost the job predictor adds per step / unit."""
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import GPT2Config, GPT2LMHeadModel

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    if not dist.is_initialized():
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    out: dict[str, Any] = {"what": "GPT-2 124 M eager step, world size 1", "torch": torch.__version__,
                           "rows": []}

    def build(kind: str) -> tuple[Any, Any]:
        torch.manual_seed(0)
        m = GPT2LMHeadModel(GPT2Config()).cuda()
        if kind == "ddp":
            m = DDP(m)
        elif kind == "ddp-find-unused":
            m = DDP(m, find_unused_parameters=True)
        elif kind == "fsdp2":
            from torch.distributed.fsdp import fully_shard

            for blk in m.transformer.h:
                fully_shard(blk)
            fully_shard(m)
        return m, torch.optim.AdamW(m.parameters(), lr=1e-4)

    for kind in ("bare", "ddp", "ddp-find-unused", "fsdp2"):
        try:
            model, opt = build(kind)
        except Exception as exc:  # report and go on (an API missing in this torch)
            out["rows"].append({"kind": kind, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        for b, s in ((1, 128), (8, 1024)):
            x = torch.randint(0, 50257, (b, s), device="cuda")

            def step(x: Any = x, model: Any = model, opt: Any = opt) -> None:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(input_ids=x, labels=x).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            try:
                for _ in range(3):
                    step()
                torch.cuda.synchronize()
                t0, e0, n = time.perf_counter(), dev.energy_mj(), 0
                while time.perf_counter() - t0 < (0.6 if quick else 1.5) or n < 5:
                    step()
                    n += 1
                torch.cuda.synchronize()
                out["rows"].append({"kind": kind, "batch": b, "seq": s, "steps": n,
                                    "step_s": (time.perf_counter() - t0) / n,
                                    "step_j": (dev.energy_mj() - e0) / 1e3 / n})
            except Exception as exc:
                out["rows"].append({"kind": kind, "batch": b, "seq": s,
                                    "error": f"{type(exc).__name__}: {exc}"[:300]})
        del model, opt
        torch.cuda.empty_cache()
    dist.destroy_process_group()
    return out


def dtensor_tp_host(dev: Any, quick: bool = False) -> dict[str, Any]:
    """Host cost of tensor parallelism through DTensor (what Hugging Face's ``tp_plan`` uses),
    measured at world size 1 (a mesh of one GPU, so no communication): BERT-base (12 layers,
    bf16 autocast, AdamW) bare and with every layer's query/key/value and first MLP linear
    column-wise and the attention output and second MLP linear row-wise parallel
    (``parallelize_module``), at batch 1 × 128 (host-bound) and 8 × 512; AdamW without foreach
    in both (a DTensor and a plain parameter cannot share a foreach kernel)."""
    import os

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )
    from transformers import BertConfig, BertForMaskedLM

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29534")
    if not dist.is_initialized():
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    mesh = init_device_mesh("cuda", (1,))
    out: dict[str, Any] = {"what": "BERT-base eager step, world size 1, DTensor TP plan",
                           "torch": torch.__version__, "rows": []}
    for kind in ("bare", "tp-dtensor"):
        torch.manual_seed(0)
        model = BertForMaskedLM(BertConfig()).cuda()
        if kind == "tp-dtensor":
            plan = {"attention.self.query": ColwiseParallel(), "attention.self.key": ColwiseParallel(),
                    "attention.self.value": ColwiseParallel(), "attention.output.dense": RowwiseParallel(),
                    "intermediate.dense": ColwiseParallel(), "output.dense": RowwiseParallel()}
            try:
                for layer in model.bert.encoder.layer:
                    parallelize_module(layer, mesh, plan)
            except Exception as exc:
                out["rows"].append({"kind": kind, "error": f"{type(exc).__name__}: {exc}"[:300]})
                continue
        # foreach=False: DTensor and plain parameters cannot share one foreach kernel
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
        for b, s in ((1, 128), (8, 512)):
            x = torch.randint(0, 30522, (b, s), device="cuda")

            def step(x: Any = x, model: Any = model, opt: Any = opt) -> None:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(input_ids=x, labels=x).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            try:
                for _ in range(3):
                    step()
                torch.cuda.synchronize()
                t0, e0, n = time.perf_counter(), dev.energy_mj(), 0
                while time.perf_counter() - t0 < (0.6 if quick else 1.5) or n < 5:
                    step()
                    n += 1
                torch.cuda.synchronize()
                out["rows"].append({"kind": kind, "batch": b, "seq": s, "steps": n,
                                    "step_s": (time.perf_counter() - t0) / n,
                                    "step_j": (dev.energy_mj() - e0) / 1e3 / n})
            except Exception as exc:
                out["rows"].append({"kind": kind, "batch": b, "seq": s,
                                    "error": f"{type(exc).__name__}: {exc}"[:300]})
        del model, opt
        torch.cuda.empty_cache()
    dist.destroy_process_group()
    return out


def compiled_grid(dev: Any, quick: bool = False, out_dir: Any = None,
                  budget_s: float = 240.0) -> dict[str, Any]:
    """Measured time and GPU energy per training step of GPT-2 124 M (random weights, bf16
    autocast, AdamW) eager and under ``torch.compile`` (inductor, default mode, and
    ``mode="reduce-overhead"``: CUDA graphs), at a host-bound shape (1 × 128) and two GPU-bound
    ones, in one session (so the eager rows give that host's speed): the data for the job
    predictor's ``compiled`` framework. Compiling is slow (on 2026-12-04 the first attempt ran
    out of a 420 s limit before a row was written), so each row is appended to
    ``out_dir/compiled_grid.jsonl`` as it is measured and shapes past ``budget_s`` are skipped."""
    import json
    from pathlib import Path

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    out: dict[str, Any] = {"what": "GPT-2 124 M step eager vs torch.compile, bf16 autocast, AdamW",
                           "torch": torch.__version__, "rows": []}
    shapes = [(1, 128), (8, 512)]
    start = time.perf_counter()
    sink = Path(out_dir) / "compiled_grid.jsonl" if out_dir else None

    def keep(row: dict[str, Any]) -> None:
        out["rows"].append(row)
        if sink is not None:
            with sink.open("a") as f:
                f.write(json.dumps(row) + "\n")

    for mode in ("eager", "default", "reduce-overhead"):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config()).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def fwd_bwd(x: Any, model: Any = model) -> Any:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss
            loss.backward()
            return loss

        fn = fwd_bwd if mode == "eager" else torch.compile(fwd_bwd, mode=None if mode == "default" else mode)
        for b, s in shapes:
            if time.perf_counter() - start > budget_s:
                keep({"mode": mode, "batch": b, "seq": s, "skipped": f"past the {budget_s:.0f} s budget"})
                continue
            x = torch.randint(0, 50257, (b, s), device="cuda")
            try:
                t_c = time.perf_counter()
                for _ in range(3):  # compile + warm up
                    fn(x)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
                compile_s = time.perf_counter() - t_c
                t0, e0, n = time.perf_counter(), dev.energy_mj(), 0
                while time.perf_counter() - t0 < (0.6 if quick else 1.2) or n < 5:
                    fn(x)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    n += 1
                torch.cuda.synchronize()
                keep({"mode": mode, "batch": b, "seq": s, "steps": n,
                      "step_s": (time.perf_counter() - t0) / n,
                      "step_j": (dev.energy_mj() - e0) / 1e3 / n, "warmup_s": compile_s})
            except Exception as exc:
                keep({"mode": mode, "batch": b, "seq": s, "error": f"{type(exc).__name__}: {exc}"[:300]})
        del model, opt
        torch.cuda.empty_cache()
    return out

"""Per-rank sweep worker: ``python -m torch.distributed.run ... -m joulebound.measure.sweep.worker``.

One launch runs MANY configurations (start-up — interpreter, torch, process group — is paid once).
Every rank builds the model from the same seed, applies the strategy, runs the warm-up steps, then
the measured steps inside an :class:`~joulebound.energy.meter.EnergyMeter` window; rank 0 writes
the configuration's row to the SQLite store right away (one transaction) and appends a line to
the launch's progress file.

Configurations of world size 1 (``single``) may share a multi-rank launch: rank 0 runs them while
the other ranks wait at a barrier on a gloo control group (so no GPU is busy-waiting).

Failures: an exception (out of memory, a bad shape, ...) on any rank is gathered on the control
group and recorded as ``status = "failed"`` with each failing rank's error; the launch goes on with
the next configuration. A crash that kills the launch is recorded by the runner (it knows the
configuration in flight from the ``--current`` marker file) and the rest is relaunched.

Measurement of one configuration:

- ``time_s``: duration of rank 0's EnergyMeter window around the measured steps (s), opened and
  closed after a barrier — the same interval as the energy, so ``energy_j / time_s`` is its power;
- ``energy_j``: every rank meters its own GPU; :func:`joulebound.energy.distributed.aggregate`
  sums each physical GPU once (``None`` without a sensor, as on a CPU-only machine);
- ``tokens`` / ``padded_tokens``: the global batch's real / all token positions over the measured
  steps (data-parallel ranks' shares summed; tensor-parallel ranks share one batch, counted once);
- ``peak_mem_bytes``: max over ranks of ``torch.cuda.max_memory_allocated`` (GPU) or of the
  process RSS right after the measured steps (CPU) — ``env_json["peak_mem_kind"]`` says which.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import socket
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

from joulebound.hw.gpu import driver_version
from joulebound.workload.grid import SweepConfig


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - non-Linux
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def environment(device: Any, world: int, backend: str | None) -> dict[str, Any]:
    """The run's environment (device, GPU name, driver, library versions, world size)."""
    import torch
    import transformers

    env: dict[str, Any] = {
        "device_type": device.type, "torch": torch.__version__,
        "transformers": transformers.__version__, "python": platform.python_version(),
        "host": socket.gethostname(), "launch_world_size": world, "dist_backend": backend,
        "cpu": platform.processor() or platform.machine(), "torch_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
        env["driver"] = driver_version()
        env["gpu_count_visible"] = torch.cuda.device_count()
        env["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
    else:
        env["gpu"] = None
        env["driver"] = None
    return env


def _pick_device(kind: str, local_rank: int) -> Any:
    import torch

    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _die_with(watch_pid: int | None) -> None:
    """Never outlive the launch: SIGKILL this rank when its parent (torchrun's agent, which starts
    ranks in their own sessions) dies (Linux ``PR_SET_PDEATHSIG``), and exit when the sweep runner
    ``watch_pid`` is gone (checked every 0.5 s). So a SIGKILLed sweep leaves no orphan ranks that
    would keep writing rows while it is re-run."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - no prctl
            pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    if watch_pid:
        import threading

        def watch() -> None:
            while True:
                try:
                    os.kill(watch_pid, 0)
                except ProcessLookupError:
                    os._exit(1)
                except PermissionError:  # exists, owned by someone else: keep going
                    pass
                time.sleep(0.5)

        threading.Thread(target=watch, name="joulebound-watch-runner", daemon=True).start()


FAULT_ENV = "JOULEBOUND_SWEEP_FAULT"


def _inject_fault(cfg: SweepConfig, rank: int, where: str) -> None:
    """Test hook: ``JOULEBOUND_SWEEP_FAULT="<id substring>=<kind>[@rank],..."`` makes a matching
    configuration fail, to exercise the failure paths for real. Kinds: ``raise`` (a RuntimeError on
    every rank at model build, like an out-of-memory error), ``exit`` (the rank's process dies with
    status 3 at model build, like an OOM-kill), ``sleep`` (60 s inside the measured window, so a
    test can kill the sweep mid-configuration), ``lag`` (1 s between storing the configuration's
    row and reporting it done, like a slow disk)."""
    spec = os.environ.get(FAULT_ENV, "")
    for item in filter(None, (x.strip() for x in spec.split(","))):
        pattern, _, kind = item.partition("=")
        kind, _, only = kind.partition("@")
        if pattern not in cfg.config_id or (only and int(only) != rank):
            continue
        if kind == "raise" and where == "build":
            raise RuntimeError(f"injected fault ({FAULT_ENV}) in {cfg.config_id}")
        if kind == "exit" and where == "build":
            os._exit(3)
        if kind == "sleep" and where == "measure":
            time.sleep(60.0)
        if kind == "lag" and where == "record":
            time.sleep(1.0)


def run_config(cfg: SweepConfig, rank: int, device: Any, meter: Any) -> dict[str, Any]:
    """Train ``cfg`` on this rank; returns this rank's measurements (see the module docstring)."""
    import torch
    import torch.distributed as dist

    from joulebound.measure.sweep.strategies import apply_strategy, batch_indices
    from joulebound.measure.sweep.workload import (
        build_model,
        make_dataset,
        make_optimizer,
        token_counts,
        train_step,
    )

    multi = cfg.world_size > 1

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if multi:
            dist.barrier()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _inject_fault(cfg, rank, "build")
    model = build_model(cfg)
    model.train()
    model = apply_strategy(model, cfg, device)
    if cfg.splits_data:  # same init everywhere (done); different dropout masks per data shard
        torch.manual_seed(cfg.seed + 7919 * (rank + 1))
    opt = make_optimizer(model, cfg)
    n_steps = cfg.warmup + cfg.steps
    data = make_dataset(cfg, n_steps)
    idx = batch_indices(cfg, rank, len(data))
    per = cfg.micro_batch
    batches = [data[idx[k * per:(k + 1) * per]] for k in range(n_steps)]
    for k in range(cfg.warmup):
        train_step(model, opt, batches[k], cfg, device)
    sync()
    meter.begin_window(cfg.config_id)
    _inject_fault(cfg, rank, "measure")
    losses = [train_step(model, opt, batches[k], cfg, device) for k in range(cfg.warmup, n_steps)]
    sync()
    window = meter.end_window(cfg.config_id)
    loss_t = torch.stack(losses)
    if cfg.splits_data:  # each rank's loss is its shard's mean; equal shards -> global mean
        dist.all_reduce(loss_t, op=dist.ReduceOp.SUM)
        loss_t = loss_t / cfg.world_size
    real = padded = 0
    for b in batches[cfg.warmup:]:
        r, p = token_counts(b)
        real, padded = real + r, padded + p
    if device.type == "cuda":
        peak, kind = int(torch.cuda.max_memory_allocated(device)), "cuda_max_memory_allocated"
    else:
        peak, kind = _rss_bytes(), "cpu_rss_after_measured_steps"
    out = {"time_s": window.duration_s, "tokens": real, "padded_tokens": padded, "peak_mem_bytes": peak,
           "peak_mem_kind": kind, "losses": [float(x) for x in loss_t.cpu()], "window": window}
    del model, opt, batches, losses
    return out


def _combine(cfg: SweepConfig, results: list[dict[str, Any] | None]) -> dict[str, Any]:
    """Job-level figures from every participating rank's result."""
    from joulebound.energy.distributed import combine

    ok = [r for r in results if r is not None]
    tokens = sum(r["tokens"] for r in ok) if cfg.splits_data else ok[0]["tokens"]
    padded = sum(r["padded_tokens"] for r in ok) if cfg.splits_data else ok[0]["padded_tokens"]
    job = combine([[r["window"].to_dict()] for r in ok])[0]
    return {"time_s": ok[0]["time_s"], "tokens": tokens, "padded_tokens": padded,
            "peak_mem_bytes": max(r["peak_mem_bytes"] for r in ok),
            "peak_mem_kind": ok[0]["peak_mem_kind"], "losses": ok[0]["losses"],
            "energy_j": job.energy_j,
            "energy_provenance": job.provenance if job.energy_j is not None else None,
            "energy_flags": job.flags, "energy_backend": job.backend,
            "cpu_energy_j": job.cpu_energy_j, "gpus_metered": len(job.devices)}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m joulebound.measure.sweep.worker")
    ap.add_argument("--plan", required=True, help="JSON file: list of configuration dicts")
    ap.add_argument("--db", required=True, help="SQLite store")
    ap.add_argument("--sweep", required=True, help="sweep name")
    ap.add_argument("--progress", help="append one JSON line per finished configuration (rank 0)")
    ap.add_argument("--current", help="rank 0 writes the configuration in flight here")
    ap.add_argument("--energy", default="auto", help="EnergyMeter backend (auto, nvml, none, simulated)")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--timeout-s", type=float, default=600.0, help="training collective timeout (s)")
    ap.add_argument("--watch-pid", type=int, help="exit when this process (the runner) is gone")
    return ap.parse_args(argv)


def _init_distributed(device: Any, timeout_s: float) -> tuple[str, Any]:
    """Join the launch's process group; returns the training backend and the control group."""
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = timedelta(seconds=timeout_s)
    if device.type == "cuda":
        dist.init_process_group(backend, timeout=timeout, device_id=device)
    else:
        dist.init_process_group(backend, timeout=timeout)
    # control plane (result gathering, ranks idling while rank 0 runs a single-GPU config):
    # gloo, so no GPU busy-waits, with a long timeout, since a single config may run for long
    return backend, dist.new_group(backend="gloo", timeout=timedelta(days=7))


def _run_safely(cfg: SweepConfig, rank: int, device: Any, meter: Any
                ) -> tuple[dict[str, Any] | None, str | None]:
    """:func:`run_config` with its failure recorded as text (``"out of memory: ..."`` for an
    OOM) instead of raised, the meter's open windows cancelled and memory released."""
    import torch

    mine: dict[str, Any] | None = None
    err: str | None = None
    try:
        mine = run_config(cfg, rank, device, meter)
    except Exception as exc:
        oom = isinstance(exc, torch.OutOfMemoryError)
        err = f"{'out of memory: ' if oom else ''}{type(exc).__name__}: {exc}"
        if os.environ.get("JOULEBOUND_SWEEP_TRACEBACK"):
            traceback.print_exc()
        for name in list(meter.open_windows):
            meter.end_window(name, cancel=True)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return mine, err


def _record_result(store: Any, sweep: str, cfg: SweepConfig, gathered: list[Any],
                   env: dict[str, Any]) -> str:
    """Rank 0: one row for ``cfg`` from every rank's ``(result, error)``; returns the status."""
    errors = [f"rank {r}: {e}" for r, (_, e) in enumerate(gathered) if e]
    row_env = dict(env, world_size=cfg.world_size, warmup=cfg.warmup, config=cfg.to_dict())
    if errors:
        store.record(sweep, cfg, status="failed", error="; ".join(errors), env=row_env)
        return "failed"
    job = _combine(cfg, [m for m, _ in gathered])
    row_env.update(peak_mem_kind=job["peak_mem_kind"], losses=job["losses"],
                   energy_flags=job["energy_flags"], energy_backend=job["energy_backend"],
                   cpu_energy_j=job["cpu_energy_j"], gpus_metered=job["gpus_metered"],
                   time_kind="rank-0 EnergyMeter window between barriers around measured steps")
    store.record(sweep, cfg, status="ok", time_s=job["time_s"],
                 energy_j=job["energy_j"], energy_provenance=job["energy_provenance"],
                 tokens=job["tokens"], padded_tokens=job["padded_tokens"],
                 peak_mem_bytes=job["peak_mem_bytes"], env=row_env)
    return "ok"


def _warm_start(plan: list[SweepConfig]) -> None:
    """Import the plan's model classes on every rank now, and freeze what start-up allocated out
    of the cyclic garbage collector.

    Imported lazily instead, each rank would pay the few CPU seconds of a transformers model
    import at its first configuration of that architecture, while the other ranks wait for it at
    the first collective. Frozen (:func:`gc.freeze`), the ~400 000 objects of torch and
    transformers are no longer traversed by the :func:`gc.collect` after every configuration
    (~0.3 s each on a CPU core); each configuration's own garbage still is collected."""
    from joulebound.measure.sweep.workload import model_classes

    for arch in dict.fromkeys(c.arch for c in plan):
        try:
            model_classes(arch)
        except ValueError:  # an unknown architecture fails its own configurations
            pass
    gc.collect()
    gc.freeze()


def main(argv: list[str] | None = None) -> int:
    """Entry point of one rank (see the module docstring)."""
    args = _parse_args(argv)
    _die_with(args.watch_pid)

    import torch.distributed as dist

    from joulebound.energy.meter import EnergyMeter
    from joulebound.jobs.runstore import SweepStore
    from joulebound.measure.sweep.workload import DATA_NOTE

    plan = [SweepConfig.from_dict(d) for d in json.loads(Path(args.plan).read_text())]
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = _pick_device(args.device, local_rank)
    backend = None
    ctrl = None
    if world > 1:
        backend, ctrl = _init_distributed(device, args.timeout_s)
    gpus = [device.index] if device.type == "cuda" else None
    meter = EnergyMeter(args.energy, gpus=gpus, interval_s=0.1)
    store = SweepStore(args.db) if rank == 0 else None
    env = environment(device, world, backend)
    env["energy_notes"] = meter.notes
    env["data"] = DATA_NOTE
    _warm_start(plan)
    try:
        for cfg in plan:
            if cfg.world_size not in (1, world):
                raise RuntimeError(f"{cfg.config_id} needs {cfg.world_size} ranks; launch has {world}")
            if rank == 0 and args.current:
                Path(args.current).write_text(cfg.config_id)
            if world > 1:
                # no rank starts a configuration (and may die in it) before rank 0 has reported
                # the previous one done and marked this one in flight: a launch that dies is then
                # blamed on the configuration that was running, never on the one before it
                dist.barrier(group=ctrl)
            mine: dict[str, Any] | None = None
            err: str | None = None
            if cfg.world_size == world or rank == 0:
                mine, err = _run_safely(cfg, rank, device, meter)
            if cfg.world_size > 1:
                gathered: list[Any] = [None] * world
                dist.all_gather_object(gathered, (mine, err), group=ctrl)
            else:
                gathered = [(mine, err)]
                if world > 1:
                    dist.barrier(group=ctrl)
            if rank != 0:
                continue
            status = _record_result(store, args.sweep, cfg, gathered, env)
            _inject_fault(cfg, rank, "record")
            if args.progress:
                with open(args.progress, "a") as fh:
                    fh.write(json.dumps({"config_id": cfg.config_id, "status": status}) + "\n")
    finally:
        meter.close()
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

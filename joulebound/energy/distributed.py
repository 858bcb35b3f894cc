"""Multi-GPU, multi-rank energy: which GPUs a rank owns, and job totals that count each GPU once.

Under ``torchrun`` each rank usually drives one GPU, ``LOCAL_RANK``. :func:`default_gpus` picks it
(or every visible GPU outside torchrun). :func:`aggregate` gathers every rank's windows with
``torch.distributed.all_gather_object`` and sums energy over *unique physical devices* (by UUID).
So a job's total is right whether one rank meters all GPUs, every rank meters its own GPU, or every
rank meters all GPUs (the CodeCarbon #544 double-counting pitfall: N ranks x N GPUs counted N
times).

Windows are matched across ranks by name and occurrence: the k-th window called ``"step"`` on
rank 0 is combined with the k-th ``"step"`` on rank 1. When several ranks report the same GPU for
one window, the reading with the longest window is kept (ties: lowest rank) and the others are
counted in ``duplicates``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from joulebound.core.provenance import MODELED
from joulebound.energy.meter import EnergyMeter
from joulebound.energy.ranks import default_gpus
from joulebound.energy.results import DeviceEnergy, WindowResult
from joulebound.hw.gpu import visible_device_ids

__all__ = ["JobWindow", "aggregate", "combine", "default_gpus", "visible_device_ids"]


@dataclass
class JobWindow(WindowResult):
    """A window combined over ranks: ``energy_j`` sums each physical GPU once.

    Attributes (besides :class:`WindowResult`'s): ``ranks`` that reported the window,
    ``duplicates`` readings dropped because another rank reported the same GPU.
    """

    ranks: list[int] = field(default_factory=list)
    duplicates: int = 0


def combine(per_rank: Sequence[Sequence[WindowResult | dict[str, Any]]]) -> list[JobWindow]:
    """Combine windows from each rank (pure function; :func:`aggregate` gathers, then calls this).

    Args:
        per_rank: ``per_rank[r]`` = the windows rank ``r`` finished, in order.
    """
    keyed: dict[tuple[str, int], list[WindowResult]] = {}
    order: list[tuple[str, int]] = []
    for rank_windows in per_rank:
        seen: dict[str, int] = {}
        for w in rank_windows:
            w = WindowResult.from_dict(w) if isinstance(w, dict) else w
            k = seen.get(w.name, 0)
            seen[w.name] = k + 1
            key = (w.name, k)
            if key not in keyed:
                keyed[key] = []
                order.append(key)
            keyed[key].append(w)
    out = []
    for key in order:
        ws = keyed[key]
        best: dict[str, tuple[float, int, DeviceEnergy]] = {}
        n_readings = 0
        for w in ws:
            for d in w.devices:
                n_readings += 1
                cand = (w.duration_s, -w.rank, d)
                if d.uuid not in best or cand[:2] > best[d.uuid][:2]:
                    best[d.uuid] = cand
        devices = [best[u][2] for u in sorted(best)]
        gpu = [d.energy_j for d in devices if d.kind == "gpu"]
        cpu = [d.energy_j for d in devices if d.kind != "gpu"]
        provs = sorted({w.provenance for w in ws if w.provenance and
                        any(d.kind == "gpu" for d in w.devices)})
        flags: list[str] = []
        for w in ws:
            flags += [f for f in w.flags if f not in flags]
        if devices and "no_energy_sensor" in flags:
            flags.remove("no_energy_sensor")  # some rank had a sensor
        start = min(w.start_s for w in ws)
        end = max(w.end_s for w in ws)
        gpu_devs = [d for d in devices if d.kind == "gpu"]
        known = bool(gpu) and all(e is not None for e in gpu)
        unc = (float(sum(d.uncertainty_j or 0.0 for d in gpu_devs))
               if known and any(d.uncertainty_j is not None for d in gpu_devs) else None)
        out.append(JobWindow(
            name=key[0], start_s=start, end_s=end, duration_s=end - start,
            energy_j=float(sum(gpu)) if gpu and all(e is not None for e in gpu) else None,  # type: ignore[arg-type]
            devices=devices,
            provenance=MODELED if MODELED in provs else (provs[0] if provs else None),
            flags=flags,
            cpu_energy_j=float(sum(cpu)) if cpu and all(e is not None for e in cpu) else None,  # type: ignore[arg-type]
            rank=-1, host=",".join(sorted({w.host for w in ws})),
            backend=",".join(sorted({w.backend for w in ws})),
            ranks=sorted({w.rank for w in ws}), duplicates=n_readings - len(devices),
            energy_uncertainty_j=unc))
    return out


def aggregate(windows: EnergyMeter | Sequence[WindowResult] | None = None,
              group: Any = None) -> list[JobWindow]:
    """Gather every rank's windows and count each physical GPU once (collective: call on all ranks).

    Args:
        windows: this rank's meter (its finished ``results``: the last ``keep_results`` windows,
            with a warning when older ones were dropped), a list of windows, or ``None`` for a
            rank that holds no meter.
        group: a ``torch.distributed`` process group (default: the world).

    Returns the combined windows (the same list on every rank). Without an initialised process
    group it combines the local windows only.
    """
    if isinstance(windows, EnergyMeter):
        local = list(windows.results)
        if windows.results_dropped:
            warnings.warn(f"aggregate(): the meter kept its last {len(local)} windows "
                          f"(keep_results); {windows.results_dropped} older ones are only in its "
                          "store", stacklevel=2)
    else:
        local = list(windows or [])
    payload = [w.to_dict() for w in local]
    try:
        import torch.distributed as dist

        ready = dist.is_available() and dist.is_initialized()
    except ImportError:  # pragma: no cover - torch is optional
        ready = False
    if not ready:
        return combine([payload])
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, payload, group=group)
    return combine([g or [] for g in gathered])

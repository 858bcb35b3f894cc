"""Choose the parallelism strategy and GPU count that minimise training energy under a deadline.

Every candidate (strategy × GPU count) is priced with the pre-run law
(:func:`~joulebound.scaling.defaults.predict_job`): energy (J, modeled, with a 90 % interval) and
wall time (s, modeled). The advice is the lowest-energy candidate whose time meets the deadline;
when none does, the fastest candidate is returned with ``meets_deadline = False``.

Candidates whose model states do not fit in GPU memory are kept in the table with
``fits_memory = False`` and never advised: weights + gradients + Adam state take 16 bytes per
parameter (fp32, or mixed precision with fp32 master weights), held whole on every GPU by DDP and
single-GPU training and split N ways by FSDP and TP. Activations are not counted (micro-batching
and activation recomputation can shrink them at the same FLOPs), so ``fits_memory`` is necessary,
not sufficient.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import JouleboundError
from .defaults import config_frame, predict_job
from .hardware import get_hw
from .speedup import normalize_strategy

#: bytes of weights + gradients + Adam moments per parameter (4 + 4 + 8)
STATE_BYTES_PER_PARAM = 16


def state_bytes_per_gpu(params: float, strategy: str, gpus: int) -> float:
    """Model-state bytes each GPU holds (see module docstring)."""
    split = normalize_strategy(strategy) in ("fsdp", "tp", "pp")
    return STATE_BYTES_PER_PARAM * params / (gpus if split else 1)


@dataclass
class Candidate:
    strategy: str
    gpus: int
    energy_j: float
    energy_lo_j: float
    energy_hi_j: float
    time_s: float
    eta_par: float
    meets_deadline: bool
    state_bytes_per_gpu: float = float("nan")
    fits_memory: bool = True


def gpu_counts(max_gpus: int) -> list[int]:
    """1, 2, 4, … up to ``max_gpus`` (and ``max_gpus`` itself)."""
    if max_gpus < 1:
        raise JouleboundError(f"--max-gpus must be >= 1 (got {max_gpus})")
    out, n = [], 1
    while n <= max_gpus:
        out.append(n)
        n *= 2
    if out[-1] != max_gpus:
        out.append(max_gpus)
    return out


def advise(tokens: float, deadline_s: float, max_gpus: int = 8,
           strategies: tuple[str, ...] = ("ddp", "fsdp", "tp"), coefficients: str | None = None,
           **config) -> tuple[Candidate, list[Candidate]]:  # noqa: ANN003
    """(best, all candidates sorted by energy). ``config`` as for ``predict_job`` minus gpus/strategy."""
    if not deadline_s > 0:  # also NaN
        raise JouleboundError(f"--deadline must be > 0 seconds (got {deadline_s})")
    strategies = tuple(normalize_strategy(s) for s in strategies)
    if not strategies or "single" in strategies:
        raise JouleboundError("--strategies lists the multi-GPU strategies to compare (ddp, fsdp, tp, "
                              f"pp), got {','.join(strategies) or 'none'}; the 1-GPU run is always "
                              "included")
    params = float(config_frame(**config)["params"].iloc[0])
    mem = get_hw(config.get("device", "rtx2080ti")).mem_bytes
    cands: list[Candidate] = []
    for n in gpu_counts(max_gpus):
        for s in (("single",) if n == 1 else strategies):
            p = predict_job(tokens, gpus=n, strategy=s, coefficients=coefficients, **config)
            sb = state_bytes_per_gpu(params, s, n)
            cands.append(Candidate(s, n, p.energy_j, p.energy_lo_j, p.energy_hi_j, p.time_s,
                                   p.eta_par, p.time_s <= deadline_s, sb, not sb > mem))
    cands.sort(key=lambda c: c.energy_j)
    fit = [c for c in cands if c.fits_memory]
    if not fit:
        raise JouleboundError(f"the model states ({STATE_BYTES_PER_PARAM} B/parameter × {params:.3g} "
                              f"parameters) do not fit on up to {max_gpus} GPUs of {mem / 2**30:.0f} GiB; "
                              "raise --max-gpus or pick a larger GPU")
    ok = [c for c in fit if c.meets_deadline]
    best = ok[0] if ok else min(fit, key=lambda c: c.time_s)
    return best, cands


def to_json(best: Candidate, cands: list[Candidate]) -> dict:
    return {"best": asdict(best), "candidates": [asdict(c) for c in cands], "provenance": "modeled"}

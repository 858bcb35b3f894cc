"""Choose the parallelism strategy and GPU count that minimise training energy under a deadline.

:func:`advise` (the default, used by ``joulebound advise``) prices every candidate (1 GPU, and
each strategy at 2, 4, … ``max_gpus`` GPUs) with the mechanistic predictor
(:mod:`joulebound.jobs.mechanistic`): wall time and GPU + host energy (J, modeled, 90 %
intervals) and the per-GPU memory (weights, gradients, optimizer state, activations) against the
device memory. The training recipe is held fixed: the **global batch** (sequences per optimizer
step) and the total tokens; each candidate splits the global batch over its data-parallel ranks
and, when ``batch`` (the largest per-GPU micro-batch) is given, accumulates gradients. The advice
is the lowest-energy candidate that fits in memory and meets the deadline — one GPU when that is
cheapest; when none meets it, the fastest that fits, with ``meets_deadline = False``.

:func:`advise_law` is the legacy path (``joulebound advise --law prerun``): the pre-run energy law
with model states only (16 bytes per parameter, activations not counted).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MODELED
from joulebound.jobs.design import config_frame
from joulebound.jobs.lawinputs import law_device
from joulebound.jobs.strategy import normalize_strategy

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


def _checked_request(deadline_s: float, strategies: tuple[str, ...]) -> tuple[str, ...]:
    """The multi-GPU ``strategies`` normalised, after checking the deadline (s) and the list.

    Raises:
        JouleboundError: a deadline that is not > 0 (or NaN), no strategy, or ``single`` listed.
    """
    if not deadline_s > 0:  # also NaN
        raise JouleboundError(f"--deadline must be > 0 seconds (got {deadline_s})")
    strategies = tuple(normalize_strategy(s) for s in strategies)
    if not strategies or "single" in strategies:
        raise JouleboundError("--strategies lists the multi-GPU strategies to compare (ddp, fsdp, tp, "
                              f"pp), got {','.join(strategies) or 'none'}; the 1-GPU run is always "
                              "included")
    return strategies


def advise_law(tokens: float, deadline_s: float, max_gpus: int = 8,
               strategies: tuple[str, ...] = ("ddp", "fsdp", "tp"), coefficients: str | None = None,
               law=None, **config) -> tuple[Candidate, list[Candidate]]:
    """(best, all candidates sorted by energy) by the pre-run law ``law`` (default: the one of
    ``coefficients``, or the built-in one). ``config``: keywords of
    :func:`~joulebound.jobs.design.config_frame` minus gpus/strategy."""
    from joulebound.jobs.defaults import load_default

    strategies = _checked_request(deadline_s, strategies)
    if law is None:
        law, _ = load_default(coefficients)
    params = float(config_frame(**config)["params"].iloc[0])
    spec = law_device(config.get("device", "rtx2080ti"))
    mem = float(spec.memory_bytes) if spec.memory_bytes else float("nan")
    cands: list[Candidate] = []
    for n in gpu_counts(max_gpus):
        for s in (("single",) if n == 1 else strategies):
            p = law.predict_config(tokens, gpus=n, strategy=s, **config)
            sb = state_bytes_per_gpu(params, s, n)
            cands.append(Candidate(s, n, p.total_energy_j, p.total_energy_lo_j, p.total_energy_hi_j,
                                   p.time_s, p.step["eta_par"], p.time_s <= deadline_s, sb,
                                   not sb > mem))
    cands.sort(key=lambda c: c.energy_j)
    fit = [c for c in cands if c.fits_memory]
    if not fit:
        raise JouleboundError(f"the model states ({STATE_BYTES_PER_PARAM} B/parameter × {params:.3g} "
                              f"parameters) do not fit on up to {max_gpus} GPUs of {mem / 2**30:.0f} GiB; "
                              "raise --max-gpus or pick a larger GPU")
    ok = [c for c in fit if c.meets_deadline]
    best = ok[0] if ok else min(fit, key=lambda c: c.time_s)
    return best, cands


def check_law(law: str) -> None:
    """The advisor prices candidates with the mechanistic predictor or the pre-run law only."""
    if str(law).strip().lower() != "prerun":
        raise JouleboundError("advise --law supports prerun only (the legacy law with built-in coefficients)")


def advise_job(job, deadline_s: float, max_gpus: int = 8,
               strategies: tuple[str, ...] = ("ddp", "fsdp", "tp", "pp"), law: str | None = None,
               coefficients: str | None = None, prm=None
               ) -> tuple[Option, list[Option]] | tuple[Candidate, list[Candidate]]:
    """``joulebound advise`` for one job: :func:`advise` (the mechanistic predictor with ``prm``,
    default the calibration at ``coefficients`` or the shipped one), or with ``law`` ``prerun``
    :func:`advise_law` on the job's configuration (its global batch; pipelines are not priced by
    the law, so ``pp`` is dropped from ``strategies``)."""
    if law is None:
        if prm is None:
            from joulebound.jobs.mechanistic import load_params

            prm = load_params(coefficients)
        return advise(job, deadline_s, max_gpus, strategies, prm)
    from joulebound.jobs.design import law_config

    check_law(law)
    config = law_config(job)  # resolves the job: an impossible one is refused here
    if not job.tokens:
        raise JouleboundError("--law needs --tokens")
    for k in ("gpus", "strategy"):
        config.pop(k)
    return advise_law(float(job.tokens), deadline_s, max_gpus,
                      tuple(s for s in strategies if s != "pp") or ("ddp",),
                      coefficients=coefficients, **config)


def to_json(best: Candidate, cands: list[Candidate]) -> dict:
    return {"best": asdict(best), "candidates": [asdict(c) for c in cands], "provenance": MODELED}


# ---------------------------------------------------------------------------------------------
# mechanistic advisor


@dataclass
class Option:
    """One (strategy × GPU count) candidate, modeled (s, J, bytes)."""

    strategy: str
    gpus: int
    feasible: bool
    time_s: float = float("nan")
    time_lo_s: float = float("nan")
    time_hi_s: float = float("nan")
    gpu_energy_j: float = float("nan")
    host_energy_j: float = float("nan")
    energy_j: float = float("nan")
    energy_lo_j: float = float("nan")
    energy_hi_j: float = float("nan")
    micro_batch: int = 0
    grad_accum: int = 0
    memory_gib: float = float("nan")
    fits_memory: bool = False
    meets_deadline: bool = False
    comm_share: float = float("nan")
    reason: str = ""
    label: str = ""


def _micro(per_rank: int, cap: int | None, pp: int) -> int:
    """Largest divisor of ``per_rank`` not above the cap (a pipeline keeps >= 2·pp micro-batches)."""
    target = per_rank if cap is None else min(cap, per_rank)
    if pp > 1:
        target = min(target, max(1, per_rank // (2 * pp)))
    for b in range(max(1, target), 0, -1):
        if per_rank % b == 0:
            return b
    return 1


def candidates_for(job, max_gpus: int, strategies: tuple[str, ...]):
    """(strategy, gpus, resolved job or None, reason) for every candidate of :func:`advise`: each
    candidate is resolved here, once (:func:`~joulebound.jobs.job.resolve`)."""
    from dataclasses import replace

    from joulebound.jobs.job import resolve

    base = resolve(replace(job, gpus=1, strategy="single", tp=None, pp=None, pp_stages=None))
    gb = base.global_batch
    cap = job.batch if job.global_batch is not None else None
    out = []
    for n in gpu_counts(max_gpus):
        for s in (("single",) if n == 1 else strategies):
            tp = n if s == "tp" else 1
            pp = n if s == "pp" else 1
            dp = n // (tp * pp)
            if gb % dp:
                out.append((s, n, None, f"global batch {gb} not divisible by {dp} data-parallel ranks"))
                continue
            per_rank = gb // dp
            b = _micro(per_rank, cap, pp)
            cand = replace(job, gpus=n, strategy=s, tp=None, pp=None, pp_stages=None, batch=b,
                           global_batch=None, grad_accum=per_rank // b)
            try:
                r = resolve(cand)
            except JouleboundError as exc:
                out.append((s, n, None, str(exc)))
                continue
            out.append((s, n, r, ""))
    return out


def advise(job, deadline_s: float, max_gpus: int = 8,
           strategies: tuple[str, ...] = ("ddp", "fsdp", "tp", "pp"), prm=None
           ) -> tuple[Option, list[Option]]:
    """(advice, every candidate sorted by energy) for ``job`` (a :class:`~joulebound.jobs.job.Job`
    whose ``batch``/``global_batch`` fix the global batch and whose ``tokens`` the work)."""
    from joulebound.jobs.mechanistic import load_params, predict_resolved

    strategies = _checked_request(deadline_s, strategies)
    if not job.tokens:
        raise JouleboundError("advise needs --tokens (the training tokens in total) to compare "
                              "candidates against the deadline")
    prm = prm or load_params()
    cands = candidates_for(job, max_gpus, strategies)
    ok = [c for c in cands if c[2] is not None]
    preds = {}
    if ok:  # job -> resolved candidates -> one batched prediction of all of them
        for (s, n, _, _), p in zip(ok, predict_resolved([c[2] for c in ok], prm), strict=True):
            preds[(s, n)] = p
    opts = []
    for s, n, _cand, why in cands:
        p = preds.get((s, n))
        if p is None:
            opts.append(Option(s, n, False, reason=why, label=s))
            continue
        fits = p.fits_memory
        o = Option(s, n, fits, p.time_s, p.time_lo_s, p.time_hi_s, p.gpu_energy_j, p.host_energy_j,
                   p.total_energy_j, p.total_energy_lo_j, p.total_energy_hi_j, p.micro_batch,
                   p.grad_accum, p.memory["total"] / 2**30, fits, p.time_s <= deadline_s,
                   p.step["comm_s"] / p.step["time_s"], "" if fits else "does not fit in GPU memory",
                   p.strategy)
        opts.append(o)
    opts.sort(key=lambda o: (not o.feasible, o.energy_j if o.feasible else float("inf")))
    feas = [o for o in opts if o.feasible]
    if not feas:
        reasons = "; ".join(sorted({f"{o.strategy}x{o.gpus}: {o.reason}" for o in opts})[:4])
        raise JouleboundError(f"no candidate on up to {max_gpus} GPUs is feasible ({reasons}); raise "
                              "--max-gpus, use --recompute or a larger GPU")
    meet = [o for o in feas if o.meets_deadline]
    best = meet[0] if meet else min(feas, key=lambda o: o.time_s)
    return best, opts


def options_json(best: Option, opts: list[Option]) -> dict:
    return {"best": asdict(best), "candidates": [asdict(o) for o in opts], "provenance": MODELED,
            "predictor": "mechanistic"}

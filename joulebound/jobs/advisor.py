"""Choose the parallelism strategy and GPU count that minimise training energy under a deadline.

:func:`advise` (the default, used by ``joulebound advise``) prices every candidate (1 GPU, and
each strategy at 2, 4, … ``max_gpus`` GPUs) with the mechanistic predictor
(:mod:`joulebound.jobs.mechanistic`): wall time and GPU + host energy (J, modeled, 90 %
intervals) and the per-GPU memory (weights, gradients, optimizer state, activations) against the
device memory. The training recipe is held fixed: the **global batch** (sequences per optimizer
step) and the total tokens; each candidate splits the global batch over its data-parallel ranks
and, when ``batch`` (the largest per-GPU micro-batch) is given, accumulates gradients.

The advice (:func:`decide`) is the lowest-energy candidate that fits in memory and meets the
deadline with the **upper bound** of its 90 % time interval (``"ok"``); else the lowest-energy
one whose central time meets it (``"may miss"``); else the fastest that fits. Candidates share
most of the predictor's error, so each is compared with the advice by the 90 % interval of the
**ratio** of their energies, from correlated draws of the predictor's error terms
(:func:`error_terms`, :func:`correlated_draws`, :func:`compare`): ``indistinguishable`` when
that interval spans 1.

:func:`search_layouts` (``joulebound advise --layouts``) searches Megatron 3D layouts at large
GPU counts (tp × pp × dp × micro-batch × recompute × sequence parallelism × distributed
optimizer), memory first, then one batched prediction of the layouts that fit.

:func:`advise_law` is the legacy path (``joulebound advise --law prerun``): the pre-run energy law
with model states only (16 bytes per parameter, activations not counted). docs/advise.md
explains the comparison and the search.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

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

#: the 90 % interval's z (two-sided normal), as the predictor's intervals
Z90 = 1.6449
#: correlated draws per comparison (fixed seed: the same advice every run)
DRAWS = 4000
#: deadline verdicts: the upper bound of the 90 % time interval within the deadline; only the
#: central estimate within it; not even that
OK, MAY_MISS, MISS = "ok", "may miss", "miss"


@dataclass
class Option:
    """One candidate (a strategy × GPU count, or a 3D layout), modeled (s, J, bytes).

    ``meets_deadline``: the upper bound of the 90 % time interval is within the deadline
    (``deadline`` says ``"ok"``; ``"may miss"``: only the central estimate is; ``"miss"``).
    ``energy_ratio`` (``_lo`` / ``_hi``): this candidate's energy over the advice's, with the
    90 % interval of that ratio from correlated draws of the predictor's error terms (shared
    terms cancel, see :func:`error_terms`); ``indistinguishable``: that interval spans 1.
    """

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
    deadline: str = MISS
    energy_ratio: float = float("nan")
    energy_ratio_lo: float = float("nan")
    energy_ratio_hi: float = float("nan")
    indistinguishable: bool = False
    tp: int = 1
    pp: int = 1
    dp: int = 1
    recompute: str = "none"
    sequence_parallel: bool = False
    distributed_optimizer: bool = False


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


# -- the predictor's error, term by term --------------------------------------------------------

#: error terms every candidate of one job shares (the same framework, host, GPU and its power
#: model, the same step-size extrapolation): one draw for all candidates, so they cancel in a
#: ratio as far as the candidates' shares of them agree
SHARED_TERMS = ("compute", "overhead", "device", "power", "size")
#: error terms of a candidate's own (its collectives, its pipeline, its GPU count beyond the
#: calibration): an independent draw per candidate
OWN_TERMS = ("comm", "pipeline", "bubble", "scale", "wrapper")


def error_terms(r, step: dict, prm, device: str) -> tuple[dict[str, float], dict[str, float]]:
    """The log-space standard deviations of one prediction's time and energy, term by term:
    ``({term: σ} for time, {term: σ} for energy)`` — the terms of
    :func:`joulebound.jobs.mechanistic.interval_terms` (their one home), whose root-sum-square
    is the prediction's interval. ``step`` is the prediction's breakdown of one step
    (:attr:`JobPrediction.step <joulebound.jobs.prediction.JobPrediction.step>`)."""
    from joulebound.jobs.mechanistic import interval_terms

    t, e = interval_terms(r, step, prm, device)
    return {k: v for k, (v, _) in t.items()}, {k: v for k, (v, _) in e.items()}


def correlated_draws(terms: list[dict[str, float]], n: int = DRAWS, seed: int = 0) -> np.ndarray:
    """Draws of the log-error of each of several predictions of one job (rows: predictions,
    columns: ``n`` draws): one standard-normal draw per shared term (:data:`SHARED_TERMS`, and a
    ``strategy:<kinds>`` term per set of kinds) for all predictions, an independent one per
    prediction for its own terms (:data:`OWN_TERMS`); each scaled by the prediction's σ of that
    term (:func:`error_terms`)."""
    keys: dict[str, int] = {}
    cols: list[list[tuple[int, float]]] = []
    for i, tm in enumerate(terms):
        row = []
        for k, v in tm.items():
            key = k if (k in SHARED_TERMS or k.startswith("strategy:")) else f"{k}#{i}"
            row.append((keys.setdefault(key, len(keys)), v))
        cols.append(row)
    coef = np.zeros((len(terms), max(len(keys), 1)))
    for i, row in enumerate(cols):
        for j, v in row:
            coef[i, j] = v
    z = np.random.default_rng(seed).standard_normal((coef.shape[1], n))
    return coef @ z


def ratio_interval(log_ratio: float, draws_a: np.ndarray, draws_b: np.ndarray
                   ) -> tuple[float, float, float]:
    """``(ratio, lo, hi)``: the central ratio ``exp(log_ratio)`` of two predictions and the 90 %
    interval of the true ratio from their correlated draws (:func:`correlated_draws`)."""
    d = log_ratio + draws_a - draws_b
    lo, hi = np.quantile(d, [0.05, 0.95])
    return float(np.exp(log_ratio)), float(np.exp(lo)), float(np.exp(hi))


# -- deciding ---------------------------------------------------------------------------------


def _option(r, p, deadline_s: float, label: str | None = None) -> Option:
    """The :class:`Option` of a resolved candidate ``r`` and its prediction ``p``."""
    fits = bool(p.fits_memory)
    verdict = OK if p.time_hi_s <= deadline_s else MAY_MISS if p.time_s <= deadline_s else MISS
    return Option(r.strategy if r.gpus > 1 else "single", r.gpus, fits, p.time_s, p.time_lo_s,
                  p.time_hi_s, p.gpu_energy_j, p.host_energy_j, p.total_energy_j,
                  p.total_energy_lo_j, p.total_energy_hi_j, p.micro_batch, p.grad_accum,
                  p.memory["total"] / 2**30, fits, verdict == OK,
                  p.step["comm_s"] / p.step["time_s"], "" if fits else "does not fit in GPU memory",
                  label or p.strategy, verdict, tp=r.tp, pp=r.pp, dp=r.dp, recompute=r.recompute,
                  sequence_parallel=r.sequence_parallel,
                  distributed_optimizer=r.distributed_optimizer)


def decide(opts: list[Option]) -> Option:
    """The advice among feasible ``opts``: the least energy among those whose 90 % upper time
    bound meets the deadline (``ok``); else the least energy among those whose central time
    meets it (``may miss``); else the fastest."""
    feas = [o for o in opts if o.feasible]
    for verdict in (OK, MAY_MISS):
        tier = [o for o in feas if o.deadline == verdict]
        if tier:
            return min(tier, key=lambda o: o.energy_j)
    return min(feas, key=lambda o: o.time_s)


def compare(best: Option, opts: list[Option], preds: dict[int, tuple], prm,
            limit: int = 64) -> None:
    """Fill every feasible option's energy ratio to ``best`` and its 90 % interval (correlated
    draws, :func:`correlated_draws`) and ``indistinguishable`` (the interval spans 1), for the
    ``limit`` options cheapest in energy (and the advice); ``preds`` maps ``id(option)`` to
    ``(resolved, prediction)``."""
    feas = sorted((o for o in opts if o.feasible), key=lambda o: o.energy_j)[:limit]
    if best not in feas:
        feas.append(best)
    terms = []
    for o in feas:
        r, p = preds[id(o)]
        terms.append(error_terms(r, p.step, prm, p.device)[1])
    draws = correlated_draws(terms)
    ib = feas.index(best)
    for i, o in enumerate(feas):
        ratio, lo, hi = ratio_interval(float(np.log(o.energy_j / best.energy_j)), draws[i], draws[ib])
        o.energy_ratio, o.energy_ratio_lo, o.energy_ratio_hi = ratio, lo, hi
        o.indistinguishable = o is not best and lo <= 1.0 <= hi


def advise(job, deadline_s: float, max_gpus: int = 8,
           strategies: tuple[str, ...] = ("ddp", "fsdp", "tp", "pp"), prm=None
           ) -> tuple[Option, list[Option]]:
    """(advice, every candidate sorted by energy) for ``job`` (a :class:`~joulebound.jobs.job.Job`
    whose ``batch``/``global_batch`` fix the global batch and whose ``tokens`` the work); the
    advice by :func:`decide`, each candidate compared with it by :func:`compare`."""
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
        for (s, n, r, _), p in zip(ok, predict_resolved([c[2] for c in ok], prm), strict=True):
            preds[(s, n)] = (r, p)
    opts, by_id = [], {}
    for s, n, _cand, why in cands:
        hit = preds.get((s, n))
        if hit is None:
            opts.append(Option(s, n, False, reason=why, label=s))
            continue
        o = _option(hit[0], hit[1], deadline_s)
        o.strategy = s
        by_id[id(o)] = hit
        opts.append(o)
    opts.sort(key=lambda o: (not o.feasible, o.energy_j if o.feasible else float("inf")))
    if not any(o.feasible for o in opts):
        reasons = "; ".join(sorted({f"{o.strategy}x{o.gpus}: {o.reason}" for o in opts})[:4])
        raise JouleboundError(f"no candidate on up to {max_gpus} GPUs is feasible ({reasons}); raise "
                              "--max-gpus, use --recompute or a larger GPU")
    best = decide(opts)
    compare(best, opts, by_id, prm)
    return best, opts


def options_json(best: Option, opts: list[Option], **extra) -> dict:
    return {"best": asdict(best), "candidates": [asdict(o) for o in opts], "provenance": MODELED,
            "predictor": "mechanistic", **extra}


# -- 3D layouts at large GPU counts --------------------------------------------------------------

#: recompute modes from the lightest (no extra work) to the heaviest
_RECOMPUTE_ORDER = ("none", "selective", "full")


@dataclass
class LayoutSearch:
    """What :func:`search_layouts` did: ``layouts`` searched (GPU count × tp × pp × micro-batch ×
    recompute × sequence parallelism × distributed optimizer, each a valid split of the global
    batch), ``refused`` of them by the job checks (e.g. more pipeline stages than a rule
    allows), ``checked`` memory estimates (per GPU count × tp × pp × micro-batch the recompute
    modes from the lightest, with both memory-saving switches on, until one fits: a heavier
    mode only adds work, a variant without the switches holds more), ``priced`` (the layouts
    that fit, one per GPU count × tp × pp × micro-batch), and the wall time ``seconds``."""

    layouts: int = 0
    refused: int = 0
    checked: int = 0
    priced: int = 0
    seconds: float = 0.0


def layout_gpu_counts(max_gpus: int, gpus_per_node: int = 8) -> list[int]:
    """The GPU counts a layout search tries: 1, 2, 4, … below one node, then whole nodes in
    steps of ×4/3 or ×3/2 (``2^k`` and ``3·2^k`` nodes: 8, 16, 24, 32, 48, 64, 96, … GPUs of
    8-GPU nodes) up to ``max_gpus``, and ``max_gpus`` itself."""
    if max_gpus < 1:
        raise JouleboundError(f"--max-gpus must be >= 1 (got {max_gpus})")
    out = [n for n in gpu_counts(min(max_gpus, gpus_per_node)) if n < gpus_per_node]
    k = 1
    while k * gpus_per_node <= max_gpus:
        out += [m * gpus_per_node for m in (k, 3 * k // 2) if m * gpus_per_node <= max_gpus
                and (m == k or k >= 2)]
        k *= 2
    out = sorted(set(out))
    if not out or out[-1] != max_gpus:
        out.append(max_gpus)
    return out


def _divisors(n: int) -> list[int]:
    small = [k for k in range(1, int(n**0.5) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


def _layout_groups(job, counts: list[int], max_tp: int):
    """``(gpus, tp, pp, dp, micro-batch, grad_accum)`` of every valid split of ``job``'s global
    batch over ``counts`` GPUs (tp within ``max_tp`` and dividing the heads, key/value heads,
    width and MLP width; pp at most the layers)."""
    from dataclasses import replace

    from joulebound.jobs.job import resolve

    base = resolve(replace(job, gpus=1, strategy="single", tp=None, pp=None, pp_stages=None))
    c = base.config
    gb, L = base.global_batch, c.layers
    kv = c.kv_heads or c.heads
    cap = job.batch if job.global_batch is not None else None
    for n in counts:
        for tp in _divisors(n):
            if tp > max_tp or c.heads % tp or kv % tp or c.hidden % tp or c.ff % tp:
                continue
            for pp in _divisors(n // tp):
                if pp > L:
                    break
                dp = n // (tp * pp)
                if gb % dp:
                    continue
                per_rank = gb // dp
                for b in _divisors(per_rank):
                    if cap is not None and b > cap:
                        break
                    yield n, tp, pp, dp, b, per_rank // b


def search_layouts(job, deadline_s: float, max_gpus: int, prm=None, *, max_tp: int | None = None,
                   recompute: tuple[str, ...] = _RECOMPUTE_ORDER, top: int = 64
                   ) -> tuple[Option, list[Option], LayoutSearch]:
    """(advice, the ``top`` cheapest layouts that fit, what was searched) for ``job`` at up to
    ``max_gpus`` GPUs (:func:`layout_gpu_counts`): Megatron 3D layouts, tp (within a node) × pp ×
    dp × micro-batch × ``recompute`` × sequence parallelism (tp > 1) × distributed optimizer
    (dp > 1), the global batch and the tokens of ``job`` fixed.

    Memory first: every layout's per-GPU memory (:func:`~joulebound.jobs.job.memory`) is checked
    and of each GPU count × tp × pp × micro-batch only the lightest recompute that fits is
    priced (more recompute only adds work; sequence parallelism and the distributed optimizer
    are switched on where that is what fits), all of them in one batched prediction
    (:func:`~joulebound.jobs.mechanistic.predict_resolved`). The advice by :func:`decide`, the
    layouts compared with it by :func:`compare`."""
    import time
    from dataclasses import replace

    from joulebound.hw.catalog import get_device
    from joulebound.jobs.job import memory, resolve
    from joulebound.jobs.mechanistic import load_params, predict_resolved

    t0 = time.perf_counter()
    if not deadline_s > 0:
        raise JouleboundError(f"--deadline must be > 0 seconds (got {deadline_s})")
    if not job.tokens:
        raise JouleboundError("advise needs --tokens (the training tokens in total) to compare "
                              "candidates against the deadline")
    bad = [m for m in recompute if m not in _RECOMPUTE_ORDER]
    if bad or not recompute:
        raise JouleboundError(f"recompute modes to search: among {', '.join(_RECOMPUTE_ORDER)} "
                              f"(got {', '.join(recompute) or 'none'})")
    modes = [m for m in _RECOMPUTE_ORDER if m in recompute]
    prm = prm or load_params()
    gpn = job.gpus_per_node or 8
    dev_bytes = float(get_device(str(job.device)).memory_bytes or 0.0)
    stats = LayoutSearch()
    chosen: list = []
    plain = dict(recompute="none", sequence_parallel=False, distributed_optimizer=False,
                 selective_recompute=False)
    groups: dict = {}
    for n, tp, pp, dp, b, ga in _layout_groups(job, layout_gpu_counts(max_gpus, gpn), max_tp or gpn):
        variants = len(modes) * (2 if tp > 1 else 1) * (2 if dp > 1 else 1)
        stats.layouts += variants
        r0 = groups.get((n, tp, pp))
        if r0 is None:  # one resolve per GPU count × tp × pp; the micro-batches derived from it
            try:
                r0 = groups[(n, tp, pp)] = resolve(replace(
                    job, gpus=n, strategy="ddp" if n > 1 else "single", tp=tp, pp=pp,
                    pp_stages=None, batch=b, global_batch=None, grad_accum=ga, **plain))
            except JouleboundError:
                groups[(n, tp, pp)] = False
                stats.refused += variants
                continue
        elif r0 is False:
            stats.refused += variants
            continue
        rb = replace(r0, config=replace(r0.config, micro_batch=b, grad_accum=ga))
        # the lightest recompute that fits, with sequence parallelism and the distributed
        # optimizer on (they only save memory): if that does not fit, no variant of the mode does
        for mode in modes:
            stats.checked += 1
            if memory(replace(rb, recompute=mode, sequence_parallel=tp > 1,
                              distributed_optimizer=dp > 1), dev_bytes).fits:
                chosen.append(replace(job, gpus=n, strategy="ddp" if n > 1 else "single", tp=tp,
                                      pp=pp, pp_stages=None, batch=b, global_batch=None,
                                      grad_accum=ga, recompute=mode, sequence_parallel=tp > 1,
                                      distributed_optimizer=dp > 1, selective_recompute=False))
                break
    if not chosen:
        raise JouleboundError(f"none of {stats.layouts:,} layouts on up to {max_gpus} GPUs fits in "
                              "GPU memory; raise --max-gpus or pick a GPU with more memory")
    rs = [resolve(j) for j in chosen]
    stats.priced = len(rs)
    opts, by_id = [], {}
    for r, p in zip(rs, predict_resolved(rs, prm), strict=True):
        o = _option(r, p, deadline_s, _layout_label(r))
        by_id[id(o)] = (r, p)
        opts.append(o)
    best = decide(opts)
    opts.sort(key=lambda o: o.energy_j)
    shown = opts[:top] + ([best] if best not in opts[:top] else [])
    compare(best, shown, by_id, prm, limit=top)
    stats.seconds = time.perf_counter() - t0
    return best, shown, stats


def _layout_label(r) -> str:
    """``dp16·tp4·pp8 mb1 sel+sp+do``: the layout, its micro-batch and its switches."""
    sw = [{"none": "", "selective": "sel", "full": "full"}[r.recompute],
          "sp" if r.sequence_parallel else "", "do" if r.distributed_optimizer else ""]
    sw = "+".join(x for x in sw if x)
    return f"{r.label()} mb{r.micro_batch}" + (f" {sw}" if sw else "")

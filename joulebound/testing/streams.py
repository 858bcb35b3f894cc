"""Simulated op streams for the next-kernel predictor: a steady training loop, disturbed.

:func:`perturbed_stream` repeats one iteration's key ids and disturbs it the way real loops do
(stray ops, dropped and swapped ops, evaluation steps, short last batches, lazy initialisation),
as :class:`Perturbation` says. Tests and benchmarks measure the predictor on these streams
(:data:`DEFAULT_PERTURBATION` is the one of the >= 95 % accuracy target).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Perturbation:
    """How :func:`perturbed_stream` disturbs a steady training loop.

    Rates are per op; counts are per iteration. All new keys get ids above the iteration's ids,
    so they are unseen unless they repeat.

    Attributes:
        insert_rate: probability of inserting a stray op after an op (logging ``.item()``, a
            metric, a host sync). Drawn from a pool of ``stray_keys`` ids (they repeat).
        drop_rate: probability of skipping an op (a conditional branch not taken).
        swap_rate: probability of swapping an op with the next one (reordered independent ops).
        eval_every: every this many iterations, insert an evaluation step: the first
            ``eval_fraction`` of the iteration (the forward pass) with every ``eval_drop_every``-th
            op removed (dropout off) and every op on a different key (another batch shape).
        epoch_len: iterations per epoch; the last iteration of each epoch is a short last batch:
            every op gets another key (consistent between epochs, as a real shape would be).
        first_iter_extra: extra unseen ops spread over the first iteration (lazy initialisation:
            optimizer state, autotuning).
        stray_keys: size of the stray-op pool.
    """

    insert_rate: float = 0.0
    drop_rate: float = 0.0
    swap_rate: float = 0.0
    eval_every: int = 0
    eval_fraction: float = 0.4
    eval_drop_every: int = 7
    epoch_len: int = 0
    first_iter_extra: int = 0
    stray_keys: int = 16


DEFAULT_PERTURBATION = Perturbation(insert_rate=0.002, drop_rate=0.001, swap_rate=0.001,
                                    eval_every=10, epoch_len=25, first_iter_extra=20)
"""The perturbation used for the >= 95 % accuracy target (benchmarks and tests)."""


def perturbed_stream(iteration: Sequence[int], n_iters: int,
                     spec: Perturbation = DEFAULT_PERTURBATION,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Key stream of ``n_iters`` iterations of ``iteration`` disturbed as ``spec`` says.

    Returns:
        ``(keys, iteration_index)``: int arrays of the same length; ``iteration_index`` is the
        training iteration each op belongs to (-1 for evaluation-step ops).
    """
    rng = np.random.default_rng(seed)
    base = np.asarray(iteration, dtype=np.int64)
    if base.size == 0 or n_iters <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    top = int(base.max()) + 1
    stray0, last0, eval0, init0 = top, 2 * top, 3 * top, 4 * top
    keys: list[int] = []
    owner: list[int] = []
    n_eval = max(1, int(len(base) * spec.eval_fraction))
    for it in range(n_iters):
        if spec.eval_every and it and it % spec.eval_every == 0:
            for j in range(n_eval):
                if spec.eval_drop_every and j % spec.eval_drop_every == spec.eval_drop_every - 1:
                    continue
                keys.append(eval0 + int(base[j]))
                owner.append(-1)
        last = spec.epoch_len and (it % spec.epoch_len) == spec.epoch_len - 1
        seq = base + last0 if last else base.copy()
        seq = list(map(int, seq))
        if it == 0 and spec.first_iter_extra:
            at = sorted(rng.choice(len(seq), size=min(spec.first_iter_extra, len(seq)),
                                   replace=False).tolist(), reverse=True)
            for n, a in enumerate(at):
                seq.insert(a, init0 + n)
        out: list[int] = []
        i = 0
        while i < len(seq):
            r = rng.random()
            if r < spec.drop_rate:
                i += 1
                continue
            if r < spec.drop_rate + spec.swap_rate and i + 1 < len(seq):
                out += [seq[i + 1], seq[i]]
                i += 2
            else:
                out.append(seq[i])
                i += 1
            if rng.random() < spec.insert_rate:
                out.append(stray0 + int(rng.integers(spec.stray_keys)))
        keys += out
        owner += [it] * len(out)
    return np.asarray(keys, np.int64), np.asarray(owner, np.int64)

"""Online next-kernel prediction from the stream of dispatched ops.

A training loop dispatches the same sequence of ops (kernels) every iteration. The runtime
controller needs to know, *before* an op runs, which ops come next, so it can switch clocks early
enough to cover the switch latency. :class:`NextKernelPredictor` learns this online:

* **Keys.** Each op is identified by a key (op name, input shapes, dtype; see
  :func:`joulebound.dvfs.control.hooks.op_key`) interned to a small int by :class:`KeyInterner`.
* **Period following (main predictor).** The predictor keeps the history of observed keys and a
  *pointer* into it: the position whose successor it expects next. In steady state the pointer
  trails the present by exactly one iteration period (the *lag*), so every prediction is "what
  came after this op last iteration". A correct prediction advances the pointer; a wrong one
  re-synchronises it with a suffix match: the most recent earlier occurrence of the last ``m`` keys
  for ``m`` in ``resync_orders`` (longest first), found in O(1) through hash tables of ``m``-grams.
  This finds the period without knowing it in advance and copes with gradient accumulation (the
  period becomes the optimizer step), evaluation steps and odd last batches (a few misses, then the
  pointer re-locks on the training iteration).
* **Markov fallback.** When no suffix of order ``>= min(resync_orders)`` has been seen before, an
  order-``k`` Markov model (counts of next key per context, backing off to shorter contexts)
  predicts the next key with confidence = the count share of its choice.
* **Confidence.** The number of consecutive ops the pointer has predicted correctly (a resync by a
  suffix of length ``m`` starts at ``m``), scaled to [0, 1] by ``warm``: ``min(1, run / warm)``.
* **Labels.** Every history entry may carry an integer label; the prediction returns the label of
  the predicted entry and observed ops inherit the label of the entry they matched. The controller
  primes the predictor with the plan's iteration labelled 0..K-1, so a prediction also says which
  *plan position* comes next (label -1 = unknown).

Cost: one ``observe`` + prediction is a few hundred ns of pure Python in the matched case (see
``benchmarks/bench_runtime.py``; target <= 2 us).

:func:`perturb` is the documented perturbation generator used by tests and benchmarks.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

UNKNOWN = -1
"""Label / key id meaning "no prediction"."""


class KeyInterner:
    """Map hashable op keys (tuples or strings) to dense ints 0, 1, 2, ..."""

    __slots__ = ("_ids", "_keys")

    def __init__(self, keys: Iterable[Hashable] = ()) -> None:
        self._ids: dict[Hashable, int] = {}
        self._keys: list[Hashable] = []
        for k in keys:
            self.intern(k)

    def intern(self, key: Hashable) -> int:
        """Id of ``key``, assigning the next free id to a new key."""
        i = self._ids.get(key)
        if i is None:
            i = len(self._keys)
            self._ids[key] = i
            self._keys.append(key)
        return i

    def get(self, key: Hashable, default: int = UNKNOWN) -> int:
        """Id of ``key`` or ``default`` when it was never interned."""
        return self._ids.get(key, default)

    def key(self, i: int) -> Hashable:
        """The key with id ``i``."""
        return self._keys[i]

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._ids


class Prediction(NamedTuple):
    """The predicted next op.

    Attributes:
        key: predicted key id (``UNKNOWN`` when the predictor has no idea).
        label: label of the predicted op (plan position when primed), ``UNKNOWN`` if none.
        confidence: 0..1.
        source: ``"period"`` (pointer into history), ``"markov"`` (fallback) or ``"none"``.
    """

    key: int
    label: int
    confidence: float
    source: str


@dataclass
class PredictorStats:
    """Counters since construction (or :meth:`NextKernelPredictor.reset_stats`)."""

    observed: int = 0
    correct: int = 0
    resyncs: int = 0
    markov_used: int = 0
    by_source: dict[str, list[int]] = field(default_factory=lambda: {
        "period": [0, 0], "markov": [0, 0], "none": [0, 0]})

    @property
    def accuracy(self) -> float:
        """Share of observed ops whose key was predicted correctly (NaN before any op)."""
        return self.correct / self.observed if self.observed else float("nan")


class NextKernelPredictor:
    """Online next-op predictor (period following + order-k Markov fallback).

    Args:
        resync_orders: suffix lengths (longest first) accepted to re-synchronise the pointer
            after a miss: the candidate with the longest matching suffix up to ``max`` wins (ties:
            the most recent); a match shorter than ``min`` is not trusted.
        markov_order: order ``k`` of the fallback Markov model (1 or 2; backs off to 1).
        warm: consecutive correct ops needed for confidence 1.0.
        max_candidates: earlier occurrences of the current key examined per resync.
        relock_window: ops after a lost lock during which :meth:`_relock` may re-lock near the
            expected position (0 disables it).
        max_history: history length that triggers compaction (the oldest half is dropped;
            amortised O(1) per op).

    Usage::

        pred = NextKernelPredictor()
        for key in stream:                 # key ids from a KeyInterner
            guess = pred.prediction        # what we expect ``key`` to be
            pred.observe(key)
    """

    def __init__(self, resync_orders: Sequence[int] = (32, 3), markov_order: int = 2,
                 warm: int = 8, max_candidates: int = 64, max_history: int = 1 << 20,
                 relock_window: int = 3) -> None:
        orders = sorted({int(m) for m in resync_orders}, reverse=True)
        if not orders or orders[-1] < 1:
            raise ValueError("resync_orders must hold positive suffix lengths")
        if markov_order not in (1, 2):
            raise ValueError("markov_order must be 1 or 2")
        self.max_match = orders[0]
        self.min_match = orders[-1]
        self.markov_order = int(markov_order)
        self.relock_window = int(relock_window)
        self.warm = max(1, int(warm))
        self.max_candidates = max(1, int(max_candidates))
        self.max_history = max(8 * self.max_match + 16, int(max_history))
        self._hist: list[int] = []
        self._labels: list[int] = []
        self._where: dict[int, list[int]] = {}           # key -> history positions
        self._m1: dict[int, dict[int, int]] = {}          # prev key -> next key -> count
        self._m2: dict[tuple[int, int], dict[int, int]] = {}
        self._p: int | None = None          # history index of the predicted next op
        self._run = 0                       # consecutive correct pointer predictions
        self._expect: int | None = None     # where a lost stream was expected to continue
        self._lost = 0                      # ops since the lock was lost
        self._pred = Prediction(UNKNOWN, UNKNOWN, 0.0, "none")
        self.stats = PredictorStats()

    # -- public API -------------------------------------------------------------------------
    @property
    def prediction(self) -> Prediction:
        """Prediction for the next op to be observed."""
        return self._pred

    def predict(self) -> Prediction:
        """Same as :attr:`prediction` (scikit-learn style verb)."""
        return self._pred

    @property
    def period(self) -> int | None:
        """Lag between the present and the history entry the pointer follows (ops).

        In steady state this is the iteration period; ``None`` while not locked."""
        if self._p is None:
            return None
        return len(self._hist) - self._p

    @property
    def confidence(self) -> float:
        return self._pred.confidence

    def prime(self, keys: Sequence[int], labels: Sequence[int] | None = None,
              expect_start: bool = True) -> None:
        """Seed the history with a known iteration (e.g. the plan's op sequence).

        Args:
            keys: key ids of one iteration.
            labels: label per key (default: 0..len-1, the plan positions).
            expect_start: point the predictor at the first primed op, i.e. expect the next
                observed op to start an iteration (confidence stays low until ``warm`` matches).
        """
        labels = range(len(keys)) if labels is None else labels
        if len(labels) != len(keys):
            raise ValueError("prime(): labels and keys differ in length")
        start = len(self._hist)
        for k, lab in zip(keys, labels, strict=True):
            self._append(int(k), int(lab))
        if expect_start and len(keys):
            self._p = start
            self._run = 0
            self._set_pred_from_pointer()

    def observe(self, key: int) -> bool:
        """Feed the op that was just dispatched; returns whether it had been predicted."""
        pred = self._pred
        hit = key == pred[0]
        st = self.stats
        st.observed += 1
        src = st.by_source[pred[3]]
        src[0] += 1
        p = self._p
        if hit:
            st.correct += 1
            src[1] += 1
        if hit and p is not None:
            # fast path: the pointer was right; follow it
            self._p = p + 1
            self._append(key, self._labels[p])
            p = self._p
            if p is not None:
                self._run = run = self._run + 1
                conf = run / self.warm
                self._pred = Prediction(self._hist[p], self._labels[p],
                                        1.0 if conf > 1.0 else conf, "period")
                return True
        else:
            self._append(key, UNKNOWN)
            if p is not None:
                st.resyncs += 1
                # lock lost here: remember where the stream was expected to continue
                self._expect = p if self._run >= self.warm else None
                self._lost = 0
            if not self._relock(key):
                self._resync()
        if self._p is not None:
            self._set_pred_from_pointer()
        else:
            self._set_pred_markov()
        return hit

    def _relock(self, key: int) -> bool:
        """Re-lock near the position a long-locked stream was expected to be at.

        Absorbs small disturbances (an extra op, a missing op, two swapped ops, in the present or
        in the history the pointer follows) without a suffix search, which in a stream of identical
        layers could lock onto the wrong layer. Active for up to ``relock_window`` ops after the
        lock was lost; tries the expected position and its neighbours (+1, -1, +2, -2)."""
        e = self._expect
        if e is None:
            return False
        h = self._hist
        n = len(h) - 1
        for d in (0, 1, -1, 2, -2):
            c = e + d
            if 0 <= c < n and h[c] == key:
                self._p = c + 1
                self._run = self.warm - 1
                if self._labels[n] == UNKNOWN:
                    self._labels[n] = self._labels[c]
                self._expect = None
                return True
        self._lost += 1
        self._expect = None if self._lost > self.relock_window else e + 1
        return False

    def observe_many(self, keys: Iterable[int]) -> int:
        """Feed several ops; returns how many were predicted correctly."""
        return sum(self.observe(k) for k in keys)

    def predict_ahead(self, k: int) -> tuple[list[int], list[int], float]:
        """Keys and labels of the next ``k`` ops and the confidence of the whole window.

        Follows the pointer through the history (wrapping by the current lag past the present);
        without a pointer only the first entry (Markov) is known and the rest are ``UNKNOWN``.
        """
        p = self._p
        if p is None:
            first = self._pred
            keys = [first.key] + [UNKNOWN] * (k - 1)
            return keys[:k], [UNKNOWN] * k, first.confidence if k == 1 else 0.0
        hist, labels_ = self._hist, self._labels
        n = len(hist)
        lag = n - p
        keys, labels = [], []
        for i in range(k):
            j = p + i
            while j >= n:
                j -= lag
            keys.append(hist[j])
            labels.append(labels_[j])
        return keys, labels, self._pred.confidence

    def reset_stats(self) -> None:
        self.stats = PredictorStats()

    def __len__(self) -> int:
        return len(self._hist)

    # -- internals --------------------------------------------------------------------------
    def _append(self, key: int, label: int) -> None:
        h = self._hist
        n = len(h)
        if n:
            prev = h[-1]
            nxt = self._m1.get(prev)
            if nxt is None:
                self._m1[prev] = {key: 1}
            else:
                nxt[key] = nxt.get(key, 0) + 1
            if n > 1 and self.markov_order == 2:
                ctx = (h[-2], prev)
                nxt = self._m2.get(ctx)
                if nxt is None:
                    self._m2[ctx] = {key: 1}
                else:
                    nxt[key] = nxt.get(key, 0) + 1
        h.append(key)
        self._labels.append(label)
        w = self._where.get(key)
        if w is None:
            self._where[key] = [n]
        else:
            w.append(n)
        if n + 1 >= self.max_history:
            self._compact()

    def _resync(self) -> None:
        """Point after the earlier occurrence of the current key with the longest common suffix.

        Examines up to ``max_candidates`` earlier occurrences of the newest key (most recent
        first); the match length is counted backwards up to ``max_match``. The new op inherits
        the label of its match, so plan positions survive resyncs."""
        self._p = None
        self._run = 0
        h = self._hist
        n = len(h) - 1                      # index of the op just observed
        occ = self._where[h[n]]
        best, best_len = -1, 0
        top = self.max_match
        lo = max(0, len(occ) - 1 - self.max_candidates)
        for idx in range(len(occ) - 2, lo - 1, -1):
            c = occ[idx]
            length = 1
            while length < top and c - length >= 0 and h[c - length] == h[n - length]:
                length += 1
            if length > best_len:
                best, best_len = c, length
                if length >= top:
                    break
        if best_len >= self.min_match:
            self._p = best + 1
            self._run = best_len
            if self._labels[n] == UNKNOWN:
                self._labels[n] = self._labels[best]

    def _set_pred_from_pointer(self) -> None:
        p = self._p
        assert p is not None
        conf = self._run / self.warm
        self._pred = Prediction(self._hist[p], self._labels[p], 1.0 if conf > 1.0 else conf,
                                "period")

    def _set_pred_markov(self) -> None:
        h = self._hist
        nxt = None
        order = 0
        if len(h) >= 2 and self.markov_order == 2:
            nxt, order = self._m2.get((h[-2], h[-1])), 2
        if not nxt and h:
            nxt, order = self._m1.get(h[-1]), 1
        if nxt:
            key, cnt = max(nxt.items(), key=lambda kv: kv[1])
            total = sum(nxt.values())
            self.stats.markov_used += 1
            self._pred = Prediction(key, UNKNOWN, cnt / total * (order / self.markov_order),
                                    "markov")
            return
        self._pred = Prediction(UNKNOWN, UNKNOWN, 0.0, "none")

    def _compact(self) -> None:
        """Drop the oldest half of the history and re-index (Markov counts are kept)."""
        cut = len(self._hist) // 2
        self._hist = self._hist[cut:]
        self._labels = self._labels[cut:]
        where: dict[int, list[int]] = {}
        for i, k in enumerate(self._hist):
            where.setdefault(k, []).append(i)
        self._where = where
        if self._p is not None:
            self._p = self._p - cut if self._p >= cut else None
            if self._p is None:
                self._run = 0


# -- perturbation generator (tests and benchmarks) ------------------------------------------------
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


def accuracy(keys: Sequence[int], skip: int = 0, predictor: NextKernelPredictor | None = None
             ) -> float:
    """Share of ``keys[skip:]`` that a (fresh) predictor predicted right, after seeing all before."""
    pred = predictor if predictor is not None else NextKernelPredictor()
    seq = list(map(int, keys))
    for k in seq[:skip]:
        pred.observe(k)
    pred.reset_stats()
    for k in seq[skip:]:
        pred.observe(k)
    return pred.stats.accuracy

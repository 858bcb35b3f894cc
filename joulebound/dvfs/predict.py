"""Online next-kernel prediction from the stream of dispatched ops.

A training loop dispatches the same sequence of ops (kernels) every iteration. The runtime
controller needs to know, *before* an op runs, which ops come next, so it can switch clocks early
enough to cover the switch latency. :class:`NextKernelPredictor` learns this online:

* **Keys.** Each op is identified by a key (op name, input shapes, dtype; see
  :func:`joulebound.dvfs.control.hooks.op_key`) interned to a small int by :class:`KeyInterner`.
* **Period following (main predictor).** The predictor keeps the history of observed keys and a
  *pointer* into it: the position whose successor it expects next. In steady state the pointer
  trails the present by exactly one iteration period (the *lag*), so every prediction is "what
  came after this op last iteration". A correct prediction advances the pointer (O(1)). This finds
  the period without knowing it in advance; with gradient accumulation the period becomes the
  optimizer step.
* **Re-synchronisation after a miss.** (1) *Relock*: for a few ops after a long lock was lost,
  look near the expected position for the new op — absorbs an extra op (marked :data:`STRAY` so
  later iterations skip it), a missing op, or two swapped ops, in the present or in the followed
  history. (2) *Suffix match*: the earlier occurrence of the current key with the longest common
  suffix (up to ``max(resync_orders)`` ops, at least ``min(resync_orders)``), the position one
  known period back first, then the most recent occurrences (per-key position index). Evaluation
  steps and odd last batches cost a few misses, then the pointer re-locks on the training
  iteration.
* **Markov fallback.** While nothing is locked, an order-``k`` Markov model (successor counts of
  the current context over its recent occurrences, backing off to shorter contexts) predicts the
  next key with confidence = the count share of its choice.
* **Confidence.** The number of consecutive ops the pointer has predicted correctly (a resync by a
  suffix of length ``m`` starts at ``m``), scaled to [0, 1] by ``warm``: ``min(1, run / warm)``.
* **Labels.** Every history entry may carry an integer label; the prediction returns the label of
  the predicted entry and observed ops inherit the label of the entry they matched. The controller
  primes the predictor with the plan's iteration labelled 0..K-1, so a prediction also says which
  *plan position* comes next (label -1 = unknown).

Cost: a matched op is a few list appends and integer updates — 0.3–0.7 us of pure Python on the
development machine (``benchmarks/bench_runtime.py``; target <= 2 us).

:func:`joulebound.testing.streams.perturbed_stream` is the documented perturbation generator used
by tests and benchmarks (``DEFAULT_PERTURBATION`` for the >= 95 % target).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

UNKNOWN = -1
"""Label / key id meaning "no prediction"."""
STRAY = -2
"""Label of a history entry found to be a one-off extra op; the pointer skips it."""


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


_SOURCES = ("period", "markov", "none")
_PERIOD, _MARKOV, _NONE = 0, 1, 2


class NextKernelPredictor:
    """Online next-op predictor (period following + order-k Markov fallback).

    Args:
        resync_orders: suffix lengths (longest first) accepted to re-synchronise the pointer
            after a miss: the candidate with the longest matching suffix up to ``max`` wins (ties:
            the most recent); a match shorter than ``min`` is not trusted.
        markov_order: order ``k`` of the fallback Markov model (backs off to ``k-1`` ... 1).
        markov_window: most recent occurrences of the context counted by the Markov model.
        warm: consecutive correct ops needed for confidence 1.0.
        max_candidates: earlier occurrences of the current key examined per resync.
        relock_window: ops after a lost lock during which :meth:`_relock` may re-lock near the
            expected position (0 disables it).
        max_history: bound of the history length. From about 11/12 of it the older half is
            dropped *incrementally*: the newer half is copied a few entries per op into fresh
            lists (and the old ones freed a few hundred entries per op), then swapped in, so no
            single :meth:`observe` does more than a bounded amount of work at any stream length.

    The matched case (the pointer was right) does O(1) work: three list appends and a few
    integer updates. The Markov counts are computed on demand from the per-key position index,
    only when the pointer is lost, so they cost nothing in steady state.

    Usage::

        pred = NextKernelPredictor()
        for key in stream:                 # key ids from a KeyInterner
            guess = pred.prediction        # what we expect ``key`` to be
            pred.observe(key)
    """

    def __init__(self, resync_orders: Sequence[int] = (32, 3), markov_order: int = 2,
                 warm: int = 8, max_candidates: int = 64, max_history: int = 1 << 20,
                 relock_window: int = 3, markov_window: int = 64) -> None:
        orders = sorted({int(m) for m in resync_orders}, reverse=True)
        if not orders or orders[-1] < 1:
            raise ValueError("resync_orders must hold positive suffix lengths")
        if markov_order < 1:
            raise ValueError("markov_order must be >= 1")
        self.max_match = orders[0]
        self.min_match = orders[-1]
        self.markov_order = int(markov_order)
        self.markov_window = max(1, int(markov_window))
        self.relock_window = int(relock_window)
        self.warm = max(1, int(warm))
        self.max_candidates = max(1, int(max_candidates))
        self.max_history = max(8 * self.max_match + 16, int(max_history))
        # entries this recent may still get their label changed (relock, controller): they are
        # copied at the swap itself, never earlier
        self._margin = 2 * self.relock_window + 16
        self._start_at = max(self.max_history - self.max_history // 12 - self._margin - _STEP,
                             self.max_history // 2 + 2 * self._margin)
        self._work_at = self._start_at      # history length from which observe() does upkeep
        self._mig: _Migration | None = None
        self._trash: list[list] = []        # old lists being freed a chunk per op
        self._trash_dicts: list[dict] = []
        self._hist: list[int] = []
        self._labels: list[int] = []
        self._where: dict[int, list[int]] = {}           # key -> history positions
        self._p: int | None = None          # history index of the predicted next op
        self._run = 0                       # consecutive correct pointer predictions
        self._expect: int | None = None     # where a lost stream was expected to continue
        self._lost = 0                      # ops since the lock was lost
        self._lag = 0                       # the lag (period) of the last long lock
        self._skipped: list[int] = []       # history positions passed over by a relock
        # the prediction for the next op, as plain fields (no object per op)
        self._nk = UNKNOWN                  # key
        self._nl = UNKNOWN                  # label
        self._nc = 0.0                      # confidence
        self._ns = _NONE                    # source
        self.reset_stats()

    # -- public API -------------------------------------------------------------------------
    @property
    def prediction(self) -> Prediction:
        """Prediction for the next op to be observed."""
        return Prediction(self._nk, self._nl, self._nc, _SOURCES[self._ns])

    def predict(self) -> Prediction:
        """Same as :attr:`prediction` (scikit-learn style verb)."""
        return self.prediction

    @property
    def period(self) -> int | None:
        """Lag between the present and the history entry the pointer follows (ops).

        In steady state this is the iteration period; ``None`` while not locked."""
        if self._p is None:
            return None
        return len(self._hist) - self._p

    @property
    def confidence(self) -> float:
        """Confidence (0..1) that the next op is the predicted one and the stream stays locked."""
        return self._nc

    @property
    def last_label(self) -> int:
        """Label of the op observed last (its plan position when primed; -1 unknown)."""
        return self._labels[-1] if self._labels else UNKNOWN

    def set_last_label(self, label: int) -> None:
        """Overwrite the last op's label (e.g. from plan continuity); later matches inherit it."""
        if self._labels:
            self._labels[-1] = label

    @property
    def stats(self) -> PredictorStats:
        """Counters since construction or :meth:`reset_stats`."""
        f = self._fast
        src = [list(x) for x in self._src]
        src[_PERIOD][0] += f
        src[_PERIOD][1] += f
        return PredictorStats(observed=self._obs + f, correct=self._hit + f,
                              resyncs=self._resyncs, markov_used=self._markov_used,
                              by_source=dict(zip(_SOURCES, src, strict=True)))

    def reset_stats(self) -> None:
        self._fast = 0           # ops predicted by the pointer (fast path), all correct
        self._obs = 0            # other ops observed
        self._hit = 0            # ... of which predicted correctly
        self._src = [[0, 0], [0, 0], [0, 0]]
        self._resyncs = 0
        self._markov_used = 0

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
        if len(self._hist) >= self._work_at:
            self._upkeep()
        if expect_start and len(keys) and self._p is not None:
            self._set_pred_from_pointer()

    def observe(self, key: int) -> bool:
        """Feed the op that was just dispatched; returns whether it had been predicted."""
        p = self._p
        if key == self._nk and p is not None:
            # fast path: the pointer was right; follow it
            self._fast += 1
            h = self._hist
            n = len(h)
            labels = self._labels
            h.append(key)
            labels.append(labels[p])
            w = self._where.get(key)
            if w is None:
                self._where[key] = [n]
            else:
                w.append(n)
            p += 1
            if labels[p] == STRAY:
                self._p = p
                self._skip_strays()
                p = self._p
            self._p = p
            run = self._run = self._run + 1
            self._nk = h[p]
            self._nl = labels[p]
            self._nc = 1.0 if run >= self.warm else run / self.warm
            if n + 1 >= self._work_at and self._upkeep():
                if self._p is not None:
                    self._set_pred_from_pointer()
                else:
                    self._set_pred_markov()
            return True
        hit = key == self._nk
        self._obs += 1
        src = self._src[self._ns]
        src[0] += 1
        if hit:
            self._hit += 1
            src[1] += 1
        self._append(key, UNKNOWN)
        if p is not None:
            self._resyncs += 1
            # lock lost here: remember where the stream was expected to continue
            if self._run >= self.warm:
                self._expect = p
                self._lag = len(self._hist) - 1 - p
            else:
                self._expect = None
            self._lost = 0
        if not self._relock(key):
            self._resync()
        if len(self._hist) >= self._work_at:
            self._upkeep()                  # pointers move with the history; predict after it
        if self._p is not None:
            self._set_pred_from_pointer()
        elif self._expect is not None and self._expect < len(self._hist):
            # lost a moment ago: most likely the last op was an extra one and the stream
            # continues where it was expected to
            self._nk = self._hist[self._expect]
            self._nl = self._labels[self._expect]
            self._nc = 0.5
            self._ns = _PERIOD
        else:
            self._set_pred_markov()
        return hit

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
            keys = [self._nk] + [UNKNOWN] * (k - 1)
            return keys[:k], [UNKNOWN] * k, self._nc if k == 1 else 0.0
        hist, labels_ = self._hist, self._labels
        n = len(hist)
        lag = n - p
        keys, labels = [], []
        j = p
        while len(keys) < k:
            while j >= n:
                j -= lag
            if labels_[j] != STRAY:
                keys.append(hist[j])
                labels.append(labels_[j])
            j += 1
        return keys, labels, self._nc

    def __len__(self) -> int:
        return len(self._hist)

    # -- internals --------------------------------------------------------------------------
    def _relock(self, key: int) -> bool:
        """Re-lock near the position a long-locked stream was expected to be at.

        Absorbs small disturbances without a suffix search (which, in a stream of identical
        layers, could lock onto the wrong layer). Active for up to ``relock_window`` ops after
        the lock was lost, around the expected position ``e``:

        * ``key == h[e]``: the ops since the lock was lost were extra (strays); a single stray is
          marked :data:`STRAY` so that later iterations following this one skip it;
        * ``key == h[e + d]``, ``d`` = 1, 2: ops were missing (dropped, or the first half of a
          swap); the skipped positions are remembered;
        * ``key`` is a remembered skipped op: it came late (second half of a swap); the pointer
          stays where it is.
        """
        h = self._hist
        n = len(h) - 1
        labels = self._labels
        sk = self._skipped
        if sk and self._p is not None:
            for c in sk:
                if h[c] == key:
                    sk.remove(c)
                    if labels[n] == UNKNOWN and labels[c] != STRAY:
                        labels[n] = labels[c]
                    self._run = self.warm - 1
                    self._expect = None
                    return True
        e = self._expect
        if e is None:
            return False
        lost = self._lost
        for j in dict.fromkeys((lost, 0, lost + 1, lost + 2, *range(1, lost))):
            c = e + j
            if 0 <= c < n and h[c] == key:
                if j == 0 and lost:
                    # the ops since the lock was lost were extra: skip them in later iterations
                    for i in range(n - lost, n):
                        if labels[i] == UNKNOWN:
                            labels[i] = STRAY
                self._skipped = list(range(e + lost, c))
                self._p = c + 1
                self._skip_strays()
                self._run = self.warm - 1
                if labels[n] == UNKNOWN:
                    labels[n] = labels[c]
                self._expect = None
                return True
        self._lost = lost + 1
        if self._lost > self.relock_window:
            self._expect = None
        return False

    def _skip_strays(self) -> None:
        """Move the pointer past entries marked :data:`STRAY`; remember them in case the op
        turns out to recur (then it arrives "late" and is absorbed by :meth:`_relock`)."""
        p = self._p
        labels = self._labels
        if p is None or labels[p] != STRAY:
            return
        skipped = []
        while p < len(labels) - 1 and labels[p] == STRAY:
            skipped.append(p)
            p += 1
        self._skipped = skipped
        self._p = p

    def _append(self, key: int, label: int) -> None:
        h = self._hist
        n = len(h)
        h.append(key)
        self._labels.append(label)
        w = self._where.get(key)
        if w is None:
            self._where[key] = [n]
        else:
            w.append(n)

    def _resync(self) -> None:
        """Point after the earlier occurrence of the current key with the longest common suffix.

        Examines up to ``max_candidates`` earlier occurrences of the newest key (most recent
        first); the match length is counted backwards up to ``max_match``. The new op inherits
        the label of its match, so plan positions survive resyncs."""
        self._p = None
        self._run = 0
        self._skipped = []
        h = self._hist
        n = len(h) - 1                      # index of the op just observed
        occ = self._where[h[n]]
        best, best_len = -1, 0
        top = self.max_match
        lo = max(0, len(occ) - 1 - self.max_candidates)
        cands = range(len(occ) - 2, lo - 1, -1)
        lag = self._lag
        if lag:
            # the last known period first: after a disturbance the stream usually continues
            # one period after the ops it followed before
            i = bisect.bisect_left(occ, n - lag, 0, len(occ) - 1)
            near = [j for j in (i, i - 1) if 0 <= j < len(occ) - 1 and
                    abs(occ[j] - (n - lag)) <= 2]
            cands = [*near, *cands]
        for idx in cands:
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
        self._skip_strays()
        p = self._p
        assert p is not None
        self._nk = self._hist[p]
        self._nl = self._labels[p]
        self._nc = min(1.0, self._run / self.warm)
        self._ns = _PERIOD

    def _set_pred_markov(self) -> None:
        """Order-k Markov prediction from the recent successors of the current context.

        Looks at the last ``markov_window`` earlier occurrences of the current key; for each,
        counts how many of the ``k - 1`` keys before it match the current context; predicts the
        most frequent successor among the occurrences with the longest matching context
        (backing off to shorter contexts). Confidence = the count share of that successor,
        scaled by (context order used) / k."""
        h = self._hist
        n = len(h)
        self._nk, self._nl, self._nc, self._ns = UNKNOWN, UNKNOWN, 0.0, _NONE
        if n == 0:
            return
        k = self.markov_order
        occ = self._where[h[-1]]
        by_order: list[dict[int, int]] = [{} for _ in range(k + 1)]
        for i in occ[-self.markov_window - 1:-1]:
            o = 1
            while o < k and i - o >= 0 and h[i - o] == h[n - 1 - o]:
                o += 1
            nxt = h[i + 1]
            c = by_order[o]
            c[nxt] = c.get(nxt, 0) + 1
        for order in range(k, 0, -1):
            counts = by_order[order]
            if counts:
                key, cnt = max(counts.items(), key=lambda kv: kv[1])
                self._markov_used += 1
                self._nk = key
                self._nc = cnt / sum(counts.values()) * (order / k)
                self._ns = _MARKOV
                return

    def _upkeep(self) -> bool:
        """A bounded share of the history compaction (see ``max_history``); True when the new
        history was swapped in (pointers moved with it)."""
        if self._trash or self._trash_dicts:
            self._free_some()
        h = self._hist
        n = len(h)
        m = self._mig
        if m is None:
            if n < self._start_at:
                self._work_at = 0 if (self._trash or self._trash_dicts) else self._start_at
                return False
            m = self._mig = _Migration(n // 2)
            self._work_at = 0
        stop = min(m.cursor + _STEP, n - self._margin)
        if stop > m.cursor:
            m.copy(h, self._labels, m.cursor, stop)
        if m.cursor < n - self._margin:
            return False
        m.copy(h, self._labels, m.cursor, n)       # the newest entries, labels as they are now
        self._swap(m)
        return True

    def _swap(self, m: _Migration) -> None:
        """Replace the history by its newer half (built by :class:`_Migration`)."""
        cut = m.cut
        self._trash += [self._hist, self._labels]
        self._trash_dicts.append(self._where)
        self._hist, self._labels, self._where = m.hist, m.labels, m.where
        self._mig = None
        self._work_at = 0                           # free the old lists, a chunk per op
        self._skipped = [c - cut for c in self._skipped if c >= cut]
        if self._expect is not None:
            self._expect = self._expect - cut if self._expect >= cut else None
        if self._p is not None:
            self._p = self._p - cut if self._p >= cut else None
            if self._p is None:
                self._run = 0

    def _free_some(self, budget: int = 512) -> None:
        """Release up to ``budget`` entries of the old history (a large list freed at once would
        stall one op for milliseconds)."""
        while budget > 0 and self._trash_dicts:
            d = self._trash_dicts[-1]
            if not d:
                self._trash_dicts.pop()
                continue
            _, lst = d.popitem()
            self._trash.append(lst)
            budget -= 16
        while budget > 0 and self._trash:
            lst = self._trash[-1]
            k = min(budget, len(lst))
            del lst[len(lst) - k:]
            budget -= k
            if not lst:
                self._trash.pop()


#: history entries copied per op while a compaction is under way
_STEP = 8


class _Migration:
    """The newer half of the history (from ``cut``), copied into fresh lists a few entries per op;
    positions in ``where`` are already relative to the new lists."""

    __slots__ = ("cursor", "cut", "hist", "labels", "where")

    def __init__(self, cut: int) -> None:
        self.cut = cut
        self.cursor = cut
        self.hist: list[int] = []
        self.labels: list[int] = []
        self.where: dict[int, list[int]] = {}

    def copy(self, hist: list[int], labels: list[int], lo: int, hi: int) -> None:
        nh, nl, nw = self.hist, self.labels, self.where
        cut = self.cut
        for i in range(lo, hi):
            k = hist[i]
            nh.append(k)
            nl.append(labels[i])
            w = nw.get(k)
            if w is None:
                nw[k] = [i - cut]
            else:
                w.append(i - cut)
        self.cursor = hi


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

"""Online next-kernel prediction from the stream of dispatched ops.

A training loop dispatches the same sequence of ops (kernels) every iteration. The runtime
controller needs to know, *before* an op runs, which ops come next, so it can switch clocks early
enough to cover the switch latency. :class:`NextKernelPredictor` learns this online:

* **Keys.** Each op is identified by a key (op name, input shapes, dtype; see
  :func:`joulebound.runtime.hooks.op_key`) interned to a small int by :class:`KeyInterner`.
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

* **History.** A ring buffer of the newest ``max_history`` ops in fixed int64 storage allocated
  once (outside the Python heap, invisible to the garbage collector): no call grows, copies,
  compacts or frees history at any stream length, so no ``observe()`` stalls the dispatch hook.

Cost: a matched op is a few slot writes and integer updates, well under a microsecond of pure
Python (``benchmarks/bench_runtime.py``, ``docs/benchmarks.md``, *Runtime*; target <= 2 us).

:func:`joulebound.testing.streams.perturbed_stream` is the documented perturbation generator used
by tests and benchmarks (``DEFAULT_PERTURBATION`` for the >= 95 % target).
"""

from __future__ import annotations

import mmap
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
_PAGE = mmap.PAGESIZE // 8           # int64 slots per memory page
_PERIOD, _MARKOV, _NONE = 0, 1, 2


def _ring(size: int, offset: int = 0, prefault: bool = True) -> memoryview:
    """``size`` zeroed int64 slots in anonymous memory (no gc-tracked object, never resized),
    starting ``offset`` slots into their first page.

    ``prefault``: the pages are committed now (``MAP_POPULATE`` where the OS has it, else one
    write per page), so no later write takes a first-touch page fault. Otherwise the kernel
    commits them as they are first written (a fault every 512 slots, a few µs each, spread
    over the stream; transparent huge pages are declined so one never zeroes 2 MiB at once);
    rings written in step are then given different offsets so that their faults fall on
    different ops (three in one call measured ~58 µs median on a VM)."""
    populate = getattr(mmap, "MAP_POPULATE", 0) if prefault else 0
    if populate:
        buf = mmap.mmap(-1, 8 * (size + offset), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
                        | populate)
    else:
        buf = mmap.mmap(-1, 8 * (size + offset))
        if hasattr(buf, "madvise") and hasattr(mmap, "MADV_NOHUGEPAGE"):
            buf.madvise(mmap.MADV_NOHUGEPAGE)
    ring = memoryview(buf).cast("q")
    if prefault and not populate:
        for i in range(0, len(ring), _PAGE):
            ring[i] = 0
    return ring[offset:]


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
        max_history: the history holds the newest ``max_history`` ops (ops; at least
            ``8 * max(resync_orders) + 16``). It is a ring buffer allocated once at this size
            (three int64 slots per op: key, label, previous occurrence of the key; 24 MiB at
            the default 2**20): an op overwrites the oldest entry, so no :meth:`observe` ever
            grows, copies, compacts or frees history, at any stream length.
        prefault: commit the ring's memory at construction (about 16 ms of CPU and 24 MiB
            resident at the default bound, measured), so no :meth:`observe` takes a first-touch
            page fault; ``False`` commits it as the history fills (a fault every 512 ops, a few
            µs each, occasionally over 50 µs on a VM: ``docs/benchmarks.md``, *Runtime*).

    Positions are absolute op numbers (0 = the first op ever observed); the entry of position
    ``i`` lives in slot ``i & mask``, and positions older than ``len(self)`` ops are gone. The
    occurrences of a key are a linked list through the history (each entry holds the position
    of the previous op with the same key), so the resync and Markov searches walk the most
    recent occurrences without any per-key list.

    The matched case (the pointer was right) does O(1) work: three slot writes, one dict update
    and a few integer updates, allocating no object that outlives the call. The Markov counts
    are computed on demand from the occurrence links, only when the pointer is lost, so they
    cost nothing in steady state.

    Usage::

        pred = NextKernelPredictor()
        for key in stream:                 # key ids from a KeyInterner
            guess = pred.prediction        # what we expect ``key`` to be
            pred.observe(key)
    """

    def __init__(self, resync_orders: Sequence[int] = (32, 3), markov_order: int = 2,
                 warm: int = 8, max_candidates: int = 64, max_history: int = 1 << 20,
                 relock_window: int = 3, markov_window: int = 64, prefault: bool = True) -> None:
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
        size = 1 << (self.max_history - 1).bit_length()     # a power of two >= max_history
        self._mask = size - 1
        self._hist = _ring(size, 0, prefault)                   # slot -> key
        self._labels = _ring(size, _PAGE // 3, prefault)        # slot -> label
        self._prev = _ring(size, 2 * _PAGE // 3, prefault)      # slot -> previous position of
        #                                                          the slot's key (-1 none)
        self._last: dict[int, int] = {}     # key -> position of its newest op
        self._n = 0                         # ops in the history so far (next position)
        self._ll = UNKNOWN                  # label of the newest op
        self._p: int | None = None          # position of the predicted next op
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
        return self._n - self._p

    @property
    def confidence(self) -> float:
        """Confidence (0..1) that the next op is the predicted one and the stream stays locked."""
        return self._nc

    @property
    def last_label(self) -> int:
        """Label of the op observed last (its plan position when primed; -1 unknown)."""
        return self._ll

    def set_last_label(self, label: int) -> None:
        """Overwrite the last op's label (e.g. from plan continuity); later matches inherit it."""
        if self._n:
            self._labels[(self._n - 1) & self._mask] = label
            self._ll = label

    def recent(self, k: int) -> tuple[list[int], list[int]]:
        """Keys and labels of the newest ``k`` ops still in the history, oldest first."""
        n, m = self._n, self._mask
        lo = n - max(0, min(k, len(self)))
        return ([self._hist[i & m] for i in range(lo, n)],
                [self._labels[i & m] for i in range(lo, n)])

    @property
    def stats(self) -> PredictorStats:
        """Counters since construction or :meth:`reset_stats`."""
        f = self._n - self._n0 - self._obs       # ops taken by the fast path (all correct)
        src = [list(x) for x in self._src]
        src[_PERIOD][0] += f
        src[_PERIOD][1] += f
        return PredictorStats(observed=self._obs + f, correct=self._hit + f,
                              resyncs=self._resyncs, markov_used=self._markov_used,
                              by_source=dict(zip(_SOURCES, src, strict=True)))

    def reset_stats(self) -> None:
        self._n0 = self._n       # history position at reset (less ops primed since)
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
        start = self._n
        for k, lab in zip(keys, labels, strict=True):
            self._append(int(k), int(lab))
        self._n0 += self._n - start             # primed ops are not observed ones
        if expect_start and len(keys):
            self._p = start
            self._run = 0
        self._forget_old()
        if expect_start and len(keys) and self._p is not None:
            self._set_pred_from_pointer()

    def observe(self, key: int) -> bool:
        """Feed the op that was just dispatched; returns whether it had been predicted."""
        p = self._p
        if key == self._nk and p is not None:
            # fast path: the pointer was right; follow it. The new op overwrites the oldest
            # slot; p is at least one op newer than it (the lag never exceeds the history)
            m = self._mask
            n = self._n
            labels = self._labels
            lab = labels[p & m]
            j = n & m
            self._hist[j] = key
            labels[j] = lab
            last = self._last
            self._prev[j] = last.get(key, -1)
            last[key] = n
            self._n = n + 1
            self._ll = lab
            p += 1
            q = p & m
            lab = labels[q]
            if lab == STRAY:
                self._p = p
                self._skip_strays()
                p = self._p
                q = p & m
                lab = labels[q]
            self._p = p
            run = self._run = self._run + 1
            self._nk = self._hist[q]
            self._nl = lab
            self._nc = 1.0 if run >= self.warm else run / self.warm
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
                self._lag = self._n - 1 - p
            else:
                self._expect = None
            self._lost = 0
        if not self._relock(key):
            self._resync()
        self._forget_old()
        self._ll = self._labels[(self._n - 1) & self._mask]
        if self._p is not None:
            self._set_pred_from_pointer()
        elif self._expect is not None and self._expect < self._n:
            # lost a moment ago: most likely the last op was an extra one and the stream
            # continues where it was expected to
            e = self._expect & self._mask
            self._nk = self._hist[e]
            self._nl = self._labels[e]
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
        hist, labels_, m = self._hist, self._labels, self._mask
        n = self._n
        lag = n - p
        keys, labels = [], []
        j = p
        while len(keys) < k:
            while j >= n:
                j -= lag
            lab = labels_[j & m]
            if lab != STRAY:
                keys.append(hist[j & m])
                labels.append(lab)
            j += 1
        return keys, labels, self._nc

    def __len__(self) -> int:
        return min(self._n, self.max_history)

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
        h, labels, m = self._hist, self._labels, self._mask
        n = self._n - 1                     # position of the op just observed
        base = self._n - len(self)          # oldest position still in the history
        sk = self._skipped
        if sk and self._p is not None:
            for c in sk:
                if c >= base and h[c & m] == key:
                    sk.remove(c)
                    lab = labels[c & m]
                    if labels[n & m] == UNKNOWN and lab != STRAY:
                        labels[n & m] = lab
                    self._run = self.warm - 1
                    self._expect = None
                    return True
        e = self._expect
        if e is None:
            return False
        lost = self._lost
        for j in dict.fromkeys((lost, 0, lost + 1, lost + 2, *range(1, lost))):
            c = e + j
            if base <= c < n and h[c & m] == key:
                if j == 0 and lost:
                    # the ops since the lock was lost were extra: skip them in later iterations
                    for i in range(n - lost, n):
                        if labels[i & m] == UNKNOWN:
                            labels[i & m] = STRAY
                self._skipped = list(range(e + lost, c))
                self._p = c + 1
                self._skip_strays()
                self._run = self.warm - 1
                if labels[n & m] == UNKNOWN:
                    labels[n & m] = labels[c & m]
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
        labels, m = self._labels, self._mask
        if p is None or labels[p & m] != STRAY:
            return
        skipped = []
        while p < self._n - 1 and labels[p & m] == STRAY:
            skipped.append(p)
            p += 1
        self._skipped = skipped
        self._p = p

    def _append(self, key: int, label: int) -> None:
        n = self._n
        j = n & self._mask
        self._hist[j] = key
        self._labels[j] = label
        self._prev[j] = self._last.get(key, -1)
        self._last[key] = n
        self._n = n + 1
        self._ll = label

    def _forget_old(self) -> None:
        """Drop the positions that left the history from the pointer and the relock state
        (a few integers; the ring itself needs no upkeep)."""
        base = self._n - len(self)
        if not base:
            return
        if self._p is not None and self._p < base:
            self._p = None
            self._run = 0
        if self._expect is not None and self._expect < base:
            self._expect = None
        if self._skipped and self._skipped[0] < base:
            self._skipped = [c for c in self._skipped if c >= base]

    def _resync(self) -> None:
        """Point after the earlier occurrence of the current key with the longest common suffix.

        Examines up to ``max_candidates`` earlier occurrences of the newest key (most recent
        first); the match length is counted backwards up to ``max_match``. The new op inherits
        the label of its match, so plan positions survive resyncs."""
        self._p = None
        self._run = 0
        self._skipped = []
        h, labels, prev, m = self._hist, self._labels, self._prev, self._mask
        n = self._n - 1                     # position of the op just observed
        base = self._n - len(self)
        key = h[n & m]
        best, best_len = -1, 0
        top = self.max_match
        cands = []
        lag = self._lag
        if lag:
            # the last known period first: after a disturbance the stream usually continues
            # one period after the ops it followed before; the occurrence at or just after
            # n - lag, then the one just before it (within 2 ops)
            t = n - lag
            for c in (t, t + 1, t + 2):
                if base <= c < n and h[c & m] == key:
                    cands.append(c)
                    break
            for c in (t - 1, t - 2):
                if base <= c < n and h[c & m] == key:
                    cands.append(c)
                    break
        c = prev[n & m]                     # then the most recent occurrences
        for _ in range(self.max_candidates):
            if c < base:
                break
            cands.append(c)
            c = prev[c & m]
        for c in cands:
            length = 1
            while (length < top and c - length >= base
                   and h[(c - length) & m] == h[(n - length) & m]):
                length += 1
            if length > best_len:
                best, best_len = c, length
                if length >= top:
                    break
        if best_len >= self.min_match:
            self._p = best + 1
            self._run = best_len
            if labels[n & m] == UNKNOWN:
                labels[n & m] = labels[best & m]

    def _set_pred_from_pointer(self) -> None:
        self._skip_strays()
        p = self._p
        assert p is not None
        j = p & self._mask
        self._nk = self._hist[j]
        self._nl = self._labels[j]
        self._nc = min(1.0, self._run / self.warm)
        self._ns = _PERIOD

    def _set_pred_markov(self) -> None:
        """Order-k Markov prediction from the recent successors of the current context.

        Looks at the last ``markov_window`` earlier occurrences of the current key; for each,
        counts how many of the ``k - 1`` keys before it match the current context; predicts the
        most frequent successor among the occurrences with the longest matching context
        (backing off to shorter contexts). Confidence = the count share of that successor,
        scaled by (context order used) / k."""
        h, prev, m = self._hist, self._prev, self._mask
        self._nk, self._nl, self._nc, self._ns = UNKNOWN, UNKNOWN, 0.0, _NONE
        if self._n == 0:
            return
        n = self._n - 1                     # position of the newest op
        base = self._n - len(self)
        k = self.markov_order
        occ = []
        c = prev[n & m]
        for _ in range(self.markov_window):
            if c < base:
                break
            occ.append(c)
            c = prev[c & m]
        by_order: list[dict[int, int]] = [{} for _ in range(k + 1)]
        for i in reversed(occ):             # oldest first: ties go to the first seen
            o = 1
            while o < k and i - o >= base and h[(i - o) & m] == h[(n - o) & m]:
                o += 1
            nxt = h[(i + 1) & m]
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

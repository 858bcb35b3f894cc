"""Measured A/B saving of a clock plan at run time (``joulebound run --plan P --verify``).

The same training run alternates **blocks of optimizer steps** at the GPU's default clocks (arm
*auto*: the controller is held at the safe pair) and under the plan (arm *plan*), meters every
block with the :class:`~joulebound.energy.meter.EnergyMeter` (one labelled window per block) and
compares energy and time **per step** between the arms.

Method (what the report says as ``method``):

* **Warm-up.** The first block of each arm is discarded: block 0 (auto) absorbs the first step's
  lazy initialisation and gives the step time for the block-length rule; block 1 (plan) lets the
  next-op predictor lock on and the first switches land.
* **Settle.** Each block's first steps are not metered (:func:`settle_steps_for`: enough steps to
  span ``SETTLE_PERIODS`` (2) counter updates, at least 1): the switch between arms (and, under
  the plan, the first phase's switch) happens there, and the meter's estimate of the counter at
  the window's start (it extrapolates the last update at the recent rate, for up to one update
  period) then rests on readings of the new arm only. A metered plan block is thus the plan in
  steady state, with the switches it makes every iteration.
* **Block length** (:func:`block_steps_for`): each metered block spans at least
  ``periods_per_block`` (100) updates of the energy counter — ``ceil(100 × sensor period / step
  time)`` steps, at least 2 — so the counter's quantisation (it steps once per update, every few
  tens of ms) is at most about 1 % of a block's energy and averages out over blocks.
* **Order ABBA** after the warm-up (auto, plan, plan, auto, auto, plan, ...): each pair of blocks
  is one auto and one plan block next to each other, and the alternating order makes a linear drift
  (warming up, a clock governor settling) cancel in the mean over each four blocks.
* **Statistics** (:func:`paired_relative_change`, pure): per pair the relative change
  ``plan / auto - 1`` of energy per step (and of time per step); their mean and a Student-t
  interval (90 %) over the pairs.
* **Stopping rule.** After every complete ABBA group (two pairs), from ``min_pairs`` (4) pairs on,
  the alternation stops when the energy interval's half-width is below ``target_pp`` (1
  percentage point), or when ``max_blocks`` blocks (warm-up included) have run. The rest of the run
  is under the plan. When the script ends first, the pairs measured so far are reported with their
  (wider) interval and the number of further pairs the rule estimates.

Every figure measured here is labelled with the meter's provenance (``measured`` for NVML).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MEASURED, MODELED

AUTO_ARM = "auto"
PLAN_ARM = "plan"
#: the role of a block that is one of a pair (the warm-up blocks' role is "warmup")
PAIRED = "paired"
#: measured-block order after the two warm-up blocks, repeated
ORDER = (AUTO_ARM, PLAN_ARM, PLAN_ARM, AUTO_ARM)
#: sensor updates a metered block must span (block-length rule)
PERIODS_PER_BLOCK = 100
#: fewest metered steps in a block
MIN_BLOCK_STEPS = 2
#: counter updates the unmetered start of every block spans (the switch between arms lands there)
SETTLE_PERIODS = 2
#: unmetered steps at the start of the first warm-up block (lazy initialisation)
SETTLE_STEPS = 1
#: metered steps of the first warm-up block (they give the step time for the block-length rule)
WARMUP_STEPS = 2
#: pairs needed before the stopping rule may stop (two ABBA groups)
MIN_PAIRS = 4
#: fewest blocks ``max_blocks`` may allow: 2 warm-up + 2 pairs (one ABBA group)
MIN_BLOCKS = 6
#: window flags that make a block's energy untrustworthy (its pair is dropped)
BAD_FLAGS = ("counter_reset", "counter_wraparound", "read_error", "energy_unavailable",
             "power_read_failed", "no_power_samples", "no_energy_sensor")


# -- pure statistics ---------------------------------------------------------------------------
@dataclass(frozen=True)
class PairedChange:
    """The mean relative change ``plan / auto - 1`` over paired blocks, with its interval.

    Attributes:
        mean: mean of the per-pair relative changes (fraction; -0.12 = 12 % less under the plan).
        ci: ``(low, high)`` Student-t interval of the mean at ``confidence`` (fractions).
        half_width: ``(high - low) / 2`` (fraction).
        sd: standard deviation of the per-pair changes (fraction).
        n: number of pairs.
        confidence: the interval's confidence level (0.90).
    """

    mean: float
    ci: tuple[float, float]
    half_width: float
    sd: float
    n: int
    confidence: float


def paired_relative_change(auto: Sequence[float], plan: Sequence[float],
                           confidence: float = 0.90) -> PairedChange:
    """Mean relative change of ``plan`` against ``auto`` over pairs, with a t-interval.

    Args:
        auto: per pair, the auto block's figure (e.g. energy per step, J; > 0).
        plan: per pair, the plan block's figure, same unit and order.
        confidence: two-sided confidence of the interval (0 < c < 1).

    Returns:
        :class:`PairedChange` of ``d_i = plan_i / auto_i - 1``: mean, ``mean ± t(n-1) · sd /
        sqrt(n)``.

    Raises:
        JouleboundError: fewer than 2 pairs, different lengths, a non-positive or non-finite
            auto figure, or a confidence outside (0, 1).
    """
    from scipy import stats

    a = np.asarray(auto, float)
    b = np.asarray(plan, float)
    if a.shape != b.shape or a.ndim != 1:
        raise JouleboundError(f"paired blocks: {a.size} auto and {b.size} plan figures; each pair "
                              "needs one of each")
    if a.size < 2:
        raise JouleboundError(f"a confidence interval needs at least 2 pairs of blocks, got "
                              f"{a.size}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and np.all(a > 0)):
        raise JouleboundError("paired blocks: every figure must be finite and the auto ones > 0")
    if not 0.0 < confidence < 1.0:
        raise JouleboundError(f"confidence must be between 0 and 1, got {confidence}")
    d = b / a - 1.0
    n = d.size
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    hw = float(stats.t.ppf(0.5 + confidence / 2.0, n - 1) * sd / math.sqrt(n))
    return PairedChange(mean, (mean - hw, mean + hw), hw, sd, n, confidence)


def pairs_needed(sd: float, target: float, confidence: float = 0.90,
                 cap: int = 100_000) -> int:
    """Fewest pairs ``n`` (>= 2) whose t-interval half-width ``t(n-1) · sd / sqrt(n)`` is below
    ``target`` (both fractions), for per-pair spread ``sd``; ``cap`` when even that is not enough."""
    from scipy import stats

    if sd <= 0:
        return 2
    for n in range(2, cap):
        if stats.t.ppf(0.5 + confidence / 2.0, n - 1) * sd / math.sqrt(n) < target:
            return n
    return cap


def block_steps_for(step_s: float, sensor_period_s: float | None,
                    periods: int = PERIODS_PER_BLOCK, min_steps: int = MIN_BLOCK_STEPS) -> int:
    """Metered steps per block: enough that a block spans ``periods`` energy-counter updates.

    ``max(min_steps, ceil(periods × sensor_period_s / step_s))``; ``sensor_period_s`` ``None`` or
    0 means the NVML default (:data:`joulebound.energy.nvml.DEFAULT_SENSOR_PERIOD_S`, 0.1 s).
    ``step_s``: measured time of one training step (s, > 0)."""
    if sensor_period_s is None or sensor_period_s <= 0:
        from joulebound.energy.nvml import DEFAULT_SENSOR_PERIOD_S

        sensor_period_s = DEFAULT_SENSOR_PERIOD_S
    if not step_s > 0 or not math.isfinite(step_s):
        return max(min_steps, 1)
    return max(int(min_steps), math.ceil(periods * sensor_period_s / step_s - 1e-9))


def settle_steps_for(step_s: float, sensor_period_s: float | None,
                     periods: int = SETTLE_PERIODS) -> int:
    """Unmetered steps at the start of each block: ``max(1, ceil(periods × sensor_period_s /
    step_s))`` (``sensor_period_s`` ``None``/0: the NVML default, 0.1 s)."""
    return block_steps_for(step_s, sensor_period_s, periods, min_steps=1)


def measured_block_arm(m: int) -> str:
    """Arm of measured block ``m`` (0-based, after the warm-up): ABBA repeated."""
    return ORDER[m % len(ORDER)]


# -- the block schedule (driven by optimizer steps) --------------------------------------------
@dataclass
class Block:
    """One block of steps and its metered window.

    Attributes:
        index: block number (0 and 1 are the warm-up blocks).
        arm: ``"auto"`` or ``"plan"``.
        role: ``"warmup"`` (discarded) or ``"paired"`` (one of a pair of blocks).
        steps: metered steps (the window's), after ``settle`` unmetered ones.
        settle: unmetered steps at the block's start.
        label: the meter window's name.
        energy_j: GPU energy of the window (J), ``None`` when unknown.
        duration_s: the window's duration (s).
        flags: the window's flags.
        complete: the block ran all its steps (the last one may be cut by the script's end).
    """

    index: int
    arm: str
    role: str
    steps: int
    settle: int
    label: str
    energy_j: float | None = None
    duration_s: float | None = None
    flags: list[str] = field(default_factory=list)
    complete: bool = False

    @property
    def usable(self) -> bool:
        """Complete, with a known positive duration and energy and no bad flag."""
        return (self.complete and self.energy_j is not None and self.energy_j > 0
                and bool(self.duration_s) and not any(f in BAD_FLAGS for f in self.flags))

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "arm": self.arm, "role": self.role, "label": self.label,
                "steps": self.steps, "settle_steps": self.settle, "energy_j": self.energy_j,
                "duration_s": self.duration_s, "flags": list(self.flags),
                "complete": self.complete}


class ABVerifier:
    """Alternate auto and plan blocks of optimizer steps and meter each (see the module docs).

    Drive it with :meth:`start` (before the script runs, with the controller), :meth:`step` (after
    every optimizer step) and :meth:`finish` (after the script); :meth:`report` gives the result.

    Args:
        meter: the :class:`~joulebound.energy.meter.EnergyMeter` of the controlled GPU.
        block_steps: metered steps per block; ``None``: :func:`block_steps_for` from the first
            warm-up block's step time and the metered GPU's sensor period.
        sensor_period_s: the energy counter's update period (s) for the rule; ``None``: the
            meter's GPU channel's (else the NVML default).
        target_pp: stop once the energy interval's half-width is below this (percentage points).
        max_blocks: stop alternating after this many blocks (warm-up included).
        min_pairs: pairs before the stopping rule may stop.
        confidence: the intervals' confidence.
        settle_steps: unmetered steps at each block's start; ``None``: :func:`settle_steps_for`
            (block 0: :data:`SETTLE_STEPS`).
        warmup_steps, periods_per_block: see the module docs.
    """

    def __init__(self, meter: Any, *, block_steps: int | None = None,
                 sensor_period_s: float | None = None, target_pp: float = 1.0,
                 max_blocks: int = 40, min_pairs: int = MIN_PAIRS, confidence: float = 0.90,
                 settle_steps: int | None = None, warmup_steps: int = WARMUP_STEPS,
                 periods_per_block: int = PERIODS_PER_BLOCK) -> None:
        check_options(block_steps=block_steps, max_blocks=max_blocks, target_pp=target_pp)
        self.meter = meter
        self.fixed_block_steps = block_steps
        self.block_steps: int | None = block_steps
        self.sensor_period_s = (sensor_period_s if sensor_period_s is not None
                                else _meter_sensor_period(meter))
        self.target = float(target_pp) / 100.0
        self.max_blocks = int(max_blocks)
        self.min_pairs = int(min_pairs)
        self.confidence = float(confidence)
        self.fixed_settle = settle_steps
        self.settle: int = SETTLE_STEPS if settle_steps is None else int(settle_steps)
        self.warmup_steps = int(warmup_steps)
        self.periods = int(periods_per_block)
        self.blocks: list[Block] = []
        self.steps_seen = 0
        self.stopped: str | None = None   # "target" | "max-blocks" | None (still alternating)
        self.step_time_s: float | None = None
        self._done_in_block = 0
        self._open = False
        self._ctl: Any = None
        self._estimate: PairedChange | None = None

    # -- driving --------------------------------------------------------------------------
    def start(self, ctl: Any) -> None:
        """Before the script's first op: hold the controller at auto and open block 0."""
        self._ctl = ctl
        self._begin(Block(0, AUTO_ARM, "warmup", self.warmup_steps, self.settle,
                          self._label(0, "warmup", AUTO_ARM)))

    def step(self, ctl: Any = None) -> None:
        """After each optimizer step: meter, close the block, open the next."""
        self.steps_seen += 1
        if self.stopped or not self.blocks:
            return
        b = self.blocks[-1]
        self._done_in_block += 1
        if self._done_in_block == b.settle and not self._open:
            self._begin_window(b)
        elif self._done_in_block == b.settle + b.steps:
            self._end_window(b, complete=True)
            self._next(b)

    def finish(self, ctl: Any = None) -> None:
        """After the script: end a window still open (that block is incomplete, not used)."""
        if self.blocks and self._open:
            self._end_window(self.blocks[-1], complete=False)

    # -- internals ------------------------------------------------------------------------
    @staticmethod
    def _label(i: int, role: str, arm: str) -> str:
        return f"verify {i:03d} {role} {arm}"

    def _begin(self, b: Block) -> None:
        self.blocks.append(b)
        self._done_in_block = 0
        if self._ctl is not None:
            self._ctl.hold(b.arm == AUTO_ARM)
        if b.settle == 0:
            self._begin_window(b)

    def _begin_window(self, b: Block) -> None:
        self.meter.begin_window(b.label)
        self._open = True

    def _end_window(self, b: Block, complete: bool) -> None:
        res = self.meter.end_window(b.label)
        self._open = False
        b.energy_j, b.duration_s, b.flags = res.energy_j, res.duration_s, list(res.flags)
        b.complete = complete

    def _next(self, done: Block) -> None:
        i = done.index + 1
        if done.index == 0:        # warm-up auto: its step time sets the block length
            if done.duration_s and done.steps:
                self.step_time_s = done.duration_s / done.steps
            if self.block_steps is None:
                self.block_steps = block_steps_for(self.step_time_s or 0.0, self.sensor_period_s,
                                                   self.periods)
            if self.fixed_settle is None:
                self.settle = settle_steps_for(self.step_time_s or 0.0, self.sensor_period_s)
            self._begin(Block(i, PLAN_ARM, "warmup", self.block_steps, self.settle,
                              self._label(i, "warmup", PLAN_ARM)))
            return
        m = i - 2                  # the next measured block's number
        if done.role == PAIRED and (m % 2 == 0):      # a pair was just completed
            if self._should_stop(i):
                if self._ctl is not None:
                    self._ctl.hold(False)     # the rest of the run under the plan
                return
        arm = measured_block_arm(m)
        assert self.block_steps is not None
        self._begin(Block(i, arm, PAIRED, self.block_steps, self.settle,
                          self._label(i, PAIRED, arm)))

    def _should_stop(self, blocks_run: int) -> bool:
        pairs = blocks_run // 2 - 1
        if pairs >= self.min_pairs and pairs % 2 == 0:
            try:
                est = self.energy_estimate()
            except JouleboundError:
                est = None
            if est is not None and est.half_width < self.target:
                self.stopped = "target"
                return True
        if blocks_run + 2 > self.max_blocks:     # the next pair would pass the cap
            self.stopped = "max-blocks"
            return True
        return False

    # -- results --------------------------------------------------------------------------
    def pairs(self) -> list[tuple[Block, Block]]:
        """``(auto block, plan block)`` of every complete pair of paired blocks."""
        meas = [b for b in self.blocks if b.role == PAIRED and b.complete]
        out = []
        for j in range(len(meas) // 2):
            x, y = meas[2 * j], meas[2 * j + 1]
            out.append((x, y) if x.arm == AUTO_ARM else (y, x))
        return out

    def _per_step(self, what: str) -> tuple[list[float], list[float], int]:
        a, p, dropped = [], [], 0
        for x, y in self.pairs():
            if not (x.usable and y.usable):
                dropped += 1
                continue
            get = (lambda b: b.energy_j / b.steps) if what == "energy" else \
                (lambda b: b.duration_s / b.steps)
            a.append(get(x))
            p.append(get(y))
        return a, p, dropped

    def energy_estimate(self) -> PairedChange:
        """Energy per step, plan vs auto, over the usable pairs."""
        a, p, _ = self._per_step("energy")
        return paired_relative_change(a, p, self.confidence)

    def time_estimate(self) -> PairedChange:
        """Time per step, plan vs auto, over the usable pairs."""
        a, p, _ = self._per_step("time")
        return paired_relative_change(a, p, self.confidence)

    def method(self) -> str:
        """The method in one paragraph (``--json`` ``method``)."""
        fixed = (f"; here {self.fixed_block_steps} steps, set by --verify-block-steps"
                 if self.fixed_block_steps else "")
        return (f"paired A/B blocks of optimizer steps, order ABBA after one discarded warm-up "
                f"block per arm; each block's first {self.settle} step(s) unmetered (>= "
                f"{SETTLE_PERIODS} counter updates, >= 1 step: the switch between arms lands "
                f"there); block length: each metered block spans >= "
                f"{self.periods} energy-counter updates (ceil({self.periods} x sensor period / "
                f"step time), >= {MIN_BLOCK_STEPS} steps){fixed}; "
                f"per pair the relative change plan/auto - 1 of energy and time per step; mean "
                f"and Student-t {self.confidence:.0%} interval over pairs; alternation stops when "
                f"the energy interval's half-width < {self.target * 100:g} pp (checked after each "
                f"ABBA group from {self.min_pairs} pairs) or after {self.max_blocks} blocks")

    def report(self, modeled: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``verify`` object of ``joulebound run --json``: ``measured`` and ``modeled``.

        Raises:
            JouleboundError: too few usable pairs for an interval (the message says how many
                steps a run needs).
        """
        a, _, dropped = self._per_step("energy")
        if len(a) < 2:
            raise JouleboundError(self._too_few_message(dropped))
        e = self.energy_estimate()
        t = self.time_estimate()
        pairs = self.pairs()
        used = [(x, y) for x, y in pairs if x.usable and y.usable]
        reached = e.half_width < self.target
        meas: dict[str, Any] = {
            "energy_delta_pct": 100 * e.mean,
            "energy_ci90_pct": [100 * e.ci[0], 100 * e.ci[1]],
            "energy_half_width_pp": 100 * e.half_width,
            "time_delta_pct": 100 * t.mean,
            "time_ci90_pct": [100 * t.ci[0], 100 * t.ci[1]],
            "time_half_width_pp": 100 * t.half_width,
            "confidence": self.confidence,
            "pairs": len(used),
            "pairs_dropped": dropped,
            "blocks": len(self.blocks),
            "steps_per_block": self.block_steps,
            "settle_steps": self.settle,
            "warmup_blocks": 2,
            "order": "ABBA",
            "energy_per_step_j": {AUTO_ARM: float(np.mean([x.energy_j / x.steps for x, _ in used])),
                                  PLAN_ARM: float(np.mean([y.energy_j / y.steps for _, y in used]))},
            "time_per_step_s": {AUTO_ARM: float(np.mean([x.duration_s / x.steps for x, _ in used])),
                                PLAN_ARM: float(np.mean([y.duration_s / y.steps for _, y in used]))},
            "sensor_period_s": self.sensor_period_s,
            "step_time_s": self.step_time_s,
            "target_half_width_pp": self.target * 100,
            "target_reached": bool(reached),
            "stopped_by": self.stopped or "end of script",
            "pairs_needed_for_target": pairs_needed(e.sd, self.target, self.confidence),
            "steps_metered": sum(b.steps for x, y in used for b in (x, y)),
            "steps_seen": self.steps_seen,
            "held_ops": int(getattr(getattr(self._ctl, "stats", None), "held_ops", 0)),
            "method": self.method(),
            "provenance": getattr(self.meter.backend, "provenance", MEASURED),
            "windows": [b.to_json() for b in self.blocks],
        }
        out: dict[str, Any] = {"measured": meas, "modeled": None}
        if modeled is not None:
            out["modeled"] = {
                "energy_delta_pct": _pct(modeled.get("energy_delta")),
                "time_delta_pct": _pct(modeled.get("time_delta")),
                "provenance": modeled.get("provenance", MODELED),
                "source": "the plan file's prediction per iteration against the default clocks",
            }
        return out

    def _too_few_message(self, dropped: int) -> str:
        s = self.block_steps or MIN_BLOCK_STEPS
        per = s + self.settle
        need = (SETTLE_STEPS + self.warmup_steps) + per + 2 * 2 * per
        got = self.steps_seen
        if dropped:
            return (f"--verify: {dropped} pair(s) of blocks had no usable energy reading (flags: "
                    f"{sorted({f for b in self.blocks for f in b.flags if f in BAD_FLAGS})}); "
                    "at least 2 usable pairs are needed for an interval. Check the GPU's energy "
                    "counter (`joulebound measure` / nvidia-smi) and run again")
        if got == 0:
            return ("--verify: the script made no torch.optim optimizer step, so no block of "
                    "steps could be metered; --verify needs a training loop with an optimizer")
        return (f"--verify: the script made {got} optimizer steps; the A/B check needs at least "
                f"{need} ({SETTLE_STEPS + self.warmup_steps} for the auto warm-up block, {per} for "
                f"the plan warm-up block and 4 measured blocks of {s} metered + {self.settle} "
                f"settle steps = 2 pairs) and about "
                f"{(SETTLE_STEPS + self.warmup_steps) + per * (1 + 2 * self.min_pairs)} for the "
                f"{self.min_pairs} pairs the stopping rule starts from. Run the script for more "
                "steps, or pass a smaller --verify-block-steps (each block should still span "
                f"many energy-counter updates: {self.periods} x "
                f"{(self.sensor_period_s or 0.1) * 1e3:g} ms)")


def _pct(x: Any) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else 100.0 * float(x)


def _meter_sensor_period(meter: Any) -> float | None:
    """The longest sensor period (s) of the meter's GPU channels, ``None`` when none is known."""
    try:
        chans = meter.backend.channels
        per = [chans[i].sensor_period_s for i in meter.channels if chans[i].kind == "gpu"]
    except Exception:
        return None
    per = [p for p in per if p]
    return max(per) if per else None


def check_options(*, block_steps: int | None = None, max_blocks: int = 40,
                  target_pp: float = 1.0) -> None:
    """Refuse ``--verify`` settings that cannot work, saying what to pass instead."""
    if block_steps is not None and block_steps < 1:
        raise JouleboundError(f"--verify-block-steps must be >= 1 (metered optimizer steps per "
                              f"block), got {block_steps}")
    if max_blocks < MIN_BLOCKS:
        raise JouleboundError(f"--verify-max-blocks must be >= {MIN_BLOCKS} (2 warm-up blocks + "
                              f"2 pairs for an interval), got {max_blocks}")
    if not target_pp > 0:
        raise JouleboundError(f"the target half-width must be > 0 percentage points, got "
                              f"{target_pp}")


# -- the run ------------------------------------------------------------------------------------
def default_meter(gpu: int | str) -> Any:
    """An NVML :class:`~joulebound.energy.meter.EnergyMeter` of the controlled GPU (``gpu``: a
    CUDA-visible index or a UUID), GPU channel only.

    Raises:
        JouleboundError: no readable NVML, or ``gpu`` not found (what to do is in the message).
    """
    from joulebound.energy.meter import EnergyMeter, make_backend

    try:
        backend = make_backend("nvml", gpus=None)
    except JouleboundError as exc:
        raise JouleboundError(f"--verify meters the GPU's energy counter through NVML, which "
                              f"is not readable here ({exc})") from exc
    if isinstance(gpu, int):
        idx = gpu
    else:
        hits = [c.index for c in backend.channels if c.kind == "gpu" and c.uuid.startswith(gpu)]
        if len(hits) != 1:
            backend.close()
            raise JouleboundError(f"--verify: GPU {gpu!r} is not one of the GPUs NVML sees "
                                  f"({[c.uuid for c in backend.channels]})")
        idx = hits[0]
    return EnergyMeter(backend=backend, gpus=[idx])


#: what builds the meter of a verify run (tests point it at a fake GPU's clock)
MeterFactory = Callable[[int | str], Any]


def run_verified(cmd: Sequence[str], plan: Any, actuator: str = "nvml", *,
                 gpu: int | str = 0, block_steps: int | None = None, max_blocks: int = 40,
                 target_pp: float = 1.0, meter: Any = None,
                 meter_factory: MeterFactory | None = None, **run_kwargs: Any) -> Any:
    """``joulebound run --plan P --verify``: run ``cmd`` under ``plan`` in alternating auto and
    plan blocks and add the measured A/B saving to the result (``result.verify``).

    Args:
        cmd, plan, actuator, gpu: as :func:`joulebound.runtime.session.run` (``simulated``
            is refused: it changes no real clock; ``dry-run`` runs an A/A check — both arms at
            the default clocks — whose interval shows the noise floor).
        block_steps, max_blocks, target_pp: see :class:`ABVerifier`.
        meter: the energy meter (default: :func:`default_meter` of ``gpu`` through
            ``meter_factory``); closed here when made here.
        run_kwargs: passed to :func:`~joulebound.runtime.session.run`.

    Returns:
        The :class:`~joulebound.runtime.session.RunResult` with ``verify`` set.

    Raises:
        JouleboundError: no plan, the simulated actuator, bad options, no readable energy
            counter, or too few steps for two pairs of blocks.
    """
    from joulebound.runtime.session import plan_summary, run

    if plan is None:
        raise JouleboundError("--verify compares the plan against the default clocks: give "
                              "--plan PLAN.json")
    if actuator == "simulated":
        raise JouleboundError("--verify measures the GPU's energy counter while the clocks "
                              "really change; --actuator simulated changes no clock (its figures "
                              "are modeled). Use --actuator nvml or helper on a GPU you own, or "
                              "--actuator dry-run for an A/A check of the noise floor")
    if run_kwargs.get("record_path"):
        raise JouleboundError("--verify and --record cannot be combined: record first, plan, "
                              "then run --plan P --verify")
    check_options(block_steps=block_steps, max_blocks=max_blocks, target_pp=target_pp)
    own = meter is None
    if own:
        meter = (meter_factory or default_meter)(gpu)
    try:
        ver = ABVerifier(meter, block_steps=block_steps, max_blocks=max_blocks,
                         target_pp=target_pp)
        res = run(cmd, plan, actuator, gpu=gpu, observer=ver, **run_kwargs)
    finally:
        if own:
            meter.close()
    try:
        res.verify = ver.report(plan_summary(plan))
    except JouleboundError as exc:
        if not res.stopped_by:
            raise
        res.notes.append(f"{exc} (the run was stopped by {res.stopped_by})")
        return res
    m = res.verify["measured"]
    if actuator == "dry-run":
        res.notes.append("--verify with --actuator dry-run: no clock was changed, both arms ran at "
                         "the default clocks (an A/A check: the interval shows the noise floor)")
    if not m["target_reached"]:
        more = max(m["pairs_needed_for_target"] - m["pairs"], 0)
        res.notes.append(
            f"the measured energy interval (±{m['energy_half_width_pp']:.2f} pp) is wider than "
            f"the ±{m['target_half_width_pp']:g} pp target ({m['stopped_by']}); the t rule "
            f"estimates about {more} more pair(s) of {m['steps_per_block']}-step blocks "
            f"(~{more * 2 * (m['steps_per_block'] + m['settle_steps'])} more steps)")
    return res

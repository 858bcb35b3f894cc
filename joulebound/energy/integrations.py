"""Energy windows inside training loops: a Hugging Face ``TrainerCallback`` and a plain-loop helper.

Hugging Face::

    from joulebound.energy.integrations import EnergyCallback
    trainer = Trainer(..., callbacks=[EnergyCallback(store="runs.db")])
    trainer.train()      # energy per logging interval in every log (TensorBoard, W&B, MLflow,
                         # log_history); windows "train", "interval:<k>", "epoch:<k>" in runs.db
    trainer.state.energy # the train-end summary

Lightning: :mod:`joulebound.energy.lightning`; Accelerate: :mod:`joulebound.energy.accelerate`.

Plain PyTorch::

    from joulebound.energy.integrations import metered
    for batch in metered(loader, meter, every=10):   # a window around every 10th step body
        loss = model(batch).loss; loss.backward(); opt.step(); opt.zero_grad()

Each rank of a DDP/FSDP job meters its own GPU (``LOCAL_RANK``); combine ranks with
:func:`joulebound.energy.distributed.aggregate` (the callback does it at the end of training when
``aggregate=True``, and logs the job total on rank 0).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from joulebound.energy.interval import IntervalEnergy
from joulebound.energy.meter import EnergyMeter
from joulebound.energy.results import WindowResult
from joulebound.energy.status import FINISHED

T = TypeVar("T")



def process_command(what: str) -> str:
    """The command line of this process, as a run of an in-process meter records it:
    ``python train.py --epochs 1 (Hugging Face Trainer, pid 4242)``."""
    import shlex

    argv = [os.path.basename(sys.executable) or "python", *sys.argv]
    return f"{shlex.join(argv)} ({what}, pid {os.getpid()})"


def metered(iterable: Iterable[T], meter: EnergyMeter | None = None, prefix: str = "step",
            every: int = 1, start: int = 0) -> Iterator[T]:
    """Yield from ``iterable``, measuring the loop body of every ``every``-th item as a window
    ``"<prefix>:<i>"``. The window begins when the item is handed out and ends when the next one
    is requested (or the loop ends / breaks). Results are in ``meter.results``."""
    meter = meter or EnergyMeter()
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    open_name: str | None = None
    try:
        for i, item in enumerate(iterable, start=start):
            if (i - start) % every == 0:
                open_name = f"{prefix}:{i}"
                meter.begin_window(open_name)
            yield item
            if open_name is not None:
                meter.end_window(open_name)
                open_name = None
    finally:
        if open_name is not None and open_name in meter.open_windows:
            meter.end_window(open_name)


class _EnergyCallbackHooks:
    """Hugging Face ``TrainerCallback``: energy per logging interval into the Trainer's logs.

    ``EnergyCallback`` is this class mixed with ``transformers.TrainerCallback`` (built on first
    access, so importing this module does not import transformers).

    At every Trainer log (``logging_steps``) it adds the energy since the previous log to the
    ``logs`` dict — J, Wh, average W, total so far, the provenance in each key
    (``energy/measured/gpu_j``, ``energy/modeled/cpu_dram_j``; see
    :mod:`joulebound.energy.interval`) — and to the entry just appended to
    ``state.log_history``. The callback moves itself first in the Trainer's callback list, so
    every reporting integration (TensorBoard, W&B, MLflow, ...) that runs after it sees the
    figures. At the end of training the train totals go into the final log and a summary dict
    into ``state.energy`` (and :attr:`summary`).

    Args:
        meter: an existing meter; default: a new ``EnergyMeter(backend, store=store)`` owned
            (and closed) by the callback.
        store: SQLite path or :class:`~joulebound.energy.store.Store` for a new meter.
        backend: backend for a new meter.
        per_step: also a window per optimizer step (``"step:<global_step>"``) in the meter/store.
        every: only every ``every``-th step gets a window (per-step windows cost ~tens of µs).
        per_epoch: a window per epoch (``"epoch:<k>"``).
        aggregate: at train end, gather all ranks' windows (collective) into ``job_windows``.
        log: add the interval figures to the Trainer logs.
        carbon_intensity: gCO2e/kWh or a region code (e.g. ``"FR"``): adds ``..._gco2e`` keys.
        prefix: the metric key prefix.
    """

    def __init__(self, meter: EnergyMeter | None = None, store: Any = None,
                 backend: str = "auto", per_step: bool = False, every: int = 1,
                 per_epoch: bool = True, aggregate: bool = False, log: bool = True,
                 carbon_intensity: str | float | None = None, prefix: str = "energy") -> None:
        from joulebound.energy.carbon import carbon_intensity as parse_ci

        self._own = meter is None
        self.meter = meter
        self._store = store
        self._backend = backend
        self.per_step = per_step
        self.every = max(1, int(every))
        self.per_epoch = per_epoch
        self.aggregate = aggregate
        self.log = log
        self.carbon = parse_ci(carbon_intensity)
        self.prefix = prefix
        self._epoch = 0
        self._step_name: str | None = None
        self._epoch_name: str | None = None
        self.last_step: WindowResult | None = None
        self.intervals: IntervalEnergy | None = None
        self.train: WindowResult | None = None
        self.summary: dict[str, Any] = {}
        self.job_windows: list = []
        #: ``{step, loss, window}`` of every Trainer log with a loss (the interval window that
        #: ended at it), stored with the run: ``joulebound report`` draws energy per step
        #: beside the loss
        self.train_log: list[dict[str, Any]] = []

    # -- order ----------------------------------------------------------------------------------
    def _move_first(self) -> None:
        """Put this callback first in the Trainer's ``CallbackHandler`` (found in the calling
        frames), so that reporting integrations see the figures it adds in ``on_log``."""
        try:
            from transformers.trainer_callback import CallbackHandler
        except ImportError:  # pragma: no cover - only called by a Trainer
            return
        frame = sys._getframe(1)
        for _ in range(6):
            if frame is None:
                return
            handler = frame.f_locals.get("self")
            if isinstance(handler, CallbackHandler):
                cbs = handler.callbacks
                if cbs and cbs[0] is not self and any(c is self for c in cbs):
                    cbs.remove(self)
                    cbs.insert(0, self)
                return
            frame = frame.f_back

    # -- hooks --------------------------------------------------------------------------------
    def on_init_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._move_first()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._move_first()   # also when added with trainer.add_callback after __init__
        if self.meter is None:
            from dataclasses import asdict

            self.meter = EnergyMeter(
                self._backend, store=self._store, command=process_command("Hugging Face Trainer"),
                meta={"carbon": asdict(self.carbon)} if self.carbon is not None else None)
        self.train_log = []
        self.intervals = IntervalEnergy(self.meter, prefix=self.prefix, carbon=self.carbon)
        self.intervals.start()

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.per_epoch and self.meter is not None:
            self._epoch_name = f"epoch:{self._epoch}"
            self.meter.begin_window(self._epoch_name)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        step = int(getattr(state, "global_step", 0))
        if self.per_step and self.meter is not None and step % self.every == 0:
            self._step_name = f"step:{step}"
            self.meter.begin_window(self._step_name)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self._step_name is not None and self.meter is not None:
            self.last_step = self.meter.end_window(self._step_name)
            self._step_name = None

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self._epoch_name is not None and self.meter is not None:
            self.meter.end_window(self._epoch_name)
            self._epoch_name = None
        self._epoch += 1

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None,
               **kw: Any) -> None:
        if not self.log or logs is None or self.intervals is None or not self.intervals.running:
            return
        if "train_runtime" in logs:   # the Trainer's final summary log: the train totals
            metrics, self.summary = self.intervals.finish()
            self.train = self.intervals.train
        else:
            metrics = self.intervals.report()
            if "loss" in logs and self.intervals.last is not None:   # for the report's plot
                self.train_log.append({"step": int(getattr(state, "global_step", 0)),
                                       "loss": float(logs["loss"]),
                                       "window": self.intervals.last.name})
        logs.update(metrics)
        hist = getattr(state, "log_history", None)
        if hist and isinstance(hist[-1], dict) and all(hist[-1].get(k) == v for k, v in
                                                       logs.items() if k in hist[-1]):
            hist[-1].update(metrics)   # the entry the Trainer appended just before on_log

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.meter is None:
            return
        for name in (self._step_name, self._epoch_name):
            if name is not None and name in self.meter.open_windows:
                self.meter.end_window(name)
        self._step_name = self._epoch_name = None
        if self.intervals is not None and self.intervals.running:
            _metrics, self.summary = self.intervals.finish()
            self.train = self.intervals.train
        if self.aggregate:
            from joulebound.energy.distributed import aggregate

            self.job_windows = aggregate(self.meter)
        if state is not None and self.summary:
            state.energy = dict(self.summary)
        if self.train_log and self.meter.store is not None:
            self.meter.store.update_meta(self.meter.run_id, {"train_log": self.train_log})
        if self._own:
            self.meter.close(status=FINISHED)
            self.meter = None   # a second train() gets a new meter (and a new run)


def __getattr__(name: str) -> Any:
    """Build ``EnergyCallback`` lazily: a real ``transformers.TrainerCallback`` subclass."""
    if name == "EnergyCallback":
        try:
            from transformers import TrainerCallback
        except ImportError:  # pragma: no cover - transformers is optional
            bases: tuple[type, ...] = (_EnergyCallbackHooks,)
        else:
            bases = (_EnergyCallbackHooks, TrainerCallback)
        cls = type("EnergyCallback", bases, {"__doc__": _EnergyCallbackHooks.__doc__,
                                               "__module__": __name__})
        globals()["EnergyCallback"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

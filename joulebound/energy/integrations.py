"""Energy windows inside training loops: a Hugging Face ``TrainerCallback`` and a plain-loop helper.

Hugging Face::

    from joulebound.energy.integrations import EnergyCallback
    trainer = Trainer(..., callbacks=[EnergyCallback(store="runs.db")])
    trainer.train()      # windows "train", "epoch:<k>", "step:<n>" committed to runs.db

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
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from .meter import EnergyMeter, WindowResult

T = TypeVar("T")



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
    """Hugging Face ``TrainerCallback`` writing energy windows per step and epoch.

    ``EnergyCallback`` is this class mixed with ``transformers.TrainerCallback`` (built on first
    access, so importing this module does not import transformers).

    Args:
        meter: an existing meter; default: a new ``EnergyMeter(backend, store=store)`` owned
            (and closed) by the callback.
        store: SQLite path or :class:`~joulebound.energy.store.Store` for a new meter.
        backend: backend for a new meter.
        per_step: a window per optimizer step (``"step:<global_step>"``).
        every: only every ``every``-th step gets a window (per-step windows cost ~tens of µs).
        per_epoch: a window per epoch (``"epoch:<k>"``).
        aggregate: at train end, gather all ranks' windows (collective) into ``job_windows``.
        log: add ``energy_j``/``energy_provenance`` of the last finished step to the Trainer logs.
    """

    def __init__(self, meter: EnergyMeter | None = None, store: Any = None,
                 backend: str = "auto", per_step: bool = True, every: int = 1,
                 per_epoch: bool = True, aggregate: bool = False, log: bool = True) -> None:
        self._own = meter is None
        self.meter = meter
        self._store = store
        self._backend = backend
        self.per_step = per_step
        self.every = max(1, int(every))
        self.per_epoch = per_epoch
        self.aggregate = aggregate
        self.log = log
        self._epoch = 0
        self._step_name: str | None = None
        self._epoch_name: str | None = None
        self.last_step: WindowResult | None = None
        self.train: WindowResult | None = None
        self.job_windows: list = []

    # -- hooks --------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.meter is None:
            self.meter = EnergyMeter(self._backend, store=self._store,
                                     command=f"transformers.Trainer (pid {os.getpid()})")
        self.meter.begin_window("train")

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
        if self.log and logs is not None and self.last_step is not None:
            logs["step_energy_j"] = self.last_step.energy_j
            logs["step_energy_provenance"] = (self.last_step.provenance
                                              if self.last_step.devices else "no sensor")

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.meter is None:
            return
        for name in (self._step_name, self._epoch_name):
            if name is not None and name in self.meter.open_windows:
                self.meter.end_window(name)
        self._step_name = self._epoch_name = None
        if "train" in self.meter.open_windows:
            self.train = self.meter.end_window("train")
        if self.aggregate:
            from .distributed import aggregate

            self.job_windows = aggregate(self.meter)
        if self._own:
            self.meter.close()


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

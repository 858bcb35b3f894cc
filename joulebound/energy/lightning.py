"""PyTorch Lightning: energy per logging interval into every logger of the ``Trainer``.

```python
import lightning.pytorch as pl            # or: import pytorch_lightning as pl
from joulebound.energy.lightning import EnergyCallback

cb = EnergyCallback(store="runs.db")
trainer = pl.Trainer(callbacks=[cb], log_every_n_steps=10, logger=pl.loggers.TensorBoardLogger("tb"))
trainer.fit(model, loader)
cb.summary                                # the train totals (also logged to every logger)
```

Every ``log_every_n_steps`` optimizer steps (or ``every_n_steps``) the energy since the previous
report goes to each of ``trainer.loggers`` (``log_metrics``, same keys as the Hugging Face
callback: :mod:`joulebound.energy.interval`); at the end of ``fit`` the last interval and the
train totals. Needs ``pytorch-lightning`` or ``lightning`` (the ``[lightning]`` extra).
"""

from __future__ import annotations

import os
from typing import Any

from joulebound.energy.interval import IntervalEnergy
from joulebound.energy.meter import EnergyMeter
from joulebound.energy.results import WindowResult
from joulebound.energy.status import FINISHED


def _callback_base() -> type:
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback
        except ImportError as exc:
            raise ImportError("joulebound.energy.lightning needs PyTorch Lightning: pip install "
                              "'joulebound[lightning]' (pytorch-lightning) or lightning") from exc
    return Callback


class _LightningHooks:
    """Lightning ``Callback`` metering ``fit`` (see the module docstring).

    Args:
        meter: an existing meter; default: a new ``EnergyMeter(backend, store=store)`` owned
            (and closed) by the callback.
        store: SQLite path or Store for a new meter.
        backend: backend for a new meter.
        every_n_steps: report every this many optimizer steps (default: the Trainer's
            ``log_every_n_steps``).
        carbon_intensity: gCO2e/kWh or a region code: adds ``..._gco2e`` keys.
        prefix: metric key prefix.
    """

    def __init__(self, meter: EnergyMeter | None = None, store: Any = None,
                 backend: str = "auto", every_n_steps: int | None = None,
                 carbon_intensity: str | float | None = None, prefix: str = "energy") -> None:
        from joulebound.energy.carbon import carbon_intensity as parse_ci

        self._own = meter is None
        self.meter = meter
        self._store = store
        self._backend = backend
        self.every_n_steps = every_n_steps
        self.carbon = parse_ci(carbon_intensity)
        self.prefix = prefix
        self.intervals: IntervalEnergy | None = None
        self.history: list[tuple[int, dict[str, float]]] = []
        self.train: WindowResult | None = None
        self.summary: dict[str, Any] = {}
        self._last_step = 0

    @staticmethod
    def _logged_step(trainer: Any) -> int:
        """The step Lightning gives the metrics ``self.log`` records in the batch now ending:
        its count of batches that stepped the optimizer *before* this one (the loss of the
        10th step is logged at 9). Lightning keeps it on the fit loop; ``global_step - 1``
        where that is missing (both agree once the batch's optimizer step ran)."""
        loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        n = getattr(loop, "_batches_that_stepped", None)
        return int(n) if isinstance(n, int) else max(int(trainer.global_step) - 1, 0)

    def _log(self, trainer: Any, metrics: dict[str, float], step: int) -> None:
        self.history.append((step, metrics))
        for lg in getattr(trainer, "loggers", []) or []:
            lg.log_metrics(metrics, step=step)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self.meter is None:
            self.meter = EnergyMeter(self._backend, store=self._store,
                                     command=f"lightning.Trainer.fit (pid {os.getpid()})")
        self.intervals = IntervalEnergy(self.meter, prefix=self.prefix, carbon=self.carbon)
        self.intervals.start()
        self._last_step = int(trainer.global_step)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.intervals is None or not self.intervals.running:
            return
        n = int(self.every_n_steps or getattr(trainer, "log_every_n_steps", 50) or 50)
        step = int(trainer.global_step)
        # Lightning logs a batch's metrics when (its logged step + 1) % log_every_n_steps == 0,
        # i.e. when the optimizer step count reaches a multiple of n: the same batches here,
        # recorded at the same step as the loss beside them
        if step > self._last_step and step % n == 0:
            self._last_step = step
            self._log(trainer, self.intervals.report(), self._logged_step(trainer))

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self.intervals is None or not self.intervals.running:
            return
        metrics, self.summary = self.intervals.finish()
        self.train = self.intervals.train
        # after the last batch the fit loop has counted it: its logged step is one less
        self._log(trainer, metrics, max(int(trainer.global_step) - 1, 0))
        for lg in getattr(trainer, "loggers", []) or []:
            if hasattr(lg, "save"):
                lg.save()
        if self._own and self.meter is not None:
            self.meter.close(status=FINISHED)
            self.meter = None

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self._own and self.meter is not None:
            from joulebound.energy.status import from_exception

            status, code = from_exception(exception)
            self.meter.close(status=status, exit_code=code)
            self.meter = None


def __getattr__(name: str) -> Any:
    """Build ``EnergyCallback`` lazily: a real Lightning ``Callback`` subclass."""
    if name == "EnergyCallback":
        cls = type("EnergyCallback", (_LightningHooks, _callback_base()),
                   {"__doc__": _LightningHooks.__doc__, "__module__": __name__})
        globals()["EnergyCallback"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Hugging Face Accelerate: energy per logging interval through ``accelerator.log``, so it reaches
every tracker started with ``accelerator.init_trackers`` (TensorBoard, W&B, MLflow, ...).

```python
from accelerate import Accelerator
from joulebound.energy.accelerate import EnergyHook

accelerator = Accelerator(log_with="tensorboard", project_dir="runs")
accelerator.init_trackers("my-run")
with EnergyHook(accelerator, every=10, store="runs.db") as energy:
    for step, batch in enumerate(loader):
        ...; accelerator.backward(loss); optimizer.step(); optimizer.zero_grad()
        energy.step()                     # every 10th call logs the interval's energy
accelerator.end_training()
energy.summary                            # the train totals (also logged)
```

Keys as the Hugging Face callback's (:mod:`joulebound.energy.interval`). Each process meters its
own GPU (``LOCAL_RANK``); ``accelerator.log`` writes on the main process only.
"""

from __future__ import annotations

import os
from typing import Any

from joulebound.energy.interval import IntervalEnergy
from joulebound.energy.meter import EnergyMeter
from joulebound.energy.results import WindowResult
from joulebound.energy.status import from_exception


class EnergyHook:
    """Meter an Accelerate training loop (see the module docstring).

    Args:
        accelerator: the ``accelerate.Accelerator``.
        every: log every this many :meth:`step` calls.
        meter: an existing meter; default: a new ``EnergyMeter(backend, store=store)`` owned
            (and closed) by the hook.
        store / backend: for a new meter.
        carbon_intensity: gCO2e/kWh or a region code: adds ``..._gco2e`` keys.
        prefix: metric key prefix.
    """

    def __init__(self, accelerator: Any, every: int = 10, meter: EnergyMeter | None = None,
                 store: Any = None, backend: str = "auto",
                 carbon_intensity: str | float | None = None, prefix: str = "energy") -> None:
        from joulebound.core.errors import JouleboundError
        from joulebound.energy.carbon import carbon_intensity as parse_ci

        if every < 1:
            raise JouleboundError(f"every must be >= 1 step, got {every}")
        self.accelerator = accelerator
        self.every = int(every)
        self._own = meter is None
        self.meter = meter or EnergyMeter(backend, store=store,
                                          command=f"accelerate loop (pid {os.getpid()})")
        self.intervals = IntervalEnergy(self.meter, prefix=prefix, carbon=parse_ci(
            carbon_intensity))
        self.steps = 0
        self.history: list[tuple[int, dict[str, float]]] = []
        self.train: WindowResult | None = None
        self.summary: dict[str, Any] = {}
        self.intervals.start()

    def _log(self, metrics: dict[str, float]) -> None:
        self.history.append((self.steps, metrics))
        self.accelerator.log(metrics, step=self.steps)

    def step(self) -> dict[str, float] | None:
        """Count one optimizer step; every ``every`` steps log and return the interval's
        metrics (else ``None``)."""
        self.steps += 1
        if self.steps % self.every or not self.intervals.running:
            return None
        m = self.intervals.report()
        self._log(m)
        return m

    def end(self, status: str | None = None, exit_code: int | None = None) -> dict[str, Any]:
        """Log the last interval and the train totals, close an owned meter (``status``, one of
        :data:`~joulebound.energy.status.STATUSES`, and ``exit_code``); the summary."""
        if self.intervals.running:
            metrics, self.summary = self.intervals.finish()
            self.train = self.intervals.train
            self._log(metrics)
        if self._own:
            self.meter.close(**({"status": status} if status else {}), exit_code=exit_code)
        return self.summary

    def __enter__(self) -> EnergyHook:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        status, code = from_exception(exc)     # Ctrl-C: killed / 130, SIGTERM: killed / 143
        self.end(status=status, exit_code=code)

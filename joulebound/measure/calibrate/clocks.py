"""Clock control for calibration: one validated pair at a time, the defaults restored on every way
out.

:class:`ClockSession` wraps one of the project's actuators — the privileged clock helper's client
(:class:`~joulebound.runtime.helper.HelperActuator`), in-process NVML with root
(:class:`~joulebound.runtime.actuators.NvmlActuator`: GPU lock, signal guard, reset at exit)
or the simulated GPU's (:class:`~.simulated.SimulatedGpuActuator`). Every pair is checked against
the card's supported table before it is requested; closing the session (also on an exception,
``KeyboardInterrupt`` or a stop signal, through the actuators' own guard) resets both clock
domains. Read-only calibration (``--clocks auto``) makes no session at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import JouleboundError
from joulebound.measure.calibrate.design import validate_pair

log = logging.getLogger(__name__)


class ClockSession:
    """Lock one clock pair at a time through ``actuator``; a context manager that restores the
    defaults.

    Args:
        actuator: an :class:`~joulebound.runtime.actuators.Actuator`.
        supported: the card's supported table (memory MHz -> core MHz).
    """

    def __init__(self, actuator: Any, supported: Mapping[int, Sequence[int]]) -> None:
        self.actuator = actuator
        self.supported = {int(m): [int(c) for c in v] for m, v in supported.items()}
        self.switches = 0

    def set(self, config: ClockConfig, timeout_s: float = 30.0) -> None:
        """Validate ``config`` against the supported table, then apply it; a switch the clock
        helper defers (its rate limit) is retried until it is applied (measuring at the previous
        clocks would mislabel every cell), at most ``timeout_s``."""
        validate_pair(config, self.supported)
        if self.actuator.closed:
            raise JouleboundError("the clock session is closed (the defaults were restored)")
        changed = self.actuator.set_clocks(config)
        deadline = time.monotonic() + timeout_s
        while self.actuator.current != config:
            if time.monotonic() > deadline or self.actuator.closed:
                raise JouleboundError(f"clocks {config.label} were not applied within "
                                      f"{timeout_s:g} s (clock helper rate limit?)")
            time.sleep(0.02)
            changed = self.actuator.set_clocks(config) or changed
        if changed:
            self.switches += 1
            log.debug("clocks -> %s", config.label)

    def close(self) -> None:
        """Back to the defaults and release the GPU (idempotent)."""
        try:
            self.actuator.reset()
        finally:
            self.actuator.close()

    def __enter__(self) -> ClockSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_actuator(backend: str, gpu: int | str = 0, helper: str | None = None, nvml: Any = None,
                  sim: Any = None) -> Any:
    """The actuator for ``backend``: ``"simulated"`` (needs ``sim``), ``"nvml"`` with ``helper``
    (a socket path: the privileged clock helper) or without (in-process NVML, needs root)."""
    if backend == "simulated":
        from joulebound.measure.calibrate.simulated import SimulatedGpuActuator

        return SimulatedGpuActuator(sim)
    if helper:
        from pathlib import Path

        from joulebound.runtime.helper import HelperActuator

        if not Path(helper).exists():
            raise JouleboundError(
                f"no clock helper at {helper}: start it once with `sudo joulebound clock-helper "
                f"--socket {helper} --group $(id -gn)`, or measure read-only with --clocks auto")
        return HelperActuator(helper, gpu=gpu)
    from joulebound.runtime.actuators import NvmlActuator

    return NvmlActuator(gpu=gpu, nvml=nvml, owner="joulebound calibrate")

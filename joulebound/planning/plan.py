"""``Plan``: a clock configuration per kernel (grouped into phases) with predicted totals.

Produced by the solvers in :mod:`joulebound.planning.solve`, consumed by the simulator and the
runtime controller. A phase is a run of consecutive kernels at one clock configuration; a clock
switch happens at every phase boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import SchemaError
from joulebound.core.jsonio import Fields, check_header, read_json, write_json
from joulebound.core.provenance import MODELED

SCHEMA = "joulebound.plan"
VERSION = 1


@dataclass(frozen=True)
class Phase:
    """Kernels ``start`` (inclusive) to ``stop`` (exclusive) run at ``config``."""

    start: int
    stop: int
    config: ClockConfig


@dataclass
class Plan:
    """Clock choice per kernel of one iteration.

    Attributes:
        device: device catalog name.
        kernel_names: kernel name per position (length K), as in the trace.
        configs: the clock configurations the plan uses or could use.
        choice: index into ``configs`` per kernel, int array (K,).
        granularity: ``"kernel"``, ``"layer"``, ``"pass"``, ``"iteration"`` or ``"phase"``.
        objective: ``"waste"``, ``"relaxed"``, ``"edp"``, ``"ed2p"``, ``"time"``.
        slowdown: allowed relative slowdown epsilon against the baseline (0.01 = 1 %).
        switch_latency_s: clock-switch latency assumed when planning (s).
        predicted_time_s / predicted_energy_j: modeled iteration totals under the plan.
        baseline_time_s / baseline_energy_j: modeled totals under the baseline (auto governor).
        provenance: where the predicted numbers come from (``"modeled"`` unless every cell of the
            characterization was measured).
        meta: extras (trace name, solver, gap, ...).
    """

    device: str
    kernel_names: list[str]
    configs: list[ClockConfig]
    choice: np.ndarray
    granularity: str = "kernel"
    objective: str = "waste"
    slowdown: float = 0.0
    switch_latency_s: float = 0.0
    predicted_time_s: float = float("nan")
    predicted_energy_j: float = float("nan")
    baseline_time_s: float = float("nan")
    baseline_energy_j: float = float("nan")
    provenance: str = MODELED
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.choice = np.asarray(self.choice, dtype=np.int64)
        if self.choice.shape != (len(self.kernel_names),):
            raise ValueError(f"Plan.choice has shape {self.choice.shape}, "
                             f"expected ({len(self.kernel_names)},)")
        if len(self.choice) and (self.choice.min() < 0 or self.choice.max() >= len(self.configs)):
            raise ValueError("Plan.choice holds an index outside configs")

    def config_of(self, k: int) -> ClockConfig:
        """Clock configuration of kernel ``k``."""
        return self.configs[int(self.choice[k])]

    def phases(self) -> list[Phase]:
        """Runs of consecutive kernels with the same configuration."""
        out: list[Phase] = []
        if len(self.choice) == 0:
            return out
        cuts = np.flatnonzero(np.diff(self.choice)) + 1
        starts = np.concatenate([[0], cuts])
        stops = np.concatenate([cuts, [len(self.choice)]])
        return [Phase(int(a), int(b), self.configs[int(self.choice[a])])
                for a, b in zip(starts, stops, strict=True)]

    @property
    def n_switches(self) -> int:
        """Clock changes within one iteration (phase boundaries)."""
        return int(np.count_nonzero(np.diff(self.choice)))

    @property
    def energy_delta(self) -> float:
        """Relative energy change against the baseline (-0.10 = 10 % less)."""
        return self.predicted_energy_j / self.baseline_energy_j - 1.0

    @property
    def time_delta(self) -> float:
        """Relative time change against the baseline (+0.01 = 1 % slower)."""
        return self.predicted_time_s / self.baseline_time_s - 1.0

    # -- files --------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "version": VERSION, "device": self.device,
            "granularity": self.granularity, "objective": self.objective,
            "slowdown": self.slowdown, "switch_latency_s": self.switch_latency_s,
            "predicted_time_s": self.predicted_time_s,
            "predicted_energy_j": self.predicted_energy_j,
            "baseline_time_s": self.baseline_time_s, "baseline_energy_j": self.baseline_energy_j,
            "provenance": self.provenance, "meta": self.meta,
            "configs": [c.to_json() for c in self.configs],
            "kernel_names": self.kernel_names, "choice": self.choice.tolist(),
        }

    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        doc = check_header(read_json(path), path, SCHEMA, VERSION)
        f = Fields(doc, path)
        try:
            configs = [ClockConfig.from_json(c) for c in f.get("configs", list)]
        except ValueError as exc:
            raise SchemaError(path, "configs", str(exc)) from exc
        names = f.get("kernel_names", list)
        choice = f.get("choice", list)
        if len(choice) != len(names):
            raise SchemaError(path, "choice", f"has {len(choice)} entries for {len(names)} kernels")
        if any(not isinstance(c, int) or c < 0 or c >= len(configs) for c in choice):
            raise SchemaError(path, "choice", f"entries must be indices into configs (0..{len(configs)-1})")
        nan = float("nan")
        return cls(
            device=f.get("device", str), kernel_names=[str(n) for n in names], configs=configs,
            choice=np.array(choice, dtype=np.int64),
            granularity=f.get("granularity", str, "kernel"), objective=f.get("objective", str, "waste"),
            slowdown=f.get("slowdown", float, 0.0),
            switch_latency_s=f.get("switch_latency_s", float, 0.0, nonneg=True),
            predicted_time_s=f.get("predicted_time_s", float, nan),
            predicted_energy_j=f.get("predicted_energy_j", float, nan),
            baseline_time_s=f.get("baseline_time_s", float, nan),
            baseline_energy_j=f.get("baseline_energy_j", float, nan),
            provenance=f.get("provenance", str, MODELED), meta=f.get("meta", dict, {}),
        )

"""``Characterization``: time and energy of every kernel at every clock configuration.

Arrays ``time_s[k, c]`` and ``energy_j[k, c]`` for kernels ``k`` (in trace order) and clock
configurations ``c``. Each cell carries a provenance: measured (from a user's clock sweep) or
modeled (joulebound's device model). Saved as ``.npz`` (arrays) with a JSON header.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.core.jsonio import check_header
from joulebound.core.provenance import MEASURED, MEASURED_AND_MODELED, MODELED

SCHEMA = "joulebound.characterization"
VERSION = 1
#: provenance codes stored in ``Characterization.measured`` (bool array): True = measured.


@dataclass
class Characterization:
    """Per-kernel time (s) and energy (J) over clock configurations.

    Attributes:
        kernel_names: name per kernel row, in trace order (length K).
        configs: clock configuration per column (length C); may include ``ClockConfig()`` (auto).
        time_s: array (K, C), seconds.
        energy_j: array (K, C), joules.
        measured: bool array (K, C), True where the cell was measured, False where modeled.
        time_spread_s / energy_spread_j: optional (K, C) standard deviations.
        device: device catalog name.
        meta: free-form (trace name, model parameters, data source, ...).
    """

    kernel_names: list[str]
    configs: list[ClockConfig]
    time_s: np.ndarray
    energy_j: np.ndarray
    measured: np.ndarray
    device: str = ""
    time_spread_s: np.ndarray | None = None
    energy_spread_j: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.time_s = np.asarray(self.time_s, dtype=float)
        self.energy_j = np.asarray(self.energy_j, dtype=float)
        self.measured = np.asarray(self.measured, dtype=bool)
        shape = (len(self.kernel_names), len(self.configs))
        for label, arr in (("time_s", self.time_s), ("energy_j", self.energy_j),
                           ("measured", self.measured)):
            if arr.shape != shape:
                raise ValueError(f"Characterization.{label} has shape {arr.shape}, expected {shape}")

    @property
    def n_kernels(self) -> int:
        return len(self.kernel_names)

    @property
    def n_configs(self) -> int:
        return len(self.configs)

    def config_index(self, config: ClockConfig) -> int:
        """Column of ``config``; raises ``KeyError`` when absent."""
        try:
            return self.configs.index(config)
        except ValueError:
            raise KeyError(f"clock config {config} is not characterized") from None

    @property
    def auto_index(self) -> int | None:
        """Column of the governor ("auto") configuration, if present."""
        try:
            return self.configs.index(ClockConfig())
        except ValueError:
            return None

    @property
    def sensor_measured(self) -> np.ndarray:
        """Bool (K, C): the cells a real sensor measured — :attr:`measured`, except for a table
        from the simulated GPU (``meta["backend"] == "simulated"``), whose "measured" cells come
        from the device model: none. Every provenance label of a cell, a table or a plan reads
        this, never :attr:`measured` directly."""
        if self.meta.get("backend") == "simulated":
            return np.zeros_like(self.measured)
        return self.measured

    def provenance(self, column: int | None = None) -> str:
        """``"measured"``, ``"modeled"`` or ``"measured+modeled"`` for the whole table, or for
        one configuration's ``column`` (from :attr:`sensor_measured`)."""
        cells = self.sensor_measured if column is None else self.sensor_measured[:, column]
        if cells.all():
            return MEASURED
        return MEASURED_AND_MODELED if cells.any() else MODELED

    # -- files --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        p = Path(path)
        header = {"schema": SCHEMA, "version": VERSION, "device": self.device,
                  "kernel_names": self.kernel_names,
                  "configs": [c.to_json() for c in self.configs], "meta": self.meta}
        arrays = {"time_s": self.time_s, "energy_j": self.energy_j, "measured": self.measured}
        if self.time_spread_s is not None:
            arrays["time_spread_s"] = self.time_spread_s
        if self.energy_spread_j is not None:
            arrays["energy_spread_j"] = self.energy_spread_j
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "wb") as fh:
                np.savez_compressed(fh, header=np.array(json.dumps(header)), **arrays)
        except IsADirectoryError as exc:     # same user errors as jsonio.write_json
            raise JouleboundError(f"{p}: is a folder; give a file name to write to") from exc
        except OSError as exc:
            raise JouleboundError(f"{p}: cannot write ({exc.strerror or exc}); choose another "
                                  "path") from exc
        return p

    @classmethod
    def load(cls, path: str | Path) -> Characterization:
        p = Path(path)
        if not p.exists():
            raise JouleboundError(f"{p}: file not found")
        try:
            z = np.load(p, allow_pickle=False)
            header = json.loads(str(z["header"]))
        except Exception as exc:
            raise SchemaError(p, "<file>", f"not a joulebound characterization (.npz): {exc}") from exc
        header = check_header(header, p, SCHEMA, VERSION)
        try:
            return cls(
                kernel_names=[str(n) for n in header["kernel_names"]],
                configs=[ClockConfig.from_json(c) for c in header["configs"]],
                time_s=z["time_s"], energy_j=z["energy_j"], measured=z["measured"],
                device=header.get("device", ""),
                time_spread_s=z["time_spread_s"] if "time_spread_s" in z else None,
                energy_spread_j=z["energy_spread_j"] if "energy_spread_j" in z else None,
                meta=header.get("meta", {}),
            )
        except KeyError as exc:
            raise SchemaError(p, str(exc.args[0]), "missing") from exc
        except (ValueError, TypeError) as exc:
            raise SchemaError(p, "<arrays>", str(exc)) from exc

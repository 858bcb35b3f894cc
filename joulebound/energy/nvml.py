"""NVIDIA GPUs through NVML (the ``nvidia-ml-py`` package, module ``pynvml``). Read-only.

Per GPU the backend prefers the total-energy counter ``nvmlDeviceGetTotalEnergyConsumption``
(mJ since the driver was loaded; Volta and newer). Where the counter is missing
(``NVML_ERROR_NOT_SUPPORTED``) or forbidden (``NVML_ERROR_NO_PERMISSION``) it falls back to
integrating ``nvmlDeviceGetPowerUsage`` (mW) samples from the meter's background sampler — coarser,
and on A100/H100-class boards the power field is itself a moving average (see
``docs/measurement.md``; Zeus #181 reports counter and integrated power disagreeing).

Counter handling: the raw counter is turned into a monotonic energy (J). A value lower than the
previous read is a *wraparound* when the previous value was within the top 1/8 of the counter range
(then ``raw + 2**bits - previous`` is added), otherwise a driver *reset* (``raw`` is added: the energy
since the reset; what happened between the last read and the reset is lost). Both are recorded as
events, and windows spanning them are flagged.

Devices: the channels are the CUDA-visible GPUs (``CUDA_VISIBLE_DEVICES`` entries may be indices or
``GPU-``/``MIG-`` UUIDs), indexed as CUDA numbers them; each channel carries the physical GPU's
UUID. Numeric ``CUDA_VISIBLE_DEVICES`` entries are NVML (PCI bus) indices only when
``CUDA_DEVICE_ORDER=PCI_BUS_ID``; a note says so otherwise. MIG: NVML reports energy and power
for the whole physical GPU, so a MIG slice's figures are the whole board's (noted and flagged).

This module never calls an NVML set-function.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..errors import JouleboundError
from ..provenance import MEASURED
from .base import Backend, Channel, CounterEvent
from .distributed import visible_device_ids

#: Assumed update period (s) of the energy counter and power field when the device catalog (matched
#: on the NVML product name) has no ``sensor_period_s``; benchmarks/gpu_check.py measures it.
DEFAULT_SENSOR_PERIOD_S = 0.1


def catalog_sensor_period(product_name: str) -> float | None:
    """``sensor_period_s`` (s) of the catalog device NVML's product name resolves to.

    Uses the catalog's own name resolution (case, punctuation and vendor words ignored; product
    names and aliases work); ``None`` for a GPU the catalog does not know or without a period.
    """
    try:
        from ..devices.catalog import get_device

        period = get_device(product_name.strip()).sensor_period_s
    except Exception:  # unknown GPU, or the catalog is unavailable: it is optional here
        return None
    return float(period) if period else None


def _load_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise JouleboundError("NVML unavailable: the nvidia-ml-py package is not installed "
                              "(pip install nvidia-ml-py)") from exc
    return pynvml


def _is(nv: Any, exc: BaseException, const: str) -> bool:
    """True when ``exc`` is an ``NVMLError`` with code ``nv.<const>``."""
    return isinstance(exc, nv.NVMLError) and getattr(exc, "value", None) == getattr(nv, const, None)


def _text(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


class NvmlBackend(Backend):
    """NVML energy/power reads for the CUDA-visible GPUs.

    Args:
        gpus: CUDA-visible indices to open (``None``/``"all"``: every visible GPU; the meter then
            narrows to the rank's own GPU).
        env: environment to read ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` from (tests).
        counter_bits: width of the raw energy counter (64 for NVML) for wraparound detection.
    """

    name = "nvml"
    provenance = MEASURED

    def __init__(self, gpus: Sequence[int] | str | None = None,
                 env: dict[str, str] | None = None, counter_bits: int = 64) -> None:
        super().__init__()
        self.nv = nv = _load_pynvml()
        env = dict(os.environ) if env is None else env
        self.counter_bits = counter_bits
        try:
            nv.nvmlInit()
        except Exception as exc:
            if _is(nv, exc, "NVML_ERROR_NO_PERMISSION"):
                raise JouleboundError("NVML refused access (NVML_ERROR_NO_PERMISSION): this user "
                                      "may not open the NVIDIA driver; run in a container with "
                                      "GPU access (--gpus) or ask an admin") from exc
            raise JouleboundError(f"NVML could not start ({exc}); no NVIDIA driver "
                                  "(libnvidia-ml.so) on this machine") from exc
        self._inited = True
        try:
            self._open(gpus, env)
        except BaseException:
            self.close()
            raise

    # -- device discovery ---------------------------------------------------------------------
    def _open(self, gpus: Sequence[int] | str | None, env: dict[str, str]) -> None:
        nv = self.nv
        n = int(nv.nvmlDeviceGetCount())
        if n == 0:
            raise JouleboundError("NVML found no GPU")
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        uuids = [_text(nv.nvmlDeviceGetUUID(h)) for h in handles]
        entries = visible_device_ids(env)
        if entries is None:
            phys = list(range(n))
        else:
            phys = [self._resolve(e, handles, uuids) for e in entries]
            if len(phys) > 1 and any(e.isdigit() for e in entries) and \
                    env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
                self.notes.append("CUDA_VISIBLE_DEVICES uses numbers but CUDA_DEVICE_ORDER is not "
                                  "PCI_BUS_ID: CUDA may number GPUs differently from NVML; set "
                                  "CUDA_DEVICE_ORDER=PCI_BUS_ID to be sure which GPU is metered")
        if gpus is None or gpus == "all":
            want = list(range(len(phys)))
        else:
            want = ([int(x) for x in gpus.split(",")] if isinstance(gpus, str)
                    else [int(x) for x in gpus])
            bad = [w for w in want if not 0 <= w < len(phys)]
            if bad:
                raise JouleboundError(f"GPU index {bad} is not visible: {len(phys)} GPU(s) visible "
                                      f"(indices 0..{len(phys) - 1}); check --gpus and "
                                      "CUDA_VISIBLE_DEVICES")
        self._handles: list[Any] = []
        self._last_raw: list[int | None] = []
        self._total_j: list[float] = []
        self._counter: list[bool] = []
        for vis in want:
            p = phys[vis]
            h = handles[p]
            name = _text(nv.nvmlDeviceGetName(h)) if hasattr(nv, "nvmlDeviceGetName") else "GPU"
            self._check_mig(h, vis, uuids[p], name)
            has_counter = self._probe_counter(h, vis, name)
            if not has_counter:
                self._probe_power(h, vis, name)
            self.channels.append(Channel(
                uuid=uuids[p], index=vis, kind="gpu", name=name,
                source="nvml.energy_counter" if has_counter else "nvml.power_integration",
                sensor_period_s=catalog_sensor_period(name) or DEFAULT_SENSOR_PERIOD_S))
            self._handles.append(h)
            self._counter.append(has_counter)
            self._last_raw.append(None)
            self._total_j.append(0.0)

    def _resolve(self, entry: str, handles: list[Any], uuids: list[str]) -> int:
        nv = self.nv
        if entry.isdigit():
            i = int(entry)
            if i >= len(handles):
                raise JouleboundError(f"CUDA_VISIBLE_DEVICES names GPU {i} but NVML sees "
                                      f"{len(handles)} GPU(s)")
            return i
        if entry.startswith("MIG-"):
            for p, h in enumerate(handles):
                try:
                    current, _ = nv.nvmlDeviceGetMigMode(h)
                    if not current:
                        continue
                    for k in range(int(nv.nvmlDeviceGetMaxMigDeviceCount(h))):
                        try:
                            mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
                        except nv.NVMLError:
                            continue
                        if _text(nv.nvmlDeviceGetUUID(mh)) == entry:
                            return p
                except nv.NVMLError:
                    continue
            raise JouleboundError(f"CUDA_VISIBLE_DEVICES names MIG device {entry!r} but no GPU "
                                  "with MIG enabled has it; NVML meters whole GPUs, so name the "
                                  "parent GPU's UUID (nvidia-smi -L) instead")
        matches = [p for p, u in enumerate(uuids) if u.startswith(entry) or
                   u.startswith("GPU-" + entry)]
        if len(matches) != 1:
            raise JouleboundError(f"CUDA_VISIBLE_DEVICES entry {entry!r} matches "
                                  f"{len(matches)} GPU(s) (UUIDs: {', '.join(uuids)})")
        return matches[0]

    def _check_mig(self, h: Any, vis: int, uuid: str, name: str) -> None:
        nv = self.nv
        if not hasattr(nv, "nvmlDeviceGetMigMode"):
            return
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(h)
        except Exception:  # NOT_SUPPORTED on pre-Ampere GPUs: no MIG
            return
        if current == getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
            self.notes.append(
                f"MIG is enabled on GPU {vis} ({name}, {uuid}): NVML reports energy and power for "
                "the whole physical GPU, shared by all its MIG instances — the figures are not one "
                "slice's; windows are flagged 'mig'")

    def _probe_counter(self, h: Any, vis: int, name: str) -> bool:
        nv = self.nv
        try:
            nv.nvmlDeviceGetTotalEnergyConsumption(h)
            return True
        except nv.NVMLError as exc:
            if _is(nv, exc, "NVML_ERROR_NOT_SUPPORTED"):
                why = "has no total-energy counter (pre-Volta or not supported)"
            elif _is(nv, exc, "NVML_ERROR_NO_PERMISSION"):
                why = "denied the total-energy counter (NVML_ERROR_NO_PERMISSION)"
            else:
                why = f"energy counter failed ({exc})"
            self.notes.append(f"GPU {vis} ({name}) {why}: energy is integrated from power "
                              "samples instead (coarser; keep the sampler on)")
            return False

    def _probe_power(self, h: Any, vis: int, name: str) -> None:
        nv = self.nv
        try:
            nv.nvmlDeviceGetPowerUsage(h)
        except nv.NVMLError as exc:
            if _is(nv, exc, "NVML_ERROR_NO_PERMISSION"):
                raise JouleboundError(
                    f"GPU {vis} ({name}): NVML denied both the energy counter and the power "
                    "reading (NVML_ERROR_NO_PERMISSION). Run where the driver allows monitoring "
                    "(same user/container as the job, or ask an admin); use --backend none to "
                    "record time only") from exc
            raise JouleboundError(f"GPU {vis} ({name}) has neither an energy counter nor a power "
                                  f"reading in NVML ({exc}); use --backend none to record time "
                                  "only") from exc

    # -- reads --------------------------------------------------------------------------------
    def has_counter(self, i: int) -> bool:
        return self._counter[i]

    def read_power_w(self, i: int, t: float) -> float | None:
        try:
            return float(self.nv.nvmlDeviceGetPowerUsage(self._handles[i])) / 1000.0
        except self.nv.NVMLError:
            return None

    def read_energy_j(self, i: int, t: float) -> float | None:
        if not self._counter[i]:
            return None
        raw = int(self.nv.nvmlDeviceGetTotalEnergyConsumption(self._handles[i]))
        return self._unwrap(i, raw, t)

    def _unwrap(self, i: int, raw: int, t: float) -> float:
        """Monotonic energy (J) from the raw mJ counter, handling wraparound and resets."""
        last = self._last_raw[i]
        self._last_raw[i] = raw
        if last is None:  # first read: the origin
            return self._total_j[i]
        if raw >= last:
            delta_mj = raw - last
        else:
            top = 1 << self.counter_bits
            uuid = self.channels[i].uuid
            if last >= top - (top >> 3):
                delta_mj = raw + top - last
                self.events.append(CounterEvent(t, uuid, "wraparound",
                                                f"{last} -> {raw} mJ (range 2^{self.counter_bits})"))
            else:
                delta_mj = raw
                self.events.append(CounterEvent(t, uuid, "reset",
                                                f"{last} -> {raw} mJ: driver reloaded? energy "
                                                "between the last read and the reset is lost"))
        self._total_j[i] += delta_mj / 1000.0
        return self._total_j[i]

    def close(self) -> None:
        if getattr(self, "_inited", False):
            self._inited = False
            try:
                self.nv.nvmlShutdown()
            except Exception:  # pragma: no cover
                pass

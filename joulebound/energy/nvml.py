"""NVIDIA GPUs through NVML (the ``nvidia-ml-py`` package, module ``pynvml``). Read-only.

Per GPU the backend prefers the total-energy counter ``nvmlDeviceGetTotalEnergyConsumption``
(mJ since the driver was loaded; Volta and newer). Where the counter is missing
(``NVML_ERROR_NOT_SUPPORTED``) or forbidden (``NVML_ERROR_NO_PERMISSION``) it falls back to
integrating ``nvmlDeviceGetPowerUsage`` (mW) samples from the meter's background sampler — coarser,
and on A100/H100-class boards the power field is itself a moving average (see
``docs/measurement.md``; Zeus #181 reports counter and integrated power disagreeing).

Counter handling: the raw counter is turned into a monotonic energy (J). A value lower than the
previous read is a *wraparound* when the previous value was within the top 1/8 of the counter range
(then ``raw + 2**bits - previous`` is added), a driver *reset* when it is below half the previous
value (``raw`` is added: the energy since the reset; what happened between the last read and the
reset is lost), and otherwise a *glitch* — a reading a little low once — which is held at the
previous value (nothing added, nothing lost). All are recorded as events, and windows spanning them
are flagged (``counter_wraparound``, ``counter_reset``, ``counter_glitch``). Failed power reads
raise (the meter counts and flags them); they are never taken as "no power".

Devices: the channels are the CUDA-visible GPUs (``CUDA_VISIBLE_DEVICES`` entries may be indices or
``GPU-``/``MIG-`` UUIDs), indexed as CUDA numbers them; each channel carries the physical GPU's
UUID. Numeric ``CUDA_VISIBLE_DEVICES`` entries are NVML (PCI bus) indices only when
``CUDA_DEVICE_ORDER=PCI_BUS_ID``; a note says so otherwise. MIG: NVML reports energy and power
for the whole physical GPU, so a MIG slice's figures are the whole board's (noted and flagged).

This module never calls an NVML set-function.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MEASURED
from joulebound.energy.base import Backend, Channel, CounterEvent
from joulebound.hw import gpu as gpu_layer

#: Assumed update period (s) of the energy counter and power field when the device catalog (matched
#: on the NVML product name) has no ``sensor_period_s``; benchmarks/gpu_check.py measures it.
DEFAULT_SENSOR_PERIOD_S = 0.1


def catalog_sensor_period(product_name: str) -> float | None:
    """``sensor_period_s`` (s) of the catalog device NVML's product name resolves to.

    Uses the catalog's own name resolution (case, punctuation and vendor words ignored; product
    names and aliases work); ``None`` for a GPU the catalog does not know or without a period.
    """
    try:
        from joulebound.hw.catalog import get_device

        period = get_device(product_name.strip()).sensor_period_s
    except Exception:  # unknown GPU, or the catalog is unavailable: it is optional here
        return None
    return float(period) if period else None


def _is(nv: Any, exc: BaseException, const: str) -> bool:
    """True when ``exc`` is an ``NVMLError`` with code ``nv.<const>``."""
    return gpu_layer.nvml_error_is(nv, exc, const)


class NvmlBackend(Backend):
    """NVML energy/power reads for the CUDA-visible GPUs (through :mod:`joulebound.hw.gpu`).

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
        try:
            nv_mod = gpu_layer.load_pynvml()
        except JouleboundError as exc:
            raise JouleboundError("NVML unavailable: the nvidia-ml-py package is not installed "
                                  "(pip install nvidia-ml-py)") from exc
        try:
            self.session = gpu_layer.Nvml(nv_mod)
        except JouleboundError as exc:
            if "NO_PERMISSION" in str(exc):
                raise
            raise JouleboundError(f"NVML could not start ({exc.__cause__}); no NVIDIA driver "
                                  "(libnvidia-ml.so) on this machine") from exc.__cause__
        self.nv = self.session.nv
        env = dict(os.environ) if env is None else env
        self.counter_bits = counter_bits
        try:
            self._open(gpus, env)
        except BaseException:
            self.close()
            raise

    # -- device discovery ---------------------------------------------------------------------
    def _open(self, gpus: Sequence[int] | str | None, env: dict[str, str]) -> None:
        physical = self.session.gpus()
        if not physical:
            raise JouleboundError("NVML found no GPU")
        try:
            phys, notes = gpu_layer.visible_gpus(physical, env)
        except JouleboundError as exc:
            raise JouleboundError(f"CUDA_VISIBLE_DEVICES: {exc}") from None
        self.notes.extend(notes)
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
        self._devices: list[gpu_layer.GpuDevice] = []
        self._last_raw: list[int | None] = []
        self._total_j: list[float] = []
        self._counter: list[bool] = []
        for vis in want:
            p = phys[vis]
            dev = self.session.open(p)
            if p.mig:
                self.notes.append(
                    f"MIG is enabled on GPU {vis} ({p.name}, {p.uuid}): NVML reports energy and "
                    "power for the whole physical GPU, shared by all its MIG instances — the "
                    "figures are not one slice's; windows are flagged 'mig'")
            has_counter = self._probe_counter(dev, vis)
            if not has_counter:
                self._probe_power(dev, vis)
            self.channels.append(Channel(
                uuid=p.uuid, index=vis, kind="gpu", name=p.name,
                source="nvml.energy_counter" if has_counter else "nvml.power_integration",
                sensor_period_s=catalog_sensor_period(p.name) or DEFAULT_SENSOR_PERIOD_S))
            self._devices.append(dev)
            self._counter.append(has_counter)
            self._last_raw.append(None)
            self._total_j.append(0.0)

    def _probe_counter(self, dev: gpu_layer.GpuDevice, vis: int) -> bool:
        nv = self.nv
        try:
            dev.energy_mj()
            return True
        except nv.NVMLError as exc:
            if _is(nv, exc, "NVML_ERROR_NOT_SUPPORTED"):
                why = "has no total-energy counter (pre-Volta or not supported)"
            elif _is(nv, exc, "NVML_ERROR_NO_PERMISSION"):
                why = "denied the total-energy counter (NVML_ERROR_NO_PERMISSION)"
            else:
                why = f"energy counter failed ({exc})"
            self.notes.append(f"GPU {vis} ({dev.name}) {why}: energy is integrated from power "
                              "samples instead (coarser; keep the sampler on)")
            return False

    def _probe_power(self, dev: gpu_layer.GpuDevice, vis: int) -> None:
        nv = self.nv
        try:
            dev.power_w()
        except nv.NVMLError as exc:
            if _is(nv, exc, "NVML_ERROR_NO_PERMISSION"):
                raise JouleboundError(
                    f"GPU {vis} ({dev.name}): NVML denied both the energy counter and the power "
                    "reading (NVML_ERROR_NO_PERMISSION). Run where the driver allows monitoring "
                    "(same user/container as the job, or ask an admin); use --backend none to "
                    "record time only") from exc
            raise JouleboundError(f"GPU {vis} ({dev.name}) has neither an energy counter nor a "
                                  f"power reading in NVML ({exc}); use --backend none to record "
                                  "time only") from exc

    # -- reads --------------------------------------------------------------------------------
    def has_counter(self, i: int) -> bool:
        return self._counter[i]

    def read_power_w(self, i: int, t: float) -> float | None:
        """Power (W). A failed read raises (the meter flags it): it is not "no power sensor"."""
        return self._devices[i].power_w()

    def read_energy_j(self, i: int, t: float) -> float | None:
        if not self._counter[i]:
            return None
        return self._unwrap(i, self._devices[i].energy_mj(), t)

    def energy_reader(self, channels: Sequence[int]) -> Callable[[float], list[float]]:
        """:meth:`read_energy_j` of ``channels`` in one call (see
        :meth:`~joulebound.energy.base.Backend.energy_reader`): one NVML call per GPU and no
        Python call on top, the common non-decreasing case unwrapped inline, anything else by
        :meth:`_unwrap`."""
        chans = list(channels)
        if not all(self._counter[i] for i in chans):
            return super().energy_reader(chans)
        get, handles = gpu_layer.GpuDevice.energy_counter_call([self._devices[i] for i in chans])
        last_raw, total, unwrap = self._last_raw, self._total_j, self._unwrap
        pairs = list(zip(chans, handles, strict=True))
        if len(pairs) == 1:            # one GPU (a rank's own): no loop
            (i, h), = pairs

            def read_one(t: float) -> list[float]:
                raw = get(h)
                last = last_raw[i]
                if last is not None and raw >= last:
                    last_raw[i] = raw
                    e = total[i] = total[i] + (raw - last) / 1000.0
                    return [e]
                return [unwrap(i, int(raw), t)]

            return read_one

        def read(t: float) -> list[float]:
            out: list[float] = []
            for i, h in pairs:
                raw = get(h)
                last = last_raw[i]
                if last is not None and raw >= last:
                    last_raw[i] = raw
                    e = total[i] + (raw - last) / 1000.0
                    total[i] = e
                    out.append(e)
                else:
                    out.append(unwrap(i, int(raw), t))
            return out

        return read

    def _unwrap(self, i: int, raw: int, t: float) -> float:
        """Monotonic energy (J) from the raw mJ counter: wraparound, driver resets and glitches.

        A lower reading is a *wraparound* when the previous value was in the top 1/8 of the counter
        range, a driver *reset* when it fell below half the previous value (a reloaded driver
        restarts near 0: the energy since the reset is added), and otherwise a *glitch* (NVML read
        a little low once): the previous value is kept as a high-water mark and nothing is added,
        so the next normal reading counts from there."""
        last = self._last_raw[i]
        if last is None:  # first read: the origin
            self._last_raw[i] = raw
            return self._total_j[i]
        if raw >= last:
            delta_mj = raw - last
            self._last_raw[i] = raw
        else:
            uuid = self.channels[i].uuid
            top = 1 << self.counter_bits
            if last >= top - (top >> 3):
                delta_mj = raw + top - last
                self._last_raw[i] = raw
                self.events.append(CounterEvent(t, uuid, "wraparound",
                                                f"{last} -> {raw} mJ (range 2^{self.counter_bits})"))
            elif raw < last // 2:
                delta_mj = raw
                self._last_raw[i] = raw
                self.events.append(CounterEvent(t, uuid, "reset",
                                                f"{last} -> {raw} mJ: driver reloaded? energy "
                                                "between the last read and the reset is lost"))
            else:
                delta_mj = 0          # held at the high-water mark
                self.events.append(CounterEvent(t, uuid, "glitch",
                                                f"{last} -> {raw} mJ read once: held at {last} mJ"))
        self._total_j[i] += delta_mj / 1000.0
        return self._total_j[i]

    def close(self) -> None:
        session = getattr(self, "session", None)
        if session is not None:
            session.close()

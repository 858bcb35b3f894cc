"""Clock configurations: a (core, memory) clock pair in MHz, or the GPU's own governor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ClockConfig:
    """A GPU clock setting.

    Attributes:
        core_mhz: graphics/SM clock in MHz, or ``None`` for the GPU's own governor ("auto").
        mem_mhz: memory clock in MHz, or ``None`` for the governor's choice ("auto").
    """

    core_mhz: int | None = None
    mem_mhz: int | None = None

    def sort_key(self) -> tuple[int, int]:
        """Ordering key: auto (governor) sorts before any fixed clock, then by core, memory."""
        return (-1 if self.core_mhz is None else self.core_mhz,
                -1 if self.mem_mhz is None else self.mem_mhz)

    def __lt__(self, other: ClockConfig) -> bool:
        return self.sort_key() < other.sort_key()

    def __le__(self, other: ClockConfig) -> bool:
        return self.sort_key() <= other.sort_key()

    def __gt__(self, other: ClockConfig) -> bool:
        return self.sort_key() > other.sort_key()

    def __ge__(self, other: ClockConfig) -> bool:
        return self.sort_key() >= other.sort_key()

    @property
    def is_auto(self) -> bool:
        """True when both clocks are left to the GPU's governor."""
        return self.core_mhz is None and self.mem_mhz is None

    @property
    def label(self) -> str:
        """Short text form, e.g. ``"1410/1593"`` or ``"auto"``; parse back with :meth:`parse`."""
        if self.is_auto:
            return "auto"
        core = "auto" if self.core_mhz is None else str(self.core_mhz)
        mem = "auto" if self.mem_mhz is None else str(self.mem_mhz)
        return f"{core}/{mem}"

    def __str__(self) -> str:
        return self.label

    @classmethod
    def parse(cls, text: str) -> ClockConfig:
        """Parse ``"auto"``, ``"1410/1593"`` or ``"1410"`` (core only, memory auto)."""
        text = text.strip().lower()
        if text in ("auto", ""):
            return cls()
        core, _, mem = text.partition("/")

        def num(part: str) -> int | None:
            part = part.strip().removesuffix("mhz")
            if part in ("", "auto"):
                return None
            try:
                value = int(float(part))
            except ValueError as exc:
                raise ValueError(
                    f"cannot parse clock {text!r}: use 'auto', 'CORE' or 'CORE/MEM' in MHz"
                ) from exc
            if value <= 0:
                raise ValueError(f"clock must be positive MHz, got {value} in {text!r}")
            return value

        return cls(num(core), num(mem))

    def to_json(self) -> list[int | None]:
        return [self.core_mhz, self.mem_mhz]

    @classmethod
    def from_json(cls, value: object) -> ClockConfig:
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, list | tuple) and len(value) == 2:
            out = []
            for v in value:
                if v is None:
                    out.append(None)
                    continue
                if isinstance(v, str) and v.strip().isdigit():    # "1410", as before
                    v = int(v)
                # MHz as a whole number: bool, text, objects, inf/NaN and fractions are refused
                # with a ValueError the file readers turn into an error naming the field
                if isinstance(v, bool) or not isinstance(v, int | float) or v != v \
                        or v in (float("inf"), float("-inf")) or v != int(v):
                    raise ValueError(f"a clock must be a whole number of MHz or null, got {v!r} "
                                     f"in {value!r}")
                out.append(int(v))
            return cls(*out)
        raise ValueError(f"expected [core_mhz, mem_mhz] or 'auto', got {value!r}")


AUTO = ClockConfig()


def is_supported(config: ClockConfig, supported: Mapping[int, Sequence[int]]) -> bool:
    """THE clock-pair rule: ``config`` can be set on a GPU whose table is ``supported`` (memory
    MHz -> the core MHz allowed at it, as NVML's supported-clocks query gives it).

    Auto (both clocks to the governor) always can; a fixed memory clock must be in the table;
    a fixed core clock must be listed at that memory clock, or — memory left to the governor —
    at some memory clock. Every place that checks a pair (the device spec, the calibration
    design, the clock helper, the calibration's clock list) calls this."""
    if config.is_auto:
        return True
    if config.mem_mhz is not None and config.mem_mhz not in supported:
        return False
    if config.core_mhz is None:
        return True
    mems = [config.mem_mhz] if config.mem_mhz is not None else list(supported)
    return any(config.core_mhz in supported[m] for m in mems)


def nearest_supported(config: ClockConfig,
                      supported: Mapping[int, Sequence[int]]) -> ClockConfig | None:
    """The supported pair (:func:`is_supported`) nearest to ``config``: a fixed memory clock
    goes to the nearest memory clock in the table, then a fixed core clock to the nearest core
    clock listed at that memory clock (at any memory clock when memory is left to the governor);
    ties go to the higher clock (the smaller slowdown). A clock left to the governor stays so.

    ``None`` when there is nothing sensible to map to: an empty table, or a clock of 0 MHz or
    less (not a clock at all, whatever the table)."""
    if is_supported(config, supported):
        return config
    if not supported or any(v is not None and v <= 0 for v in (config.core_mhz, config.mem_mhz)):
        return None

    def near(value: int, options: Sequence[int]) -> int:
        return min(options, key=lambda o: (abs(o - value), -o))

    mem = None if config.mem_mhz is None else near(config.mem_mhz, list(supported))
    if config.core_mhz is None:
        return ClockConfig(None, mem)
    cores = list(supported[mem]) if mem is not None else [c for cs in supported.values()
                                                          for c in cs]
    if not cores:
        return None
    return ClockConfig(near(config.core_mhz, cores), mem)

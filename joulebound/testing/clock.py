"""A hand-set clock for the meters' ``clock=`` argument in tests (seconds)."""

from __future__ import annotations


class ManualClock:
    """Returns ``t`` (s) when called; tests move time by assigning ``clock.t``."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

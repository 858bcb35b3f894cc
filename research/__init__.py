"""Validation of joulebound's GPU model on real third-party measurements.

Four checks (see docs/validation.md): (a) Perseus stage profiles, (b) Perseus measured plans,
(c) Guerreiro et al. GTX Titan X board power, (d) Zeus NSDI'23 power-limit traces. Each returns
:class:`~research.result.CheckResult` rows with held-out MAPE.
"""

from research.result import CheckResult, mape, max_err

__all__ = ["CheckResult", "mape", "max_err"]

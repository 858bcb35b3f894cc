"""Research code, outside the wheel: the validation checks of joulebound's models on real
third-party measurements, the side models only they use, and the pipeline that writes the
shipped parameter files. ``joulebound validate`` (in a source checkout) runs them.

Each module's docstring starts by saying what it checks:

* PRODUCT — the product's kernel model (``joulebound.gpumodel.evaluate``): ``perseus_kernel``
  (Perseus stage profiles, kernel level; fits the shipped A100-SXM4 / A40 parameters),
  ``gpuptx`` (GTX Titan X, memory × core clocks), ``spaan`` (RTX 3080 Ti on Spaan et al.'s
  published rows; fits the shipped RTX 3080 Ti parameters);
* SIDE MODEL — a model of the check's own: ``perseus_stage`` (with ``stage_model``),
  ``perseus_plans``, ``guerreiro``, ``zeus``.

``report.run_all`` runs them (each returns :class:`~research.result.CheckResult` rows with
held-out MAPE; docs/validation.md); ``write_params.write_params`` regenerates
``joulebound/gpumodel/params/*.json`` from a full run.
"""

from research.result import CheckResult, mape, max_err

__all__ = ["CheckResult", "mape", "max_err"]

"""Test doubles and generators: for tests, benchmarks, rehearsals and demos — never imported by
the production modules.

* :mod:`~joulebound.testing.fakenvml` — a fake ``pynvml`` (clocks, energy, MIG, errors,
  cross-process state) that stands in for NVML everywhere joulebound uses it;
* :mod:`~joulebound.testing.streams` — simulated op streams for the next-kernel predictor;
* :mod:`~joulebound.testing.demo_gpt` — a small GPT-style model and training loop on CPU, runnable
  as ``python -m joulebound.testing.demo_gpt`` (the README's ``joulebound run`` walkthrough).
"""

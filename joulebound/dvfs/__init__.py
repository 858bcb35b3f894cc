"""Kernel-level DVFS: time/power model, characterization, planners, simulator, runtime control."""

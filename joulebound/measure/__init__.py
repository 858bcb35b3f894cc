"""Measuring on real GPUs: calibration of the GPU model from a few measured clock pairs
(``calibrate``) and training sweeps over shapes, strategies and GPU counts (``sweep``)."""

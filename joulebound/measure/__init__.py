"""Measuring on real GPUs: calibration of the GPU model from a few measured clock pairs
(``calibrate``), training sweeps over shapes, strategies and GPU counts (``sweep``), and the
measured A/B saving of a clock plan at run time (``verify``, ``joulebound run --verify``)."""

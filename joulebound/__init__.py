"""joulebound: predict, measure and cut the energy of transformer training on GPUs."""

__version__ = "0.1.0"

"""The scikit-learn API: single trees, forests, quantile forests, pruning, loading model files,
and warming the kernels up before a first fit."""

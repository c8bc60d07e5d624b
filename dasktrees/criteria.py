"""Impurities and gains on raw columns, as in ID3 and C4.5: for teaching and for checking trees
by hand (``docs/algorithms.md``). The learner's kernels are in ``dasktrees.core.criteria``."""

from .core.criteria import (
    binary_entropy,
    gain_ratio,
    information_gain,
    node_impurity,
    split_information,
)

__all__ = ["binary_entropy", "gain_ratio", "information_gain", "node_impurity", "split_information"]

"""dasktrees: random forests on Dask, grown by a fast numba CART learner over binned data."""

from . import criteria, pruning
from ._version import __version__
from .binning import BinMapper
from .compilation import WarmupPlugin, lock_kernels, warmup
from .ensemble import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from .estimators import DecisionTreeClassifier, DecisionTreeRegressor
from .export import export_graphviz, export_rules, export_text
from .modelfile.reading import load
from .quantile_forests import ExtraTreesQuantileRegressor, RandomForestQuantileRegressor

# Every kernel imported above compiles under a per-kernel file lock: processes that start at once
# (a LocalCluster's workers) compile each kernel once between them (``compilation``).
lock_kernels()

__all__ = [
    "BinMapper",
    "DecisionTreeClassifier",
    "DecisionTreeRegressor",
    "ExtraTreesClassifier",
    "ExtraTreesQuantileRegressor",
    "ExtraTreesRegressor",
    "RandomForestClassifier",
    "RandomForestQuantileRegressor",
    "RandomForestRegressor",
    "WarmupPlugin",
    "__version__",
    "criteria",
    "export_graphviz",
    "export_rules",
    "export_text",
    "load",
    "pruning",
    "warmup",
]

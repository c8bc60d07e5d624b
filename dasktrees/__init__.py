"""dasktrees: random forests on Dask, grown by a fast numba CART learner over binned data."""

from . import criteria, pruning
from ._version import __version__
from .core.kernel_cache import lock_kernels
from .estimators.forests import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from .estimators.loading import load
from .estimators.merging import merge_forests
from .estimators.quantile_forests import ExtraTreesQuantileRegressor, RandomForestQuantileRegressor
from .estimators.trees import DecisionTreeClassifier, DecisionTreeRegressor
from .estimators.warmup import WarmupPlugin, warmup
from .export.text import export_graphviz, export_rules, export_text
from .learner.binning import BinMapper

# Every kernel imported above compiles under a per-kernel file lock: processes that start at once
# (a LocalCluster's workers) compile each kernel once between them (``core.kernel_cache``).
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
    "merge_forests",
    "pruning",
    "warmup",
]

"""dasktrees: random forests on Dask, grown by a fast numba CART learner over binned data."""

from . import criteria, pruning
from ._version import __version__
from .binning import BinMapper
from .ensemble import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from .estimators import DecisionTreeClassifier, DecisionTreeRegressor
from .export import export_graphviz, export_rules, export_text
from .modelfile.reading import load

__all__ = [
    "BinMapper",
    "DecisionTreeClassifier",
    "DecisionTreeRegressor",
    "ExtraTreesClassifier",
    "ExtraTreesRegressor",
    "RandomForestClassifier",
    "RandomForestRegressor",
    "__version__",
    "criteria",
    "export_graphviz",
    "export_rules",
    "export_text",
    "load",
    "pruning",
]

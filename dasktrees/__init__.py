"""dasktrees: random forests on Dask, grown by a fast numba CART learner over binned data.

The public names are imported on first use (PEP 562): ``import dasktrees`` imports none of the
estimators, kernels or Dask, so that the command's quick subcommands (``dasktrees --help``,
``dasktrees validate``) import only what they use.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

# Where each public name is defined.
_PUBLIC = {
    "BinMapper": "learner.binning",
    "DecisionTreeClassifier": "estimators.trees",
    "DecisionTreeRegressor": "estimators.trees",
    "ExtraTreesClassifier": "estimators.forests",
    "ExtraTreesQuantileRegressor": "estimators.quantile_forests",
    "ExtraTreesRegressor": "estimators.forests",
    "RandomForestClassifier": "estimators.forests",
    "RandomForestQuantileRegressor": "estimators.quantile_forests",
    "RandomForestRegressor": "estimators.forests",
    "WarmupPlugin": "estimators.warmup",
    "export_graphviz": "export.text",
    "export_rules": "export.text",
    "export_text": "export.text",
    "load": "estimators.loading",
    "merge_forests": "estimators.merging",
    "warmup": "estimators.warmup",
}
# Public modules (``compilation`` and ``datasets`` are not in ``__all__``: a star import does not
# need Dask's worker plugin or pandas).
_MODULES = ("compilation", "criteria", "datasets", "pruning")

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


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    elif name in _MODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from . import criteria, pruning
    from .estimators.forests import (
        ExtraTreesClassifier,
        ExtraTreesRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )
    from .estimators.loading import load
    from .estimators.merging import merge_forests
    from .estimators.quantile_forests import (
        ExtraTreesQuantileRegressor,
        RandomForestQuantileRegressor,
    )
    from .estimators.trees import DecisionTreeClassifier, DecisionTreeRegressor
    from .estimators.warmup import WarmupPlugin, warmup
    from .export.text import export_graphviz, export_rules, export_text
    from .learner.binning import BinMapper

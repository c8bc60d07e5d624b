"""``load`` and ``describe``: model files read back as dasktrees estimators.

The model file's format and its checks are ``modelfile``'s; this module names the classes a
file may hold (the allowlist), which only the estimators' layer knows.
"""

import os
from typing import Any

from sklearn.base import BaseEstimator

from ..modelfile import reading
from ..modelfile.sharding import read_sharded_manifest
from .forests import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from .quantile_forests import ExtraTreesQuantileRegressor, RandomForestQuantileRegressor
from .sharded_models import describe_sharded, load_sharded
from .trees import DecisionTreeClassifier, DecisionTreeRegressor

# The classes a model file may name (``modelfile.format.ESTIMATOR_KINDS``). The name in a file is
# looked up here, never imported.
ESTIMATORS: dict[str, type[BaseEstimator]] = {
    cls.__name__: cls
    for cls in (
        DecisionTreeClassifier,
        DecisionTreeRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
        ExtraTreesClassifier,
        ExtraTreesRegressor,
        RandomForestQuantileRegressor,
        ExtraTreesQuantileRegressor,
    )
}


def load(path: str | os.PathLike, client: Any = None) -> BaseEstimator:
    """Load an estimator written by ``save`` (``estimator.save(path)``).

    Nothing in the file is executed: the manifest is JSON, the arrays are read with
    ``allow_pickle=False``, and the estimator's class is looked up in ``ESTIMATORS``.

    Parameters
    ----------
    path : str or os.PathLike
        A model directory.
    client : distributed.Client, optional
        For a forest saved from the workers (``tree_storage="workers"``; a sharded model):
        load its shards onto this client's workers, each read and checked by a worker, the
        trees kept there (``tree_storage_ == "workers"``). Without a client, or for any other
        model, the trees are loaded into this process.

    Returns
    -------
    estimator
        Fitted, with ``client=None``; its predictions are bit-identical to the saved
        estimator's. Out-of-bag estimates per training row (``oob_decision_function_``,
        ``oob_prediction_``, ``oob_quantiles_``) are not stored.

    Raises
    ------
    FileNotFoundError
        Nothing exists at ``path``.
    ValueError
        The model is truncated, corrupt, modified, holds an object array, is of another format
        version than this dasktrees writes (docs/models.md, "Format versions") or is
        inconsistent; the message names the file and the problem.
    """
    sharded = read_sharded_manifest(path)
    if sharded is not None:
        return load_sharded(path, sharded, ESTIMATORS, client)
    return reading.load(path, ESTIMATORS)


def describe(path: str | os.PathLike) -> dict[str, Any]:
    """What the model at ``path`` is, from its checked manifest alone (``dasktrees inspect``);
    see ``modelfile.reading.describe``."""
    sharded = read_sharded_manifest(path)
    if sharded is not None:
        return describe_sharded(path, sharded, ESTIMATORS)
    return reading.describe(path, ESTIMATORS)

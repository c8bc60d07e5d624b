"""``to_sklearn()``: a fitted tree or forest as the equivalent scikit-learn estimator.

The trees' arrays already have scikit-learn's names and conventions (``tree.Tree``), so each
tree becomes a ``sklearn.tree._tree.Tree`` through its pickle state (``__setstate__``:
scikit-learn has no public constructor for a fitted tree; the state's layout, ``NODE_DTYPE``
with ``missing_go_to_left`` and class fractions as values, is scikit-learn's since 1.4, and we
need 1.6), inside the scikit-learn estimator of the same kind with its fitted attributes set.
The result predicts as ours does, for the tools that read scikit-learn's trees: shap's
``TreeExplainer``, ``sklearn.inspection``, skl2onnx, treelite.

Two differences need care:

* scikit-learn casts X to float32 before comparing it with the float64 thresholds; we compare
  X as given. Each numeric threshold t is therefore exported as the largest float32 at most t
  (``float32_floor``): for every float32 value x, ``x <= t`` exactly when ``x <= float32_floor(t)``,
  so both route every float32-representable input alike. A float64 input strictly between that
  float32 and the next one up can be routed differently: scikit-learn's own trees see the same
  float32 view of the data.
* scikit-learn's trees split numbers only, and its forests only average: categorical features
  and ``aggregation="median"`` are refused. ``voting="hard"`` is an average too, of each tree's
  vote: its trees are exported with one-hot values (the vote of each node's majority class), so
  that scikit-learn's mean probability is our share of votes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sklearn.ensemble
import sklearn.tree
from sklearn.base import BaseEstimator, clone, is_classifier
from sklearn.tree._tree import NODE_DTYPE
from sklearn.tree._tree import Tree as SkTree
from sklearn.utils.validation import check_is_fitted

from ..core.params import TREE_PARAMETERS
from ..forest.voting import one_hot_votes

__all__ = ["float32_floor", "forest_to_sklearn", "tree_to_sklearn"]

# Criteria scikit-learn lacks map to the one naming the node impurity our trees store
# ("gain_ratio" chooses splits by gain ratio, but its nodes' impurity is the entropy), or for
# "misclassification", which scikit-learn has no counterpart of, to its default. The parameter
# only matters to a refit; the exported trees keep their own splits and impurities.
_SKLEARN_CRITERION = {
    "gini": "gini",
    "entropy": "entropy",
    "log_loss": "log_loss",
    "gain_ratio": "entropy",
    "misclassification": "gini",
    "squared_error": "squared_error",
    "friedman_mse": "squared_error",  # set after construction (ours read it so: deprecated)
    "poisson": "poisson",
}


def float32_floor(values: np.ndarray) -> np.ndarray:
    """The largest float32 at most each value, as float64.

    Parameters
    ----------
    values : ndarray of float64

    Returns
    -------
    ndarray of float64, the shape of ``values``
        ``+inf`` stays ``+inf``; a value beyond float32's range becomes its largest finite value.
    """
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore"):  # beyond float32's range: inf, stepped back below
        rounded = values.astype(np.float32)
    # Rounding to nearest may go up: step those back by one float32 (the comparison is exact,
    # in float64).
    above = rounded > values
    rounded[above] = np.nextafter(rounded[above], np.float32(-np.inf))
    return rounded.astype(np.float64)


def tree_to_sklearn(estimator: BaseEstimator) -> BaseEstimator:
    """The scikit-learn tree equivalent to a fitted ``dasktrees`` single tree.

    Parameters
    ----------
    estimator : dasktrees.DecisionTreeClassifier or DecisionTreeRegressor
        Fitted, without categorical features.

    Returns
    -------
    sklearn.tree.DecisionTreeClassifier or DecisionTreeRegressor
        Fitted: ``tree_`` holds the same nodes (numeric thresholds by the float32 rule of the
        module docstring), values and impurities; ``classes_``, ``n_classes_``,
        ``n_features_in_``, ``feature_names_in_`` (when ours has it), ``max_features_`` and
        ``n_outputs_`` are ours. ``predict``, ``predict_proba``, ``apply`` and
        ``decision_path`` give ours on any float32-representable input, NaN included.

    Raises
    ------
    ValueError
        If a feature is categorical.
    """
    check_is_fitted(estimator, "tree_")
    _check_numeric(estimator)
    classifier = is_classifier(estimator)
    cls = sklearn.tree.DecisionTreeClassifier if classifier else sklearn.tree.DecisionTreeRegressor
    params = _tree_params(estimator)
    params["splitter"] = estimator.splitter
    if classifier:
        params["class_weight"] = estimator.class_weight
    out = cls(**params)
    _set_tree(out, estimator, estimator.tree_, classes=getattr(estimator, "classes_", None))
    if hasattr(estimator, "feature_names_in_"):
        out.feature_names_in_ = estimator.feature_names_in_
    return out


def forest_to_sklearn(forest: BaseEstimator) -> BaseEstimator:
    """The scikit-learn forest equivalent to a fitted ``dasktrees`` forest.

    Parameters
    ----------
    forest : a fitted dasktrees forest
        ``RandomForestClassifier`` / ``ExtraTreesClassifier``, ``RandomForestRegressor`` /
        ``ExtraTreesRegressor`` or a quantile forest with ``aggregation="mean"``; without
        categorical features.

    Returns
    -------
    sklearn.ensemble.RandomForestClassifier, RandomForestRegressor, ExtraTreesClassifier or
    ExtraTreesRegressor
        Fitted: ``estimators_`` holds one scikit-learn tree per tree of ours, in order (as
        ``tree_to_sklearn``, with scikit-learn's forest conventions: a tree's ``classes_`` are
        the class indices). ``predict``, ``predict_proba`` and ``apply`` give ours on any
        float32-representable input, NaN included: bit for bit with the default
        ``n_jobs=None``, which sums the trees in order as we do (other ``n_jobs`` may round
        the sum differently). With ``voting="hard"`` the trees' values are their one-hot votes,
        so ``predict_proba`` is the share of votes, as ours. A quantile forest exports its mean
        prediction (``predict(X)``), not its quantiles.
        ``n_estimators`` is the number of trees; ``bootstrap`` is True when the trees drew
        rows (bootstrap or ``max_samples``); ``oob_score`` is False and no out-of-bag
        attribute is exported.

    Raises
    ------
    ValueError
        If a feature is categorical, or for ``aggregation="median"``.
    """
    check_is_fitted(forest, "estimators_")
    _check_numeric(forest)
    votes = getattr(forest, "voting", "soft") == "hard"
    if getattr(forest, "aggregation", "mean") != "mean":
        raise ValueError(
            f"to_sklearn() needs aggregation='mean', got aggregation={forest.aggregation!r}: "
            "scikit-learn's forests average the trees' predictions"
        )
    classifier = is_classifier(forest)
    extra = forest._splitter == "random"
    cls = {
        (True, False): sklearn.ensemble.RandomForestClassifier,
        (True, True): sklearn.ensemble.ExtraTreesClassifier,
        (False, False): sklearn.ensemble.RandomForestRegressor,
        (False, True): sklearn.ensemble.ExtraTreesRegressor,
    }[classifier, extra]
    params = _tree_params(forest)
    params.update(
        n_estimators=len(forest.estimators_),  # scikit-learn divides the sum of votes by it
        bootstrap=forest.samples_rows(),  # our max_samples draws rows even without bootstrap
        max_samples=forest.max_samples,
    )
    if classifier:
        params["class_weight"] = forest.class_weight
    out = cls(**params)
    # What scikit-learn's fit does: estimator_ is the template, each tree a clone of it with
    # the forest's tree parameters (BaseEnsemble._make_estimator).
    out.estimator_ = out.estimator
    tree_params = {name: getattr(out, name) for name in out.estimator_params}
    # scikit-learn's forests fit their trees on class indices, and so do ours (a list of each
    # column's for several class columns).
    tree_classes: Any = None
    if classifier and isinstance(forest.classes_, list):
        tree_classes = [np.arange(len(c), dtype=np.float64) for c in forest.classes_]
    elif classifier:
        tree_classes = np.arange(forest.n_classes_, dtype=np.float64)
    out.estimators_ = []
    for est in forest.estimators_:
        tree = clone(out.estimator_).set_params(**tree_params)
        _set_tree(tree, forest, est.tree_, classes=tree_classes, votes=votes)
        out.estimators_.append(tree)
    out.n_features_in_ = forest.n_features_in_
    if hasattr(forest, "feature_names_in_"):
        out.feature_names_in_ = forest.feature_names_in_
    out.n_outputs_ = getattr(forest, "n_outputs_", 1)
    if classifier:
        out.classes_ = forest.classes_
        out.n_classes_ = forest.n_classes_
    return out


def _check_numeric(estimator):
    """Refuse categorical features: scikit-learn's trees compare numbers with thresholds, and
    would be given the raw categories, not our codes."""
    categorical = np.flatnonzero(estimator.bin_mapper_.is_categorical_)
    if len(categorical) == 0:
        return
    names = getattr(estimator, "feature_names_in_", None)
    which = [str(names[j]) for j in categorical] if names is not None else categorical.tolist()
    raise ValueError(
        f"to_sklearn() needs numeric features, but features {which} are categorical "
        "(categorical_features, or pandas category / object / string / bool columns): "
        "scikit-learn's trees split on numbers only. Encode them as numbers (e.g. with "
        "sklearn.preprocessing.OrdinalEncoder) and fit again."
    )


def _tree_params(estimator):
    """The scikit-learn parameters of ours that carry over (``params.TREE_PARAMETERS``), criterion
    mapped."""
    params = {name: getattr(estimator, name) for name, same in TREE_PARAMETERS.items() if same}
    params["criterion"] = _SKLEARN_CRITERION[estimator.criterion]
    params["random_state"] = estimator.random_state
    # ``monotonic_cst`` is not passed on: the constraints are in the trees' values already, and
    # scikit-learn's estimators with it set refuse rows with missing values, which ours route.
    return params


def _set_tree(out, estimator, tree, classes, votes=False):
    """Set the fitted attributes of the scikit-learn tree ``out`` from our ``tree`` (with
    ``votes``, each node's value is the one-hot vote for its majority class)."""
    n_values = tree.n_values
    n_outputs = getattr(estimator, "n_outputs_", 1)
    columns = [len(c) for c in classes] if isinstance(classes, list) else None
    out.tree_ = _sklearn_tree(tree.expanded(), n_values, votes, n_outputs, columns)
    out.n_features_in_ = tree.n_features
    out.max_features_ = estimator.max_features_
    out.n_outputs_ = n_outputs
    if classes is not None:
        out.classes_ = classes
        out.n_classes_ = n_values if columns is None else np.array(columns, dtype=np.intp)


def _sklearn_tree(tree, n_values, votes=False, n_outputs=1, column_classes=None):
    """Our ``tree.Tree`` as a ``sklearn.tree._tree.Tree``.

    ``value`` gains scikit-learn's output axis: (node_count, 1, n_classes) class fractions, as
    scikit-learn stores them since 1.4, or (node_count, 1, 1) means, or (node_count, k, 1) the
    means of a regression tree's ``n_outputs`` = k target columns, or (node_count, k, the most
    classes of a column) the fractions of k class columns of ``column_classes`` classes each
    (our blocks, ``class_outputs``, cut to scikit-learn's width); with ``votes``, one-hot votes
    for each node's majority class (the first of equal ones, as our hard vote).
    """
    nodes = np.zeros(tree.node_count, dtype=NODE_DTYPE)
    nodes["left_child"] = tree.children_left
    nodes["right_child"] = tree.children_right
    nodes["feature"] = tree.feature
    # Leaves keep TREE_UNDEFINED (-2.0), a float32 already.
    nodes["threshold"] = float32_floor(tree.threshold)
    nodes["impurity"] = tree.impurity
    nodes["n_node_samples"] = tree.n_node_samples
    nodes["weighted_n_node_samples"] = tree.weighted_n_node_samples
    nodes["missing_go_to_left"] = tree.missing_go_to_left
    value = one_hot_votes(tree.value) if votes else tree.value
    if column_classes is not None:  # k class columns: the blocks, cut to the widest column
        width = max(column_classes)
        value = value.reshape(tree.node_count, n_outputs, -1)[:, :, :width]
        n_classes = np.array(column_classes, dtype=np.intp)
        shape = (n_outputs, width)
    else:  # (k target columns: one "class" each, scikit-learn's regression layout)
        shape = (n_outputs, 1) if n_outputs > 1 else (1, n_values)
        n_classes = np.full(shape[0], shape[1], dtype=np.intp)
    out = SkTree(tree.n_features, n_classes, shape[0])
    out.__setstate__(
        {
            "max_depth": tree.max_depth,
            "node_count": tree.node_count,
            "nodes": nodes,
            "values": np.ascontiguousarray(value.reshape((tree.node_count,) + shape)),
        }
    )
    return out

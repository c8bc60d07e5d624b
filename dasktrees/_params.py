"""Parameter checks for the tree learners, gathered in one function.

Every error names the parameter and the value that was wrong. The result, ``GrowthParams``, holds
the plain numbers the grower kernel takes.
"""

import math
from dataclasses import dataclass
from numbers import Integral, Real

from ._dtypes import MAX_BINS
from .criteria import CLASSIFICATION_CRITERIA, REGRESSION_CRITERIA

_NO_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class GrowthParams:
    """Resolved tree parameters, as ``tree.grower.grow`` takes them."""

    criterion: int
    random_splitter: bool
    max_features: int
    max_depth: int
    min_samples_split: int
    min_samples_leaf: int
    min_weight_fraction_leaf: float
    max_leaf_nodes: int  # 0: no limit
    min_impurity_decrease: float
    ccp_alpha: float  # 0: no pruning after growth


def _is_int(value):
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_real(value):
    return isinstance(value, Real) and not isinstance(value, bool)


def _fail(name, expected, value):
    raise ValueError(f"{name} must be {expected}, got {value!r}")


def resolve_max_features(max_features, n_features, name="max_features"):
    """Number of features drawn per node: "sqrt", "log2", an int, a fraction or None (all)."""
    if max_features is None:
        return n_features
    if isinstance(max_features, str):
        if max_features == "sqrt":
            return max(1, int(math.sqrt(n_features)))
        if max_features == "log2":
            return max(1, int(math.log2(n_features)))
    elif _is_int(max_features):
        if 1 <= max_features <= n_features:
            return int(max_features)
    elif _is_real(max_features) and 0.0 < max_features <= 1.0:
        return max(1, int(max_features * n_features))
    _fail(
        name,
        f'"sqrt", "log2", None, an int in [1, {n_features}] or a float in (0, 1]',
        max_features,
    )


def _count_or_fraction(name, value, n_samples, minimum_int, fraction_interval):
    """An int >= minimum_int, or a fraction of n_samples in ``fraction_interval``, as a count."""
    low, high, high_closed = fraction_interval
    if _is_int(value):
        if value >= minimum_int:
            return int(value)
    elif _is_real(value) and low < value and (value <= high if high_closed else value < high):
        return max(minimum_int, math.ceil(value * n_samples))
    bracket = "]" if high_closed else ")"
    _fail(name, f"an int >= {minimum_int} or a float in ({low}, {high}{bracket}", value)


def check_tree_params(est, n_samples, n_features, is_classifier):
    """Validate the tree parameters of ``est`` and resolve them for data of this size.

    Parameters
    ----------
    est : estimator
        Has the attributes criterion, splitter, max_features, max_depth, min_samples_split,
        min_samples_leaf, min_weight_fraction_leaf, max_leaf_nodes, min_impurity_decrease,
        ccp_alpha, max_bins.
    n_samples, n_features : int
    is_classifier : bool

    Returns
    -------
    GrowthParams
    """
    criteria = CLASSIFICATION_CRITERIA if is_classifier else REGRESSION_CRITERIA
    if not isinstance(est.criterion, str) or est.criterion not in criteria:
        _fail("criterion", f"one of {sorted(criteria)}", est.criterion)
    if est.splitter not in ("best", "random"):
        _fail("splitter", '"best" or "random"', est.splitter)
    max_depth = est.max_depth
    if max_depth is None:
        max_depth = _NO_LIMIT
    elif not _is_int(max_depth) or max_depth < 1:
        _fail("max_depth", "None or an int >= 1", max_depth)
    max_leaf_nodes = est.max_leaf_nodes
    if max_leaf_nodes is None:
        max_leaf_nodes = 0
    elif not _is_int(max_leaf_nodes) or max_leaf_nodes < 2:
        _fail("max_leaf_nodes", "None or an int >= 2", max_leaf_nodes)
    if not _is_real(est.min_weight_fraction_leaf) or not 0.0 <= est.min_weight_fraction_leaf <= 0.5:
        _fail("min_weight_fraction_leaf", "a float in [0, 0.5]", est.min_weight_fraction_leaf)
    if not _is_real(est.min_impurity_decrease) or est.min_impurity_decrease < 0.0:
        _fail("min_impurity_decrease", "a float >= 0", est.min_impurity_decrease)
    # Finite: a model file stores parameters as JSON, which has no infinity.
    if not _is_real(est.ccp_alpha) or not 0.0 <= est.ccp_alpha < math.inf:
        _fail("ccp_alpha", "a finite float >= 0", est.ccp_alpha)
    if not _is_int(est.max_bins) or not 2 <= est.max_bins <= MAX_BINS:
        _fail("max_bins", f"an int in [2, {MAX_BINS}]", est.max_bins)
    min_samples_leaf = _count_or_fraction(
        "min_samples_leaf", est.min_samples_leaf, n_samples, 1, (0.0, 1.0, False)
    )
    min_samples_split = _count_or_fraction(
        "min_samples_split", est.min_samples_split, n_samples, 2, (0.0, 1.0, True)
    )
    return GrowthParams(
        criterion=criteria[est.criterion],
        random_splitter=est.splitter == "random",
        max_features=resolve_max_features(est.max_features, n_features),
        max_depth=int(max_depth),
        min_samples_split=max(min_samples_split, 2 * min_samples_leaf),
        min_samples_leaf=min_samples_leaf,
        min_weight_fraction_leaf=float(est.min_weight_fraction_leaf),
        max_leaf_nodes=int(max_leaf_nodes),
        min_impurity_decrease=float(est.min_impurity_decrease),
        ccp_alpha=float(est.ccp_alpha),
    )

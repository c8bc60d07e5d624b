"""Parameter checks of the estimators, driven by one table of what each parameter accepts.

``PARAMETERS`` says, once, what every tree and forest parameter accepts; the estimators check
their parameters against it before any work starts (``check_tree_params``,
``check_forest_params``), and the experiment config reads the same table
(``parameter_problem``), so an estimator and a YAML file refuse the same values with the same
words. Bounds that depend on the data (``max_features`` at most the number of features) are
checked again when the data is known. ``GrowthParams`` holds the plain numbers the grower kernel
takes.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Callable

import numpy as np

from .criteria import CLASSIFICATION_CRITERIA, POISSON, REGRESSION_CRITERIA
from .dtypes import MAX_BINS

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
    min_samples_category: int  # rarer categories of a node are pooled with its missing values
    tree_order: bool  # categories ordered once per tree (categorical_order="tree"), else per node
    # each feature's monotonic constraint (1 increasing, -1 decreasing, 0 none); () for none
    monotonic: tuple[int, ...] = ()

    @property
    def constrained(self) -> bool:
        """Whether a feature has a monotonic constraint."""
        return any(self.monotonic)

    @property
    def own_moments(self) -> bool:
        """Whether every node of a tree keeps its own impurity (and a regressor's its own
        mean), where other trees derive their split nodes' from their leaves' (``wire.encode``'s
        ``exact``): under monotonic constraints, whose clipped values do not give them, and for
        Poisson, whose deviances do not pool as variances do (``tree.pool_to_root``)."""
        return self.constrained or self.criterion == POISSON


def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class Rule:
    """What one parameter accepts.

    ``expected`` completes "NAME must be ..." (and the config's "expected ..."); ``accepts``
    tells whether a value is one of those.
    """

    expected: str
    accepts: Callable[[Any], bool]


def _options(*options: Any) -> Rule:
    words = [repr(o) if isinstance(o, str) else str(o) for o in options]
    expected = ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else words[0]
    return Rule(expected, lambda v: any(v is o or (isinstance(v, str) and v == o) for o in options))


def _integer(low: int, high: int | None = None, none: bool = False) -> Rule:
    bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
    return Rule(
        ("None or " if none else "") + f"an integer {bound}",
        lambda v: (none and v is None) or (_is_int(v) and v >= low and (high is None or v <= high)),
    )


def _count_or_fraction(low: int, high_closed: bool) -> Rule:
    """An integer >= ``low``, or a fraction of the rows in (0, 1] or (0, 1)."""
    bracket = "]" if high_closed else ")"
    return Rule(
        f"an integer >= {low} or a float in (0, 1{bracket}",
        lambda v: (
            (_is_int(v) and v >= low)
            or (
                _is_real(v)
                and not _is_int(v)
                and 0.0 < v
                and (v <= 1.0 if high_closed else v < 1.0)
            )
        ),
    )


def _real(low: float, high: float | None = None, finite: bool = False) -> Rule:
    expected = f"a float in [{low:g}, {high:g}]" if high is not None else f"a float >= {low:g}"
    return Rule(
        expected.replace("a float", "a finite float") if finite else expected,
        lambda v: (
            _is_real(v)
            and low <= v
            and (v <= high if high is not None else True)
            and (v < math.inf or not finite)
        ),
    )


def _monotonic_cst(v: Any) -> bool:
    """None, a list (or 1-d array) of -1, 0 and 1 (integers, or floats equal to them, as
    scikit-learn takes), or a dict from feature names to them."""
    if v is None:
        return True
    values = list(v.values()) if isinstance(v, Mapping) else v
    if isinstance(v, Mapping) and not all(isinstance(k, str) for k in v):
        return False
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, np.ndarray)):
        return False
    values = np.asarray(values)
    return values.ndim == 1 and all(_is_real(x) and x in (-1, 0, 1) for x in values.tolist())


_FEATURES = Rule(
    '"sqrt", "log2", None, an integer >= 1 or a float in (0, 1]',
    lambda v: (
        v is None
        or (isinstance(v, str) and v in ("sqrt", "log2"))
        or (_is_int(v) and v >= 1)
        or (_is_real(v) and not _is_int(v) and 0.0 < v <= 1.0)
    ),
)

# What ``prune`` accepts besides None (the families: ``forest.truncation``).
PRUNE_CHOICES = ("oob", "oob:depth", "oob:size", "oob:alpha", "oob:leaves")

# What each parameter accepts, whatever the data. ``criterion`` depends on the task
# (``criterion_rule``); ``categorical_features`` and the keys of a ``class_weight`` dict name
# columns and classes, so they are checked against the data.
PARAMETERS: dict[str, Rule] = {
    # trees (and the trees of a forest)
    "splitter": _options("best", "random"),
    "max_depth": _integer(1, none=True),
    "min_samples_split": _count_or_fraction(2, high_closed=True),
    "min_samples_leaf": _count_or_fraction(1, high_closed=False),
    "min_weight_fraction_leaf": _real(0.0, 0.5),
    "max_features": _FEATURES,
    "max_leaf_nodes": _integer(2, none=True),
    "min_impurity_decrease": _real(0.0),
    # Finite: a model file stores parameters as JSON, which has no infinity.
    "ccp_alpha": _real(0.0, finite=True),
    "max_bins": _integer(2, MAX_BINS),
    "min_samples_category": _integer(1),
    "categorical_order": _options("node", "tree"),
    "monotonic_cst": Rule(
        "None, a list of -1, 0 or 1 per feature, or a dict from feature names to -1, 0 or 1",
        _monotonic_cst,
    ),
    # forests
    "n_estimators": Rule(
        '"auto" or an integer >= 1',
        lambda v: (isinstance(v, str) and v == "auto") or (_is_int(v) and v >= 1),
    ),
    "max_n_estimators": _integer(1),
    "tol": Rule("a float in (0, 1)", lambda v: _is_real(v) and 0.0 < v < 1.0),
    "default_quantiles": Rule(
        "a float in [0, 1] or a non-empty list of them", lambda v: _quantiles_or_none(v) is not None
    ),
    "max_features_tree": _FEATURES,
    "bootstrap": Rule("True or False", lambda v: isinstance(v, (bool, np.bool_))),
    "max_samples": Rule(
        "None, an integer >= 1 or a float in (0, 1]",
        lambda v: v is None or (_is_int(v) and v >= 1) or (isinstance(v, float) and 0.0 < v <= 1.0),
    ),
    "oob_score": Rule("a bool or a callable", lambda v: isinstance(v, bool) or callable(v)),
    "prune": Rule(
        'None, "oob", "oob:depth", "oob:size", "oob:alpha" or "oob:leaves"',
        lambda v: v is None or (isinstance(v, str) and v in PRUNE_CHOICES),
    ),
    "voting": _options("soft", "hard"),
    "aggregation": _options("mean", "median"),
    "mode": _options("auto", "replicated", "sampled", "distributed"),
    "tree_storage": _options("client", "workers", "auto"),
    "trees_per_task": _integer(1, none=True),
    "n_blocks": _integer(1, none=True),
    "n_jobs": Rule(
        "None or a nonzero integer", lambda v: v is None or (_is_int(v) and int(v) != 0)
    ),
    "verbose": Rule(
        "a bool or an integer >= 0", lambda v: isinstance(v, bool) or (_is_int(v) and v >= 0)
    ),
    # classifiers ("balanced_subsample": forests only)
    "class_weight": Rule(
        'a dict, a list of dicts (one per column of y), "balanced", "balanced_subsample" or None',
        lambda v: (
            v is None
            or isinstance(v, dict)
            or (isinstance(v, list) and all(isinstance(d, dict) for d in v))
            or v in ("balanced", "balanced_subsample")
        ),
    ),
}


def _quantiles_or_none(value: Any):
    """``value`` as a list of floats in [0, 1], or None if it is not one or a list of them."""
    values = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
    if not values or not all(_is_real(v) and 0.0 <= v <= 1.0 for v in values):
        return None
    return values


# The regression criterion of scikit-learn's that the binned learner has not, and why.
UNSUPPORTED_CRITERIA = {
    "absolute_error": (
        "criterion='absolute_error' is not supported: scoring a cut by absolute error needs the "
        "median target of each side of every cut, which the histograms of binned rows (sums a "
        "bin) cannot give; sorting each node's targets instead would cost n log n a node. Use "
        "'squared_error', or a quantile forest (RandomForestQuantileRegressor) for medians"
    )
}


def _unsupported(criterion: Any) -> bool:
    return isinstance(criterion, str) and criterion in UNSUPPORTED_CRITERIA


def friedman_as_squared_error(criterion: Any) -> Any:
    """``criterion`` as a regressor's constructor keeps it: scikit-learn 1.9 deprecated
    "friedman_mse", which always chose the splits "squared_error" chooses, and maps it to
    "squared_error" with a FutureWarning; so do ours."""
    if isinstance(criterion, str) and criterion == "friedman_mse":
        warnings.warn(
            'criterion="friedman_mse" is deprecated, as in scikit-learn 1.9: it chooses the '
            'splits "squared_error" chooses, and is read as criterion="squared_error"; pass '
            "that instead",
            FutureWarning,
            stacklevel=3,
        )
        return "squared_error"
    return criterion


def criterion_rule(is_classifier: bool) -> Rule:
    """What ``criterion`` accepts for the task."""
    criteria = CLASSIFICATION_CRITERIA if is_classifier else REGRESSION_CRITERIA
    named = sorted(c for c in criteria if c != "friedman_mse")  # deprecated: accepted, not offered
    return Rule(f"one of {named}", lambda v: isinstance(v, str) and v in criteria)


def parameter_problem(name: str, value: Any, is_classifier: bool) -> str | None:
    """What is wrong with ``value`` for parameter ``name`` ("expected ..., got ..."), or None.

    Parameters not in ``PARAMETERS`` (``random_state``, ``categorical_features``, ...) have
    their own checks and get None here.
    """
    rule = criterion_rule(is_classifier) if name == "criterion" else PARAMETERS.get(name)
    if rule is None or rule.accepts(value):
        return None
    if name == "criterion" and not is_classifier and _unsupported(value):
        return UNSUPPORTED_CRITERIA[value]
    return f"expected {rule.expected}, got {value!r}"


def _check(est: Any, names, is_classifier: bool = True) -> None:
    for name in names:
        value = getattr(est, name)
        rule = criterion_rule(is_classifier) if name == "criterion" else PARAMETERS[name]
        if not rule.accepts(value):
            if name == "criterion" and not is_classifier and _unsupported(value):
                raise ValueError(UNSUPPORTED_CRITERIA[value])
            raise ValueError(f"{name} must be {rule.expected}, got {value!r}")


def resolve_max_features(max_features, n_features: int, name: str = "max_features") -> int:
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
    raise ValueError(
        f'{name} must be "sqrt", "log2", None, an integer in [1, {n_features}] or a float in '
        f"(0, 1], got {max_features!r}"
    )


def _as_count(value, n_samples: int, minimum: int) -> int:
    """A checked min_samples_* value as a number of rows."""
    return int(value) if _is_int(value) else max(minimum, math.ceil(value * n_samples))


# Every tree parameter, in the order ``check_tree_params`` checks them (``categorical_features``,
# checked against the data by ``BinMapper``, is not), each with whether scikit-learn's trees have
# it with the same meaning (what ``to_sklearn`` passes on; it maps ``criterion`` and sets
# ``splitter`` itself). The single trees take them all; a forest takes them all but ``splitter``,
# which is its kind, and passes them on to its trees.
TREE_PARAMETERS: dict[str, bool] = {
    "criterion": False,
    "splitter": False,
    "max_depth": True,
    "max_leaf_nodes": True,
    "min_weight_fraction_leaf": True,
    "min_impurity_decrease": True,
    "ccp_alpha": True,
    "max_bins": False,
    "min_samples_leaf": True,
    "min_samples_split": True,
    "max_features": True,
    "min_samples_category": False,
    "categorical_order": False,
    "categorical_features": False,
    # as scikit-learn's, but also a dict by name; ``to_sklearn`` leaves it unset (the exported
    # trees' values carry the constraints, and scikit-learn's with it refuse missing values)
    "monotonic_cst": False,
}


def check_tree_params(
    est, n_samples: int, n_features: int, is_classifier: bool, feature_names=None
) -> GrowthParams:
    """Validate the tree parameters of ``est`` and resolve them for data of this size.

    Parameters
    ----------
    est : estimator
        Has the attributes criterion, splitter, max_features, max_depth, min_samples_split,
        min_samples_leaf, min_weight_fraction_leaf, max_leaf_nodes, min_impurity_decrease,
        ccp_alpha, max_bins, min_samples_category, categorical_order.
    n_samples, n_features : int
    is_classifier : bool
    feature_names : list of str, optional
        X's column names, which a ``monotonic_cst`` dict names.

    Returns
    -------
    GrowthParams
    """
    names = [name for name in TREE_PARAMETERS if name != "categorical_features"]
    _check(est, [name for name in names if hasattr(est, name)], is_classifier)
    if hasattr(est, "class_weight"):
        _check(est, ["class_weight"])
    criteria = CLASSIFICATION_CRITERIA if is_classifier else REGRESSION_CRITERIA
    if not is_classifier:
        friedman_as_squared_error(est.criterion)  # set after construction: warn at fit
    min_samples_leaf = _as_count(est.min_samples_leaf, n_samples, 1)
    min_samples_split = _as_count(est.min_samples_split, n_samples, 2)
    return GrowthParams(
        criterion=criteria[est.criterion],
        random_splitter=est.splitter == "random",
        max_features=resolve_max_features(est.max_features, n_features),
        max_depth=_NO_LIMIT if est.max_depth is None else int(est.max_depth),
        min_samples_split=max(min_samples_split, 2 * min_samples_leaf),
        min_samples_leaf=min_samples_leaf,
        min_weight_fraction_leaf=float(est.min_weight_fraction_leaf),
        max_leaf_nodes=0 if est.max_leaf_nodes is None else int(est.max_leaf_nodes),
        min_impurity_decrease=float(est.min_impurity_decrease),
        ccp_alpha=float(est.ccp_alpha),
        min_samples_category=int(est.min_samples_category),
        tree_order=est.categorical_order == "tree",
        monotonic=resolve_monotonic_cst(
            getattr(est, "monotonic_cst", None), n_features, feature_names
        ),
    )


def resolve_monotonic_cst(monotonic_cst, n_features: int, feature_names=None) -> tuple[int, ...]:
    """A checked ``monotonic_cst`` as one constraint per feature, () for None.

    A list has one entry per feature; a dict names features of X (which then has column
    names), the others unconstrained.
    """
    if monotonic_cst is None:
        return ()
    if isinstance(monotonic_cst, Mapping):
        if feature_names is None:
            raise ValueError(
                "monotonic_cst: a dict names features, but X has no column names; pass a "
                f"list of {n_features} constraints, one a feature"
            )
        names = [str(name) for name in feature_names]
        unknown = sorted(set(monotonic_cst) - set(names))
        if unknown:
            raise ValueError(f"monotonic_cst: {unknown} are not columns of X; columns are {names}")
        constraints = [0] * n_features
        for name, value in monotonic_cst.items():
            constraints[names.index(name)] = int(value)
        return tuple(constraints)
    constraints = [int(value) for value in np.asarray(monotonic_cst).tolist()]
    if len(constraints) != n_features:
        raise ValueError(
            f"monotonic_cst has {len(constraints)} entries but X has {n_features} features"
        )
    return tuple(constraints)


def check_monotonic_data(params: GrowthParams, is_categorical, n_classes: int, names=None) -> None:
    """Refuse monotonic constraints the data cannot take: on a categorical feature (its codes
    have no order), or for more than two classes. ``n_classes`` 1 for regression; ``names``:
    the features' names, for the message."""
    constrained = np.flatnonzero(np.asarray(params.monotonic, dtype=np.int8))
    if not len(constrained):
        return
    if n_classes > 2:
        raise ValueError(
            "monotonic_cst: Monotonicity constraints are not supported with multiclass "
            f"classification ({n_classes} classes); they apply to regression and two classes"
        )
    categorical = [int(j) for j in constrained if is_categorical[j]]
    if categorical:
        label = [str(names[j]) if names is not None else j for j in categorical]
        raise ValueError(
            f"monotonic_cst: features {label} are categorical; a monotonic constraint needs "
            "a numeric feature"
        )


def check_multi_output(
    params: GrowthParams, criterion: str, is_categorical, n_outputs: int, names=None
) -> None:
    """Refuse what a tree on ``n_outputs`` > 1 target columns cannot take: the Poisson
    criterion and the gain ratio, monotonic constraints (scikit-learn refuses them too) and
    categorical features, whose categories are ordered by one target's means or one class's
    share. ``names``: the features' names, for
    the message."""
    if n_outputs <= 1:
        return
    if criterion == "poisson":
        raise ValueError(
            f"criterion='poisson' takes one target; y has {n_outputs} columns: use "
            "'squared_error', or fit one model per column"
        )
    if criterion == "gain_ratio":
        raise ValueError(
            f"criterion='gain_ratio' divides one target's entropy gain by the split information; "
            f"y has {n_outputs} columns: use 'entropy', 'log_loss', 'gini' or 'misclassification'"
        )
    if np.asarray(params.monotonic, dtype=np.int8).any():
        raise ValueError(
            "monotonic_cst: Monotonicity constraints are not supported with multiple outputs "
            f"(y has {n_outputs} columns)"
        )
    categorical = np.flatnonzero(is_categorical)
    if len(categorical):
        label = [str(names[j]) if names is not None else int(j) for j in categorical]
        raise ValueError(
            f"features {label} are categorical, and y has {n_outputs} columns: a split orders "
            "categories by one target's means or one class's share. Encode them as numbers, or "
            "fit one model per column"
        )


_FOREST_PARAMETERS = (
    "n_estimators",
    "max_n_estimators",
    "tol",
    "default_quantiles",
    "bootstrap",
    "max_samples",
    "oob_score",
    "prune",
    "max_features_tree",
    "voting",
    "aggregation",
    "mode",
    "tree_storage",
    "trees_per_task",
    "n_blocks",
    "n_jobs",
    "verbose",
    "class_weight",
)


def check_forest_params(est) -> None:
    """Validate the forest-level parameters of ``est`` (those it has) and their combinations;
    the trees' are ``check_tree_params``'. Raises ``ValueError`` naming the parameter."""
    _check(est, [name for name in _FOREST_PARAMETERS if hasattr(est, name)])
    if est.oob_score and not (est.bootstrap or est.max_samples is not None):
        raise ValueError(
            "oob_score: Out of bag estimation only available if bootstrap=True or max_samples "
            "is set (every row is in bag)"
        )
    if getattr(est, "prune", None) is not None and not (
        est.bootstrap or est.max_samples is not None
    ):
        raise ValueError(
            f"prune={est.prune!r} chooses on the out-of-bag rows: it needs bootstrap=True or "
            "max_samples (every row is in bag)"
        )
    if est.n_estimators == "auto" and getattr(est, "tree_storage", "client") == "workers":
        raise ValueError(
            'n_estimators="auto" needs tree_storage="client" or "auto": its waves are checked '
            "on the client"
        )
    if est.n_estimators == "auto" and not (est.bootstrap or est.max_samples is not None):
        raise ValueError(
            'n_estimators="auto" stops on the out-of-bag error: it needs bootstrap=True or '
            "max_samples"
        )

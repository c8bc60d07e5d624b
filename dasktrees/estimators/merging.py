"""``merge_forests``: forests fitted apart, on the same columns and classes, as one forest.

The merged forest holds the inputs' trees one forest after the other, where they are (on the
client, or as the same shards on the workers), and predicts as the mean of all of them: the
inputs' mean predictions weighted by their numbers of trees. Each input's trees keep what they
were drawn and binned with (a ``Source``: its seed, training rows and bin mapper): the bins of
forests fitted on other rows, or on more rows than the bin mapper samples, differ, so each
input's trees are packed with their own bin edges, and the rows are encoded once (the inputs'
categorical columns must have the same categories).

Forests fitted on the same rows with different seeds are one bagged forest of all their trees:
its out-of-bag results are computed on request, from the training rows (``merge_forests(...,
X=X, y=y)``, ``oob_permutation_importance``, ``oob_impurity_importance``), each tree's rows drawn
with its own fit's seed and binned with its own fit's bins (``reductions.Draws``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..core.validation import column_label
from ..distributed.data import Data
from ..distributed.shards import join_shards
from ..forest.parts import sources_of
from .forests import BaseForest
from .quantile_forests import _QuantileMixin

# Parameters in which merged forests may differ: how and where they were fitted, their seeds and
# sizes, not what their trees are.
_FREE_PARAMETERS = frozenset(
    {
        "n_estimators",
        "random_state",
        "warm_start",
        "client",
        "oob_score",
        "tree_storage",
        "trees_per_task",
        "n_blocks",
        "mode",
        "max_n_estimators",
        "tol",
    }
)


def merge_forests(
    forests: Sequence[BaseForest],
    X: Data | None = None,
    y: Data | None = None,
    sample_weight: Data | None = None,
) -> BaseForest:
    """One forest of the trees of ``forests``, fitted apart on the same columns and classes.

    The result is a forest of the inputs' class, with the first input's parameters
    (``n_estimators`` the total), whose trees are the inputs' trees in order, kept where they
    are: on the client, or, for forests kept on the workers of one client, as the same shards
    (nothing moves). It predicts the mean of all the trees: each input's prediction weighted
    by its number of trees. Predictions, ``apply``, SHAP values and ``feature_importances_``
    are those of its trees. Each tree keeps its own fit's bootstrap draws: given the training
    rows (``X``, ``y``) on which every input was fitted, with distinct seeds, the merged
    forest's out-of-bag results are computed over all its trees; ``oob_permutation_importance``
    and ``oob_impurity_importance`` take the rows too, ``return_std`` needs the fits on the same
    number of rows, and ``estimators_samples_`` gives each tree's rows of its own fit.
    ``to_sklearn`` and a warm start are refused (the fits have their own bins). ``save``
    writes a sharded model, each fit's trees with their own bins and seed.

    Parameters
    ----------
    forests : sequence of fitted forests
        Of one class (``RandomForestClassifier``, ...; not the quantile forests), with the same
        parameters but for how they were fitted (``random_state``, ``n_estimators``,
        ``oob_score``, ``tree_storage``, ``mode``, ...), the same columns (names and number),
        classes and categories of each categorical column; all on the client, or all on the
        workers of one client.
    X, y, sample_weight : optional
        The training rows every input was fitted on, in the same order (numpy, pandas or
        dask): with them the merged forest gets ``oob_score_``, ``oob_curve_`` and
        ``oob_decision_function_`` (``oob_prediction_``), each row voted by the trees of every
        input that did not draw it. The rows are binned again once for each input's bins.

    Returns
    -------
    forest
        A new estimator; the inputs are unchanged (their trees are shared, not copied).

    Raises
    ------
    TypeError
        An input is not a fitted dasktrees forest, or of another class than the first.
    ValueError
        The inputs differ in what their trees are or read: the message names the parameter,
        column or classes, or where the trees are. With ``X``: the inputs share a seed, or X
        has other rows than an input was fitted on, or the forests draw no rows
        (``bootstrap=False`` without ``max_samples``).
    """
    forests = list(forests)
    if not forests:
        raise ValueError("merge_forests needs at least one forest")
    first = forests[0]
    for k, forest in enumerate(forests):
        # Quantile forests' leaf targets are one table of all their trees' leaves: not merged.
        if not isinstance(forest, BaseForest) or isinstance(forest, _QuantileMixin):
            raise TypeError(
                f"forest {k}: merge_forests merges dasktrees' random forests and extra-trees "
                f"(not quantile forests), got {type(forest).__name__}"
            )
        check_is_fitted(forest, "estimators_")
        if type(forest) is not type(first):
            raise TypeError(
                f"forest {k} is a {type(forest).__name__} and forest 0 a "
                f"{type(first).__name__}: merge_forests merges forests of one class"
            )
        if k:
            _check_compatible(first, forest, k)
    if (X is None) != (y is None):
        raise ValueError("merge_forests needs both X and y (the training rows), or neither")
    merged = first._fitted_skeleton()
    merged.set_params(
        n_estimators=sum(f.n_estimators_ for f in forests), warm_start=False, oob_score=False
    )
    merged._sources = [source for forest in forests for source in sources_of(forest)]
    if first._tree_shards is not None:
        merged._keep_on_workers(join_shards([f._tree_shards for f in forests if f._tree_shards]))
    else:
        merged._keep_on_client([est for f in forests for est in f.estimators_])
    if X is not None:
        # The first input's scoring (a callable) scores the merged forest's rows too.
        merged.set_params(oob_score=first.oob_score or True)
        merged._set_oob_on(X, y, sample_weight)
    return merged


def _check_compatible(first: BaseForest, other: BaseForest, k: int) -> None:
    """Refuse ``other`` (input ``k``) unless its trees read the rows as ``first``'s do."""
    a, b = first.get_params(deep=False), other.get_params(deep=False)
    for name in sorted(set(a) - _FREE_PARAMETERS):
        if not _equal(a[name], b[name]):
            raise ValueError(
                f"forests 0 and {k} differ in parameter {name!r}: {a[name]!r} and {b[name]!r}"
            )
    if first.n_features_in_ != other.n_features_in_:
        raise ValueError(
            f"forests 0 and {k} were fitted on {first.n_features_in_} and "
            f"{other.n_features_in_} columns"
        )
    names = [getattr(f, "feature_names_in_", None) for f in (first, other)]
    listed = [None if n is None else [str(c) for c in n] for n in names]
    if listed[0] != listed[1]:
        raise ValueError(f"forests 0 and {k} were fitted on columns of other names")
    outputs = [getattr(f, "n_outputs_", 1) for f in (first, other)]
    if outputs[0] != outputs[1]:
        raise ValueError(
            f"forests 0 and {k} were fitted on {outputs[0]} and {outputs[1]} target columns"
        )
    if hasattr(first, "classes_") and not _equal(first.classes_, other.classes_):
        raise ValueError(
            f"forests 0 and {k} have other classes: {list(first.classes_)} and "
            f"{list(other.classes_)}"
        )
    mine, theirs = first.bin_mapper_, other.bin_mapper_
    for j in range(first.n_features_in_):
        column = column_label(mine.feature_names_in_, j)
        if mine.is_categorical_[j] != theirs.is_categorical_[j]:
            raise ValueError(f"{column} is categorical in one of forests 0 and {k} only")
        if mine.is_categorical_[j] and not _equal(mine.categories_[j], theirs.categories_[j]):
            raise ValueError(
                f"{column} has other categories in forests 0 and {k}: the rows would be "
                "encoded differently"
            )
    if (first._tree_shards is None) != (other._tree_shards is None):
        where = ("client", "workers") if first._tree_shards is None else ("workers", "client")
        raise ValueError(
            f"forest 0 keeps its trees on the {where[0]} and forest {k} on the {where[1]}: "
            "gather_trees() the forests on the workers first"
        )
    mine_shards, their_shards = first._tree_shards, other._tree_shards
    if mine_shards and their_shards and mine_shards.client is not their_shards.client:
        raise ValueError(f"forests 0 and {k} keep their trees on the workers of other clients")


def _equal(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):  # several class columns' classes
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and bool(np.all(a == b))
    return a == b

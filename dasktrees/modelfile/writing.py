"""Saving: a fitted estimator as a model directory (a JSON manifest and an ``.npz`` of arrays).
Reads the estimator's attributes only, so the estimators' ``save`` methods call it without an
import circle."""

import math
import numbers
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._version import __version__
from ..core.criteria import CLASSIFICATION_CRITERIA, REGRESSION_CRITERIA
from ..core.validation import column_label
from ..learner.binning import BinMapper
from ..learner.tree import (
    children,
    node_class_impurities,
    node_counts,
    node_moments,
    node_samples,
    node_weights,
    shipped_outputs,
    value_and_weight,
)
from ..learner.wire import NONZERO_LEAF_IMPURITY, SUMMABLE, narrow_counts, narrowest_uint, state_of
from .format import (
    ARRAY_DTYPES,
    BIN_PARAMS,
    ESTIMATOR_KINDS,
    FOREST_FITTED,
    FORMAT,
    FORMAT_VERSION,
    INTERVAL_SCORE_ARRAYS,
    LEAF_TARGET_ARRAYS,
    NARROW_DTYPES,
    OOB_SCORES,
    QUANTILE_FORESTS,
    SHIPPED_ARRAYS,
    SPLIT_BITS,
    TREE_FITTED,
    Arrays,
    Manifest,
    array_checksum,
    estimator_kind,
    manifest_checksum,
    to_json,
    write_directory,
)


def save(estimator: Any, path: str | os.PathLike) -> None:
    """Write a fitted estimator to the model directory ``path``.

    The directory is written under a temporary name beside ``path`` and renamed into place once
    complete, so that a failed save leaves no half-written model.

    Parameters
    ----------
    estimator : one of ``format.ESTIMATOR_KINDS``, fitted
    path : str or os.PathLike
        Directory to create. An existing dasktrees model directory there is replaced; anything
        else is left alone.

    Raises
    ------
    sklearn.exceptions.NotFittedError
    TypeError
        The estimator is not one of dasktrees' classes, or a parameter (a ``RandomState``, a
        callable ``oob_score``), class or category has no JSON form; the message names it.
    FileExistsError
        ``path`` exists and is not a dasktrees model directory.
    """
    manifest, arrays = _describe(estimator)
    write_directory(Path(path), manifest, arrays)


def _describe(estimator: Any) -> tuple[Manifest, Arrays]:
    """The manifest (a JSON-able dict) and the arrays of a fitted estimator."""
    cls = type(estimator)
    kind = estimator_kind(estimator)
    if kind is None:
        raise TypeError(f"only {', '.join(ESTIMATOR_KINDS)} can be saved, got {cls.__name__}")
    is_forest = kind[0] == "forest"
    check_is_fitted(estimator, "estimators_" if is_forest else "tree_")
    trees = [est.tree_ for est in estimator.estimators_] if is_forest else [estimator.tree_]
    criterion = _criterion(estimator)
    # a classifier's class columns (kept in each state, ``wire.state_of``; not in the file)
    columns = getattr(estimator, "n_outputs_", 1) if hasattr(estimator, "classes_") else 1
    states = [state_of(tree, criterion, n_outputs=columns) for tree in trees]
    arrays = _tree_arrays(states)
    bins, arrays["bin_edges"], arrays["bin_values"] = _describe_bins(estimator.bin_mapper_)
    if hasattr(estimator, "oob_curve_"):
        arrays["oob_curve"] = estimator.oob_curve_
    scores = getattr(estimator, "oob_interval_scores_", None)
    if scores is not None:
        for name, field in INTERVAL_SCORE_ARRAYS.items():
            arrays[name] = getattr(scores, field)
    if cls.__name__ in QUANTILE_FORESTS:
        check_is_fitted(estimator, "leaf_targets_")
        for name, field in LEAF_TARGET_ARRAYS.items():
            arrays[name] = getattr(estimator.leaf_targets_, field)
    # "safe" casting: a tree field whose dtype changed must fail here, not be truncated
    dtypes = {**ARRAY_DTYPES, "feature": states[0]["feature"].dtype}
    for name in NARROW_DTYPES:
        if name in arrays:
            dtypes[name] = arrays[name].dtype
    arrays = {
        name: np.ascontiguousarray(
            np.asarray(a).astype(np.dtype(dtypes[name]).newbyteorder("<"), casting="safe")
        )
        for name, a in arrays.items()
    }
    params = estimator.get_params(deep=False)
    params.pop("client", None)  # a client belongs to a session, not to a model
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "dasktrees_version": __version__,
        "estimator": cls.__name__,
        "params": {name: to_json(value, f"parameter {name!r}") for name, value in params.items()},
        "fitted": _fitted_scalars(estimator, is_forest),
        "feature_names": _names(getattr(estimator, "feature_names_in_", None)),
        "classes": _describe_classes(getattr(estimator, "classes_", None)),
        "bins": bins,
        "trees": {
            "n_trees": len(trees),
            "n_values": int(trees[0].n_values),
            "node_counts": [tree.node_count for tree in trees],
            "split_counts": [len(state["feature"]) for state in states],
            "categorical_split_counts": [len(s["categorical_bitset_idx"]) for s in states],
            "bitset_counts": [len(state["categorical_bitsets"]) for state in states],
        },
        "arrays": {
            name: {"dtype": a.dtype.str, "shape": list(a.shape), "sha256": array_checksum(a)}
            for name, a in arrays.items()
        },
    }
    manifest["manifest_sha256"] = manifest_checksum(manifest)
    return manifest, arrays


def _criterion(estimator: Any) -> int:
    """The code (``criteria``) of the criterion the estimator's trees were grown with."""
    if hasattr(estimator, "classes_"):
        return CLASSIFICATION_CRITERIA[estimator.criterion]
    return REGRESSION_CRITERIA[estimator.criterion]


def _tree_arrays(states: list[Manifest]) -> Arrays:
    """The trees' shipped states (``wire.state_of``) as the arrays of a file
    (``format.SHIPPED_ARRAYS``), concatenated over the trees: their values in the one layout
    they all have or can be given (leaves' counts, every node's counts, fractions; leaves' or
    every node's means and impurities), children for all if one tree's are not numbered
    depth-first (right children for all if one needs them), and whole
    numbers in the narrowest type holding all."""
    for layout in ("leaf_class_counts", "weighted_class_counts"):  # a classifier's
        if all(layout in s for s in states):
            break
        states = [_LAYOUTS[layout](s) for s in states]
    if not all("leaf_value" in s for s in states):  # a regressor's
        states = [_with_node_moments(s) for s in states]
    if any("criterion" in s and "impurity" in s for s in states):  # a classifier's, some shipped
        states = [_with_class_impurities(s) for s in states]
    for name, leaf_name in SUMMABLE.items():
        if any(name in s for s in states) and any(leaf_name in s for s in states):
            states = [_with_every_node(s, name) for s in states]
    if any("children_left" in s for s in states):  # not all numbered depth-first
        states = [{**s, "children_left": children(s)[0]} for s in states]
    if any("children_right" in s for s in states):
        states = [{**s, "children_right": children(s)[1]} for s in states]
    arrays = {"is_split": _bits([s["is_split"] for s in states], [s["n_nodes"] for s in states])}
    n_splits = [len(s["feature"]) for s in states]
    for name in SPLIT_BITS:
        arrays[name] = _bits([s[name] for s in states], n_splits)
    if "nonzero_leaf_impurity_bits" in states[0]:
        n_leaves = [s["n_nodes"] - n for s, n in zip(states, n_splits)]
        bits = [s["nonzero_leaf_impurity_bits"] for s in states]
        arrays["nonzero_leaf_impurity_bits"] = _bits(bits, n_leaves)
    for name in SHIPPED_ARRAYS:
        if name not in arrays and name in states[0]:
            arrays[name] = np.concatenate([s[name] for s in states])
    for name in (*SUMMABLE.values(), "weighted_class_counts"):
        if name in arrays:
            arrays[name] = narrow_counts(arrays[name])
    for name in ("categorical_bitset_idx", "children_left", "children_right"):
        if name in arrays:
            ids = arrays[name]
            arrays[name] = ids.astype(narrowest_uint(ids.max(initial=0)))
    return arrays


def _bits(packed: list[np.ndarray], counts: list[int]) -> np.ndarray:
    """The trees' bit arrays (``np.packbits`` of ``counts[t]`` flags each) as one, their flags
    one tree after the other."""
    flags = [np.unpackbits(bits, count=n) for bits, n in zip(packed, counts)]
    return np.packbits(np.concatenate(flags))


def _with_every_node(state: Manifest, name: str) -> Manifest:
    """A shipped state with every node's ``name`` (row counts or weights, ``wire.SUMMABLE``)
    instead of its leaves' only."""
    leaf_name = SUMMABLE[name]
    if leaf_name not in state:
        return state
    state = dict(state)
    state[name] = node_samples(state) if name == "n_node_samples" else node_weights(state)
    del state[leaf_name]
    return state


def _with_class_impurities(state: Manifest) -> Manifest:
    """A shipped classifier's state with every node's impurity, derived from its class
    fractions when it does not ship them (``wire.encode``'s ``exact``)."""
    if "impurity" in state:
        return state
    value, weight = value_and_weight(state)
    impurity = np.empty(len(weight))
    node_class_impurities(value, weight, state["criterion"], impurity, shipped_outputs(state))
    return {**state, "impurity": impurity}


def _with_node_moments(state: Manifest) -> Manifest:
    """A shipped regressor's state with every node's means and impurities instead of its
    leaves' only."""
    if "leaf_value" not in state:
        return state
    state = dict(state)
    state["value"], state["impurity"] = node_moments(state)
    for name in ("leaf_value", *NONZERO_LEAF_IMPURITY):
        state.pop(name, None)
    return state


def _with_node_counts(state: Manifest) -> Manifest:
    """A shipped state with every node's weighted class counts instead of its leaves' only."""
    if "leaf_class_counts" not in state:
        return state
    state = dict(state)
    state["weighted_class_counts"] = node_counts(state)
    del state["leaf_class_counts"]
    return state


def _with_fractions(state: Manifest) -> Manifest:
    """A shipped state with its class fractions and node weights instead of its weighted class
    counts."""
    if "weighted_class_counts" not in state:
        return state
    state = dict(state)
    state["value"], state["weighted_n_node_samples"] = value_and_weight(state)
    del state["weighted_class_counts"]
    return state


# How a state is given the next layout of ``_tree_arrays`` when not all trees have one.
_LAYOUTS: dict[str, Callable[[Manifest], Manifest]] = {
    "leaf_class_counts": _with_node_counts,
    "weighted_class_counts": _with_fractions,
}


def _fitted_scalars(estimator: Any, is_forest: bool) -> dict[str, Any]:
    fitted = {
        name: to_json(getattr(estimator, name), f"fitted attribute {name!r}", scalar=True)
        for name in (FOREST_FITTED if is_forest else TREE_FITTED)
    }
    for name in OOB_SCORES if is_forest else ():
        if not hasattr(estimator, name):
            continue
        score = getattr(estimator, name)
        if not isinstance(score, numbers.Real):
            raise TypeError(f"{name} = {score!r} cannot be stored in a model file")
        # An OOB score is NaN when no row was ever out of bag; JSON has no NaN, hence the text.
        fitted[name] = float(score) if math.isfinite(score) else str(float(score))
    return fitted


def _describe_bins(mapper: BinMapper) -> tuple[Manifest, np.ndarray, np.ndarray]:
    """The bin mapper's manifest entry, and its numeric edges and values, concatenated."""
    features, edges, values = [], [np.empty(0)], [np.empty(0)]
    names = mapper.feature_names_in_
    for j in range(mapper.n_features_in_):
        if mapper.is_categorical_[j]:
            where = f"a category of {column_label(names, j)}"
            features.append(
                {
                    "kind": "categorical",
                    "categories": [to_json(c, where, scalar=True) for c in mapper.categories_[j]],
                    "bins": mapper.category_bins_[j].tolist(),
                }
            )
        else:
            edges.append(mapper.bin_edges_[j])
            values.append(mapper.bin_values_[j])
            features.append(
                {"kind": "numeric", "n_edges": len(edges[-1]), "n_values": len(values[-1])}
            )
    params = {
        name: to_json(getattr(mapper, name), f"bin mapper parameter {name!r}")
        for name in BIN_PARAMS
    }
    entry = {"params": params, "feature_names": _names(names), "features": features}
    return entry, np.concatenate(edges), np.concatenate(values)


def _describe_classes(classes: Any) -> Any:
    """Classes as JSON values plus their dtype, so that ints stay ints and strings strings;
    a list of such objects, one a column, for several class columns."""
    if classes is None:
        return None
    if isinstance(classes, list):
        return [_describe_classes(c) for c in classes]
    if classes.dtype.kind not in "biufUO":
        raise TypeError(f"classes_ of dtype {classes.dtype} cannot be stored in a model file")
    values = [to_json(c, "a class", scalar=True) for c in classes.tolist()]
    return {"dtype": classes.dtype.newbyteorder("<").str, "values": values}


def _names(names: np.ndarray | None) -> list[str] | None:
    return None if names is None else [str(name) for name in names]

"""Loading: a model directory, checked (``integrity``), as an estimator of the allowlist the
caller gives (``estimators.loading`` names dasktrees' classes); and ``describe``, what a model is
from its manifest alone."""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..core.criteria import CLASSIFICATION_CRITERIA, SQUARED_ERROR, is_regression
from ..forest.conformal import ConformalScores
from ..forest.quantiles import LeafTargets
from ..learner.binning import BinMapper
from ..learner.tree import Tree
from .format import (
    ARRAYS,
    ESTIMATOR_KINDS,
    LEAF_TARGET_ARRAYS,
    MANIFEST,
    OOB_SCORES,
    QUANTILE_FORESTS,
    SHIPPED_ARRAYS,
    SPLIT_BITS,
    SPLIT_FIELDS,
    Arrays,
    Manifest,
    from_json,
)
from .integrity import (
    check_interval_scores,
    check_leaf_targets,
    check_numbers,
    check_shipped_trees,
    decode_class_columns,
    decode_classes,
    expected_dtypes,
    expected_shapes,
    read_arrays,
    read_manifest,
)


def describe(path: str | os.PathLike, estimators: Mapping[str, type]) -> dict[str, Any]:
    """What the model at ``path`` is, from its checked manifest alone (``dasktrees inspect``).

    Returns
    -------
    dict
        ``estimator``, ``kind`` (tree or forest) and ``task``, ``format_version``,
        ``dasktrees_version``, ``parameters``, ``features``, ``classes`` (classifiers),
        ``trees``, ``nodes``, ``size_bytes`` (both files), ``oob_score`` (or None).
    """
    manifest = _read_manifest(path, estimators)
    directory = Path(path)
    kind, task = ESTIMATOR_KINDS[manifest["estimator"]]
    params = {name: from_json(value, "params") for name, value in manifest["params"].items()}
    classes = manifest["classes"]
    oob_score = manifest["fitted"].get("oob_score_")
    return {
        "estimator": manifest["estimator"],
        "kind": kind,
        "task": task,
        "format_version": manifest["format_version"],
        "dasktrees_version": manifest["dasktrees_version"],
        "parameters": params,
        "features": manifest["feature_names"]
        or [f"x{i}" for i in range(manifest["fitted"]["n_features_in_"])],
        "classes": (
            [c["values"] for c in classes]
            if isinstance(classes, list)
            else (classes["values"] if classes is not None else None)
        ),
        "trees": manifest["trees"]["n_trees"],
        "nodes": sum(manifest["trees"]["node_counts"]),
        "size_bytes": sum(f.stat().st_size for f in directory.iterdir() if f.is_file()),
        "oob_score": oob_score,
    }


def _read_manifest(path: str | os.PathLike, estimators: Mapping[str, type]) -> Manifest:
    """``integrity.read_manifest``, and the parameters' names checked against the class."""
    manifest = read_manifest(path)
    _decode_params(manifest["params"], estimators[manifest["estimator"]], Path(path) / MANIFEST)
    return manifest


def _decode_params(params: Manifest, cls: type, where: str | Path) -> dict[str, Any]:
    """The file's parameters as ``cls`` takes them; one the file does not hold is left out, and
    takes the class default."""
    defaults = cls().get_params(deep=False)
    defaults.pop("client", None)
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ValueError(f"{where}: {cls.__name__} has no parameters {unknown}")
    decoded = {
        name: from_json(value, f"{where}: parameter {name!r}") for name, value in params.items()
    }
    for name, value in decoded.items():
        # JSON has no tuples: a parameter whose default is one (default_quantiles) is one again.
        if isinstance(defaults[name], tuple) and isinstance(value, list):
            decoded[name] = tuple(value)
    return decoded


def load(path: str | os.PathLike, estimators: Mapping[str, type]) -> Any:
    """The estimator of the model directory ``path``, its class looked up by name in
    ``estimators`` (``estimators.loading.load`` gives dasktrees' classes and documents what is
    returned and raised). Nothing in the file is executed: the manifest is JSON, the arrays are
    read with ``allow_pickle=False``, and a file names no code.
    """
    directory = Path(path)
    manifest = _read_manifest(directory, estimators)
    npz = directory / ARRAYS
    arrays = read_arrays(
        npz, manifest["arrays"], expected_shapes(manifest), expected_dtypes(manifest)
    )
    check_numbers(arrays, manifest["bins"], npz)
    check_interval_scores(arrays, npz)
    mapper = _build_bin_mapper(manifest["bins"], arrays["bin_edges"], arrays["bin_values"])
    trees = manifest["trees"]
    structure = check_shipped_trees(arrays, trees, mapper.is_categorical_, npz)
    columns = manifest["fitted"]["n_outputs_"] if manifest["classes"] is not None else 1
    fitted_trees = _shipped_trees(arrays, trees, structure, mapper, _criterion(manifest), columns)
    n_leaves = sum(trees["node_counts"]) - sum(trees["split_counts"])
    leaf_targets = None
    if manifest["estimator"] in QUANTILE_FORESTS:
        check_leaf_targets(arrays, n_leaves, npz)
        leaf_targets = LeafTargets(
            **{field: arrays[name] for name, field in LEAF_TARGET_ARRAYS.items()}
        )
    cls = estimators[manifest["estimator"]]
    estimator = _build_estimator(
        cls, manifest, mapper, fitted_trees, arrays.get("oob_curve"), leaf_targets
    )
    if "interval_score_values" in arrays:
        counts = arrays["interval_score_counts"]
        estimator.oob_interval_scores_ = ConformalScores(
            arrays["interval_score_values"], counts, int(counts[-1]) if len(counts) else 0
        )
    return estimator


def _criterion(manifest: Manifest) -> int:
    """The criterion code (``criteria``) of the file's trees; a classifier's derives their
    impurities."""
    if ESTIMATOR_KINDS[manifest["estimator"]][1] == "regression":
        return SQUARED_ERROR
    name = manifest["params"].get("criterion")
    if name not in CLASSIFICATION_CRITERIA:
        raise ValueError(
            f"{MANIFEST}: parameter 'criterion' is {name!r}, not one of "
            f"{', '.join(map(repr, CLASSIFICATION_CRITERIA))}"
        )
    return CLASSIFICATION_CRITERIA[name]


def _shipped_trees(
    arrays: Arrays,
    trees: Manifest,
    structure: tuple[np.ndarray, np.ndarray],
    mapper: BinMapper,
    criterion: int,
    class_columns: int = 1,
) -> list[Tree]:
    """The trees of a file, each kept in its shipped state (``Tree.shipped``): views of the
    concatenated arrays, but for each tree's bits and depth; a classifier's of several
    ``class_columns`` say so in their state (``wire.encode``)."""
    is_split, depth = structure
    counts = {
        "nodes": trees["node_counts"],
        "splits": trees["split_counts"],
        "leaves": np.subtract(trees["node_counts"], trees["split_counts"]),
        "categorical splits": trees["categorical_split_counts"],
        "bitsets": trees["bitset_counts"],
    }
    ends = {part: np.cumsum(n, dtype=np.int64) for part, n in counts.items()}
    split_bits = {
        name: np.unpackbits(arrays[name], count=ends["splits"][-1]) for name in SPLIT_BITS
    }
    if "nonzero_leaf_impurity_bits" in arrays:  # as many impurities as bits marked in each tree
        nonzero = np.unpackbits(arrays["nonzero_leaf_impurity_bits"], count=ends["leaves"][-1])
        marked = np.concatenate([[0], np.cumsum(nonzero, dtype=np.int64)])[ends["leaves"]]
        counts["nonzero leaf impurities"] = np.diff(marked, prepend=0)
        ends["nonzero leaf impurities"] = marked
    part_of = {name: "splits" for name in SPLIT_FIELDS}
    part_of.update(
        categorical_bitset_idx="categorical splits",
        categorical_bitsets="bitsets",
        leaf_class_counts="leaves",
        leaf_n_node_samples="leaves",
        leaf_weighted_n_node_samples="leaves",
        leaf_value="leaves",
        nonzero_leaf_impurity="nonzero leaf impurities",
    )
    thresholds = mapper.threshold_table()  # one bin table for all the trees
    out = []
    for t in range(trees["n_trees"]):
        cut = {part: slice(ends[part][t] - n[t], ends[part][t]) for part, n in counts.items()}
        state = {
            "n_features": mapper.n_features_in_,
            "is_split": np.packbits(is_split[cut["nodes"]]),
        }
        for name in SHIPPED_ARRAYS[1:]:
            if name in SPLIT_BITS:
                state[name] = np.packbits(split_bits[name][cut["splits"]])
            elif name == "nonzero_leaf_impurity_bits" and name in arrays:
                state[name] = np.packbits(nonzero[cut["leaves"]])
            elif name in arrays:
                state[name] = arrays[name][cut[part_of.get(name, "nodes")]]
        if not is_regression(criterion):
            state["criterion"] = criterion
        if class_columns > 1:
            state["n_outputs"] = class_columns
        state["max_depth"] = int(depth[cut["nodes"]].max())
        state["n_nodes"] = trees["node_counts"][t]
        state["wire"] = True
        out.append(Tree.shipped(state, thresholds))
    return out


def _build_bin_mapper(bins: Manifest, edges: np.ndarray, values: np.ndarray) -> BinMapper:
    features = bins["features"]
    numeric = [f for f in features if f["kind"] == "numeric"]
    edge_parts = iter(
        np.split(edges, np.cumsum([f["n_edges"] for f in numeric], dtype=np.int64)[:-1])
    )
    value_parts = iter(
        np.split(values, np.cumsum([f["n_values"] for f in numeric], dtype=np.int64)[:-1])
    )
    mapper = BinMapper(**{name: from_json(v, name) for name, v in bins["params"].items()})
    mapper.n_features_in_ = len(features)
    names = bins["feature_names"]
    mapper.feature_names_in_ = None if names is None else np.asarray(names, dtype=object)
    mapper.is_categorical_ = np.array([f["kind"] == "categorical" for f in features], dtype=bool)
    # edges, values, categories, bins
    per_feature: tuple[list[Any], list[Any], list[Any], list[Any]] = [], [], [], []
    for f in features:
        columns: tuple[Any, Any, Any, Any]
        if f["kind"] == "numeric":
            columns = (next(edge_parts), next(value_parts), None, None)
        else:
            # fromiter keeps each category's own type (np.array would turn [1, "a"] into strings)
            categories = np.fromiter(f["categories"], dtype=object, count=len(f["categories"]))
            columns = (None, None, categories, np.array(f["bins"], dtype=np.int32))
        for part, column in zip(per_feature, columns):
            part.append(column)
    return mapper.set_bins(*per_feature)


def _build_estimator(
    cls: type,
    manifest: Manifest,
    mapper: BinMapper,
    trees: list[Tree],
    oob_curve: np.ndarray | None,
    leaf_targets: LeafTargets | None,
) -> Any:
    estimator = cls(**_decode_params(manifest["params"], cls, MANIFEST))
    for name, value in manifest["fitted"].items():
        setattr(estimator, name, float(value) if name in OOB_SCORES else value)
    if manifest["feature_names"] is not None:
        estimator.feature_names_in_ = np.asarray(manifest["feature_names"], dtype=object)
    if isinstance(manifest["classes"], list):  # several class columns, as scikit-learn's
        estimator.classes_ = decode_class_columns(manifest["classes"], MANIFEST)
        n_classes = [len(c) for c in estimator.classes_]
        is_tree = ESTIMATOR_KINDS[manifest["estimator"]][0] == "tree"
        estimator.n_classes_ = np.array(n_classes, dtype=np.intp) if is_tree else n_classes
    elif manifest["classes"] is not None:
        estimator.classes_ = decode_classes(manifest["classes"], MANIFEST)
        estimator.n_classes_ = len(estimator.classes_)
    estimator.bin_mapper_ = mapper
    if ESTIMATOR_KINDS[manifest["estimator"]][0] == "tree":
        estimator.tree_ = trees[0]
        return estimator
    estimator._keep_on_client(trees)  # wrapped and packed once here, not by a prediction
    if oob_curve is not None:
        estimator.oob_curve_ = oob_curve
    if leaf_targets is not None:
        estimator.leaf_targets_ = leaf_targets
    return estimator

"""The model file container: names, array dtypes, JSON forms of values, checksums, and writing
a model directory atomically. Knows no estimator class."""

import hashlib
import json
import math
import numbers
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..core.dtypes import TREE_ARRAY_DTYPES

# A manifest, or an object of one, as JSON holds it (``json.loads``); a shipped tree's state
# (``tree.wire``) has the same form.
Manifest = dict[str, Any]
# A file's arrays, by name.
Arrays = dict[str, np.ndarray]

FORMAT = "dasktrees-model"
# A forest saved from the workers: a directory of model directories (``sharding``).
SHARDED_FORMAT = "dasktrees-sharded-model"
# Version 5 stores each tree as a forest task ships it (``tree.wire``): split fields for split
# nodes only, nothing derived, whole numbers in the narrowest type. It is the only version read:
# nothing was released before it, and a file of an older version is refused with a message that
# says to refit and save the model again (``integrity.read_manifest``, docs/models.md).
FORMAT_VERSION = 5
MANIFEST = "manifest.json"
ARRAYS = "arrays.npz"


# The tree arrays of a file, the fields of a shipped state (``tree.wire.encode``),
# concatenated over the trees: ``is_split`` (np.packbits of every node's flag, the trees' nodes
# one after the other), the split fields at split nodes (``children_right`` only when a split's
# right child is not the node after its left one), their flags as bits (``SPLIT_BITS``, the
# trees' split nodes one after the other), the bitset rows of categorical splits, the rest at
# every node. Whole numbers are stored in the narrowest type holding them (``NARROW_DTYPES``).
# A tree without categorical splits stores no bitsets. A classifier's
# nodes hold their weighted class counts, whose fractions, weights and impurities are derived:
# its leaves' only (``leaf_class_counts``, the leaves of every tree in node order) when every
# tree's split nodes have their children's summed, else every node's
# (``weighted_class_counts``). A regressor's, and a classifier's when one of its trees has only
# its fractions (a pruned tree), hold ``value`` and weights, and a regressor's ``impurity``
# too: a regressor's leaves' only (``leaf_value``, and the impurities as the leaves that have
# one not zero, ``nonzero_leaf_impurity_bits``, a bit a leaf, and those impurities,
# ``nonzero_leaf_impurity``) when every tree's
# split nodes have their children's pooled (``tree.pool_to_root``; every grown tree), else every
# node's. Row counts and those weights are the leaves' only (``leaf_n_node_samples``,
# ``leaf_weighted_n_node_samples``) when every tree's split nodes have their children's summed
# (any grown tree's row counts, whole-number weights), else every node's.
SPLIT_FIELDS = ("children_left", "children_right", "feature", "bin_threshold")  # one a split node
SPLIT_BITS = ("missing_go_to_left_bits", "is_categorical_bits")  # np.packbits, a bit a split node
SHIPPED_ARRAYS = (
    "is_split",
    *SPLIT_FIELDS,
    *SPLIT_BITS,
    "categorical_bitset_idx",  # one a categorical split node
    "categorical_bitsets",
    "leaf_class_counts",
    "weighted_class_counts",
    "leaf_value",
    "value",
    "leaf_n_node_samples",
    "n_node_samples",
    "leaf_weighted_n_node_samples",
    "weighted_n_node_samples",
    "nonzero_leaf_impurity_bits",
    "nonzero_leaf_impurity",
    "impurity",
)

# Every array a file may hold, with its dtype: the tree's own (``_dtypes.TREE_ARRAY_DTYPES``),
# little-endian whatever the machine, C order; but ``feature`` has the narrowest unsigned type
# holding the features, and the arrays of ``NARROW_DTYPES`` the type their manifest entry
# declares among those (``integrity.expected_dtypes``).
ARRAY_DTYPES = {
    **{
        name: np.dtype(dtype).newbyteorder("<")
        for name, dtype in TREE_ARRAY_DTYPES.items()
        if name in SHIPPED_ARRAYS
    },
    "is_split": np.dtype("u1"),
    "missing_go_to_left_bits": np.dtype("u1"),
    "is_categorical_bits": np.dtype("u1"),
    "categorical_bitset_idx": np.dtype("<u4"),
    "weighted_class_counts": np.dtype("<f8"),
    "leaf_class_counts": np.dtype("<f8"),
    "leaf_n_node_samples": np.dtype("<i4"),
    "leaf_weighted_n_node_samples": np.dtype("<f8"),
    "leaf_value": np.dtype("<f8"),
    "nonzero_leaf_impurity_bits": np.dtype("u1"),
    "nonzero_leaf_impurity": np.dtype("<f8"),
    "bin_edges": np.dtype("<f8"),  # edges of the numeric features, concatenated
    "bin_values": np.dtype("<f8"),  # their representative values (BinMapper.bin_values_)
    "oob_curve": np.dtype("<f8"),  # forests fitted with oob_score
    # regression forests fitted with oob_score: ``oob_interval_scores_`` (``predict_interval``)
    "interval_score_values": np.dtype("<f8"),
    "interval_score_counts": np.dtype("<i8"),
    # quantile forests: their ``leaf_targets_`` (``quantiles.LeafTargets``), one field an array
    "leaf_offsets": np.dtype("<i8"),
    "leaf_target_ids": np.dtype("<u4"),
    "leaf_cum_weights": np.dtype("<f8"),
    "leaf_targets": np.dtype("<f8"),
}

# The types an array of whole numbers may be stored in (its manifest entry says which): counts
# of rows and bootstrap draws, bitset rows and children, in the narrowest.
_UNSIGNED = ("|u1", "<u2", "<u4")
NARROW_DTYPES = {
    "n_node_samples": ("<i4", "<i8"),
    "leaf_n_node_samples": (*_UNSIGNED, "<u8"),
    "leaf_class_counts": (*_UNSIGNED, "<f8"),
    "weighted_class_counts": (*_UNSIGNED, "<f8"),
    "leaf_weighted_n_node_samples": (*_UNSIGNED, "<f8"),
    "categorical_bitset_idx": _UNSIGNED,
    "children_left": _UNSIGNED,
    "children_right": _UNSIGNED,
}

# The arrays of a regression forest's ``oob_interval_scores_``, by field of
# ``conformal.ConformalScores`` (its ``n_scores`` is the last count).
INTERVAL_SCORE_ARRAYS = {"interval_score_values": "values", "interval_score_counts": "counts"}

# The arrays of a quantile forest's ``leaf_targets_``, by field of ``quantiles.LeafTargets``.
LEAF_TARGET_ARRAYS = {
    "leaf_offsets": "offsets",
    "leaf_target_ids": "target_ids",
    "leaf_cum_weights": "cum_weights",
    "leaf_targets": "targets",
}

# The estimators a file may name, with what reading needs to know of each: a tree or a forest,
# and the task. ``estimators.loading.ESTIMATORS`` maps the same names to the classes.
ESTIMATOR_KINDS = {
    "DecisionTreeClassifier": ("tree", "classification"),
    "DecisionTreeRegressor": ("tree", "regression"),
    "RandomForestClassifier": ("forest", "classification"),
    "RandomForestRegressor": ("forest", "regression"),
    "ExtraTreesClassifier": ("forest", "classification"),
    "ExtraTreesRegressor": ("forest", "regression"),
    "RandomForestQuantileRegressor": ("forest", "regression"),
    "ExtraTreesQuantileRegressor": ("forest", "regression"),
}

# The modules that define the classes of ESTIMATOR_KINDS: a subclass defined elsewhere is not
# one of them (it may hold what a file cannot).
ESTIMATOR_MODULES = (
    "dasktrees.estimators.trees",
    "dasktrees.estimators.forests",
    "dasktrees.estimators.quantile_forests",
)


def estimator_kind(estimator: object) -> tuple[str, str] | None:
    """``(kind, task)`` of a dasktrees estimator of ``ESTIMATOR_KINDS`` ("tree" or "forest",
    "classification" or "regression"), None for any other object."""
    cls = type(estimator)
    if cls.__module__ not in ESTIMATOR_MODULES:
        return None
    return ESTIMATOR_KINDS.get(cls.__name__)


# The estimators of ESTIMATOR_KINDS that keep their leaves' targets (``LEAF_TARGET_ARRAYS``).
QUANTILE_FORESTS = ("RandomForestQuantileRegressor", "ExtraTreesQuantileRegressor")

# Fitted scalars stored in the manifest: a tree's, and a forest's (plus, with oob_score,
# OOB_SCORES: oob_score_, and a quantile forest's oob_coverage_).
TREE_FITTED = ("n_features_in_", "n_outputs_", "max_features_")
FOREST_FITTED = (*TREE_FITTED, "_seed", "_n_rows", "mode_")
OOB_SCORES = ("oob_score_", "oob_coverage_")


BIN_PARAMS = ("max_bins", "categorical_features", "subsample", "random_state")


def to_json(value: object, where: str, scalar: bool = False) -> Any:
    """``value`` as JSON: numpy scalars and arrays become Python ones, tuples become lists,
    and a dict becomes ``{"dict": [[key, value], ...]}`` so that its keys keep their type (a
    ``class_weight`` keyed by int classes). Anything else is a TypeError naming ``where``."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, str):
        return str(value)  # np.str_ too
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(value):
        return float(value)
    if not scalar and isinstance(value, (list, tuple, np.ndarray)):
        return [to_json(item, where) for item in value]
    if not scalar and isinstance(value, dict):
        key_where = f"a key of {where}"
        return {
            "dict": [[to_json(k, key_where, True), to_json(v, where)] for k, v in value.items()]
        }
    raise TypeError(
        f"{where} = {value!r} cannot be stored in a model file, which holds None, bools, ints, "
        "finite floats and strings (and, for parameters, lists and dicts of them)"
    )


def array_checksum(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).data).hexdigest()


def manifest_checksum(manifest: Manifest) -> str:
    """sha256 of the manifest's canonical JSON, without its own checksum field."""
    body = {key: value for key, value in manifest.items() if key != "manifest_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def write_directory(path: Path, manifest: Manifest, arrays: Arrays) -> None:
    """Write ``path/arrays.npz`` and ``path/manifest.json`` (``replace_directory``)."""

    def fill(directory: Path) -> None:
        with open(directory / ARRAYS, "wb") as f:
            # numpy's stubs take any keyword of savez for its allow_pickle flag
            np.savez(f, **arrays)  # type: ignore[arg-type]
            sync_file(f)
        write_manifest(directory, manifest)

    replace_directory(path, fill)


def write_manifest(directory: Path, manifest: Manifest) -> None:
    """``directory/manifest.json``, flushed to the disk."""
    with open(directory / MANIFEST, "w", encoding="ascii") as f:
        json.dump(manifest, f, indent=1, allow_nan=False)
        sync_file(f)


def replace_directory(path: Path, fill: Callable[[Path], None]) -> None:
    """Make the model directory ``path`` atomically: ``fill(directory)`` writes its files into
    a new sibling directory, which is then renamed to ``path``; an existing model there is
    moved aside first and removed last, anything else at ``path`` is left alone
    (``FileExistsError``), and on any error the sibling is removed and ``path`` is as it was."""
    if (path.exists() or path.is_symlink()) and not is_model_directory(path):
        raise FileExistsError(f"{path} exists and is not a dasktrees model; not overwriting it")
    token = secrets.token_hex(4)
    tmp = path.with_name(f".{path.name}.{token}.tmp")
    old = path.with_name(f".{path.name}.{token}.old")
    os.mkdir(tmp)
    try:
        fill(tmp)
        replacing = path.exists() or path.is_symlink()
        if replacing and not is_model_directory(path):  # appeared while we wrote: leave it
            raise FileExistsError(f"{path} exists and is not a dasktrees model; not overwriting it")
        if replacing:
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except BaseException:
            if replacing:
                os.replace(old, path)
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    sync_directory(path.parent)  # the rename itself must reach the disk
    if old.is_symlink():
        old.unlink()
    elif replacing:
        shutil.rmtree(old)


def sync_directory(directory: Path) -> None:
    """fsync a directory, so that a rename in it survives a crash (where the OS allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on directories; the rename is then as durable as
        # they make it
    finally:
        os.close(fd)


def sync_file(f: IO[Any]) -> None:
    """Flush ``f`` to the disk, so that the rename never publishes a file still in memory."""
    f.flush()
    os.fsync(f.fileno())


def is_model_directory(path: Path) -> bool:
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") in (FORMAT, SHARDED_FORMAT)


def is_scalar(value: object) -> bool:
    return isinstance(value, (str, int, float))  # bool is an int


def from_json(value: Any, where: str) -> Any:
    """Inverse of ``to_json``: ``{"dict": [[key, value], ...]}`` is a dict again."""
    if isinstance(value, list):
        return [from_json(item, where) for item in value]
    if isinstance(value, dict):
        items = value["dict"] if list(value) == ["dict"] else None
        if not isinstance(items, list) or not all(
            isinstance(item, list) and len(item) == 2 and is_scalar(item[0]) for item in items
        ):
            raise ValueError(f'{where}: a dict is stored as {{"dict": [[key, value], ...]}}')
        return {key: from_json(item, where) for key, item in items}
    return value

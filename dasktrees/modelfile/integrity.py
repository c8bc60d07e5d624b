"""What loading a model file checks, before any kernel sees it: the manifest's format, version,
checksum, fields and their consistency; each array's header (an object array is refused before
its data is read), dtype, shape and checksum against the manifest; and the trees' structure
against what the prediction kernels assume. Knows no estimator class."""

import json
import os
import struct
import tokenize
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ..core import class_outputs
from ..core.dtypes import BITSET_WORDS, MAX_BINS, TREE_LEAF
from ..learner.tree import depth_first_children, fill_depths, split_fields
from ..learner.wire import SUMMABLE, feature_dtype
from .format import (
    ARRAY_DTYPES,
    ARRAYS,
    BIN_PARAMS,
    ESTIMATOR_KINDS,
    FOREST_FITTED,
    FORMAT,
    FORMAT_VERSION,
    INTERVAL_SCORE_ARRAYS,
    LEAF_TARGET_ARRAYS,
    MANIFEST,
    NARROW_DTYPES,
    OOB_SCORES,
    QUANTILE_FORESTS,
    SHIPPED_ARRAYS,
    SPLIT_BITS,
    SPLIT_FIELDS,
    TREE_FITTED,
    Arrays,
    Manifest,
    array_checksum,
    from_json,
    is_scalar,
    manifest_checksum,
)

# What reading an npz member can raise when the bytes are damaged, besides our own checks.
_CORRUPT = (
    zipfile.BadZipFile,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,  # a damaged compression method
    RuntimeError,  # a damaged flag that claims encryption
    struct.error,
    OverflowError,
    SyntaxError,  # a damaged .npy header, which numpy parses as a Python literal
    tokenize.TokenError,  # the same, cut short
)


_HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# A field's description (for the error) and test.
Field = tuple[str, Callable[[Any], bool]]
_ANY: Field = ("a value", lambda v: True)


_COUNT = ("an int >= 0", lambda v: _is_int(v) and v >= 0)


_STR = ("a string", lambda v: isinstance(v, str))


_OBJECT = ("an object", lambda v: isinstance(v, dict))


_LIST = ("a list", lambda v: isinstance(v, list))


_COUNTS = ("a list of ints >= 0", lambda v: isinstance(v, list) and all(map(_COUNT[1], v)))


_SCALARS = (
    "a list of strings, numbers and booleans",
    lambda v: isinstance(v, list) and all(map(is_scalar, v)),
)


_NAMES = (
    "null or a list of strings",
    lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
)


_OBJECT_OR_NULL = ("null or an object", lambda v: v is None or isinstance(v, dict))


# A classifier's classes: one object, or a list of them, one per class column.
_CLASSES_ENTRY = (
    "null, an object, or a list of objects (one per class column)",
    lambda v: (
        v is None
        or isinstance(v, dict)
        or (isinstance(v, list) and all(isinstance(x, dict) for x in v))
    ),
)


_SCORE = (
    'a number, "nan", "inf" or "-inf"',
    lambda v: (is_scalar(v) and not isinstance(v, (bool, str))) or v in ("nan", "inf", "-inf"),
)


_MANIFEST_FIELDS = {
    "format": _STR,
    "format_version": _COUNT,
    "dasktrees_version": _STR,
    "estimator": _STR,
    "params": _OBJECT,
    "fitted": _OBJECT,
    "feature_names": _NAMES,
    "classes": _CLASSES_ENTRY,
    "bins": _OBJECT,
    "trees": _OBJECT,
    "arrays": _OBJECT,
    "manifest_sha256": _STR,
}


# The fitted scalars' tests (``format.TREE_FITTED``, ``format.FOREST_FITTED`` say which).
_FITTED = {
    "n_features_in_": _COUNT,
    "n_outputs_": _COUNT,
    "max_features_": _COUNT,
    "_seed": _COUNT,
    "_n_rows": _COUNT,
    "mode_": _STR,
}
_CLASSES_FIELDS = {"dtype": _STR, "values": _SCALARS}


_BINS_FIELDS = {"params": _OBJECT, "feature_names": _NAMES, "features": _LIST}


_FEATURE_FIELDS = {
    "numeric": {"kind": _STR, "n_edges": _COUNT, "n_values": _COUNT},
    "categorical": {"kind": _STR, "categories": _SCALARS, "bins": _COUNTS},
}


_TREES_FIELDS = {
    "n_trees": _COUNT,
    "n_values": _COUNT,
    "node_counts": _COUNTS,
    "split_counts": _COUNTS,
    "categorical_split_counts": _COUNTS,
    "bitset_counts": _COUNTS,
}


_ARRAY_FIELDS = {"dtype": _STR, "shape": _COUNTS, "sha256": _STR}


def _check_fields(obj: object, fields: dict[str, Field], where: str) -> None:
    """``obj`` is a JSON object with exactly ``fields``, each passing its test."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where} must be an object, got {_short(obj)}")
    for key, (description, test) in fields.items():
        if key not in obj:
            raise ValueError(f"{where}: missing field {key!r}")
        if not test(obj[key]):
            raise ValueError(
                f"{where}: field {key!r} must be {description}, got {_short(obj[key])}"
            )
    unknown = sorted(set(obj) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read_manifest(path: str | os.PathLike) -> Manifest:
    """Read and check the manifest of the model directory ``path``, without its arrays (the
    parameters' names are ``reading``'s to check).

    Parameters
    ----------
    path : str or os.PathLike
        A directory written by ``save``.

    Returns
    -------
    dict
        The manifest as stored, in JSON types (docs/models.md), after checking its format,
        version, checksum, fields and their consistency.

    Raises
    ------
    FileNotFoundError
        Nothing exists at ``path``.
    ValueError
        ``path`` is not a model directory, or its manifest is truncated, corrupt, modified, of
        another format version than ``format.FORMAT_VERSION`` or inconsistent; the message
        names the file and the problem.
    """
    directory = Path(path)
    if not directory.exists():
        raise FileNotFoundError(f"no model at {directory}")
    file = directory / MANIFEST
    try:
        text = file.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise ValueError(f"{directory} is not a dasktrees model: it has no {MANIFEST}") from None
    try:
        manifest = json.loads(text.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly nested JSON
        raise ValueError(
            f"{file} is not valid JSON, the file is truncated or corrupt: {exc}"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{file} is not a dasktrees model: its 'format' is not {FORMAT!r}")
    if "format_version" not in manifest:
        raise ValueError(f"{file}: missing field 'format_version'")
    _check_version(manifest["format_version"], file)
    _check_fields(manifest, _MANIFEST_FIELDS, str(file))
    if manifest["manifest_sha256"] != manifest_checksum(manifest):
        raise ValueError(f"{file}: checksum mismatch: the manifest was modified or is corrupt")
    _check_contents(manifest, str(file))
    return manifest


def _check_version(version: object, file: Path) -> None:
    """Refuse a manifest of another format version than this dasktrees writes, before any other
    check: another version's fields and arrays are not this one's."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"{file}: field 'format_version' must be an int, got {_short(version)}")
    if version == FORMAT_VERSION:
        return
    # Nothing was released before format 5: an older file is refused, not upgraded, and the
    # model it holds is grown again from its data (docs/models.md, "Format versions").
    remedy = (
        "refit the model and save it again"
        if version < FORMAT_VERSION
        else "it was written by a newer dasktrees, which is needed to read it"
    )
    raise ValueError(
        f"{file} was written in model format {version}; this dasktrees reads format "
        f"{FORMAT_VERSION} only: {remedy}"
    )


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _check_contents(manifest: Manifest, where: str) -> None:
    """Everything ``reading.load`` relies on in a manifest whose fields have the right JSON
    types (but the parameters' names, which only the estimator's class knows)."""
    kind = ESTIMATOR_KINDS.get(manifest["estimator"])
    if kind is None:
        raise ValueError(
            f"{where}: estimator {manifest['estimator']!r} is not one of "
            f"{', '.join(ESTIMATOR_KINDS)}"
        )
    is_forest = kind[0] == "forest"
    for name, value in manifest["params"].items():
        from_json(value, f"{where}: parameter {name!r}")
    fitted = {name: _FITTED[name] for name in (FOREST_FITTED if is_forest else TREE_FITTED)}
    # oob_coverage_ belongs to quantile forests only, and both to forests fitted with oob_score.
    scores = OOB_SCORES if manifest["estimator"] in QUANTILE_FORESTS else OOB_SCORES[:1]
    for name in scores if is_forest else ():
        if name in manifest["fitted"]:
            fitted[name] = _SCORE
    _check_fields(manifest["fitted"], fitted, f"{where}: fitted")
    n_features = manifest["fitted"]["n_features_in_"]
    names = manifest["feature_names"]
    if names is not None and len(names) != n_features:
        raise ValueError(f"{where}: {len(names)} feature_names for {n_features} features")
    _check_bins(manifest["bins"], n_features, f"{where}: bins")
    n_outputs = manifest["fitted"]["n_outputs_"]
    if n_outputs < 1:
        raise ValueError(f"{where}: fitted: n_outputs_ is {n_outputs}; a model has at least one")
    if kind[1] == "classification":
        classes = decode_class_columns(manifest["classes"], f"{where}: classes")
        columns = len(classes) if isinstance(classes, list) else 1
        if n_outputs != columns:
            raise ValueError(
                f"{where}: fitted: n_outputs_ is {n_outputs}, but the classes are of {columns} "
                "column(s)"
            )
        n_values = (
            n_outputs * class_outputs.block_size([len(c) for c in classes])
            if isinstance(classes, list)
            else len(classes)
        )
    elif manifest["classes"] is not None:
        raise ValueError(f"{where}: a regressor has no classes")
    else:  # a leaf's mean of each target column
        n_values = n_outputs
    _check_trees_entry(manifest["trees"], is_forest, n_values, f"{where}: trees")
    for name, entry in manifest["arrays"].items():
        _check_fields(entry, _ARRAY_FIELDS, f"{where}: arrays: {name!r}")


def _check_bins(bins: Manifest, n_features: int, where: str) -> None:
    _check_fields(bins, _BINS_FIELDS, where)
    _check_fields(bins["params"], dict.fromkeys(BIN_PARAMS, _ANY), f"{where}: params")
    for name, value in bins["params"].items():
        from_json(value, f"{where}: params: {name!r}")
    features, names = bins["features"], bins["feature_names"]
    if len(features) != n_features or (names is not None and len(names) != n_features):
        raise ValueError(f"{where}: features and feature_names must describe {n_features} features")
    for j, feature in enumerate(features):
        kind = feature.get("kind") if isinstance(feature, dict) else None
        if kind not in _FEATURE_FIELDS:
            raise ValueError(f"{where}: feature {j}: kind must be 'numeric' or 'categorical'")
        _check_fields(feature, _FEATURE_FIELDS[kind], f"{where}: feature {j}")
        # Codes index 256-entry tables in the kernels: no bin may reach the missing code.
        if kind == "numeric" and (feature["n_edges"] >= MAX_BINS or feature["n_values"] > MAX_BINS):
            raise ValueError(f"{where}: feature {j}: more than {MAX_BINS} bins")
        if kind == "categorical" and (
            len(feature["bins"]) != len(feature["categories"])
            or max(feature["bins"], default=0) >= MAX_BINS
        ):
            raise ValueError(f"{where}: feature {j}: needs one bin below {MAX_BINS} per category")


def _check_trees_entry(trees: Manifest, is_forest: bool, n_values: int, where: str) -> None:
    _check_fields(trees, _TREES_FIELDS, where)
    n_trees = trees["n_trees"]
    if n_trees < 1 or (n_trees > 1 and not is_forest):
        raise ValueError(f"{where}: n_trees is {n_trees}, expected {'>= 1' if is_forest else 1}")
    counted = [name for name in _TREES_FIELDS if name.endswith("_counts")]
    if any(len(trees[name]) != n_trees for name in counted):
        raise ValueError(f"{where}: {' and '.join(counted)} need one entry per tree")
    if min(trees["node_counts"]) < 1:
        raise ValueError(f"{where}: a tree has no nodes")
    if trees["n_values"] != n_values:
        raise ValueError(
            f"{where}: n_values is {trees['n_values']}, expected {n_values} "
            "(the classes, blocks of them for several class columns, or the target columns)"
        )


def decode_class_columns(classes: Any, where: str) -> np.ndarray | list[np.ndarray]:
    """A classifier's ``classes`` entry: one column's classes, or the list of each column's
    for several class columns (a list of two or more entries), each checked."""
    if isinstance(classes, list):
        if len(classes) < 2:
            raise ValueError(
                f"{where}: a list of {len(classes)} entries; several class columns have two or "
                "more, one column an object"
            )
        return [_decode_column(c, f"{where}[{o}]") for o, c in enumerate(classes)]
    return _decode_column(classes, where)


def _decode_column(classes: Any, where: str) -> np.ndarray:
    """One column's ``classes`` entry, checked."""
    _check_fields(classes, _CLASSES_FIELDS, where)
    return decode_classes(classes, where)


def decode_classes(classes: Manifest, where: str) -> np.ndarray:
    try:
        dtype = np.dtype(classes["dtype"])
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.kind not in "biufUO":
        raise ValueError(f"{where}: {classes['dtype']!r} is not a dtype classes can have")
    if dtype.kind == "O":
        return np.fromiter(classes["values"], dtype=object, count=len(classes["values"]))
    try:
        return np.array(classes["values"], dtype=dtype.newbyteorder("="))
    except (ValueError, OverflowError, TypeError) as exc:
        raise ValueError(f"{where}: the values do not fit dtype {dtype}: {exc}") from None


def expected_dtypes(manifest: Manifest) -> dict[str, str]:
    """The dtype (``str``) every array of the file must have, by name: ``format.ARRAY_DTYPES``,
    but the shipped state's feature indices (the narrowest unsigned type for the features), and
    the whole numbers of ``format.NARROW_DTYPES`` in the type declared, if it is one of
    theirs."""
    dtypes = {name: dtype.str for name, dtype in ARRAY_DTYPES.items()}
    n_features = manifest["fitted"]["n_features_in_"]
    dtypes["feature"] = np.dtype(feature_dtype(n_features)).newbyteorder("<").str
    for name, allowed in NARROW_DTYPES.items():
        declared = manifest["arrays"].get(name, {}).get("dtype")
        dtypes[name] = declared if declared in allowed else allowed[0]
    return dtypes


def expected_shapes(manifest: Manifest) -> dict[str, tuple[int, ...]]:
    """Shape of every array the manifest's counts call for, by name."""
    trees = manifest["trees"]
    numeric = [f for f in manifest["bins"]["features"] if f["kind"] == "numeric"]
    n_nodes = sum(trees["node_counts"])
    n_splits = sum(trees["split_counts"])
    shapes: dict[str, tuple[int, ...]] = {name: (n_nodes,) for name in SHIPPED_ARRAYS}
    shapes.update({name: (n_splits,) for name in SPLIT_FIELDS})
    shapes["is_split"] = ((n_nodes + 7) // 8,)
    shapes.update({name: ((n_splits + 7) // 8,) for name in SPLIT_BITS})
    shapes["categorical_bitset_idx"] = (sum(trees["categorical_split_counts"]),)
    if "children_right" not in manifest["arrays"]:  # the node after the left child
        del shapes["children_right"]
    if "children_left" not in manifest["arrays"]:  # numbered depth-first
        del shapes["children_left"]
    # What each node holds (format.SHIPPED_ARRAYS): a classifier's weighted class counts (its
    # leaves', or every node's), or its fractions and weights; a regressor's means, weights and
    # impurities (below). The manifest's list of arrays says which.
    counts = {"leaf_class_counts": n_nodes - n_splits, "weighted_class_counts": n_nodes}
    layout = next((name for name in counts if name in manifest["arrays"]), None)
    regression = ESTIMATOR_KINDS[manifest["estimator"]][1] == "regression"
    if regression and layout is not None:
        raise ValueError(f"{MANIFEST}: a regressor's nodes hold no weighted class counts")
    for name in counts:
        del shapes[name]
    if layout is not None:
        del shapes["value"], shapes["weighted_n_node_samples"]
        del shapes["leaf_weighted_n_node_samples"]
        shapes[layout] = (counts[layout], trees["n_values"])
    # Row counts and (with values) weights: the leaves', or every node's.
    for name, leaf_name in SUMMABLE.items():
        if name not in shapes or leaf_name in counts:
            continue
        if leaf_name in manifest["arrays"]:
            del shapes[name]
            shapes[leaf_name] = (n_nodes - n_splits,)
        else:
            del shapes[leaf_name]
    # A regressor's means and impurities: the leaves' (the impurities that are not zero, as many
    # as their bits mark: ``check_shipped_trees``), or every node's.
    n_leaves = n_nodes - n_splits
    leaf_moments = {
        "leaf_value": (n_leaves, trees["n_values"]),
        "nonzero_leaf_impurity_bits": ((n_leaves + 7) // 8,),
        "nonzero_leaf_impurity": _declared_length(manifest, "nonzero_leaf_impurity"),
    }
    for name in leaf_moments:
        del shapes[name]
    if regression and "leaf_value" in manifest["arrays"]:
        del shapes["value"], shapes["impurity"]
        shapes.update(leaf_moments)
    if not regression and "impurity" not in manifest["arrays"]:
        del shapes["impurity"]  # derived from the class fractions (else monotonic constraints)
    shapes["categorical_bitsets"] = (sum(trees["bitset_counts"]), BITSET_WORDS)
    if "value" in shapes:
        shapes["value"] = (n_nodes, trees["n_values"])
    shapes["bin_edges"] = (sum(f["n_edges"] for f in numeric),)
    shapes["bin_values"] = (sum(f["n_values"] for f in numeric),)
    if "oob_curve" in manifest["arrays"] and ESTIMATOR_KINDS[manifest["estimator"]][0] == "forest":
        # One entry per tree grown when the OOB estimates were computed (warm starts add trees).
        shapes["oob_curve"] = _declared_length(manifest, "oob_curve")
    is_regression_forest = ESTIMATOR_KINDS[manifest["estimator"]] == ("forest", "regression")
    if is_regression_forest and any(name in manifest["arrays"] for name in INTERVAL_SCORE_ARRAYS):
        # Both or neither; their lengths follow the training blocks (``check_interval_scores``).
        for name in INTERVAL_SCORE_ARRAYS:
            shapes[name] = _declared_length(manifest, name)
    if manifest["estimator"] in QUANTILE_FORESTS:
        # Their lengths follow the leaves and the training targets, which the manifest does not
        # count: 1-d as declared here, checked against the trees by ``check_leaf_targets``.
        for name in LEAF_TARGET_ARRAYS:
            shapes[name] = _declared_length(manifest, name)
    return shapes


def _declared_length(manifest: Manifest, name: str) -> tuple[int, ...]:
    """The shape the manifest declares for array ``name`` if it is 1-d (a length the manifest
    does not count, checked once the arrays are read), else one no array has."""
    entry = manifest["arrays"].get(name, {"shape": []})
    return tuple(entry["shape"]) if len(entry["shape"]) == 1 else (-1,)


def read_arrays(
    npz: Path, declared: Manifest, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str]
) -> Arrays:
    """The arrays of ``npz``, each checked against its manifest entry and expected shape and
    dtype (``expected_shapes``, ``expected_dtypes``)."""
    if set(declared) != set(shapes):
        raise ValueError(
            f"{npz.with_name(MANIFEST)}: lists arrays {sorted(declared)}, expected {sorted(shapes)}"
        )
    try:
        archive = zipfile.ZipFile(npz)
    except FileNotFoundError:
        raise ValueError(f"{npz.parent} is incomplete: {ARRAYS} is missing") from None
    except _CORRUPT as exc:
        raise ValueError(f"{npz} is truncated or corrupt: {exc}") from exc
    arrays: Arrays = {}
    with archive:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if name in arrays:
                raise ValueError(f"{npz} holds array {name!r} twice")
            arrays[name] = _read_array(
                archive, info, name, declared.get(name), shapes.get(name), dtypes.get(name), npz
            )
    missing = sorted(set(shapes) - set(arrays))
    if missing:
        raise ValueError(f"{npz} is missing arrays {missing}")
    return arrays


def _read_array(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    name: str,
    entry: Manifest | None,
    shape: tuple[int, ...] | None,
    dtype_str: str | None,
    npz: Path,
) -> np.ndarray:
    """One member of the archive: its header first (an object array stops here, before any of
    its data is read), then its data, checked against its manifest ``entry``."""
    try:
        with archive.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version not in _HEADER_READERS:
                raise ValueError(f"unsupported .npy format version {version}")
            file_shape, fortran_order, dtype = _HEADER_READERS[version](f)
    except _CORRUPT as exc:
        raise ValueError(
            f"{npz}: array {name!r} cannot be read, truncated or corrupt: {exc}"
        ) from exc
    if dtype.hasobject:
        raise ValueError(
            f"{npz}: array {name!r} holds Python objects (dtype {dtype}); object arrays are "
            "refused, since reading them would run pickle"
        )
    if entry is None:
        raise ValueError(f"{npz}: unexpected array {name!r}, not in the manifest")
    expected = (dtype_str, shape)
    if (dtype.str, file_shape) != expected or (entry["dtype"], tuple(entry["shape"])) != expected:
        raise ValueError(
            f"{npz}: array {name!r} is {dtype.str} {file_shape} (manifest: {entry['dtype']} "
            f"{tuple(entry['shape'])}); expected {expected[0]} {expected[1]}"
        )
    if fortran_order:
        raise ValueError(f"{npz}: array {name!r} is in Fortran order; model files use C order")
    try:
        with archive.open(info) as f:
            array = np.lib.format.read_array(f, allow_pickle=False)
            # Nothing may follow the data; reading to the end also makes zipfile check its CRC.
            trailing = f.read(1)
    except _CORRUPT as exc:
        raise ValueError(
            f"{npz}: array {name!r} cannot be read, truncated or corrupt: {exc}"
        ) from exc
    if trailing:
        raise ValueError(f"{npz}: array {name!r} has bytes after its data: the file is corrupt")
    if array_checksum(array) != entry["sha256"]:
        raise ValueError(
            f"{npz}: checksum mismatch in array {name!r}: the file was modified or is corrupt"
        )
    return array.astype(array.dtype.newbyteorder("="), copy=False)


# Arrays of weights, class weights and impurities: never negative in a fitted tree.
_NON_NEGATIVE = (
    "weighted_n_node_samples",
    "leaf_weighted_n_node_samples",
    "weighted_class_counts",
    "leaf_class_counts",
    "impurity",
    "leaf_impurity",
    "nonzero_leaf_impurity",
)


# Arrays of each node's (or leaf's) weight, or its weight by class: a fitted tree's nodes all
# hold rows of positive weight.
_POSITIVE_NODES = (
    "weighted_n_node_samples",
    "leaf_weighted_n_node_samples",
    "weighted_class_counts",
    "leaf_class_counts",
)


def check_numbers(a: Arrays, bins: Manifest, npz: Path) -> None:
    """Check the numbers the trees and bins of a file predict with, as fitting makes them: every
    floating-point array finite (but ``oob_curve``, a report that prediction never reads, and a
    quantile forest's leaf targets, which ``check_leaf_targets`` checks), weights and
    impurities not negative, and each numeric feature's bin edges and values increasing. A file
    that breaks this would not crash the kernels, but would predict NaN or infinity, or bin the
    rows it predicts on wrongly, without a word. A node's weight is positive: a leaf of no weight
    would vote nothing (class fractions of zero) where fitting never makes one."""
    for name, array in a.items():
        if name == "oob_curve" or name in LEAF_TARGET_ARRAYS:
            continue
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            raise ValueError(f"{npz}: array {name!r} holds NaN or infinity")
        if name in _NON_NEGATIVE and np.any(array < 0):
            raise ValueError(f"{npz}: array {name!r} holds a negative weight or impurity")
        if name in _POSITIVE_NODES and array.size:
            weights = array.reshape(len(array), -1).sum(axis=1) if array.ndim > 1 else array
            if np.any(weights <= 0):
                raise ValueError(f"{npz}: array {name!r} gives a node a weight of zero")
    numeric = [j for j, f in enumerate(bins["features"]) if f["kind"] == "numeric"]
    for name, key in (("bin_edges", "n_edges"), ("bin_values", "n_values")):
        # The lengths add up (``expected_shapes``).
        ends = np.cumsum([bins["features"][j][key] for j in numeric], dtype=np.int64)
        for j, part in zip(numeric, np.split(a[name], ends[:-1])):
            if np.any(np.diff(part) <= 0):
                raise ValueError(f"{npz}: array {name!r}: feature {j}: not increasing")


def check_shipped_trees(
    a: Arrays, trees: Manifest, feature_is_categorical: np.ndarray, npz: Path
) -> tuple[np.ndarray, np.ndarray]:
    """Check that the trees of a file (``format.SHIPPED_ARRAYS`` in ``a``, counted by the
    manifest's ``trees``) are trees the kernels can walk, and that a regressor's leaf impurities
    are as many as their bits mark; give the nodes' depths (which a file does not store).

    The numba kernels do not check bounds, so a file that passes its checksums but was written
    by something else must not make them read or write out of their arrays: every split has two
    children later in its own tree, every node but a root exactly one parent, and a split's
    feature, kind and bitset row exist; the flags mark as many split nodes and categorical
    splits in each tree as the manifest counts.

    Returns
    -------
    is_split : ndarray of bool, shape (n_nodes,)
    depth : ndarray of int64, shape (n_nodes,)
        Every node's distance from its tree's root.
    """
    nodes = _Nodes(trees["node_counts"], npz)
    is_split = np.unpackbits(a["is_split"], count=len(nodes.index)).astype(bool)
    split = np.flatnonzero(is_split)
    _check_marks(nodes.tree[split], trees["split_counts"], "is_split", "split nodes", npz)
    categorical = np.unpackbits(a["is_categorical_bits"], count=len(split)).astype(bool)
    _check_marks(
        nodes.tree[split[categorical]],
        trees["categorical_split_counts"],
        "is_categorical_bits",
        "categorical split nodes",
        npz,
    )
    if "children_left" not in a:  # numbered depth-first: from each tree's flags
        a = {**a, "children_left": _depth_first_children(a["is_split"], nodes, trees, npz)}
    fields = split_fields(a)
    left, right = nodes.check_splits(
        split,
        fields["children_left"],
        fields["children_right"],
        a["feature"],
        categorical,
        fields["bitset_idx"],
        trees["bitset_counts"],
        feature_is_categorical,
    )
    # Children come after their parents (checked above): one pass gives every depth.
    children = np.full((2, len(nodes.index)), TREE_LEAF, dtype=np.int64)
    children[0, split], children[1, split] = left, right
    depth = np.zeros(len(nodes.index), dtype=np.int64)
    fill_depths(children[0], children[1], depth)
    if "nonzero_leaf_impurity_bits" in a:
        n_leaves = len(nodes.index) - len(split)
        marked = int(np.unpackbits(a["nonzero_leaf_impurity_bits"], count=n_leaves).sum())
        if marked != len(a["nonzero_leaf_impurity"]):
            raise ValueError(
                f"{npz}: nonzero_leaf_impurity_bits marks {marked} leaves, "
                f"nonzero_leaf_impurity holds {len(a['nonzero_leaf_impurity'])} impurities"
            )
    return is_split, depth


def _depth_first_children(
    packed: np.ndarray, nodes: "_Nodes", trees: Manifest, npz: Path
) -> np.ndarray:
    """The left children of the split nodes of every tree (local ids, concatenated) of a file
    that numbers them depth-first, as the grower does (``tree.depth_first_children``), from
    the flags in ``packed`` (``is_split``); refused if a tree's flags do not number its nodes
    so."""
    is_split = np.unpackbits(packed, count=len(nodes.index))
    starts = np.cumsum(nodes.counts) - nodes.counts
    out = []
    for t, (start, n_nodes) in enumerate(zip(starts, nodes.counts)):
        left = np.empty(trees["split_counts"][t], dtype=np.int32)
        flags = np.packbits(is_split[start : start + n_nodes])
        if depth_first_children(flags, int(n_nodes), left) != n_nodes or (left < 0).any():
            raise ValueError(
                f"{npz}: tree {t}: is_split does not number {n_nodes} nodes depth-first, and "
                "the file holds no children_left"
            )
        out.append(left)
    return np.concatenate(out) if out else np.empty(0, dtype=np.int32)


def _check_marks(tree: np.ndarray, counts: Sequence[int], name: str, what: str, npz: Path) -> None:
    """Check that the nodes a bit array marks (``tree``: the tree of each) are as many in each
    tree as the manifest's ``counts``."""
    marked = np.bincount(tree, minlength=len(counts))
    differs = np.flatnonzero(marked != np.asarray(counts))
    if len(differs):
        t = differs[0]
        raise ValueError(
            f"{npz}: tree {t}: {name} marks {marked[t]} {what}, the manifest counts {counts[t]}"
        )


class _Nodes:
    """The nodes of concatenated trees (``counts`` nodes each), and the checks on them; a
    failed check names the file, the tree and the node."""

    def __init__(self, counts: Sequence[int], npz: Path) -> None:
        self.counts = np.asarray(counts, dtype=np.int64)
        self.tree = np.repeat(np.arange(len(self.counts)), self.counts)  # tree of each node
        self.start = (np.cumsum(self.counts) - self.counts)[self.tree]  # its tree's root
        self.index = np.arange(len(self.tree))
        self.npz = npz

    def require(self, ok: np.ndarray, at: np.ndarray, problem: str) -> None:
        if not ok.all():
            bad = at[np.argmin(ok)]
            raise ValueError(
                f"{self.npz}: tree {self.tree[bad]}, node {bad - self.start[bad]}: {problem}"
            )

    def check_splits(
        self,
        split: np.ndarray,
        left: np.ndarray,
        right: np.ndarray,
        feature: np.ndarray,
        categorical: np.ndarray,
        bitset_row: np.ndarray,
        bitset_counts: Sequence[int],
        is_categorical: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Check the split nodes ``split`` (global indices) with their local children, feature,
        kind and bitset row: each child later in the split's tree, every node but a root one
        parent, the feature, its kind and the bitset row existing. Returns the children's global
        indices."""
        start, end = self.start[split], self.start[split] + self.counts[self.tree[split]]
        left, right = start + left, start + right
        self.require(
            (split < left) & (left < end) & (split < right) & (right < end),
            split,
            "a child outside its tree or before its parent",
        )
        n_parents = np.bincount(np.concatenate([left, right]), minlength=len(self.index))
        self.require(
            n_parents == (self.index != self.start),
            self.index,
            "not exactly one parent (a root: none)",
        )
        feature = feature.astype(np.int64)
        self.require((feature >= 0) & (feature < len(is_categorical)), split, "no such feature")
        self.require(
            categorical == is_categorical[feature],
            split,
            "a categorical split on a numeric feature, or the other way round",
        )
        n_rows = np.asarray(bitset_counts)[self.tree[split]]
        self.require(
            ~categorical | ((bitset_row >= 0) & (bitset_row < n_rows)),
            split,
            "no such categorical bitset",
        )
        return left, right


def check_interval_scores(a: Arrays, npz: Path) -> None:
    """Check a regression forest's out-of-bag conformity scores (``format.INTERVAL_SCORE_ARRAYS``
    in ``a``), if any, as ``conformal.ConformalScores.threshold`` searches them: as many counts
    as values, values finite (``check_numbers``) and not decreasing, counts at least 1 and not
    decreasing (the last is the number of scores)."""
    if "interval_score_values" not in a:
        return
    values, counts = a["interval_score_values"], a["interval_score_counts"]
    problem = None
    if len(counts) != len(values):
        problem = f"has {len(counts)} entries, expected {len(values)} (one per value)"
    elif len(counts) and (counts[0] < 1 or np.any(np.diff(counts) < 0)):
        problem = "must be at least 1 and not decrease"
    elif np.any(np.diff(values) < 0):
        raise ValueError(f"{npz}: array 'interval_score_values': must not decrease")
    if problem is not None:
        raise ValueError(f"{npz}: array 'interval_score_counts': {problem}")


def check_leaf_targets(a: Arrays, n_leaves: int, npz: Path) -> None:
    """Check that a quantile forest's leaf targets (``format.LEAF_TARGET_ARRAYS`` in ``a``) are
    what ``quantiles.quantile_rows`` walks without checking bounds: one range of entries per leaf
    of the forest, in order, covering every entry; within a leaf, target indices into the table
    increasing and cumulative weights rising to exactly 1; a table of finite targets, sorted.
    """
    offsets, ids = a["leaf_offsets"], a["leaf_target_ids"]
    weights, targets = a["leaf_cum_weights"], a["leaf_targets"]

    def require(ok: object, name: str, problem: str) -> None:
        if not ok:
            raise ValueError(f"{npz}: array {name!r}: {problem}")

    require(
        len(offsets) == n_leaves + 1,
        "leaf_offsets",
        f"has {len(offsets)} entries, expected {n_leaves + 1} (one per leaf of the forest, + 1)",
    )
    require(offsets[0] == 0, "leaf_offsets", f"must start at 0, got {offsets[0]}")
    require(bool(np.all(offsets[1:] >= offsets[:-1])), "leaf_offsets", "must not decrease")
    require(
        offsets[-1] == len(ids),
        "leaf_offsets",
        f"must end at the number of entries, {len(ids)}, got {offsets[-1]}",
    )
    require(
        len(weights) == len(ids),
        "leaf_cum_weights",
        f"has {len(weights)} entries, expected {len(ids)} (one per entry of leaf_target_ids)",
    )
    require(bool(np.all(np.isfinite(targets))), "leaf_targets", "must be finite")
    require(bool(np.all(targets[1:] > targets[:-1])), "leaf_targets", "must be sorted, distinct")
    require(
        bool(np.all(ids < len(targets))),
        "leaf_target_ids",
        f"must be indices into leaf_targets (< {len(targets)})",
    )
    # Entries after the first of their leaf; a leaf may be empty (its start is its end).
    starts = offsets[:-1][offsets[1:] > offsets[:-1]]
    follows = np.ones(len(ids), dtype=bool)
    follows[starts] = False
    require(
        bool(np.all(ids[1:][follows[1:]] > ids[:-1][follows[1:]])),
        "leaf_target_ids",
        "must increase within each leaf",
    )
    require(
        bool(np.all((weights > 0.0) & (weights <= 1.0))), "leaf_cum_weights", "must be in (0, 1]"
    )
    require(
        bool(np.all(weights[1:][follows[1:]] >= weights[:-1][follows[1:]])),
        "leaf_cum_weights",
        "must not decrease within a leaf",
    )
    ends = offsets[1:][offsets[1:] > offsets[:-1]] - 1
    require(bool(np.all(weights[ends] == 1.0)), "leaf_cum_weights", "each leaf's last must be 1")

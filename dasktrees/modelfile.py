"""Model files: a fitted estimator as a JSON manifest plus raw arrays, and back, without pickle.

A model is a directory of two files (docs/models.md):

    model/
      manifest.json  estimator, parameters, fitted scalars, classes, feature names, bins, tree
                     counts, the dtype, shape and sha256 of every array, its own sha256
      arrays.npz     the numbers (np.savez); each tree field concatenated over the trees:

                     children_left = [ tree 0: n0 nodes | tree 1: n1 nodes | ... ]  (local ids)

Loading parses JSON and reads plain arrays (an object array is refused from its header, before
any of its data is read), checks every array against the manifest and the trees' structure
against what the prediction kernels assume, and builds the estimator from an allowlist of
dasktrees' own classes: nothing in a file names code to run.
"""

import hashlib
import json
import math
import numbers
import os
import secrets
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from . import __version__
from ._dtypes import BITSET_WORDS, MAX_BINS, TREE_LEAF
from ._validation import column_label
from .binning import BinMapper
from .ensemble import (
    BaseForest,
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from .estimators import DecisionTreeClassifier, DecisionTreeRegressor
from .tree.tree import TREE_ARRAYS, Tree

FORMAT = "dasktrees-model"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ARRAYS = "arrays.npz"

# The classes a model file may name. The name in a file is looked up here, never imported.
ESTIMATORS = {
    cls.__name__: cls
    for cls in (
        DecisionTreeClassifier,
        DecisionTreeRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
        ExtraTreesClassifier,
        ExtraTreesRegressor,
    )
}

# Every array a file may hold, with its dtype: little-endian whatever the machine, C order.
ARRAY_DTYPES = {
    "children_left": np.dtype("<i4"),
    "children_right": np.dtype("<i4"),
    "feature": np.dtype("<i4"),
    "threshold": np.dtype("<f8"),
    "bin_threshold": np.dtype("u1"),
    "missing_go_to_left": np.dtype("u1"),
    "is_categorical": np.dtype("u1"),
    "bitset_idx": np.dtype("<i4"),
    "categorical_bitsets": np.dtype("<u4"),
    "value": np.dtype("<f8"),
    "n_node_samples": np.dtype("<i8"),
    "weighted_n_node_samples": np.dtype("<f8"),
    "impurity": np.dtype("<f8"),
    "node_depth": np.dtype("<i4"),
    "bin_edges": np.dtype("<f8"),  # edges of the numeric features, concatenated
    "bin_values": np.dtype("<f8"),  # their representative values (BinMapper.bin_values_)
    "oob_curve": np.dtype("<f8"),  # forests fitted with oob_score
}

_BIN_PARAMS = ("max_bins", "categorical_features", "subsample", "random_state")

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
)

_HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


# ---- saving ------------------------------------------------------------------------------------


def save(estimator, path):
    """Write a fitted estimator to the model directory ``path``.

    The directory is written under a temporary name beside ``path`` and renamed into place once
    complete, so that a failed save leaves no half-written model.

    Parameters
    ----------
    estimator : one of ``ESTIMATORS``, fitted
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
    _write_directory(Path(path), manifest, arrays)


def _describe(estimator):
    """The manifest (a JSON-able dict) and the arrays of a fitted estimator."""
    cls = type(estimator)
    if ESTIMATORS.get(cls.__name__) is not cls:
        raise TypeError(f"only {', '.join(ESTIMATORS)} can be saved, got {cls.__name__}")
    is_forest = isinstance(estimator, BaseForest)
    check_is_fitted(estimator, "estimators_" if is_forest else "tree_")
    trees = [est.tree_ for est in estimator.estimators_] if is_forest else [estimator.tree_]
    arrays = {name: np.concatenate([getattr(tree, name) for tree in trees]) for name in TREE_ARRAYS}
    bins, arrays["bin_edges"], arrays["bin_values"] = _describe_bins(estimator.bin_mapper_)
    if hasattr(estimator, "oob_curve_"):
        arrays["oob_curve"] = estimator.oob_curve_
    # "safe" casting: a tree field whose dtype changed must fail here, not be truncated
    arrays = {
        name: np.ascontiguousarray(np.asarray(a).astype(ARRAY_DTYPES[name], casting="safe"))
        for name, a in arrays.items()
    }
    params = estimator.get_params(deep=False)
    params.pop("client", None)  # a client belongs to a session, not to a model
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "dasktrees_version": __version__,
        "estimator": cls.__name__,
        "params": {name: _to_json(value, f"parameter {name!r}") for name, value in params.items()},
        "fitted": _fitted_scalars(estimator, is_forest),
        "feature_names": _names(getattr(estimator, "feature_names_in_", None)),
        "classes": _describe_classes(getattr(estimator, "classes_", None)),
        "bins": bins,
        "trees": {
            "n_trees": len(trees),
            "n_values": int(trees[0].value.shape[1]),
            "node_counts": [tree.node_count for tree in trees],
            "bitset_counts": [len(tree.categorical_bitsets) for tree in trees],
        },
        "arrays": {
            name: {"dtype": a.dtype.str, "shape": list(a.shape), "sha256": _sha256(a)}
            for name, a in arrays.items()
        },
    }
    manifest["manifest_sha256"] = _manifest_sha256(manifest)
    return manifest, arrays


def _fitted_scalars(estimator, is_forest):
    fitted = {
        name: _to_json(getattr(estimator, name), f"fitted attribute {name!r}", scalar=True)
        for name in (_FITTED if is_forest else _TREE_FITTED)
    }
    if is_forest and hasattr(estimator, "oob_score_"):
        score = estimator.oob_score_
        if not isinstance(score, numbers.Real):
            raise TypeError(f"oob_score_ = {score!r} cannot be stored in a model file")
        # An OOB score is NaN when no row was ever out of bag; JSON has no NaN, hence the text.
        fitted["oob_score_"] = float(score) if math.isfinite(score) else str(float(score))
    return fitted


def _describe_bins(mapper):
    """The bin mapper's manifest entry, and its numeric edges and values, concatenated."""
    features, edges, values = [], [np.empty(0)], [np.empty(0)]
    names = mapper.feature_names_in_
    for j in range(mapper.n_features_in_):
        if mapper.is_categorical_[j]:
            where = f"a category of {column_label(names, j)}"
            features.append(
                {
                    "kind": "categorical",
                    "categories": [_to_json(c, where, scalar=True) for c in mapper.categories_[j]],
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
        name: _to_json(getattr(mapper, name), f"bin mapper parameter {name!r}")
        for name in _BIN_PARAMS
    }
    entry = {"params": params, "feature_names": _names(names), "features": features}
    return entry, np.concatenate(edges), np.concatenate(values)


def _describe_classes(classes):
    """Classes as JSON values plus their dtype, so that ints stay ints and strings strings."""
    if classes is None:
        return None
    if classes.dtype.kind not in "biufUO":
        raise TypeError(f"classes_ of dtype {classes.dtype} cannot be stored in a model file")
    values = [_to_json(c, "a class", scalar=True) for c in classes.tolist()]
    return {"dtype": classes.dtype.newbyteorder("<").str, "values": values}


def _names(names):
    return None if names is None else [str(name) for name in names]


def _to_json(value, where, scalar=False):
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
        return [_to_json(item, where) for item in value]
    if not scalar and isinstance(value, dict):
        key_where = f"a key of {where}"
        return {
            "dict": [[_to_json(k, key_where, True), _to_json(v, where)] for k, v in value.items()]
        }
    raise TypeError(
        f"{where} = {value!r} cannot be stored in a model file, which holds None, bools, ints, "
        "finite floats and strings (and, for parameters, lists and dicts of them)"
    )


def _sha256(array):
    return hashlib.sha256(np.ascontiguousarray(array)).hexdigest()


def _manifest_sha256(manifest):
    """sha256 of the manifest's canonical JSON, without its own checksum field."""
    body = {key: value for key, value in manifest.items() if key != "manifest_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _write_directory(path, manifest, arrays):
    """Write ``path/arrays.npz`` and ``path/manifest.json`` in a sibling directory, then rename
    it to ``path``; an existing model there is moved aside first and removed last."""
    if (path.exists() or path.is_symlink()) and not _is_model_directory(path):
        raise FileExistsError(f"{path} exists and is not a dasktrees model; not overwriting it")
    token = secrets.token_hex(4)
    tmp = path.with_name(f".{path.name}.{token}.tmp")
    old = path.with_name(f".{path.name}.{token}.old")
    os.mkdir(tmp)
    try:
        with open(tmp / ARRAYS, "wb") as f:
            np.savez(f, **arrays)
            _sync(f)
        with open(tmp / MANIFEST, "w", encoding="ascii") as f:
            json.dump(manifest, f, indent=1, allow_nan=False)
            _sync(f)
        replacing = path.exists() or path.is_symlink()
        if replacing and not _is_model_directory(path):  # appeared while we wrote: leave it
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
    _sync_directory(path.parent)  # the rename itself must reach the disk
    if old.is_symlink():
        old.unlink()
    elif replacing:
        shutil.rmtree(old)


def _sync_directory(directory):
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


def _sync(f):
    """Flush ``f`` to the disk, so that the rename never publishes a file still in memory."""
    f.flush()
    os.fsync(f.fileno())


def _is_model_directory(path):
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


# ---- what a manifest must hold ---------------------------------------------------------------


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_scalar(value):
    return isinstance(value, (str, int, float))  # bool is an int


# A field's description (for the error) and test.
_ANY = ("a value", lambda v: True)
_COUNT = ("an int >= 0", lambda v: _is_int(v) and v >= 0)
_STR = ("a string", lambda v: isinstance(v, str))
_OBJECT = ("an object", lambda v: isinstance(v, dict))
_LIST = ("a list", lambda v: isinstance(v, list))
_COUNTS = ("a list of ints >= 0", lambda v: isinstance(v, list) and all(map(_COUNT[1], v)))
_SCALARS = (
    "a list of strings, numbers and booleans",
    lambda v: isinstance(v, list) and all(map(_is_scalar, v)),
)
_NAMES = (
    "null or a list of strings",
    lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
)
_OBJECT_OR_NULL = ("null or an object", lambda v: v is None or isinstance(v, dict))
_SCORE = (
    'a number, "nan", "inf" or "-inf"',
    lambda v: (_is_scalar(v) and not isinstance(v, (bool, str))) or v in ("nan", "inf", "-inf"),
)

_MANIFEST_FIELDS = {
    "format": _STR,
    "format_version": _COUNT,
    "dasktrees_version": _STR,
    "estimator": _STR,
    "params": _OBJECT,
    "fitted": _OBJECT,
    "feature_names": _NAMES,
    "classes": _OBJECT_OR_NULL,
    "bins": _OBJECT,
    "trees": _OBJECT,
    "arrays": _OBJECT,
    "manifest_sha256": _STR,
}
# Fitted scalars: a tree's are the first three, a forest's all (and oob_score_ with oob_score).
_FITTED = {
    "n_features_in_": _COUNT,
    "n_outputs_": _COUNT,
    "max_features_": _COUNT,
    "_seed": _COUNT,
    "_n_rows": _COUNT,
    "mode_": _STR,
}
_TREE_FITTED = ("n_features_in_", "n_outputs_", "max_features_")
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
    "bitset_counts": _COUNTS,
}
_ARRAY_FIELDS = {"dtype": _STR, "shape": _COUNTS, "sha256": _STR}


def _check_fields(obj, fields, where):
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


def _short(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ---- reading ---------------------------------------------------------------------------------


def read_manifest(path):
    """Read and check the manifest of the model directory ``path``, without its arrays.

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
        an unknown format version or inconsistent; the message names the file and the problem.
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
    version = manifest["format_version"]
    if not _is_int(version) or version != FORMAT_VERSION:
        raise ValueError(
            f"{file}: model format version {version!r} is not supported; "
            f"this dasktrees reads version {FORMAT_VERSION}"
        )
    _check_fields(manifest, _MANIFEST_FIELDS, str(file))
    if manifest["manifest_sha256"] != _manifest_sha256(manifest):
        raise ValueError(f"{file}: checksum mismatch: the manifest was modified or is corrupt")
    _check_contents(manifest, str(file))
    return manifest


def describe(path):
    """What the model at ``path`` is, from its checked manifest alone (``dasktrees inspect``).

    Returns
    -------
    dict
        ``estimator``, ``kind`` (tree or forest) and ``task``, ``format_version``,
        ``dasktrees_version``, ``parameters``, ``features``, ``classes`` (classifiers),
        ``trees``, ``nodes``, ``size_bytes`` (both files), ``oob_score`` (or None).
    """
    manifest = read_manifest(path)
    directory = Path(path)
    cls = ESTIMATORS[manifest["estimator"]]
    params = {name: _from_json(value, "params") for name, value in manifest["params"].items()}
    classes = manifest["classes"]
    oob_score = manifest["fitted"].get("oob_score_")
    return {
        "estimator": manifest["estimator"],
        "kind": "forest" if issubclass(cls, BaseForest) else "tree",
        "task": "classification" if classes is not None else "regression",
        "format_version": manifest["format_version"],
        "dasktrees_version": manifest["dasktrees_version"],
        "parameters": params,
        "features": manifest["feature_names"]
        or [f"x{i}" for i in range(manifest["fitted"]["n_features_in_"])],
        "classes": classes["values"] if classes is not None else None,
        "trees": manifest["trees"]["n_trees"],
        "nodes": sum(manifest["trees"]["node_counts"]),
        "size_bytes": sum(f.stat().st_size for f in directory.iterdir() if f.is_file()),
        "oob_score": oob_score,
    }


def _reject_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _check_contents(manifest, where):
    """Everything ``load`` relies on in a manifest whose fields have the right JSON types."""
    cls = ESTIMATORS.get(manifest["estimator"])
    if cls is None:
        raise ValueError(
            f"{where}: estimator {manifest['estimator']!r} is not one of {', '.join(ESTIMATORS)}"
        )
    is_forest = issubclass(cls, BaseForest)
    _decode_params(manifest["params"], cls, where)
    fitted = {name: _FITTED[name] for name in (_FITTED if is_forest else _TREE_FITTED)}
    if is_forest and "oob_score_" in manifest["fitted"]:
        fitted["oob_score_"] = _SCORE
    _check_fields(manifest["fitted"], fitted, f"{where}: fitted")
    n_features = manifest["fitted"]["n_features_in_"]
    names = manifest["feature_names"]
    if names is not None and len(names) != n_features:
        raise ValueError(f"{where}: {len(names)} feature_names for {n_features} features")
    _check_bins(manifest["bins"], n_features, f"{where}: bins")
    if issubclass(cls, ClassifierMixin):
        classes = manifest["classes"]
        _check_fields(classes, _CLASSES_FIELDS, f"{where}: classes")
        n_values = len(_decode_classes(classes, f"{where}: classes"))
    elif manifest["classes"] is not None:
        raise ValueError(f"{where}: a regressor has no classes")
    else:
        n_values = 1
    _check_trees_entry(manifest["trees"], is_forest, n_values, f"{where}: trees")
    for name, entry in manifest["arrays"].items():
        _check_fields(entry, _ARRAY_FIELDS, f"{where}: arrays: {name!r}")


def _check_bins(bins, n_features, where):
    _check_fields(bins, _BINS_FIELDS, where)
    _check_fields(bins["params"], dict.fromkeys(_BIN_PARAMS, _ANY), f"{where}: params")
    for name, value in bins["params"].items():
        _from_json(value, f"{where}: params: {name!r}")
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


def _check_trees_entry(trees, is_forest, n_values, where):
    _check_fields(trees, _TREES_FIELDS, where)
    n_trees = trees["n_trees"]
    if n_trees < 1 or (n_trees > 1 and not is_forest):
        raise ValueError(f"{where}: n_trees is {n_trees}, expected {'>= 1' if is_forest else 1}")
    if not len(trees["node_counts"]) == len(trees["bitset_counts"]) == n_trees:
        raise ValueError(f"{where}: node_counts and bitset_counts need one entry per tree")
    if min(trees["node_counts"]) < 1:
        raise ValueError(f"{where}: a tree has no nodes")
    if trees["n_values"] != n_values:
        raise ValueError(
            f"{where}: n_values is {trees['n_values']}, expected {n_values} "
            "(the number of classes, 1 for a regressor)"
        )


def _decode_params(params, cls, where):
    known = set(cls().get_params(deep=False)) - {"client"}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"{where}: {cls.__name__} has no parameters {unknown}")
    return {
        name: _from_json(value, f"{where}: parameter {name!r}") for name, value in params.items()
    }


def _from_json(value, where):
    """Inverse of ``_to_json``: ``{"dict": [[key, value], ...]}`` is a dict again."""
    if isinstance(value, list):
        return [_from_json(item, where) for item in value]
    if isinstance(value, dict):
        items = value["dict"] if list(value) == ["dict"] else None
        if not isinstance(items, list) or not all(
            isinstance(item, list) and len(item) == 2 and _is_scalar(item[0]) for item in items
        ):
            raise ValueError(f'{where}: a dict is stored as {{"dict": [[key, value], ...]}}')
        return {key: _from_json(item, where) for key, item in items}
    return value


def _decode_classes(classes, where):
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


def load(path):
    """Load an estimator written by ``save`` (``estimator.save(path)``).

    Nothing in the file is executed: the manifest is JSON, the arrays are read with
    ``allow_pickle=False``, and the estimator's class is looked up in ``ESTIMATORS``.

    Parameters
    ----------
    path : str or os.PathLike
        A model directory.

    Returns
    -------
    estimator
        Fitted, with ``client=None``; its predictions are bit-identical to the saved
        estimator's. Out-of-bag estimates per training row (``oob_decision_function_``,
        ``oob_prediction_``) are not stored.

    Raises
    ------
    FileNotFoundError
        Nothing exists at ``path``.
    ValueError
        The model is truncated, corrupt, modified, holds an object array, has an unknown format
        version or is inconsistent; the message names the file and the problem.
    """
    directory = Path(path)
    manifest = read_manifest(directory)
    npz = directory / ARRAYS
    arrays = _read_arrays(npz, manifest["arrays"], _expected_shapes(manifest))
    mapper = _build_bin_mapper(manifest["bins"], arrays["bin_edges"], arrays["bin_values"])
    trees = manifest["trees"]
    _check_trees(arrays, trees["node_counts"], trees["bitset_counts"], mapper.is_categorical_, npz)
    return _build_estimator(
        manifest,
        mapper,
        _split_trees(arrays, trees, mapper.n_features_in_),
        arrays.get("oob_curve"),
    )


def _expected_shapes(manifest):
    """Shape of every array the manifest's counts call for, by name."""
    trees = manifest["trees"]
    numeric = [f for f in manifest["bins"]["features"] if f["kind"] == "numeric"]
    n_nodes = sum(trees["node_counts"])
    shapes = {name: (n_nodes,) for name in TREE_ARRAYS}
    shapes["categorical_bitsets"] = (sum(trees["bitset_counts"]), BITSET_WORDS)
    shapes["value"] = (n_nodes, trees["n_values"])
    shapes["bin_edges"] = (sum(f["n_edges"] for f in numeric),)
    shapes["bin_values"] = (sum(f["n_values"] for f in numeric),)
    curve = manifest["arrays"].get("oob_curve")
    if curve is not None and issubclass(ESTIMATORS[manifest["estimator"]], BaseForest):
        # One entry per tree grown when the OOB estimates were computed (warm starts add trees).
        shapes["oob_curve"] = tuple(curve["shape"]) if len(curve["shape"]) == 1 else (-1,)
    return shapes


def _read_arrays(npz, declared, shapes):
    """The arrays of ``npz``, each checked against its manifest entry and expected shape."""
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
    arrays = {}
    with archive:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if name in arrays:
                raise ValueError(f"{npz} holds array {name!r} twice")
            arrays[name] = _read_array(
                archive, info, name, declared.get(name), shapes.get(name), npz
            )
    missing = sorted(set(shapes) - set(arrays))
    if missing:
        raise ValueError(f"{npz} is missing arrays {missing}")
    return arrays


def _read_array(archive, info, name, entry, shape, npz):
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
    expected = (ARRAY_DTYPES[name].str, shape)
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
    if _sha256(array) != entry["sha256"]:
        raise ValueError(
            f"{npz}: checksum mismatch in array {name!r}: the file was modified or is corrupt"
        )
    return array.astype(array.dtype.newbyteorder("="), copy=False)


def _check_trees(a, node_counts, bitset_counts, feature_is_categorical, npz):
    """Check that the concatenated tree arrays ``a`` hold trees the kernels can walk.

    The numba kernels do not check bounds, so a file that passes its checksums but was written
    by something else must not make them read or write out of their arrays: every split has two
    children later in its own tree, every node but a root exactly one parent, depths count
    edges from the root, and a split's feature, kind and bitset row exist.
    """
    counts = np.asarray(node_counts, dtype=np.int64)
    tree = np.repeat(np.arange(len(counts)), counts)  # tree of each node
    start = (np.cumsum(counts) - counts)[tree]  # its tree's root
    node = np.arange(len(tree))
    split = np.flatnonzero(a["children_left"] != TREE_LEAF)
    left = start[split] + a["children_left"][split]
    right = start[split] + a["children_right"][split]
    end = start[split] + counts[tree[split]]

    def require(ok, at, problem):
        if not ok.all():
            bad = at[np.argmin(ok)]
            raise ValueError(f"{npz}: tree {tree[bad]}, node {bad - start[bad]}: {problem}")

    is_leaf = a["children_left"] == TREE_LEAF
    require(~is_leaf | (a["children_right"] == TREE_LEAF), node, "a leaf with a right child")
    require(
        (split < left) & (left < end) & (split < right) & (right < end),
        split,
        "a child outside its tree or before its parent",
    )
    n_parents = np.bincount(np.concatenate([left, right]), minlength=len(node))
    require(n_parents == (node != start), node, "not exactly one parent (a root: none)")
    depth = np.zeros(len(node), dtype=np.int64)
    depth[left] = depth[right] = a["node_depth"][split].astype(np.int64) + 1
    require(a["node_depth"] == depth, node, "node_depth is not the distance from the root")
    feature = a["feature"][split]
    require((feature >= 0) & (feature < len(feature_is_categorical)), split, "no such feature")
    categorical = a["is_categorical"][split] != 0
    require(
        categorical == feature_is_categorical[feature],
        split,
        "is_categorical differs from the kind of the split's feature",
    )
    row, n_rows = a["bitset_idx"][split], np.asarray(bitset_counts)[tree[split]]
    require(~categorical | ((row >= 0) & (row < n_rows)), split, "no such categorical bitset")


def _split_trees(arrays, trees, n_features):
    """Cut the concatenated arrays into ``Tree``s (views, not copies)."""
    node_cuts = np.cumsum(trees["node_counts"], dtype=np.int64)[:-1]
    bitset_cuts = np.cumsum(trees["bitset_counts"], dtype=np.int64)[:-1]
    parts = {
        name: np.split(arrays[name], bitset_cuts if name == "categorical_bitsets" else node_cuts)
        for name in TREE_ARRAYS
    }
    return [
        Tree(n_features, **{name: parts[name][t] for name in TREE_ARRAYS})
        for t in range(trees["n_trees"])
    ]


def _build_bin_mapper(bins, edges, values):
    features = bins["features"]
    numeric = [f for f in features if f["kind"] == "numeric"]
    edges = iter(np.split(edges, np.cumsum([f["n_edges"] for f in numeric], dtype=np.int64)[:-1]))
    values = iter(
        np.split(values, np.cumsum([f["n_values"] for f in numeric], dtype=np.int64)[:-1])
    )
    mapper = BinMapper(**{name: _from_json(v, name) for name, v in bins["params"].items()})
    mapper.n_features_in_ = len(features)
    names = bins["feature_names"]
    mapper.feature_names_in_ = None if names is None else np.asarray(names, dtype=object)
    mapper.is_categorical_ = np.array([f["kind"] == "categorical" for f in features], dtype=bool)
    per_feature = [], [], [], []  # edges, values, categories, bins
    for f in features:
        if f["kind"] == "numeric":
            columns = (next(edges), next(values), None, None)
        else:
            # fromiter keeps each category's own type (np.array would turn [1, "a"] into strings)
            categories = np.fromiter(f["categories"], dtype=object, count=len(f["categories"]))
            columns = (None, None, categories, np.array(f["bins"], dtype=np.int32))
        for part, column in zip(per_feature, columns):
            part.append(column)
    return mapper.set_bins(*per_feature)


def _build_estimator(manifest, mapper, trees, oob_curve):
    cls = ESTIMATORS[manifest["estimator"]]
    estimator = cls(**_decode_params(manifest["params"], cls, MANIFEST))
    for name, value in manifest["fitted"].items():
        setattr(estimator, name, float(value) if name == "oob_score_" else value)
    if manifest["feature_names"] is not None:
        estimator.feature_names_in_ = np.asarray(manifest["feature_names"], dtype=object)
    if manifest["classes"] is not None:
        estimator.classes_ = _decode_classes(manifest["classes"], MANIFEST)
        estimator.n_classes_ = len(estimator.classes_)
    estimator.bin_mapper_ = mapper
    if not isinstance(estimator, BaseForest):
        estimator.tree_ = trees[0]
        return estimator
    estimator.estimators_ = [estimator._wrap(tree) for tree in trees]
    estimator._forest = estimator._pack()  # packed once here, not by the first prediction
    if oob_curve is not None:
        estimator.oob_curve_ = oob_curve
    return estimator

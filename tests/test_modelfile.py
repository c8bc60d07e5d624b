"""Model files: round trips, and damaged, modified or hostile files refused with a ValueError."""

import hashlib
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import dasktrees as dt
from dasktrees.core.dtypes import TREE_LEAF
from dasktrees.learner.tree import TREE_ARRAYS, Tree, depth_first_children
from dasktrees.learner.wire import NONZERO_LEAF_IMPURITY
from dasktrees.modelfile import format as model_format
from dasktrees.modelfile.integrity import read_manifest

from .conftest import carseats


def carseats_data(kind):
    """Carseats as a frame (one category-dtype and two object columns, feature names) or as a
    numeric array with a few NaN; targets as string, int or float."""
    X, sales = carseats()
    X["ShelveLoc"] = X["ShelveLoc"].astype("category")
    targets = {
        "str": np.where(sales > 8, "high", "low"),
        "int": np.digitize(sales, [6.0, 9.0]),  # classes 0, 1, 2
        "float": sales,
    }
    if kind.startswith("numpy"):
        X = X.select_dtypes("number").to_numpy(dtype=float)
        X[::17, 2] = np.nan
    return X, targets[kind.split("-")[1]]


CASES = {
    "tree-classifier-str-classes": (
        lambda: dt.DecisionTreeClassifier(
            max_depth=6, class_weight={"high": 2.0, "low": 1.0}, random_state=0
        ),
        "frame-str",
    ),
    "tree-classifier-int-classes": (lambda: dt.DecisionTreeClassifier(random_state=0), "numpy-int"),
    "tree-regressor": (
        lambda: dt.DecisionTreeRegressor(max_depth=8, random_state=0),
        "frame-float",
    ),
    "forest-classifier-str-classes": (
        lambda: dt.RandomForestClassifier(n_estimators=5, oob_score=True, random_state=0),
        "frame-str",
    ),
    "forest-classifier-int-classes": (
        lambda: dt.RandomForestClassifier(
            n_estimators=5, class_weight={0: 1.0, 1: 2.0, 2: 1.0}, random_state=0
        ),
        "numpy-int",
    ),
    "extra-trees-classifier": (
        lambda: dt.ExtraTreesClassifier(
            n_estimators=5, bootstrap=True, oob_score=True, voting="hard", random_state=0
        ),
        "frame-int",
    ),
    "forest-regressor": (
        lambda: dt.RandomForestRegressor(n_estimators=5, oob_score=True, random_state=0),
        "frame-float",
    ),
    "extra-trees-regressor": (
        lambda: dt.ExtraTreesRegressor(n_estimators=5, aggregation="median", random_state=0),
        "numpy-float",
    ),
    "quantile-forest": (
        lambda: dt.RandomForestQuantileRegressor(n_estimators=5, oob_score=True, random_state=0),
        "frame-float",
    ),
    "extra-trees-quantile-forest": (
        lambda: dt.ExtraTreesQuantileRegressor(
            n_estimators=5, default_quantiles=(0.1, 0.9), random_state=0
        ),
        "numpy-float",
    ),
}


def fitted(case, client):
    make, data = CASES[case]
    model = make()
    if "client" in model.get_params():
        model.set_params(client=client)
    X, y = carseats_data(data)
    return model.fit(X, y), X


def params_without_client(model):
    params = model.get_params(deep=False)
    params.pop("client", None)
    return params


def assert_same_model(loaded, model, X):
    assert type(loaded) is type(model)
    assert params_without_client(loaded) == params_without_client(model)
    assert getattr(loaded, "client", None) is None
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    if hasattr(model, "predict_proba"):
        np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))
    np.testing.assert_array_equal(loaded.feature_importances_, model.feature_importances_)
    for name in ("classes_", "feature_names_in_", "oob_score_", "oob_curve_", "oob_coverage_"):
        assert hasattr(loaded, name) == hasattr(model, name), name
        if hasattr(model, name):
            np.testing.assert_array_equal(getattr(loaded, name), getattr(model, name))
    if hasattr(model, "classes_"):
        assert loaded.classes_.dtype == model.classes_.dtype
    if hasattr(model, "leaf_targets_"):
        for quantiles in ([0.05, 0.5, 0.95], 0.3, [1.0, 0.0]):
            np.testing.assert_array_equal(
                loaded.predict(X, quantiles=quantiles), model.predict(X, quantiles=quantiles)
            )
    for name in ("n_features_in_", "max_features_", "n_outputs_"):
        assert getattr(loaded, name) == getattr(model, name)


@pytest.mark.parametrize("case", CASES)
def test_round_trip_predicts_bit_identically(client, tmp_path, case):
    model, X = fitted(case, client)
    model.save(tmp_path / "model")
    loaded = dt.load(tmp_path / "model")
    assert_same_model(loaded, model, X)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary left behind


def test_quantile_forest_keeps_its_leaf_targets_and_tuple_and_auto_parameters(client, tmp_path):
    model, X = fitted("quantile-forest", client)
    # "auto" is set after fitting, so that the file holds it without growing trees in waves:
    # what is tested is that the string survives the manifest.
    model.set_params(n_estimators="auto", default_quantiles=(0.25, 0.75))
    model.save(tmp_path / "model")
    stored = read_manifest(tmp_path / "model")["params"]
    assert stored["default_quantiles"] == [0.25, 0.75] and stored["n_estimators"] == "auto"
    loaded = dt.load(tmp_path / "model")
    assert loaded.get_params()["default_quantiles"] == (0.25, 0.75)  # a tuple again
    assert loaded.get_params()["n_estimators"] == "auto"
    for field in ("offsets", "target_ids", "cum_weights", "targets"):
        saved, read = getattr(model.leaf_targets_, field), getattr(loaded.leaf_targets_, field)
        assert read.dtype == saved.dtype, field
        np.testing.assert_array_equal(read, saved)
    assert not hasattr(loaded, "oob_quantiles_")  # per training row: left out, as oob_prediction_


def test_class_weight_keys_keep_their_type(tmp_path):
    X, y = carseats_data("numpy-int")
    model = dt.DecisionTreeClassifier(max_depth=3, class_weight={0: 1.0, 2: 3.0}).fit(X, y)
    model.save(tmp_path / "model")
    weights = dt.load(tmp_path / "model").class_weight
    assert weights == {0: 1.0, 2: 3.0}
    assert [type(key) for key in weights] == [int, int]


def test_nan_oob_score_survives(client, tmp_path):
    model, _ = fitted("forest-regressor", client)
    model.oob_score_ = float("nan")  # what a forest with no out-of-bag row reports
    model.save(tmp_path / "model")
    assert read_manifest(tmp_path / "model")["fitted"]["oob_score_"] == "nan"
    assert np.isnan(dt.load(tmp_path / "model").oob_score_)


def test_loaded_forest_warm_starts_like_the_original(client, tmp_path):
    X, y = carseats_data("frame-str")
    params = dict(random_state=0, client=client)
    dt.RandomForestClassifier(n_estimators=3, **params).fit(X, y).save(tmp_path / "model")
    loaded = dt.load(tmp_path / "model")
    loaded.set_params(n_estimators=5, warm_start=True, client=client).fit(X, y)
    direct = dt.RandomForestClassifier(n_estimators=5, **params).fit(X, y)
    np.testing.assert_array_equal(loaded.predict_proba(X), direct.predict_proba(X))


def test_pickle_leaves_the_client_out(client, tmp_path):
    model, X = fitted("forest-classifier-str-classes", client)
    again = pickle.loads(pickle.dumps(model))
    assert again.client is None and model.client is client
    np.testing.assert_array_equal(again.predict_proba(X), model.predict_proba(X))
    model.save(tmp_path / "model")  # a loaded forest's trees are views of shared arrays
    unpickled = pickle.loads(pickle.dumps(dt.load(tmp_path / "model")))
    np.testing.assert_array_equal(unpickled.predict_proba(X), model.predict_proba(X))


# ---- saving --------------------------------------------------------------------------------------


def test_unfitted_estimator_is_not_saved(tmp_path):
    with pytest.raises(NotFittedError):
        dt.RandomForestRegressor().save(tmp_path / "model")
    assert not any(tmp_path.iterdir())


def test_parameter_without_json_form_is_named_and_nothing_written(tmp_path):
    X, y = carseats_data("numpy-float")
    model = dt.DecisionTreeRegressor(random_state=np.random.RandomState(0)).fit(X, y)
    with pytest.raises(TypeError, match="random_state"):
        model.save(tmp_path / "model")
    assert not any(tmp_path.iterdir())


def test_save_replaces_a_model_but_nothing_else(tmp_path):
    X, y = carseats_data("numpy-float")
    shallow = dt.DecisionTreeRegressor(max_depth=2).fit(X, y)
    deep = dt.DecisionTreeRegressor(max_depth=5).fit(X, y)
    shallow.save(tmp_path / "model")
    deep.save(tmp_path / "model")
    assert dt.load(tmp_path / "model").get_params()["max_depth"] == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    (tmp_path / "file").write_text("keep me")
    for name in ("notes", "file"):
        with pytest.raises(FileExistsError, match=name):
            deep.save(tmp_path / name)
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep me"
    assert (tmp_path / "file").read_text() == "keep me"


def test_failed_save_keeps_the_previous_model(tmp_path, monkeypatch):
    X, y = carseats_data("numpy-float")
    dt.DecisionTreeRegressor(max_depth=2).fit(X, y).save(tmp_path / "model")

    def disk_full(f):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model_format, "sync_file", disk_full)
    with pytest.raises(OSError, match="No space"):
        dt.DecisionTreeRegressor(max_depth=5).fit(X, y).save(tmp_path / "model")
    assert dt.load(tmp_path / "model").get_params()["max_depth"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


# ---- damaged, modified and hostile files ---------------------------------------------------------


@pytest.fixture
def saved(tmp_path):
    """A small categorical tree saved at tmp_path / "model": (path, model, X)."""
    X, y = carseats_data("frame-str")
    model = dt.DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, y)
    model.save(tmp_path / "model")
    return tmp_path / "model", model, X


def rewrite_manifest(path, change):
    """Apply ``change`` to the manifest and store it with a matching checksum."""
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    manifest["manifest_sha256"] = model_format.manifest_checksum(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_a_parameter_the_file_does_not_hold_takes_the_class_default(client, tmp_path):
    model, X = fitted("forest-regressor", client)
    model.save(tmp_path / "model")

    def drop(manifest):
        del manifest["params"]["max_n_estimators"], manifest["params"]["tol"]

    rewrite_manifest(tmp_path / "model", drop)
    loaded = dt.load(tmp_path / "model")
    # The class defaults: they matter only to n_estimators="auto", which this model does not use.
    defaults = dt.RandomForestRegressor().get_params()
    for name in ("max_n_estimators", "tol"):
        assert loaded.get_params()[name] == defaults[name], name
    assert loaded.get_params()["n_estimators"] == model.get_params()["n_estimators"]
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def rewrite_arrays(path, change):
    """Apply ``change`` to the arrays, rewrite the npz (np.savez, pickling object arrays), and
    update the manifest's entries and checksums so that only other checks can object."""
    with np.load(path / "arrays.npz", allow_pickle=False) as npz:
        arrays = dict(npz)
    change(arrays)
    np.savez(path / "arrays.npz", **arrays)

    def describe(manifest):
        manifest["arrays"] = {
            name: {
                "dtype": a.dtype.str,
                "shape": list(a.shape),
                "sha256": hashlib.sha256(a.tobytes()).hexdigest(),
            }
            for name, a in arrays.items()
        }

    rewrite_manifest(path, describe)


def test_truncated_npz(saved):
    path, _, _ = saved
    data = (path / "arrays.npz").read_bytes()
    (path / "arrays.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="arrays.npz is truncated or corrupt"):
        dt.load(path)


def test_truncated_manifest(saved):
    path, _, _ = saved
    text = (path / "manifest.json").read_text()
    (path / "manifest.json").write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match="manifest.json is not valid JSON"):
        dt.load(path)


def test_flipped_byte_in_array_data_fails_a_checksum(saved):
    path, model, _ = saved
    data = bytearray((path / "arrays.npz").read_bytes())
    tree = model.tree_
    bins = tree.bin_threshold[tree.children_left != -1]  # stored for split nodes only
    start = data.find(bins.tobytes())
    assert start > 0
    data[start + 3] ^= 0x10
    (path / "arrays.npz").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"array 'bin_threshold'.*Bad CRC-32"):
        dt.load(path)


@pytest.mark.parametrize("name", ["arrays.npz", "manifest.json"])
def test_flipped_byte_anywhere_is_an_error_or_harmless(saved, name):
    path, model, X = saved
    file = path / name
    data = file.read_bytes()
    expected = model.predict_proba(X)
    offsets = range(0, len(data), max(1, len(data) // 150))
    refused = 0
    for offset in offsets:
        damaged = bytearray(data)
        damaged[offset] ^= 0x04
        file.write_bytes(bytes(damaged))
        try:
            loaded = dt.load(path)
        except ValueError:
            refused += 1
        else:  # a byte zip does not use (a timestamp): the model must be the same
            np.testing.assert_array_equal(loaded.predict_proba(X), expected)
            np.testing.assert_array_equal(loaded.classes_, model.classes_)
    assert refused > len(offsets) / 2  # most bytes matter


def test_rewritten_array_fails_its_checksum(saved):
    path, _, _ = saved
    with np.load(path / "arrays.npz", allow_pickle=False) as npz:
        arrays = dict(npz)
    arrays["value"][0] += 1.0
    np.savez(path / "arrays.npz", **arrays)  # a valid zip, the manifest unchanged: only sha256
    with pytest.raises(ValueError, match="checksum mismatch in array 'value'.*modified"):
        dt.load(path)


def test_modified_manifest_fails_its_checksum(saved):
    path, _, _ = saved
    text = (path / "manifest.json").read_text()
    (path / "manifest.json").write_text(text.replace('"high"', '"hogh"'))
    with pytest.raises(ValueError, match="manifest.json: checksum mismatch"):
        dt.load(path)


def _files(directory):
    """Every file under ``directory`` with its bytes, by relative path."""
    return {
        str(f.relative_to(directory)): f.read_bytes() for f in directory.rglob("*") if f.is_file()
    }


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_an_older_format_version_is_refused_and_nothing_written(saved, version):
    # Only the current format is read (docs/models.md, "Format versions"): a file of an older
    # one, its checksum matching as its writer made it, is refused before any other check.
    path, _, _ = saved
    rewrite_manifest(path, lambda m: m.update(format_version=version))
    before = _files(path.parent)
    with pytest.raises(ValueError) as refused:
        dt.load(path)
    message = str(refused.value)
    assert message == (
        f"{path / 'manifest.json'} was written in model format {version}; this dasktrees reads "
        "format 5 only: refit the model and save it again"
    )
    with pytest.raises(ValueError, match=f"written in model format {version}; this dasktrees"):
        read_manifest(path)
    assert _files(path.parent) == before  # nothing upgraded, moved or left behind


@pytest.mark.parametrize(
    "version, message",
    [
        (7, "model format 7; this dasktrees reads format 5 only: it was written by a newer"),
        ("5", "field 'format_version' must be an int, got '5'"),
        (None, "field 'format_version' must be an int, got None"),
    ],
)
def test_a_newer_or_malformed_format_version_is_refused(saved, version, message):
    path, _, _ = saved
    rewrite_manifest(path, lambda m: m.update(format_version=version))
    with pytest.raises(ValueError, match=message):
        dt.load(path)


def test_not_a_model(tmp_path):
    with pytest.raises(FileNotFoundError):
        dt.load(tmp_path / "nothing")
    with pytest.raises(ValueError, match="has no manifest.json"):
        dt.load(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "something-else"}')
    with pytest.raises(ValueError, match="is not a dasktrees model"):
        dt.load(tmp_path)


def test_missing_field(saved):
    path, _, _ = saved
    rewrite_manifest(path, lambda m: m["trees"].pop("node_counts"))
    with pytest.raises(ValueError, match="trees: missing field 'node_counts'"):
        dt.load(path)


@pytest.mark.parametrize("name", ["Pipeline", "os.system", "BaseForest"])
def test_estimator_outside_the_allowlist(saved, name):
    path, _, _ = saved
    rewrite_manifest(path, lambda m: m.update(estimator=name))
    with pytest.raises(ValueError, match=f"estimator '{name}' is not one of"):
        dt.load(path)


class _Payload:
    """Unpickling this runs ``Path.touch(marker)``: what a pickle inside a model could do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_object_array_is_refused_without_running_it(saved, tmp_path):
    path, _, _ = saved
    marker = tmp_path / "payload-ran"
    hostile = np.array([_Payload(marker)] * 3, dtype=object)
    rewrite_arrays(path, lambda arrays: arrays.update(value=hostile))
    with pytest.raises(ValueError, match="array 'value' holds Python objects.*refused"):
        dt.load(path)
    assert not marker.exists()
    np.load(path / "arrays.npz", allow_pickle=True)["value"]  # the payload is live: it runs here
    assert marker.exists()


def test_missing_and_extra_arrays(saved):
    path, _, _ = saved
    with np.load(path / "arrays.npz", allow_pickle=False) as npz:
        arrays = dict(npz)
    np.savez(path / "arrays.npz", **arrays, extra=np.zeros(3))
    with pytest.raises(ValueError, match="unexpected array 'extra', not in the manifest"):
        dt.load(path)
    np.savez(path / "arrays.npz", **{k: a for k, a in arrays.items() if k != "value"})
    with pytest.raises(ValueError, match=r"arrays.npz is missing arrays \['value'\]"):
        dt.load(path)
    rewrite_arrays(path, lambda arrays: arrays.update(extra=np.zeros(3)))
    with pytest.raises(ValueError, match=r"manifest.json: lists arrays .*'extra'"):
        dt.load(path)


def test_inconsistent_tree_is_refused_before_the_kernels_see_it(saved):
    path, _, _ = saved

    # Children stored (a tree not numbered depth-first), the root's pointing outside: the
    # kernels would read far outside the table.
    rewrite_arrays(path, _children_with(0, 10**6))
    with pytest.raises(ValueError, match="tree 0, node 0: a child outside its tree"):
        dt.load(path)


def test_read_manifest_needs_no_arrays(saved):
    path, model, _ = saved
    (path / "arrays.npz").unlink()
    manifest = read_manifest(path)
    assert manifest["estimator"] == "DecisionTreeClassifier"
    assert manifest["classes"] == {"dtype": model.classes_.dtype.str, "values": ["high", "low"]}
    assert manifest["feature_names"] == list(model.feature_names_in_)
    with pytest.raises(ValueError, match="arrays.npz is missing"):
        dt.load(path)


@pytest.fixture(scope="module")
def quantile_forest(client):
    """A small quantile forest (model, X); each test saves it where it damages it."""
    X, y = carseats_data("numpy-float")
    model = dt.RandomForestQuantileRegressor(n_estimators=3, max_depth=4, random_state=0)
    return model.set_params(client=client).fit(X, y), X


def _set(name, index, value):
    def change(arrays):
        arrays[name][index] = value

    return change


def _halve_last_leaf(arrays):
    """Every cumulative weight of the last leaf halved: still rising, ending at 0.5."""
    arrays["leaf_cum_weights"][arrays["leaf_offsets"][-2] :] *= 0.5


def _swap_in_a_leaf(arrays):
    """The first two targets of the first leaf with two swapped: no longer increasing."""
    offsets = arrays["leaf_offsets"]
    first = offsets[:-1][np.diff(offsets) >= 2][0]
    ids = arrays["leaf_target_ids"]
    ids[first], ids[first + 1] = ids[first + 1], ids[first]


def _replace(name, make):
    def change(arrays):
        arrays[name] = make(arrays[name])

    return change


LEAF_TARGET_DAMAGE = [
    ("offsets-start", _set("leaf_offsets", 0, 1), "leaf_offsets'.*must start at 0, got 1"),
    ("offsets-decrease", _set("leaf_offsets", 2, 0), "leaf_offsets'.*must not decrease"),
    (
        "offsets-end",
        _set("leaf_offsets", -1, 10**9),
        "leaf_offsets'.*must end at the number of entries",
    ),
    (
        "offsets-per-leaf",
        _replace("leaf_offsets", lambda a: a[:-1]),
        "leaf_offsets'.*one per leaf of the forest",
    ),
    (
        "target-id-outside",
        _set("leaf_target_ids", 0, 2**31),
        "leaf_target_ids'.*must be indices into leaf_targets",
    ),
    ("target-ids-swapped", _swap_in_a_leaf, "leaf_target_ids'.*must increase within each leaf"),
    (
        "cum-weight-zero",
        _set("leaf_cum_weights", 0, 0.0),
        r"leaf_cum_weights'.*must be in \(0, 1\]",
    ),
    (
        "cum-weight-nan",
        _set("leaf_cum_weights", 0, np.nan),
        r"leaf_cum_weights'.*must be in \(0, 1\]",
    ),
    ("last-weight-below-1", _halve_last_leaf, "leaf_cum_weights'.*each leaf's last must be 1"),
    (
        "targets-unsorted",
        _replace("leaf_targets", lambda a: a[::-1].copy()),
        "leaf_targets'.*must be sorted",
    ),
    ("targets-inf", _set("leaf_targets", -1, np.inf), "leaf_targets'.*must be finite"),
    (
        "weights-short",
        _replace("leaf_cum_weights", lambda a: a[:-1]),
        "leaf_cum_weights'.*expected",
    ),
]


@pytest.mark.parametrize(
    "change, message", [c[1:] for c in LEAF_TARGET_DAMAGE], ids=[c[0] for c in LEAF_TARGET_DAMAGE]
)
def test_damaged_leaf_targets_are_refused_with_the_array_named(
    quantile_forest, tmp_path, change, message
):
    model, X = quantile_forest
    path = tmp_path / "model"
    model.save(path)
    rewrite_arrays(path, change)
    with pytest.raises(ValueError, match=message):
        dt.load(path)


def test_missing_leaf_targets_are_refused(quantile_forest, tmp_path):
    model, _ = quantile_forest
    path = tmp_path / "model"
    model.save(path)
    rewrite_arrays(path, lambda arrays: arrays.pop("leaf_cum_weights"))
    with pytest.raises(ValueError, match="lists arrays .*expected .*'leaf_cum_weights'"):
        dt.load(path)


def _assert_same_trees(a, b):
    """Trees ``a`` and ``b`` array for array, but each categorical split's subset compared
    rather than the bitset table's layout (trees share a row between equal subsets)."""
    np.testing.assert_array_equal(a.tree_.bitset_idx >= 0, b.tree_.bitset_idx >= 0)
    np.testing.assert_array_equal(_split_subsets(a.tree_), _split_subsets(b.tree_))
    for array in TREE_ARRAYS:
        if array not in ("bitset_idx", "categorical_bitsets"):
            np.testing.assert_array_equal(getattr(a.tree_, array), getattr(b.tree_, array))


def _split_subsets(tree):
    """The bitset row of each categorical split, in node order."""
    return tree.categorical_bitsets[tree.bitset_idx[tree.bitset_idx >= 0]]


def _stored_bytes(model, path):
    """Save ``model`` to ``path``: the bytes of each array the file holds, by name."""
    model.save(path)
    with np.load(path / "arrays.npz", allow_pickle=False) as npz:
        return {name: npz[name].nbytes for name in npz.files}


def test_a_file_stores_what_the_tasks_ship_and_loads_it_compact(tmp_path):
    X, y = carseats_data("frame-str")
    forest = dt.RandomForestClassifier(n_estimators=5, random_state=0).fit(X, y)
    stored = _stored_bytes(forest, tmp_path / "model")
    derived = {"threshold", "is_categorical", "node_depth", "impurity"}
    assert (derived | {"value", "weighted_n_node_samples"}).isdisjoint(stored)
    assert "weighted_class_counts" not in stored  # a split node's are its children's summed
    assert {"is_split", "leaf_class_counts", "leaf_n_node_samples"} <= set(stored)
    assert "n_node_samples" not in stored
    # No children: the flags number the nodes depth-first, as the grower does.
    assert {"children_left", "children_right"}.isdisjoint(stored)
    n_nodes = sum(est.tree_.node_count for est in forest.estimators_)
    # Two weighted class counts (16 bytes) and a row count (4) a leaf, 15 bytes a split node
    # (about half the nodes each), a bit a node, and 32 bytes a categorical split's bitset (19.0
    # a node here): version 1 stored 71.5 bytes a node.
    tree_bytes = sum(stored[name] for name in model_format.SHIPPED_ARRAYS if name in stored)
    assert tree_bytes / n_nodes < 20
    loaded = dt.load(tmp_path / "model")
    assert all(est.tree_.shipped_state is not None for est in loaded.estimators_)
    np.testing.assert_array_equal(loaded.predict_proba(X), forest.predict_proba(X))
    np.testing.assert_array_equal(loaded.feature_importances_, forest.feature_importances_)
    for a, b in zip(loaded.estimators_, forest.estimators_):
        assert a.tree_.max_depth == b.tree_.max_depth
        for array in TREE_ARRAYS:
            np.testing.assert_array_equal(getattr(a.tree_, array), getattr(b.tree_, array))


def _explicit_children(arrays):
    """A one-tree file's left children, as a file stores them when its nodes are not numbered
    depth-first (a full binary tree: 2 x splits + 1 nodes)."""
    n_splits = len(arrays["feature"])
    left = np.empty(n_splits, dtype=np.int32)
    assert depth_first_children(arrays["is_split"], 2 * n_splits + 1, left) == 2 * n_splits + 1
    return left


def _children_with(split, child):
    def change(arrays):
        left = _explicit_children(arrays)
        left[split] = child
        arrays["children_left"] = left.astype(np.uint32)

    return change


def _swap_last_split_and_leaf(arrays):
    # As many split nodes, but flags no depth-first numbering gives (a leaf's children would
    # come before the last node's).
    is_split = np.unpackbits(arrays["is_split"])[: 2 * len(arrays["feature"]) + 1]
    last_split = np.flatnonzero(is_split)[-1]
    is_split[last_split], is_split[-1] = 0, 1
    arrays["is_split"] = np.packbits(is_split)


def _flip_first_leaf_to_split(arrays):
    is_split = np.unpackbits(arrays["is_split"])
    is_split[np.flatnonzero(is_split == 0)[0]] = 1
    arrays["is_split"] = np.packbits(is_split)


def _split_bits(arrays, name, change):
    n_splits = len(arrays["feature"])
    bits = np.unpackbits(arrays[name], count=n_splits)
    change(bits)
    arrays[name] = np.packbits(bits)


def _numeric_split_on_a_categorical_feature(arrays):
    def move_first_categorical_bit(bits):  # as many categorical splits as the manifest counts
        categorical, numeric = np.flatnonzero(bits)[0], np.flatnonzero(bits == 0)[0]
        bits[categorical], bits[numeric] = 0, 1

    _split_bits(arrays, "is_categorical_bits", move_first_categorical_bit)


def _one_more_categorical_split(arrays):
    _split_bits(arrays, "is_categorical_bits", lambda bits: bits.fill(1))


def _categorical_split_without_its_bitset(arrays):
    rows = arrays["categorical_bitset_idx"]
    rows[:] = np.iinfo(rows.dtype).max


@pytest.mark.parametrize(
    "change, message",
    [
        (_flip_first_leaf_to_split, r"tree 0: is_split marks \d+ split nodes, the manifest counts"),
        (
            _one_more_categorical_split,
            r"tree 0: is_categorical_bits marks \d+ categorical split nodes, the manifest counts",
        ),
        (_children_with(0, 2), "tree 0, node 1: not exactly one parent"),
        (_swap_last_split_and_leaf, "tree 0: is_split does not number 15 nodes depth-first"),
        (_set("feature", 0, 250), "tree 0, node 0: no such feature"),
        (_numeric_split_on_a_categorical_feature, "a categorical split on a numeric feature, or"),
        (_categorical_split_without_its_bitset, "no such categorical bitset"),
    ],
)
def test_inconsistent_trees_are_refused(tmp_path, change, message):
    X, y = carseats_data("frame-str")
    model = dt.DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, y)
    model.save(tmp_path / "model")
    assert read_manifest(tmp_path / "model")["trees"]["categorical_split_counts"][0] > 0
    rewrite_arrays(tmp_path / "model", change)
    with pytest.raises(ValueError, match=message):
        dt.load(tmp_path / "model")


def test_a_classifier_with_pruned_trees_stores_fractions_and_weights(tmp_path):
    # A pruned tree arrives with its arrays (its fractions, not class weights): a forest holding
    # one stores every tree's fractions and weights, those of its shipped trees derived exactly.
    X, y = carseats_data("frame-str")
    forest = dt.RandomForestClassifier(n_estimators=2, warm_start=True, random_state=0).fit(X, y)
    forest.set_params(n_estimators=4, ccp_alpha=0.005).fit(X, y)
    kinds = [est.tree_.shipped_state is not None for est in forest.estimators_]
    assert kinds == [True, True, False, False]
    forest.save(tmp_path / "model")
    with np.load(tmp_path / "model" / "arrays.npz", allow_pickle=False) as npz:
        assert {"leaf_class_counts", "weighted_class_counts"}.isdisjoint(npz.files)
        assert "value" in npz.files
    loaded = dt.load(tmp_path / "model")
    np.testing.assert_array_equal(loaded.predict_proba(X), forest.predict_proba(X))
    for a, b in zip(loaded.estimators_, forest.estimators_):
        for array in TREE_ARRAYS:
            np.testing.assert_array_equal(getattr(a.tree_, array), getattr(b.tree_, array))


def test_a_regressor_stores_its_leaves_means_and_impurities(tmp_path):
    # A split node's mean and impurity are its children's pooled (``tree.pool_to_root``): a
    # file holds the leaves' only, and gives back every node's bit for bit. Of the leaves'
    # impurities, the ones that are not zero (few in a full-depth tree), and a bit a leaf.
    X, y = carseats_data("frame-float")
    forest = dt.RandomForestRegressor(n_estimators=5, random_state=0).fit(X, y)
    stored = _stored_bytes(forest, tmp_path / "model")
    assert {"leaf_value", *NONZERO_LEAF_IMPURITY} <= set(stored)
    assert {"value", "impurity", "weighted_n_node_samples"}.isdisjoint(stored)
    n_nodes = sum(est.tree_.node_count for est in forest.estimators_)
    leaf_impurity = np.concatenate(
        [est.tree_.impurity[est.tree_.children_left == TREE_LEAF] for est in forest.estimators_]
    )
    assert stored["nonzero_leaf_impurity"] == 8 * np.count_nonzero(leaf_impurity)
    assert np.count_nonzero(leaf_impurity) < 0.1 * len(leaf_impurity)
    # A leaf: its mean (8 bytes), its weight and rows (a byte each here), a bit; a split node:
    # a left child (4), feature and bin (1 each), two bits. About half the nodes each.
    tree_bytes = sum(stored[name] for name in model_format.SHIPPED_ARRAYS if name in stored)
    assert tree_bytes / n_nodes < 9
    loaded = dt.load(tmp_path / "model")
    np.testing.assert_array_equal(loaded.predict(X), forest.predict(X))
    np.testing.assert_array_equal(loaded.feature_importances_, forest.feature_importances_)
    assert all(est.tree_.shipped_state is not None for est in loaded.estimators_)
    for a, b in zip(loaded.estimators_, forest.estimators_):
        _assert_same_trees(a, b)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a: a.update(nonzero_leaf_impurity=a["nonzero_leaf_impurity"][1:]), "marks [1-9]"),
        (lambda a: a["nonzero_leaf_impurity_bits"].fill(0), "marks 0"),
    ],
    ids=["an impurity too few", "no leaf marked"],
)
def test_leaf_impurities_that_their_bits_do_not_count_are_refused(tmp_path, change, message):
    X, y = carseats_data("frame-float")
    forest = dt.RandomForestRegressor(n_estimators=2, random_state=0).fit(X, y)
    forest.save(tmp_path / "model")
    rewrite_arrays(tmp_path / "model", change)
    match = f"nonzero_leaf_impurity_bits {message} leaves, nonzero_leaf_impurity holds"
    with pytest.raises(ValueError, match=match):
        dt.load(tmp_path / "model")


def test_a_regressor_with_unpooled_means_stores_every_nodes(tmp_path):
    # One tree whose split nodes' means are not its children's pooled (a tree edited, or built
    # outside the grower): the file stores every node's means and impurities, of every tree.
    X, y = carseats_data("frame-float")
    forest = dt.RandomForestRegressor(n_estimators=3, max_depth=5, random_state=0).fit(X, y)
    tree = forest.estimators_[1].tree_
    root_mean = tree.value[0, 0]  # expands the tree: it keeps its arrays
    tree.value[0, 0] = np.nextafter(root_mean, np.inf)
    forest.save(tmp_path / "model")
    with np.load(tmp_path / "model" / "arrays.npz", allow_pickle=False) as npz:
        assert {"value", "impurity"} <= set(npz.files)
        assert {"leaf_value", *NONZERO_LEAF_IMPURITY}.isdisjoint(npz.files)
    loaded = dt.load(tmp_path / "model")
    assert loaded.estimators_[1].tree_.value[0, 0] == np.nextafter(root_mean, np.inf)
    np.testing.assert_array_equal(loaded.predict(X), forest.predict(X))
    for a, b in zip(loaded.estimators_, forest.estimators_):
        _assert_same_trees(a, b)


def _in_preorder(tree):
    """The same tree with its nodes numbered in preorder: a right child after its sibling's
    subtree (as other writers number them), not after the left child as the grower does."""
    order, stack = [], [0]
    while stack:
        i = stack.pop()
        order.append(i)
        if tree.children_left[i] != -1:
            stack += [tree.children_right[i], tree.children_left[i]]
    new_id = np.empty(tree.node_count, dtype=np.int32)
    new_id[order] = np.arange(tree.node_count)
    arrays = {
        name: getattr(tree, name) if name == "categorical_bitsets" else getattr(tree, name)[order]
        for name in TREE_ARRAYS
    }
    for name in ("children_left", "children_right"):
        child = arrays[name]
        arrays[name] = np.where(child == -1, -1, new_id[child]).astype(np.int32)
    return Tree(tree.n_features, **arrays)


def test_trees_numbered_otherwise_store_their_right_children(tmp_path):
    X, y = carseats_data("frame-str")
    forest = dt.RandomForestClassifier(n_estimators=3, max_depth=5, random_state=0).fit(X, y)
    expected = forest.predict_proba(X)
    forest.estimators_[1].tree_ = _in_preorder(forest.estimators_[1].tree_)
    assert forest.estimators_[1].tree_.children_right[0] != 2
    np.testing.assert_array_equal(forest.predict_proba(X), expected)
    forest.save(tmp_path / "model")
    with np.load(tmp_path / "model" / "arrays.npz", allow_pickle=False) as npz:
        assert "children_right" in npz.files  # for every tree, since one needs them
    loaded = dt.load(tmp_path / "model")
    np.testing.assert_array_equal(loaded.predict_proba(X), expected)
    for a, b in zip(loaded.estimators_, forest.estimators_):
        for array in TREE_ARRAYS:
            np.testing.assert_array_equal(getattr(a.tree_, array), getattr(b.tree_, array))


def test_fractional_weights_store_every_nodes_class_counts(tmp_path):
    # With fractional weights a node's counts are not its children's summed, bit for bit: the
    # trees ship, and the file stores, every node's.
    X, y = carseats_data("frame-str")
    weights = np.random.default_rng(0).uniform(0.1, 3.0, len(y))
    forest = dt.RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y, weights)
    states = [est.tree_.shipped_state for est in forest.estimators_]
    assert all("weighted_class_counts" in state for state in states)
    forest.save(tmp_path / "model")
    with np.load(tmp_path / "model" / "arrays.npz", allow_pickle=False) as npz:
        assert "weighted_class_counts" in npz.files and "leaf_class_counts" not in npz.files
    loaded = dt.load(tmp_path / "model")
    np.testing.assert_array_equal(loaded.predict_proba(X), forest.predict_proba(X))
    for a, b in zip(loaded.estimators_, forest.estimators_):
        for array in TREE_ARRAYS:
            np.testing.assert_array_equal(getattr(a.tree_, array), getattr(b.tree_, array))


def test_trees_of_whole_and_fractional_weights_store_every_nodes_weights(tmp_path):
    # A regressor ships its leaves' weights when they are whole numbers (bootstrap counts), every
    # node's when fractional weights make a node's differ from its children's summed: a forest
    # holding both kinds of trees stores every node's, derived exactly for the first kind.
    X, y = carseats_data("frame-float")
    forest = dt.RandomForestRegressor(n_estimators=2, warm_start=True, random_state=0).fit(X, y)
    weights = np.random.default_rng(0).uniform(0.5, 2.0, len(y))
    forest.set_params(n_estimators=4).fit(X, y, sample_weight=weights)
    states = [est.tree_.shipped_state for est in forest.estimators_]
    assert ["leaf_weighted_n_node_samples" in s for s in states] == [True, True, False, False]
    forest.save(tmp_path / "model")
    with np.load(tmp_path / "model" / "arrays.npz", allow_pickle=False) as npz:
        assert "leaf_weighted_n_node_samples" not in npz.files
        assert npz["weighted_n_node_samples"].dtype == np.float64
    loaded = dt.load(tmp_path / "model")
    np.testing.assert_array_equal(loaded.predict(X), forest.predict(X))
    np.testing.assert_array_equal(loaded.feature_importances_, forest.feature_importances_)
    for a, b in zip(loaded.estimators_, forest.estimators_):
        for array in TREE_ARRAYS:
            np.testing.assert_array_equal(getattr(a.tree_, array), getattr(b.tree_, array))


def _set(name, index, value):
    def change(arrays):
        arrays[name][index] = value

    return change


def _swap_first_edges(arrays):
    edges = arrays["bin_edges"]
    edges[0], edges[1] = edges[1], edges[0]


@pytest.mark.parametrize(
    "change, message",
    [
        (_set("leaf_value", 3, np.nan), "'leaf_value' holds NaN or infinity"),
        (_set("leaf_value", 0, -np.inf), "'leaf_value' holds NaN or infinity"),
        (_set("bin_values", 5, np.inf), "'bin_values' holds NaN or infinity"),
        (_set("nonzero_leaf_impurity", 0, -1.0), "'nonzero_leaf_impurity' holds a negative"),
        (_swap_first_edges, "'bin_edges': feature 0: not increasing"),
    ],
    ids=["NaN mean", "infinite mean", "infinite bin value", "negative impurity", "edges"],
)
def test_numbers_fitting_never_makes_are_refused(tmp_path, change, message):
    # Checksums pass and the trees are whole, but the forest would predict NaN or infinity, or
    # bin the rows it predicts on wrongly, without a word.
    X, y = carseats_data("frame-float")
    forest = dt.RandomForestRegressor(n_estimators=2, random_state=0).fit(X, y)
    forest.save(tmp_path / "model")
    dt.load(tmp_path / "model")  # whole, it loads
    rewrite_arrays(tmp_path / "model", change)
    with pytest.raises(ValueError, match=message):
        dt.load(tmp_path / "model")


def test_negative_class_weights_are_refused(tmp_path):
    X, y = carseats_data("frame-str")
    dt.RandomForestClassifier(n_estimators=2, random_state=0).fit(X, y).save(tmp_path / "model")

    def negative(arrays):
        arrays["leaf_class_counts"] = arrays["leaf_class_counts"].astype("<f8")
        arrays["leaf_class_counts"][0, 0] = -1.0

    rewrite_arrays(tmp_path / "model", negative)
    with pytest.raises(ValueError, match="'leaf_class_counts' holds a negative weight"):
        dt.load(tmp_path / "model")


def _mutated(arrays, rng):
    """``arrays`` with one random edit of one array: an element set to a boundary value (or
    NaN / infinity), a bit flipped, the array one entry shorter or longer, or another dtype."""
    name = sorted(arrays)[rng.integers(len(arrays))]
    a = arrays[name].copy()
    kind = rng.integers(5)
    if kind <= 1 and a.size:
        flat = a.reshape(-1)
        i = rng.integers(a.size)
        if a.dtype.kind in "iu":
            info = np.iinfo(a.dtype)
            top = int(flat.max())
            candidates = [0, 1, -1, top, top + 1, a.size, a.size + 1, info.max, info.min]
            flat[i] = min(max(candidates[rng.integers(len(candidates))], info.min), info.max)
        else:
            # (No huge finite value: squared in the importances, 1e300 would overflow as it
            # would in a forest fitted on such targets.)
            flat[i] = [np.nan, np.inf, -np.inf, -1.0, 0.0, 1e6][rng.integers(6)]
    elif kind == 2 and a.size and a.dtype == np.uint8:
        a.reshape(-1)[rng.integers(a.size)] ^= np.uint8(1 << rng.integers(8))
    elif kind == 3 and a.size:
        a = a[:-1]
    elif kind == 4 and a.size:
        a = np.concatenate([a, a[-1:]])
    else:
        a = a.astype(np.float32 if a.dtype.kind == "f" else np.int64)
    return {**arrays, name: a}


@pytest.fixture(scope="module")
def small_forests(tmp_path_factory):
    """Small forests of every stored layout, saved: categorical and missing values, a
    regressor, best-first trees (which store their children) and pruned trees."""
    X, y = carseats_data("frame-str")
    X = X.copy()
    X.loc[X.index[::7], "Price"] = np.nan
    X_float, y_float = carseats_data("frame-float")
    fits = {
        "classifier": (dt.RandomForestClassifier(n_estimators=2, random_state=0), X, y),
        "regressor": (dt.RandomForestRegressor(n_estimators=2, random_state=0), X_float, y_float),
        "best-first": (
            dt.RandomForestClassifier(n_estimators=2, max_leaf_nodes=20, random_state=0),
            X,
            y,
        ),
        "pruned": (
            dt.RandomForestRegressor(n_estimators=2, ccp_alpha=0.05, random_state=0),
            X_float,
            y_float,
        ),
    }
    root = tmp_path_factory.mktemp("forests")
    saved = {}
    for name, (model, X_fit, y_fit) in fits.items():
        model.fit(X_fit, y_fit).save(root / name)
        saved[name] = (root / name, X_fit.iloc[:40])
    return saved


@pytest.mark.parametrize("layout", ["classifier", "regressor", "best-first", "pruned"])
def test_single_edits_to_the_arrays_are_refused_or_predict_finite_numbers(
    small_forests, tmp_path, layout
):
    # Each file is resealed with matching checksums, so that only the checks of the trees and
    # their numbers stand between an edit and the kernels. A kernel reading out of bounds
    # would crash the test process; anything but ValueError / TypeError fails the test.
    saved, X = small_forests[layout]
    with np.load(saved / "arrays.npz", allow_pickle=False) as npz:
        arrays = dict(npz)
    rng = np.random.default_rng(0)
    refused = 0
    for _ in range(60):
        path = tmp_path / "model"
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(saved, path)
        mutated = _mutated(arrays, rng)
        rewrite_arrays(path, lambda a, mutated=mutated: (a.clear(), a.update(mutated)))
        try:
            model = dt.load(path)
        except (ValueError, TypeError):
            refused += 1
            continue
        classifier = layout in ("classifier", "best-first")
        prediction = model.predict_proba(X) if classifier else model.predict(X)
        assert np.all(np.isfinite(prediction))
        if prediction.ndim == 2:
            np.testing.assert_allclose(prediction.sum(axis=1), 1.0)
        assert np.all(np.isfinite(model.feature_importances_))
    assert refused > 20  # the edits reach the checks

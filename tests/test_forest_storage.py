"""Forests kept on the workers (``tree_storage="workers"``): the oracle is the same forest held on
the client (``tree_storage="client"``), and every result must be the same, bit for bit.

The shards are the trees of each tree task, on the worker that grew them; a prediction sends each
block of rows through them in tree order, so the sums are those of the client's forest.
"""

import pickle

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification, make_regression

from dasktrees import (
    ExtraTreesClassifier,
    ExtraTreesQuantileRegressor,
    RandomForestClassifier,
    RandomForestQuantileRegressor,
    RandomForestRegressor,
)
from dasktrees.distributed import shards as shards_module
from dasktrees.estimators.loading import describe


def fit_pair(cls, X, y, client, **params):
    """The same forest fitted twice, its trees on the client and on the workers."""
    params = {"n_estimators": 10, "random_state": 0, "client": client, **params}
    on_client = cls(tree_storage="client", **params).fit(X, y)
    on_workers = cls(tree_storage="workers", **params).fit(X, y)
    assert on_client.tree_storage_ == "client"
    assert on_workers.tree_storage_ == "workers"
    return on_client, on_workers


def assert_same_predictions(a, b, X):
    """Every prediction method on X (numpy) and on X as a dask array and dataframe (computed
    on the forest's cluster, which is not the default one)."""
    client = b._tree_shards.client
    methods = ["predict", "apply"]
    methods += ["predict_proba", "predict_log_proba"] if hasattr(a, "classes_") else []
    X_dask = da.from_array(X, chunks=(len(X) // 3 + 1, X.shape[1]))
    X_frame = dd.from_pandas(pd.DataFrame(X), npartitions=2)
    for method in methods:
        expected = getattr(a, method)(X)
        np.testing.assert_array_equal(getattr(b, method)(X), expected, err_msg=method)
        for X_lazy in (X_dask, X_frame):
            lazy = getattr(b, method)(X_lazy)
            np.testing.assert_array_equal(client.compute(lazy, sync=True), expected)


@pytest.fixture(scope="module")
def classification():
    X, y = make_classification(600, 8, n_informative=5, n_classes=3, random_state=0)
    return X, y


@pytest.fixture(scope="module")
def regression():
    return make_regression(500, 6, noise=5.0, random_state=1)


def test_classifier_same_on_workers(client, classification):
    X, y = classification
    a, b = fit_pair(RandomForestClassifier, X, y, client, oob_score=True, trees_per_task=3)
    # Shards of 3, 3, 3 and 1 trees: a forest in four parts, in runs on the workers (a block
    # of rows visits each worker once), each worker with trees.
    assert len(b._tree_shards.parts) == 4 and len(b) == len(a) == 10
    # (Asked for, not enforced: a shard may run elsewhere, on a busy or lost worker.)
    targets = shards_module.placements(client, [3, 3, 3, 1])
    assert targets == sorted(targets) and len(set(targets)) == 2
    assert b._tree_shards.workers == targets
    assert_same_predictions(a, b, X[:100])
    np.testing.assert_array_equal(b.feature_importances_, a.feature_importances_)
    np.testing.assert_array_equal(b.feature_importances_std_, a.feature_importances_std_)
    assert b.oob_score_ == a.oob_score_
    np.testing.assert_array_equal(b.oob_curve_, a.oob_curve_)
    np.testing.assert_array_equal(b.oob_decision_function_, a.oob_decision_function_)


def test_regressor_same_on_workers(client, regression):
    X, y = regression
    a, b = fit_pair(RandomForestRegressor, X, y, client, oob_score=True, trees_per_task=4)
    assert_same_predictions(a, b, X[:50])
    for mean_std_a, mean_std_b in zip(a.predict(X, return_std=True), b.predict(X, return_std=True)):
        np.testing.assert_array_equal(mean_std_b, mean_std_a)
    assert b.oob_score_ == a.oob_score_
    np.testing.assert_array_equal(b.oob_prediction_, a.oob_prediction_)
    np.testing.assert_array_equal(b.predict_interval(X[:50]), a.predict_interval(X[:50]))
    a.set_params(aggregation="median")
    b.set_params(aggregation="median")
    np.testing.assert_array_equal(b.predict(X[:50]), a.predict(X[:50]))


@pytest.mark.parametrize("voting", ["soft", "hard"])
def test_explanations_and_importances_same_on_workers(client, classification, voting):
    X, y = classification
    a, b = fit_pair(
        RandomForestClassifier, X, y, client, voting=voting, trees_per_task=3, max_depth=6
    )
    np.testing.assert_array_equal(b.shap_values(X[:40]), a.shap_values(X[:40]))
    lazy = b.shap_values(da.from_array(X[:40], chunks=15))
    np.testing.assert_array_equal(client.compute(lazy, sync=True), a.shap_values(X[:40]))
    np.testing.assert_array_equal(b.shap_expected_value_, a.shap_expected_value_)
    for method in ("oob_impurity_importance", "oob_permutation_importance"):
        kwargs = {"random_state": 4} if method == "oob_permutation_importance" else {}
        expected = getattr(a, method)(X, y, **kwargs)
        got = getattr(b, method)(X, y, **kwargs)
        np.testing.assert_array_equal(got.importances, expected.importances, err_msg=method)


def test_regressor_explanations_same_on_workers(client, regression):
    X, y = regression
    a, b = fit_pair(RandomForestRegressor, X, y, client, trees_per_task=4, max_depth=8)
    np.testing.assert_array_equal(b.shap_values(X[:30]), a.shap_values(X[:30]))
    assert b.shap_expected_value_ == a.shap_expected_value_
    expected, got = a.oob_impurity_importance(X, y), b.oob_impurity_importance(X, y)
    np.testing.assert_array_equal(got.importances, expected.importances)


@pytest.mark.parametrize(
    "cls, params",
    [
        # Deep trees: a row's few targets a tree are gathered and sorted.
        (RandomForestQuantileRegressor, {}),
        # Stumps: more than 2,048 targets reached a row, each quantile found by bisection.
        (ExtraTreesQuantileRegressor, {"max_depth": 1, "bootstrap": True, "n_estimators": 20}),
    ],
)
def test_quantile_forest_same_on_workers(client, regression, cls, params, tmp_path):
    import dasktrees

    X, y = regression
    a, b = fit_pair(cls, X, y, client, oob_score=True, trees_per_task=3, **params)
    # The shards keep their leaves' targets: none on the client.
    assert b.leaf_targets_ is None and len(b._tree_shards.parts) > 1
    rows, quantiles = X[:120], [0.05, 0.5, 0.9, 0.95]
    expected = a.predict(rows, quantiles)
    np.testing.assert_array_equal(b.predict(rows, quantiles), expected)
    np.testing.assert_array_equal(b.predict(rows, 0.3), a.predict(rows, 0.3))
    lazy = b.predict(da.from_array(rows, chunks=(50, X.shape[1])), quantiles)
    np.testing.assert_array_equal(client.compute(lazy, sync=True), expected)
    np.testing.assert_array_equal(b.predict(rows), a.predict(rows))
    np.testing.assert_array_equal(b.oob_quantiles_, a.oob_quantiles_)
    assert b.oob_coverage_ == a.oob_coverage_
    np.testing.assert_array_equal(b.predict_interval(rows, 0.8), a.predict_interval(rows, 0.8))
    # Saved from the workers, loaded onto them or here: the same quantiles; here, and brought
    # home, the client forest's leaf targets, array for array.
    b.save(tmp_path / "model")
    onto_workers = dasktrees.load(tmp_path / "model", client=client)
    here = dasktrees.load(tmp_path / "model")
    assert onto_workers.leaf_targets_ is None
    for forest in (onto_workers, here, b.gather_trees()):
        np.testing.assert_array_equal(forest.predict(rows, quantiles), expected)
    for forest in (here, b):
        for mine, theirs in zip(forest.leaf_targets_.arrays(), a.leaf_targets_.arrays()):
            assert mine.dtype == theirs.dtype
            np.testing.assert_array_equal(mine, theirs)


def test_hard_voting_extra_trees_and_dask_fit(client, classification):
    X, y = classification
    Xd, yd = da.from_array(X, chunks=200), da.from_array(y, chunks=200)
    a, b = fit_pair(ExtraTreesClassifier, Xd, yd, client, voting="hard", trees_per_task=2)
    assert_same_predictions(a, b, X[:60])


def test_one_row_and_tree_access(client, classification):
    X, y = classification
    a, b = fit_pair(RandomForestClassifier, X, y, client, trees_per_task=4)
    np.testing.assert_array_equal(b.predict_proba(X[:1]), a.predict_proba(X[:1]))
    # A tree asked for comes from its shard: the same tree as the client's.
    for t in (0, 5, -1):
        np.testing.assert_array_equal(b[t].predict_proba(X), a[t].predict_proba(X))
        np.testing.assert_array_equal(b.estimators_[t].tree_.value, a.estimators_[t].tree_.value)
    assert len(b.estimators_[2:7]) == 5
    for t in (10, -11):
        with pytest.raises(IndexError, match=f"tree index {t} out of range for 10 trees"):
            b.estimators_[t]


def test_gather_trees_gives_the_client_forest(client, classification):
    X, y = classification
    a, b = fit_pair(RandomForestClassifier, X, y, client, trees_per_task=3)
    assert b.gather_trees() is b
    assert b.tree_storage_ == "client" and b._tree_shards is None
    assert isinstance(b.estimators_, list) and len(b.estimators_) == 10
    for ta, tb in zip(a.estimators_, b.estimators_):
        np.testing.assert_array_equal(tb.tree_.value, ta.tree_.value)
        np.testing.assert_array_equal(tb.tree_.threshold, ta.tree_.threshold)
    np.testing.assert_array_equal(b.predict_proba(X), a.predict_proba(X))
    # Now it pickles, and gives SHAP values, as the client's forest.
    np.testing.assert_array_equal(b.shap_values(X[:5]), a.shap_values(X[:5]))


def test_warm_start_adds_shards(client, regression):
    X, y = regression
    params = {"random_state": 2, "client": client, "trees_per_task": 3, "warm_start": True}
    a = RandomForestRegressor(n_estimators=4, tree_storage="client", **params).fit(X, y)
    b = RandomForestRegressor(n_estimators=4, tree_storage="workers", **params).fit(X, y)
    a.set_params(n_estimators=9).fit(X, y)
    b.set_params(n_estimators=9).fit(X, y)
    assert b.tree_storage_ == "workers" and len(b) == 9
    np.testing.assert_array_equal(b.predict(X), a.predict(X))
    np.testing.assert_array_equal(b.feature_importances_, a.feature_importances_)


def test_distributed_mode_warm_start_on_the_workers(client):
    """Distributed mode joins its trees on the client and sends them to the workers in shards;
    a warm start's shards are keyed by the forest's tree indices (out-of-bag counts)."""
    from dasktrees.distributed.levels import MIN_BUDGET_ROWS, gathered_rows

    X, y = make_classification(12_000, 6, random_state=3)
    params = {"mode": "distributed", "oob_score": True, "warm_start": True, "max_depth": 8}
    with gathered_rows(MIN_BUDGET_ROWS):
        a, b = fit_pair(RandomForestClassifier, X, y, client, n_estimators=3, **params)
        for forest in (a, b):
            forest.set_params(n_estimators=6).fit(X, y)
    assert b.tree_storage_ == "workers" and len(b) == 6
    np.testing.assert_array_equal(b.predict_proba(X), a.predict_proba(X))
    assert b.oob_score_ == a.oob_score_
    np.testing.assert_array_equal(b.oob_curve_, a.oob_curve_)
    # A warm start with every tree grown already adds nothing and keeps the shards.
    parts = list(b._tree_shards.parts)
    b.fit(X, y)
    assert b._tree_shards.parts == parts and b.oob_score_ == a.oob_score_


def test_joined_trees_leave_the_client_as_their_batches_complete(client, classification):
    """Distributed mode joins trees on the client one at a time, in any order: a batch goes to
    its worker once its last tree is in, and the client keeps only the trees still waiting."""
    X, y = classification
    forest = RandomForestClassifier(n_estimators=5, random_state=0, client=client).fit(X, y)
    trees = [est.tree_ for est in forest.estimators_]
    joined = shards_module.ShardsAsJoined(client, [0, 1, 2, 3, 4], 2, forest.bin_mapper_)
    for t in (1, 0, 3, 4):
        joined.add(t, trees[t])
    assert len(joined.shipped) == 1 and set(joined.joined) == {3, 4}
    joined.add(2, trees[2])
    assert len(joined.shipped) == 3 and not joined.joined
    handle = joined.shards()
    np.testing.assert_array_equal(handle.first_trees, [0, 2, 4, 5])
    assert handle.workers == sorted(handle.workers)


def test_auto_storage_threshold(client, classification, monkeypatch):
    X, y = classification
    forest = RandomForestClassifier(n_estimators=4, random_state=0, client=client)
    # Under the share: brought home.
    monkeypatch.setattr(shards_module, "AUTO_CLIENT_SHARE", 0.1)
    assert forest.set_params(tree_storage="auto").fit(X, y).tree_storage_ == "client"
    # Over it (a forest of a few hundred kB against no memory at all): kept on the workers.
    monkeypatch.setattr(shards_module, "AUTO_CLIENT_SHARE", 1e-12)
    assert forest.fit(X, y).tree_storage_ == "workers"
    assert forest._tree_shards.nbytes.sum() > 0
    # n_estimators="auto" checks its waves on the client: "auto" keeps the trees there.
    forest.set_params(n_estimators="auto", max_n_estimators=40).fit(X, y)
    assert forest.tree_storage_ == "client"


def test_refusals(client, classification):
    X, y = classification
    forest = RandomForestClassifier(n_estimators=3, tree_storage="workers", random_state=0)
    # No cluster: the trees are in this process whatever the parameter says.
    with pytest.raises(ValueError, match='tree_storage="workers" needs a Dask cluster'):
        forest.fit(X, y)
    forest.set_params(client=client).fit(X, y)
    for call in (lambda: forest.to_sklearn(), lambda: forest.decision_path(X[:3])):
        with pytest.raises(ValueError, match="call gather_trees"):
            call()
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(forest)
    with pytest.raises(ValueError, match="tree_storage must be"):
        RandomForestClassifier(tree_storage="disk", client=client).fit(X, y)
    with pytest.raises(ValueError, match='n_estimators="auto" needs tree_storage="client" or'):
        RandomForestClassifier(n_estimators="auto", tree_storage="workers", client=client).fit(X, y)


def test_save_from_the_workers_and_load_onto_them_or_here(client, classification, tmp_path):
    import dasktrees

    X, y = classification
    a, b = fit_pair(RandomForestClassifier, X, y, client, oob_score=True, trees_per_task=3)
    b.save(tmp_path / "model")
    shard_dirs = sorted(p.name for p in (tmp_path / "model").iterdir() if p.is_dir())
    assert shard_dirs == [f"shard-0000{k}" for k in range(4)]
    onto_workers = dasktrees.load(tmp_path / "model", client=client)
    here = dasktrees.load(tmp_path / "model")
    assert onto_workers.tree_storage_ == "workers" and here.tree_storage_ == "client"
    assert_same_predictions(a, onto_workers, X[:80])
    for loaded in (onto_workers, here):
        np.testing.assert_array_equal(loaded.predict_proba(X), a.predict_proba(X))
        np.testing.assert_array_equal(loaded.feature_importances_, a.feature_importances_)
        assert loaded.oob_score_ == a.oob_score_
        np.testing.assert_array_equal(loaded.oob_curve_, a.oob_curve_)
        assert loaded.get_params()["n_estimators"] == 10 and len(loaded) == 10
    # The forest loaded here is the client's forest, tree for tree; saved again it is one model.
    for ta, tb in zip(a.estimators_, here.estimators_):
        np.testing.assert_array_equal(tb.tree_.value, ta.tree_.value)
    # A forest saved from the client, loaded, and a pickled one, say where their trees are.
    a.save(tmp_path / "one")
    assert dasktrees.load(tmp_path / "one").tree_storage_ == "client"
    assert pickle.loads(pickle.dumps(here)).tree_storage_ == "client"
    description = describe(tmp_path / "model")
    assert description["trees"] == 10 and description["shards"] == 4
    assert description["nodes"] == sum(e.tree_.node_count for e in a.estimators_)
    # Out-of-bag importances need the seed and tree indices, which the shards keep.
    expected = a.oob_impurity_importance(X, y).importances
    np.testing.assert_array_equal(onto_workers.oob_impurity_importance(X, y).importances, expected)


def test_a_tampered_or_missing_shard_is_refused(client, classification, tmp_path):
    import json
    import shutil

    import dasktrees

    X, y = classification
    forest = RandomForestClassifier(
        n_estimators=4, trees_per_task=2, tree_storage="workers", client=client, random_state=0
    ).fit(X, y)
    forest.save(tmp_path / "model")
    shutil.copytree(tmp_path / "model", tmp_path / "intact")
    # A byte of a shard's arrays: refused by the shard's own checks, here and on the workers.
    arrays = tmp_path / "model" / "shard-00001" / "arrays.npz"
    data = bytearray(arrays.read_bytes())
    data[len(data) // 2] ^= 0xFF
    arrays.write_bytes(bytes(data))
    for kwargs in ({}, {"client": client}):
        with pytest.raises(ValueError):
            dasktrees.load(tmp_path / "model", **kwargs)
    # A shard's manifest rewritten (with a valid checksum of its own): not the listed shard.
    shutil.rmtree(tmp_path / "model")
    shutil.copytree(tmp_path / "intact", tmp_path / "model")
    other = RandomForestClassifier(n_estimators=2, random_state=5).fit(X, y)
    shutil.rmtree(tmp_path / "model" / "shard-00000")
    other.save(tmp_path / "model" / "shard-00000")
    with pytest.raises(ValueError, match="not the shard the model lists"):
        dasktrees.load(tmp_path / "model")
    # A shard dropped.
    shutil.rmtree(tmp_path / "model")
    shutil.copytree(tmp_path / "intact", tmp_path / "model")
    shutil.rmtree(tmp_path / "model" / "shard-00001")
    with pytest.raises((ValueError, FileNotFoundError)):
        dasktrees.load(tmp_path / "model")
    # The top manifest edited.
    shutil.rmtree(tmp_path / "model")
    shutil.copytree(tmp_path / "intact", tmp_path / "model")
    top = tmp_path / "model" / "manifest.json"
    manifest = json.loads(top.read_text())
    manifest["n_trees"] = 3
    top.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="checksum mismatch"):
        dasktrees.load(tmp_path / "model")
    # Saving over a sharded model replaces it; over anything else is refused.
    forest.save(tmp_path / "intact")
    (tmp_path / "other").mkdir()
    with pytest.raises(FileExistsError):
        forest.save(tmp_path / "other")

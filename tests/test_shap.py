"""shap_values: exact path-dependent TreeSHAP, against shap's TreeExplainer on to_sklearn() (numeric
data), against Shapley values enumerated over every subset of features (categorical splits and
missing values), additive on real tables with both, and the same for numpy and dask input."""

import itertools
import math

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris

import dasktrees as dt
from dasktrees.core.dtypes import TREE_LEAF

from .conftest import carseats

shap = pytest.importorskip("shap")  # the test extra installs it

FORESTS = {
    "rf": (dt.RandomForestClassifier, dt.RandomForestRegressor),
    "et": (dt.ExtraTreesClassifier, dt.ExtraTreesRegressor),
    "tree": (dt.DecisionTreeClassifier, dt.DecisionTreeRegressor),
}


def _fit(kind, classifier, X, y, **params):
    cls = FORESTS[kind][0 if classifier else 1]
    if kind != "tree":
        params = {"n_estimators": 12, "client": None, **params}
    return cls(random_state=0, **params).fit(X, y)


def _prediction(est, X):
    return est.predict_proba(X) if hasattr(est, "classes_") else est.predict(X)


def _assert_additive(est, X, values, atol=1e-6):
    total = values.sum(axis=1) + est.shap_expected_value_
    np.testing.assert_allclose(total, _prediction(est, X), rtol=0, atol=atol)


@pytest.mark.parametrize("kind", sorted(FORESTS))
@pytest.mark.parametrize("data", ["cancer", "iris", "diabetes"])
def test_equals_shap_tree_explainer_on_to_sklearn(kind, data):
    """Numeric data: our values equal shap's TreeExplainer (Algorithm 2 in C++) on the
    scikit-learn export of the same trees, full depth, within 1e-6 (both are exact)."""
    loader = {"cancer": load_breast_cancer, "iris": load_iris, "diabetes": load_diabetes}[data]
    X, y = loader(return_X_y=True)
    X = X.astype(np.float32)  # what scikit-learn's trees compare with (docs/forests.md)
    classifier = data != "diabetes"
    est = _fit(kind, classifier, X[:300], y[:300], max_features=0.5)
    ours = est.shap_values(X)
    explainer = shap.TreeExplainer(est.to_sklearn())
    theirs = np.asarray(explainer.shap_values(X, check_additivity=False))
    n_classes = {"cancer": 2, "iris": 3}.get(data)
    shape = (len(X), X.shape[1], n_classes) if classifier else (len(X), X.shape[1])
    assert ours.shape == theirs.shape == shape
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
    np.testing.assert_allclose(est.shap_expected_value_, explainer.expected_value, atol=1e-6)
    _assert_additive(est, X, ours, atol=1e-9)


def _tree_value(tree, x, known):
    """The tree's prediction for row x when only the features in ``known`` are known, the
    others integrated out along the training cover (the game path-dependent TreeSHAP solves),
    by recursion over the nodes: the definition, not the algorithm."""

    def goes_left(k):
        v = x[tree.feature[k]]
        if np.isnan(v):
            return bool(tree.missing_go_to_left[k])
        if tree.is_categorical[k]:
            code = int(v)
            word = tree.categorical_bitsets[tree.bitset_idx[k], code // 32]
            return bool((int(word) >> (code % 32)) & 1)
        return v <= tree.threshold[k]

    def value(k):
        if tree.children_left[k] == TREE_LEAF:
            return tree.value[k]
        left, right = tree.children_left[k], tree.children_right[k]
        if tree.feature[k] in known:
            return value(left if goes_left(k) else right)
        w = tree.weighted_n_node_samples
        return (w[left] * value(left) + w[right] * value(right)) / w[k]

    return value(0)


def _enumerated_shapley(tree, x, n_features):
    """Shapley values of the game above, summed over every subset of features."""
    phi = np.zeros((n_features, tree.value.shape[1]))
    for j in range(n_features):
        others = [f for f in range(n_features) if f != j]
        for size in range(n_features):
            weight = math.factorial(size) * math.factorial(n_features - size - 1)
            weight /= math.factorial(n_features)
            for subset in itertools.combinations(others, size):
                known = set(subset)
                gain = _tree_value(tree, x, known | {j}) - _tree_value(tree, x, known)
                phi[j] += weight * gain
    return phi


def _categorical_frame(n=300, seed=0):
    """Two categorical columns (one many-levelled), two numeric, with missing values in all."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "colour": pd.Categorical(rng.choice(list("abcdefghij"), n)),
            "size": pd.Categorical(rng.choice(["S", "M", "L"], n)),
            "x": rng.normal(size=n),
            "z": rng.normal(size=n),
        }
    )
    score = (
        frame["colour"].isin(list("aceg")).astype(float)
        + (frame["size"] == "L")
        + frame["x"]
        - 0.5 * frame["z"]
    )
    for column in frame:
        frame.loc[rng.random(n) < 0.1, column] = np.nan
    return frame, score.to_numpy() + rng.normal(scale=0.3, size=n)


@pytest.mark.parametrize("classifier", [False, True])
def test_equals_enumerated_shapley_with_categories_and_missing_values(classifier):
    """Categorical splits and missing-value routing: each tree's values equal the Shapley values
    enumerated over all 2^4 subsets, to 1e-10; the forest's are their mean."""
    X, y = _categorical_frame()
    if classifier:
        y = np.digitize(y, np.quantile(y, [0.33, 0.66]))
    est = _fit("rf", classifier, X, y, n_estimators=3, max_depth=5)
    assert any(e.tree_.is_categorical.any() for e in est.estimators_)
    rows = X.iloc[[0, 1, 2, 5, 8, 13]]
    encoded = est.bin_mapper_.encode(rows)
    assert np.isnan(encoded).any()
    ours = est.shap_values(rows)
    expected = np.mean(
        [
            [_enumerated_shapley(e.tree_, encoded[i], X.shape[1]) for i in range(len(rows))]
            for e in est.estimators_
        ],
        axis=0,
    )
    np.testing.assert_allclose(ours, expected if classifier else expected[:, :, 0], atol=1e-10)


@pytest.mark.parametrize("classifier", [False, True])
def test_additive_on_carseats_with_categories_and_missing_values(classifier):
    X, y = carseats()
    for column in ("ShelveLoc", "Urban", "US"):
        X[column] = X[column].astype("category")
    rng = np.random.default_rng(0)
    X = X.mask(rng.random(X.shape) < 0.08)
    if classifier:
        y = y > np.median(y)
    est = _fit("rf", classifier, X, y, n_estimators=20)
    values = est.shap_values(X)
    assert np.abs(values).max() > 0.01
    _assert_additive(est, X, values)


def test_hard_voting_explains_the_share_of_votes():
    X, y = load_iris(return_X_y=True)
    est = _fit("rf", True, X, y, voting="hard")
    _assert_additive(est, X, est.shap_values(X))


def test_quantile_forest_explains_its_mean():
    X, y = load_diabetes(return_X_y=True)
    est = dt.RandomForestQuantileRegressor(n_estimators=10, random_state=0, client=None)
    est.fit(X, y)
    values = est.shap_values(X)
    mean = np.mean([e.tree_.predict(est.bin_mapper_.encode(X))[:, 0] for e in est.estimators_], 0)
    np.testing.assert_allclose(values.sum(axis=1) + est.shap_expected_value_, mean, atol=1e-9)


def test_median_aggregation_is_refused():
    X, y = load_diabetes(return_X_y=True)
    est = _fit("rf", False, X, y, aggregation="median")
    with pytest.raises(ValueError, match="aggregation"):
        est.shap_values(X)


def test_one_leaf_trees_give_zeros():
    X = np.random.default_rng(0).normal(size=(50, 3))
    est = _fit("rf", False, X, np.ones(50))
    np.testing.assert_array_equal(est.shap_values(X), 0.0)
    assert est.shap_expected_value_ == 1.0


@pytest.mark.parametrize("classifier", [False, True])
def test_dask_input_gives_the_same_values(client, classifier):
    """Blocks of rows as tasks on a LocalCluster, the trees sent once: the numpy values."""
    X, y = _categorical_frame(400)
    if classifier:
        y = y > 0
    est = _fit("rf", classifier, X, y, n_estimators=10)
    expected = est.shap_values(X)
    est.set_params(client=client)
    frame = dd.from_pandas(X, npartitions=3)
    got = est.shap_values(frame)
    assert isinstance(got, da.Array)
    np.testing.assert_array_equal(client.compute(got, sync=True), expected)
    numeric = X[["x", "z"]].to_numpy()
    numeric_est = _fit("rf", classifier, numeric, y, n_estimators=10)
    expected = numeric_est.shap_values(numeric)
    numeric_est.set_params(client=client)
    got = numeric_est.shap_values(da.from_array(numeric, chunks=(150, 2)))
    np.testing.assert_array_equal(client.compute(got, sync=True), expected)
    numeric_est.set_params(client=None)  # threads, no cluster: dask's own scheduler
    got = numeric_est.shap_values(da.from_array(numeric, chunks=(150, 2)))
    np.testing.assert_array_equal(got.compute(), expected)

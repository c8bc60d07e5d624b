"""scikit-learn's tools over dasktrees forests, without a client and on a 2-worker cluster: the
same scores either way (the forests are bit-identical wherever they grow)."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.impute import SimpleImputer
from sklearn.inspection import permutation_importance
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.pipeline import make_pipeline

from dasktrees import ExtraTreesRegressor, RandomForestClassifier, RandomForestRegressor

CV = KFold(3, shuffle=True, random_state=0)


@pytest.fixture(scope="module")
def cancer():
    return load_breast_cancer(return_X_y=True)


@pytest.fixture(params=["threads", "cluster"])
def where(request):
    """Where the forests run: this process (no client), or the session's 2-worker cluster."""
    return None if request.param == "threads" else request.getfixturevalue("client")


def test_clone_keeps_the_parameters_and_shares_the_client(client):
    model = RandomForestClassifier(n_estimators=7, max_depth=3, client=client)
    copy = clone(model)
    assert copy is not model and copy.client is client
    assert copy.get_params() == model.get_params()


def test_cross_val_score_is_the_same_with_and_without_a_client(client, cancer):
    X, y = cancer
    scores = [
        cross_val_score(
            RandomForestClassifier(n_estimators=20, random_state=0, client=c), X, y, cv=CV
        )
        for c in (None, client)
    ]
    np.testing.assert_array_equal(scores[0], scores[1])
    assert scores[0].mean() > 0.93


def test_grid_search_in_a_pipeline_is_the_same_with_and_without_a_client(client):
    X, y = load_diabetes(return_X_y=True)
    X = X.copy()
    X[::7, 2] = np.nan  # the imputer has something to do
    searches = []
    for c in (None, client):
        pipeline = make_pipeline(
            SimpleImputer(), RandomForestRegressor(n_estimators=10, random_state=0, client=c)
        )
        grid = {
            "randomforestregressor__max_features": [0.3, 1.0],
            "randomforestregressor__min_samples_leaf": [1, 5],
        }
        searches.append(GridSearchCV(pipeline, grid, cv=CV).fit(X, y))
    local, remote = searches
    assert local.best_params_ == remote.best_params_
    np.testing.assert_array_equal(
        local.cv_results_["mean_test_score"], remote.cv_results_["mean_test_score"]
    )
    np.testing.assert_array_equal(local.predict(X), remote.predict(X))
    assert local.best_score_ > 0.35


def test_calibrated_classifier(where, cancer):
    X, y = cancer
    forest = RandomForestClassifier(n_estimators=20, random_state=0, client=where)
    calibrated = CalibratedClassifierCV(forest, cv=3, method="isotonic").fit(X, y)
    proba = calibrated.predict_proba(X)
    assert proba.shape == (len(y), 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert (calibrated.predict(X) == y).mean() > 0.95
    reference = CalibratedClassifierCV(
        RandomForestClassifier(n_estimators=20, random_state=0), cv=3, method="isotonic"
    ).fit(X, y)
    np.testing.assert_array_equal(proba, reference.predict_proba(X))


def test_permutation_importance(where):
    X, y = load_diabetes(return_X_y=True)
    model = ExtraTreesRegressor(n_estimators=10, random_state=0, client=where).fit(X, y)
    result = permutation_importance(model, X, y, n_repeats=3, random_state=0)
    assert result.importances_mean.argmax() in (2, 8)  # bmi or s5, diabetes' strongest
    reference = ExtraTreesRegressor(n_estimators=10, random_state=0).fit(X, y)
    again = permutation_importance(reference, X, y, n_repeats=3, random_state=0)
    np.testing.assert_array_equal(result.importances, again.importances)


def test_a_forest_is_the_sequence_of_its_trees(cancer):
    """scikit-learn's ensemble protocol: len, indexing, slicing and iteration over
    ``estimators_``; the forest's soft vote is the mean of the trees' probabilities."""
    X, y = cancer
    forest = RandomForestClassifier(n_estimators=12, max_depth=4, random_state=0).fit(X, y)
    assert len(forest) == 12 == forest.n_estimators_
    assert forest[3] is forest.estimators_[3] and forest[-1] is forest.estimators_[-1]
    assert forest[2:5] == forest.estimators_[2:5]
    trees = list(forest)
    assert len(trees) == 12 and all(a is b for a, b in zip(trees, forest.estimators_))
    mean = np.mean([tree.predict_proba(X) for tree in forest], axis=0)
    np.testing.assert_allclose(forest.predict_proba(X), mean, rtol=0, atol=1e-12)
    with pytest.raises(AttributeError):
        len(RandomForestClassifier())  # unfitted, as scikit-learn's ensembles
    # estimator_: the template each tree was grown as, unfitted, as scikit-learn's
    template = forest.estimator_
    assert type(template) is type(forest[0]) and not hasattr(template, "tree_")
    assert template.get_params() == {**forest[0].get_params()}
    assert template.max_depth == 4 and template.max_features == "sqrt"
    assert not hasattr(RandomForestClassifier(), "estimator_")
    # estimator: the same template before a fit too (scikit-learn's ensembles read it so)
    unfitted = RandomForestClassifier(max_depth=3, criterion="entropy")
    assert unfitted.estimator.get_params() == {**unfitted.fit(X, y).estimator_.get_params()}
    assert unfitted.estimator.max_depth == 3 and unfitted.estimator.splitter == "best"
    assert "estimator" not in unfitted.get_params()


@pytest.mark.parametrize("sampling", [{}, {"max_samples": 0.3}, {"bootstrap": False}])
def test_estimators_samples_are_the_rows_each_tree_drew(where, cancer, sampling):
    """Oracle: a row is out of bag for a tree exactly when the tree did not draw it, so the
    trees' mean probability over the trees that did not draw a row is the forest's out-of-bag
    decision function; a row drawn k times is listed k times, in order."""
    X, y = cancer
    draws = sampling.get("bootstrap", True)
    forest = RandomForestClassifier(
        n_estimators=30, max_depth=5, random_state=3, client=where, oob_score=draws, **sampling
    ).fit(X, y)
    samples = forest.estimators_samples_
    assert len(samples) == 30 and all(s.dtype == np.int32 for s in samples)
    assert all((np.diff(s) >= 0).all() for s in samples)
    counts = np.array([np.bincount(s, minlength=len(y)) for s in samples])
    if not draws:
        assert (counts == 1).all()
        return
    expected_draws = 0.3 if "max_samples" in sampling else 1.0
    assert counts.mean() == pytest.approx(expected_draws, rel=0.05)
    assert counts.max() >= (2 if "max_samples" in sampling else 4)
    out = counts == 0
    probabilities = np.array([tree.predict_proba(X) for tree in forest])
    summed = np.einsum("tn,tnc->nc", out.astype(float), probabilities)
    left_out = out.sum(axis=0)
    assert (left_out > 0).all()
    np.testing.assert_allclose(
        forest.oob_decision_function_, summed / left_out[:, None], rtol=0, atol=1e-12
    )


def test_scikit_learns_warnings_few_trees_and_a_warm_start_adding_none(cancer):
    """scikit-learn's forests warn when some rows have no out-of-bag value, and when a warm
    start adds no tree; ours do, with its words."""
    X, y = cancer
    with pytest.warns(UserWarning, match="Some inputs do not have OOB scores") as caught:
        forest = RandomForestClassifier(n_estimators=2, random_state=0, oob_score=True)
        forest.fit(X, y)
    n_missing = int(np.isnan(forest.oob_decision_function_[:, 0]).sum())
    assert n_missing > 0 and f"{n_missing:,} of {len(y):,} rows" in str(caught[0].message)
    forest.set_params(n_estimators=40).fit(X, y)  # warm_start=False: a new forest, every row out
    trees = list(forest.estimators_)
    forest.set_params(warm_start=True)
    with pytest.warns(UserWarning, match="Warm-start fitting without increasing n_estimators"):
        forest.fit(X, y)
    assert all(a is b for a, b in zip(forest.estimators_, trees))


def test_importances_sum_to_one_when_some_trees_are_one_leaf():
    """scikit-learn's rule (its forest test module's case): trees of one leaf are left out of
    the mean, which sums to one; a forest where no tree splits has zero importances."""
    from sklearn.datasets import make_classification

    from dasktrees import RandomForestRegressor

    X, y = make_classification(n_samples=15, n_informative=3, random_state=1, n_classes=3)
    forest = RandomForestClassifier(min_samples_leaf=5, random_state=42, n_estimators=200)
    forest.fit(X, y)
    per_tree = np.array([t.tree_.compute_feature_importances() for t in forest.estimators_])
    split = per_tree.sum(axis=1) > 0
    assert 0 < split.sum() < 200  # some trees are one leaf
    np.testing.assert_allclose(forest.feature_importances_.sum(), 1.0, rtol=0, atol=1e-12)
    mean = per_tree[split].mean(axis=0)
    np.testing.assert_allclose(forest.feature_importances_, mean / mean.sum(), atol=1e-15)
    np.testing.assert_allclose(forest.feature_importances_std_, per_tree[split].std(axis=0))
    flat = RandomForestRegressor(n_estimators=5).fit(np.zeros((10, 3)), np.ones(10))
    np.testing.assert_array_equal(flat.feature_importances_, np.zeros(3))
    np.testing.assert_array_equal(flat.feature_importances_std_, np.zeros(3))


@pytest.mark.parametrize(
    "name",
    [
        "RandomForestClassifier",
        "RandomForestRegressor",
        "ExtraTreesClassifier",
        "ExtraTreesRegressor",
        "DecisionTreeClassifier",
        "DecisionTreeRegressor",
    ],
)
def test_scikit_learns_parameters_have_its_defaults(name):
    """Every parameter scikit-learn's estimator of the same name has and ours has too takes its
    default (docs/forests.md's table), and ours have every one of them."""
    import sklearn.ensemble
    import sklearn.tree

    import dasktrees

    module = sklearn.tree if name.startswith("Decision") else sklearn.ensemble
    theirs = getattr(module, name)().get_params()
    ours = getattr(dasktrees, name)().get_params()
    assert {k: ours[k] for k in theirs if k in ours} == {
        k: v for k, v in theirs.items() if k in ours
    }
    assert set(theirs) <= set(ours)

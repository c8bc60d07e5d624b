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

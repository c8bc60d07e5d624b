"""scikit-learn's meta-estimators over dasktrees trees: AdaBoost (Freund and Schapire 1997) and
bagging (Breiman 1996)."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, make_classification
from sklearn.ensemble import AdaBoostClassifier, BaggingClassifier, BaggingRegressor
from sklearn.model_selection import cross_val_score
from sklearn.tree import DecisionTreeClassifier as SkTree

import dasktrees


def exact_binning_data():
    """Features with under 255 distinct values each, so our bins are the values themselves and
    a stump's threshold is the same midpoint as scikit-learn's."""
    X, y = make_classification(n_samples=600, n_features=8, n_informative=4, random_state=0)
    return np.round(X, 1), y


def test_adaboost_of_stumps_equals_scikit_learns():
    X, y = exact_binning_data()
    ours = AdaBoostClassifier(
        estimator=dasktrees.DecisionTreeClassifier(max_depth=1), n_estimators=40, random_state=0
    ).fit(X, y)
    theirs = AdaBoostClassifier(estimator=SkTree(max_depth=1), n_estimators=40, random_state=0).fit(
        X, y
    )
    for a, b in zip(ours.estimators_, theirs.estimators_):
        assert a.tree_.feature[0] == b.tree_.feature[0]
        assert a.tree_.threshold[0] == pytest.approx(b.tree_.threshold[0])
    np.testing.assert_allclose(ours.estimator_weights_, theirs.estimator_weights_, rtol=1e-9)
    np.testing.assert_array_equal(ours.predict(X), theirs.predict(X))
    np.testing.assert_allclose(ours.predict_proba(X), theirs.predict_proba(X), rtol=1e-9)


@pytest.mark.slow
def test_adaboost_and_bagging_accuracy_match_scikit_learn():
    X, y = load_breast_cancer(return_X_y=True)
    pairs = [
        (
            AdaBoostClassifier(dasktrees.DecisionTreeClassifier(max_depth=1), n_estimators=50),
            AdaBoostClassifier(SkTree(max_depth=1), n_estimators=50),
        ),
        (
            BaggingClassifier(dasktrees.DecisionTreeClassifier(), n_estimators=30),
            BaggingClassifier(SkTree(), n_estimators=30),
        ),
    ]
    for ours, theirs in pairs:
        ours.set_params(random_state=0)
        theirs.set_params(random_state=0)
        a = cross_val_score(ours, X, y, cv=5).mean()
        b = cross_val_score(theirs, X, y, cv=5).mean()
        assert abs(a - b) < 0.015, (type(ours).__name__, a, b)


def test_bagging_with_feature_subsets_and_oob(carseats_data):
    X, y = carseats_data
    X = X.select_dtypes("number")  # scikit-learn's bagging slices numpy columns
    kwargs = dict(n_estimators=40, max_features=0.5, oob_score=True, random_state=0)
    bagging = BaggingRegressor(dasktrees.DecisionTreeRegressor(), **kwargs).fit(X, y)
    from sklearn.tree import DecisionTreeRegressor

    reference = BaggingRegressor(DecisionTreeRegressor(), **kwargs).fit(X, y)
    # the same rows and feature subsets drawn; trees alike up to ties between splits
    assert bagging.oob_score_ == pytest.approx(reference.oob_score_, abs=0.03)
    assert all(isinstance(e, dasktrees.DecisionTreeRegressor) for e in bagging.estimators_)
    assert {len(f) for f in bagging.estimators_features_} == {X.shape[1] // 2}


@pytest.fixture
def carseats_data():
    from .conftest import carseats

    return carseats()

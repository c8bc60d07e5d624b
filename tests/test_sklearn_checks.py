"""scikit-learn's estimator checks on every estimator, with and without a Dask client."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from dasktrees import (
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    ExtraTreesClassifier,
    ExtraTreesQuantileRegressor,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestQuantileRegressor,
    RandomForestRegressor,
)

# The checks scikit-learn itself expects its random forests to fail, for the same reason: with
# bootstrap=True a tree draws rows by their count, and a row of weight 2 is one row drawn with
# weight 2, not two rows drawn independently, so weighting is not repeating rows.
# docs/forests.md lists them too.
_BOOTSTRAP_WEIGHTS = "sample_weight is not equivalent to repeating rows when trees bootstrap"
EXPECTED_FAILED_CHECKS = {
    name: {
        "check_sample_weight_equivalence_on_dense_data": _BOOTSTRAP_WEIGHTS,
        "check_sample_weight_equivalence_on_sparse_data": _BOOTSTRAP_WEIGHTS,
    }
    for name in ("RandomForestClassifier", "RandomForestRegressor", "RandomForestQuantileRegressor")
}

# Without a client: every fit runs on threads of the test process (scikit-learn's checks fit
# hundreds of times); with the session's cluster is tested in test_sklearn_tools.py.
ESTIMATORS = [
    DecisionTreeClassifier(random_state=0),
    DecisionTreeRegressor(random_state=0),
    RandomForestClassifier(n_estimators=10, random_state=0),
    RandomForestRegressor(n_estimators=10, random_state=0),
    ExtraTreesClassifier(n_estimators=10, random_state=0),
    ExtraTreesRegressor(n_estimators=10, random_state=0),
    RandomForestQuantileRegressor(n_estimators=10, random_state=0),
    ExtraTreesQuantileRegressor(n_estimators=10, random_state=0),
]


@parametrize_with_checks(
    ESTIMATORS,
    expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS.get(type(est).__name__, {}),
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)

"""scikit-learn's estimator checks on the tree estimators."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from dasktrees import DecisionTreeClassifier, DecisionTreeRegressor

# Checks we expect to fail, with the reason; docs/trees.md lists them too.
EXPECTED_FAILED_CHECKS = {}


@parametrize_with_checks(
    [DecisionTreeClassifier(random_state=0), DecisionTreeRegressor(random_state=0)],
    expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS.get(type(est).__name__, {}),
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)

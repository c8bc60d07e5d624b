"""One table of what each parameter accepts: estimators and experiment configs refuse the same
values, with the same words."""

import re

import numpy as np
import pytest
from sklearn.datasets import load_iris

from dasktrees import DecisionTreeClassifier, ExtraTreesClassifier, RandomForestClassifier
from dasktrees.command.config import check_params
from dasktrees.core.params import PARAMETERS, parameter_problem

# A value each parameter refuses and one it accepts (besides its default).
CASES = {
    "splitter": ("fast", "random"),
    "max_depth": (0, 3),
    "min_samples_split": (1.5, 0.2),
    "min_samples_leaf": (0, 0.1),
    "min_weight_fraction_leaf": (0.7, 0.1),
    "max_features": ("all", 2),
    "max_leaf_nodes": (1, 8),
    "min_impurity_decrease": (-1.0, 0.01),
    "ccp_alpha": (float("inf"), 0.01),
    "max_bins": (256, 16),
    "min_samples_category": (0, 3),
    "categorical_order": ("leaf", "node"),
    "monotonic_cst": ([2, 0, 0, 0], [0, 0, 0, 0]),  # iris has three classes: none constrained
    "n_estimators": ("ten", 3),
    "max_n_estimators": (0, 40),
    "tol": (1.5, 0.02),
    "max_features_tree": (0, 0.5),
    "bootstrap": ("yes", False),
    "max_samples": (2.0, 0.5),
    "oob_score": ("yes", False),
    "prune": ("cv", "oob:size"),
    "voting": ("majority", "hard"),
    "mode": ("fast", "sampled"),
    "tree_storage": ("disk", "auto"),
    "trees_per_task": (0, 2),
    "n_blocks": (0, 3),
    "n_jobs": (0, 1),
    "verbose": (-1, 2),
    "class_weight": ("weird", "balanced"),
}


def test_every_parameter_of_the_table_has_a_case():
    # The regressors' own: checked below.
    assert set(CASES) | {"aggregation", "default_quantiles"} == set(PARAMETERS)


def test_quantile_forest_and_config_refuse_the_same_default_quantiles():
    from sklearn.datasets import load_diabetes

    from dasktrees import RandomForestQuantileRegressor

    X, y = load_diabetes(return_X_y=True)
    expected = PARAMETERS["default_quantiles"].expected
    for bad in ([0.5, 1.2], [], "median"):
        with pytest.raises(ValueError, match=re.escape(f"default_quantiles must be {expected}")):
            RandomForestQuantileRegressor(n_estimators=2, default_quantiles=bad).fit(X, y)
        assert check_params(RandomForestQuantileRegressor, {"default_quantiles": bad}, False) == [
            ("model.params.default_quantiles", f"expected {expected}, got {bad!r}")
        ]
    RandomForestQuantileRegressor(n_estimators=2, default_quantiles=[0.1, 0.9]).fit(X, y)


@pytest.mark.parametrize("name", sorted(CASES))
def test_estimator_and_config_refuse_the_same_value(name):
    X, y = load_iris(return_X_y=True)
    bad, good = CASES[name]
    is_tree_parameter = name in DecisionTreeClassifier().get_params()
    cls = DecisionTreeClassifier if is_tree_parameter else RandomForestClassifier
    params = {} if is_tree_parameter or name == "n_estimators" else {"n_estimators": 3}
    expected = re.escape(f"{name} must be {PARAMETERS[name].expected}, got {bad!r}")
    with pytest.raises(ValueError, match=f"^{expected}$"):
        cls(**params, **{name: bad}).fit(X, y)
    problem = parameter_problem(name, bad, is_classifier=True)
    assert problem == f"expected {PARAMETERS[name].expected}, got {bad!r}"
    assert check_params(cls, {name: bad}, True) == [(f"model.params.{name}", problem)]
    assert parameter_problem(name, good, is_classifier=True) is None
    cls(**params, **{name: good}).fit(X, y)


def test_criterion_depends_on_the_task():
    assert parameter_problem("criterion", "gini", is_classifier=True) is None
    assert "squared_error" in parameter_problem("criterion", "gini", is_classifier=False)


def test_combinations_are_checked_after_each_value():
    problems = check_params(ExtraTreesClassifier, {"oob_score": True}, True)
    assert problems == [
        (
            "model.params",
            "oob_score: Out of bag estimation only available if bootstrap=True or max_samples "
            "is set (every row is in bag)",
        )
    ]
    assert check_params(ExtraTreesClassifier, {"oob_score": True, "bootstrap": True}, True) == []


@pytest.mark.parametrize(
    "name",
    [
        "DecisionTreeRegressor",
        "RandomForestRegressor",
        "ExtraTreesRegressor",
        "RandomForestQuantileRegressor",
        "ExtraTreesQuantileRegressor",
    ],
)
def test_friedman_mse_is_squared_error_with_a_future_warning(name):
    """As scikit-learn 1.9 reads it: the same splits, so the same estimator."""
    import warnings

    from sklearn.base import clone
    from sklearn.datasets import load_diabetes

    import dasktrees

    cls = getattr(dasktrees, name)
    with pytest.warns(FutureWarning, match="friedman_mse"):
        friedman = cls(criterion="friedman_mse", random_state=0)
    assert friedman.criterion == "squared_error"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clone passes "squared_error": no warning
        clone(friedman)
    X, y = load_diabetes(return_X_y=True)
    extra = {} if name.startswith("Decision") else {"n_estimators": 3}
    expected = cls(random_state=0, **extra).fit(X, y).predict(X)
    np.testing.assert_array_equal(friedman.set_params(**extra).fit(X, y).predict(X), expected)
    # set after construction (GridSearchCV does): the fit warns and reads it the same way
    later = cls(random_state=0, **extra).set_params(criterion="friedman_mse")
    with pytest.warns(FutureWarning, match="friedman_mse") as caught:
        np.testing.assert_array_equal(later.fit(X, y).predict(X), expected)
    assert len([w for w in caught if issubclass(w.category, FutureWarning)]) == 1  # one a fit
    assert check_params(cls, {"criterion": "friedman_mse"}, False) == []


def test_absolute_error_is_refused_saying_why():
    from sklearn.datasets import load_diabetes

    from dasktrees import RandomForestRegressor
    from dasktrees.core.params import UNSUPPORTED_CRITERIA

    X, y = load_diabetes(return_X_y=True)
    criterion = "absolute_error"
    message = UNSUPPORTED_CRITERIA[criterion]
    assert "median" in message
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        RandomForestRegressor(n_estimators=2, criterion=criterion).fit(X, y)
    assert check_params(RandomForestRegressor, {"criterion": criterion}, False) == [
        ("model.params.criterion", message)
    ]

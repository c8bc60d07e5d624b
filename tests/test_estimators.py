"""Tree estimators: inputs, parameters, weights, determinism and the errors users see."""

import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_iris, make_classification

from dasktrees import DecisionTreeClassifier, DecisionTreeRegressor


@pytest.fixture
def iris():
    return load_iris(return_X_y=True)


# ---- bad inputs, each a clear error -----------------------------------------------------------


@pytest.mark.parametrize("Tree", [DecisionTreeClassifier, DecisionTreeRegressor])
def test_empty_X(Tree):
    with pytest.raises(ValueError, match="0 samples"):
        Tree().fit(np.empty((0, 3)), [])


@pytest.mark.parametrize("Tree", [DecisionTreeClassifier, DecisionTreeRegressor])
def test_one_sample(Tree):
    with pytest.raises(ValueError, match="1 sample; at least 2"):
        Tree().fit([[1.0, 2.0]], [1])


@pytest.mark.parametrize("Tree", [DecisionTreeClassifier, DecisionTreeRegressor])
def test_wrong_number_of_features_at_predict(Tree, iris):
    X, y = iris
    tree = Tree().fit(X, y)
    with pytest.raises(ValueError, match="X has 3 features, but .* is expecting 4 features"):
        tree.predict(X[:, :3])


def test_string_column_not_declared_categorical():
    X = np.array([["red", 1.0], ["blue", 2.0], ["red", 3.0]], dtype=object)
    with pytest.raises(TypeError, match="column 0 holds strings.*categorical_features"):
        DecisionTreeClassifier().fit(X, [0, 1, 0])
    # Declared, the same column is fine.
    tree = DecisionTreeClassifier(categorical_features=[0]).fit(X, [0, 1, 0])
    assert tree.score(X, [0, 1, 0]) == 1.0


@pytest.mark.parametrize("Tree", [DecisionTreeClassifier, DecisionTreeRegressor])
def test_nan_in_y(Tree):
    with pytest.raises(ValueError, match=r"y contains NaN \(first at rows \[1\]\)"):
        Tree().fit([[1.0], [2.0], [3.0]], [1.0, np.nan, 0.0])


@pytest.mark.parametrize("Tree", [DecisionTreeClassifier, DecisionTreeRegressor])
def test_complex_X(Tree):
    with pytest.raises(ValueError, match="Complex data not supported"):
        Tree().fit(np.array([[1 + 1j], [2 + 0j]]), [0, 1])


def test_inf_in_X_names_the_column():
    X = pd.DataFrame({"ok": [1.0, 2.0, 3.0], "bad": [1.0, np.inf, 3.0]})
    with pytest.raises(ValueError, match="column 'bad' contains infinity"):
        DecisionTreeRegressor().fit(X, [1.0, 2.0, 3.0])


def test_regression_target_must_be_numeric():
    with pytest.raises(ValueError, match="y must be numeric"):
        DecisionTreeRegressor().fit([[1.0], [2.0]], ["a", "b"])


@pytest.mark.parametrize(
    "params, match",
    [
        ({"criterion": "gni"}, "criterion must be one of"),
        ({"criterion": "squared_error"}, "criterion must be one of"),
        ({"splitter": "fast"}, "splitter"),
        ({"max_depth": 0}, "max_depth"),
        ({"max_depth": 2.5}, "max_depth"),
        ({"min_samples_split": 1}, "min_samples_split"),
        ({"min_samples_split": 1.5}, "min_samples_split"),
        ({"min_samples_leaf": 0}, "min_samples_leaf"),
        ({"min_weight_fraction_leaf": 0.7}, "min_weight_fraction_leaf"),
        ({"max_features": "all"}, "max_features"),
        ({"max_features": 0}, "max_features"),
        ({"max_features": 9}, "max_features"),
        ({"max_leaf_nodes": 1}, "max_leaf_nodes"),
        ({"min_impurity_decrease": -1.0}, "min_impurity_decrease"),
        ({"max_bins": 256}, "max_bins"),
        ({"max_bins": 1}, "max_bins"),
        ({"categorical_features": [7]}, "categorical_features"),
    ],
)
def test_bad_parameters_name_the_parameter_and_value(params, match, iris):
    X, y = iris
    with pytest.raises(ValueError, match=match) as error:
        DecisionTreeClassifier(**params).fit(X, y)
    value = list(params.values())[0]
    value = value[0] if isinstance(value, list) else value  # a list: the bad entry is named
    assert repr(value) in str(error.value) or str(value) in str(error.value)


def test_negative_sample_weight(iris):
    X, y = iris
    weights = np.ones(len(y))
    weights[3] = -1
    with pytest.raises(ValueError, match="sample_weight contains negative values"):
        DecisionTreeClassifier().fit(X, y, sample_weight=weights)


# ---- behaviour ---------------------------------------------------------------------------------


def test_same_random_state_same_tree():
    X, y = make_classification(n_samples=2000, n_features=20, random_state=0)
    a = DecisionTreeClassifier(max_features="sqrt", random_state=3).fit(X, y)
    b = DecisionTreeClassifier(max_features="sqrt", random_state=3).fit(X, y)
    c = DecisionTreeClassifier(max_features="sqrt", random_state=4).fit(X, y)
    for name in ("feature", "threshold", "children_left", "value"):
        np.testing.assert_array_equal(getattr(a.tree_, name), getattr(b.tree_, name))
    assert not np.array_equal(a.tree_.feature, c.tree_.feature)


def test_max_features_resolution(iris):
    X, y = iris
    for value, expected in [("sqrt", 2), ("log2", 2), (3, 3), (0.5, 2), (None, 4), (1.0, 4)]:
        assert DecisionTreeClassifier(max_features=value).fit(X, y).max_features_ == expected


def test_sample_weight_equals_repetition():
    X, y = make_classification(n_samples=300, n_features=5, random_state=1)
    weights = np.random.default_rng(0).integers(0, 4, len(y))
    weighted = DecisionTreeClassifier(random_state=0).fit(X, y, sample_weight=weights)
    repeated = DecisionTreeClassifier(random_state=0).fit(X.repeat(weights, 0), y.repeat(weights))
    np.testing.assert_array_equal(weighted.predict_proba(X), repeated.predict_proba(X))


def test_class_weight_dict_and_balanced_equal_sample_weights():
    X, y = make_classification(n_samples=400, weights=[0.8, 0.2], random_state=0)
    by_class = DecisionTreeClassifier(max_depth=3, class_weight={0: 1.0, 1: 4.0}, random_state=0)
    by_sample = DecisionTreeClassifier(max_depth=3, random_state=0)
    by_class.fit(X, y)
    by_sample.fit(X, y, sample_weight=np.where(y == 1, 4.0, 1.0))
    np.testing.assert_array_equal(by_class.predict_proba(X), by_sample.predict_proba(X))
    balanced = DecisionTreeClassifier(max_depth=1, class_weight="balanced").fit(X, y)
    root = balanced.tree_
    weights = root.value[0] * root.weighted_n_node_samples[0]
    assert weights[0] == pytest.approx(weights[1])


def test_string_labels_and_probabilities(iris):
    X, y = iris
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    tree = DecisionTreeClassifier(max_depth=2, random_state=0).fit(X, names)
    assert list(tree.classes_) == ["setosa", "versicolor", "virginica"]
    proba = tree.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(tree.predict(X), tree.classes_[proba.argmax(axis=1)])


def test_feature_importances_and_names():
    X, y = make_classification(
        n_samples=500, n_features=6, n_informative=2, n_redundant=0, shuffle=False, random_state=0
    )
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(6)])
    tree = DecisionTreeClassifier(max_depth=4, random_state=0).fit(frame, y)
    assert list(tree.feature_names_in_) == list(frame.columns)
    importances = tree.feature_importances_
    assert importances.sum() == pytest.approx(1.0)
    assert importances[:2].sum() > 0.7, "the informative features carry the importance"


def test_pandas_input_with_categoricals_and_missing_values_round_trip():
    rng = np.random.default_rng(0)
    n = 500
    frame = pd.DataFrame(
        {
            "num": np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n)),
            "colour": pd.Categorical(rng.choice(["red", "green", "blue", None], n)),
            "size": rng.choice(["S", "M", "L"], n).astype(object),
        }
    )
    y = (frame.colour == "red").to_numpy() ^ (frame["size"] == "L").to_numpy()
    tree = DecisionTreeClassifier(random_state=0).fit(frame, y)
    assert tree.score(frame, y) == 1.0
    unseen = frame.head(3).assign(size=["XL", "XXL", None])
    assert tree.predict(unseen).shape == (3,)


def test_pickle_round_trip(iris):
    X, y = iris
    tree = DecisionTreeClassifier(random_state=0).fit(X, y)
    again = pickle.loads(pickle.dumps(tree))
    np.testing.assert_array_equal(again.predict_proba(X), tree.predict_proba(X))


def test_random_splitter_differs_from_best_and_still_fits(iris):
    X, y = iris
    best = DecisionTreeClassifier(random_state=0).fit(X, y)
    extra = DecisionTreeClassifier(splitter="random", random_state=0).fit(X, y)
    assert extra.score(X, y) == 1.0
    assert extra.tree_.node_count != best.tree_.node_count or not np.array_equal(
        extra.tree_.threshold, best.tree_.threshold
    )


def test_float32_and_integer_inputs_give_the_same_tree(iris):
    X, y = iris
    as64 = DecisionTreeClassifier(random_state=0).fit(X, y)
    as32 = DecisionTreeClassifier(random_state=0).fit(X.astype(np.float32), y)
    np.testing.assert_array_equal(as64.predict(X), as32.predict(X.astype(np.float32)))
    ints = (X * 10).astype(np.int64)
    tree = DecisionTreeClassifier(random_state=0).fit(ints, y)
    np.testing.assert_array_equal(tree.predict(ints), tree.predict(ints.astype(float)))

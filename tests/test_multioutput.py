"""Trees on several target columns (multi-output regression): scikit-learn's multi-output trees
where both must find the same splits, and a target repeated in k columns gives the tree of the
single target, bit for bit, its values repeated."""

import pickle

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.datasets import load_iris, make_regression
from sklearn.exceptions import DataConversionWarning
from sklearn.metrics import mean_squared_error, r2_score
from sklearn.tree import DecisionTreeRegressor as SkTreeRegressor

import dasktrees
from dasktrees import (
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    ExtraTreesRegressor,
    RandomForestQuantileRegressor,
    RandomForestRegressor,
)
from dasktrees.estimators.pruning import reduced_error_prune, select_ccp_alpha
from dasktrees.export.text import export_text

from .test_modelfile import rewrite_manifest


def targets(seed, n=400, k=3):
    """Integer features (at most 255 distinct values each, so that bins are the values) and k
    noisy targets, each driven by other features: the outputs disagree on the best splits."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 40, size=(n, 5)).astype(float)
    Y = np.column_stack(
        [
            2.0 * X[:, 0] + rng.normal(size=n),
            np.sin(X[:, 1] / 4.0) * 10.0 + rng.normal(size=n),
            0.5 * X[:, 2] * (X[:, 3] > 20) + rng.normal(size=n),
        ][:k]
    )
    return X, Y


TREE_SETTINGS = [
    {"max_depth": 1},
    {"max_depth": 3},
    {"max_depth": 6, "min_samples_leaf": 5},
    {"max_leaf_nodes": 12},
    {"max_depth": 5, "min_impurity_decrease": 0.05},
]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("settings", TREE_SETTINGS)
def test_tree_is_scikit_learns(seed, k, settings):
    X, Y = targets(seed, k=k)
    w = np.random.default_rng(seed + 10).uniform(0.5, 1.5, len(X))
    ours = DecisionTreeRegressor(random_state=0, **settings).fit(X, Y, sample_weight=w)
    sk = SkTreeRegressor(random_state=0, **settings).fit(X, Y, sample_weight=w)
    assert ours.n_outputs_ == k
    assert ours.tree_.node_count == sk.tree_.node_count
    prediction = ours.predict(X)
    assert prediction.shape == (len(X), k)
    np.testing.assert_allclose(prediction, sk.predict(X), rtol=1e-12, atol=1e-12)
    # the impurity is the mean of the outputs' weighted variances, as scikit-learn's
    same_impurities(ours, sk, settings.get("max_depth", 99) <= 3)


def same_impurities(ours, sk, importances):
    """Our tree's impurities are scikit-learn's (node for node once sorted), and with
    ``importances`` its importances (deeper, small nodes tie features on the same rows)."""
    np.testing.assert_allclose(
        np.sort(ours.tree_.impurity), np.sort(sk.tree_.impurity), rtol=1e-9, atol=1e-12
    )
    if importances:
        np.testing.assert_allclose(ours.feature_importances_, sk.feature_importances_, atol=1e-12)


def same_pruning_path(ours, sk, X, Y):
    """Our unfitted tree ``ours`` has scikit-learn's (``sk``) cost-complexity path on X, Y, and
    pruned at its middle alpha predicts as scikit-learn's."""
    path = ours.cost_complexity_pruning_path(X, Y)
    expected = sk.cost_complexity_pruning_path(X, Y)
    np.testing.assert_allclose(path.ccp_alphas, expected.ccp_alphas, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(path.impurities, expected.impurities, rtol=1e-9, atol=1e-12)
    alpha = expected.ccp_alphas[len(expected.ccp_alphas) // 2]
    pruned = clone(ours).set_params(ccp_alpha=alpha).fit(X, Y)
    sk_pruned = clone(sk).set_params(ccp_alpha=alpha).fit(X, Y)
    np.testing.assert_allclose(pruned.predict(X), sk_pruned.predict(X), rtol=1e-12)


@pytest.mark.parametrize("seed", range(2))
def test_pruning_path_is_scikit_learns(seed):
    X, Y = targets(seed, n=200)
    same_pruning_path(
        DecisionTreeRegressor(max_depth=5, random_state=0),
        SkTreeRegressor(max_depth=5, random_state=0),
        X,
        Y,
    )


def same_splits(one, many):
    """The two trees have the same nodes, splits, impurities and weights, bit for bit."""
    for name in ("children_left", "children_right", "feature", "threshold", "missing_go_to_left"):
        np.testing.assert_array_equal(getattr(many.tree_, name), getattr(one.tree_, name))
    np.testing.assert_array_equal(many.tree_.impurity, one.tree_.impurity)
    np.testing.assert_array_equal(
        many.tree_.weighted_n_node_samples, one.tree_.weighted_n_node_samples
    )


def _same_tree(one, many, k):
    same_splits(one, many)
    np.testing.assert_array_equal(many.tree_.value, np.repeat(one.tree_.value, k, axis=1))


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"splitter": "random", "max_features": 3},
        {"max_features": 2, "max_leaf_nodes": 30},
        {"min_samples_leaf": 3, "ccp_alpha": 0.01},
    ],
)
def test_repeated_target_gives_the_single_target_tree(k, settings):
    """The mean of k equal variances is the variance, and the summed cut scores are k times
    one: the same splits, bit for bit, with missing values and weights too."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3000, 6))
    X[rng.random(X.shape) < 0.1] = np.nan
    y = np.nan_to_num(X[:, 0]) * 3 + np.nan_to_num(X[:, 1]) ** 2 + rng.normal(size=len(X))
    w = rng.integers(1, 4, len(X)).astype(float)
    one = DecisionTreeRegressor(random_state=1, **settings).fit(X, y, sample_weight=w)
    many = DecisionTreeRegressor(random_state=1, **settings).fit(
        X, np.repeat(y[:, None], k, axis=1), sample_weight=w
    )
    _same_tree(one, many, k)
    np.testing.assert_array_equal(many.predict(X), np.repeat(one.predict(X)[:, None], k, axis=1))


def test_a_target_column_per_output_is_its_own_mean():
    """Each output's leaf value is the weighted mean of that column over the leaf's rows."""
    X, Y = targets(3, k=3)
    tree = DecisionTreeRegressor(max_depth=4, random_state=0).fit(X, Y)
    leaves = tree.apply(X)
    for leaf in np.unique(leaves):
        np.testing.assert_allclose(tree.tree_.value[leaf], Y[leaves == leaf].mean(axis=0))


def test_one_column_is_one_output():
    X, Y = targets(0, k=1)
    with pytest.warns(DataConversionWarning):
        tree = DecisionTreeRegressor(max_depth=3).fit(X, Y)
    assert tree.n_outputs_ == 1 and tree.predict(X).shape == (len(X),)


def test_pandas_targets_and_pickle():
    X, Y = targets(1, k=2)
    frame = pd.DataFrame(X, columns=list("abcde"))
    tree = DecisionTreeRegressor(max_depth=4).fit(frame, pd.DataFrame(Y, columns=["u", "v"]))
    plain = DecisionTreeRegressor(max_depth=4).fit(X, Y)
    np.testing.assert_array_equal(tree.predict(frame), plain.predict(X))
    again = pickle.loads(pickle.dumps(tree))
    np.testing.assert_array_equal(again.predict(frame), tree.predict(frame))


def test_export_to_scikit_learn_predicts_the_same():
    X, Y = targets(2, k=3)
    tree = DecisionTreeRegressor(max_depth=6, random_state=0).fit(X, Y)
    exported = tree.to_sklearn()
    assert exported.n_outputs_ == 3
    np.testing.assert_array_equal(exported.predict(X), tree.predict(X))


def test_shap_values_add_up_to_each_output():
    X, Y = targets(4, n=200, k=2)
    tree = DecisionTreeRegressor(max_depth=4, random_state=0).fit(X, Y)
    values = tree.shap_values(X[:20])
    assert values.shape == (20, X.shape[1], 2)
    expected = tree.shap_expected_value_
    assert expected.shape == (2,)
    np.testing.assert_allclose(values.sum(axis=1) + expected, tree.predict(X[:20]), atol=1e-9)


def test_select_ccp_alpha_scores_every_output():
    X, Y = targets(5, n=300, k=2)
    result = select_ccp_alpha(DecisionTreeRegressor(max_depth=6, random_state=0), X, Y, cv=3)
    assert result.estimator.n_outputs_ == 2
    assert result.cv_errors.shape == (3, len(result.ccp_alphas))


def test_refusals():
    X, Y = targets(0, k=2)
    counts = np.abs(np.round(Y))
    with pytest.raises(ValueError, match="criterion='poisson' takes one target; y has 2"):
        DecisionTreeRegressor(criterion="poisson").fit(X, counts)
    with pytest.raises(ValueError, match="monotonic_cst: .*multiple outputs"):
        DecisionTreeRegressor(monotonic_cst=[1, 0, 0, 0, 0]).fit(X, Y)
    with pytest.raises(ValueError, match=r"features \[0\] are categorical, and y has 2 columns"):
        DecisionTreeRegressor(categorical_features=[0]).fit(X, Y)
    bad = Y.copy()
    bad[7, 1] = np.nan
    with pytest.raises(ValueError, match=r"y contains NaN \(first at rows \[7\]\)"):
        DecisionTreeRegressor().fit(X, bad)
    bad[7, 1] = np.inf
    with pytest.raises(ValueError, match="y contains infinity"):
        DecisionTreeRegressor().fit(X, bad)
    tree = DecisionTreeRegressor(max_depth=2).fit(X, Y)
    for call, what in [
        (lambda: export_text(tree), "a text export"),
        (lambda: reduced_error_prune(tree, X, Y), "reduced_error_prune"),
    ]:
        with pytest.raises(ValueError, match=what + ".* needs a single output.* 2 target columns"):
            call()


# ---- forests -------------------------------------------------------------------------------


def _same_forest(one, many, k):
    assert many.n_outputs_ == k and len(many.estimators_) == len(one.estimators_)
    for a, b in zip(one.estimators_, many.estimators_):
        _same_tree(a, b, k)


@pytest.mark.parametrize("cls", [RandomForestRegressor, ExtraTreesRegressor])
def test_forest_of_a_repeated_target_is_the_single_target_forest(cls, client):
    """Trees, predictions, out-of-bag predictions, score and curve, on the threads of this
    process and on the session's cluster."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(1500, 5))
    y = X[:, 0] * 2 + X[:, 1] ** 2 + rng.normal(size=len(X))
    Y = np.column_stack([y, y])
    settings = {"n_estimators": 12, "bootstrap": True, "oob_score": True, "random_state": 3}
    one = cls(**settings).fit(X, y)
    for where in (None, client):
        many = cls(client=where, **settings).fit(X, Y)
        _same_forest(one, many, 2)
        np.testing.assert_array_equal(many.predict(X), np.column_stack([one.predict(X)] * 2))
        np.testing.assert_array_equal(
            many.oob_prediction_, np.column_stack([one.oob_prediction_] * 2)
        )
        assert many.oob_score_ == one.oob_score_
        np.testing.assert_array_equal(many.oob_curve_, one.oob_curve_)


def test_forest_out_of_bag_results_are_scikit_learns_metrics():
    """oob_score_ is the R² averaged over the outputs (scikit-learn's uniform average), and
    the curve's last point their mean squared error, of the out-of-bag predictions; a callable
    score gets the (n, k) targets and predictions."""
    X, Y = make_regression(n_samples=400, n_features=6, n_targets=3, random_state=0)
    forest = RandomForestRegressor(n_estimators=30, oob_score=True, random_state=0).fit(X, Y)
    scored = ~np.isnan(forest.oob_prediction_).any(axis=1)
    assert forest.oob_prediction_.shape == Y.shape
    np.testing.assert_allclose(
        forest.oob_score_, r2_score(Y[scored], forest.oob_prediction_[scored]), rtol=1e-12
    )
    np.testing.assert_allclose(
        forest.oob_curve_[-1],
        mean_squared_error(Y[scored], forest.oob_prediction_[scored]),
        rtol=1e-12,
    )
    scorer = RandomForestRegressor(n_estimators=30, oob_score=r2_score, random_state=0)
    assert scorer.fit(X, Y).oob_score_ == pytest.approx(forest.oob_score_, rel=1e-12)
    # each tree predicts its leaf's means, and the forest their mean
    trees = np.mean([est.predict(X) for est in forest.estimators_], axis=0)
    np.testing.assert_allclose(forest.predict(X), trees, rtol=1e-12)


def fitted_on_a_cluster(client, cls, X, Y, settings):
    """Forests of ``cls`` fitted on the cluster on X and Y (of 5 and of k columns) as numpy
    arrays, dask arrays, and dask DataFrames of 3 partitions; and X as that DataFrame."""
    frame = dd.from_pandas(pd.DataFrame(X, columns=list("abcde")), npartitions=3)
    columns = [f"y{o}" for o in range(Y.shape[1])]
    targets_frame = dd.from_pandas(pd.DataFrame(Y, columns=columns), npartitions=3)
    inputs = [
        (X, Y),
        (da.from_array(X, chunks=(400, 5)), da.from_array(Y, chunks=(300, Y.shape[1]))),
        (frame, targets_frame),
    ]
    return [cls(client=client, **settings).fit(*data) for data in inputs], frame


def test_forest_on_dask_input_and_cluster_is_the_local_forest(client):
    X, Y = targets(7, n=1200, k=2)
    settings = {"n_estimators": 8, "max_depth": 6, "random_state": 0}
    local = RandomForestRegressor(**settings).fit(X, Y)
    forests, frame = fitted_on_a_cluster(client, RandomForestRegressor, X, Y, settings)
    for fitted in forests:
        assert fitted.mode_ != "distributed"
        np.testing.assert_array_equal(fitted.predict(X), local.predict(X))
    prediction = fitted.predict(frame)
    assert isinstance(prediction, da.Array)
    np.testing.assert_array_equal(client.compute(prediction, sync=True), local.predict(X))


def test_forest_shap_and_export():
    X, Y = targets(8, n=300, k=2)
    forest = ExtraTreesRegressor(n_estimators=5, max_depth=5, random_state=0).fit(X, Y)
    values = forest.shap_values(X[:10])
    assert values.shape == (10, X.shape[1], 2)
    np.testing.assert_allclose(
        values.sum(axis=1) + forest.shap_expected_value_, forest.predict(X[:10]), atol=1e-9
    )
    exported = forest.to_sklearn()
    assert exported.n_outputs_ == 2
    np.testing.assert_array_equal(exported.predict(X), forest.predict(X))
    again = pickle.loads(pickle.dumps(forest))
    np.testing.assert_array_equal(again.predict(X), forest.predict(X))


def test_forest_refusals(client):
    X, Y = targets(0, n=200, k=2)
    for forest, what in [
        (RandomForestRegressor(n_estimators="auto"), "n_estimators='auto' takes one target"),
        (RandomForestRegressor(prune="oob"), "prune='oob' takes one target"),
        (RandomForestRegressor(aggregation="median"), "aggregation='median' takes one target"),
        (RandomForestRegressor(mode="distributed"), "mode='distributed' takes one target"),
        (
            RandomForestRegressor(client=client, tree_storage="workers"),
            "tree_storage='workers' takes one target",
        ),
        (RandomForestQuantileRegressor(), "predicts the quantiles of one target; y has 2"),
        (RandomForestRegressor(criterion="poisson"), "criterion='poisson' takes one target"),
        (RandomForestRegressor(categorical_features=[1]), r"features \[1\] are categorical"),
    ]:
        with pytest.raises(ValueError, match=what):
            forest.fit(X, np.abs(Y))
    forest = RandomForestRegressor(n_estimators=4, oob_score=True, random_state=0).fit(X, Y)
    for call, what in [
        (lambda: forest.predict(X, return_std=True), "return_std=True"),
        (lambda: forest.predict_interval(X), "predict_interval"),
        (lambda: forest.oob_permutation_importance(X, Y), "oob_permutation_importance"),
        (lambda: forest.oob_impurity_importance(X, Y), "oob_impurity_importance"),
    ]:
        with pytest.raises(ValueError, match=what + " needs a single output.* 2 target columns"):
            call()
    forest.set_params(warm_start=True, n_estimators=6)
    with pytest.raises(ValueError, match="warm_start: y has 1 columns but the forest was fitted"):
        forest.fit(X, Y[:, 0])


def test_forest_out_of_bag_prediction_of_integer_targets_is_its_trees_mean():
    """scikit-learn's check of integer multi-output targets (read as a regression, not as
    classes), with our in-bag rows (``estimators_samples_``) in place of its bootstrap
    indices: each row's out-of-bag prediction is the mean of the trees that left it out."""
    X = load_iris().data
    Y = np.random.RandomState(42).randint(0, 10, size=(len(X), 2))
    forest = RandomForestRegressor(n_estimators=30, oob_score=True, random_state=0).fit(X, Y)
    in_bag = forest.estimators_samples_
    for i in range(0, len(X), 7):
        left_out = [t for t, rows in enumerate(in_bag) if i not in rows]
        trees = [forest.estimators_[t].predict(X[i : i + 1])[0] for t in left_out]
        np.testing.assert_allclose(forest.oob_prediction_[i], np.mean(trees, axis=0), rtol=1e-12)


def test_model_files_keep_every_output(tmp_path, client):
    """A tree and forests (on the client, and saved from a cluster's fit) round trip through
    model files bit for bit; a manifest whose outputs disagree with its trees is refused."""
    X, Y = targets(9, n=500, k=3)
    models = {
        "tree": DecisionTreeRegressor(max_depth=6, random_state=0).fit(X, Y),
        "forest": ExtraTreesRegressor(n_estimators=5, random_state=0).fit(X, Y),
        "cluster": RandomForestRegressor(n_estimators=5, client=client, random_state=0).fit(X, Y),
    }
    for name, model in models.items():
        model.save(tmp_path / name)
        loaded = dasktrees.load(tmp_path / name)
        assert loaded.n_outputs_ == 3
        np.testing.assert_array_equal(loaded.predict(X), model.predict(X))

    def two_outputs(manifest):
        manifest["fitted"]["n_outputs_"] = 2

    rewrite_manifest(tmp_path / "forest", two_outputs)
    with pytest.raises(ValueError, match="n_values is 3, expected 2"):
        dasktrees.load(tmp_path / "forest")
    X2, y2 = targets(9, n=200, k=1)
    DecisionTreeClassifier(max_depth=2).fit(X2, y2.ravel() > 0).save(tmp_path / "classifier")
    rewrite_manifest(tmp_path / "classifier", two_outputs)
    with pytest.raises(ValueError, match=r"n_outputs_ is 2, but the classes are of 1 column\(s\)"):
        dasktrees.load(tmp_path / "classifier")


def test_merged_forests_of_several_columns():
    """Two forests of the same k columns merge into the forest of all their trees (its
    out-of-bag results computed again on the rows); other k are refused."""
    X, Y = targets(10, n=400, k=2)
    a = RandomForestRegressor(n_estimators=6, random_state=1).fit(X, Y)
    b = RandomForestRegressor(n_estimators=4, random_state=2).fit(X, Y)
    merged = dasktrees.merge_forests([a, b], X=X, y=Y)
    assert merged.n_outputs_ == 2 and merged.oob_prediction_.shape == Y.shape
    np.testing.assert_allclose(
        merged.predict(X), (6 * a.predict(X) + 4 * b.predict(X)) / 10, rtol=1e-12
    )
    single = RandomForestRegressor(n_estimators=4, random_state=2).fit(X, Y[:, 0])
    with pytest.raises(ValueError, match="fitted on 2 and 1 target columns"):
        dasktrees.merge_forests([a, single])


def test_a_tree_of_several_columns_grows_within_its_planned_memory():
    """The memory plan's bytes a row (``levels.bytes_per_gathered_row``, which the replicated
    and sampled modes' choice reads) counts every target column: a full-depth tree on four
    columns of distinct targets (a node for nearly every row) peaks within it."""
    import tracemalloc

    from dasktrees import BinMapper
    from dasktrees.core.params import check_tree_params
    from dasktrees.distributed import levels
    from dasktrees.learner.grower import grow_tree

    rng = np.random.default_rng(13)
    n, n_features, k = 60_000, 8, 4
    X = rng.normal(size=(n, n_features)).astype(np.float32)
    Y = np.ascontiguousarray(X[:, :k] + rng.logistic(size=(n, k)))
    mapper = BinMapper(random_state=0).fit(X)
    params = check_tree_params(DecisionTreeRegressor(), n, n_features, False)
    w = rng.poisson(1.0, n).astype(np.float64)
    rows = np.flatnonzero(w > 0)
    codes, targets, weights = mapper.transform(X)[rows], Y[rows], w[rows]
    handed = codes.nbytes + targets.nbytes + weights.nbytes
    grow_tree(codes[:50], targets[:50], weights[:50], mapper.kernel_arrays(), params, k, 0)
    tracemalloc.start()
    try:
        grow_tree(codes, targets, weights, mapper.kernel_arrays(), params, k, 0)
        peak = tracemalloc.get_traced_memory()[1] + handed
    finally:
        tracemalloc.stop()
    estimate = levels.bytes_per_gathered_row(n_features, k, n_targets=k) * len(rows)
    one_target = levels.bytes_per_gathered_row(n_features, k) * len(rows)
    assert peak <= 1.05 * estimate, (peak, estimate)
    assert estimate - one_target >= 2 * 8 * (k - 1) * len(rows)  # the targets, twice

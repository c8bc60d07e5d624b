"""The Poisson criterion (``criterion="poisson"``): a single tree is the exact greedy Poisson
tree of a naive reference, and scikit-learn's where both must find the same splits; forests
of it through every path a regressor takes."""

import pickle

import numpy as np
import pytest
from scipy.special import xlogy
from sklearn.metrics import mean_poisson_deviance
from sklearn.tree import DecisionTreeRegressor as SkTreeRegressor

import dasktrees
from dasktrees import (
    DecisionTreeRegressor,
    ExtraTreesRegressor,
    RandomForestQuantileRegressor,
    RandomForestRegressor,
)


def counts(seed, n=1500, n_values=60):
    """Poisson counts of a log-linear rate in two of five integer features (at most 255
    distinct values each, so that bins are the values), with row weights that make tied
    splits improbable."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, n_values, size=(n, 5)).astype(float)
    y = rng.poisson(np.exp(0.04 * X[:, 0] - 0.03 * X[:, 1])).astype(float)
    w = rng.uniform(0.5, 1.5, n)
    return X, y, w


def deviance(y, w):
    """Half Poisson deviance of rows about their weighted mean, times their weight."""
    s = (w * y).sum()
    if s <= 0:
        return 0.0
    mean = s / w.sum()
    return float((w * (xlogy(y, y / mean) - y + mean)).sum())


def naive_poisson_tree(X, y, w, min_samples_leaf):
    """The exact greedy Poisson tree, by brute force: at each node the cut of largest decrease
    of the deviance among those leaving ``min_samples_leaf`` rows and a positive sum of y on
    each side; a node is a leaf without one or when its deviance is zero. Returns a function
    predicting its leaves' weighted means."""
    nodes = []

    def build(rows):
        node = {"mean": (w[rows] * y[rows]).sum() / w[rows].sum()}
        nodes.append(node)
        total = deviance(y[rows], w[rows])
        if len(rows) < 2 * min_samples_leaf or total <= np.finfo(float).eps * w[rows].sum():
            return node
        best_gain, best = 0.0, None
        for f in range(X.shape[1]):
            values = X[rows, f]
            for cut in np.unique(values)[:-1]:
                left, right = rows[values <= cut], rows[values > cut]
                if min(len(left), len(right)) < min_samples_leaf:
                    continue
                if (y[left] * w[left]).sum() <= 0 or (y[right] * w[right]).sum() <= 0:
                    continue
                gain = total - deviance(y[left], w[left]) - deviance(y[right], w[right])
                if gain > best_gain:
                    best_gain, best = gain, (f, cut, left, right)
        if best is not None:
            f, cut, left, right = best
            node.update(feature=f, cut=cut, left=build(left), right=build(right))
        return node

    root = build(np.arange(len(y)))

    def predict(X_new):
        out = np.empty(len(X_new))
        for i, x in enumerate(X_new):
            node = root
            while "feature" in node:
                node = node["left"] if x[node["feature"]] <= node["cut"] else node["right"]
            out[i] = node["mean"]
        return out

    return predict, len(nodes)


@pytest.mark.parametrize("seed", range(4))
def test_a_tree_is_the_exact_greedy_poisson_tree(seed):
    """Grown to the end (leaves of 3 rows): the same nodes and leaf means as the naive
    reference on the training rows (elsewhere the cuts may differ: ours sit between the
    values of all rows, the reference's between those of the node), and no leaf of zero mean
    anywhere."""
    X, y, w = counts(seed, n=800)
    tree = DecisionTreeRegressor(criterion="poisson", min_samples_leaf=3, random_state=0)
    tree.fit(X, y, sample_weight=w)
    predict, n_nodes = naive_poisson_tree(X, y, w, 3)
    assert tree.tree_.node_count == n_nodes
    np.testing.assert_allclose(tree.predict(X), predict(X), rtol=1e-12)
    grid = np.random.default_rng(seed).integers(-1, 61, size=(500, 5)).astype(float)
    assert (tree.predict(grid) > 0).all()  # no leaf of zero mean


@pytest.mark.parametrize("seed", range(6))
def test_a_tree_is_scikit_learns_poisson_tree(seed):
    """Leaves of at least 20 rows: the same tree as scikit-learn's, with the same impurities
    (half Poisson deviances) and importances. (With smaller leaves scikit-learn makes leaves of
    some nodes the reference splits: a child of zero sum can pass its scan by rounding residue,
    and the split is then dropped; docs/trees.md.)"""
    X, y, w = counts(seed)
    ours = DecisionTreeRegressor(criterion="poisson", min_samples_leaf=20, random_state=0)
    theirs = SkTreeRegressor(criterion="poisson", min_samples_leaf=20, random_state=0)
    ours.fit(X, y, sample_weight=w)
    theirs.fit(X, y, sample_weight=w)
    np.testing.assert_allclose(ours.predict(X), theirs.predict(X), rtol=1e-12)
    assert ours.tree_.node_count == theirs.tree_.node_count
    np.testing.assert_allclose(
        np.sort(ours.tree_.impurity), np.sort(theirs.tree_.impurity), rtol=1e-9, atol=1e-15
    )
    np.testing.assert_allclose(
        ours.feature_importances_, theirs.feature_importances_, rtol=1e-9, atol=1e-12
    )
    path, reference = (
        ours.cost_complexity_pruning_path(X, y, w),
        theirs.cost_complexity_pruning_path(X, y, w),
    )
    np.testing.assert_allclose(path.ccp_alphas, reference.ccp_alphas, rtol=1e-7, atol=1e-14)


def test_a_forest_task_ships_the_trees_it_grew():
    """One tree of all rows in a forest (shipped with every node's own impurity, as Poisson
    deviances do not pool as variances) is the single tree, number for number."""
    X, y, w = counts(0, n=1000)
    params = {"criterion": "poisson", "min_samples_leaf": 3, "max_features": None}
    tree = DecisionTreeRegressor(random_state=0, **params).fit(X, y, sample_weight=w)
    forest = RandomForestRegressor(n_estimators=1, bootstrap=False, random_state=0, **params)
    forest.fit(X, y, sample_weight=w)
    shipped = forest.estimators_[0].tree_
    assert shipped.node_count == tree.tree_.node_count
    np.testing.assert_array_equal(np.sort(shipped.impurity), np.sort(tree.tree_.impurity))
    np.testing.assert_array_equal(forest.predict(X), tree.predict(X))


def test_forests_beat_squared_error_on_counts():
    """On held-out Poisson counts, the Poisson forest's mean deviance is below the
    squared-error forest's (clipped to a small positive value where it predicts zero)."""
    X, y, _ = counts(1, n=3000, n_values=200)
    train, test = slice(0, 2000), slice(2000, None)
    scores = {}
    for cls in (RandomForestRegressor, ExtraTreesRegressor):
        for criterion in ("poisson", "squared_error"):
            model = cls(n_estimators=30, criterion=criterion, min_samples_leaf=10, random_state=0)
            predicted = model.fit(X[train], y[train]).predict(X[test])
            if criterion == "poisson":
                assert (predicted > 0).all()
            scores[cls, criterion] = mean_poisson_deviance(y[test], np.clip(predicted, 1e-6, None))
        assert scores[cls, "poisson"] < scores[cls, "squared_error"]


def test_out_of_bag_importances_model_files_pickles_and_export(tmp_path):
    X, y, w = counts(2, n=1000)
    model = RandomForestRegressor(
        n_estimators=8, criterion="poisson", oob_score=True, random_state=0, min_samples_leaf=2
    ).fit(X, y, sample_weight=w)
    assert 0.0 < model.oob_score_ < 1.0
    assert model.feature_importances_.argmax() in (0, 1)
    model.save(tmp_path / "model")
    for other in (dasktrees.load(tmp_path / "model"), pickle.loads(pickle.dumps(model))):
        assert other.criterion == "poisson"
        np.testing.assert_array_equal(other.predict(X), model.predict(X))
        np.testing.assert_array_equal(other.feature_importances_, model.feature_importances_)
        for a, b in zip(model.estimators_, other.estimators_):
            np.testing.assert_array_equal(a.tree_.impurity, b.tree_.impurity)
    exported = model.to_sklearn()
    assert exported.criterion == "poisson"
    np.testing.assert_array_equal(exported.predict(X), model.predict(X))


def test_on_a_cluster_with_dask_input_monotone_and_quantiles(client):
    import dask.array as da

    X, y, _ = counts(3, n=1200)
    forest = RandomForestRegressor(
        n_estimators=6, criterion="poisson", client=client, random_state=0, n_blocks=3
    )
    local = RandomForestRegressor(n_estimators=6, criterion="poisson", random_state=0, n_blocks=3)
    forest.fit(da.from_array(X, chunks=400), da.from_array(y, chunks=400))
    np.testing.assert_array_equal(forest.predict(X), local.fit(X, y).predict(X))
    # A monotonic constraint bounds a Poisson node's mean as a squared-error node's.
    increasing = RandomForestRegressor(
        n_estimators=6, criterion="poisson", monotonic_cst=[1, -1, 0, 0, 0], random_state=0
    ).fit(X, y)
    grid = np.tile(X[:30], (61, 1))
    grid[:, 0] = np.repeat(np.arange(61.0), 30)
    steps = np.diff(increasing.predict(grid).reshape(61, 30), axis=0)
    assert (steps >= 0).all()
    # A quantile forest grows the regressor's trees: its mean prediction is the regressor's.
    quantiles = RandomForestQuantileRegressor(
        n_estimators=6, criterion="poisson", random_state=0, n_blocks=3
    )
    np.testing.assert_array_equal(quantiles.fit(X, y).predict(X), local.predict(X))
    squared = RandomForestQuantileRegressor(n_estimators=6, random_state=0, n_blocks=3)
    assert not np.array_equal(squared.fit(X, y).predict(X), local.predict(X))
    assert (np.diff(quantiles.predict(X[:50], quantiles=[0.1, 0.5, 0.9]), axis=1) >= 0).all()


@pytest.mark.parametrize(
    "y, match",
    [
        ([-1.0, 1.0, 3.0, 0.0], r"Some value\(s\) of y are negative"),
        ([0.0, 0.0, 0.0, 0.0], "Sum of y is not strictly positive"),
    ],
)
def test_targets_that_are_not_counts_are_refused(y, match, client):
    import dask.array as da

    X = np.arange(8.0).reshape(4, 2)
    y = np.array(y)
    for model in (
        DecisionTreeRegressor(criterion="poisson"),
        RandomForestRegressor(n_estimators=2, criterion="poisson"),
        RandomForestRegressor(n_estimators=2, criterion="poisson", client=client),
    ):
        with pytest.raises(ValueError, match=match):
            model.fit(X, y)
    with pytest.raises(ValueError, match=match):
        RandomForestRegressor(n_estimators=2, criterion="poisson", client=client).fit(
            da.from_array(X, chunks=2), da.from_array(y, chunks=2)
        )


@pytest.mark.parametrize("target", [11.0, 7479548.59])
def test_a_node_of_equal_targets_is_a_leaf(target):
    """Fractional weights: the mean is rounded, and summed without its ``mu - y`` terms the
    deviance of equal targets is some 1e-16 of the target, which split such nodes on noise."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    w = rng.uniform(0.1, 3.0, 400)
    y = np.full(400, target)
    tree = DecisionTreeRegressor(criterion="poisson").fit(X, y, sample_weight=w)
    assert tree.tree_.node_count == 1
    # Counts with fractional weights: no split of a node whose targets are all equal.
    X, y, _ = counts(5, n=3000)
    w = rng.uniform(0.5, 2.0, len(y))
    tree = DecisionTreeRegressor(criterion="poisson").fit(X, y, sample_weight=w)
    t = tree.tree_
    split = np.flatnonzero(t.children_left >= 0)
    leaves = tree.apply(X)
    for node in split:
        rows = np.isin(leaves, np.flatnonzero(_descends_from(t, node)))
        assert np.ptp(y[rows]) > 0, node
    assert (tree.feature_importances_ >= 0).all()


def _descends_from(tree, node):
    """Flags of the nodes under ``node`` (itself included)."""
    under = np.zeros(tree.node_count, dtype=bool)
    stack = [node]
    while stack:
        n = stack.pop()
        under[n] = True
        if tree.children_left[n] >= 0:
            stack += [tree.children_left[n], tree.children_right[n]]
    return under


def test_deviance_kernels():
    """The node statistics' impurity is the mean half deviance, and ``impurity`` of their
    vector gives it again."""
    from dasktrees.core.criteria import POISSON, impurity
    from dasktrees.learner.histogram import node_statistics

    rng = np.random.default_rng(0)
    y = rng.poisson(2.0, 300).astype(float)
    w = rng.uniform(0.5, 2.0, 300)
    stats = np.empty(4)
    result = node_statistics(y, w, 0, 300, POISSON, stats)
    assert result == pytest.approx(deviance(y, w) / w.sum(), rel=1e-12)
    np.testing.assert_allclose(stats, [300, w.sum(), (w * y).sum(), (w * xlogy(y, y)).sum()])
    assert impurity(stats, POISSON) == pytest.approx(result, rel=1e-9)
    zeros = np.zeros(5)
    assert node_statistics(zeros, np.ones(5), 0, 5, POISSON, stats) == 0.0

"""Quantile regression forests and the forests' standard errors, against naive computations
written here, real tables and the quantile-forest package."""

from fractions import Fraction

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_diabetes
from sklearn.metrics import mean_pinball_loss
from sklearn.model_selection import KFold

import dasktrees as dt
from dasktrees.forest.quantiles import _MAX_GATHERED, _merge_runs
from dasktrees.learner.sampling import tree_counts

from .conftest import carseats, hitters

DIABETES_X, DIABETES_Y = load_diabetes(return_X_y=True)


def in_bag_counts(est, n_rows):
    """Tree t's bootstrap count of every training row, (n_trees, n_rows), recomputed."""
    counts = np.empty((len(est.estimators_), n_rows))
    lam = 1.0 if est.bootstrap else 0.0
    for t in range(len(est.estimators_)):
        tree_counts(est._seed, t, 0, lam, counts[t])
    return counts


@pytest.mark.parametrize("n_runs", [1, 2, 3, 8, 13])
def test_merged_runs_are_in_a_stable_sorts_order(n_runs):
    # The runs of one row (a run a tree, increasing ids, some empty) against numpy's stable
    # sort of the same entries: the same ids and, on equal ids, the earlier run's entry first.
    rng = np.random.default_rng(n_runs)
    lengths = rng.integers(0, 9, n_runs)
    runs = np.zeros(n_runs + 1, dtype=np.int64)
    np.cumsum(lengths, out=runs[1:])
    ids = np.zeros((2, 120), dtype=np.int64)
    weights = np.zeros((2, 120))
    for r in range(n_runs):
        ids[0, runs[r] : runs[r + 1]] = np.sort(rng.choice(12, lengths[r], replace=False))
    m = runs[-1]
    weights[0, :m] = np.arange(m)  # each entry's place before the merge
    order = np.argsort(ids[0, :m], kind="stable")
    expected_ids, expected_places = ids[0, order], weights[0, order]
    side = _merge_runs(ids, weights, runs, n_runs)
    assert np.array_equal(ids[side, :m], expected_ids)
    assert np.array_equal(weights[side, :m], expected_places)


def naive_quantiles(est, X_train, y_train, X, quantiles, sample_weight=None, oob=False):
    """Meinshausen's weighted quantiles in exact arithmetic: tree t gives each in-bag training
    row in the leaf x reaches its in-bag weight over the leaf's; the trees are averaged, and
    the q-quantile is the smallest target whose cumulative weight reaches q. ``oob``: X is the
    training data and row i takes only the trees that did not draw it."""
    n_train = len(y_train)
    sw = np.ones(n_train) if sample_weight is None else sample_weight
    counts = in_bag_counts(est, n_train)
    train_leaves = np.array([tree.apply(X_train) for tree in est.estimators_])
    leaves = np.array([tree.apply(X) for tree in est.estimators_])
    out = np.full((len(X), len(quantiles)), np.nan)
    for i in range(len(X)):
        weights = {}
        n_used = 0
        for t in range(len(est.estimators_)):
            if oob and counts[t, i] > 0:
                continue
            rows = np.flatnonzero((train_leaves[t] == leaves[t, i]) & (counts[t] * sw > 0))
            w = {r: Fraction(counts[t, r] * sw[r]) for r in rows}
            total = sum(w.values())
            for r in rows:
                weights[y_train[r]] = weights.get(y_train[r], 0) + w[r] / total
            n_used += 1
        if n_used == 0:
            continue
        for k, q in enumerate(quantiles):
            cumulative = Fraction(0)
            for value in sorted(weights):
                cumulative += weights[value] / n_used
                if cumulative >= Fraction(str(q)):  # q as written: 0.9 is 9/10
                    out[i, k] = value
                    break
    return out


QUANTILES = [0.05, 0.25, 0.5, 0.9, 0.95]


@pytest.mark.parametrize(
    "n_rows, params",
    [
        (120, dict(n_estimators=10)),  # full depth: a few targets a leaf, gathered and sorted
        (400, dict(n_estimators=40, max_depth=1)),  # large leaves: bisection over the targets
    ],
)
def test_quantiles_equal_a_naive_computation(n_rows, params):
    X, y = DIABETES_X[:n_rows], DIABETES_Y[:n_rows]
    X_test = DIABETES_X[n_rows : n_rows + 40]
    est = dt.RandomForestQuantileRegressor(random_state=0, **params).fit(X, y)
    leaves = est.forest_.apply(est.bin_mapper_.encode(X_test))
    reached = np.diff(est.leaf_targets_.offsets)[leaves].sum(axis=1)
    # Each case takes one of the two paths: gathering the targets, or the bisection.
    assert np.all(reached > _MAX_GATHERED) == ("max_depth" in params)
    predicted = est.predict(X_test, quantiles=QUANTILES)
    np.testing.assert_array_equal(predicted, naive_quantiles(est, X, y, X_test, QUANTILES))


def test_sample_weights_weigh_the_leaf_targets():
    X, y = DIABETES_X[:150], DIABETES_Y[:150]
    sw = np.random.default_rng(0).integers(0, 4, len(y)).astype(float)
    est = dt.RandomForestQuantileRegressor(n_estimators=8, random_state=1)
    est.fit(X, y, sample_weight=sw)
    X_test = DIABETES_X[200:230]
    np.testing.assert_array_equal(
        est.predict(X_test, quantiles=QUANTILES),
        naive_quantiles(est, X, y, X_test, QUANTILES, sample_weight=sw),
    )


def test_out_of_bag_quantiles_equal_a_naive_computation():
    X, y = DIABETES_X[:100], DIABETES_Y[:100]
    est = dt.RandomForestQuantileRegressor(
        n_estimators=12, random_state=2, oob_score=True, default_quantiles=(0.1, 0.5, 0.9)
    ).fit(X, y)
    naive = naive_quantiles(est, X, y, X, [0.1, 0.5, 0.9], oob=True)
    np.testing.assert_array_equal(est.oob_quantiles_, naive)
    scored = ~np.isnan(naive[:, 0])
    inside = (naive[scored, 0] <= y[scored]) & (y[scored] <= naive[scored, 2])
    assert est.oob_coverage_ == pytest.approx(inside.mean())


def test_quantiles_never_cross_and_keep_the_order_asked():
    X, y = DIABETES_X[:300], DIABETES_Y[:300]
    est = dt.RandomForestQuantileRegressor(n_estimators=30, random_state=0).fit(X, y)
    grid = np.linspace(0, 1, 41)
    values = est.predict(DIABETES_X[300:], quantiles=grid)
    assert np.all(np.diff(values, axis=1) >= 0)
    assert values.shape == (len(DIABETES_X) - 300, len(grid))
    shuffled = grid[::-1]
    np.testing.assert_array_equal(
        est.predict(DIABETES_X[300:], quantiles=shuffled), values[:, ::-1]
    )
    median = est.predict(DIABETES_X[300:], quantiles=0.5)
    assert median.shape == (len(DIABETES_X) - 300,)
    np.testing.assert_array_equal(median, values[:, 20])
    # Without quantiles: the mean, the regressor's prediction.
    np.testing.assert_array_equal(
        est.predict(DIABETES_X[300:]),
        dt.RandomForestRegressor(n_estimators=30, random_state=0)
        .fit(X, y)
        .predict(DIABETES_X[300:]),
    )


def test_dask_in_dask_out_and_the_same_leaves_on_a_cluster(client):
    X, y = DIABETES_X[:300], DIABETES_Y[:300]
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    local = dt.RandomForestQuantileRegressor(n_estimators=20, random_state=3, oob_score=True)
    local.fit(frame, y)
    parts = dd.from_pandas(frame, npartitions=3)
    remote = dt.RandomForestQuantileRegressor(
        n_estimators=20, random_state=3, oob_score=True, client=client
    ).fit(parts, dd.from_pandas(pd.Series(y), npartitions=3))
    for a, b in zip(local.leaf_targets_.arrays(), remote.leaf_targets_.arrays()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(
        local.oob_quantiles_, client.compute(remote.oob_quantiles_, sync=True)
    )
    assert local.oob_coverage_ == remote.oob_coverage_
    out = remote.predict(parts, quantiles=[0.1, 0.9])
    assert hasattr(out, "compute")
    np.testing.assert_array_equal(
        client.compute(out, sync=True), local.predict(frame, quantiles=[0.1, 0.9])
    )


def _codes(frame):
    """A table as numbers, categories as their codes: what both libraries take."""
    return np.column_stack(
        [
            frame[c].to_numpy(dtype=float)
            if pd.api.types.is_numeric_dtype(frame[c])
            else frame[c].astype("category").cat.codes.to_numpy(dtype=float)
            for c in frame
        ]
    )


def _regression_tables():
    diamonds = dt.datasets.load_builtin("diamonds").sample(3000, random_state=0)
    y_diamonds = np.log(diamonds.pop("price").to_numpy(dtype=float))
    return {
        "diabetes": (DIABETES_X, DIABETES_Y),
        "hitters": (_codes(hitters()[0]), hitters()[1]),
        "carseats": (_codes(carseats()[0]), carseats()[1]),
        "diamonds": (_codes(diamonds), y_diamonds),
    }


@pytest.mark.slow
def test_intervals_cover_held_out_rows_and_match_quantile_forest():
    """The 90 % interval covers 85-95 % of held-out rows (5-fold cross-validation), and the
    pinball loss is within 3 % of the quantile-forest package's, same trees, on each table."""
    from quantile_forest import RandomForestQuantileRegressor

    quantiles = [0.05, 0.5, 0.95]
    for name, (X, y) in _regression_tables().items():
        inside, ours, theirs = [], [], []
        for train, test in KFold(5, shuffle=True, random_state=0).split(X):
            est = dt.RandomForestQuantileRegressor(n_estimators=100, random_state=0)
            q = est.fit(X[train], y[train]).predict(X[test], quantiles=quantiles)
            other = RandomForestQuantileRegressor(n_estimators=100, random_state=0, n_jobs=2)
            p = other.fit(X[train], y[train]).predict(X[test], quantiles=quantiles)
            inside.append((q[:, 0] <= y[test]) & (y[test] <= q[:, 2]))
            for loss, values in ((ours, q), (theirs, p)):
                loss.append(
                    np.mean(
                        [
                            mean_pinball_loss(y[test], values[:, j], alpha=a)
                            for j, a in enumerate(quantiles)
                        ]
                    )
                )
        coverage = np.concatenate(inside).mean()
        assert 0.85 <= coverage <= 0.95, (name, coverage)
        assert np.mean(ours) <= 1.03 * np.mean(theirs), (name, np.mean(ours), np.mean(theirs))


def test_standard_errors_equal_a_direct_jackknife():
    """The bias-corrected infinitesimal jackknife computed from the counts matrix directly."""
    X, y = DIABETES_X[:80], DIABETES_Y[:80]
    X_test = DIABETES_X[100:120]
    est = dt.RandomForestRegressor(n_estimators=200, random_state=4, max_features=0.5).fit(X, y)
    mean, std = est.predict(X_test, return_std=True)
    np.testing.assert_array_equal(mean, est.predict(X_test))
    counts = in_bag_counts(est, len(y))  # (B, n)
    trees = np.array([tree.predict(X_test) for tree in est.estimators_])  # (B, m)
    n_trees, n_rows = counts.shape
    expected = np.empty(len(X_test))
    for j in range(len(X_test)):
        cov = [
            np.mean((counts[:, i] - counts[:, i].mean()) * (trees[:, j] - trees[:, j].mean()))
            for i in range(n_rows)
        ]
        v = np.sum(np.square(cov)) - n_rows / n_trees**2 * np.sum(
            (trees[:, j] - trees[:, j].mean()) ** 2
        )
        expected[j] = np.sqrt(max(v, 0.0))
    np.testing.assert_allclose(std, expected, rtol=1e-9, atol=1e-9)
    assert np.count_nonzero(expected) > len(expected) // 2  # not all clipped to zero


def test_standard_errors_need_the_bootstrap():
    X, y = DIABETES_X[:80], DIABETES_Y[:80]
    for est in (
        dt.ExtraTreesRegressor(n_estimators=3, random_state=0),
        dt.RandomForestRegressor(n_estimators=3, random_state=0, max_samples=0.5),
    ):
        with pytest.raises(ValueError, match="return_std=True needs the bootstrap"):
            est.fit(X, y).predict(X, return_std=True)


def test_bad_quantiles_are_refused_with_their_name():
    X, y = DIABETES_X[:80], DIABETES_Y[:80]
    est = dt.RandomForestQuantileRegressor(n_estimators=3, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="quantiles must be in"):
        est.predict(X, quantiles=[0.5, 1.5])
    with pytest.raises(TypeError, match="quantiles must be floats"):
        est.predict(X, quantiles=["median"])
    with pytest.raises(ValueError, match="return_std=True needs quantiles=None"):
        est.predict(X, quantiles=0.5, return_std=True)
    with pytest.raises(ValueError, match="default_quantiles must be"):
        dt.RandomForestQuantileRegressor(n_estimators=3, default_quantiles=(-0.1,)).fit(X, y)


def test_extra_trees_quantiles_keep_every_training_target():
    X, y = DIABETES_X[:100], DIABETES_Y[:100]
    est = dt.ExtraTreesQuantileRegressor(n_estimators=5, random_state=0, max_depth=3).fit(X, y)
    # No bootstrap: each tree's leaves hold every training row, one entry per distinct target.
    distinct = sum(len(set(zip(tree.apply(X), y))) for tree in est.estimators_)
    assert len(est.leaf_targets_.target_ids) == distinct
    np.testing.assert_array_equal(
        est.predict(X[:20], quantiles=QUANTILES), naive_quantiles(est, X, y, X[:20], QUANTILES)
    )

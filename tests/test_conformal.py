"""Prediction intervals calibrated on the out-of-bag rows (``predict_interval``,
``dasktrees.conformal``): the order-statistic sketch against numpy's sort, the intervals against
their definition, and their coverage on simulated data over many seeds."""

import math

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dasktrees import (
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestQuantileRegressor,
    RandomForestRegressor,
)
from dasktrees.forest import conformal
from dasktrees.forest.conformal import ConformalScores, order_sketch


def exact_threshold(scores, coverage):
    k = math.ceil(coverage * (len(scores) + 1))
    return math.inf if k > len(scores) else np.sort(scores)[k - 1]


@pytest.mark.parametrize("coverage", [0.05, 0.5, 0.8, 0.9, 0.95, 0.999])
def test_sketch_of_small_blocks_is_exact(coverage):
    rng = np.random.default_rng(0)
    blocks = [rng.exponential(size=n) for n in (300, 1, 250, 449)]
    blocks[0][:7] = np.nan  # rows without an out-of-bag prediction: left out
    blocks[2][:40] = blocks[2][40:80]  # ties across a block
    scores = ConformalScores.from_sketches([order_sketch(b) for b in blocks], 993)
    finite = np.concatenate(blocks)
    finite = finite[~np.isnan(finite)]
    assert len(finite) == 993
    assert scores.threshold(coverage) == exact_threshold(finite, coverage)


@pytest.mark.parametrize("kept", [100_000, 100])
def test_sketch_of_large_blocks_errs_on_the_wide_side_by_few_ranks(kept, monkeypatch):
    monkeypatch.setattr(conformal, "KEPT_SIZE", kept)  # 100: fewer pairs kept than the blocks'
    rng = np.random.default_rng(1)
    blocks = [rng.normal(size=n) ** 2 for n in (5_000, 3_001, 7_777)]
    blocks.append(np.full(3, np.nan))  # a block of rows without an out-of-bag prediction
    size = 64  # each block keeps 64 order statistics of its thousands
    sketches = [order_sketch(b, size) for b in blocks]
    assert all(len(v) == size and r[-1] == len(b) for (v, r), b in zip(sketches, blocks[:3]))
    scores = ConformalScores.from_sketches(sketches, 15_778)
    assert len(scores.values) == min(kept, 3 * size) and scores.counts[-1] == 15_778
    every = np.sort(np.concatenate(blocks[:3]))
    n = len(every)
    for coverage in np.linspace(0.01, 0.99, 25):
        k = math.ceil(coverage * (n + 1))
        q = scores.threshold(coverage)
        # Never narrower than exact; wider by fewer than n / size + n / kept ranks in all.
        assert q >= every[k - 1]
        assert np.searchsorted(every, q, side="left") < k + n / size + n / kept


def test_regressor_interval_is_the_mean_plus_or_minus_the_residuals_order_statistic():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 4))
    y = X[:, 0] + rng.normal(size=400)
    forest = RandomForestRegressor(n_estimators=30, oob_score=True, random_state=0).fit(X, y)
    residuals = np.abs(y - forest.oob_prediction_)
    residuals = residuals[~np.isnan(residuals)]
    q = exact_threshold(residuals, 0.8)
    interval = forest.predict_interval(X[:50], coverage=0.8)
    mean = forest.predict(X[:50])
    np.testing.assert_array_equal(interval, np.column_stack([mean - q, mean + q]))
    # The mean's residuals whatever aggregation says; dask in, dask out.
    forest.set_params(aggregation="median")
    np.testing.assert_array_equal(forest.predict_interval(X[:50], coverage=0.8), interval)
    lazy = forest.predict_interval(da.from_array(X[:50], chunks=20), coverage=0.8)
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), interval)
    # A dataframe's blocks, of lengths unknown until read.
    frame = dd.from_pandas(pd.DataFrame(X[:50]), npartitions=3)
    np.testing.assert_array_equal(forest.predict_interval(frame, 0.8).compute(), interval)
    # More coverage than the rows can calibrate: the whole line.
    assert np.all(np.isinf(forest.predict_interval(X[:3], coverage=1 - 1e-6)))


def test_quantile_forest_interval_is_the_conformalized_quantiles():
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(500, 3))
    y = X[:, 0] * rng.normal(size=500)  # the spread grows with x0
    forest = RandomForestQuantileRegressor(
        n_estimators=40, oob_score=True, default_quantiles=[0.1, 0.5, 0.9], random_state=0
    ).fit(X, y)
    # The scores: how far each target falls outside its out-of-bag band (0.1 to 0.9).
    low, high = forest.oob_quantiles_[:, 0], forest.oob_quantiles_[:, 2]
    outside = np.maximum(low - y, y - high)
    outside = outside[~np.isnan(outside)]
    assert forest.oob_interval_scores_.n_scores == len(outside)
    for coverage in (0.5, 0.8, 0.95):
        q = exact_threshold(outside, coverage)
        assert forest.oob_interval_scores_.threshold(coverage) == q
        band = forest.predict(X[:60], [0.1, 0.9])
        middle = band.mean(axis=1)  # a negative q narrows the band, to its middle at most
        expected = np.column_stack(
            [np.minimum(band[:, 0] - q, middle), np.maximum(band[:, 1] + q, middle)]
        )
        np.testing.assert_array_equal(forest.predict_interval(X[:60], coverage), expected)
    frame = dd.from_pandas(pd.DataFrame(X[:60]), npartitions=2)
    np.testing.assert_array_equal(
        forest.predict_interval(frame, 0.95).compute(), forest.predict_interval(X[:60], 0.95)
    )
    # A coverage low enough for a negative threshold narrows the band to its middle at most.
    q = forest.oob_interval_scores_.threshold(0.05)
    narrow = forest.predict_interval(X[:60], 0.05)
    assert q < 0 and np.all(narrow[:, 0] <= narrow[:, 1])
    # Adaptive: wider where the targets spread more.
    grid = np.column_stack([np.linspace(0.05, 0.95, 10), np.full(10, 0.5), np.full(10, 0.5)])
    widths = np.diff(forest.predict_interval(grid, 0.9), axis=1)[:, 0]
    assert widths[-1] > 3 * widths[0]


@pytest.mark.parametrize("cls", [RandomForestRegressor, RandomForestQuantileRegressor])
def test_coverage_on_simulated_data_is_nominal(cls):
    """Many seeds, each a forest fitted on 300 rows and its intervals on 2,000 new rows of the
    same distribution: the coverage averages the nominal 0.9 and no seed is far from it."""
    coverages = []
    for seed in range(12):
        rng = np.random.default_rng(100 + seed)
        X = rng.uniform(-1, 1, size=(2_300, 5))
        y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + (0.2 + np.abs(X[:, 2])) * rng.normal(size=2_300)
        forest = cls(n_estimators=60, oob_score=True, random_state=seed)
        forest.fit(X[:300], y[:300])
        low, high = forest.predict_interval(X[300:], coverage=0.9).T
        coverages.append(np.mean((low <= y[300:]) & (y[300:] <= high)))
    assert 0.87 <= np.mean(coverages) <= 0.93, coverages
    assert min(coverages) >= 0.8, coverages


def test_intervals_saved_and_loaded(client, tmp_path):
    """The conformity scores travel with a model file, and with a sharded model saved from the
    workers (loaded here or onto them): the same intervals."""
    import dasktrees

    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 4))
    y = X[:, 0] + rng.normal(size=600)
    for cls in (RandomForestRegressor, RandomForestQuantileRegressor):
        params = {"n_estimators": 8, "oob_score": True, "random_state": 0}
        here = cls(**params).fit(X, y)
        expected = here.predict_interval(X[:40], 0.85)
        here.save(tmp_path / cls.__name__)
        loaded = dasktrees.load(tmp_path / cls.__name__)
        np.testing.assert_array_equal(loaded.predict_interval(X[:40], 0.85), expected)
        there = cls(client=client, tree_storage="workers", trees_per_task=3, **params).fit(X, y)
        np.testing.assert_array_equal(there.predict_interval(X[:40], 0.85), expected)
        there.save(tmp_path / f"{cls.__name__}-sharded")
        for kwargs in ({}, {"client": client}):
            loaded = dasktrees.load(tmp_path / f"{cls.__name__}-sharded", **kwargs)
            np.testing.assert_array_equal(loaded.predict_interval(X[:40], 0.85), expected)


def test_interval_refusals():
    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(200, 3)), rng.normal(size=200)
    with pytest.raises(ValueError, match="oob_score=True"):
        ExtraTreesRegressor(n_estimators=5).fit(X, y).predict_interval(X)
    forest = RandomForestRegressor(n_estimators=5, oob_score=True).fit(X, y)
    with pytest.raises(ValueError, match="coverage must be in"):
        forest.predict_interval(X, coverage=1.0)
    with pytest.raises(TypeError, match="coverage must be a float"):
        forest.predict_interval(X, coverage="0.9")
    assert not hasattr(RandomForestClassifier(), "predict_interval")

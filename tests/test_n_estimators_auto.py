"""n_estimators="auto": waves of trees until the out-of-bag Monte-Carlo error is small, the same
number of trees and the same forest on any cluster."""

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification, make_regression

import dasktrees as dt
from dasktrees.distributed.convergence import WAVE
from dasktrees.learner.sampling import tree_counts

from .conftest import local_client
from .test_forest_invariants import assert_same_forest


def noisy(n=600, flip=0.3, seed=0):
    return make_classification(n, 10, n_informative=4, flip_y=flip, random_state=seed)


def easy(n=600, seed=0):
    return make_classification(n, 10, n_informative=4, class_sep=4.0, flip_y=0.0, random_state=seed)


def test_easy_data_stops_at_the_first_wave_noisy_data_grows_more():
    small = dt.RandomForestClassifier(n_estimators="auto", random_state=0).fit(*easy())
    large = dt.RandomForestClassifier(n_estimators="auto", random_state=0).fit(*noisy())
    assert small.n_estimators_ == WAVE
    assert large.n_estimators_ >= 3 * WAVE
    assert large.n_estimators_ < large.max_n_estimators
    # The check after each wave, the last one under tol, the one before not.
    assert large.convergence_[-1, 1] <= large.tol < large.convergence_[-2, 1]
    np.testing.assert_array_equal(
        large.convergence_[:, 0], WAVE * np.arange(1, len(large.convergence_) + 1)
    )
    capped = dt.RandomForestClassifier(
        n_estimators="auto", max_n_estimators=40, random_state=0
    ).fit(*noisy())
    assert capped.n_estimators_ == 40


def test_the_waves_fill_one_progress_bar():
    """The command's progress bar: each wave's trees count after the earlier waves', out of
    max_n_estimators, and the bar ends once, where the growth stopped (or at the cap)."""
    from dasktrees.distributed.train import report_progress

    for cap in (1000, 40):
        calls = []
        with report_progress(lambda done, total, calls=calls: calls.append((done, total))):
            est = dt.RandomForestClassifier(
                n_estimators="auto", max_n_estimators=cap, random_state=0
            ).fit(*noisy())
        n = est.n_estimators_
        assert calls[-1] == (n, n)
        assert [done for done, _ in calls] == sorted(done for done, _ in calls)
        assert all(total == cap for _, total in calls[:-1])
        assert sum(done == total for done, total in calls) == 1  # one finished bar


def naive_share(est, X, y, classification):
    """The stopping statistic computed directly: each row's out-of-bag trees' values, their
    variance, and the target's variance (classes one-hot)."""
    n_trees = len(est.estimators_)
    counts = np.empty((n_trees, len(y)))
    for t in range(n_trees):
        tree_counts(est._seed, t, 0, 1.0, counts[t])
    if classification:
        values = np.array([tree.predict_proba(X) for tree in est.estimators_])
        target = np.eye(values.shape[2])[np.searchsorted(est.classes_, y)]
    else:
        values = np.array([tree.predict(X) for tree in est.estimators_])[:, :, None]
        target = y[:, None]
    variances, rows = [], []
    for i in range(len(y)):
        oob = counts[:, i] == 0
        if oob.sum() >= 2:
            variances.append(values[oob, i].var(axis=0, ddof=1).sum())
            rows.append(i)
    baseline = target[rows].var(axis=0).sum()
    return np.mean(variances) / n_trees / baseline


@pytest.mark.parametrize("classification", [True, False])
def test_the_stopping_statistic_equals_a_direct_computation(classification):
    if classification:
        X, y = noisy(300)
        est = dt.RandomForestClassifier(n_estimators="auto", max_n_estimators=WAVE)
    else:
        X, y = make_regression(300, 6, noise=20.0, random_state=0)
        est = dt.RandomForestRegressor(n_estimators="auto", max_n_estimators=WAVE)
    est.set_params(random_state=3).fit(X, y)
    assert est.n_estimators_ == WAVE
    assert est.convergence_[0, 1] == pytest.approx(naive_share(est, X, y, classification), rel=1e-9)


@pytest.mark.slow
def test_the_same_trees_on_any_cluster(client):
    X, y = noisy(500, seed=1)
    params = dict(n_estimators="auto", random_state=5, oob_score=True)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    threads = dt.RandomForestClassifier(**params).fit(frame, y)
    assert threads.n_estimators_ > WAVE  # more than one wave, or the test proves little
    parts = dd.from_pandas(frame, npartitions=3)
    two = dt.RandomForestClassifier(client=client, **params).fit(
        parts, dd.from_pandas(pd.Series(y), npartitions=3)
    )
    assert_same_forest(threads, two, frame)
    np.testing.assert_array_equal(threads.convergence_, two.convergence_)
    with local_client(1, 2, processes=False) as one:
        single = dt.RandomForestRegressor(client=one, **params).fit(X, y * 2.0)
    assert_same_forest(single, dt.RandomForestRegressor(**params).fit(X, y * 2.0), X)


def test_auto_needs_out_of_bag_rows_and_refuses_bad_values():
    X, y = easy(100)
    with pytest.raises(ValueError, match='n_estimators="auto" stops on the out-of-bag error'):
        dt.ExtraTreesClassifier(n_estimators="auto").fit(X, y)
    with pytest.raises(ValueError, match="n_estimators must be"):
        dt.RandomForestClassifier(n_estimators="many").fit(X, y)
    with pytest.raises(ValueError, match="tol must be"):
        dt.RandomForestClassifier(n_estimators="auto", tol=0.0).fit(X, y)
    with pytest.raises(ValueError, match="max_n_estimators must be"):
        dt.RandomForestClassifier(n_estimators="auto", max_n_estimators=0).fit(X, y)


def test_quantile_forest_and_warm_start_with_auto():
    X, y = make_regression(400, 5, noise=30.0, random_state=2)
    est = dt.RandomForestQuantileRegressor(n_estimators="auto", random_state=0).fit(X, y)
    assert est.forest_.n_trees == est.n_estimators_
    assert est.leaf_targets_.offsets[-1] > 0
    assert len(est.leaf_targets_.offsets) == len(est.forest_.values) + 1
    # A warm start from a fitted forest counts its trees in the first check.
    warm = dt.RandomForestRegressor(n_estimators=10, random_state=0, warm_start=True).fit(X, y)
    first = [e.tree_ for e in warm.estimators_]
    warm.set_params(n_estimators="auto").fit(X, y)
    assert warm.n_estimators_ == warm.convergence_[-1, 0]
    assert warm.convergence_[0, 0] == 10 + WAVE
    assert all(a is b.tree_ for a, b in zip(first, warm.estimators_))

"""n_jobs (the threads of this process a call uses) and verbose (what a fit prints)."""

import os
import time

import numpy as np
import pytest
from sklearn.datasets import make_classification

from dasktrees import DecisionTreeRegressor, RandomForestClassifier, RandomForestQuantileRegressor
from dasktrees.core.threads import effective_n_jobs, most_threads


def _data():
    return make_classification(20_000, 20, random_state=0)


def _cpu_per_wall(call):
    cpu, wall = time.process_time(), time.perf_counter()
    result = call()
    return (time.process_time() - cpu) / (time.perf_counter() - wall), result


def test_n_jobs_1_runs_one_thread_and_grows_the_same_forest():
    X, y = _data()
    params = dict(n_estimators=30, random_state=0, oob_score=True, prune="oob")
    RandomForestClassifier(2, n_jobs=1).fit(X[:500], y[:500])  # kernels loaded, not timed
    one = RandomForestClassifier(**params, n_jobs=1)
    # One thread can use at most the wall time in CPU time (a little more for the threads
    # the process has besides, such as a test cluster's scheduler).
    ratio, _ = _cpu_per_wall(lambda: one.fit(X, y))
    assert ratio < 1.15
    ratio, proba = _cpu_per_wall(lambda: one.predict_proba(np.tile(X, (5, 1))))
    assert ratio < 1.15
    every = RandomForestClassifier(**params, n_jobs=-1).fit(X, y)
    np.testing.assert_array_equal(every.predict_proba(np.tile(X, (5, 1))), proba)
    assert every.oob_score_ == one.oob_score_ and every.prune_ == one.prune_


def test_what_n_jobs_stands_for():
    assert effective_n_jobs(None) == effective_n_jobs(-1) == most_threads()
    assert effective_n_jobs(1) == 1
    assert effective_n_jobs(10_000) == most_threads()  # never more than numba runs
    assert effective_n_jobs(-10_000) == 1
    assert effective_n_jobs(np.int64(1)) == 1


@pytest.mark.parametrize(
    "value, error, match",
    [
        (0, ValueError, "n_jobs must be None or a nonzero integer, got 0"),
        ("2", TypeError, "n_jobs must be None or a nonzero integer, got '2'"),
        (1.5, TypeError, "n_jobs must be"),
    ],
)
def test_bad_n_jobs_is_refused_naming_it(value, error, match):
    X, y = _data()
    with pytest.raises(error, match=match):
        RandomForestClassifier(3, n_jobs=value).fit(X, y)
    with pytest.raises(error, match=match):
        DecisionTreeRegressor(n_jobs=value).fit(X, y)


def test_bad_verbose_is_refused_naming_it():
    X, y = _data()
    with pytest.raises(ValueError, match="verbose must be a bool or an integer >= 0, got -1"):
        RandomForestClassifier(3, verbose=-1).fit(X, y)


def test_verbose_levels(capsys):
    X, y = _data()
    X, y = X[:2000], y[:2000]
    RandomForestClassifier(8, random_state=0, trees_per_task=2).fit(X, y)
    assert capsys.readouterr().out == ""
    RandomForestClassifier(8, random_state=0, trees_per_task=2, oob_score=True, verbose=1).fit(X, y)
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("[dasktrees] RandomForestClassifier: ") for line in lines)
    assert "2,000 rows x 20 features binned" in lines[0]
    assert "8 trees grown" in lines[1] and "out-of-bag score" in lines[2]
    assert lines[-1].split(": ")[1].startswith("fitted in") and len(lines) == 4
    RandomForestQuantileRegressor(8, random_state=0, trees_per_task=2, verbose=2).fit(X, y)
    out = capsys.readouterr().out
    progress = [line for line in out.splitlines() if " of 8 trees " in line]
    assert len(progress) == 4 and "8 of 8 trees" in progress[-1]


class _TimedForest(RandomForestClassifier):
    """Records the threads its fit could use and the CPU per wall second it took."""

    def fit(self, X, y, sample_weight=None):
        self.threads_ = effective_n_jobs(self.n_jobs)
        grow = RandomForestClassifier.fit
        self.cpu_per_wall_, _ = _cpu_per_wall(lambda: grow(self, X, y, sample_weight))
        return self


@pytest.mark.slow
def test_grid_search_processes_share_the_cores():
    """GridSearchCV(n_jobs=2) fits in two joblib processes, each started with its share of the
    cores in NUMBA_NUM_THREADS: a forest with the default n_jobs uses that share."""
    from sklearn.model_selection import GridSearchCV

    X, y = _data()
    share = int(os.environ.get("NUMBA_NUM_THREADS", max(1, (os.cpu_count() or 1) // 2)))
    search = GridSearchCV(
        _TimedForest(n_estimators=30, random_state=0),
        {"min_samples_leaf": [1, 5]},
        cv=2,
        n_jobs=2,
        refit=False,
        scoring={
            "threads": lambda est, X, y: est.threads_,
            "cpu_per_wall": lambda est, X, y: est.cpu_per_wall_,
        },
    ).fit(X, y)
    threads = np.concatenate([search.cv_results_[f"split{k}_test_threads"] for k in range(2)])
    assert np.all(threads == share)
    ratios = np.concatenate([search.cv_results_[f"split{k}_test_cpu_per_wall"] for k in range(2)])
    assert np.all(ratios < share + 0.15)

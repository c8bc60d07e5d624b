"""Faults: a worker dies in the middle of a fit (each test has its own cluster)."""

import os
import threading
import time

import dask
import numpy as np
import pytest
from distributed import KilledWorker
from sklearn.datasets import make_classification, make_regression

from dasktrees import RandomForestClassifier, RandomForestQuantileRegressor
from dasktrees.distributed.levels import gathered_rows

from .conftest import local_client


@pytest.fixture
def fault_cluster():
    with dask.config.set({"distributed.scheduler.allowed-failures": 2}), local_client() as client:
        yield client


def kill_a_worker_once_trees_run(client, done, killed, marker="dasktrees-trees"):
    """Wait until a tree task (a task whose key holds ``marker``) is running, then os._exit
    the worker running it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not done.is_set():
        processing = client.processing()
        busy = [w for w, keys in processing.items() if any(marker in k for k in keys)]
        if busy:
            time.sleep(0.3)  # let the task get into the growth
            killed.append(busy[0])
            try:
                client.run(os._exit, 1, workers=[busy[0]], nanny=False)
            except Exception:  # noqa: BLE001 - the worker dies before it can answer
                pass
            return
        time.sleep(0.05)


@pytest.mark.slow
def test_fit_survives_a_killed_worker_and_equals_the_fit_without_fault(fault_cluster):
    X, y = make_classification(n_samples=30_000, n_features=20, random_state=0)
    params = dict(
        n_estimators=16, oob_score=True, random_state=0, trees_per_task=2, client=fault_cluster
    )
    done = threading.Event()
    killed = []
    killer = threading.Thread(
        target=kill_a_worker_once_trees_run, args=(fault_cluster, done, killed)
    )
    killer.start()
    faulty = RandomForestClassifier(**params).fit(X, y)
    done.set()
    killer.join()
    assert killed, "the test must really kill a worker mid-fit"
    clean = RandomForestClassifier(**params).fit(X, y)
    for a, b in zip(faulty.estimators_, clean.estimators_):
        np.testing.assert_array_equal(a.tree_.threshold, b.tree_.threshold)
        np.testing.assert_array_equal(a.tree_.value, b.tree_.value)
    assert faulty.oob_score_ == clean.oob_score_
    np.testing.assert_array_equal(faulty.predict_proba(X), clean.predict_proba(X))


@pytest.mark.slow
def test_distributed_mode_survives_a_killed_worker_with_the_replicated_forest(fault_cluster):
    """A worker killed while subtrees grow loses blocks, node ids of a round and subtrees: all
    are recomputed from their tasks, and the forest is still replicated mode's."""
    X, y = make_classification(n_samples=60_000, n_features=12, random_state=1)
    params = dict(n_estimators=4, oob_score=True, random_state=0, client=fault_cluster)
    done = threading.Event()
    killed = []
    killer = threading.Thread(
        target=kill_a_worker_once_trees_run,
        args=(fault_cluster, done, killed, "dasktrees-levels-subtrees"),
    )
    killer.start()
    with gathered_rows(8_000):
        faulty = RandomForestClassifier(mode="distributed", **params).fit(X, y)
    done.set()
    killer.join()
    assert killed, "the test must really kill a worker mid-fit"
    clean = RandomForestClassifier(mode="replicated", **params).fit(X, y)
    for a, b in zip(faulty.estimators_, clean.estimators_):
        np.testing.assert_array_equal(a.tree_.threshold, b.tree_.threshold)
        np.testing.assert_array_equal(a.tree_.value, b.tree_.value)
    assert faulty.oob_score_ == clean.oob_score_
    np.testing.assert_array_equal(faulty.predict_proba(X), clean.predict_proba(X))


def _exit_the_worker(array):
    """A task that kills the worker process running it, every time."""
    os._exit(1)


@pytest.mark.slow
def test_a_task_that_keeps_killing_workers_fails_clearly_in_bounded_time(fault_cluster):
    X, y = make_classification(n_samples=500, n_features=5, random_state=0)
    start = time.monotonic()
    with pytest.raises(KilledWorker, match="worker"):
        RandomForestClassifier(n_estimators=4, client=fault_cluster).fit(_poisoned(X), y)
    assert time.monotonic() - start < 120


def _poisoned(X):
    import dask.array as da

    return da.from_delayed(dask.delayed(_exit_the_worker)(X), shape=X.shape, dtype=X.dtype)


def _kill(client, worker):
    try:
        client.run(os._exit, 1, workers=[worker], nanny=False)
    except Exception:  # noqa: BLE001 - the worker dies before it can answer
        pass


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["numpy", "dask", "quantile"])
def test_forest_on_the_workers_survives_a_killed_worker(fault_cluster, kind):
    """The shards of a forest kept on the workers are futures of tasks: a worker that dies
    after the fit takes their memory, and the next prediction grows them again from the tree
    tasks' graph (numpy input: the blocks embedded in it; dask input: the collection's graph;
    a quantile forest's shards, their leaf targets too), the same trees bit for bit."""
    import dask.array as da

    if kind == "quantile":
        X, y = make_regression(n_samples=3_000, n_features=8, noise=5.0, random_state=2)
        cls, predict = RandomForestQuantileRegressor, lambda f, X: f.predict(X, [0.1, 0.5, 0.9])
    else:
        X, y = make_classification(n_samples=4_000, n_features=10, random_state=2)
        cls, predict = RandomForestClassifier, lambda f, X: f.predict_proba(X)
    if kind == "dask":
        X, y = da.from_array(X, chunks=1_000), da.from_array(y, chunks=1_000)
    params = dict(n_estimators=8, random_state=0, trees_per_task=2, client=fault_cluster)
    on_client = cls(tree_storage="client", **params).fit(X, y)
    forest = cls(tree_storage="workers", **params).fit(X, y)
    X_test = np.asarray(X[:500])
    expected = predict(on_client, X_test)
    np.testing.assert_array_equal(predict(forest, X_test), expected)
    holders = fault_cluster.who_has(forest._tree_shards.parts)
    worker = next(iter(holders.values()))[0]
    lost = [key for key, where in holders.items() if worker in where]
    _kill(fault_cluster, worker)
    deadline = time.monotonic() + 60
    while worker in fault_cluster.scheduler_info()["workers"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert worker not in fault_cluster.scheduler_info()["workers"], "the worker must be gone"
    assert lost, "the killed worker held shards"
    np.testing.assert_array_equal(predict(forest, X_test), expected)
    np.testing.assert_array_equal(forest.feature_importances_, on_client.feature_importances_)

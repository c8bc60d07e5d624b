"""The memory a fit plans each worker within (``distributed/memory.py``): a worker's
``memory_limit``, else its host's available memory shared among its workers without a limit;
and a fit on workers Dask has paused fails at once instead of waiting."""

import time

import numpy as np
import psutil
import pytest
from sklearn.datasets import make_classification

from dasktrees import RandomForestClassifier
from dasktrees.distributed import memory
from dasktrees.distributed.client import cluster_workers
from dasktrees.distributed.local import InProcessClient

from .conftest import local_client

X, Y = make_classification(n_samples=20_000, n_features=10, random_state=0)


def test_a_worker_without_a_limit_gets_its_share_of_its_hosts_available_memory():
    with InProcessClient(2) as local:
        workers = {
            "limited": {"memory_limit": 2 << 30, "host": "elsewhere"},
            **cluster_workers(local),  # this process's two threads, without a limit
        }
        available = psutil.virtual_memory().available
        planned = memory.planned_workers(local, workers)
    assert planned["limited"]["memory_limit"] == 2 << 30
    assert planned["limited"]["limit_from"] == memory.FROM_LIMIT
    for thread in ("thread-0", "thread-1"):
        assert planned[thread]["limit_from"] == memory.FROM_AVAILABLE
        # the machine's available memory, shared by the two threads (it moves a little)
        assert 0.4 * available <= planned[thread]["memory_limit"] <= 0.6 * available
    assert memory.smallest_limit(planned) == 2 << 30  # the smallest decides
    assert "no memory_limit" in memory.describe_limit(planned)
    limited = memory.describe_limit({"w": planned["limited"]})
    assert limited == "the workers' memory_limit is 2,048 MiB"


def _little_memory(monkeypatch, n_bytes):
    """This machine, as far as a plan can tell, has ``n_bytes`` available."""
    monkeypatch.setattr(memory, "available_memory", lambda: n_bytes)


def test_without_a_client_a_fit_is_planned_within_the_machines_memory(monkeypatch):
    # No client: this process's threads, which have no memory limit. (Before, distributed mode
    # read that as 0 MiB and refused any table; auto mode never looked at the memory.)
    plain = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, Y)
    assert plain.mode_ == "replicated"
    spread = RandomForestClassifier(n_estimators=3, random_state=0, mode="distributed")
    np.testing.assert_array_equal(spread.fit(X, Y).predict_proba(X), plain.predict_proba(X))
    # 4 MiB a thread: no mode fits, and auto mode no longer replicates regardless.
    _little_memory(monkeypatch, 8 << 20)
    for forest in (RandomForestClassifier(n_estimators=3), spread):
        with pytest.raises(MemoryError, match="no memory_limit, and their host's available"):
            forest.fit(X, Y)


def test_workers_of_memory_limit_0_are_planned_within_their_hosts_memory(monkeypatch):
    # Dask's memory_limit=0, "no limit": two workers of one host share its available memory.
    with local_client(n_workers=2, processes=False, memory_limit=0) as client:
        available = psutil.virtual_memory().available
        planned = memory.planned_workers(client, cluster_workers(client))
        for worker in planned.values():
            assert 0.4 * available <= worker["memory_limit"] <= 0.6 * available
        params = dict(n_estimators=3, random_state=0, client=client)
        plain = RandomForestClassifier(**params).fit(X, Y)
        spread = RandomForestClassifier(mode="distributed", **params).fit(X, Y)
        assert plain.mode_ == "replicated"
        np.testing.assert_array_equal(spread.predict_proba(X), plain.predict_proba(X))
        _little_memory(monkeypatch, 8 << 20)  # what each worker asks its host (in this process)
        for mode in ("auto", "distributed"):
            with pytest.raises(MemoryError, match="host's available memory, shared among them"):
                RandomForestClassifier(mode=mode, **params).fit(X, Y)


@pytest.mark.timeout(120)  # before, the fit waited for ever
def test_a_fit_on_paused_workers_fails_at_once_saying_why():
    # An in-process worker's memory monitor measures this whole process: far over 100 MiB.
    with local_client(n_workers=1, processes=False, memory_limit="100 MiB") as client:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if [w["status"] for w in cluster_workers(client).values()] == ["paused"]:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the worker was never paused")
        with pytest.raises(MemoryError, match="every worker is paused by Dask's memory monitor"):
            RandomForestClassifier(n_estimators=3, client=client).fit(X, Y)


def test_a_fit_starts_when_some_workers_run():
    running = {"status": "running", "memory_limit": 1 << 30}
    paused = {"status": "paused", "memory_limit": 1 << 30, "metrics": {"memory": 900 << 20}}
    memory.check_workers_running({"a": running, "b": paused})
    memory.check_workers_running({"thread-0": {"memory_limit": 0}})  # no status: no client
    with pytest.raises(MemoryError, match="the largest uses 900 MiB"):
        memory.check_workers_running({"b": paused, "c": paused})

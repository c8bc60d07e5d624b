"""The memory a fit plans each worker within (``distributed/memory.py``): a worker's
``memory_limit``, else what it can reach (its memory and its host's available memory shared
among the host's workers without a limit); sampled mode's plan (``train.plan_sampled``); and a
fit on workers Dask has paused fails at once instead of waiting."""

import time
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
from sklearn.datasets import make_classification

from dasktrees import RandomForestClassifier
from dasktrees.distributed import memory
from dasktrees.distributed.client import cluster_workers
from dasktrees.distributed.local import InProcessClient
from dasktrees.distributed.train import default_trees_per_task

from .conftest import local_client

X, Y = make_classification(n_samples=20_000, n_features=10, random_state=0)


def test_a_worker_without_a_limit_gets_its_share_of_its_hosts_available_memory():
    with InProcessClient(2) as local:
        workers = {
            "limited": {"memory_limit": 2 << 30, "host": "elsewhere"},
            **cluster_workers(local),  # this process's two threads, without a limit
        }
        reach = psutil.Process().memory_info().rss + psutil.virtual_memory().available
        planned = memory.planned_workers(local, workers)
    assert planned["limited"]["memory_limit"] == 2 << 30
    assert planned["limited"]["limit_from"] == memory.FROM_LIMIT
    for thread in ("thread-0", "thread-1"):
        assert planned[thread]["limit_from"] == memory.FROM_AVAILABLE
        # this process's memory and the machine's available memory, shared by the two threads
        # (both move a little)
        assert 0.4 * reach <= planned[thread]["memory_limit"] <= 0.6 * reach
    assert memory.smallest_limit(planned) == 2 << 30  # the smallest decides
    assert "no memory_limit" in memory.describe_limit(planned)
    limited = memory.describe_limit({"w": planned["limited"]})
    assert limited == "the workers' memory_limit is 2,048 MiB"


def _little_memory(monkeypatch, n_bytes):
    """As far as a plan can tell, the workers' processes hold ``n_bytes`` and the machine has
    as much available."""
    monkeypatch.setattr(memory, "available_memory", lambda: n_bytes)
    monkeypatch.setattr(memory, "process_memory", lambda: n_bytes)


def test_without_a_client_a_fit_is_planned_within_the_machines_memory(monkeypatch):
    # No client: this process's threads, which have no memory limit. (Before, distributed mode
    # read that as 0 MiB and refused any table; auto mode never looked at the memory.)
    plain = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, Y)
    assert plain.mode_ == "replicated"
    spread = RandomForestClassifier(n_estimators=3, random_state=0, mode="distributed")
    np.testing.assert_array_equal(spread.fit(X, Y).predict_proba(X), plain.predict_proba(X))
    # 1 MiB a thread: no mode fits, and auto mode no longer replicates regardless.
    _little_memory(monkeypatch, 1 << 20)
    for forest in (RandomForestClassifier(n_estimators=3), spread):
        with pytest.raises(MemoryError, match="no memory_limit, and what they can reach"):
            forest.fit(X, Y)


def test_workers_of_memory_limit_0_are_planned_within_their_hosts_memory(monkeypatch):
    # Dask's memory_limit=0, "no limit": two workers of one host share its available memory.
    with local_client(n_workers=2, processes=False, memory_limit=0) as client:
        held = psutil.Process().memory_info().rss  # each in-process worker's process: this one
        available = psutil.virtual_memory().available
        planned = memory.planned_workers(client, cluster_workers(client))
        for worker in planned.values():
            assert 0.8 <= worker["memory_limit"] / (held + available / 2) <= 1.2
        params = dict(n_estimators=3, random_state=0, client=client)
        plain = RandomForestClassifier(**params).fit(X, Y)
        spread = RandomForestClassifier(mode="distributed", **params).fit(X, Y)
        assert plain.mode_ == "replicated"
        np.testing.assert_array_equal(spread.predict_proba(X), plain.predict_proba(X))
        _little_memory(monkeypatch, 1 << 20)  # what each worker asks its host (in this process)
        for mode in ("auto", "distributed"):
            with pytest.raises(MemoryError, match="their host's available memory, shared among"):
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


def test_sampled_mode_is_planned_and_refused_at_once_when_it_cannot_fit(monkeypatch, client):
    # max_samples under half the rows: auto mode samples, a tree a task.
    params = dict(n_estimators=8, max_samples=0.3, random_state=0)
    sampled = RandomForestClassifier(**params).fit(X, Y)
    replicated = RandomForestClassifier(mode="replicated", **params).fit(X, Y)
    assert sampled.mode_ == "sampled"
    np.testing.assert_array_equal(sampled.predict_proba(X), replicated.predict_proba(X))
    # on the workers, the trees of a task each make shards of the usual size
    kept = RandomForestClassifier(tree_storage="workers", client=client, **params).fit(X, Y)
    assert kept.mode_ == "sampled"
    assert len(kept._tree_shards.parts) == 8 // default_trees_per_task(8, 2)
    np.testing.assert_array_equal(kept.predict_proba(X), replicated.predict_proba(X))
    _little_memory(monkeypatch, 1 << 20)
    with pytest.raises(MemoryError, match=r'mode="sampled" needs at least [\d,]+ MiB of memory'):
        RandomForestClassifier(**params).fit(X, Y)


@pytest.mark.parametrize("regression, trees_per_task", [(True, 1), (True, 3), (False, 3)])
def test_a_sampled_task_peaks_within_its_planned_memory(regression, trees_per_task):
    """What ``plan_sampled`` counts a sampled tree task (``sampled_bytes_per_row``: a tree's
    rows as the blocks extracted them, their stack, its growth and records, and the other
    trees' rows and records) against the peak of its arrays (Python's allocations) and the
    extracted rows it takes: an upper bound, and for full-depth regression trees on distinct
    targets, the worst case (a node for nearly every row), at most 1.5 times the peak.
    (Classification trees have far fewer nodes than the bound's one a row.) And the least the
    plan counts (``sampled_least_bytes_per_row``, what it refuses by) is below the peak."""
    import tracemalloc

    from dasktrees import BinMapper, DecisionTreeClassifier, DecisionTreeRegressor
    from dasktrees.core.params import check_tree_params
    from dasktrees.distributed import levels
    from dasktrees.distributed.binned import BinnedPartition
    from dasktrees.distributed.train import (
        ForestSpec,
        extract_in_bag,
        grow_sampled,
        sampled_bytes_per_row,
        sampled_least_bytes_per_row,
    )

    mapper = BinMapper(random_state=0).fit(X)
    tree, n_values = (DecisionTreeRegressor(), 1) if regression else (DecisionTreeClassifier(), 2)
    params = check_tree_params(tree, len(Y), X.shape[1], not regression)
    spec = ForestSpec(params, mapper.kernel_arrays(), n_values, 0, 0.5, X.shape[1], False)
    y = X[:, 0] + X[:, 1] * X[:, 2] if regression else Y.astype(np.float64)
    codes, w = mapper.transform(X), np.ones(len(Y))
    cuts = np.array_split(np.arange(len(Y)), 4)
    blocks = [BinnedPartition(codes[r], y[r], w[r], int(r[0])) for r in cuts]
    trees = list(range(trees_per_task))
    grow_sampled(spec, False, [0], *[extract_in_bag(spec, [0], b) for b in blocks])  # compiled
    extracts = [extract_in_bag(spec, trees, b) for b in blocks]
    extracted = sum(a.nbytes for e in extracts for rows in e for a in rows)
    tracemalloc.start()
    try:
        grow_sampled(spec, False, trees, *extracts)
        peak = tracemalloc.get_traced_memory()[1] + extracted
    finally:
        tracemalloc.stop()
    in_bag = levels.estimate_tree_rows(len(Y), spec.lam)
    data = SimpleNamespace(bin_mapper=mapper, n_outputs=1)
    least = in_bag * sampled_least_bytes_per_row(data, trees_per_task)
    estimate = in_bag * sampled_bytes_per_row(data, spec, trees_per_task)
    assert least <= peak <= estimate, (least, peak, estimate)
    if regression:
        assert estimate <= 1.5 * peak, (peak, estimate)

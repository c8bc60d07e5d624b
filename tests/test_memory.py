"""The memory a fit plans each worker within (``distributed/memory.py``): a worker's
``memory_limit``, else what it can reach (its memory and its host's available memory shared
among the host's workers without a limit); sampled mode's plan (``train.plan_sampled``); and a
fit on workers Dask has paused fails at once instead of waiting."""

import time
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
from distributed.system import MEMORY_LIMIT
from sklearn.datasets import make_classification

from dasktrees import RandomForestClassifier, RandomForestQuantileRegressor
from dasktrees.distributed import levels, memory
from dasktrees.distributed.client import cluster_workers
from dasktrees.distributed.local import InProcessClient
from dasktrees.distributed.train import plan_sampled

from .conftest import local_client

X, Y = make_classification(n_samples=20_000, n_features=10, random_state=0)


def test_without_a_client_the_process_is_one_worker_of_its_threads():
    with InProcessClient(2) as local:
        reach = psutil.Process().memory_info().rss + psutil.virtual_memory().available
        reach = min(reach, MEMORY_LIMIT)  # (a container's limit caps it)
        planned = memory.planned_workers(local, cluster_workers(local))
    [process] = planned.values()
    assert process["nthreads"] == 2 and process["limit_from"] == memory.FROM_AVAILABLE
    # what it holds and the machine's available memory (both move a little), its own memory
    # counted once, not once a thread
    assert 0.8 * reach <= process["memory_limit"] <= 1.2 * reach
    assert process["metrics"]["memory"] <= process["memory_limit"]


def test_many_threads_share_one_process_memory(monkeypatch):
    # Sixteen threads and 6 GiB free: a small fit is planned, where sixteen "workers" of 384 MiB
    # each, every one counting the kernels' 320 MiB, could not hold it.
    monkeypatch.setattr(memory, "available_memory", lambda: 6 << 30)
    with InProcessClient(16) as local:
        planned = memory.planned_workers(local, cluster_workers(local))
    assert levels.plan_levels(569, 30, 2, 4, planned).budget_rows >= 569
    data = SimpleNamespace(bin_mapper=SimpleNamespace(n_features_in_=30), n_rows=569, n_outputs=1)
    spec = SimpleNamespace(lam=0.3, n_classes=2, params=SimpleNamespace(constrained=False))
    assert plan_sampled(data, spec, planned).least_bytes < 6 << 30


def test_the_smallest_worker_says_where_its_memory_came_from():
    limited = {"memory_limit": 2 << 30, "limit_from": memory.FROM_LIMIT}
    reaching = {"memory_limit": 8 << 30, "limit_from": memory.FROM_AVAILABLE}
    mixed = {"a": limited, "b": reaching}
    assert memory.smallest_limit(mixed) == 2 << 30
    assert memory.describe_limit(mixed) == "the workers' memory_limit is 2,048 MiB"
    assert "no memory_limit" in memory.describe_limit({"a": {**limited, **reaching}})
    assert memory.pause_share(mixed) == pytest.approx(0.8)  # Dask's default
    assert memory.pause_share({"b": reaching}) == 1.0  # Dask never pauses it
    assert memory.smallest_limit({}) == 0  # no worker yet: nothing to plan against
    nobody = plan_sampled(_TABLE, _SAMPLE, {}, usual_trees_per_task=4)
    assert nobody.trees_per_task == 4  # planned against nothing, refused by nothing
    with pytest.raises(ValueError, match="plan with planned_workers"):
        memory.smallest_limit({"a": {"memory_limit": 0}})


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
    # 2 MiB within reach: no mode fits, and auto mode no longer replicates regardless.
    _little_memory(monkeypatch, 1 << 20)
    for forest in (RandomForestClassifier(n_estimators=3), spread):
        with pytest.raises(MemoryError, match="no memory_limit, and what it can reach"):
            forest.fit(X, Y)


def test_workers_of_memory_limit_0_are_planned_within_their_hosts_memory(monkeypatch):
    # Dask's memory_limit=0, "no limit": two workers of one process (processes=False) share its
    # memory and its host's available memory.
    with local_client(n_workers=2, processes=False, memory_limit=0) as client:
        held = psutil.Process().memory_info().rss  # each in-process worker's process: this one
        share = min(held + psutil.virtual_memory().available, MEMORY_LIMIT) / 2
        planned = memory.planned_workers(client, cluster_workers(client))
        for worker in planned.values():
            assert 0.8 <= worker["memory_limit"] / share <= 1.2
            assert worker["sharing_process"] == 2
        # and its own memory: the process's, counted once between the two
        own = levels.workers_own_memory(client)
        assert levels.own_memory(planned, own) == max(own, levels.KERNELS_MEMORY) // 2
        params = dict(n_estimators=3, random_state=0, client=client)
        plain = RandomForestClassifier(**params).fit(X, Y)
        spread = RandomForestClassifier(mode="distributed", **params).fit(X, Y)
        assert plain.mode_ == "replicated"
        np.testing.assert_array_equal(spread.predict_proba(X), plain.predict_proba(X))
        _little_memory(monkeypatch, 1 << 20)  # what each worker asks its host (in this process)
        for mode in ("auto", "distributed"):
            with pytest.raises(MemoryError, match="no memory_limit, and what it can reach"):
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
    unlimited = {"status": "paused", "memory_limit": 0}  # (Dask pauses none, but if it did)
    with pytest.raises(MemoryError, match="the smallest limit is 1,024 MiB"):
        memory.check_workers_running({"b": paused, "c": unlimited})


def test_sampled_mode_is_planned_and_refused_at_once_when_it_cannot_fit(monkeypatch, client):
    # max_samples under half the rows: auto mode samples.
    params = dict(n_estimators=20, max_samples=0.3, random_state=0)
    sampled = RandomForestClassifier(**params).fit(X, Y)
    replicated = RandomForestClassifier(mode="replicated", **params).fit(X, Y)
    assert sampled.mode_ == "sampled"
    np.testing.assert_array_equal(sampled.predict_proba(X), replicated.predict_proba(X))
    # On the workers, a tree a task: shards of the usual size (3 trees, the last 2), the same
    # forest; a quantile forest's shards carry their leaves' targets too.
    kept = RandomForestClassifier(
        tree_storage="workers", trees_per_task=1, client=client, **params
    ).fit(X, Y)
    assert kept.mode_ == "sampled"
    assert np.diff(kept._tree_shards.first_trees).tolist() == [3] * 6 + [2]
    np.testing.assert_array_equal(kept.predict_proba(X), replicated.predict_proba(X))
    rows, target = X[:3000], X[:3000, 0] + X[:3000, 1]
    quantiles = dict(n_estimators=12, max_samples=0.3, random_state=0, trees_per_task=1)
    here = RandomForestQuantileRegressor(**quantiles).fit(rows, target)
    there = RandomForestQuantileRegressor(tree_storage="workers", client=client, **quantiles)
    there.fit(rows, target)
    assert np.diff(there._tree_shards.first_trees).tolist() == [2] * 6
    np.testing.assert_array_equal(there.predict(rows, [0.1, 0.9]), here.predict(rows, [0.1, 0.9]))
    _little_memory(monkeypatch, 1 << 20)
    with pytest.raises(MemoryError, match=r'mode="sampled" needs at least [\d,]+ MiB of memory'):
        RandomForestClassifier(mode="sampled", **params).fit(X, Y)
    # auto mode, when a sampled tree does not fit, grows it across the workers, if they can,
    # and says why neither fits
    with pytest.raises(MemoryError, match='mode="distributed" needs about') as refused:
        RandomForestClassifier(**params).fit(X, Y)
    assert 'mode="sampled" needs at least' in str(refused.value.__cause__)


# A table and a sample as the plans see them: 10M rows of 50 features, a tenth of them a tree.
_TABLE = SimpleNamespace(
    bin_mapper=SimpleNamespace(n_features_in_=50), n_rows=10_000_000, n_outputs=1
)
_SAMPLE = SimpleNamespace(lam=0.1, n_classes=2, params=SimpleNamespace(constrained=False))


def test_a_sampled_task_grows_as_many_trees_as_fit():
    workers = {"w": {"memory_limit": 4 << 30, "nthreads": 1, "limit_from": memory.FROM_LIMIT}}
    data, spec = _TABLE, _SAMPLE
    roomy = plan_sampled(data, spec, workers, 320 << 20, usual_trees_per_task=2)
    assert roomy.trees_per_task == 2  # the usual batch fits
    tight = plan_sampled(data, spec, workers, 320 << 20, usual_trees_per_task=40)
    assert 1 <= tight.trees_per_task < 40
    assert tight.most_bytes <= levels.MEMORY_SHARE * (4 << 30)
    given = plan_sampled(data, spec, workers, 320 << 20, trees_per_task=tight.trees_per_task + 1)
    assert given.most_bytes > levels.MEMORY_SHARE * (4 << 30)  # the user's, kept, if it runs
    with pytest.raises(MemoryError, match="40 a task"):
        plan_sampled(data, spec, workers, 320 << 20, trees_per_task=40)


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

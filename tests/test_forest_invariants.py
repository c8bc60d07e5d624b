"""Invariant 1 of docs/design.md: same seed, same forest, whatever the input type,
partitioning, number of workers, threads or processes, or no cluster at all. Invariant 2: dask
input stays distributed."""

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask.sizeof import sizeof
from sklearn.datasets import load_breast_cancer, make_regression

from dasktrees import ExtraTreesRegressor, RandomForestClassifier, RandomForestRegressor

from .conftest import local_client


def assert_same_forest(a, b, X):
    assert len(a.estimators_) == len(b.estimators_)
    for ta, tb in zip(a.estimators_, b.estimators_):
        for name in ("feature", "threshold", "children_left", "value", "impurity"):
            np.testing.assert_array_equal(getattr(ta.tree_, name), getattr(tb.tree_, name))
    np.testing.assert_array_equal(a.feature_importances_, b.feature_importances_)
    if hasattr(a, "oob_score_"):
        assert a.oob_score_ == b.oob_score_
        np.testing.assert_array_equal(a.oob_curve_, b.oob_curve_)
    pa, pb = (
        (a.predict_proba(X), b.predict_proba(X))
        if hasattr(a, "predict_proba")
        else (a.predict(X), b.predict(X))
    )
    np.testing.assert_array_equal(pa, pb)


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return X, y


def fit_classifier(client, X, y, **params):
    return RandomForestClassifier(
        n_estimators=12, oob_score=True, random_state=7, client=client, **params
    ).fit(X, y)


@pytest.mark.slow
def test_numpy_and_dask_inputs_and_partitionings_give_the_same_forest(client, cancer):
    X, y = cancer
    reference = fit_classifier(client, X, y)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(target=y)
    for n_parts in (1, 3, 7):
        chunk = int(np.ceil(len(y) / n_parts))
        dask_array = fit_classifier(
            client, da.from_array(X, chunks=(chunk, 10)), da.from_array(y, chunks=chunk)
        )
        assert_same_forest(reference, dask_array, X)
        ddf = dd.from_pandas(frame, npartitions=n_parts)
        dask_frame = fit_classifier(client, ddf.drop(columns="target"), ddf["target"])
        assert_same_forest(reference, dask_frame, frame.drop(columns="target"))
        local_blocks = fit_classifier(client, X, y, n_blocks=n_parts)
        assert_same_forest(reference, local_blocks, X)
    oob = reference.oob_decision_function_
    dask_oob = dask_array.oob_decision_function_
    assert isinstance(dask_oob, da.Array)
    np.testing.assert_array_equal(client.compute(dask_oob, sync=True), oob)


def test_regression_oob_score_is_exact_across_partitionings(client):
    X, y = make_regression(n_samples=700, n_features=8, noise=10.0, random_state=0)
    forests = [
        RandomForestRegressor(
            n_estimators=10, oob_score=True, random_state=3, client=client, n_blocks=n
        ).fit(X, y)
        for n in (1, 4, 7)
    ]
    for other in forests[1:]:
        assert_same_forest(forests[0], other, X)
        np.testing.assert_array_equal(forests[0].oob_prediction_, other.oob_prediction_)


@pytest.mark.slow
@pytest.mark.parametrize("workers, threads, processes", [(1, 1, True), (1, 2, False)])
def test_worker_count_threads_and_processes_give_the_same_forest(
    client, cancer, workers, threads, processes
):
    X, y = cancer
    reference = fit_classifier(client, X, y)
    with local_client(workers, threads, processes) as other:
        model = fit_classifier(other, X, y)
        assert_same_forest(reference, model, X)
        # Dask prediction runs on these workers' threads (serial kernels inside tasks).
        blocks = da.from_array(X, chunks=(100, 30))
        np.testing.assert_array_equal(
            other.compute(model.predict_proba(blocks), sync=True), reference.predict_proba(X)
        )
        extra = ExtraTreesRegressor(n_estimators=6, random_state=1, client=other).fit(X, y * 1.0)
    assert_same_forest(
        extra, ExtraTreesRegressor(n_estimators=6, random_state=1, client=client).fit(X, y * 1.0), X
    )


def test_without_a_client_everything_runs_in_this_process(client, cancer):
    """No default client: fit, out-of-bag estimates, permutation importance and predictions run
    on threads of this process, start no process, leave no thread, and give exactly the forest
    of a 2-worker cluster."""
    import threading

    import distributed
    import psutil

    X, y = cancer
    children = lambda: {p.pid for p in psutil.Process().children(recursive=True)}  # noqa: E731
    # The session's cluster (the ``client`` fixture) runs already and keeps its processes.
    children_before, threads_before = children(), threading.active_count()
    local = fit_classifier(None, X, y)
    local_importance = local.oob_permutation_importance(X, y, random_state=0)
    assert children() == children_before
    assert threading.active_count() == threads_before
    with pytest.raises(ValueError):
        distributed.default_client()

    remote = fit_classifier(client, X, y)
    assert_same_forest(local, remote, X)
    assert local.mode_ == remote.mode_
    np.testing.assert_array_equal(local.oob_decision_function_, remote.oob_decision_function_)
    remote_importance = remote.oob_permutation_importance(X, y, random_state=0)
    np.testing.assert_array_equal(local_importance.importances, remote_importance.importances)


@pytest.mark.parametrize("mode", ["replicated", "sampled"])
def test_without_a_client_dask_input_gives_dask_output_and_the_clusters_forest(client, mode):
    X, y = make_regression(n_samples=600, n_features=8, noise=5.0, random_state=0)
    Xd, yd = da.from_array(X, chunks=100), da.from_array(y, chunks=100)
    params = dict(n_estimators=6, oob_score=True, random_state=1, mode=mode, max_samples=0.4)
    local = RandomForestRegressor(**params).fit(Xd, yd)
    remote = RandomForestRegressor(client=client, **params).fit(X, y)
    assert local.mode_ == remote.mode_ == mode
    assert_same_forest(local, remote, X)
    assert isinstance(local.oob_prediction_, da.Array)
    assert local.oob_prediction_.chunks == Xd.chunks[:1]
    np.testing.assert_array_equal(local.oob_prediction_.compute(), remote.oob_prediction_)
    prediction = local.predict(Xd)
    assert isinstance(prediction, da.Array)
    np.testing.assert_array_equal(prediction.compute(), remote.predict(X))


def test_dask_input_is_never_collected_to_the_client(client, monkeypatch):
    """Generate the data on the workers, and record every object the client gathers during fit,
    OOB and prediction: none may be as large as a tenth of the data."""
    n_blocks, rows = 4, 5000

    def make_block(i):
        rng = np.random.default_rng(i)
        X = rng.normal(size=(rows, 10))
        return pd.DataFrame(X, columns=[f"x{j}" for j in range(10)]).assign(
            y=(X[:, 0] + X[:, 1] > 0).astype(int)
        )

    meta = make_block(0).iloc[:0]
    frame = dd.from_map(make_block, list(range(n_blocks)), meta=meta)
    data_bytes = n_blocks * rows * 11 * 8
    gathered = []
    original = type(client)._gather

    async def recording_gather(self, futures, *args, **kwargs):
        result = await original(self, futures, *args, **kwargs)
        gathered.append(sizeof(result))
        return result

    monkeypatch.setattr(type(client), "_gather", recording_gather)
    model = RandomForestClassifier(n_estimators=8, oob_score=True, random_state=0, client=client)
    model.fit(frame.drop(columns="y"), frame["y"])
    proba = model.predict_proba(frame.drop(columns="y"))
    assert isinstance(proba, da.Array) and isinstance(model.oob_decision_function_, da.Array)
    assert gathered, "the fit gathers bin edges, trees and sums"
    assert max(gathered) < data_bytes / 10, (max(gathered), data_bytes)
    assert model.oob_score_ > 0.9


@pytest.mark.parametrize(
    "params", [{"max_samples": 0.2}, {}, {"class_weight": "balanced_subsample"}]
)
def test_sampled_and_replicated_modes_grow_the_same_forest(client, cancer, params):
    X, y = cancer
    forests = {
        mode: RandomForestClassifier(
            n_estimators=8,
            random_state=5,
            mode=mode,
            client=client,
            n_blocks=3,
            oob_score=True,
            **params,
        ).fit(X, y)
        for mode in ("replicated", "sampled")
    }
    assert forests["sampled"].mode_ == "sampled" and forests["replicated"].mode_ == "replicated"
    assert_same_forest(forests["replicated"], forests["sampled"], X)
    auto = RandomForestClassifier(n_estimators=2, random_state=5, client=client, **params).fit(X, y)
    assert auto.mode_ == ("sampled" if params.get("max_samples") else "replicated")


def test_bad_mode(client, cancer):
    with pytest.raises(ValueError, match="mode must be"):
        RandomForestClassifier(n_estimators=2, mode="fast", client=client).fit(*cancer)


@pytest.mark.parametrize("mode", ["replicated", "sampled"])
@pytest.mark.parametrize("class_weight", [None, "balanced", "balanced_subsample"])
def test_trees_per_task_does_not_change_the_forest(client, cancer, mode, class_weight):
    """A task grows its trees one after the other in one reused workspace: one tree per task
    and eight per task give the same trees (nothing of a tree leaks into the next). With
    fractional weights ("balanced") the class counts of a split node are not its children's
    summed, and a tree ships every node's: those once stayed a view of the workspace, which
    the task's next tree overwrote."""
    X, y = cancer
    forests = [
        RandomForestClassifier(
            n_estimators=8,
            random_state=3,
            mode=mode,
            trees_per_task=k,
            class_weight=class_weight,
            client=client,
        ).fit(X, y)
        for k in (1, 8)
    ]
    assert_same_forest(*forests, X)


@pytest.mark.parametrize("n_trees, n_workers", [(100, 2), (30, 2), (7, 3), (1, 1), (500, 4)])
def test_default_tree_batches_shrink_towards_the_end(n_trees, n_workers):
    """Every tree once, in order; batches never grow, the first ones of the default size, the
    last ones no smaller than a quarter of it; a given size is kept."""
    from dasktrees.distributed.train import default_trees_per_task, tree_batches

    ids = list(range(n_trees))
    batches = tree_batches(ids, None, n_workers)
    assert [t for batch in batches for t in batch] == ids
    sizes = [len(batch) for batch in batches]
    largest = default_trees_per_task(n_trees, n_workers)
    assert sizes[0] == min(largest, n_trees)
    assert all(a >= b for a, b in zip(sizes, sizes[1:]))
    assert all(
        size >= min(-(-largest // 4), remaining)
        for size, remaining in zip(sizes, np.cumsum(sizes[::-1])[::-1])
    )
    assert [len(b) for b in tree_batches(ids, 3, n_workers)][:-1] == [3] * ((n_trees - 1) // 3)

"""Distributed mode: trees whose top nodes grow from histograms summed across the row blocks.

Small tables are forced into it with a small node budget (``levels.gathered_rows``): every node
of more rows than the budget is split from summed histograms, the others grow their subtrees
where their rows are gathered. The oracle is replicated mode, which grows each tree whole in one
task: on exact sums (counts, whole weights, integer targets) the trees must be the same, bit for
bit, array by array.
"""

import dask.array as da
import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer, make_classification, make_regression

from dasktrees import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from dasktrees.core.criteria import GINI
from dasktrees.distributed import levels
from dasktrees.distributed.client import cluster_workers
from dasktrees.distributed.levels import gathered_rows
from dasktrees.distributed.local import InProcessClient
from dasktrees.distributed.memory import planned_workers

TREE_ARRAYS = (
    "children_left",
    "children_right",
    "feature",
    "threshold",
    "missing_go_to_left",
    "value",
    "impurity",
    "n_node_samples",
    "weighted_n_node_samples",
)


def assert_same_trees(a, b, X, arrays=TREE_ARRAYS):
    assert len(a.estimators_) == len(b.estimators_)
    for ta, tb in zip(a.estimators_, b.estimators_):
        for name in arrays:
            np.testing.assert_array_equal(
                getattr(ta.tree_, name), getattr(tb.tree_, name), err_msg=name
            )
        np.testing.assert_array_equal(
            ta.tree_.categorical_bitsets if hasattr(ta.tree_, "categorical_bitsets") else 0,
            tb.tree_.categorical_bitsets if hasattr(tb.tree_, "categorical_bitsets") else 0,
        )
    predict = "predict_proba" if hasattr(a, "predict_proba") else "predict"
    np.testing.assert_array_equal(getattr(a, predict)(X), getattr(b, predict)(X))
    np.testing.assert_array_equal(a.apply(X), b.apply(X))
    if "impurity" in arrays:
        np.testing.assert_array_equal(a.feature_importances_, b.feature_importances_)
    else:  # the importances are decreases of impurity
        np.testing.assert_allclose(a.feature_importances_, b.feature_importances_, rtol=1e-12)
    if getattr(a, "oob_score", False):
        assert a.oob_score_ == b.oob_score_
        np.testing.assert_array_equal(a.oob_curve_, b.oob_curve_)


def fit_both(cls, X, y, budget=levels.MIN_BUDGET_ROWS, client=None, **params):
    params = {"n_estimators": 3, "random_state": 3, "client": client, **params}
    params.setdefault("oob_score", params.get("bootstrap", True))
    replicated = cls(mode="replicated", **params).fit(X, y)
    with gathered_rows(budget):
        spread = cls(mode="distributed", **params).fit(X, y)
    assert replicated.mode_ == "replicated" and spread.mode_ == "distributed"
    return replicated, spread


def _with_missing(X, rate, seed):
    X = X.copy()
    X[np.random.default_rng(seed).random(X.shape) < rate] = np.nan
    return X


@pytest.fixture(scope="module")
def binary():
    X, y = make_classification(
        n_samples=16_000, n_features=8, n_informative=5, flip_y=0.05, random_state=0
    )
    return _with_missing(X, 0.05, 1), y


@pytest.fixture
def decided(monkeypatch):
    """The number of open nodes each round decides, in this process."""
    counts = []
    original = levels.decide

    def counting(spec, infos, sums):
        counts.append(sum(len(info["top_ids"]) for info in infos))
        return original(spec, infos, sums)

    monkeypatch.setattr(levels, "decide", counting)
    return counts


def test_top_nodes_really_grow_from_summed_histograms(binary, decided):
    """The oracle must not be met trivially: the budget leaves several levels to the rounds."""
    X, y = binary
    replicated, spread = fit_both(RandomForestClassifier, X, y)
    assert len(decided) >= 3 and sum(decided) >= 3 * 3, decided
    assert_same_trees(replicated, spread, X)


def test_open_nodes_beyond_a_rounds_histograms_wait_and_grow_the_same_trees(
    binary, decided, monkeypatch
):
    """A round holding one node's histograms: every open node waits its turn, one a round."""
    monkeypatch.setattr(levels, "MAX_ROUND_HISTOGRAM_BYTES", 1)
    X, y = binary
    replicated, spread = fit_both(RandomForestClassifier, X, y, n_estimators=2)
    assert set(decided) == {1} and len(decided) >= 6, decided
    assert_same_trees(replicated, spread, X)


@pytest.mark.parametrize(
    "params",
    [
        {"criterion": "entropy", "max_features": 3},
        {"max_features": None, "min_samples_leaf": 3},
        {"max_depth": 3},  # the whole tree is its top: every leaf decided from histograms
        {"max_depth": 9, "min_weight_fraction_leaf": 0.001, "bootstrap": False},
        # best-first: the top's splits and the subtrees' compete for the leaves
        {"max_leaf_nodes": 6},
        {"max_leaf_nodes": 90, "max_features": 3},
        {"max_leaf_nodes": 900, "min_samples_leaf": 2},
    ],
)
def test_classifier_matches_replicated_mode(binary, params):
    X, y = binary
    assert_same_trees(*fit_both(RandomForestClassifier, X, y, **params), X)


def test_multiclass_extra_trees_match_replicated_mode():
    X, y = make_classification(
        n_samples=14_000, n_features=10, n_informative=6, n_classes=4, random_state=2
    )
    X = _with_missing(X, 0.02, 3)
    assert_same_trees(*fit_both(ExtraTreesClassifier, X, y, bootstrap=True), X)


@pytest.mark.parametrize("order", ["tree", "node"])
def test_categorical_features_match_replicated_mode(order):
    rng = np.random.default_rng(4)
    n = 15_000
    frame = pd.DataFrame(
        {
            "city": pd.Categorical(rng.choice([f"c{i}" for i in range(30)], n)),
            "kind": pd.Categorical(rng.choice(list("abcdef"), n)),
            "x": rng.normal(size=n),
            "z": rng.normal(size=n),
        }
    )
    effect = frame["city"].cat.codes.to_numpy() % 7 + (frame["kind"] == "c") * 3
    logits = effect - 3 + frame["x"].to_numpy()
    y = (logits + rng.logistic(size=n) > 0).astype(int)
    frame.loc[rng.random(n) < 0.03, "x"] = np.nan
    for params in ({}, {"max_leaf_nodes": 50}):
        replicated, spread = fit_both(
            RandomForestClassifier, frame, y, categorical_order=order, max_features=2, **params
        )
        assert_same_trees(replicated, spread, frame)
        assert any(t.tree_.categorical_bitsets.shape[0] for t in spread.estimators_)


def test_a_root_decided_a_leaf_is_a_one_node_tree(binary):
    """A root split from summed histograms may find no split worth making."""
    X, y = binary
    replicated, spread = fit_both(RandomForestClassifier, X, y, min_impurity_decrease=0.9)
    assert all(e.tree_.node_count == 1 for e in spread.estimators_)
    assert_same_trees(replicated, spread, X)


@pytest.mark.parametrize("cls", [RandomForestClassifier, ExtraTreesClassifier])
def test_monotonic_constraints_match_replicated_mode(binary, cls):
    """The top's nodes hand their value bounds to their children and subtrees."""
    X, y = binary
    constraints = [1, -1, 0, 1, 0, -1, 1, 0]
    replicated, spread = fit_both(cls, X, y, monotonic_cst=constraints, bootstrap=True)
    assert_same_trees(replicated, spread, X)
    # Along each constrained feature the second class's probability moves one way only, and
    # along some it moves: the constraints bind.
    moved = 0.0
    for j in np.flatnonzero(constraints):
        path = np.tile(np.nan_to_num(X[:20]), (41, 1, 1))
        path[:, :, j] = np.linspace(-4, 4, 41)[:, None]
        proba = spread.predict_proba(path.reshape(-1, 8))[:, 1].reshape(41, 20)
        assert (constraints[j] * np.diff(proba, axis=0) >= -1e-15).all()
        moved = max(moved, np.ptp(proba, axis=0).max())
    assert moved > 0.1


def test_monotonic_regression_on_integer_targets_matches_replicated_mode():
    X, y = make_regression(n_samples=12_000, n_features=6, noise=5.0, random_state=4)
    y = np.round(y)
    replicated, spread = fit_both(
        RandomForestRegressor, X, y, monotonic_cst=[1, 0, -1, 1, 0, 0], max_features=0.5
    )
    # A constrained tree keeps its nodes' own impurities (not pooled from its clipped leaves):
    # a top node's, summed from histograms, may differ from the rows' two-pass sum in the last
    # bit. Everything else is the same, bit for bit.
    assert_same_trees(replicated, spread, X, [a for a in TREE_ARRAYS if a != "impurity"])
    for a, b in zip(replicated.estimators_, spread.estimators_):
        np.testing.assert_allclose(a.tree_.impurity, b.tree_.impurity, rtol=1e-14, atol=0)


@pytest.mark.parametrize("cls", [RandomForestRegressor, ExtraTreesRegressor])
def test_poisson_on_counts_matches_replicated_mode(cls):
    """Counts and whole weights: the same sums in either mode, so the same trees; a top node's
    deviance is a sum of logarithms, rounded in another order than the one-task grower's."""
    X, _ = make_regression(n_samples=12_000, n_features=6, random_state=8)
    X = _with_missing(X, 0.03, 9)
    rate = np.exp(0.4 * np.nan_to_num(X[:, 0]) - 0.3 * np.nan_to_num(X[:, 1]))
    y = np.random.default_rng(8).poisson(rate).astype(float)
    replicated, spread = fit_both(cls, X, y, criterion="poisson", max_features=0.5, bootstrap=True)
    assert_same_trees(replicated, spread, X, [a for a in TREE_ARRAYS if a != "impurity"])
    for a, b in zip(replicated.estimators_, spread.estimators_):
        np.testing.assert_allclose(a.tree_.impurity, b.tree_.impurity, rtol=1e-13, atol=1e-15)
    assert (spread.predict(X) > 0).all()


def test_poisson_root_of_equal_targets_is_a_leaf():
    """Fractional weights: the root's deviance summed from the blocks about its rounded mean is
    (about) zero, so the root is a leaf, not split on rounding noise."""
    X, _ = make_regression(n_samples=6_000, n_features=4, random_state=10)
    w = np.random.default_rng(10).uniform(0.1, 3.0, len(X))
    with gathered_rows(levels.MIN_BUDGET_ROWS):
        forest = RandomForestRegressor(
            n_estimators=2, criterion="poisson", mode="distributed", random_state=0
        ).fit(X, np.full(len(X), 3.0), sample_weight=w)
    assert forest.mode_ == "distributed"
    assert [tree.tree_.node_count for tree in forest.estimators_] == [1, 1]


def test_regression_on_integer_targets_matches_replicated_mode():
    """Sums of whole weights times integer targets are exact in either mode."""
    X, y = make_regression(n_samples=15_000, n_features=8, noise=10.0, random_state=5)
    y = np.round(y)
    X = _with_missing(X, 0.03, 6)
    assert_same_trees(*fit_both(RandomForestRegressor, X, y, max_features=0.5), X)
    assert_same_trees(*fit_both(ExtraTreesRegressor, X, y, bootstrap=True), X)
    assert_same_trees(*fit_both(ExtraTreesRegressor, X, y, bootstrap=True, max_leaf_nodes=70), X)


def test_regression_on_real_targets_grows_the_same_splits():
    """Real targets: a top node's sums are rounded once instead of row by row, so its
    statistics may differ in the last bits (split nodes' are their leaves' pooled, so they do
    not); the splits, the rows of every node and the predictions agree."""
    X, y = make_regression(n_samples=15_000, n_features=8, noise=10.0, random_state=7)
    y = y / 7.3
    replicated, spread = fit_both(RandomForestRegressor, X, y)
    structure = ("children_left", "feature", "threshold", "n_node_samples")
    assert_close = np.testing.assert_allclose
    for ta, tb in zip(replicated.estimators_, spread.estimators_):
        for name in structure:
            np.testing.assert_array_equal(getattr(ta.tree_, name), getattr(tb.tree_, name))
        assert_close(ta.tree_.value, tb.tree_.value, rtol=1e-12, atol=1e-12)
    assert_close(replicated.predict(X), spread.predict(X), rtol=1e-12, atol=1e-12)


def test_fractional_weights_give_the_same_forest_on_any_partitioning(client):
    """Fractional weights are summed in folds, the same in any order: one forest for one to
    seven blocks, in this process and on a cluster of two workers."""
    X, y = make_classification(n_samples=14_000, n_features=6, random_state=8)
    weight = np.random.default_rng(9).uniform(0.2, 3.0, len(y))
    params = dict(n_estimators=2, random_state=1, mode="distributed", oob_score=True)
    forests = []
    with gathered_rows(levels.MIN_BUDGET_ROWS):
        for chunks, on in ((14_000, None), (4_700, None), (2_000, client)):
            Xd, yd = da.from_array(X, chunks=(chunks, 6)), da.from_array(y, chunks=chunks)
            wd = da.from_array(weight, chunks=chunks)
            forests.append(
                RandomForestClassifier(client=on, **params).fit(Xd, yd, sample_weight=wd)
            )
    for other in forests[1:]:
        assert_same_trees(forests[0], other, X)


def test_cluster_and_partitions_give_the_replicated_forest(client, binary):
    X, y = binary
    Xd, yd = da.from_array(X, chunks=(2_300, 8)), da.from_array(y, chunks=2_300)
    replicated = RandomForestClassifier(n_estimators=4, random_state=2, oob_score=True).fit(X, y)
    with gathered_rows(6_000):
        spread = RandomForestClassifier(
            n_estimators=4, random_state=2, oob_score=True, mode="distributed", client=client
        ).fit(Xd, yd)
    assert_same_trees(replicated, spread, X)


def test_a_fit_that_cannot_fit_fails_at_once_saying_how_much_memory_it_needs():
    workers = {f"w{i}": {"memory_limit": 64 << 20, "nthreads": 1} for i in range(2)}
    with pytest.raises(MemoryError, match=r"needs about [\d,]+ MiB of memory per worker"):
        levels.plan_levels(10_000_000, 50, 2, 4, workers)
    with pytest.raises(MemoryError, match="memory_limit is 64 MiB"):  # the smallest decides
        levels.plan_levels(10_000_000, 50, 2, 4, {**workers, "w0": {"memory_limit": 4 << 30}})


def test_a_small_table_without_a_memory_limit_grows_in_this_process():
    # Threads of this process (no client) have no memory limit: they are planned within this
    # machine's (tests/test_memory.py), and a table smaller than the smallest subtree task is
    # not too small.
    with InProcessClient(1) as local:
        workers = planned_workers(local, cluster_workers(local))
    plan = levels.plan_levels(569, 30, 2, 4, workers)
    assert plan.budget_rows >= 569
    X, y = load_breast_cancer(return_X_y=True)
    replicated = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y)
    spread = RandomForestClassifier(n_estimators=3, random_state=0, mode="distributed").fit(X, y)
    assert_same_trees(replicated, spread, X)


def test_plan_leaves_room_for_the_blocks_and_a_subtree_per_thread(client):
    limit = 2 << 30
    own = {"memory": 600 << 20, "managed_bytes": 100 << 20}  # 500 MiB outside Dask's data
    workers = {f"w{i}": {"memory_limit": limit, "nthreads": 1, "metrics": own} for i in range(2)}
    plan = levels.plan_levels(10_000_000, 50, 2, 4, workers)
    assert plan.baseline_bytes == 500 << 20  # from the heartbeats
    assert levels.MIN_BUDGET_ROWS <= plan.budget_rows < 10_000_000
    assert plan.peak_bytes <= levels.MEMORY_SHARE * limit * 1.01
    assert plan.peak_bytes >= levels.MEMORY_SHARE * limit * 0.95  # the room is used
    assert 0 < plan.histogram_bytes <= levels.HISTOGRAM_SHARE * limit
    # measured now, at least what a worker holds once it has loaded the kernels
    fresh = levels.plan_levels(10_000_000, 50, 2, 4, workers, own_bytes=450 << 20)
    assert fresh.baseline_bytes == 450 << 20 and fresh.budget_rows > plan.budget_rows
    small = levels.plan_levels(10_000_000, 50, 2, 4, workers, own_bytes=10 << 20)
    assert small.baseline_bytes == levels.KERNELS_MEMORY
    # the session cluster's workers, which have run fits: their interpreter and kernels
    assert levels.workers_own_memory(client) > 100 << 20
    threaded = levels.plan_levels(
        10_000_000, 50, 2, 4, {w: {**v, "nthreads": 2} for w, v in workers.items()}
    )
    assert threaded.budget_rows < plan.budget_rows / 1.9


@pytest.mark.parametrize(
    "regression, n_features, constrained",
    [(False, 8, False), (True, 8, False), (False, 30, False), (True, 30, False), (True, 8, True)],
)
def test_a_subtree_task_peaks_within_its_planned_memory(regression, n_features, constrained):
    """The plan's estimate of a subtree task (``bytes_per_gathered_row`` a row) against the
    peak of Python's allocations (numpy's, which hold every array of the task) and the handed
    rows it takes: an upper bound, within 5 %, and at most 1.5 times the peak. Full-depth
    regression trees on distinct targets are the worst case (a node for nearly every row);
    classification trees have fewer nodes."""
    import tracemalloc

    from dasktrees import BinMapper, DecisionTreeClassifier, DecisionTreeRegressor
    from dasktrees.core.params import check_tree_params
    from dasktrees.distributed.train import ForestSpec

    rng = np.random.default_rng(13)
    n = 60_000
    X = rng.normal(size=(n, n_features)).astype(np.float32)
    signal = X[:, 0] + X[:, 1] * X[:, 2] + rng.logistic(size=n)
    y = signal if regression else (signal > 0).astype(np.float64)
    mapper = BinMapper(random_state=0).fit(X)
    tree = DecisionTreeRegressor() if regression else DecisionTreeClassifier()
    if constrained:  # monotonic constraints: the workspace holds every node's value bounds
        tree.set_params(monotonic_cst=[1] + [0] * (n_features - 1))
    params = check_tree_params(tree, n, n_features, not regression)
    n_values = 1 if regression else 2
    spec = ForestSpec(params, mapper.kernel_arrays(), n_values, 0, 1.0, n_features, False)
    w = rng.poisson(1.0, n).astype(np.float64)
    rows = np.flatnonzero(w > 0)
    codes = mapper.transform(X)
    parts = [[(0, 0, codes[r], y[r], w[r])] for r in np.array_split(rows, 6)]
    handed = sum(c.nbytes + t.nbytes + u.nbytes for [(_, _, c, t, u)] in parts)
    total = float(w.sum())
    bounds = (-np.inf, np.inf)
    node = [(0, 0, 0, 99, 1, 2 * total, 2 * total, None, bounds)]  # a gathered node at depth 1
    levels.grow_subtrees(
        spec, node, True, *[[(0, 0, c[:50], t[:50], u[:50])] for [(_, _, c, t, u)] in parts]
    )
    tracemalloc.start()
    try:
        levels.grow_subtrees(spec, node, True, *parts)
        peak = tracemalloc.get_traced_memory()[1] + handed
    finally:
        tracemalloc.stop()
    estimate = levels.bytes_per_gathered_row(n_features, n_values, constrained) * len(rows)
    assert peak <= 1.05 * estimate and estimate <= 1.5 * peak, (peak, estimate)


def test_auto_mode_grows_across_workers_only_when_a_tree_does_not_fit(binary):
    from dasktrees.distributed.train import choose_mode

    class Data:
        n_rows = 10_000_000
        n_outputs = 1

        class bin_mapper:
            n_features_in_ = 50

    class Spec:
        lam = 1.0
        n_classes = 2
        n_outputs = 1
        balanced_subsample = False

        class params:
            criterion = GINI
            max_leaf_nodes = 0
            constrained = False

    small = {"w": {"memory_limit": 1 << 30}}
    large = {"w": {"memory_limit": 64 << 30}}
    assert choose_mode("auto", Data, Spec, small) == "distributed"
    assert choose_mode("auto", Data, Spec, large) == "replicated"
    # a worker runs a task a thread, each holding its own stack of the table
    threaded = {"w": {"memory_limit": 64 << 30, "nthreads": 16}}
    assert choose_mode("auto", Data, Spec, threaded) == "distributed"
    Spec.lam = 0.1
    assert choose_mode("auto", Data, Spec, small) == "sampled"


def test_folded_sums_do_not_depend_on_how_the_values_are_grouped():
    """Three partial sums of values rounded to fixed powers of two: the same totals in any
    grouping, within 2^-60 of the exact sum; whole numbers summed exactly."""
    import math

    from numba import njit

    from dasktrees.learner.block_histograms import N_FOLDS, fold_add, fold_quanta, unfold

    @njit
    def folded(values, quanta):
        out = np.zeros(quanta.shape[0])
        for x in values:
            fold_add(out, 0, x, quanta)
        return out

    rng = np.random.default_rng(11)
    values = rng.lognormal(0, 3, 5000) * rng.choice([-1, 1], 5000)
    quanta = fold_quanta(np.abs(values).max(), len(values), N_FOLDS)
    whole = folded(values, quanta)
    for _ in range(5):
        cut = np.sort(rng.choice(np.arange(1, len(values)), 6, replace=False))
        order = rng.permutation(len(values))
        parts = [folded(part, quanta) for part in np.split(values[order], cut)]
        np.testing.assert_array_equal(np.sum(parts[::-1], axis=0), whole)
    exact = math.fsum(values)
    assert abs(unfold(whole, 0, N_FOLDS) - exact) <= 2**-60 * np.abs(values).sum()
    integers = rng.integers(-(10**6), 10**6, 5000).astype(float)
    q = fold_quanta(np.abs(integers).max(), len(integers), N_FOLDS)
    assert unfold(folded(integers, q), 0, N_FOLDS) == integers.sum()


def test_everything_built_on_the_trees_works_on_a_distributed_forest(tmp_path):
    """Out-of-bag results, importances, quantiles, n_estimators="auto", warm start, SHAP and
    model files of a distributed forest: those of the replicated one."""
    import dasktrees
    from dasktrees import RandomForestQuantileRegressor

    X, y = make_regression(n_samples=12_000, n_features=6, noise=5.0, random_state=12)
    y = np.round(y)
    quantile = dict(n_estimators=2, random_state=4, oob_score=True)
    replicated, spread = fit_both(RandomForestQuantileRegressor, X, y, **quantile)
    rows = X[:50]
    np.testing.assert_array_equal(
        replicated.predict(rows, quantiles=[0.1, 0.9]), spread.predict(rows, quantiles=[0.1, 0.9])
    )
    np.testing.assert_array_equal(replicated.shap_values(rows), spread.shap_values(rows))
    np.testing.assert_array_equal(
        replicated.oob_impurity_importance(X, y).importances,
        spread.oob_impurity_importance(X, y).importances,
    )
    spread.save(tmp_path / "model")
    np.testing.assert_array_equal(dasktrees.load(tmp_path / "model").predict(X), spread.predict(X))
    auto = dict(n_estimators="auto", max_n_estimators=4, random_state=4, oob_score=True)
    replicated, spread = fit_both(RandomForestRegressor, X, y, **auto)
    assert replicated.n_estimators_ == spread.n_estimators_
    assert_same_trees(replicated, spread, X)
    grown = {}
    for mode in ("replicated", "distributed"):
        model = RandomForestRegressor(n_estimators=2, warm_start=True, random_state=4, mode=mode)
        with gathered_rows(levels.MIN_BUDGET_ROWS):
            model.fit(X, y)
            model.set_params(n_estimators=3).fit(X, y)
        grown[mode] = model
    assert_same_trees(grown["replicated"], grown["distributed"], X)

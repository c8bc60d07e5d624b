"""Warm a machine or a cluster up: every kernel compiled on tiny data before the first fit.

``warmup`` compiles every kernel a fit, a prediction or a reduction of any estimator can need,
on tiny data, into numba's cache (``core.kernel_cache`` makes that once per machine):
``dasktrees warmup`` on a machine, or on each worker of a cluster with ``WarmupPlugin`` or
``dask worker --preload dasktrees.compilation``.
"""

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from ..core.kernel_cache import compile_counts, file_lock

# Warming up: every kernel, compiled on tiny data through the estimators' own paths, so that
# the signatures compiled are those real fits and predictions use.


def _data(n_rows=200, n_features=4, seed=0):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, n_features))
    X[rng.random(X.shape) < 0.05] = np.nan
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) > 0).astype(np.int64)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(n_features)])
    frame["colour"] = pd.Categorical(rng.choice(["red", "green", "blue"], n_rows))
    return X, y, frame


def _warm_binning():
    """Binning: float64 and float32 columns, strided (a column of a 2-d array) and contiguous (a
    pandas column, or an array of one column), categories (more of them than bins too), and the
    hashed row sample."""
    import numpy as np

    from ..learner.binning import BinMapper

    X, _, frame = _data()
    for data in (X, X.astype(np.float32), frame, X[:, :1], X[:, :1].astype(np.float32)):
        mapper = BinMapper(subsample=100, random_state=0).fit(data)
        mapper.transform(data)
        mapper.encode(data)
    BinMapper(max_bins=2).fit(frame[["colour"]])  # more categories than bins: runs


def _warm_trees():
    """Single trees: binning (float64 and float32, contiguous and strided columns, categories),
    growth, pruning, and prediction (``predict``, ``apply``, ``decision_path``, and
    ``Tree.apply_binned`` on binned codes)."""
    import numpy as np

    from ..estimators.pruning import reduced_error_prune
    from ..estimators.trees import DecisionTreeClassifier, DecisionTreeRegressor

    X, y, frame = _data()
    target = X[:, 0] * 2.0
    target[np.isnan(target)] = 0.0
    for data in (X, X.astype(np.float32), frame, X[:, :1], X[:, :1].astype(np.float32)):
        for model, labels in (
            (DecisionTreeClassifier(max_leaf_nodes=8, ccp_alpha=0.01, random_state=0), y),
            (DecisionTreeRegressor(random_state=0), target),
        ):
            model.fit(data, labels)
            model.predict(data)
            model.apply(data)
            model.decision_path(data)
    model = DecisionTreeClassifier(random_state=0).fit(X, y)
    model.tree_.apply_binned(model.bin_mapper_.transform(X))
    model.cost_complexity_pruning_path(X, y)
    reduced_error_prune(model, X, y)


def _warm_forests():
    """Forests on a LocalCluster of threads in this process: fit (every tree task, out-of-bag
    reductions, permutation and impurity importance, out-of-bag pruning) and prediction (SHAP
    values too), float64 and float32."""
    import numpy as np
    from distributed import Client, LocalCluster

    from ..distributed.levels import MIN_BUDGET_ROWS, gathered_rows
    from ..estimators.forests import ExtraTreesRegressor, RandomForestClassifier
    from ..estimators.quantile_forests import RandomForestQuantileRegressor

    X, y, frame = _data()
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        for data in (X, X.astype(np.float32), frame):
            model = RandomForestClassifier(
                n_estimators=2, oob_score=True, random_state=0, client=client
            )
            model.fit(data, y)
            model.predict_proba(data)
            model.oob_permutation_importance(data, y)
            model.oob_impurity_importance(data, y)
            model.shap_values(data)
            regressor = ExtraTreesRegressor(
                n_estimators=2,
                bootstrap=True,
                oob_score=True,
                aggregation="median",
                random_state=0,
                client=client,
            )
            regressor.fit(data, y.astype(float))
            regressor.predict(data)
            # Best-first trees ship their children: packing them takes the general kernel.
            RandomForestClassifier(
                n_estimators=2, max_leaf_nodes=8, random_state=0, client=client
            ).fit(data, y).predict_proba(data)
            # Quantile forests, standard errors and n_estimators="auto" (one wave of 2 trees).
            quantile = RandomForestQuantileRegressor(
                n_estimators="auto",
                max_n_estimators=2,
                oob_score=True,
                random_state=0,
                client=client,
            )
            quantile.fit(data, y.astype(float))
            quantile.predict(data, quantiles=[0.1, 0.9])
            quantile.predict(data, return_std=True)
        # Several target and class columns: their out-of-bag sums and subset accuracy.
        RandomForestClassifier(n_estimators=2, oob_score=True, random_state=0, client=client).fit(
            X, np.column_stack([y, 1 - y])
        ).predict(X)
        ExtraTreesRegressor(
            n_estimators=2, bootstrap=True, oob_score=True, random_state=0, client=client
        ).fit(X, np.column_stack([y, 1 - y]).astype(float)).predict(X)
        # prune="oob": the truncations' keys (best-first ranks), votes under every cut, the
        # trees cut (their class counts kept).
        RandomForestClassifier(
            n_estimators=2, prune="oob:leaves", random_state=0, client=client
        ).fit(X, y)
        # Distributed mode: the tops of the trees split from summed histograms, on a table of
        # more rows than the smallest node budget, numeric and categorical.
        X_large, y_large, frame_large = _data(n_rows=3 * MIN_BUDGET_ROWS, seed=1)
        with gathered_rows(MIN_BUDGET_ROWS):
            for data in (X_large, frame_large):
                RandomForestClassifier(
                    n_estimators=1, mode="distributed", random_state=0, client=client
                ).fit(data, y_large)
                ExtraTreesRegressor(
                    n_estimators=1,
                    bootstrap=True,
                    mode="distributed",
                    random_state=0,
                    client=client,
                ).fit(data, y_large.astype(float))


# Groups of kernels compiled together, in the order one process warms them. Separate groups can
# be compiled in separate processes (``warmup(processes=2)``).
WARMUP_GROUPS = {"binning": _warm_binning, "trees": _warm_trees, "forests": _warm_forests}


@dataclass
class WarmupReport:
    """What a ``warmup`` did.

    Attributes
    ----------
    compiled : int
        Kernel signatures compiled (their cache was empty).
    loaded : int
        Kernel signatures loaded from numba's cache.
    wall_s, cpu_s : float
        Wall-clock and CPU seconds (this process and its warm-up processes, user + system).
    cache_dir : str
        Where numba's cache of the dasktrees kernels is.
    """

    compiled: int
    loaded: int
    wall_s: float
    cpu_s: float
    cache_dir: str

    def __str__(self):
        return (
            f"compiled {self.compiled} kernel signatures, loaded {self.loaded} from the cache, "
            f"in {self.wall_s:.1f} s ({self.cpu_s:.1f} s CPU); cache: {self.cache_dir}"
        )


def cache_dir():
    """The directory of numba's cache for the dasktrees kernels (of the grower's, which the
    others share unless the package's folders differ in writability)."""
    from ..learner import grower

    return grower._grow_nodes.stats.cache_path


def _run_groups(names):
    """Warm the named groups in this process, each under a lock of its own taken without
    waiting when possible: processes warming at once take different groups first, then wait
    for (and load) the groups the others compiled."""
    lock_dir = cache_dir()
    waiting = []
    for name in names:
        path = os.path.join(lock_dir, f"dasktrees.warmup.{name}.lock")
        with file_lock(path, timeout=0.0) as mine:
            if mine:
                WARMUP_GROUPS[name]()
            else:
                waiting.append(name)
    for name in waiting:
        with file_lock(os.path.join(lock_dir, f"dasktrees.warmup.{name}.lock")):
            WARMUP_GROUPS[name]()


def warmup(processes=1, groups=None):
    """Compile every dasktrees kernel into numba's cache, or load it from there.

    Runs tiny fits and predictions of every estimator (trees and forests, classification and
    regression, float64 and float32 input, categorical columns, best-first growth, pruning,
    out-of-bag estimates, permutation importance), so that the kernels are compiled for the
    signatures real use needs; forests run on a ``LocalCluster`` of threads inside the process.
    Processes that warm up at once (or fit at once) compile each kernel once: the others wait
    for it and load it from the cache.

    Parameters
    ----------
    processes : int, default=1
        Warm up in this many new processes at once, each starting with a different group of
        kernels (``WARMUP_GROUPS``), then loading the others' from the cache; 1 warms up in this
        process. Every group needs the growth kernel, which one process compiles while the others
        wait: on two cores two processes were slower than one (``docs/benchmarks.md``).
    groups : list of str, optional
        Only these groups of ``WARMUP_GROUPS``; all by default.

    Returns
    -------
    WarmupReport
    """
    names = list(WARMUP_GROUPS) if groups is None else list(groups)
    unknown = sorted(set(names) - set(WARMUP_GROUPS))
    if unknown:
        raise ValueError(f"unknown warmup groups {unknown}; known: {sorted(WARMUP_GROUPS)}")
    wall = time.perf_counter()
    if processes <= 1:
        cpu = time.process_time()
        before = compile_counts()
        _run_groups(names)
        after = compile_counts()
        return WarmupReport(
            compiled=after[0] - before[0],
            loaded=after[1] - before[1],
            wall_s=time.perf_counter() - wall,
            cpu_s=time.process_time() - cpu,
            cache_dir=cache_dir(),
        )
    # Each process starts with a different group: rotations of the list.
    reports = []
    children = []
    for k in range(processes):
        order = names[k % len(names) :] + names[: k % len(names)]
        code = (
            "import json, dasktrees.compilation as c; "
            f"r = c.warmup(groups={order!r}); "
            "print(json.dumps([r.compiled, r.loaded, r.cpu_s]))"
        )
        children.append(
            subprocess.Popen(
                [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        )
    for child in children:
        out, err = child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"a warm-up process failed:\n{err.decode(errors='replace')}")
        reports.append(json.loads(out.decode().strip().splitlines()[-1]))
    return WarmupReport(
        compiled=sum(r[0] for r in reports),
        loaded=sum(r[1] for r in reports),
        wall_s=time.perf_counter() - wall,
        cpu_s=sum(r[2] for r in reports),
        cache_dir=cache_dir(),
    )


# ----------------------------------------------------------------------------------------------
# A cluster's workers


def _warm_worker(worker=None):
    """Warm up in a worker process (in a thread of its own: the worker keeps serving its
    scheduler meanwhile); the report is kept as the worker's ``dasktrees_warmup`` attribute."""
    report = warmup()
    if worker is not None:
        worker.dasktrees_warmup = report
    return report


try:
    from distributed import WorkerPlugin as _WorkerPlugin
except ImportError:  # distributed is a dependency; this keeps the module importable alone
    # mypy types the name as distributed's class; this base is only for its absence.
    _WorkerPlugin = object  # type: ignore[misc,assignment]


class WarmupPlugin(_WorkerPlugin):
    """A ``distributed`` worker plugin that warms up every worker of a cluster, present and
    future, before it runs dasktrees tasks (``warmup`` in each worker process).

    Workers of one machine, or sharing ``NUMBA_CACHE_DIR``, compile each kernel once between
    them; the others load it. ``client.register_plugin(WarmupPlugin())`` returns when every
    current worker is warm.

    Parameters
    ----------
    groups : list of str, optional
        Passed to ``warmup``; all groups by default.

    Examples
    --------
    >>> from distributed import Client  # doctest: +SKIP
    >>> client = Client("tcp://scheduler:8786")  # doctest: +SKIP
    >>> client.register_plugin(dasktrees.WarmupPlugin())  # doctest: +SKIP
    """

    name = "dasktrees-warmup"

    def __init__(self, groups=None):
        self.groups = None if groups is None else list(groups)

    async def setup(self, worker):
        import asyncio

        report = await asyncio.to_thread(warmup, 1, self.groups)
        worker.dasktrees_warmup = report


def dask_setup(worker):
    """``dask worker --preload dasktrees.compilation``: warm the worker up as it starts (in a
    thread: the worker connects to its scheduler meanwhile; tasks that need a kernel still
    being compiled wait for it)."""
    threading.Thread(
        target=_warm_worker, args=(worker,), name="dasktrees-warmup", daemon=True
    ).start()

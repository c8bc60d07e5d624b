"""Growth speed in CPU seconds: run before and after a kernel change, in turns.

Grows one tree at a time (``grower.grow``, single thread) on fixed data and prints the median and
the best of ``--repeat`` growths per case, in CPU seconds of the growing thread: on a shared
machine wall time also counts the other jobs. The cases:

* ``full``: a full-depth classification tree, ``max_features="sqrt"``, on 1,000,000 x 50
  ``make_classification`` (float32), as ``bench_tree.py``;
* ``bestfirst``: best-first growth to 20,000 leaves on the first 300,000 rows and 20 features;
* ``regression``: a full-depth regression tree, ``max_features=0.5``, on 300,000 x 20
  ``make_regression``;
* ``flights`` and ``diamonds``: the trees of ``bench_forest.py``'s forests on those tables
  (``max_features="sqrt"``, full depth, the forests' categorical settings, Poisson(1) bootstrap
  counts as weights, drawn afresh for every growth), not in the default list. (These trees
  once had the single trees' categorical settings, each node ordering its categories and none
  pooled: figures of that version do not compare with today's.)

    python benchmarks/bench_growth.py --repeat 5
    python benchmarks/bench_growth.py --repeat 15 --cases flights,diamonds
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from sklearn.datasets import make_classification, make_regression  # noqa: E402

from dasktrees import (  # noqa: E402
    BinMapper,
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from dasktrees.core.params import check_tree_params  # noqa: E402
from dasktrees.learner.grower import Workspace, _grow_records  # noqa: E402


def _full():
    X, y = make_classification(n_samples=1_000_000, n_features=50, n_informative=25, random_state=0)
    return X.astype(np.float32), y, DecisionTreeClassifier(max_features="sqrt"), True, False


def _bestfirst():
    X, y, _, _, _ = _full()
    model = DecisionTreeClassifier(max_features="sqrt", max_leaf_nodes=20000)
    return X[:300_000, :20], y[:300_000], model, True, False


def _regression():
    X, y = make_regression(n_samples=300_000, n_features=20, noise=10.0, random_state=0)
    return X.astype(np.float32), y, DecisionTreeRegressor(max_features=0.5), False, False


def _forest_table(name):
    """The trees of ``bench_forest.py``'s forest on table ``name``, with bootstrap counts."""
    from bench_forest import diamonds_table, flights_table

    table = (flights_table if name == "flights" else diamonds_table)(None)
    X, y, _, _ = table["train_test"]
    is_classifier = table["classification"]
    tree = DecisionTreeClassifier if is_classifier else DecisionTreeRegressor
    forest = (RandomForestClassifier if is_classifier else RandomForestRegressor)()
    categorical = {
        name: forest.get_params()[name] for name in ("categorical_order", "min_samples_category")
    }
    return X, np.asarray(y), tree(max_features="sqrt", **categorical), is_classifier, True


# Each case gives (X, y, model, is_classifier, bootstrap), built when asked for.
CASES = {
    "full": _full,
    "bestfirst": _bestfirst,
    "regression": _regression,
    "flights": lambda: _forest_table("flights"),
    "diamonds": lambda: _forest_table("diamonds"),
}


def prepare(name):
    """Case ``name`` ready to grow: ``(grow, workspace, bootstrap)``, where ``grow`` is
    ``_grow_records``' first arguments ``(codes, y, w, bin arrays, params, n_classes)`` with
    unit weights ``w`` (to be overwritten with bootstrap counts when ``bootstrap``), and the
    kernels are compiled or loaded."""
    X, y, model, is_classifier, bootstrap = CASES[name]()
    mapper = BinMapper(random_state=0).fit(X)
    codes = mapper.transform(X)
    n_classes = 2 if is_classifier else 1
    params = check_tree_params(model, len(y), codes.shape[1], is_classifier)
    y = np.asarray(y, dtype=np.float64)
    w = np.ones(len(y))
    workspace = Workspace.for_rows(len(y), n_classes, codes.shape[1], params)
    grow = (codes, y, w, mapper.kernel_arrays(), params, n_classes)
    _grow_records(*grow, 0, None, workspace)  # compile, or load the cache
    return grow, workspace, bootstrap


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cases", default="full,bestfirst,regression")
    args = parser.parse_args()
    for name in args.cases.split(","):
        grow, workspace, bootstrap = prepare(name)
        y, w = grow[1], grow[2]
        times = []
        for seed in range(args.repeat):
            if bootstrap:
                w[:] = np.random.default_rng(seed).poisson(1.0, len(y))
            start = time.thread_time()
            nodes = _grow_records(*grow, seed, None, workspace)[0]
            times.append(time.thread_time() - start)
        print(
            f"{name:10s} median {_seconds(statistics.median(times))}, best "
            f"{_seconds(min(times))} CPU ({len(nodes)} nodes, seed {args.repeat - 1})",
            flush=True,
        )


def _seconds(t):
    """``t`` seconds to four significant digits: a tree of 30 ms is read to a tenth of one."""
    return f"{t:.3f} s" if t >= 1.0 else f"{1000 * t:.1f} ms"


if __name__ == "__main__":
    main()

"""Where a flights tree's time goes: the split search replayed by node size, single thread.

Grows one Poisson(1) bootstrap tree on the flights benchmark's training set (what a forest task
does), then replays the split search (``find_split``) on the internal nodes of each size bucket:
after growth each node's rows are still a contiguous slice of the row indices.

    python benchmarks/profile_flights.py
"""

import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from bench_forest import flights_data  # noqa: E402
from numba import njit  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from dasktrees import BinMapper, DecisionTreeClassifier  # noqa: E402
from dasktrees._dtypes import N_BIN_CODES, TREE_LEAF  # noqa: E402
from dasktrees._params import check_tree_params  # noqa: E402
from dasktrees._random import new_state  # noqa: E402
from dasktrees.criteria import GINI  # noqa: E402
from dasktrees.tree.grower import _TOTAL, N_SCRATCH_VECTORS, Workspace, find_split, grow  # noqa: E402
from dasktrees.tree.histogram import node_statistics  # noqa: E402

BUCKETS = [(2, 4), (4, 8), (8, 32), (32, 256), (256, 2**62)]


@njit
def replay_split_search(codes, y, w, rows, nodes, bins, max_features, low, high):
    """Run ``find_split`` again on every internal node with ``low <= rows < high``."""
    n_channels = 3  # binary classification
    candidates = np.arange(codes.shape[1], dtype=np.int64)
    features = np.empty(codes.shape[1], np.int64)
    hist = np.zeros((N_BIN_CODES, n_channels))
    stats = np.zeros((N_BIN_CODES, n_channels))
    vec = np.zeros((N_SCRATCH_VECTORS, n_channels))
    ibuf = np.zeros((4, N_BIN_CODES), np.int64)
    keys = np.zeros(N_BIN_CODES)
    state = new_state(1)
    total = 0.0
    for k in range(nodes.shape[0]):
        start, stop = nodes[k]["start"], nodes[k]["stop"]
        if nodes[k]["left"] == TREE_LEAF or not low <= stop - start < high:
            continue
        impurity = node_statistics(y, w, start, stop, GINI, vec[_TOTAL])
        total += find_split(
            (codes, y, w, rows),
            start,
            stop,
            impurity,
            bins,
            (GINI, 2, False, max_features, 0, 0, 1, 0.0, 0.0),
            (state, candidates, features, hist, stats, vec, ibuf, keys),
        )[0]
    return total


def main():
    X, y = flights_data()
    X_train, _, y_train, _ = train_test_split(X, y, test_size=0.2, random_state=0)
    mapper = BinMapper(random_state=0).fit(X_train)
    codes = mapper.transform(X_train)
    arrays = mapper.kernel_arrays()
    bins = (arrays.n_bins, arrays.is_categorical, arrays.bin_values, arrays.thresholds)
    params = check_tree_params(
        DecisionTreeClassifier(max_features="sqrt"), len(y_train), codes.shape[1], True
    )
    y = np.asarray(y_train, dtype=np.float64)
    w = np.random.default_rng(0).poisson(1.0, len(y)).astype(np.float64)

    def grow_once():
        rows = np.flatnonzero(w > 0)
        nodes = grow(
            codes,
            y,
            w,
            rows,
            *bins,
            GINI,
            2,
            False,
            params.max_features,
            params.max_depth,
            params.min_samples_split,
            params.min_samples_leaf,
            0.0,
            0,
            0.0,
            0,
            np.arange(codes.shape[1], dtype=np.int64),
            tuple(Workspace.for_rows(len(rows), 2, params)),
        )[0]
        return nodes, rows

    grow_once()  # compile
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        nodes, rows = grow_once()
        seconds.append(time.perf_counter() - start)
    print(f"growth, best of 3: {min(seconds) * 1000:.0f} ms for {len(nodes)} nodes")
    args = (codes, y[rows], w[rows], rows, nodes, bins, params.max_features)
    replay_split_search(*args, 0, 1)  # compile
    internal = nodes["left"] != TREE_LEAF
    sizes = (nodes["stop"] - nodes["start"])[internal]
    print("split search replayed, by rows in the node:")
    for low, high in BUCKETS:
        start = time.perf_counter()
        replay_split_search(*args, low, high)
        elapsed = time.perf_counter() - start
        inside = (sizes >= low) & (sizes < high)
        label = f"{low}-{high - 1}" if high < 2**62 else f">= {low}"
        print(
            f"  {label:>7} rows: {inside.sum():6d} nodes, {sizes[inside].sum():8d} row visits, "
            f"{elapsed * 1000:5.1f} ms ({elapsed / max(inside.sum(), 1) * 1e9:6.0f} ns a node)"
        )


if __name__ == "__main__":
    main()

"""Where a full-depth tree's growth time goes, single thread.

Grows one tree (max_features="sqrt") on make_classification data, then replays the split search
(``find_split``) and the node statistics on every node of the grown tree, on the same rows: after
growth each node's rows are still a contiguous slice of ``sample_indices``. Also prints how the
row visits spread over node sizes.

    python benchmarks/profile_growth.py --n-samples 1000000 --n-features 50
"""

import argparse
import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402
from sklearn.datasets import make_classification  # noqa: E402

from dasktrees import BinMapper, DecisionTreeClassifier  # noqa: E402
from dasktrees._dtypes import N_BIN_CODES, TREE_LEAF  # noqa: E402
from dasktrees._params import check_tree_params  # noqa: E402
from dasktrees._random import new_state  # noqa: E402
from dasktrees.criteria import GINI  # noqa: E402
from dasktrees.tree.grower import _TOTAL, N_SCRATCH_VECTORS, Workspace, find_split, grow  # noqa: E402
from dasktrees.tree.histogram import node_statistics  # noqa: E402


@njit
def replay_split_search(
    codes, y, w, rows, nodes, n_bins, is_categorical, bin_values, edges, max_features
):
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
        if nodes[k]["left"] == TREE_LEAF:
            continue
        start, stop = nodes[k]["start"], nodes[k]["stop"]
        impurity = node_statistics(y, w, start, stop, GINI, vec[_TOTAL])
        total += find_split(
            (codes, y, w, rows),
            start,
            stop,
            impurity,
            (n_bins, is_categorical, bin_values, edges),
            (GINI, 2, False, max_features, 0, 0, 1, 0.0, 0.0),
            (state, candidates, features, hist, stats, vec, ibuf, keys),
        )[0]
    return total


@njit
def replay_statistics(y, w, nodes):
    stats = np.zeros(3)
    total = 0.0
    for k in range(nodes.shape[0]):
        total += node_statistics(y, w, nodes[k]["start"], nodes[k]["stop"], GINI, stats)
    return total


def best_of(repeats, fn):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=1_000_000)
    parser.add_argument("--n-features", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    X, y = make_classification(
        n_samples=args.n_samples,
        n_features=args.n_features,
        n_informative=args.n_features // 2,
        random_state=0,
    )
    mapper = BinMapper().fit(X.astype(np.float32))
    codes = mapper.transform(X.astype(np.float32))
    bins = mapper.kernel_arrays()
    params = check_tree_params(
        DecisionTreeClassifier(max_features="sqrt"), len(y), args.n_features, True
    )
    y = y.astype(np.float64)
    w = np.ones(len(y))

    def grow_once():
        rows = np.arange(len(y), dtype=np.int64)
        nodes = grow(
            codes,
            y,
            w,
            rows,
            bins.n_bins,
            bins.is_categorical,
            bins.bin_values,
            bins.thresholds,
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
    growth_s, (nodes, rows) = best_of(args.repeats, grow_once)
    node_y, node_w = y[rows], w[rows]
    replay = lambda: replay_split_search(  # noqa: E731
        codes,
        node_y,
        node_w,
        rows,
        nodes,
        bins.n_bins,
        bins.is_categorical,
        bins.bin_values,
        bins.thresholds,
        params.max_features,
    )
    replay_statistics(node_y, node_w, nodes[:2])
    replay_split_search(
        codes,
        node_y,
        node_w,
        rows,
        nodes[:2],
        bins.n_bins,
        bins.is_categorical,
        bins.bin_values,
        bins.thresholds,
        params.max_features,
    )
    search_s, _ = best_of(args.repeats, replay)
    stats_s, _ = best_of(args.repeats, lambda: replay_statistics(node_y, node_w, nodes))

    internal = nodes["left"] != TREE_LEAF
    sizes = nodes["n_samples"][internal]
    print(f"growth, best of {args.repeats}: {growth_s:.2f} s for {len(nodes)} nodes")
    print(f"  split search replayed on the {internal.sum()} internal nodes: {search_s:.2f} s")
    print(f"  node statistics replayed on all nodes: {stats_s:.2f} s")
    print(f"  row visits by internal nodes: {sizes.sum() / 1e6:.1f} M")
    for low, high in [(2, 32), (32, 256), (256, 1024), (1024, None)]:
        inside = (sizes >= low) & ((sizes < high) if high else True)
        label = f"{low}-{high - 1}" if high else f">= {low}"
        print(
            f"    nodes of {label:>9} rows: {inside.sum():6d} nodes, "
            f"{sizes[inside].sum() / 1e6:5.1f} M row visits"
        )


if __name__ == "__main__":
    main()

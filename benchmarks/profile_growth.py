"""Where a full-depth tree's growth time goes, single thread.

Grows one tree (max_features="sqrt"), then replays the split search (``find_split``) on the
internal nodes of the grown tree by node size, on the same rows: after growth each node's rows
are still a contiguous slice of ``sample_indices`` (a table of at most 8 features does not move
its row indices while it grows, ``NodeRows.all_ordered``: the replay takes them from a second
growth of the same tree that does). Also replays the node statistics.

    python benchmarks/profile_growth.py --n-samples 1000000 --n-features 50
    python benchmarks/profile_growth.py --data flights

``--data flights`` and ``--data diamonds`` grow on those forest benchmarks' training sets with
Poisson(1) bootstrap weights, as a forest task does (see bench_forest.py; diamonds is a regression).

The replay kernels are compiled as the growth loop is, without numba's runtime: with it, every
array the inlined search unpacks from its bundles is reference counted, which more than doubled
the replayed cost of the smallest nodes.
"""

import argparse
import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from dasktrees import BinMapper, DecisionTreeClassifier, DecisionTreeRegressor  # noqa: E402
from dasktrees.core.criteria import GINI, SQUARED_ERROR  # noqa: E402
from dasktrees.core.dtypes import N_BIN_CODES, TREE_LEAF  # noqa: E402
from dasktrees.core.params import check_tree_params  # noqa: E402
from dasktrees.core.rng import new_state  # noqa: E402
from dasktrees.learner import grower as grower_module  # noqa: E402
from dasktrees.learner.grower import (  # noqa: E402
    _TOTAL,
    N_INT_SCRATCH,
    N_SCRATCH_VECTORS,
    BinTables,
    NodeRows,
    Rules,
    Scratch,
    Workspace,
    _in_node_order,
    find_split,
    grow,
)
from dasktrees.learner.histogram import node_statistics, signed_weights  # noqa: E402
from dasktrees.learner.splitting import N_CUT_ROWS, RowBuffers  # noqa: E402

BUCKETS = [(2, 4), (4, 8), (8, 32), (32, 256), (256, 1024), (1024, 2**62)]


@njit(_nrt=False)
def replay_split_search(rows, nodes, tables, rules, scratch, low, high):
    """Run ``find_split`` again on every internal node with ``low <= rows < high``."""
    total = 0.0
    for k in range(nodes.shape[0]):
        start, stop = nodes[k]["start"], nodes[k]["stop"]
        if nodes[k]["left"] == TREE_LEAF or not low <= stop - start < high:
            continue
        impurity = node_statistics(
            rows.y, rows.w, start, stop, rules.criterion, scratch.vec[_TOTAL]
        )
        ordered = _in_node_order(rows, nodes, k)  # as during growth
        total += find_split(
            rows, start, stop, impurity, tables, rules, scratch, ordered, -np.inf, np.inf
        ).score
    return total


def replay_bundles(codes, y, w, rows, arrays, max_features, all_ordered, regression):
    """``find_split``'s arguments for the grown tree's rows: binary classification (``y`` and
    ``w`` the signed weights) or regression."""
    n_channels = 4 if regression else 3
    criterion, n_classes = (SQUARED_ERROR, 1) if regression else (GINI, 2)
    n_features = codes.shape[1]
    node_codes = np.zeros((len(rows), 8 * -(-n_features // 8)), np.uint8)
    node_codes[:, :n_features] = codes[rows]
    return (
        # The large nodes read their codes in node order; after growth the final row order
        # holds them for every node (the search reads the same codes as during growth, in
        # an order that may differ within nodes split below TRACK_TOUCHED_BELOW rows).
        NodeRows(codes, y, w, rows, node_codes, node_codes.view(np.uint64), all_ordered),
        BinTables(arrays.n_bins, arrays.is_categorical, arrays.bin_values, arrays.thresholds),
        Rules(
            criterion,
            n_classes,
            False,
            int(max_features),
            0,
            0,
            1,
            0.0,
            0.0,
            1.0,
            False,
            np.uint64(1),
            0,
            np.zeros(0, np.int8),  # no monotonic constraints
        ),
        Scratch(
            new_state(1),
            np.arange(n_features, dtype=np.int64),
            np.empty(n_features, np.int64),
            np.zeros((max(1, int(max_features)), N_BIN_CODES, n_channels)),
            np.zeros((N_BIN_CODES, n_channels)),
            np.zeros((N_SCRATCH_VECTORS, n_channels)),
            np.zeros((N_INT_SCRATCH, N_BIN_CODES), np.int64),
            np.zeros(N_BIN_CODES),
            np.zeros((N_CUT_ROWS, N_BIN_CODES)),
            RowBuffers(
                np.empty(len(rows), np.int64),
                np.empty(len(rows)),
                np.empty(len(rows)),
                np.empty(node_codes.view(np.uint64).shape, np.uint64),
            ),
            np.arange(len(rows), dtype=np.int64),
            np.zeros((2, n_features, 0)),  # categories ordered per node
            np.zeros(2 * len(rows), np.uint64),
            np.empty((0, 3)),  # no node bounds
        ),
    )


@njit(_nrt=False)
def replay_statistics(y, w, nodes, criterion, stats):
    total = 0.0
    for k in range(nodes.shape[0]):
        total += node_statistics(y, w, nodes[k]["start"], nodes[k]["stop"], criterion, stats)
    return total


def best_of(repeats, fn):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def dataset(args):
    """(X, y, w): make_classification with unit weights, or flights or diamonds (log price) with
    bootstrap weights."""
    if args.data == "diamonds":
        from bench_forest import diamonds_table

        X, y, _, _ = diamonds_table(None)["train_test"]
        return X, np.asarray(y), np.random.default_rng(0).poisson(1.0, len(y)).astype(float)
    if args.data == "flights":
        from bench_forest import flights_data
        from sklearn.model_selection import train_test_split

        X, y = flights_data()
        X, _, y, _ = train_test_split(X, y, test_size=0.2, random_state=0)
        return X, np.asarray(y), np.random.default_rng(0).poisson(1.0, len(y)).astype(float)
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=args.n_samples,
        n_features=args.n_features,
        n_informative=args.n_features // 2,
        random_state=0,
    )
    return X.astype(np.float32), y, np.ones(len(y))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", choices=["classification", "flights", "diamonds"], default="classification"
    )
    parser.add_argument("--n-samples", type=int, default=1_000_000)
    parser.add_argument("--n-features", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    X, y, w = dataset(args)
    mapper = BinMapper(random_state=0).fit(X)
    codes = mapper.transform(X)
    arrays = mapper.kernel_arrays()
    regression = args.data == "diamonds"
    tree, n_classes = (DecisionTreeRegressor, 1) if regression else (DecisionTreeClassifier, 2)
    params = check_tree_params(tree(max_features="sqrt"), len(y), codes.shape[1], not regression)
    y = y.astype(np.float64)
    # One workspace for every growth, as a forest task reuses its workspace for its trees.
    workspace = Workspace.for_rows(int((w > 0).sum()), n_classes, codes.shape[1], params)

    def grow_once():
        rows = np.flatnonzero(w > 0)
        nodes = grow(
            codes,
            y,
            w,
            rows,
            arrays,
            params,
            n_classes,
            0,
            np.arange(codes.shape[1], dtype=np.int64),
            workspace,
        )[0]
        return nodes.copy(), rows  # a copy: the next growth overwrites the workspace

    grow_once()  # compile
    growth_s, (nodes, rows) = best_of(args.repeats, grow_once)
    all_ordered = codes.shape[1] <= 8 * grower_module._ALL_ORDERED_MAX_WORDS
    if all_ordered:  # its rows in their final order, from a growth that moves them
        grower_module._ALL_ORDERED_MAX_WORDS = 0
        tracked, rows = grow_once()
        assert np.array_equal(tracked, nodes)
    if regression:
        node_y, node_w = y[rows], w[rows]
    else:  # two classes: the kernels read the signed weights (``histogram.signed_weights``)
        node_y = node_w = signed_weights(y[rows], w[rows], np.empty(len(rows)))
    node_rows, tables, rules, scratch = replay_bundles(
        codes, node_y, node_w, rows, arrays, params.max_features, all_ordered, regression
    )
    replay_args = (node_rows, nodes, tables, rules, scratch)
    replay_split_search(*replay_args, 0, 1)  # compile
    stats = np.zeros(scratch.vec.shape[1])
    statistics = (node_y, node_w, nodes, rules.criterion, stats)
    stats_s, _ = best_of(args.repeats, lambda: replay_statistics(*statistics))

    internal = nodes["left"] != TREE_LEAF
    sizes = (nodes["stop"] - nodes["start"])[internal]
    print(f"growth, best of {args.repeats}: {growth_s:.3f} s for {len(nodes)} nodes")
    print(f"  node statistics replayed on all nodes: {stats_s:.3f} s")
    print(f"  row visits by internal nodes: {sizes.sum() / 1e6:.1f} M")
    print(f"  split search replayed on the {internal.sum()} internal nodes, by rows in the node:")
    for low, high in BUCKETS:
        search_s, _ = best_of(
            args.repeats, lambda low=low, high=high: replay_split_search(*replay_args, low, high)
        )
        inside = (sizes >= low) & (sizes < high)
        label = f"{low}-{high - 1}" if high < 2**62 else f">= {low}"
        print(
            f"    {label:>8} rows: {inside.sum():6d} nodes, {sizes[inside].sum() / 1e6:5.1f} M "
            f"row visits, {search_s * 1000:7.1f} ms "
            f"({search_s / max(inside.sum(), 1) * 1e9:6.0f} ns a node)"
        )


if __name__ == "__main__":
    main()

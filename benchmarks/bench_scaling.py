"""How a forest's fit time grows: against the number of rows and the number of trees.

``make_classification`` with 50 features (25 informative, seed 0), float32, cut to each row
count; ``RandomForestClassifier`` with full-depth trees, ``max_features="sqrt"``,
``random_state=0``, on a LocalCluster of 2 single-threaded worker processes (as
``bench_forest.py``). Two sweeps, medians of ``--repeat`` fits each, after one untimed small fit
(the workers load the compiled kernels):

- rows (``--rows``, default 100k, 300k, 1M, 3M) with ``--n-trees`` trees;
- trees (``--trees``, default 10, 20, 40, 80) on ``--trees-rows`` rows.

A CART tree on n rows costs about n log n (every level of a balanced tree passes all rows), so
the row sweep is fitted by least squares as ``t = a n log2(n) + b``, and as a power law
``t = c n^k`` for comparison; the tree sweep as ``t = a trees + b`` (b: what a fit costs
whatever its trees, binning and Dask included). The script prints the tables with the fits'
predictions beside the measurements, and writes ``benchmarks/results/scaling.json``.

    python benchmarks/bench_scaling.py
    python benchmarks/bench_scaling.py --rows 20000 50000 --trees 2 4 --trees-rows 20000 \\
        --repeat 1 --json /tmp/scaling.json
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from bench_forest import local_cluster

RESULTS = Path(__file__).resolve().parent / "results"


def fit_times(client, X, y, n_trees, repeat):
    """Median fit time and the forest's nodes."""
    import dasktrees

    runs = []
    for _ in range(repeat):
        model = dasktrees.RandomForestClassifier(
            n_estimators=n_trees, max_features="sqrt", random_state=0, client=client
        )
        start = time.perf_counter()
        model.fit(X, y)
        runs.append(time.perf_counter() - start)
    n_nodes = sum(est.tree_.node_count for est in model.estimators_)
    return float(np.median(runs)), [round(t, 2) for t in runs], n_nodes


def least_squares(columns, t):
    """Coefficients of t ~ columns @ coef."""
    coef, *_ = np.linalg.lstsq(np.column_stack(columns), t, rcond=None)
    return coef


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=int, nargs="*", default=[100_000, 300_000, 1_000_000, 3_000_000]
    )
    parser.add_argument("--n-trees", type=int, default=20)
    parser.add_argument("--trees", type=int, nargs="*", default=[10, 20, 40, 80])
    parser.add_argument("--trees-rows", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=str(RESULTS / "scaling.json"))
    args = parser.parse_args()

    from sklearn.datasets import make_classification

    n_max = max(args.rows + [args.trees_rows])
    X, y = make_classification(n_samples=n_max, n_features=50, n_informative=25, random_state=0)
    X = X.astype(np.float32)
    cluster, client = local_cluster()
    try:
        fit_times(client, X[:2000], y[:2000], 2, 1)  # untimed: the workers load the kernels
        by_rows = []
        for n in args.rows:
            median, runs, nodes = fit_times(client, X[:n], y[:n], args.n_trees, args.repeat)
            by_rows.append({"rows": n, "fit_s": round(median, 2), "runs_s": runs, "nodes": nodes})
            print(json.dumps(by_rows[-1]), flush=True)
        by_trees = []
        for trees in args.trees:
            Xt, yt = X[: args.trees_rows], y[: args.trees_rows]
            median, runs, nodes = fit_times(client, Xt, yt, trees, args.repeat)
            by_trees.append({"trees": trees, "fit_s": round(median, 2), "runs_s": runs})
            print(json.dumps(by_trees[-1]), flush=True)
    finally:
        client.close()
        cluster.close()

    n = np.array([r["rows"] for r in by_rows], dtype=np.float64)
    t = np.array([r["fit_s"] for r in by_rows])
    a, b = least_squares([n * np.log2(n), np.ones_like(n)], t)
    k, log_c = least_squares([np.log(n), np.ones_like(n)], np.log(t))
    for row, nlogn in zip(by_rows, n * np.log2(n)):
        row["n_log_n_fit_s"] = round(float(a * nlogn + b), 2)
        row["power_fit_s"] = round(float(np.exp(log_c) * row["rows"] ** k), 2)
    trees = np.array([r["trees"] for r in by_trees], dtype=np.float64)
    tt = np.array([r["fit_s"] for r in by_trees])
    per_tree, fixed = least_squares([trees, np.ones_like(trees)], tt)
    for row in by_trees:
        row["linear_fit_s"] = round(float(per_tree * row["trees"] + fixed), 2)
    fits = {
        "n_log_n": {"a_ns_per_row_log_row": round(float(a) * 1e9, 3), "b_s": round(float(b), 2)},
        "power": {"k": round(float(k), 3), "c": float(np.exp(log_c))},
        "trees": {"per_tree_s": round(float(per_tree), 3), "fixed_s": round(float(fixed), 2)},
    }
    lines = [
        "| rows | fit s | a n log n + b | c n^k | nodes | ns per node |",
        "|---|---|---|---|---|---|",
    ]
    for r in by_rows:
        lines.append(
            f"| {r['rows']:,} | {r['fit_s']:.2f} | {r['n_log_n_fit_s']:.2f} | "
            f"{r['power_fit_s']:.2f} | {r['nodes']:,} | {r['fit_s'] / r['nodes'] * 1e9:,.0f} |"
        )
    lines += ["", "| trees | fit s | a trees + b |", "|---|---|---|"]
    for r in by_trees:
        lines.append(f"| {r['trees']} | {r['fit_s']:.2f} | {r['linear_fit_s']:.2f} |")
    table = "\n".join(lines)
    print(table)
    print(json.dumps(fits))
    setup = {
        "command": "python benchmarks/bench_scaling.py " + " ".join(sys.argv[1:]),
        "n_trees": args.n_trees,
        "trees_rows": args.trees_rows,
        "repeat": args.repeat,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps(
            {
                "setup": setup,
                "by_rows": by_rows,
                "by_trees": by_trees,
                "fits": fits,
                "table": table,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

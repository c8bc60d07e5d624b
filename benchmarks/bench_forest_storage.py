"""Forests kept on the workers (``tree_storage="workers"``) against the same forests on the client:
the client process's peak memory, fit and prediction times.

    python benchmarks/bench_forest_storage.py --trees 10 20 --repeat 3

Each run (a storage and a number of trees) is its own process with its own ``LocalCluster`` of
two one-thread workers. The table (``--rows`` x 20 float32 features, a smooth target plus noise)
is generated block by block on the workers as a dask array, so the client never holds it; full
depth regression trees make a large forest (about 1.3 million nodes a tree on a million rows).
A run fits the forest, then predicts: on a dask array of ``--test-rows`` generated on the
workers (the predictions computed to the client), on a numpy array of 100,000 rows, and on one
row; medians of ``--repeat`` calls. The client's peak memory is its process's peak RSS
(``getrusage``) above its RSS before the fit (after a warm-up fit that compiles the kernels).
Writes ``benchmarks/results/forest_storage.json``.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

N_FEATURES = 20
BLOCK_ROWS = 250_000
NUMPY_ROWS = 100_000
RESULTS = Path(__file__).parent / "results"


def make_block(seed, n_rows):
    """(X float32, y float64): a pure function of the seed."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, N_FEATURES)).astype(np.float32)
    y = np.sin(X[:, 0] * 2) + X[:, 1] * X[:, 2] + 0.5 * X[:, 3:8].sum(axis=1)
    return X, y + rng.normal(scale=0.5, size=n_rows)


def dask_table(n_rows, first_seed):
    import dask
    import dask.array as da

    starts = range(0, n_rows, BLOCK_ROWS)
    sizes = [min(BLOCK_ROWS, n_rows - s) for s in starts]
    blocks = [dask.delayed(make_block, pure=True)(first_seed + i, n) for i, n in enumerate(sizes)]
    X = da.concatenate(
        [da.from_delayed(b[0], (n, N_FEATURES), np.float32) for b, n in zip(blocks, sizes)]
    )
    y = da.concatenate([da.from_delayed(b[1], (n,), np.float64) for b, n in zip(blocks, sizes)])
    return X, y


def rss():
    import psutil

    return psutil.Process().memory_info().rss


def median_time(call, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), times


def run_one(args):
    """One run, in this process: prints its JSON result on the last line."""
    from distributed import Client, LocalCluster

    import dasktrees
    from dasktrees.forest.parts import ForestPart

    result = {"storage": args.storage, "trees": args.trees, "rows": args.rows}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        X, y = dask_table(args.rows, 0)
        X_test, _ = dask_table(args.test_rows, 10**6)
        X_numpy, _ = make_block(2 * 10**6, NUMPY_ROWS)
        params = dict(random_state=0, client=client, tree_storage=args.storage)
        # Compilation (or loading from numba's cache) is not what is measured.
        X_warm, y_warm = make_block(7, 5_000)
        warm = dasktrees.RandomForestRegressor(n_estimators=4, **params).fit(X_warm, y_warm)
        warm.predict(X_warm)
        client.compute(warm.predict(dask_table(10_000, 5)[0]), sync=True)
        del warm
        before = rss()
        model = dasktrees.RandomForestRegressor(n_estimators=args.trees, **params)
        start = time.perf_counter()
        model.fit(X, y)
        result["fit_s"] = round(time.perf_counter() - start, 1)
        result["predict_dask_s"], runs = median_time(
            lambda: client.compute(model.predict(X_test), sync=True), args.repeat
        )
        result["predict_dask_runs"] = [round(t, 2) for t in runs]
        result["predict_numpy_s"], _ = median_time(lambda: model.predict(X_numpy), args.repeat)
        result["predict_one_row_ms"] = (
            1e3 * median_time(lambda: model.predict(X_numpy[:1]), 5 * args.repeat)[0]
        )
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        result["client_peak_above_start_mib"] = round((peak - before) / 2**20, 1)
        if model.tree_storage_ == "workers":
            size = int(model._tree_shards.nbytes.sum())
        else:
            size = ForestPart(0, model.forest_, [e.tree_ for e in model.estimators_]).nbytes()
        result["forest_mib"] = round(size / 2**20, 1)
        result["nodes"] = int(
            model._tree_shards.node_count.sum()
            if model.tree_storage_ == "workers"
            else sum(e.tree_.node_count for e in model.estimators_)
        )
        result["client_share_of_forest"] = round(
            result["client_peak_above_start_mib"] / result["forest_mib"], 3
        )
        for key in ("predict_dask_s", "predict_numpy_s", "predict_one_row_ms"):
            result[key] = round(result[key], 3)
    print(json.dumps(result), flush=True)


def spawn(args, storage, trees):
    command = [sys.executable, __file__, "--one", storage, "--trees", str(trees)]
    command += ["--rows", str(args.rows), "--test-rows", str(args.test_rows)]
    command += ["--repeat", str(args.repeat)]
    print("+", " ".join(command[2:]), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        print(done.stdout[-2000:], done.stderr[-4000:])
        return {"storage": storage, "trees": trees, "error": f"exit {done.returncode}"}
    print(lines[-1], flush=True)
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--test-rows", type=int, default=1_000_000)
    parser.add_argument("--trees", type=int, nargs="+", default=[10, 20])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--one", choices=["client", "workers"], help=argparse.SUPPRESS)
    parser.add_argument("--output", default=str(RESULTS / "forest_storage.json"))
    args = parser.parse_args()
    if args.one:
        args.storage, args.trees = args.one, args.trees[0]
        run_one(args)
        return
    results = [spawn(args, s, t) for t in args.trees for s in ("client", "workers")]
    Path(args.output).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()

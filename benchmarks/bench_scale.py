"""Forests on tables larger than a worker: full-data bootstrap trees grown across the workers
(``mode="distributed"``) against ``max_samples`` forests that fit a worker, and against
replicated mode on unlimited memory.

    python benchmarks/bench_scale.py --rows 10000000 --table signal
    python benchmarks/bench_scale.py --rows 10000000 --table noisy
    python benchmarks/bench_scale.py --rows 30000000 --table noisy --memory-limit 2GiB \
        --replicated-limit 10GiB

Each run is its own process with its own ``LocalCluster`` of two one-thread workers. The table
(50 float32 features) is generated block by block on the workers as a dask array, so no process
holds it whole; a held-out table of 200,000 rows from another seed scores the forests. Two
targets: ``signal``, a deterministic function of twenty features (no label noise), and
``noisy``, the same function plus logistic noise of 0.8 times its spread.

With ``--repeat N`` each run but ``sampled-time`` runs N times, interleaved, and reports its
median time. Runs: ``distributed`` (the default bootstrap forest, on workers too small for
replicated mode), ``sampled`` (``max_samples`` rows a tree, the same trees), ``sampled-time``
(as many ``max_samples`` trees as fit in the distributed forest's time, from the marginal time a
tree of two sampled runs) and ``replicated`` (the default forest in replicated mode, on workers
with room for the whole table). Each reports the fit time, the mode, the out-of-bag and held-out
accuracy, each worker's peak memory (RSS polled every 0.25 s) and the workers restarted. Writes
``benchmarks/results/scale_<rows>_<table>.json``.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from bench_forest import PeakWorkerMemory

N_FEATURES = 50
BLOCK_ROWS = 500_000
TEST_ROWS = 200_000
RESULTS = Path(__file__).parent / "results"


def _weights():
    rng = np.random.default_rng(12345)
    return rng.normal(size=20)


def make_block(seed, n_rows, table):
    """One block of the table: (X float32, y int8), a pure function of its seed."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, N_FEATURES)).astype(np.float32)
    logit = X[:, :20] @ _weights() + 2.0 * X[:, 20] * X[:, 21] + np.abs(X[:, 22]) * 1.5 - 1.2
    if table == "noisy":
        logit = logit + 0.8 * np.std(logit) * rng.logistic(size=n_rows) / 1.8
    return X, (logit > 0).astype(np.int8)


def dask_table(n_rows, table):
    import dask
    import dask.array as da

    blocks = [
        dask.delayed(make_block, pure=True)(i, min(BLOCK_ROWS, n_rows - start), table)
        for i, start in enumerate(range(0, n_rows, BLOCK_ROWS))
    ]
    sizes = [min(BLOCK_ROWS, n_rows - start) for start in range(0, n_rows, BLOCK_ROWS)]
    X = da.concatenate(
        [da.from_delayed(b[0], (n, N_FEATURES), np.float32) for b, n in zip(blocks, sizes)]
    )
    y = da.concatenate([da.from_delayed(b[1], (n,), np.int8) for b, n in zip(blocks, sizes)])
    return X, y


def run_one(args):
    """One run, in this process: prints its JSON result on the last line."""
    from distributed import Client, LocalCluster

    import dasktrees

    params = dict(n_estimators=args.trees, oob_score=True, random_state=0)
    if args.run.startswith("sampled"):
        params["max_samples"] = args.max_samples
    if args.run == "replicated":
        params["mode"] = "replicated"
    if args.run == "distributed":
        params["mode"] = args.mode
    limit = args.memory_limit if args.run != "replicated" else args.replicated_limit
    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        memory_limit=limit,
        dashboard_address=":0",
    )
    result = {"run": args.run, "rows": args.rows, "table": args.table, "memory_limit": limit}
    # distributed mode logs what moved: rounds, tasks, bytes
    import logging

    class Recorder(logging.Handler):
        def emit(self, record):
            if record.name == "dasktrees.distributed.levels":
                result["levels"] = record.args[2]
                result["budget_rows"] = record.args[1]
            if record.name == "dasktrees.distributed.train":  # sampled mode's plan
                result["trees_per_task"] = record.args[1]
                result["planned_mib"] = [record.args[2], record.args[3]]

    for name in ("dasktrees.distributed.levels", "dasktrees.distributed.train"):
        logging.getLogger(name).addHandler(Recorder())
        logging.getLogger(name).setLevel(logging.INFO)
    with cluster, Client(cluster) as client:
        X, y = dask_table(args.rows, args.table)
        X_test, y_test = make_block(10**6, TEST_ROWS, args.table)
        model = dasktrees.RandomForestClassifier(client=client, **params)
        # Compilation (or loading from numba's cache) is not what is measured: a small fit of
        # each mode first, on the workers.
        from dasktrees.distributed.levels import gathered_rows

        X_warm, y_warm = make_block(7, 20_000, args.table)
        with gathered_rows(5_000):
            for mode in ("distributed", "replicated"):
                dasktrees.RandomForestClassifier(
                    n_estimators=2, mode=mode, oob_score=True, client=client
                ).fit(X_warm, y_warm)
        for key in ("levels", "budget_rows", "trees_per_task", "planned_mib"):  # the warm-up's
            result.pop(key, None)
        with PeakWorkerMemory(client) as memory:
            start = time.perf_counter()
            try:
                model.fit(X, y)
                result["fit_s"] = round(time.perf_counter() - start, 1)
            except Exception as error:  # noqa: BLE001 - reported: the point of the benchmark
                result["fit_s"] = round(time.perf_counter() - start, 1)
                result["error"] = f"{type(error).__name__}: {error}"[:300]
        result["worker_peak_rss_mib"] = sorted(round(p / 2**20) for p in memory.peaks.values())
        result["worker_restarts"] = len(memory.pids) - 2
        if "error" not in result:
            result.update(
                mode=model.mode_,
                n_trees=args.trees,
                max_samples=params.get("max_samples"),
                oob_accuracy=round(float(model.oob_score_), 4),
                test_accuracy=round(float((model.predict(X_test) == y_test).mean()), 4),
                nodes=int(sum(t.tree_.node_count for t in model.estimators_)),
            )
    print(json.dumps(result), flush=True)


def spawn(args, run, trees):
    command = [
        sys.executable,
        __file__,
        "--one",
        run,
        "--rows",
        str(args.rows),
        "--table",
        args.table,
        "--trees",
        str(trees),
        "--max-samples",
        str(args.max_samples),
        "--memory-limit",
        args.memory_limit,
        "--replicated-limit",
        args.replicated_limit,
        "--mode",
        args.mode,
    ]
    print("+", " ".join(command[2:]), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        print(done.stdout[-2000:], done.stderr[-4000:])
        return {"run": run, "error": f"exit {done.returncode}"}
    result = json.loads(lines[-1])
    print(json.dumps(result), flush=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--table", choices=["signal", "noisy"], default="noisy")
    parser.add_argument("--trees", type=int, default=4)
    parser.add_argument("--max-samples", type=int, default=1_000_000)
    parser.add_argument(
        "--memory-limit", default="1.25GiB", help="of each worker, too small for replicated mode"
    )
    parser.add_argument(
        "--replicated-limit",
        default="11GiB",
        help="of each worker in the replicated run, room for the whole table and a tree",
    )
    parser.add_argument(
        "--mode",
        default="auto",
        choices=["auto", "distributed"],
        help="of the distributed run (on small tables auto may replicate or sample)",
    )
    parser.add_argument(
        "--runs",
        nargs="*",
        default=["distributed", "sampled", "sampled-time", "replicated"],
        choices=["distributed", "sampled", "sampled-time", "replicated"],
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each kind but sampled-time (median time)"
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    if args.one:
        args.run = args.one
        run_one(args)
        return
    # Each run --repeat times, the runs interleaved (the machine drifts over minutes): the
    # median fit time, with every time, and the first run's other figures.
    repeated: dict = {}
    for _ in range(args.repeat):
        for run in args.runs:
            if run != "sampled-time":
                repeated.setdefault(run, []).append(spawn(args, run, args.trees))
    results = {}
    for run, outcomes in repeated.items():
        results[run] = dict(outcomes[0])
        times = [o["fit_s"] for o in outcomes if "fit_s" in o and "error" not in o]
        if len(outcomes) > 1 and times:
            results[run].update(fit_s=float(np.median(times)), fit_s_runs=times)
    spread, sampled = results.get("distributed", {}), results.get("sampled", {})
    if "sampled-time" in args.runs and "fit_s" in spread and "fit_s" in sampled:
        # A fit's time is a fixed part (binning the table, its first tasks) and a part per
        # tree: one run at the time per tree of the sampled run, a second at the marginal
        # time per tree the two runs give.
        trees = max(args.trees + 1, int(spread["fit_s"] / (sampled["fit_s"] / args.trees)))
        first = spawn(args, "sampled-time", trees)
        if "fit_s" in first and first["fit_s"] < 0.9 * spread["fit_s"]:
            per_tree = max(first["fit_s"] - sampled["fit_s"], 1e-3) / (trees - args.trees)
            more = int((spread["fit_s"] - first["fit_s"]) / per_tree)
            first = spawn(args, "sampled-time", trees + more) if more > 0 else first
        results["sampled-time"] = first
    binned = args.rows * (N_FEATURES + 16)
    output = {
        "command": "python benchmarks/bench_scale.py " + " ".join(sys.argv[1:]),
        "binned_table_mib": round(binned / 2**20),
        "runs": list(results.values()),
    }
    path = Path(args.output or RESULTS / f"scale_{args.rows // 1_000_000}m_{args.table}.json")
    path.write_text(json.dumps(output, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

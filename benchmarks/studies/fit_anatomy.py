"""Where a forest fit's time goes on a LocalCluster: the preparation before the tree tasks, the
tree tasks, and the client's tail after them; and how long packing the forest takes.

``timeline``: fits ``bench_forest.py``'s forest of the table (100 trees, ``max_features="sqrt"``)
``--fits`` times on a LocalCluster of two one-thread worker processes, as ``bench_forest.py``
does, and reads each fit's task stream: when the first tree task starts (the preparation: the
labels, the bin mapper and the binning), when the last one ends, and the tail after it (the last
trees' trip to the client and packing the forest); with the client process's CPU seconds by
thread (``IO loop``: the scheduler and the client's comms, in this process).

``pack``: the same forest fitted without a client, then ``PackedForest`` built from its trees
``--repeat`` times (median and best), what ``fit`` does last. Run before and after a change with
``PYTHONPATH`` set to each version.

    python benchmarks/studies/fit_anatomy.py timeline --table diamonds --fits 4
    python benchmarks/studies/fit_anatomy.py pack --table flights --repeat 15
"""

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_forest

from bench_forest import TABLES, local_cluster  # noqa: E402


def _forest(table, client=None):
    import dasktrees

    data = TABLES[table](SimpleNamespace(n_trees=100, n_samples=None))
    X, y = data["train_test"][:2]
    kind = (
        dasktrees.RandomForestClassifier
        if data["classification"]
        else dasktrees.RandomForestRegressor
    )
    return kind(n_estimators=100, max_features="sqrt", random_state=0, client=client), X, y


def _thread_cpu():
    """CPU seconds of each live thread of this process, by thread name."""
    import psutil

    names = {t.native_id: t.name for t in threading.enumerate()}
    return {
        names.get(t.id, str(t.id)): t.user_time + t.system_time for t in psutil.Process().threads()
    }


def _compute_span(record):
    compute = [s for s in record["startstops"] if s["action"] == "compute"]
    return compute[0]["start"], compute[0]["stop"]


def timeline(args):
    from distributed import get_task_stream

    cluster, client = local_cluster()
    with cluster, client:
        forest, X, y = _forest(args.table, client)
        forest.fit(X[:2000], y[:2000])  # load the kernels
        for _ in range(args.fits):
            before = _thread_cpu()
            with get_task_stream(client) as stream:
                start = time.time()
                forest.fit(X, y)
                end = time.time()
            after = _thread_cpu()
            spans = [_compute_span(r) for r in stream.data if "dasktrees-trees" in r["key"]]
            first = min(a for a, _ in spans) - start
            last = max(b for _, b in spans) - start
            cpu = {k: round(v - before.get(k, 0.0), 2) for k, v in after.items()}
            print(
                f"fit {end - start:.3f} s: tree tasks from {first:.3f} to {last:.3f} s "
                f"({len(spans)} tasks), tail {end - start - last:.3f} s; client CPU by thread "
                f"{ {k: v for k, v in cpu.items() if v >= 0.01} }",
                flush=True,
            )


def pack(args):
    from dasktrees.forest.packing import PackedForest

    forest, X, y = _forest(args.table)
    forest.fit(X, y)
    trees = [est.tree_ for est in forest.estimators_]
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        packed = PackedForest(trees, forest.bin_mapper_)
        times.append(time.perf_counter() - start)
    print(
        f"{args.table}: {len(packed.nodes):,} split nodes packed in "
        f"{1e3 * statistics.median(times):.1f} ms (median of {args.repeat}, best "
        f"{1e3 * min(times):.1f} ms)"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["timeline", "pack"])
    parser.add_argument("--table", choices=["diamonds", "flights"], default="diamonds")
    parser.add_argument("--fits", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    (timeline if args.what == "timeline" else pack)(args)


if __name__ == "__main__":
    main()

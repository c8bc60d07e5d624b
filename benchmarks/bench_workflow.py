"""A scikit-learn workflow with no Dask client: ``cross_val_score`` of a 100-tree forest, 5 folds,
on breast_cancer, as a new user would run it.

    python benchmarks/bench_workflow.py --repeat 5

Each setting runs in a process of its own (an idle thread pool or cluster distorts the next one's
timing), one after the other:

* ``dasktrees``: ``client=None`` and no default client, so every fit runs on threads of the
  process (kernels loaded from numba's cache: the first call of the process is listed apart);
* ``dasktrees, 2-worker client``: the same on a ``LocalCluster`` of two single-threaded worker
  processes started beforehand (its start-up listed apart);
* ``scikit-learn``: ``RandomForestClassifier(n_jobs=2)``.

Prints a JSON line per setting and writes them to benchmarks/results/workflow_cv.json.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
SETTINGS = ("dasktrees", "dasktrees, 2-worker client", "scikit-learn")


def measure(setting, n_trees, repeat):
    """Times of ``repeat + 1`` cross-validations in this process (the first listed apart)."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import cross_val_score

    X, y = load_breast_cancer(return_X_y=True)
    start = time.perf_counter()
    if setting == "scikit-learn":
        from sklearn.ensemble import RandomForestClassifier

        model, client = RandomForestClassifier(n_estimators=n_trees, n_jobs=2), None
    else:
        import dasktrees

        client = None
        if setting == "dasktrees, 2-worker client":
            from distributed import Client, LocalCluster

            cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0")
            client = Client(cluster)
        model = dasktrees.RandomForestClassifier(n_estimators=n_trees, client=client)
    setup = time.perf_counter() - start
    runs, scores = [], []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        scores.append(cross_val_score(model, X, y, cv=5).mean())
        runs.append(time.perf_counter() - start)
    if client is not None:
        client.close()
        cluster.close()
    return {
        "setting": setting,
        "setup_s": round(setup, 3),
        "first_cv_s": round(runs[0], 3),
        "median_cv_s": round(statistics.median(runs[1:]), 3),
        "runs_s": [round(r, 3) for r in runs[1:]],
        "mean_accuracy": round(statistics.mean(scores), 4),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-trees", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs after the first")
    parser.add_argument("--setting", choices=SETTINGS, help=argparse.SUPPRESS)  # one process's
    args = parser.parse_args()
    if args.setting:
        print(json.dumps(measure(args.setting, args.n_trees, args.repeat)), flush=True)
        return
    rows = []
    for setting in SETTINGS:
        command = [sys.executable, __file__, "--setting", setting]
        command += ["--n-trees", str(args.n_trees), "--repeat", str(args.repeat)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    reference = next(r for r in rows if r["setting"] == "scikit-learn")["median_cv_s"]
    for row in rows:
        row["time_over_scikit_learn"] = round(row["median_cv_s"] / reference, 2)
    result = {
        "rows": rows,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "args": {"n_trees": args.n_trees, "repeat": args.repeat},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "workflow_cv.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

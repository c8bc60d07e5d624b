"""Quantile forests cut on their out-of-bag rows (``prune="oob"``): the choice by the out-of-bag
pinball loss of the default quantiles against the choice by the mean's out-of-bag R² and against
full-depth trees, on real regression tables.

    python benchmarks/bench_oob_quantiles.py
    python benchmarks/bench_oob_quantiles.py --tables diabetes Wage --trees 50

Tables: those of ``bench_intervals.py`` (diabetes, Boston, Hitters, Carseats, Wage,
HousePrices, CPS1988, 10,000 rows of diamonds), cut in 5 folds (shuffled, seed 0); each fold
is predicted by ``RandomForestQuantileRegressor(oob_score=True, random_state=0)`` with
``--trees`` trees fitted on the other four, in this process without a Dask client:

- ``full``: full-depth trees;
- ``R² choice``: ``prune="oob"`` with the cut of best out-of-bag R² of the mean kept as it is
  (the walk by the pinball loss switched off: the regressors' choice, an ablation);
- ``pinball choice``: ``prune="oob"`` as shipped.

For each: the mean pinball loss of the quantiles 0.05, 0.5 and 0.95 over all rows (each predicted
once), relative to ``full``; the coverage of the band between the 0.05 and 0.95 quantiles; the
median fit seconds over the folds; for ``pinball choice`` the sizes chosen and the cuts visited.
Writes ``benchmarks/results/oob_quantiles.json`` (one JSON line a table).
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bench_intervals import TABLES, load  # noqa: E402

RESULTS = Path(__file__).parent / "results"
LEVELS = np.array([0.05, 0.5, 0.95])
MODELS = ("full", "R² choice", "pinball choice")


def pinball_losses(y, quantiles):
    """Each row's pinball loss, averaged over ``LEVELS``."""
    below = y[:, None] - quantiles
    return np.maximum(LEVELS * below, (LEVELS - 1) * below).mean(axis=1)


def fit(model, X, y, trees):
    """A quantile forest of ``model``'s kind fitted on (X, y), and its fit seconds."""
    import dasktrees
    from dasktrees.estimators.forests import BaseForest
    from dasktrees.estimators.quantile_forests import _QuantileMixin

    forest = dasktrees.RandomForestQuantileRegressor(
        trees,
        random_state=0,
        oob_score=True,
        default_quantiles=tuple(LEVELS),
        prune=None if model == "full" else "oob",
    )
    walk = _QuantileMixin._choose_cut
    if model == "R² choice":  # the ablation: the mean's best cut, no walk
        _QuantileMixin._choose_cut = BaseForest._choose_cut
    try:
        start = time.perf_counter()
        forest.fit(X, y)
        return forest, time.perf_counter() - start
    finally:
        _QuantileMixin._choose_cut = walk


def run_table(name, args):
    from sklearn.model_selection import KFold

    X, y = load(name)
    losses = {m: np.full(len(y), np.nan) for m in MODELS}
    inside = {m: np.zeros(len(y), dtype=bool) for m in MODELS}
    seconds = {m: [] for m in MODELS}
    chosen, visited = [], []
    for train, test in KFold(5, shuffle=True, random_state=0).split(X):
        for m in MODELS:
            forest, elapsed = fit(m, X[train], y[train], args.trees)
            seconds[m].append(elapsed)
            quantiles = forest.predict(X[test], list(LEVELS))
            losses[m][test] = pinball_losses(y[test], quantiles)
            inside[m][test] = (quantiles[:, 0] <= y[test]) & (y[test] <= quantiles[:, 2])
            if m == "pinball choice":
                chosen.append(forest.prune_["min_split_fraction"])
                visited.append(int(np.isfinite(forest.oob_prune_pinball_).sum()))
    full = losses["full"].mean()
    result = {
        "table": name,
        "rows": len(y),
        "trees": args.trees,
        "pinball": {m: round(float(losses[m].mean()), 6) for m in MODELS},
        "relative": {m: round(float(losses[m].mean() / full), 4) for m in MODELS},
        "coverage": {m: round(float(inside[m].mean()), 4) for m in MODELS},
        "fit_s": {m: round(statistics.median(seconds[m]), 3) for m in MODELS},
        "chosen": chosen,
        "visited": visited,
    }
    print(json.dumps(result), flush=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(TABLES))
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--out", default=str(RESULTS / "oob_quantiles.json"))
    args = parser.parse_args()
    results = [run_table(name, args) for name in args.tables]
    Path(args.out).write_text("\n".join(json.dumps(r) for r in results) + "\n")


if __name__ == "__main__":
    main()

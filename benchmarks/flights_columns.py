"""Which columns cost the flights forest its accuracy: dasktrees (native categories) and
scikit-learn (integer codes) on the ``bench_forest.py flights`` table, with columns left out or
more features drawn per split.

Each fit runs in a process of its own, without a Dask client (scikit-learn with
``n_jobs=2``), 100 trees, full depth; the script prints one JSON line a fit and a Markdown table
of test accuracy, and for dasktrees also which share of the splits each column takes among nodes
of 1-9, 10-99, 100-999, ... training rows (``--usage``):

    python benchmarks/flights_columns.py
    python benchmarks/flights_columns.py --drop none dest carrier,origin --max-features sqrt 1.0
    python benchmarks/flights_columns.py --libraries dasktrees --usage --seeds 0
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
N_TREES = 100
LIBRARIES = ["dasktrees", "scikit-learn"]


def max_features_value(text):
    """``"sqrt"`` / ``"log2"`` as they are, anything else as a float."""
    return text if text in ("sqrt", "log2") else float(text)


def split_shares(model, columns):
    """For each power of ten of node rows (``"1-9"``, ``"10-99"``, ...), the number of split
    nodes and the share of them on each column, over every tree of ``model``."""
    counts = {}
    for estimator in model.estimators_:
        tree = estimator.tree_
        split = tree.feature >= 0
        size_class = np.floor(np.log10(tree.n_node_samples[split])).astype(int)
        for size, feature in zip(size_class, tree.feature[split]):
            counts.setdefault(int(size), np.zeros(len(columns), dtype=np.int64))[feature] += 1
    return {
        f"{10**size}-{10 ** (size + 1) - 1}": {
            "splits": int(row.sum()),
            "share": {c: round(float(n / row.sum()), 3) for c, n in zip(columns, row)},
        }
        for size, row in sorted(counts.items())
    }


def one_fit(library, drop, max_features, seed, usage, as_codes, params):
    """Fit one forest on the flights table and return its test accuracy (a JSON-able dict).
    ``as_codes``: categorical columns dasktrees gets as integer codes; ``params``: more
    parameters of dasktrees' forest."""
    from bench_forest import flights_table

    table = flights_table(None)
    X, y, X_test, y_test = table["codes" if library == "scikit-learn" else "train_test"]
    dropped = [] if drop == "none" else drop.split(",")
    X, X_test = X.drop(columns=dropped), X_test.drop(columns=dropped)
    if library == "dasktrees" and as_codes:
        X, X_test = X.copy(), X_test.copy()
        for column in as_codes:
            X[column], X_test[column] = X[column].cat.codes, X_test[column].cat.codes
    if library == "scikit-learn":
        from sklearn.ensemble import RandomForestClassifier

        model = RandomForestClassifier(
            n_estimators=N_TREES, max_features=max_features, random_state=seed, n_jobs=2
        )
    else:
        import dasktrees

        model = dasktrees.RandomForestClassifier(
            n_estimators=N_TREES, max_features=max_features, random_state=seed, **params
        )
    model.fit(X, np.asarray(y))
    accuracy = float(np.mean(model.predict(X_test) == np.asarray(y_test)))
    result = {
        "library": library,
        "drop": drop,
        "max_features": max_features,
        "seed": seed,
        "as_codes": as_codes if library == "dasktrees" else [],
        "params": params if library == "dasktrees" else {},
        "accuracy": round(accuracy, 5),
    }
    if usage and library == "dasktrees":
        result["split_shares"] = split_shares(model, list(X.columns))
    return result


def table(rows, seeds):
    """Markdown: accuracy per library, columns left out and ``max_features``, one column a seed."""
    lines = [
        "| library | left out | max_features | " + " | ".join(f"seed {s}" for s in seeds) + " |",
        "|---|---|---|" + "---:|" * len(seeds),
    ]
    key_of = lambda r: (r["library"], r["drop"], r["max_features"])  # noqa: E731
    for key in dict.fromkeys(map(key_of, rows)):
        by_seed = {r["seed"]: r["accuracy"] for r in rows if key_of(r) == key}
        cells = " | ".join(f"{by_seed[s]:.4f}" if s in by_seed else "" for s in seeds)
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {cells} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libraries", nargs="*", choices=LIBRARIES, default=LIBRARIES)
    parser.add_argument(
        "--drop",
        nargs="*",
        default=["none", "dest", "carrier,origin"],
        help="columns to leave out, comma-separated; none for the whole table",
    )
    parser.add_argument("--max-features", nargs="*", type=max_features_value, default=["sqrt"])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1])
    parser.add_argument(
        "--as-codes",
        nargs="*",
        default=[],
        help="dasktrees: categorical columns to give as integer codes",
    )
    parser.add_argument("--params", default="{}", help="dasktrees: more parameters, as JSON")
    parser.add_argument("--usage", action="store_true", help="dasktrees: splits by column")
    parser.add_argument("--json", default=str(RESULTS / "flights_columns.json"))
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a single fit, in a child process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_fit(**json.loads(args.one))), flush=True)
        return
    rows = []
    for max_features in args.max_features:
        for drop in args.drop:
            for library in args.libraries:
                for seed in args.seeds:
                    job = dict(
                        library=library,
                        drop=drop,
                        max_features=max_features,
                        seed=seed,
                        usage=args.usage,
                        as_codes=args.as_codes,
                        params=json.loads(args.params),
                    )
                    out = subprocess.run(
                        [sys.executable, __file__, "--one", json.dumps(job)],
                        check=True,
                        capture_output=True,
                        text=True,
                    ).stdout
                    rows.append(json.loads(out.strip().splitlines()[-1]))
                    print(json.dumps(rows[-1]), flush=True)
    Path(args.json).write_text(json.dumps({"n_trees": N_TREES, "rows": rows}, indent=1) + "\n")
    print(table(rows, args.seeds))


if __name__ == "__main__":
    main()

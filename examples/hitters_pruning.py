"""ISLR's Algorithm 8.1 on ISLR Hitters: grow a large regression tree of log(Salary), prune
it back by weakest link with 6-fold cross-validation choosing alpha, and read the pruned tree.

    python examples/hitters_pruning.py [--plot hitters_cv.png]   # needs dasktrees[datasets]

As in ISLR section 8.1.1: the 263 players with a known salary are split in half; the tree is
grown on the 132 training players; the cross-validated error of every subtree of the pruning
path is plotted against its number of leaves, with the error on the held-out half. The chosen
tree (one-standard-error rule) is printed as if-then rules.
"""

import argparse

import numpy as np
from sklearn.model_selection import train_test_split

import dasktrees
from dasktrees.datasets import load_builtin
from dasktrees.pruning import select_ccp_alpha


def main(plot_path):
    data = load_builtin("hitters")
    y = data.pop("log_salary").to_numpy()
    X_train, X_test, y_train, y_test = train_test_split(data, y, train_size=132, random_state=1)
    grown = dasktrees.DecisionTreeRegressor(min_samples_leaf=5, random_state=0)
    search = select_ccp_alpha(grown, X_train, y_train, cv=6, rule="1se", random_state=0)

    leaves, test_mse = [], []
    for alpha in search.ccp_alphas:
        tree = dasktrees.DecisionTreeRegressor(min_samples_leaf=5, random_state=0, ccp_alpha=alpha)
        tree.fit(X_train, y_train)
        leaves.append(tree.get_n_leaves())
        test_mse.append(np.mean((tree.predict(X_test) - y_test) ** 2))
    best = int(np.argmin(search.cv_mean))
    chosen = search.estimator
    print(f"pruning path: {len(search.ccp_alphas)} subtrees, {leaves[0]} leaves down to 1")
    print(f"least CV error: {search.cv_mean[best]:.3f} at alpha {search.ccp_alphas[best]:.4f}")
    print(
        f"one-standard-error rule: alpha {search.ccp_alpha:.4f}, "
        f"{chosen.get_n_leaves()} leaves, test MSE "
        f"{np.mean((chosen.predict(X_test) - y_test) ** 2):.3f}"
    )
    smallest_error = dasktrees.DecisionTreeRegressor(
        min_samples_leaf=5, random_state=0, ccp_alpha=search.ccp_alphas[best]
    ).fit(X_train, y_train)
    for title, tree in (("least CV error", smallest_error), ("one-standard-error rule", chosen)):
        print(f"\nThe pruned tree ({title}, {tree.get_n_leaves()} leaves):")
        for rule in dasktrees.export_rules(tree, target_name="log(Salary)", show_missing=False):
            print(" ", rule)

    if plot_path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.errorbar(
            leaves,
            search.cv_mean,
            yerr=search.cv_se,
            fmt="o-",
            ms=3,
            capsize=2,
            label="6-fold cross-validation (mean, 1 SE)",
        )
        ax.plot(leaves, test_mse, "s-", ms=3, label="held-out half")
        ax.axvline(chosen.get_n_leaves(), color="grey", ls=":", label="chosen (1-SE rule)")
        ax.set_xlabel("tree size (leaves)")
        ax.set_ylabel("mean squared error of log(Salary)")
        ax.set_title("Hitters: cost-complexity pruning (Algorithm 8.1)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(plot_path, dpi=100)
        print(f"\nplot: {plot_path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", default="hitters_cv.png", help="where to write the CV curve")
    main(parser.parse_args().plot)

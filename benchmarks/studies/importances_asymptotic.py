"""Is scikit-learn's ``test_importances_asymptotic`` failing on our extra-trees a bias or the
luck of one seed? The test compares the impurity importances of 500 totally randomized trees
(``max_features=1``) on a 10-row boolean table with their theoretical values (Louppe et al.
2013) and asks for a mean absolute difference below 0.01, with ``random_state=0``.

    python benchmarks/studies/importances_asymptotic.py --seeds 8

Prints, for both libraries' ``ExtraTreesClassifier``, the difference for each seed and its
mean. The theoretical values are computed by the test module's own code (scikit-learn's
installed test file), so both libraries are measured against the same reference.
"""

import argparse
import inspect
from itertools import combinations, product

import numpy as np
from scipy.special import comb


def reference():
    """(X, y, theoretical importances) as the test module builds them."""
    import sklearn.ensemble.tests.test_forest as module

    source = inspect.getsource(module.test_importances_asymptotic)
    body = source.split("    # Estimate importances")[0].splitlines()[1:]
    names = {"np": np, "comb": comb, "combinations": combinations, "product": product}
    exec("\n".join(line[4:] for line in body), names)
    return names["X"], names["y"], names["true_importances"]


def main():
    from sklearn.ensemble import ExtraTreesClassifier as Theirs

    from dasktrees import ExtraTreesClassifier as Ours

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args()
    X, y, true = reference()
    for name, cls in (("dasktrees", Ours), ("scikit-learn", Theirs)):
        errors = []
        for seed in range(args.seeds):
            forest = cls(n_estimators=500, max_features=1, criterion="log_loss", random_state=seed)
            forest.fit(X, y)
            trees = forest.estimators_
            found = sum(t.tree_.compute_feature_importances(normalize=False) for t in trees) / 500
            errors.append(float(np.abs(true - found).mean()))
        print(name, [round(e, 4) for e in errors], "mean", round(float(np.mean(errors)), 4))


if __name__ == "__main__":
    main()

"""Hyperparameter search with Optuna, each forest grown on a Dask cluster.

    python examples/tuning.py [--trials 15]   # needs pip install "dasktrees[datasets,tune]"

ggplot2 ``diamonds``, log price: 80 % of the diamonds to tune and train on, kept on the workers
as a dask dataframe; 20 % held out, seen only once, by the final model. Optuna's TPE sampler
proposes ``max_features`` and ``min_samples_leaf``; each trial fits a forest with
``client=client``, so its trees are tasks on the LocalCluster's workers, and returns the forest's
out-of-bag R^2.

Why the out-of-bag score, and no cross-validation: every tree is grown on a bootstrap sample
and about a third of the rows (e^-1) are left out of it. Each training row is predicted by the
trees that did not see it, so the out-of-bag score estimates the error on new rows as
cross-validation would, from the one fit that also uses every row for training; k-fold
cross-validation would cost k fits per trial. ``n_estimators`` is not tuned: more trees lower a
forest's variance and never make it overfit, so the search would only learn that more is better
(and slower). ``max_samples`` is not tuned either: it changes how many trees predict each row out
of bag, and so how pessimistic the score is, which would bias the comparison between trials.

Optuna runs the trials one after another in this process (``study.optimize``); the parallelism is
inside each fit, whose trees grow on the cluster. To run several trials at once, Optuna's
``optuna.integration.DaskStorage`` (package ``optuna-integration[dask]``) shares one study
between trials submitted as Dask tasks; with forests that already fill the cluster there is
little to gain. About half a minute on 2 cores; ``--rows`` and ``--trees`` make it shorter.
"""

import argparse
import time

import dask.dataframe as dd
import numpy as np
from distributed import Client, LocalCluster
from sklearn.model_selection import train_test_split

import dasktrees
from dasktrees.datasets import load_builtin


def load(rows=None):
    """diamonds: features and log price, 80 % to train on, 20 % held out (pandas)."""
    data = load_builtin("diamonds")
    if rows is not None:
        data = data.sample(n=rows, random_state=0).reset_index(drop=True)
    y = np.log(data.pop("price"))
    return train_test_split(data, y, test_size=0.2, random_state=0)


def main(rows, n_trials, n_estimators):
    import optuna  # the optional extra dasktrees[tune]

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    X_train, X_test, y_train, y_test = load(rows)
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        # The training rows go to the workers once; every trial's fit reads them there.
        train = dd.from_pandas(X_train.assign(log_price=y_train), npartitions=4).persist()
        X, y = train.drop(columns="log_price"), train["log_price"]

        def forest(**params):
            return dasktrees.RandomForestRegressor(
                n_estimators=n_estimators, random_state=0, client=client, **params
            )

        def objective(trial):
            params = {
                "max_features": trial.suggest_float("max_features", 0.1, 1.0),
                "min_samples_leaf": trial.suggest_int("min_samples_leaf", 1, 100, log=True),
            }
            start = time.perf_counter()
            model = forest(oob_score=True, **params).fit(X, y)
            print(
                f"trial {trial.number:>2}: max_features {params['max_features']:.2f}, "
                f"min_samples_leaf {params['min_samples_leaf']:>3}  "
                f"out-of-bag R^2 {model.oob_score_:.4f}  ({time.perf_counter() - start:.1f} s)"
            )
            return model.oob_score_

        study = optuna.create_study(
            direction="maximize", sampler=optuna.samplers.TPESampler(seed=0)
        )
        study.optimize(objective, n_trials=n_trials)
        best = study.best_params
        print(
            f"best params: max_features {best['max_features']:.2f}, "
            f"min_samples_leaf {best['min_samples_leaf']} "
            f"(trial {study.best_trial.number}, out-of-bag R^2 {study.best_value:.4f})"
        )

        final = forest(**best).fit(X, y)
    # The held-out rows are pandas: predicted here, without the cluster.
    print(
        f"final model: {n_estimators} trees, test R^2 {final.score(X_test, y_test):.4f} "
        f"on {len(y_test)} held-out diamonds"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=15, help="Optuna trials")
    parser.add_argument("--trees", type=int, default=30, help="trees in each forest")
    parser.add_argument("--rows", type=int, default=None, help="a random sample of diamonds")
    args = parser.parse_args()
    main(args.rows, args.trials, args.trees)

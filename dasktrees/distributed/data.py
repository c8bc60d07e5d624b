"""Inputs -> binned partitions on the workers, each with its global row offset.

Whatever the input (numpy, pandas, dask.array, dask.dataframe), the rows are cut into blocks:

    rows      [ block 0        | block 1     | block 2          ]
    offsets   0                n0            n0 + n1            n

and every block is binned where it lives, into a ``BinnedPartition`` (``binned``: the tasks that
run on the workers). Only the bin mapper (edges and categories), the classes and per-class counts
come back to the client; the binned blocks stay on the workers as futures, recomputable from their
graph if a worker dies. Local input becomes blocks embedded in the graph, so it takes the same
path; its y is checked here, whole, and its blocks need no check on the workers.
"""

from __future__ import annotations

from typing import Union

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
from scipy.sparse import csr_matrix, issparse
from sklearn.utils.multiclass import check_classification_targets

from ..core.validation import check_2d, check_target
from ..learner.binning import BinMapper
from .binned import (
    TrainingData,
    all_labels,
    bin_block,
    block_labels,
    class_counts,
    class_weight_vector,
    fit_mapper,
    mapper_pieces,
)
from .client import Client, cluster_workers, is_in_process, sending_large_data
from .memory import check_workers_running

# What a fit takes as X, y or sample_weight: numpy or pandas (in this process), or dask (where
# it lives).
Data = Union[np.ndarray, pd.DataFrame, pd.Series, da.Array, dd.DataFrame, dd.Series, list]


def is_dask_collection(X: object) -> bool:
    return isinstance(X, (da.Array, dd.DataFrame, dd.Series))


def _local_blocks(client, values, bounds):
    """Row blocks of local ``values`` on the cluster, as futures of tasks that hold them.

    Sent once and shared by the later steps (labels, bin edges, binning), which took the data
    with each of their graphs before; a lost block is recomputed from its task. Distributed's
    warning about large graphs is not passed on: sending the data is the point. Tasks in this
    process take the blocks as they are (views of ``values``).
    """
    if is_in_process(client):
        return [values[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    blocks = [dask.delayed(values[a:b], pure=True) for a, b in zip(bounds[:-1], bounds[1:])]
    with sending_large_data():
        return client.compute(blocks)


def input_blocks(
    client: Client, X: Data, y: Data, sample_weight: Data | None, n_blocks: int, is_classifier: bool
) -> tuple:
    """Cut X, y and sample_weight into aligned row blocks; a local y is checked first
    (``check_target``, and scikit-learn's check of class labels for a classifier).

    Returns
    -------
    x_blocks, y_blocks, w_blocks : lists of Delayed (dask input) or Future (local input);
        w_blocks entries None without weights
    lengths : ndarray of int64, or None for a dask DataFrame (its partitions' lengths are
        counted where they are read, in the preparation's graph: ``prepare``)
    meta : empty pandas frame or numpy array with X's columns and dtypes
    is_dask : bool
    """
    if isinstance(X, dd.DataFrame):
        if not isinstance(y, (dd.Series, dd.DataFrame)) or y.npartitions != X.npartitions:
            raise TypeError(
                "y: with a dask DataFrame X, y must be a dask Series (or a DataFrame of target "
                "columns) with the same partitions (for example a column of the same frame)"
            )
        if sample_weight is not None and not (
            isinstance(sample_weight, dd.Series) and sample_weight.npartitions == X.npartitions
        ):
            raise TypeError(
                "sample_weight: with a dask DataFrame X, pass a dask Series with X's partitions"
            )
        x_blocks, y_blocks, w_blocks = _frame_blocks(X, y, sample_weight)
        return x_blocks, y_blocks, w_blocks, None, X._meta, True
    if isinstance(X, da.Array):
        if X.ndim != 2:
            raise ValueError(f"X must be 2-d (n_samples, n_features), got shape {X.shape}")
        if any(np.isnan(c) for c in X.chunks[0]):
            X = X.compute_chunk_sizes()
        X = X.rechunk({1: -1})
        y = da.asarray(y)
        _check_lengths(X.shape[0], y, sample_weight)
        y = y.rechunk((X.chunks[0],) + y.shape[1:])  # (a 2-d y: all its columns a block)
        x_blocks = list(X.to_delayed()[:, 0])
        lengths = np.array(X.chunks[0], dtype=np.int64)
        meta = (  # sparse blocks: a sparse meta, which the bin mapper's checks recognise
            csr_matrix((0, X.shape[1]), dtype=X.dtype)
            if issparse(X._meta)
            else np.empty((0, X.shape[1]), dtype=X.dtype)
        )
        w_blocks = [None] * len(x_blocks)
        if sample_weight is not None:
            w_blocks = list(da.asarray(sample_weight).rechunk((X.chunks[0],)).to_delayed())
        y_blocks = y.to_delayed() if y.ndim == 1 else y.to_delayed()[:, 0]
        return x_blocks, list(y_blocks), w_blocks, lengths, meta, True
    X = check_2d(X)
    n = X.shape[0]
    y = y.to_numpy() if isinstance(y, (pd.Series, pd.DataFrame)) else np.asarray(y)
    if sample_weight is not None:
        sample_weight = np.asarray(sample_weight, dtype=np.float64)
    _check_lengths(n, y, sample_weight)
    # Checked here, not in the blocks' tasks: scikit-learn's DataConversionWarning (one column
    # read as 1-d) reaches the user, and the workers never import scikit-learn (``binned``).
    y = check_target(y, n, is_classifier, multi_output=True)
    if is_classifier:
        check_classification_targets(y)  # a continuous or infinite y is no class label
    bounds = np.linspace(0, n, min(n_blocks, n) + 1).astype(np.int64)
    x_values = _FrameRows(X) if isinstance(X, pd.DataFrame) else X
    w_blocks = [None] * (len(bounds) - 1)
    if sample_weight is not None:
        w_blocks = _local_blocks(client, sample_weight, bounds)
    return (
        _local_blocks(client, x_values, bounds),
        _local_blocks(client, y, bounds),
        w_blocks,
        np.diff(bounds),
        X.iloc[:0] if isinstance(X, pd.DataFrame) else X[:0],
        False,
    )


def _check_lengths(n_rows, y, sample_weight):
    """y and sample_weight (when given) must have one entry per row of X."""
    for name, values in (("y", y), ("sample_weight", sample_weight)):
        if values is not None and np.ndim(values) > 0 and len(values) != n_rows:
            raise ValueError(f"{name} has {len(values)} rows but X has {n_rows}")


class _FrameRows:
    """``frame[a:b]`` by position, for ``_local_blocks``."""

    def __init__(self, frame):
        self.frame = frame

    def __getitem__(self, rows):
        return self.frame.iloc[rows]


# The columns y and sample_weight take in the one frame X's blocks are cut from.
_TARGET, _WEIGHT = "__dasktrees_y", "__dasktrees_w"


def _frame_blocks(X, y, sample_weight) -> tuple[list, list, list]:
    """A dask DataFrame X's blocks, and y's and sample_weight's beside them, each partition
    read once: the three as one frame, cut apart in each block's tasks.

    Cut apart, X, y and sample_weight are optimised one by one, and dask fuses the partitions
    of each as its columns' bytes allow: a Parquet table's y, one narrow column, came in fewer
    partitions than X (8 files, 3 partitions), and each was read on its own. Only collections
    of the same inputs are one frame (``_co_aligned``): others are cut apart and taken
    partition by partition, as rows are taken by position, never aligned on their index.
    """
    targets = [f"{_TARGET}{j}" for j in range(y.shape[1])] if y.ndim == 2 else [_TARGET]
    columns = {_TARGET: y} if y.ndim == 1 else dict(zip(targets, (y[c] for c in y.columns)))
    if sample_weight is not None:
        columns[_WEIGHT] = sample_weight
    if not _co_aligned(X, *columns.values()):
        x_blocks, y_blocks = list(X.to_delayed()), list(y.to_delayed())
        w_blocks = [None] * len(x_blocks)
        if sample_weight is not None:
            w_blocks = list(sample_weight.to_delayed())
        if not len(x_blocks) == len(y_blocks) == len(w_blocks):
            raise ValueError(
                "y and sample_weight must come in X's partitions, but dask made "
                f"{len(x_blocks)}, {len(y_blocks)} and {len(w_blocks)}: take them from one "
                "frame, or persist them"
            )
        return x_blocks, y_blocks, w_blocks
    parts = list(X.assign(**columns).to_delayed())
    aside = [*columns]
    x_blocks = [dask.delayed(_without)(part, aside) for part in parts]
    column = y.ndim == 1
    y_blocks = [dask.delayed(_taken)(part, targets, column) for part in parts]
    w_blocks = [None] * len(parts)
    if sample_weight is not None:
        w_blocks = [dask.delayed(_taken)(part, [_WEIGHT], True) for part in parts]
    return x_blocks, y_blocks, w_blocks


def _co_aligned(*collections) -> bool:
    """Whether dask's expressions of ``collections`` come from the same inputs, blockwise
    (dask's own test before it combines collections; private, so False where it is missing)."""
    try:
        from dask.dataframe.dask_expr._expr import are_co_aligned

        return bool(are_co_aligned(*(c.expr for c in collections)))
    except (ImportError, AttributeError):
        return False


def _without(part, columns):
    """A block of X: its partition without y's and sample_weight's columns."""
    return part.drop(columns=columns)


def _taken(part, columns, column):
    """A block of y or sample_weight: a Series (``column``) or a frame of ``columns``."""
    return part[columns[0]] if column else part[columns]


def first_rows(*lengths: int) -> tuple[int, ...]:
    """Each block's first row id, from the blocks' lengths in order."""
    return tuple(int(first) for first in np.cumsum((0, *lengths[:-1])))


def default_n_blocks(client: Client) -> int:
    """The blocks a table is cut in when ``n_blocks`` is None: one a worker."""
    return max(1, len(cluster_workers(client)))


def prepare(
    client: Client,
    X: Data,
    y: Data,
    sample_weight: Data | None,
    *,
    mapper: BinMapper,
    is_classifier: bool,
    class_weight: dict | str | None = None,
    n_blocks: int | None = None,
    poisson: bool = False,
) -> TrainingData:
    """Bin X on the cluster and keep the binned blocks there.

    Parameters
    ----------
    mapper : BinMapper
        Unfitted (configured) mapper, or a fitted one to reuse (warm start).
    class_weight : dict, "balanced" or None
        Folded into the blocks' weights ("balanced_subsample" is applied per tree instead).
    poisson : bool
        Check y as the Poisson criterion needs it (``check_poisson_target``).

    Returns
    -------
    TrainingData
    """
    # Before the first task: one a paused cluster would never start.
    check_workers_running(cluster_workers(client))
    if n_blocks is None:
        n_blocks = default_n_blocks(client)
    x_blocks, y_blocks, w_blocks, lengths, meta, is_dask = input_blocks(
        client, X, y, sample_weight, n_blocks, is_classifier
    )
    # One graph from the blocks to their bins: the labels, the mapper's fit and the binning
    # follow one another on the workers without a round trip to this process each, which waits
    # only for the fitted mapper and the classes (the round trips were most of a small fit's
    # preparation in a slow hour; docs/benchmarks.md).
    if lengths is None:
        # A dask DataFrame's partitions are counted in the graph that reads them, not in a
        # pass of their own that read the whole input once more; each block's first row (its
        # global row id, which the trees' counts hash) follows from those before it, in one
        # task (a chain of additions made the graph as long as the partitions).
        counted: list = [dask.delayed(len)(xb) for xb in x_blocks]
        firsts: list = list(dask.delayed(first_rows, nout=len(counted))(*counted))
    else:
        counted = [int(n) for n in lengths]
        firsts = list(first_rows(*counted))
    labels = dask.delayed(all_labels)(
        is_classifier,
        poisson,
        *(
            dask.delayed(block_labels)(yb, wb, n, is_classifier, not is_dask)
            for yb, wb, n in zip(y_blocks, w_blocks, counted)
        ),
    )
    classes, n_in_fit, n_outputs = labels[0], labels[1], labels[2]
    if not hasattr(mapper, "n_bins_non_missing_"):
        mapper._set_columns(meta)
        pieces = [
            dask.delayed(mapper_pieces)(mapper, xb, wb, first, n_in_fit)
            for xb, wb, first in zip(x_blocks, w_blocks, firsts)
        ]
        mapper = dask.delayed(fit_mapper)(mapper, *pieces)
    elif meta.shape[1] != mapper.n_features_in_:
        raise ValueError(
            f"X has {meta.shape[1]} features, but the model was fitted on {mapper.n_features_in_}"
        )

    class_weights = None
    if is_classifier and class_weight not in (None, "balanced_subsample"):
        counts = [dask.delayed(class_counts)(yb, classes) for yb in y_blocks]
        class_weights = dask.delayed(class_weight_vector)(class_weight, classes, *counts)

    binned = [
        dask.delayed(bin_block)(mapper, xb, yb, wb, first, classes, class_weights)
        for xb, yb, wb, first in zip(x_blocks, y_blocks, w_blocks, firsts)
    ]
    summaries = [mapper, classes, n_outputs, dask.delayed(tuple)(counted)]
    mapper, classes, n_outputs, counted, *parts = client.compute([*summaries, *binned])
    mapper, classes, n_outputs, counted = client.gather([mapper, classes, n_outputs, counted])
    offsets = np.concatenate([[0], np.cumsum(counted)]).astype(np.int64)
    lengths = tuple(int(n) for n in counted)
    return TrainingData(parts, offsets, mapper, classes, is_dask, lengths, n_outputs)

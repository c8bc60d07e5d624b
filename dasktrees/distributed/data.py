"""Inputs -> binned partitions on the workers, each with its global row offset.

Whatever the input (numpy, pandas, dask.array, dask.dataframe), the rows are cut into blocks:

    rows      [ block 0        | block 1     | block 2          ]
    offsets   0                n0            n0 + n1            n

and every block is binned where it lives, into a ``BinnedPartition``. Only the bin mapper (edges
and categories), the classes and per-class counts come back to the client; the binned blocks stay
on the workers as futures, recomputable from their graph if a worker dies. Local input becomes
blocks embedded in the graph, so it takes the same path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Union

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
from scipy.sparse import csr_matrix, issparse
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d

from ..core import class_outputs
from ..core.validation import (
    NOTHING_TO_FIT,
    check_2d,
    check_poisson_target,
    check_sample_weight,
    check_target,
)
from ..learner.binning import BinMapper, joined_sample, sample_mask
from .client import Client, cluster_workers, is_in_process, sending_large_data

# What a fit takes as X, y or sample_weight: numpy or pandas (in this process), or dask (where
# it lives).
Data = Union[np.ndarray, pd.DataFrame, pd.Series, da.Array, dd.DataFrame, dd.Series, list]


class BinnedPartition(NamedTuple):
    """One block of binned training rows, as it sits on a worker."""

    codes: np.ndarray  # uint8 (n_rows, n_features)
    y: np.ndarray  # float64 (n_rows,): class index or target; (n_rows, k): k target columns
    w: np.ndarray  # float64 (n_rows,): sample_weight x class_weight
    first_row: int  # global id of the block's first row


@dataclass
class TrainingData:
    """Binned training data on the cluster."""

    parts: list  # futures of BinnedPartition, in row order
    offsets: np.ndarray  # int64 (n_parts + 1,)
    bin_mapper: BinMapper
    classes: Any  # ndarray; a list of them, one per column, for k class columns; None: regression
    is_dask: bool  # the input was a dask collection
    row_chunks: tuple  # rows per block, to build dask outputs aligned with the input
    n_outputs: int = 1  # target columns

    @property
    def n_values(self) -> int:
        """Values a tree's node holds: classes (k blocks of K for k class columns,
        ``class_outputs``), or target columns (regression)."""
        if self.classes is None:
            return self.n_outputs
        if self.n_outputs == 1:
            return len(self.classes)
        return self.n_outputs * class_outputs.block_size([len(c) for c in self.classes])

    @property
    def n_rows(self) -> int:
        return int(self.offsets[-1])


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
    client: Client, X: Data, y: Data, sample_weight: Data | None, n_blocks: int
) -> tuple:
    """Cut X, y and sample_weight into aligned row blocks.

    Returns
    -------
    x_blocks, y_blocks, w_blocks : lists of Delayed (dask input) or Future (local input);
        w_blocks entries None without weights
    lengths : ndarray of int64
    meta : empty pandas frame or numpy array with X's columns and dtypes
    is_dask : bool
    """
    if isinstance(X, dd.DataFrame):
        if not isinstance(y, (dd.Series, dd.DataFrame)) or y.npartitions != X.npartitions:
            raise TypeError(
                "y: with a dask DataFrame X, y must be a dask Series (or a DataFrame of target "
                "columns) with the same partitions (for example a column of the same frame)"
            )
        x_blocks, y_blocks = list(X.to_delayed()), list(y.to_delayed())
        lengths = np.array(client.compute(X.map_partitions(len), sync=True), dtype=np.int64)
        meta = X._meta
        w_blocks = _dask_weight_blocks(sample_weight, X.npartitions)
        return x_blocks, y_blocks, w_blocks, lengths, meta, True
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
    if y.ndim == 2 and y.shape[1] == 1:
        y = column_or_1d(y, warn=True)  # scikit-learn's DataConversionWarning, here, not in a task
    if sample_weight is not None:
        sample_weight = np.asarray(sample_weight, dtype=np.float64)
    _check_lengths(n, y, sample_weight)
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


def _dask_weight_blocks(sample_weight, n_blocks):
    if sample_weight is None:
        return [None] * n_blocks
    if isinstance(sample_weight, dd.Series) and sample_weight.npartitions == n_blocks:
        return list(sample_weight.to_delayed())
    raise TypeError(
        "sample_weight: with a dask DataFrame X, pass a dask Series with X's partitions"
    )


# ---- tasks that run on the workers -------------------------------------------------------------


def _block_weights(w, n_rows):
    weights = None if w is None else np.asarray(w, dtype=np.float64)
    return check_sample_weight(weights, n_rows, whole=False)


def _mapper_pieces(mapper, x, w, first_row, n_in_fit):
    """A block's part of the bin mapper fit: its sampled numeric rows and category counts.
    Rows of zero weight take no part; ``n_in_fit``, the rows that take part in all blocks, says
    which share of them the mapper samples."""
    x = check_2d(x)
    n = x.shape[0]
    in_fit = _block_weights(w, n) > 0
    fraction = mapper.sampling_fraction(n_in_fit)
    sampled = in_fit & sample_mask(
        np.arange(first_row, first_row + n), fraction, mapper.random_state
    )
    take = (
        (lambda m: x.iloc[np.flatnonzero(m)]) if isinstance(x, pd.DataFrame) else (lambda m: x[m])
    )
    return mapper.pieces(take(in_fit), take(sampled))


def _fit_mapper(mapper, *pieces):
    numeric = [joined_sample(columns) for columns in zip(*(p[0] for p in pieces))]
    counts = [pd.concat(c).groupby(level=0, sort=False).sum() for c in zip(*(p[1] for p in pieces))]
    return mapper.fit_from_pieces(numeric, counts)


def _block_labels(y, w, n_rows, is_classifier):
    """Distinct labels (classification: a list of each column's for k class columns) or the
    smallest target, the targets' sum and the number of target columns (regression), and rows
    in the fit, of one block; checks y."""
    y = check_target(y, n_rows, is_classifier, multi_output=True)
    labels: Any
    if is_classifier:
        check_classification_targets(y)  # a continuous or infinite y is no class label
        labels = np.unique(y) if y.ndim == 1 else [np.unique(column) for column in y.T]
    else:
        extremes = (float(y.min()), float(y.sum())) if len(y) else (0.0, 0.0)
        labels = (*extremes, 1 if y.ndim == 1 else y.shape[1])
    n_in_fit = int(np.count_nonzero(_block_weights(w, n_rows) > 0))
    return labels, n_in_fit


def _all_labels(is_classifier, poisson, *blocks):
    """The classes (None for regression), the number of rows in the fit and of target
    columns, from every block's ``_block_labels``; at least two rows must have a positive
    weight, and for the Poisson criterion (``poisson``) y must be Poisson targets
    (``check_poisson_target``)."""
    if is_classifier:  # one array of labels, or a list of each column's
        widths = sorted({len(b[0]) if isinstance(b[0], list) else 1 for b in blocks})
    else:
        widths = sorted({b[0][2] for b in blocks})
    if len(widths) > 1:
        raise ValueError(f"y: its blocks have different numbers of columns, {widths}")
    n_outputs = widths[0]
    if poisson:
        check_poisson_target(min(b[0][0] for b in blocks), sum(b[0][1] for b in blocks))
    n_in_fit = sum(n for _, n in blocks)
    if n_in_fit == 0:
        raise ValueError(NOTHING_TO_FIT)
    if n_in_fit < 2:
        samples = "sample" if n_in_fit == 1 else "samples"
        raise ValueError(f"X has {n_in_fit} {samples} with positive weight; at least 2 are needed")
    classes: Any = None
    if is_classifier and n_outputs == 1:
        classes = np.unique(np.concatenate([u for u, _ in blocks]))
    elif is_classifier:
        classes = [np.unique(np.concatenate([u[o] for u, _ in blocks])) for o in range(n_outputs)]
    return classes, n_in_fit, n_outputs


def _class_counts(y, classes):
    """Rows of each class in a block's labels ``y``; a list, one per column, for k columns."""
    if isinstance(classes, list):
        y = np.asarray(y).reshape(len(y), -1)
        return [_class_counts(y[:, o], c) for o, c in enumerate(classes)]
    return np.bincount(np.searchsorted(classes, np.ravel(y)), minlength=len(classes))


def _bin_block(mapper, x, y, w, first_row, classes, class_weights):
    """Bin one block: codes, encoded targets and weights (x class_weight)."""
    x = check_2d(x)
    n = x.shape[0]
    codes = mapper.transform(x)
    y = np.asarray(y)
    weights = _block_weights(w, n).copy()
    if isinstance(classes, list):  # k class columns: (n, k) codes, weights the columns' product
        y = y.reshape(n, -1)
        codes_y = np.empty(y.shape)
        for o, classes_o in enumerate(classes):
            column_codes = np.searchsorted(classes_o, y[:, o])
            if class_weights is not None:
                weights *= class_weights[o][column_codes]
            codes_y[:, o] = column_codes
        y = codes_y
    elif classes is not None:
        y_codes = np.searchsorted(classes, y.ravel())
        if class_weights is not None:
            weights *= class_weights[y_codes]
        y = y_codes.astype(np.float64)
    else:  # a 2-d y of one column (a dask one) as 1-d, several kept as rows of targets
        y = np.ascontiguousarray(y[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y, np.float64)
    return BinnedPartition(codes, y, weights, int(first_row))


# ---- the client side ---------------------------------------------------------------------------


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
    if n_blocks is None:
        n_blocks = default_n_blocks(client)
    x_blocks, y_blocks, w_blocks, lengths, meta, is_dask = input_blocks(
        client, X, y, sample_weight, n_blocks
    )
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    # One graph from the blocks to their bins: the labels, the mapper's fit and the binning
    # follow one another on the workers without a round trip to this process each, which waits
    # only for the fitted mapper and the classes (the round trips were most of a small fit's
    # preparation in a slow hour; docs/benchmarks.md).
    labels = dask.delayed(_all_labels)(
        is_classifier,
        poisson,
        *(
            dask.delayed(_block_labels)(yb, wb, int(n), is_classifier)
            for yb, wb, n in zip(y_blocks, w_blocks, lengths)
        ),
    )
    classes, n_in_fit, n_outputs = labels[0], labels[1], labels[2]
    if not hasattr(mapper, "n_bins_non_missing_"):
        mapper._set_columns(meta)
        pieces = [
            dask.delayed(_mapper_pieces)(mapper, xb, wb, int(first), n_in_fit)
            for xb, wb, first in zip(x_blocks, w_blocks, offsets[:-1])
        ]
        mapper = dask.delayed(_fit_mapper)(mapper, *pieces)
    elif meta.shape[1] != mapper.n_features_in_:
        raise ValueError(
            f"X has {meta.shape[1]} features, but the model was fitted on {mapper.n_features_in_}"
        )

    class_weights = None
    if is_classifier and class_weight not in (None, "balanced_subsample"):
        counts = [dask.delayed(_class_counts)(yb, classes) for yb in y_blocks]
        class_weights = dask.delayed(_class_weight_vector)(class_weight, classes, *counts)

    binned = [
        dask.delayed(_bin_block)(mapper, xb, yb, wb, int(first), classes, class_weights)
        for xb, yb, wb, first in zip(x_blocks, y_blocks, w_blocks, offsets[:-1])
    ]
    mapper, classes, n_outputs, *parts = client.compute([mapper, classes, n_outputs, *binned])
    mapper, classes, n_outputs = client.gather([mapper, classes, n_outputs])
    lengths = tuple(int(n) for n in lengths)
    return TrainingData(parts, offsets, mapper, classes, is_dask, lengths, n_outputs)


def _class_weight_vector(class_weight, classes, *counts):
    """Weight of each class: scikit-learn's "balanced" (n / (K * count_k)) or a dict, from each
    block's class counts; for k class columns (``classes`` a list) a list of each column's,
    from "balanced" or a list of k dicts, as scikit-learn's ``compute_sample_weight``."""
    if isinstance(classes, list):
        if isinstance(class_weight, dict) or (
            isinstance(class_weight, list) and len(class_weight) != len(classes)
        ):
            given = "a dict" if isinstance(class_weight, dict) else f"{len(class_weight)} dicts"
            raise ValueError(
                f"class_weight: y has {len(classes)} columns, so it takes a list of as many "
                f'dicts (one per column) or "balanced"; got {given}'
            )
        weights = class_weight if isinstance(class_weight, list) else [class_weight] * len(classes)
        return [
            _class_weight_vector(w, c, *(block[o] for block in counts))
            for o, (w, c) in enumerate(zip(weights, classes))
        ]
    if isinstance(class_weight, list):
        if len(class_weight) != 1:
            raise ValueError(
                f"class_weight: a list of {len(class_weight)} dicts is for as many columns of y, "
                "which has one"
            )
        class_weight = class_weight[0]
    totals = np.sum(counts, axis=0)
    if class_weight == "balanced":
        return totals.sum() / (len(classes) * np.maximum(totals, 1))
    if isinstance(class_weight, dict):
        unknown = set(class_weight) - set(classes.tolist())
        if unknown:
            raise ValueError(
                f"class_weight: {sorted(unknown)!r} are not classes of y {classes.tolist()}"
            )
        return np.array([float(class_weight.get(c, 1.0)) for c in classes.tolist()])
    raise ValueError(
        'class_weight must be a dict, "balanced", "balanced_subsample" or None, '
        f"got {class_weight!r}"
    )

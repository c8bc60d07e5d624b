"""Binned partitions: the blocks of binned training rows on the workers, and the tasks that
make them from row blocks (``data.prepare`` builds their graph on the client).

These tasks, and the tree tasks that read their blocks, run on the workers, so this module
imports numpy and the learner's binning only: a worker that bins numpy or pandas blocks and
grows trees never imports scikit-learn, dask.array or dask.dataframe, which cost about two
seconds of every new worker's first task (docs/design.md, "Where work runs"). scikit-learn's
checks of y run here only for the blocks of a dask input, whose labels exist on the workers
alone; a local y is checked whole on the client before it is cut (``data.input_blocks``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..core import class_outputs
from ..core.validation import (
    NOTHING_TO_FIT,
    check_2d,
    check_poisson_target,
    check_sample_weight,
    check_target,
    is_frame,
)
from ..learner.binning import BinMapper, joined_sample, sample_mask


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


def _block_weights(w, n_rows):
    """A block's sample weights (ones for None), checked."""
    weights = None if w is None else np.asarray(w, dtype=np.float64)
    return check_sample_weight(weights, n_rows, whole=False)


def mapper_pieces(mapper, x, w, first_row, n_in_fit):
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
    take = (lambda m: x.iloc[np.flatnonzero(m)]) if is_frame(x) else (lambda m: x[m])
    return mapper.pieces(take(in_fit), take(sampled))


def fit_mapper(mapper, *pieces):
    """The bin mapper fitted from every block's ``mapper_pieces``."""
    numeric = [joined_sample(columns) for columns in zip(*(p[0] for p in pieces))]
    counts = [_summed_counts(c) for c in zip(*(p[1] for p in pieces))]
    return mapper.fit_from_pieces(numeric, counts)


def _summed_counts(counts):
    """A categorical feature's category counts summed over the blocks (pandas Series)."""
    import pandas as pd

    return pd.concat(counts).groupby(level=0, sort=False).sum()


def block_labels(y, w, n_rows, is_classifier, checked=False):
    """Distinct labels (classification: a list of each column's for k class columns) or the
    smallest target, the targets' sum and the number of target columns (regression), and rows
    in the fit, of one block; checks y unless it was ``checked`` on the client (a block of
    ``check_target``'s array)."""
    if checked:
        y = np.asarray(y)
    else:  # a dask input's block: scikit-learn's checks, here on the worker
        from sklearn.utils.multiclass import check_classification_targets

        y = check_target(y, n_rows, is_classifier, multi_output=True)
        if is_classifier:
            check_classification_targets(y)  # a continuous or infinite y is no class label
    labels: Any
    if is_classifier:
        labels = np.unique(y) if y.ndim == 1 else [np.unique(column) for column in y.T]
    else:
        extremes = (float(y.min()), float(y.sum())) if len(y) else (0.0, 0.0)
        labels = (*extremes, 1 if y.ndim == 1 else y.shape[1])
    n_in_fit = int(np.count_nonzero(_block_weights(w, n_rows) > 0))
    return labels, n_in_fit


def all_labels(is_classifier, poisson, *blocks):
    """The classes (None for regression), the number of rows in the fit and of target
    columns, from every block's ``block_labels``; at least two rows must have a positive
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


def class_counts(y, classes):
    """Rows of each class in a block's labels ``y``; a list, one per column, for k columns."""
    if isinstance(classes, list):
        y = np.asarray(y).reshape(len(y), -1)
        return [class_counts(y[:, o], c) for o, c in enumerate(classes)]
    return np.bincount(np.searchsorted(classes, np.ravel(y)), minlength=len(classes))


def bin_block(mapper, x, y, w, first_row, classes, class_weights):
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


def class_weight_vector(class_weight, classes, *counts):
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
            class_weight_vector(w, c, *(block[o] for block in counts))
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

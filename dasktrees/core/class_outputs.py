"""Several class columns (multi-output classification): their classes, codes and value blocks.

One tree predicts k class columns at once, as scikit-learn's do. Its nodes hold k blocks of K
values, K the most classes of a column (at least 2, so that no layout of several columns reads
as one of two classes): column o's class c is value ``o * K + c`` (``criteria``), and a column
of fewer classes leaves the rest of its block at zero, as scikit-learn pads ``tree_.value``.
"""

from __future__ import annotations

import numpy as np


def block_size(n_classes) -> int:
    """K, the values a class column holds in a node, for columns of ``n_classes`` classes."""
    return max(2, int(np.max(n_classes)))


def encode_columns(y):
    """The classes of each column of a 2-d ``y`` and its codes.

    Returns
    -------
    classes : list of ndarray
        Each column's sorted classes (``classes_``).
    codes : ndarray of float64, shape (n_samples, k)
        Each row's class index in each column, what the grower takes.
    """
    classes = []
    codes = np.empty(y.shape, dtype=np.float64)
    for o in range(y.shape[1]):
        classes_o, codes[:, o] = np.unique(y[:, o], return_inverse=True)
        classes.append(classes_o)
    return classes, codes


def column_blocks(values, n_classes):
    """Split values of k blocks along their last axis (``values`` (..., k * K): probabilities,
    SHAP values, expected values; numpy or dask) into the list of each column's (..., K_o)
    arrays, as scikit-learn's multi-output ``predict_proba`` returns them."""
    size = values.shape[-1] // len(n_classes)
    return [values[..., o * size : o * size + int(n)] for o, n in enumerate(n_classes)]


def column_labels(values, classes):
    """The most probable class of each column, ndarray (n, k) of ``classes[0]``'s dtype, as
    scikit-learn's multi-output ``predict``: from values of k blocks (``values`` (n, k * K))
    and each column's classes."""
    blocks = column_blocks(values, [len(c) for c in classes])
    labels = np.empty((values.shape[0], len(classes)), dtype=classes[0].dtype)
    for o, (block, classes_o) in enumerate(zip(blocks, classes)):
        labels[:, o] = classes_o.take(np.argmax(block, axis=1))
    return labels

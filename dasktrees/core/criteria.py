"""Split criteria: node impurities as numba kernels, and ID3's and C4.5's gains on raw columns.

A node's (or a candidate child's) statistics are one float64 vector, laid out by task:

    classification  [n_rows, w_class_0, w_class_1, ..., w_class_{K-1}]
                    [n_rows, block_1, ..., block_k]   (k outputs, K channels a block)
    squared error   [n_rows, w, w * y, w * y**2]
                    [n_rows, w, w * y_1, ..., w * y_k, sum_o w * y_o**2]   (k outputs)
    Poisson         [n_rows, w, w * y, w * y ln y]

where w sums the row weights (sample_weight x class_weight x bootstrap count). With k target
columns (multi-output regression, squared error only) a node's impurity is the mean of its
outputs' variances, as scikit-learn's; for k = 1 the layouts coincide. With k class columns
each output has a block of K = max(2, most classes of an output) channels, its class weights
(an output of fewer classes leaves the rest of its block at zero): the node's weight is the
first block's sum (each block sums to it), its impurity the mean of the blocks', as
scikit-learn's. Every impurity is computed from such a vector, so histograms, split scans and
node statistics share one code path.

The kernels that read either layout take ``outputs``: the number k of target or class columns,
or None for one. None is the default, and numba prunes the branches of several columns from a
kernel compiled with it before typing them, so that a tree of one target compiles none of their
code (docs/design.md, "Compiled for what a fit uses").
Entropies are in bits, as in ID3, C4.5 and scikit-learn. Formulas and sources:
docs/algorithms.md.
"""

import numpy as np

from .kernel_cache import kernel

GINI = 0
ENTROPY = 1
GAIN_RATIO = 2  # C4.5: entropy gain divided by the split information
MISCLASSIFICATION = 3
SQUARED_ERROR = 4
POISSON = 5  # half Poisson deviance; regression criteria are the codes from SQUARED_ERROR on

CLASSIFICATION_CRITERIA = {
    "gini": GINI,
    "entropy": ENTROPY,
    "log_loss": ENTROPY,
    "gain_ratio": GAIN_RATIO,
    "misclassification": MISCLASSIFICATION,
}
# "friedman_mse": deprecated in scikit-learn 1.9, which reads it as "squared_error" (the same
# splits); so do ours, with a FutureWarning (``params.friedman_as_squared_error``).
REGRESSION_CRITERIA = {
    "squared_error": SQUARED_ERROR,
    "friedman_mse": SQUARED_ERROR,
    "poisson": POISSON,
}

_LOG2 = np.log(2.0)


def several_outputs(n_outputs):
    """The kernels' ``outputs`` of a tree on ``n_outputs`` target or class columns: None for
    one (the module docstring)."""
    return int(n_outputs) if n_outputs > 1 else None


@kernel(inline="always")
def is_regression(criterion):
    """Whether ``criterion`` is a regression criterion: statistics ``[n_rows, w, wy, .]``."""
    return criterion >= SQUARED_ERROR


@kernel(inline="always")
def stats_weight(stats, criterion, outputs=None):
    """Total weight w of a statistics vector (see the module docstring for the layout): with
    ``outputs`` class columns, the first block's sum."""
    if is_regression(criterion):
        return stats[1]
    stop = stats.shape[0]
    if outputs is not None:
        stop = 1 + (stop - 1) // outputs
    total = 0.0
    for k in range(1, stop):
        total += stats[k]
    return total


@kernel()
def impurity(stats, criterion, outputs=None):
    """Impurity of the rows summarised by ``stats``.

    Parameters
    ----------
    stats : ndarray of float64, shape (n_channels,)
        ``[n_rows, w_0, ..., w_{K-1}]`` for classification, ``[n_rows, w, wy, wy2]`` for
        squared error (``[n_rows, w, wy_1, ..., wy_k, wy2]`` with k outputs), ``[n_rows, w,
        wy, wy ln y]`` for Poisson.
    criterion : int
        One of GINI, ENTROPY, GAIN_RATIO (node impurity is the entropy), MISCLASSIFICATION,
        SQUARED_ERROR, POISSON.
    outputs : int, optional
        Target columns of a regression, or class columns of a classification (each a block of
        its channels); None for one (the module docstring).

    Returns
    -------
    float
        Gini index, entropy in bits, misclassification rate (the mean of the outputs'),
        weighted variance (the mean of the outputs' variances) or mean half Poisson deviance
        (``poisson_deviance``); 0 for an empty node.
    """
    w = stats_weight(stats, criterion, outputs)
    if w <= 0.0:
        return 0.0
    if outputs is not None:  # apart: a larger ``impurity`` cost every node of one target
        if is_regression(criterion):
            return outputs_variance(stats, w)
        return outputs_class_impurity(stats[1:], w, criterion, outputs)
    if criterion == SQUARED_ERROR:
        mean = stats[2] / w
        return max(stats[3] / w - mean * mean, 0.0)
    if criterion == POISSON:
        return poisson_deviance(w, stats[2], stats[3])
    result = 0.0
    if criterion == GINI:
        result = 1.0
        for k in range(1, stats.shape[0]):
            p = stats[k] / w
            result -= p * p
    elif criterion == MISCLASSIFICATION:
        p_max = 0.0
        for k in range(1, stats.shape[0]):
            p_max = max(p_max, stats[k] / w)
        result = 1.0 - p_max
    else:  # ENTROPY, GAIN_RATIO
        for k in range(1, stats.shape[0]):
            if stats[k] > 0.0:
                p = stats[k] / w
                result -= p * np.log(p) / _LOG2
    return result


@kernel()
def outputs_variance(stats, w):
    """The mean of the weighted variances of k target columns, from their statistics
    ``[n_rows, w, wy_1, ..., wy_k, sum_o wy_o^2]`` of weight ``w`` > 0."""
    n_outputs = stats.shape[0] - 3
    squared_means = 0.0
    for o in range(n_outputs):
        mean = stats[2 + o] / w
        squared_means += mean * mean
    return max((stats[2 + n_outputs] / w - squared_means) / n_outputs, 0.0)


@kernel()
def outputs_class_impurity(weights, w, criterion, n_outputs):
    """The mean over ``n_outputs`` class columns of each one's impurity, from their class
    weights or fractions ``weights`` (blocks of equal size, one an output) and the node's
    weight ``w`` > 0 (1 for fractions): scikit-learn's impurity of a multi-output node."""
    block = weights.shape[0] // n_outputs
    total = 0.0
    for o in range(n_outputs):
        result = 0.0
        if criterion == GINI:
            result = 1.0
            for k in range(o * block, (o + 1) * block):
                p = weights[k] / w
                result -= p * p
        elif criterion == MISCLASSIFICATION:
            p_max = 0.0
            for k in range(o * block, (o + 1) * block):
                p_max = max(p_max, weights[k] / w)
            result = 1.0 - p_max
        else:  # ENTROPY
            for k in range(o * block, (o + 1) * block):
                if weights[k] > 0.0:
                    p = weights[k] / w
                    result -= p * np.log(p) / _LOG2
        total += result
    return total / n_outputs


@kernel(inline="always")
def poisson_deviance(w, wy, wy_log_y):
    """Mean half Poisson deviance of rows of total weight ``w`` about their mean ``mu = wy / w``,
    ``sum_i w_i (y_i ln(y_i / mu) - y_i + mu) / w = (sum_i w_i y_i ln y_i - wy ln mu) / w``
    (the ``- y_i + mu`` terms sum to zero; ``0 ln 0 = 0``), scikit-learn's Poisson impurity.
    0 when ``wy <= 0``: targets are never negative, so the rows are all zero (a tree whose rows
    are, a leaf of mean 0; scikit-learn gives such a node an infinite impurity). Nodes' own
    deviances are summed row by row (``poisson_term``); this is the formula of a statistics
    vector."""
    if wy <= 0.0 or w <= 0.0:
        return 0.0
    return max((wy_log_y - wy * np.log(wy / w)) / w, 0.0)


@kernel(inline="always")
def poisson_term(y, mean):
    """A row's half Poisson deviance about ``mean`` (> 0), ``y ln(y / mean) - y + mean``
    (``0 ln 0 = 0``). The ``- y + mean`` terms sum to zero over a node about its own mean, but
    not in floating point: kept, they cancel the rounding of the mean to first order, where
    ``y ln(y / mean)`` alone (scikit-learn's sum) leaves some 1e-16 of the target a row. (What
    is left, the rounding of ``y / mean``, is why ``histogram.node_statistics`` also tests
    whether a node's targets are all equal.)"""
    term = mean - y
    if y > 0.0:
        term += y * np.log(y / mean)
    return term


@kernel()
def class_impurity(value, w, criterion):
    """``impurity`` of a classification node from its class fractions ``value`` and weight
    ``w``: the same operations on the same numbers, since ``value[k]`` is the ``stats[1 + k] /
    w`` that ``impurity`` computes (how a tree's impurities are rebuilt rather than shipped).

    One difference: a class weight below about 5e-324 times ``w`` has a fraction of 0.0, which
    the entropy here skips where ``impurity`` (testing the weight) gives NaN.
    """
    if w <= 0.0:
        return 0.0
    result = 0.0
    if criterion == GINI:
        result = 1.0
        for k in range(value.shape[0]):
            p = value[k]
            result -= p * p
    elif criterion == MISCLASSIFICATION:
        p_max = 0.0
        for k in range(value.shape[0]):
            p_max = max(p_max, value[k])
        result = 1.0 - p_max
    else:  # ENTROPY, GAIN_RATIO
        for k in range(value.shape[0]):
            if value[k] > 0.0:
                p = value[k]
                result -= p * np.log(p) / _LOG2
    return result


@kernel(inline="always")
def binary_entropy(w_left, w_right):
    """Split information of a binary split, in bits (C4.5's denominator)."""
    w = w_left + w_right
    result = 0.0
    if w_left > 0.0:
        result -= w_left / w * np.log(w_left / w) / _LOG2
    if w_right > 0.0:
        result -= w_right / w * np.log(w_right / w) / _LOG2
    return result


# ----------------------------------------------------------------------------------------------
# ID3's and C4.5's formulas on one nominal column (multiway splits), for teaching and for tests.


def _class_stats(y, sample_weight):
    """Statistics vectors (layout above) of y over the whole set."""
    classes, y_codes = np.unique(np.asarray(y), return_inverse=True)
    stats = np.zeros(len(classes) + 1)
    stats[0] = len(y_codes)
    np.add.at(stats, y_codes + 1, sample_weight)
    return stats, y_codes, len(classes)


def _check_columns(y, x, sample_weight):
    y = np.asarray(y)
    x = np.asarray(x)
    if y.ndim != 1 or x.ndim != 1:
        raise ValueError(f"y and x must be 1-d, got shapes {y.shape} and {x.shape}")
    if len(y) != len(x):
        raise ValueError(f"y and x must have the same length, got {len(y)} and {len(x)}")
    if len(y) == 0:
        raise ValueError("y and x are empty")
    if sample_weight is None:
        sample_weight = np.ones(len(y))
    sample_weight = np.asarray(sample_weight, dtype=np.float64)
    if sample_weight.shape != y.shape:
        raise ValueError(f"sample_weight has shape {sample_weight.shape}, expected {y.shape}")
    return y, x, sample_weight


def node_impurity(y, criterion="entropy", sample_weight=None):
    """Impurity of a set of labels: ``"entropy"`` (bits), ``"gini"`` or ``"misclassification"``.

    Examples
    --------
    >>> round(node_impurity(["yes"] * 9 + ["no"] * 5), 3)
    0.94
    """
    code = _classification_criterion(criterion)
    y, _, sample_weight = _check_columns(y, y, sample_weight)
    stats, _, _ = _class_stats(y, sample_weight)
    return float(impurity(stats, code))


def information_gain(y, x, criterion="entropy", sample_weight=None):
    """Impurity decrease of a multiway split of ``y`` on the values of the nominal column ``x``.

    ``Gain(S, x) = I(S) - sum_v |S_v| / |S| * I(S_v)`` with ``I`` the entropy (ID3's information
    gain), the Gini index (Gini gain) or the misclassification rate; weights replace counts when
    ``sample_weight`` is given.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Class labels.
    x : array-like of shape (n_samples,)
        Values of one nominal attribute; each distinct value is one branch.
    criterion : {"entropy", "log_loss", "gini", "misclassification"}, default="entropy"
    sample_weight : array-like of shape (n_samples,), default=None

    Returns
    -------
    float
    """
    code = _classification_criterion(criterion)
    y, x, sample_weight = _check_columns(y, x, sample_weight)
    parent, y_codes, n_classes = _class_stats(y, sample_weight)
    _, x_codes = np.unique(x, return_inverse=True)
    children = np.zeros((x_codes.max() + 1, n_classes + 1))
    # numpy's stubs type no index that mixes an array and an int
    np.add.at(children, (x_codes, 0), 1.0)  # type: ignore[arg-type]
    np.add.at(children, (x_codes, y_codes + 1), sample_weight)
    w = parent[1:].sum()
    child_term = sum(child[1:].sum() / w * impurity(child, code) for child in children)
    return float(impurity(parent, code) - child_term)


def split_information(x, sample_weight=None):
    """Entropy in bits of the partition made by the values of ``x`` (C4.5's intrinsic value)."""
    x, _, sample_weight = _check_columns(x, x, sample_weight)
    stats, _, _ = _class_stats(x, sample_weight)
    return float(impurity(stats, ENTROPY))


def gain_ratio(y, x, sample_weight=None):
    """C4.5's gain ratio: entropy information gain divided by the split information of ``x``.

    Returns 0 when ``x`` has a single value (no split, zero split information).
    """
    info = split_information(x, sample_weight)
    if info <= 0.0:
        return 0.0
    return information_gain(y, x, "entropy", sample_weight) / info


def _classification_criterion(criterion):
    if criterion == "gain_ratio" or criterion not in CLASSIFICATION_CRITERIA:
        raise ValueError(
            "criterion must be one of 'entropy', 'log_loss', 'gini', 'misclassification'; "
            f"got {criterion!r}"
        )
    return CLASSIFICATION_CRITERIA[criterion]

"""Split search on one feature's compacted histogram, and row partitioning (numba kernels).

Every split is a cut of an ordered sequence of bins: bins in code order for a numeric feature,
categories sorted by a target statistic for a categorical one. The rows of the missing code are
tried on both sides of each cut and the better side is kept:

    ordered bins   b0  b1 | b2  b3        missing M
    candidate 1    [b0 b1 M] | [b2 b3]
    candidate 2    [b0 b1]   | [b2 b3 M]

The last cut, with every non-missing bin on the left, exists only when rows are missing: it
splits on missingness.
"""

import numpy as np
from numba import njit

from .._dtypes import MISSING_BIN
from .._random import next_below, next_uniform
from ..criteria import GAIN_RATIO, SQUARED_ERROR, binary_entropy, impurity, stats_weight

NO_SPLIT = -np.inf


@njit(cache=True, inline="always")
def split_score(left, right, criterion, parent_impurity):
    """What the search maximises for one candidate split.

    ``-(w_left * impurity_left + w_right * impurity_right)`` for impurity criteria, which orders
    candidates as the impurity decrease does; for the gain ratio, the decrease per unit of weight
    divided by the split information.
    """
    w_left = stats_weight(left, criterion)
    w_right = stats_weight(right, criterion)
    children = w_left * impurity(left, criterion) + w_right * impurity(right, criterion)
    if criterion != GAIN_RATIO:
        return -children
    info = binary_entropy(w_left, w_right)
    if info <= 0.0:
        return NO_SPLIT
    w = w_left + w_right
    return (w * parent_impurity - children) / w / info


@njit(cache=True, inline="always")
def _is_valid(left, right, criterion, min_samples_leaf, min_weight_leaf):
    w_left = stats_weight(left, criterion)
    w_right = stats_weight(right, criterion)
    return (
        left[0] >= min_samples_leaf
        and right[0] >= min_samples_leaf
        and w_left >= min_weight_leaf
        and w_right >= min_weight_leaf
        and w_left > 0.0
        and w_right > 0.0
    )


@njit(cache=True)
def scan_cuts(
    stats, order, n_bins, missing, total, criterion, parent_impurity,
    min_samples_leaf, min_weight_leaf, only_cut, left, right, prefix,
):
    """Best cut of the bins ``stats[order[0]], ..., stats[order[n_bins - 1]]``.

    Parameters
    ----------
    stats : ndarray of float64, shape (>= n_bins, n_channels)
        Statistics of the bins present in the node.
    order : ndarray of int64, shape (>= n_bins,)
        Order in which bins are laid out; a cut after position j sends ``order[:j + 1]`` left.
    missing, total : ndarray of float64, shape (n_channels,)
        Statistics of the node's missing rows and of all its rows.
    only_cut : int
        -1 to scan every cut; else evaluate only the cut after this position (random splits).
    left, right, prefix : ndarray of float64, shape (n_channels,)
        Scratch space.

    Returns
    -------
    score : float
        ``split_score`` of the best valid candidate, ``NO_SPLIT`` if none is valid.
    position : int
        Cut position: ``order[:position + 1]`` goes left.
    missing_go_to_left : bool
    """
    has_missing = missing[0] > 0.0
    best_score = NO_SPLIT
    best_position = -1
    best_missing_left = False
    prefix[:] = 0.0
    for j in range(n_bins):
        for c in range(prefix.shape[0]):
            prefix[c] += stats[order[j], c]
        last = j == n_bins - 1
        if (last and not has_missing) or (only_cut >= 0 and j != only_cut):
            continue
        for missing_left in (False, True):
            if missing_left and (last or not has_missing):
                continue
            for c in range(prefix.shape[0]):
                left[c] = prefix[c] + missing[c] if missing_left else prefix[c]
                right[c] = total[c] - left[c]
            if not _is_valid(left, right, criterion, min_samples_leaf, min_weight_leaf):
                continue
            score = split_score(left, right, criterion, parent_impurity)
            if score > best_score:
                best_score = score
                best_position = j
                best_missing_left = missing_left
    return best_score, best_position, best_missing_left


@njit(cache=True)
def category_order(stats, n_bins, criterion, target_class, keys, order):
    """Order categories by a target statistic, so that prefixes of the order are the candidates.

    Regression: mean target; classification: proportion of ``target_class``. For a binary class
    or a regression target with squared error, the best subset split is a prefix of this order
    (Breiman et al. 1984, seed 004), so scanning prefixes is exact.

    Writes ``order[:n_bins]`` (a stable argsort of ``keys[:n_bins]``).
    """
    for k in range(n_bins):
        w = stats_weight(stats[k], criterion)
        if criterion == SQUARED_ERROR:
            keys[k] = stats[k, 2] / w if w > 0.0 else 0.0
        else:
            keys[k] = stats[k, 1 + target_class] / w if w > 0.0 else 0.0
    order[:n_bins] = np.argsort(keys[:n_bins], kind="mergesort")


@njit(cache=True)
def random_cut(bins, n_bins, bin_values_f, state):
    """Cut position of a threshold drawn uniformly between the node's smallest and largest value.

    ``bin_values_f`` gives each bin a representative raw value; the cut falls after the last bin
    whose value is at most the drawn threshold (extra-trees, Geurts et al. 2006).
    """
    low = bin_values_f[bins[0]]
    high = bin_values_f[bins[n_bins - 1]]
    threshold = low + next_uniform(state) * (high - low)
    position = 0
    while position < n_bins - 2 and bin_values_f[bins[position + 1]] <= threshold:
        position += 1
    return position


@njit(cache=True)
def random_category_cut(n_bins, state):
    """Cut position drawn uniformly among the ``n_bins - 1`` cuts of a category order."""
    return next_below(state, n_bins - 1)


@njit(cache=True, inline="always")
def goes_left(code, bin_threshold, missing_go_to_left, is_categorical, bitset):
    """Whether a row with this code goes to the left child (binned data)."""
    if code == MISSING_BIN:
        return missing_go_to_left
    if is_categorical:
        return (bitset[code >> 5] >> (code & 31)) & 1 == 1
    return code <= bin_threshold


@njit(cache=True)
def partition(codes_f, sample_indices, start, stop, bin_threshold, missing_go_to_left,
              is_categorical, bitset, buffer):
    """Stable in-place partition of ``sample_indices[start:stop]`` by a split.

        before  [a b c d e f]        (rows of the node, in row order)
        after   [b e | a c d f]      left rows, then right rows, each still in row order

    Keeping row order keeps the feature gathers of the children cache friendly.

    Returns
    -------
    int
        The boundary: left rows are ``[start:boundary]``, right rows ``[boundary:stop]``.
    """
    n_left = start
    n_right = 0
    for i in range(start, stop):
        row = sample_indices[i]
        if goes_left(codes_f[row], bin_threshold, missing_go_to_left, is_categorical, bitset):
            sample_indices[n_left] = row
            n_left += 1
        else:
            buffer[n_right] = row
            n_right += 1
    sample_indices[n_left:stop] = buffer[:n_right]
    return n_left

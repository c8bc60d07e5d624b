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

from typing import NamedTuple

import numpy as np

from ..core.bitsets import bitset_has
from ..core.criteria import (
    GAIN_RATIO,
    GINI,
    MISCLASSIFICATION,
    POISSON,
    SQUARED_ERROR,
    binary_entropy,
    impurity,
    is_regression,
    stats_weight,
)
from ..core.dtypes import MISSING_BIN
from ..core.kernel_cache import kernel
from ..core.rng import next_below, next_uniform
from .jit import inlined_node_kernel, node_kernel

_LN2 = np.log(2.0)
# A Poisson child whose sum of w * y is at most this share of its node's is refused: its mean
# would be zero (scikit-learn's rule). A share, not scikit-learn's absolute 10 eps: ``total -
# prefix`` leaves rounding residue of the node's sum where a child's is really zero, and a
# residue above 10 eps let scikit-learn's scan pick such a split, whose recomputed impurity
# then turned the node into a leaf (found comparing trees; docs/trees.md).
_POISSON_EMPTY_SHARE = 1e-12

NO_SPLIT = -np.inf
_INSERTION_SORT_BELOW = 32  # categories; beyond, a merge sort of sorted runs


@kernel(inline="always")
def split_score(left, right, criterion, parent_impurity):
    """What the search maximises for one candidate split, from the children's statistics.

    ``-(w_left * impurity_left + w_right * impurity_right)`` for impurity criteria, which orders
    candidates as the impurity decrease does; for the gain ratio, the decrease per unit of weight
    divided by the split information. The reference for ``cut_score``, which gives the same
    ordering faster.
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


# A child lighter than this share of its node is empty: ``total - prefix`` leaves rounding
# residue (1e-15) where a child's weight is really zero, and the gain ratio divides by it.
_EMPTY_SHARE = 1e-12


@kernel(inline="always")
def _is_empty(w_left, w_right):
    w = w_left + w_right
    return w_left <= _EMPTY_SHARE * w or w_right <= _EMPTY_SHARE * w


@kernel(inline="always")
def _xlogx(x):
    return x * np.log(x) if x > 0.0 else 0.0


@kernel(inline="always")
def cut_score(
    prefix, missing, total, missing_left, criterion, parent_impurity, min_weight_leaf, outputs
):
    """Score of one cut, computed from the running prefix without building child vectors.

    The left child is ``prefix`` (plus ``missing`` when ``missing_left``), the right child the
    rest of ``total``. Scores are proxies that order candidates as ``split_score`` does, up to a
    constant of the node (``w`` the node weight, l_k and r_k the children's class weights):

        gini               sum_k l_k^2 / w_l + sum_k r_k^2 / w_r        (= w - weighted Gini)
        entropy            sum_k l_k ln l_k - w_l ln w_l + (same right)  (= -ln 2 x weighted H)
        misclassification  max_k l_k + max_k r_k                        (= w - weighted error)
        squared_error      (wy_l)^2 / w_l + (wy_r)^2 / w_r              (= sum wy^2 - weighted SSE)
                           (summed over the outputs with k target columns)
        poisson            wy_l ln mu_l + wy_r ln mu_r          (= sum wy ln y - weighted deviance)
        gain_ratio         the gain ratio itself

    with mu the children's means; with ``outputs`` target or class columns (statistics of one
    block of class channels an output, ``criteria``) the outputs' proxies summed, as
    scikit-learn's (``outputs_cut_score``); ``outputs`` None for one. Returns NO_SPLIT when a
    child's weight is below ``min_weight_leaf`` or zero, and for Poisson when a child's sum of
    w * y is zero (up to rounding): its mean would be zero.
    This runs for every cut of every candidate feature of every node: it must stay a few flops
    per class.
    """
    m = 1.0 if missing_left else 0.0
    if is_regression(criterion):
        w_left = prefix[1] + m * missing[1]
        w_right = total[1] - w_left
        if w_left < min_weight_leaf or w_right < min_weight_leaf or _is_empty(w_left, w_right):
            return NO_SPLIT
        if outputs is not None:  # the outputs' proxies summed, as scikit-learn's
            score = 0.0
            for o in range(2, 2 + outputs):
                s_left = prefix[o] + m * missing[o]
                s_right = total[o] - s_left
                score += s_left * s_left / w_left + s_right * s_right / w_right
            return score
        s_left = prefix[2] + m * missing[2]
        s_right = total[2] - s_left
        if criterion == POISSON:
            empty = _POISSON_EMPTY_SHARE * total[2]
            if s_left <= empty or s_right <= empty:
                return NO_SPLIT
            return s_left * np.log(s_left / w_left) + s_right * np.log(s_right / w_right)
        return s_left * s_left / w_left + s_right * s_right / w_right
    if outputs is not None:
        return outputs_cut_score(prefix, missing, total, m, criterion, outputs, min_weight_leaf)
    w_left = 0.0
    w_right = 0.0
    acc_left = 0.0
    acc_right = 0.0
    for k in range(1, prefix.shape[0]):
        lk = prefix[k] + m * missing[k]
        rk = total[k] - lk
        w_left += lk
        w_right += rk
        if criterion == GINI:
            acc_left += lk * lk
            acc_right += rk * rk
        elif criterion == MISCLASSIFICATION:
            acc_left = max(acc_left, lk)
            acc_right = max(acc_right, rk)
        else:
            acc_left += _xlogx(lk)
            acc_right += _xlogx(rk)
    if w_left < min_weight_leaf or w_right < min_weight_leaf or _is_empty(w_left, w_right):
        return NO_SPLIT
    if criterion == GINI:
        return acc_left / w_left + acc_right / w_right
    if criterion == MISCLASSIFICATION:
        return acc_left + acc_right
    entropy_proxy = acc_left - _xlogx(w_left) + acc_right - _xlogx(w_right)
    if criterion != GAIN_RATIO:
        return entropy_proxy
    info = binary_entropy(w_left, w_right)
    if info <= 0.0:
        return NO_SPLIT
    return (parent_impurity + entropy_proxy / _LN2 / (w_left + w_right)) / info


@kernel(_nrt=False, error_model="numpy")
def outputs_cut_score(prefix, missing, total, m, criterion, n_outputs, min_weight_leaf):
    """``cut_score`` of a classification on ``n_outputs`` > 1 class columns (gini, entropy or
    misclassification; ``m`` 1.0 when the missing rows go left): the outputs' proxies summed,
    each about the children's weights, the first block's sums (every block sums to them).
    Apart from ``cut_score``: a larger inlined body would be compiled into every scan."""
    block = (prefix.shape[0] - 1) // n_outputs
    w_left = 0.0
    w_right = 0.0
    for c in range(1, 1 + block):
        lc = prefix[c] + m * missing[c]
        w_left += lc
        w_right += total[c] - lc
    if w_left < min_weight_leaf or w_right < min_weight_leaf or _is_empty(w_left, w_right):
        return NO_SPLIT
    score = 0.0
    for o in range(n_outputs):
        acc_left = 0.0
        acc_right = 0.0
        for c in range(1 + o * block, 1 + (o + 1) * block):
            lc = prefix[c] + m * missing[c]
            rc = total[c] - lc
            if criterion == GINI:
                acc_left += lc * lc
                acc_right += rc * rc
            elif criterion == MISCLASSIFICATION:
                acc_left = max(acc_left, lc)
                acc_right = max(acc_right, rc)
            else:
                acc_left += _xlogx(lc)
                acc_right += _xlogx(rc)
        if criterion == GINI:
            score += acc_left / w_left + acc_right / w_right
        elif criterion == MISCLASSIFICATION:
            score += acc_left + acc_right
        else:
            score += acc_left - _xlogx(w_left) + acc_right - _xlogx(w_right)
    return score


@kernel(inline="always")
def child_value(a, b, criterion):
    """The value a monotonic constraint bounds, of statistics whose channels 1 and 2 are ``a``
    and ``b``: the mean target (regression: the weight and the weighted sum) or the share of
    class 1 (two classes: the two classes' weights)."""
    return b / a if is_regression(criterion) else b / (a + b)


@kernel(inline="always")
def keeps_monotonic(prefix, missing, total, missing_left, criterion, monotonic, lower, upper):
    """Whether a cut (as ``cut_score`` reads it) keeps a monotonic constraint: both children's
    values (``child_value``) within the node's bounds ``[lower, upper]``, and the left child's
    at most the right's (``monotonic`` 1: increasing) or at least (-1: decreasing), as
    scikit-learn's trees test a constrained split."""
    m = 1.0 if missing_left else 0.0
    a_left = prefix[1] + m * missing[1]
    b_left = prefix[2] + m * missing[2]
    left = child_value(a_left, b_left, criterion)
    right = child_value(total[1] - a_left, total[2] - b_left, criterion)
    return lower <= left <= upper and lower <= right <= upper and (left - right) * monotonic <= 0.0


# NumPy's error model: a cut scored without a branch may divide by a zero weight before it is
# rejected (``_score_cuts``); Python's would raise.
@kernel(_nrt=False, error_model="numpy")
def scan_cuts(
    stats,
    order,
    n_bins,
    missing,
    total,
    criterion,
    parent_impurity,
    min_samples_leaf,
    min_weight_leaf,
    only_cut,
    monotonic,
    lower,
    upper,
    prefix,
    cuts,
    outputs,
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
    monotonic : int
        The feature's monotonic constraint: 0 none; 1 (-1) only cuts whose left child's value
        is at most (at least) the right's, both within ``[lower, upper]`` (``keeps_monotonic``).
    lower, upper : float
        The node's bounds on its children's values (infinite without constraints).
    prefix : ndarray of float64, shape (n_channels,)
        Scratch space.
    cuts : ndarray of float64, shape (N_CUT_ROWS, N_BIN_CODES)
        Scratch space.
    outputs : int or None
        Target or class columns (``criteria``); None for one.

    Returns
    -------
    score : float
        ``cut_score`` of the best valid candidate, ``NO_SPLIT`` if none is valid.
    position : int
        Cut position: ``order[:position + 1]`` goes left.
    missing_go_to_left : bool
    """
    has_missing = missing[0] > 0.0
    if (
        only_cut < 0
        and monotonic == 0
        # (squared error of one target column, or two classes)
        and (
            (criterion == SQUARED_ERROR and prefix.shape[0] == 4)
            or (criterion == GINI and prefix.shape[0] == 3)
        )
    ):
        return _scan_two_channels(
            stats, order, n_bins, missing, total, criterion, min_samples_leaf, min_weight_leaf, cuts
        )
    best_score = NO_SPLIT
    best_position = -1
    best_missing_left = False
    prefix[:] = 0.0
    # Without missing rows the last cut (everything left) is no split.
    n_cuts = n_bins if has_missing else n_bins - 1
    # Missing rows (if any) on the right, then on the left, except at the last cut, where that
    # would leave the right empty. One call of ``cut_score`` for both sides: each inlined copy
    # is compiled again (a second copy cost compilation and gained no speed).
    n_sides = 2 if has_missing else 1
    for j in range(n_cuts):
        row = order[j]
        for c in range(prefix.shape[0]):
            prefix[c] += stats[row, c]
        if only_cut >= 0 and j != only_cut:
            continue
        for side in range(n_sides if j < n_bins - 1 else 1):
            missing_left = side == 1
            n_left = prefix[0] + missing[0] if missing_left else prefix[0]
            if n_left >= min_samples_leaf and total[0] - n_left >= min_samples_leaf:
                score = cut_score(
                    prefix,
                    missing,
                    total,
                    missing_left,
                    criterion,
                    parent_impurity,
                    min_weight_leaf,
                    outputs,
                )
                if score > best_score and (
                    monotonic == 0
                    or keeps_monotonic(
                        prefix, missing, total, missing_left, criterion, monotonic, lower, upper
                    )
                ):
                    best_score = score
                    best_position = j
                    best_missing_left = missing_left
    return best_score, best_position, best_missing_left


# The cut scan's scratch rows (``cuts``, N_BIN_CODES wide each): the left child's prefix sums of
# the three channels, then each cut's score with the missing rows right and left.
_CUT_N, _CUT_A, _CUT_B, _SCORE_RIGHT, _SCORE_LEFT = range(5)
N_CUT_ROWS = 5


@kernel(inline="always")
def _rejected(n_left, w_left, w_right, total, min_samples_leaf, min_weight_leaf):
    """Whether a cut breaks a leaf minimum or leaves a child empty, as ``cut_score`` and
    ``scan_cuts`` test it, without a branch."""
    w = w_left + w_right
    return (
        (n_left < min_samples_leaf)
        | (total[0] - n_left < min_samples_leaf)
        | (w_left < min_weight_leaf)
        | (w_right < min_weight_leaf)
        | (w_left <= _EMPTY_SHARE * w)
        | (w_right <= _EMPTY_SHARE * w)
    )


@kernel(inline="always")
def _score_cuts(
    cuts,
    n_cuts,
    extra_n,
    extra_a,
    extra_b,
    total,
    criterion,
    min_samples_leaf,
    min_weight_leaf,
    out,
):
    """``cut_score`` of the first ``n_cuts`` cuts whose left children are the prefix sums in
    ``cuts`` plus ``extra_*`` (the missing rows, or zeros), into ``out``, for two-class Gini
    (channels 1 and 2 the class weights) or squared error (the weight and the weighted sum).
    Also tests ``min_samples_leaf``. The same operations as ``cut_score``, so the same numbers,
    but with no branch, so that the compiler scores several cuts an instruction (a rejected
    cut's quotients are computed and dropped)."""
    n_prefix, a_prefix, b_prefix = cuts[_CUT_N], cuts[_CUT_A], cuts[_CUT_B]
    n_cuts = np.uint64(max(n_cuts, 0))  # unsigned positions, as in _scan_two_channels
    if criterion == SQUARED_ERROR:
        for j in range(n_cuts):
            n_left = n_prefix[j] + extra_n
            w_left = a_prefix[j] + extra_a
            s_left = b_prefix[j] + extra_b
            w_right = total[1] - w_left
            s_right = total[2] - s_left
            rejected = _rejected(n_left, w_left, w_right, total, min_samples_leaf, min_weight_leaf)
            score = s_left * s_left / w_left + s_right * s_right / w_right
            out[j] = NO_SPLIT if rejected else score
    else:
        for j in range(n_cuts):
            n_left = n_prefix[j] + extra_n
            a_left = a_prefix[j] + extra_a
            b_left = b_prefix[j] + extra_b
            a_right = total[1] - a_left
            b_right = total[2] - b_left
            w_left = a_left + b_left
            w_right = a_right + b_right
            rejected = _rejected(n_left, w_left, w_right, total, min_samples_leaf, min_weight_leaf)
            score = (a_left * a_left + b_left * b_left) / w_left + (
                a_right * a_right + b_right * b_right
            ) / w_right
            out[j] = NO_SPLIT if rejected else score


@kernel(inline="always")
def _scan_two_channels(
    stats, order, n_bins, missing, total, criterion, min_samples_leaf, min_weight_leaf, cuts
):
    """``scan_cuts`` for every cut of a two-class Gini or a squared-error histogram, whose score
    reads two channels besides the row count: the prefix sums first, then every cut's score
    (``_score_cuts``), then the first best. The general loop, a cut at a time through
    ``cut_score``, was a quarter of a large numeric tree's growth (docs/benchmarks.md). Same
    candidates, in the same order, with the same scores."""
    has_missing = missing[0] > 0.0
    n_cuts = n_bins if has_missing else n_bins - 1
    p0 = 0.0
    p1 = 0.0
    p2 = 0.0
    # Unsigned positions: numba fixes up every signed index for negative values.
    for j in range(np.uint64(max(n_cuts, 0))):
        row = np.uint64(order[j])
        p0 += stats[row, 0]
        p1 += stats[row, 1]
        p2 += stats[row, 2]
        cuts[_CUT_N, j] = p0
        cuts[_CUT_A, j] = p1
        cuts[_CUT_B, j] = p2
    # A prefix sum of non-negative counts and weights, or of w * y from +0.0, is never -0.0, so
    # adding +0.0 (no missing rows on the left) leaves it as cut_score leaves it.
    score_right, score_left = cuts[_SCORE_RIGHT], cuts[_SCORE_LEFT]
    _score_cuts(
        cuts,
        n_cuts,
        0.0,
        0.0,
        0.0,
        total,
        criterion,
        min_samples_leaf,
        min_weight_leaf,
        score_right,
    )
    n_left_cuts = n_bins - 1 if has_missing else 0  # at the last cut the right would be empty
    _score_cuts(
        cuts,
        n_left_cuts,
        missing[0],
        missing[1],
        missing[2],
        total,
        criterion,
        min_samples_leaf,
        min_weight_leaf,
        score_left,
    )
    best_score = NO_SPLIT
    best_position = -1
    best_missing_left = False
    for j in range(n_cuts):
        if score_right[j] > best_score:
            best_score = score_right[j]
            best_position = j
            best_missing_left = False
        if j < n_left_cuts and score_left[j] > best_score:
            best_score = score_left[j]
            best_position = j
            best_missing_left = True
    return best_score, best_position, best_missing_left


@node_kernel
def category_order(
    stats, bins, n_bins, criterion, target_class, tree_keys, keys, order, merge_buffer
):
    """Order categories by a target statistic, so that prefixes of the order are the candidates.

    Regression: mean target; classification: proportion of ``target_class``. For a binary class
    or a regression target with squared error, the best subset split is a prefix of this order
    (Breiman et al. 1984; Fisher 1958), so scanning prefixes is exact.

    Parameters
    ----------
    stats : ndarray of float64, shape (>= n_bins, n_channels)
        Statistics of the node's categories, whose codes are ``bins[:n_bins]``.
    tree_keys : ndarray of float64, shape (N_BIN_CODES,) or (0,)
        The statistic over the whole tree's rows, by code (``categorical_order="tree"``,
        ``grower.tree_category_keys``): the node's categories are ordered by it. Empty: by the
        node's own ``stats``.

    Writes ``order[:n_bins]``: a stable argsort of ``keys[:n_bins]`` (``merge_buffer``, of the
    same length as ``order``, is scratch).
    """
    u = np.uint64  # unsigned positions: numba fixes up every signed index for negative values
    if tree_keys.shape[0] > 0:
        for k in range(u(n_bins)):
            keys[k] = tree_keys[u(bins[k])]
    else:
        for k in range(u(n_bins)):
            w = stats_weight(stats[k], criterion)
            if is_regression(criterion):
                keys[k] = stats[k, 2] / w if w > 0.0 else 0.0
            else:
                keys[k] = stats[k, 1 + target_class] / w if w > 0.0 else 0.0
    for k in range(u(n_bins)):
        order[k] = k
    # Fewer than _INSERTION_SORT_BELOW categories are one run: an insertion sort, no merges
    # (one inlined copy of the insertion sort, not two).
    _merge_argsort(keys, order, n_bins, merge_buffer)


@kernel(inline="always")
def _insertion_argsort(keys, order, lo, hi):
    """Stable insertion sort of ``order[lo:hi]`` by ``keys``."""
    for k in range(lo + 1, hi):
        item = order[k]
        j = k - 1
        while j >= lo and keys[order[j]] > keys[item]:
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = item


@kernel(inline="always")
def _merge_argsort(keys, order, n, buffer):
    """Stable sort of ``order[:n]`` by ``keys``: sorted runs of _INSERTION_SORT_BELOW, then
    bottom-up merges between ``order`` and ``buffer``; a tie keeps the left run's item first,
    as ``np.argsort(kind="stable")`` does."""
    for lo in range(0, n, _INSERTION_SORT_BELOW):
        _insertion_argsort(keys, order, lo, min(lo + _INSERTION_SORT_BELOW, n))
    src, dst = order, buffer
    in_order = True
    width = _INSERTION_SORT_BELOW
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j = lo, mid
            for k in range(lo, hi):
                if j >= hi or (i < mid and keys[src[i]] <= keys[src[j]]):
                    dst[k] = src[i]
                    i += 1
                else:
                    dst[k] = src[j]
                    j += 1
        src, dst = dst, src
        in_order = not in_order
        width *= 2
    if not in_order:
        for k in range(n):
            order[k] = buffer[k]


@inlined_node_kernel
def random_cut(bins, n_bins, bin_values_f, state):
    """A threshold drawn uniformly between the node's smallest and largest value (extra-trees,
    Geurts et al. 2006): the cut position among the node's bins, and the bin it falls in.

    ``bin_values_f`` gives each bin a representative raw value. The node's rows with values at
    most the threshold go left: the cut falls after the last of the node's bins whose value is
    at most it. Between that bin and the node's next one may lie bins no row of the node fills;
    those whose value is at most the threshold go left too (the returned bin threshold), as
    new rows there would with the drawn threshold itself. Cutting at the left bin's edge instead
    sent every such row right, the gaps all closed from one side: deep extra-trees generalised
    worse than scikit-learn's on the same bins.

    Returns
    -------
    position : int
        Index in ``bins`` of the last bin that goes left (at most ``n_bins - 2``).
    bin_threshold : int
        The last bin code that goes left: from ``bins[position]`` up to, not including,
        ``bins[position + 1]``.
    """
    low = bin_values_f[bins[0]]
    high = bin_values_f[bins[n_bins - 1]]
    threshold = low + next_uniform(state) * (high - low)
    position = 0
    while position < n_bins - 2 and bin_values_f[bins[position + 1]] <= threshold:
        position += 1
    bin_threshold = bins[position]
    while bin_threshold + 1 < bins[position + 1] and bin_values_f[bin_threshold + 1] <= threshold:
        bin_threshold += 1
    return position, bin_threshold


@kernel(inline="always")
def middle_edge(low_bin, high_bin, bin_values_f, edges_f):
    """Where to cut between two bins that are neighbours in a node: the bin edge in
    ``[edges[low_bin], edges[high_bin - 1]]`` nearest the middle of their values.

    CART puts a threshold half-way between the two values it separates. Taking a bin edge keeps
    the split the same on raw values (``x <= edge``) and on binned codes (``code <= bin``) for
    every row, and with one bin per distinct value it is CART's own threshold whenever the values
    in between are evenly spaced.

    Returns
    -------
    int
        The bin threshold: codes up to it go left.
    """
    middle = (bin_values_f[low_bin] + bin_values_f[high_bin]) / 2
    cut = low_bin
    while cut + 1 < high_bin and abs(edges_f[cut + 1] - middle) < abs(edges_f[cut] - middle):
        cut += 1
    return cut


@inlined_node_kernel
def random_category_cut(n_bins, state):
    """Cut position drawn uniformly among the ``n_bins - 1`` cuts of a category order."""
    return next_below(state, n_bins - 1)


class SplitRule(NamedTuple):
    """How a recorded split sends a row: what ``goes_left`` and the partition read of it."""

    feature: int  # the split feature
    bin_threshold: int  # numeric: codes up to it go left
    missing_go_to_left: bool
    is_categorical: bool  # the same for all the rows of a node
    bitset: np.ndarray  # uint32 (BITSET_WORDS,): categorical: the codes that go left


class RowBuffers(NamedTuple):
    """The partition's scratch: where it keeps the rows a node sends right, one array for each
    array it moves (``partition``)."""

    rows: np.ndarray  # int64 (n_in_bag,): row indices
    y: np.ndarray  # float64 (n_in_bag,): targets
    w: np.ndarray  # float64 (n_in_bag,): weights
    words: np.ndarray  # uint64 like ``NodeRows.node_words``: codes in node order


@kernel(inline="always")
def goes_left(code, rule):
    """1 if a row with this code goes to the left child under ``rule`` (a ``SplitRule``), else
    0, as a uint64.

    Without a branch on the code: at many nodes a row's side is a coin flip, and whether its
    value is missing too. (``rule.is_categorical`` is the same for all the rows of a node.)
    """
    u = np.uint64
    missing = u(code == MISSING_BIN)
    if rule.is_categorical:
        side = u(bitset_has(rule.bitset, code))
    else:
        side = u(code <= rule.bin_threshold)
    return (missing & u(rule.missing_go_to_left)) | ((u(1) - missing) & side)


@node_kernel
def partition(
    rows, start, stop, rule, ordered, move_codes, move_rows, buffers, two_classes, children,
    outputs=None,
):  # fmt: skip
    """Stable in-place partition of a node's rows by a split.

        before  [a b c d e f]        (rows of the node, in row order)
        after   [b e | a c d f]      left rows, then right rows, each still in row order

    Parameters
    ----------
    rows : grower.NodeRows
        The node owns ``rows.sample_indices[start:stop]``. ``rows.codes`` is the binned training
        set (rows x features). ``rows.y`` and ``rows.w`` (targets and weights in
        ``sample_indices`` order, ``outputs`` targets a row) are moved with their rows,
        so the children find theirs contiguous. Keeping row order keeps the code gathers of
        the children cache friendly.
    start, stop : int
    rule : SplitRule
        The split.
    ordered : bool
        Whether the split feature's codes are read from the rows' codes in node order
        (``rows.node_codes``, see ``grower.NodeRows``), rather than gathered from ``rows.codes``.
    move_codes : bool
        Whether the codes in node order are moved with their rows too (needs ``ordered``), as the
        64-bit words ``rows.node_words`` that view the same memory: a row of 50 codes moves as 7
        words, not 50 bytes.
    move_rows : bool
        Whether the row indices ``rows.sample_indices`` are moved. Without (which needs
        ``ordered`` and ``move_codes``) they stay where they are: a tree whose every node reads
        its codes in node order never reads them.
    buffers : RowBuffers
        Scratch for the right rows.
    two_classes : bool
        Classification with two classes, ``rows.y`` the signed weights of
        ``histogram.signed_weights`` and ``rows.w`` the same array, moved once: the same pass
        sums the children's statistics.
    children : ndarray of float64, shape (2, 3)
        With ``two_classes``, written ``[n_rows, w_0, w_1]`` of the left and right child, the
        same sums in the same order as ``histogram.node_statistics`` over each child's rows.
        Otherwise not touched.
    outputs : int, optional
        Targets a row (k of a tree on k target or class columns); None for one.

    Returns
    -------
    int
        The boundary: left rows are ``[start:boundary]``, right rows ``[boundary:stop]``.
    """
    # Its own pass, inlined: a test at every row, or a call taking ``rows``, cost the growth of
    # one target (docs/benchmarks.md).
    if outputs is not None:
        return _partition_targets(
            rows, start, stop, rule, ordered, move_codes, move_rows, buffers, outputs
        )
    # Two copies of the pass, each with ``move_rows`` a constant: tested at every row, it cost the
    # growth of trees that move their rows (docs/benchmarks.md).
    if move_rows:
        return _partition(
            rows, start, stop, rule, ordered, move_codes, True, buffers, two_classes, children
        )
    return _partition(
        rows, start, stop, rule, ordered, move_codes, False, buffers, two_classes, children
    )


@inlined_node_kernel
def _partition(
    rows, start, stop, rule, ordered, move_codes, move_rows, buffers, two_classes, children
):
    """``partition``, inlined into it twice (``move_rows`` constant in each copy)."""
    codes, node_codes, node_words = rows.codes, rows.node_codes, rows.node_words
    sample_indices, node_y, node_w = rows.sample_indices, rows.y, rows.w
    f = rule.feature
    # Unsigned positions: numba wraps a negative signed index around, at a few instructions for
    # every index of every row.
    u = np.uint64
    n_left = u(start)
    n_right = u(0)
    # Each row adds w or exactly 0.0 to each sum (the signed weight's class parts and the side
    # as 0.0 / 1.0), and adding 0.0 leaves a sum of weights as it is: per child, the sums of its
    # rows in order.
    left_0 = left_1 = right_0 = right_1 = 0.0
    for i in range(u(start), u(stop)):
        yi = node_y[i]
        code = node_codes[i, f] if ordered else codes[u(sample_indices[i]), f]
        left = goes_left(code, rule)
        if two_classes:  # yi is the signed weight
            on_left = np.float64(left)
            w_1 = max(yi, 0.0)
            w_0 = max(-yi, 0.0)
            left_0 += w_0 * on_left
            left_1 += w_1 * on_left
            right_0 += w_0 * (1.0 - on_left)
            right_1 += w_1 * (1.0 - on_left)
        # Each row is written to both sides and only its own side moves on: the side of a row
        # is a coin flip at many nodes, and a branch on it was mispredicted half the time.
        # Slot n_left <= i has already been read.
        if move_rows:
            row = sample_indices[i]
            sample_indices[n_left] = row
            buffers.rows[n_right] = row
        node_y[n_left] = yi
        buffers.y[n_right] = yi
        if not two_classes:  # else node_w is node_y
            wi = node_w[i]
            node_w[n_left] = wi
            buffers.w[n_right] = wi
        if move_codes:
            for c in range(node_words.shape[1]):
                word = node_words[i, c]
                node_words[n_left, c] = word
                buffers.words[n_right, c] = word
        n_left += left
        n_right += u(1) - left
    for k in range(n_right):
        if move_rows:
            sample_indices[n_left + k] = buffers.rows[k]
        node_y[n_left + k] = buffers.y[k]
        if not two_classes:
            node_w[n_left + k] = buffers.w[k]
    if move_codes:
        for k in range(n_right):
            for c in range(node_words.shape[1]):
                node_words[n_left + k, c] = buffers.words[k, c]
    if two_classes:
        children[0, 0] = np.float64(n_left) - np.float64(start)
        children[0, 1] = left_0
        children[0, 2] = left_1
        children[1, 0] = np.float64(n_right)
        children[1, 1] = right_0
        children[1, 2] = right_1
    return np.int64(n_left)


@inlined_node_kernel
def _partition_targets(rows, start, stop, rule, ordered, move_codes, move_rows, buffers, outputs):
    """``partition`` of the rows of a tree on k = ``outputs`` > 1 target or class columns,
    whose row i has its targets at ``rows.y[i * k : (i + 1) * k]``: the same moves, each row's
    k targets moved together."""
    codes, node_codes, node_words = rows.codes, rows.node_codes, rows.node_words
    sample_indices, node_y, node_w = rows.sample_indices, rows.y, rows.w
    k = np.uint64(outputs)
    u = np.uint64  # unsigned positions (``_partition``)
    n_left = u(start)
    n_right = u(0)
    for i in range(u(start), u(stop)):
        code = node_codes[i, rule.feature] if ordered else codes[u(sample_indices[i]), rule.feature]
        left = goes_left(code, rule)
        if move_rows:
            row = sample_indices[i]
            sample_indices[n_left] = row
            buffers.rows[n_right] = row
        for o in range(k):  # slots n_left * k + o <= i * k + o have been read
            target = node_y[i * k + o]
            node_y[n_left * k + o] = target
            buffers.y[n_right * k + o] = target
        wi = node_w[i]
        node_w[n_left] = wi
        buffers.w[n_right] = wi
        if move_codes:
            for c in range(node_words.shape[1]):
                word = node_words[i, c]
                node_words[n_left, c] = word
                buffers.words[n_right, c] = word
        n_left += left
        n_right += u(1) - left
    for j in range(n_right):
        if move_rows:
            sample_indices[n_left + j] = buffers.rows[j]
        for o in range(k):
            node_y[(n_left + j) * k + o] = buffers.y[j * k + o]
        node_w[n_left + j] = buffers.w[j]
        if move_codes:
            for c in range(node_words.shape[1]):
                node_words[n_left + j, c] = buffers.words[j, c]
    return np.int64(n_left)

"""Per-node, per-feature histograms of the node statistics (numba kernels).

A histogram is a (N_BIN_CODES, n_channels) float64 array, one statistics row per bin code (see
``criteria`` for the channel layout). A regression histogram leaves its last channel, the sum
of w * y^2, at zero: the split search reads only n, w and w * y (``splitting.cut_score``), and
the chosen split's improvement needs no more (``grower._record_split``).

The same buffer is reused for every node and feature: the kernels remember which bins they
touched, and ``compact`` copies those rows out in bin order and zeroes them again. A node with
few rows therefore never pays for the 256 bins it does not use:

    hist (256 rows, mostly zero)          compact output (m rows, bin order)
    bin  7: [2, 0.0, 2.0]                 bins  = [3, 7, 12]
    bin  3: [1, 1.0, 0.0]      ----->     stats = [[1, 1, 0], [2, 0, 2], [4, 3, 1]]
    bin 12: [4, 3.0, 1.0]                 missing = stats of code MISSING_BIN

For two classes the kernels read a single array per row, the signed weight (``signed_weights``:
w for class 1, -w for class 0; weights are positive), in place of the class index and the
weight: the partitions move one array instead of two, and the histograms read one. The class
weights come out as the same numbers in the same order.
"""

import numpy as np

from ..core.criteria import POISSON, impurity, is_regression, poisson_term
from ..core.dtypes import MISSING_BIN
from .jit import inlined_node_kernel, node_kernel

# Below this many touched bins, sorting them beats walking every bin of the feature.
_SORT_TOUCHED_BELOW = 32
# Above this many rows a node fills most bins: skip the bookkeeping, walk every bin instead.
TRACK_TOUCHED_BELOW = 1024
# Above this many rows a node reads its codes in node order (``grower.NodeRows.node_codes``);
# at most TRACK_TOUCHED_BELOW: the one-pass fill of larger nodes reads only node order.
# (Measured in docs/benchmarks.md.)
ORDERED_CODES_ABOVE = 256
assert ORDERED_CODES_ABOVE <= TRACK_TOUCHED_BELOW


def signed_weights(y, w, out):
    """Write the two-class rows' signed weights, ``w`` where the class ``y`` is 1 and ``-w``
    where it is 0, into ``out`` (which may be ``w`` itself) and return it. The kernels take
    it as both their targets and their weights when the statistics have three channels."""
    return np.copysign(w, y - 0.5, out=out)


@node_kernel
def build_histogram(
    codes, f, sample_indices, start, stop, y, w, criterion, hist, touched, outputs=None
):
    """Add the rows ``sample_indices[start:stop]`` to ``hist`` by their code of feature ``f``.

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, n_features)
        Binned training set, rows x features (or the codes in node order,
        ``grower.NodeRows.node_codes``, with ``sample_indices`` the identity).
    f : int
        The feature.
    sample_indices : ndarray of int64
        Rows of the tree; the node owns the slice ``[start:stop]``.
    y, w : ndarray of float64, shape (n_in_bag,)
        Class index (classification) or target (regression), and row weight, in the order of
        ``sample_indices`` (``y[i]`` belongs to row ``sample_indices[i]``): the partition
        moves them with the rows, so only the codes are gathered row by row (LightGBM's
        "ordered gradients"). With k = ``outputs`` target or class columns a row's targets are
        ``y[i * k : (i + 1) * k]`` (``outputs_histogram``).
    criterion : int
        Selects the channel layout.
    hist : ndarray of float64, shape (N_BIN_CODES, n_channels)
        Zero on entry; rows of the codes met are filled (for squared error, channels 0-2).
    touched : ndarray of int32, shape (N_BIN_CODES,)
        Written: the non-missing codes met, in order of first appearance.
    outputs : int, optional
        Target or class columns, None for one (``criteria``).

    Returns
    -------
    int
        Number of non-missing codes met (the filled prefix of ``touched``), or -1 for a large
        node, whose record ``compact`` does not use.
    """
    if outputs is not None:
        classification = not is_regression(criterion)
        return outputs_histogram(
            codes, f, sample_indices, False, start, stop, y, w, outputs, classification, hist,
            touched,
        )  # fmt: skip
    # A large node fills most bins: its record is not used, and compact walks every bin. (Only
    # random splits fill a large node here: the best splitter's one-pass fill is
    # ``build_histograms``.)
    track = stop - start <= TRACK_TOUCHED_BELOW
    # Unsigned positions and counts: numba fixes up every signed index for negative values
    # (instructions per index and row, and registers; measured in docs/benchmarks.md).
    u = np.uint64
    n_touched = u(0)
    # Every row's code is written to ``touched`` and the count moves on only at a first touch:
    # a branch on "first touch" is a coin flip in mid-size nodes.
    if is_regression(criterion):
        for i in range(u(start), u(stop)):
            b = codes[u(sample_indices[i]), f]
            touched[n_touched] = b
            n_touched += u(hist[b, 0] == 0.0) & u(b != MISSING_BIN)
            hist[b, 0] += 1.0
            hist[b, 1] += w[i]
            hist[b, 2] += w[i] * y[i]
    elif hist.shape[1] == 3:  # two classes: y holds the signed weights
        for i in range(u(start), u(stop)):
            b = codes[u(sample_indices[i]), f]
            touched[n_touched] = b
            n_touched += u(hist[b, 0] == 0.0) & u(b != MISSING_BIN)
            hist[b, 0] += 1.0
            hist[b, u(1) + u(y[i] > 0.0)] += abs(y[i])
    else:
        for i in range(u(start), u(stop)):
            b = codes[u(sample_indices[i]), f]
            touched[n_touched] = b
            n_touched += u(hist[b, 0] == 0.0) & u(b != MISSING_BIN)
            hist[b, 0] += 1.0
            hist[b, u(1) + u(y[i])] += w[i]
    return np.int64(n_touched) if track else -1


@node_kernel
def build_histograms(
    node_codes, features, n_features, start, stop, y, w, criterion, hists, outputs=None
):
    """Fill ``hists[j]`` as ``build_histogram`` fills one histogram, for each of the features
    ``features[:n_features]`` of a large node, whose codes are in node order
    (``grower.NodeRows.node_codes``). The features are filled two at a time, each pair in one
    pass over the node's rows: a loop over a run-time number of features per row kept the
    compiled loop from overlapping one row's additions with the next's, and was 1.3-2.9x
    slower per row and feature (docs/benchmarks.md). The touched bins are not recorded (large
    nodes fill most bins). Each histogram's sums are added in the same row order as
    ``build_histogram``'s, so they are the same numbers.

    Parameters
    ----------
    node_codes : ndarray of uint8, shape (n_in_bag, n_features)
        The tree's rows' codes in the order of its sample indices; the node owns
        ``[start:stop]``.
    features : ndarray of int64
        The features; the first ``n_features`` are filled.
    hists : ndarray of float64, shape (>= n_features, N_BIN_CODES, n_channels)
        Zero on entry.
    start, stop, y, w, criterion, outputs :
        As for ``build_histogram``.
    """
    if outputs is not None:
        classification = not is_regression(criterion)
        for j in range(n_features):  # (``features[:0]``: no record of the touched bins)
            outputs_histogram(
                node_codes,
                features[j],
                features,
                True,
                start,
                stop,
                y,
                w,
                outputs,
                classification,
                hists[j],
                features[:0],
            )
        return
    for j in range(0, n_features - 1, 2):
        _fill_pair(
            node_codes,
            features[j],
            features[j + 1],
            start,
            stop,
            y,
            w,
            criterion,
            hists[j],
            hists[j + 1],
        )
    if n_features % 2 == 1:
        j = n_features - 1
        _fill_one(node_codes, features[j], start, stop, y, w, criterion, hists[j])


@inlined_node_kernel
def _fill_pair(node_codes, f0, f1, start, stop, y, w, criterion, first, second):
    """Add the rows ``[start:stop]`` to ``first`` by their code of feature ``f0`` and to
    ``second`` by their code of ``f1``, in one pass."""
    u = np.uint64  # unsigned positions (``build_histogram``)
    if is_regression(criterion):
        for i in range(u(start), u(stop)):
            wi = w[i]
            wy = wi * y[i]
            b0 = node_codes[i, f0]
            b1 = node_codes[i, f1]
            first[b0, 0] += 1.0
            first[b0, 1] += wi
            first[b0, 2] += wy
            second[b1, 0] += 1.0
            second[b1, 1] += wi
            second[b1, 2] += wy
    else:
        two_classes = first.shape[1] == 3  # y holds the signed weights
        for i in range(u(start), u(stop)):
            wi = abs(y[i]) if two_classes else w[i]
            channel = u(1) + (u(y[i] > 0.0) if two_classes else u(y[i]))
            b0 = node_codes[i, f0]
            b1 = node_codes[i, f1]
            first[b0, 0] += 1.0
            first[b0, channel] += wi
            second[b1, 0] += 1.0
            second[b1, channel] += wi


@inlined_node_kernel
def _fill_one(node_codes, f, start, stop, y, w, criterion, hist):
    """Add the rows ``[start:stop]`` to ``hist`` by their code of feature ``f``."""
    u = np.uint64  # unsigned positions (``build_histogram``)
    if is_regression(criterion):
        for i in range(u(start), u(stop)):
            b = node_codes[i, f]
            hist[b, 0] += 1.0
            hist[b, 1] += w[i]
            hist[b, 2] += w[i] * y[i]
    elif hist.shape[1] == 3:  # two classes: y holds the signed weights
        for i in range(u(start), u(stop)):
            b = node_codes[i, f]
            hist[b, 0] += 1.0
            hist[b, u(1) + u(y[i] > 0.0)] += abs(y[i])
    else:
        for i in range(u(start), u(stop)):
            b = node_codes[i, f]
            hist[b, 0] += 1.0
            hist[b, u(1) + u(y[i])] += w[i]


@node_kernel
def outputs_histogram(
    codes, f, sample_indices, ordered, start, stop, y, w, n_outputs, classification, hist, touched
):
    """``build_histogram`` of k = ``n_outputs`` target columns (``hist`` of 3 + k channels) or,
    with ``classification``, class columns (the blocks of ``criteria``; a row's targets are
    then its channels less one, ``grower.grow``): row i's targets are ``y[i * k : (i + 1) *
    k]``. Apart from the kernels of one target, whose growth a larger body slowed.
    ``ordered``: ``codes`` are in node order, ``sample_indices`` not read. A ``touched`` of no
    entries records nothing (returns -1), as large nodes' ``build_histograms``. The sums of
    each channel are added in row order, as the one-target kernels add them."""
    track = touched.shape[0] > 0 and stop - start <= TRACK_TOUCHED_BELOW
    n_touched = 0
    for i in range(start, stop):
        b = codes[i, f] if ordered else codes[sample_indices[i], f]
        if track and hist[b, 0] == 0.0 and b != MISSING_BIN:
            touched[n_touched] = b
            n_touched += 1
        hist[b, 0] += 1.0
        if classification:
            for o in range(n_outputs):
                hist[b, np.uint64(1) + np.uint64(y[i * n_outputs + o])] += w[i]
        else:
            hist[b, 1] += w[i]
            for o in range(n_outputs):
                hist[b, 2 + o] += w[i] * y[i * n_outputs + o]
    return n_touched if track else -1


@inlined_node_kernel
def _insertion_sort(a, n):
    for i in range(1, n):
        key = a[i]
        j = i - 1
        while j >= 0 and a[j] > key:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = key


@node_kernel
def compact(hist, touched, n_touched, n_bins_f, bins_out, stats_out, missing_out):
    """Move the filled rows of ``hist`` out in increasing bin order and zero ``hist`` again.

    Parameters
    ----------
    hist : ndarray of float64, shape (N_BIN_CODES, n_channels)
        As left by ``build_histogram``; all zero on return.
    touched, n_touched :
        As returned by ``build_histogram``; ``touched`` is reordered.
    n_bins_f : int
        Non-missing bins of the feature.
    bins_out : ndarray of int32, shape (N_BIN_CODES,)
        Written: the filled codes in increasing order (first ``n_touched`` entries).
    stats_out : ndarray of float64, shape (N_BIN_CODES, n_channels)
        Written: their statistics rows.
    missing_out : ndarray of float64, shape (n_channels,)
        Written: statistics of the missing code (zero when no row is missing).

    Returns
    -------
    int
        Number of filled non-missing bins.
    """
    u = np.uint64  # unsigned positions (``build_histogram``)
    if 0 <= n_touched < _SORT_TOUCHED_BELOW:
        _insertion_sort(touched, n_touched)
        for k in range(u(n_touched)):
            bins_out[k] = touched[k]
    else:
        # Every bin is written and the count moves on only past a filled one: whether a bin is
        # filled is a coin flip in mid-size nodes, and a branch on it was mispredicted as often.
        n_filled = u(0)
        for b in range(u(n_bins_f)):
            bins_out[n_filled] = b
            n_filled += u(hist[b, 0] > 0.0)
        n_touched = np.int64(n_filled)
    for k in range(u(n_touched)):
        b = u(bins_out[k])
        for c in range(hist.shape[1]):
            stats_out[k, c] = hist[b, c]
            hist[b, c] = 0.0
    for c in range(hist.shape[1]):
        missing_out[c] = hist[MISSING_BIN, c]
        hist[MISSING_BIN, c] = 0.0
    return n_touched


@node_kernel
def node_statistics(node_y, node_w, start, stop, criterion, stats_out, outputs=None):
    """Statistics vector of the node's rows (layout in ``criteria``).

    Parameters
    ----------
    node_y, node_w : ndarray of float64, shape (n_in_bag,)
        Targets and weights in ``sample_indices`` order; the node owns ``[start:stop]``.
    stats_out : ndarray of float64, shape (n_channels,)
        Written.
    outputs : int, optional
        Target or class columns, None for one (``criteria``).

    Returns
    -------
    float
        The node impurity; for regression computed in two passes (mean, then deviations), which
        stays exact where ``E[y^2] - E[y]^2`` (Poisson: ``E[y ln y] - mean ln mean``) would
        cancel. With k = ``outputs`` target columns (``stats_out`` has 3 + k channels; a row's
        targets are ``node_y[i * k : (i + 1) * k]``) the mean of the outputs' variances.
    """
    # Regression sums are kept in registers and written once: summed in place, each addition
    # waited for the store of the previous one. The same additions in the same order.
    u = np.uint64  # unsigned positions (``build_histogram``)
    n_rows = 0.0
    if outputs is not None:
        if is_regression(criterion):
            return outputs_statistics(node_y, node_w, start, stop, stats_out)
        # k class columns: each row adds its weight to one channel a block
        stats_out[:] = 0.0
        for i in range(u(start), u(stop)):
            stats_out[0] += 1.0
            for o in range(outputs):
                stats_out[u(1) + u(node_y[i * outputs + o])] += node_w[i]
        return impurity(stats_out, criterion, outputs)
    if is_regression(criterion):
        w_sum = 0.0
        wy_sum = 0.0
        wy2_sum = 0.0
        for i in range(u(start), u(stop)):
            n_rows += 1.0
            w_sum += node_w[i]
            wy_sum += node_w[i] * node_y[i]
            wy2_sum += node_w[i] * node_y[i] * node_y[i]
        stats_out[0] = n_rows
        stats_out[1] = w_sum
        stats_out[2] = wy_sum
        stats_out[3] = wy2_sum
        if w_sum <= 0.0:
            return 0.0
        mean = wy_sum / w_sum
        deviation = 0.0
        if criterion == POISSON:
            stats_out[3] = 0.0
            if wy_sum <= 0.0:  # every target zero (``criteria.poisson_deviance``)
                return 0.0
            first = node_y[start]
            varied = False
            for i in range(u(start), u(stop)):
                deviation += node_w[i] * poisson_term(node_y[i], mean)
                varied |= node_y[i] != first
            if not varied:  # the rounding of y / mean would leave some 1e-16 of y a row
                deviation = 0.0
            stats_out[3] = deviation + wy_sum * np.log(mean)  # sum w y ln y, the layout's
            return max(deviation / w_sum, 0.0)
        for i in range(u(start), u(stop)):
            deviation += node_w[i] * (node_y[i] - mean) ** 2
        return deviation / w_sum
    stats_out[:] = 0.0
    # (Two-class children are summed by the partition; here that case is only a tree's root.)
    two_classes = stats_out.shape[0] == 3  # node_y holds the signed weights
    for i in range(u(start), u(stop)):
        n_rows += 1.0
        if two_classes:
            stats_out[u(1) + u(node_y[i] > 0.0)] += abs(node_y[i])
        else:
            stats_out[u(1) + u(node_y[i])] += node_w[i]
    stats_out[0] = n_rows
    return impurity(stats_out, criterion, None)


@node_kernel
def outputs_statistics(node_y, node_w, start, stop, stats_out):
    """``node_statistics`` of squared error on k > 1 target columns (``stats_out`` of 3 + k
    channels): the sums ``[n, w, wy_1, ..., wy_k, sum_o wy_o^2]``, and the mean over the
    outputs of each one's variance, each in two passes. Apart from ``node_statistics``, whose
    growth a larger body slowed."""
    u = np.uint64  # unsigned positions (``build_histogram``)
    n_outputs = u(stats_out.shape[0] - 3)
    stats_out[:] = 0.0
    for i in range(u(start), u(stop)):
        stats_out[0] += 1.0
        stats_out[1] += node_w[i]
        for o in range(n_outputs):
            y = node_y[i * n_outputs + o]
            stats_out[u(2) + o] += node_w[i] * y
            stats_out[u(2) + n_outputs] += node_w[i] * y * y
    w_sum = stats_out[1]
    if w_sum <= 0.0:
        return 0.0
    variances = 0.0
    for o in range(n_outputs):
        mean = stats_out[u(2) + o] / w_sum
        deviation = 0.0
        for i in range(u(start), u(stop)):
            deviation += node_w[i] * (node_y[i * n_outputs + o] - mean) ** 2
        variances += deviation / w_sum
    return variances / np.float64(n_outputs)

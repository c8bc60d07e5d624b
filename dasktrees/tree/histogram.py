"""Per-node, per-feature histograms of the node statistics (numba kernels).

A histogram is a (N_BIN_CODES, n_channels) float64 array, one statistics row per bin code (see
``criteria`` for the channel layout). The same buffer is reused for every node and feature: the
kernels remember which bins they touched, and ``compact`` copies those rows out in bin order and
zeroes them again. A node with few rows therefore never pays for the 256 bins it does not use:

    hist (256 rows, mostly zero)          compact output (m rows, bin order)
    bin  7: [2, 0.0, 2.0]                 bins  = [3, 7, 12]
    bin  3: [1, 1.0, 0.0]      ----->     stats = [[1, 1, 0], [2, 0, 2], [4, 3, 1]]
    bin 12: [4, 3.0, 1.0]                 missing = stats of code MISSING_BIN
"""

import numpy as np
from numba import njit

from .._dtypes import MISSING_BIN
from ..criteria import SQUARED_ERROR, impurity

# Below this many touched bins, sorting them beats walking every bin of the feature.
_SORT_TOUCHED_BELOW = 32


@njit(cache=True)
def build_histogram(codes_f, sample_indices, start, stop, y, w, criterion, hist, touched):
    """Add the rows ``sample_indices[start:stop]`` to ``hist`` by their code of one feature.

    Parameters
    ----------
    codes_f : ndarray of uint8, shape (n_rows,)
        Codes of the feature for every row of the training set.
    sample_indices : ndarray of int64
        Rows of the tree; the node owns the slice ``[start:stop]``.
    y : ndarray of float64, shape (n_rows,)
        Class index (classification) or target (regression).
    w : ndarray of float64, shape (n_rows,)
        Row weights.
    criterion : int
        Selects the channel layout.
    hist : ndarray of float64, shape (N_BIN_CODES, n_channels)
        Zero on entry; rows of the codes met are filled.
    touched : ndarray of int32, shape (N_BIN_CODES,)
        Written: the non-missing codes met, in order of first appearance.

    Returns
    -------
    int
        Number of non-missing codes met (the filled prefix of ``touched``).
    """
    n_touched = 0
    if criterion == SQUARED_ERROR:
        for i in range(start, stop):
            row = sample_indices[i]
            b = codes_f[row]
            if hist[b, 0] == 0.0 and b != MISSING_BIN:
                touched[n_touched] = b
                n_touched += 1
            wy = w[row] * y[row]
            hist[b, 0] += 1.0
            hist[b, 1] += w[row]
            hist[b, 2] += wy
            hist[b, 3] += wy * y[row]
    else:
        for i in range(start, stop):
            row = sample_indices[i]
            b = codes_f[row]
            if hist[b, 0] == 0.0 and b != MISSING_BIN:
                touched[n_touched] = b
                n_touched += 1
            hist[b, 0] += 1.0
            hist[b, 1 + np.int64(y[row])] += w[row]
    return n_touched


@njit(cache=True)
def _insertion_sort(a, n):
    for i in range(1, n):
        key = a[i]
        j = i - 1
        while j >= 0 and a[j] > key:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = key


@njit(cache=True)
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
    """
    if n_touched < _SORT_TOUCHED_BELOW:
        _insertion_sort(touched, n_touched)
        for k in range(n_touched):
            bins_out[k] = touched[k]
    else:
        k = 0
        for b in range(n_bins_f):
            if hist[b, 0] > 0.0:
                bins_out[k] = b
                k += 1
    for k in range(n_touched):
        b = bins_out[k]
        for c in range(hist.shape[1]):
            stats_out[k, c] = hist[b, c]
            hist[b, c] = 0.0
    for c in range(hist.shape[1]):
        missing_out[c] = hist[MISSING_BIN, c]
        hist[MISSING_BIN, c] = 0.0


@njit(cache=True)
def node_statistics(sample_indices, start, stop, y, w, criterion, stats_out):
    """Statistics vector of the rows ``sample_indices[start:stop]`` (layout in ``criteria``).

    Returns
    -------
    float
        The node impurity; for squared error computed in two passes (mean, then squared
        deviations), which stays exact where ``E[y^2] - E[y]^2`` would cancel.
    """
    stats_out[:] = 0.0
    if criterion == SQUARED_ERROR:
        for i in range(start, stop):
            row = sample_indices[i]
            stats_out[0] += 1.0
            stats_out[1] += w[row]
            stats_out[2] += w[row] * y[row]
            stats_out[3] += w[row] * y[row] * y[row]
        if stats_out[1] <= 0.0:
            return 0.0
        mean = stats_out[2] / stats_out[1]
        deviation = 0.0
        for i in range(start, stop):
            row = sample_indices[i]
            deviation += w[row] * (y[row] - mean) ** 2
        return deviation / stats_out[1]
    for i in range(start, stop):
        row = sample_indices[i]
        stats_out[0] += 1.0
        stats_out[1 + np.int64(y[row])] += w[row]
    return impurity(stats_out, criterion)

"""Histograms of many nodes over one block of rows, to be summed across blocks (numba kernels).

A tree too large for one worker grows its top nodes from histograms summed over the row blocks
where they live (``distributed/levels.py``). Each block routes its rows down the splits chosen
in the previous round and adds every row of a node still to split to that node's histograms,
for all the trees of a batch in one pass over the block:

    block rows  ->  node of each row (per tree)  ->  hists[slot, feature, bin, channel]
                                                     totals[slot, channel]

The sums must not depend on how the rows were cut into blocks nor on the order in which the
blocks' histograms are added. Row counts and whole weights are exact in float64 whatever the
order. Other sums (fractional weights, targets) are held as ``N_FOLDS`` partial sums, each of
values rounded to a fixed power of two (pre-rounded, "binned" summation: Demmel and Nguyen
2013, ReproBLAS): a value x is split as x = x_1 + x_2 + x_3 + r, x_k a multiple of the quantum
q_k, and every partial sum of multiples of q_k below 2^53 q_k is exact, so each of the three
totals is the same in any order; the sum is read as (s_1 + s_2) + s_3. The residue r (below
q_3 / 2, about 2^-66 of the largest value) is dropped. Values that are whole multiples of q_1
(whole weights, integer targets) are summed exactly.
"""

import math

import numpy as np

from ..core.criteria import poisson_term
from ..core.dtypes import N_BIN_CODES
from ..core.kernel_cache import kernel
from .splitting import SplitRule, goes_left

N_FOLDS = 3
# Rows' node in a block's state: out of the tree's sample, or in a node no longer split by
# histograms (a leaf, or gathered to grow its subtree).
NO_NODE = -1


def fold_quanta(bound, n_terms, n_folds):
    """The quanta of ``n_folds`` partial sums of up to ``n_terms`` values of magnitude at most
    ``bound`` (powers of two, largest first), such that every partial sum is exact.

    ``n_folds`` 1 (whole weights and class counts): the quantum 0, which ``fold_add`` reads as
    adding the value as it is."""
    quanta = np.zeros(n_folds)
    if n_folds == 1 or bound <= 0.0:
        return quanta if n_folds == 1 else np.ones(n_folds)
    n_bits = max(1, math.ceil(math.log2(max(2, n_terms))) + 1)
    # n_terms values below 2^top: their sum is below 2^(top + n_bits) <= 2^53 q_1.
    top = math.frexp(bound)[1]
    exponent = top + n_bits - 53
    for k in range(n_folds):
        quanta[k] = math.ldexp(1.0, max(exponent, -1000))
        # the next part is below q_k / 2: its sums below 2^(exponent - 1 + n_bits)
        exponent = exponent - 1 + n_bits - 53
    return quanta


@kernel(inline="always")
def fold_add(out, at, x, quanta):
    """Add ``x`` to the partial sums ``out[at : at + len(quanta)]`` (``fold_quanta``): each the
    multiple of its quantum nearest to what the larger ones left of ``x``."""
    if quanta.shape[0] == 1 or quanta[0] == 0.0:
        out[at] += x
        return
    rest = x
    for k in range(quanta.shape[0]):
        q = quanta[k]
        part = np.rint(rest / q) * q
        out[at + k] += part
        rest -= part


@kernel(inline="always")
def unfold(values, at, n_folds):
    """The sum held as ``n_folds`` partial sums from ``values[at]``, largest first."""
    total = values[at]
    for k in range(1, n_folds):
        total += values[at + k]
    return total


@kernel(nogil=True)
def route_rows(codes, node_of_row, split_feature, split_bin, split_flags, bitsets, children):
    """Move each row of a node split in the last round to its child (``node_of_row``, updated).

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, n_features)
    node_of_row : ndarray of int32, shape (n_rows,)
        The tree's node of each row (``NO_NODE``: none).
    split_feature : ndarray of int64, shape (n_nodes,)
        The feature of each node split in the last round, -1 for the others.
    split_bin : ndarray of int64, shape (n_nodes,)
        Its numeric threshold (codes up to it go left) or its row of ``bitsets``.
    split_flags : ndarray of int64, shape (n_nodes,)
        Bit 0: missing values go left; bit 1: categorical.
    bitsets : ndarray of uint32, shape (n_bitsets, BITSET_WORDS)
    children : ndarray of int64, shape (n_nodes, 2)
        The left and right child of each split node.
    """
    for i in range(node_of_row.shape[0]):
        j = node_of_row[i]
        if j < 0 or split_feature[j] < 0:
            continue
        f = split_feature[j]
        flags = split_flags[j]
        categorical = (flags & 2) != 0
        rule = SplitRule(
            f,
            split_bin[j] if not categorical else 0,
            (flags & 1) != 0,
            categorical,
            bitsets[split_bin[j] if categorical else 0],
        )
        node_of_row[i] = children[j, 1 - np.int64(goes_left(codes[i, f], rule))]


@kernel(nogil=True)
def fill_histograms(
    codes,
    y,
    w,
    node_of_row,
    slot_of_node,
    features,
    means,
    n_classes,
    poisson,
    quanta,
    hists,
    totals,
):
    """Add the block's rows of the nodes being split this round to their histograms.

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, n_features)
    y : ndarray of float64, shape (n_rows,)
        Class index, or target (``n_classes`` 1).
    w : ndarray of float64, shape (n_rows,)
        The tree's row weights (base weight times count).
    node_of_row : ndarray of int32, shape (n_rows,)
    slot_of_node : ndarray of int64, shape (n_nodes,)
        Each node's slot in ``hists`` and ``totals`` this round, -1 if none.
    features : ndarray of int64, shape (n_slots, n_kept)
        The features of each slot's histograms (-1 past the last).
    means : ndarray of float64, shape (n_slots,)
        Regression: the node's mean target, about which ``totals`` sums the squared deviations
        (NaN: not known yet, not summed).
    poisson : bool
        Regression with the Poisson criterion: ``totals`` sums the rows' Poisson deviances
        about ``mean`` (``criteria.poisson_term``, as ``histogram.node_statistics`` sums them)
        instead of their squared deviations. (The quanta are sized for squared deviations; a
        deviance term can exceed them about a node's mean below ``y_max e^(-4 y_max)``, where
        its last bits may depend on how the rows are cut into blocks.)
    quanta : ndarray of float64, shape (n_folds,)
        ``fold_quanta`` of the weighted sums.
    hists : ndarray of float64, shape (n_slots, n_kept, N_BIN_CODES, 1 + n_values * n_folds)
        Channel 0 counts rows; then the weights of each class (classification) or the weight
        and the weighted target (regression), each as ``n_folds`` partial sums. Added to.
    totals : ndarray of float64, shape (n_slots, hists' channels (+ n_folds for regression))
        The same sums over the node's rows, and for regression the weighted squared deviations
        (or Poisson deviances) about ``means``. Added to.
    """
    n_folds = quanta.shape[0]
    n_channels = hists.shape[3]
    values = np.zeros(totals.shape[1])
    for i in range(node_of_row.shape[0]):
        j = node_of_row[i]
        if j < 0:
            continue
        s = slot_of_node[j]
        if s < 0:
            continue
        values[:] = 0.0
        values[0] = 1.0
        if n_classes == 1:
            fold_add(values, 1, w[i], quanta)
            fold_add(values, 1 + n_folds, w[i] * y[i], quanta)
            if not np.isnan(means[s]):
                if not poisson:
                    deviation = w[i] * (y[i] - means[s]) ** 2
                elif w[i] > 0.0 and means[s] > 0.0:  # no ln(y / 0) of an unused row
                    deviation = w[i] * poisson_term(y[i], means[s])
                else:
                    deviation = 0.0
                fold_add(values, 1 + 2 * n_folds, deviation, quanta)
            for c in range(totals.shape[1]):
                totals[s, c] += values[c]
            for r in range(features.shape[1]):
                f = features[s, r]
                if f < 0:
                    break
                b = codes[i, f]
                for c in range(n_channels):
                    hists[s, r, b, c] += values[c]
        else:
            # A class row adds to the count and its class's folds only: the other channels of
            # ``values`` stay 0.
            at = 1 + np.int64(y[i]) * n_folds
            fold_add(values, at, w[i], quanta)
            totals[s, 0] += 1.0
            for k in range(n_folds):
                totals[s, at + k] += values[at + k]
            for r in range(features.shape[1]):
                f = features[s, r]
                if f < 0:
                    break
                b = codes[i, f]
                hists[s, r, b, 0] += 1.0
                for k in range(n_folds):
                    hists[s, r, b, at + k] += values[at + k]


@kernel(nogil=True)
def unfold_histograms(hists, n_folds, out):
    """The grower's histograms (``histogram.build_histogram``'s channels) from summed folded
    ones: ``out[r, b, c]`` for c >= 1 is ``unfold`` of channel c's partial sums (a regression
    histogram's fourth channel left at zero).

    Parameters
    ----------
    hists : ndarray of float64, shape (n_kept, N_BIN_CODES, 1 + n_values * n_folds)
    out : ndarray of float64, shape (n_kept, N_BIN_CODES, n_channels)
        Written.
    """
    n_values = (hists.shape[2] - 1) // n_folds
    out[:] = 0.0
    for r in range(hists.shape[0]):
        for b in range(N_BIN_CODES):
            out[r, b, 0] = hists[r, b, 0]
            for c in range(n_values):
                out[r, b, 1 + c] = unfold(hists[r, b], 1 + c * n_folds, n_folds)

"""Votes with a packed forest: prediction's votes and each tree's value, the out-of-bag votes and
moments of a training block, one tree's loss on a block (permutation importance) and its
debiased impurity decreases on the out-of-bag rows (``add_oob_impurity``).

Prediction runs chunks of rows in threads (``by_row_chunks``); each chunk bins a block of rows
and sends the whole block through the trees one after the other (``routing.route_block``), so a
row's votes are summed in tree order: the same sums in any thread or process, bit for bit those
of each tree's own ``Tree.predict`` added up in order.

The training blocks' kernels take one tree at a time (``PackedForest.roots[t]``) and the rows
it left out, each row walking alone (``routing.leaf_of_row``).
"""

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from ..core.dtypes import TREE_LEAF, X_BINNED_DTYPE
from ..core.kernel_cache import kernel
from ..learner.tree import goes_left_binned
from .exact import ADDS_BEFORE_CARRY, add_exact, carry
from .routing import HARD, ROWS_PER_BLOCK, bin_rows, leaf_of_row, leaf_value, route_block


@kernel(nogil=True)
def vote_rows(
    X,
    start,
    stop,
    thresholds,
    is_categorical,
    nodes,
    bitsets,
    roots,
    max_depth,
    values,
    counts,
    how,
    out,
):
    """Every tree's vote for rows ``start:stop`` of encoded X, or each tree's value.

    Parameters
    ----------
    X : ndarray of float32 or float64, shape (n_samples, n_features)
        Encoded rows (``BinMapper.encode``).
    start, stop : int
        The rows to vote for.
    thresholds, is_categorical, nodes, bitsets, roots, max_depth, values, counts :
        The packed forest (``PackedForest``; ``counts`` is its ``leaf_counts``).
    how : int
        SOFT (sum leaf values), HARD (one vote per tree for its argmax), or TREE_VALUE.
    out : ndarray of float64, shape (n_samples, n_values), or (n_samples, n_trees)
        SOFT and HARD: rows ``start:stop`` get the trees' votes added, in tree order, to what
        they hold (zeros, or the sums of the trees of a forest's earlier parts). TREE_VALUE:
        ``out[i, t]`` is tree t's value (first column) for row i.
    """
    n = min(ROWS_PER_BLOCK, stop - start)
    # Feature by feature (Fortran order): a node's partition reads one feature of many rows.
    codes = np.empty((X.shape[1], n), dtype=X_BINNED_DTYPE).T
    rows = np.empty((2, n), dtype=np.int64)
    stack = np.empty((max_depth + 2, 4), dtype=np.int64)
    for block in range(start, stop, ROWS_PER_BLOCK):
        n = min(ROWS_PER_BLOCK, stop - block)
        bin_rows(X, block, block + n, thresholds, is_categorical, codes)
        for t in range(roots.shape[0]):
            route_block(
                codes, n, nodes, bitsets, roots[t], rows, stack, values, counts, how, out[block:], t
            )


@kernel(inline="always")
def _add_vote(values, counts, leaf, voting, value, out_row):
    """Add a tree's vote from ``leaf`` to ``out_row``: its value (SOFT), or one for its class
    of largest value (HARD). ``value`` is scratch for ``leaf_value``."""
    if counts:
        row = leaf_value(values, counts, leaf, value)
        if voting == HARD:
            out_row[np.argmax(row)] += 1.0
        else:
            for c in range(row.shape[0]):
                out_row[c] += row[c]
    # The values read in place: a copy per visit (through ``value``) slowed voting.
    elif voting == HARD:
        out_row[np.argmax(values[leaf])] += 1.0
    else:
        for c in range(values.shape[1]):
            out_row[c] += values[leaf, c]


# Rows per thread's chunk, at most: a chunk is cut in blocks anyway (``ROWS_PER_BLOCK``).
_ROWS_PER_CHUNK = 65536
# Fewer rows than this run in the calling thread: starting threads costs more than they save.
_MIN_PARALLEL_ROWS = 64


def by_row_chunks(kernel, X, parallel, *args):
    """Run ``kernel(X, start, stop, *args)`` over chunks of rows, in threads if ``parallel``.

    Parameters
    ----------
    kernel : callable
        A ``nogil`` kernel over rows ``start:stop`` of X (``vote_rows``, ``treeshap.shap_rows``).
    X : ndarray, shape (n_samples, n_features)
    parallel : bool
        Chunks in threads; False inside Dask tasks, which Dask already runs in parallel.
    *args :
        The kernel's further arguments.

    Notes
    -----
    The kernels release the GIL. Threads, not a numba ``prange``: numba's parallel lowering of
    the traversal ran slower per thread than the same serial code, and a plain
    ``nogil`` kernel may be called from several threads (Dask's) at once.
    """
    n_rows = X.shape[0]
    n_threads = numba.get_num_threads() if parallel and n_rows >= _MIN_PARALLEL_ROWS else 1
    # As many chunks for each thread, of nearly equal sizes.
    n_chunks = n_threads * -(-n_rows // (n_threads * _ROWS_PER_CHUNK))
    step = max(1, -(-n_rows // n_chunks))
    starts = range(0, n_rows, step)
    if n_threads == 1 or len(starts) == 1:
        for start in starts:
            kernel(X, start, min(start + step, n_rows), *args)
        return
    with ThreadPoolExecutor(n_threads) as pool:
        # list(): wait for every chunk and raise the first error
        list(pool.map(lambda start: kernel(X, start, min(start + step, n_rows), *args), starts))


@kernel(nogil=True)
def add_oob_votes(codes, nodes, bitsets, root, values, leaf_counts, voting, counts, votes, n_oob):
    """Add one tree's votes to the rows of a block it did not sample (``counts == 0``).

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, n_features)
    root : int
        The tree's root in the packed node table (``PackedForest.roots``).
    values, leaf_counts :
        ``PackedForest.leaf_values``.
    counts : ndarray of float64, shape (n_rows,)
        The tree's row counts (``sampling.tree_counts``).
    votes : ndarray of float64, shape (n_rows, n_values)
        Summed votes of the out-of-bag trees so far; updated.
    n_oob : ndarray of float64, shape (n_rows,)
        Number of out-of-bag trees so far; updated.
    """
    value = np.empty(values.shape[1])
    for i in range(codes.shape[0]):
        if counts[i] == 0.0:
            leaf = leaf_of_row(codes, i, nodes, bitsets, root, -1, 0)
            _add_vote(values, leaf_counts, leaf, voting, value, votes[i])
            n_oob[i] += 1.0


@kernel(nogil=True)
def add_oob_moments(codes, nodes, bitsets, root, values, leaf_counts, counts, sums, squares, n_oob):
    """Add one tree's leaf values and their squares to the rows of a block it did not sample:
    the running moments from which ``distributed.convergence`` estimates the Monte-Carlo
    variance of the out-of-bag votes.

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, n_features)
    root : int
        The tree's root in the packed node table (``PackedForest.roots``).
    values, leaf_counts :
        ``PackedForest.leaf_values``.
    counts : ndarray of float64, shape (n_rows,)
        The tree's row counts (``sampling.tree_counts``).
    sums, squares : ndarray of float64, shape (n_rows, n_values)
        Summed leaf values and squared leaf values of the out-of-bag trees so far; updated.
    n_oob : ndarray of float64, shape (n_rows,)
        Number of out-of-bag trees so far; updated.
    """
    value = np.empty(values.shape[1])
    for i in range(codes.shape[0]):
        if counts[i] == 0.0:
            leaf = leaf_of_row(codes, i, nodes, bitsets, root, -1, 0)
            row = leaf_value(values, leaf_counts, leaf, value)
            for c in range(row.shape[0]):
                sums[i, c] += row[c]
                squares[i, c] += row[c] * row[c]
            n_oob[i] += 1.0


@kernel(nogil=True)
def misclassified(votes, n_oob, y):
    """Rows with at least one out-of-bag vote whose voted class is not y: (count, scored)."""
    errors = 0.0
    scored = 0.0
    for i in range(votes.shape[0]):
        if n_oob[i] > 0.0:
            scored += 1.0
            if np.argmax(votes[i]) != np.int64(y[i]):
                errors += 1.0
    return errors, scored


@kernel(nogil=True)
def misclassified_columns(votes, n_oob, y):
    """``misclassified`` of k class columns (``y`` (n_rows, k) class indices, ``votes`` k
    blocks of K classes): a row is misclassified when any column's voted class is not its own
    (scikit-learn's subset accuracy)."""
    n_outputs = y.shape[1]
    size = votes.shape[1] // n_outputs
    errors = 0.0
    scored = 0.0
    for i in range(votes.shape[0]):
        if n_oob[i] > 0.0:
            scored += 1.0
            for o in range(n_outputs):
                if np.argmax(votes[i, o * size : (o + 1) * size]) != np.int64(y[i, o]):
                    errors += 1.0
                    break
    return errors, scored


def one_hot_votes(values):
    """Each row's vote for its class of largest value, one-hot (the first of equal ones), as
    HARD voting counts a tree's vote from its leaf: ndarray of float64, the shape of
    ``values`` (n_nodes, n_classes)."""
    votes = np.zeros_like(values, dtype=np.float64)
    votes[np.arange(len(values)), np.argmax(values, axis=1)] = 1.0
    return votes


@kernel(nogil=True)
def tree_loss(
    codes, y, rows, nodes, bitsets, root, values, leaf_counts, classification, feature, donors
):
    """One tree's summed loss over ``rows`` of a block of binned codes (``values``,
    ``leaf_counts``: ``PackedForest.leaf_values``).

    With ``feature >= 0``, row ``rows[k]`` reads that feature's code from row ``donors[k]``
    instead of its own: a permutation of the feature among ``rows`` (Breiman 2001).
    The loss is 0/1 misclassification of the tree's majority class, or the squared error.
    """
    total = 0.0
    value = np.empty(values.shape[1])
    for k in range(rows.shape[0]):
        i = rows[k]
        code = np.int64(codes[donors[k], feature]) if feature >= 0 else 0
        leaf = leaf_of_row(codes, i, nodes, bitsets, root, feature, code)
        row = leaf_value(values, leaf_counts, leaf, value)
        if classification:
            total += 0.0 if np.argmax(row) == np.int64(y[i]) else 1.0
        else:
            total += (row[0] - y[i]) ** 2
    return total


@kernel(nogil=True)
def add_oob_impurity(codes, y, w, counts, nodes, bitsets, root, values, classification, acc):
    """Add one tree's debiased impurity decreases on the out-of-bag rows of a block of binned
    codes (MDI-oob, Li et al. 2019) to exact sums.

    Each row with ``counts[i] == 0`` and ``w[i] > 0`` walks from the root to its leaf; every
    split node t it passes, on feature k, adds

        w[i] * <values[child] - values[t], y_i - values[root]>

    to feature k's sum, where child is the node the row goes to and y_i is the row's target,
    or the one-hot vector of its class index for a classifier. The row's weight is added to the
    last sum.

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, n_features)
    y : ndarray of float64, shape (n_rows,)
        Targets, or class indices (``classification``).
    w : ndarray of float64, shape (n_rows,)
        Row weights (sample_weight x class_weight).
    counts : ndarray of float64, shape (n_rows,)
        The tree's row counts (``sampling.tree_counts``): rows with 0 are out of bag.
    nodes : ndarray of ROUTING_NODE_DTYPE
        A ``NodeTable``'s nodes; children are global ids, ``TREE_LEAF`` for a leaf.
    bitsets : ndarray of uint32, shape (n_bitsets, BITSET_WORDS)
    root : int
        The tree's root in ``nodes`` (``NodeTable.starts[t]``).
    values : ndarray of float64, shape (n_nodes, n_values)
        Every node's in-bag value: class fractions, or the mean target.
    classification : bool
    acc : ndarray of int64, shape (n_features + 1, exact.EXACT_DIGITS)
        Exact sums (``exact.add_exact``) of each feature's decreases and of the rows' weights;
        updated.
    """
    n_values = values.shape[1]
    weight_row = acc.shape[0] - 1
    adds = 0
    for i in range(codes.shape[0]):
        if counts[i] != 0.0 or w[i] <= 0.0:
            continue
        if adds >= ADDS_BEFORE_CARRY:
            carry(acc)
            adds = 0
        add_exact(acc[weight_row], w[i])
        adds += 1
        label = np.int64(y[i]) if classification else -1
        k = root
        node = nodes[k]
        while node["left"] != TREE_LEAF:
            f = node["feature"]
            goes_left = goes_left_binned(np.int64(codes[i, f]), node, bitsets)
            child = node["left"] if goes_left else node["right"]
            decrease = 0.0
            for c in range(n_values):
                target = (1.0 if c == label else 0.0) if classification else y[i]
                decrease += (values[child, c] - values[k, c]) * (target - values[root, c])
            add_exact(acc[f], w[i] * decrease)
            adds += 1
            k = child
            node = nodes[k]

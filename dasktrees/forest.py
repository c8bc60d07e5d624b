"""Forest: fitted trees packed in flat arrays, and the kernels that vote with them.

All trees' routing records are concatenated into one table; ``roots[t]`` is tree t's root:

    nodes   [ tree 0: root, ... | tree 1: root, ... | ... ]      children ids are global
    values  [ one row of class fractions (or a mean) per node ]

Prediction runs chunks of rows in threads, each chunk through the trees one after the other, so a
row's votes are summed in tree order: the same sums in any thread or process.
"""

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from numba import njit

from ._dtypes import ROUTING_NODE_DTYPE
from .tree.tree import leaf_binned, leaf_encoded

SOFT = 0  # sum class fractions (or means); divide by the number of trees
HARD = 1  # one vote per tree for its majority class


class Forest:
    """Trees packed for prediction.

    Parameters
    ----------
    trees : list of tree.Tree
        Fitted trees over the same features and classes.
    """

    def __init__(self, trees):
        if not trees:
            raise ValueError("a forest needs at least one tree")
        # Only the packed arrays are kept: the forest travels to the tasks that vote with it.
        trees = list(trees)
        sizes = np.array([t.node_count for t in trees])
        bitset_sizes = np.array([len(t.categorical_bitsets) for t in trees])
        self.roots = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        bitset_starts = np.concatenate([[0], np.cumsum(bitset_sizes)[:-1]])
        self.nodes = np.empty(sizes.sum(), dtype=ROUTING_NODE_DTYPE)
        # In threads (the kernel releases the GIL): most of the time is spent faulting in the new
        # table's pages, which several cores do faster than one (measured in docs/benchmarks.md).
        with ThreadPoolExecutor(numba.get_num_threads()) as pool:
            list(
                pool.map(
                    _write_tree_routing, trees, self.roots, bitset_starts, [self.nodes] * len(trees)
                )
            )
        self.values = np.concatenate([t.value for t in trees])
        self.bitsets = np.concatenate([t.categorical_bitsets for t in trees])

    @property
    def n_trees(self):
        return len(self.roots)

    def vote(self, X, voting=SOFT, parallel=True):
        """Mean over trees of each row's leaf value (SOFT), or the share of trees voting for
        each class (HARD). ``X``: encoded rows (n_samples, n_features), float32 or float64.

        ``parallel=False`` inside Dask tasks, which Dask already runs in parallel.
        """
        out = np.zeros((X.shape[0], self.values.shape[1]))
        forest = (self.nodes, self.bitsets, self.roots, self.values)
        _by_row_chunks(_vote_rows, X, parallel, *forest, voting, out)
        return out / self.n_trees

    def tree_predictions(self, X, parallel=True):
        """Each tree's value for each row, (n_samples, n_trees): regression's "bragging"."""
        out = np.empty((X.shape[0], self.n_trees))
        forest = (self.nodes, self.bitsets, self.roots, self.values)
        _by_row_chunks(_leaf_values_rows, X, parallel, *forest, out)
        return out


def _write_tree_routing(tree, root, bitset_start, nodes):
    """Write ``tree``'s routing records into the packed table ``nodes`` (``Forest``)."""
    tree.write_routing(nodes, root, bitset_start)


@njit(cache=True, inline="always")
def _add_vote(values, leaf, voting, out_row):
    if voting == HARD:
        out_row[np.argmax(values[leaf])] += 1.0
    else:
        for c in range(values.shape[1]):
            out_row[c] += values[leaf, c]


@njit(cache=True, nogil=True)
def _vote_rows(X, start, stop, nodes, bitsets, roots, values, voting, out):
    """Add every tree's vote for rows ``start:stop`` of encoded X to ``out``.

    Parameters
    ----------
    X : ndarray of float32 or float64, shape (n_samples, n_features)
    start, stop : int
        The rows to vote for.
    nodes, bitsets, roots, values :
        The packed forest (``Forest``).
    voting : int
        SOFT (sum leaf values) or HARD (one vote per tree for its argmax).
    out : ndarray of float64, shape (n_samples, n_values)
        Rows ``start:stop`` zero on entry; written: the sums, trees added in order.
    """
    for t in range(roots.shape[0]):
        for i in range(start, stop):
            _add_vote(values, leaf_encoded(X, i, nodes, bitsets, roots[t]), voting, out[i])


@njit(cache=True, nogil=True)
def _leaf_values_rows(X, start, stop, nodes, bitsets, roots, values, out):
    """``out[i, t]``: tree t's value (first column) for rows ``start:stop`` of encoded X."""
    for t in range(roots.shape[0]):
        for i in range(start, stop):
            out[i, t] = values[leaf_encoded(X, i, nodes, bitsets, roots[t]), 0]


# Rows go through the forest in chunks, one tree after the other: a chunk's rows stay in cache
# while a tree's nodes stream past once, so large chunks vote much faster than small ones
# (measured in docs/benchmarks.md).
_ROWS_PER_CHUNK = 65536


def _by_row_chunks(kernel, X, parallel, *args):
    """Run ``kernel(X, start, stop, *args)`` over chunks of rows, in threads if ``parallel``.

    The kernels release the GIL. Threads, not a numba ``prange``: numba's parallel lowering of
    the traversal ran slower per thread than the same serial code (docs/benchmarks.md), and a
    plain ``nogil`` kernel may be called from several threads (Dask's) at once.
    """
    n_rows = X.shape[0]
    n_threads = numba.get_num_threads() if parallel else 1
    step = max(1, min(_ROWS_PER_CHUNK, -(-n_rows // n_threads)))
    starts = range(0, n_rows, step)
    if n_threads == 1 or len(starts) == 1:
        for start in starts:
            kernel(X, start, min(start + step, n_rows), *args)
        return
    with ThreadPoolExecutor(n_threads) as pool:
        # list(): wait for every chunk and raise the first error
        list(pool.map(lambda start: kernel(X, start, min(start + step, n_rows), *args), starts))


@njit(cache=True, nogil=True)
def add_oob_votes(codes, nodes, bitsets, root, values, voting, counts, votes, n_oob):
    """Add one tree's votes to the rows of a block it did not sample (``counts == 0``).

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, n_features)
    root : int
        The tree's root in the packed node table.
    counts : ndarray of float64, shape (n_rows,)
        The tree's row counts (``sampling.tree_counts``).
    votes : ndarray of float64, shape (n_rows, n_values)
        Summed votes of the out-of-bag trees so far; updated.
    n_oob : ndarray of float64, shape (n_rows,)
        Number of out-of-bag trees so far; updated.
    """
    for i in range(codes.shape[0]):
        if counts[i] == 0.0:
            _add_vote(values, leaf_binned(codes, i, nodes, bitsets, root, -1, 0), voting, votes[i])
            n_oob[i] += 1.0


@njit(cache=True, nogil=True)
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


def exact_sum(values):
    """The exact sum of float64 values, as an integer count of 2**-1074 (the smallest double).

    Every double is an integer multiple of 2**-1074, so these sums add up exactly in any order:
    partitions can sum their own rows and the totals do not depend on how rows were split.
    ``exact_sum(v) / 2**1074`` is the correctly rounded float.
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    mantissas, exponents = np.frexp(values)  # values = m * 2**e, 0.5 <= |m| < 1
    integers = (mantissas * 2.0**53).astype(np.int64)  # exact: 53 significant bits
    shifts = exponents.astype(np.int64) - 53 + 1074
    total = 0
    for shift in np.unique(shifts[integers != 0]):
        group = integers[shifts == shift]
        # Blocks of 512 keep the int64 partial sums below 2**62.
        partials = np.add.reduceat(group, np.arange(0, len(group), 512))
        total += sum(int(p) for p in partials) << int(shift)
    return total


def from_exact(total):
    """The float nearest to an ``exact_sum`` total."""
    return total / 2**1074


@njit(cache=True, nogil=True)
def tree_loss(codes, y, rows, nodes, bitsets, root, values, classification, feature, donors):
    """One tree's summed loss over ``rows`` of a block of binned codes.

    With ``feature >= 0``, row ``rows[k]`` reads that feature's code from row ``donors[k]``
    instead of its own: a permutation of the feature among ``rows`` (Breiman 2001).
    The loss is 0/1 misclassification of the tree's majority class, or the squared error.
    """
    total = 0.0
    for k in range(rows.shape[0]):
        i = rows[k]
        code = np.int64(codes[donors[k], feature]) if feature >= 0 else 0
        leaf = leaf_binned(codes, i, nodes, bitsets, root, feature, code)
        if classification:
            total += 0.0 if np.argmax(values[leaf]) == np.int64(y[i]) else 1.0
        else:
            total += (values[leaf, 0] - y[i]) ** 2
    return total

"""Forest: fitted trees packed in flat arrays, and the kernels that vote with them.

All trees' routing records are concatenated into one table; ``roots[t]`` is tree t's root:

    nodes   [ tree 0: root, ... | tree 1: root, ... | ... ]      children ids are global
    values  [ one row of class fractions (or a mean) per node ]

Prediction runs blocks of rows in parallel, each block through the trees one after the other, so a
row's votes are summed in tree order: the same sums in any thread or process.
"""

import numpy as np
from numba import njit, prange

from ._dtypes import TREE_LEAF
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
        self.trees = list(trees)
        sizes = np.array([t.node_count for t in self.trees])
        bitset_sizes = np.array([len(t.categorical_bitsets) for t in self.trees])
        self.roots = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        bitset_starts = np.concatenate([[0], np.cumsum(bitset_sizes)[:-1]])
        parts = []
        for tree, root, bitset_start in zip(self.trees, self.roots, bitset_starts):
            nodes = tree.routing_records()  # not cached on the tree: packed here once
            split = nodes["left"] != TREE_LEAF
            nodes["left"][split] += root
            nodes["right"][split] += root
            nodes["bitset_idx"][nodes["bitset_idx"] >= 0] += bitset_start
            parts.append(nodes)
        self.nodes = np.concatenate(parts)
        self.values = np.concatenate([t.value for t in self.trees])
        self.bitsets = np.concatenate([t.categorical_bitsets for t in self.trees])

    @property
    def n_trees(self):
        return len(self.trees)

    def vote(self, X, voting=SOFT, parallel=True):
        """Mean over trees of each row's leaf value (SOFT), or the share of trees voting for
        each class (HARD). ``X``: encoded rows (n_samples, n_features), float32 or float64.

        ``parallel=False`` inside Dask tasks: Dask already runs blocks in parallel, and numba's
        fallback threading layer (workqueue) must not be entered from several threads at once.
        """
        out = np.zeros((X.shape[0], self.values.shape[1]))
        kernel = _forest_vote if parallel else _forest_vote_serial
        kernel(X, self.nodes, self.bitsets, self.roots, self.values, voting, out)
        return out / self.n_trees

    def tree_predictions(self, X, parallel=True):
        """Each tree's value for each row, (n_samples, n_trees): regression's "bragging"."""
        out = np.empty((X.shape[0], self.n_trees))
        kernel = _forest_leaf_values if parallel else _forest_leaf_values_serial
        kernel(X, self.nodes, self.bitsets, self.roots, self.values, out)
        return out


@njit(cache=True, inline="always")
def _add_vote(values, leaf, voting, out_row):
    if voting == HARD:
        out_row[np.argmax(values[leaf])] += 1.0
    else:
        for c in range(values.shape[1]):
            out_row[c] += values[leaf, c]


# Rows are voted in blocks: a block goes through one tree after the other, so a tree's upper
# levels stay in cache for the whole block, and each row still sums its trees in tree order.
_ROWS_PER_BLOCK = 256


@njit(cache=True, inline="always")
def _n_blocks(n_rows):
    return (n_rows + _ROWS_PER_BLOCK - 1) // _ROWS_PER_BLOCK


@njit(cache=True, inline="always")
def _block_rows(block, n_rows):
    start = block * _ROWS_PER_BLOCK
    return start, min(start + _ROWS_PER_BLOCK, n_rows)


@njit(cache=True, parallel=True, nogil=True)
def _forest_vote(X, nodes, bitsets, roots, values, voting, out):
    """Sum every tree's vote for every row of encoded X.

    Parameters
    ----------
    X : ndarray of float32 or float64, shape (n_samples, n_features)
    nodes, bitsets, roots, values :
        The packed forest (``Forest``).
    voting : int
        SOFT (sum leaf values) or HARD (one vote per tree for its argmax).
    out : ndarray of float64, shape (n_samples, n_values)
        Zero on entry; written: the sums.
    """
    for block in prange(_n_blocks(X.shape[0])):
        start, stop = _block_rows(block, X.shape[0])
        for t in range(roots.shape[0]):
            for i in range(start, stop):
                _add_vote(values, leaf_encoded(X, i, nodes, bitsets, roots[t]), voting, out[i])


@njit(cache=True, parallel=True, nogil=True)
def _forest_leaf_values(X, nodes, bitsets, roots, values, out):
    """``out[i, t]``: tree t's value (first column) for row i of encoded X."""
    for block in prange(_n_blocks(X.shape[0])):
        start, stop = _block_rows(block, X.shape[0])
        for t in range(roots.shape[0]):
            for i in range(start, stop):
                out[i, t] = values[leaf_encoded(X, i, nodes, bitsets, roots[t]), 0]


# The same kernels without threads, for code that runs inside Dask tasks.
_forest_vote_serial = njit(cache=True, nogil=True)(_forest_vote.py_func)
_forest_leaf_values_serial = njit(cache=True, nogil=True)(_forest_leaf_values.py_func)


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

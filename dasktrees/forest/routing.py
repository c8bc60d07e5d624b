"""Rows down the packed trees: bin codes, one row's walk to its leaf, and blocks of rows routed
through a tree together.

A packed node (``PackedForest``) routes on the rows' bin codes (``BinMapper``): a numeric split at
bin b sends a row left when its code is at most b, which is exactly ``x <= threshold`` since the
raw threshold is bin b's upper edge. So a node needs no float threshold, and the kernels bin each
block of rows as they go (``bin_rows``).

A row reaching a leaf adds the tree's vote to its row of the output (``SOFT``, ``HARD``) or
writes the leaf's value to the tree's column (``TREE_VALUE``): the ``how`` of ``route_block``.
"""

import numpy as np

from ..core.bitsets import bitset_has
from ..core.dtypes import (
    MISSING_BIN,
    PACKED_CATEGORICAL,
    PACKED_FEATURE_MASK,
    PACKED_MISSING_LEFT,
    X_BINNED_DTYPE,
)
from ..core.kernel_cache import kernel
from ..learner.binning import bin_code
from ..learner.tree import node_class_fractions

SOFT = 0  # sum class fractions (or means); divide by the number of trees
HARD = 1  # one vote per tree for its majority class
TREE_VALUE = 2  # each tree's value, one column per tree


@kernel(inline="always")
def leaf_of_row(codes, i, nodes, bitsets, k, override_feature, override_code):
    """Leaf reached by row i of binned ``codes`` from packed node ``k``.

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, n_features)
    i : int
        The row.
    nodes, bitsets :
        The packed forest's (``PackedForest``).
    k : int
        Where the walk starts: a ``PackedForest.roots`` entry.
    override_feature, override_code : int
        Feature ``override_feature`` (if >= 0) reads ``override_code`` instead of the row's own
        code (permutation importance); -1 and 0 for none.

    Returns
    -------
    int
        The leaf's row of the forest's ``values``.
    """
    while k >= 0:
        node = nodes[k]
        word = node["feature"]
        f = np.int64(word & PACKED_FEATURE_MASK)
        code = override_code if f == override_feature else np.int64(codes[i, f])
        k = node["left"] if _goes_left(word, node["split"], code, bitsets) else node["right"]
    return ~k


@kernel(inline="always")
def _goes_left(word, split, code, bitsets):
    """Whether a row whose bin code is ``code`` goes to the left child of a packed node, given
    the node's ``feature`` word (feature and flags) and ``split`` (bin threshold, or bitset row
    of a categorical split)."""
    if code == MISSING_BIN:
        return (word & PACKED_MISSING_LEFT) != 0
    if word & PACKED_CATEGORICAL:
        return bitset_has(bitsets[split], code) == 1
    return code <= split


@kernel(inline="always")
def bin_rows(X, start, stop, thresholds, is_categorical, codes):
    """Bin codes of rows ``start:stop`` of encoded X into ``codes[:stop - start]``: numeric
    values as ``BinMapper.transform`` bins them, category codes as they are, NaN as
    MISSING_BIN.

    Parameters
    ----------
    X : ndarray of float32 or float64, shape (n_samples, n_features)
        Encoded rows (``BinMapper.encode``).
    start, stop : int
    thresholds, is_categorical :
        The packed forest's (``PackedForest``): each numeric feature's padded edges, and which
        features are categorical.
    codes : ndarray of uint8, shape (>= stop - start, n_features)
        Written.
    """
    for i in range(start, stop):
        for f in range(X.shape[1]):
            x = X[i, f]
            if is_categorical[f]:
                codes[i - start, f] = MISSING_BIN if np.isnan(x) else np.uint8(x)
            else:
                codes[i - start, f] = bin_code(x, thresholds[f])


# Rows a chunk bins and routes at a time. Every tree is walked once per block: the more rows go
# down it together, the deeper they share its nodes, fetched once for all of them (smaller
# blocks were slower on deep forests, docs/benchmarks.md).
ROWS_PER_BLOCK = 65536
# Rows that no longer split a node together: each walks on alone (``route_block``).
_ROWS_WALKED_ALONE = 8


@kernel(nogil=True)
def route_block(codes, n_rows, nodes, bitsets, root, rows, stack, values, counts, how, out, t):
    """Route the first ``n_rows`` rows of ``codes`` through the tree at ``root``, and write
    each row's leaf value to its row of ``out``.

    The rows go down the tree together, depth first: at a node, its rows are partitioned into
    those going left and right, and the left child's rows are routed before the right child's.
    Nodes are laid out depth first too, so the tree is read once, in increasing order, whatever
    the number of rows; routing each row alone from the root read a deep tree's nodes in random
    order, one cache miss at nearly every level. Below ``_ROWS_WALKED_ALONE`` rows the
    partition costs more than it saves, and each row walks on alone.

    Parameters
    ----------
    codes : ndarray of uint8, shape (>= n_rows, n_features)
        Fortran order, so that the rows' codes of a node's feature are contiguous.
    nodes, bitsets, values, counts :
        The packed forest (``PackedForest``; ``counts`` is its ``leaf_counts``).
    root : int
        A ``PackedForest.roots`` entry.
    rows : ndarray of int64, shape (2, >= n_rows)
        Scratch: two buffers of row numbers, each partition reading one and writing the other.
    stack : ndarray of int64, shape (>= tree depth + 2, 4)
        Scratch: (node, first, stop, buffer) of the row ranges still to route.
    how : int
        SOFT or HARD: add the tree's vote to ``out[i]``; TREE_VALUE: write the leaf's value
        (first column) to ``out[i, t]``.
    out : ndarray of float64, shape (>= n_rows, n_values or n_trees)
        Updated, row i for row i of ``codes``.
    t : int
        The tree's column of ``out`` (TREE_VALUE).
    """
    value = np.empty(values.shape[1])  # a leaf's value, from its counts
    for j in range(n_rows):
        rows[0, j] = j
    stack[0, 0] = root
    stack[0, 1] = 0
    stack[0, 2] = n_rows
    stack[0, 3] = 0
    depth = 1
    while depth > 0:
        depth -= 1
        k, first, stop, side = stack[depth, 0], stack[depth, 1], stack[depth, 2], stack[depth, 3]
        src = rows[side]
        if k < 0 or stop - first <= _ROWS_WALKED_ALONE:
            # One loop per kind of output and of leaf values: the choice is made once per
            # range, not per row (a choice per row slowed voting), but for leaf counts,
            # which only calls of few rows divide at each visit (``PackedForest.vote``).
            if counts:
                for j in range(first, stop):
                    leaf = leaf_of_row(codes, src[j], nodes, bitsets, k, -1, 0)
                    row = leaf_value(values, counts, leaf, value)
                    if how == SOFT:
                        for c in range(row.shape[0]):
                            out[src[j], c] += row[c]
                    elif how == HARD:
                        out[src[j], np.argmax(row)] += 1.0
                    else:
                        out[src[j], t] = row[0]
            elif how == SOFT:
                for j in range(first, stop):
                    leaf = leaf_of_row(codes, src[j], nodes, bitsets, k, -1, 0)
                    for c in range(values.shape[1]):
                        out[src[j], c] += values[leaf, c]
            elif how == HARD:
                for j in range(first, stop):
                    leaf = leaf_of_row(codes, src[j], nodes, bitsets, k, -1, 0)
                    out[src[j], np.argmax(values[leaf])] += 1.0
            else:
                for j in range(first, stop):
                    out[src[j], t] = values[leaf_of_row(codes, src[j], nodes, bitsets, k, -1, 0), 0]
            continue
        # Partition without branches into the other row buffer: left rows up from ``first``,
        # right rows down from ``stop`` (each row is written to both ends; the wrong write is
        # overwritten by a later row or holds the same row).
        dst = rows[1 - side]
        node = nodes[k]
        word = node["feature"]
        split = node["split"]
        column = codes[:, word & PACKED_FEATURE_MASK]
        n_left = 0
        for j in range(first, stop):
            r = src[j]
            left = _goes_left(word, split, np.int64(column[r]), bitsets)
            dst[first + n_left] = r
            dst[stop - 1 - (j - first - n_left)] = r
            n_left += left
        stack[depth, 0] = node["right"]
        stack[depth, 1] = first + n_left
        stack[depth, 2] = stop
        stack[depth, 3] = 1 - side
        stack[depth + 1, 0] = node["left"]
        stack[depth + 1, 1] = first
        stack[depth + 1, 2] = first + n_left
        stack[depth + 1, 3] = 1 - side
        depth += 2


@kernel(inline="always")
def leaf_value(values, counts, leaf, value):
    """The value of ``leaf`` (a row of ``PackedForest.values``), written to ``value`` and
    returned: the row, or with ``counts`` the class fractions of its counts (the grower's
    division, ``tree.node_class_fractions``). One float64 type whatever the table's.

    Parameters
    ----------
    values, counts :
        ``PackedForest.leaf_values``.
    leaf : int
    value : ndarray of float64, shape (n_values,)
        Written.

    Returns
    -------
    ndarray of float64, shape (n_values,)
        ``value``.
    """
    if counts:
        node_class_fractions(values[leaf], value)
    else:
        for c in range(value.shape[0]):
            value[c] = values[leaf, c]
    return value


@kernel(nogil=True)
def leaves_of_codes(codes, nodes, bitsets, roots, max_depth, n_leaves, out):
    """The leaf (row of ``PackedForest.values``) each row of binned ``codes`` reaches in each
    tree: ``out[i, t]``, ndarray of int64, shape (n_rows, n_trees).

    Blocks of rows go down each tree together (``route_block``), as prediction's do; the
    training blocks' codes are copied a block at a time into the column order it reads.

    Each leaf's "value" is its own index, and ``route_block`` is called with the argument types
    of a regression forest's prediction, so that it reuses that compilation: the constants are
    cast (numba types a literal ``False`` or ``2`` as a type of its own), and ``leaf_ids`` is
    filled by a loop, as the blocks are copied (``reshape`` and the assignment of an array to a
    slice compile numba's string formatting, for their shape errors).
    """
    n = min(ROWS_PER_BLOCK, codes.shape[0])
    block_codes = np.empty((codes.shape[1], n), dtype=X_BINNED_DTYPE).T
    rows = np.empty((2, n), dtype=np.int64)
    stack = np.empty((max_depth + 2, 4), dtype=np.int64)
    leaf_ids = np.empty((n_leaves, 1))
    for k in range(n_leaves):
        leaf_ids[k, 0] = k
    counts, how = np.bool_(False), np.int64(TREE_VALUE)
    tree_leaves = np.empty((n, roots.shape[0]))
    for first in range(0, codes.shape[0], ROWS_PER_BLOCK):
        m = min(ROWS_PER_BLOCK, codes.shape[0] - first)
        for i in range(m):  # not ``block_codes[:m] = ...``: its shape check formats strings
            for f in range(codes.shape[1]):
                block_codes[i, f] = codes[first + i, f]
        for t in range(roots.shape[0]):
            route_block(
                block_codes,
                m,
                nodes,
                bitsets,
                roots[t],
                rows,
                stack,
                leaf_ids,
                counts,
                how,
                tree_leaves,
                t,
            )
        for i in range(m):
            for t in range(roots.shape[0]):
                out[first + i, t] = np.int64(tree_leaves[i, t])

"""Exact path-dependent TreeSHAP: each feature's share of each prediction.

A tree's SHAP values (Lundberg et al. 2020) are the Shapley values of the game whose value for a
set S of known features is the tree's prediction when the features outside S are integrated out
along the tree's own training weights ("path dependent"): at a split on an unknown feature both
children are followed, each weighted by its share of the node's cover.

For one leaf, let its path hold k distinct features. Feature j's splits on the path keep
``z_j``, the product of the cover shares of the children taken, and the row follows all of them
(``o_j = 1``) or not (``o_j = 0``). The leaf's value v enters the game as
``v * prod_{j in S} o_j * prod_{j not in S} z_j``, and the Shapley weights
``|S|! (k - |S| - 1)! / k! = integral_0^1 t^|S| (1 - t)^(k - |S| - 1) dt`` turn its share of
feature j into one integral of a polynomial of degree k - 1:

    phi_j += v * (o_j - z_j) * integral_0^1 prod_{i != j} (z_i + (o_i - z_i) t) dt

Gauss-Legendre quadrature with ceil(k / 2) points integrates it exactly. Summed over a
subtree's leaves at the points, these integrals need no per-leaf work: one walk down and up each
tree per row gives every edge's share in O(n_nodes x depth / 2), against O(n_leaves x depth^2)
for Algorithm 2 of Lundberg et al. (the polynomial view is that of Linear TreeSHAP, Yu et al.
2022). Same values, to rounding: tests/test_shap.py compares them with shap's TreeExplainer.
"""

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from ..core.dtypes import TREE_LEAF
from ..core.kernel_cache import kernel
from ..learner.tree import goes_left_encoded
from .node_table import NodeTable
from .voting import by_row_chunks, one_hot_votes

# Rows that walk a tree together (``shap_rows``): 64 ran faster than one at a time, and than 8,
# 32 or 128 (docs/benchmarks.md, "SHAP values against shap's TreeExplainer").
ROWS_AT_ONCE = 64


class RowBlock(NamedTuple):
    """The rows that walk a tree together: ``X[first:first + n_rows]``, at most
    ``ROWS_AT_ONCE``."""

    X: np.ndarray  # float32 or float64 (n_samples, n_features): encoded rows
    first: int
    n_rows: int


class Rule(NamedTuple):
    """The Gauss-Legendre rule of a tree's walk (``quadrature``)."""

    points: np.ndarray  # float64 (max_points + 1, max_points): row m holds the m-point rule
    m: int  # the rule used: ceil(the tree's most distinct path features / 2) points


class Edge(NamedTuple):
    """The edge a walk goes down: from a split node to its left or right child, at a level of
    the walk, and the nearest edge above it on the same feature (``above`` < 0 if none)."""

    level: int  # the child's level (its depth)
    to_left: bool
    zero: float  # z of the feature on the path down to the child
    above: int  # the nearest edge above on the same feature, or -1
    above_level: int  # its level (0 if none)


class PathArrays(NamedTuple):
    """What the walk keeps of each level of the current path, for a block of rows: one row per
    level, each row's (or each point's and row's, point-major) value in it."""

    one: np.ndarray  # float64 (n_levels, ROWS_AT_ONCE): o, 1 or 0
    inverse: np.ndarray  # float64 (n_levels, m_max * ROWS_AT_ONCE): 1 / g of the feature
    below: np.ndarray  # float64 (n_levels, m_max * ROWS_AT_ONCE): the product of the g


def explained_table(trees, hard_voting=False):
    """The ``NodeTable`` whose trees' SHAP values explain a prediction.

    Parameters
    ----------
    trees : list of tree.Tree
    hard_voting : bool
        Each tree votes for its leaf's majority class (a classifier's ``voting="hard"``): its
        leaves hold that vote, one-hot, instead of the class fractions.
    """
    table = NodeTable(trees)
    if hard_voting:
        table.values = one_hot_votes(table.values)
    return table


def shap_values(table, encoded, parallel=True):
    """The SHAP values of encoded rows, averaged over the table's trees.

    Parameters
    ----------
    table : NodeTable
    encoded : ndarray of float32 or float64, shape (n_samples, n_features)
        Rows as ``BinMapper.encode`` returns them.
    parallel : bool
        Chunks of rows in threads; False inside Dask tasks.

    Returns
    -------
    ndarray of float64, shape (n_samples, n_features, n_values)
        With ``table.expected_values().mean(axis=0)`` added, each row's values sum to the
        forest's mean leaf value for it (its prediction, or class probabilities).
    """
    out = np.zeros((encoded.shape[0], table.n_features, table.values.shape[1]))
    add_shap_values(table, encoded, out, table.max_depth, parallel)
    out /= table.n_trees
    return out


def add_shap_values(table, encoded, out, max_depth, parallel=True):
    """Add the SHAP values of the table's trees (summed, not averaged) to ``out``, each row's
    trees in order: a forest in parts continues one sum part after part.

    Parameters
    ----------
    table : NodeTable
    encoded : ndarray of float32 or float64, shape (n_samples, n_features)
    out : ndarray of float64, shape (n_samples, n_features, n_values)
    max_depth : int
        The deepest tree's depth, of the whole forest (its quadrature rules).
    parallel : bool
    """
    points, weights = quadrature(max(1, -(-max_depth // 2)))
    args = (table.nodes, table.bitsets, table.values, table.cover, table.starts, points, weights)
    by_row_chunks(shap_rows, encoded, parallel, *args, out)


def shaped(flat, n_features, n_values, is_classifier):
    """SHAP values from (n_samples, n_features * n_values) rows (what a forest computes block
    by block) to (n_samples, n_features) for a regressor or (n_samples, n_features, n_values)
    for a classifier or a regressor on n_values target columns; numpy or dask."""
    import dask.array as da  # here: a kernel module imports numpy and numba alone (a build's)

    if not is_classifier and n_values == 1:
        return flat
    if isinstance(flat, da.Array):
        # What ``flat.map_blocks`` calls; dask types that method as a functools wrapper that
        # mypy cannot call as a method.
        return da.map_blocks(
            lambda block: block.reshape(len(block), n_features, n_values),
            flat,
            new_axis=2,
            chunks=(flat.chunks[0], (n_features,), (n_values,)),
            dtype=flat.dtype,
        )
    return flat.reshape(len(flat), n_features, n_values)


@lru_cache(maxsize=None)
def quadrature(max_points):
    """Gauss-Legendre points and weights on [0, 1] for 1 .. ``max_points`` points.

    Returns
    -------
    points, weights : ndarray of float64, shape (max_points + 1, max_points)
        Row m holds the m-point rule in its first m entries (row 0 is unused).
    """
    points = np.zeros((max_points + 1, max(1, max_points)))
    weights = np.zeros_like(points)
    for m in range(1, max_points + 1):
        x, w = np.polynomial.legendre.leggauss(m)
        points[m, :m] = (x + 1.0) / 2.0
        weights[m, :m] = w / 2.0
    return points, weights


@kernel(nogil=True)
def _edges(nodes, cover, start, stop):
    """What the SHAP values of the tree whose nodes are ``nodes[start:stop]`` need of its
    edges, whatever the row. Edge k is the edge into node k (offsets from ``start``); its
    feature is the feature its parent splits on.

    Returns
    -------
    parent : ndarray of int64, shape (n_nodes,)
        -1 for the root.
    previous : ndarray of int64, shape (n_nodes,)
        The nearest edge above edge k on the same feature, or -1.
    zero : ndarray of float64, shape (n_nodes,)
        z of edge k's feature on the path down to node k: the product of the cover shares of
        the children taken at the path's splits on that feature.
    depth : ndarray of int64, shape (n_nodes,)
    n_distinct : int
        The most distinct features on a root-to-leaf path.
    """
    n = stop - start
    # Arrays made by np.empty and filled by loops, and scalars: np.full, np.ones, np.zeros, a
    # loop over a tuple of the children or ``distinct.max()`` each compile a numba helper of
    # their own, which together cost as much as this kernel.
    parent = np.empty(n, dtype=np.int64)
    previous = np.empty(n, dtype=np.int64)
    zero = np.empty(n)
    distinct = np.empty(n, dtype=np.int64)
    depth = np.empty(n, dtype=np.int64)
    parent[0], previous[0], zero[0], distinct[0], depth[0] = -1, -1, 1.0, 0, 0
    n_distinct = 0
    for k in range(n):  # children come after their parent
        node = nodes[start + k]
        if node["left"] == TREE_LEAF:
            continue
        above = -1  # the nearest edge above node k on this split's feature
        a = k
        while parent[a] >= 0:
            if nodes[start + parent[a]]["feature"] == node["feature"]:
                above = a
                break
            a = parent[a]
        for side in range(2):
            child = np.int64(node["left"] if side == 0 else node["right"]) - start
            parent[child] = k
            previous[child] = above
            share = cover[start + child] / cover[start + k] if cover[start + k] > 0 else 0.0
            zero[child] = share * (zero[above] if above >= 0 else 1.0)
            distinct[child] = distinct[k] + (1 if above < 0 else 0)
            depth[child] = depth[k] + 1
            n_distinct = max(n_distinct, distinct[child])
    return parent, previous, zero, depth, n_distinct


@kernel(nogil=True, error_model="numpy")
def shap_rows(X, first, last, nodes, bitsets, values, cover, starts, points, weights, out):
    """Add every tree's SHAP values of rows ``first:last`` of encoded X to ``out``.

    Each tree is walked depth first once for a block of ``ROWS_AT_ONCE`` rows: every row visits
    every node, so the rows share the walk, and the innermost loops run over the block's rows
    (and the quadrature points) in contiguous memory. Only the current path is kept, so the
    working arrays are (depth, points x rows) whatever the size of the tree.

    Going down edge k (into node k, on feature f = its parent's split feature), each row gets
    o (it follows every split on f down to node k, or not) and the product ``below`` of the
    distinct path features' g(t) = z + (o - z) t at each point t, where f's earlier factor, if
    f was split on higher up, is replaced. Going up, ``total`` sums v * below over the leaves
    of node k's subtree, and ``later`` the part of it under a later edge on f; edge k adds
    ``(o - z) * integral((total - later) / g)`` to feature f: the leaves for which it is f's
    last split on the path, whose polynomials g divides.

    Parameters
    ----------
    X : ndarray of float32 or float64, shape (n_samples, n_features)
        Encoded rows (``BinMapper.encode``): numeric values, category codes, NaN.
    first, last : int
        The rows of this call (``voting.by_row_chunks`` runs chunks in threads).
    nodes, bitsets, values, cover, starts :
        The forest's ``node_table.NodeTable`` arrays.
    points, weights : ndarray of float64
        Gauss-Legendre rules on [0, 1] (``quadrature``), with at least ceil(depth / 2) points.
    out : ndarray of float64, shape (n_samples, n_features, n_values)
        Updated: rows ``first:last`` get the sum over trees of their SHAP values.
    """
    n_values = values.shape[1]
    m_max = points.shape[0] - 1
    n_levels = 2 * m_max + 1  # depth + 1 levels: the rules have ceil(depth / 2) points
    R = ROWS_AT_ONCE
    node_at = np.empty(n_levels, dtype=np.int64)
    state = np.empty(n_levels, dtype=np.int64)  # children of the level's node visited so far
    path = PathArrays(
        np.empty((n_levels, R)), np.empty((n_levels, m_max * R)), np.empty((n_levels, m_max * R))
    )
    one, inverse, below = path
    total = np.empty((n_levels, n_values * m_max * R))
    later = np.empty((n_levels, n_values * m_max * R))
    share = np.empty(R)
    for t in range(starts.shape[0] - 1):
        start, stop = starts[t], starts[t + 1]
        if nodes[start]["left"] == TREE_LEAF:
            continue  # a one-leaf tree gives every feature zero
        parent, previous, zero, depth, n_distinct = _edges(nodes, cover, start, stop)
        m = (n_distinct + 1) // 2  # exact for polynomials of degree n_distinct - 1
        rule = Rule(points, m)
        width = m * R
        for block in range(first, last, R):
            n_rows = min(R, last - block)
            rows = RowBlock(X, block, n_rows)
            below[0, :width] = 1.0
            total[0, : n_values * width] = 0.0
            later[0, : n_values * width] = 0.0
            node_at[0] = 0
            state[0] = 0
            d = 0
            while d >= 0:
                k = node_at[d]
                node = nodes[start + k]
                if node["left"] != TREE_LEAF and state[d] < 2:
                    child = np.int64(node["left"] if state[d] == 0 else node["right"]) - start
                    state[d] += 1
                    d += 1
                    node_at[d] = child
                    state[d] = 0
                    a = previous[child]
                    edge = Edge(d, state[d - 1] == 1, zero[child], a, depth[a] if a >= 0 else 0)
                    _go_down(rows, node, bitsets, edge, rule, path)
                    total[d, : n_values * width] = 0.0
                    later[d, : n_values * width] = 0.0
                    if nodes[start + child]["left"] == TREE_LEAF:
                        for c in range(n_values):
                            v = values[start + child, c]
                            for j in range(width):
                                total[d, c * width + j] = below[d, j] * v
                    continue
                if d > 0:  # node k is done: its edge's share, then its sums go up
                    f = nodes[start + parent[k]]["feature"]
                    z = zero[k]
                    for c in range(n_values):
                        share[:] = 0.0
                        for q in range(m):
                            w = weights[m, q]
                            for r in range(R):
                                j = c * width + q * R + r
                                share[r] += w * (total[d, j] - later[d, j]) * inverse[d, q * R + r]
                        for r in range(n_rows):
                            out[block + r, f, c] += (one[d, r] - z) * share[r]
                    for j in range(n_values * width):
                        total[d - 1, j] += total[d, j]
                    a = previous[k]
                    if a >= 0:
                        for j in range(n_values * width):
                            later[depth[a], j] += total[d, j]
                d -= 1


@kernel(nogil=True, inline="always", error_model="numpy")
def _go_down(rows, split, bitsets, edge, rule, path):
    """The block's rows take ``edge``, from ``split`` to its left or right child: their o,
    1 / g and ``below`` at the edge's level of ``path``, from the level above and from the
    nearest edge above on the same feature. The block's unused rows (past ``rows.n_rows``)
    follow every edge and are never written out."""
    R = ROWS_AT_ONCE
    X, block, n_rows = rows
    d, to_left, z, a, a_level = edge
    points, m = rule
    one, inverse, below = path
    for r in range(R):
        followed = r >= n_rows or goes_left_encoded(X, block + r, split, bitsets) == to_left
        o = 1.0 if followed else 0.0
        if a >= 0:
            o *= one[a_level, r]
        one[d, r] = o
    for q in range(m):
        t = points[m, q]
        for r in range(R):
            j = q * R + r
            g = z + (one[d, r] - z) * t
            inverse[d, j] = 1.0 / g
            below[d, j] = below[d - 1, j] * g
        if a >= 0:  # the feature's earlier factor leaves the product
            for r in range(R):
                below[d, q * R + r] *= inverse[a_level, q * R + r]

"""Nested truncations of grown trees, scored on the out-of-bag rows in one pass (``prune="oob"``).

A family of truncations gives every split node of a tree a key, and each candidate a cut: under
cut c a node whose key is at most c becomes a leaf, holding the value it had when the tree grew
(its in-bag class fractions or mean), and its subtree goes. A larger cut prunes more. Under
every cut, a row's prediction is the first node on its path whose key is at most the cut, so
one walk from the root to the row's leaf gives its prediction under all the cuts: at each node,
the cuts not yet given a node and at least its key take it (they are the largest of those left,
since the cuts are sorted), and the walk stops when none is left (``add_truncated_votes``).

The families (docs/algorithms.md, section 10c):

``depth``
    key ``-depth``, cut ``-D``: the tree cut at depth D (``max_depth=D`` after the fact).
``size``
    key: the node's training weight as a share of the root's; cut f: nodes holding at most f of
    the tree's weight are leaves (a ``min_samples_split`` relative to the tree).
``alpha``
    key: the effective alpha at which weakest-link pruning (``cost_complexity``) collapses the
    node, divided by the root's impurity, made non-decreasing along the pruning sequence; cut:
    a relative ``ccp_alpha``. Nodes the sequence removes with an ancestor never are leaves.
``leaves``
    key ``-rank``, the node's place in best-first order (the split of largest weighted
    impurity decrease among those whose parents are split first, the root rank 0); cut
    ``-(K - 1)``: about the tree a best-first grower stops at K leaves (``max_leaf_nodes=K``;
    the grower computes its decreases otherwise and breaks exact ties by its own node order).

Every family's first cut, ``-inf``, prunes nothing: the grown forest is a candidate.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from ..core.dtypes import TREE_LEAF
from ..core.kernel_cache import kernel
from ..learner.cost_complexity import node_owners, subtree, weakest_links
from ..learner.tree import (
    LEAF_COUNTS,
    NODE_COUNTS,
    Tree,
    goes_left_binned,
    node_counts,
    shipped_values,
)
from ..learner.wire import decode, state_of

FAMILIES = ("depth", "size", "alpha", "leaves")
# What ``prune="oob"`` uses: the family that chose best on the tables of docs/benchmarks.md
# ("Trees pruned on their out-of-bag rows").
RULE = "size"
# The parameter each family's cut stands for, as ``prune_`` and the curve name it.
PARAMETER = {
    "depth": "max_depth",
    "size": "min_split_fraction",
    "alpha": "relative_ccp_alpha",
    "leaves": "max_leaf_nodes",
}
# At most this many cuts in a family's grid: the out-of-bag votes of a block hold one row of
# class votes per row and cut.
MAX_CUTS = 24


def family_of(prune: str) -> str:
    """The family ``prune`` asks for: ``"oob"`` the rule's, ``"oob:<family>"`` that one."""
    return RULE if prune == "oob" else prune.split(":", 1)[1]


def grid(
    family: str, max_depth: int, max_leaves: int, n_rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """A family's cuts and the parameter value each stands for, from no pruning to most.

    Parameters
    ----------
    family : str
        One of ``FAMILIES``.
    max_depth, max_leaves : int
        The deepest tree's depth and the most leaves a tree has.
    n_rows : int
        The training rows.

    Returns
    -------
    cuts : ndarray of float64, shape (n_cuts,)
        Increasing, the first ``-inf`` (no pruning).
    values : ndarray of float64, shape (n_cuts,)
        The parameter (``PARAMETER``) of each cut: ``max_depth`` or ``max_leaf_nodes`` (inf for
        no pruning), the share of the root's weight or the relative alpha (0 for none).
    """
    n_halvings = min(MAX_CUTS - 1, max(1, math.ceil(math.log2(max(n_rows, 2)))))
    if family == "depth":
        depths = np.arange(max_depth - 1, 0, -1)
        if len(depths) > MAX_CUTS - 1:  # the shallow ones are kept: that is where pruning pays
            depths = np.unique(np.geomspace(1, max_depth - 1, MAX_CUTS - 1).round())[::-1]
        values = np.concatenate([[np.inf], depths]).astype(np.float64)
        return -values, values
    if family == "leaves":
        leaves = 2.0 ** np.arange(1, 64)
        leaves = leaves[leaves < max_leaves][-(MAX_CUTS - 1) :]  # the largest: fewest pruned
        values = np.concatenate([[np.inf], leaves[::-1]])
        return -(values - 1.0), values
    if family in ("size", "alpha"):
        shares = 2.0 ** -np.arange(n_halvings, 0, -1, dtype=np.float64)
        cuts = np.concatenate([[-np.inf], shares])
        return cuts, np.concatenate([[0.0], shares])
    raise ValueError(f"unknown pruning family {family!r}; expected one of {FAMILIES}")


def node_keys(tree: Tree, family: str) -> np.ndarray:
    """Every node's key in ``family`` (see the module docstring): ndarray of float64, shape
    (n_nodes,); a leaf's is ``inf`` (a leaf is one under every cut)."""
    is_split = tree.children_left != TREE_LEAF
    keys = np.full(tree.node_count, np.inf)
    if family == "depth":
        keys[is_split] = -tree.node_depth[is_split].astype(np.float64)
    elif family == "size":
        cover = tree.weighted_n_node_samples
        keys[is_split] = cover[is_split] / cover[0]
    elif family == "alpha":
        root_impurity = tree.impurity[0]
        if root_impurity > 0.0:
            links = weakest_links(tree)
            # Pruning to a cut takes the steps up to the first of larger alpha (scikit-learn's
            # rule): a step's key is the largest alpha up to it.
            keys[links.nodes] = np.maximum.accumulate(links.ccp_alphas) / root_impurity
    elif family == "leaves":
        keys[is_split] = -_best_first_ranks(tree)[is_split]
    else:
        raise ValueError(f"unknown pruning family {family!r}; expected one of {FAMILIES}")
    return keys


def _best_first_ranks(tree: Tree) -> np.ndarray:
    """Each split node's place in the order a best-first grower splits them (largest weighted
    impurity decrease first among the nodes whose parent is split; ties to the lower node id):
    ndarray of float64, shape (n_nodes,), ``inf`` for leaves."""
    ranks = np.full(tree.node_count, np.inf)
    _fill_best_first_ranks(
        tree.children_left, tree.children_right, tree.weighted_n_node_samples * tree.impurity, ranks
    )
    return ranks


@kernel(nogil=True)
def _fill_best_first_ranks(children_left, children_right, weighted_impurity, ranks):
    """``_best_first_ranks``' ranks written into ``ranks`` (``inf`` left for leaves): a binary
    heap of the split nodes whose parent is ranked, keyed by (-decrease, node id)."""
    if children_left[0] == TREE_LEAF:
        return
    n_splits = 0
    for i in range(children_left.shape[0]):
        n_splits += children_left[i] != TREE_LEAF
    keys = np.empty(n_splits)
    heap = np.empty(n_splits, dtype=np.int64)
    keys[0] = 0.0
    heap[0] = 0
    size = 1
    rank = 0
    while size > 0:
        node = heap[0]
        size -= 1
        _sift_down(keys, heap, size)
        ranks[node] = rank
        rank += 1
        for child in (children_left[node], children_right[node]):
            left = children_left[child]
            if left != TREE_LEAF:
                decrease = (
                    weighted_impurity[child]
                    - weighted_impurity[left]
                    - weighted_impurity[children_right[child]]
                )
                keys[size] = -decrease
                heap[size] = child
                size += 1
                _sift_up(keys, heap, size - 1)


@kernel(inline="always")
def _before(keys, heap, a, b):
    """Whether heap entry a comes before b: smaller key, then smaller node id."""
    return keys[a] < keys[b] or (keys[a] == keys[b] and heap[a] < heap[b])


@kernel()
def _sift_up(keys, heap, i):
    """Move heap entry i up to its place."""
    while i > 0:
        parent = (i - 1) // 2
        if not _before(keys, heap, i, parent):
            return
        keys[i], keys[parent] = keys[parent], keys[i]
        heap[i], heap[parent] = heap[parent], heap[i]
        i = parent


@kernel()
def _sift_down(keys, heap, size):
    """Move the last entry (``size``, just taken out) to the top and down to its place."""
    if size == 0:
        return
    keys[0] = keys[size]
    heap[0] = heap[size]
    i = 0
    while True:
        smallest = i
        for child in (2 * i + 1, 2 * i + 2):
            if child < size and _before(keys, heap, child, smallest):
                smallest = child
        if smallest == i:
            return
        keys[i], keys[smallest] = keys[smallest], keys[i]
        heap[i], heap[smallest] = heap[smallest], heap[i]
        i = smallest


def truncate(tree: Tree, family: str, cut: float, criterion: int, thresholds) -> Tree:
    """``tree`` cut at ``cut`` of ``family``: its nodes whose key is at most ``cut`` made leaves
    (``cost_complexity.subtree``), kept as a shipped tree (``wire``), as a forest holds its
    trees. ``criterion`` is the trees' (``core.criteria``), ``thresholds`` the bin table."""
    expanded = tree.expanded()
    collapse = (node_keys(expanded, family) <= cut) & (expanded.children_left != TREE_LEAF)
    if not collapse.any():
        return tree
    counts = None
    shipped = tree.shipped_state
    if shipped is not None and shipped_values(shipped)[1] in (NODE_COUNTS, LEAF_COUNTS):
        # A classifier's leaves keep their class counts (a new leaf its node's), as grown
        # trees do: the forest packs them two bytes a class (``PackedForest.leaf_counts``).
        kept = node_owners(expanded, collapse) == np.arange(expanded.node_count)
        counts = node_counts(shipped)[kept]
    return decode(state_of(subtree(expanded, collapse), criterion, counts), thresholds)


def truncate_trees(trees, family: str, cut: float, criterion: int, bin_mapper) -> list[Tree]:
    """Every tree of ``trees`` cut at ``cut`` of ``family`` (``truncate``), in threads (most of
    the work is in kernels that release the GIL), in order; ``bin_mapper`` the trees' bins."""
    thresholds = bin_mapper.kernel_arrays().thresholds
    with ThreadPoolExecutor(numba.get_num_threads()) as pool:
        return list(
            pool.map(lambda tree: truncate(tree, family, cut, criterion, thresholds), trees)
        )


@kernel(nogil=True)
def add_truncated_votes(
    codes, counts, nodes, bitsets, root, max_depth, values, keys, cuts, hard, votes, n_oob
):
    """Add one tree's votes under every cut to the rows of a block it did not sample.

    The tree's out-of-bag rows go down it together, depth first, as ``routing.route_block``
    routes a block: the cuts still open at a node (those below the keys of every node above
    it) are the same for all its rows, so each node is read once, in the tree's (depth-first)
    order, and adds its value under the cuts it closes to each of its rows; the rows go on to
    the children with the cuts left open, and stop when none is left. Walking each row alone
    read the nodes in random order, a cache miss at nearly every level.

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, n_features)
    counts : ndarray of float64, shape (n_rows,)
        The tree's row counts (``sampling.tree_counts``): rows with 0 are out of bag.
    nodes, bitsets :
        A ``NodeTable``'s.
    root : int
        The tree's root in ``nodes``.
    max_depth : int
        At least the tree's depth.
    values : ndarray of float64, shape (n_nodes, n_values)
        Every node's in-bag value: class fractions, or the mean target.
    keys : ndarray of float64, shape (n_nodes,)
        Every node's key (``node_keys``).
    cuts : ndarray of float64, shape (n_cuts,)
        Increasing.
    hard : bool
        Add one vote for the node's class of largest fraction (``voting="hard"``), not its
        fractions.
    votes : ndarray of float64, shape (n_rows, n_cuts, n_values)
        Summed votes of the out-of-bag trees so far under each cut; updated, one addition per
        row, cut and tree, in tree order, as ``voting.add_oob_votes`` adds a pruned forest's
        (the same bits).
    n_oob : ndarray of float64, shape (n_rows,)
        Out-of-bag trees so far; updated.
    """
    n_rows = 0
    rows = np.empty((2, codes.shape[0]), dtype=np.int64)
    for i in range(codes.shape[0]):
        if counts[i] == 0.0:
            rows[0, n_rows] = i
            n_rows += 1
            n_oob[i] += 1.0
    if n_rows == 0:
        return
    # (node, first, stop, buffer, cuts open) of the row ranges still to go down
    stack = np.empty((max_depth + 2, 5), dtype=np.int64)
    stack[0, 0] = root
    stack[0, 1] = 0
    stack[0, 2] = n_rows
    stack[0, 3] = 0
    stack[0, 4] = cuts.shape[0]
    depth = 1
    while depth > 0:
        depth -= 1
        k, first, stop, side, n_open = stack[depth]
        src = rows[side]
        node = nodes[k]
        is_leaf = node["left"] == TREE_LEAF
        closed = 0
        if not is_leaf:
            closed = n_open
            while closed > 0 and cuts[closed - 1] >= keys[k]:
                closed -= 1
        if closed < n_open:
            c_hard = 0  # np.argmax's first largest, without compiling numba's argmax
            for c in range(1, values.shape[1]):
                if values[k, c] > values[k, c_hard]:
                    c_hard = c
            for r in range(first, stop):
                i = src[r]
                for j in range(closed, n_open):
                    if hard:
                        votes[i, j, c_hard] += 1.0
                    else:
                        for c in range(values.shape[1]):
                            votes[i, j, c] += values[k, c]
        if is_leaf or closed == 0:
            continue
        dst = rows[1 - side]
        n_left = 0
        for r in range(first, stop):
            i = src[r]
            left = goes_left_binned(np.int64(codes[i, node["feature"]]), node, bitsets)
            dst[first + n_left] = i
            dst[stop - 1 - (r - first - n_left)] = i
            n_left += left
        for child, lo, hi in (
            (node["right"], first + n_left, stop),
            (node["left"], first, first + n_left),
        ):
            if hi > lo:
                stack[depth, 0] = child
                stack[depth, 1] = lo
                stack[depth, 2] = hi
                stack[depth, 3] = 1 - side
                stack[depth, 4] = closed
                depth += 1

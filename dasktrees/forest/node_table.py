"""NodeTable: every node of a forest's trees, split nodes and leaves, in flat arrays.

``packing.PackedForest`` keeps what voting needs: split nodes and leaf values. Explanations
need more of each node: SHAP weighs both children of every split by their training weight
(cover), and the out-of-bag impurity importance reads the value of every node a row passes.
So this table keeps the trees' own node order, one ``ROUTING_NODE_DTYPE`` record per node (the
float threshold for encoded rows, the bin threshold for binned codes), with the node values and
covers beside it:

    nodes   [ tree 0: nodes 0 .. n0-1 | tree 1: nodes | ... ]   children ids are global
    values  [ one row per node ]                                class fractions or mean target
    cover   [ one weight per node ]                             weighted_n_node_samples

Tree t's nodes are ``starts[t]:starts[t + 1]``, its root the first of them.
"""

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from ..core.dtypes import BITSET_DTYPE, BITSET_WORDS, ROUTING_NODE_DTYPE, TREE_LEAF
from .truncation import node_keys


class NodeTable:
    """The nodes of a forest (or of one tree), for the kernels that walk whole trees.

    Parameters
    ----------
    trees : list of tree.Tree
        Fitted trees over the same features and classes.

    Attributes
    ----------
    nodes : ndarray of ROUTING_NODE_DTYPE, shape (n_nodes,)
        All trees' nodes; children are indices into this table, ``TREE_LEAF`` for a leaf.
    bitsets : ndarray of uint32, shape (n_bitsets, BITSET_WORDS)
    values : ndarray of float64, shape (n_nodes, n_values)
    cover : ndarray of float64, shape (n_nodes,)
        The training weight that reached each node (bootstrap counts times sample weights).
    starts : ndarray of int64, shape (n_trees + 1,)
    max_depth : int
    n_features : int
    keys : ndarray of float64, shape (n_nodes,), or None
        With ``family``: every node's key in that family of truncations
        (``truncation.node_keys``), what ``prune="oob"`` scores the trees' truncations with.
    """

    def __init__(self, trees, family=None):
        trees = list(trees)
        if not trees:
            raise ValueError("a forest needs at least one tree")
        sizes = np.array([t.node_count for t in trees], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        n_bitsets = np.array([_n_bitsets(t) for t in trees], dtype=np.int64)
        bitset_starts = np.cumsum(n_bitsets) - n_bitsets
        self.nodes = np.empty(self.starts[-1], dtype=ROUTING_NODE_DTYPE)
        self.values = np.empty((self.starts[-1], trees[0].n_values))
        self.cover = np.empty(self.starts[-1])
        self.keys = None if family is None else np.empty(self.starts[-1])
        self.bitsets = np.empty((int(n_bitsets.sum()), BITSET_WORDS), dtype=BITSET_DTYPE)

        def fill(t):
            tree = trees[t].expanded()  # one tree's arrays at a time: a forest stays compact
            nodes = slice(self.starts[t], self.starts[t + 1])
            tree.write_routing(self.nodes, self.starts[t], bitset_starts[t])
            self.values[nodes] = tree.value
            self.cover[nodes] = tree.weighted_n_node_samples
            if self.keys is not None:
                self.keys[nodes] = node_keys(tree, family)
            self.bitsets[bitset_starts[t] : bitset_starts[t] + n_bitsets[t]] = (
                tree.categorical_bitsets
            )

        # Trees in threads (the expanding kernels release the GIL), each writing its own rows.
        with ThreadPoolExecutor(numba.get_num_threads()) as pool:
            list(pool.map(fill, range(len(trees))))  # list(): raise the first error
        self.max_depth = max(t.max_depth for t in trees)
        self.n_features = trees[0].n_features

    @property
    def n_trees(self):
        return len(self.starts) - 1

    def expected_values(self):
        """Each tree's mean leaf value weighted by the leaves' cover: what the tree predicts
        when no feature is known (the base value of its SHAP values).

        Returns
        -------
        ndarray of float64, shape (n_trees, n_values)
        """
        is_leaf = self.nodes["left"] == TREE_LEAF
        tree_of_node = np.repeat(np.arange(self.n_trees), np.diff(self.starts))
        root_cover = self.cover[self.starts[:-1]][tree_of_node]
        weighted = np.where(is_leaf, self.cover / root_cover, 0.0)[:, None] * self.values
        out = np.zeros((self.n_trees, self.values.shape[1]))
        np.add.at(out, tree_of_node, weighted)
        return out


def _n_bitsets(tree) -> int:
    """The rows of a tree's categorical bitset table, read without expanding a shipped tree:
    an expanded tree without categorical splits has one all-zero row (``tree.expand_shipped``)."""
    state = tree.shipped_state
    if state is None:
        return len(tree.categorical_bitsets)
    return max(1, len(state["categorical_bitsets"]))

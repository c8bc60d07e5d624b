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

import numpy as np

from ..core.dtypes import ROUTING_NODE_DTYPE, TREE_LEAF


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
    """

    def __init__(self, trees):
        trees = list(trees)
        if not trees:
            raise ValueError("a forest needs at least one tree")
        sizes = np.array([t.node_count for t in trees], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.nodes = np.empty(self.starts[-1], dtype=ROUTING_NODE_DTYPE)
        self.values = np.empty((self.starts[-1], trees[0].n_values))
        self.cover = np.empty(self.starts[-1])
        bitsets = []
        n_bitsets = 0
        for t, tree in enumerate(trees):
            tree = tree.expanded()  # one tree's arrays at a time: a forest stays compact
            tree.write_routing(self.nodes, self.starts[t], n_bitsets)
            self.values[self.starts[t] : self.starts[t + 1]] = tree.value
            self.cover[self.starts[t] : self.starts[t + 1]] = tree.weighted_n_node_samples
            bitsets.append(tree.categorical_bitsets)
            n_bitsets += len(tree.categorical_bitsets)
        self.bitsets = np.concatenate(bitsets)
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

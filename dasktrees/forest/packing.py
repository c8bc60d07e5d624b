"""PackedForest: fitted trees packed in flat arrays for prediction, and the kernels that pack them.

All trees' split nodes are concatenated into one table of 16-byte records, and their leaves'
values into another; ``roots[t]`` is tree t's root (``~leaf`` for a tree that is one leaf):

    nodes   [ tree 0: split nodes | tree 1: split nodes | ... ]     children ids are global;
                                                                     a child k < 0 is leaf ~k
    values  [ tree 0: leaves | tree 1: leaves | ... ]               one row of class fractions
                                                                     (or a mean) per leaf, or
                                                                     of class counts

Nodes route on the rows' bin codes (``routing``); the forest votes through the kernels of
``voting``.

A forest of classification trees whose leaves' weighted class counts are whole numbers below
2**16 (bootstrap counts) keeps those counts, two bytes each, instead of float64 fractions
(``leaf_counts``): the kernels divide a leaf's counts by their sum as they read it, the same
division ``tree.node_class_fractions`` makes, so the votes are the same bits. Its trees then
keep their leaves' counts and their bitsets as views of the forest's tables, not copies of
their own: the client holds each forest once (docs/forests.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from ..core.dtypes import (
    BITSET_DTYPE,
    BITSET_WORDS,
    PACKED_CATEGORICAL,
    PACKED_MISSING_LEFT,
    PACKED_NODE_DTYPE,
)
from ..core.kernel_cache import kernel
from ..learner.binning import BinMapper
from ..learner.tree import (
    LEAF_COUNTS,
    LEAF_VALUES,
    NODE_VALUES,
    Tree,
    class_fractions,
    node_class_fractions,
    packed_bit,
    shipped_values,
    value_and_weight,
)
from .routing import SOFT, TREE_VALUE
from .voting import by_row_chunks, vote_rows

# Leaf counts a forest keeps as they are (``PackedForest.leaf_counts``): whole numbers in these.
_PACKABLE_COUNTS = (np.uint8, np.uint16)
_PACKED_COUNTS = np.uint16
# What ``_pack_depth_first`` reads of a shipped state, in its order.
_DEPTH_FIRST_FIELDS = (
    "is_split",
    "feature",
    "bin_threshold",
    "missing_go_to_left_bits",
    "is_categorical_bits",
    "categorical_bitset_idx",
)
# What ``_pack_tree`` is told of a tree whose leaf values the caller writes.
_VALUES_WRITTEN = -1


class PackedForest:
    """Trees packed for prediction.

    Parameters
    ----------
    trees : list of tree.Tree
        Fitted trees over the same features and classes.
    bin_mapper : binning.BinMapper
        The fitted mapper whose bins the trees split on (the forest bins the rows it votes for).

    Attributes
    ----------
    nodes : ndarray of PACKED_NODE_DTYPE, shape (n_splits,)
    values : ndarray of float64 or uint16, shape (n_leaves, n_values)
        The leaves' values, or with ``leaf_counts`` their weighted class counts.
    leaf_counts : bool
        Whether ``values`` holds counts, whose fractions are the leaves' values.
    bitsets : ndarray of uint32, shape (n_bitsets, BITSET_WORDS)
    roots : ndarray of int64, shape (n_trees,)
    max_depth : int
        The deepest tree's depth.
    thresholds : ndarray of float64, shape (n_features, N_BIN_CODES)
        ``BinMapper.threshold_table``: the upper edges of each numeric feature's bins.
    is_categorical : ndarray of uint8, shape (n_features,)
    """

    def __init__(self, trees: Iterable[Tree], bin_mapper: BinMapper) -> None:
        trees = list(trees)
        if not trees:
            raise ValueError("a forest needs at least one tree")
        states = [t.shipped_state for t in trees]
        n_nodes = np.array([t.node_count for t in trees], dtype=np.int64)
        n_splits = n_nodes - np.array([t.n_leaves for t in trees], dtype=np.int64)
        n_bitsets = np.array(
            [
                len(t.categorical_bitsets if s is None else s["categorical_bitsets"])
                for t, s in zip(trees, states)
            ],
            dtype=np.int64,
        )
        node_starts, leaf_starts, bitset_starts = (
            np.cumsum(counts) - counts for counts in (n_splits, n_nodes - n_splits, n_bitsets)
        )
        if n_splits.sum() >= 2**31 or (n_nodes - n_splits).sum() >= 2**31:
            raise ValueError(
                "a forest of more than 2**31 - 1 split nodes or leaves cannot be packed"
            )
        self.nodes = np.empty(n_splits.sum(), dtype=PACKED_NODE_DTYPE)
        # (Not the counts of k class columns: a leaf's fractions are taken block by block.)
        self.leaf_counts = all(
            s is not None
            and s.get("leaf_class_counts", np.empty(0)).dtype in _PACKABLE_COUNTS
            and "n_outputs" not in s
            for s in states
        )
        # What the trees hold of their leaves that the forest holds as it is, the trees then
        # keeping views of it: a classifier's leaf counts, a regressor's leaf means.
        shared: str | None = "leaf_class_counts" if self.leaf_counts else "leaf_value"
        if not all(s is not None and shared in s for s in states):
            shared = None
        n_leaves = int((n_nodes - n_splits).sum())
        self.values = np.empty(
            (n_leaves, trees[0].n_values), dtype=_PACKED_COUNTS if self.leaf_counts else np.float64
        )
        # the packing kernels write no values when they are shared
        written = np.empty((0, self.values.shape[1])) if shared else self.values
        self.bitsets = np.empty((int(n_bitsets.sum()), BITSET_WORDS), dtype=BITSET_DTYPE)
        self.roots = np.where(n_splits > 0, node_starts, ~leaf_starts).astype(np.int64)
        self.max_depth = max(tree.max_depth for tree in trees)
        self.thresholds = bin_mapper.threshold_table()
        self.is_categorical = np.asarray(bin_mapper.is_categorical_, dtype=np.uint8)

        def pack(t):
            state = states[t]
            leaves = slice(leaf_starts[t], leaf_starts[t] + n_nodes[t] - n_splits[t])
            rows = slice(bitset_starts[t], bitset_starts[t] + n_bitsets[t])
            starts = (n_nodes[t], node_starts[t], leaf_starts[t], bitset_starts[t])
            if shared:
                self.values[leaves] = state[shared]
            if state is not None and "children_left" not in state:
                # Numbered depth first, as the grower numbers its trees: the state is read as
                # it is, the children found from its flags as the split nodes are written.
                fields = [state[name] for name in _DEPTH_FIRST_FIELDS]
                _pack_depth_first(*fields, *starts, self.nodes)
                if not shared:
                    value, kind = shipped_values(state)
                    if "n_outputs" in state:  # k class columns: fractions block by block
                        value, kind = value_and_weight(state)[0], NODE_VALUES
                    _write_leaves(
                        state["is_split"], value, kind, n_nodes[t], leaf_starts[t], written
                    )
                bitsets = state["categorical_bitsets"]
            else:
                *fields, value, kind, bitsets = trees[t].split_nodes()
                if shared:
                    value, kind = written, _VALUES_WRITTEN
                _pack_tree(*fields, value, kind, *starts, self.nodes, written)
            self.bitsets[rows] = bitsets
            # A shipped tree keeps views of what the forest holds, not copies of its own.
            if state is not None and n_bitsets[t]:
                state["categorical_bitsets"] = self.bitsets[rows]
            if shared:
                state[shared] = self.values[leaves]

        # Trees in threads (the kernels release the GIL): much of the time goes to faulting in
        # the new tables' pages, which threads do side by side.
        with ThreadPoolExecutor(numba.get_num_threads()) as pool:
            list(pool.map(pack, range(len(trees))))  # list(): raise the first error
        self._trees = trees  # what ``packs`` compares with

    def packs(self, trees: Sequence[Tree]) -> bool:
        """Whether this forest was packed from exactly ``trees`` (the same objects, in order)."""
        packed = getattr(self, "_trees", None)
        return (
            packed is not None
            and len(packed) == len(trees)
            and all(a is b for a, b in zip(packed, trees))
        )

    def __getstate__(self):
        # The packed arrays alone: the forest travels to the tasks that vote with it.
        state = dict(self.__dict__)
        state.pop("_trees", None)
        return state

    @property
    def n_trees(self) -> int:
        return len(self.roots)

    @property
    def leaf_values(self) -> tuple[np.ndarray, bool]:
        """(``values``, ``leaf_counts``): what the kernels that read leaf values take."""
        return self.values, self.leaf_counts

    def _arrays(self):
        return (
            self.thresholds,
            self.is_categorical,
            self.nodes,
            self.bitsets,
            self.roots,
            self.max_depth,
        )

    def vote(self, X: np.ndarray, voting: int = SOFT, parallel: bool = True) -> np.ndarray:
        """Mean over trees of each row's leaf value (SOFT), or the share of trees voting for
        each class (HARD).

        Parameters
        ----------
        X : ndarray of float32 or float64, shape (n_samples, n_features)
            Encoded rows (``BinMapper.encode``): numeric values, category codes, NaN.
        voting : SOFT or HARD
        parallel : bool
            Chunks of rows in threads; False inside Dask tasks, which Dask already runs in
            parallel.

        Returns
        -------
        ndarray of float64, shape (n_samples, n_values)
        """
        out = np.zeros((X.shape[0], self.values.shape[1]))
        self.add_votes(X, voting, out, parallel)
        out /= self.n_trees
        return out

    def add_votes(self, X: np.ndarray, voting: int, out: np.ndarray, parallel: bool) -> None:
        """Add the trees' votes (``vote``'s sums, not yet divided by the number of trees) to
        ``out``, each row's trees in order: forests in parts (``parts``) continue one sum part
        after part, the same additions as one forest of all their trees."""
        leaf_values = self.leaf_values
        if self.leaf_counts and X.shape[0] * self.n_trees >= len(self.values):
            # More leaf visits than leaves: divide every leaf's counts once, into a table
            # dropped after the call, rather than at each visit (the same fractions).
            fractions = np.empty(self.values.shape)
            class_fractions(self.values.astype(np.float64), fractions, np.empty(len(fractions)))
            leaf_values = fractions, False
        by_row_chunks(vote_rows, X, parallel, *self._arrays(), *leaf_values, voting, out)

    def tree_predictions(self, X: np.ndarray, parallel: bool = True) -> np.ndarray:
        """Each tree's value for each row, (n_samples, n_trees): regression's "bragging"."""
        out = np.empty((X.shape[0], self.n_trees))
        by_row_chunks(vote_rows, X, parallel, *self._arrays(), *self.leaf_values, TREE_VALUE, out)
        return out

    def apply(self, X: np.ndarray, parallel: bool = True) -> np.ndarray:
        """The leaf each row reaches in each tree, as its row of ``values``:
        ndarray of int64, shape (n_samples, n_trees)."""
        # Each leaf's "value" is its own index: the block routing of tree_predictions, reused.
        leaf_ids = np.arange(len(self.values), dtype=np.float64)[:, None]
        out = np.empty((X.shape[0], self.n_trees))
        by_row_chunks(vote_rows, X, parallel, *self._arrays(), leaf_ids, False, TREE_VALUE, out)
        return out.astype(np.int64)


@kernel(nogil=True)
def _pack_tree(
    is_split,
    children_left,
    children_right,
    feature,
    bin_threshold,
    missing_go_to_left,
    bitset_idx,
    value,
    kind,
    n_nodes,
    node_start,
    leaf_start,
    bitset_start,
    nodes,
    values,
):
    """Write one tree's split nodes and leaf values into the forest's tables.

    Split nodes keep their order (the grower's, depth first) from ``nodes[node_start]`` on, and
    leaves theirs from ``values[leaf_start]`` on; children, leaves and bitset rows get their
    global indices (``PACKED_NODE_DTYPE``).

    Parameters
    ----------
    is_split, children_left, ..., value, kind :
        The tree's split nodes (``Tree.split_nodes``): ``is_split`` packed eight nodes a byte,
        the split fields for split nodes only, and the values of every node (``kind`` is
        ``tree.NODE_VALUES``) or of the leaves only (``LEAF_VALUES``), or its weighted class
        counts, of every node (``NODE_COUNTS``) or of the leaves only (``LEAF_COUNTS``), whose
        fractions the leaves get
        (``tree.node_class_fractions``); or ``_VALUES_WRITTEN``: the caller writes them.
    n_nodes : int
    node_start, leaf_start, bitset_start : int
        Where the tree's split nodes, leaves and bitset rows start in the forest's tables.
    nodes : ndarray of PACKED_NODE_DTYPE
        Written: the tree's split nodes.
    values : ndarray of float64, shape (n_leaves, n_values)
        Written: the tree's leaf values.
    """
    # A node's index among its tree's split nodes, or among its leaves (both in node order).
    index = np.empty(n_nodes, dtype=np.int64)
    n_split = 0
    n_leaf = 0
    for i in range(n_nodes):
        if packed_bit(is_split, i):
            index[i] = node_start + n_split
            n_split += 1
        else:
            index[i] = ~(leaf_start + n_leaf)
            _write_leaf(value, kind, i, n_leaf, values, leaf_start + n_leaf)
            n_leaf += 1
    for j in range(children_left.shape[0]):
        record = nodes[node_start + j]
        record["left"] = index[children_left[j]]
        record["right"] = index[children_right[j]]
        flags = np.uint32(0)
        if missing_go_to_left[j]:
            flags |= np.uint32(PACKED_MISSING_LEFT)
        if bitset_idx[j] >= 0:
            flags |= np.uint32(PACKED_CATEGORICAL)
            record["split"] = np.uint32(bitset_start + bitset_idx[j])
        else:
            record["split"] = np.uint32(bin_threshold[j])
        record["feature"] = np.uint32(feature[j]) | flags


@kernel(inline="always")
def _write_leaf(value, kind, node, leaf, values, row):
    """Write the value of a tree's node ``node``, its leaf ``leaf`` (both counted in node
    order), into ``values[row]``, from ``value`` of kind ``kind`` (``_pack_tree``)."""
    if kind == NODE_VALUES or kind == LEAF_VALUES:
        source = node if kind == NODE_VALUES else leaf
        # Element by element: a row assigned whole compiles numba's shape check and its error
        # message, string formatting included, into a first fit's compilation.
        for c in range(values.shape[1]):
            values[row, c] = value[source, c]
    elif kind != _VALUES_WRITTEN:
        node_class_fractions(value[leaf if kind == LEAF_COUNTS else node], values[row])


@kernel(inline="always")
def _packed_child(child, rank, is_split, node_start, leaf_start):
    """A child's entry in its parent's record: the index of its split node, given its place
    ``rank`` among the split nodes, or ``~leaf`` for a leaf."""
    if is_split:
        return node_start + rank
    return ~(leaf_start + child - rank)


@kernel(nogil=True)
def _pack_depth_first(
    is_split,
    feature,
    bin_threshold,
    missing_bits,
    categorical_bits,
    categorical_bitset_idx,
    n_nodes,
    node_start,
    leaf_start,
    bitset_start,
    nodes,
):
    """``_pack_tree``'s split nodes for a shipped state numbered as the grower numbers a
    depth-first tree (``tree.depth_first_children``), read as it is: no children, split fields
    or node index arrays are made first (the leaf values: ``_write_leaves``).

    The numbering is replayed: the split node taken from the top of a stack gets the next two
    ids, and its children that are split nodes go on the stack, the right one first. Ids are
    given in increasing order, so the split flags of the ids given so far say each child's place
    among the split nodes (its record) or among the leaves: one pass over the split nodes, each
    record written when its node leaves the stack.

    Parameters
    ----------
    is_split, feature, bin_threshold, missing_bits, categorical_bits, categorical_bitset_idx :
        The state's ``is_split``, ``feature``, ``bin_threshold``, ``missing_go_to_left_bits``,
        ``is_categorical_bits`` and ``categorical_bitset_idx`` (``wire.encode``).
    n_nodes, node_start, leaf_start, bitset_start, nodes :
        As ``_pack_tree``'s.

    Raises
    ------
    ValueError
        For flags that do not number such a tree of ``n_nodes`` nodes and ``len(feature)``
        split nodes.
    """
    n_split = feature.shape[0]
    if n_split == 0 or not packed_bit(is_split, 0):
        if n_split != 0 or n_nodes != 1:
            raise ValueError("a tree's split flags do not number its nodes")
        return
    # A categorical split's row among the tree's bitset rows: the categorical splits before it.
    categorical_rank = np.empty(n_split if categorical_bitset_idx.shape[0] else 0, np.int64)
    n_categorical = 0
    for r in range(categorical_rank.shape[0]):
        categorical_rank[r] = n_categorical
        n_categorical += packed_bit(categorical_bits, r)
    stack = np.empty(n_split, dtype=np.int64)  # places among the split nodes
    stack[0] = 0
    top = 1
    n_numbered = 1  # ids given
    n_split_numbered = 1  # split flags among them
    n_popped = 0
    while top > 0:
        top -= 1
        rank = stack[top]
        left = n_numbered
        if left + 1 >= n_nodes or n_popped == n_split:
            raise ValueError("a tree's split flags do not number its nodes")
        n_popped += 1
        n_numbered += 2
        left_split = packed_bit(is_split, left)
        right_split = packed_bit(is_split, left + 1)
        left_rank = n_split_numbered
        right_rank = left_rank + left_split
        n_split_numbered = right_rank + right_split
        if top + left_split + right_split > n_split:
            raise ValueError("a tree's split flags do not number its nodes")
        if right_split:  # the right child first: the left subtree is numbered first
            stack[top] = right_rank
            top += 1
        if left_split:
            stack[top] = left_rank
            top += 1
        record = nodes[node_start + rank]
        record["left"] = _packed_child(left, left_rank, left_split, node_start, leaf_start)
        record["right"] = _packed_child(left + 1, right_rank, right_split, node_start, leaf_start)
        flags = np.uint32(0)
        if packed_bit(missing_bits, rank):
            flags |= np.uint32(PACKED_MISSING_LEFT)
        if categorical_rank.shape[0] and packed_bit(categorical_bits, rank):
            flags |= np.uint32(PACKED_CATEGORICAL)
            row = categorical_bitset_idx[categorical_rank[rank]]
            record["split"] = np.uint32(bitset_start + row)
        else:
            record["split"] = np.uint32(bin_threshold[rank])
        record["feature"] = np.uint32(feature[rank]) | flags
    if n_numbered != n_nodes or n_popped != n_split:
        raise ValueError("a tree's split flags do not number its nodes")


@kernel(nogil=True)
def _write_leaves(is_split, value, kind, n_nodes, leaf_start, values):
    """Write a tree's leaf values into ``values`` from ``values[leaf_start]`` on, in node order
    (``_pack_tree``'s ``value`` and ``kind``; a pass of its own: the split nodes' pass of
    ``_pack_depth_first`` ran slower with these writes in it)."""
    n_leaf = 0
    for i in range(n_nodes):
        if not packed_bit(is_split, i):
            _write_leaf(value, kind, i, n_leaf, values, leaf_start + n_leaf)
            n_leaf += 1

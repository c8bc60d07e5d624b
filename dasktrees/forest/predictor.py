"""PackedForest: fitted trees packed in flat arrays, and the kernels that vote with them.

All trees' split nodes are concatenated into one table of 16-byte records, and their leaves'
values into another; ``roots[t]`` is tree t's root (``~leaf`` for a tree that is one leaf):

    nodes   [ tree 0: split nodes | tree 1: split nodes | ... ]     children ids are global;
                                                                     a child k < 0 is leaf ~k
    values  [ tree 0: leaves | tree 1: leaves | ... ]               one row of class fractions
                                                                     (or a mean) per leaf, or
                                                                     of class counts

Nodes route on the rows' bin codes (``BinMapper``): a numeric split at bin b sends a row left when
its code is at most b, which is exactly ``x <= threshold`` since the raw threshold is bin b's upper
edge. So a node needs no float threshold, and the kernels bin each block of rows as they go.

Prediction runs chunks of rows in threads; each chunk bins a block of rows and sends the whole
block through the trees one after the other (``_route_block``), so a row's votes are summed in
tree order: the same sums in any thread or process, bit for bit those of each tree's own
``Tree.predict`` added up in order.

A forest of classification trees whose leaves' weighted class counts are whole numbers below
2**16 (bootstrap counts) keeps those counts, two bytes each, instead of float64 fractions
(``leaf_counts``): the kernels divide a leaf's counts by their sum as they read it, the same
division ``tree.node_class_fractions`` makes, so the votes are the same bits. Its trees then
keep their leaves' counts and their bitsets as views of the forest's tables, not copies of
their own: the client holds each forest once (docs/forests.md).
"""

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from numba import njit

from ..core.bitsets import bitset_has
from ..core.dtypes import (
    BITSET_DTYPE,
    BITSET_WORDS,
    MISSING_BIN,
    PACKED_CATEGORICAL,
    PACKED_FEATURE_MASK,
    PACKED_MISSING_LEFT,
    PACKED_NODE_DTYPE,
    X_BINNED_DTYPE,
)
from ..learner.binning import _bin_code
from ..learner.tree import (
    LEAF_COUNTS,
    LEAF_VALUES,
    NODE_VALUES,
    class_fractions,
    node_class_fractions,
    packed_bit,
    shipped_values,
)

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

SOFT = 0  # sum class fractions (or means); divide by the number of trees
HARD = 1  # one vote per tree for its majority class
TREE_VALUE = 2  # each tree's value, one column per tree


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

    def __init__(self, trees, bin_mapper):
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
        self.leaf_counts = all(
            s is not None and s.get("leaf_class_counts", np.empty(0)).dtype in _PACKABLE_COUNTS
            for s in states
        )
        # What the trees hold of their leaves that the forest holds as it is, the trees then
        # keeping views of it: a classifier's leaf counts, a regressor's leaf means.
        shared = "leaf_class_counts" if self.leaf_counts else "leaf_value"
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
        # the new tables' pages, which two cores do nearly twice as fast.
        with ThreadPoolExecutor(numba.get_num_threads()) as pool:
            list(pool.map(pack, range(len(trees))))  # list(): raise the first error
        self._trees = trees  # what ``packs`` compares with

    def packs(self, trees):
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
    def n_trees(self):
        return len(self.roots)

    @property
    def leaf_values(self):
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

    def vote(self, X, voting=SOFT, parallel=True):
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
        leaf_values = self.leaf_values
        if self.leaf_counts and X.shape[0] * self.n_trees >= len(self.values):
            # More leaf visits than leaves: divide every leaf's counts once, into a table
            # dropped after the call, rather than at each visit (the same fractions).
            fractions = np.empty(self.values.shape)
            class_fractions(self.values.astype(np.float64), fractions, np.empty(len(fractions)))
            leaf_values = fractions, False
        _by_row_chunks(_vote_rows, X, parallel, *self._arrays(), *leaf_values, voting, out)
        out /= self.n_trees
        return out

    def tree_predictions(self, X, parallel=True):
        """Each tree's value for each row, (n_samples, n_trees): regression's "bragging"."""
        out = np.empty((X.shape[0], self.n_trees))
        _by_row_chunks(_vote_rows, X, parallel, *self._arrays(), *self.leaf_values, TREE_VALUE, out)
        return out

    def apply(self, X, parallel=True):
        """The leaf each row reaches in each tree, as its row of ``values``:
        ndarray of int64, shape (n_samples, n_trees)."""
        # Each leaf's "value" is its own index: the block routing of tree_predictions, reused.
        leaf_ids = np.arange(len(self.values), dtype=np.float64)[:, None]
        out = np.empty((X.shape[0], self.n_trees))
        _by_row_chunks(_vote_rows, X, parallel, *self._arrays(), leaf_ids, False, TREE_VALUE, out)
        return out.astype(np.int64)


@njit(cache=True, nogil=True)
def leaves_of_codes(codes, nodes, bitsets, roots, max_depth, n_leaves, out):
    """The leaf (row of ``PackedForest.values``) each row of binned ``codes`` reaches in each
    tree: ``out[i, t]``, ndarray of int64, shape (n_rows, n_trees).

    Blocks of rows go down each tree together (``_route_block``), as prediction's do; the
    training blocks' codes are copied a block at a time into the column order it reads."""
    n = min(_ROWS_PER_BLOCK, codes.shape[0])
    block_codes = np.empty((codes.shape[1], n), dtype=X_BINNED_DTYPE).T
    rows = np.empty((2, n), dtype=np.int64)
    stack = np.empty((max_depth + 2, 4), dtype=np.int64)
    leaf_ids = np.arange(n_leaves).astype(np.float64).reshape(n_leaves, 1)
    tree_leaves = np.empty((n, roots.shape[0]))
    for first in range(0, codes.shape[0], _ROWS_PER_BLOCK):
        m = min(_ROWS_PER_BLOCK, codes.shape[0] - first)
        block_codes[:m] = codes[first : first + m]
        for t in range(roots.shape[0]):
            _route_block(
                block_codes,
                m,
                nodes,
                bitsets,
                roots[t],
                rows,
                stack,
                leaf_ids,
                False,
                TREE_VALUE,
                tree_leaves,
                t,
            )
        for i in range(m):
            for t in range(roots.shape[0]):
                out[first + i, t] = np.int64(tree_leaves[i, t])


@njit(cache=True, nogil=True)
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


@njit(cache=True, inline="always")
def _write_leaf(value, kind, node, leaf, values, row):
    """Write the value of a tree's node ``node``, its leaf ``leaf`` (both counted in node
    order), into ``values[row]``, from ``value`` of kind ``kind`` (``_pack_tree``)."""
    if kind == NODE_VALUES or kind == LEAF_VALUES:
        source = node if kind == NODE_VALUES else leaf
        # Element by element: a row assigned whole compiles numba's shape check and its error
        # message, string formatting included (two seconds of a first fit's compilation).
        for c in range(values.shape[1]):
            values[row, c] = value[source, c]
    elif kind != _VALUES_WRITTEN:
        node_class_fractions(value[leaf if kind == LEAF_COUNTS else node], values[row])


@njit(cache=True, inline="always")
def _packed_child(child, rank, is_split, node_start, leaf_start):
    """A child's entry in its parent's record: the index of its split node, given its place
    ``rank`` among the split nodes, or ``~leaf`` for a leaf."""
    if is_split:
        return node_start + rank
    return ~(leaf_start + child - rank)


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def _write_leaves(is_split, value, kind, n_nodes, leaf_start, values):
    """Write a tree's leaf values into ``values`` from ``values[leaf_start]`` on, in node order
    (``_pack_tree``'s ``value`` and ``kind``; a pass of its own: the split nodes' pass of
    ``_pack_depth_first`` ran several times slower with these writes in it)."""
    n_leaf = 0
    for i in range(n_nodes):
        if not packed_bit(is_split, i):
            _write_leaf(value, kind, i, n_leaf, values, leaf_start + n_leaf)
            n_leaf += 1


@njit(cache=True, inline="always")
def _leaf(codes, i, nodes, bitsets, k, override_feature, override_code):
    """Leaf reached by row i of binned ``codes`` from packed node ``k`` (a ``roots`` entry).

    Feature ``override_feature`` (if >= 0) reads ``override_code`` instead of the row's own
    code (permutation importance). Returns the leaf's row of the forest's ``values``.
    """
    while k >= 0:
        node = nodes[k]
        word = node["feature"]
        f = np.int64(word & PACKED_FEATURE_MASK)
        code = override_code if f == override_feature else np.int64(codes[i, f])
        k = node["left"] if _goes_left(word, node["split"], code, bitsets) else node["right"]
    return ~k


@njit(cache=True, inline="always")
def _goes_left(word, split, code, bitsets):
    """Whether a row whose bin code is ``code`` goes to the left child of a packed node, given
    the node's ``feature`` word (feature and flags) and ``split`` (bin threshold, or bitset row
    of a categorical split)."""
    if code == MISSING_BIN:
        return (word & PACKED_MISSING_LEFT) != 0
    if word & PACKED_CATEGORICAL:
        return bitset_has(bitsets[split], code) == 1
    return code <= split


@njit(cache=True, inline="always")
def _bin_rows(X, start, stop, thresholds, is_categorical, codes):
    """Bin codes of rows ``start:stop`` of encoded X into ``codes[:stop - start]``: numeric
    values as ``BinMapper.transform`` bins them, category codes as they are, NaN as
    MISSING_BIN."""
    for i in range(start, stop):
        for f in range(X.shape[1]):
            x = X[i, f]
            if is_categorical[f]:
                codes[i - start, f] = MISSING_BIN if np.isnan(x) else np.uint8(x)
            else:
                codes[i - start, f] = _bin_code(x, thresholds[f])


# Rows a chunk bins and routes at a time. Every tree is walked once per block: the more rows go
# down it together, the deeper they share its nodes, fetched once for all of them (smaller
# blocks were slower on deep forests, docs/benchmarks.md).
_ROWS_PER_BLOCK = 65536
# Rows that no longer split a node together: each walks on alone (``_route_block``).
_ROWS_WALKED_ALONE = 8


@njit(cache=True, nogil=True)
def _route_block(codes, n_rows, nodes, bitsets, root, rows, stack, values, counts, how, out, t):
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
            # range, not per row (a choice per row slowed voting by 18 %), but for leaf counts,
            # which only calls of few rows divide at each visit (``PackedForest.vote``).
            if counts:
                for j in range(first, stop):
                    leaf = _leaf(codes, src[j], nodes, bitsets, k, -1, 0)
                    row = _leaf_value(values, counts, leaf, value)
                    if how == SOFT:
                        for c in range(row.shape[0]):
                            out[src[j], c] += row[c]
                    elif how == HARD:
                        out[src[j], np.argmax(row)] += 1.0
                    else:
                        out[src[j], t] = row[0]
            elif how == SOFT:
                for j in range(first, stop):
                    leaf = _leaf(codes, src[j], nodes, bitsets, k, -1, 0)
                    for c in range(values.shape[1]):
                        out[src[j], c] += values[leaf, c]
            elif how == HARD:
                for j in range(first, stop):
                    leaf = _leaf(codes, src[j], nodes, bitsets, k, -1, 0)
                    out[src[j], np.argmax(values[leaf])] += 1.0
            else:
                for j in range(first, stop):
                    out[src[j], t] = values[_leaf(codes, src[j], nodes, bitsets, k, -1, 0), 0]
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


@njit(cache=True, nogil=True)
def _vote_rows(
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
        SOFT and HARD: rows ``start:stop`` zero on entry, written: the sums, trees added in
        order. TREE_VALUE: ``out[i, t]`` is tree t's value (first column) for row i.
    """
    n = min(_ROWS_PER_BLOCK, stop - start)
    # Feature by feature (Fortran order): a node's partition reads one feature of many rows.
    codes = np.empty((X.shape[1], n), dtype=X_BINNED_DTYPE).T
    rows = np.empty((2, n), dtype=np.int64)
    stack = np.empty((max_depth + 2, 4), dtype=np.int64)
    for block in range(start, stop, _ROWS_PER_BLOCK):
        n = min(_ROWS_PER_BLOCK, stop - block)
        _bin_rows(X, block, block + n, thresholds, is_categorical, codes)
        for t in range(roots.shape[0]):
            _route_block(
                codes, n, nodes, bitsets, roots[t], rows, stack, values, counts, how, out[block:], t
            )


@njit(cache=True, inline="always")
def _leaf_value(values, counts, leaf, value):
    """The value of ``leaf`` (a row of ``PackedForest.values``), written to ``value`` and
    returned: the row, or with ``counts`` the class fractions of its counts (the grower's
    division, ``tree.node_class_fractions``). One float64 type whatever the table's."""
    if counts:
        node_class_fractions(values[leaf], value)
    else:
        for c in range(value.shape[0]):
            value[c] = values[leaf, c]
    return value


@njit(cache=True, inline="always")
def _add_vote(values, counts, leaf, voting, value, out_row):
    """Add a tree's vote from ``leaf`` to ``out_row``: its value (SOFT), or one for its class
    of largest value (HARD). ``value`` is scratch for ``_leaf_value``."""
    if counts:
        row = _leaf_value(values, counts, leaf, value)
        if voting == HARD:
            out_row[np.argmax(row)] += 1.0
        else:
            for c in range(row.shape[0]):
                out_row[c] += row[c]
    # The values read in place: a copy per visit (through ``value``) slowed voting by 10-20 %.
    elif voting == HARD:
        out_row[np.argmax(values[leaf])] += 1.0
    else:
        for c in range(values.shape[1]):
            out_row[c] += values[leaf, c]


# Rows per thread's chunk, at most: a chunk is cut in blocks anyway (``_ROWS_PER_BLOCK``).
_ROWS_PER_CHUNK = 65536
# Fewer rows than this run in the calling thread: starting threads costs more than they save.
_MIN_PARALLEL_ROWS = 64


def _by_row_chunks(kernel, X, parallel, *args):
    """Run ``kernel(X, start, stop, *args)`` over chunks of rows, in threads if ``parallel``.

    The kernels release the GIL. Threads, not a numba ``prange``: numba's parallel lowering of
    the traversal ran twice as slow per thread as the same serial code, and a plain
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


@njit(cache=True, nogil=True)
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
            leaf = _leaf(codes, i, nodes, bitsets, root, -1, 0)
            _add_vote(values, leaf_counts, leaf, voting, value, votes[i])
            n_oob[i] += 1.0


@njit(cache=True, nogil=True)
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
            leaf = _leaf(codes, i, nodes, bitsets, root, -1, 0)
            row = _leaf_value(values, leaf_counts, leaf, value)
            for c in range(row.shape[0]):
                sums[i, c] += row[c]
                squares[i, c] += row[c] * row[c]
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


def one_hot_votes(values):
    """Each row's vote for its class of largest value, one-hot (the first of equal ones), as
    HARD voting counts a tree's vote from its leaf: ndarray of float64, the shape of
    ``values`` (n_nodes, n_classes)."""
    votes = np.zeros_like(values, dtype=np.float64)
    votes[np.arange(len(values)), np.argmax(values, axis=1)] = 1.0
    return votes


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
        partial = sum(int(p) for p in partials)
        # A subnormal's shift is negative, and its integer's low -shift bits are zeros.
        total += partial << int(shift) if shift >= 0 else partial >> int(-shift)
    return total


def from_exact(total):
    """The float nearest to an ``exact_sum`` total."""
    return total / 2**1074


@njit(cache=True, nogil=True)
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
        leaf = _leaf(codes, i, nodes, bitsets, root, feature, code)
        row = _leaf_value(values, leaf_counts, leaf, value)
        if classification:
            total += 0.0 if np.argmax(row) == np.int64(y[i]) else 1.0
        else:
            total += (row[0] - y[i]) ** 2
    return total

"""What a forest task ships of each tree it grows, and how the client keeps and expands it.

A full-depth tree has about one node per one or two training rows, and a forest fit moves every
tree from its worker to the client: the flights benchmark's trees have 126,000 nodes each. The
bytes cost twice, in pickling and sending on the worker and in receiving into fresh memory on
the client, so a task ships the tree's compact state (split fields for split nodes only, no
depths) without what can be derived again exactly:

* a numeric split's raw threshold (``thresholds[feature, bin_threshold]``, the bin table), a
  right child (the node after the left one, as the grower numbers them), and the split flags
  beyond a bit each (``_put_split_fields``);
* a classification node's class fractions and weight, from its weighted class counts (the
  weight is their sum, as the grower computes it: ``tree.class_fractions``), and its impurity
  from those (``criteria.class_impurity``);
* a split node's rows, weight and class counts, its children's summed (``_put_summable``),
  and a regression split node's mean and impurity, its children's pooled (``_put_moments``);
* a regression leaf's impurity when it is zero, as most are in a full-depth tree (a bit a
  leaf says which are not, ``put_leaf_impurity``);
* whole numbers travel in the narrowest unsigned type holding them (children, feature indices,
  bitset rows, bootstrap counts).

The client keeps each tree in this state (``Tree.shipped``): packing the forest for prediction
reads the split fields as they are, and the scikit-learn arrays are expanded from it
(``tree.expand_shipped``) only when something asks for them. Expanding every tree as it arrived
took the client longer than receiving it, on a core the workers' growth needs
(docs/benchmarks.md).
"""

from typing import NamedTuple

import numpy as np

from ..core.criteria import is_regression
from ..core.dtypes import BITSET_DTYPE, BITSET_WORDS, NODE_DTYPE, TREE_LEAF, TREE_UNDEFINED
from ..core.kernel_cache import kernel
from .buffers import scratch_array
from .tree import (
    LEAF_CONSTANTS,
    NODE_ARRAY_DTYPES,
    Tree,
    fields_from_records,
    node_class_impurities,
    number_depth_first,
    pool_to_root,
    shipped_outputs,
)


def encode(
    nodes,
    values,
    bitsets,
    thresholds,
    n_features,
    criterion,
    buffers=None,
    depth_first=False,
    exact=False,
    n_outputs=1,
):
    """The shipped state of the tree ``Tree.from_growth(nodes, values, bitsets, thresholds,
    n_features, criterion, exact, n_outputs)`` would build (``grower.grow`` records,
    ``criterion`` the tree's).

    A classifier ships its nodes' weighted class counts instead of their fractions and weights,
    which the client derives from them bit for bit (``tree.class_fractions``); of its leaves
    only when the split nodes' are their children's summed (``_put_summable``). A regressor
    ships its leaves' means and impurities (``put_leaf_impurity``), from which the client
    pools its split nodes' as ``Tree.from_growth`` does (``tree.pool_to_root``).

    ``buffers`` (``buffers.Buffers``, optional) holds the intermediate arrays; the state's own
    arrays are always new. ``depth_first``: the records are a tree the grower grew depth first
    (no ``max_leaf_nodes``), numbered as ``tree.depth_first_children`` numbers it, which is then
    not checked again. ``exact`` (``GrowthParams.own_moments``: monotonic constraints, whose
    clipped values do not give the nodes' impurities, or Poisson deviances, which do not pool as
    variances): every node's impurity shipped as grown, and a regressor's every node's
    mean (``Tree.from_growth``'s ``exact``). ``n_outputs``: a classifier's class columns,
    kept in the state (``"n_outputs"``) when more than one.
    """
    is_split = scratch_array(buffers, "is_split", len(nodes), bool)
    # The split fields have room for every node; the first n_split are written.
    compact = {
        name: scratch_array(buffers, name, len(nodes), NODE_ARRAY_DTYPES[name])
        for name in LEAF_CONSTANTS
    }
    per_node = {
        "n_node_samples": scratch_array(
            buffers, "n_node_samples", len(nodes), _count_dtype(nodes["n_samples"])
        ),
        "weighted_n_node_samples": scratch_array(
            buffers, "weighted_n_node_samples", len(nodes), np.float64
        ),
        "impurity": scratch_array(buffers, "impurity", len(nodes), np.float64),
    }
    no_depths = np.empty(0, dtype=np.int32)
    n_split, max_depth = fields_from_records(
        nodes, thresholds, True, *compact.values(), *per_node.values(), no_depths, is_split
    )
    compact = {name: fields[:n_split] for name, fields in compact.items()}
    kinds = _node_kinds(is_split, buffers)
    state = {
        "n_features": n_features,
        "is_split": np.packbits(is_split),
        "max_depth": int(max_depth),
        "n_nodes": len(nodes),
        "wire": True,
    }
    _put_split_fields(state, compact, n_features, bitsets, buffers, depth_first)
    _put_summable(state, kinds, compact, "n_node_samples", per_node["n_node_samples"], buffers)
    if exact:
        state["impurity"] = per_node["impurity"].copy()  # its own: per_node is scratch
    if is_regression(criterion) and exact:
        state["value"] = np.array(values, order="C")
        weights = per_node["weighted_n_node_samples"]
        _put_summable(state, kinds, compact, "weighted_n_node_samples", weights, buffers)
    elif is_regression(criterion):
        # The leaves' means and impurities: the client pools the split nodes' from them, as
        # ``Tree.from_growth`` does (``tree.pool_to_root``).
        state["leaf_value"] = _leaf_rows(values, kinds.leaves)
        leaf_impurity = scratch_array(buffers, "leaf_impurity", len(kinds.leaves), np.float64)
        # mode="clip" (the positions are valid): with "raise" numpy fills a temporary first
        np.take(per_node["impurity"], kinds.leaves, out=leaf_impurity, mode="clip")
        put_leaf_impurity(state, leaf_impurity)
        weights = per_node["weighted_n_node_samples"]
        _put_summable(state, kinds, compact, "weighted_n_node_samples", weights, buffers)
    else:
        _put_summable(state, kinds, compact, "weighted_class_counts", values, buffers)
        state["criterion"] = criterion
        _put_outputs(state, n_outputs)
    return state


def _put_outputs(state, n_outputs):
    """Keep a classifier's ``n_outputs`` class columns in its state, when more than one: a
    single-output state stays as it was."""
    if n_outputs > 1:
        state["n_outputs"] = int(n_outputs)


def _put_split_fields(state, compact, n_features, bitsets, buffers=None, depth_first=False):
    """Put a tree's split fields (``compact``: ``LEAF_CONSTANTS``' fields at its split nodes,
    and ``bitsets`` its categorical bitset table) in a shipped state, with nothing that can be
    derived: a numeric split's raw threshold (``thresholds[feature, bin_threshold]``, the bin
    table) and ``is_categorical`` (a bit, below); no children at all when they are numbered as
    the grower numbers a depth-first tree (``tree.depth_first_children``: every grown tree but
    a best-first one, ``max_leaf_nodes``; pruning keeps the numbering), else ``children_left``,
    and ``children_right`` unless it is ``children_left + 1`` at every split, as the grower
    numbers children; one bit a split for ``missing_go_to_left`` and for being categorical,
    and a bitset row for categorical splits only; no bitsets for a tree without a categorical
    split (``tree.split_fields`` gives the fields back). Children (node ids), feature indices
    and bitset rows take the narrowest unsigned type: a tree of fewer than 65,536 nodes sends
    its children as two bytes each. ``state`` must hold ``is_split`` and ``n_nodes``; with
    ``depth_first`` the children are known to be numbered depth first (a grower's tree)."""
    left, right = compact["children_left"], compact["children_right"]
    if not (depth_first or _numbered_depth_first(state, left, right, buffers)):
        node_id = narrowest_uint(max(left.max(initial=0), right.max(initial=0)))
        state["children_left"] = left.astype(node_id)
        if not np.array_equal(right, left + 1):
            state["children_right"] = right.astype(node_id)
    state["feature"] = compact["feature"].astype(feature_dtype(n_features))
    state["bin_threshold"] = np.array(compact["bin_threshold"])  # its own: compact is scratch
    flags = scratch_array(buffers, "flags", len(left), bool)
    state["missing_go_to_left_bits"] = np.packbits(
        np.not_equal(compact["missing_go_to_left"], 0, out=flags)
    )
    bitset_idx = compact["bitset_idx"]
    categorical = np.greater_equal(bitset_idx, 0, out=flags)
    state["is_categorical_bits"] = np.packbits(categorical)
    state["categorical_bitset_idx"] = bitset_idx[categorical].astype(
        narrowest_uint(len(bitsets) - 1)
    )
    if not categorical.any():
        bitsets = bitsets[:0]
    state["categorical_bitsets"] = np.ascontiguousarray(bitsets, dtype=BITSET_DTYPE)


def _numbered_depth_first(state, left, right, buffers=None):
    """Whether a tree's split nodes' children (``left``, ``right``) are those its flags give
    when numbered as the grower numbers a depth-first tree (``tree.depth_first_children``)."""
    if not _right_after_left(left, right):
        return False
    n_nodes = state["n_nodes"]
    implied = scratch_array(buffers, "implied", len(left), np.int32)
    rank = scratch_array(buffers, "rank", max(n_nodes, 1), np.int64)
    stack = scratch_array(buffers, "stack", max(len(left), 1), np.int64)
    n_numbered = number_depth_first(state["is_split"], n_nodes, implied, rank, stack)
    return n_numbered == n_nodes and np.array_equal(implied, left)


@kernel(nogil=True)
def _right_after_left(left, right):
    """Whether ``right[k] == left[k] + 1`` for every split ``k`` (``np.array_equal(right, left +
    1)`` without the temporary array)."""
    if left.shape[0] != right.shape[0]:
        return False
    for k in range(left.shape[0]):
        if right[k] != left[k] + 1:
            return False
    return True


class _NodeKinds(NamedTuple):
    """A tree's nodes by kind: their flags and the positions of each kind, in node order."""

    is_split: np.ndarray  # bool (n_nodes,)
    splits: np.ndarray  # int64 (n_split,): the split nodes
    leaves: np.ndarray  # int64 (n_leaves,): the leaves


def _node_kinds(is_split, buffers=None):
    """``_NodeKinds`` of the flags ``is_split`` (bools), the positions in ``buffers``' arrays
    when given (``np.flatnonzero`` without new arrays)."""
    n_split = int(np.count_nonzero(is_split))
    # One slot more each: ``_positions_of_kinds`` writes past the last node of a kind.
    splits = scratch_array(buffers, "splits", n_split + 1, np.int64)
    leaves = scratch_array(buffers, "leaves", len(is_split) - n_split + 1, np.int64)
    _positions_of_kinds(is_split, splits, leaves)
    return _NodeKinds(is_split, splits[:n_split], leaves[: len(is_split) - n_split])


@kernel(nogil=True)
def _positions_of_kinds(is_split, splits, leaves):
    """Write the positions of the split nodes into ``splits`` and of the leaves into ``leaves``
    (each with a slot to spare). Every position is written to both and only its own kind's count
    moves on: whether a node is a split is a coin flip in node order, and a branch on it was
    mispredicted as often."""
    n_split = 0
    n_leaves = 0
    for i in range(is_split.shape[0]):
        split = np.int64(is_split[i])
        splits[n_split] = i
        leaves[n_leaves] = i
        n_split += split
        n_leaves += 1 - split


def _put_summable(state, kinds, compact, name, per_node, buffers=None):
    """Put a per-node quantity (``name``: ``SUMMABLE``) in a shipped state (``kinds`` its
    nodes' ``_NodeKinds``; ``compact`` its split nodes' children): as ``SUMMABLE[name]``, its
    leaves' rows only, when every split node's row is exactly its children's summed, left plus
    right, as ``tree.sum_to_root`` gives it back (row counts after any growth; weights and
    weighted class counts when the weights are whole numbers, bootstrap counts among them),
    in the narrowest unsigned type if they are whole numbers (``narrow_counts``); else every
    node's, as ``name`` (class counts narrowed too)."""
    left, right = compact["children_left"], compact["children_right"]
    rows = np.asarray(per_node).reshape(len(per_node), -1)
    if _summed_by_children(rows, kinds.splits, left, right):
        shape = (len(kinds.leaves), rows.shape[1])
        leaf_rows = scratch_array(buffers, "leaf_rows", shape, rows.dtype)
        np.take(rows, kinds.leaves, axis=0, out=leaf_rows, mode="clip")  # no temporary
        narrowed = narrow_counts(leaf_rows)  # a new array, not the buffer
        state[SUMMABLE[name]] = narrowed.reshape((-1,) + np.shape(per_node)[1:])
    elif name == "weighted_class_counts":
        state[name] = narrow_counts(per_node)  # a new array: per_node may be the workspace
    else:
        state[name] = np.array(per_node, order="C")


def _leaf_rows(per_node, leaves):
    """The leaves' rows of a per-node array (``leaves`` their positions, ``_NodeKinds``), as a
    new C-contiguous array. By position: a boolean index took several times longer on the class
    counts of a tree, and ``np.compress`` on the flags made their negation first
    (docs/benchmarks.md); mode="clip" (the positions are valid): with "raise" numpy fills a
    temporary first."""
    return np.take(per_node, leaves, axis=0, mode="clip")


@kernel(nogil=True)
def _summed_by_children(per_node, split, left, right):
    """Whether row ``split[k]`` of ``per_node`` equals row ``left[k]`` plus row ``right[k]``,
    exactly, as float64 (counts below 2**53 and their sums are exact there), for every ``k``.

    A pass without the gathered copies that numpy's fancy indexing makes: those took most of
    the time a task spent encoding a tree (docs/benchmarks.md).

    Parameters
    ----------
    per_node : ndarray, shape (n_nodes, n_columns)
    split, left, right : ndarray of int, shape (n_split,)
        The split nodes and their children.
    """
    for k in range(split.shape[0]):
        for c in range(per_node.shape[1]):
            total = np.float64(per_node[left[k], c]) + np.float64(per_node[right[k], c])
            if np.float64(per_node[split[k], c]) != total:
                return False
    return True


# The per-node quantities a shipped state may hold for its leaves only (``_put_summable``), and
# the name it then holds them under.
SUMMABLE = {
    "n_node_samples": "leaf_n_node_samples",
    "weighted_n_node_samples": "leaf_weighted_n_node_samples",
    "weighted_class_counts": "leaf_class_counts",
}


def state_of(tree, criterion, class_counts=None, n_outputs=1):
    """The ``encode`` state of a fitted ``tree`` (criterion ``criterion``): a shipped tree's
    own, or that of a tree with its arrays (a single tree, a pruned one), whose raw thresholds
    and classification impurities are the ones ``encode`` drops as derived. A classifier's
    ``class_counts`` (n_nodes, n_classes), its nodes' weighted class counts, are shipped
    instead of its fractions and weights, as ``encode`` ships them (the fractions derived from
    them are ``tree.value`` when they are the counts it was made from). ``n_outputs``: a
    classifier's class columns."""
    if tree.shipped_state is not None:
        return tree.shipped_state
    is_split = tree.children_left != TREE_LEAF
    compact = tree._split_only_fields()
    state = {
        "n_features": tree.n_features,
        "is_split": np.packbits(is_split),
        "max_depth": tree.max_depth,
        "n_nodes": tree.node_count,
        "wire": True,
    }
    _put_split_fields(state, compact, tree.n_features, tree.categorical_bitsets)
    n_node_samples = tree.n_node_samples.astype(_count_dtype(tree.n_node_samples))
    kinds = _node_kinds(is_split)
    _put_summable(state, kinds, compact, "n_node_samples", n_node_samples)
    if not is_regression(criterion):
        _put_outputs(state, n_outputs)
    if not is_regression(criterion) and class_counts is not None:
        _put_summable(state, kinds, compact, "weighted_class_counts", class_counts)
        state["criterion"] = criterion
        return _with_own_impurities(state, tree, criterion)
    weights = tree.weighted_n_node_samples
    _put_summable(state, kinds, compact, "weighted_n_node_samples", weights)
    if is_regression(criterion):
        _put_moments(state, kinds, compact, tree.value, tree.impurity, weights)
        return state
    state["value"] = tree.value
    state["criterion"] = criterion
    return _with_own_impurities(state, tree, criterion)


def _with_own_impurities(state, tree, criterion):
    """A classifier's ``state`` with the tree's impurities when its class fractions do not
    give them (monotonic constraints clip the fractions, not the impurities)."""
    derived = np.empty(tree.node_count)
    node_class_impurities(
        tree.value, tree.weighted_n_node_samples, criterion, derived, shipped_outputs(state)
    )
    if not np.array_equal(derived, tree.impurity):
        state["impurity"] = tree.impurity
    return state


def _put_moments(state, kinds, compact, value, impurity, weights):
    """Put a regression tree's means and impurities (every node's ``value``, ``impurity``, and
    ``weights``) in a shipped state: its leaves' only (``leaf_value``, and the impurities as
    ``put_leaf_impurity`` puts them) when every split node's are its children's pooled
    (``tree.pool_to_root``), as a grown tree's are, bit for bit; else every node's
    (a tree whose split nodes hold other numbers: built or edited outside the grower)."""
    pooled_value, pooled_impurity = value.copy(), impurity.copy()
    left, right = compact["children_left"], compact["children_right"]
    pool_to_root(state["is_split"], left, right, weights, pooled_value, pooled_impurity)
    if np.array_equal(pooled_value, value) and np.array_equal(pooled_impurity, impurity):
        state["leaf_value"] = _leaf_rows(value, kinds.leaves)
        put_leaf_impurity(state, _leaf_rows(impurity, kinds.leaves))
    else:
        state["value"], state["impurity"] = value, impurity


# The arrays ``put_leaf_impurity`` puts in a shipped state.
NONZERO_LEAF_IMPURITY = ("nonzero_leaf_impurity_bits", "nonzero_leaf_impurity")


def put_leaf_impurity(state, leaf_impurity):
    """Put a regressor's leaves' impurities in a shipped state: the leaves whose impurity is not
    zero as bits (``nonzero_leaf_impurity_bits``, ``np.packbits``, a bit a leaf in node order),
    and those impurities (``nonzero_leaf_impurity``). In a full-depth tree most leaves hold the
    rows of one training row or of equal targets: 97 % of a diamonds forest's leaves have
    impurity zero, whose 8 bytes each were a fifth of the forest's memory (docs/benchmarks.md).
    ``tree.leaf_impurities`` gives every leaf's back, bit for bit (a zero is +0.0: an impurity
    is never -0.0, and one would be kept as not zero)."""
    leaf_impurity = np.ascontiguousarray(leaf_impurity, dtype=np.float64)
    nonzero = leaf_impurity.view(np.uint64) != 0  # bits: +0.0 only
    state["nonzero_leaf_impurity_bits"] = np.packbits(nonzero)
    state["nonzero_leaf_impurity"] = leaf_impurity[nonzero]


def decode(state, thresholds):
    """The tree of an ``encode`` state, given the same bin ``thresholds`` table, kept in that
    state until its arrays are asked for (or of a ``Tree.__getstate__`` state, which needs
    none)."""
    if state.get("wire", False):
        return Tree.shipped(state, thresholds)
    tree = Tree.__new__(Tree)
    tree.__setstate__(state)
    return tree


def stump(thresholds, n_values, criterion, whole_counts=False):
    """The ``encode`` state of a three-node tree (a root split on feature 0 at bin 0, and two
    leaves) with ``n_values`` values per node: what ``decode`` and packing compile their
    kernels for, without growing a tree.

    The values are ``1 / n_values`` at every node, which a classifier ships as every node's
    counts (as fractional weights make it), or with ``whole_counts`` one row of class 0 and one
    of the last class in the leaves and their sum at the root, which it ships as its leaves'
    whole counts (as bootstrap counts and unit weights make it)."""
    nodes = np.zeros(3, dtype=NODE_DTYPE)
    nodes["feature"] = [0, TREE_UNDEFINED, TREE_UNDEFINED]
    nodes["bitset_idx"] = -1
    nodes["left"] = [1, TREE_LEAF, TREE_LEAF]
    nodes["right"] = [2, TREE_LEAF, TREE_LEAF]
    nodes["parent"] = [-1, 0, 0]
    nodes["depth"] = [0, 1, 1]
    nodes["start"] = [0, 0, 1]
    nodes["stop"] = [2, 1, 2]
    nodes["n_samples"] = [2, 1, 1]
    nodes["weighted_n_samples"] = [2.0, 1.0, 1.0]
    values = np.full((3, n_values), 1.0 / n_values)
    if whole_counts:
        values[:] = 0.0
        values[1, 0] = values[2, -1] = 1.0
        values[0] = values[1] + values[2]
    no_bitsets = np.empty((0, BITSET_WORDS), dtype=BITSET_DTYPE)
    return encode(nodes, values, no_bitsets, thresholds, len(thresholds), criterion)


def _count_dtype(n_samples):
    """int32 for row counts when the root's (``n_samples[0]``) fits: every node holds at most
    the root's rows."""
    return np.int32 if len(n_samples) == 0 or n_samples[0] < 2**31 else np.int64


def narrowest_uint(largest):
    """The narrowest unsigned integer type holding 0 .. ``largest``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if largest <= np.iinfo(dtype).max:
            return dtype
    return np.uint64


def narrow_counts(counts):
    """``counts`` in the narrowest unsigned integer type that holds them exactly when they are
    all whole numbers from 0 to 2**32 - 1 (bootstrap counts), else as they are (float64
    weighted counts): ``counts.astype(np.float64)`` gives them back bit for bit. Always a new
    C-contiguous array: ``counts`` may be scratch (a task's workspace) that the next tree
    overwrites."""
    counts = np.asarray(counts)
    if counts.dtype.kind in "ui" and (counts.size == 0 or counts.min() >= 0):
        return counts.astype(narrowest_uint(counts.max(initial=0)))
    if counts.size and (counts.min() < 0 or counts.max() >= 2**32):
        return np.array(counts, order="C")
    if not _all_whole(np.asarray(counts, dtype=np.float64).reshape(-1)):  # fractions, NaN
        return np.array(counts, order="C")
    return counts.astype(narrowest_uint(counts.max(initial=0)))


@kernel(nogil=True)
def _all_whole(values):
    """Whether every entry is a whole number (``np.array_equal(values, np.floor(values))``
    without the temporary: False for a NaN, True for an infinity)."""
    for v in values:
        if v != np.floor(v):
            return False
    return True


def feature_dtype(n_features):
    """The type a tree's feature indices travel in: the narrowest unsigned integer type
    holding 0 .. n_features - 1."""
    return narrowest_uint(max(n_features - 1, 0))

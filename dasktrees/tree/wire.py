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

import numpy as np
from numba import njit

from .._dtypes import BITSET_DTYPE, BITSET_WORDS, NODE_DTYPE, TREE_LEAF, TREE_UNDEFINED
from ..criteria import SQUARED_ERROR
from .tree import (
    LEAF_CONSTANTS,
    NODE_ARRAY_DTYPES,
    Tree,
    depth_first_children,
    fields_from_records,
    pool_to_root,
)


def encode(nodes, values, bitsets, thresholds, n_features, criterion):
    """The shipped state of the tree ``Tree.from_growth(nodes, values, bitsets, thresholds,
    n_features, criterion)`` would build (``grower.grow`` records, ``criterion`` the tree's).

    A classifier ships its nodes' weighted class counts instead of their fractions and weights,
    which the client derives from them bit for bit (``tree.class_fractions``); of its leaves
    only when the split nodes' are their children's summed (``_put_summable``). A regressor
    ships its leaves' means and impurities (``put_leaf_impurity``), from which the client
    pools its split nodes' as ``Tree.from_growth`` does (``tree.pool_to_root``).
    """
    is_split = nodes["left"] != TREE_LEAF
    n_split = int(np.count_nonzero(is_split))
    compact = {name: np.empty(n_split, dtype=NODE_ARRAY_DTYPES[name]) for name in LEAF_CONSTANTS}
    per_node = {
        "n_node_samples": np.empty(len(nodes), dtype=_count_dtype(nodes["n_samples"])),
        "weighted_n_node_samples": np.empty(len(nodes)),
        "impurity": np.empty(len(nodes)),
    }
    no_depths = np.empty(0, dtype=np.int32)
    fields_from_records(nodes, thresholds, True, *compact.values(), *per_node.values(), no_depths)
    state = {
        "n_features": n_features,
        "is_split": np.packbits(is_split),
        "max_depth": int(nodes["depth"].max()) if len(nodes) else 0,
        "n_nodes": len(nodes),
        "wire": True,
    }
    _put_split_fields(state, compact, n_features, bitsets)
    _put_summable(state, is_split, compact, "n_node_samples", per_node["n_node_samples"])
    if criterion == SQUARED_ERROR:
        # The leaves' means and impurities: the client pools the split nodes' from them, as
        # ``Tree.from_growth`` does (``tree.pool_to_root``).
        state["leaf_value"] = _leaf_rows(values, is_split)
        put_leaf_impurity(state, _leaf_rows(per_node["impurity"], is_split))
        weights = per_node["weighted_n_node_samples"]
        _put_summable(state, is_split, compact, "weighted_n_node_samples", weights)
    else:
        _put_summable(state, is_split, compact, "weighted_class_counts", values)
        state["criterion"] = criterion
    return state


def _put_split_fields(state, compact, n_features, bitsets):
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
    its children as two bytes each. ``state`` must hold ``is_split`` and ``n_nodes``."""
    left, right = compact["children_left"], compact["children_right"]
    if not _numbered_depth_first(state, left, right):
        node_id = narrowest_uint(max(left.max(initial=0), right.max(initial=0)))
        state["children_left"] = left.astype(node_id)
        if not np.array_equal(right, left + 1):
            state["children_right"] = right.astype(node_id)
    state["feature"] = compact["feature"].astype(feature_dtype(n_features))
    state["bin_threshold"] = compact["bin_threshold"]
    state["missing_go_to_left_bits"] = np.packbits(compact["missing_go_to_left"] != 0)
    bitset_idx = compact["bitset_idx"]
    categorical = bitset_idx >= 0
    state["is_categorical_bits"] = np.packbits(categorical)
    state["categorical_bitset_idx"] = bitset_idx[categorical].astype(
        narrowest_uint(len(bitsets) - 1)
    )
    if not categorical.any():
        bitsets = bitsets[:0]
    state["categorical_bitsets"] = np.ascontiguousarray(bitsets, dtype=BITSET_DTYPE)


def _numbered_depth_first(state, left, right):
    """Whether a tree's split nodes' children (``left``, ``right``) are those its flags give
    when numbered as the grower numbers a depth-first tree (``tree.depth_first_children``)."""
    if not np.array_equal(right, left + 1):
        return False
    implied = np.empty(len(left), dtype=np.int32)
    n_numbered = depth_first_children(state["is_split"], state["n_nodes"], implied)
    return n_numbered == state["n_nodes"] and np.array_equal(implied, left)


def _put_summable(state, is_split, compact, name, per_node):
    """Put a per-node quantity (``name``: ``SUMMABLE``) in a shipped state (``is_split`` its
    nodes' flags, as bools; ``compact`` its split nodes' children): as ``SUMMABLE[name]``, its
    leaves' rows only, when every split node's row is exactly its children's summed, left plus
    right, as ``tree.sum_to_root`` gives it back (row counts after any growth; weights and
    weighted class counts when the weights are whole numbers, bootstrap counts among them),
    in the narrowest unsigned type if they are whole numbers (``narrow_counts``); else every
    node's, as ``name`` (class counts narrowed too)."""
    split = np.flatnonzero(is_split)
    left, right = compact["children_left"], compact["children_right"]
    # As float64 rows, one kernel for all: counts below 2**53 and their sums are exact there.
    rows = np.asarray(per_node, dtype=np.float64).reshape(len(per_node), -1)
    if _summed_by_children(rows, split, left.astype(np.int64), right.astype(np.int64)):
        state[SUMMABLE[name]] = narrow_counts(_leaf_rows(per_node, is_split))
    elif name == "weighted_class_counts":
        state[name] = narrow_counts(per_node)
    else:
        state[name] = np.array(per_node, order="C")


def _leaf_rows(per_node, is_split):
    """The leaves' rows of a per-node array (``is_split`` its nodes' flags, as bools), as a new
    C-contiguous array. ``np.compress``: a boolean index took several times longer on the
    class counts of a tree (docs/benchmarks.md)."""
    return np.compress(~is_split, per_node, axis=0)


@njit(cache=True, nogil=True)
def _summed_by_children(per_node, split, left, right):
    """Whether row ``split[k]`` of ``per_node`` equals row ``left[k]`` plus row ``right[k]``,
    exactly, for every ``k``.

    A pass without the three gathered copies that numpy's fancy indexing makes: those took most
    of the time a task spent encoding a tree (docs/benchmarks.md).

    Parameters
    ----------
    per_node : ndarray of float64, shape (n_nodes, n_columns)
    split, left, right : ndarray of int64, shape (n_split,)
        The split nodes and their children.
    """
    for k in range(split.shape[0]):
        for c in range(per_node.shape[1]):
            if per_node[split[k], c] != per_node[left[k], c] + per_node[right[k], c]:
                return False
    return True


# The per-node quantities a shipped state may hold for its leaves only (``_put_summable``), and
# the name it then holds them under.
SUMMABLE = {
    "n_node_samples": "leaf_n_node_samples",
    "weighted_n_node_samples": "leaf_weighted_n_node_samples",
    "weighted_class_counts": "leaf_class_counts",
}


def state_of(tree, criterion):
    """The ``encode`` state of a fitted ``tree`` (criterion ``criterion``): a shipped tree's
    own, or that of a tree with its arrays (a single tree, a pruned one), whose raw thresholds
    and classification impurities are the ones ``encode`` drops as derived."""
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
    _put_summable(state, is_split, compact, "n_node_samples", n_node_samples)
    weights = tree.weighted_n_node_samples
    _put_summable(state, is_split, compact, "weighted_n_node_samples", weights)
    if criterion == SQUARED_ERROR:
        _put_moments(state, is_split, compact, tree.value, tree.impurity, weights)
    else:
        state["value"] = tree.value
        state["criterion"] = criterion
    return state


def _put_moments(state, is_split, compact, value, impurity, weights):
    """Put a regression tree's means and impurities (every node's ``value``, ``impurity``, and
    ``weights``) in a shipped state: its leaves' only (``leaf_value``, ``leaf_impurity``) when
    every split node's are its children's pooled (``tree.pool_to_root``), as a grown tree's
    are, bit for bit (``put_leaf_impurity``); else every node's (a tree of a file written
    before they were pooled)."""
    pooled_value, pooled_impurity = value.copy(), impurity.copy()
    packed = np.packbits(is_split)
    left, right = compact["children_left"], compact["children_right"]
    pool_to_root(packed, left, right, weights, pooled_value, pooled_impurity)
    if np.array_equal(pooled_value, value) and np.array_equal(pooled_impurity, impurity):
        state["leaf_value"] = _leaf_rows(value, is_split)
        put_leaf_impurity(state, _leaf_rows(impurity, is_split))
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


def stump(thresholds, n_values, criterion):
    """The ``encode`` state of a three-node tree (a root split on feature 0 at bin 0, and two
    leaves) with ``n_values`` values per node: what ``decode`` and packing compile their
    kernels for, without growing a tree."""
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
    weighted counts): ``counts.astype(np.float64)`` gives them back bit for bit."""
    counts = np.asarray(counts)
    if counts.dtype.kind in "ui" and (counts.size == 0 or counts.min() >= 0):
        return counts.astype(narrowest_uint(counts.max(initial=0)))
    if counts.size and (counts.min() < 0 or counts.max() >= 2**32):
        return np.ascontiguousarray(counts)
    if not np.array_equal(counts, np.floor(counts)):  # fractions, NaN or infinities
        return np.ascontiguousarray(counts)
    return counts.astype(narrowest_uint(counts.max(initial=0)))


def feature_dtype(n_features):
    """The type a tree's feature indices travel in: the narrowest unsigned integer type
    holding 0 .. n_features - 1."""
    return narrowest_uint(max(n_features - 1, 0))

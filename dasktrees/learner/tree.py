"""Tree: a grown tree as flat node arrays, and the numba kernels that route rows through it."""

# scipy is imported inside the function that uses it: the kernels load without it
# (docs/design.md, "Compiled for what a fit uses").
import numpy as np
from numba import prange

from ..core.bitsets import bitset_has
from ..core.criteria import class_impurity, is_regression, outputs_class_impurity, several_outputs
from ..core.dtypes import (
    BITSET_DTYPE,
    BITSET_WORDS,
    MISSING_BIN,
    ROUTING_NODE_DTYPE,
    TREE_ARRAY_DTYPES,
    TREE_LEAF,
    TREE_UNDEFINED,
)
from ..core.kernel_cache import kernel

# The arrays that define a tree, in the order the kernels take them. Everything a Tree can do
# (predict, export, save) reads only these.
TREE_ARRAYS = (
    "children_left",  # int32 (n_nodes,): left child, TREE_LEAF for a leaf
    "children_right",  # int32 (n_nodes,)
    "feature",  # int32 (n_nodes,): split feature, TREE_UNDEFINED for a leaf
    "threshold",  # float64 (n_nodes,): numeric split: x <= threshold goes left (raw units)
    "bin_threshold",  # uint8 (n_nodes,): the same split on binned codes: code <= bin_threshold
    "missing_go_to_left",  # uint8 (n_nodes,)
    "is_categorical",  # uint8 (n_nodes,)
    "bitset_idx",  # int32 (n_nodes,): row of categorical_bitsets, -1 for numeric splits
    "categorical_bitsets",  # uint32 (n_bitsets, 8): codes sent left by categorical splits
    "value",  # float64 (n_nodes, n_values): class fractions or mean target
    "n_node_samples",  # int64 (n_nodes,): rows (with positive weight) reaching the node
    "weighted_n_node_samples",  # float64 (n_nodes,)
    "impurity",  # float64 (n_nodes,)
    "node_depth",  # int32 (n_nodes,): root at depth 0
)


class Tree:
    """A fitted tree, stored as flat arrays with scikit-learn's names.

    The root is node 0; ``children_left[i] == TREE_LEAF`` marks a leaf. A row goes left at
    node i when its feature value is missing and ``missing_go_to_left[i]``, when the feature is
    categorical and its category code is in ``categorical_bitsets[bitset_idx[i]]``, or when it is
    numeric and ``x <= threshold[i]``. Unlike scikit-learn's ``tree_.value``, ``value`` has no
    output axis: ``(n_nodes, n_classes)``, ``(n_nodes, k)`` for k target columns (regression),
    or ``(n_nodes, k * K)`` for k class columns (their fractions in blocks of K, ``criteria``).
    """

    def __init__(self, n_features, **arrays):
        missing = set(TREE_ARRAYS) - set(arrays)
        if missing:
            raise ValueError(f"Tree is missing arrays {sorted(missing)}")
        self.n_features = int(n_features)
        for name in TREE_ARRAYS:
            setattr(self, name, arrays[name])

    @classmethod
    def from_growth(
        cls, nodes, values, bitsets, thresholds, n_features, criterion, exact=False, n_outputs=1
    ):
        """Build a Tree from the grower's records.

        ``thresholds`` is the (n_features, N_BIN_CODES) table of raw split values
        (``BinMapper.threshold_table``): a numeric split at bin b is ``x <= thresholds[f, b]``.
        ``criterion`` (``criteria``) says what ``values`` holds: weighted class counts, whose
        fractions become ``value``, or a regression tree's means. ``exact``: keep a regression
        tree's split nodes' own means and impurities rather than pool them from the leaves
        (``GrowthParams.own_moments``: monotonic constraints clip the leaves' values, and
        Poisson deviances do not pool as variances); ``wire.encode`` ships such a tree's every
        node. ``n_outputs``: the class columns of a classifier, whose fractions are taken block by
        block.
        """
        if len(bitsets) == 0:  # one all-zero row, so that kernels can always index the table
            bitsets = np.zeros((1, BITSET_WORDS), dtype=BITSET_DTYPE)
        arrays = {
            name: np.empty(len(nodes), dtype=dtype)
            for name, dtype in NODE_ARRAY_DTYPES.items()
            if name != "value"
        }
        # One pass over the records: a forest task turns trees of 100,000 nodes into arrays, and
        # numpy's field-by-field copies were slower (measured in docs/benchmarks.md).
        no_flags = np.empty(0, dtype=np.bool_)
        fields_from_records(
            nodes, thresholds, False, *(arrays[name] for name in _RECORD_ARRAYS), no_flags
        )
        regression = is_regression(criterion)
        if regression:
            value = np.array(values, order="C")  # a copy: the grower's workspace is reused
        if regression and not exact:
            # A split node's mean and impurity are its children's pooled, as a shipped tree's
            # are derived from its leaves' (``wire.encode``): the same numbers for every tree.
            split = np.flatnonzero(arrays["children_left"] != TREE_LEAF)
            pool_to_root(
                np.packbits(arrays["children_left"] != TREE_LEAF),
                arrays["children_left"][split],
                arrays["children_right"][split],
                arrays["weighted_n_node_samples"],
                value,
                arrays["impurity"],
            )
        elif not regression:
            value = np.empty(values.shape)
            class_fractions(values, value, np.empty(len(values)), several_outputs(n_outputs))
        return cls(
            n_features, categorical_bitsets=np.ascontiguousarray(bitsets), value=value, **arrays
        )

    @classmethod
    def shipped(cls, state, thresholds):
        """A tree kept in the compact state a forest task ships it in (``wire.encode``), with
        the bin ``thresholds`` table it was grown on.

        A forest holds its trees this way: packing them for prediction reads the state as it
        is (``split_nodes``), and the arrays (``TREE_ARRAYS``) are expanded from it the first
        time one is read, and kept. ``expanded`` gives them without keeping them.
        """
        tree = cls.__new__(cls)
        tree.n_features = int(state["n_features"])
        tree._shipped = (state, thresholds)
        return tree

    def __getattr__(self, name):
        # Only called for attributes not found: the arrays of a tree still in its shipped state.
        shipped = self.__dict__.get("_shipped")
        if shipped is None or name not in TREE_ARRAYS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.__setstate__(expand_shipped(*shipped))
        self.__dict__.pop("_shipped", None)  # two threads may expand the same tree at once
        return getattr(self, name)

    def expanded(self):
        """This tree with its arrays: itself, or for a tree in its shipped state an expanded
        copy that this tree does not keep (what reading every tree of a forest once uses, so
        that the forest stays compact)."""
        shipped = self.__dict__.get("_shipped")
        if shipped is None:
            return self
        tree = Tree.__new__(Tree)
        tree.__setstate__(expand_shipped(*shipped))
        return tree

    @property
    def shipped_state(self):
        """The state a tree kept as shipped is in (``wire.encode``), or None for a tree with
        its arrays."""
        shipped = self.__dict__.get("_shipped")
        return None if shipped is None else shipped[0]

    @property
    def node_count(self):
        state = self.shipped_state
        return len(self.children_left) if state is None else state["n_nodes"]

    @property
    def n_leaves(self):
        state = self.shipped_state
        if state is not None:
            return self.node_count - len(state["feature"])
        return int(np.sum(self.children_left == TREE_LEAF))

    @property
    def max_depth(self):
        state = self.shipped_state
        return int(self.node_depth.max()) if state is None else state["max_depth"]

    @property
    def n_values(self):
        """Values per node: the number of classes, or of target columns (regression)."""
        state = self.shipped_state
        return (self.value if state is None else shipped_values(state)[0]).shape[1]

    def split_nodes(self):
        """The split nodes' fields, in node order, with what locates them among all nodes.

        Returns
        -------
        is_split : ndarray of uint8
            ``np.packbits(children_left != TREE_LEAF)``.
        children_left, children_right, feature, bin_threshold, missing_go_to_left, bitset_idx :
            ndarray, shape (n_splits,)
            The fields of ``TREE_ARRAYS`` at split nodes (``feature`` in any integer type; a
            split is categorical where ``bitset_idx >= 0``).
        values : ndarray of float64, shape (n_nodes or n_leaves, n_values)
            ``value``, or a shipped classifier's weighted class counts.
        kind : int
            What ``values`` holds: ``NODE_VALUES`` (``value``), ``LEAF_VALUES`` (the leaves'
            ``value`` only, in node order), ``NODE_COUNTS`` (every node's weighted class
            counts, whose fractions are ``value``) or ``LEAF_COUNTS`` (the leaves' only).
        categorical_bitsets : ndarray of uint32, shape (n_bitsets, BITSET_WORDS)
        """
        state = self.shipped_state
        if state is not None:
            fields = split_fields(state)
            fields = [fields[name] for name in SPLIT_NODE_FIELDS]
            values, kind = shipped_values(state)
            return state["is_split"], *fields, values, kind, state["categorical_bitsets"]
        compact = self._split_only_fields()
        fields = [compact[name] for name in SPLIT_NODE_FIELDS]
        is_split = np.packbits(self.children_left != TREE_LEAF)
        return is_split, *fields, self.value, NODE_VALUES, self.categorical_bitsets

    def routing_records(self):
        """The routing fields packed in one ``ROUTING_NODE_DTYPE`` record per node (a new
        array; ``routing_nodes`` keeps one for this tree's own kernels)."""
        nodes = np.empty(self.node_count, dtype=ROUTING_NODE_DTYPE)
        self.write_routing(nodes, 0, 0)
        return nodes

    def write_routing(self, out, node_offset, bitset_offset):
        """Write the routing records into ``out[node_offset:node_offset + node_count]``, with
        children and bitset rows shifted by the offsets (how ``packing.PackedForest`` packs
        its trees)."""
        _write_routing(
            out,
            node_offset,
            bitset_offset,
            self.children_left,
            self.children_right,
            self.feature,
            self.threshold,
            self.bitset_idx,
            self.bin_threshold,
            self.missing_go_to_left,
            self.is_categorical,
        )

    @property
    def routing_nodes(self):
        """``routing_records()``, derived on first use and kept (not pickled)."""
        if getattr(self, "_routing_nodes", None) is None:
            self._routing_nodes = self.routing_records()
        return self._routing_nodes

    def apply(self, X):
        """Leaf reached by each row of encoded X.

        Parameters
        ----------
        X : ndarray of float32 or float64, shape (n_samples, n_features)
            Numeric values, category codes and NaN, as ``BinMapper.encode`` returns them.

        Returns
        -------
        ndarray of int64, shape (n_samples,)
        """
        out = np.empty(X.shape[0], dtype=np.int64)
        _apply_encoded(X, self.routing_nodes, self.categorical_bitsets, out)
        return out

    def apply_binned(self, codes):
        """Leaf reached by each row of binned ``codes`` (uint8, (n_samples, n_features))."""
        out = np.empty(codes.shape[0], dtype=np.int64)
        _apply_binned(codes, self.routing_nodes, self.categorical_bitsets, out)
        return out

    def predict(self, X):
        """``value`` of the leaf of each row of encoded ``X``: (n_samples, n_values)."""
        return self.value[self.apply(X)]

    def decision_path(self, X):
        """Indicator matrix (CSR, (n_samples, n_nodes)) of the nodes each row goes through."""
        return self.paths_to(self.apply(X))

    def paths_to(self, leaves):
        """Indicator matrix (CSR, (len(leaves), n_nodes)) of the nodes from the root to each of
        ``leaves`` (node ids, as ``apply`` returns them)."""
        from scipy import sparse

        indptr = np.zeros(len(leaves) + 1, dtype=np.int64)
        np.cumsum(self.node_depth[leaves] + 1, out=indptr[1:])
        indices = np.empty(indptr[-1], dtype=np.int64)
        _fill_paths(leaves, indptr, self._parents(), indices)
        data = np.ones(len(indices), dtype=np.int64)
        return sparse.csr_matrix((data, indices, indptr), shape=(len(leaves), self.node_count))

    def leaf_nodes(self):
        """The leaves' node ids, in increasing order: ndarray of int64, shape (n_leaves,). A
        packed forest holds a tree's leaf values in this order (``packing.PackedForest``)."""
        state = self.shipped_state
        if state is None:
            return np.flatnonzero(self.children_left == TREE_LEAF)
        is_split = np.unpackbits(state["is_split"], count=self.node_count)
        return np.flatnonzero(is_split == 0)

    def _parents(self):
        parents = np.full(self.node_count, -1, dtype=np.int64)
        split = np.flatnonzero(self.children_left != TREE_LEAF)
        parents[self.children_left[split]] = split
        parents[self.children_right[split]] = split
        return parents

    def compute_feature_importances(self, normalize=True):
        """Mean decrease in impurity per feature (Breiman et al. 1984).

        Each split adds ``w_t * i(t) - w_left * i(left) - w_right * i(right)`` to its feature,
        divided by the root weight; with ``normalize`` the importances sum to one (unless the
        tree is a single leaf, when they are all zero).
        """
        state = self.shipped_state
        if state is None:
            split = np.flatnonzero(self.children_left != TREE_LEAF)
            left, right = self.children_left[split], self.children_right[split]
            feature, w, impurity = self.feature[split], self.weighted_n_node_samples, self.impurity
        else:  # from the shipped state: the few arrays needed, not the whole tree expanded
            if "criterion" in state:  # a classifier's, from its class fractions
                value, w = value_and_weight(state)
                impurity = state.get("impurity")  # shipped when not derived (``wire.encode``)
                if impurity is None:
                    impurity = np.empty(len(w))
                    node_class_impurities(
                        value, w, state["criterion"], impurity, shipped_outputs(state)
                    )
            else:
                w = node_weights(state)
                impurity = node_moments(state, w)[1]
            split = np.flatnonzero(np.unpackbits(state["is_split"], count=len(w)))
            left, right = children(state)
            feature = state["feature"]
        decrease = (
            w[split] * impurity[split] - w[left] * impurity[left] - w[right] * impurity[right]
        )
        importances = np.zeros(self.n_features)
        np.add.at(importances, feature, decrease)
        importances /= w[0]
        total = importances.sum()
        if normalize and total > 0.0:
            importances /= total
        return importances

    def __getstate__(self):
        """The arrays, compactly: trees travel from workers to the client by the thousand.

        Split fields are kept for split nodes only (a leaf's are constants), ``node_depth`` is
        derived again on load, and so is ``routing_nodes`` on use. A tree in its shipped state
        (``shipped``) stays in it.
        """
        shipped = self.__dict__.get("_shipped")
        if shipped is not None:
            return {"shipped": shipped[0], "thresholds": shipped[1]}
        is_split = self.children_left != TREE_LEAF
        state = {"n_features": self.n_features, "is_split": np.packbits(is_split)}
        state.update(self._split_only_fields())
        for name in TREE_ARRAYS:
            if name not in LEAF_CONSTANTS and name != "node_depth":
                state[name] = getattr(self, name)
        return state

    def _split_only_fields(self):
        """The eight split fields (``LEAF_CONSTANTS``) at split nodes only, by name."""
        n_split = int(np.count_nonzero(self.children_left != TREE_LEAF))
        split_fields = [getattr(self, name) for name in LEAF_CONSTANTS]
        compact = [np.empty(n_split, dtype=field.dtype) for field in split_fields]
        # One pass over the nodes: faster than a mask per field.
        _compact_split_fields(self.children_left, tuple(split_fields), tuple(compact))
        return dict(zip(LEAF_CONSTANTS, compact))

    def __setstate__(self, state):
        if "shipped" in state:
            self.__dict__.update(Tree.shipped(state["shipped"], state["thresholds"]).__dict__)
            return
        state = dict(state)
        n_nodes = len(state["n_node_samples"])
        is_split = np.unpackbits(state.pop("is_split"), count=n_nodes)
        compact = [state[name] for name in LEAF_CONSTANTS]
        full = [np.empty(n_nodes, dtype=field.dtype) for field in compact]
        _expand_split_fields(is_split, tuple(LEAF_CONSTANTS.values()), tuple(compact), tuple(full))
        state.update(zip(LEAF_CONSTANTS, full))
        state["node_depth"] = np.zeros(n_nodes, dtype=np.int32)
        fill_depths(state["children_left"], state["children_right"], state["node_depth"])
        self.__init__(state.pop("n_features"), **state)


def expand_shipped(shipped, thresholds):
    """The ``Tree.__getstate__`` state of the tree a shipped state (``wire.encode``) describes,
    given its bin ``thresholds`` table: with what the shipped state leaves out derived again
    (raw thresholds, ``is_categorical``, split nodes' row counts; a classifier's class
    fractions, node weights and impurities; a regressor's split nodes' means and impurities)."""
    state = {k: v for k, v in shipped.items() if k not in _NOT_IN_ARRAYS}
    state.update(split_fields(shipped))
    if "leaf_value" in shipped:  # a regressor's: pooled once for both
        state["weighted_n_node_samples"] = node_weights(shipped)
        state["value"], state["impurity"] = node_moments(shipped, state["weighted_n_node_samples"])
    else:
        state["value"], state["weighted_n_node_samples"] = value_and_weight(shipped)
    state["n_node_samples"] = node_samples(shipped)
    if len(state["categorical_bitsets"]) == 0:  # as from_growth: one all-zero row
        state["categorical_bitsets"] = np.zeros((1, BITSET_WORDS), dtype=BITSET_DTYPE)
    bitset_idx = state["bitset_idx"]
    state["feature"] = state["feature"].astype(np.int32)
    state["is_categorical"] = (bitset_idx >= 0).astype(np.uint8)
    state["threshold"] = np.empty(len(bitset_idx))
    _split_thresholds(
        thresholds, state["feature"], state["bin_threshold"], bitset_idx, state["threshold"]
    )
    criterion = state.pop("criterion", None)
    if criterion is not None and "impurity" not in state:  # else shipped (``wire.encode``)
        state["impurity"] = np.empty(len(state["n_node_samples"]))
        node_class_impurities(
            state["value"],
            state["weighted_n_node_samples"],
            criterion,
            state["impurity"],
            shipped_outputs(shipped),
        )
    return state


# What a shipped state holds besides the arrays ``expand_shipped`` gives back as they are.
_NOT_IN_ARRAYS = (
    "wire",
    "n_outputs",
    "max_depth",
    "n_nodes",
    "weighted_class_counts",
    "leaf_class_counts",
    "leaf_n_node_samples",
    "leaf_weighted_n_node_samples",
    "leaf_value",
    "nonzero_leaf_impurity_bits",
    "nonzero_leaf_impurity",
    "children_right",
    "missing_go_to_left_bits",
    "is_categorical_bits",
    "categorical_bitset_idx",
)


def split_fields(state):
    """A shipped state's split fields (``SPLIT_NODE_FIELDS``) at its split nodes, in node order,
    as the tree's arrays hold them: ``children_right`` (``children_left + 1`` unless shipped),
    ``missing_go_to_left`` (uint8) and ``bitset_idx`` (int32, -1 for a numeric split) from their
    bits and the categorical splits' rows (``wire._put_split_fields``)."""
    left, right = children(state)
    n_split = len(left)
    categorical = np.unpackbits(state["is_categorical_bits"], count=n_split).view(bool)
    bitset_idx = np.full(n_split, -1, dtype=np.int32)
    bitset_idx[categorical] = state["categorical_bitset_idx"]
    return {
        "children_left": left,
        "children_right": right,
        "feature": state["feature"],
        "bin_threshold": state["bin_threshold"],
        "missing_go_to_left": np.unpackbits(state["missing_go_to_left_bits"], count=n_split),
        "bitset_idx": bitset_idx,
    }


def children(state):
    """A shipped state's split nodes' children (``children_left``, ``children_right``), as
    int32 whatever type they travel in (what the kernels take): the right child is the node
    after the left one unless the state says otherwise, and without ``children_left`` the
    nodes are numbered as the grower numbers a depth-first tree (``depth_first_children``)."""
    if "children_left" in state:
        left = state["children_left"].astype(np.int32, copy=False)
    else:
        left = np.empty(len(state["feature"]), dtype=np.int32)
        depth_first_children(state["is_split"], state["n_nodes"], left)
    right = state.get("children_right")
    return left, left + 1 if right is None else right.astype(np.int32, copy=False)


# What the per-node values of a shipped state are (``Tree.split_nodes``).
NODE_VALUES = 0  # ``value``: class fractions or means, every node
NODE_COUNTS = 1  # a classifier's weighted class counts, every node
LEAF_COUNTS = 2  # the same, leaves only: a split node's are its children's summed
LEAF_VALUES = 3  # a regressor's means, leaves only: a split node's are its children's pooled


def shipped_values(state):
    """A shipped state's per-node values and their kind (``NODE_VALUES`` ...): a classifier
    grown in a forest task ships its weighted class counts, of its leaves only when a split
    node's are its children's summed, and a regressor its leaves' means (``wire.encode``)."""
    if "leaf_class_counts" in state:  # float64 whatever type they travel in: what kernels take
        return state["leaf_class_counts"].astype(np.float64, copy=False), LEAF_COUNTS
    if "weighted_class_counts" in state:
        return state["weighted_class_counts"].astype(np.float64, copy=False), NODE_COUNTS
    if "leaf_value" in state:
        return state["leaf_value"], LEAF_VALUES
    return state["value"], NODE_VALUES


def node_moments(state, weight=None):
    """Every node's ``value`` (means, (n_nodes, k) for k target columns) and ``impurity`` of a
    shipped regressor's state: its leaves', and its split nodes' pooled from them
    (``pool_to_root``) with the nodes' weights (``node_weights(state)``, if the caller has
    them), or every node's as shipped."""
    if "leaf_value" not in state:
        return state["value"], state["impurity"]
    is_split = np.unpackbits(state["is_split"], count=state["n_nodes"]).view(bool)
    value = np.empty((state["n_nodes"], state["leaf_value"].shape[1]))
    impurity = np.empty(state["n_nodes"])
    value[~is_split] = state["leaf_value"]
    impurity[~is_split] = leaf_impurities(state)
    if weight is None:
        weight = node_weights(state)
    pool_to_root(state["is_split"], *children(state), weight, value, impurity)
    return value, impurity


def leaf_impurities(state):
    """A shipped regressor's leaves' impurities (a state with ``leaf_value``), in node order:
    zero but where ``nonzero_leaf_impurity_bits`` says otherwise (``wire.put_leaf_impurity``)."""
    n_leaves = len(state["leaf_value"])
    nonzero = np.unpackbits(state["nonzero_leaf_impurity_bits"], count=n_leaves).view(bool)
    impurity = np.zeros(n_leaves)
    impurity[nonzero] = state["nonzero_leaf_impurity"]
    return impurity


def node_counts(state):
    """Every node's weighted class counts of a shipped classifier's state."""
    values, kind = shipped_values(state)
    return _summed_up(state, values) if kind == LEAF_COUNTS else values


def node_samples(state):
    """Every node's row count (``n_node_samples``, int64) of a shipped state."""
    if "leaf_n_node_samples" not in state:
        return state["n_node_samples"].astype(np.int64)
    leaves = state["leaf_n_node_samples"].astype(np.int64)
    return _summed_up(state, leaves.reshape(-1, 1)).ravel()


def node_weights(state):
    """Every node's weight (``weighted_n_node_samples``, float64) of a shipped state that holds
    its values (``value``), not class counts."""
    if "leaf_weighted_n_node_samples" not in state:
        return state["weighted_n_node_samples"]
    leaves = state["leaf_weighted_n_node_samples"].astype(np.float64)
    return _summed_up(state, leaves.reshape(-1, 1)).ravel()


def _summed_up(state, leaf_rows):
    """Every node's rows of a quantity a shipped state holds for its leaves only
    (``leaf_rows``, 2-d): a split node's are its children's summed, bit for bit those it was
    shipped without (``wire._put_summable`` checked)."""
    out = np.empty((state["n_nodes"], leaf_rows.shape[1]), dtype=leaf_rows.dtype)
    sum_to_root(state["is_split"], *children(state), leaf_rows, out)
    return out


def value_and_weight(state):
    """``value`` and ``weighted_n_node_samples`` of a shipped state, derived from its weighted
    class counts if it has them."""
    values, kind = shipped_values(state)
    if kind == NODE_VALUES:
        return values, node_weights(state)
    if kind == LEAF_VALUES:
        weight = node_weights(state)
        return node_moments(state, weight)[0], weight
    counts = node_counts(state)
    value, weight = np.empty(counts.shape), np.empty(len(counts))
    class_fractions(counts, value, weight, shipped_outputs(state))
    return value, weight


# The split fields ``Tree.split_nodes`` gives, in its order.
SPLIT_NODE_FIELDS = (
    "children_left",
    "children_right",
    "feature",
    "bin_threshold",
    "missing_go_to_left",
    "bitset_idx",
)

# What a leaf holds in the split arrays (see Tree.__getstate__).
LEAF_CONSTANTS = {
    "children_left": TREE_LEAF,
    "children_right": TREE_LEAF,
    "feature": TREE_UNDEFINED,
    "threshold": float(TREE_UNDEFINED),
    "bin_threshold": 0,
    "missing_go_to_left": 0,
    "is_categorical": 0,
    "bitset_idx": -1,
}


@kernel(inline="always")
def _split_fields_at(arrays, i):
    """The eight split fields of node ``i``: ``arrays[k][i]`` for each array of the tuple
    ``arrays`` (``LEAF_CONSTANTS`` order)."""
    return (
        arrays[0][i],
        arrays[1][i],
        arrays[2][i],
        arrays[3][i],
        arrays[4][i],
        arrays[5][i],
        arrays[6][i],
        arrays[7][i],
    )


@kernel(inline="always")
def _set_split_fields(arrays, i, values):
    """``arrays[k][i] = values[k]`` for the eight split fields (tuples in ``LEAF_CONSTANTS``
    order)."""
    arrays[0][i] = values[0]
    arrays[1][i] = values[1]
    arrays[2][i] = values[2]
    arrays[3][i] = values[3]
    arrays[4][i] = values[4]
    arrays[5][i] = values[5]
    arrays[6][i] = values[6]
    arrays[7][i] = values[7]


@kernel(nogil=True)
def _compact_split_fields(children_left, fields, out):
    """``out[k][:] = fields[k][children_left != TREE_LEAF]`` for the eight split fields (tuples
    of arrays in ``LEAF_CONSTANTS`` order), in one pass."""
    j = 0
    for i in range(children_left.shape[0]):
        if children_left[i] != TREE_LEAF:
            _set_split_fields(out, j, _split_fields_at(fields, i))
            j += 1


@kernel(nogil=True)
def _expand_split_fields(is_split, leaf, compact, full):
    """The inverse of ``_compact_split_fields``: split nodes take the next values of the tuple
    of arrays ``compact``, leaves the constants ``leaf`` (``LEAF_CONSTANTS``' values), into the
    tuple of arrays ``full``."""
    j = 0
    for i in range(is_split.shape[0]):
        if is_split[i]:
            _set_split_fields(full, i, _split_fields_at(compact, j))
            j += 1
        else:
            _set_split_fields(full, i, leaf)


@kernel(nogil=True)
def _write_routing(
    out,
    node_offset,
    bitset_offset,
    children_left,
    children_right,
    feature,
    threshold,
    bitset_idx,
    bin_threshold,
    missing_go_to_left,
    is_categorical,
):
    """One pass over the nodes writing ``ROUTING_NODE_DTYPE`` records (see ``write_routing``);
    a forest's table is hundreds of megabytes, written once."""
    for i in range(children_left.shape[0]):
        record = out[node_offset + i]
        split = children_left[i] != TREE_LEAF
        record["threshold"] = threshold[i]
        record["left"] = children_left[i] + node_offset if split else TREE_LEAF
        record["right"] = children_right[i] + node_offset if split else TREE_LEAF
        record["feature"] = feature[i]
        record["bitset_idx"] = bitset_idx[i] + bitset_offset if bitset_idx[i] >= 0 else -1
        record["bin_threshold"] = bin_threshold[i]
        record["missing_go_to_left"] = missing_go_to_left[i]
        record["is_categorical"] = is_categorical[i]


# The per-node arrays and their dtypes; ``fields_from_records`` fills those of _RECORD_ARRAYS.
NODE_ARRAY_DTYPES = {n: d for n, d in TREE_ARRAY_DTYPES.items() if n != "categorical_bitsets"}
_RECORD_ARRAYS = [name for name in NODE_ARRAY_DTYPES if name != "value"]


@kernel(nogil=True)
def fields_from_records(
    nodes,
    thresholds,
    split_only,
    children_left,
    children_right,
    feature,
    threshold,
    bin_threshold,
    missing_go_to_left,
    is_categorical,
    bitset_idx,
    n_node_samples,
    weighted_n_node_samples,
    impurity,
    node_depth,
    split_flags,
):
    """Fill a tree's arrays from the grower's records (``NODE_DTYPE``), in one pass.

    The eight split fields (``LEAF_CONSTANTS``) are written for every node, or with
    ``split_only`` for split nodes only, in node order (a pickle state's compact arrays). A
    numeric split's raw threshold is ``thresholds[feature, bin_threshold]``, a leaf's and a
    categorical split's TREE_UNDEFINED. ``node_depth`` is written if it has room for every node,
    and so is ``split_flags`` (bool: whether the node is a split).

    Returns
    -------
    n_split, max_depth : int
        The number of split nodes and the deepest node's depth (0 for no nodes).
    """
    j = 0
    n_split = 0
    max_depth = 0
    for i in range(nodes.shape[0]):
        record = nodes[i]
        n_node_samples[i] = record["n_samples"]
        weighted_n_node_samples[i] = record["weighted_n_samples"]
        impurity[i] = record["impurity"]
        max_depth = max(max_depth, record["depth"])
        if node_depth.shape[0] == nodes.shape[0]:
            node_depth[i] = record["depth"]
        is_split = record["left"] != TREE_LEAF
        n_split += is_split
        if split_flags.shape[0] == nodes.shape[0]:
            split_flags[i] = is_split
        if split_only and not is_split:
            continue
        k = j if split_only else i
        children_left[k] = record["left"]
        children_right[k] = record["right"]
        feature[k] = record["feature"]
        bin_threshold[k] = record["bin_threshold"]
        missing_go_to_left[k] = record["missing_go_to_left"]
        is_categorical[k] = record["is_categorical"]
        bitset_idx[k] = record["bitset_idx"]
        if is_split and record["is_categorical"] == 0:
            threshold[k] = thresholds[record["feature"], record["bin_threshold"]]
        else:
            threshold[k] = TREE_UNDEFINED
        j += 1
    return n_split, max_depth


@kernel()
def fill_depths(children_left, children_right, depth):
    """Depth of every node from the children arrays (children come after their parent)."""
    for i in range(children_left.shape[0]):
        if children_left[i] != TREE_LEAF:
            depth[children_left[i]] = depth[i] + 1
            depth[children_right[i]] = depth[i] + 1


@kernel(inline="always")
def goes_left_encoded(X, i, node, bitsets):
    """Whether row i of encoded X goes to the left child of split ``node`` (a routing record):
    a missing value (NaN, or an unseen category) as ``missing_go_to_left`` says, a category
    when its code is in the split's bitset, a number when it is at most the threshold."""
    x = X[i, node["feature"]]
    if np.isnan(x):
        return node["missing_go_to_left"] != 0
    if node["is_categorical"]:
        return bitset_has(bitsets[node["bitset_idx"]], np.int64(x)) == 1
    return x <= node["threshold"]


@kernel(inline="always")
def leaf_encoded(X, i, nodes, bitsets, root):
    """Leaf reached by row i of encoded X in the tree whose root is ``nodes[root]``."""
    k = root
    node = nodes[k]
    while node["left"] != TREE_LEAF:
        k = node["left"] if goes_left_encoded(X, i, node, bitsets) else node["right"]
        node = nodes[k]
    return k


@kernel(inline="always")
def leaf_binned(codes, i, nodes, bitsets, root, override_feature, override_code):
    """Leaf reached by row i of binned codes in the tree whose root is ``nodes[root]``.

    Feature ``override_feature`` (if >= 0) reads ``override_code`` instead of the row's own
    code (permutation importance).
    """
    k = root
    node = nodes[k]
    while node["left"] != TREE_LEAF:
        f = node["feature"]
        code = override_code if f == override_feature else np.int64(codes[i, f])
        k = node["left"] if goes_left_binned(code, node, bitsets) else node["right"]
        node = nodes[k]
    return k


@kernel(inline="always")
def goes_left_binned(code, node, bitsets):
    """Whether a row whose bin code for the split's feature is ``code`` goes to the left child
    of split ``node`` (a routing record): the missing code as ``missing_go_to_left`` says, a
    category when it is in the split's bitset, a numeric bin when it is at most the split's."""
    if code == MISSING_BIN:
        return node["missing_go_to_left"] != 0
    if node["is_categorical"]:
        return bitset_has(bitsets[node["bitset_idx"]], code) == 1
    return code <= node["bin_threshold"]


@kernel(parallel=True, nogil=True)
def _apply_encoded(X, nodes, bitsets, out):
    """Route every row of encoded X to its leaf.

    Parameters
    ----------
    X : ndarray of float32 or float64, shape (n_samples, n_features)
        Numeric values, categorical codes, NaN for missing (``BinMapper.encode``).
    nodes : ndarray of ROUTING_NODE_DTYPE, shape (n_nodes,)
    bitsets : ndarray of uint32, shape (n_bitsets, BITSET_WORDS)
    out : ndarray of int64, shape (n_samples,)
        Written: leaf index of each row.
    """
    for i in prange(X.shape[0]):
        out[i] = leaf_encoded(X, i, nodes, bitsets, 0)


@kernel(parallel=True, nogil=True)
def _apply_binned(codes, nodes, bitsets, out):
    """Route every row of binned codes (uint8, (n_samples, n_features)) to its leaf."""
    for i in prange(codes.shape[0]):
        out[i] = leaf_binned(codes, i, nodes, bitsets, 0, -1, 0)


@kernel()
def _fill_paths(leaves, indptr, parents, indices):
    """Write each row's root-to-leaf node list into ``indices[indptr[i]:indptr[i + 1]]``."""
    for i in range(leaves.shape[0]):
        node = leaves[i]
        k = indptr[i + 1] - 1
        while node >= 0:
            indices[k] = node
            node = parents[node]
            k -= 1


@kernel(nogil=True)
def _split_thresholds(thresholds, feature, bin_threshold, bitset_idx, out):
    """Raw thresholds of split nodes: ``thresholds[feature, bin_threshold]`` for numeric
    splits, TREE_UNDEFINED for categorical ones (``bitset_idx >= 0``), as ``from_growth``."""
    for j in range(feature.shape[0]):
        if bitset_idx[j] >= 0:
            out[j] = TREE_UNDEFINED
        else:
            out[j] = thresholds[feature[j], bin_threshold[j]]


def shipped_outputs(state):
    """The kernels' ``outputs`` of a shipped classifier ``state``: its class columns
    (``"n_outputs"``, kept when more than one), None for one (``criteria.several_outputs``)."""
    return several_outputs(state.get("n_outputs", 1))


@kernel(nogil=True)
def node_class_impurities(value, weighted_n_node_samples, criterion, out, outputs=None):
    """Each node's impurity from its class fractions and weight (``criteria.class_impurity``;
    with ``outputs`` class columns, the mean of their blocks', ``outputs_class_impurity``;
    None for one, ``criteria.several_outputs``)."""
    for i in range(value.shape[0]):
        if outputs is None:
            out[i] = class_impurity(value[i], weighted_n_node_samples[i], criterion)
        elif weighted_n_node_samples[i] > 0.0:
            out[i] = outputs_class_impurity(value[i], 1.0, criterion, outputs)
        else:
            out[i] = 0.0


@kernel(nogil=True)
def class_fractions(counts, value, weight, outputs=None):
    """Each node's weight and class fractions from its weighted class counts
    (``node_class_fractions``).

    Parameters
    ----------
    counts : ndarray of float64, shape (n_nodes, n_classes)
    value : ndarray of float64, shape (n_nodes, n_classes)
        Written: the class fractions.
    weight : ndarray of float64, shape (n_nodes,)
        Written: the node weights.
    outputs : int, optional
        Class columns: the counts are that many blocks (``criteria``), each made fractions of
        its own sum; a node's weight is the first block's. None for one
        (``criteria.several_outputs``).
    """
    if outputs is None:
        for i in range(counts.shape[0]):
            weight[i] = node_class_fractions(counts[i], value[i])
        return
    block = counts.shape[1] // outputs
    for i in range(counts.shape[0]):
        for o in range(outputs):
            w = node_class_fractions(
                counts[i, o * block : (o + 1) * block], value[i, o * block : (o + 1) * block]
            )
            if o == 0:
                weight[i] = w


@kernel(inline="always")
def node_class_fractions(counts, value):
    """One node's class fractions (written to ``value``) and weight (returned) from its weighted
    class counts, as the grower computes them: the weight is the counts summed in class order
    (``criteria.stats_weight``), a fraction a class's count over it (0 in a node of no weight).
    Bit for bit the grower's."""
    w = 0.0
    for k in range(counts.shape[0]):
        w += counts[k]
    for k in range(counts.shape[0]):
        value[k] = counts[k] / w if w > 0.0 else 0.0
    return w


@kernel(nogil=True)
def depth_first_children(is_split, n_nodes, out):
    """The left children of a tree numbered as the grower numbers a depth-first tree, from its
    nodes' "is a split" flags alone: the root is node 0, and the split node taken from the top
    of a stack gets the next two ids (left, right); its children that are split nodes go on the
    stack, the right one first, so that the left subtree is numbered first (``grower``).

    Parameters
    ----------
    is_split : ndarray of uint8
        ``np.packbits`` of the ``n_nodes`` nodes' flags.
    out : ndarray of int32, shape (n_splits,)
        Written: each split node's left child (its right child is the next id), in node order;
        ``TREE_LEAF`` for a split node the numbering does not reach (flags that are not such a
        tree's: the caller checks the returned count).

    Returns
    -------
    int
        The number of nodes the numbering gives: ``n_nodes`` for such a tree.
    """
    rank = np.empty(n_nodes, dtype=np.int64)
    stack = np.empty(max(out.shape[0], 1), dtype=np.int64)  # at most a split node each
    return number_depth_first(is_split, n_nodes, out, rank, stack)


@kernel(nogil=True)
def number_depth_first(is_split, n_nodes, out, rank, stack):
    """``depth_first_children`` in given scratch: ``rank`` (int64, ``n_nodes`` entries or more)
    and ``stack`` (int64, as many entries as ``out`` or more, at least one), for callers that
    reuse them from tree to tree."""
    n_splits = 0
    for i in range(n_nodes):
        rank[i] = n_splits  # each node's place among the split nodes
        n_splits += packed_bit(is_split, i)
    out[:] = TREE_LEAF
    # The stack's room: flags that are not a tree's cannot overrun it.
    depth_limit = min(max(n_splits, 1), stack.shape[0])
    top = 0
    if n_nodes > 0 and packed_bit(is_split, 0):
        stack[0] = 0
        top = 1
    n_numbered = 1
    n_popped = 0
    while top > 0 and n_popped < out.shape[0]:
        top -= 1
        node = stack[top]
        n_popped += 1
        left = n_numbered
        n_numbered += 2
        if rank[node] < out.shape[0]:  # else flags with more split nodes than ``out``
            out[rank[node]] = left
        for child in (left + 1, left):  # right first: the left subtree is numbered first
            if child < n_nodes and packed_bit(is_split, child) and top < depth_limit:
                stack[top] = child
                top += 1
    return n_numbered


@kernel(nogil=True)
def sum_to_root(is_split, children_left, children_right, leaf_rows, out):
    """Every node's row of a per-node quantity given its leaves' (``leaf_rows``, in node order):
    a split node's is its children's summed, left plus right. Children come after their parent,
    so one pass backwards over the nodes fills them.

    Parameters
    ----------
    is_split : ndarray of uint8
        ``np.packbits`` of each node's "is a split" flag.
    children_left, children_right : ndarray of int32, shape (n_splits,)
        The split nodes' children, in node order.
    leaf_rows : ndarray, shape (n_leaves, n_columns)
    out : ndarray, shape (n_nodes, n_columns)
        Written.
    """
    n_leaf = 0
    for i in range(out.shape[0]):
        if not packed_bit(is_split, i):
            out[i] = leaf_rows[n_leaf]
            n_leaf += 1
    splits = _split_ids(is_split, out.shape[0], children_left.shape[0])
    for j in range(splits.shape[0] - 1, -1, -1):
        i, left, right = splits[j], children_left[j], children_right[j]
        for c in range(out.shape[1]):
            out[i, c] = out[left, c] + out[right, c]


@kernel(inline="always")
def _split_ids(is_split, n_nodes, n_splits):
    """The ids of the split nodes (``n_splits`` of them) among ``n_nodes``, in node order, from
    their ``np.packbits`` flags ``is_split``."""
    splits = np.empty(n_splits, dtype=np.int64)
    j = 0
    for i in range(n_nodes):
        if packed_bit(is_split, i):
            splits[j] = i
            j += 1
    return splits


@kernel(nogil=True)
def pool_to_root(is_split, children_left, children_right, weight, value, impurity):
    """A regression tree's split nodes' means and impurities (weighted variances) pooled from
    their children's, by the law of total variance; with ``w = w_l + w_r``:

        mean     = (w_l mean_l + w_r mean_r) / w
        impurity = (w_l (impurity_l + (mean_l - mean)^2) + w_r (impurity_r + (mean_r - mean)^2)) / w

    Mathematically the node's own mean and variance; in floating point within a few ulps of
    the grower's sums over the node's rows (tested). Every squared-error tree's split nodes hold
    these numbers (``Tree.from_growth``), so a tree can travel and be stored with its leaves'
    alone (``wire.encode``); but a tree grown under monotonic constraints, whose clipped leaf
    values would not pool to its nodes' moments, or with the Poisson criterion, whose
    impurities are deviances, keeps its own (``from_growth``'s ``exact``).
    Children come after their parent: one pass backwards.

    Parameters
    ----------
    is_split, children_left, children_right :
        The tree's split nodes, as for ``sum_to_root``.
    weight : ndarray of float64, shape (n_nodes,)
        Every node's weight (``weighted_n_node_samples``).
    value : ndarray of float64, shape (n_nodes, k)
        The means of k target columns (multi-output: each pooled, and the impurity the mean of
        the outputs' variances).
    impurity : ndarray of float64, shape (n_nodes,)
        The leaves' rows are read, the split nodes' written.
    """
    splits = _split_ids(is_split, value.shape[0], children_left.shape[0])
    n_outputs = value.shape[1]
    for j in range(splits.shape[0] - 1, -1, -1):
        i, left, right = splits[j], children_left[j], children_right[j]
        w_left, w_right = weight[left], weight[right]
        w = w_left + w_right
        if w > 0.0:
            # k target columns: each output's law, and their mean (the impurity's)
            shift_left = 0.0
            shift_right = 0.0
            for o in range(n_outputs):
                mean = (w_left * value[left, o] + w_right * value[right, o]) / w
                d_left = value[left, o] - mean
                d_right = value[right, o] - mean
                shift_left += d_left * d_left
                shift_right += d_right * d_right
                value[i, o] = mean
            spread = w_left * (impurity[left] + shift_left / n_outputs)
            spread += w_right * (impurity[right] + shift_right / n_outputs)
            impurity[i] = spread / w
        else:
            value[i, :] = 0.0
            impurity[i] = 0.0


@kernel(inline="always")
def packed_bit(bits, i):
    """Flag i of ``np.packbits`` output ``bits`` (its bit order: the first flag is the high bit
    of the first byte)."""
    return (bits[i >> 3] >> (7 - (i & 7))) & 1 == 1

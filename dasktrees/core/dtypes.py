"""Dtypes and bin constants shared by every kernel: the one place they are defined."""

import numpy as np

# Binned features are uint8 codes stored rows x features (C order): a node's candidate features
# draw a different handful of columns at every node, and with rows contiguous one cache line
# serves all of them for a row (measured in docs/benchmarks.md: features x rows was slower):
#
#   codes[i] = [c(row i, f0), c(row i, f1), ..., c(row i, f_{p-1})]     (uint8)
#
# Codes 0 .. n_bins_non_missing[f] - 1 are values in increasing order (numeric) or category
# codes (categorical); the last uint8 code is reserved for missing values.
X_BINNED_DTYPE = np.uint8
MAX_BINS = 255  # non-missing bins per feature, at most
MISSING_BIN = 255  # code of a missing value, whatever the feature's number of bins
N_BIN_CODES = 256  # histogram rows per feature: every code, the missing one included

X_DTYPE = np.float64  # raw values given to the prediction kernels (categories as codes)

# A categorical split sends a set of category codes to the left child: 256 bits, one per code.
BITSET_WORDS = N_BIN_CODES // 32
BITSET_DTYPE = np.uint32

# scikit-learn's conventions for the flat tree arrays.
TREE_LEAF = -1  # children_left / children_right of a leaf
TREE_UNDEFINED = -2  # feature / threshold of a leaf

# The flat arrays of a fitted tree (``tree.Tree``, scikit-learn's names): the one place their
# dtypes are defined (model files store the same, little-endian). One entry per node, but
# ``value`` (n_nodes, n_values) and ``categorical_bitsets`` (n_bitsets, BITSET_WORDS).
TREE_ARRAY_DTYPES = {
    "children_left": np.int32,
    "children_right": np.int32,
    "feature": np.int32,
    "threshold": np.float64,
    "bin_threshold": np.uint8,
    "missing_go_to_left": np.uint8,
    "is_categorical": np.uint8,
    "bitset_idx": np.int32,
    "categorical_bitsets": BITSET_DTYPE,
    "value": np.float64,
    "n_node_samples": np.int64,
    "weighted_n_node_samples": np.float64,
    "impurity": np.float64,
    "node_depth": np.int32,
}

# One record per node while the tree grows. The grower fills it; tree.Tree turns it into the
# scikit-learn style flat arrays (feature, threshold, children_left, ...).
NODE_DTYPE = np.dtype(
    [
        ("feature", np.int32),  # split feature, TREE_UNDEFINED for a leaf
        ("bin_threshold", np.uint8),  # numeric: rows with code <= bin_threshold go left
        ("missing_go_to_left", np.uint8),
        ("is_categorical", np.uint8),
        ("bitset_idx", np.int32),  # categorical: row of the bitset table, else -1
        ("left", np.int32),
        ("right", np.int32),
        ("parent", np.int32),
        ("depth", np.int32),
        ("start", np.int64),  # the node's rows are sample_indices[start:stop]
        ("stop", np.int64),
        ("n_samples", np.int64),
        ("weighted_n_samples", np.float64),
        ("impurity", np.float64),
        ("improvement", np.float64),  # weighted impurity decrease of the chosen split
    ]
)

# The fields prediction reads, packed in one aligned record per node so that a node visit
# touches one cache line instead of one per array (a deep tree does not fit in cache).
ROUTING_NODE_DTYPE = np.dtype(
    [
        ("threshold", np.float64),
        ("left", np.int32),
        ("right", np.int32),
        ("feature", np.int32),
        ("bitset_idx", np.int32),
        ("bin_threshold", np.uint8),
        ("missing_go_to_left", np.uint8),
        ("is_categorical", np.uint8),
    ],
    align=True,
)

# A forest's split nodes for prediction, 16 bytes each (four to a cache line, against two of
# ROUTING_NODE_DTYPE's): routed on the rows' bin codes, a node needs no float threshold. Leaves
# are not stored as nodes: a child index ``k < 0`` is leaf ``~k`` of the forest's leaf table.
PACKED_NODE_DTYPE = np.dtype(
    [
        ("left", np.int32),  # split node index, or ~leaf index
        ("right", np.int32),
        # The split feature in the low 30 bits; bit 30: missing values go left; bit 31:
        # categorical split.
        ("feature", np.uint32),
        # Numeric split: codes <= split go left; categorical: the row of the forest's bitsets.
        ("split", np.uint32),
    ]
)
PACKED_FEATURE_MASK = (1 << 30) - 1
PACKED_MISSING_LEFT = 1 << 30
PACKED_CATEGORICAL = 1 << 31

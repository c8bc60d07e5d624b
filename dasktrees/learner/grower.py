"""Grow one tree from binned rows and per-row weights (numba kernels).

The grower sees only arrays: the codes (rows x features), targets, weights (sample_weight x
class_weight x bootstrap count, zero-weight rows already dropped from ``sample_indices``) and the
resolved parameters. It returns growth records; ``tree.Tree`` turns them into flat arrays.

Each node's best split is found when the node is created and kept in its record; the frontier
says which node to split next:

* depth-first (no ``max_leaf_nodes``): a stack, left subtree first;
* best-first (``max_leaf_nodes``): a heap keyed by ``(-improvement, node_id)``, as scikit-learn
  does.

Splitting a node partitions its rows and sums each child's statistics (in the same pass for two
classes, else over the child's now contiguous rows).

The whole loop runs in numba (``_grow_nodes``): a full-depth tree on a million rows has some
hundred thousand nodes, and a Python step per node would cost more than all the histograms.
``grow`` prepares its arrays in Python and calls the loop, again only when the frontier or the
bitset table needs more room. The kernels that run once per node are compiled without numba's
runtime, and the split search is inlined into the loop (``_jit`` says why). They pass the tree's
state in named tuples (``NodeRows``, ``BinTables``, ``Rules``, ``Scratch``, ``Frontier``,
``Progress``, ``BestSplit``), which numba compiles as plain tuples.
"""

from typing import NamedTuple

import numpy as np

from ..core.bitsets import bitset_add, bitset_has
from ..core.criteria import (
    POISSON,
    SQUARED_ERROR,
    impurity,
    is_regression,
    several_outputs,
    stats_weight,
)
from ..core.dtypes import (
    BITSET_DTYPE,
    BITSET_WORDS,
    N_BIN_CODES,
    NODE_DTYPE,
    TREE_LEAF,
    TREE_UNDEFINED,
)
from ..core.kernel_cache import kernel
from ..core.rng import child_key, mix64, new_state, next_below
from . import wire
from .buffers import Buffers, scratch_array
from .cost_complexity import prune_cost_complexity
from .histogram import (
    ORDERED_CODES_ABOVE,
    TRACK_TOUCHED_BELOW,
    build_histogram,
    build_histograms,
    compact,
    node_statistics,
    signed_weights,
)
from .jit import inlined_node_kernel, node_kernel
from .splitting import (
    N_CUT_ROWS,
    NO_SPLIT,
    RowBuffers,
    SplitRule,
    category_order,
    child_value,
    middle_edge,
    partition,
    random_category_cut,
    random_cut,
    scan_cuts,
)
from .tree import Tree

EPSILON = np.finfo(np.float64).eps

# Rows of the float scratch matrix ``vec`` (n_channels wide each).
_RIGHT, _PREFIX, _MISSING, _BEST_LEFT, _TOTAL, _LEFT_CHILD, _RIGHT_CHILD = range(7)
N_SCRATCH_VECTORS = 7
# Rows of the integer scratch matrix ``ibuf`` (N_BIN_CODES wide each).
_TOUCHED, _BINS, _ORDER, _BEST_BINS, _MERGE, _RARE = 0, 1, 2, 3, 4, 5
N_INT_SCRATCH = 6


class NodeRows(NamedTuple):
    """The rows a tree grows on. The node owning ``sample_indices[start:stop]`` finds its
    targets and weights at ``y[start:stop]`` and ``w[start:stop]``: the partition moves them
    with their rows (see ``histogram.build_histogram``).

    The partition of a node of more than ``ORDERED_CODES_ABOVE`` rows also moves its rows'
    codes, kept in ``node_codes``, so its children find theirs at ``node_codes[start:stop]``
    (the root too, when it has more than that many rows): their histograms and partition read
    codes in sequence rather than gather them from a binned table too large for the caches
    (docs/benchmarks.md). The children of smaller nodes gather from ``codes``, unless
    ``all_ordered``: a row whose codes fit in one word moves them at every node instead of its
    index.
    """

    codes: np.ndarray  # uint8 (n_rows, n_features): bin codes
    # float64 (n_in_bag x targets a row), in sample_indices order: class index or target (row
    # i's k targets at ``y[i * k : (i + 1) * k]``); for two classes the signed weights
    # (``histogram.signed_weights``)
    y: np.ndarray
    w: np.ndarray  # float64 (n_in_bag,): weights; for two classes the same array as y
    sample_indices: np.ndarray  # int64 (n_in_bag,)
    # uint8 (n_in_bag, n_features rounded up to 8), or no rows when no node is large: codes of
    # the large nodes, in rows padded to whole 64-bit words
    node_codes: np.ndarray
    node_words: np.ndarray  # uint64 (n_in_bag, n_features / 8 rounded up): node_codes' words
    # Every node's codes in node order, the partitions moving them at every node: then no node
    # gathers from ``codes``, and ``sample_indices`` are not moved (nothing reads them).
    all_ordered: bool


class BinTables(NamedTuple):
    """What the split search knows of each feature's bins (``BinMapper.kernel_arrays``)."""

    n_bins: np.ndarray  # int32 (n_features,): non-missing bins
    is_categorical: np.ndarray  # bool (n_features,)
    bin_values: np.ndarray  # float64 (n_features, N_BIN_CODES): each bin's representative value
    edges: np.ndarray  # float64 (n_features, N_BIN_CODES): each bin's upper edge


class Rules(NamedTuple):
    """The criterion and the stopping rules, resolved (``_params.GrowthParams``)."""

    criterion: int
    n_classes: int  # values a node holds: classes, or target columns (regression)
    random_splitter: bool  # one random cut per drawn feature (extra-trees)
    max_features: int
    max_depth: int
    min_samples_split: int
    min_samples_leaf: int
    min_weight_leaf: float  # absolute: min_weight_fraction_leaf times the total weight
    min_impurity_decrease: float
    min_samples_category: float  # rarer categories of a node go with its missing values
    tree_order: bool  # categories ordered once per tree (Scratch.tree_keys), not per node
    root_key: np.uint64  # the random key of the root (``SubtreeRoot.key``)
    root_depth: int  # the depth of the root in its tree (0 but for a subtree)
    root_lower: float  # the bounds on the root's value (``_node_bounds``; infinite but for a
    root_upper: float  # subtree under monotonic constraints)
    # int8 (n_features,): each feature's monotonic constraint (1, -1, 0), or no entries when
    # no feature has one (``_node_bounds``)
    monotonic: np.ndarray


class Scratch(NamedTuple):
    """The tree's random stream, the features it may split on, and the work space of the split
    search and the partition, reused by every node."""

    state: np.ndarray  # the random stream (``_random.new_state``)
    candidates: np.ndarray  # int64: the features the tree may split on
    features: np.ndarray  # int64 (n_features,): the draw of features without replacement
    # float64 (n_hist, N_BIN_CODES, n_channels): histograms; a large node fills one for each of
    # its first min(max_features, n_features) features in one pass, the others use hist[0]
    hist: np.ndarray
    stats: np.ndarray  # float64 (N_BIN_CODES, n_channels): its non-empty bins, compacted
    vec: np.ndarray  # float64 (N_SCRATCH_VECTORS, n_channels): statistics, rows _RIGHT, ...
    ibuf: np.ndarray  # int64 (N_INT_SCRATCH, N_BIN_CODES): bins and orders, rows _TOUCHED, ...
    keys: np.ndarray  # float64 (N_BIN_CODES,): the categories' sort keys
    cuts: np.ndarray  # float64 (N_CUT_ROWS, N_BIN_CODES): the cut scan's prefix sums and scores
    # the partition's scratch (n_in_bag rows; the words' like NodeRows.node_words)
    row_buffers: RowBuffers
    identity: np.ndarray  # int64 (rows of NodeRows.node_codes,): 0, 1, 2, ...: their row of i
    tree_keys: np.ndarray  # float64 (n_orders, n_features, N_BIN_CODES or 0): tree_category_keys
    # uint64 (node capacity,): each node's random key, its children's derived from it
    # (``rng.child_key``); a node's draws are the stream of its key
    node_keys: np.ndarray
    # float64 (node capacity, 3) with monotonic constraints, else no rows: each node's bounds
    # on its value (lower, upper), and the middle of its split's children's values
    node_bounds: np.ndarray


class Frontier(NamedTuple):
    """The nodes still to split: a stack (depth-first) or a heap keyed by ``(-improvement,
    node_id)`` (best-first, as scikit-learn grows ``max_leaf_nodes`` trees)."""

    best_first: bool
    ids: np.ndarray  # int64: node ids; -1 is the root, still to open
    keys: np.ndarray  # float64: heap keys (best-first)


class BestSplit(NamedTuple):
    """A node's best split, as ``find_split`` returns it and ``_record_split`` records it."""

    score: float  # ``NO_SPLIT`` when no valid split exists
    feature: int
    bin_threshold: int
    missing_go_to_left: bool
    is_categorical: bool
    # codes at the head of ``Scratch.ibuf[_BEST_BINS]`` that a categorical split sends left
    n_left_bins: int
    # rare categories sent right with the missing values, whose codes follow the left ones
    n_rare_right: int
    # half-way between the keys of the last left and the first right category in the order cut
    # (infinite for a cut on missingness or a numeric split)
    middle: float
    key_row: int  # the row of ``Scratch.tree_keys`` whose order was cut (the class's)


class Progress(NamedTuple):
    """How far a tree's growth is: what ``_grow_nodes`` takes and returns."""

    n_nodes: int
    n_bitsets: int  # rows of the bitset table used by categorical splits
    n_split: int
    n_frontier: int  # nodes on the frontier
    w_root: float  # the root's weight, which scales every improvement; set when it is opened


# A tree whose rows' codes fit in this many 64-bit words (at most 8 features) keeps them in node
# order at every node: its partitions move a row's one word of codes instead of its row index,
# and every node reads its codes in sequence (faster on flights; at 2 words, diamonds gained
# nothing; docs/benchmarks.md).
_ALL_ORDERED_MAX_WORDS = 1

# Small nodes are often constant in a drawn feature: checking their few codes first spares the
# histogram fill and compaction (measured in docs/benchmarks.md, flights).
_CHECK_CONSTANT_BELOW = 256


@kernel(inline="always")
def _is_constant(codes, f, sample_indices, start, stop):
    """Whether every row of the node has the same code of feature ``f`` (missing included)."""
    u = np.uint64  # unsigned: no fix-up of negative indices per row (``build_histogram``)
    first = codes[u(sample_indices[start]), f]
    for i in range(u(start + 1), u(stop)):
        if codes[u(sample_indices[i]), f] != first:
            return False
    return True


@node_kernel
def _pool_rare_categories(stats, bins, n_touched, min_rows, missing, rare):
    """Move the categories with fewer than ``min_rows`` rows (``stats[:, 0]``) out of the
    compacted ``stats[:n_touched]`` / ``bins[:n_touched]`` (in order) into ``missing``'s
    statistics, their codes into ``rare``. Returns ``(n_kept, n_rare)``."""
    n_kept = 0
    n_rare = 0
    for j in range(n_touched):
        if stats[j, 0] < min_rows:
            for c in range(stats.shape[1]):
                missing[c] += stats[j, c]
            rare[n_rare] = bins[j]
            n_rare += 1
        else:
            if n_kept != j:
                bins[n_kept] = bins[j]
                for c in range(stats.shape[1]):
                    stats[n_kept, c] = stats[j, c]
            n_kept += 1
    return n_kept, n_rare


@node_kernel
def _route_absent_categories(bitset, tree_keys, middle, n_codes, missing_left, held_right):
    """With a per-tree order, add to a categorical split's left set (``bitset``, holding the
    codes of the node's rows that go left) the codes of the feature (``n_codes`` of them) that
    no row of the node holds and that go left at predict time: a category of the tree's rows
    when its key (``tree_keys``) is below ``middle``, half-way between the last left and the
    first right key of the node's cut (infinite for a cut on missingness); a category no row of
    the tree holds (a NaN key) when the missing values go left.

    The node's own categories keep their side: the left ones are in ``bitset``, the right ones'
    keys are at least ``middle``, and ``held_right`` lists the node's rare categories sent right
    with the missing values. No training row changes side.
    """
    for c in range(n_codes):
        key = tree_keys[c]
        if bitset_has(bitset, c) or not (key < middle or (np.isnan(key) and missing_left)):
            continue
        rare = False
        for j in range(held_right.shape[0]):
            rare |= held_right[j] == c
        if not rare:
            bitset_add(bitset, c)


@inlined_node_kernel
def find_split(
    rows, start, stop, node_impurity, tables, rules, scratch, ordered, lower, upper, outputs
):
    """Best split of one node over up to ``max_features`` features drawn from ``candidates``.

    Features are drawn without replacement. As in scikit-learn, every drawn feature counts
    towards ``max_features``, but the draw goes on past ``max_features`` until one feature that is
    not constant in the node has been found (or none is left).

    Parameters
    ----------
    rows : NodeRows
        The node owns ``rows.sample_indices[start:stop]``.
    tables : BinTables
        A numeric threshold goes to the bin edge nearest the middle of the two bins it separates
        in the node (``splitting.middle_edge``).
    rules : Rules
    scratch : Scratch
        On entry ``scratch.vec[_TOTAL]`` holds the node statistics; on return
        ``scratch.vec[_BEST_LEFT]`` holds the left child's statistics of the best split, and
        ``scratch.ibuf[_BEST_BINS]`` the codes a categorical split sends left.
    ordered : bool
        Whether the node's codes are in node order (``NodeRows``); true for every node of more
        than ``ORDERED_CODES_ABOVE`` rows.
    lower, upper : float
        The node's bounds on its children's values (``_node_bounds``).
    outputs : int or None
        Target or class columns (``criteria``); None for one.

    A categorical feature's categories with fewer than ``rules.min_samples_category`` rows in
    the node are pooled with its missing values before the categories are ordered: they go to
    the missing values' side, and their codes join the left set when that side is left.
    With a per-tree order, ``_record_split`` adds the categories the node does not hold to the
    side the tree's order puts them on (``_route_absent_categories``); with a per-node order
    they go right.

    Returns
    -------
    BestSplit
        Its ``score`` is ``NO_SPLIT`` when no valid split exists.
    """
    codes, y, w, sample_indices = rows.codes, rows.y, rows.w, rows.sample_indices
    criterion, random_splitter = rules.criterion, rules.random_splitter
    max_features = rules.max_features
    state, candidates, features = scratch.state, scratch.candidates, scratch.features
    hist, ibuf = scratch.hist, scratch.ibuf
    n_features = candidates.shape[0]
    for k in range(n_features):
        features[k] = candidates[k]
    best = BestSplit(NO_SPLIT, -1, 0, False, False, 0, 0, np.inf, 0)
    n_nonconstant = 0
    n_drawn = 0
    n_first = 0
    # The node's codes: in node order (NodeRows.node_codes, row i of the node at i), or
    # gathered by row from ``codes``.
    node_codes, row_of = codes, sample_indices
    if ordered:
        node_codes, row_of = rows.node_codes, scratch.identity
    if stop - start > TRACK_TOUCHED_BELOW and not random_splitter:
        # A large node: its first features are drawn now and their histograms filled in one
        # pass over its rows, each row's codes read once instead of once per feature (its rows
        # outgrow the caches; docs/benchmarks.md). The best splitter draws nothing else from
        # the stream between two features, so the same features come out, in the same order.
        n_first = min(max_features, n_features, hist.shape[0])
        for d in range(n_first):
            k = d + next_below(state, n_features - d)
            f = features[k]
            features[k] = features[d]
            features[d] = f
        build_histograms(
            rows.node_codes, features, n_first, start, stop, y, w, criterion, hist, outputs
        )
    while n_drawn < n_features and (n_drawn < max_features or n_nonconstant == 0):
        if n_drawn < n_first:
            f = features[n_drawn]
            filled = hist[n_drawn]
            n_touched = -1  # a large node's bins are not tracked: compact walks them all
            n_drawn += 1
        else:
            k = n_drawn + next_below(state, n_features - n_drawn)
            f = features[k]
            features[k] = features[n_drawn]
            features[n_drawn] = f
            n_drawn += 1
            if stop - start <= _CHECK_CONSTANT_BELOW and _is_constant(
                node_codes, f, row_of, start, stop
            ):
                continue
            filled = hist[0]
            n_touched = build_histogram(
                node_codes, f, row_of, start, stop, y, w, criterion, filled, ibuf[_TOUCHED], outputs
            )
        best, nonconstant = _evaluate_feature(
            f, filled, n_touched, node_impurity, best, tables, rules, scratch, lower, upper, outputs
        )
        n_nonconstant += nonconstant
    return best


@inlined_node_kernel
def _evaluate_feature(
    f, filled, n_touched, node_impurity, best, tables, rules, scratch, lower, upper, outputs
):
    """Score the cuts of feature ``f`` from its histogram ``filled`` (as ``build_histogram``
    left it, ``n_touched`` its return; zeroed again here) and keep the better of them and
    ``best``: the part of the split search after the histogram, shared by ``find_split`` (the
    node's own rows) and ``split_from_histograms`` (histograms summed across row blocks).
    A feature with a monotonic constraint keeps only the cuts that respect it within the
    node's bounds ``[lower, upper]``. ``outputs``: target or class columns (``criteria``).

    Returns
    -------
    best : BestSplit
    nonconstant : bool
        Whether the feature takes two values or more in the node (missing counted as one).
    """
    n_bins, is_categorical = tables.n_bins, tables.is_categorical
    bin_values, edges = tables.bin_values, tables.edges
    criterion, n_classes, random_splitter = rules.criterion, rules.n_classes, rules.random_splitter
    min_samples_leaf, min_weight_leaf = rules.min_samples_leaf, rules.min_weight_leaf
    state, stats, vec, ibuf, keys = (
        scratch.state,
        scratch.stats,
        scratch.vec,
        scratch.ibuf,
        scratch.keys,
    )
    order = ibuf[_ORDER]
    bins = ibuf[_BINS]
    n_touched = compact(filled, ibuf[_TOUCHED], n_touched, n_bins[f], bins, stats, vec[_MISSING])
    n_rare = 0
    if is_categorical[f] and rules.min_samples_category > 1.0:
        n_touched, n_rare = _pool_rare_categories(
            stats, bins, n_touched, rules.min_samples_category, vec[_MISSING], ibuf[_RARE]
        )
    if n_touched + (vec[_MISSING, 0] > 0.0) < 2:
        return best, False  # constant in this node
    n_orders = 1
    if is_categorical[f] and not is_regression(criterion) and n_classes > 2 and not random_splitter:
        n_orders = n_classes  # one-vs-rest orders: the multiclass heuristic
    for t in range(n_orders):
        key_row = 0  # the row of scratch.tree_keys whose order is cut (a class's)
        if is_categorical[f]:
            target_class = (
                t if n_orders > 1 else (next_below(state, n_classes) if n_classes > 2 else 1)
            )
            if not is_regression(criterion):
                key_row = target_class
            category_order(
                stats,
                bins,
                n_touched,
                criterion,
                target_class,
                scratch.tree_keys[key_row, f],
                keys,
                order,
                ibuf[_MERGE],
            )
        else:
            for j in range(np.uint64(n_touched)):
                order[j] = j
        only_cut = -1
        random_bin = 0  # a numeric random cut's bin threshold (``random_cut``)
        if random_splitter and n_touched >= 2:
            if is_categorical[f]:
                only_cut = random_category_cut(n_touched, state)
            else:
                only_cut, random_bin = random_cut(bins, n_touched, bin_values[f], state)
        score, position, missing_left = scan_cuts(
            stats,
            order,
            n_touched,
            vec[_MISSING],
            vec[_TOTAL],
            criterion,
            node_impurity,
            min_samples_leaf,
            min_weight_leaf,
            only_cut,
            rules.monotonic[f] if rules.monotonic.shape[0] > 0 else 0,
            lower,
            upper,
            vec[_PREFIX],
            scratch.cuts,
            outputs,
        )
        if score > best.score:
            best_left = vec[_BEST_LEFT]
            for c in range(best_left.shape[0]):
                best_left[c] = vec[_MISSING, c] if missing_left else 0.0
            for j in range(np.uint64(position + 1)):
                row = np.uint64(order[j])
                for c in range(best_left.shape[0]):
                    best_left[c] += stats[row, c]
                ibuf[_BEST_BINS, j] = bins[row]
            if vec[_MISSING, 0] == 0.0:
                # No missing value reached this node: at predict time missing values
                # follow the heavier child.
                w_left = stats_weight(best_left, criterion, outputs)
                w_node = stats_weight(vec[_TOTAL], criterion, outputs)
                missing_left = w_left >= w_node - w_left
            bin_threshold = bins[order[position]]
            if not is_categorical[f]:
                if position == n_touched - 1:  # split on missingness: all values left
                    bin_threshold = n_bins[f] - 1
                elif random_splitter:
                    bin_threshold = random_bin
                else:
                    bin_threshold = middle_edge(
                        bins[position], bins[position + 1], bin_values[f], edges[f]
                    )
            n_left_bins = position + 1
            n_rare_right = 0
            middle = np.inf
            if is_categorical[f]:
                # The pooled rare categories follow the left codes: counted among them
                # when they go left with the missing values, kept after them otherwise.
                for j in range(n_rare):
                    ibuf[_BEST_BINS, n_left_bins + j] = ibuf[_RARE, j]
                if missing_left:
                    n_left_bins += n_rare
                else:
                    n_rare_right = n_rare
                if position + 1 < n_touched:
                    middle = 0.5 * (keys[order[position]] + keys[order[position + 1]])
            best = BestSplit(
                score,
                f,
                bin_threshold,
                missing_left,
                is_categorical[f],
                n_left_bins,
                n_rare_right,
                middle,
                key_row,
            )
    return best, True


@inlined_node_kernel
def _open_node(
    node_id, parent, depth, start, stop, total, node_impurity, nodes, values, rules, lower, upper,
    outputs,
):  # fmt: skip
    """Record a new node (a leaf until ``_record_split``) and test the stopping rules.

    ``total`` holds the node's statistics. ``nodes`` and ``values`` must have room for
    ``node_id``. Its value (the mean, or the share of class 1) is clipped to its bounds
    ``[lower, upper]`` (``_node_bounds``; infinite without monotonic constraints).
    ``outputs``: target or class columns (``criteria``).

    Returns
    -------
    bool
        Whether the node may be split: ``find_split`` is then run on it.
    """
    criterion, n_classes, max_depth = rules.criterion, rules.n_classes, rules.max_depth
    min_samples_split, min_samples_leaf = rules.min_samples_split, rules.min_samples_leaf
    min_weight_leaf = rules.min_weight_leaf
    classification = not is_regression(criterion)
    w_node = stats_weight(total, criterion, outputs)
    record = nodes[node_id]
    record["feature"] = TREE_UNDEFINED
    record["bin_threshold"] = 0
    record["missing_go_to_left"] = 0
    record["is_categorical"] = 0
    record["bitset_idx"] = -1
    record["left"] = TREE_LEAF
    record["right"] = TREE_LEAF
    record["parent"] = parent
    record["depth"] = depth
    record["start"] = start
    record["stop"] = stop
    record["n_samples"] = stop - start
    record["weighted_n_samples"] = w_node
    record["impurity"] = node_impurity
    record["improvement"] = 0.0
    if classification:
        # The weighted class counts, not their fractions: a forest ships them
        # (``wire.encode``), and the node weight and fractions follow exactly
        # (``tree.class_fractions``).
        for k in range(n_classes):
            values[node_id, k] = total[1 + k]
        share = total[2] / w_node if n_classes == 2 and w_node > 0.0 else 0.0
        if share < lower or share > upper:  # two classes under a monotonic constraint
            share = min(max(share, lower), upper)
            values[node_id, 0] = w_node * (1.0 - share)
            values[node_id, 1] = w_node * share
    elif outputs is None:
        mean = total[2] / w_node if w_node > 0.0 else 0.0
        values[node_id, 0] = min(max(mean, lower), upper)
    else:  # the mean of each target column (no constraints)
        for o in range(outputs):
            values[node_id, o] = total[2 + o] / w_node if w_node > 0.0 else 0.0
    n_node = stop - start
    return not (
        depth >= max_depth
        or n_node < min_samples_split
        or n_node < 2 * min_samples_leaf
        or w_node < 2 * min_weight_leaf
        or node_impurity <= EPSILON
    )


@node_kernel
def outputs_decrease(total, left, right, w_node, w_left, w_right):
    """The decrease of w x impurity by a split of a node on k target columns (statistics of
    3 + k channels): the mean over the outputs of each one's decrease, taken as
    ``_record_split`` takes one target's (about the node's mean)."""
    n_outputs = total.shape[0] - 3
    decrease = 0.0
    for o in range(2, 2 + n_outputs):
        mean = total[o] / w_node
        d_left = left[o] - w_left * mean
        d_right = right[o] - w_right * mean
        d_node = total[o] - w_node * mean
        decrease += (
            d_left * d_left / w_left + d_right * d_right / w_right - d_node * d_node / w_node
        )
    return decrease / n_outputs


@inlined_node_kernel
def _record_split(
    node_id, total, node_impurity, w_root, split, nodes, bitsets, n_bitsets, n_codes, rules,
    scratch, outputs,
):  # fmt: skip
    """Record ``find_split``'s result ``split`` (a ``BestSplit``) for node ``node_id`` if the
    split is worth making (``min_impurity_decrease``); a categorical split takes the next row of
    ``bitsets``.

    ``n_codes`` gives each feature's number of non-missing codes (``BinTables.n_bins``);
    ``outputs`` the target or class columns (``criteria``).

    Returns
    -------
    n_bitsets : int
        Bitsets used after this node.
    splittable : bool
        Whether the split was recorded (the node is then put on the frontier).
    """
    feature, n_left_bins, n_rare_right = split.feature, split.n_left_bins, split.n_rare_right
    criterion, min_impurity_decrease = rules.criterion, rules.min_impurity_decrease
    ibuf, vec = scratch.ibuf, scratch.vec
    if split.score == NO_SPLIT:
        return n_bitsets, False
    w_node = stats_weight(total, criterion, outputs)
    left = vec[_BEST_LEFT]
    right = vec[_RIGHT]
    for c in range(total.shape[0]):  # not ``total - left``: no temporary array per node
        right[c] = total[c] - left[c]
    w_left = stats_weight(left, criterion, outputs)
    w_right = stats_weight(right, criterion, outputs)
    if outputs is not None and criterion == SQUARED_ERROR:  # k target columns
        improvement = outputs_decrease(total, left, right, w_node, w_left, w_right) / w_root
    elif criterion == SQUARED_ERROR:
        # The decrease of w x variance is s_l^2 / w_l + s_r^2 / w_r - s^2 / w (s the sums of
        # w * y): no sum of w * y^2 per child, so the histograms need not carry one. The sums
        # are taken about the node's mean, or a large mean would cancel the decrease away.
        mean = total[2] / w_node
        d_left = left[2] - w_left * mean
        d_right = right[2] - w_right * mean
        d_node = total[2] - w_node * mean
        improvement = (
            d_left * d_left / w_left + d_right * d_right / w_right - d_node * d_node / w_node
        ) / w_root
    elif criterion == POISSON:
        # The decrease of w x mean deviance is s_l ln mu_l + s_r ln mu_r - s ln mu (the sums of
        # w y ln y cancel), taken as ratios of the children's means to the node's, which stay
        # near 1 where the logarithms themselves would cancel. ``cut_score`` kept both sums > 0.
        mean = total[2] / w_node
        improvement = (
            left[2] * np.log(left[2] / w_left / mean) + right[2] * np.log(right[2] / w_right / mean)
        ) / w_root
    else:
        improvement = (w_node / w_root) * (
            node_impurity
            - w_left / w_node * impurity(left, criterion, outputs)
            - w_right / w_node * impurity(right, criterion, outputs)
        )
    if improvement + EPSILON < min_impurity_decrease:
        return n_bitsets, False
    record = nodes[node_id]
    record["feature"] = feature
    record["bin_threshold"] = split.bin_threshold
    record["missing_go_to_left"] = split.missing_go_to_left
    record["is_categorical"] = split.is_categorical
    record["improvement"] = improvement
    if split.is_categorical:
        record["bitset_idx"] = n_bitsets
        bitsets[n_bitsets] = 0
        for j in range(n_left_bins):
            bitset_add(bitsets[n_bitsets], ibuf[_BEST_BINS, j])
        if scratch.tree_keys.shape[2] > 0:
            _route_absent_categories(
                bitsets[n_bitsets],
                scratch.tree_keys[split.key_row, feature],
                split.middle,
                n_codes[feature],
                record["missing_go_to_left"] == 1,  # a plain bool: one signature
                ibuf[_BEST_BINS, n_left_bins : n_left_bins + n_rare_right],
            )
        n_bitsets += 1
    return n_bitsets, True


# What ``split_from_histograms`` made of a node.
NODE_LEAF, NODE_SPLIT, NODE_NEEDS_FEATURES = 0, 1, 2


@kernel(nogil=True)
def first_drawn_features(key, candidates, n_first, out):
    """The first ``n_first`` features the split search of the node of random key ``key`` draws
    from ``candidates`` (in order, into ``out``), as ``find_split`` draws them when nothing else
    is drawn between two features (the best splitter): the features whose histograms a node
    grown from summed histograms needs."""
    state = np.empty(1, dtype=np.uint64)
    state[0] = mix64(key)
    features = candidates.copy()
    n_features = features.shape[0]
    for d in range(min(n_first, n_features)):
        k = d + next_below(state, n_features - d)
        f = features[k]
        features[k] = features[d]
        features[d] = f
        out[d] = f


@kernel(nogil=True)
def split_from_histograms(
    node_id,
    parent,
    depth,
    n_rows,
    node_impurity,
    key,
    w_root,
    hists,
    slot_of_feature,
    nodes,
    values,
    bitsets,
    n_bitsets,
    tables,
    rules,
    scratch,
    lower,
    upper,
):
    """Open node ``node_id`` and choose its split from histograms of its rows summed over row
    blocks, as ``_grow_nodes`` opens a node and ``find_split`` searches it from its rows.
    ``lower`` and ``upper`` bound its value (``_node_bounds``). Of one target column.

    The node has more than ``TRACK_TOUCHED_BELOW`` rows (``n_rows``), so the search takes the
    path ``find_split`` takes for large nodes: the histograms of the features it draws, every
    bin walked. ``scratch.vec[_TOTAL]`` holds the node's statistics on entry; on a split,
    ``scratch.vec[_BEST_LEFT]`` and ``scratch.vec[_RIGHT]`` hold its children's.

    Parameters
    ----------
    hists : ndarray of float64, shape (n_slots, N_BIN_CODES, n_channels)
        The node's histograms, of the features ``slot_of_feature`` gives a slot (-1: none);
        zeroed as they are read.
    nodes, values, bitsets :
        The records ``_open_node`` and ``_record_split`` write at ``node_id`` (and
        ``n_bitsets``).

    Returns
    -------
    status : int
        ``NODE_LEAF``, ``NODE_SPLIT``, or ``NODE_NEEDS_FEATURES`` when the search drew a
        feature without a histogram (every histogram given was of a constant feature).
    n_bitsets : int
    """
    total = scratch.vec[_TOTAL]
    if not _open_node(
        node_id, parent, depth, 0, n_rows, total, node_impurity, nodes, values, rules, lower,
        upper, None,
    ):  # fmt: skip
        return NODE_LEAF, n_bitsets
    state, candidates, features = scratch.state, scratch.candidates, scratch.features
    state[0] = mix64(key)
    n_features = candidates.shape[0]
    for k in range(n_features):
        features[k] = candidates[k]
    best = BestSplit(NO_SPLIT, -1, 0, False, False, 0, 0, np.inf, 0)
    n_nonconstant = 0
    n_drawn = 0
    while n_drawn < n_features and (n_drawn < rules.max_features or n_nonconstant == 0):
        k = n_drawn + next_below(state, n_features - n_drawn)
        f = features[k]
        features[k] = features[n_drawn]
        features[n_drawn] = f
        n_drawn += 1
        slot = slot_of_feature[f]
        if slot < 0:
            return NODE_NEEDS_FEATURES, n_bitsets
        best, nonconstant = _evaluate_feature(
            f, hists[slot], -1, node_impurity, best, tables, rules, scratch, lower, upper, None
        )
        n_nonconstant += nonconstant
    n_bitsets, split = _record_split(
        node_id,
        total,
        node_impurity,
        w_root,
        best,
        nodes,
        bitsets,
        n_bitsets,
        tables.n_bins,
        rules,
        scratch,
        None,
    )
    return (NODE_SPLIT if split else NODE_LEAF), n_bitsets


class HistogramSplit(NamedTuple):
    """What ``split_node`` made of a node."""

    status: int  # NODE_LEAF, NODE_SPLIT or NODE_NEEDS_FEATURES
    record: np.void  # its NODE_DTYPE record (children not set)
    values: np.ndarray  # float64 (n_values,)
    bitset: np.ndarray | None  # uint32 (BITSET_WORDS,): a categorical split's left codes
    left: np.ndarray  # float64 (n_channels,): the statistics of its children, on a split
    right: np.ndarray


def split_node(hists, slot_of_feature, total, node_impurity, key, depth, parent, w_root, tables,
               rules, scratch, bounds=(-np.inf, np.inf)):  # fmt: skip
    """``split_from_histograms`` on one node of statistics ``total`` (the grower's channels;
    ``total[0]`` its rows) and value ``bounds``, with records of its own."""
    scratch.vec[_TOTAL][:] = total
    nodes = np.zeros(1, dtype=NODE_DTYPE)
    values = np.zeros((1, rules.n_classes))
    bitsets = np.zeros((1, BITSET_WORDS), dtype=BITSET_DTYPE)
    status, n_bitsets = split_from_histograms(
        0, parent, depth, int(total[0]), node_impurity, np.uint64(key), w_root, hists,
        slot_of_feature, nodes, values, bitsets, 0, tables, rules, scratch, float(bounds[0]),
        float(bounds[1]),
    )  # fmt: skip
    return HistogramSplit(
        status,
        nodes[0].copy(),
        values[0].copy(),
        bitsets[0].copy() if n_bitsets else None,
        scratch.vec[_BEST_LEFT].copy(),
        scratch.vec[_RIGHT].copy(),
    )


def search_scratch(candidates, n_features, n_values, criterion, tree_keys):
    """A ``Scratch`` for ``split_from_histograms`` (no rows: its row buffers are empty)."""
    n_channels = 4 if is_regression(criterion) else n_values + 1
    no_rows = np.empty(0, dtype=np.int64)
    return Scratch(
        new_state(0),
        np.ascontiguousarray(candidates, dtype=np.int64),
        np.empty(n_features, dtype=np.int64),
        np.zeros((1, N_BIN_CODES, n_channels)),
        np.zeros((N_BIN_CODES, n_channels)),
        np.zeros((N_SCRATCH_VECTORS, n_channels)),
        np.zeros((N_INT_SCRATCH, N_BIN_CODES), dtype=np.int64),
        np.zeros(N_BIN_CODES),
        np.zeros((N_CUT_ROWS, N_BIN_CODES)),
        RowBuffers(no_rows, np.empty(0), np.empty(0), np.empty((0, 1), dtype=np.uint64)),
        no_rows,
        tree_keys,
        np.empty(0, dtype=np.uint64),
        np.empty((0, 3)),
    )


def bin_tables(bin_arrays):
    """The split search's ``BinTables`` of ``bin_arrays`` (``BinMapper.kernel_arrays``), with
    the types the kernels were compiled for."""
    return BinTables(
        np.ascontiguousarray(bin_arrays.n_bins, dtype=np.int32),
        np.ascontiguousarray(bin_arrays.is_categorical, dtype=np.bool_),
        np.ascontiguousarray(bin_arrays.bin_values, dtype=np.float64),
        np.ascontiguousarray(bin_arrays.thresholds, dtype=np.float64),
    )


def _node_capacity(n_rows, max_depth, min_samples_leaf, max_leaf_nodes):
    """Most nodes a tree on ``n_rows`` rows can have under the stopping rules.

    Every leaf holds at least ``min_samples_leaf`` rows and a binary tree has one node fewer than
    twice its leaves. The growth arrays are allocated at this size (``Workspace``), uninitialised:
    the pages a smaller tree never touches cost nothing, where doubling would allocate and copy.
    """
    leaves = max(1, n_rows // max(1, min_samples_leaf))
    if max_leaf_nodes > 0:
        leaves = min(leaves, max_leaf_nodes)
    if max_depth < 62:
        leaves = min(leaves, 1 << max_depth)
    return 2 * leaves - 1


def _targets_a_row(n_values, params, n_outputs=1):
    """The targets a row of a tree whose nodes hold ``n_values`` values under ``params``: its
    target columns for regression, else its ``n_outputs`` class columns."""
    return n_values if is_regression(params.criterion) else n_outputs


class Workspace(NamedTuple):
    """The large arrays a tree's growth fills, allocated once for all the trees of a task.

    Dask's worker processes return freed memory to the system at once (its nannies set
    ``MALLOC_TRIM_THRESHOLD_``), so arrays allocated afresh for every tree faulted their pages in
    again (measured in docs/benchmarks.md). ``grow`` takes the prefix it needs.
    """

    nodes: np.ndarray  # NODE_DTYPE (capacity,): the node records
    values: np.ndarray  # float64 (capacity, n_values)
    buffer: np.ndarray  # int64 (n_rows,): the partition's scratch for row indices
    # float64 (n_rows x targets a row, ``_targets_a_row``): targets in sample_indices order
    node_y: np.ndarray
    node_w: np.ndarray  # float64 (n_rows,): weights in sample_indices order
    y_buffer: np.ndarray  # float64 (as node_y): the partition's scratch for targets
    w_buffer: np.ndarray  # float64 (n_rows,): the partition's scratch for weights
    rows: np.ndarray  # int64 (n_rows,): the tree's sample_indices (``_grow_records``)
    node_codes: np.ndarray  # uint8 (n_rows, n_features rounded up to 8): NodeRows.node_codes
    # uint64 (n_rows, n_features / 8 rounded up): the partition's scratch for NodeRows.node_words
    words_buffer: np.ndarray
    identity: np.ndarray  # int64 (n_rows,): Scratch.identity
    node_keys: np.ndarray  # uint64 (capacity,): Scratch.node_keys
    node_bounds: np.ndarray  # float64 (capacity or 0, 3): Scratch.node_bounds
    buffers: Buffers  # arrays kept from tree to tree (``buffers``): the search's, the encoder's

    @staticmethod
    def _capacity(n_rows, params):
        return _node_capacity(
            max(1, n_rows), params.max_depth, params.min_samples_leaf, params.max_leaf_nodes
        )

    @classmethod
    def for_rows(cls, n_rows, n_values, n_features, params, n_outputs=1):
        """Room for any tree on up to ``n_rows`` rows of ``n_features`` features under
        ``params`` (``GrowthParams``), its nodes holding ``n_values`` values, of ``n_outputs``
        class columns (classification)."""
        n_rows = max(1, int(n_rows))
        capacity = cls._capacity(n_rows, params)
        code_rows = _ordered_rows(n_rows)
        n_targets = n_rows * _targets_a_row(n_values, params, n_outputs)
        return cls(
            np.empty(capacity, dtype=NODE_DTYPE),  # every field of a node is set by _open_node
            np.empty((capacity, n_values)),
            np.empty(n_rows, dtype=np.int64),
            np.empty(n_targets),
            np.empty(n_rows),
            np.empty(n_targets),
            np.empty(n_rows),
            np.empty(n_rows, dtype=np.int64),
            np.empty((code_rows, 8 * _n_words(n_features)), dtype=np.uint8),
            np.empty((code_rows, _n_words(n_features)), dtype=np.uint64),
            np.arange(code_rows, dtype=np.int64),
            np.empty(capacity, dtype=np.uint64),
            np.empty((capacity if params.constrained else 0, 3)),
            Buffers(),
        )

    def fits(self, n_rows, n_values, n_features, params, n_outputs=1):
        """Whether a tree on ``n_rows`` rows under ``params`` fits in this workspace."""
        return (
            self.buffer.shape[0] >= n_rows
            and self.node_y.shape[0] >= n_rows * _targets_a_row(n_values, params, n_outputs)
            and self.nodes.shape[0] >= self._capacity(n_rows, params)
            and self.values.shape[1] == n_values
            and self.words_buffer.shape[1] == _n_words(n_features)
            and self.node_codes.shape[0] >= _ordered_rows(n_rows)
            and (
                self.node_bounds.shape[0] >= self._capacity(n_rows, params)
                or not params.constrained
            )
        )


@inlined_node_kernel
def _in_node_order(rows, nodes, node_id):
    """Whether node ``node_id``'s codes are in node order (``NodeRows.node_codes``): if its
    parent's partition moved them (every partition does when ``rows.all_ordered``), or, for the
    root, if they were gathered."""
    if rows.all_ordered:
        return True
    parent = nodes[node_id]["parent"]
    above = nodes[node_id] if parent < 0 else nodes[parent]
    return above["stop"] - above["start"] > ORDERED_CODES_ABOVE


@inlined_node_kernel
def _partition_node(node_id, n_nodes, nodes, bitsets, rows, two_classes, scratch, outputs):
    """Partition node ``node_id``'s rows (``rows.sample_indices``, with targets and weights)
    by its recorded split, its children to be nodes ``n_nodes`` (left) and ``n_nodes + 1``
    (right). For two classes the partition also sums the children's statistics (into
    ``scratch.vec[_LEFT_CHILD]`` and ``scratch.vec[_RIGHT_CHILD]``).

    Returns
    -------
    start, stop, boundary : int
        The left child's rows are ``[start:boundary]``, the right child's ``[boundary:stop]``.
    """
    record = nodes[node_id]
    start = record["start"]
    stop = record["stop"]
    rule = SplitRule(
        record["feature"],
        record["bin_threshold"],
        record["missing_go_to_left"] == 1,
        record["is_categorical"] == 1,
        bitsets[max(record["bitset_idx"], 0)],
    )
    boundary = partition(
        rows,
        start,
        stop,
        rule,
        _in_node_order(rows, nodes, node_id),
        rows.all_ordered or stop - start > ORDERED_CODES_ABOVE,
        not rows.all_ordered,
        scratch.row_buffers,
        two_classes,
        scratch.vec[_LEFT_CHILD : _RIGHT_CHILD + 1],
        outputs,
    )
    record["left"] = n_nodes
    record["right"] = n_nodes + 1
    return start, stop, boundary


# The best-first frontier: a binary heap in two arrays, keyed by (-improvement, node id). The
# same sift steps as ``heapq`` (numba's port of CPython's) and the same tuple order, so the
# nodes come out in the same order as they did from a heap of tuples.


@inlined_node_kernel
def _heap_less(keys, ids, i, j):
    """Whether entry i sorts before entry j: ``(keys[i], ids[i]) < (keys[j], ids[j])`` as
    tuples compare (the first unequal field decides, so a NaN key compares False)."""
    if keys[i] != keys[j]:
        return keys[i] < keys[j]
    return ids[i] < ids[j]


@node_kernel
def _heap_sift_down(keys, ids, start, pos):
    """``heapq._siftdown``: move entry ``pos`` up towards ``start`` to its place."""
    key, node = keys[pos], ids[pos]
    while pos > start:
        parent = (pos - 1) >> 1
        if keys[parent] != key:
            before = key < keys[parent]
        else:
            before = node < ids[parent]
        if not before:
            break
        keys[pos], ids[pos] = keys[parent], ids[parent]
        pos = parent
    keys[pos], ids[pos] = key, node


@node_kernel
def _heap_sift_up(keys, ids, pos, end):
    """``heapq._siftup`` on the heap ``[0, end)``: fill ``pos`` from below, then sift down."""
    start = pos
    key, node = keys[pos], ids[pos]
    child = 2 * pos + 1
    while child < end:
        right = child + 1
        if right < end and not _heap_less(keys, ids, child, right):
            child = right
        keys[pos], ids[pos] = keys[child], ids[child]
        pos = child
        child = 2 * pos + 1
    keys[pos], ids[pos] = key, node
    _heap_sift_down(keys, ids, start, pos)


@inlined_node_kernel
def _frontier_push(best_first, ids, keys, n, node, key):
    """Put ``node`` on the frontier of ``n`` entries (a stack, or a heap keyed by ``key``);
    returns the new size."""
    ids[n] = node
    if best_first:
        keys[n] = key
        _heap_sift_down(keys, ids, 0, n)
    return n + 1


@inlined_node_kernel
def _frontier_pop(best_first, ids, keys, n):
    """Take the next node from the frontier of ``n`` entries: the top of the stack, or the
    heap's smallest key (``heapq.heappop``). The size becomes ``n - 1``."""
    last = n - 1
    if not best_first or last == 0:
        return ids[last]
    node = ids[0]
    keys[0], ids[0] = keys[last], ids[last]
    _heap_sift_up(keys, ids, 0, last)
    return node


@inlined_node_kernel
def _node_bounds(node_id, side, nodes, rules, scratch):
    """The bounds on the value of child ``side`` (0 left, 1 right) of node ``node_id`` (-1:
    the root, bounded by ``rules.root_lower`` and ``root_upper``), as scikit-learn bounds them
    under monotonic constraints: a child of a split on an unconstrained feature inherits its
    parent's; of a split on an increasing (decreasing) feature, the left child's upper (lower)
    bound and the right child's lower (upper) bound become the middle of the two children's
    values. Every leaf value of a
    subtree then lies within its root's bounds, so the tree is monotone along each constrained
    feature, and stays so when a subtree is cut to a leaf: its root keeps its own value,
    clipped to its bounds."""
    if node_id < 0:
        return rules.root_lower, rules.root_upper
    bounds = scratch.node_bounds[node_id]
    lower, upper = bounds[0], bounds[1]
    monotonic = rules.monotonic[nodes[node_id]["feature"]]
    if monotonic != 0:
        if (side == 0) == (monotonic > 0):
            upper = bounds[2]
        else:
            lower = bounds[2]
    return lower, upper


@kernel(_nrt=False, nogil=True)
def _grow_nodes(
    progress, max_splits, frontier, nodes, values, bitsets, rows, tables, rules, scratch, outputs
):
    """Split the nodes of the frontier (``frontier.ids[:progress.n_frontier]``) until it is
    empty, ``max_splits`` splits are made, or ``bitsets`` or the frontier lacks room for one more
    split: the caller then grows them and calls again. The stack is grown left subtree first;
    node -1 on it is the root, still to open.

    Splitting a node partitions its rows, sums each child's statistics (by the partition itself
    for two classes, else over the child's now contiguous rows), then opens the child
    (``_open_node``), searches its best split (``find_split``) and records it
    (``_record_split``). The root is opened by the same steps, as the only child of node -1.

    ``outputs`` is None for a tree of one target column: numba then compiles the loop without
    the code of several (docs/design.md, "Compiled for what a fit uses").

    Returns the new ``Progress`` as a plain tuple.
    """
    n_nodes, n_bitsets, n_split, n_frontier, w_root = progress
    best_first, ids, keys = frontier
    node_y, node_w = rows.y, rows.w
    criterion = rules.criterion
    two_classes = not is_regression(criterion) and rules.n_classes == 2
    constrained = rules.monotonic.shape[0] > 0
    vec = scratch.vec
    total = vec[_TOTAL]
    while (
        n_frontier > 0
        and n_split < max_splits
        and bitsets.shape[0] >= n_bitsets + 2
        and ids.shape[0] >= n_frontier + 2
    ):
        node_id = _frontier_pop(best_first, ids, keys, n_frontier)
        n_frontier -= 1
        if node_id < 0:  # the root, opened as a left child holding every row
            start = np.int64(0)
            stop = np.int64(rows.sample_indices.shape[0])
            boundary = stop
            depth = rules.root_depth
            last_side = 0
        else:
            start, stop, boundary = _partition_node(
                node_id, n_nodes, nodes, bitsets, rows, two_classes, scratch, outputs
            )
            depth = nodes[node_id]["depth"] + 1
            last_side = 1
        # One call of each step in the loop, for both children and the root: each inlined copy
        # of the split search is compiled again.
        splittable = False
        right_splittable = False
        for side in range(last_side, -1, -1):  # right child first
            child = n_nodes + side
            lo, hi = (start, boundary) if side == 0 else (boundary, stop)
            if two_classes and node_id >= 0:  # summed by the partition
                for c in range(3):
                    total[c] = vec[_LEFT_CHILD + side, c]
                child_impurity = impurity(total, criterion, outputs)
            else:
                child_impurity = node_statistics(node_y, node_w, lo, hi, criterion, total, outputs)
            if node_id < 0:
                key = rules.root_key
                if w_root == 0.0:  # else the root of a subtree, weighed by its whole tree's
                    w_root = stats_weight(total, criterion, outputs)
            else:
                key = child_key(scratch.node_keys[node_id], side)
            scratch.node_keys[child] = key
            lower, upper = -np.inf, np.inf
            if constrained:
                lower, upper = _node_bounds(node_id, side, nodes, rules, scratch)
                scratch.node_bounds[child, 0] = lower
                scratch.node_bounds[child, 1] = upper
            right_splittable = splittable
            splittable = _open_node(
                child, node_id, depth, lo, hi, total, child_impurity, nodes, values, rules, lower,
                upper, outputs,
            )  # fmt: skip
            if splittable:
                scratch.state[0] = mix64(key)  # the node's own random stream
                ordered = _in_node_order(rows, nodes, child)
                split = find_split(
                    rows, lo, hi, child_impurity, tables, rules, scratch, ordered, lower, upper,
                    outputs,
                )  # fmt: skip
                n_bitsets, splittable = _record_split(
                    child,
                    total,
                    child_impurity,
                    w_root,
                    split,
                    nodes,
                    bitsets,
                    n_bitsets,
                    tables.n_bins,
                    rules,
                    scratch,
                    outputs,
                )
                if splittable and constrained:  # the children's values: vec[_BEST_LEFT], _RIGHT
                    scratch.node_bounds[child, 2] = 0.5 * (
                        child_value(vec[_BEST_LEFT, 1], vec[_BEST_LEFT, 2], criterion)
                        + child_value(vec[_RIGHT, 1], vec[_RIGHT, 2], criterion)
                    )
        # Right child first, so that on a stack the left subtree is grown first.
        for child, pushed in ((n_nodes + 1, right_splittable), (n_nodes, splittable)):
            if pushed:
                n_frontier = _frontier_push(
                    best_first, ids, keys, n_frontier, child, -nodes[child]["improvement"]
                )
        if node_id < 0:
            n_nodes += 1
        else:
            n_nodes += 2
            n_split += 1
    return n_nodes, n_bitsets, n_split, n_frontier, w_root


class SubtreeRoot(NamedTuple):
    """Where the tree ``grow`` grows sits in a larger tree, when it is the subtree under one
    node of it (``distributed/levels.py``); for a whole tree, ``grow``'s default."""

    key: int  # the node's random key (``rng.child_key`` from the root's, the tree seed)
    depth: int  # its depth in the whole tree
    w_root: float  # the whole tree's root weight, which scales every improvement; 0: this root's
    total_weight: float  # the whole tree's total row weight (``min_weight_fraction_leaf``)
    tree_keys: np.ndarray | None  # the whole tree's ``tree_category_keys``; None: computed here
    # the bounds on its value under monotonic constraints (``_node_bounds``)
    bounds: tuple[float, float] = (-np.inf, np.inf)


def growth_rules(params, n_classes, total_weight, root_key, root_depth, root_bounds=None):
    """The ``Rules`` of a tree under ``params`` (``GrowthParams``) on rows weighing
    ``total_weight`` in all, its root's random key, depth and bounds (default infinite), with
    the types the loop kernel was compiled for."""
    lower, upper = (-np.inf, np.inf) if root_bounds is None else root_bounds
    return Rules(
        int(params.criterion),
        int(n_classes),
        bool(params.random_splitter),
        int(params.max_features),
        int(params.max_depth),
        int(params.min_samples_split),
        int(params.min_samples_leaf),
        float(params.min_weight_fraction_leaf * total_weight),
        float(params.min_impurity_decrease),
        float(params.min_samples_category),
        bool(params.tree_order),
        np.uint64(root_key),
        int(root_depth),
        float(lower),
        float(upper),
        monotonic_constraints(params),
    )


def monotonic_constraints(params):
    """``Rules.monotonic`` of ``params``: the constraints, or no entries when none is set."""
    monotonic = np.asarray(params.monotonic, dtype=np.int8)
    return np.ascontiguousarray(monotonic if monotonic.any() else monotonic[:0])


def grow(
    codes,
    y,
    w,
    sample_indices,
    bin_arrays,
    params,
    n_classes,
    seed,
    candidates,
    workspace,
    root=None,
):
    """Grow a tree on the rows ``sample_indices`` (reordered in place so that leaves own slices,
    except when every node keeps its codes in node order, ``NodeRows.all_ordered``).

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, n_features)
    y : ndarray of float64, shape (n_rows,) or (n_rows, k)
        Class index (classification) or target (regression); k columns for a multi-output
        tree (squared error, or a classification whose class indices are each below
        ``n_classes // k``).
    w : ndarray of float64, shape (n_rows,)
        Weights, positive on the rows of ``sample_indices``.
    sample_indices : ndarray of int64, shape (n_in_bag,)
    bin_arrays : binning.BinArrays
        The bins' tables (``BinMapper.kernel_arrays``).
    params : _params.GrowthParams
        The resolved tree parameters; ``max_leaf_nodes`` 0 grows depth-first with no limit, else
        best-first up to that many leaves.
    n_classes : int
        The values a node holds: the number of classes (k x K for k class columns, K =
        the block size of ``criteria``), or of target columns (regression).
    seed : int
        Seed of the feature draws and random cuts.
    candidates : ndarray of int64
        Features the tree may split on.
    workspace : Workspace
        Room for the node records and the per-row buffers (``Workspace.for_rows``), at least
        ``_node_capacity`` nodes and ``n_in_bag`` rows.
    root : SubtreeRoot, optional
        The subtree of a larger tree these rows grow (its root's key and depth, the whole
        tree's weights and category orders); by default a whole tree, whose root's key is
        ``seed``.

    Returns
    -------
    nodes : ndarray of NODE_DTYPE, shape (n_nodes,)
    values : ndarray of float64, shape (n_nodes, n_values)
        Weighted class counts (classification: the weights of the node's rows of each class,
        whose sum is the node's weight) or weighted mean target (regression).
    bitsets : ndarray of uint32, shape (n_bitsets, BITSET_WORDS)
        Left-going codes of the categorical splits.

    ``nodes`` and ``values`` are views into ``workspace``: the next tree grown in it overwrites
    them.
    """
    # Python, not a kernel: a kernel calling ``_grow_nodes`` would link the loop kernel's code
    # and optimise and compile it all over again. The bundles get the types the kernel was
    # compiled for, so that no other input compiles it again.
    if root is None:
        root = SubtreeRoot(int(seed), 0, 0.0, float(w.sum()), None)
    y = np.asarray(y, dtype=np.float64)
    n_outputs = 1 if y.ndim == 1 else y.shape[1]  # targets a row
    rules = growth_rules(params, n_classes, root.total_weight, root.key, root.depth, root.bounds)
    regression = is_regression(rules.criterion)
    n_channels = 3 + rules.n_classes if regression else rules.n_classes + 1
    n_rows = len(sample_indices)
    sample_indices = np.ascontiguousarray(sample_indices, dtype=np.int64)
    # y and w in sample_indices order; the partition keeps them aligned with their rows.
    node_y, node_w = workspace.node_y[: n_rows * n_outputs], workspace.node_w[:n_rows]
    # mode="clip" (the indices are rows of y): with "raise" numpy fills a temporary first
    np.take(y, sample_indices, axis=0, out=node_y.reshape((n_rows,) + y.shape[1:]), mode="clip")
    if n_outputs > 1 and not regression:
        # Each class column's codes become its channels (less the row count's) of the node
        # statistics: output o's class c is channel 1 + o * K + c, K classes a block.
        node_y.reshape(n_rows, n_outputs)[:] += np.arange(n_outputs) * (n_classes // n_outputs)
    np.take(np.asarray(w, dtype=np.float64), sample_indices, out=node_w, mode="clip")
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    kept = workspace.buffers  # the search's scratch, kept from tree to tree (``buffers``)
    category_keys = root.tree_keys
    if category_keys is None:
        category_keys = tree_category_keys(
            codes, sample_indices, node_y, node_w, bin_arrays.is_categorical, rules, kept
        )
    if not is_regression(rules.criterion) and rules.n_classes == 2:
        # Two classes: y becomes the signed weight (w for class 1, -w for class 0), the only
        # array the kernels then read and the partitions move (``NodeRows``).
        node_y = node_w = signed_weights(node_y, node_w, node_y)
    # Codes in node order (NodeRows), gathered for the root.
    code_rows = _ordered_rows(n_rows)
    node_codes = workspace.node_codes[:code_rows]
    _gather_rows(codes, sample_indices[:code_rows], node_codes)
    rows = NodeRows(
        codes,
        node_y,
        node_w,
        sample_indices,
        node_codes,
        node_codes.view(np.uint64),
        code_rows > 0 and _n_words(codes.shape[1]) <= _ALL_ORDERED_MAX_WORDS,
    )
    tables = bin_tables(bin_arrays)
    scratch = Scratch(
        new_state(int(seed)),
        np.ascontiguousarray(candidates, dtype=np.int64),
        kept.empty("grow.features", codes.shape[1], np.int64),
        kept.zeros(
            "grow.hist", (max(1, min(rules.max_features, len(candidates))), N_BIN_CODES, n_channels)
        ),
        kept.zeros("grow.stats", (N_BIN_CODES, n_channels)),
        kept.zeros("grow.vec", (N_SCRATCH_VECTORS, n_channels)),
        kept.zeros("grow.ibuf", (N_INT_SCRATCH, N_BIN_CODES), np.int64),
        kept.zeros("grow.keys", N_BIN_CODES),
        kept.zeros("grow.cuts", (N_CUT_ROWS, N_BIN_CODES)),
        RowBuffers(
            workspace.buffer[:n_rows],
            workspace.y_buffer[: n_rows * n_outputs],
            workspace.w_buffer[:n_rows],
            workspace.words_buffer[:code_rows],
        ),
        workspace.identity[:code_rows],
        category_keys,
        workspace.node_keys,
        workspace.node_bounds,
    )
    nodes, values = workspace.nodes, workspace.values
    bitsets = kept.table("grow.bitsets", 16, (BITSET_WORDS,), BITSET_DTYPE)
    # The frontier holds the root (-1), opened by the loop kernel itself.
    frontier = Frontier(params.max_leaf_nodes > 0, np.empty(64, dtype=np.int64), np.empty(64))
    frontier.ids[0] = -1
    max_splits = int(params.max_leaf_nodes) - 1 if frontier.best_first else len(nodes)
    # None for one column: the loop kernel is then compiled without the code of several.
    outputs = several_outputs(n_outputs)
    progress = Progress(0, 0, 0, 1, float(root.w_root))
    while progress.n_frontier > 0 and progress.n_split < max_splits:
        if len(bitsets) < progress.n_bitsets + 2:
            bitsets = _grown(bitsets, progress.n_bitsets)
            kept.keep("grow.bitsets", bitsets)
        if len(frontier.ids) < progress.n_frontier + 2:
            frontier = frontier._replace(
                ids=_grown(frontier.ids, progress.n_frontier),
                keys=_grown(frontier.keys, progress.n_frontier),
            )
        progress = Progress(
            *_grow_nodes(
                progress,
                max_splits,
                frontier,
                nodes,
                values,
                bitsets,
                rows,
                tables,
                rules,
                scratch,
                outputs,
            )  # fmt: skip
        )
    # Nodes left on the frontier (best-first growth stopped) carry a split that was never made:
    # they become leaves, with a leaf's split fields (``tree.LEAF_CONSTANTS``, what a pickled tree
    # gives back). Every other leaf has them already.
    left_over = frontier.ids[: progress.n_frontier]
    nodes = nodes[: progress.n_nodes]
    bitsets = bitsets[: progress.n_bitsets]
    if len(left_over):
        for name, value in LEAF_RECORD.items():
            nodes[name][left_over] = value
        bitsets = _used_rows(nodes, bitsets)
    bitsets = share_bitsets(nodes, bitsets, kept)
    return nodes, values[: progress.n_nodes], bitsets


def _used_rows(nodes, bitsets):
    """The rows of ``bitsets`` that categorical splits of ``nodes`` use, in their order, with
    ``bitset_idx`` renumbered: a best-first tree drops the rows written for the splits of the
    nodes left on its frontier, so that the rows are those of the splits made, whatever else
    was searched (a tree grown across workers searches more nodes than it splits)."""
    split = np.flatnonzero(nodes["bitset_idx"] >= 0)
    used = nodes["bitset_idx"][split]
    if len(used) == len(bitsets):
        return bitsets
    order = np.argsort(used, kind="stable")
    nodes["bitset_idx"][split[order]] = np.arange(len(used), dtype=nodes["bitset_idx"].dtype)
    return bitsets[used[order]]


# Odd 64-bit multipliers, one per bitset word: a row's key for ``share_bitsets``.
_ROW_KEY = np.random.default_rng(20261124).integers(0, 2**63, BITSET_WORDS, dtype=np.uint64) * 2 + 1


def share_bitsets(nodes, bitsets, buffers=None):
    """The tree's bitset table with each distinct row once, in order of first use, and the
    categorical splits' ``bitset_idx`` (in ``nodes``, rewritten) pointing into it.

    The grower writes a row for every categorical split, but a tree splits again and again on
    the same subsets of a feature's few levels: a diamonds tree's 1,860 categorical splits use
    65 distinct rows, and the rows (32 bytes each) were 0.94 bytes a node of a forest's memory
    and files (docs/benchmarks.md). The table returned is the tree's own (``bitsets`` and the
    scratch may be ``buffers``')."""
    if len(bitsets) < 2:
        return bitsets.copy()
    # A hash table of twice the rows or more, a power of two (``_share_rows``).
    slot_bits = int(2 * len(bitsets) - 1).bit_length()
    number = scratch_array(buffers, "shared.number", len(bitsets), np.int64)
    distinct = scratch_array(buffers, "shared.distinct", bitsets.shape, bitsets.dtype)
    slots = scratch_array(buffers, "shared.slots", 1 << slot_bits, np.int64)
    n_distinct = _share_rows(nodes, bitsets, _ROW_KEY, slots, 64 - slot_bits, number, distinct)
    return distinct[:n_distinct].copy()


@kernel(nogil=True)
def _share_rows(nodes, bitsets, row_key, slots, shift, number, distinct):
    """``share_bitsets``' kernel: write each distinct row of ``bitsets`` once into
    ``distinct``, in order of first use, its number into ``number`` for every row, and rewrite
    the categorical splits' ``nodes["bitset_idx"]`` with it. Returns the number of distinct rows.

    Rows are found through an open-addressing table ``slots`` (2 ** (64 - ``shift``) entries,
    more than rows) keyed by ``sum(row * row_key)`` modulo 2**64; a candidate is compared word by
    word, so keys that collide only cost probes. (``np.unique`` over 64-bit keys was slower, most
    of its time reading and rewriting the node records; docs/benchmarks.md.)
    """
    u = np.uint64
    n_words = bitsets.shape[1]
    mask = u(slots.shape[0] - 1)
    shift = u(shift)
    slots[:] = -1
    n_distinct = 0
    for r in range(bitsets.shape[0]):
        key = u(0)
        for k in range(n_words):
            key += u(bitsets[r, k]) * row_key[k]
        # Fibonacci hashing: the key's well-mixed high bits pick the first slot.
        slot = (key * u(0x9E3779B97F4A7C15)) >> shift
        while True:
            d = slots[slot]
            if d < 0:
                slots[slot] = n_distinct
                for k in range(n_words):
                    distinct[n_distinct, k] = bitsets[r, k]
                number[r] = n_distinct
                n_distinct += 1
                break
            same = True
            for k in range(n_words):
                if distinct[d, k] != bitsets[r, k]:
                    same = False
                    break
            if same:
                number[r] = d
                break
            slot = (slot + u(1)) & mask
    for i in range(nodes.shape[0]):
        b = nodes[i]["bitset_idx"]
        if b >= 0:
            nodes[i]["bitset_idx"] = number[b]
    return n_distinct


def _ordered_rows(n_rows):
    """Rows of codes in node order a tree on ``n_rows`` rows keeps: all of them, or none when
    no node of it has more than ``ORDERED_CODES_ABOVE`` rows (see ``_in_node_order``)."""
    return n_rows if n_rows > ORDERED_CODES_ABOVE else 0


def _n_words(n_features):
    """64-bit words that hold a row of ``n_features`` codes."""
    return max(1, -(-n_features // 8))


@kernel(nogil=True)
def _gather_rows(codes, sample_indices, out):
    """``out[i, :n_features] = codes[sample_indices[i]]`` (``out``'s rows may be wider)."""
    for i in range(sample_indices.shape[0]):
        row = sample_indices[i]
        for f in range(codes.shape[1]):
            out[i, f] = codes[row, f]


def tree_category_keys(codes, sample_indices, y, w, is_categorical, rules, buffers=None):
    """The keys that order each categorical feature's categories for a whole tree
    (``categorical_order="tree"``): over the tree's in-bag rows, weighted, each category's mean
    target (regression) or proportion of each class (classification, one row of keys per class).

    Returns
    -------
    ndarray of float64, shape (n_orders, n_features, N_BIN_CODES)
        ``[0, f, code]`` (regression) or ``[class, f, code]``; NaN for codes absent from the
        in-bag rows, which no node of the tree holds (its splits send them with the missing
        values: ``_route_absent_categories``). Of shape (n_orders, n_features, 0) for a per-node
        order, or no categorical feature: ``splitting.category_order`` then orders by the node.
    """
    regression = is_regression(rules.criterion)
    n_orders = 1 if regression else rules.n_classes
    categorical = np.flatnonzero(is_categorical).astype(np.int64)
    if not rules.tree_order or len(categorical) == 0:
        return np.zeros((n_orders, len(is_categorical), 0))
    shape = (n_orders, len(is_categorical), N_BIN_CODES)
    keys = np.zeros(shape) if buffers is None else buffers.zeros("grow.tree_keys", shape)
    _category_means(codes, sample_indices, y, w, categorical, regression, keys)
    return keys


@kernel()
def _category_means(codes, sample_indices, y, w, categorical, regression, keys):
    """Fill ``keys`` (zeros on entry) as ``tree_category_keys`` returns them, in one pass over
    the rows (a row's codes are contiguous)."""
    weight = np.zeros((keys.shape[1], keys.shape[2]))
    for i in range(sample_indices.shape[0]):
        row = sample_indices[i]
        target = 0 if regression else int(y[i])
        value = w[i] * y[i] if regression else w[i]
        for f in categorical:
            code = codes[row, f]
            weight[f, code] += w[i]
            keys[target, f, code] += value
    for t in range(keys.shape[0]):
        for f in categorical:
            for code in range(keys.shape[2]):
                if weight[f, code] > 0.0:
                    keys[t, f, code] /= weight[f, code]
                else:
                    keys[t, f, code] = np.nan


# The split fields of a leaf (``tree.LEAF_CONSTANTS``), given to the nodes a best-first tree
# left unsplit.
LEAF_RECORD = {
    "feature": TREE_UNDEFINED,
    "bin_threshold": 0,
    "missing_go_to_left": 0,
    "is_categorical": 0,
    "bitset_idx": -1,
    "improvement": 0.0,
}


def _grown(array, n):
    """``array`` with twice the rows, the first ``n`` copied."""
    grown = np.empty((2 * len(array),) + array.shape[1:], dtype=array.dtype)
    grown[:n] = array[:n]
    return grown


@kernel(nogil=True)
def _positive_rows(weights, out):
    """Write the rows of positive weight into ``out`` (``np.flatnonzero(weights > 0)`` without
    allocating); returns how many."""
    n = 0
    for i in range(weights.shape[0]):
        if weights[i] > 0.0:
            out[n] = i
            n += 1
    return n


def _grow_records(codes, y, weights, bin_arrays, params, n_classes, seed, candidates, workspace):
    """``grow``'s records (nodes, values, bitsets) for ``grow_tree``'s arguments."""
    if candidates is None:
        candidates = np.arange(codes.shape[1], dtype=np.int64)
    if workspace is not None and workspace.rows.shape[0] >= len(weights):
        sample_indices = workspace.rows[: _positive_rows(weights, workspace.rows)]
    else:
        sample_indices = np.flatnonzero(weights > 0).astype(np.int64, copy=False)
    # A node holds n_classes values: classes, or target columns (regression).
    n_rows, n_features = len(sample_indices), codes.shape[1]
    n_outputs = 1 if np.ndim(y) == 1 else np.shape(y)[1]
    if workspace is None or not workspace.fits(n_rows, n_classes, n_features, params, n_outputs):
        workspace = Workspace.for_rows(n_rows, n_classes, n_features, params, n_outputs)
    return grow(
        codes,
        y,
        weights,
        sample_indices,
        bin_arrays,
        params,
        n_classes,
        seed,
        candidates,
        workspace,
    )


def grow_tree(
    codes, y, weights, bin_arrays, params, n_classes, seed, candidates=None, workspace=None
):
    """Grow one tree and return it as a ``Tree``, pruned if ``params.ccp_alpha`` > 0 (here, so
    that a forest's trees are pruned in the tasks that grow them).

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, n_features)
    y : ndarray of float64, shape (n_rows,) or (n_rows, k)
        Class index (classification) or target (regression), of each of k target columns
        (``grow``).
    weights : ndarray of float64, shape (n_rows,)
        Row weights; rows of weight zero (e.g. out of the bootstrap sample) are left out.
    bin_arrays : binning.BinArrays
    params : _params.GrowthParams
    n_classes : int
        Values a node holds: classes (k blocks of as many for k class columns), or target
        columns (regression).
    seed : int
        Seed of the feature draws and random cuts.
    candidates : ndarray of int64, optional
        Features the tree may split on; all by default.
    workspace : Workspace, optional
        Reused between the trees of a task; a new one (of this tree's size) when None or too
        small.
    """
    records = _grow_records(
        codes, y, weights, bin_arrays, params, n_classes, seed, candidates, workspace
    )
    tree = Tree.from_growth(
        *records,
        bin_arrays.thresholds,
        codes.shape[1],
        params.criterion,
        params.own_moments,
        class_columns(y, params),
    )
    if params.ccp_alpha > 0.0:
        tree = prune_cost_complexity(tree, params.ccp_alpha)
    return tree


def grow_tree_state(
    codes, y, weights, bin_arrays, params, n_classes, seed, candidates=None, workspace=None
):
    """What a forest task ships of a tree (``grow_tree``'s arguments): without pruning,
    ``wire.encode`` straight from the growth records, so the tree's full arrays are never built
    on the worker; else the pruned tree's ``__getstate__``. ``wire.decode`` on the client
    takes either."""
    args = (codes, y, weights, bin_arrays, params, n_classes, seed, candidates, workspace)
    if params.ccp_alpha > 0.0:
        return grow_tree(*args).__getstate__()
    return wire.encode(
        *_grow_records(*args),
        bin_arrays.thresholds,
        codes.shape[1],
        params.criterion,
        None if workspace is None else workspace.buffers,
        depth_first=params.max_leaf_nodes == 0,  # the frontier a stack (``grow``)
        exact=params.own_moments,  # impurities shipped as grown
        n_outputs=class_columns(y, params),
    )


def class_columns(y, params):
    """The class columns of a classification's targets ``y`` (its blocks of values, ``Tree``);
    1 for a regression, whose k columns ``value`` says."""
    return 1 if is_regression(params.criterion) or np.ndim(y) == 1 else np.shape(y)[1]

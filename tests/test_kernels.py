"""Histogram, split-scan and partition kernels against naive numpy references."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dasktrees.core.criteria import (
    ENTROPY,
    GAIN_RATIO,
    GINI,
    MISCLASSIFICATION,
    SQUARED_ERROR,
    impurity,
)
from dasktrees.core.dtypes import MISSING_BIN, N_BIN_CODES
from dasktrees.learner.grower import NodeRows
from dasktrees.learner.histogram import (
    build_histogram,
    build_histograms,
    compact,
    node_statistics,
    signed_weights,
)
from dasktrees.learner.splitting import (
    N_CUT_ROWS,
    NO_SPLIT,
    RowBuffers,
    SplitRule,
    category_order,
    cut_score,
    partition,
    random_cut,
    scan_cuts,
    split_score,
)

CLASSIFICATION = [GINI, ENTROPY, GAIN_RATIO, MISCLASSIFICATION]
ALL_CRITERIA = CLASSIFICATION + [SQUARED_ERROR]


def random_node(seed, n_rows, n_bins, criterion, n_classes=3, missing_rate=0.2):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, n_bins, n_rows).astype(np.uint8)
    codes[rng.random(n_rows) < missing_rate] = MISSING_BIN
    if criterion == SQUARED_ERROR:
        y = rng.normal(size=n_rows)
    else:
        y = rng.integers(0, n_classes, n_rows).astype(np.float64)
    w = rng.choice([0.5, 1.0, 2.0], n_rows)
    rows = np.sort(rng.choice(n_rows, size=max(1, n_rows * 3 // 4), replace=False))
    return codes, y, w, rows.astype(np.int64)


def naive_stats(y, w, criterion, n_classes=3):
    if criterion == SQUARED_ERROR:
        return np.array([len(y), w.sum(), (w * y).sum(), (w * y * y).sum()])
    out = np.zeros(n_classes + 1)
    out[0] = len(y)
    np.add.at(out, y.astype(int) + 1, w)
    return out


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n_rows=st.integers(1, 3000),
    n_bins=st.integers(1, 255),
    criterion=st.sampled_from([GINI, SQUARED_ERROR]),
    n_classes=st.sampled_from([2, 3]),
)
def test_histogram_matches_naive(seed, n_rows, n_bins, criterion, n_classes):
    codes, y, w, rows = random_node(seed, n_rows, n_bins, criterion, n_classes)
    node_y, node_w = y[rows], w[rows]
    n_channels = 4
    kernel_y, kernel_w = node_y, node_w
    if criterion == GINI and n_classes == 2:  # three channels, from the signed weights
        n_channels = 3
        kernel_y = kernel_w = signed_weights(node_y, node_w, np.empty(len(rows)))
    hist = np.zeros((N_BIN_CODES, n_channels))
    touched = np.zeros(N_BIN_CODES, dtype=np.int64)
    n_touched = build_histogram(
        codes[:, None], 0, rows, 0, len(rows), kernel_y, kernel_w, criterion, hist, touched
    )
    bins = np.zeros(N_BIN_CODES, dtype=np.int64)
    stats = np.zeros((N_BIN_CODES, n_channels))
    missing = np.zeros(n_channels)
    n_filled = compact(hist, touched, n_touched, n_bins, bins, stats, missing)

    node_codes = codes[rows]
    present = np.unique(node_codes[node_codes != MISSING_BIN])
    assert n_filled == len(present)
    np.testing.assert_array_equal(bins[:n_filled], present)
    # Regression histograms carry n, w and wy; the sum of wy^2 stays zero (the search never
    # reads it).
    filled = 3 if criterion == SQUARED_ERROR else n_channels
    for k, b in enumerate(present):
        at = node_codes == b
        naive = naive_stats(node_y[at], node_w[at], criterion, n_channels - 1)
        np.testing.assert_allclose(stats[k, :filled], naive[:filled])
    assert not stats[:n_filled, filled:].any()
    at = node_codes == MISSING_BIN
    naive = naive_stats(node_y[at], node_w[at], criterion, n_channels - 1)
    np.testing.assert_allclose(missing[:filled], naive[:filled])
    assert not missing[filled:].any()
    assert not hist.any(), "compact must leave the histogram zeroed for the next feature"


@pytest.mark.parametrize("criterion", ALL_CRITERIA)
def test_node_statistics_and_impurity(criterion):
    _, y, w, rows = random_node(1, 500, 10, criterion)
    stats = np.zeros(4)
    value = node_statistics(y[rows], w[rows], 0, len(rows), criterion, stats)
    expected = naive_stats(y[rows], w[rows], criterion)
    np.testing.assert_allclose(stats, expected)
    if criterion == SQUARED_ERROR:
        mean = np.average(y[rows], weights=w[rows])
        assert value == pytest.approx(np.average((y[rows] - mean) ** 2, weights=w[rows]))
    else:
        p = expected[1:] / expected[1:].sum()
        reference = {
            GINI: 1 - (p**2).sum(),
            ENTROPY: -(p[p > 0] * np.log2(p[p > 0])).sum(),
            GAIN_RATIO: -(p[p > 0] * np.log2(p[p > 0])).sum(),
            MISCLASSIFICATION: 1 - p.max(),
        }[criterion]
        assert value == pytest.approx(reference)
        assert impurity(expected, criterion) == pytest.approx(reference)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_node_statistics_sums_in_row_order(n_classes):
    """Class weights summed row by row in row order: exactly the in-place sums."""
    _, y, w, rows = random_node(2, 700, 10, GINI, n_classes=n_classes)
    stats = np.zeros(n_classes + 1)
    kernel_y, kernel_w = y[rows], w[rows]
    if n_classes == 2:  # the kernels' two-class input: the signed weights
        kernel_y = kernel_w = signed_weights(y[rows], w[rows], np.empty(len(rows)))
    node_statistics(kernel_y, kernel_w, 0, len(rows), GINI, stats)
    expected = np.zeros(n_classes + 1)
    for yi, wi in zip(y[rows], w[rows]):
        expected[0] += 1.0
        expected[1 + int(yi)] += wi
    np.testing.assert_array_equal(stats, expected)


@settings(max_examples=60, deadline=None)
@given(
    n_bins=st.integers(1, N_BIN_CODES - 1), n_values=st.integers(1, 6), seed=st.integers(0, 2**31)
)
@example(n_bins=104, n_values=3, seed=0)  # flights' dest: runs of 32 and merges
def test_category_order_is_a_stable_argsort(n_bins, n_values, seed):
    """Categories in order of their statistic, ties in code order: np.argsort(kind="stable"),
    below and above the insertion-sort size (few distinct values: many ties)."""
    rng = np.random.default_rng(seed)
    stats = np.zeros((N_BIN_CODES, 3))
    stats[:n_bins, 1] = rng.integers(0, n_values, n_bins)
    stats[:n_bins, 2] = rng.integers(1, n_values + 1, n_bins)
    stats[:n_bins, 0] = stats[:n_bins, 1] + stats[:n_bins, 2]
    keys, order, scratch = (
        np.zeros(N_BIN_CODES),
        np.zeros(N_BIN_CODES, np.int64),
        np.zeros(N_BIN_CODES, np.int64),
    )
    bins = rng.permutation(N_BIN_CODES - 1)[:n_bins].astype(np.int64)  # the node's codes
    category_order(stats, bins, n_bins, GINI, 1, np.zeros(0), keys, order, scratch)
    share = stats[:n_bins, 2] / stats[:n_bins, 1:].sum(axis=1)
    np.testing.assert_array_equal(order[:n_bins], np.argsort(share, kind="stable"))
    # Ordered by the tree's keys of the node's codes instead (categorical_order="tree").
    tree_keys = rng.integers(0, n_values, N_BIN_CODES) / n_values
    category_order(stats, bins, n_bins, GINI, 1, tree_keys, keys, order, scratch)
    np.testing.assert_array_equal(
        order[:n_bins], np.argsort(tree_keys[bins[:n_bins]], kind="stable")
    )


def brute_force_best(stats, order, n_bins, missing, total, criterion, parent_impurity, msl):
    """Every cut and missing side, scored by the exact ``split_score``."""
    best = (NO_SPLIT, -1, False)
    for j in range(n_bins):
        left_bins = stats[order[: j + 1]].sum(axis=0)
        for missing_left in (False, True):
            if missing_left and missing[0] == 0:
                continue
            left = left_bins + missing if missing_left else left_bins
            right = total - left
            if left[0] < msl or right[0] < msl:
                continue
            score = split_score(left, right, criterion, parent_impurity)
            if criterion == SQUARED_ERROR:
                empty = left[1] <= 0 or right[1] <= 0
            else:
                empty = left[1:].sum() <= 0 or right[1:].sum() <= 0
            if not empty and score > best[0] + 1e-12:
                best = (score, j, missing_left)
    return best


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n_bins=st.integers(1, 40),
    criterion=st.sampled_from(ALL_CRITERIA),
    min_samples_leaf=st.integers(1, 5),
)
# A child of zero weight whose computed weight is rounding residue (gain ratio blew up on it).
@example(seed=1283008, n_bins=35, criterion=GAIN_RATIO, min_samples_leaf=1)
def test_scan_finds_the_brute_force_best_split(seed, n_bins, criterion, min_samples_leaf):
    rng = np.random.default_rng(seed)
    n_channels = 4
    stats = np.zeros((n_bins, n_channels))
    stats[:, 0] = rng.integers(1, 6, n_bins)
    if criterion == SQUARED_ERROR:
        stats[:, 1] = stats[:, 0] * rng.choice([0.5, 1.0], n_bins)
        stats[:, 2] = stats[:, 1] * rng.normal(size=n_bins)
        stats[:, 3] = stats[:, 2] ** 2 / stats[:, 1] + rng.random(n_bins)
    else:
        stats[:, 1:] = rng.integers(0, 4, (n_bins, 3)).astype(float)
        stats[:, 1:] *= stats[:, :1] / np.maximum(stats[:, 1:].sum(axis=1, keepdims=True), 1)
    missing = stats[0] * rng.integers(0, 2) * 0.5
    missing[0] = np.ceil(missing[0])
    total = stats.sum(axis=0) + missing
    parent_impurity = impurity(total, criterion)
    order = rng.permutation(n_bins).astype(np.int64)
    score, position, missing_left = scan_cuts(
        stats,
        order,
        n_bins,
        missing,
        total,
        criterion,
        parent_impurity,
        min_samples_leaf,
        0.0,
        -1,
        0,
        -np.inf,
        np.inf,
        np.zeros(n_channels),
        np.zeros((N_CUT_ROWS, N_BIN_CODES)),
        None,
    )
    expected = brute_force_best(
        stats, order, n_bins, missing, total, criterion, parent_impurity, min_samples_leaf
    )
    if expected[0] == NO_SPLIT:
        assert score == NO_SPLIT
        return
    assert score != NO_SPLIT
    # The scan's proxy score must select a split whose exact score is the best one.
    left = stats[order[: position + 1]].sum(axis=0) + (missing if missing_left else 0)
    chosen = split_score(left, total - left, criterion, parent_impurity)
    assert chosen == pytest.approx(expected[0], rel=1e-9, abs=1e-9)


def first_best_by_cut_score(stats, order, n_bins, missing, total, criterion, msl, mwl):
    """``scan_cuts``'s answer computed a cut at a time with ``cut_score``: the general loop."""
    best = (NO_SPLIT, -1, False)
    prefix = np.zeros(stats.shape[1])
    n_cuts = n_bins if missing[0] > 0 else n_bins - 1
    for j in range(n_cuts):
        prefix += stats[order[j]]
        sides = (False, True) if missing[0] > 0 and j < n_bins - 1 else (False,)
        for missing_left in sides:
            n_left = prefix[0] + missing[0] if missing_left else prefix[0]
            if n_left < msl or total[0] - n_left < msl:
                continue
            score = cut_score(prefix, missing, total, missing_left, criterion, 0.0, mwl, None)
            if score > best[0]:
                best = (score, j, missing_left)
    return best


@pytest.mark.parametrize("criterion", [GINI, SQUARED_ERROR])
@pytest.mark.parametrize("seed", range(100))
def test_two_channel_scan_gives_the_general_scans_numbers(criterion, seed):
    """Two-class Gini and squared error are scanned without ``cut_score``
    (``splitting._scan_two_channels``): the same cut, side and score, bit for bit, with missing
    rows, empty bins of weight zero and both leaf minimums."""
    rng = np.random.default_rng(seed)
    n_bins = int(rng.integers(1, 60))
    stats = np.zeros((N_BIN_CODES, 4 if criterion == SQUARED_ERROR else 3))
    stats[:n_bins, 0] = rng.integers(1, 6, n_bins)
    weights = stats[:n_bins, 0] * rng.choice([0.0, 0.5, 1.0, 3.0], n_bins)
    if criterion == SQUARED_ERROR:
        stats[:n_bins, 1] = weights
        stats[:n_bins, 2] = weights * rng.normal(size=n_bins)
    else:
        share = rng.random(n_bins) < 0.5
        stats[:n_bins, 1] = np.where(share, weights, 0.0)
        stats[:n_bins, 2] = np.where(share, 0.0, weights)
    missing = stats[0].copy() * rng.integers(0, 2)
    total = stats[:n_bins].sum(axis=0) + missing
    order = rng.permutation(n_bins).astype(np.int64)
    msl = int(rng.integers(1, 4))
    mwl = float(rng.choice([0.0, 0.0, 2.0, 6.0]))
    found = scan_cuts(
        stats,
        order,
        n_bins,
        missing,
        total,
        criterion,
        0.0,
        msl,
        mwl,
        -1,
        0,
        -np.inf,
        np.inf,
        np.zeros(stats.shape[1]),
        np.zeros((N_CUT_ROWS, N_BIN_CODES)),
        None,
    )
    expected = first_best_by_cut_score(stats, order, n_bins, missing, total, criterion, msl, mwl)
    assert found == expected


@pytest.mark.parametrize("criterion", ALL_CRITERIA)
def test_cut_score_orders_like_split_score(criterion):
    rng = np.random.default_rng(7)
    _, y, w, _ = random_node(3, 60, 5, criterion)
    total = naive_stats(y, w, criterion)
    parent_impurity = impurity(total, criterion)
    exact, proxy = [], []
    for _ in range(200):
        left = rng.random(len(y)) < rng.random()
        if left.all() or not left.any():
            continue
        prefix = naive_stats(y[left], w[left], criterion)
        exact.append(split_score(prefix, total - prefix, criterion, parent_impurity))
        proxy.append(
            cut_score(prefix, np.zeros(4), total, False, criterion, parent_impurity, 0.0, None)
        )
    exact, proxy = np.array(exact), np.array(proxy)
    assert (proxy > NO_SPLIT).all()
    # Wherever two candidates differ by more than rounding, both scores order them alike.
    distinct = np.abs(exact[:, None] - exact[None, :]) > 1e-9
    same_order = np.sign(exact[:, None] - exact[None, :]) == np.sign(
        proxy[:, None] - proxy[None, :]
    )
    assert same_order[distinct].all()


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    categorical=st.booleans(),
    missing_left=st.booleans(),
    two_classes=st.booleans(),
    move_codes=st.booleans(),
    move_rows=st.booleans(),
    n_outputs=st.sampled_from([1, 3]),
)
def test_partition_is_stable_and_complete(
    seed, categorical, missing_left, two_classes, move_codes, move_rows, n_outputs
):
    move_rows = move_rows or not move_codes  # rows that carry no codes carry their row index
    n_outputs = 1 if two_classes else n_outputs  # k target columns: a row's k targets move
    codes, y, w, rows = random_node(seed, 400, 20, GINI, n_classes=2 if two_classes else 3)
    # (k columns of targets: y, then its multiples, row i's at node_y[i * k : (i + 1) * k])
    targets = y[:, None] * np.arange(1, n_outputs + 1)
    children = np.full((2, 3), -1.0)
    start, stop = 10, len(rows) - 5
    before = rows.copy()
    node_y, node_w = targets[rows].ravel(), w[rows]
    if two_classes:  # the kernels' two-class rows: one array, the signed weights
        node_y = node_w = signed_weights(node_y, node_w, np.empty(len(rows)))
    # Two features: the split's, and a second one the codes in node order carry along.
    table = np.stack([codes, (codes * 7 + 3).astype(np.uint8)], axis=1)
    # Codes in node order are rows padded to whole 64-bit words (here one word: 2 codes + 6).
    node_codes = np.zeros((len(rows) if move_codes else 0, 8), np.uint8)
    node_codes[:, :2] = table[rows] if move_codes else node_codes[:, :2]
    node_codes[:, 7] = np.arange(len(node_codes)) % 256  # padding moves along, harmlessly
    node_codes_before = node_codes.copy()
    bitset = np.zeros(8, dtype=np.uint32)
    left_codes = {1, 4, 5, 17}
    for c in left_codes:
        bitset[c >> 5] |= np.uint32(1 << (c & 31))
    n = len(rows)
    node_rows = NodeRows(
        table, node_y, node_w, rows, node_codes, node_codes.view(np.uint64), not move_rows
    )
    boundary = partition(
        node_rows,
        start,
        stop,
        SplitRule(0, 9, missing_left, categorical, bitset),
        move_codes,  # the split feature's codes read in node order, or gathered by row
        move_codes,
        move_rows,
        RowBuffers(
            np.empty(n, np.int64),
            np.empty(n * n_outputs),
            np.empty(n),
            np.empty((len(node_codes), 1), np.uint64),
        ),
        two_classes,
        children,
        None if n_outputs == 1 else n_outputs,
    )
    segment = before[start:stop]
    seg_codes = codes[segment]
    if categorical:
        goes = np.isin(seg_codes, list(left_codes))
    else:
        goes = seg_codes <= 9
    goes = np.where(seg_codes == MISSING_BIN, missing_left, goes)
    assert boundary == start + goes.sum()
    expected = np.concatenate([before[:start], segment[goes], segment[~goes], before[stop:]])
    # Row indices move only when asked; targets and weights always.
    np.testing.assert_array_equal(rows, expected if move_rows else before)
    if two_classes:
        np.testing.assert_array_equal(node_y, np.where(y == 1, w, -w)[expected])
    else:
        np.testing.assert_array_equal(node_y, targets[expected].ravel())
        np.testing.assert_array_equal(node_w, w[expected])
    if move_codes:  # the codes moved with their rows, and only the node's
        np.testing.assert_array_equal(node_codes[start:stop, :2], table[expected[start:stop]])
        np.testing.assert_array_equal(node_codes[:start], node_codes_before[:start])
        np.testing.assert_array_equal(node_codes[stop:], node_codes_before[stop:])
    if not two_classes:
        assert (children == -1.0).all()
        return
    # The children's statistics: exactly the sums of a pass over each child's rows in order.
    for side, (lo, hi) in enumerate([(start, boundary), (boundary, stop)]):
        sums = np.zeros(3)
        for row in expected[lo:hi]:
            sums[0] += 1.0
            sums[1 + int(y[row])] += w[row]
        np.testing.assert_array_equal(children[side], sums)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300)
        | st.floats(min_value=-1e-310, max_value=1e-310),  # subnormals too
        min_size=1,
        max_size=40,
    )
)
def test_exact_sum_is_the_exact_sum(values):
    """``exact.exact_sum`` counts 2**-1074 units exactly (subnormals included), so its total
    is the rational sum of the values in any order."""
    from fractions import Fraction

    from dasktrees.forest.exact import exact_sum

    expected = sum(Fraction(v) for v in values)
    assert Fraction(exact_sum(values), 2**1074) == expected
    assert exact_sum(values[::-1]) == exact_sum(values)


@pytest.mark.parametrize("criterion, n_classes", [(GINI, 3), (GINI, 2), (SQUARED_ERROR, 1)])
def test_build_histograms_fills_what_build_histogram_fills(criterion, n_classes):
    """The one-pass fill of a large node's histograms, from its codes in node order, gives,
    feature by feature, the very numbers of the one-feature fill gathering the codes by row
    (the same sums in the same row order); so does the one-feature fill from the codes in node
    order, through the identity."""
    rng = np.random.default_rng(0)
    n_rows, n_features = 3000, 9
    codes = rng.integers(0, N_BIN_CODES, size=(n_rows, n_features)).astype(np.uint8)
    codes[rng.random(codes.shape) < 0.1] = MISSING_BIN
    rows = rng.permutation(n_rows).astype(np.int64)
    y = (
        rng.integers(0, n_classes, n_rows).astype(np.float64)
        if criterion == GINI
        else rng.normal(size=n_rows)
    )
    w = rng.uniform(0.5, 2.0, n_rows)
    n_channels = 4
    touched = np.empty(N_BIN_CODES, dtype=np.int32)
    if n_classes == 2:
        # Three channels from the signed weights: the class weights of the four-channel
        # histogram of the class indices, to the last bit (summed in the same order).
        by_class = np.zeros((N_BIN_CODES, 4))
        build_histogram(codes, 7, rows, 100, 2900, y, w, criterion, by_class, touched)
        n_channels = 3
        y = w = signed_weights(y, w, np.empty(n_rows))
    features = np.array([7, 2, 5, 0], dtype=np.int64)
    hists = np.zeros((3, N_BIN_CODES, n_channels))
    node_codes = codes[rows]
    build_histograms(node_codes, features, 3, 100, 2900, y, w, criterion, hists)
    if n_classes == 2:
        np.testing.assert_array_equal(hists[0], by_class[:, :3])
        assert not by_class[:, 3].any()
    identity = np.arange(n_rows, dtype=np.int64)
    for j, f in enumerate(features[:3]):
        one = np.zeros((N_BIN_CODES, n_channels))
        build_histogram(codes, f, rows, 100, 2900, y, w, criterion, one, touched)
        np.testing.assert_array_equal(hists[j], one)
        assert one[:, 0].sum() == 2800
        ordered = np.zeros((N_BIN_CODES, n_channels))
        build_histogram(node_codes, f, identity, 100, 2900, y, w, criterion, ordered, touched)
        np.testing.assert_array_equal(ordered, one)


def test_random_cut_falls_where_the_drawn_threshold_falls_across_empty_bins():
    """A node filling bins 2, 3 and 20 of values 0, 1, ..., 255: the threshold t is uniform
    between 2 and 20. The rows go left up to the last filled bin at most t, and the empty bins
    4 .. 19 go left up to t too (the bin threshold is the last bin of value at most t), as new
    rows there would with t itself; not all right, as a cut at the left bin's edge sent them."""
    from dasktrees.core.rng import mix64, next_uniform

    bins = np.array([2, 3, 20], dtype=np.int32)
    values = np.arange(N_BIN_CODES, dtype=np.float64)
    thresholds = []
    for key in range(400):
        state = np.array([mix64(np.uint64(key))], dtype=np.uint64)
        t = 2.0 + next_uniform(state.copy()) * 18.0
        position, bin_threshold = random_cut(bins, 3, values, state)
        assert position == (0 if t < 3.0 else 1)
        assert bin_threshold == (2 if t < 3.0 else min(int(t), 19))
        thresholds.append(bin_threshold)
    # Spread over the gap as t is: about 1/18 of the draws a bin, none beyond it.
    counts = np.bincount(thresholds, minlength=20)
    assert counts[:2].sum() == 0 and counts[4:20].min() > 5

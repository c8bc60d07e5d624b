"""Invariants of grown trees: children partition their parent, counts and weights add up,
impurity decreases, and both prediction kernels route rows as the growth did."""

import numpy as np
import pandas as pd
import pytest

from dasktrees import DecisionTreeClassifier, DecisionTreeRegressor
from dasktrees.core.dtypes import TREE_LEAF


def random_table(seed, n=600, with_missing=True, with_categorical=True):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "a": rng.normal(size=n),
            "b": rng.integers(0, 5, n).astype(float),
            "c": rng.exponential(size=n),
        }
    )
    if with_missing:
        X.loc[rng.random(n) < 0.15, "a"] = np.nan
        X.loc[rng.random(n) < 0.05, "c"] = np.nan
    if with_categorical:
        X["d"] = pd.Categorical(rng.choice(list("pqrstu"), n))
    signal = np.nan_to_num(X["a"].to_numpy()) + X["b"].to_numpy() / 2
    if with_categorical:
        signal += X["d"].isin(["p", "s"]).to_numpy()
    return X, signal + rng.normal(scale=0.5, size=n)


def assert_tree_invariants(tree):
    t = tree.tree_
    split = np.flatnonzero(t.children_left != TREE_LEAF)
    left, right = t.children_left[split], t.children_right[split]
    np.testing.assert_array_equal(
        t.n_node_samples[split], t.n_node_samples[left] + t.n_node_samples[right]
    )
    np.testing.assert_allclose(
        t.weighted_n_node_samples[split],
        t.weighted_n_node_samples[left] + t.weighted_n_node_samples[right],
    )
    # Impurity decrease of every split is non-negative (concavity of the impurities).
    w = t.weighted_n_node_samples
    decrease = (
        w[split] * t.impurity[split] - w[left] * t.impurity[left] - w[right] * t.impurity[right]
    )
    assert (decrease >= -1e-9 * w[split]).all()
    # Every node but the root has exactly one parent; depths grow by one.
    children = np.concatenate([left, right])
    assert sorted(children.tolist()) == list(range(1, t.node_count))
    np.testing.assert_array_equal(t.node_depth[left], t.node_depth[split] + 1)
    # Parents' values are the weighted mean of their children's.
    np.testing.assert_allclose(
        t.value[split] * w[split, None],
        t.value[left] * w[left, None] + t.value[right] * w[right, None],
        atol=1e-9,
    )


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("criterion", ["gini", "entropy", "gain_ratio", "misclassification"])
def test_classifier_invariants(seed, criterion):
    X, signal = random_table(seed)
    y = np.digitize(signal, np.quantile(signal, [0.3, 0.7]))
    weights = np.random.default_rng(seed).choice([0.0, 1.0, 2.5], len(y), p=[0.1, 0.6, 0.3])
    tree = DecisionTreeClassifier(criterion=criterion, max_features=2, random_state=seed)
    tree.fit(X, y, sample_weight=weights)
    assert_tree_invariants(tree)
    assert tree.tree_.n_node_samples[0] == np.count_nonzero(weights)
    assert tree.tree_.weighted_n_node_samples[0] == pytest.approx(weights.sum())


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("splitter", ["best", "random"])
def test_regressor_invariants(seed, splitter):
    X, y = random_table(seed)
    tree = DecisionTreeRegressor(splitter=splitter, random_state=seed, min_samples_leaf=3).fit(X, y)
    assert_tree_invariants(tree)
    leaves = tree.tree_.children_left == TREE_LEAF
    assert tree.tree_.n_node_samples[leaves].min() >= 3


@pytest.mark.parametrize("seed", range(3))
def test_leaves_hold_their_training_rows(seed):
    """A fully grown tree on distinct rows: each training row's leaf value is its own target,
    and the raw-value and binned kernels send every row to the same leaf."""
    X, y = random_table(seed)
    tree = DecisionTreeRegressor(random_state=seed).fit(X, y)
    np.testing.assert_allclose(tree.predict(X), y)
    leaves_raw = tree.apply(X)
    leaves_binned = tree.tree_.apply_binned(tree.bin_mapper_.transform(X))
    np.testing.assert_array_equal(leaves_raw, leaves_binned)
    assert (tree.tree_.children_left[leaves_raw] == TREE_LEAF).all()


def test_decision_path_is_the_root_to_leaf_path():
    X, y = random_table(0)
    tree = DecisionTreeRegressor(max_depth=5, random_state=0).fit(X, y)
    paths = tree.decision_path(X).toarray().astype(bool)
    leaves = tree.apply(X)
    for i in range(0, len(X), 37):
        nodes = np.flatnonzero(paths[i])
        assert nodes[0] == 0 and nodes[-1] == leaves[i]
        assert len(nodes) == tree.tree_.node_depth[leaves[i]] + 1
        for parent, child in zip(nodes[:-1], nodes[1:]):
            assert child in (tree.tree_.children_left[parent], tree.tree_.children_right[parent])


def test_missing_values_unseen_in_training_go_to_the_heavier_child():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 1))
    y = (X[:, 0] > 0.8).astype(int)  # the right child (x > 0.8) is the lighter one
    tree = DecisionTreeClassifier(max_depth=1).fit(X, y)
    assert tree.tree_.missing_go_to_left[0] == 1
    assert tree.predict([[np.nan]])[0] == 0


def test_missing_values_seen_in_training_go_to_the_better_side():
    rng = np.random.default_rng(0)
    x = rng.normal(size=400)
    y = (x > 0).astype(int)
    x[y == 1][:50] = np.nan
    x[rng.random(400) < 0.3] = np.nan
    y[np.isnan(x)] = 1  # missing means class 1, which lives on the right
    tree = DecisionTreeClassifier(max_depth=1).fit(x[:, None], y)
    assert tree.tree_.missing_go_to_left[0] == 0
    assert tree.score(x[:, None], y) == 1.0


def test_split_on_missingness_alone():
    x = np.array([1.0, 1.0, np.nan, np.nan, 1.0, np.nan])
    y = np.array([0, 0, 1, 1, 0, 1])
    tree = DecisionTreeClassifier().fit(x[:, None], y)
    assert tree.get_n_leaves() == 2 and tree.score(x[:, None], y) == 1.0


def test_categorical_split_is_a_subset_of_categories():
    rng = np.random.default_rng(0)
    cat = rng.choice(list("abcdefgh"), 800)
    y = np.isin(cat, ["b", "e", "h"]).astype(int)
    X = pd.DataFrame({"c": pd.Categorical(cat)})
    tree = DecisionTreeClassifier(max_depth=1).fit(X, y)
    assert tree.score(X, y) == 1.0, "one subset split separates the classes exactly"


def test_multiclass_categorical_one_vs_rest_orders():
    rng = np.random.default_rng(1)
    cat = rng.choice(list("abcdef"), 900)
    y = np.select([np.isin(cat, ["a", "d"]), np.isin(cat, ["b", "f"])], [0, 1], 2)
    X = pd.DataFrame({"c": cat})
    tree = DecisionTreeClassifier(max_depth=2).fit(X, y)
    assert tree.score(X, y) == 1.0


@pytest.mark.parametrize("max_leaf_nodes", [2, 5, 17])
def test_best_first_growth_stops_at_max_leaf_nodes(max_leaf_nodes):
    X, signal = random_table(1)
    tree = DecisionTreeRegressor(max_leaf_nodes=max_leaf_nodes, random_state=0).fit(X, signal)
    assert tree.get_n_leaves() == max_leaf_nodes
    assert_tree_invariants(tree)


def test_best_first_with_unlimited_leaves_equals_depth_first():
    X, signal = random_table(2, with_missing=False)
    deep = DecisionTreeRegressor(random_state=0).fit(X, signal)
    best_first = DecisionTreeRegressor(max_leaf_nodes=10_000, random_state=0).fit(X, signal)
    np.testing.assert_allclose(deep.predict(X), best_first.predict(X))
    assert deep.get_n_leaves() == best_first.get_n_leaves()


@pytest.mark.parametrize(
    "params",
    [
        {"max_depth": 3},
        {"min_samples_split": 40},
        {"min_samples_leaf": 25},
        {"min_weight_fraction_leaf": 0.05},
        {"min_impurity_decrease": 0.01},
    ],
)
def test_stopping_rules(params):
    X, y = random_table(0)
    tree = DecisionTreeRegressor(random_state=0, **params).fit(X, y)
    t = tree.tree_
    leaves = t.children_left == TREE_LEAF
    split = ~leaves
    if "max_depth" in params:
        assert tree.get_depth() == 3
    if "min_samples_split" in params:
        assert t.n_node_samples[split].min() >= 40
    if "min_samples_leaf" in params:
        assert t.n_node_samples[leaves].min() >= 25
    if "min_weight_fraction_leaf" in params:
        assert t.weighted_n_node_samples[leaves].min() >= 0.05 * len(y)
    if "min_impurity_decrease" in params:
        index = np.flatnonzero(split)
        w = t.weighted_n_node_samples
        left, right = t.children_left[index], t.children_right[index]
        decrease = (
            w[index] * t.impurity[index] - w[left] * t.impurity[left] - w[right] * t.impurity[right]
        ) / w[0]
        assert decrease.min() >= 0.01 - 1e-12
    assert_tree_invariants(tree)


@pytest.mark.parametrize("seed", [0, 1])
def test_arrays_from_records_and_pickle_round_trip(seed):
    """The arrays the one-pass kernels write: each field as the grower recorded it, raw
    thresholds from the bin table for numeric splits only; and pickling (split fields kept for
    split nodes only) gives back every array, dtype included."""
    import pickle

    from dasktrees.core.dtypes import TREE_UNDEFINED
    from dasktrees.learner.tree import TREE_ARRAYS

    X, y = random_table(seed)
    model = DecisionTreeRegressor(max_features=0.75, random_state=seed).fit(X, y)
    t = model.tree_
    split = t.children_left != TREE_LEAF
    numeric = split & (t.is_categorical == 0)
    assert numeric.any() and (split & (t.is_categorical == 1)).any()
    table = model.bin_mapper_.threshold_table()
    np.testing.assert_array_equal(
        t.threshold[numeric], table[t.feature[numeric], t.bin_threshold[numeric]]
    )
    assert (t.threshold[~numeric] == TREE_UNDEFINED).all()
    assert (t.feature[~split] == TREE_UNDEFINED).all() and (t.bitset_idx[~split] == -1).all()
    assert (t.bitset_idx[split & (t.is_categorical == 1)] >= 0).all()
    again = pickle.loads(pickle.dumps(t))
    for name in TREE_ARRAYS:
        original, loaded = getattr(t, name), getattr(again, name)
        assert loaded.dtype == original.dtype, name
        np.testing.assert_array_equal(loaded, original, err_msg=name)


@pytest.mark.parametrize(
    "criterion", ["gini", "entropy", "gain_ratio", "misclassification", "squared_error"]
)
@pytest.mark.parametrize("fractional_weights", [False, True])
def test_wire_state_gives_back_the_tree(criterion, fractional_weights):
    """What a forest task ships of a tree, written from the growth records without the fields
    the client derives (raw thresholds, is_categorical, classification impurities), gives back
    exactly the tree ``grow_tree`` builds from the same records, array for array."""
    from dasktrees.core.params import check_tree_params
    from dasktrees.learner import wire
    from dasktrees.learner.grower import _grow_records
    from dasktrees.learner.tree import TREE_ARRAYS, Tree, depth_first_children

    regression = criterion == "squared_error"
    X, y = random_table(3)
    target = y if regression else np.digitize(y, [0.5, 1.5]).astype(float)  # three classes
    model = (DecisionTreeRegressor if regression else DecisionTreeClassifier)(criterion=criterion)
    model.fit(X, target)
    codes = model.bin_mapper_.transform(X)
    rng = np.random.default_rng(0)
    weights = rng.poisson(1.0, len(y)).astype(float)
    if fractional_weights:
        weights *= rng.uniform(0.1, 3.0, len(y))
    params = check_tree_params(model, len(y), codes.shape[1], not regression)
    arrays = model.bin_mapper_.kernel_arrays()
    n_values = 1 if regression else 3
    records = _grow_records(codes, target, weights, arrays, params, n_values, 7, None, None)
    from dasktrees.learner.buffers import Buffers

    buffers = Buffers()  # as a task's workspace holds them
    state = wire.encode(*records, arrays.thresholds, codes.shape[1], params.criterion, buffers)
    # A regressor ships its leaves' means and impurities, those that are not zero with a bit a
    # leaf; its split nodes' are pooled from them.
    assert "value" not in state and "impurity" not in state and "leaf_impurity" not in state
    assert ("leaf_value" in state) == regression
    assert all((name in state) == regression for name in wire.NONZERO_LEAF_IMPURITY)
    # A classifier ships class weights; fractions and node weights are derived from them.
    # Of the leaves only when the split nodes' are their children's summed: whole-number
    # weights (bootstrap counts); fractional weights sum differently in a node and its children.
    assert ("leaf_class_counts" in state) == (not regression and not fractional_weights)
    assert ("weighted_class_counts" in state) == (not regression and fractional_weights)
    assert "leaf_n_node_samples" in state and "n_node_samples" not in state  # rows: always
    # A regressor's weights: its leaves' only when whole numbers (as its class counts).
    assert ("leaf_weighted_n_node_samples" in state) == (regression and not fractional_weights)
    assert ("weighted_n_node_samples" in state) == (regression and fractional_weights)
    assert "threshold" not in state and state["feature"].dtype == np.uint8
    # Whole numbers in the narrowest unsigned type (a few hundred rows: one byte); class
    # weights when they are whole; a float64 otherwise.
    assert state["leaf_n_node_samples"].dtype == np.uint8
    counts = state.get("leaf_class_counts", state.get("weighted_class_counts"))
    if counts is not None:
        assert counts.dtype == (np.float64 if fractional_weights else np.uint8)
    expected = Tree.from_growth(*records, arrays.thresholds, codes.shape[1], params.criterion)
    # Split flags a bit each, a bitset row for categorical splits only, no children: the flags
    # number the nodes as the grower does, depth-first (tree.depth_first_children).
    split = expected.children_left != -1
    categorical = split & (expected.is_categorical == 1)
    assert "children_left" not in state and "children_right" not in state
    left = np.empty(split.sum(), dtype=np.int32)
    assert depth_first_children(state["is_split"], state["n_nodes"], left) == expected.node_count
    np.testing.assert_array_equal(left, expected.children_left[split])
    # A forest task tells the encoder the tree grew depth first, and it checks the numbering
    # no more: the same state.
    trusted = wire.encode(
        *records, arrays.thresholds, codes.shape[1], params.criterion, Buffers(), depth_first=True
    )
    assert trusted.keys() == state.keys()
    for name, value in state.items():
        np.testing.assert_array_equal(trusted[name], value, err_msg=name)
        assert np.asarray(trusted[name]).dtype == np.asarray(value).dtype, name
    assert len(state["missing_go_to_left_bits"]) == len(state["is_categorical_bits"])
    assert len(state["is_categorical_bits"]) == (split.sum() + 7) // 8
    assert len(state["categorical_bitset_idx"]) == categorical.sum()
    tree = wire.decode(state, arrays.thresholds)
    assert (expected.is_categorical == 1).any() and (expected.impurity > 0).any()
    for name in TREE_ARRAYS:
        assert getattr(tree, name).dtype == getattr(expected, name).dtype, name
        np.testing.assert_array_equal(getattr(tree, name), getattr(expected, name), err_msg=name)
    if regression:  # pooled, a split node's mean and variance are its rows' within rounding
        nodes, values = records[0], records[1]
        np.testing.assert_allclose(expected.value, values, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(expected.impurity, nodes["impurity"], rtol=1e-12)
        leaf = ~split
        np.testing.assert_array_equal(expected.value[leaf], values[leaf])
        np.testing.assert_array_equal(expected.impurity[leaf], nodes["impurity"][leaf])
        assert not np.array_equal(expected.value[split], values[split])  # rounded apart
        nonzero = nodes["impurity"][leaf] != 0.0
        assert 0 < nonzero.sum() < leaf.sum()
        leaf_impurity = nodes["impurity"][leaf]
        np.testing.assert_array_equal(state["nonzero_leaf_impurity"], leaf_impurity[nonzero])
    # The state owns its arrays: the records (a task's workspace) and the buffers are the next
    # tree's scratch.
    kept = {name: np.copy(value) for name, value in state.items()}
    for scratch in (records[0], records[1], *buffers.arrays()):
        scratch.view(np.uint8)[...] = 0xAB
    for name, value in kept.items():
        np.testing.assert_array_equal(state[name], value, err_msg=name)


def _numbered_recursively(rng, n_splits):
    """A random tree shape of ``n_splits`` split nodes, numbered by recursion as the grower
    numbers a depth-first tree: a split node's children take the next two ids, then its left
    subtree is numbered, then its right. The reference for ``tree.depth_first_children``.
    Returns every node's "is a split" flag and the split nodes' left children, in node order."""
    left_of = {}
    next_id = 1

    def number(node, splits):
        nonlocal next_id
        if splits == 0:
            return
        left_of[node] = left = next_id
        next_id += 2
        in_left = int(rng.integers(0, splits))  # the other splits below this one, shared out
        number(left, in_left)
        number(left + 1, splits - 1 - in_left)

    number(0, n_splits)
    is_split = np.zeros(next_id, dtype=bool)
    is_split[list(left_of)] = True
    return is_split, np.array([left_of[i] for i in np.flatnonzero(is_split)], dtype=np.int32)


@pytest.mark.parametrize("seed", range(20))
def test_depth_first_children_match_a_recursive_numbering(seed):
    """``depth_first_children`` gives back, from the flags alone, the children of random tree
    shapes (a single leaf, chains, bushes) numbered by a plain recursion."""
    from dasktrees.learner.tree import depth_first_children

    rng = np.random.default_rng(seed)
    n_splits = [0, 1, 2, 7, 40, 300][seed % 6] + int(rng.integers(0, 3))
    is_split, expected = _numbered_recursively(rng, n_splits)
    left = np.empty(len(expected), dtype=np.int32)
    n_nodes = len(is_split)
    assert depth_first_children(np.packbits(is_split), n_nodes, left) == n_nodes
    np.testing.assert_array_equal(left, expected)


@pytest.mark.parametrize("max_leaf_nodes, min_samples_split", [(12, 2), (None, 10_000)])
def test_wire_state_of_best_first_trees_and_single_leaves(max_leaf_nodes, min_samples_split):
    """A best-first tree (its frontier leaves hold a leaf's split fields, as after pickling) and
    a tree of one leaf come back exactly."""
    from dasktrees.core.params import check_tree_params
    from dasktrees.learner import wire
    from dasktrees.learner.grower import _grow_records
    from dasktrees.learner.tree import TREE_ARRAYS, Tree

    X, y = random_table(4)
    labels = (y > 1.0).astype(float)
    model = DecisionTreeClassifier(
        max_leaf_nodes=max_leaf_nodes, min_samples_split=min_samples_split
    ).fit(X, labels)
    codes = model.bin_mapper_.transform(X)
    params = check_tree_params(model, len(y), codes.shape[1], True)
    arrays = model.bin_mapper_.kernel_arrays()
    records = _grow_records(codes, labels, np.ones(len(y)), arrays, params, 2, 0, None, None)
    state = wire.encode(*records, arrays.thresholds, codes.shape[1], params.criterion)
    expected = Tree.from_growth(*records, arrays.thresholds, codes.shape[1], params.criterion)
    assert expected.node_count == (1 if max_leaf_nodes is None else 2 * max_leaf_nodes - 1)
    if not expected.is_categorical.any():  # the single leaf: no bitset rows shipped
        assert len(expected.categorical_bitsets) == 1 and len(state["categorical_bitsets"]) == 0
    if max_leaf_nodes is not None:  # numbered best first: children shipped, node ids narrowed
        assert state["children_left"].dtype == np.uint8 and "children_right" not in state
    tree = wire.decode(state, arrays.thresholds)
    for name in TREE_ARRAYS:
        np.testing.assert_array_equal(getattr(tree, name), getattr(expected, name), err_msg=name)


def test_pruned_tree_keeps_the_depth_first_numbering():
    """Cost-complexity pruning drops subtrees and keeps the grower's numbering of what is left,
    so a pruned tree's state has no children either, and gives the tree back exactly."""
    from dasktrees.core.criteria import CLASSIFICATION_CRITERIA
    from dasktrees.learner import wire
    from dasktrees.learner.tree import TREE_ARRAYS

    X, y = random_table(5)
    full = DecisionTreeClassifier(random_state=0).fit(X, y > 1.0)
    model = DecisionTreeClassifier(random_state=0, ccp_alpha=0.01).fit(X, y > 1.0)
    assert 1 < model.tree_.node_count < full.tree_.node_count  # pruned, not to the root
    state = wire.state_of(model.tree_, CLASSIFICATION_CRITERIA["gini"])
    assert "children_left" not in state and "children_right" not in state
    tree = wire.decode(state, model.bin_mapper_.kernel_arrays().thresholds)
    for name in TREE_ARRAYS:
        np.testing.assert_array_equal(getattr(tree, name), getattr(model.tree_, name), err_msg=name)


def test_leaf_impurities_travel_as_those_that_are_not_zero():
    """``wire.put_leaf_impurity`` keeps the impurities that are not zero, bit for bit (a -0.0,
    which no growth gives, and subnormals too), and ``tree.leaf_impurities`` gives every leaf's
    back."""
    from dasktrees.learner import wire
    from dasktrees.learner.tree import leaf_impurities

    impurity = np.array([0.0, 2.5, 0.0, 0.0, -0.0, 5e-324, 0.0, 0.0, 0.0, 1e300, 0.0])
    state = {"leaf_value": np.zeros((len(impurity), 1))}
    wire.put_leaf_impurity(state, impurity)
    assert len(state["nonzero_leaf_impurity_bits"]) == 2  # 11 leaves, a bit each
    np.testing.assert_array_equal(state["nonzero_leaf_impurity"], [2.5, -0.0, 5e-324, 1e300])
    back = leaf_impurities(state)
    assert back.dtype == np.float64
    np.testing.assert_array_equal(back.view(np.uint64), impurity.view(np.uint64))


def test_summed_by_children_agrees_with_numpys_comparison():
    """``wire._summed_by_children`` (whether a state may ship a quantity of its leaves only)
    answers as ``np.array_equal(rows[split], rows[left] + rows[right])``: on sums that hold,
    on one entry off by a unit in the last place, on a NaN, in one column of several, and on
    whole counts as integers."""
    from dasktrees.learner import wire

    rng = np.random.default_rng(0)
    n_checked = {True: 0, False: 0}
    for trial in range(200):
        n_split, n_columns = int(rng.integers(1, 30)), int(rng.integers(1, 4))
        rows = rng.integers(0, 5, size=(2 * n_split + 1, n_columns)).astype(np.float64)
        rows[rng.random(rows.shape) < 0.3] *= 0.1  # sums that round
        order = rng.permutation(2 * n_split + 1).astype(np.int64)
        split, leaves = order[:n_split], order[n_split:]
        left, right = rng.choice(leaves, n_split), rng.choice(leaves, n_split)
        rows[split] = rows[left] + rows[right]
        k, c = int(rng.choice(split)), int(rng.integers(n_columns))
        if trial % 3 == 1:
            rows[k, c] = np.nextafter(rows[k, c], np.inf)
        elif trial % 3 == 2:
            rows[k, c] = np.nan
        expected = np.array_equal(rows[split], rows[left] + rows[right])
        children = left.astype(np.int32), right.astype(np.int32)  # as the trees hold them
        assert wire._summed_by_children(rows, split, *children) == expected
        if trial % 3 == 0:  # whole row counts, as int32
            counts = rows.astype(np.int32)
            expected = np.array_equal(counts[split], counts[left] + counts[right])
            assert wire._summed_by_children(counts, split, *children) == expected
        n_checked[expected] += 1
    assert min(n_checked.values()) > 20  # both answers were asked for


@pytest.mark.parametrize(
    "values",
    [
        np.array([3, 0, 7, 1, 2], dtype=np.int32),  # row counts
        np.array([3.0, 0.0, 700.0, 1.0, 2.0]),  # bootstrap weights: uint16
        np.array([3.0, -0.0, 7.0, 1.0, 2.0]),
        np.array([3.0, 0.5, 7.0, 1.0, 2.0]),  # weights that are not whole
        np.array([3.0, -1.0, 7.0, 1.0, 2.0]),
        np.array([3.0, np.nan, 7.0, 1.0, 2.0]),
        np.array([3.0, np.inf, 7.0, 1.0, 2.0]),
        np.array([3.0, 2.0**32, 7.0, 1.0, 2.0]),
        np.array([[3.0, 1.0], [0.0, 2.0], [7.0, 0.0], [1.0, 9.0], [2.0, 2.0]]),  # class counts
    ],
)
def test_counts_narrowed_to_the_narrowest_unsigned_type_when_whole(values):
    """``wire.narrow_counts`` against its rule written out with numpy: non-negative integers,
    and whole floats below 2**32, in the narrowest unsigned type; others as they are."""
    from dasktrees.learner import wire

    if values.dtype.kind in "ui" and values.min() >= 0:
        expected = values.astype(wire.narrowest_uint(values.max()))
    elif values.min() < 0 or values.max() >= 2**32:
        expected = values
    elif not np.array_equal(values, np.floor(values)):  # fractions, NaN
        expected = values
    else:
        expected = values.astype(wire.narrowest_uint(values.max()))
    got = wire.narrow_counts(values)
    assert got.dtype == expected.dtype
    assert got.tobytes() == expected.tobytes()  # bit for bit (-0.0)


def test_node_kinds_are_the_positions_of_splits_and_leaves():
    from dasktrees.learner import wire
    from dasktrees.learner.buffers import Buffers

    rng = np.random.default_rng(0)
    for n_nodes in (1, 2, 7, 500):
        is_split = rng.random(n_nodes) < 0.5
        for buffers in (None, Buffers()):
            kinds = wire._node_kinds(is_split, buffers)
            np.testing.assert_array_equal(kinds.splits, np.flatnonzero(is_split))
            np.testing.assert_array_equal(kinds.leaves, np.flatnonzero(~is_split))


@pytest.mark.parametrize("keys", ["hashed", "colliding"])
def test_a_trees_categorical_splits_share_the_bitset_rows_of_equal_subsets(keys, monkeypatch):
    """The grower writes a bitset row per categorical split; the tree keeps each distinct row
    once, in order of first use, and points every split at its subset's row. Rows are found by
    a key in a hash table and compared word by word, so keys that collide (all equal here) only
    cost probes."""
    from dasktrees.core.dtypes import NODE_DTYPE
    from dasktrees.learner import grower
    from dasktrees.learner.grower import share_bitsets

    if keys == "colliding":
        monkeypatch.setattr(grower, "_ROW_KEY", np.zeros_like(grower._ROW_KEY))

    rows = np.zeros((5, 8), dtype=np.uint32)
    rows[:, 0] = [0b101, 0b011, 0b101, 0b110, 0b011]  # A, B, A, C, B
    nodes = np.zeros(7, dtype=NODE_DTYPE)
    nodes["bitset_idx"] = [0, -1, 1, 2, -1, 3, 4]
    subsets = rows[nodes["bitset_idx"][nodes["bitset_idx"] >= 0]]
    shared = share_bitsets(nodes, rows)
    np.testing.assert_array_equal(shared[:, 0], [0b101, 0b011, 0b110])  # first use order
    np.testing.assert_array_equal(nodes["bitset_idx"], [0, -1, 1, 0, -1, 2, 1])
    np.testing.assert_array_equal(shared[nodes["bitset_idx"][nodes["bitset_idx"] >= 0]], subsets)
    # Distinct rows are kept as the grower wrote them.
    distinct = rows[[0, 1, 3]]
    nodes["bitset_idx"] = [0, -1, 1, 2, -1, -1, -1]
    np.testing.assert_array_equal(share_bitsets(nodes, distinct), distinct)
    np.testing.assert_array_equal(nodes["bitset_idx"], [0, -1, 1, 2, -1, -1, -1])
    # Many rows drawn from a pool of subsets, against a plain dictionary of rows in order of
    # first use.
    rng = np.random.default_rng(0)
    pool = rng.integers(0, 2**32, (40, 8), dtype=np.uint64).astype(np.uint32)
    rows = pool[rng.integers(0, len(pool), 500)]
    nodes = np.zeros(900, dtype=NODE_DTYPE)
    nodes["bitset_idx"] = -1
    nodes["bitset_idx"][np.sort(rng.choice(900, 500, replace=False))] = np.arange(500)
    first_use = {}
    for row in map(tuple, rows):
        first_use.setdefault(row, len(first_use))
    expected_idx = nodes["bitset_idx"].copy()
    expected_idx[expected_idx >= 0] = [first_use[tuple(r)] for r in rows]
    shared = share_bitsets(nodes, rows)
    np.testing.assert_array_equal(shared, np.array(list(first_use), dtype=np.uint32))
    np.testing.assert_array_equal(nodes["bitset_idx"], expected_idx)


def test_a_grown_tree_keeps_one_bitset_row_per_distinct_subset():
    from .conftest import carseats

    X, y = carseats()  # ShelveLoc, Urban and US: categorical, of 3, 2 and 2 levels
    tree = DecisionTreeRegressor(random_state=0).fit(X, y).tree_
    categorical = tree.bitset_idx >= 0
    assert categorical.sum() > len(tree.categorical_bitsets) > 1
    assert len(np.unique(tree.categorical_bitsets, axis=0)) == len(tree.categorical_bitsets)
    assert set(tree.bitset_idx[categorical]) == set(range(len(tree.categorical_bitsets)))


@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_recorded_improvement_is_the_weighted_impurity_decrease(offset):
    """Each split's recorded improvement, which ranks best-first growth and meets
    ``min_impurity_decrease``, is the decrease of weighted impurity from the node to its children
    as their own statistics give it, in units of the root's weight; for regression it is
    computed from the sums of w * y alone, about the node's mean, so that a large mean
    (``offset``) does not cancel it away."""
    from dasktrees import BinMapper
    from dasktrees.core.params import check_tree_params
    from dasktrees.learner.grower import _grow_records

    X, y = random_table(3, n=2000)
    y = y + offset
    mapper = BinMapper(random_state=0).fit(X)
    model = DecisionTreeRegressor(max_depth=6)
    params = check_tree_params(model, len(y), X.shape[1], False)
    w = np.random.default_rng(0).poisson(1.0, len(y)).astype(np.float64)
    nodes = _grow_records(
        mapper.transform(X), y, w, mapper.kernel_arrays(), params, 1, 0, None, None
    )[0]
    split = np.flatnonzero(nodes["feature"] >= 0)
    assert len(split) > 20
    left, right = nodes["left"][split], nodes["right"][split]
    weight, impurity = nodes["weighted_n_samples"], nodes["impurity"]
    decrease = (
        weight[split] * impurity[split]
        - weight[left] * impurity[left]
        - weight[right] * impurity[right]
    ) / weight[0]
    # (Computed from w * y^2 per child, an offset of 1e4 cost errors of 3e-7 here.)
    np.testing.assert_allclose(
        nodes["improvement"][split], decrease, rtol=1e-9, atol=1e-14 * (1.0 + offset)
    )


@pytest.mark.parametrize("kind", ["binary", "regression"])
@pytest.mark.parametrize("max_leaf_nodes", [2, 7, 64, 1_000])
def test_best_first_replay_of_a_whole_tree_is_the_best_first_tree(kind, max_leaf_nodes):
    """``assembly.best_first`` (how a tree grown across workers becomes best-first) on a tree
    grown depth first in full keeps the records, the numbering and the bitset rows of the tree
    the grower grows best first on the same rows."""
    from dasktrees import BinMapper
    from dasktrees.core.params import check_tree_params
    from dasktrees.learner import assembly
    from dasktrees.learner.grower import _grow_records

    X, signal = random_table(12, n=3000)  # a categorical feature, missing values, tied values
    y, n_values = (signal, 1) if kind == "regression" else ((signal > 1.2) * 1.0, 2)
    mapper = BinMapper(random_state=0).fit(X)
    codes, arrays = mapper.transform(X), mapper.kernel_arrays()
    w = np.random.default_rng(2).poisson(1.0, len(y)).astype(np.float64)
    cls = DecisionTreeRegressor if kind == "regression" else DecisionTreeClassifier

    def records(**params):
        model = cls(max_features=2, **params)
        growth = check_tree_params(model, len(y), X.shape[1], kind != "regression")
        return tuple(
            np.array(r) for r in _grow_records(codes, y, w, arrays, growth, n_values, 5, None, None)
        )

    whole = records()
    expected = records(max_leaf_nodes=max_leaf_nodes)
    replayed = assembly.best_first(*whole, max_leaf_nodes)
    assert len(whole[0]) > 300 and np.count_nonzero(whole[0]["is_categorical"]) > 10
    for a, b in zip(replayed, expected):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kind", ["binary", "multiclass", "regression"])
def test_codes_kept_in_node_order_at_every_node_grow_the_same_tree(kind, monkeypatch):
    """A table of at most eight features keeps its rows' codes in node order at every node
    (the partition moves them instead of the row indices): the same tree, record for record, as
    the row indices and gathered codes of small nodes give."""
    from dasktrees import BinMapper
    from dasktrees.core.params import check_tree_params
    from dasktrees.learner import grower

    X, signal = random_table(4, n=3000)  # four features, one categorical, missing values
    if kind == "regression":
        y, n_values = signal, 1
    else:
        n_values = 2 if kind == "binary" else 4
        y = np.digitize(signal, np.quantile(signal, np.linspace(0, 1, n_values + 1)[1:-1]))
        y = y.astype(np.float64)
    model = (DecisionTreeRegressor if kind == "regression" else DecisionTreeClassifier)(
        max_features=2
    )
    mapper = BinMapper(random_state=0).fit(X)
    codes, arrays = mapper.transform(X), mapper.kernel_arrays()
    params = check_tree_params(model, len(y), X.shape[1], kind != "regression")
    w = np.random.default_rng(1).poisson(1.0, len(y)).astype(np.float64)

    def records(words):
        monkeypatch.setattr(grower, "_ALL_ORDERED_MAX_WORDS", words)
        return grower._grow_records(codes, y, w, arrays, params, n_values, 3, None, None)

    assert grower._ALL_ORDERED_MAX_WORDS >= 1  # this table's one word of codes a row
    kept, gathered = records(1), records(0)
    assert len(kept[0]) > 500
    for a, b in zip(kept, gathered):
        np.testing.assert_array_equal(a, b)

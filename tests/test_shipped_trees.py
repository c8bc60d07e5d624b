"""A forest keeps its trees in the compact state the tasks ship them in (``Tree.shipped``).

Packing for prediction reads that state as it is; the scikit-learn arrays are expanded only for
what asks for them, and then only for the tree asked.
"""

import pickle

import numpy as np
import pytest

import dasktrees
from dasktrees.forest import treeshap
from dasktrees.forest.packing import PackedForest
from dasktrees.forest.routing import HARD, SOFT
from dasktrees.learner.tree import TREE_ARRAYS, Tree, class_fractions

from .test_tree import random_table


def expanded_arrays(tree):
    """The names of the arrays a tree holds expanded (none for a tree still as shipped)."""
    return sorted(set(TREE_ARRAYS) & set(vars(tree)))


@pytest.fixture(scope="module")
def table():
    X, y = random_table(5, n=800)
    return X, (y > 1.0).astype(int)


@pytest.fixture(scope="module")
def numeric_table():  # what to_sklearn() takes
    X, y = random_table(6, n=800, with_categorical=False)
    return X, (y > 1.0).astype(int)


@pytest.mark.parametrize("on_cluster", [False, True])
def test_a_forest_stays_compact_through_its_whole_use(client, numeric_table, tmp_path, on_cluster):
    X, y = numeric_table
    forest = dasktrees.RandomForestClassifier(
        n_estimators=4, random_state=0, client=client if on_cluster else None
    ).fit(X, y)
    trees = [est.tree_ for est in forest.estimators_]
    assert all(tree.shipped_state is not None for tree in trees)
    proba = forest.predict_proba(X)
    importances = forest.feature_importances_
    shap = forest.shap_values(X[:20])
    sklearn_proba = forest.to_sklearn().predict_proba(forest.bin_mapper_.encode(X)[:20])
    dasktrees.export_text(forest, tree_index=1)
    forest.save(tmp_path / "model")
    assert [expanded_arrays(tree) for tree in trees] == [[]] * len(trees)

    # What they computed is what the expanded trees give.
    full = [tree.expanded() for tree in trees]
    assert all(expanded_arrays(tree) == sorted(TREE_ARRAYS) for tree in full)
    mean = np.mean([t.compute_feature_importances() for t in full], axis=0)
    np.testing.assert_array_equal(importances, mean)
    packed = PackedForest(full, forest.bin_mapper_)
    np.testing.assert_array_equal(packed.vote(forest.bin_mapper_.encode(X)), proba)
    table_of_full = treeshap.explained_table(full, False)
    encoded = forest.bin_mapper_.encode(X[:20])
    np.testing.assert_array_equal(shap, treeshap.shap_values(table_of_full, encoded))
    np.testing.assert_array_equal(sklearn_proba, proba[:20])

    # Reading an array expands that tree only, and keeps its arrays.
    leaf_values = trees[2].value
    assert expanded_arrays(trees[2]) == sorted(TREE_ARRAYS)
    assert expanded_arrays(trees[1]) == expanded_arrays(trees[3]) == []
    np.testing.assert_array_equal(leaf_values, full[2].value)


@pytest.mark.parametrize("voting", [SOFT, HARD])
def test_shipped_and_expanded_trees_pack_the_same_forest(table, voting):
    X, y = table
    forest = dasktrees.ExtraTreesClassifier(n_estimators=5, bootstrap=True, random_state=1).fit(
        X, y
    )
    shipped = [est.tree_ for est in forest.estimators_]
    a = PackedForest(shipped, forest.bin_mapper_)
    b = PackedForest([tree.expanded() for tree in shipped], forest.bin_mapper_)
    assert (a.nodes["feature"] & np.uint32(1 << 31)).any()  # categorical splits packed
    for name in ("nodes", "roots"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.max_depth == b.max_depth == max(tree.expanded().max_depth for tree in shipped)
    # The shipped trees' leaves keep their bootstrap counts, two bytes each, and the forest
    # divides them as it votes: the same fractions, the same votes, bit for bit.
    assert a.leaf_counts and a.values.dtype == np.uint16 and not b.leaf_counts
    fractions = np.empty(a.values.shape)
    class_fractions(a.values.astype(np.float64), fractions, np.empty(len(fractions)))
    np.testing.assert_array_equal(fractions, b.values)
    encoded = forest.bin_mapper_.encode(X)
    # Many rows: every leaf divided once, into a table for the call; a few: at each visit.
    assert len(encoded) * a.n_trees >= len(a.values) > 3 * a.n_trees
    np.testing.assert_array_equal(a.vote(encoded, voting), b.vote(encoded, voting))
    np.testing.assert_array_equal(a.vote(encoded[:3], voting), b.vote(encoded[:3], voting))
    np.testing.assert_array_equal(a.apply(encoded), b.apply(encoded))
    # Each shipped tree's leaf counts and bitsets are views of the forest's tables now.
    for tree in shipped:
        state = tree.shipped_state
        assert np.shares_memory(state["leaf_class_counts"], a.values)
        assert len(state["categorical_bitsets"]) == 0 or np.shares_memory(
            state["categorical_bitsets"], a.bitsets
        )
    bitsets = np.concatenate([t.shipped_state["categorical_bitsets"] for t in shipped])
    np.testing.assert_array_equal(a.bitsets, bitsets)


def _forests_of_every_state(table):
    """Forests whose shipped states hold each kind of values, missing values' sides and
    categorical splits, and trees that are one leaf."""
    X, y = table
    classes = np.digitize(y, [0.5, 1.5])  # three classes
    return {
        "regression, leaf means": dasktrees.RandomForestRegressor(
            n_estimators=3, random_state=0
        ).fit(X, y),
        "three classes, fractional counts": dasktrees.RandomForestClassifier(
            n_estimators=3, class_weight="balanced", random_state=0
        ).fit(X, classes),
        "one-leaf trees among others": dasktrees.RandomForestClassifier(
            n_estimators=6, max_samples=3, min_samples_split=3, random_state=0
        ).fit(X, classes),
    }


def test_depth_first_states_pack_as_their_expanded_trees(table):
    # Shipped depth-first states are packed from their flags as they are (one pass), expanded
    # trees from their children arrays: the same tables, for every kind of state.
    words, roots = [], []
    for name, forest in _forests_of_every_state(table).items():
        shipped = [est.tree_ for est in forest.estimators_]
        assert all(
            t.shipped_state is not None and "children_left" not in t.shipped_state for t in shipped
        )
        a = PackedForest(shipped, forest.bin_mapper_)
        b = PackedForest([tree.expanded() for tree in shipped], forest.bin_mapper_)
        values = a.values
        if a.leaf_counts:
            values = np.empty(a.values.shape)
            class_fractions(a.values.astype(np.float64), values, np.empty(len(values)))
        np.testing.assert_array_equal(values, b.values, err_msg=name)
        for field in ("nodes", "roots"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=name)
        encoded = forest.bin_mapper_.encode(table[0])
        np.testing.assert_array_equal(a.vote(encoded), b.vote(encoded), err_msg=name)
        words.append(a.nodes["feature"])
        roots.append(a.roots)
    words, roots = np.concatenate(words), np.concatenate(roots)
    assert (words & np.uint32(1 << 30)).any()  # missing values sent left somewhere
    assert (words & np.uint32(1 << 31)).any()  # categorical splits
    assert (roots < 0).any()  # trees that are one leaf


def test_packing_flags_that_number_no_tree_is_an_error(numeric_table):
    X, y = numeric_table
    forest = dasktrees.RandomForestClassifier(n_estimators=1, random_state=0).fit(X, y)
    tree = forest.estimators_[0].tree_
    state = dict(tree.shipped_state)
    flags = np.unpackbits(state["is_split"], count=state["n_nodes"])
    flags[-1] = 1  # the last node, a leaf, now claims to be a split node
    state["is_split"] = np.packbits(flags)
    broken = Tree.shipped(state, forest.bin_mapper_.threshold_table())
    with pytest.raises(ValueError, match="split flags"):
        PackedForest([broken], forest.bin_mapper_)


def test_counts_beyond_two_bytes_pack_as_fractions(numeric_table):
    X, y = numeric_table
    forest = dasktrees.RandomForestClassifier(n_estimators=2, max_depth=1, random_state=0).fit(
        np.repeat(X, 300, axis=0), np.repeat(y, 300)
    )
    counts = [est.tree_.shipped_state["leaf_class_counts"] for est in forest.estimators_]
    assert max(c.max() for c in counts) > 2**16 - 1  # uint32 counts: kept as fractions
    assert not forest.forest_.leaf_counts and forest.forest_.values.dtype == np.float64
    full = PackedForest([est.tree_.expanded() for est in forest.estimators_], forest.bin_mapper_)
    np.testing.assert_array_equal(forest.forest_.values, full.values)


def test_shipped_tree_properties_and_pickle(table):
    X, y = table
    forest = dasktrees.RandomForestRegressor(n_estimators=2, random_state=0).fit(X, y * 2.5)
    tree = forest.estimators_[0].tree_
    full = tree.expanded()
    assert (tree.node_count, tree.n_leaves, tree.max_depth, tree.n_values) == (
        full.node_count,
        full.n_leaves,
        full.max_depth,
        1,
    )
    # Impurity importance from the shipped state (a regressor's impurities are shipped).
    np.testing.assert_array_equal(
        tree.compute_feature_importances(), full.compute_feature_importances()
    )
    assert expanded_arrays(tree) == []
    again = pickle.loads(pickle.dumps(tree))
    assert again.shipped_state is not None and expanded_arrays(again) == []
    for name in TREE_ARRAYS:
        np.testing.assert_array_equal(getattr(again, name), getattr(full, name), err_msg=name)
    # A pickled forest keeps its trees compact, and one copy of the bin table for all.
    blob = pickle.dumps(forest)
    loaded = pickle.loads(blob)
    trees = [est.tree_ for est in loaded.estimators_]
    assert all(expanded_arrays(t) == [] for t in trees)
    assert trees[0]._shipped[1] is trees[1]._shipped[1]
    np.testing.assert_array_equal(loaded.predict(X), forest.predict(X))


def test_a_missing_attribute_is_still_an_attribute_error(table):
    X, y = table
    forest = dasktrees.RandomForestClassifier(n_estimators=1, random_state=0).fit(X, y)
    tree = forest.estimators_[0].tree_
    with pytest.raises(AttributeError, match="no attribute 'not_an_array'"):
        _ = tree.not_an_array
    assert getattr(Tree.__new__(Tree), "value", None) is None

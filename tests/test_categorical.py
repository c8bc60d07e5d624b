"""Categorical splits: rare categories of a node are pooled with its missing values
(``min_samples_category``), checked against an exhaustive search over the partitions of the
categories; an identifier-like column does not take over a forest; with
``categorical_order="tree"`` every split cuts one order of the categories fixed for the tree."""

import itertools

import numpy as np
import pandas as pd
import pytest

from dasktrees import DecisionTreeClassifier, DecisionTreeRegressor, RandomForestClassifier, load


def gini(counts):
    total = counts.sum()
    return 1.0 - ((counts / total) ** 2).sum() if total else 0.0


def best_partition(codes, y, min_rows):
    """The best Gini split of one categorical column (codes, -1 missing) for binary y, by
    trying every partition: categories with fewer than ``min_rows`` rows travel with the
    missing rows as one block. Returns (impurity decrease in weight units, left codes set)."""
    levels, sizes = np.unique(codes[codes >= 0], return_counts=True)
    kept = [c for c, n in zip(levels, sizes) if n >= min_rows]
    pooled = np.isin(codes, [c for c in levels if c not in kept]) | (codes < 0)
    total = np.bincount(y, minlength=2)
    best = (-np.inf, None)
    for k in range(len(kept) + 1):
        for subset in itertools.combinations(kept, k):
            for pooled_left in (False, True):
                left = np.isin(codes, subset) | (pooled & pooled_left)
                n_left = int(left.sum())
                if n_left == 0 or n_left == len(y):
                    continue
                l_counts = np.bincount(y[left], minlength=2)
                r_counts = total - l_counts
                gain = len(y) * gini(total) - n_left * gini(l_counts)
                gain -= (len(y) - n_left) * gini(r_counts)
                if gain > best[0] + 1e-9:
                    chosen = set(subset) | (
                        {c for c in levels if c not in kept} if pooled_left else set()
                    )
                    best = (gain, chosen)
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("min_rows", [1, 4, 12])
def test_a_stump_finds_the_best_partition_with_rare_categories_pooled(seed, min_rows):
    rng = np.random.default_rng(seed)
    n_levels = 7
    sizes = rng.integers(1, 30, n_levels)  # some levels rarer than min_rows
    codes = np.repeat(np.arange(n_levels), sizes)
    codes[rng.random(len(codes)) < 0.1] = -1  # missing values
    p = rng.random(n_levels)
    y = (rng.random(len(codes)) < np.where(codes >= 0, p[codes], 0.5)).astype(np.int64)
    column = pd.Categorical.from_codes(codes, categories=[f"l{c}" for c in range(n_levels)])
    X = pd.DataFrame({"c": column})
    tree = DecisionTreeClassifier(max_depth=1, min_samples_category=min_rows).fit(X, y)
    gain, left = best_partition(codes, y, min_rows)
    t = tree.tree_
    assert t.node_count == 3
    achieved = t.weighted_n_node_samples[0] * t.impurity[0] - sum(
        t.weighted_n_node_samples[k] * t.impurity[k] for k in (1, 2)
    )
    assert achieved == pytest.approx(gain, rel=1e-9, abs=1e-9)
    # Rare categories and missing values share a side; unseen categories follow it too.
    sizes_seen = np.bincount(codes[codes >= 0], minlength=n_levels)
    rare = [f"l{c}" for c in range(n_levels) if 0 < sizes_seen[c] < min_rows]
    leaf_of = dict(
        zip(
            ["missing", *column.categories],
            tree.apply(
                pd.DataFrame(
                    {"c": pd.Categorical([None, *column.categories], categories=column.categories)}
                )
            ),
        )
    )
    assert all(leaf_of[level] == leaf_of["missing"] for level in rare)
    unseen = pd.DataFrame({"c": pd.Categorical(["never seen"])})
    assert tree.apply(unseen)[0] == leaf_of["missing"]
    # The split sends the optimal set left, or its complement (the same partition).
    went_left = {c for c in range(n_levels) if sizes_seen[c] and leaf_of[f"l{c}"] == 1}
    seen = {c for c in range(n_levels) if sizes_seen[c]}
    assert went_left == left & seen or went_left == seen - left


def test_an_identifier_column_does_not_take_over_a_forest():
    # One informative numeric column and an identifier: a category per training row (fewer
    # than 255, so each keeps a code of its own). Split category by category, the identifier
    # separates the classes of any node perfectly on the training rows; pooled, every one of
    # its categories is rare in every node, and it is never split on.
    rng = np.random.default_rng(0)
    n = 400
    x = rng.normal(size=n)
    y = (x + rng.normal(scale=0.7, size=n) > 0).astype(int)
    X = pd.DataFrame({"x": x, "id": pd.Categorical([f"row{i}" for i in range(n)])})
    train, test = slice(0, 200), slice(200, n)
    params = {"n_estimators": 60, "random_state": 0}
    default = RandomForestClassifier(**params).fit(X.iloc[train], y[train])
    unpooled = RandomForestClassifier(min_samples_category=1, **params)
    unpooled.fit(X.iloc[train], y[train])
    x_only = RandomForestClassifier(**params).fit(X[["x"]].iloc[train], y[train])
    assert dict(zip(X.columns, default.feature_importances_))["id"] == 0.0
    assert dict(zip(X.columns, unpooled.feature_importances_))["id"] > 0.3
    # The test rows' identifiers are unseen; the forest predicts as one without the column.
    np.testing.assert_array_equal(
        default.predict(X.iloc[test]), x_only.predict(X[["x"]].iloc[test])
    )


def tree_order_table(task, seed=3, n=1500, n_levels=12):
    """A categorical column of ``n_levels`` levels and a numeric one, both in the target."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, n_levels, n)
    x = rng.normal(size=n)
    signal = rng.normal(size=n_levels)[codes] + x
    if task == "regression":
        y = signal + rng.normal(size=n)
    elif task == "binary":
        y = (signal + rng.logistic(size=n) > 0).astype(np.int64)
    else:
        y = np.digitize(signal + rng.normal(size=n), [-0.7, 0.7])
    column = pd.Categorical.from_codes(codes, categories=[f"l{c}" for c in range(n_levels)])
    return pd.DataFrame({"c": column, "x": x}), y, codes


def cuts_off_the_tree_order(tree, X, y, codes, task):
    """For each split on the categorical column: whether the categories it sends left are the
    first (or last) ones of the node's categories in an order of the whole training set (mean
    target; for classes, the proportion of one class)."""
    if task == "regression":
        keys = [np.bincount(codes, weights=y) / np.bincount(codes)]
    else:
        keys = [np.bincount(codes, weights=y == k) / np.bincount(codes) for k in np.unique(y)]
    t = tree.tree_
    path = tree.decision_path(X).tocsc()
    verdicts = []
    for node in np.flatnonzero((t.children_left >= 0) & (t.feature == 0)):
        rows = path[:, node].nonzero()[0]
        went_left = path[:, t.children_left[node]].nonzero()[0]
        present, left = np.unique(codes[rows]), set(codes[went_left].tolist())
        orders = [present[np.argsort(key[present], kind="stable")].tolist() for key in keys]
        verdicts.append(
            any(
                set(order[: len(left)]) == left or set(order[len(order) - len(left) :]) == left
                for order in orders
            )
        )
    return verdicts


@pytest.mark.parametrize("task", ["binary", "regression", "multiclass"])
def test_categorical_order_tree_cuts_one_order_for_the_whole_tree(task):
    X, y, codes = tree_order_table(task)
    cls = DecisionTreeRegressor if task == "regression" else DecisionTreeClassifier
    # No bootstrap: the tree's rows are the whole table, whose order the oracle computes.
    tree = cls(categorical_order="tree", max_depth=8, random_state=0).fit(X, y)
    verdicts = cuts_off_the_tree_order(tree, X, y, codes, task)
    assert len(verdicts) >= 3 and all(verdicts)
    # Ordered afresh in every node, deeper splits cut other orders: the check can fail.
    per_node = cls(categorical_order="node", max_depth=8, random_state=0).fit(X, y)
    assert not all(cuts_off_the_tree_order(per_node, X, y, codes, task))
    # At the root both orders are the same: the same first split.
    for attribute in ("feature", "threshold", "bitset_idx"):
        assert getattr(tree.tree_, attribute)[0] == getattr(per_node.tree_, attribute)[0]


def sent_left(tree, node, code):
    t, code = tree.tree_, int(code)
    row = t.categorical_bitsets[t.bitset_idx[node]]
    return bool((int(row[code >> 5]) >> (code & 31)) & 1)


@pytest.mark.parametrize("task", ["binary", "regression"])
def test_categories_a_node_never_held_go_where_the_tree_order_puts_them(task):
    # Deep splits on the column hold a few of its levels; a test row may bring another one.
    # With the per-tree order it goes to the side of the node's categories its key falls
    # among: left when its key is below half-way between the last left and the first right
    # key (the keys are the whole table's means: no bootstrap in a single tree).
    X, y, codes = tree_order_table(task, n_levels=12)
    cls = DecisionTreeRegressor if task == "regression" else DecisionTreeClassifier
    tree = cls(categorical_order="tree", max_depth=8, random_state=0).fit(X, y)
    key = np.bincount(codes, weights=y) / np.bincount(codes)
    levels = pd.DataFrame(
        {"c": pd.Categorical.from_codes(np.arange(12), X["c"].cat.categories), "x": 0.0}
    )
    code_of = tree.bin_mapper_.transform(levels)[:, 0]
    t = tree.tree_
    path = tree.decision_path(X).tocsc()
    n_checked = 0
    for node in np.flatnonzero((t.children_left >= 0) & (t.feature == 0)):
        rows = path[:, node].nonzero()[0]
        went_left = path[:, t.children_left[node]].nonzero()[0]
        left = np.unique(codes[went_left])
        right = np.setdiff1d(np.unique(codes[rows]), left)
        assert key[left].max() <= key[right].min()  # a cut of the tree's order
        middle = (key[left].max() + key[right].min()) / 2
        for level in np.setdiff1d(np.arange(12), np.unique(codes[rows])):
            assert sent_left(tree, node, code_of[level]) == (key[level] < middle)
            n_checked += 1
    assert n_checked >= 10
    # The per-node order sends them right, whatever their key.
    per_node = cls(categorical_order="node", max_depth=8, random_state=0).fit(X, y)
    t, path = per_node.tree_, per_node.decision_path(X).tocsc()
    for node in np.flatnonzero((t.children_left >= 0) & (t.feature == 0)):
        absent = np.setdiff1d(np.arange(12), codes[path[:, node].nonzero()[0]])
        assert not any(sent_left(per_node, node, code_of[level]) for level in absent)


def test_route_absent_categories_kernel_against_the_rule():
    # The kernel behind the rule against a plain statement of it, on random splits: the left
    # codes and the rare ones sent right keep their side, the other codes of the tree go by
    # their key, those without a key (no row of the tree) with the missing values.
    from dasktrees.learner.grower import _route_absent_categories

    rng = np.random.default_rng(0)
    for _ in range(300):
        n_codes = int(rng.integers(2, 80))
        tree_keys = np.full(256, np.nan)
        in_tree = np.flatnonzero(rng.random(n_codes) < 0.8)
        tree_keys[in_tree] = rng.integers(0, 6, len(in_tree)) / 5  # ties happen
        held = rng.permutation(in_tree)[: int(rng.integers(0, len(in_tree) + 1))]
        n_left = int(rng.integers(0, len(held) + 1))
        n_rare_right = int(rng.integers(0, len(held) - n_left + 1))
        left, rare_right = held[:n_left], held[n_left : n_left + n_rare_right]
        middle = np.inf if rng.random() < 0.1 else rng.integers(0, 11) / 10
        missing_left = bool(rng.integers(0, 2))
        bitset = np.zeros(8, dtype=np.uint32)
        for c in left:
            bitset[c >> 5] |= np.uint32(1 << (c & 31))
        _route_absent_categories(bitset, tree_keys, middle, n_codes, missing_left, rare_right)
        went_left = {c for c in range(256) if (int(bitset[c >> 5]) >> (c & 31)) & 1}
        expected = set(left.tolist()) | {
            c
            for c in range(n_codes)
            if c not in rare_right and (tree_keys[c] < middle if c in in_tree else missing_left)
        }
        assert went_left == expected


def test_categorical_parameters_travel_with_the_model_file(tmp_path):
    rng = np.random.default_rng(1)
    X = pd.DataFrame(
        {"c": pd.Categorical(rng.choice(list("abcdef"), 300)), "x": rng.normal(size=300)}
    )
    y = (X["c"].isin(["a", "b"]) ^ (X["x"] > 1)).astype(int)
    model = DecisionTreeClassifier(
        min_samples_category=9, categorical_order="tree", random_state=0
    ).fit(X, y)
    model.save(tmp_path / "model")
    loaded = load(tmp_path / "model")
    assert loaded.get_params()["min_samples_category"] == 9
    assert loaded.get_params()["categorical_order"] == "tree"
    np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))

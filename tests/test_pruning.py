"""Pruning: cost-complexity pruning against scikit-learn and a naive weakest-link scan, pruned
trees as subtrees, alpha by cross-validation (Algorithm 8.1), reduced-error pruning, forests and
model files."""

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import tree as sk
from sklearn.base import clone

import dasktrees as dt
from dasktrees.core.dtypes import TREE_LEAF
from dasktrees.learner.cost_complexity import prune_cost_complexity, pruning_path, weakest_links
from dasktrees.learner.tree import TREE_ARRAYS
from dasktrees.pruning import candidate_alphas, reduced_error_prune, select_ccp_alpha

from .conftest import hitters
from .test_modelfile import rewrite_manifest
from .test_tree import assert_tree_invariants, random_table

# ---- helpers -----------------------------------------------------------------------------------


def exact_data(seed, n=300):
    """Data on which our trees are scikit-learn's: integer features with 12 values (one bin per
    value, CART's midpoint thresholds) and weights that are multiples of 1/128 in [0.5, 2), so
    weight sums are exact and no two candidate splits tie (ties let the two libraries pick
    different splits); a pure node then has impurity exactly 0 in both."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 12, size=(n, 4)).astype(float)
    weights = rng.integers(64, 256, n) / 128
    y_reg = X[:, 0] - 0.5 * X[:, 1] + rng.normal(size=n)
    y_clf = np.digitize(X[:, 0] + X[:, 1] + rng.normal(scale=3, size=n), [9, 13])
    return X, weights, y_reg, y_clf


def node_rows(est, X):
    """Each node as the set of rows of X reaching it: equal for two trees that split the rows
    alike, whichever feature each used and whichever child each put first."""
    paths = est.decision_path(X).tocsc()
    columns = zip(paths.indptr[:-1], paths.indptr[1:])
    return sorted(tuple(paths.indices[a:b]) for a, b in columns)


def leaf_impurity(tree):
    """R(T): the leaves' impurities weighted by their share of the root's weight."""
    leaves = tree.children_left == TREE_LEAF
    w = tree.weighted_n_node_samples
    return np.sum(w[leaves] * tree.impurity[leaves]) / w[0]


def match(pruned, original):
    """Map every node of ``pruned`` to the node of ``original`` it is, walking both from the
    root; fail unless ``pruned`` is a subtree of ``original`` with the same splits and nodes."""
    mapping = {}
    pairs = [(0, 0)]
    while pairs:
        new, old = pairs.pop()
        mapping[new] = old
        for name in ("value", "impurity", "n_node_samples", "weighted_n_node_samples"):
            np.testing.assert_array_equal(getattr(pruned, name)[new], getattr(original, name)[old])
        assert pruned.node_depth[new] == original.node_depth[old]
        if pruned.children_left[new] == TREE_LEAF:
            assert pruned.feature[new] < 0 and pruned.bitset_idx[new] == -1
            continue
        for name in ("feature", "threshold", "bin_threshold", "missing_go_to_left"):
            assert getattr(pruned, name)[new] == getattr(original, name)[old], name
        assert pruned.is_categorical[new] == original.is_categorical[old]
        if pruned.is_categorical[new]:
            np.testing.assert_array_equal(
                pruned.categorical_bitsets[pruned.bitset_idx[new]],
                original.categorical_bitsets[original.bitset_idx[old]],
            )
        pairs.append((pruned.children_left[new], original.children_left[old]))
        pairs.append((pruned.children_right[new], original.children_right[old]))
    assert len(mapping) == pruned.node_count
    return mapping


def assert_pruned_from(pruned_est, original_est, X):
    """``pruned_est`` is a compact subtree of ``original_est``: each row lands in an ancestor of
    its original leaf (the new leaves are a cut of the original tree)."""
    pruned, original = pruned_est.tree_, original_est.tree_
    mapping = match(pruned, original)
    assert_tree_invariants(pruned_est)
    split = pruned.children_left != TREE_LEAF
    np.testing.assert_array_equal(pruned.children_right[split], pruned.children_left[split] + 1)
    # Only the bitset rows of kept splits, each once (splits of equal subsets share a row).
    used = pruned.bitset_idx[split & (pruned.is_categorical == 1)]
    assert len(pruned.categorical_bitsets) == max(1, len(np.unique(used)))
    assert len(np.unique(pruned.categorical_bitsets, axis=0)) == len(pruned.categorical_bitsets)
    old_leaf = np.array([mapping[k] for k in pruned_est.apply(X)])
    on_path = original_est.decision_path(X)[np.arange(len(old_leaf)), old_leaf]
    assert np.all(on_path == 1)


def scan_path(tree):
    """scikit-learn's weakest-link loop as written there (every candidate scanned at every
    step, nodes visited in scikit-learn's depth-first numbering): the reference."""
    left, right = tree.children_left, tree.children_right
    order, stack = [], [0]
    while stack:
        node = stack.pop()
        order.append(node)
        if left[node] != TREE_LEAF:
            stack += [right[node], left[node]]
    parent = np.full(tree.node_count, -1)
    split = np.flatnonzero(left != TREE_LEAF)
    parent[left[split]] = parent[right[split]] = split
    w = tree.weighted_n_node_samples
    r_node = w * tree.impurity / w[0]
    r_branch = np.zeros(tree.node_count)
    n_leaves = np.zeros(tree.node_count, dtype=int)
    for leaf in (i for i in order if left[i] == TREE_LEAF):
        r_branch[leaf] = r_node[leaf]
        p = parent[leaf]
        while p != -1:
            r_branch[p] += r_node[leaf]
            n_leaves[p] += 1
            p = parent[p]
    candidate = left != TREE_LEAF
    alphas, impurities = [0.0], [r_branch[0]]
    while candidate[0]:
        scores = [((r_node[i] - r_branch[i]) / (n_leaves[i] - 1), i) for i in order if candidate[i]]
        alpha, node = min(scores, key=lambda s: s[0])  # the first of equal alphas
        stack = [node]
        while stack:
            d = stack.pop()
            candidate[d] = False
            if left[d] != TREE_LEAF:
                stack += [left[d], right[d]]
        r_diff = r_node[node] - r_branch[node]
        p, n_pruned = parent[node], n_leaves[node] - 1
        r_branch[node] = r_node[node]
        while p != -1:
            n_leaves[p] -= n_pruned
            r_branch[p] += r_diff
            p = parent[p]
        alphas.append(alpha)
        impurities.append(r_branch[0])
    return np.array(alphas), np.array(impurities)


def some_alphas(path, n=6):
    """``n`` alphas strictly inside the intervals of the path: away from the path alphas,
    where rounding differences between two libraries could decide."""
    alphas = candidate_alphas(path)[1:-1]
    return alphas[np.linspace(0, len(alphas) - 1, n).astype(int)]


# ---- minimal cost-complexity pruning against scikit-learn --------------------------------------


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("weighted", [False, True])
def test_regression_path_and_pruned_trees_equal_sklearn(seed, weighted):
    X, weights, y, _ = exact_data(seed)
    weights = weights if weighted else None
    ours = dt.DecisionTreeRegressor(random_state=0)
    theirs = sk.DecisionTreeRegressor(random_state=0)
    assert node_rows(ours.fit(X, y, weights), X) == node_rows(theirs.fit(X, y, weights), X)
    path = ours.cost_complexity_pruning_path(X, y, weights)
    expected = theirs.cost_complexity_pruning_path(X, y, weights)
    assert len(path.ccp_alphas) > 100
    np.testing.assert_allclose(path.ccp_alphas, expected.ccp_alphas, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(path.impurities, expected.impurities, rtol=1e-9, atol=1e-14)
    for alpha in some_alphas(path):
        ours.set_params(ccp_alpha=alpha).fit(X, y, weights)
        theirs.set_params(ccp_alpha=alpha).fit(X, y, weights)
        assert ours.tree_.node_count == theirs.tree_.node_count
        assert ours.get_n_leaves() == theirs.get_n_leaves()
        assert node_rows(ours, X) == node_rows(theirs, X)
        np.testing.assert_allclose(ours.predict(X), theirs.predict(X), rtol=1e-12)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("criterion", ["gini", "entropy"])
def test_classification_path_and_pruned_trees_equal_sklearn(seed, criterion):
    X, weights, _, y = exact_data(seed)
    ours = dt.DecisionTreeClassifier(criterion=criterion, random_state=0)
    theirs = sk.DecisionTreeClassifier(criterion=criterion, random_state=0)
    assert node_rows(ours.fit(X, y, weights), X) == node_rows(theirs.fit(X, y, weights), X)
    path = ours.cost_complexity_pruning_path(X, y, weights)
    expected = theirs.cost_complexity_pruning_path(X, y, weights)
    assert len(path.ccp_alphas) > 30
    np.testing.assert_allclose(path.ccp_alphas, expected.ccp_alphas, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(path.impurities, expected.impurities, rtol=1e-9, atol=1e-14)
    for alpha in some_alphas(path):
        ours.set_params(ccp_alpha=alpha).fit(X, y, weights)
        theirs.set_params(ccp_alpha=alpha).fit(X, y, weights)
        assert ours.tree_.node_count == theirs.tree_.node_count
        assert node_rows(ours, X) == node_rows(theirs, X)
        np.testing.assert_allclose(ours.predict_proba(X), theirs.predict_proba(X), rtol=1e-12)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "make",
    [
        lambda s: dt.DecisionTreeClassifier(max_features=2, random_state=s),
        lambda s: dt.DecisionTreeClassifier(criterion="misclassification", random_state=s),
        lambda s: dt.DecisionTreeRegressor(min_samples_leaf=2, random_state=s),
    ],
)
def test_weakest_links_equal_the_scan_exactly(seed, make):
    """Unweighted classes tie often (many nodes share one alpha): the order of the steps, and
    so the path, is still bit for bit that of scikit-learn's scan on the same tree."""
    X, signal = random_table(seed, n=300)
    est = make(seed)
    y = signal if isinstance(est, dt.DecisionTreeRegressor) else np.digitize(signal, [0.5, 1.5])
    tree = est.fit(X, y).tree_
    path = pruning_path(tree)
    alphas, impurities = scan_path(tree)
    np.testing.assert_array_equal(path.ccp_alphas, alphas)
    np.testing.assert_array_equal(path.impurities, impurities)


# ---- pruned trees ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_pruning_at_a_path_alpha_gives_the_subtree_after_its_steps(seed):
    """Categorical splits and missing values included: ``ccp_alpha = ccp_alphas[i]`` gives the
    subtree after the last step with that alpha, whose R(T) is the path's impurity."""
    X, signal = random_table(seed)
    y = np.digitize(signal, np.quantile(signal, [0.3, 0.7]))
    full = dt.DecisionTreeClassifier(random_state=seed).fit(X, y)
    path = full.cost_complexity_pruning_path(X, y)
    links = weakest_links(full.tree_)
    for i in np.linspace(1, len(path.ccp_alphas) - 1, 8).astype(int):
        alpha = path.ccp_alphas[i]
        last = np.flatnonzero(path.ccp_alphas == alpha)[-1]
        pruned = dt.DecisionTreeClassifier(random_state=seed, ccp_alpha=alpha).fit(X, y)
        assert leaf_impurity(pruned.tree_) == pytest.approx(path.impurities[last], abs=1e-12)
        assert pruned.get_n_leaves() == links.n_leaves[last - 1]
        assert_pruned_from(pruned, full, X)


def test_pruned_tree_keeps_its_nodes_and_predicts_their_values():
    X, y = random_table(1)
    full = dt.DecisionTreeRegressor(random_state=0).fit(X, y)
    pruned = dt.DecisionTreeRegressor(random_state=0, ccp_alpha=0.01).fit(X, y)
    assert 1 < pruned.get_n_leaves() < full.get_n_leaves() / 5
    assert_pruned_from(pruned, full, X)
    assert pruned.tree_.is_categorical.any(), "the categorical bitsets were renumbered"
    mapping = match(pruned.tree_, full.tree_)
    old_leaf = np.array([mapping[k] for k in pruned.apply(X)])
    np.testing.assert_array_equal(pruned.predict(X), full.tree_.value[old_leaf, 0])


def test_zero_alpha_prunes_nothing_and_a_large_one_leaves_the_root():
    X, y = random_table(2)
    full = dt.DecisionTreeRegressor(random_state=0).fit(X, y)
    tree = full.tree_
    same = prune_cost_complexity(tree, 0.0)
    for name in TREE_ARRAYS:
        np.testing.assert_array_equal(getattr(same, name), getattr(tree, name))
    root = dt.DecisionTreeRegressor(random_state=0, ccp_alpha=float(tree.impurity[0])).fit(X, y)
    assert root.tree_.node_count == 1
    np.testing.assert_allclose(root.predict(X[:5]), np.mean(y))
    path = pruning_path(tree)
    assert path.impurities[-1] == pytest.approx(tree.impurity[0])
    assert np.all(np.diff(path.impurities) >= -1e-12)


@pytest.mark.parametrize("value", [-0.1, np.nan, np.inf, "0.1", None])
def test_bad_ccp_alpha_is_named(value):
    X, y = random_table(0, n=50)
    with pytest.raises(ValueError, match="ccp_alpha must be a finite float >= 0"):
        dt.DecisionTreeRegressor(ccp_alpha=value).fit(X, y)
    with pytest.raises(ValueError, match="ccp_alpha"):
        dt.RandomForestRegressor(ccp_alpha=value).fit(X, y)


def test_pruning_path_leaves_the_estimator_alone():
    X, y = random_table(0, n=200)
    est = dt.DecisionTreeRegressor(random_state=0, ccp_alpha=0.5)
    path = est.cost_complexity_pruning_path(X, y)
    assert not hasattr(est, "tree_") and est.ccp_alpha == 0.5
    assert path.ccp_alphas[0] == 0.0 and len(path.ccp_alphas) > 10


# ---- select_ccp_alpha: Algorithm 8.1 -----------------------------------------------------------


@pytest.fixture(scope="module")
def hitters_data():
    return hitters()


def test_select_ccp_alpha_on_hitters(client, hitters_data):
    """ISLR's example (section 8.1.1): a regression tree of log(Salary) on Hitters, six-fold CV."""
    X, y = hitters_data
    est = dt.DecisionTreeRegressor(random_state=0)
    local = select_ccp_alpha(est, X, y, cv=6, random_state=1)
    on_dask = select_ccp_alpha(est, X, y, cv=6, random_state=1, client=client)
    for name in ("ccp_alphas", "n_leaves", "cv_errors", "cv_mean", "cv_se"):
        np.testing.assert_array_equal(on_dask[name], local[name])
    assert on_dask.ccp_alpha == local.ccp_alpha
    n_alphas = len(local.ccp_alphas)
    assert local.cv_errors.shape == (6, n_alphas)
    assert local.cv_mean.shape == local.cv_se.shape == local.n_leaves.shape == (n_alphas,)
    np.testing.assert_allclose(local.cv_mean, local.cv_errors.mean(axis=0))
    assert local.ccp_alphas[0] == 0.0 and np.all(np.diff(local.ccp_alphas) > 0)
    assert np.all(np.diff(local.n_leaves) < 0) and local.n_leaves[-1] == 1
    best = np.argmin(local.cv_mean)
    assert local.ccp_alpha == local.ccp_alphas[best] and local.rule == "min"
    assert local.estimator.get_n_leaves() == local.n_leaves[best] == 8
    # The refitted estimator: the chosen alpha, and the tree a new fit with it grows.
    assert local.estimator.ccp_alpha == local.ccp_alpha
    refit = clone(est).set_params(ccp_alpha=local.ccp_alpha).fit(X, y)
    for name in TREE_ARRAYS:
        np.testing.assert_array_equal(
            getattr(local.estimator.tree_, name), getattr(refit.tree_, name)
        )
    one_se = select_ccp_alpha(est, X, y, cv=6, random_state=1, rule="1se")
    assert one_se.ccp_alpha > local.ccp_alpha
    k = np.flatnonzero(one_se.ccp_alphas == one_se.ccp_alpha)[0]
    assert one_se.cv_mean[k] <= local.cv_mean[best] + local.cv_se[best]
    assert np.all(one_se.cv_mean[k + 1 :] > local.cv_mean[best] + local.cv_se[best])
    assert one_se.estimator.get_n_leaves() == 6


@pytest.mark.slow
def test_select_ccp_alpha_classifier_and_scoring(client):
    X, signal = random_table(3, n=300)
    y = np.where(signal > np.median(signal), "high", "low")
    est = dt.DecisionTreeClassifier(random_state=0)
    default = select_ccp_alpha(est, X, y, cv=4, random_state=1, rule="1se", client=client)
    assert np.all((0 <= default.cv_errors) & (default.cv_errors <= 1))
    accuracy = select_ccp_alpha(est, X, y, cv=4, random_state=1, rule="1se", scoring="accuracy")
    np.testing.assert_allclose(accuracy.cv_errors, default.cv_errors - 1, atol=1e-12)
    assert accuracy.ccp_alpha == default.ccp_alpha
    assert default.estimator.get_n_leaves() < est.fit(X, y).get_n_leaves() / 4
    X, y = random_table(4, n=200)
    reg = dt.DecisionTreeRegressor(random_state=0)
    mse = select_ccp_alpha(reg, X, y, cv=3, random_state=0)
    scored = select_ccp_alpha(reg, X, y, cv=3, random_state=0, scoring="neg_mean_squared_error")
    np.testing.assert_allclose(scored.cv_errors, mse.cv_errors, rtol=1e-12)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rule": "min_error"}, 'rule must be "min" or "1se"'),
        ({"cv": 1}, "cv must be an int"),
        ({"cv": 2.5}, "cv must be an int"),
        ({"cv": 500}, "cv must be an int in \\[2, n_samples=100\\]"),
    ],
)
def test_select_ccp_alpha_bad_parameters(kwargs, match):
    X, y = random_table(0, n=100)
    with pytest.raises(ValueError, match=match):
        select_ccp_alpha(dt.DecisionTreeRegressor(), X, y, **kwargs)


def test_select_ccp_alpha_needs_a_tree():
    X, y = random_table(0, n=100)
    with pytest.raises(TypeError, match="estimator must be a DecisionTreeClassifier"):
        select_ccp_alpha(dt.RandomForestRegressor(), X, y)


# ---- reduced-error pruning ---------------------------------------------------------------------


def validation_error(est, X, y):
    if isinstance(est, dt.DecisionTreeClassifier):
        return np.sum(est.predict(X) != y)
    return np.sum((est.predict(X) - y) ** 2)


def naive_reduced_error(est, X_val, y_val):
    """Quinlan's procedure written out: for each internal node, children before parents, try
    the tree with the node made a leaf, predicting every validation row again; keep it when
    the total error does not increase. Returns the collapsed nodes' predictions of X_val."""
    tree = est.tree_
    paths = est.decision_path(X_val).toarray().astype(bool)
    node_class = est.classes_[np.argmax(tree.value, axis=1)]

    def errors(collapsed):
        # A row's prediction: the first collapsed node on its path, else its leaf.
        stop = paths & collapsed
        at = np.where(stop.any(axis=1), np.argmax(stop, axis=1), est.apply(X_val))
        return np.sum(node_class[at] != y_val), node_class[at]

    collapsed = np.zeros(tree.node_count, dtype=bool)
    for node in np.flatnonzero(tree.children_left != TREE_LEAF)[::-1]:
        trial = collapsed.copy()
        trial[node] = True
        if errors(trial)[0] <= errors(collapsed)[0]:
            collapsed = trial
    return errors(collapsed)[1]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), classify=st.booleans(), n_val=st.integers(1, 300))
@pytest.mark.slow
def test_reduced_error_pruning(seed, classify, n_val):
    X, signal = random_table(seed, n=300 + n_val)
    y = np.digitize(signal, np.quantile(signal, [0.3, 0.7])) if classify else signal
    Tree = dt.DecisionTreeClassifier if classify else dt.DecisionTreeRegressor
    train, val = slice(0, 300), slice(300, None)
    X_train, X_val, y_train, y_val = X.iloc[train], X.iloc[val], y[train], y[val]
    original = Tree(max_features=3, random_state=seed % 1000).fit(X_train, y_train)
    before = copy.deepcopy(original.tree_)
    pruned = reduced_error_prune(original, X_val, y_val)
    for name in TREE_ARRAYS:  # the input is unchanged
        np.testing.assert_array_equal(getattr(original.tree_, name), getattr(before, name))
    assert validation_error(pruned, X_val, y_val) <= validation_error(original, X_val, y_val) * (
        1 + 1e-12
    )
    assert pruned.get_n_leaves() <= original.get_n_leaves()
    assert_pruned_from(pruned, original, X)
    again = reduced_error_prune(pruned, X_val, y_val)
    assert again.tree_.node_count == pruned.tree_.node_count
    if classify:
        np.testing.assert_array_equal(
            pruned.predict(X_val), naive_reduced_error(original, X_val, y_val)
        )


def test_reduced_error_pruning_collapses_what_validation_rows_do_not_support():
    """Full trees on pure noise lose most of their leaves (five seeds: 503 leaves -> 232; a
    subtree that fits the validation rows better by chance stays); a tree on a clean signal
    keeps its first split."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3))
    noise = rng.integers(0, 2, 600)
    grown = kept = 0
    for seed in range(5):
        tree = dt.DecisionTreeClassifier(random_state=seed).fit(X[:300], noise[:300])
        grown += tree.get_n_leaves()
        kept += reduced_error_prune(tree, X[300:], noise[300:]).get_n_leaves()
    assert kept < grown / 2, (kept, grown)
    signal = (X[:, 0] > 0).astype(int)
    tree = dt.DecisionTreeClassifier(max_depth=3, random_state=0).fit(X[:300], signal[:300])
    pruned = reduced_error_prune(tree, X[300:], signal[300:])
    assert pruned.score(X[300:], signal[300:]) >= tree.score(X[300:], signal[300:])
    assert pruned.tree_.feature[0] == 0 and pruned.get_n_leaves() >= 2


# ---- forests -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "Forest, ccp_alpha", [(dt.RandomForestRegressor, 0.01), (dt.ExtraTreesClassifier, 0.005)]
)
def test_forest_trees_are_pruned_in_their_tasks(client, Forest, ccp_alpha):
    X, signal = random_table(5, n=400)
    y = signal if Forest is dt.RandomForestRegressor else (signal > 1).astype(int)
    params = dict(n_estimators=4, random_state=0, client=client)
    full = Forest(**params).fit(X, y)
    pruned = Forest(ccp_alpha=ccp_alpha, **params).fit(X, y)
    assert pruned.get_params()["ccp_alpha"] == ccp_alpha
    for est_full, est_pruned in zip(full.estimators_, pruned.estimators_):
        assert est_pruned.ccp_alpha == ccp_alpha
        assert est_pruned.tree_.node_count < est_full.tree_.node_count / 2
        expected = prune_cost_complexity(est_full.tree_, ccp_alpha)
        for name in TREE_ARRAYS:
            np.testing.assert_array_equal(getattr(est_pruned.tree_, name), getattr(expected, name))


# ---- model files -------------------------------------------------------------------------------


def test_pruned_trees_round_trip_through_model_files(tmp_path):
    X, signal = random_table(6)
    y = np.digitize(signal, np.quantile(signal, [0.3, 0.7]))
    pruned = dt.DecisionTreeClassifier(ccp_alpha=0.004, random_state=0).fit(X, y)
    reduced = reduced_error_prune(dt.DecisionTreeClassifier(random_state=0).fit(X, y), X, y)
    for k, model in enumerate([pruned, reduced]):
        model.save(tmp_path / f"model-{k}")
        loaded = dt.load(tmp_path / f"model-{k}")
        assert loaded.get_params() == model.get_params()
        for name in TREE_ARRAYS:
            np.testing.assert_array_equal(getattr(loaded.tree_, name), getattr(model.tree_, name))
        np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))


def test_model_file_without_ccp_alpha_loads_with_the_default(tmp_path):
    """A model saved before ``ccp_alpha`` existed."""
    X, y = random_table(0, n=100)
    dt.DecisionTreeRegressor(random_state=0).fit(X, y).save(tmp_path / "old")
    rewrite_manifest(tmp_path / "old", lambda m: m["params"].pop("ccp_alpha"))
    assert dt.load(tmp_path / "old").ccp_alpha == 0.0

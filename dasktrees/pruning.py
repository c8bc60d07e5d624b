"""Post-pruning of grown trees: minimal cost-complexity pruning, its cross-validated choice of
alpha (Algorithm 8.1 of ISLR), and reduced-error pruning on a validation set (Quinlan 1987).

Every pruning ends in ``subtree``: the kept nodes of the original tree, in their original order
(parents before children), with the collapsed internal nodes turned into leaves. The grower
recorded ``value``, ``impurity`` and the sample counts of every node, so a new leaf predicts what
its node held when the tree was grown:

    original                      collapse {1}          pruned
    0 ─┬─ 1 ─┬─ 3                                       0 ─┬─ 1   (leaf: old node 1)
       │     └─ 4      ─────────────────────────>          └─ 2   (old node 2)
       └─ 2
"""

import copy
import functools
from numbers import Integral

import numpy as np
from numba import njit
from sklearn.base import clone, is_classifier
from sklearn.metrics import check_scoring
from sklearn.model_selection import KFold
from sklearn.utils import Bunch
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ._dtypes import BITSET_DTYPE, BITSET_WORDS, TREE_LEAF
from ._validation import check_2d
from .distributed.client import find_client
from .tree.tree import LEAF_CONSTANTS, TREE_ARRAYS, Tree

# ---- subtrees ----------------------------------------------------------------------------------


def subtree(tree, collapse):
    """The subtree of ``tree`` in which the nodes marked in ``collapse`` are leaves.

    Parameters
    ----------
    tree : Tree
        Children must come after their parent (as in every grown or pruned tree).
    collapse : ndarray of bool, shape (n_nodes,)
        Nodes to turn into leaves. Their descendants are dropped, marked or not.

    Returns
    -------
    Tree
        A new tree (``tree`` is unchanged): the kept nodes renumbered in their original order, a
        new leaf keeping its node's value, impurity and counts, and split fields set to what
        a leaf holds. Only the categorical bitsets of kept splits are kept.
    """
    owner = _owners(tree, collapse)
    kept = owner == np.arange(tree.node_count)
    new_id = np.cumsum(kept) - 1
    arrays = {
        name: getattr(tree, name)[kept] for name in TREE_ARRAYS if name != "categorical_bitsets"
    }
    is_leaf = (collapse | (tree.children_left == TREE_LEAF))[kept]
    for name, leaf_value in LEAF_CONSTANTS.items():
        arrays[name][is_leaf] = leaf_value
    split = ~is_leaf
    for side in ("children_left", "children_right"):
        arrays[side][split] = new_id[arrays[side][split]]
    rows = arrays["bitset_idx"]
    used = np.unique(rows[rows >= 0])
    rows[rows >= 0] = np.searchsorted(used, rows[rows >= 0])
    bitsets = tree.categorical_bitsets[used]
    if len(used) == 0:  # one all-zero row, so that kernels can always index the table
        bitsets = np.zeros((1, BITSET_WORDS), dtype=BITSET_DTYPE)
    return Tree(tree.n_features, categorical_bitsets=np.ascontiguousarray(bitsets), **arrays)


def _owners(tree, collapse):
    """For every node, the node of the pruned tree that takes its rows: itself if it is kept,
    else its collapsed ancestor (ndarray of int64, shape (n_nodes,))."""
    owner = np.empty(tree.node_count, dtype=np.int64)
    _fill_owners(tree.children_left, tree.children_right, collapse, owner)
    return owner


@njit(cache=True)
def _fill_owners(children_left, children_right, collapse, owner):
    """Write into ``owner`` the node of the pruned tree each node's rows end in.

    Parameters
    ----------
    children_left, children_right : ndarray of int32, shape (n_nodes,)
        Children come after their parent, so one pass in node order sees every parent first.
    collapse : ndarray of bool, shape (n_nodes,)
    owner : ndarray of int64, shape (n_nodes,)
        Written: ``owner[i] == i`` for a kept node, else the collapsed ancestor of i.
    """
    owner[0] = 0
    for i in range(children_left.shape[0]):
        left = children_left[i]
        if left == TREE_LEAF:
            continue
        if owner[i] != i or collapse[i]:  # i is dropped or becomes a leaf: it owns its subtree
            owner[left] = owner[i]
            owner[children_right[i]] = owner[i]
        else:
            owner[left] = left
            owner[children_right[i]] = children_right[i]


# ---- minimal cost-complexity pruning -----------------------------------------------------------


def weakest_links(tree, ccp_alpha=np.inf):
    """Weakest-link pruning (Breiman et al. 1984; ISLR 8.1.1): the internal nodes that minimal
    cost-complexity pruning collapses, in order, while their effective alpha is <= ``ccp_alpha``.

    With ``R(t) = weighted_n_node_samples[t] / weighted_n_node_samples[0] * impurity[t]`` and
    ``R(T_t)`` the sum of R over the leaves under t, the effective alpha of t is
    ``(R(t) - R(T_t)) / (n_leaves(T_t) - 1)``. Each step collapses the node of least effective
    alpha, exactly as scikit-learn does: ties go to the node first in depth-first (left first)
    order, which is scikit-learn's node numbering, and the sums are accumulated in the same order.

    Parameters
    ----------
    tree : Tree
    ccp_alpha : float, default=inf
        Stop before the first node whose effective alpha exceeds it; inf: down to the root.

    Returns
    -------
    Bunch with
    nodes : ndarray of int64, shape (n_steps,)
        Node collapsed at each step (a later step may collapse an ancestor of an earlier one).
    ccp_alphas : ndarray of float64, shape (n_steps,)
        Effective alpha of each step.
    impurities : ndarray of float64, shape (n_steps,)
        ``R(T)``, the total leaf impurity of the tree after each step.
    n_leaves : ndarray of int64, shape (n_steps,)
        Leaves of the tree after each step.
    impurity : float
        ``R(T)`` of ``tree`` itself.
    """
    nodes, alphas, impurities, n_leaves, impurity = _weakest_links(
        tree.children_left,
        tree.children_right,
        tree.weighted_n_node_samples,
        tree.impurity,
        float(ccp_alpha),
    )
    return Bunch(
        nodes=nodes, ccp_alphas=alphas, impurities=impurities, n_leaves=n_leaves, impurity=impurity
    )


def pruning_path(tree):
    """The minimal cost-complexity pruning path of ``tree``, as scikit-learn's
    ``cost_complexity_pruning_path`` returns it.

    Returns
    -------
    Bunch with
    ccp_alphas : ndarray of float64, shape (n_steps + 1,)
        0, then the effective alpha of each weakest-link step down to the root. Ties make
        repeated values: one step per collapsed node.
    impurities : ndarray of float64, shape (n_steps + 1,)
        Total leaf impurity ``R(T)`` of the subtree after each step.
    """
    links = weakest_links(tree)
    return Bunch(
        ccp_alphas=np.concatenate([[0.0], links.ccp_alphas]),
        impurities=np.concatenate([[links.impurity], links.impurities]),
    )


def prune_cost_complexity(tree, ccp_alpha):
    """The minimal cost-complexity subtree of ``tree`` for ``ccp_alpha`` (scikit-learn's
    ``ccp_alpha``): weakest links collapsed while their effective alpha is <= ``ccp_alpha``.

    Parameters
    ----------
    tree : Tree
    ccp_alpha : float >= 0
        0 prunes nothing, as in scikit-learn (not even splits that decreased no impurity).

    Returns
    -------
    Tree
        A new tree.
    """
    collapse = np.zeros(tree.node_count, dtype=bool)
    if ccp_alpha > 0.0:
        collapse[weakest_links(tree, ccp_alpha).nodes] = True
    return subtree(tree, collapse)


def _n_steps(alphas, ccp_alpha):
    """Number of leading weakest-link steps taken for ``ccp_alpha``: pruning stops at the first
    step whose alpha exceeds it, and ``ccp_alpha == 0`` prunes nothing."""
    if ccp_alpha == 0.0:
        return 0
    above = np.flatnonzero(alphas > ccp_alpha)
    return int(above[0]) if len(above) else len(alphas)


@njit(cache=True)
def _weakest_links(children_left, children_right, weighted_n_node_samples, impurity, ccp_alpha):
    """Collapse weakest links while their effective alpha is <= ``ccp_alpha``.

    scikit-learn scans every candidate node at each step, quadratic in the nodes. Here each node
    keeps the weakest link of its subtree, ``best``: collapsing a node changes the alphas of its
    ancestors only, so a step updates one root path, and the next weakest link is ``best[0]``.
    A step costs the depth of the tree (plus the nodes it drops), and the sequence of steps is
    scikit-learn's.

    Parameters
    ----------
    children_left, children_right : ndarray of int32, shape (n_nodes,)
        Children come after their parent.
    weighted_n_node_samples, impurity : ndarray of float64, shape (n_nodes,)
    ccp_alpha : float

    Returns
    -------
    nodes, alphas, impurities, n_leaves : ndarrays of shape (n_steps,)
        See ``weakest_links``.
    impurity : float
        Total leaf impurity of the unpruned tree.
    """
    n_nodes = children_left.shape[0]
    r_node = weighted_n_node_samples * impurity / weighted_n_node_samples[0]
    parent = np.full(n_nodes, -1, dtype=np.int64)
    rank = np.empty(n_nodes, dtype=np.int64)
    preorder = np.empty(n_nodes, dtype=np.int64)
    stack = np.empty(n_nodes + 1, dtype=np.int64)
    # Depth-first order, left subtree first: scikit-learn's node ids. Ties between alphas go to
    # the first node in it, and leaf impurities are summed in it, as scikit-learn does.
    stack[0] = 0
    top = 1
    k = 0
    while top > 0:
        top -= 1
        node = stack[top]
        preorder[k] = node
        rank[node] = k
        k += 1
        if children_left[node] != TREE_LEAF:
            parent[children_left[node]] = node
            parent[children_right[node]] = node
            stack[top] = children_right[node]
            stack[top + 1] = children_left[node]
            top += 2
    r_branch = np.zeros(n_nodes)
    n_leaves = np.zeros(n_nodes, dtype=np.int64)  # leaves under each internal node
    for k in range(n_nodes):
        leaf = preorder[k]
        if children_left[leaf] != TREE_LEAF:
            continue
        r_branch[leaf] = r_node[leaf]
        p = parent[leaf]
        while p != -1:
            r_branch[p] += r_node[leaf]
            n_leaves[p] += 1
            p = parent[p]
    full_impurity = r_branch[0]

    # alpha[i]: effective alpha of i while it can be collapsed, else inf; best[i]: the node of
    # least (alpha, rank) in the subtree of i, -1 if none. Children come after their parent, so
    # a pass in reverse node order sees both children before their parent.
    alpha = np.full(n_nodes, np.inf)
    best = np.full(n_nodes, -1, dtype=np.int64)
    for i in range(n_nodes - 1, -1, -1):
        if children_left[i] != TREE_LEAF:
            alpha[i] = (r_node[i] - r_branch[i]) / (n_leaves[i] - 1)
            best[i] = _weakest_of(i, children_left[i], children_right[i], alpha, rank, best)
    n_internal = np.sum(children_left != TREE_LEAF)
    nodes = np.empty(n_internal, dtype=np.int64)
    alphas = np.empty(n_internal)
    impurities = np.empty(n_internal)
    leaves_after = np.empty(n_internal, dtype=np.int64)
    n_steps = 0
    while best[0] != -1 and alpha[best[0]] <= ccp_alpha:
        node = best[0]
        nodes[n_steps] = node
        alphas[n_steps] = alpha[node]
        # The branch below node leaves the tree: nothing in it can be collapsed any more.
        stack[0] = node
        top = 1
        while top > 0:
            top -= 1
            d = stack[top]
            if best[d] == -1:
                continue  # a leaf, or a branch already collapsed
            alpha[d] = np.inf
            best[d] = -1
            stack[top] = children_left[d]
            stack[top + 1] = children_right[d]
            top += 2
        n_pruned = n_leaves[node] - 1
        n_leaves[node] = 0
        r_diff = r_node[node] - r_branch[node]
        r_branch[node] = r_node[node]
        p = parent[node]
        while p != -1:
            n_leaves[p] -= n_pruned
            r_branch[p] += r_diff
            alpha[p] = (r_node[p] - r_branch[p]) / (n_leaves[p] - 1)
            best[p] = _weakest_of(p, children_left[p], children_right[p], alpha, rank, best)
            p = parent[p]
        impurities[n_steps] = r_branch[0]
        leaves_after[n_steps] = max(n_leaves[0], 1)  # 0 once the root itself is collapsed
        n_steps += 1
    return (
        nodes[:n_steps],
        alphas[:n_steps],
        impurities[:n_steps],
        leaves_after[:n_steps],
        full_impurity,
    )


@njit(cache=True, inline="always")
def _weakest_of(node, left, right, alpha, rank, best):
    """The node of least (alpha, rank) among ``node`` itself and ``best`` of its children."""
    weakest = node
    for child in (left, right):
        other = best[child]
        if other != -1 and (
            alpha[other] < alpha[weakest]
            or (alpha[other] == alpha[weakest] and rank[other] < rank[weakest])
        ):
            weakest = other
    return weakest


# ---- choosing alpha by K-fold cross-validation (Algorithm 8.1) ---------------------------------


def candidate_alphas(path):
    """One alpha per subtree of the pruning sequence: where each is the best pruned tree.

    The distinct path alphas ``a_0 = 0 < a_1 < ... < a_m`` cut the alpha axis into intervals:
    subtree ``T_k`` is the minimal cost-complexity subtree for every alpha in
    ``[a_k, a_{k+1})``, and the root for alpha >= ``a_m``. Each subtree is represented by the
    geometric mean ``sqrt(a_k a_{k+1})`` of its interval, as rpart and Breiman et al. (1984) do
    (alphas span orders of magnitude, so the middle is taken on a log scale). A path alpha itself
    is where two consecutive subtrees are equally good: on a CV fold's tree, whose path differs a
    little, it falls on either side. ``T_0`` gets ``sqrt(0 * a_1) = 0``, no pruning; the root,
    whose interval has no end, gets ``R(root)``, the root's impurity, the penalty beyond which
    no split pays however pure its leaves (finite, so that a model file can store it).

    Parameters
    ----------
    path : Bunch
        ``pruning_path`` of the tree grown on all the data.

    Returns
    -------
    ndarray of float64, shape (n_subtrees,)
        Increasing.
    """
    # Ties repeat an alpha (one step per collapsed node); rounding can push a zero-gain split's
    # alpha a hair below 0.
    alphas = np.unique(np.maximum(path.ccp_alphas, 0.0))
    inner = np.sqrt(alphas[:-1] * alphas[1:])
    return np.append(inner, max(path.impurities[-1], alphas[-1]))


def select_ccp_alpha(
    estimator, X, y, cv=5, rule="min", scoring=None, random_state=None, client=None
):
    """Choose ``ccp_alpha`` by K-fold cross-validation: Algorithm 8.1 of ISLR (James et al.).

    1. Grow a full tree on all the data and take its pruning path; its subtrees' alphas
       (``candidate_alphas``: geometric means of consecutive path alphas) are the candidates.
    2. Cut the rows into ``cv`` folds (``KFold``, shuffled with ``random_state``). For each fold,
       grow a full tree on the other folds, prune it at every candidate alpha, and score each
       pruned tree on the held-out fold.
    3. Average the errors over the folds; choose the alpha of least mean error
       (``rule="min"``), or the largest alpha whose mean error is within one standard error of
       that least one (``rule="1se"``, Breiman et al. 1984). Among equal means the largest
       alpha, the smaller tree, is chosen (as rpart does).

    The folds run as Dask tasks on ``client``, or on the default client if there is one,
    otherwise one after the other here; the result is the same either way.

    Parameters
    ----------
    estimator : DecisionTreeClassifier or DecisionTreeRegressor
        Its parameters, but ``ccp_alpha``, are used for every tree. Give it a ``random_state``
        for reproducible results.
    X : array-like or pandas DataFrame, shape (n_samples, n_features)
    y : array-like, shape (n_samples,)
    cv : int, default=5
        Number of folds, at least 2.
    rule : {"min", "1se"}, default="min"
    scoring : str or callable, default=None
        None: misclassification rate (classifiers) or mean squared error (regressors).
        Otherwise a scikit-learn scorer (greater is better), whose negated score is the error:
        ``"neg_mean_squared_error"`` gives the MSE, ``"accuracy"`` minus the accuracy (the
        misclassification rate minus one).
    random_state : int, RandomState or None
        Shuffles the rows into folds.
    client : distributed.Client, default=None

    Returns
    -------
    Bunch with
    ccp_alpha : float
        The chosen alpha.
    ccp_alphas : ndarray, shape (n_alphas,)
        The candidates, increasing.
    n_leaves : ndarray of int64, shape (n_alphas,)
        Leaves of the tree grown on all the data, pruned at each candidate.
    cv_errors : ndarray, shape (cv, n_alphas)
        Error on each held-out fold.
    cv_mean, cv_se : ndarray, shape (n_alphas,)
        Mean error over the folds and its standard error (sample standard deviation over
        ``sqrt(cv)``).
    rule : str
    estimator : fitted estimator
        A clone of ``estimator`` with ``ccp_alpha`` set to the chosen alpha, fitted on all the
        data: the tree of step 1, pruned (what fitting the clone again grows, given a
        ``random_state``).
    """
    if rule not in ("min", "1se"):
        raise ValueError(f'rule must be "min" or "1se", got {rule!r}')
    if not hasattr(estimator, "cost_complexity_pruning_path"):
        raise TypeError(
            "estimator must be a DecisionTreeClassifier or DecisionTreeRegressor, "
            f"got {type(estimator).__name__}"
        )
    X = check_2d(X)
    y = column_or_1d(y)
    if not isinstance(cv, Integral) or isinstance(cv, bool) or not 2 <= cv <= len(y):
        raise ValueError(f"cv must be an int in [2, n_samples={len(y)}], got {cv!r}")
    full = clone(estimator).set_params(ccp_alpha=0.0).fit(X, y)
    links = weakest_links(full.tree_)
    alphas = candidate_alphas(pruning_path(full.tree_))
    folds = list(KFold(cv, shuffle=True, random_state=random_state).split(X))
    fold_errors = functools.partial(_fold_errors, clone(full), alphas, scoring)
    cv_errors = np.array(_map_folds(client, fold_errors, X, y, folds))
    cv_mean = cv_errors.mean(axis=0)
    cv_se = cv_errors.std(axis=0, ddof=1) / np.sqrt(cv)
    best = np.flatnonzero(cv_mean == cv_mean.min())[-1]
    if rule == "1se":
        best = np.flatnonzero(cv_mean <= cv_mean[best] + cv_se[best])[-1]
    # Leaves of the full tree before any step, then after each.
    leaves = np.append(full.tree_.n_leaves, links.n_leaves)
    chosen = float(alphas[best])
    full.tree_ = prune_cost_complexity(full.tree_, chosen)
    full.set_params(ccp_alpha=chosen)
    return Bunch(
        ccp_alpha=chosen,
        ccp_alphas=alphas,
        n_leaves=leaves[[_n_steps(links.ccp_alphas, alpha) for alpha in alphas]],
        cv_errors=cv_errors,
        cv_mean=cv_mean,
        cv_se=cv_se,
        rule=rule,
        estimator=full,
    )


def _map_folds(client, fold_errors, X, y, folds):
    """``fold_errors(X, y, train, test)`` for every fold: as Dask tasks on ``client`` or the
    default client (X and y are scattered once), else here, one fold after the other."""
    client = find_client(client)
    if client is None:
        return [fold_errors(X, y, train, test) for train, test in folds]
    X_future, y_future = client.scatter([X, y])
    futures = [
        client.submit(fold_errors, X_future, y_future, train, test, pure=False)
        for train, test in folds
    ]
    return client.gather(futures)


def _fold_errors(template, alphas, scoring, X, y, train, test):
    """Errors on the held-out rows ``test`` of the tree grown on the rows ``train`` and pruned at
    each of ``alphas`` (ndarray of float64, shape (n_alphas,)).

    The fold's tree is pruned once, along its whole weakest-link sequence; the pruned tree for
    an alpha is the first steps of it, and a held-out row lands in the owner of its leaf.
    """
    est = clone(template).fit(_rows(X, train), y[train])
    tree = est.tree_
    links = weakest_links(tree)
    X_test, y_test = _rows(X, test), y[test]
    leaves = tree.apply(est._encode(X_test))
    scorer = None if scoring is None else check_scoring(est, scoring=scoring)
    errors = np.empty(len(alphas))
    for k, alpha in enumerate(alphas):
        collapse = np.zeros(tree.node_count, dtype=bool)
        collapse[links.nodes[: _n_steps(links.ccp_alphas, alpha)]] = True
        if scorer is None:
            errors[k] = _error(est, _owners(tree, collapse)[leaves], y_test)
        else:
            pruned = copy.copy(est)
            pruned.tree_ = subtree(tree, collapse)
            errors[k] = -scorer(pruned, X_test, y_test)
    return errors


def _error(est, nodes, y):
    """Misclassification rate (classifiers) or mean squared error (regressors) of predicting
    the value of ``nodes[i]`` of ``est.tree_`` for target ``y[i]``."""
    value = est.tree_.value[nodes]
    if is_classifier(est):
        return float(np.mean(est.classes_.take(np.argmax(value, axis=1)) != y))
    return float(np.mean((y - value[:, 0]) ** 2))


def _rows(X, index):
    return X.iloc[index] if hasattr(X, "iloc") else X[index]


# ---- reduced-error pruning ---------------------------------------------------------------------


def reduced_error_prune(tree_estimator, X_val, y_val):
    """Reduced-error pruning (Quinlan 1987) on a validation set.

    Internal nodes are visited bottom-up (a node after all its descendants). A node's subtree is
    replaced by a leaf predicting the node's own value whenever that does not increase the
    error on the validation rows reaching the node: the misclassification count (classifiers)
    or the sum of squared errors (regressors). A node no validation row reaches is therefore
    replaced. The validation error of the pruned tree is never above the original's.

    Parameters
    ----------
    tree_estimator : fitted DecisionTreeClassifier or DecisionTreeRegressor
        Left unchanged.
    X_val : array-like or pandas DataFrame, shape (n_samples, n_features)
    y_val : array-like, shape (n_samples,)
        Rows not used to grow the tree.

    Returns
    -------
    A new fitted estimator of the same class and parameters, whose ``tree_`` is the pruned
    subtree of ``tree_estimator.tree_`` (refitting it would grow the unpruned tree again).
    """
    check_is_fitted(tree_estimator, "tree_")
    tree = tree_estimator.tree_
    paths = tree.decision_path(tree_estimator._encode(X_val))
    y_val = column_or_1d(y_val)
    if len(y_val) != paths.shape[0]:
        raise ValueError(f"y_val has {len(y_val)} samples but X_val has {paths.shape[0]}")
    nodes = paths.indices  # every (row, node on the row's path) pair
    y_at = y_val[np.repeat(np.arange(len(y_val)), np.diff(paths.indptr))]
    if is_classifier(tree_estimator):
        node_class = tree_estimator.classes_.take(np.argmax(tree.value, axis=1))
        loss = (node_class[nodes] != y_at).astype(np.float64)
    else:
        loss = (y_at.astype(np.float64) - tree.value[nodes, 0]) ** 2
    # Error of each node as a leaf, on the validation rows through it.
    as_leaf = np.bincount(nodes, weights=loss, minlength=tree.node_count)
    pruned = copy.deepcopy(tree_estimator)
    pruned.tree_ = subtree(tree, _collapse_bottom_up(tree, as_leaf))
    return pruned


def _collapse_bottom_up(tree, as_leaf):
    """Which internal nodes reduced-error pruning collapses, given each node's error as a leaf.

    Depth by depth from the deepest: a node's error is the lesser of its error as a leaf and
    the sum of its children's errors (each already the error of its pruned subtree).
    """
    error = as_leaf.copy()
    collapse = np.zeros(tree.node_count, dtype=bool)
    split = np.flatnonzero(tree.children_left != TREE_LEAF)
    depth = tree.node_depth[split]
    for d in range(int(depth.max(initial=-1)), -1, -1):
        nodes = split[depth == d]
        below = error[tree.children_left[nodes]] + error[tree.children_right[nodes]]
        collapse[nodes] = as_leaf[nodes] <= below
        error[nodes] = np.minimum(as_leaf[nodes], below)
    return collapse

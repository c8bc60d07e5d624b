"""Choosing how much to prune: alpha by K-fold cross-validation (Algorithm 8.1 of ISLR, the
folds as Dask tasks when there is a client), and reduced-error pruning on a validation set
(Quinlan 1987). Both fit estimators; the pruning itself (weakest links, paths, subtrees) is
``tree.cost_complexity``'s.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from numbers import Integral

import distributed
import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import clone, is_classifier
from sklearn.metrics import check_scoring
from sklearn.model_selection import KFold
from sklearn.utils import Bunch
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ..core import class_outputs
from ..core.dtypes import TREE_LEAF
from ..core.validation import check_2d, check_single_output
from ..distributed.client import find_client
from ..learner.cost_complexity import (
    n_steps,
    node_owners,
    prune_cost_complexity,
    pruning_path,
    subtree,
    weakest_links,
)
from .trees import BaseDecisionTree

# ---- choosing alpha by K-fold cross-validation (Algorithm 8.1) ---------------------------------


def candidate_alphas(path: Bunch) -> np.ndarray:
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
    estimator: BaseDecisionTree,
    X: ArrayLike,
    y: ArrayLike,
    cv: int = 5,
    rule: str = "min",
    scoring: str | Callable[..., float] | None = None,
    random_state: int | np.random.RandomState | None = None,
    client: distributed.Client | None = None,
) -> Bunch:
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
    y : array-like, shape (n_samples,), or (n_samples, k) on k target or class columns
    cv : int, default=5
        Number of folds, at least 2.
    rule : {"min", "1se"}, default="min"
    scoring : str or callable, default=None
        None: misclassification rate (classifiers; on several class columns, the share of rows
        with any column wrong) or mean squared error (regressors; its mean over the target
        columns of a multi-output fit).
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
    table = check_2d(X)
    # (k target columns: a regressor's multi-output fit, scored by the mean over them)
    target = np.asarray(y) if np.ndim(y) == 2 and np.shape(y)[1] > 1 else column_or_1d(y)
    if not isinstance(cv, Integral) or isinstance(cv, bool) or not 2 <= cv <= len(target):
        raise ValueError(f"cv must be an int in [2, n_samples={len(target)}], got {cv!r}")
    full = clone(estimator).set_params(ccp_alpha=0.0).fit(table, target)
    links = weakest_links(full.tree_)
    alphas = candidate_alphas(pruning_path(full.tree_))
    folds = list(KFold(cv, shuffle=True, random_state=random_state).split(table))
    fold_errors = functools.partial(_fold_errors, clone(full), alphas, scoring)
    cv_errors = np.array(_map_folds(client, fold_errors, table, target, folds))
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
        n_leaves=leaves[[n_steps(links.ccp_alphas, alpha) for alpha in alphas]],
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
        collapse[links.nodes[: n_steps(links.ccp_alphas, alpha)]] = True
        if scorer is None:
            errors[k] = _error(est, node_owners(tree, collapse)[leaves], y_test)
        else:
            pruned = copy.copy(est)
            pruned.tree_ = subtree(tree, collapse)
            errors[k] = -scorer(pruned, X_test, y_test)
    return errors


def _error(est, nodes, y):
    """Misclassification rate (classifiers: of rows with any class column wrong, scikit-learn's
    subset accuracy, on several) or mean squared error (regressors; averaged over the target
    columns of a multi-output tree) of predicting the value of ``nodes[i]`` of ``est.tree_``
    for target ``y[i]``."""
    value = est.tree_.value[nodes]
    if is_classifier(est) and getattr(est, "n_outputs_", 1) > 1:
        wrong = class_outputs.column_labels(value, est.classes_) != np.asarray(y)
        return float(np.mean(wrong.any(axis=1)))
    if is_classifier(est):
        return float(np.mean(est.classes_.take(np.argmax(value, axis=1)) != y))
    return float(np.mean((np.reshape(y, value.shape) - value) ** 2))


def _rows(X, index):
    return X.iloc[index] if hasattr(X, "iloc") else X[index]


# ---- reduced-error pruning ---------------------------------------------------------------------


def reduced_error_prune(
    tree_estimator: BaseDecisionTree, X_val: ArrayLike, y_val: ArrayLike
) -> BaseDecisionTree:
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
    check_single_output(tree_estimator, "reduced_error_prune")
    tree = tree_estimator.tree_
    paths = tree.decision_path(tree_estimator._encode(X_val))
    target = column_or_1d(y_val)
    if len(target) != paths.shape[0]:
        raise ValueError(f"y_val has {len(target)} samples but X_val has {paths.shape[0]}")
    nodes = paths.indices  # every (row, node on the row's path) pair
    y_at = target[np.repeat(np.arange(len(target)), np.diff(paths.indptr))]
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

"""Minimal cost-complexity pruning of a grown tree (Breiman et al. 1984, ch. 3): the weakest
links, the pruning path and the pruned subtree, as scikit-learn computes them.

Every pruning ends in ``subtree``: the kept nodes of the original tree, in their original order
(parents before children), with the collapsed internal nodes turned into leaves. The grower
recorded ``value``, ``impurity`` and the sample counts of every node, so a new leaf predicts what
its node held when the tree was grown:

    original                      collapse {1}          pruned
    0 ─┬─ 1 ─┬─ 3                                       0 ─┬─ 1   (leaf: old node 1)
       │     └─ 4      ─────────────────────────>          └─ 2   (old node 2)
       └─ 2

Choosing alpha by cross-validation and reduced-error pruning, which fit estimators, are in
``dasktrees.pruning``.
"""

# scikit-learn is imported inside the functions that use it: the kernels load without it
# (docs/design.md, "Compiled for what a fit uses").
import numpy as np

from ..core.dtypes import BITSET_DTYPE, BITSET_WORDS, TREE_LEAF
from ..core.kernel_cache import kernel
from .tree import LEAF_CONSTANTS, TREE_ARRAYS, Tree

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
    owner = node_owners(tree, collapse)
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


def node_owners(tree, collapse):
    """For every node, the node of the pruned tree that takes its rows: itself if it is kept,
    else its collapsed ancestor (ndarray of int64, shape (n_nodes,))."""
    owner = np.empty(tree.node_count, dtype=np.int64)
    _fill_owners(tree.children_left, tree.children_right, collapse, owner)
    return owner


@kernel()
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
    from sklearn.utils import Bunch

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
    from sklearn.utils import Bunch

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


def n_steps(alphas, ccp_alpha):
    """Number of leading weakest-link steps taken for ``ccp_alpha``: pruning stops at the first
    step whose alpha exceeds it, and ``ccp_alpha == 0`` prunes nothing."""
    if ccp_alpha == 0.0:
        return 0
    above = np.flatnonzero(alphas > ccp_alpha)
    return int(above[0]) if len(above) else len(alphas)


@kernel()
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


@kernel(inline="always")
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

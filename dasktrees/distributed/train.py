"""The task graph of a forest fit: one task per batch of trees.

Replicated mode (the default while the binned data fits a worker): a tree task receives every
binned block (Dask moves each block to a worker once and keeps it there), stacks them in row
order and grows its trees on the whole table, each tree weighting row i by its count c_t(i):

    block 0 ─┐
    block 1 ─┼─> [ tree task: trees 0..3 ]      [ tree task: trees 4..7 ]   ...
    block 2 ─┘        (every block)                 (every block)

Sampled mode (``max_samples`` well below n, or data larger than a worker): each block extracts
the rows a batch of trees draws (small tasks where the data lives), and the tree task grows on
their concatenation, so a task's memory is bounded by the sample, not by the data.

Both modes compute the same counts from (seed, tree, global row id) and stack rows in the same
order, so they grow the same trees.
"""

import uuid
from dataclasses import dataclass

import numpy as np

from .._params import GrowthParams
from ..binning import BinArrays
from ..sampling import tree_counts, tree_seed, tree_subspace
from ..tree.grower import grow_tree


@dataclass(frozen=True)
class ForestSpec:
    """Everything a tree task needs besides the data (small: sent with every task)."""

    params: GrowthParams
    bins: BinArrays
    n_classes: int  # 1 for regression
    seed: int
    lam: float  # Poisson mean of the row counts; 0: every count is 1
    n_features_tree: int  # features per tree (random subspace); n_features: all
    balanced_subsample: bool


def tree_weights(spec, tree, y, w, first_row):
    """Row weights of one tree: base weight x count, re-balanced per tree when asked."""
    counts = np.empty(len(y))
    tree_counts(spec.seed, tree, first_row, spec.lam, counts)
    weights = w * counts
    if spec.balanced_subsample:
        classes = y.astype(np.int64)
        in_bag = np.bincount(classes, weights=counts, minlength=spec.n_classes)
        balance = counts.sum() / (spec.n_classes * np.maximum(in_bag, 1.0))
        weights *= balance[classes]
    return weights


def grow_batch(spec, trees, *blocks):
    """Grow ``trees`` (tree indices) on the stacked blocks; returns a list of tree.Tree."""
    codes = np.concatenate([b.codes for b in blocks]) if len(blocks) > 1 else blocks[0].codes
    y = np.concatenate([b.y for b in blocks]) if len(blocks) > 1 else blocks[0].y
    w = np.concatenate([b.w for b in blocks]) if len(blocks) > 1 else blocks[0].w
    first_row = blocks[0].first_row
    grown = []
    for t in trees:
        weights = tree_weights(spec, t, y, w, first_row)
        candidates = tree_subspace(spec.seed, t, codes.shape[1], spec.n_features_tree)
        grown.append(
            grow_tree(codes, y, weights, spec.bins, spec.params, spec.n_classes,
                      tree_seed(spec.seed, t), candidates)
        )
    return grown


def default_trees_per_task(n_trees, n_workers):
    """About four tasks per worker: enough to balance load and survive a lost worker cheaply,
    few enough that stacking the blocks (once per task) stays a small part of the work."""
    return max(1, int(np.ceil(n_trees / (4 * max(1, n_workers)))))


def grow_forest(client, data, spec, tree_ids, trees_per_task=None, retries=1):
    """Submit the tree tasks and gather their trees in tree order.

    Returns
    -------
    list of tree.Tree
    """
    n_workers = len(client.scheduler_info()["workers"])
    if trees_per_task is None:
        trees_per_task = default_trees_per_task(len(tree_ids), n_workers)
    batches = [tree_ids[i : i + trees_per_task] for i in range(0, len(tree_ids), trees_per_task)]
    token = uuid.uuid4().hex[:8]
    futures = [
        client.submit(
            grow_batch, spec, batch, *data.parts, key=f"dasktrees-trees-{batch[0]}-{token}",
            retries=retries, pure=False,
        )
        for batch in batches
    ]
    return [tree for batch in client.gather(futures) for tree in batch]

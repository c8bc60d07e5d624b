"""Reductions over the binned blocks: out-of-bag votes, score and curve; permutation importance
and the debiased impurity importance; the targets of the leaves of a quantile forest and its
out-of-bag quantiles.

Every block recomputes each tree's counts for its own rows (``sampling.tree_counts``), votes with
the trees that did not sample a row, and returns small sums. Loss sums are exact
(``exact.exact_sum``), so the totals the client adds up do not depend on how the rows were cut.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..forest.conformal import ConformalScores, order_sketch
from ..forest.exact import EXACT_DIGITS, exact_sum, from_digits, from_exact
from ..forest.node_table import NodeTable
from ..forest.packing import PackedForest
from ..forest.parts import ForestPart
from ..forest.quantiles import LeafTargets, joined, predict_quantiles
from ..forest.routing import leaves_of_codes
from ..forest.voting import (
    add_oob_impurity,
    add_oob_votes,
    misclassified,
    misclassified_columns,
    tree_loss,
)
from ..learner.sampling import tree_counts
from .binned import BinnedPartition, TrainingData
from .client import Client, Future, is_in_process, sending_large_data
from .shards import TreeShards

if TYPE_CHECKING:  # only this process builds dask arrays: workers import no dask.array
    import dask.array as da


@dataclasses.dataclass(frozen=True)
class Draws:
    """How each part of a forest reads the training rows: the blocks binned with its trees'
    bins, and the seed of its trees' bootstrap counts (keyed by ``ForestPart.first_tree``, the
    tree's index in its own fit). A forest of one fit has one binning and one seed; the parts
    of a merged forest (``merge_forests``) have their own fit's.

    Attributes
    ----------
    data : list of TrainingData
        Per part, in tree order; every binning cuts the rows into the same blocks.
    seeds : list of int
        Per part.
    """

    data: list[TrainingData]
    seeds: list[int]

    @property
    def rows(self) -> TrainingData:
        """The training rows (a binning of them): their targets, blocks and output chunks."""
        return self.data[0]

    def blocks(self) -> list[list[tuple[Future, int]]]:
        """Per block of rows, in order: (the block as part k reads it, part k's seed), for
        every part."""
        return [list(zip(binned, self.seeds)) for binned in zip(*(d.parts for d in self.data))]


def oob_block(
    part: ForestPart,
    block: BinnedPartition,
    seed: int,
    lam: float,
    voting: int,
    classification: bool,
    previous: tuple | None = None,
) -> tuple[np.ndarray, np.ndarray, list, tuple]:
    """Out-of-bag votes of one block and its part of the OOB curve and score, from the trees
    of ``part`` added to the ``previous`` part's result (its votes continued in tree order:
    a forest in parts gives the sums of the whole forest).

    Returns
    -------
    votes : ndarray (n_rows, n_values)
    n_oob : ndarray (n_rows,)
    curve : list of (loss, n_scored) per tree so far; losses are misclassification counts or
        exact sums of squared errors (a tuple of one a column for k target columns)
    y_sums : (exact sum of y, exact sum of y**2) over the scored rows (regression's R²); k
        such pairs for k target columns
    """
    forest = part.packed
    n = len(block.y)
    if previous is None:
        votes, n_oob, curve = np.zeros((n, forest.values.shape[1])), np.zeros(n), []
    else:
        votes, n_oob, curve = previous[0].copy(), previous[1].copy(), list(previous[2])
    counts = np.empty(n)
    for t in range(forest.n_trees):
        tree_counts(seed, part.first_tree + t, block.first_row, lam, counts)
        add_oob_votes(
            block.codes,
            forest.nodes,
            forest.bitsets,
            forest.roots[t],
            *forest.leaf_values,
            voting,
            counts,
            votes,
            n_oob,
        )
        if classification:
            errors, scored = (misclassified if block.y.ndim == 1 else misclassified_columns)(
                votes, n_oob, block.y
            )
            curve.append((int(errors), int(scored)))
        else:
            scored = n_oob > 0
            loss: int | tuple[int, ...]
            if block.y.ndim == 1:
                loss = squared_error_sum(votes[:, 0], n_oob, block.y, scored)
            else:  # k target columns: one exact sum each
                loss = tuple(
                    squared_error_sum(votes[:, o], n_oob, block.y[:, o], scored)
                    for o in range(block.y.shape[1])
                )
            curve.append((loss, int(scored.sum())))
    if block.y.ndim == 1:
        return votes, n_oob, curve, target_sums(block.y, n_oob > 0)
    if classification:  # k class columns (the sums of y are regression's R²)
        return votes, n_oob, curve, (0, 0)
    return votes, n_oob, curve, tuple(target_sums(column, n_oob > 0) for column in block.y.T)


def squared_error_sum(
    vote_sums: np.ndarray, n_oob: np.ndarray, y: np.ndarray, scored: np.ndarray
) -> int:
    """Regression's out-of-bag loss over a block's ``scored`` rows: the exact sum
    (``exact.exact_sum``) of the squared residuals of the mean votes ``vote_sums / n_oob``."""
    residuals = vote_sums[scored] / n_oob[scored] - y[scored]
    return exact_sum(residuals * residuals)


def target_sums(y: np.ndarray, scored: np.ndarray) -> tuple[int, int]:
    """The exact sums of y and y**2 over a block's ``scored`` rows (R²'s total sum of squares)."""
    return exact_sum(y[scored]), exact_sum(y[scored] ** 2)


def scores_of(losses, n_scored, y_sums, classification: bool) -> np.ndarray:
    """Out-of-bag scores from the blocks' summed losses over ``n_scored`` rows: accuracy from
    misclassified rows, or R² from exact sums of squared residuals and ``y_sums``
    (``target_sums`` summed over the blocks). NaN without a scored row."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if classification:
            return 1.0 - np.array(losses, dtype=np.float64) / n_scored
        sum_y, sum_y2 = (from_exact(total) for total in y_sums)
        total = sum_y2 - sum_y * sum_y / n_scored
        return np.array([1.0 - from_exact(loss) / total for loss in losses])


def _identity(value):
    return value


def forest_task(client: Client, forest: object) -> Future:
    """The packed forest as a task result the block tasks depend on: sent once, and recomputed
    from its spec if its worker dies (scattered data would die with it).

    Distributed warns about any graph over 10 MB; this one is large on purpose (the forest is
    sent once, not with each block task), so the warning is not passed on to users.

    Parameters
    ----------
    client : Client
    forest : PackedForest, NodeTable, or a tuple of what the block tasks take
        The forest the block tasks vote or walk with.

    Returns
    -------
    Future
        The forest, as a task result to pass to the block tasks.
    """
    with sending_large_data():
        return client.submit(_identity, forest, pure=False)


def _oob_summary(result):
    """What the client takes of a block's ``oob_block`` result: its curve, sums of y, and the
    number of values a vote has."""
    return result[2], result[3], result[0].shape[1]


def _decision(result):
    votes, n_oob = result[0], result[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return votes / n_oob[:, None]


def oob_estimates(
    client: Client, draws: Draws, parts: list[Future], lam: float, voting: int, classification: bool
) -> tuple[np.ndarray | da.Array, float, np.ndarray, ConformalScores | None]:
    """Out-of-bag decision function (NaN for rows never out of bag), score and curve (and a
    regressor's conformity scores).

    ``parts`` are futures of the forest's parts (``forest.parts.ForestPart``) in tree order:
    each block goes through them one after the other (``oob_block``, with the block and seed
    ``draws`` gives the part), on the workers that hold them.

    Returns
    -------
    decision : ndarray, or dask array when the input was a dask collection
        Mean out-of-bag vote per row, shape (n_rows, n_values).
    score : float
        Accuracy (classification) or R² (regression) over rows with an out-of-bag vote.
    curve : ndarray (n_trees,)
        Error after 1, 2, ... trees: misclassification rate or mean squared error.
    scores : ConformalScores or None
        Regression: the rows' absolute out-of-bag residuals (``conformal``), sketched where
        the blocks are.
    """
    results = []
    for blocks in draws.blocks():
        result = None
        for part, (block, seed) in zip(parts, blocks):
            result = client.submit(
                oob_block, part, block, seed, lam, voting, classification, result, pure=False
            )
        results.append(result)
    summaries = client.gather([client.submit(_oob_summary, r) for r in results])
    n_trees, n_values = len(summaries[0][0]), summaries[0][2]
    several = not classification and n_values > 1  # k target columns: exact sums of each
    scored = np.array([sum(block[0][t][1] for block in summaries) for t in range(n_trees)])
    n_scored = scored[-1]
    if n_scored < draws.rows.n_rows:
        warnings.warn(
            f"Some inputs do not have OOB scores: {draws.rows.n_rows - n_scored:,} of "
            f"{draws.rows.n_rows:,} rows were drawn by every tree, and their out-of-bag values "
            "are NaN (the score leaves them out). More trees leave every row out of some.",
            UserWarning,
            stacklevel=2,
        )
    if several:
        curve, score = _outputs_curve_and_score(summaries, scored, n_values)
    else:
        losses = [sum(block[0][t][0] for block in summaries) for t in range(n_trees)]
        with np.errstate(invalid="ignore", divide="ignore"):
            if classification:
                curve = np.array(losses, dtype=np.float64) / scored
            else:
                curve = np.array([from_exact(loss) for loss in losses]) / scored
        y_sums = [sum(block[1][k] for block in summaries) for k in range(2)]
        score = scores_of(losses[-1:], n_scored, y_sums, classification)[0]
    decisions = [client.submit(_decision, r) for r in results]
    scores = None
    if not classification and not several:
        sketches = [
            client.submit(_residual_sketch, d, block, pure=False)
            for d, block in zip(decisions, draws.rows.parts)
        ]
        scores = ConformalScores.from_sketches(client.gather(sketches), int(n_scored))
    return _row_output(client, draws.rows, decisions, n_values), float(score), curve, scores


def _outputs_curve_and_score(summaries, scored, n_outputs):
    """The out-of-bag curve and score of a regression on ``n_outputs`` target columns, from
    its blocks' summaries (``_oob_summary``: exact sums of each column) and the rows scored
    after each tree: the mean squared error over the outputs, and the mean of their R²
    (scikit-learn's ``uniform_average``)."""
    losses = [
        [sum(block[0][t][0][o] for block in summaries) for o in range(n_outputs)]
        for t in range(len(scored))
    ]
    with np.errstate(invalid="ignore", divide="ignore"):
        curve = np.array([np.mean([from_exact(x) for x in loss]) for loss in losses]) / scored
    r2 = [
        scores_of(
            [losses[-1][o]],
            scored[-1],
            [sum(block[1][o][k] for block in summaries) for k in range(2)],
            False,
        )[0]
        for o in range(n_outputs)
    ]
    return curve, np.mean(r2)


def _residual_sketch(decision: np.ndarray, block: BinnedPartition):
    """``conformal.order_sketch`` of a block's absolute out-of-bag residuals."""
    return order_sketch(np.abs(block.y - decision[:, 0]))


def _row_output(client, data, futures, n_columns):
    """Per-block results (n_rows, n_columns) as one array, or as a dask array with the input's
    chunks when the input was a dask collection (left on the workers)."""
    if not data.is_dask:
        return np.concatenate(client.gather(futures))
    import dask.array as da

    if is_in_process(client):  # already here: a dask array of the same chunks as the input
        return da.from_array(
            np.concatenate(client.gather(futures)), chunks=(data.row_chunks, n_columns)
        )
    return da.concatenate(
        [
            da.from_delayed(f, shape=(n, n_columns), dtype=np.float64)
            for f, n in zip(futures, data.row_chunks)
        ]
    )


def permutation_block(
    part: ForestPart,
    block: BinnedPartition,
    seed: int,
    lam: float,
    classification: bool,
    n_repeats: int,
    permutation_seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A block's part of Breiman's permutation importance, for the trees of ``part``.

    For every tree, its out-of-bag rows in this block are scored as they are and with each
    feature permuted among them (``n_repeats`` times).

    Returns
    -------
    base : ndarray (n_trees,)
        Summed loss of each tree on its out-of-bag rows.
    permuted : ndarray (n_trees, n_features, n_repeats)
        The same with one feature permuted.
    n_oob : ndarray (n_trees,)
        Out-of-bag rows of each tree in the block.
    """
    n_rows, n_features = block.codes.shape
    forest = part.packed
    n_trees = forest.n_trees
    counts = np.empty(n_rows)
    base = np.zeros(n_trees)
    permuted = np.zeros((n_trees, n_features, n_repeats))
    n_oob = np.zeros(n_trees)
    for t in range(n_trees):
        tree = part.first_tree + t  # the forest's index: its counts, and its permutations' seed
        tree_counts(seed, tree, block.first_row, lam, counts)
        rows = np.flatnonzero(counts == 0)
        n_oob[t] = len(rows)
        if len(rows) == 0:
            continue
        args = (
            block.codes,
            block.y,
            rows,
            forest.nodes,
            forest.bitsets,
            forest.roots[t],
            *forest.leaf_values,
            classification,
        )
        base[t] = tree_loss(*args, -1, rows)
        for j in range(n_features):
            for r in range(n_repeats):
                rng = np.random.default_rng([permutation_seed, tree, j, r, block.first_row])
                permuted[t, j, r] = tree_loss(*args, j, rows[rng.permutation(len(rows))])
    return base, permuted, n_oob


def permutation_importance(
    client: Client,
    draws: Draws,
    parts: list[Future],
    lam: float,
    classification: bool,
    n_repeats: int,
    permutation_seed: int,
) -> np.ndarray:
    """Breiman's out-of-bag permutation importance, summed over the blocks.

    ``parts`` are futures of the forest's parts (``forest.parts.ForestPart``) in tree order;
    every block is scored by each (as ``draws`` gives it the block, with its seed), where the
    part is.

    Returns
    -------
    ndarray (n_features, n_trees, n_repeats)
        Each tree's mean loss increase on its out-of-bag rows when the feature is permuted.
    """
    args = (lam, classification, n_repeats, permutation_seed)
    futures = [
        [
            client.submit(permutation_block, part, block, seed, *args, pure=False)
            for part, (block, seed) in zip(parts, blocks)
        ]
        for blocks in draws.blocks()
    ]
    # Per block, the parts' trees one after the other; then the blocks summed, in order.
    blocks = [
        [np.concatenate([r[k] for r in client.gather(row)]) for k in range(3)] for row in futures
    ]
    base, permuted, n_oob = (functools.reduce(operator.add, sums) for sums in zip(*blocks))
    n_oob = np.maximum(n_oob, 1.0)
    increase = (permuted - base[:, None, None]) / n_oob[:, None, None]
    return increase.transpose(1, 0, 2)


def oob_impurity_block(
    table: NodeTable,
    block: BinnedPartition,
    seed: int,
    lam: float,
    classification: bool,
    first_tree: int = 0,
) -> np.ndarray:
    """A block's part of the debiased impurity importance (``add_oob_impurity``), for the trees
    of ``table``, the forest's trees ``first_tree`` on.

    Returns
    -------
    ndarray of object (Python int), shape (n_trees, n_features + 1)
        Per tree, the exact sums (``exact.exact_sum``'s units) of each feature's decreases
        over the tree's out-of-bag rows in the block, and of those rows' weights.
    """
    n_rows = len(block.y)
    counts = np.empty(n_rows)
    acc = np.zeros((table.n_features + 1, EXACT_DIGITS), dtype=np.int64)
    sums = np.empty((table.n_trees, table.n_features + 1), dtype=object)
    for t in range(table.n_trees):
        tree_counts(seed, first_tree + t, block.first_row, lam, counts)
        acc[:] = 0
        add_oob_impurity(
            block.codes,
            block.y,
            block.w,
            counts,
            table.nodes,
            table.bitsets,
            table.starts[t],
            table.values,
            classification,
            acc,
        )
        sums[t] = from_digits(acc)
    return sums


def oob_impurity_importance(
    client: Client,
    draws: Draws,
    tables: list[Future],
    first_trees: Sequence[int],
    lam: float,
    classification: bool,
) -> np.ndarray:
    """The debiased impurity importance (MDI-oob) of each tree, from the blocks' exact sums:
    the same figures however the rows are cut into blocks.

    ``tables`` are futures of the node tables (``NodeTable``) of the forest's parts, in tree
    order, whose first trees (in their own fit) are ``first_trees``; ``draws``, the blocks and
    seed of each.

    Returns
    -------
    ndarray (n_features, n_trees)
        Each tree's summed decreases over its out-of-bag rows divided by their summed weight;
        0 for a tree without out-of-bag rows.
    """
    futures = [
        [
            client.submit(
                oob_impurity_block, table, block, seed, lam, classification, first, pure=False
            )
            for table, first, (block, seed) in zip(tables, first_trees, blocks)
        ]
        for blocks in draws.blocks()
    ]
    blocks = [np.concatenate(client.gather(row)) for row in futures]
    totals = sum(blocks[1:], blocks[0])
    sums = np.array([[from_exact(s) for s in row] for row in totals]).reshape(totals.shape)
    weights = sums[:, -1:]
    importances = np.divide(
        sums[:, :-1], weights, out=np.zeros_like(sums[:, :-1]), where=weights > 0
    )
    return importances.T


def _block_leaves(forest, block):
    """The leaf each row of a block reaches in each tree, (n_rows, n_trees)."""
    leaves = np.empty((len(block.y), forest.n_trees), dtype=np.int64)
    leaves_of_codes(
        block.codes,
        forest.nodes,
        forest.bitsets,
        forest.roots,
        forest.max_depth,
        len(forest.values),
        leaves,
    )
    return leaves


def leaf_entries_block(
    forest: PackedForest, block: BinnedPartition, seed: int, lam: float, first_tree: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (leaf, target, in-bag weight) of every tree's in-bag rows in one block.

    ``first_tree`` is the forest's index of ``forest``'s first tree (a shard's): what its
    bootstrap counts are keyed by.

    Returns
    -------
    leaves : ndarray of int64 (n_entries,)
        Global leaf index (``PackedForest``).
    y, weights : ndarray of float64 (n_entries,)
        The rows' targets and in-bag weights (count x sample_weight), rows in order within a
        tree.
    """
    n = len(block.y)
    leaves = _block_leaves(forest, block)
    counts = np.empty(n)
    parts = []
    for t in range(forest.n_trees):
        tree_counts(seed, first_tree + t, block.first_row, lam, counts)
        weights = block.w * counts
        rows = np.flatnonzero(weights > 0)
        parts.append((leaves[rows, t], block.y[rows], weights[rows]))
    all_leaves, all_y, all_weights = (np.concatenate([p[k] for p in parts]) for k in range(3))
    return all_leaves, all_y, all_weights


def _from_entries(entries, n_leaves):
    leaves, y, weights = (np.concatenate([e[k] for e in entries]) for k in range(3))
    return LeafTargets.from_entries(leaves, y, weights, n_leaves)


def leaf_targets(
    client: Client, data: TrainingData, forest: PackedForest, seed: int, lam: float
) -> LeafTargets:
    """Every leaf's in-bag targets and weights (``quantiles.LeafTargets``), from the blocks.

    Each block drops its rows down the trees and keeps, per tree, those the tree drew
    (``sampling.tree_counts`` again, nothing stored at fit); the client gathers the entries in
    row order, so the leaves hold the same sums however the rows were cut.
    """
    forest_future = forest_task(client, forest)
    entries = client.gather(
        [
            client.submit(leaf_entries_block, forest_future, part, seed, lam, pure=False)
            for part in data.parts
        ]
    )
    return _from_entries(entries, len(forest.values))


def _part_leaf_entries(part: ForestPart, block: BinnedPartition, seed: int, lam: float):
    return leaf_entries_block(part.packed, block, seed, lam, part.first_tree)


def _with_leaf_targets(part: ForestPart, *entries) -> ForestPart:
    return dataclasses.replace(part, leaf_targets=_from_entries(entries, len(part.packed.values)))


def shard_leaf_targets(
    client: Client, data: TrainingData, shards: TreeShards, seed: int, lam: float
) -> TreeShards:
    """The shards of a quantile forest kept on the workers, each with its leaves' targets
    (``leaf_targets`` of its trees), made on its worker: each binned block goes to every
    worker that holds shards (a copy of the binned table there while this runs), its entries
    are gathered there in row order, and neither they nor the targets come to the client."""
    parts = []
    for part, worker in zip(shards.parts, shards.workers):
        where = {"workers": [worker], "allow_other_workers": True, "pure": False}
        entries = [
            client.submit(_part_leaf_entries, part, block, seed, lam, **where)
            for block in data.parts
        ]
        parts.append(client.submit(_with_leaf_targets, part, *entries, **where))
    nbytes = client.gather([client.submit(ForestPart.nbytes, p, pure=False) for p in parts])
    return dataclasses.replace(shards, parts=parts, nbytes=np.array(nbytes, dtype=np.int64))


def _oob_quantiles_of(
    targets: LeafTargets,
    leaves: np.ndarray,
    block: BinnedPartition,
    seed: int,
    lam: float,
    quantiles: np.ndarray,
) -> tuple[np.ndarray, tuple[int, int, int], tuple]:
    """Out-of-bag quantiles of one block's rows, from the leaves (n_rows, n_trees) they reach
    in every tree of the forest, how many fall inside the interval between the lowest and
    the highest quantile, their pinball loss, and the rows' conformity scores.

    Returns
    -------
    quantiles : ndarray (n_rows, n_quantiles)
        NaN for a row no tree left out.
    sums : (rows inside, rows with out-of-bag quantiles, pinball loss)
        The loss is the exact sum (``exact.exact_sum``) over those rows and ``quantiles`` of
        max(q d, (q - 1) d), d the target minus its quantile q.
    sketch : ``conformal.order_sketch`` of the rows' distances outside their band of
        quantiles (``conformal``)
    """
    n, n_trees = leaves.shape
    out_of_bag = np.empty((n, n_trees), dtype=bool)
    counts = np.empty(n)
    for t in range(n_trees):
        tree_counts(seed, t, block.first_row, lam, counts)
        out_of_bag[:, t] = counts == 0
    values = predict_quantiles(targets, leaves, quantiles, out_of_bag)
    scored = ~np.isnan(values[:, 0])
    # Conformity (conformalized quantile regression): how far each target falls outside the
    # band of its lowest and highest out-of-bag quantiles; at most 0 inside it, bounds included
    # (``quantiles.inside_interval``).
    low, high = values[:, np.argmin(quantiles)], values[:, np.argmax(quantiles)]
    outside = np.maximum(low - block.y, block.y - high)
    inside = int(np.sum(outside[scored] <= 0.0))
    below = block.y[scored, None] - values[scored]
    pinball = exact_sum(np.maximum(quantiles * below, (quantiles - 1.0) * below))
    return values, (inside, int(scored.sum()), pinball), order_sketch(outside)


def oob_quantiles_block(
    part: ForestPart, block: BinnedPartition, seed: int, lam: float, quantiles: np.ndarray
) -> tuple[np.ndarray, tuple[int, int, int], tuple]:
    """``_oob_quantiles_of`` a block, the whole forest in one part with its leaf targets."""
    leaves = _block_leaves(part.packed, block)
    return _oob_quantiles_of(part.quantile_targets(), leaves, block, seed, lam, quantiles)


def _reached_block(part: ForestPart, block: BinnedPartition):
    """The leaves a block's rows reach in a part's trees, with their targets
    (``LeafTargets.reached``)."""
    return part.quantile_targets().reached(_block_leaves(part.packed, block))


def _oob_quantiles_joined(block, seed, lam, quantiles, *reached):
    """``_oob_quantiles_of`` a block, from what each part of the forest reached (``joined``)."""
    targets, leaves = joined(reached)
    return _oob_quantiles_of(targets, leaves, block, seed, lam, quantiles)


def oob_quantiles(
    client: Client, data: TrainingData, parts: list, seed: int, lam: float, quantiles: np.ndarray
) -> tuple[np.ndarray | da.Array, float, ConformalScores]:
    """Out-of-bag quantiles of every training row, the out-of-bag coverage of the interval
    between the lowest and highest of ``quantiles``, and the rows' conformity scores.

    ``parts``: futures of the forest's parts with their leaf targets, in tree order: the
    client's forest as one part (each block's task takes it whole), or the shards of a forest
    kept on the workers (each shard sends a block what its rows reach, ``_reached_block``).

    Returns
    -------
    quantiles : ndarray, or dask array when the input was a dask collection
        Shape (n_rows, n_quantiles); NaN for rows never out of bag.
    coverage : float
        Share of the rows with out-of-bag quantiles whose target lies in that interval.
    scores : ConformalScores
        Those rows' distances outside the band of their lowest and highest out-of-bag
        quantile (``conformal``), sketched where the blocks are.
    """
    results = _oob_quantile_tasks(client, data, parts, seed, lam, quantiles)
    sums = client.gather([client.submit(operator.itemgetter(1), r) for r in results])
    covered, scored = (sum(s[k] for s in sums) for k in range(2))
    coverage = covered / scored if scored else float("nan")
    sketches = client.gather([client.submit(operator.itemgetter(2), r) for r in results])
    scores = ConformalScores.from_sketches(sketches, scored)
    values = [client.submit(operator.itemgetter(0), r) for r in results]
    return _row_output(client, data, values, len(quantiles)), float(coverage), scores


def oob_pinball(
    client: Client, data: TrainingData, parts: list, seed: int, lam: float, quantiles: np.ndarray
) -> float:
    """The mean out-of-bag pinball loss of ``quantiles`` over the rows with out-of-bag
    quantiles (``parts`` as ``oob_quantiles``): exact sums over the blocks, so the same on any
    cluster. NaN without such a row. The rows' quantiles stay where they were computed."""
    results = _oob_quantile_tasks(client, data, parts, seed, lam, quantiles)
    sums = client.gather([client.submit(operator.itemgetter(1), r) for r in results])
    scored = sum(s[1] for s in sums)
    if not scored:
        return float("nan")
    return from_exact(sum(s[2] for s in sums)) / (scored * len(quantiles))


def _oob_quantile_tasks(client, data, parts, seed, lam, quantiles) -> list:
    """One task per block computing ``_oob_quantiles_of`` (futures, in block order)."""
    if len(parts) == 1:
        return [
            client.submit(oob_quantiles_block, parts[0], block, seed, lam, quantiles, pure=False)
            for block in data.parts
        ]
    return [
        client.submit(
            _oob_quantiles_joined,
            block,
            seed,
            lam,
            quantiles,
            *[client.submit(_reached_block, part, block, pure=False) for part in parts],
            pure=False,
        )
        for block in data.parts
    ]

"""The out-of-bag score of every truncation of a forest in one pass over the binned blocks
(``prune="oob"``; the truncations: ``forest.truncation``).

Each block recomputes each tree's counts for its rows, adds the tree's votes under every cut to
its out-of-bag rows (``truncation.add_truncated_votes``) and, after the forest's last tree,
returns each cut's loss as an exact sum: the scores the client adds up are the same however the
rows were cut, and each is bit for bit the ``oob_score_`` of the forest pruned at its cut.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from ..forest.node_table import NodeTable
from ..forest.truncation import add_truncated_votes
from ..forest.voting import misclassified
from ..learner.sampling import tree_counts
from .binned import BinnedPartition
from .client import Client, Future
from .reductions import Draws, scores_of, squared_error_sum, target_sums

# Rows whose votes under every cut a lone part's block task holds at a time (a forest in
# parts carries a whole block's from part to part).
ROWS_PER_CHUNK = 65536


def _add_votes(table, codes, first_row, seed, first_tree, lam, cuts, hard, votes, n_oob):
    """The votes of every tree of ``table`` under every cut, added to the rows
    ``first_row, ...`` (global ids) whose binned ``codes`` are given."""
    counts = np.empty(len(codes))
    for t in range(table.n_trees):
        tree_counts(seed, first_tree + t, first_row, lam, counts)
        add_truncated_votes(
            codes,
            counts,
            table.nodes,
            table.bitsets,
            table.starts[t],
            table.max_depth,
            table.values,
            table.keys,
            cuts,
            hard,
            votes,
            n_oob,
        )


def _losses(votes, n_oob, y, classification):
    """Per cut, the loss over the rows with an out-of-bag vote (misclassified rows, or the exact
    sum of squared residuals, as ``reductions.oob_block`` counts them), the rows scored, and the
    exact sums of their y and y**2 (``reductions.target_sums``)."""
    scored = n_oob > 0
    losses = []
    for j in range(votes.shape[1]):
        if classification:
            errors, _ = misclassified(np.ascontiguousarray(votes[:, j]), n_oob, y)
            losses.append(int(errors))
        else:
            losses.append(squared_error_sum(votes[:, j, 0], n_oob, y, scored))
    return losses, int(scored.sum()), target_sums(y, scored)


def truncation_block(
    table: NodeTable,
    block: BinnedPartition,
    seed: int,
    lam: float,
    cuts: np.ndarray,
    hard: bool,
    classification: bool,
    first_tree: int = 0,
    previous: tuple | None = None,
    last: bool = True,
):
    """One block's votes under every cut from the trees of ``table`` (the forest's trees
    ``first_tree`` on), added to the ``previous`` part's.

    Returns
    -------
    With ``last``: (losses per cut, rows scored, (exact sum of y, of y**2)); else the votes
    (n_rows, n_cuts, n_values) and out-of-bag tree counts (n_rows,) so far, for the next part.
    """
    n_values = table.values.shape[1]
    shape = (len(cuts), n_values)
    if previous is None and last:
        # One part: the rows a chunk at a time, in threads (the kernel releases the GIL), in
        # little memory; the chunks' exact sums add up to the block's whatever the order.
        def chunk(start):
            rows = slice(start, start + ROWS_PER_CHUNK)
            codes = block.codes[rows]
            votes, n_oob = np.zeros((len(codes), *shape)), np.zeros(len(codes))
            first_row = block.first_row + start
            _add_votes(table, codes, first_row, seed, first_tree, lam, cuts, hard, votes, n_oob)
            return _losses(votes, n_oob, block.y[rows], classification)

        with ThreadPoolExecutor(numba.get_num_threads()) as pool:
            chunks = list(pool.map(chunk, range(0, len(block.y), ROWS_PER_CHUNK)))
        losses = [sum(c[0][j] for c in chunks) for j in range(len(cuts))]
        y_sums = tuple(sum(c[2][k] for c in chunks) for k in range(2))
        return losses, sum(c[1] for c in chunks), y_sums
    n = len(block.y)
    if previous is None:
        votes, n_oob = np.zeros((n, *shape)), np.zeros(n)
    else:
        votes, n_oob = previous[0].copy(), previous[1].copy()
    _add_votes(table, block.codes, block.first_row, seed, first_tree, lam, cuts, hard, votes, n_oob)
    if last:
        return _losses(votes, n_oob, block.y, classification)
    return votes, n_oob


def truncation_scores(
    client: Client,
    draws: Draws,
    tables: list[Future],
    first_trees: list[int],
    lam: float,
    cuts: np.ndarray,
    hard: bool,
    classification: bool,
) -> np.ndarray:
    """The out-of-bag score (accuracy, or R²) of the forest truncated at each cut.

    ``tables`` are futures of the node tables of the forest's parts, in tree order, with the
    keys of one family (``NodeTable(trees, family)``); ``first_trees`` their first trees' indices
    in their fits, ``draws`` the blocks and seed of each.

    Returns
    -------
    ndarray of float64, shape (n_cuts,)
        NaN where no row is out of bag.
    """
    results = []
    for blocks in draws.blocks():
        result = None
        for k, (table, first, (block, seed)) in enumerate(zip(tables, first_trees, blocks)):
            result = client.submit(
                truncation_block,
                table,
                block,
                seed,
                lam,
                cuts,
                hard,
                classification,
                first,
                result,
                k == len(tables) - 1,
                pure=False,
            )
        results.append(result)
    summaries = client.gather(results)
    losses = [sum(s[0][j] for s in summaries) for j in range(len(cuts))]
    n_scored = sum(s[1] for s in summaries)
    y_sums = [sum(s[2][k] for s in summaries) for k in range(2)]
    return scores_of(losses, n_scored, y_sums, classification)

"""When a forest has enough trees (``n_estimators="auto"``): the Monte-Carlo part of its error,
estimated from the out-of-bag votes as the trees are added in waves.

A forest of B trees averages B random trees, so at a row x its vote (class probabilities, or the
mean prediction) differs from an infinite forest's by a Monte-Carlo error of variance s^2(x) / B,
s^2(x) the variance of one tree's value at x over the trees' randomness. Its expected squared
error (the Brier score for classification) is therefore that of the infinite forest plus

    excess(B) = mean_x s^2(x) / B

(the error of a forest falls as 1/B towards its limit: Breiman 2001; Lopes 2019, "Estimating
the algorithmic variance of randomized ensembles"). The out-of-bag trees of each training row
estimate s^2 there (rows with two or more of them). The forest stops growing when

    excess(B) <= tol x baseline

where baseline is the error of predicting the mean: the target's variance, or for classes the
Gini impurity sum_k p_k (1 - p_k). More trees could then raise R^2 (or the Brier skill score) by at
most ``tol``. On easy data the trees agree (s^2 small) and few waves suffice; on noisy data they
disagree and more are grown. The scale is the target's, not the forest's own error, which on easy
data is near zero and would ask for ever more trees to shrink a negligible excess.

Every block keeps its running sums on its worker between waves (``moments_block``); the client
adds exact per-block totals (``exact.exact_sum``), so the decision, and with it the number of
trees, is the same on any cluster.
"""

from __future__ import annotations

import numpy as np

from ..forest.exact import exact_sum, from_exact
from ..forest.packing import PackedForest
from ..forest.voting import add_oob_moments
from ..learner.sampling import tree_counts
from .binned import BinnedPartition, TrainingData
from .client import Client, Future
from .reductions import forest_task

# Trees added between two checks: a constant, so that where the forest stops does not depend on
# the cluster. The first wave leaves each row about 12 out-of-bag trees to estimate s^2 with.
WAVE = 32


def moments_block(
    forest: PackedForest,
    block: BinnedPartition,
    seed: int,
    lam: float,
    first_tree: int,
    state: tuple | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A block's out-of-bag sums after adding ``forest``'s trees (trees ``first_tree``, ...).

    Returns
    -------
    (sums, squares, n_oob) : the summed leaf values and squared leaf values of each row's
        out-of-bag trees, (n_rows, n_values), and their number (n_rows,)
    """
    n = len(block.y)
    if state is None:
        sums, squares, n_oob = (
            np.zeros((n, forest.values.shape[1])),
            np.zeros((n, forest.values.shape[1])),
            np.zeros(n),
        )
    else:  # copies: a task never changes its inputs (Dask may hand them to another task)
        sums, squares, n_oob = (a.copy() for a in state)
    counts = np.empty(n)
    for t in range(forest.n_trees):
        tree_counts(seed, first_tree + t, block.first_row, lam, counts)
        add_oob_moments(
            block.codes,
            forest.nodes,
            forest.bitsets,
            forest.roots[t],
            *forest.leaf_values,
            counts,
            sums,
            squares,
            n_oob,
        )
    return sums, squares, n_oob


def moment_totals(state: tuple, block: BinnedPartition, classification: bool) -> tuple:
    """Exact totals over a block's rows with two or more out-of-bag trees: s_i^2 (summed over
    the vote's values), the rows, and per value the target's sum and sum of squares (one-hot
    classes for classification)."""
    sums, squares, n_oob = state
    scored = n_oob >= 2
    n = n_oob[scored, None]
    mean = sums[scored] / n
    if classification:
        target = np.zeros_like(mean)
        target[np.arange(len(mean)), block.y[scored].astype(np.int64)] = 1.0
    else:
        target = block.y[scored, None]
    variance = np.maximum((squares[scored] - n * mean * mean) / (n - 1.0), 0.0).sum(axis=1)
    return (
        exact_sum(variance),
        int(scored.sum()),
        [exact_sum(target[:, k]) for k in range(target.shape[1])],
        [exact_sum(target[:, k] ** 2) for k in range(target.shape[1])],
    )


class ConvergenceMonitor:
    """The running out-of-bag sums of a forest growing in waves, kept on the workers.

    Parameters
    ----------
    client, data :
        The fit's client and binned training blocks.
    seed, lam :
        The forest's random_state and Poisson mean of the counts.
    classification : bool
    tol : float
        The stopping tolerance (module docstring).
    """

    def __init__(
        self,
        client: Client,
        data: TrainingData,
        seed: int,
        lam: float,
        classification: bool,
        tol: float,
    ):
        self.client, self.data = client, data
        self.seed, self.lam = seed, lam
        self.classification, self.tol = classification, tol
        self.states: list[Future | None] = [None] * len(data.parts)
        self.n_trees = 0
        self.history: list[tuple[int, float]] = []  # (trees, excess / baseline) after each wave

    def add(self, forest: PackedForest) -> bool:
        """Add the next trees (``forest`` holds only them); whether the forest has converged."""
        client = self.client
        forest_future = forest_task(client, forest)
        self.states = [
            client.submit(
                moments_block,
                forest_future,
                part,
                self.seed,
                self.lam,
                self.n_trees,
                state,
                pure=False,
            )
            for part, state in zip(self.data.parts, self.states)
        ]
        self.n_trees += forest.n_trees
        totals = client.gather(
            [
                client.submit(moment_totals, state, part, self.classification, pure=False)
                for state, part in zip(self.states, self.data.parts)
            ]
        )
        variance = from_exact(sum(t[0] for t in totals))
        n_scored = sum(t[1] for t in totals)
        if n_scored == 0:
            return False
        baseline = 0.0
        for k in range(len(totals[0][2])):
            total = from_exact(sum(t[2][k] for t in totals))
            total_squares = from_exact(sum(t[3][k] for t in totals))
            baseline += (total_squares - total * total / n_scored) / n_scored
        excess = variance / n_scored / self.n_trees
        share = excess / baseline if baseline > 0.0 else 0.0
        self.history.append((self.n_trees, share))
        return share <= self.tol

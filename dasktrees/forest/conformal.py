"""Prediction intervals calibrated on the out-of-bag rows (split conformal prediction, with each
training row's out-of-bag prediction in place of a held-out set).

Each training row i with an out-of-bag prediction gets a conformity score s_i: how far its target
lies from what the trees that did not draw it predict. The regressors: |y_i - oob_prediction_i|.
The quantile forests (conformalized quantile regression, Romano, Patterson and Candes 2019):
max(lo_i - y_i, y_i - hi_i), how far the target falls outside the band between its lowest and
highest out-of-bag quantile of ``default_quantiles`` (negative inside it). For a coverage 1 - a
and n scores, Q is the k-th smallest score, k = ceil((1 - a)(n + 1)) (infinite when k > n), and
the interval of a row x is every y whose score would be at most Q: the prediction plus or minus
Q, or the band of the forest's quantiles at x widened by Q on each side (narrowed when Q < 0).
Any coverage after one fit: the score does not depend on it (the band fits best a coverage
close to its own, 0.9 for the default quantiles).

Were the scores those of rows the forest never saw, the interval would cover a new row with
probability at least 1 - a (Vovk et al. 2005; Lei et al. 2018); an out-of-bag prediction comes
from about a third of the trees, not from the forest that predicts a new row, so the guarantee is
approximate (Kim, Xu and Barber 2020 bound the out-of-bag jackknife+ at 1 - 2a): measured in
docs/benchmarks.md.

The scores stay where the rows are: each block sends its order statistics at ``SKETCH_SIZE``
ranks (all its scores when it has fewer). For each value v kept, the blocks' kept ranks at or
below v add up to a lower bound of how many scores are at most v, and the k-th smallest score is
at most the smallest v whose bound reaches k. The client keeps at most ``KEPT_SIZE`` of these
(value, bound) pairs, the first to reach each multiple of n / ``KEPT_SIZE``. The threshold is
exact when no block has more than ``SKETCH_SIZE`` scores and n is at most ``KEPT_SIZE``, and
otherwise larger than exact by fewer than n / ``SKETCH_SIZE`` + n / ``KEPT_SIZE`` ranks (the
intervals a little wider, never narrower), whatever the number of blocks.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

# Order statistics a block keeps of its scores.
SKETCH_SIZE = 4096
# (value, count) pairs the forest keeps of all its blocks' (8 bytes each in a model file).
KEPT_SIZE = 65536


def order_sketch(scores: np.ndarray, size: int = SKETCH_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """A block's scores as (values, ranks): its ``ranks[j]``-th smallest score is ``values[j]``.

    Parameters
    ----------
    scores : ndarray of float64
        The block's conformity scores; NaN (rows without an out-of-bag prediction) left out.
    size : int
        Ranks kept when the block has more scores: ``ceil(j n / size)`` for j = 1 .. size,
        the last the largest score.

    Returns
    -------
    values : ndarray of float64, increasing
    ranks : ndarray of int64, increasing, 1-based
    """
    values = np.sort(scores[~np.isnan(scores)])
    n = len(values)
    if n <= size:
        return values, np.arange(1, n + 1, dtype=np.int64)
    ranks = -(-np.arange(1, size + 1, dtype=np.int64) * n // size)
    return values[ranks - 1], ranks


class ConformalScores:
    """The conformity scores of a forest's out-of-bag rows, kept as its blocks' order sketches
    (module docstring).

    Attributes
    ----------
    values : ndarray of float64, shape (n_kept,)
        The kept scores of every block, increasing.
    counts : ndarray of int64, shape (n_kept,)
        For each kept value v, a lower bound (exact for blocks kept whole) of how many scores
        are at most v.
    n_scores : int
        Rows with an out-of-bag prediction.
    """

    def __init__(self, values: np.ndarray, counts: np.ndarray, n_scores: int):
        self.values = values
        self.counts = counts
        self.n_scores = int(n_scores)

    @classmethod
    def from_sketches(cls, sketches: list[tuple[np.ndarray, np.ndarray]], n_scores: int):
        """Put the blocks' ``order_sketch`` results together (blocks without scores too)."""
        values = np.concatenate([v for v, _ in sketches] + [np.empty(0)])
        # A block's kept value lifts its count from its previous kept rank to its own: swept in
        # increasing order, the running sum of the lifts bounds how many scores are at most v.
        lifts = np.concatenate([np.diff(r, prepend=0) for _, r in sketches] + [np.empty(0)])
        order = np.argsort(values, kind="stable")
        values, running = values[order], np.cumsum(lifts[order]).astype(np.int64)
        # Tied values count every entry of their tie.
        counts = running[np.searchsorted(values, values, side="right") - 1]
        if len(values) > KEPT_SIZE:
            # The first pair to reach each multiple of n / KEPT_SIZE, and the last.
            steps = -(-np.arange(1, KEPT_SIZE + 1, dtype=np.int64) * int(counts[-1]) // KEPT_SIZE)
            kept = np.unique(np.searchsorted(counts, steps, side="left"))
            values, counts = values[kept], counts[kept]
        return cls(values, counts, n_scores)

    def threshold(self, coverage: float) -> float:
        """Q for ``coverage``: the ceil(coverage (n + 1))-th smallest score (an upper bound of
        it, module docstring); infinite when that is more than the n scores."""
        # Exact for a coverage written in decimals (0.68 * 101 is 68.68000000000001 in floats).
        k = math.ceil(Fraction(str(coverage)) * (self.n_scores + 1))
        if k > self.n_scores:
            return math.inf
        if k <= 0:
            return -math.inf
        return float(self.values[int(np.searchsorted(self.counts, k, side="left"))])


def check_coverage(coverage) -> float:
    """``coverage`` as a float in (0, 1); ``ValueError`` / ``TypeError`` naming it."""
    if isinstance(coverage, bool) or not isinstance(coverage, (int, float, np.floating)):
        raise TypeError(f"coverage must be a float in (0, 1), got {coverage!r}")
    if not 0.0 < float(coverage) < 1.0:
        raise ValueError(f"coverage must be in (0, 1), got {coverage!r}")
    return float(coverage)

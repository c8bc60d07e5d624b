"""Standard errors of a bagged forest's mean prediction: the bias-corrected infinitesimal
jackknife (Efron 2014; Wager, Hastie and Efron 2014, "Confidence intervals for random forests").

With N_bi tree b's bootstrap count of training row i, t_b(x) its prediction at x, and B trees,

    V_IJ(x)   = sum_i Cov_b(N_bi, t_b(x))^2
    V_IJ-U(x) = V_IJ(x) - (n / B^2) sum_b (t_b(x) - t(x))^2

where the second term removes the Monte-Carlo bias of V_IJ (their equation 7); the standard
error is the square root of V_IJ-U, clipped at zero (a few trees can make it negative).

Written with the trees' centred counts c_bi = N_bi - mean_b N_bi and centred predictions
u_b(x) = t_b(x) - t(x), the first sum is (1 / B^2) u(x)' G u(x) with G = sum_i c_i c_i', a
B x B matrix that depends on the counts only. The counts are recomputed from (random_state,
tree, row id) (``distributed.sampling``), so G needs no data and no stored counts, and each
predicted row then costs O(B^2) instead of O(n B).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..learner.sampling import tree_counts

# Training rows whose counts are drawn at a time (B x this many float64 in memory).
_ROWS_PER_CHUNK = 65536


def centred_count_gram(fits: Sequence[tuple[int, int]], lam: float, n_rows: int) -> np.ndarray:
    """G = sum_i c_i c_i' over the training rows, c_i the trees' centred counts of row i.

    Parameters
    ----------
    fits : sequence of (seed, n_trees)
        The forest's fits, in order: its own (``BaseForest._seed``, its trees), or those of a
        merged forest fitted on the same rows (tree t of a fit drew ``tree_counts(seed, t)``).
    lam : float
        Poisson mean of the counts (1 for the bootstrap).
    n_rows : int

    Returns
    -------
    ndarray of float64, shape (n_trees, n_trees), n_trees the fits' trees
    """
    draws = [(seed, t) for seed, n_trees in fits for t in range(n_trees)]
    n_trees = len(draws)
    gram = np.zeros((n_trees, n_trees))
    counts = np.empty((n_trees, min(_ROWS_PER_CHUNK, n_rows)))
    for first in range(0, n_rows, _ROWS_PER_CHUNK):
        chunk = counts[:, : min(_ROWS_PER_CHUNK, n_rows - first)]
        for k, (seed, t) in enumerate(draws):
            tree_counts(seed, t, first, lam, chunk[k])
        chunk -= chunk.mean(axis=0)
        gram += chunk @ chunk.T
    return gram


def jackknife_mean_std(tree_predictions: np.ndarray, gram: np.ndarray, n_rows: int):
    """The forest's mean prediction and its bias-corrected infinitesimal-jackknife standard
    error (module docstring), for each row.

    Parameters
    ----------
    tree_predictions : ndarray of float64, shape (n_samples, n_trees)
        Each tree's prediction (``PackedForest.tree_predictions``).
    gram : ndarray of float64, shape (n_trees, n_trees)
        ``centred_count_gram`` of the forest.
    n_rows : int
        Training rows.

    Returns
    -------
    ndarray of float64, shape (n_samples, 2): mean and standard error
    """
    n_trees = tree_predictions.shape[1]
    # Summed in tree order, as the forest's vote: the mean is predict's, bit for bit.
    mean = np.cumsum(tree_predictions, axis=1)[:, -1] / n_trees
    centred = tree_predictions - mean[:, None]
    v_ij = np.einsum("ib,bc,ic->i", centred, gram, centred, optimize=True) / n_trees**2
    correction = n_rows / n_trees**2 * np.einsum("ib,ib->i", centred, centred)
    return np.column_stack([mean, np.sqrt(np.maximum(v_ij - correction, 0.0))])

"""Per-tree row counts and feature subspaces, recomputable anywhere from (seed, tree, row id).

A forest never stores which rows a tree saw. Tree t's count of global row i is a pure function
of (random_state, t, i), computed by a counter-based hash, so the task growing the tree and every
partition computing out-of-bag votes get the same counts, however the rows are partitioned.

* ``bootstrap=True``: counts are Poisson(1), the limit of the multinomial bootstrap of n draws
  from n rows (Oza and Russell 2001; Spark MLlib's bagging). A row is out of bag with probability
  e^-1 = 36.8 %, as with the classical bootstrap (Breiman 1996; docs/algorithms.md).
* ``max_samples=m``: counts are Poisson(m / n): about m draws per tree.
* ``bootstrap=False``: every count is 1.
"""

import numpy as np

from ..core.kernel_cache import kernel
from ..core.rng import hash_key, mix64, to_unit

# Streams separate the independent uses of one random_state.
BOOTSTRAP_STREAM = 1
TREE_SEED_STREAM = 2
SUBSPACE_STREAM = 3
PERMUTATION_STREAM = 4


_POISSON_TERMS = 64  # counts are capped here (far beyond any Poisson(lam <= 1) draw)


@kernel(nogil=True)
def poisson_cdf(lam, out):
    """``out[k] = P(X <= k)`` for X ~ Poisson(lam), k < _POISSON_TERMS, summed term by term
    (``p_k = p_{k-1} lam / k``)."""
    p = np.exp(-lam)
    cdf = p
    out[0] = cdf
    for k in range(1, _POISSON_TERMS):
        p *= lam / k
        cdf += p
        out[k] = cdf


@kernel(inline="always")
def poisson_from_uniform(u, cdf):
    """The Poisson count whose CDF (``poisson_cdf``) first exceeds u (inverse transform): the
    number of CDF values <= u, as the CDF rises. The first eight are counted without branches
    (a count above 7 has probability 1e-5 for lam = 1); a search by branches mispredicted about
    once a row."""
    k = 0
    for j in range(8):
        k += u >= cdf[j]
    if k == 8:
        while k < _POISSON_TERMS and u >= cdf[k]:
            k += 1
    return k


@kernel(inline="always")
def _count_stream(seed, lam):
    """The hash key of the forest's row counts and the Poisson(lam) CDF their draws invert:
    what ``tree_counts`` and ``tree_weights_at`` share, so that both draw the same counts."""
    key = mix64(np.uint64(seed) ^ mix64(np.uint64(BOOTSTRAP_STREAM)))
    cdf = np.empty(_POISSON_TERMS)
    poisson_cdf(lam, cdf)
    return key, cdf


@kernel(nogil=True)
def tree_counts(seed, tree, first_row, lam, out):
    """Counts of tree ``tree`` for the rows ``first_row, first_row + 1, ...`` (global ids).

    Parameters
    ----------
    seed : int
        The forest's random_state.
    tree : int
        Tree index.
    first_row : int
        Global id of the first row.
    lam : float
        Poisson mean; 0 means no sampling (every count 1).
    out : ndarray of float64, shape (n_rows,)
        Written: the counts.
    """
    if lam <= 0.0:
        out[:] = 1.0
        return
    key, cdf = _count_stream(seed, lam)
    for i in range(out.shape[0]):
        out[i] = poisson_from_uniform(to_unit(hash_key(key, tree, first_row + i)), cdf)


@kernel(nogil=True)
def tree_weights_at(seed, tree, first_row, lam, base, rows, out):
    """Weights of tree ``tree`` (its ``tree_counts`` times ``base``) of the rows ``rows`` of a
    block only, written at ``out[rows]``; the other entries of ``out`` are left as they are.

    Parameters
    ----------
    seed, tree, first_row, lam
        As ``tree_counts``'s (``first_row``: global id of the block's first row).
    base : ndarray of float64, shape (n_rows,)
        The rows' own weights.
    rows : ndarray of int64
        Positions in the block.
    out : ndarray of float64, shape (n_rows,)
        Written at ``rows``.
    """
    if lam <= 0.0:
        for m in range(rows.shape[0]):
            out[rows[m]] = base[rows[m]]
        return
    key, cdf = _count_stream(seed, lam)
    for m in range(rows.shape[0]):
        i = rows[m]
        count = poisson_from_uniform(to_unit(hash_key(key, tree, first_row + i)), cdf)
        out[i] = base[i] * count


def sampling_rate(bootstrap, max_samples, n_rows):
    """The Poisson mean of the row counts (0 for no sampling), from the forest parameters."""
    if max_samples is None:
        return 1.0 if bootstrap else 0.0
    if isinstance(max_samples, (int, np.integer)) and not isinstance(max_samples, bool):
        if 1 <= max_samples <= n_rows:
            return max_samples / n_rows
    elif isinstance(max_samples, float) and 0.0 < max_samples <= 1.0:
        return max_samples
    raise ValueError(
        f"max_samples must be None, an int in [1, {n_rows}] or a float in (0, 1], "
        f"got {max_samples!r}"
    )


def tree_seed(seed, tree):
    """Seed of tree ``tree``'s own draws (features per node, random thresholds)."""
    return int(hash_key(np.uint64(seed), TREE_SEED_STREAM, tree) >> np.uint64(33))


def tree_subspace(seed, tree, n_features, n_kept):
    """The features tree ``tree`` may use: ``n_kept`` of ``n_features``, drawn once per tree
    (Ho's 1998 random subspace method), as sorted int64 indices."""
    if n_kept >= n_features:
        return np.arange(n_features, dtype=np.int64)
    keys = np.array(
        [hash_key(np.uint64(seed), SUBSPACE_STREAM * 2**32 + tree, f) for f in range(n_features)]
    )
    return np.sort(np.argsort(keys, kind="stable")[:n_kept]).astype(np.int64)

"""Row counts: the Poisson inverse transform against a term-by-term reference."""

import math

import numpy as np
import pytest

from dasktrees.core.rng import hash_key, mix64, to_unit
from dasktrees.learner.sampling import BOOTSTRAP_STREAM, tree_counts, tree_weights_at


def reference_counts(seed, tree, first_row, lam, n):
    """The inverse transform one row at a time, each Poisson term computed as it is needed."""
    key = np.uint64(mix64(np.uint64(seed) ^ np.uint64(mix64(np.uint64(BOOTSTRAP_STREAM)))))
    counts = []
    for i in range(n):
        u = to_unit(np.uint64(hash_key(key, tree, first_row + i)))
        k, p = 0, math.exp(-lam)
        cdf = p
        while u >= cdf and k < 64:
            k += 1
            p *= lam / k
            cdf += p
        counts.append(k)
    return np.array(counts, dtype=float)


@pytest.mark.parametrize("lam", [1.0, 0.3, 0.001, 0.999])
def test_tree_counts_equal_the_term_by_term_inverse_transform(lam):
    out = np.empty(20_000)
    tree_counts(7, 3, 1_000, lam, out)
    np.testing.assert_array_equal(out, reference_counts(7, 3, 1_000, lam, len(out)))
    assert out.mean() == pytest.approx(lam, rel=0.05 if lam > 0.1 else 0.5)
    if lam == 1.0:
        assert out.max() >= 5  # the branch-free part and the search past it both ran


def test_tree_counts_without_sampling_are_ones():
    out = np.zeros(10)
    tree_counts(0, 0, 0, 0.0, out)
    assert (out == 1.0).all()


@pytest.mark.parametrize("lam", [1.0, 0.3, 0.0])
def test_tree_weights_at_some_rows_are_their_counts_times_their_weights(lam):
    """What a distributed round computes for the rows it still tracks: the same counts as the
    whole block's, times the rows' weights, at those rows only."""
    rng = np.random.default_rng(5)
    base = rng.uniform(0.5, 2.0, 5_000)
    rows = np.sort(rng.choice(5_000, 1_200, replace=False)).astype(np.int64)
    counts = np.empty(5_000)
    tree_counts(11, 4, 70_000, lam, counts)
    out = np.full(5_000, -1.0)
    tree_weights_at(11, 4, 70_000, lam, base, rows, out)
    np.testing.assert_array_equal(out[rows], base[rows] * counts[rows])
    others = np.setdiff1d(np.arange(5_000), rows)
    assert (out[others] == -1.0).all()

"""Row counts: the Poisson inverse transform against a term-by-term reference."""

import math

import numpy as np
import pytest

from dasktrees.core.rng import hash_key, mix64, to_unit
from dasktrees.learner.sampling import BOOTSTRAP_STREAM, tree_counts


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

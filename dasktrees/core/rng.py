"""Counter-based random numbers for the kernels: a value is a pure function of (seed, counter).

Randomness in dasktrees is keyed by seeds, tree indices and global row ids, never by a generator
state walked through the data, so that any worker can recompute any draw (docs/design.md,
invariants 1 and 5).
The mixing function is SplitMix64 (Steele, Lea and Flood, 2014), whose finalizer is a good 64-bit
hash; a stream is a counter pushed through it.
"""

import numpy as np

from .kernel_cache import kernel

_GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_TO_UNIT = 1.0 / 9007199254740992.0  # 2**-53


@kernel(inline="always")
def mix64(z):
    """SplitMix64 finalizer: a bijective 64-bit hash of ``z`` (uint64 -> uint64)."""
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@kernel(inline="always")
def hash_key(seed, a, b):
    """Hash of the triple (seed, a, b) of non-negative integers into a uint64."""
    z = mix64(np.uint64(seed) + _GOLDEN_GAMMA)
    z = mix64(z ^ (np.uint64(a) + _GOLDEN_GAMMA))
    return mix64(z ^ (np.uint64(b) + _GOLDEN_GAMMA))


@kernel(inline="always")
def to_unit(z):
    """Map a uint64 to a float in [0, 1) using its 53 high bits."""
    return np.float64(z >> _S11) * _TO_UNIT


@kernel(inline="always")
def child_key(key, side):
    """The random key of a node's child on ``side`` (0 left, 1 right) from the node's ``key``
    (uint64): a node's draws are keyed by its path from the root, not by the order in which the
    nodes are grown, so a tree grown level by level across workers draws what one grown depth
    first draws."""
    return mix64(mix64(key ^ _MIX2) + np.uint64(side) + _GOLDEN_GAMMA)


@kernel()
def new_state(seed):
    """A one-element uint64 stream state for ``next_uint64``; ``seed`` is any non-negative int."""
    state = np.empty(1, dtype=np.uint64)
    state[0] = mix64(np.uint64(seed))
    return state


@kernel(inline="always")
def next_uint64(state):
    """Advance the stream ``state`` (uint64 array of length 1) and return its next value."""
    state[0] += _GOLDEN_GAMMA
    return mix64(state[0])


@kernel(inline="always")
def next_uniform(state):
    """Next float of the stream, uniform in [0, 1)."""
    return to_unit(next_uint64(state))


@kernel(inline="always")
def next_below(state, n):
    """Next integer of the stream, uniform in [0, n) for n >= 1."""
    return min(int(next_uniform(state) * n), n - 1)


@kernel()
def row_uniforms(seed, stream, row_ids, out):
    """Uniform [0, 1) floats keyed by (seed, stream, global row id).

    Parameters
    ----------
    seed, stream : int
        Non-negative keys; ``stream`` separates independent uses of one seed.
    row_ids : ndarray of int64, shape (n_rows,)
        Global row ids: the same row gets the same number in any partition.
    out : ndarray of float64, shape (n_rows,)
        Written in place.
    """
    for i in range(row_ids.shape[0]):
        out[i] = to_unit(hash_key(seed, stream, row_ids[i]))

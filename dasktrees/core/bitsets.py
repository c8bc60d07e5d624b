"""The bit layout of a categorical split's set of codes: the one place it is written.

A categorical split sends a set of bin codes to its left child, kept as ``BITSET_WORDS`` words of
``BITSET_DTYPE`` (``dtypes``): code ``c`` is bit ``c % 32`` of word ``c // 32``. The growth loop,
the partition, the routing kernels of trees and forests, and the model files all read that
layout; the kernels read and write it through these helpers, inlined where they are called.
"""

import numpy as np

from .kernel_cache import kernel


@kernel(inline="always")
def bitset_has(words, code):
    """Whether ``code`` is in the set, as the bit itself (an integer, 1 or 0).

    Parameters
    ----------
    words : ndarray of uint32, shape (BITSET_WORDS,)
        One set: a row of a tree's or a forest's bitset table.
    code : int
        A bin code, below ``N_BIN_CODES``.

    Returns
    -------
    int
        1 if ``code`` is in the set, else 0: callers use it in arithmetic without a branch.
    """
    return (words[code >> 5] >> (code & 31)) & 1


@kernel(inline="always")
def bitset_add(words, code):
    """Add ``code`` to the set ``words`` (in place).

    Parameters
    ----------
    words : ndarray of uint32, shape (BITSET_WORDS,)
        One set: a row of a bitset table, written.
    code : int
        A bin code, below ``N_BIN_CODES``.
    """
    words[code >> 5] |= np.uint32(1) << np.uint32(code & 31)

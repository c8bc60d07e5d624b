"""Exact sums of floats: the totals the blocks of a reduction return, the same in any grouping.

Every float64 is an integer multiple of 2**-1074 (the smallest double) below 2**1024, so a sum
of them is an integer number of 2**-1074, which adds up exactly in any order: blocks can sum their
own rows and the client's totals do not depend on how the rows were cut. The client holds such a
total as a Python integer (``exact_sum``); ``from_exact`` rounds it to the nearest float.

Inside a kernel a sum is held in base 2**32, one int64 slot per digit (``EXACT_DIGITS`` slots:
66 digits, and two for carries); slot d counts units of 2**(32 d - 1074). A float adds less than
2**33 to each of three slots (``add_exact``), so ``carry`` brings the slots back below 2**32
after ``ADDS_BEFORE_CARRY`` additions, long before one could overflow; ``from_digits`` reads the
slots back as Python integers.
"""

import math

import numpy as np

from ..core.kernel_cache import kernel

EXACT_DIGITS = 68
ADDS_BEFORE_CARRY = 1 << 28


@kernel(inline="always")
def add_exact(acc, x):
    """Add float ``x`` to an exact sum.

    Parameters
    ----------
    acc : ndarray of int64, shape (EXACT_DIGITS,)
        The sum's digits; updated. ``carry`` must run before ``ADDS_BEFORE_CARRY`` additions.
    x : float
        A finite float.
    """
    if x == 0.0:
        return
    mantissa, exponent = math.frexp(x)  # x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    integer = np.int64(mantissa * 9007199254740992.0)  # * 2**53: exact
    shift = np.int64(exponent) - 53 + 1074
    if shift < 0:  # subnormal: the integer's low bits are zeros
        integer >>= -shift
        shift = 0
    sign = np.int64(1)
    if integer < 0:
        sign = np.int64(-1)
        integer = -integer
    d = shift >> 5
    r = shift & 31
    low = (integer & 0xFFFFFFFF) << r  # below 2**63
    high = (integer >> 32) << r  # below 2**52
    acc[d] += sign * (low & 0xFFFFFFFF)
    acc[d + 1] += sign * ((low >> 32) + (high & 0xFFFFFFFF))
    acc[d + 2] += sign * (high >> 32)


@kernel(nogil=True)
def carry(acc):
    """Bring every digit but the last of each exact sum into [0, 2**32), the sums unchanged.

    Parameters
    ----------
    acc : ndarray of int64, shape (n_sums, EXACT_DIGITS)
        One exact sum per row; updated.
    """
    for k in range(acc.shape[0]):
        for d in range(acc.shape[1] - 1):
            carried = acc[k, d] >> 32
            acc[k, d] -= carried << 32
            acc[k, d + 1] += carried


def from_digits(acc):
    """The exact sums of the rows of ``acc`` as Python integers, in ``exact_sum``'s units.

    Parameters
    ----------
    acc : ndarray of int64, shape (n_sums, EXACT_DIGITS)

    Returns
    -------
    list of int
    """
    totals = [0] * acc.shape[0]
    for k, d in zip(*np.nonzero(acc)):
        totals[k] += int(acc[k, d]) << (32 * int(d))
    return totals


@kernel(nogil=True)
def _add_all(values, acc):
    """Add every value of ``values`` to the exact sum in ``acc[0]`` (``add_exact``)."""
    adds = 0
    for i in range(values.shape[0]):
        if adds >= ADDS_BEFORE_CARRY:
            carry(acc)
            adds = 0
        add_exact(acc[0], values[i])
        adds += 1


def exact_sum(values):
    """The exact sum of float64 values, as an integer count of 2**-1074 (the module docstring).

    Parameters
    ----------
    values : array-like of float64
        Finite values, any shape.

    Returns
    -------
    int
        ``exact_sum(v) / 2**1074`` (``from_exact``) is the correctly rounded float.
    """
    values = np.ascontiguousarray(values, dtype=np.float64).ravel()
    acc = np.zeros((1, EXACT_DIGITS), dtype=np.int64)
    _add_all(values, acc)
    return from_digits(acc)[0]


def from_exact(total):
    """The float nearest to an ``exact_sum`` total."""
    return total / 2**1074

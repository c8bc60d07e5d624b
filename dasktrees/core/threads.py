"""The threads an estimator's call uses in this process: its ``n_jobs``.

Every pool of threads in dasktrees (the in-process client's tasks, the chunks of rows a
prediction splits, the trees a forest packs or cuts) and numba's parallel loops take their size
from ``numba.get_num_threads()``, which numba keeps per thread. ``limited`` sets it in the calling
thread for the length of one call, and ``InProcessClient`` sets its pool's threads to it, so
that one number bounds the whole call.

The most is numba's own thread count, ``numba.config.NUMBA_NUM_THREADS``: every core, unless the
environment variable ``NUMBA_NUM_THREADS`` says fewer. joblib's process workers (scikit-learn's
``GridSearchCV(n_jobs=k)``, ``cross_validate(n_jobs=k)``) start with it set to their share of the
cores, so a forest fitted in each of k workers uses its share, not every core k times over.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numba

from .params import PARAMETERS

F = TypeVar("F", bound=Callable[..., Any])


def most_threads() -> int:
    """The threads numba may run: its ``NUMBA_NUM_THREADS``, fixed when numba started."""
    return int(numba.config.NUMBA_NUM_THREADS)


def effective_n_jobs(n_jobs: int | None) -> int:
    """The threads ``n_jobs`` stands for, at most ``most_threads()``.

    None and -1: all of them; a negative -k: all but k - 1 of the cores (scikit-learn's
    reading, ``n_cpus + 1 + n_jobs``), at least one; a positive k: k. Zero and anything else
    are refused.
    """
    rule = PARAMETERS["n_jobs"]  # what the experiment file's model.params.n_jobs accepts
    if not rule.accepts(n_jobs):
        # The one integer refused is 0 (a ValueError); anything not an integer, a bool
        # included, is a TypeError.
        is_int = isinstance(n_jobs, numbers.Integral) and not isinstance(n_jobs, bool)
        error = ValueError if is_int else TypeError
        raise error(f"n_jobs must be {rule.expected}, got {n_jobs!r}")
    if n_jobs is None:
        return most_threads()
    n_jobs = int(n_jobs)
    if n_jobs < 0:
        n_jobs = max(1, (os.cpu_count() or 1) + 1 + n_jobs)
    return min(n_jobs, most_threads())


@contextlib.contextmanager
def limited(n_threads: int) -> Iterator[None]:
    """Within the block, the calling thread's pools and numba loops use ``n_threads``."""
    previous = numba.get_num_threads()
    numba.set_num_threads(max(1, min(n_threads, most_threads())))
    try:
        yield
    finally:
        numba.set_num_threads(previous)


def uses_n_jobs(method: F) -> F:
    """An estimator method run with its estimator's ``n_jobs`` threads (``limited``)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with limited(effective_n_jobs(getattr(self, "n_jobs", None))):
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]

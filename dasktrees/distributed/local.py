"""The Dask layer's tasks run in this process, on a thread pool: what ``client=None`` means when
no default client exists, as ``n_jobs`` does in scikit-learn.

The tree, binning and reduction tasks are the same functions a cluster runs; only where they run
changes. ``InProcessClient`` offers the few ``distributed.Client`` calls the Dask layer makes
(``submit``, ``compute``, ``gather``, ``scheduler_info``), so ``train``, ``data`` and
``reductions`` have one code path:

    client.submit(f, *args)   -> a concurrent.futures.Future from the pool; arguments that are
                                 futures are waited for in the task's thread
    client.compute(delayed)   -> the values, computed by Dask's threaded scheduler on the pool
    client.gather(futures)    -> their results

The kernels release the GIL, so two threads grow two trees at once, with no process to start,
no data to pickle and no numba compilation per worker process. Results are bit-identical to a
cluster's: every tree and every out-of-bag sum depends on seeds and row ids, never on where or
in which order a task ran.

Tasks must be submitted after the tasks they take as arguments (as the Dask layer does): the pool
starts tasks in submission order, so a task waiting for an argument always waits for a task that
is running or done, and the pool cannot deadlock.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable, Iterator
from typing import Any, Callable

import dask
import numba

from ..core.threads import most_threads


class InProcessClient:
    """Runs the Dask layer's tasks on ``n_threads`` threads of this process.

    Parameters
    ----------
    n_threads : int, default=None
        Threads of the pool; None: the calling thread's ``numba.get_num_threads()``, what an
        estimator's ``n_jobs`` set it to (``core.threads``). Each of the pool's threads runs
        numba's loops and its own pools with as many threads as the pool has.

    Use it as a context manager: the pool's threads end with the block.
    """

    def __init__(self, n_threads: int | None = None):
        self.n_threads = n_threads or numba.get_num_threads()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.n_threads,
            thread_name_prefix="dasktrees",
            # numba keeps its thread count per thread: a new thread would start with them all.
            initializer=numba.set_num_threads,
            initargs=(min(self.n_threads, most_threads()),),
        )

    def __enter__(self) -> InProcessClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def scheduler_info(self) -> dict:
        """One "worker" per thread, without a memory limit (the tasks share this process)."""
        return {"workers": {f"thread-{i}": {"memory_limit": 0} for i in range(self.n_threads)}}

    def submit(self, fn: Callable, *args: Any, **options: Any) -> concurrent.futures.Future:
        """Run ``fn(*args)`` on the pool; futures among ``args`` are replaced by their results.

        ``options`` (``key``, ``retries``, ``pure``, ``priority``) are a cluster's concerns
        and are ignored: a thread does not fail as a worker does.
        """
        return self._pool.submit(_call, fn, args)

    def compute(self, collections: Any, sync: bool = False) -> Any:
        """Compute a Dask collection, or a list of them, with the pool's threads.

        Returns the values themselves whether ``sync`` or not: they are already in this process,
        and the later tasks take them as arguments as they would take futures.
        """
        if isinstance(collections, (list, tuple)):
            return list(dask.compute(*collections, scheduler=self._pool))
        return dask.compute(collections, scheduler=self._pool)[0]

    def gather(self, futures: Any) -> Any:
        """The results of a future or a list of futures (other values are returned as they are)."""
        if isinstance(futures, (list, tuple)):
            return [_result(f) for f in futures]
        return _result(futures)


def _result(value: Any) -> Any:
    return value.result() if isinstance(value, concurrent.futures.Future) else value


def _call(fn: Callable, args: tuple) -> Any:
    return fn(*(_result(a) for a in args))


def as_completed(futures: Iterable[concurrent.futures.Future]) -> Iterator:
    """The futures of ``InProcessClient.submit`` as they finish."""
    return concurrent.futures.as_completed(list(futures))

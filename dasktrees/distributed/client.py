"""Find where a computation runs: the given client, the default client, else this process.

A client is never stored on a fitted estimator nor pickled into a task: it is looked up for each
call and passed down explicitly.

The rule, as scikit-learn users expect of ``n_jobs``: an estimator with ``client=None`` uses the
default Dask client when there is one (``distributed.Client()`` makes itself the default), and
otherwise runs in this process on a thread pool (``local.InProcessClient``). No cluster is
started behind the user's back; the ``dasktrees run`` command starts a ``LocalCluster`` because
its config asks for one (``cluster.local``, the default).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import warnings
from collections.abc import Iterable, Iterator
from typing import Union

import distributed

from .local import InProcessClient
from .local import as_completed as _in_process_completed

# What the Dask layer runs its tasks on: the two offer the calls it makes (``submit``,
# ``compute``, ``gather``, ``scheduler_info``; ``local.py``).
Client = Union[distributed.Client, InProcessClient]
# What their ``submit`` returns.
Future = Union[distributed.Future, concurrent.futures.Future]


@contextlib.contextmanager
def sending_large_data() -> Iterator[None]:
    """Within the block, distributed's warning about graphs over 10 MB is not passed on: for
    the calls that send data to the cluster once on purpose (local input blocks, the forest of
    the out-of-bag reductions)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
        yield


def find_client(client: distributed.Client | None = None) -> distributed.Client | None:
    """The given client, else the current default client, else None: a cluster's client (an
    estimator's ``client`` parameter is one), never an ``InProcessClient``."""
    if client is not None:
        return client
    try:
        return distributed.default_client()
    except ValueError:
        return None


@contextlib.contextmanager
def client_for(client: distributed.Client | None = None) -> Iterator[Client]:
    """The given client, else the current default client, else an ``InProcessClient`` whose
    threads end with the block."""
    client = find_client(client)
    if client is not None:
        yield client
        return
    with InProcessClient() as local:
        yield local


def is_in_process(client: Client) -> bool:
    """Whether ``client`` runs tasks in this process (no data crosses a process boundary)."""
    return isinstance(client, InProcessClient)


def cluster_workers(client: Client) -> dict:
    """The cluster's workers: address -> what the scheduler knows of each (``nthreads``,
    ``memory_limit``, ...), as ``scheduler_info()["workers"]`` gives them.

    Asked of the scheduler each time: distributed's ``Client.scheduler_info`` returns a cache
    that the client's periodic update refreshes without the workers, and a call that read it
    just after that update found no worker (a forest's shards were then placed on none).
    """
    if isinstance(client, InProcessClient):
        return client.scheduler_info()["workers"]
    scheduler = client.scheduler
    if scheduler is None:  # not connected: as distributed's own call would fail
        raise ValueError("the client is not connected to a scheduler")
    return client.sync(scheduler.identity, n_workers=-1)["workers"]


def as_completed(client: Client, futures: Iterable) -> Iterator:
    """``futures`` of ``client.submit`` in the order they finish."""
    if isinstance(client, InProcessClient):  # is_in_process, which mypy cannot narrow by
        return _in_process_completed(futures)
    # With this client's loop, and ``future.result()``: no default client is needed.
    return distributed.as_completed(futures, loop=client.loop)

"""Find the Dask client a computation runs on; start a LocalCluster when there is none.

A client is never stored on a fitted estimator nor pickled into a task: it is looked up for each
call and passed down explicitly.
"""

import contextlib
import logging
import os
import warnings

import distributed

logger = logging.getLogger("dasktrees")


@contextlib.contextmanager
def sending_large_data():
    """Within the block, distributed's warning about graphs over 10 MB is not passed on: for
    the calls that send data to the cluster once on purpose (local input blocks, the forest of
    the out-of-bag reductions)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
        yield


def find_client(client=None):
    """The given client, else the current default client, else None."""
    if client is not None:
        return client
    try:
        return distributed.default_client()
    except ValueError:
        return None


@contextlib.contextmanager
def client_for(client=None):
    """The given client, else the current default client, else a LocalCluster for this call.

    The LocalCluster (one single-threaded worker process per core) is closed when the block
    ends; its dashboard link is logged at INFO level.
    """
    client = find_client(client)
    if client is not None:
        yield client
        return
    n_workers = max(1, os.cpu_count() or 1)
    with (
        distributed.LocalCluster(
            n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as local,
    ):
        logger.info(
            "dasktrees started a LocalCluster (%d workers) for this call; dashboard: %s",
            n_workers,
            local.dashboard_link,
        )
        yield local

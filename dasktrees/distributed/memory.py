"""The memory a fit plans each worker within, and workers that cannot run at all.

A fit chooses its mode and sizes its tasks against each worker's memory (``train.choose_mode``,
``train.plan_sampled``, ``levels.plan_levels``), on the workers ``planned_workers`` gives: a
worker's ``memory_limit`` when it has one. A worker without one (Dask's ``memory_limit=0``) is
planned within what it could reach when the fit starts: the memory its process holds already
(shared among the workers of one process, as a ``LocalCluster(processes=False)``'s are) and the
memory its host has available (shared equally among the host's workers without a limit), at
most its share of the machine's or container's memory (distributed's ``MEMORY_LIMIT``, which
reads cgroups). Without a client, this process is planned as one worker of as many threads as
its pool, within what it holds and the machine's available memory: its threads share one
process, its own memory counted once.

A worker that Dask's memory monitor has paused (its process above
``distributed.worker.memory.pause`` of its limit) runs no task until its memory falls. When every
worker is paused a fit would wait for ever before its first task: ``check_workers_running`` says
so at once instead.
"""

from __future__ import annotations

import collections
import os
from typing import Any

from .client import Client
from .local import InProcessClient

# Where a planned worker's "memory_limit" came from (``planned_workers``): its own limit, or
# what it can reach (its process's memory and its share of its host's available memory).
FROM_LIMIT = "memory_limit"
FROM_AVAILABLE = "available"


def available_memory() -> int:
    """This machine's memory available to a new allocation now, in bytes: what the operating
    system can give without swapping (psutil's ``available``)."""
    import psutil  # a dependency of distributed

    return int(psutil.virtual_memory().available)


def process_memory() -> int:
    """This process's resident memory now, in bytes."""
    import psutil  # a dependency of distributed

    return int(psutil.Process().memory_info().rss)


def _within_reach() -> tuple[int, int, int, int]:
    """What a worker without a limit could hold: (its process's id, its process's memory, its
    host's available memory, the machine's or container's memory)."""
    from distributed.system import MEMORY_LIMIT

    return os.getpid(), process_memory(), available_memory(), int(MEMORY_LIMIT)


def planned_workers(client: Client, workers: dict[str, dict]) -> dict[str, dict]:
    """The workers to plan a fit on, each with the memory it is planned within as its
    ``"memory_limit"`` and ``"limit_from"``: ``FROM_LIMIT`` for a worker's own limit,
    ``FROM_AVAILABLE`` for what a worker without one can reach (the module docstring).

    Parameters
    ----------
    client : Client
    workers : dict
        ``client.cluster_workers(client)``. Without a client, its threads become one worker of
        as many threads, which holds this process's memory (its ``metrics``: the plans count
        it as the worker's own).
    """
    if isinstance(client, InProcessClient):  # is_in_process, which mypy cannot narrow by
        _, held, available, total = _within_reach()
        process = {
            "memory_limit": min(held + available, total),
            "limit_from": FROM_AVAILABLE,
            "nthreads": max(1, len(workers)),
            "metrics": {"memory": held, "managed_bytes": 0},
        }
        return {"this-process": process}
    unlimited = [address for address, w in workers.items() if not w.get("memory_limit")]
    planned = {address: {**w, "limit_from": FROM_LIMIT} for address, w in workers.items()}
    if not unlimited:
        return planned
    reach = client.run(_within_reach, workers=unlimited)
    on_host = collections.Counter(workers[a].get("host") for a in unlimited)
    in_process = collections.Counter((workers[a].get("host"), reach[a][0]) for a in unlimited)
    for address in unlimited:
        pid, held, available, total = reach[address]
        host = workers[address].get("host")
        share = held // in_process[host, pid] + available // on_host[host]
        limit = min(share, total // on_host[host])
        planned[address].update(
            memory_limit=limit, limit_from=FROM_AVAILABLE, sharing_process=in_process[host, pid]
        )
    return planned


def smallest_limit(workers: dict[str, dict]) -> int:
    """The smallest memory a worker of ``planned_workers`` is planned within, in bytes; 0 when
    there is no worker (an adaptive cluster's before it scales up: nothing to plan against).

    Raises
    ------
    ValueError
        For a worker without a memory to plan within: ``workers`` were not planned.
    """
    limits = [int(w.get("memory_limit") or 0) for w in workers.values()]
    if not all(limits):
        raise ValueError("a worker has no memory to plan within: plan with planned_workers")
    return min(limits, default=0)


def _smallest(workers: dict[str, dict]) -> dict:
    """The worker of ``workers`` planned within the least memory."""
    return min(workers.values(), key=lambda w: w["memory_limit"])


def describe_limit(workers: dict[str, dict]) -> str:
    """``smallest_limit`` for a message: the worker's limit, or what it can reach."""
    smallest = _smallest(workers)
    memory = mib(smallest["memory_limit"])
    if smallest.get("limit_from") == FROM_AVAILABLE:
        return (
            f"the smallest worker has no memory_limit, and what it can reach (its process's "
            f"memory and its share of its host's available memory) is {memory}"
        )
    return f"the workers' memory_limit is {memory}"


def pause_share(workers: dict[str, dict]) -> float:
    """The share of the smallest worker's planned memory a fit may fill before it stalls:
    ``distributed.worker.memory.pause`` of a memory limit (Dask pauses a worker above it); all
    of what a worker without a limit can reach (Dask never pauses one)."""
    import dask

    if _smallest(workers).get("limit_from") == FROM_AVAILABLE:
        return 1.0
    return float(dask.config.get("distributed.worker.memory.pause", 0.8) or 1.0)


def check_workers_running(workers: dict[str, dict]) -> None:
    """Raise ``MemoryError`` when every worker is paused by Dask's memory monitor: the fit's
    first task would never start.

    Parameters
    ----------
    workers : dict
        ``client.cluster_workers``: each worker's ``status``, ``memory_limit`` and ``metrics``.
    """
    if not workers or any(w.get("status", "running") != "paused" for w in workers.values()):
        return
    used = max(w.get("metrics", {}).get("memory", 0) for w in workers.values())
    # (a paused worker has a limit: Dask pauses none without one)
    limit = min((w["memory_limit"] for w in workers.values() if w.get("memory_limit")), default=0)
    raise MemoryError(
        f"every worker is paused by Dask's memory monitor: its process uses more of its "
        f"memory_limit than distributed.worker.memory.pause allows (the largest uses "
        f"{mib(used)}; the smallest limit is {mib(limit)}), so no task of the fit could "
        "start: give the workers more memory (memory_limit) or restart them"
    )


def mib(n_bytes: Any) -> str:
    """Bytes as MiB for a message."""
    return f"{n_bytes / 2**20:,.0f} MiB"

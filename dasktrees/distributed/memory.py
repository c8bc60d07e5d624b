"""The memory a fit plans each worker within, and workers that cannot run at all.

A fit chooses its mode and sizes distributed mode's tasks against each worker's memory
(``train.choose_mode``, ``levels.plan_levels``). A worker's ``memory_limit`` is that memory when
it has one. A worker without one (Dask's ``memory_limit=0``, or this process's threads when there
is no client) is planned within what it could reach when the fit starts: the memory its process
holds already, and the memory its host has available, shared equally among the host's workers
without a limit (as Dask's own ``memory_limit="auto"`` divides a host among its workers). This
process's threads share its memory and the machine's available memory equally.

A worker that Dask's memory monitor has paused (its process above
``distributed.worker.memory.pause`` of its limit) runs no task until its memory falls. When every
worker is paused a fit would wait for ever before its first task: ``check_workers_running`` says
so at once instead.
"""

from __future__ import annotations

import collections
from typing import Any

from .client import Client
from .local import InProcessClient

# Where a planned worker's "memory_limit" came from (``planned_workers``): its own limit, or
# its host's available memory.
FROM_LIMIT = "memory_limit"
FROM_AVAILABLE = "available"


def available_memory() -> int:
    """This machine's memory available to a new allocation now, in bytes: what the operating
    system can give without swapping (psutil's ``available``), within the container's limit
    where one is set (distributed's ``MEMORY_LIMIT`` reads cgroups)."""
    import psutil  # a dependency of distributed
    from distributed.system import MEMORY_LIMIT

    return int(min(psutil.virtual_memory().available, MEMORY_LIMIT))


def process_memory() -> int:
    """This process's resident memory now, in bytes."""
    import psutil  # a dependency of distributed

    return int(psutil.Process().memory_info().rss)


def _within_reach() -> tuple[int, int]:
    """What a worker without a limit could hold: (its process's memory, its host's available
    memory)."""
    return process_memory(), available_memory()


def planned_workers(client: Client, workers: dict[str, dict]) -> dict[str, dict]:
    """``workers`` (``client.cluster_workers``) with the memory each is planned within as its
    ``"memory_limit"``, and ``"limit_from"``: ``FROM_LIMIT`` for a worker's own limit,
    ``FROM_AVAILABLE`` for one without a limit: its process's memory and its share of its host's
    available memory, shared among the host's workers without a limit (this process's threads,
    without a client, share both equally)."""
    unlimited = [address for address, w in workers.items() if not w.get("memory_limit")]
    planned = {address: {**w, "limit_from": FROM_LIMIT} for address, w in workers.items()}
    if not unlimited:
        return planned
    if isinstance(client, InProcessClient):  # is_in_process, which mypy cannot narrow by
        held, available = _within_reach()
        reach = {address: (held // len(unlimited), available) for address in unlimited}
    else:
        reach = client.run(_within_reach, workers=unlimited)
    sharing = collections.Counter(workers[address].get("host") for address in unlimited)
    for address in unlimited:
        held, available = reach[address]
        share = held + available // sharing[workers[address].get("host")]
        planned[address].update(memory_limit=share, limit_from=FROM_AVAILABLE)
    return planned


def smallest_limit(workers: dict[str, dict]) -> int:
    """The smallest memory a worker of ``planned_workers`` is planned within, in bytes (0 for
    no worker)."""
    return min((int(w["memory_limit"]) for w in workers.values()), default=0)


def describe_limit(workers: dict[str, dict]) -> str:
    """``smallest_limit`` for a message: the limit, or the available memory it was taken from."""
    memory = smallest_limit(workers)
    if any(w.get("limit_from") == FROM_AVAILABLE for w in workers.values()):
        return (
            f"the workers have no memory_limit, and what they can reach (their own memory "
            f"and their host's available memory, shared among them) is {mib(memory)} each"
        )
    return f"the workers' memory_limit is {mib(memory)}"


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
    limit = smallest_limit(workers)
    raise MemoryError(
        f"every worker is paused by Dask's memory monitor: its process uses more of its "
        f"memory_limit than distributed.worker.memory.pause allows (the largest uses "
        f"{mib(used)}; the smallest limit is {mib(limit)}), so no task of the fit could "
        "start: give the workers more memory (memory_limit) or restart them"
    )


def mib(n_bytes: Any) -> str:
    """Bytes as MiB for a message."""
    return f"{n_bytes / 2**20:,.0f} MiB"

"""A forest kept on the workers (``tree_storage="workers"``): its shards, the predictions that go
to them, and bringing its trees home.

The trees of each tree task become one shard: a task on the worker that grew them unpacks and
packs them there (``ForestPart.from_shipped``), and the client keeps the shard's future and a
summary of it (each tree's impurity importances and node count, the shard's bytes), never its
trees. A prediction sends each block of rows through the shards in tree order
(``forest.parts``), one task a shard and a block, on the worker holding the shard:

    block b -> encode -> shard 0 -> shard 1 -> ... -> finish    chained ops (votes): one running
                                                                sum, trees added in order
    block b -> encode -> shard 0 ┐
                      -> shard 1 ┼-> finish                     column ops (leaves, the trees'
                      -> ...     ┘                              values): disjoint columns

so the results are those of the same forest on the client, bit for bit, and what moves are
the rows (to each worker that holds shards, once) and the running sums, never the trees.

A shard is the future of a task, and lives as long as the estimator holding it (or a copy of
its futures: ``merge_forests``) is alive and its client connected. A worker that dies takes its
shards' memory with it, not the shards: Dask grows them again from their tasks' graph (the tree
task, the binned blocks, the input), the same trees bit for bit, when they are next needed.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np

from ..forest.parts import ForestPart, pickled
from ..learner.binning import BinMapper
from ..learner.tree import Tree
from .client import as_completed, sending_large_data


@dataclass
class TreeShards:
    """The client's handle on a forest whose trees are on the workers.

    Attributes
    ----------
    parts : list of distributed.Future
        Futures of ``ForestPart``, one a shard, in tree order.
    first_trees : ndarray of int64, shape (n_shards + 1,)
        Shard k holds trees ``first_trees[k]`` to ``first_trees[k + 1] - 1``.
    importances : ndarray of float64, shape (n_trees, n_features)
        Each tree's normalised impurity importances (``Tree.compute_feature_importances``).
    node_count : ndarray of int64, shape (n_trees,)
    max_depth : int
        The deepest tree's depth.
    nbytes : ndarray of int64, shape (n_shards,)
        The bytes each shard's trees take on its worker (``ForestPart.nbytes``).
    """

    parts: list
    first_trees: np.ndarray
    importances: np.ndarray
    node_count: np.ndarray
    max_depth: int
    nbytes: np.ndarray

    @property
    def n_trees(self) -> int:
        return int(self.first_trees[-1])

    @property
    def client(self):
        """The client of the shards' futures (the cluster the forest lives on)."""
        return self.parts[0].client

    @classmethod
    def from_parts(cls, parts: list, summaries: Sequence[dict]) -> TreeShards:
        """The handle of shard futures ``parts`` and their ``ForestPart.summary``."""
        sizes = [s["n_trees"] for s in summaries]
        return cls(
            parts=list(parts),
            first_trees=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
            importances=np.concatenate([s["importances"] for s in summaries]),
            node_count=np.concatenate([s["node_count"] for s in summaries]),
            max_depth=max(s["max_depth"] for s in summaries),
            nbytes=np.array([s["nbytes"] for s in summaries], dtype=np.int64),
        )

    def shard_of(self, tree: int) -> tuple[int, int]:
        """(shard, index within it) of tree ``tree``."""
        if not 0 <= tree < self.n_trees:
            raise IndexError(f"tree index {tree} out of range for {self.n_trees} trees")
        shard = int(np.searchsorted(self.first_trees, tree, side="right")) - 1
        return shard, tree - int(self.first_trees[shard])


def keep_on_workers(
    client,
    shipped: list,
    first_trees: list[int],
    bin_mapper: BinMapper,
    n_trees: int,
    retries: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> TreeShards:
    """Make a shard of each tree task's result, where it lies, and wait for them.

    Parameters
    ----------
    client : distributed.Client
    shipped : list of Future
        The tree tasks' results (``train._shipped`` arrays), in tree order; released once
        their shards are made.
    first_trees : list of int
        The forest's index of each task's first tree.
    bin_mapper : BinMapper
    n_trees : int
        The trees of all the tasks.
    retries : int
    progress : callable, optional
        Called with (trees done, ``n_trees``) as shards are made.
    """
    token = uuid.uuid4().hex[:8]
    parts = [
        client.submit(
            ForestPart.from_shipped,
            result,
            first,
            bin_mapper,
            key=f"dasktrees-shard-{first}-{token}",
            retries=retries,
            pure=False,
        )
        for result, first in zip(shipped, first_trees)
    ]
    summaries = [client.submit(ForestPart.summary, part, pure=False) for part in parts]
    if progress is not None:
        n_done = 0
        for future in as_completed(client, summaries):
            n_done += future.result()["n_trees"]
            progress(n_done, n_trees)
    return TreeShards.from_parts(parts, client.gather(summaries))


def scatter_trees(
    client, trees: list[Tree], first_tree: int, batch_size: int, bin_mapper: BinMapper
) -> TreeShards:
    """Shards of trees that are on the client (distributed mode joins them there), the
    forest's trees ``first_tree`` on: sent in batches of ``batch_size`` to the workers, then
    made as ``keep_on_workers`` makes them. Scattered data has no task to recompute it from:
    such shards do not survive their worker."""
    starts = range(0, len(trees), batch_size)
    shipped = [client.scatter(pickled(trees[i : i + batch_size]), hash=False) for i in starts]
    first_trees = [first_tree + i for i in starts]
    return keep_on_workers(client, shipped, first_trees, bin_mapper, len(trees))


def join_shards(handles: Sequence[TreeShards]) -> TreeShards:
    """One forest of the shards of ``handles``, in order (a warm start's, a merge's): the
    shards stay where they are."""
    offsets = np.cumsum([0] + [h.n_trees for h in handles])
    first = np.concatenate([[0]] + [h.first_trees[1:] + o for h, o in zip(handles, offsets)])
    return TreeShards(
        parts=[part for h in handles for part in h.parts],
        first_trees=first.astype(np.int64),
        importances=np.concatenate([h.importances for h in handles]),
        node_count=np.concatenate([h.node_count for h in handles]),
        max_depth=max(h.max_depth for h in handles),
        nbytes=np.concatenate([h.nbytes for h in handles]),
    )


# ``tree_storage="auto"`` keeps a forest on the workers when its trees take more than this share
# of the client machine's memory.
AUTO_CLIENT_SHARE = 0.1


def auto_client_bytes() -> float:
    """The most bytes of trees ``tree_storage="auto"`` brings to the client: ``AUTO_CLIENT_SHARE``
    of this machine's physical memory."""
    import psutil  # a dependency of distributed

    return AUTO_CLIENT_SHARE * psutil.virtual_memory().total


def map_parts(parts: list, function: Callable, *args) -> list:
    """``function(part, *args)`` of each part, a task on the worker that holds it (futures)."""
    return [part.client.submit(function, part, *args, pure=False) for part in parts]


def gather_trees(shards: TreeShards) -> list[Tree]:
    """Every tree of the shards, on the client, in order (each shard shipped as one array)."""
    client = shards.client
    blobs = [client.submit(ForestPart.shipped, part, pure=False) for part in shards.parts]
    trees: list[Tree] = []
    for blob in client.gather(blobs):
        trees.extend(pickle.loads(blob))
    return trees


def gather_tree(shards: TreeShards, tree: int) -> Tree:
    """One tree of the shards, on the client."""
    shard, index = shards.shard_of(tree)
    return shards.client.submit(_tree_of, shards.parts[shard], index, pure=False).result()


def _tree_of(part: ForestPart, index: int) -> Tree:
    return part.trees[index]  # type: ignore[index]


# ---- predictions ---------------------------------------------------------------------------------


def _encode(model, block):
    return model[0].encode(block)


def _add(model, part, encoded, acc):
    # Inside Dask tasks the kernels run without threads (see ``PackedForest.vote``).
    return model[1].add(part, encoded, acc, False)


def _finish(model, *results):
    op = model[1]
    return op.finish(results[0] if op.chained else list(results))


def rows_through_shards(
    parts: list,
    blocks: list,
    lengths: Sequence[float],
    model,
    chained: bool,
    n_columns: int,
    dtype,
    encoded: bool,
) -> da.Array:
    """A row op (``forest.parts``) over row blocks, through the shards: a dask array.

    Parameters
    ----------
    parts : list of Future
        The op's parts, on the workers, in tree order: the shards (``TreeShards.parts``), or
        what ``map_parts`` made of them.
    blocks : list of Delayed or Future
        The rows, block by block: raw (a dask collection's partitions) or ``encoded``.
    lengths : sequence of float
        Rows a block (NaN where unknown).
    model : Delayed or Future
        (bin mapper, row op), in the graph or on every worker.
    chained : bool
        The op's ``chained``.
    n_columns, dtype :
        Of the op's result.
    encoded : bool
        Whether ``blocks`` are encoded already (``BinMapper.encode``).
    """
    token = uuid.uuid4().hex[:8]
    columns = []
    for b, (block, n) in enumerate(zip(blocks, lengths)):
        rows = (
            block
            if encoded
            else dask.delayed(_encode)(model, block, dask_key_name=f"dasktrees-encode-{b}-{token}")
        )
        results: list = []
        for k, part in enumerate(parts):
            acc = results[-1] if chained and results else None
            result = dask.delayed(_add)(
                model, part, rows, acc, dask_key_name=f"dasktrees-shard-rows-{b}-{k}-{token}"
            )
            results = [result] if chained else results + [result]
        out = dask.delayed(_finish)(model, *results, dask_key_name=f"dasktrees-rows-{b}-{token}")
        columns.append(da.from_delayed(out, shape=(n, n_columns), dtype=dtype))
    return da.concatenate(columns) if len(columns) > 1 else columns[0]


def local_rows_through_shards(
    parts: list, encoded: np.ndarray, model, chained: bool, n_columns: int, dtype
) -> np.ndarray:
    """``rows_through_shards`` for rows in this process, already encoded: sent to the
    workers in blocks (enough for every worker thread to take part) with the graph, the result
    gathered."""
    client = parts[0].client
    n_threads = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
    n_blocks = max(1, min(2 * n_threads, -(-len(encoded) // 1024)))
    step = max(1, -(-len(encoded) // n_blocks))
    pieces = [encoded[i : i + step] for i in range(0, len(encoded), step)] or [encoded]
    blocks = [dask.delayed(piece, pure=False) for piece in pieces]
    out = rows_through_shards(
        parts, blocks, [len(p) for p in pieces], model, chained, n_columns, dtype, encoded=True
    )
    with sending_large_data():
        return client.compute(out, sync=True)

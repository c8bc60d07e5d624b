"""A forest kept on the workers (``tree_storage="workers"``): its shards, the predictions that go
to them, and bringing its trees home.

The trees of each tree task (or of a run of sampled mode's smaller tasks) become one shard: a
task unpacks and packs them (``ForestPart.from_shipped``) on the worker ``placements`` gives it,
consecutive shards on the same worker
(worker A the first trees, worker B the next, ...), and the client keeps the shard's future and
a summary of it (each tree's impurity importances and node count, the shard's bytes), never its
trees. A prediction sends each block of rows through the shards in tree order
(``forest.parts``), one task a block and a run of shards on one worker:

    block b -> encode -> run A -> run B -> finish    chained ops (votes, SHAP): one running sum,
                                                     trees added in order
    block b -> encode -> run A -.
                      -> run B -+-> finish           column ops (leaves, the trees' values):
                                                     disjoint columns

so the results are those of the same forest on the client, bit for bit, and what moves are
the rows (to each worker, once) and the running sums, never the trees; the workers work on
successive blocks side by side, as a pipeline.

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
from typing import TYPE_CHECKING

import dask
import numpy as np

from ..forest.parts import ForestPart, pickled, truncated
from ..learner.binning import BinMapper
from ..learner.tree import Tree
from .client import as_completed, cluster_workers, sending_large_data

if TYPE_CHECKING:  # only this process builds dask arrays: workers import no dask.array
    import dask.array as da


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
        The bytes each shard's trees (and a quantile forest's leaf targets) take on its worker
        (``ForestPart.nbytes``).
    workers : list of str
        The worker each shard was asked to run on (``placements``): a preference, which Dask
        may override (a busy worker's task stolen, a lost worker's shard grown elsewhere).
    """

    parts: list
    first_trees: np.ndarray
    importances: np.ndarray
    node_count: np.ndarray
    max_depth: int
    nbytes: np.ndarray
    workers: list[str]

    @property
    def n_trees(self) -> int:
        return int(self.first_trees[-1])

    @property
    def client(self):
        """The client of the shards' futures (the cluster the forest lives on)."""
        return self.parts[0].client

    @property
    def runs(self) -> list[slice]:
        """The runs of consecutive shards on one worker (``runs_of``)."""
        return runs_of(self.workers)

    @classmethod
    def from_parts(cls, parts: list, summaries: Sequence[dict], workers: list[str]) -> TreeShards:
        """The handle of shard futures ``parts``, their ``ForestPart.summary`` and workers."""
        sizes = [s["n_trees"] for s in summaries]
        return cls(
            parts=list(parts),
            first_trees=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
            importances=np.concatenate([s["importances"] for s in summaries]),
            node_count=np.concatenate([s["node_count"] for s in summaries]),
            max_depth=max(s["max_depth"] for s in summaries),
            nbytes=np.array([s["nbytes"] for s in summaries], dtype=np.int64),
            workers=list(workers),
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
    tasks_per_shard: int = 1,
) -> TreeShards:
    """Make a shard of each tree task's result, or of each run of ``tasks_per_shard``
    consecutive tasks' results, and wait for them: on the worker ``placements`` gives it, where
    the tasks' results are moved if they grew elsewhere.

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
    tasks_per_shard : int, default=1
        Consecutive tasks whose trees make one shard (sampled mode grows a tree a task).
    """
    token = uuid.uuid4().hex[:8]
    if tasks_per_shard > 1:
        runs = range(0, len(shipped), tasks_per_shard)
        shipped = [shipped[i : i + tasks_per_shard] for i in runs]
        first_trees = first_trees[::tasks_per_shard]
    sizes = np.diff([*first_trees, first_trees[0] + n_trees]).tolist()
    workers = placements(client, sizes)
    parts = [
        client.submit(
            ForestPart.from_shipped,
            result,
            first,
            bin_mapper,
            key=f"dasktrees-shard-{first}-{token}",
            retries=retries,
            pure=False,
            workers=[worker],
            allow_other_workers=True,  # a lost worker's shards are grown again elsewhere
        )
        for result, first, worker in zip(shipped, first_trees, workers)
    ]
    summaries = [client.submit(ForestPart.summary, part, pure=False) for part in parts]
    if progress is not None:
        n_done = 0
        for future in as_completed(client, summaries):
            n_done += future.result()["n_trees"]
            progress(n_done, n_trees)
    return TreeShards.from_parts(parts, client.gather(summaries), workers)


def placements(client, sizes: Sequence[int]) -> list[str]:
    """The worker for each shard of ``sizes`` trees, in tree order: consecutive shards on the
    same worker, each worker a share of the trees in proportion to its threads.

    A chained op visits the shards in tree order: shards placed as they grew (any worker, in
    any order) made a block's sums hop between the workers at almost every shard, and the
    blocks wait in line for the first shards' worker; in consecutive runs a block visits each
    worker once, and the workers work on successive blocks side by side, as a pipeline.
    """
    workers = cluster_workers(client)
    names = sorted(workers)
    threads = np.array([workers[w].get("nthreads", 1) for w in names], dtype=np.float64)
    bounds = np.cumsum(threads) / threads.sum()  # each worker's end, as a share of the trees
    total, done, out = float(sum(sizes)), 0, []
    for n in sizes:
        middle = (done + n / 2) / total
        out.append(names[min(len(names) - 1, int(np.searchsorted(bounds, middle)))])
        done += n
    return out


class ShardsAsJoined:
    """Shards of trees joined one at a time on the client (distributed mode joins them there):
    ``add(tree_id, tree)`` as each is joined; as soon as every tree of the next batch of
    ``batch_size`` is in, the batch is sent to the worker of its run and dropped here, so the
    client holds the trees still waiting for an earlier one of their batch, not the forest;
    ``shards()`` then makes them (``keep_on_workers``). Scattered data has no task to recompute
    it from: such shards do not survive their worker.

    Parameters
    ----------
    client : distributed.Client
    tree_ids : list of int
        The forest's indices of the trees, consecutive.
    batch_size : int
    bin_mapper : BinMapper
    """

    def __init__(self, client, tree_ids: list[int], batch_size: int, bin_mapper: BinMapper):
        self.client, self.tree_ids, self.bin_mapper = client, tree_ids, bin_mapper
        starts = range(0, len(tree_ids), batch_size)
        self.batches = [tree_ids[i : i + batch_size] for i in starts]
        self.workers = placements(client, [len(b) for b in self.batches])
        self.joined: dict[int, Tree] = {}
        self.shipped: list = []  # futures of the batches sent, in order

    def add(self, tree_id: int, tree: Tree) -> None:
        self.joined[tree_id] = tree
        while len(self.shipped) < len(self.batches):
            batch = self.batches[len(self.shipped)]
            if not all(t in self.joined for t in batch):
                return
            trees = [self.joined.pop(t) for t in batch]
            worker = self.workers[len(self.shipped)]
            self.shipped.append(self.client.scatter(pickled(trees), hash=False, workers=[worker]))

    def shards(self) -> TreeShards:
        first_trees = [batch[0] for batch in self.batches]
        return keep_on_workers(
            self.client, self.shipped, first_trees, self.bin_mapper, len(self.tree_ids)
        )


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
        workers=[w for h in handles for w in h.workers],
    )


# ``tree_storage="auto"`` keeps a forest on the workers when its trees take more than this share
# of the client machine's memory.
AUTO_CLIENT_SHARE = 0.1


def auto_client_bytes() -> float:
    """The most bytes of trees ``tree_storage="auto"`` brings to the client: ``AUTO_CLIENT_SHARE``
    of this machine's physical memory."""
    import psutil  # a dependency of distributed

    return AUTO_CLIENT_SHARE * psutil.virtual_memory().total


def truncate_shards(
    shards: TreeShards, family: str, cut: float, criterion: int, bin_mapper: BinMapper
) -> TreeShards:
    """The shards with their trees cut at ``cut`` of ``family`` (``parts.truncated``), each
    made from its shard on the shard's worker; the uncut shards are released with ``shards``."""
    client = shards.client
    parts = [
        client.submit(
            truncated,
            part,
            family,
            cut,
            criterion,
            bin_mapper,
            pure=False,
            workers=[worker],
            allow_other_workers=True,
        )
        for part, worker in zip(shards.parts, shards.workers)
    ]
    summaries = client.gather([client.submit(ForestPart.summary, p, pure=False) for p in parts])
    return TreeShards.from_parts(parts, summaries, shards.workers)


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


def _add_run(model, rows, acc, *parts):
    """A run of consecutive parts on one worker, in one task: a chained op's sums continued
    part after part, or a column op's columns of each."""
    op = model[1]
    # Inside Dask tasks the kernels run without threads (see ``PackedForest.vote``).
    if op.chained:
        # Chained ops add in place: the earlier run's sums are another task's result, copied
        # once for the whole run.
        acc = None if acc is None else acc.copy()
        for part in parts:
            acc = op.add(part, rows, acc, False)
        return acc
    return [op.add(part, rows, None, False) for part in parts]


def _finish(model, *runs):
    op = model[1]
    if op.chained:
        return op.finish(runs[-1])
    return op.finish([columns for run in runs for columns in run])


def runs_of(workers: Sequence[str]) -> list[slice]:
    """The runs of consecutive shards placed on the same worker (``placements``)."""
    starts = [k for k in range(len(workers)) if k == 0 or workers[k] != workers[k - 1]]
    return [slice(a, b) for a, b in zip(starts, [*starts[1:], len(workers)])]


def _through_shards(call, parts, runs, rows, model, chained, key):
    """One block's tasks (``call(function, *args, key=...)``): a task a run of shards, in tree
    order, then the finish."""
    results: list = []
    for r, run in enumerate(runs):
        acc = results[-1] if chained and results else None
        result = call(_add_run, model, rows, acc, *parts[run], key=f"{key}-{r}")
        results = [result] if chained else [*results, result]
    return call(_finish, model, *results, key=key)


def rows_through_shards(
    parts: list,
    runs: list[slice],
    blocks: list,
    lengths: Sequence[float],
    model,
    chained: bool,
    n_columns: int,
    dtype,
) -> da.Array:
    """A row op (``forest.parts``) over a dask collection's blocks, through the shards: a dask
    array, one graph of tasks a block (``_through_shards``).

    Parameters
    ----------
    parts : list of Future
        The op's parts, on the workers, in tree order: the shards (``TreeShards.parts``), or
        what ``map_parts`` made of them.
    runs : list of slice
        The runs of ``parts`` on one worker (``runs_of``): one task each.
    blocks : list of Delayed
        The collection's blocks of rows.
    lengths : sequence of float
        Rows a block (NaN where unknown).
    model : Delayed or Future
        (bin mapper, row op), in the graph or on every worker.
    chained : bool
        The op's ``chained``.
    n_columns, dtype :
        Of the op's result.
    """
    token = uuid.uuid4().hex[:8]

    def call(function, *args, key):
        return dask.delayed(function)(*args, dask_key_name=key)

    import dask.array as da

    columns = []
    for b, (block, n) in enumerate(zip(blocks, lengths)):
        rows = call(_encode, model, block, key=f"dasktrees-encode-{b}-{token}")
        out = _through_shards(
            call, parts, runs, rows, model, chained, f"dasktrees-rows-{b}-{token}"
        )
        columns.append(da.from_delayed(out, shape=(n, n_columns), dtype=dtype))
    return da.concatenate(columns) if len(columns) > 1 else columns[0]


# Encoded rows up to this many bytes a block go with their tasks; more are sent ahead, once.
_EMBEDDED_ROWS_BYTES = 1 << 20


def local_rows_through_shards(
    parts: list, runs: list[slice], encoded: np.ndarray, model, chained: bool
) -> np.ndarray:
    """A row op over rows in this process, already encoded: cut in blocks (enough for every
    worker thread to take part, of at least 1,024 rows), each block's tasks submitted as
    ``rows_through_shards`` builds them for a dask collection, the results gathered."""
    client = parts[0].client
    n_threads = sum(w.get("nthreads", 1) for w in cluster_workers(client).values())
    n_blocks = max(1, min(2 * n_threads, -(-len(encoded) // 1024)))
    step = max(1, -(-len(encoded) // n_blocks))
    pieces = [encoded[i : i + step] for i in range(0, len(encoded), step)] or [encoded]
    if pieces[0].nbytes > _EMBEDDED_ROWS_BYTES:
        with sending_large_data():
            pieces = client.scatter(pieces, hash=False)
    token = uuid.uuid4().hex[:8]

    def call(function, *args, key):
        return client.submit(function, *args, key=key, pure=False)

    with sending_large_data():
        futures = [
            _through_shards(call, parts, runs, rows, model, chained, f"dasktrees-rows-{b}-{token}")
            for b, rows in enumerate(pieces)
        ]
        return np.concatenate(client.gather(futures))

"""The task graph of a forest fit: one task per batch of trees.

Replicated mode (the default while the binned data fits a worker): a tree task receives every
binned block (Dask moves each block to a worker once and keeps it there), stacks them in row
order and grows its trees on the whole table, each tree weighting row i by its count c_t(i):

    block 0 ─┐
    block 1 ─┼─> [ tree task: trees 0..3 ]      [ tree task: trees 4..7 ]   ...
    block 2 ─┘        (every block)                 (every block)

Sampled mode (``max_samples`` well below n, or data larger than a worker): each block extracts
the rows a batch of trees draws (small tasks where the data lives), and the tree task grows on
their concatenation, so a task's memory is bounded by the sample, not by the data. A task holds
its trees' rows until it ends: its batch is as many trees as the workers' memory fits, up to
the usual (``plan_sampled``, which refuses a fit that cannot run at once, as
``levels.plan_levels`` does distributed mode's).

Both modes compute the same counts from (seed, tree, global row id) and stack rows in the same
order, so they grow the same trees.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import pickle
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ..core.params import GrowthParams
from ..forest.packing import PackedForest
from ..learner import wire
from ..learner.binning import BinArrays
from ..learner.grower import Workspace, grow_tree_state
from ..learner.sampling import tree_counts, tree_seed, tree_subspace
from ..learner.tree import Tree
from . import levels, shards
from .binned import BinnedPartition, TrainingData
from .client import Client, as_completed, cluster_workers, is_in_process
from .memory import describe_limit, mib, pause_share, planned_workers, smallest_limit
from .shards import TreeShards


@dataclass(frozen=True)
class ForestSpec:
    """Everything a tree task needs besides the data (small: sent with every task)."""

    params: GrowthParams
    bins: BinArrays
    n_classes: int  # values a node holds: classes, or target columns (regression)
    seed: int
    lam: float  # Poisson mean of the row counts; 0: every count is 1
    n_features_tree: int  # features per tree (random subspace); n_features: all
    balanced_subsample: bool
    # The classes of each of k class columns (multi-output classification); empty otherwise.
    column_classes: tuple[int, ...] = ()

    @property
    def n_outputs(self) -> int:
        """Class columns of a classification: k of a multi-output one, else 1."""
        return max(1, len(self.column_classes))


logger = logging.getLogger(__name__)

# Called with (trees grown, trees to grow) each time a tree task's trees reach the client.
_progress: contextvars.ContextVar[Callable[[int, int], None] | None] = contextvars.ContextVar(
    "dasktrees_progress", default=None
)


@contextlib.contextmanager
def report_progress(callback: Callable[[int, int], None]) -> Iterator[None]:
    """Within the block, forest fits call ``callback(n_done, n_total)`` as tree tasks finish
    (what the ``dasktrees`` command draws its progress bar with)."""
    token = _progress.set(callback)
    try:
        yield
    finally:
        _progress.reset(token)


def current_progress() -> Callable[[int, int], None] | None:
    """The callback ``report_progress`` set around this call, or None."""
    return _progress.get()


@contextlib.contextmanager
def progress_of_wave(n_before: int, n_max: int) -> Iterator[None]:
    """Within the block, one wave of ``n_estimators="auto"`` reports its trees after the
    ``n_before`` of the earlier waves, out of ``n_max`` (the most the growth may reach), so
    that the waves fill one bar; ``finish_progress`` ends it where the growth stopped."""
    outer = _progress.get()
    if outer is None:
        yield
        return
    with report_progress(lambda done, total: outer(n_before + done, n_max)):
        yield


def finish_progress(n_done: int, n_max: int) -> None:
    """End the bar of a growth in waves at ``n_done`` trees (it ended by itself at ``n_max``)."""
    progress = _progress.get()
    if progress is not None and n_done < n_max:
        progress(n_done, n_done)


def _stack(arrays):
    return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]


def _grow_one(spec, tree, codes, y, weights, counts, workspace):
    """Grow tree ``tree`` on rows weighted ``weights`` (base weight x count), in the task's
    ``workspace`` (``grower.Workspace``: one for all the trees of a task); returns its compact
    state (``grower.grow_tree_state``)."""
    if spec.balanced_subsample:
        if spec.column_classes:  # k class columns: the product of their balances
            for o, n_classes in enumerate(spec.column_classes):
                weights = weights * _in_bag_balance(y[:, o], counts, n_classes)
        else:
            weights = weights * _in_bag_balance(y, counts, spec.n_classes)
    candidates = tree_subspace(spec.seed, tree, codes.shape[1], spec.n_features_tree)
    return grow_tree_state(
        codes,
        y,
        weights,
        spec.bins,
        spec.params,
        spec.n_classes,
        tree_seed(spec.seed, tree),
        candidates,
        workspace,
    )


def _in_bag_balance(y, counts, n_classes):
    """Each row's weight under ``class_weight="balanced_subsample"``: scikit-learn's balance
    ``n / (K n_k)`` of the in-bag rows (drawn ``counts`` times) of its class in ``y``."""
    classes = y.astype(np.int64)
    in_bag = np.bincount(classes, weights=counts, minlength=n_classes)
    balance = counts.sum() / (n_classes * np.maximum(in_bag, 1.0))
    return balance[classes]


def _workspace(spec, n_rows, n_features):
    """Growth buffers for trees on up to ``n_rows`` rows, of ``spec.n_classes`` values a node
    (classes, or target columns)."""
    return Workspace.for_rows(n_rows, spec.n_classes, n_features, spec.params, spec.n_outputs)


def _shipped(states: list[dict], ship: bool) -> np.ndarray | list[dict]:
    """A task's trees (``grower.grow_tree_state``) as one pickle in a uint8 array, which
    ``grow_forest`` loads on the client; with ``ship=False`` (tasks run in the client's own
    process) the list itself.

    Distributed serialises a list of objects by walking it, with a header and a frame for every
    array (a tree has fourteen); one blob per task moves at copy speed instead, several times
    faster (measured in docs/benchmarks.md). An array, not ``bytes``: the client receives a
    frame into a buffer of its own, which an array then views, where ``bytes`` are copied out of
    it (tens of megabytes of fresh memory a task).
    """
    if not ship:
        return states
    return np.frombuffer(pickle.dumps(states, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)


def grow_batch(
    spec: ForestSpec, ship: bool, trees: Sequence[int], *blocks: BinnedPartition
) -> np.ndarray | list[dict]:
    """Replicated mode: grow ``trees`` (tree indices) on the stacked blocks; returns them
    pickled (see ``_shipped``)."""
    codes = _stack([b.codes for b in blocks])
    y = _stack([b.y for b in blocks])
    w = _stack([b.w for b in blocks])
    counts, weights = np.empty(len(y)), np.empty(len(y))  # reused, as the workspace is
    workspace = _workspace(spec, len(y), codes.shape[1])
    grown = []
    for t in trees:
        tree_counts(spec.seed, t, blocks[0].first_row, spec.lam, counts)
        np.multiply(w, counts, out=weights)
        grown.append(_grow_one(spec, t, codes, y, weights, counts, workspace))
    return _shipped(grown, ship)


def extract_in_bag(spec: ForestSpec, trees: Sequence[int], block: BinnedPartition) -> list:
    """Sampled mode, on the worker holding ``block``: the rows each tree draws from it.

    Returns
    -------
    list of (codes, y, weights, counts), one per tree, of the rows with positive weight
    """
    counts = np.empty(len(block.y))
    drawn = []
    for t in trees:
        tree_counts(spec.seed, t, block.first_row, spec.lam, counts)
        weights = block.w * counts
        rows = np.flatnonzero(weights > 0)
        drawn.append((block.codes[rows], block.y[rows], weights[rows], counts[rows]))
    return drawn


def grow_sampled(
    spec: ForestSpec, ship: bool, trees: Sequence[int], *extracts: list
) -> np.ndarray | list[dict]:
    """Sampled mode: grow each tree on the rows its blocks extracted, stacked in row order
    (the same rows, order and weights as replicated mode, so the same tree); returns them
    pickled (see ``_shipped``)."""
    most_rows = max(sum(len(extract[k][1]) for extract in extracts) for k in range(len(trees)))
    n_features = extracts[0][0][0].shape[1]  # of the first block's codes for the first tree
    workspace = _workspace(spec, most_rows, n_features)
    grown = []
    for k, t in enumerate(trees):
        parts = [extract[k] for extract in extracts]
        codes, y, weights, counts = (_stack([p[i] for p in parts]) for i in range(4))
        grown.append(_grow_one(spec, t, codes, y, weights, counts, workspace))
    return _shipped(grown, ship)


def default_trees_per_task(n_trees: int, n_workers: int) -> int:
    """About four tasks per worker: enough to balance load and survive a lost worker cheaply,
    few enough that stacking the blocks (once per task) stays a small part of the work."""
    return max(1, int(np.ceil(n_trees / (4 * max(1, n_workers)))))


def tree_batches(
    tree_ids: list[int], trees_per_task: int | None, n_workers: int
) -> list[list[int]]:
    """The trees of each task, in the order to run them.

    ``trees_per_task`` given: batches of that size. Otherwise batches of
    ``default_trees_per_task`` while many trees remain, then smaller ones, down to a quarter of
    that (each about the remaining trees over twice the workers): workers that take tasks as
    they finish then also finish at about the same time, where equal batches left one worker
    idle for up to a batch at the end.
    """
    if trees_per_task is not None:
        return [tree_ids[i : i + trees_per_task] for i in range(0, len(tree_ids), trees_per_task)]
    largest = default_trees_per_task(len(tree_ids), n_workers)
    smallest = max(1, -(-largest // 4))
    batches, start = [], 0
    while start < len(tree_ids):
        remaining = len(tree_ids) - start
        size = min(largest, max(smallest, -(-remaining // (2 * max(1, n_workers)))))
        batches.append(tree_ids[start : start + size])
        start += size
    return batches


def choose_mode(mode: str, data: TrainingData, spec: ForestSpec, workers: dict) -> str:
    """ "replicated", "sampled" or "distributed" for this fit (see the module docstring).

    "auto" samples when trees draw under half the rows on average (Poisson mean below 0.5).
    Otherwise it replicates the blocks while a worker can hold the whole binned table and a
    tree's growth beside it (``replicated_bytes``) within ``levels.MEMORY_SHARE`` of the
    memory it is planned within (``workers`` of ``memory.planned_workers``: its memory_limit,
    else what it can reach); else it samples while a tree's rows and
    growth fit (``sampled_bytes``), or when distributed mode does not grow this forest's trees
    (``levels.supports``); else it grows the trees across the workers (``levels``).
    """
    if mode in ("replicated", "sampled", "distributed"):
        return mode
    if mode != "auto":
        raise ValueError(
            f'mode must be "auto", "replicated", "sampled" or "distributed", got {mode!r}'
        )
    if 0.0 < spec.lam < 0.5:
        return "sampled"
    memory = smallest_limit(workers)
    if not memory:  # no worker yet (an adaptive cluster's): replicated tasks wait for workers
        return "replicated"
    room = levels.MEMORY_SHARE * memory / levels.most_threads(workers)  # a task a thread
    if replicated_bytes(data, spec) <= room:
        return "replicated"
    if sampled_bytes(data, spec) <= room or not levels.supports(spec):
        return "sampled"
    return "distributed"


def _tree_row_bytes(data: TrainingData, spec: ForestSpec) -> float:
    """A tree's growth per in-bag row (``levels.bytes_per_gathered_row``)."""
    return levels.bytes_per_gathered_row(
        data.bin_mapper.n_features_in_,
        max(1, spec.n_classes),
        spec.params.constrained,
        data.n_outputs,
    )


@dataclass(frozen=True)
class SampledPlan:
    """The memory plan of a sampled fit (``plan_sampled``)."""

    trees_per_task: int
    least_bytes: int  # a worker holds at least this much (what the fit is refused by)
    most_bytes: int  # and at most this much (for full-depth regression trees)


def plan_sampled(
    data: TrainingData,
    spec: ForestSpec,
    workers: dict,
    own_bytes: int | None = None,
    trees_per_task: int | None = None,
    usual_trees_per_task: int = 1,
) -> SampledPlan:
    """Plan a sampled fit on the ``workers`` of ``memory.planned_workers``.

    A worker holds its own memory (``own_bytes``, as distributed mode's plan counts it:
    ``levels.own_memory``), its share of the binned blocks (codes, targets and weight), and for
    each thread a tree task of ``trees_per_task`` trees: at least their rows as the blocks
    extracted them, one tree's stack and the grower's row buffers
    (``sampled_least_bytes_per_row`` an in-bag row); at most ``sampled_bytes_per_row`` an in-bag
    row, which counts a full-depth tree's node records at two a row (what regression trees on
    distinct targets reach; classification trees hold far fewer), and the rows extracted for the
    next task, waiting.

    ``trees_per_task`` None: the most, up to ``usual_trees_per_task``, whose most fits
    ``levels.MEMORY_SHARE`` of the smallest worker's memory, and at least one (a task holds its
    trees' rows until it ends: more trees a task, fewer tasks, more memory).

    Raises
    ------
    MemoryError
        When the least exceeds ``memory.pause_share`` of the smallest worker's memory: the fit
        could not run to its end.
    """
    memory = smallest_limit(workers)
    n_workers, threads = max(1, len(workers)), levels.most_threads(workers)
    in_bag = levels.estimate_tree_rows(data.n_rows, spec.lam)
    baseline = levels.own_memory(workers, own_bytes)
    n_features = data.bin_mapper.n_features_in_
    block_bytes = levels.worker_block_bytes(data.n_rows, n_features, n_workers, data.n_outputs)

    def least_and_most(trees: int) -> tuple[int, int]:
        waiting = trees * in_bag * _extracted_row_bytes(data)  # the next task's rows
        least = threads * in_bag * sampled_least_bytes_per_row(data, trees)
        most = threads * (in_bag * sampled_bytes_per_row(data, spec, trees) + waiting)
        return baseline + block_bytes + int(least), baseline + block_bytes + int(most)

    if trees_per_task is None:
        trees_per_task = max(1, usual_trees_per_task)
        while (
            memory
            and trees_per_task > 1
            and least_and_most(trees_per_task)[1] > (levels.MEMORY_SHARE * memory)
        ):
            trees_per_task -= 1
    least, most = least_and_most(trees_per_task)
    share = pause_share(workers) if workers else 1.0
    if memory and least > share * memory:
        raise MemoryError(
            f'mode="sampled" needs at least {mib(least / share)} of memory per worker (up to '
            f"{mib(most / share)} for full-depth trees) for trees of {in_bag} in-bag rows of "
            f"{n_features} features, {trees_per_task} a task, on "
            f"{n_workers} worker(s) of {threads} thread(s) ({mib(baseline)} of its own and "
            f"{mib(block_bytes)} of binned rows, within {share:.0%} of it); "
            f"{describe_limit(workers)}: add workers or memory, or lower max_samples"
        )
    return SampledPlan(trees_per_task, least, most)


def _extracted_row_bytes(data: TrainingData) -> int:
    """An in-bag row as a block extracts it (``extract_in_bag``): codes, targets, weight, count."""
    return data.bin_mapper.n_features_in_ + 8 * data.n_outputs + 16


def sampled_bytes_per_row(data: TrainingData, spec: ForestSpec, trees_per_task: int = 1) -> int:
    """The most a sampled tree task holds per in-bag row of a tree: one tree's rows as the
    blocks extracted them, stacked, and grown (``levels.bytes_per_gathered_row``, with the
    rows' counts), and each other tree of the task's rows and node records."""
    one_tree = _tree_row_bytes(data, spec) + 16  # (the counts, extracted and stacked)
    others = _extracted_row_bytes(data) + levels.records_per_row(max(1, spec.n_classes))
    return int(one_tree + (trees_per_task - 1) * others)


def sampled_least_bytes_per_row(data: TrainingData, trees_per_task: int = 1) -> int:
    """The least a sampled tree task holds per in-bag row of a tree: its trees' rows as the
    blocks extracted them, one tree's stack, and the grower's row buffers."""
    n_features = data.bin_mapper.n_features_in_
    row = _extracted_row_bytes(data)
    return (trees_per_task + 1) * row + levels.row_buffer_bytes(n_features, data.n_outputs)


def replicated_bytes(data: TrainingData, spec: ForestSpec) -> float:
    """A replicated tree task's memory: the stacked binned table (codes, targets, weight,
    count, row weight) and a tree's growth on its in-bag rows."""
    n_features = data.bin_mapper.n_features_in_
    in_bag = levels.estimate_tree_rows(data.n_rows, spec.lam)
    table = n_features + 8 * data.n_outputs + 24
    return data.n_rows * table + in_bag * _tree_row_bytes(data, spec)


def sampled_bytes(data: TrainingData, spec: ForestSpec) -> float:
    """A sampled tree task's memory: a tree's in-bag rows and its growth."""
    return levels.estimate_tree_rows(data.n_rows, spec.lam) * sampled_bytes_per_row(data, spec)


# The shipped feature types for which this process has compiled its kernels of a fit
# (``_compile_client_kernels``): packing compiles once per type of the trees' feature indices.
_client_kernels_ready: set[np.dtype] = set()


def _compile_client_kernels(data: TrainingData, spec: ForestSpec) -> None:
    """Pack a stump of the forest's shape (``wire.stump``) and vote with it: the client's
    kernels of a fit (packing the shipped trees) and of the predictions that usually follow
    compile, or load from numba's cache, for the signatures the forest's trees need.

    Prediction is compiled for float64 rows, what a pandas frame and a float64 array encode to
    (a float32 array compiles its own signature when it is first predicted), with every table of
    leaf values a forest votes with (``PackedForest.vote``): a regressor's means; a
    classifier's fractions, and its whole leaf counts, which it reads as they are for a few
    rows."""
    thresholds, n_classes = spec.bins.thresholds, spec.n_classes
    state = wire.stump(thresholds, n_classes, spec.params.criterion)
    forest = PackedForest([wire.decode(state, thresholds)], data.bin_mapper)
    rows = np.zeros((1, data.bin_mapper.n_features_in_))
    forest.vote(rows)
    if n_classes > 1:
        counted = wire.stump(thresholds, n_classes, spec.params.criterion, whole_counts=True)
        PackedForest([wire.decode(counted, thresholds)], data.bin_mapper).vote(rows)
    _client_kernels_ready.add(state["feature"].dtype)


def grow_forest(
    client: Client,
    data: TrainingData,
    spec: ForestSpec,
    tree_ids: list[int],
    trees_per_task: int | None = None,
    mode: str = "auto",
    retries: int = 1,
    on_workers: bool = False,
) -> tuple[list[Tree] | TreeShards, str]:
    """Submit the tree tasks and gather their trees in tree order, or with ``on_workers``
    keep them on the workers, a shard a task, or a run of sampled tasks (``shards``).

    Returns
    -------
    trees : list of tree.Tree, or TreeShards
    mode : str
        The mode used.
    """
    workers = cluster_workers(client)
    planned = planned_workers(client, workers)  # (without a client: one worker, the process)
    chosen = choose_mode(mode, data, spec, planned)
    own = None if chosen == "replicated" else levels.workers_own_memory(client)
    usual = default_trees_per_task(len(tree_ids), len(workers))
    sampled = refused = None
    if chosen == "sampled":
        asked = None if trees_per_task is None else min(trees_per_task, len(tree_ids))
        try:
            sampled = plan_sampled(data, spec, planned, own, asked, usual)
        except MemoryError as error:
            if mode != "auto" or not levels.supports(spec):
                raise
            chosen, refused = "distributed", error  # a tree's rows do not fit a task
    mode = chosen
    if mode == "distributed":
        levels.check_supports(spec)  # before the plan, whose memory checks would speak first
        try:
            plan = levels.plan_levels(
                data.n_rows,
                data.bin_mapper.n_features_in_,
                max(1, spec.n_classes),
                len(tree_ids),
                planned,
                levels.budget_override(),
                own,
                constrained=spec.params.constrained,
            )
        except MemoryError as error:
            raise error from refused  # (auto mode: why sampled mode did not fit either)
        progress = _progress.get()
        if not on_workers:
            trees = levels.grow_forest_levels(client, data, spec, tree_ids, plan, retries, progress)
            return trees, mode
        joined = shards.ShardsAsJoined(client, tree_ids, usual, data.bin_mapper)
        levels.grow_forest_levels(
            client, data, spec, tree_ids, plan, retries, progress, on_tree=joined.add
        )
        return joined.shards(), mode
    tasks_per_shard = 1
    if sampled is not None:
        tasks_per_shard = max(1, usual // sampled.trees_per_task)  # shards of the usual size
        if trees_per_task is not None or sampled.trees_per_task < usual:
            trees_per_task = sampled.trees_per_task  # (else the usual batches, the last smaller)
        least, most = sampled.least_bytes >> 20, sampled.most_bytes >> 20
        logger.info(
            "sampled mode: %d trees, %d a task, planned %d to %d MiB a worker",
            len(tree_ids), sampled.trees_per_task, least, most,
        )  # fmt: skip
    batches = tree_batches(tree_ids, trees_per_task, len(workers))
    token = uuid.uuid4().hex[:8]
    ship = not is_in_process(client)  # pickled only to cross a process boundary
    feature_dtype = wire.feature_dtype(data.bin_mapper.n_features_in_)
    if ship and not on_workers and feature_dtype not in _client_kernels_ready:
        # On a cold cache the workers compile their kernels for seconds while the client
        # waits: it compiles its own meanwhile (packing, and prediction, which a fit's caller
        # usually runs next), off the fit's critical path. (Its thread and the fit's take
        # numba's compiler lock in turn: a kernel compiles once.)
        threading.Thread(
            target=_compile_client_kernels,
            args=(data, spec),
            name="dasktrees-client-kernels",
            daemon=True,
        ).start()
    futures = []
    for k, batch in enumerate(batches):
        key = f"dasktrees-trees-{batch[0]}-{token}"
        priority = len(batches) - k  # in order: the large batches first, the small ones last
        task: Callable[..., np.ndarray | list[dict]]  # grow_batch or grow_sampled
        inputs: list  # the blocks, or futures of what each block extracts
        if mode == "replicated":
            task, inputs = grow_batch, data.parts
        else:
            task = grow_sampled
            inputs = [
                client.submit(
                    extract_in_bag,
                    spec,
                    batch,
                    part,
                    retries=retries,
                    pure=False,
                    key=f"dasktrees-extract-{batch[0]}-{i}-{token}",
                    priority=priority,
                )
                for i, part in enumerate(data.parts)
            ]
        futures.append(
            client.submit(
                task,
                spec,
                ship,
                batch,
                *inputs,
                key=key,
                retries=retries,
                pure=False,
                priority=priority,
            )
        )
    progress = _progress.get()
    if on_workers:
        first_trees = [batch[0] for batch in batches]
        return shards.keep_on_workers(
            client,
            futures,
            first_trees,
            data.bin_mapper,
            len(tree_ids),
            retries,
            progress,
            tasks_per_shard,
        ), mode
    # Fetch each batch as soon as its task ends, while the others still grow: trees are large
    # (tens of bytes per node) and moving them to the client overlaps with the growth.
    grown = {}
    n_done = 0
    for future in as_completed(client, futures):
        states = pickle.loads(future.result()) if ship else future.result()
        grown[future] = [wire.decode(state, spec.bins.thresholds) for state in states]
        n_done += len(grown[future])
        if progress is not None:
            progress(n_done, len(tree_ids))
    return [tree for future in futures for tree in grown[future]], mode

"""Distributed mode: trees on more rows than a worker holds, their tops grown from summed
histograms.

A tree's top nodes hold too many rows for one worker. They are split level by level, in rounds
of tasks, for a batch of trees at once; the binned blocks never move:

    round r, every block (where it lives)           reduction (workers)     client
    ---------------------------------------         -------------------     -------------
    route its rows down round r-1's splits  ──┐
    hand over the rows of gathered nodes      ├──>  sum the blocks'    ──>  split each node
    add its rows to the open nodes' histograms┘     histograms, choose      (small records)
                                                    the splits

* **Open nodes** (more in-bag rows than ``budget_rows``) are split from histograms summed over
  the blocks (``learner/block_histograms.py``), of the features the node's split search draws
  (``grower.first_drawn_features``; all of them for the random splitter), by the grower's own
  search (``grower.split_from_histograms``).
* **Gathered nodes** (at most ``budget_rows`` in-bag rows, decided per node when its parent is
  split) have their rows, in row order with their weights, handed over by every block and
  stacked in one task, which grows the node's subtree with the grower (``grower.grow`` from a
  ``SubtreeRoot``): several subtrees a task, the largest first.
* The client joins each tree's top and subtrees (``learner/assembly.py``) into the records a
  whole tree grown in one task would have, and ships them as every mode does (``wire``). A
  best-first tree (``max_leaf_nodes``) grows its top in full and its subtrees best-first up to
  ``max_leaf_nodes`` leaves each; the client keeps the splits the grower's heap would have made
  (``assembly.best_first``).

A node's random draws are keyed by its path from the root (``rng.child_key``), and the summed
histograms do not depend on how the rows are cut into blocks, so the trees are the same on any
cluster. They are the same trees as the other modes' wherever the sums are exact in float64 in
both (counts; whole weights, as bootstrap counts on unweighted rows; integer targets); else a
top node's sums are rounded once where the one-task grower rounds at every row
(docs/algorithms.md).
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import logging
import math
import pickle
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..core.criteria import POISSON, impurity, is_regression, stats_weight
from ..core.dtypes import BITSET_DTYPE, BITSET_WORDS, N_BIN_CODES, NODE_DTYPE
from ..core.rng import child_key
from ..learner import assembly, wire
from ..learner.block_histograms import (
    N_FOLDS,
    NO_NODE,
    fill_histograms,
    fold_quanta,
    route_rows,
    unfold,
    unfold_histograms,
)
from ..learner.grower import (
    NODE_LEAF,
    NODE_NEEDS_FEATURES,
    SubtreeRoot,
    Workspace,
    bin_tables,
    first_drawn_features,
    grow,
    growth_rules,
    search_scratch,
    split_node,
)
from ..learner.histogram import TRACK_TOUCHED_BELOW
from ..learner.sampling import tree_counts, tree_seed, tree_subspace, tree_weights_at
from ..learner.splitting import child_value
from ..learner.tree import Tree
from .client import Client, as_completed, cluster_workers, is_in_process
from .memory import describe_limit, mib, process_memory, smallest_limit

logger = logging.getLogger(__name__)

# The smallest node grown from summed histograms: the split search takes the large-node path
# (``grower.split_from_histograms``) above TRACK_TOUCHED_BELOW rows.
MIN_BUDGET_ROWS = 4 * TRACK_TOUCHED_BELOW
# The share of a worker's memory limit a fit plans its process to use. Dask spills a worker's
# data to disk above 0.6 of the limit in managed data ("target") or 0.7 in process memory
# ("spill"), pauses it at 0.8 and restarts it at 0.95. The plan's estimate was measured 1.04-1.06
# times under the peak; a 10M-row fit planned to 0.7 peaked at 0.73-0.77 of its limit and
# spilled 22 GB to disk and back (139 s against 95-109 s unspilled: docs/benchmarks.md).
MEMORY_SHARE = 0.6
# A worker's own memory once it has loaded dasktrees' compiled kernels, at least: measured on
# a LocalCluster worker, 61 MiB idle and 340 MiB after a first fit (numba, llvmlite and the
# kernels). A worker that has not run a fit yet will hold it by the first round's end.
KERNELS_MEMORY = 320 << 20
# Rows handed over to subtree tasks and not yet grown, at most, per row a task may grow
# (``LevelPlan.handed_rows``): the tasks running and as many waiting.
HANDED_PER_TASK = 2
# Histograms of one round on one block, at most (the rest of the open nodes wait a round),
# and the share of a worker's memory limit its rounds' histograms may hold: a chain's running
# sum and its block's own a thread, and a reduction's inputs and output (``histogram_copies``).
MAX_ROUND_HISTOGRAM_BYTES = 64 << 20
HISTOGRAM_SHARE = 0.05
# Blocks summed by one reduction task.
REDUCTION_FAN_IN = 4


_budget_rows: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "dasktrees_budget_rows", default=None
)


@contextlib.contextmanager
def gathered_rows(n_rows: int) -> Iterator[None]:
    """Within the block, distributed fits gather a node to grow its subtree in one task once it
    has at most ``n_rows`` in-bag rows, whatever the workers' memory (at least
    ``MIN_BUDGET_ROWS``): how the tests grow small tables across workers, and how to bound the
    tasks' memory by hand."""
    if n_rows < MIN_BUDGET_ROWS:
        raise ValueError(f"n_rows must be at least {MIN_BUDGET_ROWS}, got {n_rows}")
    token = _budget_rows.set(int(n_rows))
    try:
        yield
    finally:
        _budget_rows.reset(token)


def budget_override() -> int | None:
    """The ``gathered_rows`` in force, if any."""
    return _budget_rows.get()


def supports(spec) -> bool:
    """Whether distributed mode grows this forest's trees (``check_supports``)."""
    return not spec.balanced_subsample and not _several_targets(spec)


def _several_targets(spec) -> bool:
    """Whether the trees are on several target columns (a regression's, or class columns)."""
    return (is_regression(spec.params.criterion) and spec.n_classes > 1) or spec.n_outputs > 1


def check_supports(spec) -> None:
    """A ``ValueError`` saying why, unless distributed mode grows this forest's trees."""
    if _several_targets(spec):
        n_columns = spec.n_outputs if spec.n_outputs > 1 else spec.n_classes
        raise ValueError(
            f'mode="distributed" does not support y of {n_columns} columns yet (its '
            'summed histograms carry one target): use mode="replicated" or "sampled"'
        )
    if not supports(spec):
        raise ValueError(
            'mode="distributed" does not support class_weight="balanced_subsample" (its '
            "weights need each tree's class totals before its root is summed)"
        )


@dataclass(frozen=True)
class LevelPlan:
    """The memory plan of a distributed fit (``plan_levels``)."""

    budget_rows: int  # a node of at most this many in-bag rows grows its subtree in one task
    handed_rows: int  # rows handed over to subtree tasks not yet done, at most (the cluster's)
    trees_per_batch: int  # trees whose tops grow together, in the same rounds
    block_bytes: int  # binned blocks per worker
    state_bytes: int  # the rows' nodes per worker (a batch, twice during a round)
    subtree_bytes: int  # one subtree task at ``budget_rows`` rows
    handed_bytes: int  # a worker's share of the rows handed over
    round_histogram_bytes: int  # a round's histograms on a block, at most
    threads: int  # tasks a worker runs at once
    worker_memory: int  # the smallest memory limit of a worker
    baseline_bytes: int  # a worker's own memory before the fit: the process, its kernels

    @property
    def peak_bytes(self) -> int:
        """The estimated peak of a worker: its own memory, its blocks, the rows' nodes, a
        subtree task a thread, its share of the rows handed over, a round's histograms."""
        return (
            self.baseline_bytes + self.block_bytes + self.state_bytes
            + self.threads * self.subtree_bytes + self.handed_bytes + self.histogram_bytes
        )  # fmt: skip

    @property
    def histogram_bytes(self) -> int:
        """A round's histograms on a worker, at most: two a thread (a chain's running sum and
        its block's own), and a reduction task's inputs and output."""
        return histogram_copies(self.threads) * self.round_histogram_bytes


def bytes_per_gathered_row(
    n_features: int, n_values: int, constrained: bool = False, n_targets: int = 1
) -> int:
    """What a subtree task holds at most per row it grows on, while it grows: the blocks'
    pieces and their stack (codes, ``n_targets`` targets, weight), the grower's workspace
    (``grower.Workspace.for_rows``: row buffers, codes in node order, room for two node records
    a row, with their value bounds under monotonic constraints: ``constrained``) and the
    records grown so far (a tree on n distinct rows has at most 2 n - 1 nodes). Pickling the
    records for the client comes after the workspace and the stack are freed: the pieces and
    two copies of the records, less than this."""
    rows = 2 * (n_features + 8 * n_targets + 8)
    node = NODE_DTYPE.itemsize + 8 * n_values + 8 + (24 if constrained else 0)
    workspace = row_buffer_bytes(n_features, n_targets) + 2 * node
    return rows + workspace + records_per_row(n_values)


def row_buffer_bytes(n_features: int, n_targets: int = 1) -> int:
    """The grower's workspace per row, but its room for node records: the row buffers, the
    targets and their partition buffer (``n_targets`` each), five more arrays of 8 bytes, and
    the codes' bitsets in node order."""
    words = max(1, -(-n_features // 8))
    return 5 * 8 + 16 * n_targets + 16 * words


def records_per_row(n_values: int) -> int:
    """The most bytes a tree's node records take per row it grew on (two records a row: a tree
    on n distinct rows has at most 2 n - 1 nodes), ``n_values`` values a node."""
    return 2 * (NODE_DTYPE.itemsize + 8 * n_values)


def histogram_copies(threads: int) -> int:
    """Round histograms a worker may hold at once (``LevelPlan.histogram_bytes``)."""
    return 2 * threads + REDUCTION_FAN_IN + 1


def worker_block_bytes(n_rows: int, n_features: int, n_workers: int, n_targets: int = 1) -> int:
    """A worker's share of the binned blocks: codes, ``n_targets`` targets and weight a row."""
    return -(-n_rows * (n_features + 8 * n_targets + 8) // n_workers)


def most_threads(workers: dict) -> int:
    """The most threads of any of ``workers`` (``client.cluster_workers``)."""
    return max([w.get("nthreads", 1) or 1 for w in workers.values()] or [1])


def own_memory(workers: dict, own_bytes: int | None = None) -> int:
    """A worker's own memory, as a plan counts it: ``own_bytes`` (``workers_own_memory``), by
    default the most of any worker's process memory outside the data Dask manages in their last
    heartbeats (which may predate the data), and at least ``KERNELS_MEMORY``; shared among the
    workers of one process (``memory.planned_workers``' ``sharing_process``)."""
    if own_bytes is None:
        metrics = [w.get("metrics", {}) for w in workers.values()]
        own_bytes = max([m.get("memory", 0) - m.get("managed_bytes", 0) for m in metrics] or [0])
    sharing = max([w.get("sharing_process", 1) for w in workers.values()] or [1])
    return max(int(own_bytes), KERNELS_MEMORY) // sharing


def plan_levels(
    n_rows: int,
    n_features: int,
    n_values: int,
    n_trees: int,
    workers: dict,
    budget_rows: int | None = None,
    own_bytes: int | None = None,
    constrained: bool = False,
) -> LevelPlan:
    """Plan a distributed fit on the cluster's ``workers``, each with the memory it is planned
    within as its ``memory_limit`` (``memory.planned_workers``).

    Each worker is planned to hold its own memory (``own_bytes``, the most of any worker's
    process memory outside the data Dask manages, ``workers_own_memory``; by default from the
    workers' last heartbeats, which may predate the data; at least ``KERNELS_MEMORY``), its
    share of the binned blocks (codes, target and weight: ``n_features + 16`` bytes a row), the
    node of each of its rows for the tree whose top grows (4 bytes a row, twice while a round
    replaces it), one subtree task
    per thread and its share of the rows handed over to the tasks (``HANDED_PER_TASK`` tasks'
    rows a thread, ``n_features + 24`` bytes a row), within ``MEMORY_SHARE`` of its memory
    limit. ``budget_rows``, the most in-bag rows a node may have to grow its subtree in one
    task, is what is left for a task's ``bytes_per_gathered_row`` and its handed rows.

    Raises
    ------
    MemoryError
        When a worker cannot hold its blocks and a subtree task of ``MIN_BUDGET_ROWS`` rows.
    """
    n_workers = max(1, len(workers))
    memory = smallest_limit(workers)
    threads = most_threads(workers)
    baseline = own_memory(workers, own_bytes)
    per_row = bytes_per_gathered_row(n_features, n_values, constrained)
    # A worker holds the rows it handed over to the tasks of HANDED_PER_TASK budgets a thread.
    handed_per_row = HANDED_PER_TASK * (n_features + 24)
    block_bytes = worker_block_bytes(n_rows, n_features, n_workers)
    # One tree's top at a time: its rounds overlap the last tree's subtree tasks.
    trees_per_batch = 1
    state_bytes = 2 * 4 * trees_per_batch * -(-n_rows // n_workers)
    copies = histogram_copies(threads)
    round_histograms = MAX_ROUND_HISTOGRAM_BYTES
    if memory:
        round_histograms = min(round_histograms, int(HISTOGRAM_SHARE * memory / copies))
    histogram_bytes = copies * round_histograms
    if budget_rows is None:
        if memory:
            room = MEMORY_SHARE * memory - baseline - block_bytes - state_bytes - histogram_bytes
            budget_rows = int(room / threads / (per_row + handed_per_row))
        else:  # no worker yet (an adaptive cluster's): nothing to plan against
            budget_rows = max(n_rows, MIN_BUDGET_ROWS)
    budget = max(int(budget_rows), 0)
    task_rows = max(budget, MIN_BUDGET_ROWS)
    plan = LevelPlan(
        budget,
        HANDED_PER_TASK * task_rows * n_workers * threads,
        trees_per_batch,
        block_bytes,
        state_bytes,
        task_rows * per_row,
        threads * task_rows * handed_per_row,
        round_histograms,
        threads,
        memory,
        baseline,
    )
    if plan.budget_rows < MIN_BUDGET_ROWS:
        smallest = MIN_BUDGET_ROWS * (per_row + handed_per_row)
        needed = baseline + block_bytes + state_bytes + threads * smallest
        raise MemoryError(
            f'mode="distributed" needs about {mib(needed / (MEMORY_SHARE - HISTOGRAM_SHARE))} of '
            f"memory per worker for {n_rows} rows of {n_features} features on {n_workers} "
            f"worker(s) of {threads} thread(s) ({mib(baseline)} of its own, "
            f"{mib(block_bytes)} of binned rows and {mib(state_bytes)} of node ids each, "
            f"{mib(smallest)} a thread for the smallest subtree tasks and "
            f"{HISTOGRAM_SHARE:.0%} of the limit for histograms, within {MEMORY_SHARE:.0%} of it); "
            f"{describe_limit(workers)}: add workers or memory, or use max_samples"
        )
    return plan


def workers_own_memory(client) -> int | None:
    """The most memory any worker's process holds outside the data it keeps for Dask, now
    (resident memory less managed bytes; heartbeats lag behind a fresh ``persist``); None in
    this process."""
    if is_in_process(client):
        return None
    return max(client.run(_own_memory).values(), default=0)


def _own_memory(dask_worker) -> int:
    return max(0, process_memory() - dask_worker.state.nbytes)


# --- on the workers: the blocks' part of a round ----------------------------------------------


@dataclass
class BlockNodes:
    """A block's rows' nodes for a batch of trees: what a round's block task takes and returns."""

    node_of_row: np.ndarray  # int32 (n_trees, n_rows): each tree's node of each row (top ids)
    # (tree position, top id) -> (rows, weights): the block's rows of a node to gather (int64,
    # in row order) and their weights, set aside until its subtree task takes them
    # (``hand_over``)
    set_aside: dict


def _tree_weights(spec, tree, block, out):
    tree_counts(spec.seed, tree, block.first_row, spec.lam, out)
    return np.multiply(block.w, out, out=out)


def start_block(spec, trees: Sequence[int], block) -> tuple[BlockNodes, np.ndarray]:
    """The block's rows' nodes at the start (the root for in-bag rows), and per tree its
    summary: in-bag rows, the largest weight and weighted target, and whether every weight is
    whole."""
    n = len(block.y)
    node_of_row = np.full((len(trees), n), NO_NODE, dtype=np.int32)
    summary = np.zeros((len(trees), 4))
    w = np.empty(n)
    y_max = float(np.abs(block.y).max()) if n else 0.0
    for k, t in enumerate(trees):
        _tree_weights(spec, t, block, w)
        in_bag = w > 0
        node_of_row[k, in_bag] = 0
        summary[k, 0] = np.count_nonzero(in_bag)
        summary[k, 1] = w.max() if n else 0.0
        summary[k, 2] = summary[k, 1] * y_max
        summary[k, 3] = float(np.array_equal(w, np.floor(w)))
    return BlockNodes(node_of_row, {}), summary


# What a round does with the rows of a node (``RoundOrders.fate``).
KEEP, DROP, SET_ASIDE = 0, 1, 2


@dataclass
class RoundOrders:
    """What every block does in a round, for each tree of the batch (lists indexed by tree)."""

    trees: list  # the batch's tree indices
    routes: list  # (split_feature, split_bin, split_flags, bitsets, children) or None
    # int8 (n_top,): per node, KEEP its rows (open), DROP them (a leaf or split node) or
    # SET_ASIDE them (gathered)
    fate: list
    released: set  # (tree position, top id) of set-aside rows taken by a subtree task
    slot_of_node: list  # int64 (n_top,): the open nodes' slots, -1 for the others
    features: list  # int64 (n_slots, n_kept): the features of each slot's histograms
    means: list  # float64 (n_slots,): regression: the open nodes' means (NaN: not known)
    quanta: list  # float64 (n_folds,): the tree's fold quanta
    n_channels: int  # of a histogram, folded
    n_total_channels: int


def block_round(spec, orders: RoundOrders, nodes: BlockNodes, block, before=None):
    """One round on one block: route the rows down the last round's splits, set aside the rows
    of the nodes to gather and drop those of the leaves, and fill the open nodes' histograms,
    to which it adds ``before``, the sums of the blocks before it in its chain (exact: the
    order of the blocks does not matter).

    Returns
    -------
    nodes : BlockNodes
        The rows' nodes after the round (new arrays: a task's inputs stay as they were, so a
        lost result is recomputed from them).
    sums : list of (hists, totals)
        Per tree, the histograms and totals of its open nodes (``fill_histograms``), with
        ``before``'s.
    """
    node_of_row = nodes.node_of_row.copy()
    set_aside = {key: rows for key, rows in nodes.set_aside.items() if key not in orders.released}
    w = np.empty(len(block.y))
    sums = []
    for k, t in enumerate(orders.trees):
        rows = node_of_row[k]
        if orders.routes[k] is not None:
            route_rows(block.codes, rows, *orders.routes[k])
        tracked = np.flatnonzero(rows >= 0)
        fate = orders.fate[k][rows[tracked]]
        aside = tracked[fate == SET_ASIDE]
        n_slots, n_kept = orders.features[k].shape
        if len(aside) or n_slots:  # the tree's weights of the rows still tracked, once for both
            tree_weights_at(spec.seed, t, block.first_row, spec.lam, block.w, tracked, w)
        if len(aside):
            node = rows[aside]
            order = np.argsort(node, kind="stable")  # by node, each in row order
            aside, node = aside[order], node[order]
            starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
            for a, b in zip(starts, np.r_[starts[1:], len(node)]):
                set_aside[(k, int(node[a]))] = (aside[a:b], w[aside[a:b]])
        rows[tracked[fate != KEEP]] = NO_NODE
        hists = np.zeros((n_slots, n_kept, N_BIN_CODES, orders.n_channels))
        totals = np.zeros((n_slots, orders.n_total_channels))
        if n_slots:
            fill_histograms(
                block.codes,
                block.y,
                w,
                rows,
                orders.slot_of_node[k],
                orders.features[k],
                orders.means[k],
                spec.n_classes,
                spec.params.criterion == POISSON,
                orders.quanta[k],
                hists,
                totals,
            )
        if before is not None:
            hists += before[k][0]
            totals += before[k][1]
        sums.append((hists, totals))
    return BlockNodes(node_of_row, set_aside), sums


def hand_over(nodes: BlockNodes, block, members: list) -> list:
    """The block's rows of the gathered nodes ``members`` ((tree position, top id) pairs), as
    (tree position, top id, codes, y, weights), each in row order."""
    handed = []
    for k, x in members:
        rows, weights = nodes.set_aside.get((k, x), (None, None))
        if rows is not None and len(rows):
            handed.append((k, x, block.codes[rows], block.y[rows], weights))
    return handed


def sum_blocks(*parts):
    """The blocks' ``block_round`` sums added up, tree by tree (exact: any grouping)."""
    total = [(h.copy(), t.copy()) for h, t in parts[0]]
    for part in parts[1:]:
        for (h, t), (h2, t2) in zip(total, part):
            h += h2
            t += t2
    return total


def round_output(result, which):
    """A part of ``start_block``'s or ``block_round``'s result: 0 the nodes, 1 the sums."""
    return result[which]


# --- deciding the splits ----------------------------------------------------------------------


@dataclass
class TreeState:
    """The client's view of one tree's top while its rounds run."""

    tree: int
    key: int  # the root's random key (the tree seed)
    candidates: np.ndarray
    quanta: np.ndarray = field(default_factory=lambda: np.zeros(1))
    n_in_bag: int = 0
    w_root: float = 0.0
    total_weight: float = 0.0
    tree_keys: np.ndarray | None = None
    # Top nodes, by top id
    nodes: list = field(default_factory=list)  # NODE_DTYPE records (numpy void), or None
    values: list = field(default_factory=list)
    kind: list = field(default_factory=list)
    keys: list = field(default_factory=list)
    depth: list = field(default_factory=list)
    parent: list = field(default_factory=list)
    n_rows: list = field(default_factory=list)
    mean: list = field(default_factory=list)
    bounds: list = field(default_factory=list)  # (lower, upper) on the value: monotonic_cst
    bitsets: list = field(default_factory=list)
    subtree: list = field(default_factory=list)  # (group, index in group) of a gathered node
    groups: set = field(default_factory=set)  # the groups growing its subtrees
    open: list = field(default_factory=list)  # top ids still to split, in order
    all_features: set = field(default_factory=set)  # open ids whose every feature is needed

    def pending_groups(self, pool) -> bool:
        """Whether a gathered node of the tree still waits for its subtree task or result."""
        return any(
            self.subtree[x] is None or self.subtree[x][0] not in pool.results
            for x in range(len(self.kind))
            if self.kind[x] == assembly.TOP_SUBTREE
        )

    def add(self, parent, depth, key, n_rows, mean, bounds=(-np.inf, np.inf)):
        self.nodes.append(None)
        self.values.append(None)
        self.kind.append(-1)
        self.keys.append(key)
        self.depth.append(depth)
        self.parent.append(parent)
        self.n_rows.append(n_rows)
        self.mean.append(mean)
        self.bounds.append(bounds)
        self.subtree.append(None)
        return len(self.kind) - 1


def decide(spec, infos: list, sums: list) -> list:
    """Choose the splits of every open node of a round from its summed histograms.

    ``infos[k]``: per tree, (top ids of its slots, each slot's features, depth, parent, key,
    n_folds, w_root, total_weight, tree_keys, candidates, root slot features for the order of
    categories). Returns per tree and slot: (status, record, values, bitset row, left stats,
    right stats, the node's own statistics, impurity).
    """
    params = spec.params
    n_values = max(1, spec.n_classes)
    tables = bin_tables(spec.bins)
    n_features = len(spec.bins.n_bins)
    out = []
    for info, (hists, totals) in zip(infos, sums):
        decided = []
        tree_keys = info["tree_keys"]
        candidates = info["candidates"]
        n_folds = info["n_folds"]
        n_channels = 4 if is_regression(params.criterion) else n_values + 1
        for s, top_id in enumerate(info["top_ids"]):
            total = _unfold_totals(totals[s], n_folds, spec.n_classes, n_channels)
            if spec.n_classes == 1:
                w_node = total[1]
                # the summed squared deviations (or Poisson deviances) about the node's mean;
                # a deviance summed from rounded terms may fall a hair below zero
                node_impurity = (
                    max(unfold(totals[s], 1 + 2 * n_folds, n_folds) / w_node, 0.0)
                    if w_node > 0
                    else 0.0
                )
                if np.isnan(info["means"][s]):  # the root: its mean first
                    decided.append(("mean", total[2] / w_node if w_node > 0 else 0.0))
                    continue
            else:
                node_impurity = impurity(total, params.criterion)
            grown = np.zeros((hists.shape[1], N_BIN_CODES, n_channels))
            unfold_histograms(hists[s], n_folds, grown)
            features = info["features"][s]
            slot_of_feature = np.full(n_features, -1, dtype=np.int64)
            for r, f in enumerate(features):
                if f >= 0:
                    slot_of_feature[f] = r
            w_root = info["w_root"]
            total_weight = info["total_weight"]
            if top_id == 0:
                w_root = total_weight = stats_weight(total, params.criterion)
                if params.tree_order and np.any(spec.bins.is_categorical):
                    tree_keys = _tree_keys(grown, slot_of_feature, spec)
                else:
                    tree_keys = np.zeros((n_values, n_features, 0))
            rules = growth_rules(params, spec.n_classes, total_weight, info["key"], 0)
            scratch = search_scratch(candidates, n_features, n_values, params.criterion, tree_keys)
            split = split_node(
                grown, slot_of_feature, total, node_impurity, info["keys"][s],
                info["depths"][s], info["parents"][s], w_root, tables, rules, scratch,
                info["bounds"][s],
            )  # fmt: skip
            root_info = (w_root, total_weight, tree_keys) if top_id == 0 else None
            decided.append((split, root_info))
        out.append(decided)
    return out


def _unfold_totals(totals, n_folds, n_classes, n_channels):
    total = np.zeros(n_channels)
    total[0] = totals[0]
    n_sums = 2 if n_classes == 1 else n_classes
    for c in range(n_sums):
        total[1 + c] = unfold(totals, 1 + c * n_folds, n_folds)
    return total


def _tree_keys(hists, slot_of_feature, spec):
    """``grower.tree_category_keys`` from the root's summed histograms (whole: of every
    categorical feature the tree may split on)."""
    n_features = len(spec.bins.n_bins)
    regression = spec.n_classes == 1
    n_orders = 1 if regression else spec.n_classes
    keys = np.zeros((n_orders, n_features, N_BIN_CODES))
    for f in np.flatnonzero(spec.bins.is_categorical):
        r = slot_of_feature[f]
        if r < 0:
            continue
        h = hists[r]
        if regression:
            weight = h[:, 1]
            sums = h[:, 2][None, :]
        else:
            weight = np.zeros(N_BIN_CODES)
            for c in range(spec.n_classes):
                weight += h[:, 1 + c]
            sums = h[:, 1 : 1 + spec.n_classes].T
        with np.errstate(invalid="ignore", divide="ignore"):
            keys[:, f, :] = np.where(weight > 0, sums / np.where(weight > 0, weight, 1), np.nan)
    return keys


# --- subtrees ---------------------------------------------------------------------------------


def grow_subtrees(spec, nodes_info: list, ship: bool, *handed_parts):
    """Grow the subtree of each gathered node of a group on its rows, stacked in block order.

    ``nodes_info``: (tree position, top id, tree, key, depth, w_root, total_weight, tree_keys,
    value bounds) per node. Returns per node ``grower.grow``'s records, pickled as a tree
    task's trees are.
    """
    pieces: dict = {}
    for part in handed_parts:
        for k, top_id, codes, y, w in part:
            pieces.setdefault((k, top_id), []).append((codes, y, w))
    n_features = len(spec.bins.n_bins)
    n_values = max(1, spec.n_classes)
    out = []
    workspace = None
    for k, top_id, tree, key, depth, w_root, total_weight, tree_keys, bounds in nodes_info:
        parts = pieces[(k, top_id)]
        codes, y, w = (
            np.concatenate([p[i] for p in parts]) if len(parts) > 1 else parts[0][i]
            for i in range(3)
        )
        if workspace is None or not workspace.fits(len(y), n_values, n_features, spec.params):
            workspace = Workspace.for_rows(len(y), n_values, n_features, spec.params)
        candidates = tree_subspace(spec.seed, tree, n_features, spec.n_features_tree)
        if depth == 0:  # the whole tree: its own root weight, totals and category orders
            total_weight = float(w.sum())
        root = SubtreeRoot(key, depth, w_root, total_weight, tree_keys, bounds)
        records = grow(
            codes, y, w, np.arange(len(y), dtype=np.int64), spec.bins, spec.params,
            spec.n_classes, 0, candidates, workspace, root,
        )  # fmt: skip
        out.append(tuple(np.array(r) for r in records))  # out of the reused workspace
        del codes, y, w, records
    if not ship:
        return out
    del workspace, pieces  # the pickle is a copy of the records: the task's peak is one of two
    return np.frombuffer(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)


# --- the driver -------------------------------------------------------------------------------


def grow_forest_levels(
    client: Client,
    data,
    spec,
    tree_ids: list[int],
    plan: LevelPlan,
    retries: int = 1,
    progress=None,
    on_tree=None,
) -> list[Tree]:
    """Grow ``tree_ids`` in distributed mode under ``plan``; the trees in tree order, or, with
    ``on_tree``, none: each tree is handed to ``on_tree(tree_id, tree)`` as soon as it is
    joined, and not kept."""
    check_supports(spec)
    pool = _SubtreePool(client, data, spec, plan, retries, uuid.uuid4().hex[:8])
    trees: dict[int, Tree] = {}
    n_joined = [0]
    waiting: list[TreeState] = []  # trees whose subtrees are still growing

    def join_ready():
        for s in [s for s in waiting if not s.pending_groups(pool)]:
            waiting.remove(s)
            tree = _join_tree(spec, s, pool.take(s.groups))
            n_joined[0] += 1
            if on_tree is None:
                trees[s.tree] = tree
            else:
                on_tree(s.tree, tree)
            if progress is not None:
                progress(n_joined[0], len(tree_ids))

    # The rounds of a batch of trees go on while the subtrees of the earlier batches grow; the
    # trees whose subtrees are all back are joined while a round runs on the workers.
    for start in range(0, len(tree_ids), plan.trees_per_batch):
        batch = tree_ids[start : start + plan.trees_per_batch]
        waiting.extend(_grow_tops(pool, batch, join_ready))
        join_ready()
    while waiting:
        pool.wait()
        pool.dispatch()
        join_ready()
    logger.info(
        "distributed mode: %d trees, budget %d rows: %s", len(tree_ids), plan.budget_rows,
        dict(pool.stats),
    )  # fmt: skip
    return [trees[t] for t in tree_ids] if on_tree is None else []


@dataclass
class _Batch:
    """A batch of trees whose gathered nodes wait for a subtree task."""

    trees: list  # tree indices
    states: list  # their TreeState
    nodes: list  # futures of the blocks' latest BlockNodes
    tag: str
    pending: list = field(default_factory=list)  # (rows, tree position, top id), set aside
    released: set = field(default_factory=set)  # taken since the last round


class _SubtreePool:
    """The subtree tasks: the gathered nodes waiting for one (set aside on their blocks), the
    tasks in flight, the rows handed over to them held to ``plan.handed_rows``, their results
    fetched as they end."""

    def __init__(self, client, data, spec, plan, retries, token):
        self.client, self.data, self.spec, self.plan = client, data, spec, plan
        self.retries, self.token = retries, token
        self.ship = not is_in_process(client)
        self.batches: list[_Batch] = []
        self.futures: dict = {}  # future -> (group, rows)
        self.results: dict = {}  # group -> the records of its subtrees
        self.users: dict = {}  # group -> trees still to join with it
        self.n_groups = 0
        # What the fit did (logged): rounds, tasks, subtree tasks, bytes of histograms, of rows
        # handed over and of subtree records received
        self.stats: collections.Counter = collections.Counter()

    def submit(self, fn, *args, key, priority=0):
        self.stats["tasks"] += 1
        return self.client.submit(
            fn, *args, key=f"dasktrees-{key}-{self.token}", retries=self.retries, pure=False,
            priority=priority,
        )  # fmt: skip

    def rows_in_flight(self) -> int:
        self.collect()
        return sum(rows for _, rows in self.futures.values())

    def dispatch(self) -> None:
        """Submit subtree tasks for the waiting nodes, the largest first (the earliest batch
        first), as many as the rows in flight allow (one group at least when none is in
        flight), packed up to the budget a task."""
        room = self.plan.handed_rows - self.rows_in_flight()
        for batch in self.batches:
            batch.pending.sort(key=lambda item: (-item[0], item[1], item[2]))
            groups: list[list] = []
            group_rows: list[int] = []
            later = []
            for n_rows, k, x in batch.pending:
                if n_rows > room and (groups or self.futures):
                    later.append((n_rows, k, x))
                    continue
                room -= n_rows
                fitting = [
                    g for g, rows in enumerate(group_rows) if rows + n_rows <= self.plan.budget_rows
                ]
                g = fitting[0] if fitting else len(groups)
                if not fitting:
                    groups.append([])
                    group_rows.append(0)
                groups[g].append((k, x))
                group_rows[g] += n_rows
            batch.pending = later
            for members, n_rows in zip(groups, group_rows):
                self._submit_group(batch, members, n_rows)
        self.batches = [b for b in self.batches if b.pending]

    def _submit_group(self, batch, members, n_rows):
        group = self.n_groups
        info = []
        for position, (k, x) in enumerate(members):
            s = batch.states[k]
            s.subtree[x] = (group, position)
            s.groups.add(group)
            info.append((k, x, s.tree, s.keys[x], s.depth[x], s.w_root, s.total_weight,
                         s.tree_keys, s.bounds[x]))  # fmt: skip
        handed = [
            self.submit(
                hand_over, nodes, part, members, key=f"levels-hand-{group}-{i}"
            )  # fmt: skip
            for i, (nodes, part) in enumerate(zip(batch.nodes, self.data.parts))
        ]
        future = self.submit(
            grow_subtrees, self.spec, info, self.ship, *handed,
            key=f"levels-subtrees-{group}", priority=-1,
        )  # fmt: skip
        batch.released.update(members)
        self.futures[future] = (group, n_rows)
        self.users[group] = len({k for k, _ in members})
        self.n_groups += 1
        self.stats["subtree_tasks"] += 1
        self.stats["handed_bytes"] += n_rows * (len(self.spec.bins.n_bins) + 16)

    def collect(self) -> None:
        for future in [f for f in self.futures if f.done()]:
            group, _ = self.futures.pop(future)
            records = future.result()
            self.stats["records_bytes"] += records.nbytes if self.ship else 0
            self.results[group] = pickle.loads(records) if self.ship else records

    def wait(self) -> None:
        """Until one more task has ended (or none is left)."""
        if self.futures:
            next(iter(as_completed(self.client, list(self.futures))))
        self.collect()

    def take(self, groups: set) -> dict:
        """The results of ``groups`` for one tree; a group's are dropped once its last tree
        has them."""
        taken = {g: self.results[g] for g in groups}
        for g in groups:
            self.users[g] -= 1
            if not self.users[g]:
                del self.results[g], self.users[g]
        return taken


def _block_chains(client, parts, threads) -> list[list[int]]:
    """The blocks (indices of ``parts``) in the chains whose rounds add up their histograms: a
    chain a thread of each worker holding blocks, each in row order (in this process: a chain
    a thread)."""
    if is_in_process(client):
        n = max(1, len(cluster_workers(client)))
        return [list(range(j, len(parts), n)) for j in range(min(n, len(parts)))]
    holders = client.who_has(parts)
    by_worker: dict = collections.defaultdict(list)
    for i, part in enumerate(parts):
        by_worker[min(holders.get(part.key) or [""])].append(i)
    return [
        blocks[j::threads]
        for _, blocks in sorted(by_worker.items())
        for j in range(min(threads, len(blocks)))
    ]


def _grow_tops(pool, batch, while_round):
    """Grow the tops of a batch of trees, round by round, their gathered nodes left to
    ``pool``; returns the trees' ``TreeState``. ``while_round()`` is called once a round's
    tasks are submitted, before its decisions are awaited."""
    client, data, spec, plan = pool.client, pool.data, pool.spec, pool.plan
    n_features = len(spec.bins.n_bins)
    regression = spec.n_classes == 1
    tag = f"{batch[0]}"
    chains = _block_chains(client, data.parts, plan.threads)
    starts = [
        pool.submit(start_block, spec, batch, part, key=f"levels-start-{tag}-{i}")
        for i, part in enumerate(data.parts)
    ]
    nodes_f = [
        pool.submit(round_output, s, 0, key=f"levels-nodes-{tag}-0-{i}")
        for i, s in enumerate(starts)
    ]
    summaries = client.gather([pool.submit(round_output, s, 1, key=f"levels-sum-{tag}-0-{i}")
                               for i, s in enumerate(starts)])  # fmt: skip
    del starts
    states = []
    deciding = []  # gathered nodes whose rows the next round sets aside
    for k, t in enumerate(batch):
        n_in_bag = int(sum(s[k, 0] for s in summaries))
        w_max = max(s[k, 1] for s in summaries)
        wy_max = max(s[k, 2] for s in summaries)
        whole = all(s[k, 3] for s in summaries)
        if regression:
            y_span = 2 * wy_max / max(w_max, 1e-300)  # |y - mean| <= 2 max|y|
            bound = max(w_max, wy_max, w_max * y_span * y_span)
            quanta = fold_quanta(bound, n_in_bag, N_FOLDS)
        else:
            quanta = fold_quanta(w_max, n_in_bag, 1 if whole else N_FOLDS)
        state = TreeState(
            t,
            tree_seed(spec.seed, t),
            tree_subspace(spec.seed, t, n_features, spec.n_features_tree),
            quanta,
            n_in_bag,
        )
        root = state.add(-1, 0, state.key, n_in_bag, np.nan)
        if n_in_bag <= plan.budget_rows:
            state.kind[root] = assembly.TOP_SUBTREE
            deciding.append((n_in_bag, k, root))
        else:
            state.open.append(root)
        states.append(state)
    # One channel layout for the batch: the most folds any of its trees needs.
    folds = max(len(s.quanta) for s in states)
    for s in states:
        if len(s.quanta) < folds:
            s.quanta = np.concatenate([s.quanta, np.zeros(folds - len(s.quanta))])
    n_channels = 1 + (2 if regression else spec.n_classes) * folds
    n_total = n_channels + (folds if regression else 0)
    this = _Batch(list(batch), states, nodes_f, tag)
    pool.batches.append(this)
    routes: list = [None] * len(batch)
    round_no = 0
    while True:
        round_no += 1
        # This round's open nodes, within the histograms' memory.
        slot_of_node, features, means, infos = [], [], [], []
        n_kept = _features_per_node(spec, states)
        per_node = n_kept * N_BIN_CODES * n_channels * 8
        room = max(1, plan.round_histogram_bytes // per_node)
        for s in states:
            now = s.open[:room]
            room = max(0, room - len(now))
            slots = np.full(len(s.kind), -1, dtype=np.int64)
            feats = np.full((len(now), n_kept), -1, dtype=np.int64)
            for j, x in enumerate(now):
                slots[x] = j
                chosen = _node_features(spec, s, x, n_kept)
                feats[j, : len(chosen)] = chosen
            slot_of_node.append(slots)
            features.append(feats)
            means.append(np.array([s.mean[x] for x in now], dtype=np.float64))
            infos.append(now)
        fate = [
            np.array(
                [
                    SET_ASIDE if kd == assembly.TOP_SUBTREE else DROP if kd >= 0 else KEEP
                    for kd in s.kind
                ],
                dtype=np.int8,
            )  # fmt: skip
            for s in states
        ]
        orders = RoundOrders(
            list(batch),
            routes,
            fate,
            set(this.released),
            slot_of_node,
            features,
            means,
            [s.quanta for s in states],
            n_channels,
            n_total,
        )
        this.released.clear()
        pool.stats["rounds"] += 1
        pool.stats["histogram_bytes"] += len(data.parts) * sum(
            f.shape[0] * f.shape[1] * N_BIN_CODES * n_channels * 8 for f in features
        )
        # The blocks of a chain (on one worker) add their sums up one after the other, so that
        # a worker holds a running sum a chain, not a round's histograms a block.
        # A last round, with no node open, only sets rows aside: no sums to chain.
        any_open = any(infos)
        results: list = [None] * len(data.parts)
        sums = []
        for chain in chains:
            before = None
            for i in chain:
                results[i] = pool.submit(
                    block_round, spec, orders, nodes_f[i], data.parts[i], before,
                    key=f"levels-round-{tag}-{round_no}-{i}",
                )  # fmt: skip
                if any_open:
                    before = pool.submit(
                        round_output, results[i], 1, key=f"levels-sums-{tag}-{round_no}-{i}"
                    )
            sums.append(before)
            del before
        nodes_f = [
            pool.submit(round_output, r, 0, key=f"levels-nodes-{tag}-{round_no}-{i}")
            for i, r in enumerate(results)
        ]
        this.nodes = nodes_f
        # The nodes gathered by the last decisions are set aside by this round.
        this.pending.extend(deciding)
        deciding = []
        if this not in pool.batches:
            pool.batches.append(this)
        pool.dispatch()
        routes = [None] * len(batch)
        del results
        if not any_open:
            break
        level = 0
        while len(sums) > 1:
            sums = [
                pool.submit(
                    sum_blocks,
                    *sums[i : i + REDUCTION_FAN_IN],
                    key=f"levels-reduce-{tag}-{round_no}-{level}-{i}",
                )  # fmt: skip
                for i in range(0, len(sums), REDUCTION_FAN_IN)
            ]
            level += 1
        decide_infos = []
        for s, now, feats, node_means in zip(states, infos, features, means):
            decide_infos.append(
                {
                    "top_ids": now,
                    "features": feats,
                    "means": node_means,
                    "depths": [s.depth[x] for x in now],
                    "parents": [s.parent[x] for x in now],
                    "keys": [s.keys[x] for x in now],
                    "bounds": [s.bounds[x] for x in now],
                    "n_folds": folds,
                    "w_root": s.w_root,
                    "total_weight": s.total_weight,
                    "tree_keys": s.tree_keys,
                    "candidates": s.candidates,
                    "key": s.key,
                }
            )
        decided = pool.submit(decide, spec, decide_infos, sums[0],
                              key=f"levels-decide-{tag}-{round_no}")  # fmt: skip
        while_round()
        decisions = decided.result()
        del decided, sums
        for k, s in enumerate(states):
            routes[k] = _apply_decisions(s, k, infos[k], decisions[k], plan, spec.params, deciding)
    return states


def _apply_decisions(s, k, now, decisions, plan, params, deciding):
    """Record a round's decisions on tree ``s``'s open nodes ``now``: leaves, splits and their
    children (open, or gathered: appended to ``deciding``), nodes to sum again. Returns the
    routes the next round moves the rows by, or None."""
    regression = is_regression(params.criterion)
    s.open = s.open[len(now) :]
    split_feature = np.full(len(s.kind), -1, dtype=np.int64)
    split_bin = np.zeros(len(s.kind), dtype=np.int64)
    split_flags = np.zeros(len(s.kind), dtype=np.int64)
    bitset_rows: list[np.ndarray] = []
    children = []
    reopen = []
    for x, outcome in zip(now, decisions):
        if outcome[0] == "mean":
            s.mean[x] = outcome[1]
            reopen.append(x)
            continue
        split, root_info = outcome
        status, record, values, bitset, left, right = split
        if root_info is not None:
            s.w_root, s.total_weight, s.tree_keys = root_info
        if status == NODE_NEEDS_FEATURES:
            s.all_features.add(x)
            reopen.append(x)
            continue
        record = record.copy()
        s.values[x] = values
        if status == NODE_LEAF:
            s.kind[x] = assembly.TOP_LEAF
            s.nodes[x] = record
            continue
        s.kind[x] = assembly.TOP_SPLIT
        pair = []
        for side, stats in ((0, left), (1, right)):
            n_rows = int(stats[0])
            mean = stats[2] / stats[1] if regression and stats[1] > 0 else np.nan
            key = int(child_key(np.uint64(s.keys[x]), side))
            bounds = _child_bounds(s.bounds[x], params, record["feature"], left, right, side)
            c = s.add(x, s.depth[x] + 1, key, n_rows, mean, bounds)
            pair.append(c)
            if n_rows <= plan.budget_rows:
                s.kind[c] = assembly.TOP_SUBTREE
                deciding.append((n_rows, k, c))
            else:
                reopen.append(c)
        record["left"], record["right"] = pair
        if record["is_categorical"]:
            record["bitset_idx"] = len(s.bitsets)
            s.bitsets.append(bitset)
            split_bin[x] = len(bitset_rows)
            bitset_rows.append(bitset)
        else:
            split_bin[x] = record["bin_threshold"]
        split_feature[x] = record["feature"]
        split_flags[x] = int(record["missing_go_to_left"]) | (2 * int(record["is_categorical"]))
        s.nodes[x] = record
        children.append((x, pair))
    s.open = s.open + reopen
    if not children:
        return None
    n_top = len(s.kind)
    child_table = np.full((n_top, 2), -1, dtype=np.int64)
    for x, pair in children:
        child_table[x] = pair
    pad = n_top - len(split_feature)
    return (
        np.r_[split_feature, np.full(pad, -1, dtype=np.int64)],
        np.r_[split_bin, np.zeros(pad, dtype=np.int64)],
        np.r_[split_flags, np.zeros(pad, dtype=np.int64)],
        np.array(bitset_rows, dtype=BITSET_DTYPE).reshape(-1, BITSET_WORDS)
        if bitset_rows
        else np.zeros((1, BITSET_WORDS), dtype=BITSET_DTYPE),
        child_table,
    )


def _child_bounds(bounds, params, feature, left, right, side):
    """The value bounds of child ``side`` of a node of ``bounds`` split on ``feature``, its
    children's statistics ``left`` and ``right``: the grower's ``_node_bounds``, with the
    middle of the children's values computed as the grower computes it (``child_value``)."""
    monotonic = params.monotonic[feature] if params.constrained else 0
    if monotonic == 0:
        return bounds
    middle = 0.5 * (
        child_value(left[1], left[2], params.criterion)
        + child_value(right[1], right[2], params.criterion)
    )
    lower, upper = bounds
    if (side == 0) == (monotonic > 0):
        return lower, middle
    return middle, upper


def _join_tree(spec, s, results):
    """Tree ``s`` from its top and its subtrees' records (``results``: by group)."""
    n_values = max(1, spec.n_classes)
    n_top = len(s.kind)
    nodes = np.zeros(n_top, dtype=NODE_DTYPE)
    values = np.zeros((n_top, n_values))
    subtree_index = np.full(n_top, -1, dtype=np.int64)
    subtrees: list[tuple] = []
    for x in range(n_top):
        if s.kind[x] == assembly.TOP_SUBTREE:
            g, position = s.subtree[x]
            subtree_index[x] = len(subtrees)
            subtrees.append(results[g][position])
        else:
            nodes[x] = s.nodes[x]
            values[x] = s.values[x]
    bitsets = (
        np.array(s.bitsets, dtype=BITSET_DTYPE).reshape(-1, BITSET_WORDS)
        if s.bitsets
        else np.zeros((0, BITSET_WORDS), dtype=BITSET_DTYPE)
    )
    top = assembly.TreeTop(nodes, values, bitsets, np.array(s.kind, dtype=np.int64), subtree_index)
    joined_nodes, joined_values, joined_bitsets = assembly.join(top, subtrees)
    max_leaf_nodes = spec.params.max_leaf_nodes
    if max_leaf_nodes > 0:
        joined_nodes, joined_values, joined_bitsets = assembly.best_first(
            joined_nodes, joined_values, joined_bitsets, max_leaf_nodes
        )
    state = wire.encode(
        joined_nodes, joined_values, joined_bitsets, spec.bins.thresholds,
        len(spec.bins.n_bins), spec.params.criterion, depth_first=max_leaf_nodes == 0,
        exact=spec.params.own_moments,
    )  # fmt: skip
    return wire.decode(state, spec.bins.thresholds)


def _features_per_node(spec, states) -> int:
    """Histograms a node of this round gets: the features its search draws first (every
    candidate for the random splitter, or once a node's first draws were all constant), and
    at the root every categorical candidate (whose per-tree order is summed there)."""
    n_features = len(spec.bins.n_bins)
    params = spec.params
    n = max(len(s.candidates) for s in states)
    if params.random_splitter or any(s.all_features for s in states):
        return n
    kept = min(params.max_features, n)
    n_categorical = int(np.count_nonzero(spec.bins.is_categorical))
    if params.tree_order and n_categorical and any(0 in s.open for s in states):
        kept = min(n_features, kept + n_categorical)
    return kept


def _node_features(spec, s, x, n_kept) -> np.ndarray:
    """The features of node ``x``'s histograms (``_features_per_node``)."""
    params = spec.params
    if params.random_splitter or x in s.all_features:
        return s.candidates
    drawn = np.empty(min(params.max_features, len(s.candidates)), dtype=np.int64)
    first_drawn_features(np.uint64(s.keys[x]), s.candidates, len(drawn), drawn)
    if x == 0 and params.tree_order:
        extra = [
            f for f in s.candidates if spec.bins.is_categorical[f] and f not in set(drawn.tolist())
        ]
        drawn = np.r_[drawn, np.array(extra, dtype=np.int64)]
    return drawn[:n_kept]


def estimate_tree_rows(n_rows: int, lam: float) -> int:
    """In-bag rows of a tree on ``n_rows`` rows with Poisson mean ``lam`` (0: all)."""
    if lam <= 0:
        return n_rows
    return int(math.ceil(n_rows * (1 - math.exp(-lam))))

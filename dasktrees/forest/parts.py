"""A forest in parts of consecutive trees, and what a prediction computes of each part.

A forest held on the client is one part, all its trees; a forest kept on the workers
(``tree_storage="workers"``, ``distributed.shards``) is one part a shard, each in the memory of
the worker that grew it. A prediction visits the parts in tree order and a row op says what each
visit computes:

    chained (votes):   acc = op.add(part 0, rows, None) -> op.add(part 1, rows, acc) -> ...
                       -> op.finish(acc)
    columns (leaves,   cols_k = op.add(part k, rows, None), independently
    tree values):      -> op.finish([cols_0, cols_1, ...])

A chained op continues one sum from part to part, each row's trees added in order, so a forest
in parts adds exactly what the same forest in one part adds, bit for bit; its ``add`` adds to
``acc`` in place (a new sum for None), so a caller whose ``acc`` is another task's result copies
it once first. A column op's parts give disjoint columns of the result. The same ops run on the
client forest (one part, rows in threads) and on the shards (one Dask task a block of rows and a
run of shards on one worker, ``shards._add_run``).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import numpy as np

from ..learner import wire
from ..learner.binning import BinMapper
from ..learner.tree import Tree
from .node_table import NodeTable
from .packing import PackedForest
from .quantiles import LeafTargets, joined, predict_quantiles
from .treeshap import add_shap_values, explained_table
from .truncation import truncate_trees
from .variance import jackknife_mean_std


@dataclass
class ForestPart:
    """Trees ``first_tree`` to ``first_tree + n_trees - 1`` of a forest, packed.

    Attributes
    ----------
    first_tree : int
        The forest's index of the part's first tree: what its trees' bootstrap counts are keyed
        by (``sampling.tree_counts``).
    packed : PackedForest
        The part's trees packed for prediction.
    trees : list of tree.Tree or None
        The trees themselves (a shard's); None for a client forest's part sent to the workers,
        which carries what it predicts with only.
    leaf_ids : ndarray of int64 or None
        The node id of each packed leaf (``apply``); None: found from ``trees`` when asked.
    leaf_targets : quantiles.LeafTargets or None
        A quantile forest's part: the in-bag targets of its leaves (``packed``'s numbering).
    """

    first_tree: int
    packed: PackedForest
    trees: list[Tree] | None = None
    leaf_ids: np.ndarray | None = field(default=None, repr=False)
    leaf_targets: LeafTargets | None = field(default=None, repr=False)

    @classmethod
    def from_shipped(
        cls, shipped: np.ndarray | list[np.ndarray], first_tree: int, bin_mapper: BinMapper
    ):
        """The part of the trees a tree task shipped (``train._shipped``: their pickled states),
        or several consecutive tasks in a list, or a part shipped (``shipped``: its pickled
        trees), unpacked and packed where it lies: how a shard is made on its worker."""
        thresholds = bin_mapper.kernel_arrays().thresholds
        trees = [
            item if isinstance(item, Tree) else wire.decode(item, thresholds)
            for blob in (shipped if isinstance(shipped, list) else [shipped])
            for item in pickle.loads(blob.data)
        ]
        return cls(first_tree, PackedForest(trees, bin_mapper), trees)

    @property
    def n_trees(self) -> int:
        return self.packed.n_trees

    def leaf_node_ids(self) -> np.ndarray:
        """``leaf_ids``, or each tree's leaf node ids (``Tree.leaf_nodes``) in the packed order."""
        if self.leaf_ids is not None:
            return self.leaf_ids
        if self.trees is None:
            raise ValueError("this forest part carries neither leaf ids nor its trees")
        return np.concatenate([tree.leaf_nodes() for tree in self.trees])

    def quantile_targets(self) -> LeafTargets:
        """``leaf_targets``, which a quantile forest's part has."""
        if self.leaf_targets is None:
            raise ValueError("quantiles need a quantile forest's parts (with their leaf targets)")
        return self.leaf_targets

    def shipped(self) -> np.ndarray:
        """The part's trees as ``pickled`` ships them (``from_shipped`` reads them back)."""
        return pickled(self.trees or [])

    def summary(self) -> dict:
        """What the client keeps of a shard: its trees' impurity importances (each tree's,
        normalised), node counts and depth, and its bytes (``nbytes``)."""
        trees = self.trees or []
        return {
            "n_trees": self.n_trees,
            "importances": np.array([t.compute_feature_importances() for t in trees]),
            "node_count": np.array([t.node_count for t in trees], dtype=np.int64),
            "max_depth": self.packed.max_depth,
            "nbytes": self.nbytes(),
        }

    def nbytes(self) -> int:
        """The bytes of the part's packed tables, of its trees' states besides them (a shipped
        tree's leaf values and bitsets are views of the packed tables) and of its leaf
        targets."""
        packed = self.packed
        tables = (packed.nodes, packed.values, packed.bitsets, packed.roots)
        total = sum(a.nbytes for a in tables)
        if self.leaf_targets is not None:
            total += self.leaf_targets.nbytes
        for tree in self.trees or []:
            state = tree.shipped_state or tree.__dict__
            for value in state.values():
                if isinstance(value, np.ndarray) and not any(
                    np.may_share_memory(value, table) for table in tables
                ):
                    total += value.nbytes
        return int(total)


def pickled(trees: list[Tree]) -> np.ndarray:
    """Trees pickled into one array (as ``train._shipped`` ships a task's): what
    ``ForestPart.from_shipped`` reads."""
    return np.frombuffer(pickle.dumps(trees, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)


@dataclass(frozen=True)
class Source:
    """The trees of one fit within a merged forest (``merge_forests``): how many, and what they
    were drawn (``seed``, ``n_rows``: their bootstrap counts) and binned (``bin_mapper``) with."""

    n_trees: int
    seed: int
    n_rows: int
    bin_mapper: BinMapper


def sources_of(forest) -> list[Source]:
    """The fits whose trees a fitted forest holds, in order: its own, or a merged forest's."""
    merged = getattr(forest, "_sources", None)
    if merged is not None:
        return list(merged)
    return [Source(forest.n_estimators_, forest._seed, forest._n_rows, forest.bin_mapper_)]


# ---- row ops -----------------------------------------------------------------------------------


class MeanVote:
    """Chained: the forest's mean vote (``PackedForest.vote``), summed part after part."""

    chained = True

    def __init__(self, voting: int, n_trees: int):
        self.voting = voting
        self.n_trees = n_trees

    def add(self, part: ForestPart, encoded, acc, parallel: bool):
        out = np.zeros((len(encoded), part.packed.values.shape[1])) if acc is None else acc
        part.packed.add_votes(encoded, self.voting, out, parallel)
        return out

    def finish(self, acc):
        # The division ``PackedForest.vote`` makes (the same bits), not in place: ``acc`` is a
        # task's result, which Dask may hand to a task again.
        return acc / self.n_trees


class TreeValues:
    """Columns: each tree's value for each row (``PackedForest.tree_predictions``), reduced
    over the trees by ``reduce`` (the columns themselves when None)."""

    chained = False

    def __init__(self, reduce=None):
        self.reduce = reduce

    def add(self, part: ForestPart, encoded, acc, parallel: bool):
        return part.packed.tree_predictions(encoded, parallel)

    def finish(self, columns):
        values = np.hstack(columns) if len(columns) > 1 else columns[0]
        return values if self.reduce is None else self.reduce(values)


class Leaves:
    """Columns: the node id of the leaf each row reaches in each tree (``apply``)."""

    chained = False

    def add(self, part: ForestPart, encoded, acc, parallel: bool):
        return part.leaf_node_ids()[part.packed.apply(encoded, parallel)]

    def finish(self, columns):
        return np.hstack(columns) if len(columns) > 1 else columns[0]


class LeafQuantiles:
    """Columns: the quantiles of a quantile forest (``quantiles.predict_quantiles``), from the
    leaves each part's trees reach and their targets. A quantile is not a sum over the trees:
    each part sends its rows' leaves with the targets they hold (``LeafTargets.reached``), and
    the finish puts them together, so the quantiles are those of the forest in one part, bit
    for bit. With ``reached=False`` (the client's forest, one part in this process) a part's
    leaf targets are taken whole."""

    chained = False

    def __init__(self, quantiles: np.ndarray, reached: bool = True):
        self.quantiles = quantiles
        self.reached = reached

    def add(self, part: ForestPart, encoded, acc, parallel: bool):
        targets, leaves = part.quantile_targets(), part.packed.apply(encoded, parallel)
        return targets.reached(leaves) if self.reached else (targets, leaves)

    def finish(self, columns):
        targets, leaves = joined(columns)
        return predict_quantiles(targets, leaves, self.quantiles)


class ShapValues:
    """Chained: each row's SHAP values (``treeshap``), summed part after part, as flat rows
    (n_features x n_values columns). Its parts are the explained tables of the forest's parts
    (``explained``), not the parts themselves."""

    chained = True

    def __init__(self, n_trees: int, max_depth: int, n_features: int, n_values: int):
        self.n_trees = n_trees
        self.max_depth = max_depth  # the whole forest's: its quadrature rules
        self.shape = (n_features, n_values)

    def add(self, table, encoded, acc, parallel: bool):
        out = np.zeros((len(encoded), *self.shape)) if acc is None else acc
        add_shap_values(table, encoded, out, self.max_depth, parallel)
        return out

    def finish(self, acc):
        # As ``treeshap.shap_values`` divides (the same bits), not in place (``MeanVote``).
        return (acc / self.n_trees).reshape(len(acc), -1)


def explained(part: ForestPart, hard_voting: bool):
    """The explained table (``treeshap.explained_table``) of a part's trees: a ``ShapValues``
    part."""
    return explained_table(part.trees, hard_voting)


def node_table(part: ForestPart, family: str | None = None) -> NodeTable:
    """The node table of a part's trees (what the out-of-bag impurity importance walks), with
    the keys of ``family``'s truncations (``truncation``) if given."""
    return NodeTable(part.trees, family)


def truncated(
    part: ForestPart, family: str, cut: float, criterion: int, bin_mapper: BinMapper
) -> ForestPart:
    """The part with its trees cut at ``cut`` of ``family`` (``truncation.truncate_trees``),
    packed again where it lies."""
    trees = truncate_trees(part.trees or [], family, cut, criterion, bin_mapper)
    return ForestPart(part.first_tree, PackedForest(trees, bin_mapper), trees)


def expected_values(part: ForestPart, hard_voting: bool) -> np.ndarray:
    """Each of the part's trees' expected value (``NodeTable.expected_values``)."""
    return explained(part, hard_voting).expected_values()


def median_of_trees(values):
    """Regression's "bragging": the median of the trees' values, one column."""
    return np.median(values, axis=1)[:, None]


class JackknifeStd:
    """The mean of the trees' values and its infinitesimal-jackknife standard error
    (``variance.jackknife_mean_std``), as two columns."""

    def __init__(self, gram: np.ndarray, n_rows: int):
        self.gram = gram
        self.n_rows = n_rows

    def __call__(self, values):
        return jackknife_mean_std(values, self.gram, self.n_rows)


def run_in_parts(op, parts: list[ForestPart], encoded, parallel: bool):
    """``op`` over ``parts`` in tree order, in this process: (n_rows, n_columns)."""
    if op.chained:
        acc = None
        for part in parts:
            acc = op.add(part, encoded, acc, parallel)
        return op.finish(acc)
    return op.finish([op.add(part, encoded, None, parallel) for part in parts])

"""Forest estimators: random forests, extra-trees and bagging of CART trees on Dask.

Each estimator validates, bins the data on the cluster (``distributed.data``), submits the tree
tasks (``distributed.train``), and computes out-of-bag estimates by reductions over the blocks
(``distributed.reductions``). Only bin edges, trees and small sums come back to the client.
"""

from __future__ import annotations

import contextlib
import numbers
import operator
import os
import pickle
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import sparse
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.utils import Bunch, check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from ..core import class_outputs
from ..core.params import (
    TREE_PARAMETERS,
    check_forest_params,
    check_monotonic_data,
    check_multi_output,
    check_tree_params,
    friedman_as_squared_error,
    resolve_max_features,
)
from ..core.threads import uses_n_jobs
from ..core.validation import (
    check_2d,
    check_predict_columns,
    check_single_output,
    reject_sparse_target,
)
from ..distributed import reductions
from ..distributed.client import client_for, find_client, is_in_process
from ..distributed.convergence import WAVE, ConvergenceMonitor
from ..distributed.data import Data, default_n_blocks, is_dask_collection, prepare
from ..distributed.oob_pruning import truncation_scores
from ..distributed.reductions import Draws, forest_task, oob_estimates, permutation_importance
from ..distributed.shards import (
    TreeShards,
    auto_client_bytes,
    gather_tree,
    gather_trees,
    join_shards,
    local_rows_through_shards,
    map_parts,
    rows_through_shards,
    truncate_shards,
)
from ..distributed.train import ForestSpec, finish_progress, grow_forest, progress_of_wave
from ..forest import treeshap, truncation
from ..forest.conformal import check_coverage
from ..forest.node_table import NodeTable
from ..forest.packing import PackedForest
from ..forest.parts import (
    ForestPart,
    JackknifeStd,
    Leaves,
    MeanVote,
    ShapValues,
    Source,
    TreeValues,
    expected_values,
    explained,
    median_of_trees,
    node_table,
    run_in_parts,
    sources_of,
)
from ..forest.routing import HARD, SOFT
from ..forest.variance import centred_count_gram
from ..learner.binning import BinMapper, by_row_batches
from ..learner.sampling import sampling_rate, tree_counts
from ..modelfile.format import FOREST_FITTED
from ..modelfile.writing import save as save_model
from .fit_log import FitLog
from .sharded_models import save_sharded
from .trees import BaseDecisionTree, DecisionTreeClassifier, DecisionTreeRegressor, log_proba


class BaseForest(BaseEstimator):
    """Shared fit logic of the forest estimators (not for direct use)."""

    # The tree estimator each forest grows: set by every concrete forest (None here, where
    # there is nothing to grow).
    _tree_class: ClassVar[type[BaseDecisionTree]] = None  # type: ignore[assignment]
    _splitter: ClassVar[str] = "best"

    # Declared for mypy, set by fit (scikit-learn's fitted attributes are absent before it).
    estimators_: Sequence[BaseDecisionTree]
    mode_: str
    # A parameter (set by ``__init__``, ``keep_init_arguments``) the fit reads before it is
    # validated.
    mode: str

    def samples_rows(self) -> bool:
        """Whether each tree draws its rows (bootstrap or max_samples), so that rows are out of
        bag: what out-of-bag estimates and permutation importance need."""
        return bool(self.bootstrap) or self.max_samples is not None

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.categorical = True
        tags.input_tags.sparse = True
        return tags

    def _fit(self, X, y, sample_weight, is_classifier):
        check_forest_params(self)
        if not is_classifier:
            friedman_as_squared_error(self.criterion)  # set after construction: warn, once
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        reject_sparse_target(y)
        if not is_dask_collection(X):
            X = check_2d(X)
            validate_data(self, X, reset=True, skip_check_array=True)
        n_features = X.shape[1]
        names = [str(c) for c in X.columns] if hasattr(X, "columns") else None
        warm = self.warm_start and hasattr(self, "estimators_")
        n_outputs = _target_columns(y)
        self._check_outputs(n_outputs, warm)
        if warm:
            self._needs_one_fit("a warm start")
            if getattr(self, "prune", None) is not None:
                raise ValueError(
                    f"prune={self.prune!r} cuts the trees a fit grows: a warm start would cut "
                    "the kept trees again; fit without warm_start=True"
                )
        else:
            self._sources = None  # a new fit: whatever the estimator merged before is gone
        n_existing = len(self.estimators_) if warm else 0
        if self.n_estimators != "auto" and n_existing > self.n_estimators:
            raise ValueError(
                f"n_estimators={self.n_estimators} must be at least the {n_existing} trees "
                "already fitted with warm_start=True"
            )
        if not warm:
            self._seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        class_weight = getattr(self, "class_weight", None)
        # Fail on bad parameters before any work reaches the cluster (resolved again below,
        # once the number of rows is known).
        check_tree_params(self._tree_template(), 2, n_features, is_classifier, names)
        log = FitLog(self.verbose, type(self).__name__)
        with client_for(self._cluster() if warm else self.client) as client:
            on_workers = self._stores_on_workers(client, warm, n_outputs)
            mapper = (
                self.bin_mapper_
                if warm
                else BinMapper(
                    max_bins=self.max_bins,
                    categorical_features=self.categorical_features,
                    random_state=self._seed,
                )
            )
            data = prepare(
                client,
                X,
                y,
                sample_weight,
                mapper=mapper,
                is_classifier=is_classifier,
                class_weight=class_weight,
                n_blocks=self.n_blocks,
                poisson=not is_classifier and self.criterion == "poisson",
            )
            log.stage(
                f"{data.n_rows:,} rows x {n_features} features binned, in {len(data.parts)} "
                f"blocks, on {_where(client)}"
            )
            params = check_tree_params(
                self._tree_template(), data.n_rows, n_features, is_classifier, names
            )
            is_categorical = data.bin_mapper.is_categorical_
            check_multi_output(params, self.criterion, is_categorical, data.n_outputs, names)
            check_monotonic_data(
                params, is_categorical, data.n_values if is_classifier else 1, names
            )
            several_columns = is_classifier and data.n_outputs > 1
            spec = ForestSpec(
                params=params,
                bins=data.bin_mapper.kernel_arrays(),
                n_classes=data.n_values,  # what a node holds: classes, or target columns
                seed=self._seed,
                lam=sampling_rate(self.bootstrap, self.max_samples, data.n_rows),
                n_features_tree=(
                    n_features
                    if self.max_features_tree is None
                    else resolve_max_features(
                        self.max_features_tree, n_features, "max_features_tree"
                    )
                ),
                balanced_subsample=class_weight == "balanced_subsample",
                column_classes=(tuple(len(c) for c in data.classes) if several_columns else ()),
            )
            if self.n_estimators == "auto":
                if on_workers:  # a warm start of a forest on the workers
                    raise ValueError(
                        'n_estimators="auto" needs the trees on the client (its waves are '
                        "checked there): call gather_trees() first"
                    )
                with log.trees():
                    new_trees = self._grow_until_converged(
                        client, data, spec, n_existing, is_classifier
                    )
            elif n_existing < self.n_estimators:
                with log.trees():
                    new_trees, self.mode_ = grow_forest(
                        client,
                        data,
                        spec,
                        list(range(n_existing, self.n_estimators)),
                        self.trees_per_task,
                        self.mode,
                        on_workers=on_workers,
                    )
            else:  # a warm start with every tree grown already
                warnings.warn(
                    "Warm-start fitting without increasing n_estimators does not fit new trees.",
                    UserWarning,
                    stacklevel=3,
                )
                new_trees = []
            self._set_fitted(data, params, new_trees, warm, is_classifier)
            log.stage(f"{len(self.estimators_) - n_existing} trees grown ({self.mode_} mode)")
            if getattr(self, "prune", None) is not None:
                self._prune_on_oob(client, data, spec, is_classifier)
                log.stage(f"trees cut on their out-of-bag rows: {self.prune_}")
            else:
                for name in PRUNE_RESULTS:
                    self.__dict__.pop(name, None)
            self._after_growth(client, data, spec)
            if self.oob_score:
                self._set_oob(client, self._draws({id(data.bin_mapper): data}), spec.lam)
                log.stage(f"out-of-bag score {self.oob_score_:.4f}")
            else:  # a fit without them: no results of an earlier fit's trees left behind
                for name in OOB_RESULTS:
                    self.__dict__.pop(name, None)
        log.done()
        return self

    def _prune_on_oob(self, client, data, spec, is_classifier):
        """``prune="oob"``: score every truncation of the grown trees in one family on the
        out-of-bag rows (``distributed.oob_pruning``), keep the curve, and cut the trees at the
        best (the most pruned of equal scores), where they are."""
        family = truncation.family_of(self.prune)
        shards = self._tree_shards
        if shards is None:
            trees = [est.tree_ for est in self.estimators_]
            tables = [forest_task(client, NodeTable(trees, family))]
            max_depth = max(tree.max_depth for tree in trees)
            max_leaves = max(tree.n_leaves for tree in trees)
        else:
            tables = map_parts(shards.parts, node_table, family)
            max_depth = shards.max_depth
            max_leaves = int(shards.node_count.max() + 1) // 2  # binary trees
        cuts, values = truncation.grid(family, max_depth, max_leaves, data.n_rows)
        hard = is_classifier and self._voting_code() == HARD
        scores = truncation_scores(
            client,
            self._draws({id(data.bin_mapper): data}),
            tables,
            [first for _, first in self._part_draws()],
            spec.lam,
            cuts,
            hard,
            is_classifier,
        )
        self.oob_prune_curve_ = np.column_stack([values, scores])
        best = _most_pruned_best(scores)
        grown = shards if shards is not None else self.estimators_
        best = self._choose_cut(client, data, spec, family, cuts, best, grown)
        value = float(values[best])
        self.prune_ = {
            truncation.PARAMETER[family]: int(value) if float(value).is_integer() else value
        }
        self._cut_trees(grown, family, cuts[best], spec.params.criterion)

    def _choose_cut(self, client, data, spec, family, cuts, best, grown) -> int:
        """The index of the cut to keep, given the best by the out-of-bag score (``best``);
        the quantile forests look further, by their quantiles' loss."""
        return best

    def _cut_trees(self, grown, family, cut, criterion):
        """Keep the grown trees (``TreeShards``, or the client's estimators) cut at ``cut`` of
        ``family``, where they are: the grown trees themselves for no cut (-inf)."""
        on_workers = isinstance(grown, TreeShards)
        if cut == -np.inf:
            if (self._tree_shards if on_workers else self.estimators_) is not grown:
                (self._keep_on_workers if on_workers else self._keep_on_client)(grown)
        elif on_workers:
            self._keep_on_workers(
                truncate_shards(grown, family, float(cut), criterion, self.bin_mapper_)
            )
        else:
            trees = [est.tree_ for est in grown]
            self._keep_on_client(
                truncation.truncate_trees(trees, family, float(cut), criterion, self.bin_mapper_)
            )

    def _stores_on_workers(self, client, warm, n_outputs):
        """Whether this fit keeps its trees on the workers (``tree_storage``), for a y of
        ``n_outputs`` columns: a warm start keeps the storage of the trees it adds to."""
        if warm:
            return self._tree_shards is not None
        storage = self.tree_storage
        # n_estimators="auto" checks its waves on the client ("workers" is refused with it);
        # so are a multi-output regression's trees kept, for now.
        if storage == "client" or self.n_estimators == "auto" or n_outputs > 1:
            return False
        if is_in_process(client):
            if storage == "workers":
                raise ValueError(
                    'tree_storage="workers" needs a Dask cluster (a distributed Client, passed '
                    "as client= or the default one): without one the trees are in this process"
                )
            return False
        return True

    def _set_fitted(self, data, params, new_trees, warm, is_classifier):
        if warm and not isinstance(new_trees, TreeShards) and not new_trees:
            return  # no tree added: the forest stays as it is, where it is
        self.bin_mapper_ = data.bin_mapper
        self._n_rows = data.n_rows
        # For local input validate_data set the two below already, to the same values; a dask
        # collection's columns are known from the fitted bin mapper only.
        self.n_features_in_ = data.bin_mapper.n_features_in_
        if data.bin_mapper.feature_names_in_ is not None:
            self.feature_names_in_ = data.bin_mapper.feature_names_in_
        self.max_features_ = params.max_features
        self.n_outputs_ = data.n_outputs
        if is_classifier:  # lists for k class columns, as scikit-learn's
            self.classes_ = data.classes
            several = isinstance(data.classes, list)
            self.n_classes_ = [len(c) for c in data.classes] if several else len(data.classes)
        if isinstance(new_trees, TreeShards):
            existing = self._tree_shards
            shards = join_shards([existing, new_trees]) if warm and existing else new_trees
            if self.tree_storage == "auto" and shards.nbytes.sum() <= auto_client_bytes():
                self._keep_on_client(gather_trees(shards))
            else:
                self._keep_on_workers(shards)
            return
        trees = [self._wrap(tree) for tree in new_trees]
        self._keep_on_client([*self.estimators_, *trees] if warm else trees)

    def _keep_on_client(self, estimators):
        """Hold the fitted trees (estimators, or trees to wrap) on the client."""
        self.estimators_ = [
            e if isinstance(e, BaseDecisionTree) else self._wrap(e) for e in estimators
        ]
        self.tree_storage_ = "client"
        self._shards = None
        # Packed now, not on first use: predict must not change the estimator, nor pay for it.
        # A warm start packs every tree again (a flights forest in a fraction of its fit).
        sources = self._merged_sources()
        if sources is None:
            self._forest, self._parts = self._pack(), None
            return
        # A merged forest: each fit's trees packed with its own bins (``merging``).
        self._forest, self._parts, start = None, [], 0
        for source in sources:
            trees = [est.tree_ for est in self.estimators_[start : start + source.n_trees]]
            self._parts.append(ForestPart(0, PackedForest(trees, source.bin_mapper), trees))
            start += source.n_trees

    def _keep_on_workers(self, shards):
        """Hold the fitted trees as shards on the workers (``tree_storage="workers"``)."""
        self._shards = shards
        self.estimators_ = TreesOnWorkers(shards, self._fitted_skeleton()._wrap)
        self.tree_storage_ = "workers"
        self._forest = None

    def gather_trees(self) -> BaseForest:
        """Bring the trees of a forest kept on the workers (``tree_storage="workers"``) to the
        client: the forest is then exactly the forest fitted with ``tree_storage="client"``.
        Nothing to do for a forest on the client.

        Returns
        -------
        self
        """
        check_is_fitted(self, "estimators_")
        if self._tree_shards is not None:
            self._keep_on_client(gather_trees(self._tree_shards))
        return self

    def _fitted_skeleton(self):
        """This forest's parameters and fitted attributes without its trees (nor its out-of-bag
        results): what each shard's model file holds besides its trees."""
        skeleton = type(self)(**{**self.get_params(deep=False), "client": None})
        for name in (*FOREST_FITTED, "bin_mapper_", "feature_names_in_", "classes_", "n_classes_"):
            if hasattr(self, name):
                setattr(skeleton, name, getattr(self, name))
        return skeleton

    def _n_values(self) -> int:
        """Values a tree's leaf holds: the classes (blocks of them for k class columns,
        ``class_outputs``), or the target columns (1 but for a multi-output regression)."""
        if not hasattr(self, "classes_"):
            return self._n_outputs()
        if self._n_outputs() == 1:
            return len(self.classes_)
        return self._n_outputs() * class_outputs.block_size(self.n_classes_)

    def _n_outputs(self) -> int:
        """The target columns the forest was fitted on (a model of an earlier version: 1)."""
        return getattr(self, "n_outputs_", 1)

    def _check_outputs(self, n_outputs, warm):
        """Refuse, before any work, what a forest on ``n_outputs`` target columns does not
        take yet (docs/forests.md, "Several target columns"), and a warm start that would
        change the number of columns of its trees or out-of-bag results (one that adds
        neither only warns, as scikit-learn's)."""
        adds = warm and (self.n_estimators != len(self.estimators_) or bool(self.oob_score))
        if adds and n_outputs != self._n_outputs():
            raise ValueError(
                f"warm_start: y has {n_outputs} columns but the forest was fitted on "
                f"{self._n_outputs()}; fit without warm_start=True"
            )
        if n_outputs == 1:
            return
        refused = {
            "n_estimators": self.n_estimators == "auto",
            "prune": getattr(self, "prune", None) is not None,
            "aggregation": getattr(self, "aggregation", "mean") != "mean",
            "tree_storage": self.tree_storage == "workers",
            "mode": self.mode == "distributed",
            "voting": getattr(self, "voting", "soft") == "hard",
        }
        for name, value in refused.items():
            if value:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} takes one target; y has {n_outputs} "
                    'columns (docs/forests.md, "Several target columns")'
                )

    def _needs_one_output(self, method):
        """Refuse ``method`` on a forest fitted on several target columns."""
        check_is_fitted(self, "estimators_")
        check_single_output(self, method)

    def _cluster(self):
        """The client to run on: the shards' for a forest kept on the workers (a loaded one
        has no ``client``), else the ``client`` parameter (``client_for`` resolves None)."""
        shards = self._tree_shards
        return shards.client if shards is not None else self.client

    @property
    def _tree_shards(self) -> TreeShards | None:
        """The shards of a forest kept on the workers; None for a forest on the client."""
        return getattr(self, "_shards", None)

    def _merged_sources(self):
        """The fits of a merged forest (``merging.Source``), or None for a forest of one fit."""
        return getattr(self, "_sources", None)

    def _needs_one_fit(self, method):
        """Refuse ``method`` on a merged forest: it needs one set of bins (one packed forest,
        an export, more trees grown on the same bins), and the merged fits have their own."""
        sources = self._merged_sources()
        if sources is not None:
            raise ValueError(
                f"{method} needs the trees of one fit, and this forest merges {len(sources)} "
                "(merge_forests), each with its own bins"
            )

    def _client_parts(self):
        """The forest's parts on the client: one, or a merged forest's one per fit."""
        parts = getattr(self, "_parts", None)
        return parts if parts is not None else [ForestPart(0, self.forest_)]

    def _needs_client_trees(self, method):
        """Refuse ``method`` on a forest kept on the workers, which it does not support yet."""
        if self._tree_shards is not None:
            raise ValueError(
                f"{method} needs the trees on the client, and this forest keeps them on the "
                'workers (tree_storage="workers"): call gather_trees() first'
            )

    def _grow_until_converged(self, client, data, spec, n_existing, is_classifier):
        """``n_estimators="auto"``: grow waves of trees until the out-of-bag estimate of the
        forest's Monte-Carlo error is below ``tol`` of its error (``distributed.convergence``),
        or ``max_n_estimators`` trees. A warm start counts its trees in the first check."""
        monitor = ConvergenceMonitor(
            client, data, spec.seed, spec.lam, is_classifier, float(self.tol)
        )
        unchecked = [est.tree_ for est in self.estimators_[:n_existing]] if n_existing else []
        grown: list = []
        n_trees = n_existing
        self.mode_ = getattr(self, "mode_", self.mode)
        while True:
            wave = min(WAVE, self.max_n_estimators - n_trees)
            if wave > 0:
                with progress_of_wave(n_trees, self.max_n_estimators):
                    trees, self.mode_ = grow_forest(
                        client,
                        data,
                        spec,
                        list(range(n_trees, n_trees + wave)),
                        self.trees_per_task,
                        self.mode,
                    )
                assert isinstance(trees, list)  # grown on the client's side (not on_workers)
                grown += trees
                unchecked += trees
                n_trees += wave
            converged = bool(unchecked) and monitor.add(PackedForest(unchecked, data.bin_mapper))
            unchecked = []
            if converged or n_trees >= self.max_n_estimators:
                finish_progress(n_trees, self.max_n_estimators)
                self.convergence_ = np.array(monitor.history).reshape(-1, 2)
                return grown

    @property
    def n_estimators_(self) -> int:
        """The number of trees of the fitted forest (what ``n_estimators="auto"`` chose)."""
        check_is_fitted(self, "estimators_")
        return len(self.estimators_)

    @property
    def estimator_(self):
        """The unfitted tree every tree of the forest was grown as (its kind and the forest's
        tree parameters), scikit-learn's ``estimator_``."""
        check_is_fitted(self, "estimators_")
        return self._tree_template()

    @property
    def estimator(self):
        """``estimator_`` before a fit as well: scikit-learn's ensembles keep their members'
        template as ``estimator`` (not a parameter here: set the tree parameters on the
        forest)."""
        return self._tree_template()

    # ---- the ensemble protocol (scikit-learn's ``BaseEnsemble``) ---------------------------------

    def __len__(self) -> int:
        """The number of trees of the fitted forest."""
        return len(self.estimators_)

    def __getitem__(self, index):
        """The tree (or list of trees, for a slice) at ``index`` of ``estimators_``."""
        return self.estimators_[index]

    def __iter__(self):
        """The fitted trees, in order."""
        return iter(self.estimators_)

    @property
    def estimators_samples_(self) -> list[np.ndarray]:
        """The training rows each tree drew, as scikit-learn's forests give them: per tree, the
        (0-based, global) index of every row it drew, a row drawn k times k times over, in
        increasing order; every row for a forest that draws none (``bootstrap=False`` without
        ``max_samples``). A merged forest's trees (``merge_forests``): each the rows of its own
        fit's training table.

        Not stored: computed on each access from the counts the trees were grown with
        (``sampling.tree_counts`` of the forest's seed, the tree and the row), on the client,
        whatever the input was (numpy or dask): about 4 bytes a drawn row (8 beyond 2**31
        rows), that is 4 n bytes a bootstrap tree on n rows. Rows of zero ``sample_weight`` are
        drawn like the others (they take no part in the tree), as in scikit-learn.
        """
        check_is_fitted(self, "estimators_")
        samples = []
        for source in sources_of(self):
            n_rows = int(source.n_rows)
            dtype = np.int32 if n_rows < 2**31 else np.int64
            rows = np.arange(n_rows, dtype=dtype)
            lam = sampling_rate(self.bootstrap, self.max_samples, n_rows)
            counts = np.empty(n_rows)
            for t in range(source.n_trees):
                tree_counts(source.seed, t, 0, lam, counts)
                samples.append(np.repeat(rows, counts.astype(np.int64)))  # all ones: every row
        return samples

    def _after_growth(self, client, data, spec):
        """What the forest keeps of the training blocks besides its trees, while they are on
        the cluster (quantile forests: the targets of the leaves)."""

    def _tree_template(self):
        """An unfitted tree estimator with the forest's tree parameters: what
        ``check_tree_params`` validates, and the shell of each of ``estimators_``."""
        params = {
            name: getattr(self, name)
            for name in TREE_PARAMETERS
            if name != "splitter" and hasattr(self, name)  # no monotonic_cst: quantile forests
        }
        if params["criterion"] == "friedman_mse":  # set after construction: the fit warns once
            params["criterion"] = "squared_error"
        return self._tree_class(splitter=self._splitter, **params)

    def _wrap(self, tree):
        """A fitted single-tree estimator around a grown tree (for ``estimators_``)."""
        est = self._tree_template()
        est.tree_ = tree
        est.bin_mapper_ = self.bin_mapper_
        est.n_features_in_ = self.n_features_in_
        if hasattr(self, "feature_names_in_"):
            est.feature_names_in_ = self.feature_names_in_
        est.max_features_ = self.max_features_
        est.n_outputs_ = self._n_outputs()
        if hasattr(self, "classes_"):  # (a tree's n_classes_ is an array for k class columns)
            est.classes_ = self.classes_
            several = isinstance(self.n_classes_, list)
            est.n_classes_ = (
                np.array(self.n_classes_, dtype=np.intp) if several else self.n_classes_
            )
        return est

    @property
    def forest_(self):
        """The trees packed for prediction (``packing.PackedForest``), packed when the forest was
        fitted or loaded. If ``estimators_`` was changed since, the trees are packed again for
        the call (and not kept: predicting does not change the estimator)."""
        check_is_fitted(self, "estimators_")
        self._needs_client_trees("forest_")
        self._needs_one_fit("forest_ (one packed forest)")
        forest = getattr(self, "_forest", None)
        if forest is not None and forest.packs([est.tree_ for est in self.estimators_]):
            return forest
        return self._pack()

    def _pack(self):
        return PackedForest([est.tree_ for est in self.estimators_], self.bin_mapper_)

    @property
    def feature_importances_(self) -> np.ndarray:
        """Mean decrease in impurity, averaged over the trees that split (each tree's
        normalized) and normalized to sum to one, as scikit-learn's; zeros if no tree split."""
        importances = self._tree_importances()
        if not len(importances):
            return np.zeros(self.n_features_in_)
        mean = importances.mean(axis=0)
        return mean / mean.sum()

    @property
    def feature_importances_std_(self) -> np.ndarray:
        """Standard deviation of the mean decrease in impurity over the trees that split."""
        importances = self._tree_importances()
        return importances.std(axis=0) if len(importances) else np.zeros(self.n_features_in_)

    def _tree_importances(self):
        """Each tree's normalized importances, of the trees whose splits decreased the impurity
        (a tree of one leaf has none: scikit-learn leaves such trees out of the mean)."""
        check_is_fitted(self, "estimators_")
        if self._tree_shards is not None:
            importances = self._tree_shards.importances
        else:
            importances = np.array(
                [est.tree_.compute_feature_importances() for est in self.estimators_]
            )
        return importances[importances.sum(axis=1) > 0.0]

    @uses_n_jobs
    def oob_permutation_importance(
        self,
        X: Data,
        y: Data,
        sample_weight: Data | None = None,
        n_repeats: int = 1,
        random_state: int | np.random.RandomState | None = None,
    ) -> Bunch:
        """Breiman's permutation importance on each tree's out-of-bag rows.

        For each tree and feature, the feature is permuted among the tree's out-of-bag rows and
        the increase of the tree's error (misclassification rate, or mean squared error) is
        measured; importances average it over trees and repeats. It runs where the data lives:
        each block permutes among its own rows, so unlike every other result the figures depend
        (slightly) on how the rows are cut into blocks.

        Parameters
        ----------
        X, y, sample_weight :
            The training data, rows in the same order as in ``fit``: a tree's out-of-bag rows
            are found again from their row ids, never stored.
        n_repeats : int, default=1
        random_state : int or None
            Seed of the permutations.

        Returns
        -------
        Bunch with ``importances_mean`` and ``importances_std`` (n_features,) and
        ``importances`` (n_features, n_estimators * n_repeats).
        """
        self._needs_one_output("oob_permutation_importance")
        if not isinstance(n_repeats, numbers.Integral) or n_repeats < 1:
            raise ValueError(f"n_repeats must be an int >= 1, got {n_repeats!r}")
        permutation_seed = int(check_random_state(random_state).randint(np.iinfo(np.int32).max))
        with self._training_blocks(X, y, sample_weight, "oob_permutation_importance") as (
            client,
            draws,
            lam,
        ):
            increase = permutation_importance(
                client,
                draws,
                self._parts_on(client),
                lam,
                hasattr(self, "classes_"),
                n_repeats,
                permutation_seed,
            )
        return _importance_bunch(increase.reshape(increase.shape[0], -1))

    @uses_n_jobs
    def oob_impurity_importance(self, X: Data, y: Data, sample_weight: Data | None = None) -> Bunch:
        """Debiased impurity importance on each tree's out-of-bag rows (MDI-oob, Li et al.
        2019).

        Each out-of-bag row of a tree walks from the root to its leaf; every split on feature k
        it passes adds ``<value(child taken) - value(node), y - value(root)>`` to feature k,
        where values are the tree's in-bag node values (class fractions, y one-hot, for
        classifiers; mean targets for regressors). A tree's importance of k is the weighted
        mean of these sums over its out-of-bag rows. Summed over the training rows instead, the
        same sum is the tree's mean decrease in impurity (Gini or squared error, not
        normalised; for a Poisson forest still the squared-error decrease, not the deviance's
        of ``feature_importances_``); on rows the tree did not see, splits that only fitted
        noise add about zero or less, so features with many split points (continuous, ID-like,
        high-cardinality) lose the bias of ``feature_importances_``. The importances are not
        normalised and can be negative. One pass of every tree over its out-of-bag rows (the
        cost of ``oob_score``); the sums are exact, so the figures do not depend on the cluster
        or on how the rows are cut into blocks. See docs/algorithms.md, section 11.

        Parameters
        ----------
        X, y, sample_weight :
            The training data, rows in the same order as in ``fit``: a tree's out-of-bag rows
            are found again from their row ids, never stored. Rows are weighted by
            ``sample_weight`` (times the class weights of ``class_weight``, except
            ``"balanced_subsample"``, which weighs in-bag rows only).

        Returns
        -------
        Bunch with ``importances_mean`` and ``importances_std`` (n_features,), the mean and
        standard deviation over trees, and ``importances`` (n_features, n_estimators), each
        tree's importances (0 for a tree without out-of-bag rows).
        """
        self._needs_one_output("oob_impurity_importance")
        with self._training_blocks(X, y, sample_weight, "oob_impurity_importance") as (
            client,
            draws,
            lam,
        ):
            shards = self._tree_shards
            if shards is None:
                every_tree = [e.tree_ for e in self.estimators_]
                tables = [
                    forest_task(client, NodeTable(part.trees or every_tree))
                    for part in self._client_parts()
                ]
            else:
                tables = map_parts(shards.parts, node_table)
            first_trees = [first for _, first in self._part_draws()]
            importances = reductions.oob_impurity_importance(
                client, draws, tables, first_trees, lam, hasattr(self, "classes_")
            )
        return _importance_bunch(importances)

    @contextlib.contextmanager
    def _training_blocks(self, X, y, sample_weight, method):
        """The training data binned on the cluster again, for a reduction over each tree's
        out-of-bag rows: yields ``(client, draws, lam)``, draws the blocks and seed of each of
        the forest's parts (``reductions.Draws``: the rows binned once for each fit's bins),
        lam the trees' sampling rate. ``method`` names the caller in the errors: the forest
        must sample rows, and X must have the training rows (a merged forest's: of each fit,
        with distinct seeds)."""
        check_is_fitted(self, "estimators_")
        if not self.samples_rows():
            raise ValueError(f"{method} needs bootstrap=True or max_samples")
        sources = sources_of(self)
        _check_distinct_seeds(sources, method)
        with client_for(self._cluster()) as client:
            # One cut of the rows for every fit's binning (the parts' blocks go side by side).
            n_blocks = self.n_blocks or default_n_blocks(client)
            binned: dict[int, Any] = {}
            for k, source in enumerate(sources):
                if id(source.bin_mapper) not in binned:
                    binned[id(source.bin_mapper)] = prepare(
                        client,
                        X,
                        y,
                        sample_weight,
                        mapper=source.bin_mapper,
                        is_classifier=hasattr(self, "classes_"),
                        class_weight=getattr(self, "class_weight", None),
                        n_blocks=n_blocks,
                    )
                data = binned[id(source.bin_mapper)]
                if data.n_rows != source.n_rows:
                    fit = f"fit {k} of this merged forest" if len(sources) > 1 else "the forest"
                    raise ValueError(
                        f"X has {data.n_rows} rows but {fit} was fitted on {source.n_rows}: "
                        "pass the training data"
                    )
                if not np.array_equal(data.offsets, binned[id(sources[0].bin_mapper)].offsets):
                    raise ValueError(f"{method}: the rows were cut in other blocks for fit {k}")
            yield (
                client,
                self._draws(binned),
                sampling_rate(self.bootstrap, self.max_samples, data.n_rows),
            )

    def _part_draws(self) -> list[tuple[Source, int]]:
        """For each of the forest's parts (``_parts_on``), in tree order: the fit whose trees
        it holds and the index of its first tree in that fit (what its counts are keyed by)."""
        sources = sources_of(self)
        shards = self._tree_shards
        if shards is None:  # one part, or a merged forest's one part a fit
            return [(source, 0) for source in sources]
        starts = np.cumsum([0] + [source.n_trees for source in sources])
        out = []
        for first in shards.first_trees[:-1]:
            k = int(np.searchsorted(starts, first, side="right")) - 1
            out.append((sources[k], int(first - starts[k])))
        return out

    def _draws(self, binned: dict[int, Any]) -> Draws:
        """The ``reductions.Draws`` of the forest's parts, ``binned`` the training blocks
        binned with each of its fits' bin mappers (by ``id``)."""
        sources = [source for source, _ in self._part_draws()]
        return Draws([binned[id(s.bin_mapper)] for s in sources], [s.seed for s in sources])

    def to_sklearn(self) -> BaseEstimator:
        """The equivalent scikit-learn forest (``RandomForestClassifier``, ``ExtraTreesRegressor``,
        ...), its ``estimators_`` holding ``sklearn.tree`` trees with our nodes: it predicts as
        this forest on float32-representable input, for shap's ``TreeExplainer``, skl2onnx,
        treelite or ``sklearn.inspection``. Refuses categorical features and
        ``aggregation="median"`` (``ValueError``); ``voting="hard"`` exports one-hot votes, a
        quantile forest its mean prediction. See ``dasktrees.sklearn_export.forest_to_sklearn``."""
        # Imported here: scikit-learn's forests and trees would slow importing dasktrees.
        from ..export.scikit_learn import forest_to_sklearn

        self._needs_client_trees("to_sklearn")
        self._needs_one_fit("to_sklearn")
        return forest_to_sklearn(self)

    @uses_n_jobs
    def shap_values(self, X: Data) -> np.ndarray | da.Array:
        """Exact path-dependent TreeSHAP values (Lundberg et al. 2020): each feature's share of
        each row's prediction (``dasktrees.treeshap``; docs/forests.md).

        A row's values plus ``shap_expected_value_`` sum to its prediction: the mean of the
        trees for regressors (a quantile forest's mean, not its quantiles), the class
        probabilities of ``predict_proba`` for classifiers (with ``voting="hard"``, the shares
        of the trees' votes). Categorical splits and missing values count as prediction routes
        them. Dask input: one task per block, the trees sent once.

        Parameters
        ----------
        X : array-like or dask collection, shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_features) for regressors and (n_samples, n_features,
        n_classes) for classifiers; a dask array for dask input.
        """
        hard = self._explained_voting()
        n_values = self._n_values()
        shards = self._tree_shards
        if shards is None:
            table = treeshap.explained_table([est.tree_ for est in self.estimators_], hard)
            parts, max_depth = [table], table.max_depth
        else:
            parts, max_depth = map_parts(shards.parts, explained, hard), shards.max_depth
        op = ShapValues(self.n_estimators_, max_depth, self.n_features_in_, n_values)
        flat = self._by_rows(X, op, self.n_features_in_ * n_values, parts=parts)
        values = treeshap.shaped(flat, self.n_features_in_, n_values, hasattr(self, "classes_"))
        if hasattr(self, "classes_") and self._n_outputs() > 1:
            return class_outputs.column_blocks(values, self.n_classes_)
        return values

    @property
    def shap_expected_value_(self) -> float | np.ndarray:
        """What the SHAP values add to: the forest's prediction with no feature known (each
        tree's leaf values weighted by their training cover, averaged over trees); a float for
        regressors, ndarray (n_classes,) for classifiers."""
        hard = self._explained_voting()
        shards = self._tree_shards
        if shards is None:
            trees = [est.tree_ for est in self.estimators_]
            per_tree = treeshap.explained_table(trees, hard).expected_values()
        else:
            per_tree = np.concatenate(
                shards.client.gather(map_parts(shards.parts, expected_values, hard))
            )
        expected = per_tree.mean(axis=0)
        if hasattr(self, "classes_") and self._n_outputs() > 1:
            return class_outputs.column_blocks(expected, self.n_classes_)
        several = hasattr(self, "classes_") or self._n_outputs() > 1
        return expected if several else float(expected[0])

    def _set_oob_on(self, X: Data, y: Data, sample_weight: Data | None = None) -> None:
        """The out-of-bag results (``oob_score_``, ``oob_curve_``, ``oob_decision_function_``
        or ``oob_prediction_``) of the fitted trees, on their training rows X, y: what
        ``merge_forests(..., X=X, y=y)`` computes for the merged forest."""
        with self._training_blocks(X, y, sample_weight, "out-of-bag results") as (
            client,
            draws,
            lam,
        ):
            self._set_oob(client, draws, lam)

    def _explained_voting(self):
        """Whether the trees' SHAP values explain hard votes; refuses a median of the trees."""
        check_is_fitted(self, "estimators_")
        if getattr(self, "aggregation", "mean") != "mean":
            raise ValueError(
                'SHAP values need aggregation="mean": a median of the trees is not a sum of '
                "their contributions"
            )
        return getattr(self, "voting", "soft") == "hard"

    def __sklearn_clone__(self):
        """A clone shares the client (a client cannot be copied); other parameters are cloned
        as scikit-learn does."""
        params = self.get_params(deep=False)
        client = params.pop("client")
        return type(self)(client=client, **{k: clone(v, safe=False) for k, v in params.items()})

    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted forest to the model directory ``path``; ``dasktrees.load`` reads it.

        Parameters
        ----------
        path : str or os.PathLike
            Directory to create (an existing model directory there is replaced). The format,
            a JSON manifest and ``.npz`` arrays, is described in docs/models.md; the client and
            the per-row out-of-bag estimates are not saved. A forest kept on the workers is
            saved from them, each shard a model directory of its own written by its worker
            (``path`` must be a directory the workers see); a merged forest (``merge_forests``)
            is saved so too, each fit's trees with its own bins and seed.
        """
        if self._tree_shards is not None or self._merged_sources() is not None:
            save_sharded(self, path)
        else:
            save_model(self, path)

    def __getstate__(self):
        if self._tree_shards is not None:
            # Its trees are futures of one client's cluster: a pickle could not hold them.
            raise TypeError(
                'a forest kept on the workers (tree_storage="workers") cannot be pickled: '
                "call gather_trees() first, or save() it"
            )
        state = dict(self.__dict__)
        # Packed again on unpickling, from the trees: the packed tables would add a third to
        # the pickle, and packing them takes a fraction of unpickling the trees.
        state.pop("_forest", None)
        state.pop("_parts", None)
        state["client"] = None  # a client is never pickled
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if hasattr(self, "estimators_"):
            self._keep_on_client(self.estimators_)  # a pickle holds the trees themselves

    # ---- prediction ----------------------------------------------------------------------------

    @uses_n_jobs
    def apply(self, X: Data) -> np.ndarray | da.Array:
        """The leaf each sample reaches in each tree, as scikit-learn's forests give it.

        Parameters
        ----------
        X : array-like or dask collection of shape (n_samples, n_features)

        Returns
        -------
        X_leaves : ndarray of int64, shape (n_samples, n_estimators)
            ``X_leaves[i, t]`` is the node id (``estimators_[t].tree_``'s numbering, as its
            ``apply`` gives it) of the leaf sample i reaches in tree t. A dask array for dask
            input, one task per block.
        """
        parts = None
        if self._tree_shards is None and self._merged_sources() is None:
            # The node id of each packed leaf, as its tree numbers it: what leaf rows map to.
            leaf_ids = np.concatenate([e.tree_.leaf_nodes() for e in self.estimators_])
            parts = [ForestPart(0, self.forest_, leaf_ids=leaf_ids)]
        return self._by_rows(X, Leaves(), self.n_estimators_, np.int64, parts)

    @uses_n_jobs
    def decision_path(self, X: ArrayLike) -> tuple[sparse.csr_matrix, np.ndarray]:
        """The nodes each sample goes through in each tree, as scikit-learn's forests give them.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            In memory (numpy or pandas): the indicator is a scipy matrix. For a dask
            collection, ``apply`` gives the leaves lazily, and each tree's path follows from
            its leaf (``estimators_[t].tree_.paths_to``).

        Returns
        -------
        indicator : scipy.sparse.csr_matrix of shape (n_samples, n_nodes)
            1 where the sample goes through the node; the columns of tree t are
            ``indicator[:, n_nodes_ptr[t]:n_nodes_ptr[t + 1]]``, in its node numbering.
        n_nodes_ptr : ndarray of int64, shape (n_estimators + 1,)
        """
        self._needs_client_trees("decision_path")
        if is_dask_collection(X):
            raise TypeError(
                "decision_path needs X in memory (numpy or pandas): its sparse indicator is "
                "built on the client; for a dask collection use apply, which is lazy"
            )
        leaves = self.apply(X)
        # ``expanded``: a tree kept compact as shipped is expanded for the call, not kept so.
        paths = [
            est.tree_.expanded().paths_to(leaves[:, t]) for t, est in enumerate(self.estimators_)
        ]
        n_nodes_ptr = np.zeros(len(paths) + 1, dtype=np.int64)
        np.cumsum([path.shape[1] for path in paths], out=n_nodes_ptr[1:])
        return sparse.hstack(paths, format="csr"), n_nodes_ptr

    def _votes(self, X, voting):
        """Mean vote per row: ndarray for local X, dask array for dask X."""
        n_values = self._n_values()
        return self._by_rows(X, MeanVote(voting, self.n_estimators_), n_values)

    def _by_rows(self, X, op, n_columns, dtype=np.float64, parts=None):
        """A row op (``forest.parts``) over X, wherever the trees are: (n_rows, n_columns) of
        ``dtype``, an ndarray for local X, a dask array for dask X.

        ``parts``: what the op takes as parts, when not the forest's own (the client's forest
        as one ``ForestPart``, or the shards' futures). Trees on the client: through
        ``_apply_by_rows``. Trees on the workers: each block of rows goes through the shards
        where they are (``shards.rows_through_shards``); local X is encoded here and sent in
        blocks.
        """
        check_is_fitted(self, "estimators_")
        shards = self._tree_shards
        if shards is None:
            parts = parts or self._client_parts()
            return self._apply_by_rows(X, partial(run_in_parts, op, parts), n_columns, dtype)
        parts = parts or shards.parts
        model = _shared_model(shards.client, (self.bin_mapper_, op))
        if isinstance(X, (dd.DataFrame, da.Array)):
            self._check_dask_input(X)
            if isinstance(X, dd.DataFrame):
                blocks, lengths = list(X.to_delayed()), [np.nan] * X.npartitions
            else:
                X = X.rechunk({1: -1})
                blocks, lengths = list(X.to_delayed()[:, 0]), X.chunks[0]
            if isinstance(model, tuple):  # one key of the graph, which each worker fetches once
                model = dask.delayed(model, pure=False)
            return rows_through_shards(
                parts, shards.runs, blocks, lengths, model, op.chained, n_columns, dtype
            )
        X = check_2d(X)
        check_predict_columns(self, X)
        return by_row_batches(
            X,
            lambda rows: local_rows_through_shards(
                parts, shards.runs, self.bin_mapper_.encode(rows), model, op.chained
            ),
        )

    def _check_dask_input(self, X):
        if X.ndim != 2:
            raise ValueError(f"X must be 2-d (n_samples, n_features), got shape {X.shape}")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input"
            )

    def _parts_on(self, client):
        """The forest's parts as futures on ``client``'s cluster, in tree order: the shards,
        or the client's forest sent as one part (``reductions.forest_task``; a merged
        forest's, one part a fit)."""
        if self._tree_shards is not None:
            return self._tree_shards.parts
        return [forest_task(client, part) for part in self._client_parts()]

    def _shared_with_workers(self, model):
        """``model`` as every block task of a prediction should receive it.

        On a distributed cluster (the estimator's client, else the default one) it is
        broadcast once, and the blocks take the future: embedded in the graph, it travelled
        with every block task, which was much slower (measured in docs/benchmarks.md). Without
        a cluster, Dask's local schedulers share memory and the object itself is passed.
        """
        client = find_client(self.client)
        if client is None:
            return model
        # In a list: scatter would send a tuple's items one by one.
        return client.scatter([model], broadcast=True, hash=False)[0]

    def _apply_by_rows(self, X, rows_fn, n_columns, dtype=np.float64):
        """``rows_fn(encoded_rows, parallel)`` -> (n_rows, n_columns) of ``dtype``, over any input.

        Local X: one call, with the parallel kernels. Dask X: a dask array, one task per block
        (dataframes partition by partition, so categorical columns keep their dtype); lazy, with
        chunk lengths unknown until computed for dataframes.
        """
        check_is_fitted(self, "estimators_")
        if isinstance(X, (dd.DataFrame, da.Array)):
            self._check_dask_input(X)
            model = self._shared_with_workers((self.bin_mapper_, rows_fn))
        if isinstance(X, dd.DataFrame):
            meta = pd.DataFrame(np.empty((0, n_columns), dtype=dtype), columns=range(n_columns))
            return X.map_partitions(_frame_rows, model, meta=meta).to_dask_array()
        if isinstance(X, da.Array):
            X = X.rechunk({1: -1})
            return X.map_blocks(_array_rows, model, dtype=dtype, chunks=(X.chunks[0], (n_columns,)))
        X = check_2d(X)
        check_predict_columns(self, X)
        return by_row_batches(X, lambda rows: rows_fn(self.bin_mapper_.encode(rows), True))


class TreesOnWorkers(Sequence):
    """``estimators_`` of a forest kept on the workers: its length is known on the client, and
    a tree asked for (by index, slice or iteration) is brought from its shard, one at a time,
    and not kept. Iterating brings every tree, one after the other: ``gather_trees`` brings
    them all at once and keeps them.

    Parameters
    ----------
    shards : TreeShards
    wrap : callable
        Makes the single-tree estimator of a tree: the ``_wrap`` of the forest's
        ``_fitted_skeleton`` (the forest's own would hold the forest, and with it the shards,
        in a reference cycle).
    """

    def __init__(self, shards: TreeShards, wrap):
        self._shards = shards
        self._wrap = wrap

    def __len__(self) -> int:
        return self._shards.n_trees

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[t] for t in range(*index.indices(len(self)))]
        n_trees, t = len(self), operator.index(index)
        if not -n_trees <= t < n_trees:
            raise IndexError(f"tree index {t} out of range for {n_trees} trees")
        return self._wrap(gather_tree(self._shards, t % n_trees))

    def __repr__(self) -> str:
        return f"<{len(self)} trees on the workers>"


# A model of a prediction on the shards (bin mapper, row op) up to this size travels with its
# tasks; a larger one (the jackknife's Gram matrix of many trees) is broadcast ahead of them.
_SHARED_MODEL_BYTES = 1 << 20


def _shared_model(client, model):
    """``model`` as the tasks of a prediction on the shards take it: itself, to travel with them
    (a broadcast ahead of them costs a round trip to every worker, even to predict one row),
    or, when large, a future broadcast to every worker (a large graph is slow to send, and
    distributed warns about it)."""
    if len(pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)) <= _SHARED_MODEL_BYTES:
        return model
    # In a list: scatter would send a tuple's items one by one.
    return client.scatter([model], broadcast=True, hash=False)[0]


def _importance_bunch(importances):
    """Importances (n_features, n_draws) as scikit-learn's ``permutation_importance`` returns
    them: mean and std over the draws (trees, or trees x repeats), and the draws."""
    return Bunch(
        importances_mean=importances.mean(axis=1),
        importances_std=importances.std(axis=1),
        importances=importances,
    )


def _check_distinct_seeds(sources: list[Source], method: str) -> None:
    """Refuse out-of-bag results of a merged forest whose fits share a seed: they drew the
    same rows, tree for tree (the same trees, if fitted on the same rows)."""
    seeds = [source.seed for source in sources]
    for k, seed in enumerate(seeds):
        if seed in seeds[:k]:
            raise ValueError(
                f"{method} of a merged forest need its fits drawn with distinct seeds: fits "
                f"{seeds.index(seed)} and {k} have the same (fit them with other random_state)"
            )


def _target_columns(y) -> int:
    """The columns of a target ``y`` as given (numpy, pandas or dask), before it is checked:
    1 for a 1-d y or one column."""
    if isinstance(y, (pd.DataFrame, dd.DataFrame)):
        return len(y.columns)
    shape = y.shape if is_dask_collection(y) else np.asarray(y).shape
    return int(shape[1]) if len(shape) == 2 else 1


def _scored_rows(client, data, decision):
    """Targets and out-of-bag decisions of the rows with an out-of-bag vote, on the client
    (what a callable ``oob_score`` needs; this gathers two values per row)."""
    y_true = np.concatenate(client.gather([client.submit(lambda b: b.y, p) for p in data.parts]))
    if isinstance(decision, da.Array):  # backed by futures of this client
        decision = client.compute(decision, sync=True)
    scored = ~np.isnan(decision).any(axis=1)
    return y_true[scored], decision[scored]


# What ``_prune_on_oob`` sets.
PRUNE_RESULTS = ("prune_", "oob_prune_curve_", "oob_prune_pinball_")

# What ``_set_oob`` sets (a quantile forest's too).
OOB_RESULTS = (
    "oob_score_",
    "oob_curve_",
    "oob_decision_function_",
    "oob_prediction_",
    "oob_interval_scores_",
    "oob_quantiles_",
    "oob_coverage_",
)


def _where(client) -> str:
    """Where a fit's tasks run, as its log says it."""
    if is_in_process(client):
        return f"{client.n_threads} threads of this process"
    return f"the cluster at {client.scheduler.address}"


def _most_pruned_best(scores):
    """The index of the largest finite score, the last (the most pruned) of equal ones; 0 (no
    pruning) without a finite score (no row out of bag)."""
    finite = np.isfinite(scores)
    return int(np.flatnonzero(scores == scores[finite].max())[-1]) if finite.any() else 0


def _plus_minus(values, q):
    return np.stack([values - q, values + q], axis=1)


def _log_proba(proba):
    """``log_proba`` of a forest's probabilities, numpy or dask."""
    if isinstance(proba, da.Array):
        # What ``proba.map_blocks`` calls; dask types that method as a functools wrapper that
        # mypy cannot call as a method.
        return da.map_blocks(log_proba, proba, dtype=proba.dtype)
    return log_proba(proba)


def _classes_by_column(decision, n_outputs):
    """Out-of-bag decisions of k class columns, (n_samples, k * K) in blocks, as scikit-learn's
    (n_samples, K, k), K the most classes of a column (a column of fewer has zeros for the
    others); numpy or dask."""
    size = decision.shape[1] // n_outputs
    if isinstance(decision, da.Array):
        return decision.reshape((decision.shape[0], n_outputs, size)).transpose((0, 2, 1))
    return decision.reshape(len(decision), n_outputs, size).transpose(0, 2, 1)


def _most_probable(classes, proba):
    return classes.take(np.argmax(proba, axis=1))


# Inside Dask tasks the kernels run without threads (see PackedForest.vote).
def _array_rows(block, model):
    mapper, rows_fn = model
    return rows_fn(mapper.encode(block), False)


def _frame_rows(part, model):
    mapper, rows_fn = model
    return pd.DataFrame(rows_fn(mapper.encode(part), False), index=part.index)


# ---- the estimators ----------------------------------------------------------------------------

FOREST_DOC = """
    Each tree is grown on Poisson(1) bootstrap counts of the rows (``bootstrap=True``), or
    Poisson(max_samples / n) counts, keyed by (random_state, tree, global row id), as one Dask task
    per batch of trees. Inputs may be numpy, pandas, dask.array or dask.dataframe; predicting on a
    dask collection returns a dask collection.

    Parameters
    ----------
    n_estimators : int or "auto", default=100
        "auto": trees are grown in waves of 32 until the out-of-bag estimate of the part of the
        forest's squared error (Brier score for classifiers) that comes from having finitely
        many trees is at most ``tol`` times the error of predicting the mean (more trees could
        raise R² or the Brier skill score by at most ``tol``), or ``max_n_estimators`` trees
        (``dasktrees.distributed.convergence``; docs/forests.md). Needs the bootstrap or
        ``max_samples``; the same ``random_state`` gives the same trees on any cluster.
    max_n_estimators : int, default=1000
        The most trees ``n_estimators="auto"`` grows.
    tol : float in (0, 1), default=0.005
        ``n_estimators="auto"`` stops when more trees would lower the error by at most this
        share of the error of predicting the mean.
    criterion, max_depth, min_samples_split, min_samples_leaf, min_weight_fraction_leaf,
    max_leaf_nodes, min_impurity_decrease, max_bins, categorical_features :
        As for the single trees.
    min_samples_category : int >= 1, default=5
        Categories with fewer rows than this in a node (distinct rows: a row the bootstrap draws
        twice counts once) are pooled with the node's missing values, as for the single trees,
        whose default is 1 (docs/trees.md: measured on twelve real tables).
    categorical_order : {"node", "tree"}, default="tree"
        Categories ordered once per tree by its in-bag rows ("tree"), or by each node's rows
        ("node", the single trees' default); as for the single trees.
    ccp_alpha : float >= 0, default=0.0
        Minimal cost-complexity pruning of each tree, in the task that grows it, on its own
        (bootstrap-weighted) rows: as for the single trees.
    max_features : {"sqrt", "log2"}, int, float or None
        Features drawn at each node.
    max_features_tree : {"sqrt", "log2"}, int, float or None, default=None
        Features a tree may use at all, drawn once per tree (random subspaces); None: all.
    bootstrap : bool, default=True
    max_samples : int or float, default=None
        Expected rows drawn per tree (Poisson counts with mean max_samples / n).
    oob_score : bool or callable, default=False
        Compute out-of-bag estimates; a callable ``score(y_true, y_pred)`` replaces the
        default accuracy / R² (and gathers y and the predictions to the client).
    prune : None, "oob" or "oob:<family>", default=None
        "oob": grow the trees as the other parameters say, then cut every tree to the size
        that gives the forest its best out-of-bag score, in the same fit (docs/forests.md,
        "Trees pruned on their out-of-bag rows"): the forest is scored with the nodes holding
        at most 2**-k of their tree's training weight made leaves, for every k, in one pass
        over the out-of-bag rows, and the trees are cut at the best (``prune_``,
        ``oob_prune_curve_``). "oob:size" is the same; "oob:depth", "oob:alpha" and
        "oob:leaves" choose within another family of sizes (depth; cost-complexity alpha
        relative to the root's impurity; leaves in best-first order). Needs ``bootstrap=True``
        or ``max_samples``. The out-of-bag score of the cut forest is optimistic by the choice
        (measured in docs/benchmarks.md).
    random_state : int, RandomState or None
    warm_start : bool, default=False
        Keep the fitted trees and grow only the missing ones (same data expected).
    client : distributed.Client, default=None
        The cluster to use; None: the default client if there is one, else threads of this
        process (no cluster is started).
    trees_per_task : int, default=None
        Trees grown by one task; None: about four tasks per worker, in sampled mode at most
        that, as many as the workers' memory fits (a task holds its trees' sampled rows until
        it ends).
    n_blocks : int, default=None
        Blocks to cut numpy / pandas input into; None: one per worker. Dask input keeps its
        partitions.
    mode : {"auto", "replicated", "sampled", "distributed"}, default="auto"
        How tree tasks get their rows (see docs/forests.md): every binned block; only the rows
        each tree draws, extracted where the blocks live; or, for trees on more rows than a
        worker holds, the top of each tree split from histograms summed across the blocks and
        each node small enough for a task grown there from its gathered rows (not with
        ``class_weight="balanced_subsample"``). "auto" samples when trees draw under half the
        rows, and otherwise picks the first mode whose tree task, once a worker thread, fits in
        60 % of the smallest worker memory limit (for a worker without one, or this process
        without a client, what it can reach: its memory and its share of its host's available
        memory): replicated, sampled, distributed. Every mode grows the same trees.
    tree_storage : {"client", "workers", "auto"}, default="client"
        Where the fitted trees are kept (docs/forests.md, "Forests kept on the workers"): in
        this process; or on the workers, in shards (the trees of a tree task, or of a run of
        them, in a worker's memory), where predictions, ``apply`` and the out-of-bag estimates
        go to them, the client keeping only small summaries; ``gather_trees()`` brings them
        home. "auto": on the workers when the trees take more than a tenth of this machine's
        memory (a quantile forest's leaf targets, made after, not counted: they take about as
        much again). "workers" needs a Dask cluster.

    Attributes
    ----------
    estimators_ : list of DecisionTreeClassifier or DecisionTreeRegressor
        With the trees on the workers, a sequence that brings a tree from its shard when
        indexed (``len`` needs nothing).
    tree_storage_ : {"client", "workers"}
        Where the trees are.
    classes_, n_classes_ : classifiers only
    n_features_in_, feature_names_in_, max_features_ :
    feature_importances_, feature_importances_std_ : ndarray of shape (n_features,)
        Mean decrease in impurity, mean (summing to one) and standard deviation over the trees
        that split.
    oob_score_, oob_curve_ : float and ndarray of shape (n_estimators,)
        With ``oob_score``: accuracy / R² of the out-of-bag votes, and the out-of-bag error
        (misclassification rate / mean squared error) after 1, 2, ... trees.
    oob_decision_function_ (classifiers), oob_prediction_ (regressors) :
        Out-of-bag mean vote per row (NaN for a row no tree left out); a dask array when the
        input was a dask collection.
    prune_ : dict
        With ``prune``: the size chosen, as the parameter it stands for
        (``{"min_split_fraction": 0.0039}``: nodes holding at most that share of their tree's
        training weight are leaves; 0 and inf mean no pruning); the trees are cut to it.
    oob_prune_curve_ : ndarray of shape (n_sizes, 2)
        With ``prune``: each size scored (the parameter's value, from no pruning to most) and
        the forest's out-of-bag score (accuracy / R²) with its trees cut to it.
    mode_ : str
        The mode the fit used.
    n_estimators_ : int
        The number of trees.
    convergence_ : ndarray of shape (n_checks, 2)
        With ``n_estimators="auto"``: after each wave, the trees and the estimated excess error
        of that many trees over infinitely many, as a share of the error of predicting the mean.
"""

# The regressors' criterion, in their docstrings after FOREST_DOC (the quantile forests' too).
REGRESSION_CRITERION_DOC = """
    criterion : {"squared_error", "poisson"}, default="squared_error"
        The squared error, or the half Poisson deviance (counts and rates: y must be
        non-negative with a positive sum; a split never leaves a child of mean 0)."""


class _ForestClassifierMixin(ClassifierMixin):
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # several class columns ("Several target columns"), multilabel ones among them
        tags.target_tags.multi_output = True
        tags.classifier_tags.multi_label = True
        return tags

    @uses_n_jobs
    def fit(self, X: Data, y: Data, sample_weight: Data | None = None) -> BaseForest:
        """Grow the forest on X and class labels y (numpy, pandas or dask)."""
        return self._fit(X, y, sample_weight, is_classifier=True)

    def _voting_code(self):
        return SOFT if self.voting == "soft" else HARD

    @uses_n_jobs
    def predict_proba(self, X: Data) -> Any:
        """Mean class probability over trees (soft) or share of tree votes (hard): (n_samples,
        n_classes), or on k class columns a list of k such arrays (as scikit-learn's)."""
        proba = self._votes(X, self._voting_code())
        if self._n_outputs() > 1:
            return class_outputs.column_blocks(proba, self.n_classes_)
        return proba

    @uses_n_jobs
    def predict_log_proba(self, X: Data) -> Any:
        """Logarithm of ``predict_proba`` (minus infinity where it is 0, without a warning)."""
        proba = self.predict_proba(X)
        if isinstance(proba, list):
            return [_log_proba(p) for p in proba]
        return _log_proba(proba)

    @uses_n_jobs
    def predict(self, X: Data) -> np.ndarray | da.Array:
        """The class with the largest mean probability (soft) or most votes (hard): (n_samples,),
        or (n_samples, k) on k class columns (of the first column's classes' dtype, as
        scikit-learn's)."""
        if self._n_outputs() > 1:
            votes = self._votes(X, self._voting_code())
            if isinstance(votes, da.Array):
                return da.map_blocks(
                    partial(class_outputs.column_labels, classes=self.classes_),
                    votes,
                    chunks=(votes.chunks[0], (self._n_outputs(),)),
                    dtype=self.classes_[0].dtype,
                )
            return class_outputs.column_labels(votes, self.classes_)
        proba = self.predict_proba(X)
        if isinstance(proba, da.Array):
            # da.map_blocks, not the method: as in predict_log_proba. The classes only go with
            # the tasks (a lambda of self would take the whole estimator with each).
            return da.map_blocks(
                partial(_most_probable, self.classes_),
                proba,
                drop_axis=1,
                dtype=self.classes_.dtype,
            )
        return _most_probable(self.classes_, proba)

    def _set_oob(self, client, draws, lam):
        decision, score, curve, _ = oob_estimates(
            client, draws, self._parts_on(client), lam, self._voting_code(), True
        )
        n_outputs = self._n_outputs()
        # k class columns: (n_samples, K, k), as scikit-learn's (each column a block of K)
        self.oob_decision_function_ = (
            decision if n_outputs == 1 else _classes_by_column(decision, n_outputs)
        )
        self.oob_curve_ = curve
        self.oob_score_ = score
        if callable(self.oob_score):
            y_true, decision = _scored_rows(client, draws.rows, decision)
            if n_outputs == 1:
                labels = self.classes_.take(y_true.astype(np.int64))
                predicted = self.classes_.take(np.argmax(decision, axis=1))
            else:
                labels = np.column_stack(
                    [c.take(y_true[:, o].astype(np.int64)) for o, c in enumerate(self.classes_)]
                )
                predicted = class_outputs.column_labels(decision, self.classes_)
            self.oob_score_ = self.oob_score(labels, predicted)


class _ForestRegressorMixin(RegressorMixin):
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # several target columns ("Several target columns")
        return tags

    @uses_n_jobs
    def fit(self, X: Data, y: Data, sample_weight: Data | None = None) -> BaseForest:
        """Grow the forest on X and numeric targets y (numpy, pandas or dask)."""
        return self._fit(X, y, sample_weight, is_classifier=False)

    @uses_n_jobs
    def predict(
        self, X: Data, return_std: bool = False
    ) -> np.ndarray | da.Array | tuple[np.ndarray | da.Array, np.ndarray | da.Array]:
        """Mean (or, with aggregation="median", median) of the trees' predictions.

        Parameters
        ----------
        X : array-like or dask collection, shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the standard error of the mean prediction: the bias-corrected
            infinitesimal jackknife of Wager, Hastie and Efron (2014) (``dasktrees.variance``),
            from the trees' bootstrap counts, recomputed, not stored. Needs ``bootstrap=True``
            without ``max_samples`` and ``aggregation="mean"``; with few trees it is noisy
            (its Monte-Carlo bias is removed, its variance is not).

        Returns
        -------
        prediction : ndarray (n_samples,), or (n_samples, k) for a forest fitted on k target
            columns; a dask array for dask input
        std : the same, with ``return_std=True`` (one target column only)
        """
        if return_std:
            self._needs_one_output("return_std=True")
            return self._mean_and_std(X)
        if self.aggregation == "mean":
            votes = self._votes(X, SOFT)
            return votes if self._n_outputs() > 1 else votes[:, 0]
        return self._by_rows(X, TreeValues(median_of_trees), 1)[:, 0]

    def _mean_and_std(self, X):
        check_is_fitted(self, "estimators_")
        sources = sources_of(self)
        _check_distinct_seeds(sources, "return_std=True")
        if len({source.n_rows for source in sources}) > 1:
            raise ValueError(
                "return_std=True on a merged forest needs its fits on the same training rows: "
                f"they were fitted on {sorted({s.n_rows for s in sources})} rows"
            )
        if not self.bootstrap or self.max_samples is not None:
            raise ValueError(
                "return_std=True needs the bootstrap: bootstrap=True and max_samples=None"
            )
        if self.aggregation != "mean":
            raise ValueError('return_std=True needs aggregation="mean"')
        fits = [(source.seed, source.n_trees) for source in sources]
        gram = centred_count_gram(fits, 1.0, sources[0].n_rows)
        out = self._by_rows(X, TreeValues(JackknifeStd(gram, self._n_rows)), 2)
        return out[:, 0], out[:, 1]

    def _set_oob(self, client, draws, lam):
        decision, score, curve, scores = oob_estimates(
            client, draws, self._parts_on(client), lam, SOFT, False
        )
        several = self._n_outputs() > 1  # k target columns: (n_rows, k) predictions
        self.oob_prediction_ = decision if several else decision[:, 0]
        self.oob_curve_ = curve
        self.oob_score_ = score
        self.oob_interval_scores_ = scores
        if callable(self.oob_score):
            y_true, decision = _scored_rows(client, draws.rows, decision)
            self.oob_score_ = self.oob_score(y_true, decision if several else decision[:, 0])

    @uses_n_jobs
    def predict_interval(self, X: Data, coverage: float = 0.9) -> np.ndarray | da.Array:
        """Prediction intervals calibrated on the out-of-bag rows: split conformal prediction
        with each training row's out-of-bag prediction in place of a held-out set
        (``dasktrees.conformal``; docs/forests.md, "Intervals with a coverage level").

        The regressors' interval is the mean prediction plus or minus Q, the
        ceil(coverage (n + 1))-th smallest absolute out-of-bag residual of the n training rows
        with one; the quantile forests' is the band between the lowest and highest
        ``default_quantiles`` widened by Q on each side, Q the same order statistic of how far
        the training targets fall outside their out-of-bag band (conformalized quantile
        regression: adaptive, wider where the leaves' targets spread). The coverage of a new
        row from the training rows' distribution is
        close to ``coverage`` (the out-of-bag predictions come from a third of the trees: the
        guarantee of split conformal prediction holds approximately; measured in
        docs/benchmarks.md).

        Parameters
        ----------
        X : array-like or dask collection, shape (n_samples, n_features)
        coverage : float in (0, 1), default=0.9

        Returns
        -------
        ndarray of shape (n_samples, 2), lower and upper bounds (infinite when there are too
        few out-of-bag rows for the coverage); a dask array for dask input.
        """
        coverage = check_coverage(coverage)
        self._needs_one_output("predict_interval")
        scores = getattr(self, "oob_interval_scores_", None)
        if scores is None:
            raise ValueError(
                "predict_interval is calibrated on the out-of-bag rows: fit the forest with "
                "oob_score=True (and bootstrap=True or max_samples)"
            )
        return self._interval(X, scores.threshold(coverage))

    def _interval(self, X, q):
        """The bounds for a conformity threshold ``q``: the mean prediction plus or minus q
        (the out-of-bag residuals are the mean's, whatever ``aggregation``)."""
        mean = self._votes(X, SOFT)[:, 0]
        if isinstance(mean, da.Array):  # block by block: a dataframe's lengths are unknown
            chunks = (mean.chunks[0], (2,))
            return da.map_blocks(_plus_minus, mean, q, new_axis=1, chunks=chunks, dtype=np.float64)
        return _plus_minus(mean, q)


def keep_init_arguments(estimator, arguments):
    """Keep each argument of an ``__init__`` as the attribute of its name, as scikit-learn's
    ``get_params`` reads the parameters back (and an ``__init__`` does nothing else).

    Parameters
    ----------
    estimator : BaseForest
    arguments : dict
        ``locals()`` as the ``__init__`` starts: its arguments, ``self`` included.
    """
    for name, value in arguments.items():
        if name != "self":
            setattr(estimator, name, value)


class RandomForestClassifier(_ForestClassifierMixin, BaseForest):
    __doc__ = (
        "A random forest classifier (Breiman 2001) on Dask.\n"
        + FOREST_DOC
        + """
    criterion : {"gini", "entropy", "log_loss", "gain_ratio", "misclassification"}
    class_weight : dict, "balanced", "balanced_subsample" or None
        "balanced_subsample" re-balances each tree's in-bag counts.
    voting : {"soft", "hard"}, default="soft"
        Mean class probability over trees, or their majority vote (Breiman 1996).
    """
    )
    _tree_class = DecisionTreeClassifier

    def __init__(
        self,
        n_estimators=100,
        *,
        criterion="gini",
        max_depth=None,
        min_samples_split=2,
        min_samples_leaf=1,
        min_weight_fraction_leaf=0.0,
        max_features="sqrt",
        max_features_tree=None,
        max_leaf_nodes=None,
        min_impurity_decrease=0.0,
        ccp_alpha=0.0,
        bootstrap=True,
        max_samples=None,
        oob_score=False,
        prune=None,
        random_state=None,
        warm_start=False,
        max_n_estimators=1000,
        tol=0.005,
        class_weight=None,
        voting="soft",
        max_bins=255,
        categorical_features=None,
        min_samples_category=5,
        categorical_order="tree",
        monotonic_cst=None,
        client=None,
        trees_per_task=None,
        n_blocks=None,
        mode="auto",
        tree_storage="client",
        n_jobs=None,
        verbose=0,
    ):
        keep_init_arguments(self, locals())


class ExtraTreesClassifier(RandomForestClassifier):
    __doc__ = (
        "Extremely randomized trees (Geurts et al. 2006) on Dask: one random threshold "
        "per candidate feature, no bootstrap by default.\n" + FOREST_DOC
    )
    _splitter = "random"

    def __init__(
        self,
        n_estimators=100,
        *,
        criterion="gini",
        max_depth=None,
        min_samples_split=2,
        min_samples_leaf=1,
        min_weight_fraction_leaf=0.0,
        max_features="sqrt",
        max_features_tree=None,
        max_leaf_nodes=None,
        min_impurity_decrease=0.0,
        ccp_alpha=0.0,
        bootstrap=False,
        max_samples=None,
        oob_score=False,
        prune=None,
        random_state=None,
        warm_start=False,
        max_n_estimators=1000,
        tol=0.005,
        class_weight=None,
        voting="soft",
        max_bins=255,
        categorical_features=None,
        min_samples_category=5,
        categorical_order="tree",
        monotonic_cst=None,
        client=None,
        trees_per_task=None,
        n_blocks=None,
        mode="auto",
        tree_storage="client",
        n_jobs=None,
        verbose=0,
    ):
        keep_init_arguments(self, locals())


class RandomForestRegressor(_ForestRegressorMixin, BaseForest):
    __doc__ = (
        "A random forest regressor (Breiman 2001) on Dask.\n"
        + FOREST_DOC
        + REGRESSION_CRITERION_DOC
        + """
    max_features : default=1.0 (all features at every node, as scikit-learn)
    aggregation : {"mean", "median"}, default="mean"
        Mean of the trees' predictions, or their median ("bragging", Bühlmann 2003). The
        out-of-bag estimates use the mean of the out-of-bag trees either way.
    """
    )
    _tree_class = DecisionTreeRegressor

    def __init__(
        self,
        n_estimators=100,
        *,
        criterion="squared_error",
        max_depth=None,
        min_samples_split=2,
        min_samples_leaf=1,
        min_weight_fraction_leaf=0.0,
        max_features=1.0,
        max_features_tree=None,
        max_leaf_nodes=None,
        min_impurity_decrease=0.0,
        ccp_alpha=0.0,
        bootstrap=True,
        max_samples=None,
        oob_score=False,
        prune=None,
        random_state=None,
        warm_start=False,
        max_n_estimators=1000,
        tol=0.005,
        aggregation="mean",
        max_bins=255,
        categorical_features=None,
        min_samples_category=5,
        categorical_order="tree",
        monotonic_cst=None,
        client=None,
        trees_per_task=None,
        n_blocks=None,
        mode="auto",
        tree_storage="client",
        n_jobs=None,
        verbose=0,
    ):
        criterion = friedman_as_squared_error(criterion)
        keep_init_arguments(self, locals())


class ExtraTreesRegressor(RandomForestRegressor):
    __doc__ = "Extremely randomized trees (Geurts et al. 2006) regressor on Dask.\n" + FOREST_DOC
    _splitter = "random"

    def __init__(
        self,
        n_estimators=100,
        *,
        criterion="squared_error",
        max_depth=None,
        min_samples_split=2,
        min_samples_leaf=1,
        min_weight_fraction_leaf=0.0,
        max_features=1.0,
        max_features_tree=None,
        max_leaf_nodes=None,
        min_impurity_decrease=0.0,
        ccp_alpha=0.0,
        bootstrap=False,
        max_samples=None,
        oob_score=False,
        prune=None,
        random_state=None,
        warm_start=False,
        max_n_estimators=1000,
        tol=0.005,
        aggregation="mean",
        max_bins=255,
        categorical_features=None,
        min_samples_category=5,
        categorical_order="tree",
        monotonic_cst=None,
        client=None,
        trees_per_task=None,
        n_blocks=None,
        mode="auto",
        tree_storage="client",
        n_jobs=None,
        verbose=0,
    ):
        criterion = friedman_as_squared_error(criterion)
        keep_init_arguments(self, locals())

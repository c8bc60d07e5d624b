"""Quantile regression forests on Dask (Meinshausen 2006): a regression forest whose leaves keep
their in-bag targets, so that it predicts conditional quantiles, not only the mean.

The trees are grown as the regressor grows them. Then one reduction over the training blocks
(``distributed.reductions.leaf_targets``) drops each block's rows down the trees and returns,
for each tree, the targets and in-bag weights of the rows it drew, recomputed from the
counter-based sampling: only these come to the client, never the features. Prediction sends the
forest and its leaves' targets to the workers once and computes the quantiles block by block of
rows (``quantiles.quantile_rows``).

With ``tree_storage="workers"`` each shard keeps the targets of its own leaves, made on its worker
from the blocks (``reductions.shard_leaf_targets``), and a block's quantiles are found from the
leaves its rows reach in each shard, sent with the targets they hold (``parts.LeafQuantiles``):
the same quantiles as the forest on the client, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import dask.array as da
import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..core.params import friedman_as_squared_error
from ..core.threads import uses_n_jobs
from ..distributed.client import Client
from ..distributed.reductions import (
    forest_task,
    leaf_targets,
    oob_pinball,
    oob_quantiles,
    shard_leaf_targets,
)
from ..distributed.shards import map_parts
from ..forest.parts import ForestPart, LeafQuantiles
from ..forest.quantiles import LeafTargets, check_quantiles, is_scalar_quantile
from .forests import (
    FOREST_DOC,
    REGRESSION_CRITERION_DOC,
    Data,
    ExtraTreesRegressor,
    RandomForestRegressor,
    keep_init_arguments,
)

_QUANTILE_DOC = (
    REGRESSION_CRITERION_DOC
    + """
    max_features : default=1.0 (all features at every node, as scikit-learn)
    aggregation : {"mean", "median"}, default="mean"
        What ``predict`` returns without ``quantiles``: the mean or the median of the trees'
        predictions (as the regressor).
    default_quantiles : float or sequence of floats in [0, 1], default=(0.05, 0.5, 0.95)
        The quantiles of the out-of-bag estimates (``oob_quantiles_``, ``oob_coverage_``) and of
        the ``dasktrees`` command's predictions and interval plot.
    prune : as above, with the choice made by the out-of-bag pinball loss of
        ``default_quantiles``: from the size of best out-of-bag R², the trees are cut one size
        further, then the next, while the loss falls (more pruned first, then less), and the
        leaves' targets are those of the cut trees' leaves.

    Quantile attributes
    -------------------
    leaf_targets_ : dasktrees.quantiles.LeafTargets or None
        Each leaf's distinct in-bag targets and their cumulative weights; ``nbytes`` says
        its size (about 12 bytes per distinct in-bag row and tree). None for a forest kept on
        the workers (``tree_storage="workers"``): each shard keeps its own leaves' targets
        there, and ``gather_trees`` brings them home with the trees.
    oob_quantiles_ : ndarray of shape (n_samples, n_default_quantiles)
        With ``oob_score``: each training row's quantiles from the trees that did not draw it
        (NaN for a row every tree drew); a dask array when the input was a dask collection.
    oob_coverage_ : float
        With ``oob_score``: the share of those rows whose target lies between their lowest and
        highest out-of-bag quantile; close to the nominal coverage (0.9 for the default
        quantiles) when the intervals are calibrated.
    oob_prune_pinball_ : ndarray of shape (n_sizes,)
        With ``prune``: the mean out-of-bag pinball loss of ``default_quantiles`` at each size
        of ``oob_prune_curve_`` the choice visited (NaN at the others).
"""
)


if TYPE_CHECKING:
    # The mixin is only mixed into regressors, ahead of them: mypy reads it as one, so that
    # it knows the attributes and the super() methods it uses.
    _QuantileBase = RandomForestRegressor
else:
    _QuantileBase = object


class _QuantileMixin(_QuantileBase):
    """Leaf targets at fit, quantiles at predict (shared by the two quantile forests)."""

    default_quantiles: float | Sequence[float]  # a parameter of both quantile forests
    leaf_targets_: LeafTargets | None

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = False  # the quantiles of one target
        return tags

    def _check_outputs(self, n_outputs, warm):
        if n_outputs > 1:
            raise ValueError(
                f"{type(self).__name__} predicts the quantiles of one target; y has "
                f"{n_outputs} columns: fit one forest per column"
            )
        super()._check_outputs(n_outputs, warm)

    def _after_growth(self, client, data, spec):
        shards = self._tree_shards
        if shards is None:
            self.leaf_targets_ = leaf_targets(client, data, self.forest_, self._seed, spec.lam)
        else:
            self.leaf_targets_ = None
            self._keep_on_workers(shard_leaf_targets(client, data, shards, self._seed, spec.lam))

    def _choose_cut(self, client, data, spec, family, cuts, best, grown) -> int:
        """The cut of least out-of-bag pinball loss of ``default_quantiles`` found by walking
        from the mean's best cut (``best``) toward more pruning, or else toward less, while the
        loss falls (ties to the more pruned). Each cut visited costs a cut of the trees, their
        leaves' targets and an out-of-bag quantile pass; the losses land in
        ``oob_prune_pinball_``."""
        levels = check_quantiles(self.default_quantiles, "default_quantiles")
        rows = self._draws({id(data.bin_mapper): data}).rows
        losses = np.full(len(cuts), np.nan)

        def loss(i):
            if np.isnan(losses[i]):
                self._cut_trees(grown, family, cuts[i], spec.params.criterion)
                self._after_growth(client, data, spec)
                parts = self._quantile_parts(client)
                losses[i] = oob_pinball(client, rows, parts, self._seed, spec.lam, levels)
            return losses[i]

        lowest = loss(best)
        for step in (1, -1):
            start = best
            while 0 <= best + step < len(cuts):
                candidate = loss(best + step)
                if not (candidate <= lowest if step == 1 else candidate < lowest):
                    break
                best, lowest = best + step, candidate
            if best != start:
                break
        self.oob_prune_pinball_ = losses
        return best

    def _quantile_parts(self, client: Client | None = None) -> list:
        """The forest's parts with their leaf targets: the shards (futures), or the client's
        forest as one part (on ``client``'s cluster when given, else here)."""
        if self._tree_shards is not None:
            return self._tree_shards.parts
        check_is_fitted(self, "leaf_targets_")
        part = ForestPart(0, self.forest_, leaf_targets=self.leaf_targets_)
        return [part] if client is None else [forest_task(client, part)]

    def _set_oob(self, client, draws, lam):
        super()._set_oob(client, draws, lam)
        # The conformity scores of predict_interval: the distances outside the band of the
        # quantiles, which replace the mean's residuals.
        self.oob_quantiles_, self.oob_coverage_, self.oob_interval_scores_ = oob_quantiles(
            client,
            draws.rows,
            self._quantile_parts(client),
            self._seed,
            lam,
            check_quantiles(self.default_quantiles, "default_quantiles"),
        )

    def gather_trees(self):
        shards = self._tree_shards
        if shards is not None:
            targets = shards.client.gather(map_parts(shards.parts, ForestPart.quantile_targets))
        super().gather_trees()
        if shards is not None:
            self.leaf_targets_ = LeafTargets.concatenate(targets)
        return self

    def _interval(self, X, q):
        """The band of the lowest and highest ``default_quantiles`` (those of the fit: the
        scores were measured from them), widened by q on each side, or narrowed for a negative
        q, to its middle at most: every y at most q outside the band (``conformal``)."""
        levels = check_quantiles(self.default_quantiles, "default_quantiles")
        band = self.predict(X, [levels.min(), levels.max()])
        if isinstance(band, da.Array):
            return da.map_blocks(_widened, band, q, dtype=np.float64)
        return _widened(band, q)

    # Not the regressor's signature: ``quantiles`` comes second (the public API), so that
    # ``predict(X, 0.5)`` asks for a quantile, where the regressor's second is ``return_std``.
    @uses_n_jobs
    def predict(  # type: ignore[override]
        self, X: Data, quantiles: float | list[float] | None = None, return_std: bool = False
    ) -> np.ndarray | da.Array | tuple[np.ndarray | da.Array, np.ndarray | da.Array]:
        """Conditional quantiles of the target, or its mean.

        Parameters
        ----------
        X : array-like or dask collection, shape (n_samples, n_features)
        quantiles : float, sequence of floats in [0, 1], or None
            None: the mean prediction (or the median of the trees', with
            ``aggregation="median"``), as ``RandomForestRegressor.predict``. Otherwise the
            weighted quantiles ``inf {y : F(y | x) >= q}`` of the training targets in the
            leaves X reaches (module docstring); they never cross.
        return_std : bool, default=False
            With ``quantiles=None``: also return the standard error of the mean prediction
            (``RandomForestRegressor.predict``).

        Returns
        -------
        ndarray of shape (n_samples,) for None or a single quantile, (n_samples, n_quantiles)
        for a sequence; dask arrays for dask input.
        """
        if quantiles is None:
            return super().predict(X, return_std=return_std)
        if return_std:
            raise ValueError("return_std=True needs quantiles=None (the mean prediction)")
        values = check_quantiles(quantiles)
        check_is_fitted(self, "leaf_targets_")
        # On the client the forest's leaf targets are taken whole; the shards send what the
        # rows reach (``LeafQuantiles``).
        op = LeafQuantiles(values, reached=self._tree_shards is not None)
        out = self._by_rows(X, op, len(values), parts=self._quantile_parts())
        return out[:, 0] if is_scalar_quantile(quantiles) else out


def _widened(band, q):
    middle = band.mean(axis=1)
    return np.column_stack([np.minimum(band[:, 0] - q, middle), np.maximum(band[:, 1] + q, middle)])


class RandomForestQuantileRegressor(_QuantileMixin, RandomForestRegressor):
    __doc__ = (
        "A quantile regression forest (Meinshausen 2006) on Dask: a random forest regressor "
        "whose leaves keep their in-bag targets, weighted by their bootstrap counts.\n"
        + FOREST_DOC
        + _QUANTILE_DOC
    )

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
        default_quantiles=(0.05, 0.5, 0.95),
        max_bins=255,
        categorical_features=None,
        min_samples_category=5,
        categorical_order="tree",
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


class ExtraTreesQuantileRegressor(_QuantileMixin, ExtraTreesRegressor):
    __doc__ = (
        "Extremely randomized trees (Geurts et al. 2006) as a quantile regression forest: "
        "without bootstrap (the default) every leaf keeps all its training targets.\n"
        + FOREST_DOC
        + _QUANTILE_DOC
    )

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
        default_quantiles=(0.05, 0.5, 0.95),
        max_bins=255,
        categorical_features=None,
        min_samples_category=5,
        categorical_order="tree",
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

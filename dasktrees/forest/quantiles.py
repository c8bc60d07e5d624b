"""Quantile regression forests (Meinshausen 2006): the targets each leaf holds, and the weighted
quantiles of the leaves a row reaches.

Each leaf of a fitted forest keeps the training targets of its tree's in-bag rows that fell in
it, with their in-bag weights (bootstrap count x sample_weight). For a row x, tree t's leaf
L_t(x) gives target y_i the weight w_ti / W_t, where W_t is the leaf's total weight, and the forest
averages the trees:

    F(y | x) = (1 / T) sum_t sum_{i in L_t(x)} (w_ti / W_t) 1{y_i <= y}

The q-quantile is ``inf {y : F(y | x) >= q}``, a training target, so the quantiles of one row
never cross; their weighted mean is the forest's mean prediction. Out-of-bag quantiles take,
for each training row, the trees that did not draw it (T is then their number).

``LeafTargets`` stores, leaf after leaf in ``PackedForest`` order, the distinct targets of each
leaf in increasing order as indices into one sorted table of the forest's distinct targets, and
each leaf's cumulative weights (its share of the leaf up to and including that target), so that a
tree's F_t(y) is one binary search in a leaf.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..core.kernel_cache import kernel

# Two cumulative weights within this share of the row's total weight are taken as equal: a
# quantile falling on a step of F is the step's value, as in exact arithmetic, and not the next
# value because of rounding in the sums (each leaf's weights are normalised in floating point).
_TIE_TOLERANCE = 1e-10
# Rows that reach at most this many stored targets gather and sort them (deep trees: a few
# targets a leaf); more, and each quantile is found by bisection over the target table instead
# (shallow trees, large leaves), in time independent of the leaves' sizes.
_MAX_GATHERED = 2048


class LeafTargets:
    """The in-bag targets of every leaf of a forest, with their weights.

    Attributes
    ----------
    offsets : ndarray of int64, shape (n_leaves + 1,)
        Leaf k (a row of ``PackedForest.values``) holds entries ``offsets[k]:offsets[k + 1]``.
    target_ids : ndarray of uint32, shape (n_entries,)
        Each entry's target, an index into ``targets``; increasing within a leaf.
    cum_weights : ndarray of float64, shape (n_entries,)
        The leaf's weight up to and including each entry, as a share of the leaf's total
        weight (the leaf's last entry is 1).
    targets : ndarray of float64, shape (n_targets,)
        The distinct targets of all leaves, sorted.
    """

    def __init__(self, offsets, target_ids, cum_weights, targets):
        self.offsets = offsets
        self.target_ids = target_ids
        self.cum_weights = cum_weights
        self.targets = targets

    @classmethod
    def from_entries(cls, leaves, y, weights, n_leaves):
        """Gather the (leaf, target, weight) entries of the in-bag rows into leaves.

        Entries of one leaf and one target are merged (their weights added in the order given:
        in row order, the same sums however the rows were cut into blocks).

        Parameters
        ----------
        leaves : ndarray of int64, shape (n_entries,)
            Global leaf index (``PackedForest``) of each entry.
        y, weights : ndarray of float64, shape (n_entries,)
            Target and in-bag weight (> 0).
        n_leaves : int
            Leaves of the forest.
        """
        order = np.lexsort((y, leaves))  # stable: row order within (leaf, target)
        leaves, y, weights = leaves[order], y[order], weights[order]
        new = np.ones(len(y), dtype=bool)
        new[1:] = (leaves[1:] != leaves[:-1]) | (y[1:] != y[:-1])
        starts = np.flatnonzero(new)
        leaves, y = leaves[starts], y[starts]
        weights = np.add.reduceat(weights, starts) if len(starts) else weights[:0]
        targets, target_ids = np.unique(y, return_inverse=True)
        if len(targets) >= 2**32:
            raise ValueError("more than 2**32 - 1 distinct targets cannot be stored")
        per_leaf = np.bincount(leaves, minlength=n_leaves)
        offsets = np.zeros(n_leaves + 1, dtype=np.int64)
        np.cumsum(per_leaf, out=offsets[1:])
        cum_weights = np.empty(len(weights))
        _leaf_cumulative_shares(offsets, weights, cum_weights)
        return cls(offsets, target_ids.astype(np.uint32), cum_weights, targets)

    @property
    def nbytes(self) -> int:
        """Bytes of the stored arrays."""
        return sum(
            a.nbytes for a in (self.offsets, self.target_ids, self.cum_weights, self.targets)
        )

    def arrays(self):
        """The arrays the kernels take, in their order."""
        return self.offsets, self.target_ids, self.cum_weights, self.targets

    @property
    def n_leaves(self) -> int:
        return len(self.offsets) - 1

    def reached(self, leaves):
        """The leaves ``leaves`` reaches, with only the targets they hold: what a part of a
        forest kept on the workers sends for its rows' quantiles (``joined`` puts the parts
        together), rather than all its leaves' targets.

        Parameters
        ----------
        leaves : ndarray of int64, shape (n_rows, n_trees)
            Leaves of this forest (``PackedForest.apply``).

        Returns
        -------
        targets : LeafTargets
            The reached leaves in increasing order, each with its entries as here; its table of
            targets only those they hold.
        leaves : ndarray of int64, shape (n_rows, n_trees)
            ``leaves`` as indices of ``targets``' leaves.
        """
        kept, renumbered = np.unique(leaves, return_inverse=True)
        starts, stops = self.offsets[kept], self.offsets[kept + 1]
        offsets = np.zeros(len(kept) + 1, dtype=np.int64)
        np.cumsum(stops - starts, out=offsets[1:])
        # Entry j of new leaf k is old entry starts[k] + (j - offsets[k]).
        entries = np.arange(offsets[-1]) + np.repeat(starts - offsets[:-1], stops - starts)
        used, target_ids = np.unique(self.target_ids[entries], return_inverse=True)
        subset = LeafTargets(
            offsets, target_ids.astype(np.uint32), self.cum_weights[entries], self.targets[used]
        )
        return subset, renumbered.reshape(leaves.shape)

    @classmethod
    def concatenate(cls, parts):
        """The leaf targets of consecutive parts of a forest (their leaves one after the other,
        as ``PackedForest`` numbers the leaves of its trees): exactly those ``from_entries``
        makes of the whole forest's entries."""
        parts = list(parts)
        targets = np.unique(np.concatenate([p.targets for p in parts]))
        if len(targets) >= 2**32:
            raise ValueError("more than 2**32 - 1 distinct targets cannot be stored")
        target_ids = np.concatenate(
            [np.searchsorted(targets, p.targets)[p.target_ids] for p in parts]
        )
        starts = np.cumsum([0] + [len(p.target_ids) for p in parts])
        offsets = np.concatenate([[0]] + [p.offsets[1:] + s for p, s in zip(parts, starts)])
        return cls(
            offsets.astype(np.int64),
            target_ids.astype(np.uint32),
            np.concatenate([p.cum_weights for p in parts]),
            targets,
        )


def joined(reached) -> tuple[LeafTargets, np.ndarray]:
    """One forest's leaf targets and leaves of the ``(targets, leaves)`` its parts reached
    (``LeafTargets.reached``, in tree order): the quantiles ``quantile_rows`` finds with them
    are those of the whole forest's leaf targets, bit for bit (the same entries and cumulative
    weights, target indices in the same order).

    Returns
    -------
    targets : LeafTargets
    leaves : ndarray of int64, shape (n_rows, n_trees)
    """
    if len(reached) == 1:
        return reached[0]
    shifts = np.cumsum([0] + [targets.n_leaves for targets, _ in reached])
    leaves = np.hstack([leaves + shift for (_, leaves), shift in zip(reached, shifts)])
    return LeafTargets.concatenate(targets for targets, _ in reached), leaves


@kernel(nogil=True)
def _leaf_cumulative_shares(offsets, weights, out):
    """Each leaf's cumulative weights over its total: ``out[e]`` for entry e (see
    ``LeafTargets.cum_weights``)."""
    for k in range(offsets.shape[0] - 1):
        total = 0.0
        for e in range(offsets[k], offsets[k + 1]):
            total += weights[e]
        running = 0.0
        for e in range(offsets[k], offsets[k + 1]):
            running += weights[e]
            out[e] = running / total
        if offsets[k + 1] > offsets[k]:
            out[offsets[k + 1] - 1] = 1.0  # exactly the whole leaf


def check_quantiles(quantiles, name="quantiles"):
    """``quantiles`` as a 1-d float64 array of values in [0, 1] (a scalar gives one value).

    Raises ``ValueError`` / ``TypeError`` naming the parameter.
    """
    values = np.atleast_1d(np.asarray(quantiles))
    if values.ndim != 1 or len(values) == 0:
        raise ValueError(f"{name} must be a float in [0, 1] or a non-empty list of them")
    if values.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be floats in [0, 1], got {quantiles!r}")
    values = values.astype(np.float64)
    if np.any(~np.isfinite(values)) or np.any(values < 0.0) or np.any(values > 1.0):
        raise ValueError(f"{name} must be in [0, 1], got {quantiles!r}")
    return values


def inside_interval(y, values, quantiles):
    """Whether each target lies between its row's lowest and highest quantile, bounds included
    (what ``oob_coverage_`` and the run directory's coverage count).

    Parameters
    ----------
    y : ndarray of float64, shape (n_rows,)
    values : ndarray of float64, shape (n_rows, n_quantiles)
        A column per entry of ``quantiles``.
    quantiles : ndarray of float64, shape (n_quantiles,)

    Returns
    -------
    ndarray of bool, shape (n_rows,)
    """
    low, high = values[:, np.argmin(quantiles)], values[:, np.argmax(quantiles)]
    return (low <= y) & (y <= high)


def is_scalar_quantile(quantiles):
    """Whether ``quantiles`` is one number (``predict`` then returns a 1-d array)."""
    return isinstance(quantiles, numbers.Real) or (
        isinstance(quantiles, np.ndarray) and quantiles.ndim == 0
    )


@kernel(inline="always")
def _leaf_share_at_most(cum_weights, target_ids, first, stop, target):
    """F_t(target): the leaf's share of weight on targets with index <= ``target`` (a bisection
    over the leaf's increasing target indices)."""
    lo, hi = first, stop
    while lo < hi:
        mid = (lo + hi) >> 1
        if target_ids[mid] <= target:
            lo = mid + 1
        else:
            hi = mid
    return 0.0 if lo == first else cum_weights[lo - 1]


@kernel(inline="always")
def _merge_runs(ids, weights, runs, n_runs):
    """Sort the entries of row 0 of ``ids`` and ``weights`` by id, given as ``n_runs`` runs of
    increasing ids (run r is ``runs[r]:runs[r + 1]``): adjacent runs merged pairwise until one
    is left, between the two rows. Stable (the earlier run first on equal ids), so the entries
    end in the order a stable sort gives, without compiling numba's sort.

    Returns
    -------
    int
        The row of ``ids`` and ``weights`` holding the sorted entries; ``runs`` is overwritten.
    """
    side = 0
    while n_runs > 1:
        src_ids, src_weights = ids[side], weights[side]
        dst_ids, dst_weights = ids[1 - side], weights[1 - side]
        n_merged = 0
        for r in range(0, n_runs, 2):
            first = runs[r]
            middle = runs[min(r + 1, n_runs)]
            stop = runs[min(r + 2, n_runs)]
            a, b, j = first, middle, first
            while a < middle and b < stop:
                if src_ids[b] < src_ids[a]:
                    dst_ids[j], dst_weights[j] = src_ids[b], src_weights[b]
                    b += 1
                else:
                    dst_ids[j], dst_weights[j] = src_ids[a], src_weights[a]
                    a += 1
                j += 1
            for e in range(a, middle):
                dst_ids[j], dst_weights[j] = src_ids[e], src_weights[e]
                j += 1
            for e in range(b, stop):
                dst_ids[j], dst_weights[j] = src_ids[e], src_weights[e]
                j += 1
            runs[n_merged] = first
            n_merged += 1
        runs[n_merged] = runs[n_runs]
        n_runs = n_merged
        side = 1 - side
    return side


@kernel(nogil=True)
def quantile_rows(leaves, use, offsets, target_ids, cum_weights, targets, quantiles, out):
    """Weighted quantiles of the leaves each row reaches (``inf {y : F(y | x) >= q}``).

    Parameters
    ----------
    leaves : ndarray of int64, shape (n_rows, n_trees)
        The leaf each row reaches in each tree (``PackedForest.apply``).
    use : ndarray of bool, shape (n_rows, n_trees), or (0, 0)
        Which trees count for each row (out-of-bag quantiles); empty: all of them.
    offsets, target_ids, cum_weights, targets :
        The forest's ``LeafTargets``.
    quantiles : ndarray of float64, shape (n_quantiles,)
        In increasing order.
    out : ndarray of float64, shape (n_rows, n_quantiles)
        Written; NaN for a row no tree counts for.
    """
    n_rows, n_trees = leaves.shape
    n_q = quantiles.shape[0]
    gathered_ids = np.empty((2, _MAX_GATHERED), dtype=np.int64)
    gathered_weights = np.empty((2, _MAX_GATHERED))
    runs = np.empty(n_trees + 1, dtype=np.int64)
    for i in range(n_rows):
        n_used = 0
        n_entries = 0
        lowest, highest = targets.shape[0], -1
        for t in range(n_trees):
            if use.shape[0] > 0 and not use[i, t]:
                continue
            leaf = leaves[i, t]
            first, stop = offsets[leaf], offsets[leaf + 1]
            if stop == first:
                continue
            n_used += 1
            n_entries += stop - first
            lowest = min(lowest, np.int64(target_ids[first]))
            highest = max(highest, np.int64(target_ids[stop - 1]))
        if n_used == 0:
            out[i, :] = np.nan
            continue
        if n_entries <= _MAX_GATHERED:
            # Gather the entries with their own weights, a sorted run per tree; merge the runs
            # by target; walk up the sums.
            m = 0
            n_runs = 0
            for t in range(n_trees):
                if use.shape[0] > 0 and not use[i, t]:
                    continue
                leaf = leaves[i, t]
                runs[n_runs] = m
                n_runs += 1
                previous = 0.0
                for e in range(offsets[leaf], offsets[leaf + 1]):
                    gathered_ids[0, m] = target_ids[e]
                    gathered_weights[0, m] = cum_weights[e] - previous
                    previous = cum_weights[e]
                    m += 1
            runs[n_runs] = m
            side = _merge_runs(gathered_ids, gathered_weights, runs, n_runs)
            ids, weights = gathered_ids[side], gathered_weights[side]
            cumulative = 0.0
            k = 0
            for j in range(m):
                cumulative += weights[j]
                # A target's entries are all added before it is compared: F steps at targets.
                if j + 1 < m and ids[j + 1] == ids[j]:
                    continue
                while k < n_q and cumulative >= (quantiles[k] - _TIE_TOLERANCE) * n_used:
                    out[i, k] = targets[ids[j]]
                    k += 1
            while k < n_q:  # q = 1 short of the total by rounding
                out[i, k] = targets[highest]
                k += 1
            continue
        # Bisection over the target indices between the lowest and highest reached: the
        # smallest index whose summed F_t reaches q.
        for k in range(n_q):
            lo, hi = lowest, highest
            while lo < hi:
                mid = (lo + hi) >> 1
                total = 0.0
                for t in range(n_trees):
                    if use.shape[0] > 0 and not use[i, t]:
                        continue
                    leaf = leaves[i, t]
                    total += _leaf_share_at_most(
                        cum_weights, target_ids, offsets[leaf], offsets[leaf + 1], mid
                    )
                if total >= (quantiles[k] - _TIE_TOLERANCE) * n_used:
                    hi = mid
                else:
                    lo = mid + 1
            out[i, k] = targets[lo]


def predict_quantiles(leaf_targets, leaves, quantiles, use=None):
    """Quantiles in the order given (``quantile_rows`` takes them sorted).

    Parameters
    ----------
    leaf_targets : LeafTargets
    leaves : ndarray of int64, shape (n_rows, n_trees)
    quantiles : ndarray of float64, shape (n_quantiles,)
        Checked (``check_quantiles``), any order.
    use : ndarray of bool, shape (n_rows, n_trees), optional
        Trees counted per row; all when None.

    Returns
    -------
    ndarray of float64, shape (n_rows, n_quantiles)
    """
    order = np.argsort(quantiles, kind="stable")
    out = np.empty((leaves.shape[0], len(quantiles)))
    quantile_rows(
        leaves,
        np.zeros((0, 0), dtype=bool) if use is None else use,
        *leaf_targets.arrays(),
        np.ascontiguousarray(quantiles[order]),
        out,
    )
    result = np.empty_like(out)
    result[:, order] = out
    return result

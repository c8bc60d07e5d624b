"""Binning: raw features -> uint8 codes (numeric quantile bins, category codes, a missing bin)."""

from typing import NamedTuple

# pandas and scipy are imported inside the functions that use them: the kernels load without
# them (docs/design.md, "Compiled for what a fit uses").
import numpy as np

from ..core.dtypes import MAX_BINS, MISSING_BIN, N_BIN_CODES, X_BINNED_DTYPE, X_DTYPE
from ..core.kernel_cache import kernel
from ..core.rng import row_uniforms
from ..core.validation import categorical_mask, check_2d, is_frame, is_sparse, table_columns

# Stream of the counter-based hash that picks the rows whose values set the bin edges.
_BINNING_STREAM = 0


def numeric_bin_edges(values, max_bins):
    """Upper edges of the bins of one numeric feature, and a representative value per bin.

    With at most ``max_bins`` distinct values every value gets its own bin and the edges are the
    midpoints between neighbouring values, so small data is split exactly as CART splits it.
    Otherwise the edges are ``max_bins - 1`` quantiles of ``values`` (midpoint interpolation;
    fewer edges where quantiles tie), each one that falls on a value (among tied values) moved
    half-way to the next distinct value: an edge is never a sampled value but the largest.

    Parameters
    ----------
    values : ndarray, shape (n,)
        Sampled values of any real dtype; NaN is ignored.
    max_bins : int
        At most this many non-missing bins, 2 <= max_bins <= 255.

    Returns
    -------
    edges : ndarray of float64, shape (n_bins - 1,)
        Increasing edges; a value ``x`` falls in bin ``searchsorted(edges, x, side="left")``,
        that is bin b holds ``edges[b - 1] < x <= edges[b]``.
    representatives : ndarray of float64, shape (n_bins,)
        The value of each bin (distinct values), or the middle of its range (quantile bins).
    """
    values = np.asarray(values)
    if values.dtype.kind == "f":
        values = values[~np.isnan(values)]
    ordered = np.sort(values).astype(X_DTYPE)  # sorted in the input dtype: float32 sorts faster
    if ordered.size == 0:
        return np.empty(0, dtype=X_DTYPE), np.empty(0, dtype=X_DTYPE)
    is_new = np.empty(ordered.size, dtype=bool)
    is_new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=is_new[1:])
    if np.count_nonzero(is_new) <= max_bins:
        distinct = ordered[is_new]
        return distinct[:-1] + (distinct[1:] - distinct[:-1]) / 2, distinct
    # Quantile q at position h = (n - 1) q, the midpoint of its two neighbouring order statistics.
    positions = (ordered.size - 1) * np.linspace(0.0, 1.0, max_bins + 1)[1:-1]
    below = ordered[np.floor(positions).astype(np.int64)]
    above = ordered[np.ceil(positions).astype(np.int64)]
    edges = np.unique(below + (above - below) / 2)
    # A quantile among tied values is that value: its edge moves half-way to the next distinct
    # value. The values on each side stay, and no sampled value sits on a threshold, where a
    # comparison in float32 (scikit-learn's trees, ``to_sklearn``) could send it the other way.
    distinct = ordered[is_new]
    above_edge = np.searchsorted(distinct, edges, side="right")
    on_value = (distinct[above_edge - 1] == edges) & (above_edge < distinct.size)
    edges[on_value] += (distinct[above_edge[on_value]] - edges[on_value]) / 2
    edges = np.unique(edges)  # one moved onto the midpoint of the same two values
    bounds = np.concatenate([ordered[:1], edges, ordered[-1:]])
    return edges, (bounds[:-1] + bounds[1:]) / 2


class SparseSample(NamedTuple):
    """The sampled values of a numeric column of sparse X, without its zeros written out: the
    stored values, and how many sampled rows hold the zero that is not stored. Blocks' samples
    join by concatenating ``stored`` and adding ``n_zeros`` (``joined_sample``)."""

    stored: np.ndarray
    n_zeros: int

    def values(self):
        """Every sampled value, zeros included: what ``numeric_bin_edges`` takes."""
        return np.concatenate([self.stored, np.zeros(self.n_zeros, dtype=self.stored.dtype)])


def joined_sample(pieces):
    """One numeric column's samples from several blocks, as one: an array, or a
    ``SparseSample`` when the blocks are sparse (``BinMapper.pieces``)."""
    if pieces and isinstance(pieces[0], SparseSample):
        return SparseSample(
            np.concatenate([p.stored for p in pieces]), sum(p.n_zeros for p in pieces)
        )
    return np.concatenate(pieces)


def sparse_column_parts(X):
    """Column by column, the rows and values a CSR X stores: a generator of
    ``(rows, values)`` per feature, from one CSC copy of X's stored entries (no dense copy)."""
    columns = X.tocsc()
    for j in range(columns.shape[1]):
        a, b = columns.indptr[j], columns.indptr[j + 1]
        yield columns.indices[a:b], columns.data[a:b]


@kernel(inline="always")
def bin_code(x, padded_edges):
    """Number of edges below x: a binary search over the 256 padded edges, unrolled and without
    data-dependent branches (random data defeats branch prediction).

    Parameters
    ----------
    x : float
    padded_edges : ndarray of float64, shape (N_BIN_CODES,)
        A feature's edges followed by +inf (a row of ``BinMapper.threshold_table``).

    Returns
    -------
    int
        x's bin code: the number of edges below it, MISSING_BIN for NaN.
    """
    if np.isnan(x):
        return MISSING_BIN
    low = 0
    low += (padded_edges[low + 127] < x) * 128
    low += (padded_edges[low + 63] < x) * 64
    low += (padded_edges[low + 31] < x) * 32
    low += (padded_edges[low + 15] < x) * 16
    low += (padded_edges[low + 7] < x) * 8
    low += (padded_edges[low + 3] < x) * 4
    low += (padded_edges[low + 1] < x) * 2
    low += (padded_edges[low] < x) * 1
    return low


@kernel(nogil=True)
def bin_numeric(values, padded_edges, out):
    """Bin codes of one numeric column.

    Parameters
    ----------
    values : ndarray of a real dtype, shape (n,)
        May be a strided view (a column of a row-major X).
    padded_edges : ndarray of float64, shape (N_BIN_CODES,)
        The feature's edges followed by +inf (a row of ``BinMapper.threshold_table``).
    out : ndarray of uint8, shape (n,)
        Written: the number of edges below each value (``searchsorted`` left), MISSING_BIN for
        NaN.
    """
    for i in range(values.shape[0]):
        out[i] = bin_code(values[i], padded_edges)


def category_bins(categories, counts, max_bins):
    """Bin of each known category.

    Categories keep their order and get bins 0, 1, ...; when there are more than ``max_bins``
    (counting those with rows; a category of 0 rows joins the run of the one before it),
    runs of neighbouring categories share a bin, as quantile bins share neighbouring values: the
    categories, in their order, are cut into at most ``max_bins`` runs that hold as few rows as
    possible each (the largest run as small as it can be), so a category with more than a bin's
    share of the rows keeps a bin of its own. Neighbours in the natural order of a many-level
    column are often related (tail numbers of one fleet, zip codes of one region, identifiers
    given out in ranges), which one "other" bin of all the rarer categories would lose
    (docs/benchmarks.md, "Categorical features").
    """
    n = len(categories)
    if n <= max_bins:
        return np.arange(n, dtype=np.int32)
    counts = np.asarray(counts, dtype=np.int64)
    # The smallest ``cap`` for which runs of at most ``cap`` rows (or one heavier category),
    # filled in order, number at most max_bins; their number falls as the cap grows.
    low, high = 1, int(counts.sum())
    while low < high:
        cap = (low + high) // 2
        if _runs(counts, cap)[-1] < max_bins:
            high = cap
        else:
            low = cap + 1
    return _runs(counts, low)


@kernel()
def _runs(counts, cap):
    """Run of each category when the categories, in order, are put in runs of at most ``cap``
    rows: a category starts a new run when its rows would overflow the current one, and a
    category of more than ``cap`` rows has a run of its own (with the categories of 0 rows after
    it)."""
    runs = np.empty(len(counts), dtype=np.int32)
    run, rows = 0, 0
    for i in range(len(counts)):
        if rows > 0 and counts[i] > 0 and rows + counts[i] > cap:
            run, rows = run + 1, 0
        rows += counts[i]
        runs[i] = run
    return runs


def category_counts(values):
    """Counts of the categories of a column (a Series indexed by category): the observed ones,
    and a pandas categorical's declared ones with a count of 0 (``fit_from_pieces`` keeps them
    where runs of neighbours share bins)."""
    import pandas as pd

    return pd.Series(values).value_counts(dropna=True, sort=False)


def order_categories(counts):
    """Categories of a counts Series in their natural order: a categorical dtype's own order,
    else sorted (by their text when types are mixed). Returns (categories, counts) arrays."""
    import pandas as pd

    if isinstance(counts.index.dtype, pd.CategoricalDtype):
        counts = counts.sort_index()
    else:
        try:
            counts = counts.sort_index()
        except TypeError:
            counts = counts.iloc[np.argsort(counts.index.astype(str), kind="stable")]
    return np.asarray(counts.index.astype(object)), counts.to_numpy()


def _n_bins(edges, bins):
    """Non-missing bins of a feature: its edges plus one, or its largest category bin plus one."""
    if edges is not None:
        return len(edges) + 1
    return bins.max() + 1 if len(bins) else 1


def sample_mask(row_ids, fraction, seed):
    """Which rows (by global id) set the quantiles.

    Row i is kept when a hash of (seed, i) falls below ``fraction``: the choice of a row depends on
    its global id only, so a partition alone picks exactly the rows the whole table would.
    """
    row_ids = np.asarray(row_ids, dtype=np.int64)
    u = np.empty(len(row_ids))
    row_uniforms(seed, _BINNING_STREAM, row_ids, u)
    return u < fraction


# Rows of a sparse X made dense at a time for the prediction kernels: at most this many bytes.
DENSE_BATCH_BYTES = 64 * 2**20


def by_row_batches(X, rows_fn):
    """``rows_fn(rows)`` over X's rows, for an X the prediction kernels read densely.

    Dense X: one call. Sparse X: calls on batches of rows, each at most ``DENSE_BATCH_BYTES``
    once ``encode`` makes it dense, their results stacked: a prediction never holds all of a
    sparse X as a dense array.

    Returns
    -------
    ndarray of shape (n_rows, ...)
    """
    if not is_sparse(X):
        return rows_fn(X)
    step = max(1, DENSE_BATCH_BYTES // (np.dtype(X_DTYPE).itemsize * X.shape[1]))
    return np.concatenate([rows_fn(X[a : a + step]) for a in range(0, X.shape[0], step)])


def _object_index(categories):
    """A pandas Index of object dtype over a feature's categories (pandas imported only for a
    feature that has categories)."""
    import pandas as pd

    return pd.Index(categories, dtype=object)


class BinMapper:
    """Map raw features to uint8 codes.

    Numeric features get quantile bins (see ``numeric_bin_edges``) computed on at most
    ``subsample`` rows, chosen by a hash of (random_state, global row id) so that the edges do
    not depend on how the data is partitioned. Categorical features get one code per category,
    runs of neighbouring ones sharing a code beyond the bin budget (see ``category_bins``). NaN, and
    at transform time categories never seen in ``fit``, get the missing code ``MISSING_BIN``.

    Parameters
    ----------
    max_bins : int, default=255
        Non-missing bins per feature, 2 to 255.
    categorical_features : list of str or int, bool mask, or None
        Columns to treat as categorical besides pandas category / object / string / bool ones.
    subsample : int, default=200_000
        Rows sampled to compute quantiles.
    random_state : int, default=0
        Seed of the row hash.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : ndarray of str or None
    is_categorical_ : ndarray of bool, shape (n_features,)
    bin_edges_ : list of ndarray or None
        Numeric features: the edges; categorical: None.
    bin_values_ : list of ndarray or None
        Numeric features: a representative value per bin (see ``numeric_bin_edges``).
    categories_ : list of ndarray or None
        Categorical features: the known categories; numeric: None.
    category_bins_ : list of ndarray or None
        Categorical features: the bin of each known category.
    n_bins_non_missing_ : ndarray of int32, shape (n_features,)
    """

    def __init__(self, max_bins=255, categorical_features=None, subsample=200_000, random_state=0):
        self.max_bins = max_bins
        self.categorical_features = categorical_features
        self.subsample = subsample
        self.random_state = random_state

    def fit(self, X, row_ids=None):
        """Learn bin edges and category codes from X (numpy array or pandas DataFrame).

        ``row_ids`` are the global ids of X's rows (default 0, 1, ...), which key the sampling.
        """
        X = check_2d(X)
        self._set_columns(X)
        if X.shape[0] > self.subsample:
            if row_ids is None:
                row_ids = np.arange(X.shape[0], dtype=np.int64)
            keep = sample_mask(row_ids, self.sampling_fraction(X.shape[0]), self.random_state)
            sampled = X.iloc[np.flatnonzero(keep)] if is_frame(X) else X[keep]
        else:
            sampled = X
        return self.fit_from_pieces(*self.pieces(X, sampled))

    def sampling_fraction(self, n_rows):
        """Share of the rows whose values set the quantiles."""
        return min(1.0, self.subsample / n_rows)

    def _set_columns(self, X):
        """Column names, count and kinds, from X or from an empty frame with X's dtypes."""
        self.n_features_in_ = X.shape[1]
        self.feature_names_in_ = (
            np.asarray(X.columns.astype(str), dtype=object) if is_frame(X) else None
        )
        self.is_categorical_ = categorical_mask(X, self.categorical_features)
        if is_sparse(X) and self.is_categorical_.any():
            raise ValueError(
                "categorical_features: the columns of a sparse X are numeric; pass a DataFrame "
                "with category columns, or a dense array, to treat columns as categorical"
            )
        return self

    def pieces(self, X, sampled):
        """What the fit needs from a block of rows: the numeric columns of its sampled rows, and
        the category counts of all its rows. Blocks' pieces combine by concatenation and sum.
        A sparse X's columns are ``SparseSample``s (all numeric)."""
        if is_sparse(sampled):
            n = sampled.shape[0]
            numeric = [
                SparseSample(values, n - len(values)) for _, values in sparse_column_parts(sampled)
            ]
            return numeric, []
        numeric = [
            c.values for c in table_columns(sampled, self.is_categorical_) if not c.categorical
        ]
        counts = [
            category_counts(c.values)
            for c in table_columns(X, self.is_categorical_)
            if c.categorical
        ]
        return numeric, counts

    def fit_from_pieces(self, numeric_samples, counts):
        """Finish the fit from the numeric samples and category counts of ``pieces`` (one entry
        per numeric, resp. categorical, feature; ``_set_columns`` must have run)."""
        if not 2 <= self.max_bins <= MAX_BINS:
            raise ValueError(f"max_bins must be an integer in [2, {MAX_BINS}], got {self.max_bins}")
        numeric_samples, counts = iter(numeric_samples), iter(counts)
        bin_edges, bin_values, categories, bins = [], [], [], []
        for categorical in self.is_categorical_:
            if categorical:
                known, category_count = order_categories(next(counts))
                if np.count_nonzero(category_count) <= self.max_bins:
                    # A code each for the observed categories; the others are unseen (missing).
                    seen = category_count > 0
                    known, category_count = known[seen], category_count[seen]
                # Else a declared category that no row has joins the run of the neighbour before
                # it (``category_bins``), and rows of it at predict time share that bin.
                categories.append(known)
                bins.append(category_bins(known, category_count, self.max_bins))
                bin_edges.append(None)
                bin_values.append(None)
            else:
                sample = next(numeric_samples)
                if isinstance(sample, SparseSample):
                    sample = sample.values()
                edges, representatives = numeric_bin_edges(sample, self.max_bins)
                bin_edges.append(edges)
                bin_values.append(representatives)
                categories.append(None)
                bins.append(None)
        return self.set_bins(bin_edges, bin_values, categories, bins)

    def set_bins(self, edges, values, categories, bins):
        """Set the fitted bins and what derives from them: the end of ``fit_from_pieces``, and
        of loading a model file (``modelfile.load``), so that both give the same mapper.

        Each argument is a list with one entry per feature, None where it does not apply:
        ``bin_edges_``, ``bin_values_``, ``categories_`` and ``category_bins_`` (see Attributes).
        ``_set_columns`` must have run.
        """
        self.bin_edges_, self.bin_values_ = list(edges), list(values)
        self.categories_, self.category_bins_ = list(categories), list(bins)
        self.n_bins_non_missing_ = np.array(
            [_n_bins(e, b) for e, b in zip(self.bin_edges_, self.category_bins_)], dtype=np.int32
        )
        self.missing_values_bin_idx_ = MISSING_BIN
        self._category_index = [None if c is None else _object_index(c) for c in self.categories_]
        return self

    def _checked(self, X):
        X = check_2d(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but the bin mapper was fitted on "
                f"{self.n_features_in_} features"
            )
        return X

    def _columns(self, X):
        return table_columns(self._checked(X), self.is_categorical_)

    def _category_bins_of(self, j, values):
        """Bins of the values of categorical feature j; unseen and missing -> MISSING_BIN."""
        import pandas as pd

        if isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
            # Look up the dtype's categories rather than every value (no Python object per
            # row): one-row predictions of the flights forest spent most of their time here.
            values = values.array if isinstance(values, pd.Series) else pd.Categorical(values)
            # As the values' own objects; an object Index, since pandas would infer another
            # dtype from an object array, slowly.
            categories = pd.Index(np.asarray(values.categories, dtype=object), dtype=object)
            known = self._category_index[j].get_indexer(categories)
            bins = np.where(known >= 0, self.category_bins_[j][known], MISSING_BIN)
            return np.append(bins, MISSING_BIN)[values.codes]  # code -1 (missing): the last
        codes = self._category_index[j].get_indexer(pd.Series(values).astype(object))
        return np.where(codes >= 0, self.category_bins_[j][codes], MISSING_BIN)

    def transform(self, X):
        """Binned codes of X.

        Returns
        -------
        ndarray of uint8, shape (n_samples, n_features)
            Rows x features (C order), missing values coded ``MISSING_BIN``.
        """
        if is_sparse(X):
            return self._transform_sparse(self._checked(X))
        columns = self._columns(X)
        out = np.empty((X.shape[0], len(columns)), dtype=X_BINNED_DTYPE)
        padded_edges = self.threshold_table()
        for j, column in enumerate(columns):
            if column.categorical:
                out[:, j] = self._category_bins_of(j, column.values)
            else:
                bin_numeric(column.values, padded_edges[j], out[:, j])
        return out

    def _transform_sparse(self, X):
        """``transform`` of a CSR X, column by column: a column's rows take the code of zero,
        then its stored entries their own codes; the raw values are never made dense."""
        out = np.empty(X.shape, dtype=X_BINNED_DTYPE)
        padded_edges = self.threshold_table()
        zero_code = np.empty(1, dtype=X_BINNED_DTYPE)
        for j, (rows, values) in enumerate(sparse_column_parts(X)):
            bin_numeric(np.zeros(1), padded_edges[j], zero_code)
            out[:, j] = zero_code[0]
            codes = np.empty(len(values), dtype=X_BINNED_DTYPE)
            bin_numeric(values, padded_edges[j], codes)
            out[rows, j] = codes
        return out

    def encode(self, X):
        """Raw values as the prediction kernels read them. A sparse X is made dense: pass it in
        batches of rows (``by_row_batches``).

        Returns
        -------
        ndarray of float64 (float32 for an all-numeric float32 array), shape
        (n_samples, n_features)
            Numeric features unchanged; categorical ones as their bin code; NaN for missing
            values and unseen categories.
        """
        if is_sparse(X):
            X = self._checked(X).toarray()
        if not self.is_categorical_.any() and isinstance(X, np.ndarray) and X.dtype.kind in "fiub":
            return self._encode_numeric(X)
        columns = self._columns(X)
        out = np.empty((X.shape[0], len(columns)), dtype=X_DTYPE)
        for j, column in enumerate(columns):
            if column.categorical:
                bins = self._category_bins_of(j, column.values).astype(X_DTYPE)
                bins[bins == MISSING_BIN] = np.nan
                out[:, j] = bins
            else:
                out[:, j] = column.values
        return out

    def _encode_numeric(self, X):
        """``encode`` of an all-numeric ndarray: one conversion, no per-column work."""
        X = self._checked(X)
        # float32 stays float32: comparing it with float64 thresholds is exact, and half the size
        X = np.ascontiguousarray(X, dtype=X.dtype if X.dtype.kind == "f" else X_DTYPE)
        if np.isinf(X).any():
            j = int(np.flatnonzero(np.isinf(X).any(axis=0))[0])
            raise ValueError(
                f"X column {j} contains infinity; replace it with a finite value or NaN"
            )
        return X

    def threshold_table(self):
        """Split thresholds in raw units: ``table[f, b]`` is the upper edge of bin b of f.

        Returns
        -------
        ndarray of float64, shape (n_features, N_BIN_CODES)
            ``+inf`` past the last edge of a numeric feature (a split that keeps every value on
            the left), NaN for categorical features.
        """
        table = np.full((self.n_features_in_, N_BIN_CODES), np.inf)
        for j, edges in enumerate(self.bin_edges_):
            if edges is None:
                table[j] = np.nan
            else:
                table[j, : len(edges)] = edges
        return table

    def kernel_arrays(self):
        """The bin description the grower takes, as a ``BinArrays``."""
        return BinArrays(
            self.n_bins_non_missing_,
            self.is_categorical_,
            self.bin_values(),
            self.threshold_table(),
        )

    def bin_values(self):
        """A representative raw value per bin: where the grower places thresholds between the
        bins a node uses, and draws random thresholds.

        Returns
        -------
        ndarray of float64, shape (n_features, N_BIN_CODES)
            Numeric features: each bin's value (distinct values) or the middle of its range
            (quantile bins); categorical features: their bin index.
        """
        values = np.tile(np.arange(N_BIN_CODES, dtype=X_DTYPE), (self.n_features_in_, 1))
        for j, representatives in enumerate(self.bin_values_):
            if representatives is not None:
                values[j, : len(representatives)] = representatives
        return values


class BinArrays(NamedTuple):
    """What the grower needs to know of the bins, as arrays (see ``BinMapper.kernel_arrays``)."""

    n_bins: np.ndarray  # int32 (n_features,): non-missing bins
    is_categorical: np.ndarray  # bool (n_features,)
    bin_values: np.ndarray  # float64 (n_features, N_BIN_CODES): see BinMapper.bin_values
    thresholds: np.ndarray  # float64 (n_features, N_BIN_CODES): see BinMapper.threshold_table

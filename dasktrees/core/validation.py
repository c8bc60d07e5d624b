"""Input validation: one place for the checks of X, y and sample_weight and their messages.

Tables are handled column by column because a pandas frame mixes numeric and categorical columns:
``table_columns`` turns X into a list of 1-d columns plus the information needed to bin them.
"""

import sys
from dataclasses import dataclass

# pandas, scipy and scikit-learn are imported inside the functions that use them: the kernel
# modules that import this one load without them (docs/design.md, "Compiled for what a fit uses").
import numpy as np


# Whether an input is of pandas' or scipy's types, asked without importing them: an object of a
# library this process has not imported is none of its types. A worker binning a numpy fit's
# blocks so imports neither (docs/design.md, "Where work runs").
def is_frame(X) -> bool:
    """Whether X is a pandas DataFrame."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(X, pandas.DataFrame)


def is_series(X) -> bool:
    """Whether X is a pandas Series."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(X, pandas.Series)


def is_sparse(X) -> bool:
    """Whether X is a scipy sparse matrix or array."""
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and sparse.issparse(X)


@dataclass
class Column:
    """One input column: its display name, values and whether it is categorical."""

    name: str
    values: object  # 1-d ndarray, pandas Series or Categorical
    categorical: bool


def column_label(names, j):
    """How error messages name column ``j``: ``column 'age'`` or ``column 3``."""
    return f"column {names[j]!r}" if names is not None else f"column {j}"


def check_2d(X):
    """Coerce X to a 2-d numpy array, keep a pandas DataFrame, or make a scipy sparse matrix
    CSR (``sparse_rows``); reject what cannot be used.

    Raises ``ValueError`` for complex data, a wrong number of dimensions, no rows or no columns.
    """
    if is_sparse(X):
        X = sparse_rows(X)
    elif not is_frame(X):
        X = np.asarray(X)
        if np.iscomplexobj(X):
            raise ValueError("X: Complex data not supported")
        if X.ndim != 2:
            raise ValueError(
                f"X must be 2-d (n_samples, n_features), got an array of shape {X.shape}. "
                "Reshape your data with X.reshape(-1, 1) if it has a single feature"
            )
    n_samples, n_features = X.shape
    if n_samples == 0:
        raise ValueError(f"X has 0 samples (shape={X.shape}); at least 1 is required")
    if n_features == 0:
        raise ValueError(f"X has 0 feature(s) (shape={X.shape}) while a minimum of 1 is required.")
    return X


def sparse_rows(X):
    """A scipy sparse X (any format, matrix or array) as CSR of float64 (float32 kept) with no
    duplicate entries: row blocks slice it cheaply (a row slice copies only its rows' stored
    entries). X itself is never changed (a conversion or the summing of duplicates works on a
    copy); a stored value is a value as any other, NaN missing, and every entry not stored is
    zero."""
    if X.dtype.kind == "c":
        raise ValueError("X: Complex data not supported")
    if X.ndim != 2:
        raise ValueError(f"X must be 2-d (n_samples, n_features), got shape {X.shape}")
    if X.dtype.kind not in "fiub":
        raise ValueError(f"X: sparse data of dtype {X.dtype} is not numeric")
    rows = X.tocsr()
    if rows.dtype.kind != "f":  # integers and bools as the dense path reads them: float64
        rows = rows.astype(np.float64)
    if not rows.has_canonical_format:
        rows = rows.copy() if rows is X else rows
        rows.sum_duplicates()
    if np.isinf(rows.data).any():
        j = int(rows.indices[np.flatnonzero(np.isinf(rows.data))[0]])
        raise ValueError(f"X column {j} contains infinity; replace it with a finite value or NaN")
    return rows


def _is_categorical_dtype(dtype):
    import pandas as pd

    return (
        isinstance(dtype, pd.CategoricalDtype)
        or pd.api.types.is_bool_dtype(dtype)
        or pd.api.types.is_object_dtype(dtype)
        or pd.api.types.is_string_dtype(dtype)
    )


def categorical_mask(X, categorical_features):
    """Which columns of X are categorical.

    pandas ``category``, ``object``, ``string`` and ``bool`` columns always are; so are the
    columns named (or indexed, or masked) by ``categorical_features``.
    """
    n_features = X.shape[1]
    names = list(map(str, X.columns)) if is_frame(X) else None
    mask = np.zeros(n_features, dtype=bool)
    if names is not None:
        mask[:] = [_is_categorical_dtype(dtype) for dtype in X.dtypes]
    if categorical_features is None:
        return mask
    spec = np.asarray(categorical_features)
    if spec.dtype == bool:
        if spec.shape != (n_features,):
            raise ValueError(
                f"categorical_features: a boolean mask must have one entry per feature "
                f"({n_features}), got shape {spec.shape}"
            )
        return mask | spec
    for item in np.atleast_1d(spec).tolist():
        if isinstance(item, str):
            if names is None or item not in names:
                raise ValueError(
                    f"categorical_features: no column named {item!r} in X"
                    + ("" if names is None else f"; columns are {names}")
                )
            mask[names.index(item)] = True
        elif isinstance(item, int) and -n_features <= item < n_features:
            mask[item] = True
        else:
            raise ValueError(
                f"categorical_features: {item!r} is neither a column name nor an index "
                f"in [0, {n_features})"
            )
    return mask


def table_columns(X, is_categorical):
    """Split a checked 2-d X into ``Column``s; numeric ones as real arrays with NaN for missing."""
    names = list(map(str, X.columns)) if is_frame(X) else None
    checked = False
    if names is None and X.dtype.kind == "f":
        # One pass over the whole matrix rather than one strided pass per column.
        has_inf = np.isinf(X).any(axis=0)
        if has_inf.any():
            j = int(np.flatnonzero(has_inf)[0])
            raise ValueError(
                f"X column {j} contains infinity; replace it with a finite value or NaN"
            )
        checked = True
    columns = []
    # items(): a frame's columns faster than iloc, which one-row predictions would pay
    raws = (
        (raw for _, raw in X.items()) if names is not None else (X[:, j] for j in range(X.shape[1]))
    )
    for j, raw in enumerate(raws):
        name = column_label(names, j)
        if is_categorical[j]:
            columns.append(Column(name, raw, True))
        else:
            columns.append(Column(name, numeric_values(raw, name, check_inf=not checked), False))
    return columns


def numeric_values(raw, name, check_inf=True):
    """A numeric column as a real-valued ndarray (NaN for missing); inf and strings are errors.

    Float and integer columns are returned as they are (possibly a strided view); booleans,
    pandas extension types and numeric strings become float64.
    """
    if is_series(raw):
        import pandas as pd

        if pd.api.types.is_datetime64_any_dtype(raw.dtype) or pd.api.types.is_timedelta64_dtype(
            raw.dtype
        ):
            raise TypeError(f"X {name} has dtype {raw.dtype}; convert dates to numbers first")
        # A numpy dtype is checked below as an array's is, without the copy (and the missing
        # value mask) of extension types' conversion.
        if isinstance(raw.dtype, np.dtype):
            raw = raw.to_numpy()
        else:
            raw = raw.to_numpy(dtype=np.float64, na_value=np.nan)
    raw = np.asarray(raw)
    if raw.dtype.kind in "USO":
        try:
            values = raw.astype(np.float64)
        except ValueError as exc:
            raise TypeError(
                f"X {name} holds strings ({exc}); declare it in categorical_features "
                "or encode it as numbers"
            ) from None
    elif raw.dtype.kind == "c":
        raise ValueError(f"X {name}: Complex data not supported")
    elif raw.dtype.kind in "mM":
        raise TypeError(f"X {name} has dtype {raw.dtype}; convert dates to numbers first")
    elif raw.dtype.kind == "b":
        values = raw.astype(np.float64)
    else:
        values = raw  # real dtypes stay as they are: the kernels read them without a copy
    if check_inf and values.dtype.kind == "f" and np.isinf(values).any():
        raise ValueError(f"X {name} contains infinity; replace it with a finite value or NaN")
    return values


def reject_sparse_target(y):
    """A scipy sparse y is a ``ValueError`` (scikit-learn's words: its forests refuse it too)."""
    if is_sparse(y):
        raise ValueError("y: sparse multilabel-indicator for y is not supported.")


def check_target(y, n_samples, is_classifier, multi_output=False):
    """y as a 1-d array, or with ``multi_output`` a (n_samples, k) C-ordered one when y has
    k >= 2 columns (one column is read as 1-d, with scikit-learn's DataConversionWarning); NaN
    (and for regression, inf) is a ValueError."""
    import pandas as pd
    from sklearn.utils.validation import column_or_1d

    reject_sparse_target(y)
    columns = np.asarray(y) if multi_output else None
    if columns is not None and columns.ndim == 2 and columns.shape[1] > 1:
        y = columns
    else:
        y = column_or_1d(y, warn=True)
    if len(y) != n_samples:
        raise ValueError(f"y has {len(y)} samples but X has {n_samples}")
    missing = pd.isna(y)
    if missing.ndim == 2:
        missing = missing.any(axis=1)
    if missing.any():
        rows = np.flatnonzero(missing)[:5].tolist()
        raise ValueError(f"y contains NaN (first at rows {rows}); drop or impute those rows")
    if not is_classifier:
        try:
            y = np.ascontiguousarray(y, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"y must be numeric for a regressor, got dtype {y.dtype}") from None
        if np.isinf(y).any():
            raise ValueError("y contains infinity")
    return y


def check_single_output(estimator, what):
    """Refuse ``what`` on a fitted ``estimator`` (a tree or a forest) of several target
    columns."""
    n_outputs = getattr(estimator, "n_outputs_", 1)
    if n_outputs > 1:
        raise ValueError(
            f"{what} needs a single output; this {type(estimator).__name__} was fitted on "
            f"{n_outputs} target columns"
        )


def check_poisson_target(y_min, y_sum):
    """The Poisson criterion's conditions on y, given its smallest value and its sum: no
    negative value, and a positive sum (scikit-learn's checks, in its words)."""
    if y_min < 0:
        raise ValueError(
            "Some value(s) of y are negative which is not allowed for Poisson regression."
        )
    if y_sum <= 0:
        raise ValueError(
            "Sum of y is not strictly positive which is necessary for Poisson regression."
        )


# The error of weights that leave no row to fit (scikit-learn's checks look for its words).
NOTHING_TO_FIT = "sample_weight sums to zero: there is nothing to fit"


def check_sample_weight(sample_weight, n_samples, whole=True):
    """sample_weight as float64 of shape (n_samples,): finite, non-negative, and not all zero
    unless it is not ``whole``: one block of a forest's rows may weigh nothing, the forest
    checks its rows of positive weight over all its blocks (``distributed.data``)."""
    if sample_weight is None:
        return np.ones(n_samples)
    sample_weight = np.asarray(sample_weight, dtype=np.float64)
    if sample_weight.ndim == 0:
        sample_weight = np.full(n_samples, float(sample_weight))
    if sample_weight.shape != (n_samples,):
        raise ValueError(f"sample_weight.shape == {sample_weight.shape}, expected ({n_samples},)")
    if not np.isfinite(sample_weight).all():
        raise ValueError("sample_weight contains NaN or infinity")
    if (sample_weight < 0).any():
        raise ValueError("sample_weight contains negative values")
    if whole and sample_weight.sum() <= 0:
        raise ValueError(NOTHING_TO_FIT)
    return sample_weight


def check_predict_columns(estimator, X):
    """scikit-learn's prediction-time check of X's features (their number, and their names
    against ``feature_names_in_``), for a checked 2-d X.

    A DataFrame whose columns are exactly the fitted names passes both checks, so it skips
    ``validate_data``'s name comparison, which costs more than a one-row prediction itself.
    """
    import pandas as pd
    from sklearn.utils.validation import validate_data

    names = getattr(estimator, "feature_names_in_", None)
    if isinstance(X, pd.DataFrame) and names is not None and list(X.columns) == list(names):
        return
    validate_data(estimator, X, reset=False, skip_check_array=True)

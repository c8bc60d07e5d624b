"""Sparse X (scipy CSR, CSC, COO; matrices and arrays): the oracle is the same estimator fitted
on the dense array, and every result must be the same, bit for bit. Zero is a value as any
other; a stored NaN is a missing value."""

import tracemalloc

import dask.array as da
import numpy as np
import pytest
from scipy import sparse
from sklearn.datasets import make_classification, make_regression

from dasktrees import (
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    ExtraTreesClassifier,
    ExtraTreesQuantileRegressor,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestQuantileRegressor,
    RandomForestRegressor,
)
from dasktrees.learner import binning
from dasktrees.learner.binning import BinMapper, SparseSample

CONTAINERS = [
    sparse.csr_matrix,
    sparse.csr_array,
    sparse.csc_matrix,
    sparse.csc_array,
    sparse.coo_matrix,
    sparse.coo_array,
]


def _mostly_zero(X, seed=0):
    """X with about 70 % of its values zero and a few NaN (stored by scipy, so missing)."""
    X = X.copy()
    X[np.abs(X) < 1.0] = 0.0
    X[np.random.default_rng(seed).random(X.shape) < 0.02] = np.nan
    return X


def classification():
    X, y = make_classification(300, 12, n_informative=5, random_state=0)
    return _mostly_zero(X), y


def regression():
    X, y = make_regression(300, 12, n_informative=5, noise=5.0, random_state=0)
    return _mostly_zero(X), y


def _same_forest(dense, sparse_fit, X, X_sparse):
    for method in ("predict", "predict_proba", "apply"):
        if hasattr(dense, method):
            expected = getattr(dense, method)(X)
            np.testing.assert_array_equal(getattr(sparse_fit, method)(X_sparse), expected)
            np.testing.assert_array_equal(getattr(sparse_fit, method)(X), expected)
    np.testing.assert_array_equal(sparse_fit.feature_importances_, dense.feature_importances_)


@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize(
    "cls",
    [RandomForestClassifier, ExtraTreesClassifier, RandomForestRegressor, ExtraTreesRegressor],
)
def test_sparse_and_dense_give_the_same_forest(cls, container):
    X, y = classification() if "Classifier" in cls.__name__ else regression()
    params = dict(n_estimators=8, random_state=0, oob_score=True, bootstrap=True)
    dense = cls(**params).fit(X, y)
    fitted = cls(**params).fit(container(X), y)
    _same_forest(dense, fitted, X, container(X))
    assert fitted.oob_score_ == dense.oob_score_
    indicator, ptr = fitted.decision_path(container(X))
    expected, expected_ptr = dense.decision_path(X)
    np.testing.assert_array_equal(ptr, expected_ptr)
    assert (indicator != expected).nnz == 0


@pytest.mark.parametrize("cls", [DecisionTreeClassifier, DecisionTreeRegressor])
def test_sparse_and_dense_give_the_same_tree(cls):
    X, y = classification() if cls is DecisionTreeClassifier else regression()
    dense = cls(random_state=0).fit(X, y)
    fitted = cls(random_state=0).fit(sparse.csc_matrix(X), y)
    _same_forest(dense, fitted, X, sparse.csr_matrix(X))
    assert (fitted.decision_path(sparse.csr_matrix(X)) != dense.decision_path(X)).nnz == 0


@pytest.mark.parametrize("cls", [RandomForestQuantileRegressor, ExtraTreesQuantileRegressor])
def test_sparse_quantile_forest(cls):
    X, y = regression()
    dense = cls(n_estimators=8, random_state=0).fit(X, y)
    fitted = cls(n_estimators=8, random_state=0).fit(sparse.csr_matrix(X), y)
    q = [0.1, 0.5, 0.9]
    np.testing.assert_array_equal(
        fitted.predict(sparse.csr_matrix(X), quantiles=q), dense.predict(X, quantiles=q)
    )


def test_sparse_explanations_and_export():
    X, y = regression()
    dense = RandomForestRegressor(n_estimators=4, random_state=0).fit(X, y)
    fitted = RandomForestRegressor(n_estimators=4, random_state=0).fit(sparse.csr_matrix(X), y)
    np.testing.assert_array_equal(
        fitted.shap_values(sparse.csr_matrix(X[:50])), dense.shap_values(X[:50])
    )
    # scikit-learn's trees read sparse X themselves: the export predicts as ours.
    np.testing.assert_array_equal(
        fitted.to_sklearn().predict(sparse.csr_matrix(np.nan_to_num(X))),
        fitted.predict(sparse.csr_matrix(np.nan_to_num(X))),
    )


def test_sparse_on_a_cluster(client):
    """Row blocks of a CSR X sent to the workers, and a dask array of sparse blocks."""
    X, y = classification()
    params = dict(n_estimators=8, random_state=0, oob_score=True, client=client)
    dense = RandomForestClassifier(**params).fit(X, y)
    on_cluster = RandomForestClassifier(**params).fit(sparse.csr_matrix(X), y)
    _same_forest(dense, on_cluster, X, sparse.csr_matrix(X))
    assert on_cluster.oob_score_ == dense.oob_score_
    blocks = da.from_array(X, chunks=(100, -1)).map_blocks(
        sparse.csr_matrix, meta=sparse.csr_matrix((0, X.shape[1]))
    )
    lazy = RandomForestClassifier(**params).fit(blocks, da.from_array(y, chunks=100))
    np.testing.assert_array_equal(
        client.compute(lazy.predict_proba(blocks), sync=True), dense.predict_proba(X)
    )
    workers = RandomForestClassifier(tree_storage="workers", **params).fit(sparse.csr_matrix(X), y)
    np.testing.assert_array_equal(
        workers.predict_proba(sparse.csr_matrix(X)), dense.predict_proba(X)
    )


def test_prediction_in_batches_of_rows(monkeypatch):
    """A sparse X is predicted in dense batches of rows: many batches give the same values."""
    X, y = classification()
    forest = RandomForestClassifier(n_estimators=4, random_state=0).fit(X, y)
    expected = forest.predict_proba(X)
    batches = []
    encode = BinMapper.encode

    def counted(self, rows):
        batches.append(rows.shape[0])
        return encode(self, rows)

    # 7 rows a batch: 43 batches of the 300 rows.
    monkeypatch.setattr(binning, "DENSE_BATCH_BYTES", 7 * 8 * X.shape[1])
    monkeypatch.setattr(BinMapper, "encode", counted)
    np.testing.assert_array_equal(forest.predict_proba(sparse.csr_matrix(X)), expected)
    assert len(batches) == 43 and max(batches) == 7 and sum(batches) == 300


def test_binning_keeps_the_raw_values_sparse():
    """The bin mapper samples a sparse column as its stored values and a count of zeros, and
    transform bins column by column: its memory is the codes (a byte a value), not the dense
    float values (eight bytes a value)."""
    n, p = 20_000, 2_000
    X = sparse.random(n, p, density=0.002, format="csr", random_state=0)
    mapper = BinMapper(max_bins=16)
    numeric, _ = mapper._set_columns(X).pieces(X, X)
    assert all(isinstance(s, SparseSample) for s in numeric)
    assert sum(s.n_zeros + len(s.stored) for s in numeric) == n * p
    assert sum(len(s.stored) for s in numeric) == X.nnz
    mapper.fit(X)
    tracemalloc.start()
    codes = mapper.transform(X)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1.5 * n * p  # the codes are n * p bytes; dense values would be 8 n p
    column = X[:, [7]].toarray().ravel()
    np.testing.assert_array_equal(
        codes[:, 7], BinMapper(max_bins=16).fit(column[:, None]).transform(column[:, None])[:, 0]
    )


def test_duplicate_entries_are_summed_in_a_copy():
    """A CSR matrix may store an entry twice (scipy sums them); the fit sums them in a copy and
    leaves the user's matrix as it was."""
    X, y = classification()
    X = np.nan_to_num(X)
    coo = sparse.coo_matrix(X)
    rows = np.concatenate([coo.row, coo.row])
    order = np.argsort(rows, kind="stable")  # each stored entry twice, in row order
    halves = sparse.csr_matrix(
        (
            (np.concatenate([coo.data, coo.data]) / 2)[order],
            np.concatenate([coo.col, coo.col])[order],
            np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(X)))]),
        ),
        shape=X.shape,
    )
    stored = halves.data.copy()
    assert halves.nnz == 2 * coo.nnz
    dense = RandomForestClassifier(n_estimators=4, random_state=0).fit(X, y)
    fitted = RandomForestClassifier(n_estimators=4, random_state=0).fit(halves, y)
    np.testing.assert_array_equal(fitted.predict_proba(halves), dense.predict_proba(X))
    assert halves.nnz == 2 * coo.nnz  # not summed in place
    np.testing.assert_array_equal(halves.data, stored)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_other_dtypes_and_stored_zeros(dtype):
    """Integer, boolean and float32 values, and zeros stored explicitly (and -0.0), as dense."""
    X, y = classification()
    X = np.round(np.nan_to_num(X)) if dtype is not np.bool_ else np.nan_to_num(X) > 0.5
    X = X.astype(dtype)
    stored = sparse.csr_matrix(X)
    stored.data[::7] = 0  # explicit zeros: values as the entries not stored
    if dtype is np.float32:
        stored.data[1::7] = -0.0
    dense_X = stored.toarray()
    dense = RandomForestClassifier(n_estimators=4, random_state=0).fit(dense_X, y)
    fitted = RandomForestClassifier(n_estimators=4, random_state=0).fit(stored, y)
    np.testing.assert_array_equal(fitted.predict_proba(stored), dense.predict_proba(dense_X))
    np.testing.assert_array_equal(fitted.apply(dense_X), dense.apply(dense_X))


def test_sparse_input_errors():
    X, y = classification()
    with pytest.raises(ValueError, match="categorical_features"):
        RandomForestClassifier(n_estimators=2, categorical_features=[0]).fit(
            sparse.csr_matrix(X), y
        )
    with pytest.raises(ValueError, match="sparse multilabel-indicator for y is not supported"):
        RandomForestClassifier(n_estimators=2).fit(X, sparse.csr_matrix(y[:, None]))
    with pytest.raises(ValueError, match="sparse multilabel-indicator for y is not supported"):
        DecisionTreeClassifier().fit(X, sparse.csr_matrix(y[:, None]))
    bad = np.nan_to_num(X)
    bad[5, 3] = np.inf
    with pytest.raises(ValueError, match="X column 3 contains infinity"):
        RandomForestClassifier(n_estimators=2).fit(sparse.csr_matrix(bad), y)
    with pytest.raises(ValueError, match="Complex data not supported"):
        RandomForestClassifier(n_estimators=2).fit(sparse.csr_matrix(X.astype(complex)), y)
    blocks = da.from_array(np.nan_to_num(X), chunks=(100, -1)).map_blocks(
        sparse.csr_matrix, meta=sparse.csr_matrix((0, X.shape[1]))
    )
    with pytest.raises(ValueError, match="categorical_features"):
        RandomForestClassifier(n_estimators=2, categorical_features=[0]).fit(
            blocks, da.from_array(y, chunks=100)
        )

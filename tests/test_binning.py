"""BinMapper: exact and quantile edges, categories, missing values, partition independence."""

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dasktrees import BinMapper
from dasktrees.core.dtypes import MISSING_BIN
from dasktrees.learner.binning import bin_numeric, category_bins, numeric_bin_edges, sample_mask


def test_few_distinct_values_get_one_bin_each_with_midpoint_edges():
    X = np.array([[3.0], [1.0], [2.0], [1.0], [10.0]])
    mapper = BinMapper().fit(X)
    np.testing.assert_array_equal(mapper.bin_edges_[0], [1.5, 2.5, 6.5])
    np.testing.assert_array_equal(mapper.bin_values_[0], [1.0, 2.0, 3.0, 10.0])
    np.testing.assert_array_equal(mapper.transform(X)[:, 0], [2, 0, 1, 0, 3])
    assert mapper.n_bins_non_missing_[0] == 4


def test_many_values_get_quantile_bins():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20_000, 1))
    mapper = BinMapper(max_bins=16).fit(x)
    codes = mapper.transform(x)[:, 0]
    assert mapper.n_bins_non_missing_[0] == 16
    counts = np.bincount(codes, minlength=16)
    assert counts.min() > 0.8 * len(x) / 16 and counts.max() < 1.2 * len(x) / 16


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 2000), max_bins=st.integers(2, 255))
def test_binning_kernel_matches_searchsorted(seed, n, max_bins):
    rng = np.random.default_rng(seed)
    values = rng.integers(-50, 50, n) * rng.choice([0.5, 1.0], n)
    values[rng.random(n) < 0.1] = np.nan
    edges, representatives = numeric_bin_edges(values, max_bins)
    # One representative per bin; a column with no value at all has no bin.
    assert len(representatives) == (len(edges) + 1 if (~np.isnan(values)).any() else 0)
    assert (np.diff(representatives) > 0).all()
    padded = np.full(256, np.inf)
    padded[: len(edges)] = edges
    out = np.empty(n, dtype=np.uint8)
    bin_numeric(values.astype(np.float32), padded, out)
    expected = np.searchsorted(edges, values, side="left")
    expected[np.isnan(values)] = MISSING_BIN
    np.testing.assert_array_equal(out, expected)
    # No edge sits on a value but the largest (a quantile among ties moves half-way up), and
    # the values are cut where the quantiles cut them.
    assert (np.diff(edges) > 0).all()
    present = np.unique(values[~np.isnan(values)])
    assert not np.isin(edges, present[:-1]).any()
    if len(present) > max_bins:
        ordered = np.sort(values[~np.isnan(values)])
        positions = (len(ordered) - 1) * np.linspace(0.0, 1.0, max_bins + 1)[1:-1]
        quantiles = np.unique(
            (ordered[np.floor(positions).astype(int)] + ordered[np.ceil(positions).astype(int)]) / 2
        )
        # The same values share a bin (a bin the quantiles left empty is gone).
        np.testing.assert_array_equal(
            np.diff(np.searchsorted(edges, present, side="left")) == 0,
            np.diff(np.searchsorted(quantiles, present, side="left")) == 0,
        )


def test_nan_goes_to_the_missing_bin():
    X = np.array([[1.0], [np.nan], [2.0]])
    codes = BinMapper().fit(X).transform(X)[:, 0]
    assert codes[1] == MISSING_BIN and codes[0] != MISSING_BIN


def test_all_missing_column_is_one_empty_bin():
    X = np.array([[np.nan, 1.0], [np.nan, 2.0]])
    mapper = BinMapper().fit(X)
    assert mapper.n_bins_non_missing_[0] == 1
    assert (mapper.transform(X)[:, 0] == MISSING_BIN).all()


def test_edges_do_not_depend_on_partitioning():
    """More rows than the subsample: rows are chosen by a hash of their global id, so pieces
    computed partition by partition and combined give exactly the whole table's fit."""
    rng = np.random.default_rng(1)
    X = pd.DataFrame({"a": rng.normal(size=3000), "c": rng.choice(list("xyz"), 3000)})
    whole = BinMapper(subsample=500, random_state=3).fit(X)
    assert 300 < sample_mask(np.arange(3000), 500 / 3000, 3).sum() < 700

    pieced = BinMapper(subsample=500, random_state=3)._set_columns(X.head(0))
    fraction = pieced.sampling_fraction(len(X))
    numeric, counts = [[]], [[]]
    for start, stop in [(0, 700), (700, 1900), (1900, 3000)]:
        part = X.iloc[start:stop]
        keep = sample_mask(np.arange(start, stop), fraction, 3)
        (values,), (count,) = pieced.pieces(part, part[keep])
        numeric[0].append(values)
        counts[0].append(count)
    pieced.fit_from_pieces(
        [np.concatenate(numeric[0])], [pd.concat(counts[0]).groupby(level=0).sum()]
    )
    np.testing.assert_array_equal(whole.bin_edges_[0], pieced.bin_edges_[0])
    np.testing.assert_array_equal(whole.categories_[1], pieced.categories_[1])
    np.testing.assert_array_equal(whole.transform(X), pieced.transform(X))


def test_pandas_categorical_object_string_and_bool_columns():
    X = pd.DataFrame(
        {
            "num": [1.0, 2.0, np.nan, 4.0],
            "cat": pd.Categorical(["b", "a", "b", None], categories=["b", "a", "z"]),
            "obj": np.array(["x", "y", "x", "y"], dtype=object),
            "str": pd.array(["u", "v", None, "u"], dtype="string"),
            "flag": [True, False, True, True],
        }
    )
    mapper = BinMapper().fit(X)
    np.testing.assert_array_equal(mapper.is_categorical_, [False, True, True, True, True])
    codes = mapper.transform(X)
    # pandas categories keep their dtype order; unobserved ones get no bin.
    assert list(mapper.categories_[1]) == ["b", "a"]
    np.testing.assert_array_equal(codes[:, 1], [0, 1, 0, MISSING_BIN])
    np.testing.assert_array_equal(codes[:, 3], [0, 1, MISSING_BIN, 0])
    np.testing.assert_array_equal(codes[:, 4], [1, 0, 1, 1])


def test_unseen_categories_are_missing_at_transform():
    train = pd.DataFrame({"c": ["a", "b", "a"]})
    mapper = BinMapper().fit(train)
    codes = mapper.transform(pd.DataFrame({"c": ["b", "new", None]}))[:, 0]
    np.testing.assert_array_equal(codes, [1, MISSING_BIN, MISSING_BIN])
    encoded = mapper.encode(pd.DataFrame({"c": ["b", "new"]}))[:, 0]
    assert encoded[0] == 1 and np.isnan(encoded[1])


def test_many_categories_share_bins_in_runs_of_neighbours():
    values = ["common"] * 50 + ["second"] * 20 + [f"rare{i}" for i in range(10)]
    mapper = BinMapper(max_bins=3).fit(pd.DataFrame({"c": values}))
    codes = mapper.transform(pd.DataFrame({"c": values}))[:, 0]
    # Sorted: common, rare0, ..., rare9, second. The two frequent categories keep a bin of their
    # own; the ten rare neighbours between them share one.
    assert mapper.categories_[0].tolist() == ["common"] + [f"rare{i}" for i in range(10)] + [
        "second"
    ]
    assert mapper.category_bins_[0].tolist() == [0] + [1] * 10 + [2]
    assert set(codes[70:]) == {1} and set(codes[:50]) == {0} and set(codes[50:70]) == {2}


def test_declared_categories_without_rows_join_their_neighbours_run():
    # 40 declared levels, 30 with rows: more than max_bins=4, so runs of neighbours share bins,
    # and a declared level no training row has gets the bin of the run it falls in. With fewer
    # observed levels than max_bins it is unseen: missing.
    levels = [f"z{i:02d}" for i in range(40)]
    observed = [c for i, c in enumerate(levels) if i % 4 != 1]
    train = pd.DataFrame({"c": pd.Categorical(observed * 3, categories=levels)})
    mapper = BinMapper(max_bins=4).fit(train)
    assert mapper.categories_[0].tolist() == levels
    bins = dict(zip(levels, mapper.category_bins_[0].tolist()))
    assert sorted(set(bins.values())) == [0, 1, 2, 3]
    for i in range(1, 40, 4):  # each unobserved level shares its predecessor's bin
        assert bins[levels[i]] == bins[levels[i - 1]]
    new = pd.DataFrame({"c": pd.Categorical(["z01", "z37", "never declared"])})
    np.testing.assert_array_equal(
        mapper.transform(new)[:, 0], [bins["z01"], bins["z37"], MISSING_BIN]
    )
    few = BinMapper(max_bins=255).fit(train)
    assert few.categories_[0].tolist() == observed
    assert few.transform(new)[0, 0] == MISSING_BIN


def _heaviest_shared_run(counts, bins):
    """Rows of the heaviest run of two or more categories with rows (a single category may be
    heavier)."""
    shared = [b for b in set(bins) if ((bins == b) & (counts > 0)).sum() > 1]
    return max((counts[bins == b].sum() for b in shared), default=0)


@pytest.mark.parametrize("seed", range(40))
def test_category_runs_are_the_most_even_cut(seed):
    """Against every way of cutting the categories, in order, into at most max_bins runs: the
    runs are contiguous, at most max_bins, and their heaviest shared run is as light as any cut
    allows."""
    rng = np.random.default_rng(seed)
    n, max_bins = int(rng.integers(4, 9)), int(rng.integers(2, 4))
    counts = rng.integers(1, 30, n) * np.where(rng.random(n) < 0.2, 10, 1)
    counts[rng.random(n) < 0.15] = 0  # declared categories without rows
    bins = category_bins(np.arange(n), counts, max_bins)
    assert bins[0] == 0 and np.all(np.diff(bins) >= 0) and np.all(np.diff(bins) <= 1)
    assert bins.max() < max_bins
    best = min(
        _heaviest_shared_run(counts, np.searchsorted(cuts, np.arange(n), side="right"))
        for k in range(max_bins)
        for cuts in itertools.combinations(range(1, n), k)
    )
    assert _heaviest_shared_run(counts, bins) == best


def test_declared_categorical_numpy_column():
    X = np.array([[5.0, 1.0], [7.0, 2.0], [5.0, 3.0]])
    mapper = BinMapper(categorical_features=[0]).fit(X)
    assert mapper.is_categorical_.tolist() == [True, False]
    np.testing.assert_array_equal(mapper.transform(X)[:, 0], [0, 1, 0])


@pytest.mark.parametrize(
    "X, match",
    [
        (np.array([[1.0], [np.inf]]), "column 0 contains infinity"),
        (pd.DataFrame({"a": [1.0, 2.0], "b": [1.0, -np.inf]}), "column 'b' contains infinity"),
        (np.array([["a", "1"], ["b", "2"]], dtype=object), "column 0 holds strings"),
        (np.array([[1 + 2j], [3j]]), "Complex data not supported"),
        (np.empty((0, 3)), "0 samples"),
        (np.empty((3, 0)), "0 feature"),
    ],
)
def test_bad_input(X, match):
    with pytest.raises((ValueError, TypeError), match=match):
        BinMapper().fit(X)


def test_unknown_categorical_feature_name():
    with pytest.raises(ValueError, match="categorical_features: no column named 'zz'"):
        BinMapper(categorical_features=["zz"]).fit(pd.DataFrame({"a": [1, 2]}))

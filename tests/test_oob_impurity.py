"""The debiased impurity importance on the out-of-bag rows (MDI-oob, Li et al. 2019):
``oob_impurity_importance`` against a naive computation of its formula, its sum over the in-bag
rows against the trees' mean decrease in impurity, the ID-like noise feature MDI ranks high and
MDI-oob does not, the same figures on any cluster, errors, and the run directory."""

import json
from pathlib import Path

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.exceptions import NotFittedError

import dasktrees as dt
from dasktrees.forest.exact import EXACT_DIGITS, from_digits, from_exact
from dasktrees.forest.node_table import NodeTable
from dasktrees.forest.voting import add_oob_impurity
from dasktrees.learner.sampling import sampling_rate, tree_counts

from .conftest import local_client


def naive_oob_impurity(model, X, y, weights):
    """Li et al.'s MDI-oob as docs/algorithms.md writes it, one row and one node at a time: each
    tree's out-of-bag rows (recomputed from the row ids), their paths from ``decision_path`` on
    the encoded rows (float thresholds, not the bin codes the reduction routes on).

    ``weights``: each row's weight, sample_weight x class_weight. Returns (n_features, n_trees).
    """
    n, p = X.shape
    encoded = model.bin_mapper_.encode(X)
    if hasattr(model, "classes_"):
        labels = np.searchsorted(model.classes_, y)
        targets = (labels[:, None] == np.arange(len(model.classes_))).astype(float)
    else:
        targets = np.asarray(y, dtype=float)[:, None]
    lam = sampling_rate(model.bootstrap, model.max_samples, n)
    counts = np.empty(n)
    out = np.zeros((p, len(model.estimators_)))
    for t, est in enumerate(model.estimators_):
        tree = est.tree_
        tree_counts(model._seed, t, 0, lam, counts)
        paths = tree.decision_path(encoded)
        sums, total = np.zeros(p), 0.0
        for i in np.flatnonzero((counts == 0) & (weights > 0)):
            path = paths.indices[paths.indptr[i] : paths.indptr[i + 1]]  # root first
            for node, child in zip(path[:-1], path[1:]):
                decrease = (tree.value[child] - tree.value[node]) @ (targets[i] - tree.value[0])
                sums[tree.feature[node]] += weights[i] * decrease
            total += weights[i]
        out[:, t] = sums / total
    return out


def mixed_frame(n=400, seed=0):
    """Numeric (with missing values), categorical and ID-like columns."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "x": np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n)),
            "colour": pd.Categorical(rng.choice(["red", "green", "blue", "grey"], n)),
            "id": rng.permutation(n).astype(float),
            "z": rng.normal(size=n),
        }
    )
    signal = np.nan_to_num(frame["x"].to_numpy()) + (frame["colour"] == "red") - 0.5 * frame["z"]
    return frame, signal.to_numpy() + rng.normal(size=n)


def test_classifier_equals_the_naive_formula_with_weights_missing_values_and_categories():
    frame, signal = mixed_frame()
    y = np.array(["a", "b", "c"])[np.digitize(signal, [-0.5, 0.8])]
    sample_weight = np.random.default_rng(1).uniform(0.0, 2.0, len(y))
    sample_weight[:20] = 0.0
    model = dt.RandomForestClassifier(
        n_estimators=6, class_weight={"a": 2.0}, random_state=0, n_blocks=3
    ).fit(frame, y, sample_weight=sample_weight)
    result = model.oob_impurity_importance(frame, y, sample_weight=sample_weight)
    weights = sample_weight * np.where(y == "a", 2.0, 1.0)
    expected = naive_oob_impurity(model, frame, y, weights)
    assert result.importances.shape == (4, 6)
    np.testing.assert_allclose(result.importances, expected, rtol=0, atol=1e-10)
    np.testing.assert_allclose(result.importances_mean, expected.mean(axis=1), atol=1e-10)
    np.testing.assert_allclose(result.importances_std, expected.std(axis=1), atol=1e-10)
    assert result.importances_mean.argmax() == 0


def test_regressor_with_max_samples_equals_the_naive_formula():
    frame, y = mixed_frame(seed=2)
    model = dt.ExtraTreesRegressor(
        n_estimators=5, max_samples=0.5, min_samples_leaf=2, random_state=3
    ).fit(frame, y)
    result = model.oob_impurity_importance(frame, y)
    expected = naive_oob_impurity(model, frame, y, np.ones(len(y)))
    np.testing.assert_allclose(result.importances, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("classification", [True, False])
def test_over_the_in_bag_rows_the_sum_is_the_mean_decrease_in_impurity(classification):
    """What makes MDI-oob the out-of-bag version of MDI: the same sum taken over a tree's own
    in-bag rows, weighted by their counts, is the tree's unnormalised mean decrease in Gini
    impurity or squared error (the expression of MDI from which Li et al. 2019 derive MDI-oob)."""
    frame, signal = mixed_frame(seed=4)
    y = (signal > 0).astype(float) if classification else signal
    Forest = dt.RandomForestClassifier if classification else dt.RandomForestRegressor
    model = Forest(n_estimators=4, min_samples_leaf=3, random_state=0).fit(frame, y)
    codes = model.bin_mapper_.transform(frame)
    table = NodeTable([est.tree_ for est in model.estimators_])
    counts = np.empty(len(y))
    for t, est in enumerate(model.estimators_):
        tree_counts(model._seed, t, 0, 1.0, counts)
        acc = np.zeros((codes.shape[1] + 1, EXACT_DIGITS), dtype=np.int64)
        in_bag = np.zeros(len(y))  # every row "out of bag", weighted by its count
        add_oob_impurity(
            codes, y, counts, in_bag, table.nodes, table.bitsets, table.starts[t],
            table.values, classification, acc,
        )  # fmt: skip
        sums = np.array([from_exact(s) for s in from_digits(acc)])
        assert sums[-1] == est.tree_.weighted_n_node_samples[0]
        mdi = est.tree_.compute_feature_importances(normalize=False)
        np.testing.assert_allclose(sums[:-1] / sums[-1], mdi, rtol=1e-9, atol=1e-12)


def id_noise_data(n=1000, seed=0):
    """x0 informative, id a permutation of 0..n-1 (unique per row, pure noise), binary a weak
    but real effect."""
    rng = np.random.default_rng(seed)
    X = np.column_stack(
        [rng.normal(size=n), rng.permutation(n).astype(float), rng.integers(0, 2, size=n)]
    )
    signal = X[:, 0] + 0.5 * X[:, 2]
    return X, signal + rng.normal(size=n), (signal + rng.normal(size=n) > 0.25).astype(int)


@pytest.mark.parametrize("classification", [True, False])
def test_mdi_ranks_an_id_like_noise_feature_high_and_the_debiased_importance_does_not(
    classification,
):
    X, y_reg, y_cls = id_noise_data()
    Forest = dt.RandomForestClassifier if classification else dt.RandomForestRegressor
    y = y_cls if classification else y_reg
    model = Forest(n_estimators=100, random_state=0).fit(X, y)
    mdi = model.feature_importances_
    debiased = model.oob_impurity_importance(X, y).importances_mean
    # MDI: the noise takes a quarter to a third of the importance, far above the binary effect
    assert mdi[1] > 0.2 and mdi[1] > 5 * mdi[2]
    # MDI-oob: about zero, below the binary effect, a few % of the informative feature's
    assert abs(debiased[1]) < 0.05 * debiased[0]
    assert debiased[2] > 2 * abs(debiased[1])
    assert debiased[0] > 0


def test_the_same_figures_on_any_cluster_and_for_dask_input(client):
    """Exact sums: the same figures, bit for bit, in this process, on the session's two worker
    processes, on two threads, in other blocks, and from dask collections."""
    frame, signal = mixed_frame(n=300, seed=5)
    y = (signal > 0).astype(int)
    X = frame.drop(columns="colour").to_numpy()
    model = dt.RandomForestClassifier(n_estimators=5, random_state=0).fit(X, y)
    reference = model.oob_impurity_importance(X, y).importances
    model.set_params(client=client, n_blocks=3)
    np.testing.assert_array_equal(model.oob_impurity_importance(X, y).importances, reference)
    Xd, yd = da.from_array(X, chunks=70), da.from_array(y, chunks=70)
    np.testing.assert_array_equal(model.oob_impurity_importance(Xd, yd).importances, reference)
    with local_client(n_workers=1, threads_per_worker=2, processes=False) as threads:
        model.set_params(client=threads, n_blocks=None)
        np.testing.assert_array_equal(model.oob_impurity_importance(X, y).importances, reference)


def test_errors():
    X, y, _ = id_noise_data(n=200)
    with pytest.raises(NotFittedError):
        dt.RandomForestRegressor().oob_impurity_importance(X, y)
    model = dt.ExtraTreesRegressor(n_estimators=2, random_state=0).fit(X, y)  # no bootstrap
    with pytest.raises(ValueError, match="oob_impurity_importance needs bootstrap=True"):
        model.oob_impurity_importance(X, y)
    model = dt.RandomForestRegressor(n_estimators=2, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="pass the training data"):
        model.oob_impurity_importance(X[:100], y[:100])


def test_run_directory_holds_it_beside_mdi(capsys, tmp_path, client):
    """On by default for a bootstrap forest: columns in importances.csv and a second panel in
    plots/importances.png."""
    from matplotlib.image import imread

    from dasktrees.command.cli import main

    X, y, _ = id_noise_data(n=500)
    pd.DataFrame({"x0": X[:, 0], "id": X[:, 1], "binary": X[:, 2], "target": y}).to_csv(
        tmp_path / "data.csv", index=False
    )
    config = {
        "name": "debiased",
        "cluster": {"address": client.scheduler.address},
        "data": {"train": str(tmp_path / "data.csv"), "target": "target"},
        "model": {"kind": "random_forest", "params": {"n_estimators": 20}},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    code = main(["run", str(tmp_path / "config.yaml"), "--output", str(tmp_path / "run")])
    assert code == 0, capsys.readouterr().err
    run_dir = Path(tmp_path / "run")
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert resolved["evaluation"]["oob_impurity_importance"] is None
    assert json.loads((run_dir / "metrics.json").read_text())["task"] == "regression"
    importances = pd.read_csv(run_dir / "importances.csv").set_index("feature")
    assert {"oob_impurity_mean", "oob_impurity_std"} <= set(importances.columns)
    assert importances.loc["id", "mdi_mean"] > importances.loc["binary", "mdi_mean"]
    assert importances["oob_impurity_mean"].idxmax() == "x0"
    assert (
        abs(importances.loc["id", "oob_impurity_mean"])
        < importances.loc["binary", "oob_impurity_mean"]
    )
    height, width = imread(run_dir / "plots" / "importances.png").shape[:2]
    assert width == 1100  # two panels (one is 700 pixels wide)

"""The ``dasktrees`` command: experiments from YAML end to end, invalid configs, predict, inspect.

Runs go to the session's LocalCluster through ``cluster.address`` where the cluster section is not
what is tested; the quickstart config starts its own LocalCluster as a user's would, and one test
starts a real ``dask scheduler`` and two ``dask worker`` processes.
"""

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.datasets import load_breast_cancer

import dasktrees
from dasktrees.command.cli import main
from dasktrees.modelfile import format as model_format

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def run_cli(capsys, *argv):
    """(exit code, stdout, stderr) of ``dasktrees argv`` run in this process."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def failure_line(stderr):
    """The one-line cause of a failed command: the last line, with no traceback printed."""
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith("error: "), stderr
    assert not any(line.startswith("Traceback") for line in lines), stderr
    return lines[-1]


def check_run_dir(run_dir, task, n_trees, has_test=True, permutation=False):
    """What every run directory holds."""
    assert not (run_dir / "FAILED").exists()
    names = {p.name for p in run_dir.iterdir()}
    assert {"config.yaml", "metrics.json", "importances.csv", "model", "plots", "run.log"} <= names
    assert "dask-report.html" in names
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["task"] == task and metrics["trees"] == n_trees
    assert metrics["fit_seconds"] > 0 and metrics["rows"]["train"] > 0
    assert set(metrics["versions"]) >= {"dasktrees", "dask", "distributed", "numpy", "scikit-learn"}
    if has_test:
        assert metrics["rows"]["test"] > 0 and metrics["test"]
    importances = pd.read_csv(run_dir / "importances.csv")
    assert {"feature", "mdi_mean"} <= set(importances.columns)
    assert importances["mdi_mean"].sum() == pytest.approx(1.0)
    if permutation:
        assert {"permutation_mean", "permutation_std"} <= set(importances.columns)
    plots = {p.name for p in (run_dir / "plots").iterdir()}
    assert "importances.png" in plots
    if task == "classification" and has_test:
        assert "confusion_matrix.png" in plots
    # the resolved config is itself a valid config
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["name"] == metrics["name"]
    assert "fitted in" in (run_dir / "run.log").read_text()
    return metrics


# ---- shipped configs, end to end -----------------------------------------------------------------


@pytest.mark.slow
def test_quickstart_config_on_its_own_local_cluster(capfd, tmp_path, monkeypatch):
    # capfd, not capsys: the worker processes' logging reaches file descriptor 2 directly.
    # The workers start on an empty numba cache, as on a fresh machine: they compile the
    # kernels in their tasks, or load those an installed dasktrees ships (this process has
    # loaded its own already).
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba-cache"))
    code, out, err = run_cli(
        capfd, "run", CONFIGS / "quickstart.yaml", "--output", tmp_path / "run"
    )
    assert code == 0, err
    run_dir = Path(out.strip().splitlines()[-1])  # the run directory is the last line
    assert run_dir == tmp_path / "run"
    metrics = check_run_dir(run_dir, "classification", 300, permutation=True)
    assert metrics["test"]["accuracy"] > 0.9 and metrics["test"]["roc_auc"] > 0.95
    assert 0.9 < metrics["oob_score"] <= 1.0
    curve = pd.read_csv(run_dir / "oob_curve.csv")
    assert list(curve["n_trees"]) == list(range(1, 301))
    assert {p.name for p in (run_dir / "plots").iterdir()} == {
        "importances.png",
        "oob_curve.png",
        "confusion_matrix.png",
    }
    assert "Dask dashboard: http" in err
    assert "trees [" in err and "300/300" in err  # the progress bar
    # A normal run is quiet, compiling or not: no warning from distributed (or anyone) in the
    # log or the terminal. (Workers once compiled in their task threads, and the profiles their
    # worker sampled of numba's deep stacks were too deep for dask's sizeof: "Sizeof
    # calculation for object of type 'dict' failed".) One known exception, distributed's and
    # harmless, never from an idle host: on a host loaded beyond its cores, a worker process
    # can take over the nanny's 4 s to exit when the cluster closes, after the results are
    # written, and the nanny says so.
    # The workers filled the empty cache: compiled, or copied from an installed bundle.
    assert list((tmp_path / "numba-cache").rglob("*.nbc"))
    known = "Worker process still alive after"
    log = (run_dir / "run.log").read_text()
    warnings = [line for line in log.splitlines() if " WARNING " in line]
    warnings += [line for line in err.splitlines() if "warn" in line.lower()]
    assert not [line for line in warnings if known not in line], warnings
    # the saved model predicts the test rows as the run's metrics say
    model = dasktrees.load(run_dir / "model")
    assert len(model.estimators_) == 300
    assert model.oob_score_ == metrics["oob_score"]


@pytest.mark.slow
def test_diamonds_config(capsys, tmp_path, client):
    code, out, err = run_cli(
        capsys,
        "run",
        CONFIGS / "diamonds.yaml",
        "--set",
        f"cluster={{address: {client.scheduler.address}}}",
        "--set",
        "model.params.n_estimators=10",
        "--output",
        tmp_path / "run",
    )
    assert code == 0, err
    metrics = check_run_dir(Path(out.split()[-1]), "regression", 10)
    assert metrics["test"]["r2"] > 0.9
    assert metrics["test"]["rmse"] > 0 and metrics["test"]["mae"] > 0


def flights_parquet(directory, n_rows):
    """``n_rows`` flights (categoricals and missing values kept) in three Parquet files."""
    flights = dasktrees.datasets.load_builtin("flights").sample(n_rows, random_state=0)
    assert flights["dep_delay"].isna().any()
    directory.mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(flights)), 3)):
        flights.iloc[rows].to_parquet(directory / f"part-{i}.parquet")
    return f"{directory}/*.parquet"


def run_flights(capsys, client, parquet, output, *settings):
    """configs/flights.yaml on ``parquet``, 10 trees and no permutation importance, on the
    session's cluster."""
    return run_cli(
        capsys,
        "run",
        CONFIGS / "flights.yaml",
        "--set",
        f"cluster={{address: {client.scheduler.address}}}",
        "--set",
        f"data.train={parquet}",
        "--set",
        "model.params.n_estimators=10",
        "--set",
        "evaluation.permutation_importance=false",
        *settings,
        "--output",
        output,
    )


def test_flights_config_on_a_parquet_subsample(capsys, tmp_path, client):
    """configs/flights.yaml with its data replaced by 20,000 flights written to Parquet files."""
    parquet = flights_parquet(tmp_path / "flights", 20_000)
    code, out, err = run_flights(capsys, client, parquet, tmp_path / "run")
    assert code == 0, err
    metrics = check_run_dir(Path(out.split()[-1]), "classification", 10)
    assert metrics["rows"]["train"] + metrics["rows"]["test"] == 20_000
    assert metrics["test"]["roc_auc"] > 0.7  # dep_delay tells most of it


def test_distributed_mode_in_an_experiment_file_grows_the_replicated_forest(
    capsys, tmp_path, client
):
    """``model.params.mode: distributed`` (tops from summed histograms, forced by a small node
    budget) on flights' categoricals and missing values: the progress bar counts its trees, and
    the run's metrics, importances and saved forest are those of the replicated run."""
    from dasktrees.distributed.levels import MIN_BUDGET_ROWS, gathered_rows

    parquet = flights_parquet(tmp_path / "flights", 20_000)
    runs = {}
    for mode in ("replicated", "distributed"):
        with gathered_rows(MIN_BUDGET_ROWS):
            code, out, err = run_flights(
                capsys, client, parquet, tmp_path / mode, "--set", f"model.params.mode={mode}"
            )
        assert code == 0, err
        assert "trees [" in err and "10/10" in err  # the progress bar
        runs[mode] = Path(out.split()[-1])
    log = (runs["distributed"] / "run.log").read_text()
    rounds = re.search(r"distributed mode: 10 trees, budget 4096 rows: .*'rounds': (\d+)", log)
    assert rounds and int(rounds.group(1)) >= 10, log  # the tops grew from histograms
    replicated, spread = (dasktrees.load(runs[m] / "model") for m in runs)
    assert (replicated.mode_, spread.mode_) == ("replicated", "distributed")
    metrics = [json.loads((runs[m] / "metrics.json").read_text()) for m in runs]
    assert metrics[0]["test"] == metrics[1]["test"]
    assert metrics[0]["oob_score"] == metrics[1]["oob_score"]
    importances = [(runs[m] / "importances.csv").read_text() for m in runs]
    assert importances[0] == importances[1]
    for a, b in zip(replicated.estimators_, spread.estimators_):
        np.testing.assert_array_equal(a.tree_.feature, b.tree_.feature)
        np.testing.assert_array_equal(a.tree_.threshold, b.tree_.threshold)
        np.testing.assert_array_equal(a.tree_.value, b.tree_.value)


# ---- where the tables are read -------------------------------------------------------------------


def test_a_builtin_dataset_is_read_by_the_workers_not_sent_with_the_graphs(
    capsys, tmp_path, client
):
    """digits (1,797 x 65, 0.9 MB as a pandas frame) through every graph of a run: the task
    inference, the fit, the test split, predictions, metrics, OOB and both importances. With
    distributed's large-graph warning lowered from 10 MB to 100 kB, no graph reaches it: the
    table is read by the tasks that use it, not embedded in the graphs the client sends (as
    ``dd.from_pandas`` of the loaded frame did, in every graph of a run).

    Eight features: every tree task carries the bins' tables, 4 kB a feature (``ForestSpec``),
    which would pass 100 kB with all 64 pixels."""
    pixels = [f"pixel_{i}_{j}" for i in (2, 5) for j in (2, 3, 4, 5)]
    config = {
        "name": "digits",
        "cluster": {"address": client.scheduler.address},
        "data": {
            "train": {"builtin": "digits"},
            "features": pixels,
            "test": {"fraction": 0.25},
            "npartitions": 3,
        },
        "model": {"params": {"n_estimators": 5}},
        "evaluation": {"permutation_importance": True},
    }
    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump(config))
    with (
        dask.config.set({"distributed.admin.large-graph-warning-threshold": "100kB"}),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        code, out, err = run_cli(capsys, "run", path, "--output", tmp_path / "run")
    assert code == 0, err
    large = [str(w.message) for w in caught if "Sending large graph" in str(w.message)]
    assert not large, large
    metrics = check_run_dir(tmp_path / "run", "classification", 5, permutation=True)
    assert metrics["rows"]["train"] + metrics["rows"]["test"] == 1797


@pytest.mark.parametrize("name", ["golf", "breast_cancer"])
def test_a_builtin_dataset_is_cut_and_split_as_the_embedded_frame_was(name):
    """read_builtin's partitions are the rows, divisions and dtypes of ``dd.from_pandas`` of
    the loaded frame, so a seed's test split holds the same rows; and its graph holds no table."""
    import cloudpickle

    from dasktrees.command.io import read_builtin

    full = dasktrees.datasets.load_builtin(name)
    for npartitions in (1, 2, 3, 7):
        frame = read_builtin(name, npartitions)
        embedded = dd.from_pandas(full, npartitions=npartitions, sort=False)
        assert frame.divisions == embedded.divisions
        pd.testing.assert_series_equal(frame.dtypes, embedded.dtypes)
        for k in range(frame.npartitions):
            pd.testing.assert_frame_equal(
                frame.get_partition(k).compute(), embedded.get_partition(k).compute()
            )
        for part, before in zip(
            frame.random_split([0.75, 0.25], random_state=3),
            embedded.random_split([0.75, 0.25], random_state=3),
        ):
            pd.testing.assert_frame_equal(part.compute(), before.compute())
        assert len(cloudpickle.dumps(frame.expr)) < 10_000


def test_csv_data_with_test_file_and_decision_tree(capsys, tmp_path):
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    frame = X.assign(label=np.where(y == 1, "benign", "malignant"))
    frame.iloc[:400].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[400:].to_csv(tmp_path / "test.csv", index=False)
    config = {
        "name": "tree",
        "cluster": {"local": {"n_workers": 1, "processes": False}},
        "data": {
            "train": str(tmp_path / "train.csv"),
            "target": "label",
            "drop": ["mean radius"],
            "test": {"path": str(tmp_path / "test.csv")},
        },
        "model": {"kind": "decision_tree", "params": {"max_depth": 4}},
        "evaluation": {"metrics": ["accuracy", "log_loss", "confusion_matrix"]},
    }
    path = tmp_path / "tree.yaml"
    path.write_text(yaml.safe_dump(config))
    code, out, err = run_cli(capsys, "run", path, "--output", tmp_path / "run")
    assert code == 0, err
    run_dir = Path(out.split()[-1])
    metrics = check_run_dir(run_dir, "classification", 1)
    assert metrics["rows"] == {"train": 400, "test": 169}
    assert metrics["features"] == 29
    assert metrics["test"]["confusion_matrix"]["labels"] == ["benign", "malignant"]
    # the same tree fitted directly gives the same test accuracy
    tree = dasktrees.DecisionTreeClassifier(max_depth=4, random_state=0)
    tree.fit(frame.iloc[:400].drop(columns=["label", "mean radius"]), frame["label"][:400])
    expected = tree.score(
        frame.iloc[400:].drop(columns=["label", "mean radius"]), frame["label"][400:]
    )
    assert metrics["test"]["accuracy"] == pytest.approx(expected)


@pytest.mark.parametrize(
    "kind, estimator",
    [
        ("quantile_forest", "RandomForestQuantileRegressor"),
        ("quantile_extra_trees", "ExtraTreesQuantileRegressor"),
    ],
)
def test_quantile_forest_config(capsys, tmp_path, client, kind, estimator):
    """configs/quantiles.yaml with 10 trees, with either quantile kind: interval coverage and
    pinball losses of the test rows as the saved model predicts them, the out-of-bag coverage,
    and the interval plot."""
    settings = ["--set", "model.params.bootstrap=true"] if kind == "quantile_extra_trees" else []
    code, out, err = run_cli(
        capsys,
        "run",
        CONFIGS / "quantiles.yaml",
        "--set",
        f"cluster={{address: {client.scheduler.address}}}",
        "--set",
        "model.params.n_estimators=10",
        "--set",
        f"model.kind={kind}",
        *settings,
        "--output",
        tmp_path / "run",
    )
    assert code == 0, err
    run_dir = Path(out.split()[-1])
    metrics = check_run_dir(run_dir, "regression", 10)
    assert metrics["kind"] == kind
    assert metrics["estimator"] == estimator
    assert metrics["quantiles"] == [0.05, 0.5, 0.95]
    assert 0.5 < metrics["oob_coverage"] <= 1.0
    assert {p.name for p in (run_dir / "plots").iterdir()} == {
        "importances.png",
        "oob_curve.png",
        "intervals.png",
    }
    # The oracle: the saved model on the same test rows (the run's split, done again).
    from sklearn.metrics import mean_pinball_loss

    from dasktrees.command.config import load_config
    from dasktrees.command.io import read_train, split

    config = load_config(run_dir / "config.yaml")
    _, test = split(config.data, read_train(config.data), config.seed)
    test = test.compute()
    model = dasktrees.load(run_dir / "model")
    assert model.get_params()["default_quantiles"] == (0.05, 0.5, 0.95)
    assert model.oob_coverage_ == metrics["oob_coverage"]
    X, y = test[list(model.feature_names_in_)], test["target"].to_numpy()
    assert metrics["rows"]["test"] == len(y)
    predicted = model.predict(X, quantiles=[0.05, 0.5, 0.95])
    inside = (predicted[:, 0] <= y) & (y <= predicted[:, 2])
    assert metrics["test"]["coverage"] == pytest.approx(inside.mean())
    assert metrics["test"]["pinball_loss"] == pytest.approx(
        {
            f"q{q}": mean_pinball_loss(y, predicted[:, k], alpha=q)
            for k, q in enumerate([0.05, 0.5, 0.95])
        }
    )
    assert metrics["test"]["r2"] > 0.2  # and the mean is predicted as by any regressor


def test_quantile_forest_without_a_test_set_plots_out_of_bag_intervals(
    capsys, tmp_path, client, monkeypatch
):
    """n_estimators: auto (the shipped config's): the OOB curve marks where growth stopped; with
    no test set the intervals are the out-of-bag ones (a median only if it is a default)."""
    from dasktrees.command import experiment

    marked, plotted = [], []
    plot_curve, plot_intervals = experiment._plot_oob_curve, experiment._plot_intervals

    def record_curve(curve, task, path, stopped_at=None):
        marked.append((len(curve), stopped_at))
        plot_curve(curve, task, path, stopped_at)

    def record_intervals(y_true, lower, upper, median, quantiles, rows, path):
        plotted.append((len(y_true), median, rows))
        plot_intervals(y_true, lower, upper, median, quantiles, rows, path)

    monkeypatch.setattr(experiment, "_plot_oob_curve", record_curve)
    monkeypatch.setattr(experiment, "_plot_intervals", record_intervals)
    code, out, err = run_cli(
        capsys,
        "run",
        CONFIGS / "quantiles.yaml",
        "--set",
        f"cluster={{address: {client.scheduler.address}}}",
        "--set",
        "data.test=null",
        "--set",
        "model.params.max_n_estimators=64",
        "--set",
        "model.params.default_quantiles=[0.1, 0.9]",
        "--output",
        tmp_path / "run",
    )
    assert code == 0, err
    run_dir = Path(out.split()[-1])
    model = dasktrees.load(run_dir / "model")
    n_trees = len(model.estimators_)
    assert model.get_params()["n_estimators"] == "auto" and 1 <= n_trees <= 64
    metrics = check_run_dir(run_dir, "regression", n_trees, has_test=False)
    assert metrics["test"] is None and metrics["quantiles"] == [0.1, 0.9]
    assert marked == [(n_trees, n_trees)]
    [(n_rows, median, rows)] = plotted
    assert rows == "out-of-bag rows" and median is None and 0 < n_rows <= 442
    assert "intervals.png" in {p.name for p in (run_dir / "plots").iterdir()}


# ---- a real scheduler and workers ------------------------------------------------------------


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def scheduler_address():
    """A ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1."""
    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    python = [sys.executable, "-m"]
    processes = [
        subprocess.Popen(
            [
                *python,
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-dashboard",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        for _ in range(2):
            processes.append(
                subprocess.Popen(
                    [
                        *python,
                        "distributed.cli.dask_worker",
                        address,
                        "--nthreads",
                        "1",
                        "--no-dashboard",
                        "--host",
                        "127.0.0.1",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        with Client(address, timeout="60s", set_as_default=False) as c:
            c.wait_for_workers(2, timeout=120)
        yield address
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


def run_command(*argv, timeout):
    """``python -m dasktrees argv`` in a new process: the installed command as users run it."""
    command = [sys.executable, "-m", "dasktrees", *map(str, argv)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_run_on_a_running_scheduler(tmp_path, scheduler_address):
    result = run_command(
        "run",
        CONFIGS / "cluster.yaml",
        "--set",
        f"cluster.address={scheduler_address}",
        "--set",
        "model.params.n_estimators=20",
        "--output",
        tmp_path / "run",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    metrics = check_run_dir(run_dir, "classification", 20)
    assert metrics["test"]["accuracy"] > 0.9


@pytest.mark.slow
def test_wrong_scheduler_address_fails_within_the_timeout(tmp_path):
    address = f"tcp://127.0.0.1:{_free_port()}"  # nothing listens there
    start = time.perf_counter()
    result = run_command(
        "run",
        CONFIGS / "cluster.yaml",
        "--set",
        f"cluster.address={address}",
        "--set",
        "cluster.timeout=3",
        "--output",
        tmp_path / "run",
        timeout=120,
    )
    assert result.returncode == 1
    cause = failure_line(result.stderr)
    assert address in cause and f"traceback in {tmp_path / 'run' / 'run.log'}" in cause
    assert time.perf_counter() - start < 3 + 30  # the timeout, plus starting Python
    # the failed run is marked as such, holds no model, and its log has the traceback
    assert (tmp_path / "run" / "FAILED").exists()
    assert not (tmp_path / "run" / "model").exists()
    assert "Traceback" in (tmp_path / "run" / "run.log").read_text()


# ---- invalid configs: exit code 2, every problem under its dotted key ---------------------------

VALID = {
    "name": "t",
    "data": {"train": {"builtin": "breast_cancer"}, "target": "target"},
    "model": {"kind": "random_forest", "task": "classification", "params": {"n_estimators": 5}},
}


def _with(changes):
    config = json.loads(json.dumps(VALID))
    for dotted, value in changes.items():
        node = config
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        if value is _DELETE:
            node.pop(last)
        else:
            node[last] = value
    return yaml.safe_dump(config)


_DELETE = object()

INVALID = [
    # typos
    ("top-level typo", _with({"sed": 1}), "sed", "did you mean 'seed'"),
    ("section typo", _with({"data.targte": "target"}), "data.targte", "did you mean 'target'"),
    (
        "parameter typo",
        _with({"model.params.n_estimator": 5}),
        "model.params.n_estimator",
        "did you mean 'n_estimators'",
    ),
    ("kind typo", _with({"model.kind": "random_forrest"}), "model.kind", "random_forest"),
    # wrong types
    (
        "n_estimators a word",
        _with({"model.params.n_estimators": "ten"}),
        "model.params.n_estimators",
        "expected \"auto\" or an integer >= 1, got 'ten'",
    ),
    ("seed a word", _with({"seed": "x"}), "seed", "expected an integer"),
    (
        "workers a word",
        _with({"cluster": {"local": {"n_workers": "two"}}}),
        "cluster.local.n_workers",
        "expected an integer >= 1",
    ),
    ("oob not a bool", _with({"evaluation": {"oob": "maybe"}}), "evaluation.oob", "true or false"),
    ("params not a mapping", _with({"model.params": [1, 2]}), "model.params", "mapping"),
    # out of range
    ("test fraction", _with({"data.test": {"fraction": 1.5}}), "data.test.fraction", "(0, 1)"),
    (
        "no workers",
        _with({"cluster": {"local": {"n_workers": 0}}}),
        "cluster.local.n_workers",
        ">= 1",
    ),
    ("max_bins", _with({"model.params.max_bins": 300}), "model.params.max_bins", "[2, 255]"),
    (
        "monotonic_cst values",
        _with({"model.params.monotonic_cst": {"worst area": 2}}),
        "model.params.monotonic_cst",
        "a dict from feature names to -1, 0 or 1",
    ),
    ("prune a typo", _with({"model.prune": "cv"}), "model.prune", "oob"),
    (
        "prune without bootstrap",
        _with({"model.kind": "extra_trees", "model.prune": "oob"}),
        "model.prune",
        "needs bootstrap",
    ),
    (
        "min_samples_leaf",
        _with({"model.params.min_samples_leaf": 0}),
        "model.params.min_samples_leaf",
        "got 0",
    ),
    (
        "memory limit",
        _with({"cluster": {"local": {"memory_limit": "lots"}}}),
        "cluster.local.memory_limit",
        "4GiB",
    ),
    # unknown criterion, metric, dataset
    ("criterion", _with({"model.params.criterion": "gni"}), "model.params.criterion", "'gini'"),
    (
        "metric of the other task",
        _with({"evaluation": {"metrics": ["rmse"]}}),
        "evaluation.metrics",
        "not a classification metric",
    ),
    (
        "unknown metric",
        _with({"evaluation": {"metrics": ["f1"]}}),
        "evaluation.metrics.0",
        "expected one of",
    ),
    ("builtin", _with({"data.train": {"builtin": "wines"}}), "data.train", "did you mean 'wine'"),
    # target and files
    ("target not in data", _with({"data.target": "label"}), "data.target", "'label' is not in"),
    (
        "missing target",
        _with({"data.train": "{tmp}/data.csv", "data.target": _DELETE}),
        "data",
        "target is required",
    ),
    ("missing file", _with({"data.train": "{tmp}/nowhere.csv"}), "data.train", "no file matches"),
    ("unknown format", _with({"data.train": "{tmp}/data.txt"}), "data.train", "format"),
    (
        "feature not in data",
        _with({"data.train": "{tmp}/data.csv", "data.features": ["a", "zz"]}),
        "data.features",
        "'zz' is not in",
    ),
    (
        "test file lacks a column",
        _with({"data.train": "{tmp}/data.csv", "data.test": {"path": "{tmp}/test.csv"}}),
        "data.test.path",
        "'a' is not in the test data",
    ),
    ("tab-separated", _with({"data.train": "{tmp}/data.tsv"}), "data.train", "format"),
    ("negative seed", _with({"seed": -1}), "seed", "[0, 4294967295]"),
    (
        "split seed too large",
        _with({"data.test": {"fraction": 0.5, "seed": 2**40}}),
        "data.test.seed",
        "[0, 4294967295]",
    ),
    # evaluation the model cannot give
    (
        "permutation importance of a tree",
        _with(
            {
                "model.kind": "decision_tree",
                "model.params": {},
                "evaluation": {"permutation_importance": True},
            }
        ),
        "evaluation.permutation_importance",
        "needs a forest",
    ),
    (
        "permutation importance without out-of-bag rows",
        _with({"model.params.bootstrap": False, "evaluation": {"permutation_importance": True}}),
        "evaluation.permutation_importance",
        "out-of-bag rows",
    ),
    (
        "debiased impurity importance without out-of-bag rows",
        _with({"model.params.bootstrap": False, "evaluation": {"oob_impurity_importance": True}}),
        "evaluation.oob_impurity_importance",
        "out-of-bag rows",
    ),
    # quantile forests
    (
        "quantile forest for classification",
        _with({"model.kind": "quantile_forest"}),
        "model.kind",
        "quantile_forest predicts quantiles of a numeric target, but model.task is classification",
    ),
    (
        "quantile forest on a string target",
        _with(
            {
                "data.train": {"builtin": "golf"},
                "data.target": _DELETE,
                "model": {"kind": "quantile_forest", "params": {"n_estimators": 5}},
            }
        ),
        "model.kind",
        "the target is not numeric",
    ),
    (
        "quantile metric of a random forest",
        _with({"model.task": "regression", "evaluation": {"metrics": ["r2", "coverage"]}}),
        "evaluation.metrics",
        "'coverage' needs model.kind quantile_forest or quantile_extra_trees",
    ),
    (
        "default quantiles outside [0, 1]",
        _with(
            {
                "model.kind": "quantile_forest",
                "model.task": "regression",
                "model.params.default_quantiles": [0.5, 2],
            }
        ),
        "model.params.default_quantiles",
        "in [0, 1]",
    ),
    # cluster
    (
        "two clusters",
        _with({"cluster": {"local": {}, "address": "tcp://127.0.0.1:1"}}),
        "cluster",
        "one of local, address or class",
    ),
    ("client in params", _with({"model.params.client": "x"}), "model.params.client", "cluster"),
    # YAML
    (
        "python tag",
        "name: t\ndata: !!python/object/apply:os.system ['touch {tmp}/pwned']\n",
        "data",
        "tag",
    ),
    ("not YAML", "name: [unclosed\n", "(file)", "invalid YAML"),
    ("not a mapping", "- 1\n- 2\n", "(file)", "mapping"),
]


@pytest.mark.parametrize(
    "text, key, message", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_configs(capsys, tmp_path, text, key, message):
    pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "target": [0, 1, 0, 1]}).to_csv(
        tmp_path / "data.csv", index=False
    )
    pd.DataFrame({"target": [0, 1]}).to_csv(tmp_path / "test.csv", index=False)
    path = tmp_path / "config.yaml"
    path.write_text(text.replace("{tmp}", str(tmp_path)))
    for command in ("validate", "run"):
        code, out, err = (
            run_cli(capsys, command, path, "--output", tmp_path / "run")
            if (command == "run")
            else run_cli(capsys, command, path)
        )
        assert code == 2, err
        lines = err.strip().splitlines()
        assert any(line.startswith(f"{key}: ") and message in line for line in lines), err
    assert not (tmp_path / "run").exists()  # nothing was started
    assert not (tmp_path / "pwned").exists()  # no code from the file ran


def test_every_problem_is_listed(capsys, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        _with(
            {
                "model.params.n_estimators": "ten",
                "model.params.criterion": "gni",
                "model.params.max_depht": 3,
            }
        )
    )
    code, out, err = run_cli(capsys, "validate", path)
    assert code == 2
    # an unknown parameter is reported first; the values once the names are right
    assert "model.params.max_depht: unknown parameter of RandomForestClassifier" in err
    path.write_text(_with({"model.params.n_estimators": "ten", "model.params.criterion": "gni"}))
    code, out, err = run_cli(capsys, "validate", path)
    assert code == 2
    keys = {line.split(":")[0] for line in err.strip().splitlines()}
    assert keys == {"model.params.n_estimators", "model.params.criterion"}


def test_bad_arguments_exit_2(capsys, tmp_path):
    code, out, err = run_cli(capsys, "fly")
    assert code == 2 and "arguments:" in err
    code, out, err = run_cli(capsys, "run", CONFIGS / "quickstart.yaml", "--set", "no-equals-sign")
    assert code == 2 and "--set" in err
    (tmp_path / "run").mkdir()
    code, out, err = run_cli(
        capsys, "run", CONFIGS / "quickstart.yaml", "--output", tmp_path / "run"
    )
    assert code == 2 and "--output" in err and "exists" in err


def test_validate_accepts_every_shipped_config_but_slurm(capsys):
    for name in ("quickstart", "flights", "diamonds", "cluster", "quantiles"):
        code, out, err = run_cli(capsys, "validate", CONFIGS / f"{name}.yaml")
        assert code == 0, err
    # slurm.yaml is checked by its schema only: its data lives on a cluster's file system
    from dasktrees.command.config import load_config

    config = load_config(CONFIGS / "slurm.yaml")
    assert config.cluster.class_ == "dask_jobqueue.SLURMCluster"


def run_config(capsys, client, config, output, *settings):
    """``dasktrees run`` of ``config`` on the session's cluster, with ``--set`` ``settings``."""
    sets = [arg for setting in settings for arg in ("--set", setting)]
    return run_cli(
        capsys,
        "run",
        config,
        "--set",
        f"cluster={{address: {client.scheduler.address}}}",
        *sets,
        "--output",
        output,
    )


def run_quickstart(capsys, client, output, *settings):
    """configs/quickstart.yaml on the session's cluster, with ``--set`` ``settings``."""
    return run_config(capsys, client, CONFIGS / "quickstart.yaml", output, *settings)


def test_monotonic_constraints_in_an_experiment_file(capsys, tmp_path, client):
    """``model.params.monotonic_cst`` by column name: the saved forest keeps it, and its
    probability of a benign tumour never rises with the worst area."""
    code, out, err = run_quickstart(
        capsys,
        client,
        tmp_path / "run",
        "model.params.n_estimators=10",
        "model.params.monotonic_cst={worst area: -1}",
    )
    assert code == 0, err
    model = dasktrees.load(Path(out.split()[-1]) / "model")
    assert model.monotonic_cst == {"worst area": -1}
    frame = dasktrees.datasets.load_builtin("breast_cancer").drop(columns="target")
    rows = frame.iloc[:20].loc[np.repeat(frame.index[:20], 50)].reset_index(drop=True)
    rows["worst area"] = np.tile(np.linspace(100, 4500, 50), 20)
    benign = model.predict_proba(rows)[:, 1].reshape(20, 50)
    assert (np.diff(benign, axis=1) <= 1e-15).all()
    assert np.ptp(benign, axis=1).max() > 0.05  # the area moves it


def test_failed_run_is_marked_and_keeps_no_model(capsys, tmp_path, client):
    # max_features=1000 passes the config checks (it depends on the data) and fails in fit
    code, out, err = run_quickstart(
        capsys, client, tmp_path / "run", "model.params.max_features=1000"
    )
    assert code == 1
    cause = failure_line(err)
    assert cause.startswith("error: ValueError") and "max_features" in cause
    run_dir = tmp_path / "run"
    assert "max_features" in (run_dir / "FAILED").read_text()
    assert not (run_dir / "model").exists() and not (run_dir / "metrics.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_prints_the_traceback(capsys, tmp_path, where):
    missing = tmp_path / "no-model"
    argv = ["inspect", missing]
    code, _, err = run_cli(
        capsys, *(["--debug", *argv] if where == "before" else [*argv, "--debug"])
    )
    assert code == 1
    assert "Traceback" in err and str(missing) in err
    code, _, err = run_cli(capsys, *argv)
    assert code == 1 and "--debug prints the traceback" in failure_line(err)


# ---- predict and inspect -----------------------------------------------------------------------


def write_input(frame, path):
    """``frame`` as the CSV or Parquet file ``path`` (by its suffix), as predict reads it."""
    frame.to_csv(path, index=False) if path.suffix == ".csv" else frame.to_parquet(path)
    return path


def read_output(path):
    return pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    directory = tmp_path_factory.mktemp("model")
    model = dasktrees.DecisionTreeClassifier(max_depth=5, random_state=0).fit(X, y)
    model.save(directory / "tree")
    return directory / "tree", model, X


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_predict_writes_the_input_format(capsys, tmp_path, saved_model, suffix):
    path, model, X = saved_model
    source = write_input(X, tmp_path / f"in{suffix}")
    output = tmp_path / f"out{suffix}"
    code, out, err = run_cli(capsys, "predict", path, source, "--output", output)
    assert code == 0, err
    result = read_output(output)
    np.testing.assert_array_equal(result["prediction"], model.predict(X))
    np.testing.assert_allclose(
        result[["proba_0", "proba_1"]], model.predict_proba(X), rtol=0, atol=1e-15
    )


def test_predict_with_a_forest_on_a_cluster(capsys, tmp_path, client):
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    model = dasktrees.RandomForestRegressor(n_estimators=5, random_state=0, client=client)
    model.fit(X, y.astype(float))
    model.save(tmp_path / "forest")
    X.to_parquet(tmp_path / "in.parquet")
    code, out, err = run_cli(
        capsys,
        "predict",
        tmp_path / "forest",
        tmp_path / "in.parquet",
        "--output",
        tmp_path / "out.parquet",
        "--address",
        client.scheduler.address,
    )
    assert code == 0, err
    result = pd.read_parquet(tmp_path / "out.parquet")
    np.testing.assert_array_equal(result["prediction"], model.predict(X))


def test_predict_bad_arguments(capsys, tmp_path, saved_model):
    path, _, _ = saved_model
    code, out, err = run_cli(
        capsys, "predict", path, tmp_path / "in.csv", "--output", tmp_path / "o.parquet"
    )
    assert code == 2 and "--output" in err
    code, out, err = run_cli(
        capsys, "predict", path, tmp_path / "in.txt", "--output", tmp_path / "o.txt"
    )
    assert code == 2 and "input" in err


@pytest.fixture(scope="module")
def saved_quantile_forest(tmp_path_factory):
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True, as_frame=True)
    directory = tmp_path_factory.mktemp("quantile-forest")
    model = dasktrees.RandomForestQuantileRegressor(n_estimators=5, random_state=0).fit(X, y)
    model.save(directory / "forest")
    return directory / "forest", model, X


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_predict_quantiles(capsys, tmp_path, saved_quantile_forest, suffix):
    path, model, X = saved_quantile_forest
    source = write_input(X, tmp_path / f"in{suffix}")
    output = tmp_path / f"out{suffix}"
    code, out, err = run_cli(
        capsys, "predict", path, source, "--output", output, "--quantiles", "0.05, 0.5,0.95"
    )
    assert code == 0, err
    result = read_output(output)
    assert list(result.columns) == ["q0.05", "q0.5", "q0.95"]
    np.testing.assert_array_equal(result, model.predict(X, quantiles=[0.05, 0.5, 0.95]))


@pytest.mark.parametrize(
    "quantiles, message",
    [
        ("0.5,x", "expected numbers in [0, 1] separated by commas, got 'x'"),
        ("0.5,1.5", "quantiles are in [0, 1], got 1.5"),
        ("0.5,nan", "quantiles are in [0, 1], got nan"),
        ("0.5,0.50", "0.50 is given twice"),
    ],
)
def test_predict_bad_quantiles(capsys, tmp_path, saved_quantile_forest, quantiles, message):
    path, _, X = saved_quantile_forest
    X.to_csv(tmp_path / "in.csv", index=False)
    code, out, err = run_cli(
        capsys,
        "predict",
        path,
        tmp_path / "in.csv",
        "--output",
        tmp_path / "o.csv",
        "--quantiles",
        quantiles,
    )
    assert code == 2 and f"--quantiles: {message}" in err, err
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("cls", ["RandomForestRegressor", "RandomForestQuantileRegressor"])
def test_predict_interval(capsys, tmp_path, cls):
    """--interval writes the prediction and the bounds of predict_interval (a parquet input:
    blocks of unknown lengths); refused for a model without conformity scores."""
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True, as_frame=True)
    model = getattr(dasktrees, cls)(n_estimators=8, oob_score=True, random_state=0).fit(X, y)
    model.save(tmp_path / "forest")
    source = write_input(X, tmp_path / "in.parquet")
    argv = ["predict", tmp_path / "forest", source, "--output", tmp_path / "out.parquet"]
    code, out, err = run_cli(capsys, *argv, "--interval", "0.8")
    assert code == 0, err
    result = read_output(tmp_path / "out.parquet")
    assert list(result.columns) == ["prediction", "lower", "upper"]
    np.testing.assert_array_equal(result["prediction"], model.predict(X))
    np.testing.assert_array_equal(result[["lower", "upper"]], model.predict_interval(X, 0.8))
    for value, message in (("1", "the coverage is in (0, 1), got 1"), ("x", "got 'x'")):
        code, out, err = run_cli(capsys, *argv, "--interval", value)
        assert code == 2 and "--interval: " in err and message in err, err
    model.set_params(oob_score=False).fit(X, y).save(tmp_path / "plain")
    argv[1] = tmp_path / "plain"
    code, out, err = run_cli(capsys, *argv, "--interval", "0.8")
    assert code == 2 and "without out-of-bag conformity scores" in err, err


def test_predict_quantiles_of_a_model_without_them_is_refused(capsys, tmp_path, saved_model):
    path, _, X = saved_model
    X.to_csv(tmp_path / "in.csv", index=False)
    code, out, err = run_cli(
        capsys,
        "predict",
        path,
        tmp_path / "in.csv",
        "--output",
        tmp_path / "o.csv",
        "--quantiles",
        "0.1,0.9",
    )
    assert code == 2, err
    assert "--quantiles: " in err and "holds a DecisionTreeClassifier, not a quantile forest" in err
    assert not (tmp_path / "o.csv").exists()


def test_predict_with_a_model_of_an_older_format_writes_nothing(capsys, tmp_path, saved_model):
    # Only the current model format is read (docs/models.md, "Format versions").
    path, _, X = saved_model
    old = tmp_path / "old-model"
    shutil.copytree(path, old)
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["format_version"] = model_format.FORMAT_VERSION - 1
    manifest["manifest_sha256"] = model_format.manifest_checksum(manifest)
    (old / "manifest.json").write_text(json.dumps(manifest))
    X.to_csv(tmp_path / "in.csv", index=False)
    before = sorted(tmp_path.rglob("*"))
    code, out, err = run_cli(
        capsys, "predict", old, tmp_path / "in.csv", "--output", tmp_path / "o.csv"
    )
    assert code == 1, err
    assert (
        f"{old / 'manifest.json'} was written in model format 4; this dasktrees reads format 5 "
        "only: refit the model and save it again"
    ) in failure_line(err)
    assert sorted(tmp_path.rglob("*")) == before


def test_inspect(capsys, saved_model):
    path, model, X = saved_model
    code, out, err = run_cli(capsys, "inspect", path, "--json")
    assert code == 0, err
    description = json.loads(out)
    assert description["estimator"] == "DecisionTreeClassifier"
    assert description["format_version"] == model_format.FORMAT_VERSION == 5
    assert description["features"] == list(X.columns)
    assert description["classes"] == [0, 1]
    assert description["trees"] == 1
    assert description["nodes"] == model.tree_.node_count
    assert description["parameters"]["max_depth"] == 5
    code, out, err = run_cli(capsys, "inspect", path)
    assert code == 0 and "DecisionTreeClassifier" in out
    code, out, err = run_cli(capsys, "inspect", path.parent / "nothing-here")
    assert code == 1 and err.startswith("error: ")


def test_extra_trees_with_their_defaults_and_an_empty_test_split(capsys, tmp_path, client):
    """Extra-trees do not bootstrap by default: no out-of-bag score is asked of them. A test
    fraction that leaves no row gives a run without test metrics, not a failure."""
    config = {
        "name": "et",
        "cluster": {"address": client.scheduler.address},
        "data": {"train": {"builtin": "golf"}, "drop": ["Day"], "test": {"fraction": 0.01}},
        "model": {"kind": "extra_trees", "params": {"n_estimators": 5}},
    }
    path = tmp_path / "et.yaml"
    path.write_text(yaml.safe_dump(config))
    code, out, err = run_cli(capsys, "run", path, "--output", tmp_path / "run")
    assert code == 0, err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["oob_score"] is None and metrics["estimator"] == "ExtraTreesClassifier"
    assert "oob_impurity_mean" not in pd.read_csv(tmp_path / "run" / "importances.csv")
    if metrics["rows"]["test"] == 0:
        assert metrics["test"] is None


def test_predict_never_writes_over_a_directory_it_did_not_write(capsys, tmp_path, saved_model):
    path, model, X = saved_model
    X.to_parquet(tmp_path / "in.parquet")
    precious = tmp_path / "victim"
    precious.mkdir()
    (precious / "precious.txt").write_text("keep me")
    code, out, err = run_cli(capsys, "predict", path, tmp_path / "in.parquet", "--output", precious)
    assert code == 2 and "--output" in err
    assert (precious / "precious.txt").read_text() == "keep me"


def test_predict_compresses_a_gz_output(capsys, tmp_path, saved_model):
    path, model, X = saved_model
    X.to_csv(tmp_path / "in.csv", index=False)
    code, out, err = run_cli(
        capsys, "predict", path, tmp_path / "in.csv", "--output", tmp_path / "out.csv.gz"
    )
    assert code == 0, err
    with open(tmp_path / "out.csv.gz", "rb") as f:
        assert f.read(2) == b"\x1f\x8b"  # gzip's magic number
    result = pd.read_csv(tmp_path / "out.csv.gz")
    np.testing.assert_array_equal(result["prediction"], model.predict(X))


def test_metrics_json_writes_undefined_scores_as_null():
    from dasktrees.command.experiment import _finite

    cleaned = _finite({"oob_score": float("nan"), "test": {"roc_auc": float("inf"), "r2": 0.5}})
    assert json.loads(json.dumps(cleaned, allow_nan=False)) == {
        "oob_score": None,
        "test": {"roc_auc": None, "r2": 0.5},
    }


def test_predict_with_a_forest_and_no_cluster_runs_in_this_process(capsys, tmp_path, monkeypatch):
    import distributed

    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    model = dasktrees.RandomForestClassifier(n_estimators=5, random_state=0).fit(X, y)
    model.save(tmp_path / "forest")
    X.to_csv(tmp_path / "in.csv", index=False)

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started")

    monkeypatch.setattr(distributed, "LocalCluster", no_cluster)
    monkeypatch.setattr(distributed, "Client", no_cluster)
    code, out, err = run_cli(
        capsys, "predict", tmp_path / "forest", tmp_path / "in.csv", "--output", tmp_path / "o.csv"
    )
    assert code == 0, err
    result = pd.read_csv(tmp_path / "o.csv")
    np.testing.assert_array_equal(result["prediction"], model.predict(X))


def test_poisson_counts_in_an_experiment_file(capsys, tmp_path, client):
    """``model.params.criterion: poisson`` on a Parquet table of counts, with the mean Poisson
    deviance among the metrics: the saved forest keeps the criterion, and the deviance is
    scikit-learn's on the test rows."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.integers(0, 50, size=(1200, 3)).astype(float), columns=list("abc"))
    frame["visits"] = rng.poisson(np.exp(0.04 * frame["a"] - 0.5))
    frame.to_parquet(tmp_path / "visits.parquet")
    code, out, err = run_quickstart(
        capsys,
        client,
        tmp_path / "run",
        f"data.train={tmp_path / 'visits.parquet'}",
        "data.target=visits",
        "model.task=null",  # integer counts inferred a regression: the criterion says so
        "model.params={n_estimators: 10, criterion: poisson, min_samples_leaf: 5}",
        "evaluation.metrics=[r2, poisson_deviance]",
        "evaluation.permutation_importance=false",
    )
    assert code == 0, err
    run_dir = Path(out.split()[-1])
    metrics = check_run_dir(run_dir, "regression", 10)
    assert set(metrics["test"]) == {"r2", "poisson_deviance"}
    assert 0.0 < metrics["test"]["poisson_deviance"] < 2.0
    assert dasktrees.load(run_dir / "model").criterion == "poisson"


def test_several_target_columns_in_an_experiment_file(capsys, tmp_path, client):
    """``data.target`` as a list of class columns: one forest predicts them all, its test
    accuracy the subset accuracy of the same forest fitted directly; ``dasktrees predict``
    writes each column's prediction and probabilities. A list of numeric columns fits a
    regression of several outputs, its metrics averaged over them."""
    from sklearn.datasets import make_multilabel_classification
    from sklearn.metrics import r2_score

    X, Y = make_multilabel_classification(n_samples=600, n_features=6, n_classes=3, random_state=0)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(6)])
    frame[["a", "b", "c"]] = np.where(Y == 1, "yes", "no")
    frame["u"], frame["v"] = X[:, 0] * 2.0 + Y[:, 0], X[:, 1] - X[:, 2]
    frame.to_parquet(tmp_path / "labels.parquet")
    settings = [
        f"data.train={tmp_path / 'labels.parquet'}",
        "data.drop=[u, v]",
        "model.task=null",
        "model.params={n_estimators: 10}",
        "evaluation.metrics=null",
        "evaluation.permutation_importance=false",
    ]
    code, out, err = run_quickstart(
        capsys, client, tmp_path / "run", *settings, "data.target=[a, b, c]"
    )
    assert code == 0, err
    run_dir = Path(out.split()[-1])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["task"] == "classification" and metrics["targets"] == ["a", "b", "c"]
    assert set(metrics["test"]) == {"accuracy"}  # the metrics of several columns
    model = dasktrees.load(run_dir / "model")
    assert model.n_outputs_ == 3 and [list(c) for c in model.classes_] == [["no", "yes"]] * 3
    features = [f"x{j}" for j in range(6)]
    assert list(pd.read_csv(run_dir / "importances.csv")["feature"]) == features
    train, test = dd.from_pandas(frame, npartitions=1).random_split([0.75, 0.25], random_state=0)
    test = test.compute()
    expected = (model.predict(test[features]) == test[["a", "b", "c"]].to_numpy()).all(axis=1)
    assert metrics["test"]["accuracy"] == pytest.approx(expected.mean())
    frame[features].to_parquet(tmp_path / "in.parquet")
    code, out, err = run_cli(
        capsys, "predict", run_dir / "model", tmp_path / "in.parquet", "--output",
        tmp_path / "out.parquet",
    )  # fmt: skip
    assert code == 0, err
    result = pd.read_parquet(tmp_path / "out.parquet")
    np.testing.assert_array_equal(
        result[["prediction_0", "prediction_1", "prediction_2"]], model.predict(frame[features])
    )
    np.testing.assert_array_equal(
        result[["proba_1_no", "proba_1_yes"]], model.predict_proba(frame[features])[1]
    )
    settings[1] = "data.drop=[a, b, c]"
    code, out, err = run_quickstart(
        capsys, client, tmp_path / "run2", *settings, "data.target=[u, v]"
    )
    assert code == 0, err
    run_dir = Path(out.split()[-1])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["task"] == "regression" and set(metrics["test"]) == {"r2", "rmse", "mae"}
    model = dasktrees.load(run_dir / "model")
    truth = test[["u", "v"]].to_numpy()
    assert metrics["test"]["r2"] == pytest.approx(r2_score(truth, model.predict(test[features])))


@pytest.mark.parametrize(
    "changes, key, message",
    [
        ({"data.target": ["target", "nope"]}, "data.target", "column 'nope' is not in the data"),
        ({"data.target": ["a", "a"]}, "data.target", "two or more distinct columns"),
        ({"data.target": ["target", "a"]}, "data.target", "infer different tasks"),
        (
            {"data.target": ["target", "b"], "evaluation.metrics": ["log_loss"]},
            "evaluation.metrics",
            "'log_loss' needs a single target, but data.target has 2 columns; use accuracy",
        ),
        (
            {"data.target": ["target", "b"], "evaluation.permutation_importance": True},
            "evaluation.permutation_importance",
            "needs a single target",
        ),
        (
            {"data.target": ["target", "b"], "model.prune": "oob", "model.params.bootstrap": True},
            "model.prune",
            "takes one target",
        ),
        (
            {"data.target": ["a", "c"], "model.kind": "quantile_forest"},
            "model.kind",
            "quantile_forest predicts the quantiles of one target",
        ),
    ],
)
def test_several_target_columns_invalid(capsys, tmp_path, changes, key, message):
    pd.DataFrame(
        {
            "a": [1.5, 2.5, 3.5, 4.5],
            "b": [1, 0, 1, 1],
            "c": [0.5, 0.1, 0.2, 0.3],
            "target": [0, 1, 0, 1],
        }
    ).to_csv(tmp_path / "data.csv", index=False)
    path = tmp_path / "config.yaml"
    path.write_text(
        _with({"data.train": str(tmp_path / "data.csv"), "model.task": None, **changes})
    )
    code, out, err = run_cli(capsys, "validate", path)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert any(line.startswith(f"{key}: ") and message in line for line in lines), err

"""MLflow tracking of experiments (``output.mlflow``): a run directory logged as an MLflow run.

The oracle is the run directory itself: every number of metrics.json, every point of
oob_curve.csv and every key of config.yaml must come back from a local MLflow file store
exactly (``==``, not approximately), and its files as the run's artifacts.
"""

import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import pytest
import yaml

import dasktrees
from dasktrees.command import tracking

from .test_cli import CONFIGS, _with, check_run_dir, failure_line, run_cli

needs_mlflow = pytest.mark.skipif(
    importlib.util.find_spec("mlflow") is None, reason='needs pip install "dasktrees[mlflow]"'
)


def mlflow_config(tmp_path, client, **mlflow):
    """A tiny classification experiment (breast_cancer, 5 trees, a test split) on the
    session's cluster, tracked as ``mlflow`` says."""
    config = yaml.safe_load(
        _with(
            {
                "cluster": {"address": client.scheduler.address},
                "data.test": {"fraction": 0.25, "seed": 0},
                "output": {"mlflow": mlflow},
            }
        )
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def numbers_of(metrics, prefix=""):
    """The rule, written out again: every int or float (not bool) of metrics.json, through
    nested mappings, under its dotted key."""
    found = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            found.update(numbers_of(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            found[f"{prefix}{key}"] = value
    return found


def artifact_paths(mlflow_client, run_id, path=None):
    paths = set()
    for info in mlflow_client.list_artifacts(run_id, path):
        if info.is_dir:
            paths |= artifact_paths(mlflow_client, run_id, info.path)
        else:
            paths.add(info.path)
    return paths


@pytest.fixture
def no_file_store_variable(monkeypatch):
    """The environment of a user who never heard of MLFLOW_ALLOW_FILE_STORE."""
    monkeypatch.delenv(tracking.ALLOW_FILE_STORE, raising=False)


# ---- a whole experiment against a local file store ---------------------------------------------


@needs_mlflow
def test_mlflow_run_holds_the_run_directory_exactly(
    capsys, tmp_path, client, monkeypatch, no_file_store_variable
):
    """``tracking_uri: mlruns`` (a relative path, as a user writes it) against a file store
    in tmp_path: the metrics of metrics.json exactly, the OOB curve as a stepped metric, the
    resolved config as params, the run directory as artifacts."""
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    path = mlflow_config(tmp_path, client, tracking_uri="mlruns")
    code, out, err = run_cli(capsys, "run", path, "--output", tmp_path / "run")
    assert code == 0, err
    run_dir = Path(out.split()[-1])
    metrics = check_run_dir(run_dir, "classification", 5)
    assert tracking.ALLOW_FILE_STORE not in os.environ  # not left behind
    assert "MLflow run " in err and "in experiment 't'" in err

    store = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    experiment = store.get_experiment_by_name("t")  # the config's name by default
    [run] = store.search_runs([experiment.experiment_id])
    run = store.get_run(run.info.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "t"

    # every number of metrics.json, under its dotted name, exactly; nothing else but the curve
    expected = numbers_of(metrics)
    assert {"trees", "features", "fit_seconds", "rows.train", "rows.test", "oob_score"} <= set(
        expected
    )
    assert {"test.accuracy", "test.roc_auc", "test.log_loss"} <= set(expected)
    logged = run.data.metrics
    assert set(logged) == set(expected) | {"oob_error"}
    for name, value in expected.items():
        assert logged[name] == value, name
        assert [m.step for m in store.get_metric_history(run.info.run_id, name)] == [0]
    # the OOB curve: one point per number of trees, as oob_curve.csv and the model have it
    history = store.get_metric_history(run.info.run_id, "oob_error")
    curve = dasktrees.load(run_dir / "model").oob_curve_
    points = [(n, float(e)) for n, e in enumerate(curve, start=1) if math.isfinite(e)]
    assert [(m.step, m.value) for m in history] == points
    assert points[-1][0] == 5 and logged["oob_error"] == points[-1][1]

    # the resolved config, dotted, as params (but where it was tracked)
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert resolved["output"]["mlflow"] == {"tracking_uri": "mlruns", "experiment": "t"}
    params = run.data.params
    assert params["name"] == "t" and params["model.kind"] == "random_forest"
    assert params["model.params.n_estimators"] == "5"
    assert params["data.test.fraction"] == "0.25" and params["evaluation.oob"] == "true"
    assert params["data.train.builtin"] == "breast_cancer" and params["output.dir"] == "null"
    assert json.loads(params["evaluation.metrics"]) is None
    assert not [k for k in params if k.startswith("output.mlflow")]
    assert len(params) == len(tracking.params_of(resolved))

    tags = run.data.tags
    assert tags["dasktrees.version"] == dasktrees.__version__
    assert tags["dasktrees.run_dir"] == str(run_dir.resolve())
    assert tags["dasktrees.task"] == "classification"
    assert tags["dasktrees.estimator"] == "RandomForestClassifier"
    assert tags["dasktrees.versions.numpy"] == metrics["versions"]["numpy"]

    # the run directory, file for file
    on_disk = {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file()}
    assert artifact_paths(store, run.info.run_id) == on_disk
    assert {
        "plots/importances.png",
        "plots/oob_curve.png",
        "plots/confusion_matrix.png",
        "importances.csv",
        "oob_curve.csv",
        "metrics.json",
        "config.yaml",
    } <= on_disk
    assert any(p.startswith("model/") for p in on_disk)
    model = dasktrees.load(store.download_artifacts(run.info.run_id, "model", str(tmp_path)))
    assert len(model.estimators_) == 5


@needs_mlflow
def test_mlflow_failure_keeps_the_run_directory(capsys, tmp_path, client, monkeypatch):
    """MLflow refuses the store (here: the user's own MLFLOW_ALLOW_FILE_STORE=false, which
    dasktrees keeps): exit 1 naming the complete run directory, which is whole."""
    monkeypatch.setenv(tracking.ALLOW_FILE_STORE, "false")
    store = tmp_path / "refused-store"
    path = mlflow_config(tmp_path, client, tracking_uri=str(store), experiment="e")
    code, out, err = run_cli(capsys, "run", path, "--output", tmp_path / "run")
    assert code == 1 and out == ""
    cause = failure_line(err)
    assert cause.startswith("error: TrackingError: the run directory")
    assert f"{tmp_path / 'run'} is complete" in cause and "MLFLOW_ALLOW_FILE_STORE" in cause
    assert cause.endswith("(--debug prints the traceback)")
    check_run_dir(tmp_path / "run", "classification", 5)  # whole, no FAILED
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ---- the rules, on a run directory written by hand -----------------------------------------------


def write_run_dir(path, config, metrics, curve_text=None):
    path.mkdir()
    (path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (path / "metrics.json").write_text(json.dumps(metrics))
    if curve_text is not None:
        (path / "oob_curve.csv").write_text(curve_text)
    (path / "plots").mkdir()
    (path / "plots" / "importances.png").write_bytes(b"\x89PNG")
    return path


@needs_mlflow
def test_log_run_rules(tmp_path, no_file_store_variable):
    """Numbers are metrics (ints too, exactly); nulls and lists are not; strings and booleans
    are tags; undefined curve points are left out; a long param is cut to MLflow's limit."""
    from mlflow import MlflowClient
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    columns = [f"column_{i:05d}" for i in range(1000)]
    config = {
        "name": "hand",
        "data": {"train": "x.csv", "features": columns, "categorical": []},
        "model": {"params": {"default_quantiles": [0.05, 0.95], "max_depth": None}},
        "output": {"dir": None, "mlflow": {"tracking_uri": "anywhere", "experiment": "e"}},
    }
    metrics = {
        "name": "hand",
        "trees": 3,
        "fit_seconds": 0.1,
        "big": 2**53,
        "oob_score": None,
        "early": True,
        "test": {"r2": 1 / 3, "roc_auc": None, "pinball_loss": {"q0.05": 0.30000000000000004}},
        "quantiles": [0.05, 0.95],
        "confusion": {"labels": ["a", "b"], "matrix": [[1, 0], [0, 1]]},
        "versions": {"dasktrees": "9.9.9"},
    }
    curve = "n_trees,oob_error\n1,\n2,0.5\n3,0.1111111111111111\n"
    run_dir = write_run_dir(tmp_path / "run", config, metrics, curve)
    uri = (tmp_path / "store").as_uri()  # a file: URI this time
    run_id = tracking.log_run(run_dir, uri, "hand-made")
    store = MlflowClient(tracking_uri=uri)
    run = store.get_run(run_id)
    assert store.get_experiment(run.info.experiment_id).name == "hand-made"
    assert run.data.metrics == {
        "trees": 3,
        "fit_seconds": 0.1,
        "big": 2**53,
        "test.r2": 1 / 3,
        "test.pinball_loss.q0.05": 0.30000000000000004,
        "oob_error": 0.1111111111111111,
    }
    history = store.get_metric_history(run_id, "oob_error")
    assert [(m.step, m.value) for m in history] == [(2, 0.5), (3, 0.1111111111111111)]
    assert run.data.tags["dasktrees.early"] == "true"
    assert run.data.tags["dasktrees.name"] == "hand"
    assert run.data.tags["dasktrees.version"] == "9.9.9"
    params = run.data.params
    assert params["model.params.default_quantiles"] == "[0.05, 0.95]"
    assert params["model.params.max_depth"] == "null" and params["data.categorical"] == "[]"
    assert len(params["data.features"]) == MAX_PARAM_VAL_LENGTH
    assert params["data.features"].endswith("...")
    assert json.dumps(columns).startswith(params["data.features"][:-3])
    assert set(params) == {
        "name",
        "data.train",
        "data.features",
        "data.categorical",
        "model.params.default_quantiles",
        "model.params.max_depth",
        "output.dir",
    }
    assert artifact_paths(store, run_id) == {
        "config.yaml",
        "metrics.json",
        "oob_curve.csv",
        "plots/importances.png",
    }


@needs_mlflow
def test_a_failure_inside_mlflow_marks_its_run_failed(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.setenv(tracking.ALLOW_FILE_STORE, "true")
    run_dir = write_run_dir(tmp_path / "run", {"name": "x"}, {"name": "x", "trees": 1})
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))

    def broken(self, run_id, local_dir, artifact_path=None):
        raise OSError("disk full")

    monkeypatch.setattr(MlflowClient, "log_artifacts", broken)
    uri = (tmp_path / "store").as_uri()
    with pytest.raises(tracking.TrackingError, match="complete, but logging .* disk full") as e:
        tracking.log_run(run_dir, uri)
    assert e.value.run_dir == run_dir
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before
    [run] = MlflowClient(tracking_uri=uri).search_runs(
        [MlflowClient(tracking_uri=uri).get_experiment_by_name("x").experiment_id]
    )
    assert run.info.status == "FAILED" and run.data.metrics == {"trees": 1}


@needs_mlflow
def test_a_deleted_experiment_is_named(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.setenv(tracking.ALLOW_FILE_STORE, "true")
    uri = (tmp_path / "store").as_uri()
    store = MlflowClient(tracking_uri=uri)
    store.delete_experiment(store.create_experiment("gone"))
    run_dir = write_run_dir(tmp_path / "run", {"name": "x"}, {"name": "x"})
    with pytest.raises(tracking.TrackingError, match="'gone' is deleted; restore it"):
        tracking.log_run(run_dir, uri, "gone")


def test_uris():
    assert tracking.is_local_store("./mlruns") and tracking.is_local_store("/data/mlruns")
    assert tracking.is_local_store("file:///data/mlruns")
    for uri in ("http://localhost:5000", "https://x", "sqlite:///mlflow.db", "databricks", "uc"):
        assert not tracking.is_local_store(uri), uri
    assert tracking.resolve_uri("mlruns") == (Path.cwd() / "mlruns").as_uri()
    assert tracking.resolve_uri("http://localhost:5000") == "http://localhost:5000"


# ---- MLflow missing, and the schema -------------------------------------------------------------


@pytest.fixture
def no_mlflow(monkeypatch):
    """``import mlflow`` fails, as where the extra is not installed."""
    monkeypatch.setitem(sys.modules, "mlflow", None)


def test_without_mlflow_the_config_is_refused_before_anything_runs(capsys, tmp_path, no_mlflow):
    path = tmp_path / "config.yaml"
    path.write_text(_with({"output": {"mlflow": {"tracking_uri": str(tmp_path / "mlruns")}}}))
    for argv in (("validate", path), ("run", path, "--output", tmp_path / "run")):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2, err
        [line] = err.strip().splitlines()
        assert line.startswith("output.mlflow: MLflow cannot be imported")
        assert line.endswith('install it with: pip install "dasktrees[mlflow]"')
    assert not (tmp_path / "run").exists() and not (tmp_path / "mlruns").exists()
    # without output.mlflow, MLflow is not needed
    path.write_text(_with({}))
    assert run_cli(capsys, "validate", path)[0] == 0


def test_without_mlflow_the_library_says_what_to_install(tmp_path, no_mlflow):
    from dasktrees.command import experiment
    from dasktrees.command.config import parse_config

    with pytest.raises(ImportError, match=r'pip install "dasktrees\[mlflow\]"'):
        tracking.log_run(tmp_path, "mlruns")
    config = parse_config(yaml.safe_load(_with({"output": {"mlflow": {"tracking_uri": "mlruns"}}})))
    with pytest.raises(ImportError, match=r'pip install "dasktrees\[mlflow\]"'):
        experiment.run(config, output=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # stopped before the run, not after


BAD_MLFLOW = [
    (
        "typo",
        {"tracking_url": "mlruns"},
        "output.mlflow.tracking_url",
        "unknown key; did you mean 'tracking_uri'?",
    ),
    ("no tracking_uri", {"experiment": "e"}, "output.mlflow.tracking_uri", "required key"),
    ("empty tracking_uri", {"tracking_uri": ""}, "output.mlflow.tracking_uri", "non-empty"),
    (
        "experiment a number",
        {"tracking_uri": "mlruns", "experiment": 3},
        "output.mlflow.experiment",
        "expected a non-empty string, got 3",
    ),
    ("a string", "mlruns", "output.mlflow", "expected a mapping, got 'mlruns'"),
]


@pytest.mark.parametrize(
    "mlflow, key, message", [c[1:] for c in BAD_MLFLOW], ids=[c[0] for c in BAD_MLFLOW]
)
def test_invalid_mlflow_sections(capsys, tmp_path, mlflow, key, message):
    path = tmp_path / "config.yaml"
    path.write_text(_with({"output": {"mlflow": mlflow}}))
    code, out, err = run_cli(capsys, "validate", path)
    assert code == 2
    lines = err.strip().splitlines()
    assert any(line.startswith(f"{key}: ") and message in line for line in lines), err


def test_the_experiment_defaults_to_the_name(capsys, tmp_path):
    from dasktrees.command.config import load_config, resolved

    path = tmp_path / "config.yaml"
    path.write_text(_with({"output": {"mlflow": {"tracking_uri": "http://localhost:5000"}}}))
    config = resolved(load_config(path))
    assert config["output"]["mlflow"] == {
        "tracking_uri": "http://localhost:5000",
        "experiment": "t",
    }
    assert run_cli(capsys, "validate", path)[0] == 0
    config = resolved(load_config(path, ["output.mlflow.experiment=forests"]))
    assert config["output"]["mlflow"]["experiment"] == "forests"
    assert resolved(load_config(CONFIGS / "quickstart.yaml"))["output"]["mlflow"] is None

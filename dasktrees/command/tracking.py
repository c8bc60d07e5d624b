"""MLflow tracking of experiments: a complete run directory logged as one MLflow run.

The run directory stays the single source of truth: everything is read back from its files
after they are written, never from the objects of the run::

    config.yaml      -> params: every key of the resolved config, dotted (output.mlflow left out)
    metrics.json     -> metrics: every number, under its dotted key (test.accuracy, rows.train)
                        tags: every string and boolean, as dasktrees.<dotted key>
    oob_curve.csv    -> the stepped metric oob_error (step: the number of trees)
    the directory    -> the run's artifacts, as laid out on disk (plots/, importances.csv,
                        model/, ...)

MLflow is an optional dependency (``pip install "dasktrees[mlflow]"``), imported only here and
only when needed. The client is built for the given tracking URI (``MlflowClient``), so MLflow's
global state (``mlflow.set_tracking_uri``, the active run) is left alone.
"""

import contextlib
import csv
import json
import math
import numbers
import os
import re
import time
from pathlib import Path
from urllib.parse import urlparse

import yaml

from .._version import __version__

INSTALL = 'pip install "dasktrees[mlflow]"'
# MLflow 3 refuses its file store (a local directory) unless this variable is true.
ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"
# Tracking URIs without a scheme that MLflow reads as a store, not as a directory.
_NAMED_STORES = ("databricks", "databricks-uc", "uc")
CURVE_METRIC = "oob_error"
# Keys of the resolved config that say where the run is tracked, not what it is.
NOT_PARAMS = ("output.mlflow",)


class TrackingError(RuntimeError):
    """Logging a complete run directory to MLflow failed; the directory is untouched.

    ``run_dir`` is the run directory. ``traceback_in`` is None: the traceback is not in the
    run's ``run.log`` (the command prints it with ``--debug``).
    """

    traceback_in = None

    def __init__(self, message, run_dir):
        super().__init__(message)
        self.run_dir = run_dir


def import_mlflow():
    """The ``mlflow`` module, or an ImportError that says how to install it."""
    try:
        import mlflow
    except ImportError as error:
        raise ImportError(
            f"MLflow cannot be imported ({error}); install it with: {INSTALL}"
        ) from error
    return mlflow


def mlflow_problem():
    """Why MLflow cannot be used (for ``dasktrees validate``), or None."""
    try:
        import_mlflow()
    except ImportError as error:
        return str(error)
    return None


# ---- the tracking URI ------------------------------------------------------------------------


def is_local_store(uri):
    """Whether ``uri`` names MLflow's file store: a path (``./mlruns``, ``/data/mlruns``) or a
    ``file:`` URI."""
    if str(uri) in _NAMED_STORES:
        return False
    scheme = urlparse(str(uri)).scheme
    # (a Windows drive letter parses as a one-letter scheme)
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def resolve_uri(uri):
    """``uri`` with a plain path made an absolute ``file:`` URI (relative to the working
    directory, as the config's other paths), anything else as given."""
    uri = str(uri)
    if is_local_store(uri) and urlparse(uri).scheme != "file":
        return Path(uri).expanduser().resolve().as_uri()
    return uri


@contextlib.contextmanager
def _file_store_allowed(uri):
    """For a local store, ``MLFLOW_ALLOW_FILE_STORE=true`` during the block, unless the
    environment sets it already (then its value is kept, ``false`` included)."""
    if not is_local_store(uri) or ALLOW_FILE_STORE in os.environ:
        yield
        return
    os.environ[ALLOW_FILE_STORE] = "true"
    try:
        yield
    finally:
        os.environ.pop(ALLOW_FILE_STORE, None)


# ---- what a run directory holds, as MLflow's entities -------------------------------------------


def flatten(mapping, prefix=""):
    """``{dotted key: value}`` of a nested mapping; lists and empty mappings are values."""
    flat = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def _name(key):
    """A key as an MLflow param name: characters MLflow refuses become ``_``."""
    return re.sub(r"[^\w./\- ]", "_", str(key))


def _param_limit():
    try:
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH
    except ImportError:  # not a public name: older and newer MLflow may move it
        return 500
    return MAX_PARAM_VAL_LENGTH


def param_text(value, limit):
    """A config value as a param's text: a string as it is, anything else as JSON (``true``,
    ``null``, ``[0.05, 0.5]``); longer than ``limit``, cut to it and ended with ``...``."""
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def params_of(config, limit=6000):
    """``{name: text}``: every key of a resolved config (``config.yaml``), dotted, but those of
    ``output.mlflow``."""
    return {
        _name(key): param_text(value, limit)
        for key, value in flatten(config).items()
        if not any(key == k or key.startswith(f"{k}.") for k in NOT_PARAMS)
    }


def is_metric(value):
    """A number MLflow keeps as a metric: int or float, not a bool, finite."""
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def metrics_of(metrics):
    """``{dotted key: number}``: every number of ``metrics.json`` (nested mappings dotted:
    ``test.accuracy``, ``rows.train``, ``test.pinball_loss.q0.05``). Nulls (undefined scores)
    and lists (the confusion matrix, the default quantiles) are not metrics; strings and
    booleans are tags (``tags_of``)."""
    return {key: value for key, value in flatten(metrics).items() if is_metric(value)}


def tags_of(metrics):
    """``{dasktrees.<dotted key>: text}``: every string and boolean of ``metrics.json``
    (name, kind, task, estimator, versions.*)."""
    tags = {}
    for key, value in flatten(metrics).items():
        if isinstance(value, bool):
            tags[f"dasktrees.{key}"] = "true" if value else "false"
        elif isinstance(value, str):
            tags[f"dasktrees.{key}"] = value
    return tags


def curve_of(run_dir):
    """``[(n_trees, oob_error)]`` of ``oob_curve.csv`` (empty without one), read with
    ``float`` (exact: pandas writes floats by ``repr``); undefined points (no out-of-bag row
    yet, written empty) left out."""
    path = Path(run_dir) / "oob_curve.csv"
    if not path.exists():
        return []
    points = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            text = row["oob_error"].strip()
            value = float(text) if text else math.nan
            if math.isfinite(value):
                points.append((int(row["n_trees"]), value))
    return points


# ---- logging ---------------------------------------------------------------------------------


def _experiment_id(client, name):
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return client.create_experiment(name)
        except MlflowException:  # created meanwhile by another run
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.lifecycle_stage == "deleted":
        raise ValueError(
            f"the MLflow experiment {name!r} is deleted; restore it "
            "(mlflow experiments restore) or choose another output.mlflow.experiment"
        )
    return experiment.experiment_id


def log_run(run_dir, tracking_uri, experiment=None):
    """Log a complete run directory as one MLflow run; return its run id.

    Parameters
    ----------
    run_dir : path
        A run directory of ``dasktrees run`` (with ``config.yaml`` and ``metrics.json``).
    tracking_uri : str
        Where MLflow keeps runs: a server (``http://host:5000``), a database
        (``sqlite:///mlflow.db``, needs SQLAlchemy), ``databricks``, or a local directory
        (``./mlruns``, ``file:///...``): MLflow's file store, allowed for this call (MLflow 3
        refuses it unless ``MLFLOW_ALLOW_FILE_STORE`` is true; an explicit value in the
        environment is kept).
    experiment : str, optional
        The MLflow experiment, created if missing; default the run's name.

    Raises
    ------
    ImportError
        MLflow is not installed.
    TrackingError
        MLflow failed (the MLflow run, if one was started, is marked FAILED); the run
        directory is left as it was.
    """
    import_mlflow()
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    run_dir = Path(run_dir)
    uri = resolve_uri(tracking_uri)
    run_id = None
    client = None
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        metrics = json.loads((run_dir / "metrics.json").read_text())
        name = metrics.get("name") or config.get("name") or run_dir.name
        experiment = experiment or name
        now = int(time.time() * 1000)
        params = [Param(k, v) for k, v in params_of(config, _param_limit()).items()]
        values = [Metric(k, v, now, 0) for k, v in metrics_of(metrics).items()]
        values += [Metric(CURVE_METRIC, v, now, step) for step, v in curve_of(run_dir)]
        tags = {
            "dasktrees.version": metrics.get("versions", {}).get("dasktrees", __version__),
            "dasktrees.run_dir": str(run_dir.resolve()),
            **tags_of(metrics),
        }
        with _file_store_allowed(uri):
            client = MlflowClient(tracking_uri=uri)
            run = client.create_run(_experiment_id(client, experiment), run_name=name, tags=tags)
            run_id = run.info.run_id
            # (log_batch splits into the server's batch limits)
            client.log_batch(run_id, metrics=values, params=params)
            client.log_artifacts(run_id, str(run_dir))
            client.set_terminated(run_id, "FINISHED")
    except Exception as error:
        if run_id is not None:
            with contextlib.suppress(Exception), _file_store_allowed(uri):
                client.set_terminated(run_id, "FAILED")
        cause = " ".join(f"{type(error).__name__}: {error}".split())
        raise TrackingError(
            f"the run directory {run_dir} is complete, but logging it to MLflow at {uri} "
            f"failed: {cause}",
            run_dir,
        ) from error
    return run_id

"""Run one experiment from a validated ``Config`` and write its run directory.

The run directory is written under a temporary name beside its final one and renamed when
complete, so a directory under the final name is always whole. A run that fails is renamed too,
with a ``FAILED`` file holding the error, and without a model::

    runs/wine-rf/20261121-173000/
        config.yaml          the config with every default filled in
        metrics.json         fit seconds, rows, features, trees, OOB score, test metrics, versions
        importances.csv      MDI mean and std over trees, the debiased out-of-bag impurity
                             importance (forests that sample rows), permutation importance
                             when asked
        oob_curve.csv        OOB error after 1, 2, ... trees
        prune_curve.csv      with model.prune: the OOB score of each size the trees were cut to
                             (a quantile forest's: and the OOB pinball loss where it chose)
        plots/               importances.png, oob_curve.png, confusion_matrix.png (classifiers),
                             intervals.png (quantile forests), prune_curve.png (model.prune)
        model/               the saved model (``dasktrees.load``)
        dask-report.html     Dask's performance report of the fit and evaluation
        run.log

With ``output.mlflow``, the complete directory is then logged as an MLflow run (``tracking``).
"""

import contextlib
import datetime
import importlib
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ..forest.quantiles import check_quantiles, inside_interval
from .config import default_metrics, estimator_class, infer_task, resolved
from .io import read_train, split
from .tracking import import_mlflow, log_run

logger = logging.getLogger("dasktrees.experiment")


# ---- cluster ---------------------------------------------------------------------------------


@contextlib.contextmanager
def connect(cluster):
    """A ``distributed.Client`` for the ``cluster`` section, closed (with any cluster it
    started) on exit."""
    from distributed import Client, LocalCluster

    with contextlib.ExitStack() as stack:
        if cluster.address is not None:
            try:
                client = Client(cluster.address, timeout=f"{cluster.timeout}s")
            except (OSError, TimeoutError) as error:
                raise ConnectionError(
                    f"cannot connect to the Dask scheduler at {cluster.address} "
                    f"within {cluster.timeout} s ({error})"
                ) from None  # the message says it all; the chain is distributed's internals
        elif cluster.class_ is not None:
            module, _, name = cluster.class_.rpartition(".")
            try:
                cluster_class = getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError, ValueError) as error:
                raise ImportError(f"cluster.class: cannot import {cluster.class_!r}") from error
            started = stack.enter_context(cluster_class(**cluster.kwargs))
            if cluster.scale:
                started.scale(**cluster.scale)
            client = Client(started, timeout=f"{cluster.timeout}s")
        else:
            local = cluster.local.model_dump() if cluster.local is not None else {}
            started = stack.enter_context(
                LocalCluster(
                    dashboard_address=":0", **{k: v for k, v in local.items() if v is not None}
                )
            )
            client = Client(started)
        stack.enter_context(client)
        yield client


# ---- data ------------------------------------------------------------------------------------


def feature_columns(config, columns):
    """The feature columns: ``data.features``, or every column but the targets and
    ``data.drop``."""
    data = config.data
    if data.features is not None:
        return list(data.features)
    excluded = {*config.targets, *(data.drop or ())}
    return [c for c in columns if c not in excluded]


# ---- model and evaluation --------------------------------------------------------------------


def build_estimator(config, task, client):
    """The estimator of the ``model`` section.

    Its params, with ``seed`` as random_state unless given, ``data.categorical`` as
    categorical_features, out-of-bag scoring when ``evaluation.oob`` and the forest samples
    rows, and ``client`` for forests (a single tree is fitted in this process).

    Returns
    -------
    estimator
        Unfitted.
    """
    cls = estimator_class(config.model.kind, task)
    params = dict(config.model.params)
    params.setdefault("random_state", config.seed)
    if config.data.categorical:
        params.setdefault("categorical_features", list(config.data.categorical))
    if isinstance(params.get("default_quantiles"), list):  # YAML has no tuples; the default is one
        params["default_quantiles"] = tuple(params["default_quantiles"])
    if config.model.prune is not None:
        params["prune"] = config.model.prune
    is_forest = config.model.kind != "decision_tree"
    if is_forest:
        params["client"] = client
        # (bootstrap's default differs between random forests and extra-trees)
        if config.evaluation.oob and "oob_score" not in params and cls(**params).samples_rows():
            params["oob_score"] = True
    return cls(**params)


def _metrics(names, task, model, y_true, decision):
    """The test metrics ``names`` of ``model``'s ``decision`` (a classifier's probabilities, a
    regressor's predictions; on several class columns, its labels) for targets ``y_true``."""
    from sklearn import metrics

    results = {}
    if task == "classification" and np.ndim(y_true) == 2:  # several columns: subset accuracy
        for name in names:
            if name == "accuracy":
                results[name] = float(np.mean((decision == y_true).all(axis=1)))
    elif task == "classification":
        classes = model.classes_
        predicted = classes.take(np.argmax(decision, axis=1))
        for name in names:
            if name == "accuracy":
                results[name] = metrics.accuracy_score(y_true, predicted)
            elif name == "balanced_accuracy":
                results[name] = metrics.balanced_accuracy_score(y_true, predicted)
            elif name == "log_loss":
                results[name] = metrics.log_loss(y_true, decision, labels=classes)
            elif name == "roc_auc":
                if len(np.unique(y_true)) < 2:
                    results[name] = None  # undefined with one class in the test set
                elif len(classes) == 2:
                    results[name] = metrics.roc_auc_score(y_true == classes[1], decision[:, 1])
                else:
                    results[name] = metrics.roc_auc_score(
                        y_true, decision, multi_class="ovr", labels=classes
                    )
            elif name == "confusion_matrix":
                matrix = metrics.confusion_matrix(y_true, predicted, labels=classes)
                results[name] = {"labels": classes.tolist(), "matrix": matrix.tolist()}
    else:
        for name in names:
            if name == "r2":
                results[name] = metrics.r2_score(y_true, decision)
            elif name == "rmse":
                results[name] = float(np.sqrt(metrics.mean_squared_error(y_true, decision)))
            elif name == "mae":
                results[name] = metrics.mean_absolute_error(y_true, decision)
            elif name == "poisson_deviance":
                counts = np.min(y_true) >= 0 and np.min(decision) > 0
                results[name] = metrics.mean_poisson_deviance(y_true, decision) if counts else None
    return {k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in results.items()}


def quantile_column(q):
    """The name of quantile ``q``'s column or entry: ``q0.05`` (the float's shortest repr, so
    that distinct quantiles keep distinct names)."""
    return f"q{float(q)!r}"


def _quantile_metrics(names, y_true, predicted, quantiles):
    """Coverage of the interval between the lowest and highest of ``quantiles`` and the mean
    pinball loss of each, for the metrics of ``names`` among ``QUANTILE_METRICS``.

    ``predicted`` holds a column per entry of ``quantiles`` (n_rows, n_quantiles); the
    coverage is None for a single quantile (no interval).
    """
    from sklearn.metrics import mean_pinball_loss

    results = {}
    if "coverage" in names:
        results["coverage"] = _coverage(y_true, predicted, quantiles)
    if "pinball_loss" in names:
        results["pinball_loss"] = {
            quantile_column(q): float(mean_pinball_loss(y_true, predicted[:, k], alpha=q))
            for k, q in enumerate(quantiles)
        }
    return results


def _coverage(y_true, predicted, quantiles):
    """Share of the rows whose target lies between their lowest and highest quantile (bounds
    included, as ``oob_coverage_``); None without an interval or a row."""
    if min(quantiles) == max(quantiles) or len(y_true) == 0:
        return None
    return float(np.mean(inside_interval(y_true, predicted, quantiles)))


def _finite(value):
    """``value`` with every non-finite float replaced by None, through dicts and lists."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _versions():
    import dask
    import distributed
    import numba
    import sklearn

    from .._version import __version__

    return {
        "dasktrees": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "numba": numba.__version__,
        "scikit-learn": sklearn.__version__,
    }


# ---- plots -----------------------------------------------------------------------------------


def _plot_importances(importances, path):
    """The 30 largest MDI importances; with the debiased out-of-bag importance, a second panel
    beside them, over the 15 largest by either measure, sorted by the debiased one."""
    import matplotlib.pyplot as plt

    debiased = "oob_impurity_mean" in importances
    if debiased:
        rows = importances.nlargest(15, "mdi_mean").index.union(
            importances.nlargest(15, "oob_impurity_mean").index
        )
        top = importances.loc[rows].sort_values("oob_impurity_mean")
    else:
        top = importances.sort_values("mdi_mean").tail(30)
    fig, axes = plt.subplots(
        1, 2 if debiased else 1, figsize=(11 if debiased else 7, 0.3 * len(top) + 1.5), sharey=True
    )
    ax = axes[0] if debiased else axes
    xerr = None
    if "mdi_std" in top:  # one std over trees, cut at zero: an importance is never negative
        xerr = [np.minimum(top["mdi_mean"], top["mdi_std"]), top["mdi_std"]]
    ax.barh(top["feature"].astype(str), top["mdi_mean"], xerr=xerr, color="#4c72b0")
    ax.set_xlabel("mean decrease in impurity (bars: std over trees)")
    ax.set_title("MDI, on the training rows" if debiased else "Variable importance")
    if debiased:  # not normalised, and negative for splits that do worse than none
        axes[1].barh(
            top["feature"].astype(str),
            top["oob_impurity_mean"],
            xerr=top["oob_impurity_std"],
            color="#55a868",
        )
        axes[1].axvline(0.0, color="black", linewidth=0.8)
        axes[1].set_xlabel("out-of-bag impurity decrease (bars: std over trees)")
        axes[1].set_title("Debiased (MDI-oob)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_oob_curve(curve, task, path, stopped_at=None):
    """The OOB error against the number of trees; ``stopped_at``: where ``n_estimators="auto"``
    stopped growing, marked with a vertical line."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(np.arange(1, len(curve) + 1), curve, color="#4c72b0")
    if stopped_at is not None:
        ax.axvline(
            stopped_at, color="#c44e52", linestyle="--", label=f"stopped at {stopped_at} trees"
        )
        ax.legend(loc="upper right")
    ax.set_xlabel("number of trees")
    ax.set_ylabel(
        "out-of-bag error" + (" (misclassification)" if task == "classification" else " (MSE)")
    )
    ax.set_title("Out-of-bag error")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_prune_curve(curve, parameter, chosen, path):
    """The out-of-bag score of the forest with its trees cut to each size scored
    (``prune="oob"``), from no pruning to most, the chosen size marked."""
    import matplotlib.pyplot as plt

    labels = ["none" if v in (0.0, np.inf) else f"{v:g}" for v in curve[:, 0]]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(np.arange(len(curve)), curve[:, 1], marker="o", color="#4c72b0")
    best = int(np.flatnonzero(curve[:, 0] == chosen)[0])
    ax.axvline(best, color="#c44e52", linestyle="--", label=f"{parameter} = {labels[best]}")
    ax.set_xticks(np.arange(len(curve)), labels, rotation=60, fontsize=7)
    ax.set_xlabel(f"{parameter} (left: no pruning)")
    ax.set_ylabel("out-of-bag score")
    ax.set_title("Trees cut on their out-of-bag rows")
    ax.legend(loc="lower left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _default_quantiles(model):
    """A quantile forest's ``default_quantiles`` as a 1-d float array (a float gives one)."""
    return check_quantiles(model.default_quantiles, "default_quantiles")


def _here(value):
    """A dask collection computed (with the default client), anything else as it is."""
    return value.compute() if hasattr(value, "compute") else value


def _intervals(y_true, columns, quantiles, predicted, rows):
    """What the interval plot and the quantile metrics take: the rows' targets, their lowest
    and highest default quantile and median (``columns`` by quantile; the median None if not
    predicted), ``predicted`` (a column per default quantile), and what the rows are."""
    return {
        "y_true": y_true,
        "lower": columns[quantiles.min()],
        "upper": columns[quantiles.max()],
        "median": columns.get(0.5),
        "predicted": predicted,
        "quantiles": quantiles,
        "rows": rows,
    }


def _test_intervals(model, X_test, y_true):
    """The test rows' default quantiles and median, predicted in one pass."""
    quantiles = _default_quantiles(model)
    predicted_quantiles = sorted({*quantiles.tolist(), 0.5})
    predicted = model.predict(X_test, quantiles=predicted_quantiles)
    predicted = np.asarray(_here(predicted))
    columns = {q: predicted[:, k] for k, q in enumerate(predicted_quantiles)}
    default = np.column_stack([columns[q] for q in quantiles.tolist()])
    return _intervals(y_true, columns, quantiles, default, "test rows")


def _oob_intervals(model, y_train):
    """The training rows' out-of-bag default quantiles (rows no tree left out dropped); the
    median only if it is a default quantile."""
    quantiles = _default_quantiles(model)
    oob = model.oob_quantiles_
    oob = np.asarray(_here(oob))
    y_true = np.asarray(_here(y_train), dtype=float)
    scored = ~np.isnan(oob[:, 0])
    oob, y_true = oob[scored], y_true[scored]
    columns = {q: oob[:, k] for k, q in enumerate(quantiles.tolist())}
    return _intervals(y_true, columns, quantiles, oob, "out-of-bag rows")


# Rows drawn in the interval plot at most: beyond a few thousand the points are a blur, and the
# figure's size grows with them.
_MAX_PLOTTED_ROWS = 2000


def _plot_intervals(y_true, lower, upper, median, quantiles, rows, path):
    """The predicted interval between the lowest and highest default quantile, and the median,
    against the true target, rows sorted by the median (the interval's centre without one)."""
    import matplotlib.pyplot as plt

    centre = median if median is not None else (lower + upper) / 2.0
    order = np.argsort(centre, kind="stable")
    if len(order) > _MAX_PLOTTED_ROWS:  # evenly along the sorted rows; coverage from all
        order = order[np.linspace(0, len(order) - 1, _MAX_PLOTTED_ROWS).round().astype(int)]
    x = np.arange(len(order))
    inside = (lower <= y_true) & (y_true <= upper)
    low, high = min(quantiles), max(quantiles)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.fill_between(
        x,
        lower[order],
        upper[order],
        step="mid",
        color="#4c72b0",
        alpha=0.3,
        linewidth=0,
        label=f"{low:g} to {high:g} quantile",
    )
    if median is not None:
        ax.plot(x, median[order], color="#4c72b0", linewidth=1, label="median")
    for mask, color, label in ((inside, "#222222", "inside"), (~inside, "#c44e52", "outside")):
        shown = mask[order]
        ax.scatter(x[shown], y_true[order][shown], s=6, color=color, label=f"target, {label}")
    by = "predicted median" if median is not None else "interval's centre"
    ax.set_xlabel(f"{rows} ({len(y_true)}), sorted by the {by}")
    ax.set_ylabel("target")
    coverage = float(np.mean(inside)) if len(y_true) else float("nan")
    ax.set_title(
        f"Prediction intervals: coverage {coverage:.1%} (nominal {high - low:.0%}), {rows}"
    )
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_confusion(matrix, labels, path):
    import matplotlib.pyplot as plt
    from sklearn.metrics import ConfusionMatrixDisplay

    fig, ax = plt.subplots(figsize=(5, 4.5))
    ConfusionMatrixDisplay(np.asarray(matrix), display_labels=labels).plot(ax=ax, colorbar=False)
    ax.set_title("Confusion matrix (test set)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---- the run ---------------------------------------------------------------------------------


class TextProgress:
    """A one-line progress bar of tree tasks on a stream (stderr by default)."""

    def __init__(self, stream=None, width=30):
        self.stream = stream or sys.stderr
        self.width = width

    def __call__(self, done, total):
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "-" * (self.width - filled)
        end = "\n" if done >= total else ""
        self.stream.write(f"\rtrees [{bar}] {done}/{total}{end}")
        self.stream.flush()


def default_run_dir(config):
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / config.name / stamp


@contextlib.contextmanager
def _run_log(path):
    """Log dasktrees (INFO and up) and distributed into ``path`` for the block, and the
    traceback of an error that ends it.

    One handler per logger: a LocalCluster silences the handlers of the "distributed" logger
    to WARNING, which must not silence ours.
    """
    formatter = logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s")
    ours = logging.getLogger("dasktrees")
    loggers = [ours, logging.getLogger("distributed")]
    handlers = [logging.FileHandler(path) for _ in loggers]
    level = ours.level
    ours.setLevel(logging.INFO)
    for log, handler in zip(loggers, handlers):
        handler.setFormatter(formatter)
        log.addHandler(handler)
    try:
        yield
    except BaseException:
        ours.exception("the run failed")  # the traceback, which the command does not print
        raise
    finally:
        ours.setLevel(level)
        for log, handler in zip(loggers, handlers):
            log.removeHandler(handler)
            handler.close()


def run(config, task=None, output=None, progress=None, echo=print):
    """Run the experiment and return its run directory (a ``Path``).

    Parameters
    ----------
    config : config.Config
        Validated (``config.check_config`` has passed).
    task : {"classification", "regression"} or None
        Inferred from the target when None.
    output : path, optional
        The run directory; default ``output.dir`` of the config, else
        ``runs/<name>/<timestamp>``. Must not exist yet.
    progress : callable, optional
        ``progress(n_done, n_total)`` as tree tasks finish.
    echo : callable
        Where the dashboard link and other news are printed.

    Raises
    ------
    FileExistsError
        If the run directory exists.
    ImportError
        ``output.mlflow`` is set and MLflow is not installed (before anything runs).
    tracking.TrackingError
        ``output.mlflow`` is set and logging the complete run directory to MLflow failed; the
        run directory is whole and unchanged (``error.run_dir``).
    Exception
        Whatever made the run fail, after the run directory is written as failed.
    """
    final = Path(output or config.output.dir or default_run_dir(config))
    if final.exists():
        raise FileExistsError(f"run directory {final} exists already")
    mlflow = config.output.mlflow
    if mlflow is not None:
        import_mlflow()  # a missing MLflow stops the run before it starts, not after
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        with _run_log(work / "run.log"):
            _run(config, task, work, progress, echo)
    except BaseException as error:
        shutil.rmtree(work / "model", ignore_errors=True)
        (work / "FAILED").write_text(
            f"{type(error).__name__}: {error}\n\n" + traceback.format_exc()
        )
        os.replace(work, final)
        raise
    os.replace(work, final)
    if mlflow is not None:  # read from the complete directory, which stays as it is
        run_id = log_run(final, mlflow.tracking_uri, mlflow.experiment)
        echo(f"MLflow run {run_id} in experiment {mlflow.experiment!r} at {mlflow.tracking_uri}")
    return final


def _run(config, task, work, progress, echo):
    from distributed import performance_report

    from ..distributed.train import report_progress

    (work / "config.yaml").write_text(yaml.safe_dump(resolved(config), sort_keys=False))
    with connect(config.cluster) as client:
        echo(f"Dask dashboard: {client.dashboard_link}")
        logger.info("dashboard %s", client.dashboard_link)
        frame = read_train(config.data)
        target = config.target  # a column, or a list of several
        train, test = split(config.data, frame, config.seed)
        features = feature_columns(config, list(frame.columns))
        task = task or infer_task(frame[config.targets[0]], config.model)
        several = isinstance(target, list)
        X_train, y_train = train[features], train[target]
        if config.model.kind == "decision_tree":  # one tree: a local estimator
            X_train, y_train = X_train.compute(), y_train.compute()
        model = build_estimator(config, task, client)
        logger.info("fitting %s on %d features", type(model).__name__, len(features))
        with performance_report(filename=str(work / "dask-report.html")):
            start = time.perf_counter()
            with report_progress(progress or (lambda done, total: None)):
                model.fit(X_train, y_train)
            fit_seconds = time.perf_counter() - start
            logger.info("fitted in %.2f s", fit_seconds)
            test_metrics, confusion, intervals = None, None, None
            n_test = 0
            if test is not None:
                X_test = test[features]
                if config.model.kind == "decision_tree":
                    X_test = X_test.compute()
                y_true = np.asarray(test[target].compute())
                n_test = len(y_true)
            if n_test == 0 and test is not None:
                logger.warning("the test set is empty: no test metrics")
            elif test is not None:
                decision = (
                    model.predict_proba(X_test)
                    if task == "classification" and not several
                    else model.predict(X_test)  # (several class columns: their labels)
                )
                decision = np.asarray(_here(decision))
                names = config.evaluation.metrics or default_metrics(
                    config.model.kind, task, len(config.targets)
                )
                test_metrics = _metrics(names, task, model, y_true, decision)
                if hasattr(model, "leaf_targets_"):
                    intervals = _test_intervals(model, X_test, y_true)
                    test_metrics.update(
                        _quantile_metrics(
                            names, y_true, intervals["predicted"], intervals["quantiles"]
                        )
                    )
                confusion = test_metrics.get("confusion_matrix")
                logger.info("test metrics %s", test_metrics)
            if intervals is None and hasattr(model, "oob_quantiles_"):
                intervals = _oob_intervals(model, y_train)
            importances = pd.DataFrame(
                {"feature": features, "mdi_mean": model.feature_importances_}
            )
            if hasattr(model, "feature_importances_std_"):
                importances["mdi_std"] = model.feature_importances_std_
            if config.evaluation.permutation_importance:
                permutation = model.oob_permutation_importance(X_train, y_train)
                importances["permutation_mean"] = permutation.importances_mean
                importances["permutation_std"] = permutation.importances_std
            oob_impurity = config.evaluation.oob_impurity_importance
            if oob_impurity is None:  # by default wherever rows are out of bag (one target)
                oob_impurity = not several and hasattr(model, "samples_rows")
                oob_impurity = oob_impurity and model.samples_rows()
            if oob_impurity:
                debiased = model.oob_impurity_importance(X_train, y_train)
                importances["oob_impurity_mean"] = debiased.importances_mean
                importances["oob_impurity_std"] = debiased.importances_std

    importances.to_csv(work / "importances.csv", index=False)
    plots = work / "plots"
    plots.mkdir()
    _plot_importances(importances, plots / "importances.png")
    oob_score = getattr(model, "oob_score_", None)
    if hasattr(model, "oob_curve_"):
        curve = np.asarray(model.oob_curve_)
        pd.DataFrame({"n_trees": np.arange(1, len(curve) + 1), "oob_error": curve}).to_csv(
            work / "oob_curve.csv", index=False
        )
        # n_estimators="auto" grew trees until the OOB error settled: mark where it stopped.
        auto = model.get_params().get("n_estimators") == "auto"
        stopped_at = len(model.estimators_) if auto else None
        _plot_oob_curve(curve, task, plots / "oob_curve.png", stopped_at)
    prune_curve = getattr(model, "oob_prune_curve_", None)
    if prune_curve is not None:
        (parameter,) = model.prune_
        columns = {parameter: prune_curve[:, 0], "oob_score": prune_curve[:, 1]}
        pinball = getattr(model, "oob_prune_pinball_", None)
        if pinball is not None:  # a quantile forest: the sizes it chose among
            columns["oob_pinball"] = pinball
        pd.DataFrame(columns).to_csv(work / "prune_curve.csv", index=False)
        _plot_prune_curve(
            prune_curve, parameter, model.prune_[parameter], plots / "prune_curve.png"
        )
    if confusion is not None:
        _plot_confusion(confusion["matrix"], confusion["labels"], plots / "confusion_matrix.png")
    # Drawn for an interval: a single default quantile has none.
    if intervals is not None and intervals["quantiles"].min() < intervals["quantiles"].max():
        _plot_intervals(
            *(intervals[k] for k in ("y_true", "lower", "upper", "median", "quantiles", "rows")),
            plots / "intervals.png",
        )
    model.save(work / "model")
    n_trees = len(model.estimators_) if hasattr(model, "estimators_") else 1
    metrics = {
        "name": config.name,
        "kind": config.model.kind,
        "task": task,
        "targets": config.targets,
        "estimator": type(model).__name__,
        "fit_seconds": round(fit_seconds, 3),
        "rows": {
            "train": int(model._n_rows) if hasattr(model, "_n_rows") else len(y_train),
            "test": n_test,
        },
        "features": len(features),
        "trees": n_trees,
        "oob_score": None if oob_score is None else float(oob_score),
        "test": test_metrics,
        "versions": _versions(),
    }
    if prune_curve is not None:
        metrics["prune"] = {
            "chosen": model.prune_,
            "curve": [[float(v), float(score)] for v, score in prune_curve],
        }
        if hasattr(model, "oob_prune_pinball_"):
            metrics["prune"]["pinball"] = [float(loss) for loss in model.oob_prune_pinball_]
    if hasattr(model, "leaf_targets_"):
        metrics["quantiles"] = _default_quantiles(model).tolist()
        metrics["oob_coverage"] = getattr(model, "oob_coverage_", None)
    # NaN (an undefined score) is not JSON: written as null.
    (work / "metrics.json").write_text(json.dumps(_finite(metrics), indent=2, allow_nan=False))
    return metrics

"""The ``dasktrees`` command: run, validate, predict, inspect, warmup.

Exit codes: 0 success; 2 an invalid config or arguments (every problem listed, one per line,
each with its dotted key); 1 a failure while running: one line naming the cause, and where the
traceback is (a failed run's ``run.log``; ``--debug`` prints it).

Each subcommand imports what it uses when it runs: ``dasktrees --help`` imports nothing but
argparse, ``validate`` the config's checks, and only ``run``, ``predict`` and ``warmup`` the
estimators, the kernels and Dask.
"""

import argparse
import contextlib
import json
import sys
import traceback
from functools import partial
from pathlib import Path

from .errors import ConfigError

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so every error has our exit code and format."""

    def error(self, message):
        raise ConfigError([("arguments", message)])


def _parser():
    parser = _Parser(prog="dasktrees", description="Random forests on Dask.")
    parser.add_argument("--debug", action="store_true", help="print a failure's traceback")
    # Also after the command; SUPPRESS, or a command's default would undo ``dasktrees --debug``.
    debug = _Parser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    add_command = partial(commands.add_parser, parents=[debug])
    run = add_command("run", help="run one experiment; prints the run directory last")
    run.add_argument("config", help="YAML experiment file")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a config value (YAML syntax), e.g. --set model.params.n_estimators=50",
    )
    run.add_argument("--output", help="the run directory (default: output.dir, or runs/NAME/TIME)")
    validate = add_command("validate", help="check a config without running it")
    validate.add_argument("config")
    validate.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    predict = add_command("predict", help="predict a CSV or Parquet file with a model")
    predict.add_argument("model", help="a saved model directory")
    predict.add_argument("input", help="CSV or Parquet file (or glob) of the features")
    predict.add_argument("--output", required=True, help="file to write, same format as input")
    predict.add_argument(
        "--quantiles",
        metavar="Q,Q,...",
        help="quantile forests: write these quantiles, one column each (q0.05, ...), e.g. "
        "--quantiles 0.05,0.5,0.95",
    )
    predict.add_argument(
        "--interval",
        metavar="COVERAGE",
        help="regression forests fitted with oob_score: also write the bounds of intervals of "
        "this coverage calibrated on the out-of-bag rows (columns lower, upper), e.g. "
        "--interval 0.9",
    )
    where = predict.add_mutually_exclusive_group()
    where.add_argument("--config", help="use this experiment file's cluster section")
    where.add_argument("--address", help="a running Dask scheduler, e.g. tcp://10.0.0.5:8786")
    # Neither: threads of this process, as for a model's predict without a client.
    inspect = add_command("inspect", help="describe a saved model")
    inspect.add_argument("model")
    inspect.add_argument("--json", action="store_true", help="print the description as JSON")
    warmup = commands.add_parser(
        "warmup", help="compile the numba kernels into the cache once, before the first fit"
    )
    warmup.add_argument(
        "--processes", type=int, default=1, help="compile in this many processes (default: 1)"
    )
    return parser


def _print_problems(problems):
    for key, message in problems:
        print(f"{key}: {message}", file=sys.stderr)


def _run(args):
    from . import experiment
    from .config import check_config, load_config

    config = load_config(args.config, args.set)
    task = check_config(config)
    output = Path(args.output) if args.output else None
    target = output or (Path(config.output.dir) if config.output.dir else None)
    if target is not None and target.exists():
        key = "--output" if args.output else "output.dir"
        raise ConfigError([(key, f"{target} exists already; choose a new run directory")])
    run_dir = target or experiment.default_run_dir(config)
    try:
        experiment.run(
            config,
            task=task,
            output=run_dir,
            progress=experiment.TextProgress(),
            echo=lambda line: print(line, file=sys.stderr),
        )
    except Exception as error:
        if not hasattr(error, "traceback_in"):  # (None for an MLflow failure after the run)
            error.traceback_in = run_dir / "run.log"  # where main() says the traceback is
        raise
    print(run_dir)


def _validate(args):
    from .config import check_config, load_config

    config = load_config(args.config, args.set)
    task = check_config(config)
    print(f"{args.config}: valid ({config.model.kind}, {task})")


def _predict(args):
    import dask.dataframe as dd

    from ..estimators.loading import load
    from . import experiment
    from .config import ClusterConfig, load_config, quantile_kinds
    from .io import data_format, is_replaceable, read_table, write_table

    problems = []
    for key, path in (("input", args.input), ("--output", args.output)):
        if data_format(path) is None:
            problems.append((key, f"cannot tell the format of {path!r}: expected .csv or .parquet"))
    if not problems and data_format(args.input) != data_format(args.output):
        problems.append(("--output", "must have the input's format (.csv or .parquet)"))
    if not problems and not is_replaceable(Path(args.output)):
        problems.append(
            ("--output", f"{args.output} exists and is not a file of predictions; choose another")
        )
    quantiles = None
    if args.quantiles is not None:
        quantiles, problem = _parse_quantiles(args.quantiles)
        if problem is not None:
            problems.append(("--quantiles", problem))
    coverage = None
    if args.interval is not None:
        coverage, problem = _parse_coverage(args.interval)
        if problem is not None:
            problems.append(("--interval", problem))
        elif quantiles is not None:
            problems.append(("--interval", "give --quantiles or --interval, not both"))
    if problems:
        raise ConfigError(problems)
    cluster = None  # none asked for: this process, Dask's threads
    if args.config:
        cluster = load_config(args.config).cluster
    elif args.address:
        cluster = ClusterConfig.model_validate({"address": args.address})
    model = load(args.model)
    if quantiles is not None and not hasattr(model, "leaf_targets_"):
        raise ConfigError(
            [
                (
                    "--quantiles",
                    f"{args.model} holds a {type(model).__name__}, not a quantile forest "
                    f"(model.kind {quantile_kinds()}); it predicts no quantiles",
                )
            ]
        )
    if coverage is not None and getattr(model, "oob_interval_scores_", None) is None:
        raise ConfigError(
            [
                (
                    "--interval",
                    f"{args.model} holds a {type(model).__name__} without out-of-bag conformity "
                    "scores: intervals need a regression forest fitted with oob_score=True",
                )
            ]
        )
    is_forest = hasattr(model, "estimators_")
    # A single tree predicts in this process: no cluster to start.
    on_cluster = is_forest and cluster is not None
    with experiment.connect(cluster) if on_cluster else contextlib.nullcontext() as client:
        frame = read_table(args.input)
        names = getattr(model, "feature_names_in_", None)
        X = frame[list(names)] if names is not None else frame
        if is_forest:
            model.client = client
        else:
            X = X.compute()
        if quantiles is not None:
            out = _quantiles(model, X, quantiles)
        elif coverage is not None:
            out = _with_interval(model, X, coverage)
        else:
            out = _predictions(model, X)
        if not isinstance(out, dd.DataFrame):
            out = dd.from_pandas(out, npartitions=1)
        write_table(out, args.output)
    print(args.output)


def _predictions(model, X):
    """A frame with ``prediction`` (and ``proba_<class>`` for classifiers) per input row; for a
    model of k target columns, ``prediction_<o>`` (and ``proba_<o>_<class>``) for each column
    o = 0 .. k - 1 (a model file does not keep the columns' names)."""
    import dask.array as da
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd

    n_outputs = getattr(model, "n_outputs_", 1)
    if n_outputs > 1:
        prediction = model.predict(X)
        parts = [(prediction, [f"prediction_{o}" for o in range(n_outputs)])]
        if hasattr(model, "classes_"):
            for o, proba in enumerate(model.predict_proba(X)):
                parts.append((proba, [f"proba_{o}_{c}" for c in model.classes_[o]]))
        if isinstance(prediction, da.Array):
            return dd.concat([dd.from_dask_array(a, columns=c) for a, c in parts], axis=1)
        return pd.concat([pd.DataFrame(a, columns=c) for a, c in parts], axis=1)
    if hasattr(model, "classes_"):
        proba = model.predict_proba(X)
        labels = [f"proba_{c}" for c in model.classes_]
        if isinstance(proba, da.Array):
            classes = model.classes_
            frame = dd.from_dask_array(proba, columns=labels)
            frame["prediction"] = frame[labels].map_partitions(
                lambda p: pd.Series(classes.take(np.argmax(p.to_numpy(), axis=1)), index=p.index),
                meta=pd.Series(classes[:0]),
            )
            return frame[["prediction", *labels]]
        frame = pd.DataFrame(proba, columns=labels)
        frame.insert(0, "prediction", model.classes_.take(np.argmax(proba, axis=1)))
        return frame
    prediction = model.predict(X)
    if isinstance(prediction, da.Array):
        return dd.from_dask_array(prediction, columns="prediction").to_frame()
    return pd.DataFrame({"prediction": prediction})


def _parse_coverage(text):
    """(coverage, None) for ``--interval 0.9``, or (None, the problem)."""
    try:
        value = float(text)
    except ValueError:
        return None, f"expected a coverage in (0, 1), got {text.strip()!r}"
    if not 0.0 < value < 1.0:  # also NaN
        return None, f"the coverage is in (0, 1), got {text.strip()}"
    return value, None


def _with_interval(model, X, coverage):
    """A frame with ``prediction`` and the bounds ``lower`` and ``upper`` of the interval of
    ``coverage``, per input row."""
    import dask.array as da
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd

    columns = ["prediction", "lower", "upper"]
    prediction, bounds = model.predict(X), model.predict_interval(X, coverage)
    if isinstance(bounds, da.Array):
        # Block by block: a dataframe's blocks have lengths unknown until read.
        table = da.map_blocks(
            lambda p, b: np.concatenate([p, b], axis=1),
            prediction[:, None],
            bounds,
            chunks=(prediction.chunks[0], (3,)),
            dtype=np.float64,
        )
        return dd.from_dask_array(table, columns=columns)
    return pd.DataFrame(np.column_stack([prediction, bounds]), columns=columns)


def _parse_quantiles(text):
    """(quantiles, None) for ``--quantiles 0.05,0.5,0.95``, or (None, the problem)."""
    import math

    values = []
    for item in text.split(","):
        try:
            value = float(item)
        except ValueError:
            return None, f"expected numbers in [0, 1] separated by commas, got {item.strip()!r}"
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            return None, f"quantiles are in [0, 1], got {item.strip()}"
        if value in values:
            return None, f"{item.strip()} is given twice"
        values.append(value)
    return values, None


def _quantiles(model, X, quantiles):
    """A frame with one column per quantile, named ``q0.05`` and so on, per input row."""
    import dask.array as da
    import dask.dataframe as dd
    import pandas as pd

    from .experiment import quantile_column

    columns = [quantile_column(q) for q in quantiles]
    predicted = model.predict(X, quantiles=quantiles)
    if isinstance(predicted, da.Array):
        return dd.from_dask_array(predicted, columns=columns)
    return pd.DataFrame(predicted, columns=columns)


def _inspect(args):
    from ..estimators.loading import describe

    description = describe(args.model)
    if args.json:
        print(json.dumps(description, indent=2))
        return
    for key, value in description.items():
        if isinstance(value, dict):
            print(f"{key}:")
            for name, item in value.items():
                print(f"  {name}: {item}")
        else:
            print(f"{key}: {value}")


def _warmup(args):
    from ..estimators.warmup import warmup

    if args.processes < 1:
        raise ConfigError([("--processes", f"must be at least 1, got {args.processes}")])
    print(warmup(processes=args.processes))


def main(argv=None):
    """Entry point of the ``dasktrees`` command; returns the exit code."""
    args = None
    try:
        args = _parser().parse_args(argv)
        handler = {
            "run": _run,
            "validate": _validate,
            "predict": _predict,
            "inspect": _inspect,
            "warmup": _warmup,
        }
        handler[args.command](args)
    except ConfigError as error:
        _print_problems(error.problems)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_FAILED
    except Exception as error:  # noqa: BLE001 - the command reports any failure the same way
        _print_failure(error, debug=getattr(args, "debug", False))
        return EXIT_FAILED
    return EXIT_OK


def _print_failure(error, debug):
    """One line naming the cause, and where to find the traceback (or the traceback itself)."""
    cause = " ".join(str(error).split()) or "(no message)"
    where = getattr(error, "traceback_in", None)
    if debug:
        hint = ""
    elif where is not None:
        hint = f" (traceback in {where}; --debug prints it)"
    else:
        hint = " (--debug prints the traceback)"
    print(f"error: {type(error).__name__}: {cause}{hint}", file=sys.stderr)
    if debug:
        traceback.print_exc(file=sys.stderr)


def console():
    """``[project.scripts]`` wrapper: exit with ``main``'s code."""
    sys.exit(main())

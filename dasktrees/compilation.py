"""Compile the numba kernels once per machine, and warm a cluster before its first fit.

Every kernel is compiled with ``cache=True``: the first process that calls it compiles it, in
seconds, and writes the machine code to numba's cache; later processes load it in milliseconds.
Two things make that "once per machine" also when processes start together, as the worker
processes of a ``LocalCluster`` do:

* **A lock per kernel.** ``lock_kernels`` (run when dasktrees is imported) makes each kernel
  take a file lock in its cache directory while it compiles. When several processes need the
  same kernel at once, the first compiles it and the others wait, then load it from the cache.
  The locks are ``fcntl.flock`` locks, which the system releases when a process dies; where
  there is no ``fcntl`` (Windows) kernels compile without them, as numba alone would.
* **A cache as fresh as the whole package.** numba keeps a kernel's cached machine code while
  the kernel's own source file is unchanged (its modification time and size), but that code
  also holds the kernels it calls and the constants it reads from other modules: after an edit
  of ``histogram.py`` the growth loop of ``grower.py`` loaded its old copy of the histogram
  fill. ``lock_kernels`` therefore also stamps each kernel's cache with every source file of the
  package (``package_stamp``): any edit recompiles every kernel, once. An installed release
  is never edited, so this only costs those who work on the code.
* **Warming up.** ``warmup`` compiles every kernel a fit, a prediction or a reduction of any
  estimator can need, on tiny data, into the cache: ``dasktrees warmup`` on a machine, or on
  each worker of a cluster with ``WarmupPlugin`` or ``dask worker --preload
  dasktrees.compilation``.

Where the cache is: ``NUMBA_CACHE_DIR`` if set, else ``__pycache__`` beside the package's sources
if that is writable, else the user's cache directory (``~/.cache/numba``). Machines that share a
file system (a cluster's nodes) can share one compilation by pointing ``NUMBA_CACHE_DIR`` at the
same directory on it, provided they have the same CPU model: numba compiles for the CPU it runs
on (``docs/deployment.md``).
"""

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

try:
    import fcntl
except ImportError:  # Windows: no cross-process lock, see lock_kernels
    fcntl = None

# How long a process waits for another one compiling the same kernel before compiling it
# itself: far longer than any kernel compiles, short of hanging forever on a stuck process.
LOCK_TIMEOUT_S = 600.0

# In-process side of the file locks: one re-entrant lock per lock file, taken before the file
# (flock would make a process wait for itself: a kernel's compilation compiles the kernels it
# calls, and two threads of a process may warm up and compile at once), and which of them this
# process holds on the file, with how many nested holders.
_thread_locks = {}
_thread_locks_guard = threading.Lock()
_held = {}


@contextlib.contextmanager
def _file_lock(path, timeout=LOCK_TIMEOUT_S):
    """Hold an exclusive lock on the file ``path`` (created if needed) within the block.

    Re-entrant within a thread. Without ``fcntl``, or when the lock file cannot be created or
    locked (a read-only cache, a file system without locks), or after ``timeout`` seconds, the
    block runs without the file lock. Yields False in that last case only (another process holds
    the lock), else True.
    """
    with _thread_locks_guard:
        thread_lock = _thread_locks.setdefault(path, threading.RLock())
    with thread_lock:
        if path in _held:
            _held[path] += 1
            try:
                yield True
            finally:
                _held[path] -= 1
            return
        handle, busy = _acquire(path, timeout)
        _held[path] = 1
        try:
            yield not busy
        finally:
            del _held[path]
            if handle is not None:
                handle.close()  # releases the lock


def _acquire(path, timeout):
    """``(handle, busy)``: an open file holding ``flock`` on ``path``, or None; ``busy`` when
    another process held the lock for ``timeout`` seconds (see ``_file_lock``)."""
    if fcntl is None:
        return None, False
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle = open(path, "a+b")
    except OSError:
        return None, False
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle, False
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                return None, True
            time.sleep(pause)
            pause = min(2 * pause, 0.1)
        except OSError:
            handle.close()
            return None, False


def _lock_path(dispatcher):
    """The lock file of a kernel: beside its cache files, so that processes sharing a cache
    share the lock. None for a kernel without a cache."""
    try:
        cache_path = dispatcher.stats.cache_path
    except AttributeError:
        return None
    if not cache_path:
        return None
    func = dispatcher.py_func
    return os.path.join(cache_path, f"{func.__module__}.{func.__qualname__}.lock")


def _locked(dispatcher):
    """Wrap ``dispatcher.compile`` (what numba calls to load a kernel from the cache or compile
    it, for a call from Python or from another kernel) in the kernel's file lock."""
    from numba.core import sigutils
    from numba.core.compiler_lock import global_compiler_lock

    compile_unlocked = dispatcher.compile

    def compile_locked(sig, path):
        # numba's own in-process lock first, as its compile takes it: a thread waiting for the
        # file lock must not hold up a thread of this process that compiles under numba's lock
        # and then wants the same file lock.
        with global_compiler_lock:
            with _file_lock(path):
                # numba looks in the cache first: what another process compiled while this
                # one waited is loaded, not compiled again.
                return compile_unlocked(sig)

    def compile(sig):
        args, _ = sigutils.normalize_signature(sig)
        if tuple(args) in dispatcher.overloads:  # compiled or loaded in this process already
            return compile_unlocked(sig)
        path = _lock_path(dispatcher)
        if path is None:
            return compile_unlocked(sig)
        # A kernel called from Python (not from a kernel being compiled, which holds numba's
        # lock) inside a Dask task compiles in a thread of its own: see _off_task_thread.
        if not global_compiler_lock.is_locked() and _in_worker_task():
            return _off_task_thread(compile_locked, sig, path)
        return compile_locked(sig, path)

    compile.__wrapped__ = compile_unlocked
    dispatcher.compile = compile


def _in_worker_task():
    """Whether this thread runs a task of a ``distributed`` worker."""
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return False
    return True


def _off_task_thread(func, *args):
    """``func(*args)`` in a new thread, waited for: its result, or its exception raised here.

    A ``distributed`` worker samples the stacks of its task threads every 10 ms for its
    profiler and walks each frame. numba's compiler runs hundreds of frames deep, so a kernel
    compiled in a task thread compiled about a third slower (``docs/benchmarks.md``), and the
    worker's profile grew too deep for distributed to measure its size ("Sizeof calculation for
    object of type 'dict' failed"). The worker does not sample other threads.
    """
    outcome = {}

    def run():
        try:
            outcome["value"] = func(*args)
        except BaseException as error:  # re-raised in the calling thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name="dasktrees-compile")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def kernels():
    """Every numba kernel of the dasktrees modules imported so far, as ``{name: dispatcher}``
    (the kernels numba inlines into others, ``inline="always"``, are never compiled alone and
    are left out)."""
    from numba.core.registry import CPUDispatcher

    found = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith("dasktrees"):
            continue
        for value in list(vars(module).values()):
            if (
                isinstance(value, CPUDispatcher)
                and value.py_func.__module__ == module_name
                and value.targetoptions.get("inline", "never") == "never"
            ):
                found[f"{module_name}.{value.py_func.__qualname__}"] = value
    return found


def lock_kernels():
    """Make every dasktrees kernel compile under its file lock, with a cache that goes stale with
    any source file of the package (see the module docstring); kernels already locked are left
    as they are."""
    stamp = package_stamp(os.path.dirname(os.path.abspath(__file__)))
    for dispatcher in kernels().values():
        if not hasattr(dispatcher.compile, "__wrapped__"):
            stamp_cache(dispatcher, stamp)
            _locked(dispatcher)


def package_stamp(root):
    """The modification time and size of every ``.py`` file under the folder ``root``, in a
    fixed order: what numba checks of a kernel's own source file before loading its cache."""
    stamp = []
    for folder, subfolders, files in os.walk(root):
        subfolders.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                status = os.stat(path)
                stamp.append((os.path.relpath(path, root), status.st_mtime, status.st_size))
    return tuple(stamp)


def stamp_cache(dispatcher, stamp):
    """Make ``dispatcher``'s cached machine code valid only while ``stamp`` is unchanged, besides
    numba's own check of the kernel's source file.

    numba writes the source stamp it holds into the cache's index and drops an index whose
    stamp differs from it. The stamp lives in a private attribute of numba's cache
    (``IndexDataCacheFile._source_stamp``, as of numba 0.68); without it (another
    numba) the kernel keeps numba's own check.
    """
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if cache_file is not None and hasattr(cache_file, "_source_stamp"):
        cache_file._source_stamp = (cache_file._source_stamp, stamp)


def compile_counts():
    """``(compiled, loaded)``: how many kernel signatures this process compiled, and how many it
    loaded from numba's cache (numba's dispatcher statistics)."""
    compiled = loaded = 0
    for dispatcher in kernels().values():
        stats = dispatcher.stats
        compiled += sum(stats.cache_misses.values())
        loaded += sum(stats.cache_hits.values())
    return compiled, loaded


# ----------------------------------------------------------------------------------------------
# Warming up: every kernel, compiled on tiny data through the estimators' own paths, so that
# the signatures compiled are those real fits and predictions use.


def _data(n_rows=200, n_features=4, seed=0):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, n_features))
    X[rng.random(X.shape) < 0.05] = np.nan
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) > 0).astype(np.int64)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(n_features)])
    frame["colour"] = pd.Categorical(rng.choice(["red", "green", "blue"], n_rows))
    return X, y, frame


def _warm_binning():
    """Binning: float64 and float32 columns, strided (a column of a 2-d array) and contiguous (a
    pandas column, or an array of one column), categories (more of them than bins too), and the
    hashed row sample."""
    import numpy as np

    from .binning import BinMapper

    X, _, frame = _data()
    for data in (X, X.astype(np.float32), frame, X[:, :1], X[:, :1].astype(np.float32)):
        mapper = BinMapper(subsample=100, random_state=0).fit(data)
        mapper.transform(data)
        mapper.encode(data)
    BinMapper(max_bins=2).fit(frame[["colour"]])  # more categories than bins: runs


def _warm_trees():
    """Single trees: binning (float64 and float32, contiguous and strided columns, categories),
    growth, pruning, and prediction (``predict``, ``apply``, ``decision_path``, and
    ``Tree.apply_binned`` on binned codes)."""
    import numpy as np

    from .estimators import DecisionTreeClassifier, DecisionTreeRegressor
    from .pruning import reduced_error_prune

    X, y, frame = _data()
    target = X[:, 0] * 2.0
    target[np.isnan(target)] = 0.0
    for data in (X, X.astype(np.float32), frame, X[:, :1], X[:, :1].astype(np.float32)):
        for model, labels in (
            (DecisionTreeClassifier(max_leaf_nodes=8, ccp_alpha=0.01, random_state=0), y),
            (DecisionTreeRegressor(random_state=0), target),
        ):
            model.fit(data, labels)
            model.predict(data)
            model.apply(data)
            model.decision_path(data)
    model = DecisionTreeClassifier(random_state=0).fit(X, y)
    model.tree_.apply_binned(model.bin_mapper_.transform(X))
    model.cost_complexity_pruning_path(X, y)
    reduced_error_prune(model, X, y)


def _warm_forests():
    """Forests on a LocalCluster of threads in this process: fit (every tree task, out-of-bag
    reductions, permutation and impurity importance) and prediction (SHAP values too), float64
    and float32."""
    import numpy as np
    from distributed import Client, LocalCluster

    from .ensemble import ExtraTreesRegressor, RandomForestClassifier
    from .quantile_forests import RandomForestQuantileRegressor

    X, y, frame = _data()
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        for data in (X, X.astype(np.float32), frame):
            model = RandomForestClassifier(
                n_estimators=2, oob_score=True, random_state=0, client=client
            )
            model.fit(data, y)
            model.predict_proba(data)
            model.oob_permutation_importance(data, y)
            model.oob_impurity_importance(data, y)
            model.shap_values(data)
            regressor = ExtraTreesRegressor(
                n_estimators=2,
                bootstrap=True,
                oob_score=True,
                aggregation="median",
                random_state=0,
                client=client,
            )
            regressor.fit(data, y.astype(float))
            regressor.predict(data)
            # Best-first trees ship their children: packing them takes the general kernel.
            RandomForestClassifier(
                n_estimators=2, max_leaf_nodes=8, random_state=0, client=client
            ).fit(data, y).predict_proba(data)
            # Quantile forests, standard errors and n_estimators="auto" (one wave of 2 trees).
            quantile = RandomForestQuantileRegressor(
                n_estimators="auto",
                max_n_estimators=2,
                oob_score=True,
                random_state=0,
                client=client,
            )
            quantile.fit(data, y.astype(float))
            quantile.predict(data, quantiles=[0.1, 0.9])
            quantile.predict(data, return_std=True)


# Groups of kernels compiled together, in the order one process warms them. Separate groups can
# be compiled in separate processes (``warmup(processes=2)``).
WARMUP_GROUPS = {"binning": _warm_binning, "trees": _warm_trees, "forests": _warm_forests}


@dataclass
class WarmupReport:
    """What a ``warmup`` did.

    Attributes
    ----------
    compiled : int
        Kernel signatures compiled (their cache was empty).
    loaded : int
        Kernel signatures loaded from numba's cache.
    wall_s, cpu_s : float
        Wall-clock and CPU seconds (this process and its warm-up processes, user + system).
    cache_dir : str
        Where numba's cache of the dasktrees kernels is.
    """

    compiled: int
    loaded: int
    wall_s: float
    cpu_s: float
    cache_dir: str

    def __str__(self):
        return (
            f"compiled {self.compiled} kernel signatures, loaded {self.loaded} from the cache, "
            f"in {self.wall_s:.1f} s ({self.cpu_s:.1f} s CPU); cache: {self.cache_dir}"
        )


def cache_dir():
    """The directory of numba's cache for the dasktrees kernels (of the grower's, which the
    others share unless the package's folders differ in writability)."""
    from .tree import grower

    return grower._grow_nodes.stats.cache_path


def _run_groups(names):
    """Warm the named groups in this process, each under a lock of its own taken without
    waiting when possible: processes warming at once take different groups first, then wait
    for (and load) the groups the others compiled."""
    lock_dir = cache_dir()
    waiting = []
    for name in names:
        path = os.path.join(lock_dir, f"dasktrees.warmup.{name}.lock")
        with _file_lock(path, timeout=0.0) as mine:
            if mine:
                WARMUP_GROUPS[name]()
            else:
                waiting.append(name)
    for name in waiting:
        with _file_lock(os.path.join(lock_dir, f"dasktrees.warmup.{name}.lock")):
            WARMUP_GROUPS[name]()


def warmup(processes=1, groups=None):
    """Compile every dasktrees kernel into numba's cache, or load it from there.

    Runs tiny fits and predictions of every estimator (trees and forests, classification and
    regression, float64 and float32 input, categorical columns, best-first growth, pruning,
    out-of-bag estimates, permutation importance), so that the kernels are compiled for the
    signatures real use needs; forests run on a ``LocalCluster`` of threads inside the process.
    Processes that warm up at once (or fit at once) compile each kernel once: the others wait
    for it and load it from the cache.

    Parameters
    ----------
    processes : int, default=1
        Warm up in this many new processes at once, each starting with a different group of
        kernels (``WARMUP_GROUPS``), then loading the others' from the cache; 1 warms up in this
        process. Every group needs the growth kernel, which one process compiles while the others
        wait: on two cores two processes were slower than one (``docs/benchmarks.md``).
    groups : list of str, optional
        Only these groups of ``WARMUP_GROUPS``; all by default.

    Returns
    -------
    WarmupReport
    """
    names = list(WARMUP_GROUPS) if groups is None else list(groups)
    unknown = sorted(set(names) - set(WARMUP_GROUPS))
    if unknown:
        raise ValueError(f"unknown warmup groups {unknown}; known: {sorted(WARMUP_GROUPS)}")
    wall = time.perf_counter()
    if processes <= 1:
        cpu = time.process_time()
        before = compile_counts()
        _run_groups(names)
        after = compile_counts()
        return WarmupReport(
            compiled=after[0] - before[0],
            loaded=after[1] - before[1],
            wall_s=time.perf_counter() - wall,
            cpu_s=time.process_time() - cpu,
            cache_dir=cache_dir(),
        )
    # Each process starts with a different group: rotations of the list.
    reports = []
    children = []
    for k in range(processes):
        order = names[k % len(names) :] + names[: k % len(names)]
        code = (
            "import json, dasktrees.compilation as c; "
            f"r = c.warmup(groups={order!r}); "
            "print(json.dumps([r.compiled, r.loaded, r.cpu_s]))"
        )
        children.append(
            subprocess.Popen(
                [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        )
    for child in children:
        out, err = child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"a warm-up process failed:\n{err.decode(errors='replace')}")
        reports.append(json.loads(out.decode().strip().splitlines()[-1]))
    return WarmupReport(
        compiled=sum(r[0] for r in reports),
        loaded=sum(r[1] for r in reports),
        wall_s=time.perf_counter() - wall,
        cpu_s=sum(r[2] for r in reports),
        cache_dir=cache_dir(),
    )


# ----------------------------------------------------------------------------------------------
# A cluster's workers


def _warm_worker(worker=None):
    """Warm up in a worker process (in a thread of its own: the worker keeps serving its
    scheduler meanwhile); the report is kept as the worker's ``dasktrees_warmup`` attribute."""
    report = warmup()
    if worker is not None:
        worker.dasktrees_warmup = report
    return report


try:
    from distributed import WorkerPlugin as _WorkerPlugin
except ImportError:  # distributed is a dependency; this keeps the module importable alone
    _WorkerPlugin = object


class WarmupPlugin(_WorkerPlugin):
    """A ``distributed`` worker plugin that warms up every worker of a cluster, present and
    future, before it runs dasktrees tasks (``warmup`` in each worker process).

    Workers of one machine, or sharing ``NUMBA_CACHE_DIR``, compile each kernel once between
    them; the others load it. ``client.register_plugin(WarmupPlugin())`` returns when every
    current worker is warm.

    Parameters
    ----------
    groups : list of str, optional
        Passed to ``warmup``; all groups by default.

    Examples
    --------
    >>> from distributed import Client  # doctest: +SKIP
    >>> client = Client("tcp://scheduler:8786")  # doctest: +SKIP
    >>> client.register_plugin(dasktrees.WarmupPlugin())  # doctest: +SKIP
    """

    name = "dasktrees-warmup"

    def __init__(self, groups=None):
        self.groups = None if groups is None else list(groups)

    async def setup(self, worker):
        import asyncio

        report = await asyncio.to_thread(warmup, 1, self.groups)
        worker.dasktrees_warmup = report


def dask_setup(worker):
    """``dask worker --preload dasktrees.compilation``: warm the worker up as it starts (in a
    thread: the worker connects to its scheduler meanwhile; tasks that need a kernel still
    being compiled wait for it)."""
    threading.Thread(
        target=_warm_worker, args=(worker,), name="dasktrees-warmup", daemon=True
    ).start()

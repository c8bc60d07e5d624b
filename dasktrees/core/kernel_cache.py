"""Compile each numba kernel once per machine: a lock per kernel, caches as fresh as the package.

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

Both reach into numba's private internals (a dispatcher's ``compile``, its cache file's
``_source_stamp``), as numba 0.68 has them; ``pyproject.toml`` bounds numba to the versions
tested. Where a numba differs (an attribute missing or of another shape, an error while
patching), ``lock_kernels`` warns once (a ``RuntimeWarning`` saying what it did not find) and
leaves those kernels to numba's own caching: compiled without the lock (processes that start
together may each compile a kernel), or checked against their own source file only.

Warming a machine or a cluster up (``warmup``, ``WarmupPlugin``) is ``estimators.warmup``'s: it
fits estimators.

Where the cache is: ``NUMBA_CACHE_DIR`` if set, else ``__pycache__`` beside the package's sources
if that is writable, else the user's cache directory (``~/.cache/numba``). Machines that share a
file system (a cluster's nodes) can share one compilation by pointing ``NUMBA_CACHE_DIR`` at the
same directory on it, provided they have the same CPU model: numba compiles for the CPU it runs
on (``docs/deployment.md``).
"""

import contextlib
import inspect
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import IO, Any

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows: no cross-process lock, see lock_kernels
    fcntl = None

# A numba dispatcher (``numba.core.registry.CPUDispatcher``): numba has no type annotations.
Dispatcher = Any

# How long a process waits for another one compiling the same kernel before compiling it
# itself: far longer than any kernel compiles, short of hanging forever on a stuck process.
LOCK_TIMEOUT_S = 600.0

# In-process side of the file locks: one re-entrant lock per lock file, taken before the file
# (flock would make a process wait for itself: a kernel's compilation compiles the kernels it
# calls, and two threads of a process may warm up and compile at once), and which of them this
# process holds on the file, with how many nested holders.
_thread_locks: dict[str, threading.RLock] = {}
_thread_locks_guard = threading.Lock()
_held: dict[str, int] = {}

# The kernels ``lock_kernels`` has patched (or tried to), by name, and what it found of numba's
# internals not as it expects, already reported: a process warns once.
_patched: set[str] = set()
_reported: set[tuple[str, str]] = set()


class NumbaInternalsChanged(Exception):
    """numba's private internals are not what a patch of this module relies on; the message
    names what was not found."""


@contextlib.contextmanager
def file_lock(path: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[bool]:
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


def _acquire(path: str, timeout: float) -> tuple[IO[bytes] | None, bool]:
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


def _lock_path(dispatcher: Dispatcher) -> str | None:
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


def _locked(dispatcher: Dispatcher) -> None:
    """Wrap ``dispatcher.compile`` (what numba calls to load a kernel from the cache or compile
    it, for a call from Python or from another kernel) in the kernel's file lock.

    Raises
    ------
    NumbaInternalsChanged
        What the wrapper relies on is not there, or not of the shape numba 0.68 gives it (the
        message says what); the dispatcher is then left as it was.
    """
    normalize_signature, global_compiler_lock = _compiler_internals()
    compile_unlocked: Any = getattr(dispatcher, "compile", None)
    if not _takes_one_argument(compile_unlocked):
        raise NumbaInternalsChanged("no Dispatcher.compile(sig) of one argument")
    if not isinstance(getattr(dispatcher, "overloads", None), Mapping):
        raise NumbaInternalsChanged("no Dispatcher.overloads mapping")
    if not hasattr(getattr(dispatcher, "stats", None), "cache_path"):
        raise NumbaInternalsChanged("no Dispatcher.stats.cache_path")

    def compile_locked(sig: Any, path: str) -> Any:
        # numba's own in-process lock first, as its compile takes it: a thread waiting for the
        # file lock must not hold up a thread of this process that compiles under numba's lock
        # and then wants the same file lock.
        with global_compiler_lock:
            with file_lock(path):
                # numba looks in the cache first: what another process compiled while this
                # one waited is loaded, not compiled again.
                return compile_unlocked(sig)

    def compile(sig: Any) -> Any:
        args, _ = normalize_signature(sig)
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

    compile.__wrapped__ = compile_unlocked  # type: ignore[attr-defined]
    dispatcher.compile = compile


def _compiler_internals() -> tuple[Callable[[Any], Any], Any]:
    """numba's ``sigutils.normalize_signature`` and ``compiler_lock.global_compiler_lock`` (a
    context manager with ``is_locked()``), which ``_locked``'s wrapper calls; raises
    ``NumbaInternalsChanged`` naming what is missing."""
    try:
        from numba.core import compiler_lock, sigutils
    except ImportError as error:
        raise NumbaInternalsChanged(f"no module {error.name or 'numba.core'}") from None
    normalize_signature = getattr(sigutils, "normalize_signature", None)
    if not callable(normalize_signature):
        raise NumbaInternalsChanged("no numba.core.sigutils.normalize_signature")
    lock = getattr(compiler_lock, "global_compiler_lock", None)
    for name in ("__enter__", "__exit__", "is_locked"):
        if not callable(getattr(lock, name, None)):
            raise NumbaInternalsChanged(f"no numba.core.compiler_lock.global_compiler_lock.{name}")
    return normalize_signature, lock


def _takes_one_argument(method: object) -> bool:
    """Whether ``method`` is a callable of one positional argument."""
    if not callable(method):
        return False
    try:
        parameters = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError):  # no signature to read: not numba's Python method
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return len(parameters) == 1 and parameters[0].kind in positional


def _in_worker_task() -> bool:
    """Whether this thread runs a task of a ``distributed`` worker."""
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return False
    return True


def _off_task_thread(func: Callable[..., Any], *args: Any) -> Any:
    """``func(*args)`` in a new thread, waited for: its result, or its exception raised here.

    A ``distributed`` worker samples the stacks of its task threads every 10 ms for its
    profiler and walks each frame. numba's compiler runs hundreds of frames deep, so a kernel
    compiled in a task thread compiled about a third slower (``docs/benchmarks.md``), and the
    worker's profile grew too deep for distributed to measure its size ("Sizeof calculation for
    object of type 'dict' failed"). The worker does not sample other threads.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
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


def kernels() -> dict[str, Dispatcher]:
    """Every numba kernel of the dasktrees modules imported so far, as ``{name: dispatcher}``
    (the kernels numba inlines into others, ``inline="always"``, are never compiled alone and
    are left out)."""
    from numba.core.registry import CPUDispatcher

    found: dict[str, Dispatcher] = {}
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


def lock_kernels() -> None:
    """Make every dasktrees kernel compile under its file lock, with a cache that goes stale with
    any source file of the package (see the module docstring); kernels already patched are left
    as they are.

    Never raises: where numba's internals are not what a patch relies on, the kernel keeps
    numba's own behaviour for it, and one ``RuntimeWarning`` a process says what was not found
    (``NumbaInternalsChanged``).
    """
    found: dict[str, str] = {}
    try:
        stamp = package_stamp(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        dispatchers = kernels()
    except Exception as error:  # numba's registry moved: nothing is patched
        found["lock"] = found["stamp"] = f"kernels not listed ({type(error).__name__}: {error})"
        dispatchers = {}
    for name, dispatcher in dispatchers.items():
        if name in _patched:
            continue
        _patched.add(name)
        for patch, apply, args in (
            ("stamp", stamp_cache, (dispatcher, stamp)),
            ("lock", _locked, (dispatcher,)),
        ):
            try:
                apply(*args)
            except NumbaInternalsChanged as error:
                found.setdefault(patch, str(error))
            except Exception as error:  # an error while patching: numba differs all the same
                found.setdefault(patch, f"{type(error).__name__} while patching: {error}")
    _warn_once(found)


# What a kernel does without each patch (``lock_kernels``).
_FALLBACKS = {
    "lock": "no per-kernel lock (processes that start together may each compile a kernel)",
    "stamp": "no package stamp (a kernel's cache is checked against its own source file only)",
}


def _warn_once(found: dict[str, str]) -> None:
    """One ``RuntimeWarning`` for what ``found`` (what was not found, by patch) holds that this
    process has not reported yet."""
    new = {patch: what for patch, what in found.items() if (patch, what) not in _reported}
    if not new:
        return
    _reported.update(new.items())
    import numba

    warnings.warn(
        f"dasktrees: numba {numba.__version__}'s internals are not what dasktrees' kernel cache "
        f"expects ({'; '.join(new.values())}). Kernels fall back to numba's own caching: "
        f"{'; '.join(_FALLBACKS[patch] for patch in sorted(new))}. pyproject.toml lists the "
        "numba versions tested.",
        RuntimeWarning,
        stacklevel=3,
    )


def package_stamp(root: str) -> tuple[tuple[str, float, int], ...]:
    """The modification time and size of every ``.py`` file under the folder ``root``, in a
    fixed order: what numba checks of a kernel's own source file before loading its cache."""
    stamp: list[tuple[str, float, int]] = []
    for folder, subfolders, files in os.walk(root):
        subfolders.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                status = os.stat(path)
                stamp.append((os.path.relpath(path, root), status.st_mtime, status.st_size))
    return tuple(stamp)


def stamp_cache(dispatcher: Dispatcher, stamp: object) -> None:
    """Make ``dispatcher``'s cached machine code valid only while ``stamp`` is unchanged, besides
    numba's own check of the kernel's source file.

    numba writes the source stamp it holds into the cache's index and drops an index whose
    stamp differs from it. The stamp lives in a private attribute of numba's cache
    (``IndexDataCacheFile._source_stamp``, as of numba 0.68). A kernel without a cache
    (``cache=False``) has nothing to stamp.

    Raises
    ------
    NumbaInternalsChanged
        The dispatcher's cache keeps no such stamp (another numba); the kernel then keeps
        numba's own check.
    """
    cache = getattr(dispatcher, "_cache", None)
    if cache is not None and getattr(cache, "cache_path", "") is None:  # numba's NullCache
        return
    cache_file: Any = getattr(cache, "_cache_file", None)
    # numba reads the stamp in _load_index and writes it in _save_index: both must be there.
    if "_source_stamp" not in getattr(cache_file, "__dict__", {}) or not all(
        callable(getattr(cache_file, name, None)) for name in ("_load_index", "_save_index")
    ):
        raise NumbaInternalsChanged("no Dispatcher._cache._cache_file._source_stamp")
    cache_file._source_stamp = (cache_file._source_stamp, stamp)


def compile_counts() -> tuple[int, int]:
    """``(compiled, loaded)``: how many kernel signatures this process compiled, and how many it
    loaded from numba's cache (numba's dispatcher statistics)."""
    compiled = loaded = 0
    for dispatcher in kernels().values():
        stats = dispatcher.stats
        compiled += sum(stats.cache_misses.values())
        loaded += sum(stats.cache_hits.values())
    return compiled, loaded

"""Compile each numba kernel once per machine: a lock per kernel, caches as fresh as their sources.

Every kernel is declared with ``kernel`` (``numba.njit`` with ``cache=True``): the first process
that calls it compiles it, in seconds, and writes the machine code to numba's cache; later
processes load it in milliseconds. ``kernel`` patches each kernel as it is defined, for two
things:

* **A lock per kernel.** A kernel takes a file lock in its cache directory while it compiles.
  When several processes need the same kernel at once (the worker processes of a
  ``LocalCluster`` starting together), the first compiles it and the others wait, then load it
  from the cache. The locks are ``fcntl.flock`` locks, which the system releases when a process
  dies; where there is no ``fcntl`` (Windows) kernels compile without them, as numba alone would.
* **A cache as fresh as the sources it depends on.** numba keeps a kernel's cached machine code
  while the kernel's own source file keeps its modification time and size. But that code also
  holds the kernels it calls and the constants it reads from other modules: after an edit of
  ``histogram.py`` the growth loop of ``grower.py`` loaded its old copy of the histogram fill.
  ``kernel`` therefore stamps each kernel's cache with the contents of its module and of every
  module of the package that module imports, directly or not (``dependency_stamp``): an edit
  recompiles the kernels that can depend on it, and only those. Contents, not modification
  times: a checkout or an install that writes the same files anew keeps the caches.

Both reach into numba's private internals (a dispatcher's ``compile``, its cache file's
``_source_stamp``), as numba 0.68 has them; ``pyproject.toml`` bounds numba to the versions
tested. Where a numba differs (an attribute missing or of another shape, an error while
patching), ``kernel`` warns once (a ``RuntimeWarning`` saying what it did not find) and leaves
those kernels to numba's own caching: compiled without the lock (processes that start together
may each compile a kernel), or checked against their own source file only.

Warming a machine or a cluster up (``warmup``, ``WarmupPlugin``) is ``estimators.warmup``'s: it
fits estimators.

Where the cache is: ``NUMBA_CACHE_DIR`` if set, else ``__pycache__`` beside the package's sources
if that is writable, else the user's cache directory (``~/.cache/numba``). Machines that share a
file system (a cluster's nodes) can share one compilation by pointing ``NUMBA_CACHE_DIR`` at the
same directory on it, provided they have the same CPU model: numba compiles for the CPU it runs
on (``docs/deployment.md``).
"""

import ast
import contextlib
import hashlib
import inspect
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import IO, Any

from .kernel_bundle import seed

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows: no cross-process lock, see patch_kernel
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

# The kernels ``patch_kernel`` has patched (or tried to), by name, and what it found of numba's
# internals not as it expects, already reported: a process warns once.
_patched: set[str] = set()
_reported: set[str] = set()


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
                # The kernel's code compiled when dasktrees was built, if its cache has none yet
                # (``kernel_bundle``); then numba looks in the cache first: that, or what
                # another process compiled while this one waited, is loaded, not compiled.
                seed(dispatcher)
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
    (the kernels numba inlines into others, ``inline="always"``, are left out: inlined, they
    are compiled as part of their callers)."""
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


def kernel(**options: Any) -> Callable[[Callable[..., Any]], Dispatcher]:
    """``numba.njit(cache=True, **options)`` for a dasktrees kernel: the dispatcher compiles
    under its file lock, its cache stamped with its sources (``patch_kernel``; the module
    docstring). A kernel inlined into others (``inline="always"``) is patched too: inlining
    reads its Python source, but some (``rng.hash_key``, ``criteria.is_regression``) are also
    called from Python, which compiles them alone.

    Examples
    --------
    >>> @kernel(nogil=True)
    ... def add(a, b):
    ...     return a + b
    """
    from numba import njit

    def decorate(func: Callable[..., Any]) -> Dispatcher:
        dispatcher = njit(cache=True, **options)(func)
        patch_kernel(f"{func.__module__}.{func.__qualname__}", dispatcher)
        return dispatcher

    return decorate


def patch_kernel(name: str, dispatcher: Dispatcher) -> None:
    """Make the kernel ``name`` compile under its file lock, its cache stamped with the sources
    it can depend on (``dependency_stamp``); a kernel already patched is left as it is.

    Never raises: where numba's internals are not what a patch relies on, the kernel keeps
    numba's own behaviour for it, and one ``RuntimeWarning`` a process says what was not found
    (``NumbaInternalsChanged``).
    """
    if name in _patched:
        return
    _patched.add(name)
    found: dict[str, str] = {}
    for patch, apply in (("stamp", _stamp_with_sources), ("lock", _locked)):
        try:
            apply(dispatcher)
        except NumbaInternalsChanged as error:
            found.setdefault(patch, str(error))
        except Exception as error:  # an error while patching: numba differs all the same
            found.setdefault(patch, f"{type(error).__name__} while patching: {error}")
    _warn_once(found)


def _stamp_with_sources(dispatcher: Dispatcher) -> None:
    """``stamp_cache`` with the stamp of the kernel's module (``dependency_stamp``)."""
    func = dispatcher.py_func
    path = inspect.getsourcefile(func)
    if path is None:
        raise NumbaInternalsChanged("no source file of the kernel")
    stamp_cache(dispatcher, dependency_stamp(path, _package_root(func.__module__, path)))


def _package_root(module: str, path: str) -> str:
    """The folder of the top-level package of ``module``, whose file is ``path``."""
    root = os.path.dirname(os.path.abspath(path))  # the folder of the module's package
    for _ in range(module.count(".") - (os.path.basename(path) != "__init__.py")):
        root = os.path.dirname(root)
    return root


# What a kernel does without each patch (``patch_kernel``).
_FALLBACKS = {
    "lock": "no per-kernel lock (processes that start together may each compile a kernel)",
    "stamp": "no dependency stamp (a kernel's cache is checked against its own source file only)",
}


def _warn_once(found: dict[str, str]) -> None:
    """One ``RuntimeWarning`` for the patches in ``found`` (what was not found, by patch) that
    this process has not reported yet: a process says once that a patch falls back, with the
    first kernel's reason (every kernel meets the same numba)."""
    new = {patch: what for patch, what in found.items() if patch not in _reported}
    if not new:
        return
    _reported.update(new)
    import numba

    warnings.warn(
        f"dasktrees: numba {numba.__version__}'s internals are not what dasktrees' kernel cache "
        f"expects ({'; '.join(new.values())}). Kernels fall back to numba's own caching: "
        f"{'; '.join(_FALLBACKS[patch] for patch in sorted(new))}. pyproject.toml lists the "
        "numba versions tested.",
        RuntimeWarning,
        stacklevel=3,
    )


# Stamps and imports already found in this process, by source file (and package folder): the
# files do not change under a running process that has imported them.
_stamps: dict[tuple[str, str], str] = {}
_imports: dict[tuple[str, str], set[str]] = {}
_THIS_FILE = os.path.abspath(__file__)


def dependency_stamp(path: str, root: str) -> str:
    """A digest of the contents of the source file ``path`` and of every source file of the
    package under ``root`` that it imports, directly or not (``imported_sources``): what a
    kernel defined in ``path`` can have compiled into its machine code (the kernels it calls,
    the constants it reads).

    The files' paths relative to ``root`` and their contents are hashed, not their modification
    times: a copy of the same files elsewhere, or written anew, has the same stamp.
    """
    key = (os.path.abspath(path), os.path.abspath(root))
    if key not in _stamps:
        digest = hashlib.sha256()
        for source in sorted(_sources_closure(*key)):
            with open(source, "rb") as file:
                content = file.read()
            digest.update(os.path.relpath(source, key[1]).encode())
            digest.update(hashlib.sha256(content).digest())
        _stamps[key] = digest.hexdigest()
    return _stamps[key]


def _sources_closure(path: str, root: str) -> set[str]:
    """``path`` and the package's source files it imports, directly or not, but this module:
    the decorator of the kernels adds no code to them."""
    found = {path, _THIS_FILE}
    pending = [path]
    while pending:
        module = pending.pop()
        if (module, root) not in _imports:
            _imports[module, root] = imported_sources(module, root)
        for source in _imports[module, root]:
            if source not in found:
                found.add(source)
                pending.append(source)
    return found - {_THIS_FILE} | {path}


def imported_sources(path: str, root: str) -> set[str]:
    """The source files under the package folder ``root`` that the module ``path`` imports in
    its top-level statements (those at the start of a line: what a kernel's globals can come
    from; imports inside functions are left out): ``from .x import y``, ``from .. import x``,
    ``import pkg.x`` and ``from pkg.x import y``, ``pkg`` being ``root``'s name.

    Only the import statements are parsed, not the whole module: a process stamping its kernels
    reads a few dozen files of up to two thousand lines."""
    package = os.path.basename(root)
    here = os.path.dirname(path)
    found: set[str] = set()
    for node in _top_level_imports(path):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here
                for _ in range(node.level - 1):
                    base = os.path.dirname(base)
                parts = node.module.split(".") if node.module else []
            elif node.module and node.module.split(".")[0] == package:
                base, parts = root, node.module.split(".")[1:]
            else:
                continue
            target = os.path.join(base, *parts)
            # the module imported from, and the names that are modules of a package
            candidates = [target] + [os.path.join(target, alias.name) for alias in node.names]
        else:
            candidates = [
                os.path.join(root, *alias.name.split(".")[1:])
                for alias in node.names
                if alias.name.split(".")[0] == package
            ]
        found.update(filter(None, map(_module_file, candidates)))
    return {source for source in found if source.startswith(root + os.sep)}


def _top_level_imports(path: str) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that start a line of the file ``path``, parsed (a statement in
    parentheses may run over several lines; a docstring's line that reads as one counts too,
    which can only add a file to a stamp)."""
    with open(path, encoding="utf-8") as file:
        lines = file.read().splitlines()
    statements: list[ast.stmt] = []
    k = 0
    while k < len(lines):
        line = lines[k]
        k += 1
        if not line.startswith(("from ", "import ")):
            continue
        text = line
        while text.count("(") > text.count(")") and k < len(lines):
            text += "\n" + lines[k]
            k += 1
        try:
            statements.extend(ast.parse(text).body)
        except SyntaxError:  # a line of prose in a docstring
            continue
    return [node for node in statements if isinstance(node, (ast.Import, ast.ImportFrom))]


def _module_file(base: str) -> str | None:
    """The source file of the module or package at ``base`` (a path without ``.py``), if any."""
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


def stamp_cache(dispatcher: Dispatcher, stamp: object) -> None:
    """Make ``dispatcher``'s cached machine code valid only while ``stamp`` is unchanged, in
    place of numba's check of the kernel's own source file (its modification time and size).

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
    cache_file._source_stamp = stamp


def compile_counts() -> tuple[int, int]:
    """``(compiled, loaded)``: how many kernel signatures this process compiled, and how many it
    loaded from numba's cache (numba's dispatcher statistics)."""
    compiled = loaded = 0
    for dispatcher in kernels().values():
        stats = dispatcher.stats
        compiled += sum(stats.cache_misses.values())
        loaded += sum(stats.cache_hits.values())
    return compiled, loaded

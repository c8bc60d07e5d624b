"""Kernels compiled when dasktrees is built, loaded at their first call: a first fit that compiles
nothing of what it uses by default.

numba compiles a kernel the first time a process calls it, and caches the machine code on the
machine. Built from its sources, dasktrees compiles the kernels of its default use once more,
into the package (``BUNDLE``), so that a fresh install's first fit loads them as a second run
would:

* ``default_kernels.json`` (beside the package's modules) lists the kernel signatures that the
  default use compiles (``command.default_use``: forests and trees fitted and predicted on
  numeric and categorical columns, out-of-bag scores, permutation importance, on a cluster of
  worker processes and without one). ``option_kernels.json`` lists those that the options with
  the longest first compile add to it (quantile forests, SHAP, out-of-bag pruning: seconds
  each, against well under one for the others; ``docs/benchmarks.md``).
  ``python -m dasktrees.command.default_use`` writes both; ``tests/test_kernel_bundle.py``
  checks that they are what those uses compile today.
* ``bake`` compiles the signatures of both into a folder: when a wheel is built (``setup.py``), in
  processes that need only numpy and numba, the build's own. Each kernel's cache files go to
  the folder of its module's name (``_kernels/learner/``, ...).
* ``seed``, called by a kernel's compilation wrapper (``kernel_cache``) before numba looks in its
  cache, copies the kernel's bundled files into numba's cache folder for it when that folder has
  none yet. numba then loads them if they are valid here: the same sources (the bundle's stamps
  are the contents of the files, ``kernel_cache.dependency_stamp``), numba and Python versions,
  and CPU (the build's own; numba's key holds the CPU's name and features). Else it compiles, as
  without a bundle.

The bundle is looked for in the package, then in the installed distribution of dasktrees (a
checkout run beside its own install, as the tests in CI, loads the install's bundle: its stamps
say whether the files are the same), or where ``DASKTREES_BUNDLED_KERNELS`` names a folder;
``DASKTREES_BUNDLED_KERNELS=0`` turns it off.
"""

import functools
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

# The signatures of the default use and of the bundled options, and the folder of their
# compiled code, in the package.
SIGNATURES = "default_kernels.json"
OPTION_SIGNATURES = "option_kernels.json"
BUNDLE = "_kernels"
PACKAGE = "dasktrees"
OFF = "DASKTREES_BUNDLED_KERNELS"
# Left in the bundle's folder by a build whose bake failed (``setup.py`` writes it, with the
# bake's error): the package then has no compiled kernels, and its first compile says why.
BAKE_FAILED = "BAKE_FAILED.txt"
_MODULE = "dasktrees.core.kernel_bundle"  # as ``python -m`` runs it (``__name__`` is then __main__)

Entry = tuple[str, tuple[Any, ...]]  # (kernel's qualified name, numba types of its arguments)


# ---- numba types as JSON ------------------------------------------------------------------------


def encode_type(t: Any) -> Any:
    """A JSON value for the numba type ``t`` (of those a kernel's arguments take): arrays,
    records, scalars, tuples and named tuples, literals, omitted arguments and None.

    Raises
    ------
    TypeError
        A type this codec does not know: extend it.
    """
    from numba.core import types
    from numba.np import numpy_support

    if isinstance(t, types.Array):
        return {
            "array": encode_type(t.dtype),
            "ndim": t.ndim,
            "layout": t.layout,
            "readonly": not t.mutable,
            "aligned": t.aligned,
        }
    if isinstance(t, types.Record):
        dtype = numpy_support.as_dtype(t)
        return {"record": [list(item) for item in _descr(dtype)], "aligned": t.aligned}
    if isinstance(t, types.Literal):
        return {"literal": t.literal_value}
    if isinstance(t, types.Omitted):
        return {"omitted": t.value}
    if isinstance(t, types.NamedUniTuple):
        return {
            "named_uni": _class_path(t.instance_class),
            "of": encode_type(t.dtype),
            "n": t.count,
        }
    if isinstance(t, types.NamedTuple):
        return {"named": _class_path(t.instance_class), "of": [encode_type(m) for m in t.types]}
    if isinstance(t, types.UniTuple):
        return {"uni": encode_type(t.dtype), "n": t.count}
    if isinstance(t, types.Tuple):
        return {"tuple": [encode_type(m) for m in t.types]}
    if isinstance(t, (types.Integer, types.Float, types.Boolean, types.NoneType)):
        return str(t)
    raise TypeError(f"no JSON form for the numba type {t!r} ({type(t).__name__})")


def decode_type(value: Any) -> Any:
    """The numba type ``encode_type`` made ``value`` of."""
    import numpy as np
    from numba.core import types
    from numba.np import numpy_support

    if isinstance(value, str):
        return types.boolean if value == "bool" else getattr(types, value)
    if "array" in value:
        return types.Array(
            decode_type(value["array"]),
            value["ndim"],
            value["layout"],
            readonly=value["readonly"],
            aligned=value["aligned"],
        )
    if "record" in value:
        dtype = np.dtype([tuple(item) for item in value["record"]], align=value["aligned"])
        return numpy_support.from_dtype(dtype)
    if "literal" in value:
        return types.literal(value["literal"])
    if "omitted" in value:
        return types.Omitted(value["omitted"])
    if "named_uni" in value:
        of = decode_type(value["of"])
        return types.NamedUniTuple(of, value["n"], _class(value["named_uni"]))
    if "named" in value:
        return types.NamedTuple([decode_type(m) for m in value["of"]], _class(value["named"]))
    if "uni" in value:
        return types.UniTuple(decode_type(value["uni"]), value["n"])
    return types.Tuple([decode_type(m) for m in value["tuple"]])


def _descr(dtype: Any) -> list[tuple[str, str]]:
    """A structured dtype's fields as ``(name, type string)`` pairs (offsets follow from them
    and the alignment)."""
    return [(name, dtype.fields[name][0].str) for name in dtype.names]


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _class(path: str) -> type:
    module, _, name = path.partition(":")
    value: Any = importlib.import_module(module)
    for part in name.split("."):
        value = getattr(value, part)
    return value


def dumps(entries: Iterable[Entry]) -> str:
    """The signatures file's text: a JSON list, a signature a line, sorted (a diff shows the
    signatures that came and went), each once."""
    rows = sorted(
        {
            json.dumps({"kernel": name, "args": [encode_type(t) for t in args]})
            for name, args in entries
        }
    )
    return "[\n" + ",\n".join(rows) + "\n]\n"


def loads(text: str) -> list[Entry]:
    """The entries of a signatures file's text."""
    return [(row["kernel"], tuple(decode_type(t) for t in row["args"])) for row in json.loads(text)]


def signatures_path(file_name: str = SIGNATURES) -> str:
    """The package's signatures file ``file_name``: the default use's (``SIGNATURES``) or the
    bundled options' (``OPTION_SIGNATURES``)."""
    return os.path.join(_package_dir(), file_name)


def default_signatures() -> list[Entry]:
    """The signatures of the default use, as the package lists them (``SIGNATURES``)."""
    return _listed(SIGNATURES)


def option_signatures() -> list[Entry]:
    """The signatures of the bundled options, as the package lists them
    (``OPTION_SIGNATURES``)."""
    return _listed(OPTION_SIGNATURES)


def bundled_signatures() -> list[Entry]:
    """Every signature a bundle carries: the default use's, then the bundled options'."""
    return default_signatures() + option_signatures()


def _listed(file_name: str) -> list[Entry]:
    with open(signatures_path(file_name), encoding="utf-8") as file:
        return loads(file.read())


# ---- compiling into a bundle ------------------------------------------------------------------


def dispatcher_of(name: str) -> Any:
    """The kernel ``name`` (``dasktrees.learner.grower._grow_nodes``)."""
    module, _, qualname = name.rpartition(".")
    return getattr(importlib.import_module(module), qualname)


def compile_entries(entries: Sequence[Entry]) -> None:
    """Compile (or load from numba's cache) each signature of ``entries``."""
    for name, args in entries:
        dispatcher_of(name).compile(args)


def bake(
    into: str, processes: int = 2, entries: Sequence[Entry] | None = None, cache: str | None = None
) -> int:
    """Compile ``entries`` (by default ``bundled_signatures()``) in ``processes`` new
    processes at once, each taking them in another order (the kernels' locks share the work),
    into numba's cache folder ``cache``, then copy each kernel's cache files into
    ``into``/<its module's folder in the package>. Returns the number of files written.

    ``cache`` defaults to ``NUMBA_CACHE_DIR`` if it is set (a second build of the same sources
    in the same place, as CI's two installs, then loads what the first compiled), else a new
    empty folder. The processes import only the kernels' modules: numpy and numba are all they
    need.
    """
    entries = bundled_signatures() if entries is None else list(entries)
    cache = cache or os.environ.get("NUMBA_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="dasktrees-bake-") as scratch:
        cache = cache or scratch
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, **{OFF: "0"})
        signatures = os.path.join(scratch, "signatures.json")
        with open(signatures, "w", encoding="utf-8") as file:
            file.write(dumps(entries))
        _run_all(
            [[sys.executable, "-m", _MODULE, "compile", signatures, str(k), str(processes)]
             for k in range(processes)],
            env,
        )  # fmt: skip
        # (in a process of the same cache folder: numba names a kernel's there)
        copy = [sys.executable, "-m", _MODULE, "copy", signatures, os.path.abspath(into)]
        return int(_run_all([copy], env)[0].split()[-1])


def _run_all(commands: Sequence[Sequence[str]], env: dict[str, str]) -> list[str]:
    """Run ``commands`` at once; their outputs, or a ``RuntimeError`` with a failure's."""
    children = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for command in commands
    ]
    outputs = []
    for child in children:
        out, err = child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"a process compiling kernels failed:\n{err.decode()}")
        outputs.append(out.decode())
    return outputs


def copy_bundle(entries: Sequence[Entry], into: str) -> int:
    """Copy the cache files of the kernels of ``entries`` from numba's cache (this process's)
    into the bundle folder ``into``; returns the number of files."""
    written = 0
    for name in sorted({name for name, _ in entries}):
        dispatcher = dispatcher_of(name)
        source = dispatcher._cache._cache_file._cache_path
        target = os.path.join(into, *_module_folder(dispatcher))
        os.makedirs(target, exist_ok=True)
        for file_name in _cache_files(dispatcher, source):
            shutil.copyfile(os.path.join(source, file_name), os.path.join(target, file_name))
            written += 1
    return written


# ---- loading from a bundle --------------------------------------------------------------------


@functools.cache
def bundle_folder() -> str | None:
    """The folder of the bundled kernels, looked for once a process:
    ``DASKTREES_BUNDLED_KERNELS`` if it names a folder, else the package's own, else the
    installed distribution's; None when there is none or ``DASKTREES_BUNDLED_KERNELS=0``."""
    setting = os.environ.get(OFF, "")
    if setting == "0":
        return None
    return setting if os.path.isdir(setting) else _find_bundle()


def _find_bundle() -> str | None:
    candidates = [os.path.join(_package_dir(), BUNDLE)]
    try:
        from importlib.metadata import distributions

        # Every dasktrees distribution on the path: a checkout that pip built in place holds
        # its own metadata (dasktrees.egg-info) and is found first when it is the working
        # folder, as in CI, but its bundle is the installed one's.
        candidates += [
            os.path.abspath(str(found.locate_file(os.path.join(PACKAGE, BUNDLE))))
            for found in distributions(name=PACKAGE)
        ]
    except ImportError:
        pass
    return next((path for path in candidates if os.path.isdir(path)), None)


def seed(dispatcher: Any) -> bool:
    """Copy the bundled cache files of ``dispatcher`` into numba's cache folder for it, if the
    bundle has them and the folder has no index of the kernel yet (a cache built here is kept).
    Returns whether files were copied. Never raises on files: a kernel without them compiles.
    """
    bundle = bundle_folder()
    if bundle is None:
        return False
    _warn_if_not_baked(bundle)
    try:
        cache_file = dispatcher._cache._cache_file
        source = os.path.join(bundle, *_module_folder(dispatcher))
        if os.path.exists(cache_file._index_path) or not os.path.isfile(
            os.path.join(source, cache_file._index_name)
        ):
            return False
        os.makedirs(cache_file._cache_path, exist_ok=True)
        for file_name in _cache_files(dispatcher, source):
            # The data first, the index last: a process reading meanwhile sees no index, or one
            # whose data are there.
            if not file_name.endswith(".nbi"):
                _copy_atomically(source, cache_file._cache_path, file_name)
        _copy_atomically(source, cache_file._cache_path, cache_file._index_name)
    except (AttributeError, OSError):
        return False
    return True


@functools.cache
def _warn_if_not_baked(bundle: str) -> None:
    """Warn, once a process, that the build of this dasktrees could not compile its kernels
    (``BAKE_FAILED``): a first fit then compiles for about a minute, and ``pip install -q``
    hid the build's message."""
    marker = os.path.join(bundle, BAKE_FAILED)
    try:
        with open(marker, encoding="utf-8") as file:
            lines = file.read().strip().splitlines()
    except OSError:
        return
    why = lines[-1] if lines else "no error recorded"
    warnings.warn(
        f"dasktrees was installed without its compiled kernels: the build could not compile "
        f"them ({why}). Each kernel compiles at its first call instead (about a minute for a "
        f"first fit, once a machine); the build's error is in {marker}",
        RuntimeWarning,
        stacklevel=2,
    )


def _copy_atomically(source: str, target: str, file_name: str) -> None:
    temporary = os.path.join(target, f".{file_name}.{os.getpid()}.tmp")
    shutil.copyfile(os.path.join(source, file_name), temporary)
    os.replace(temporary, os.path.join(target, file_name))


# ---- where the files are ----------------------------------------------------------------------


def _package_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _module_folder(dispatcher: Any) -> list[str]:
    """The folder of the kernel's module in the package, as path parts (``["learner"]``)."""
    return dispatcher.py_func.__module__.split(".")[1:-1]


def _cache_files(dispatcher: Any, folder: str) -> list[str]:
    """The kernel's index and data files in ``folder``, the index last."""
    index = dispatcher._cache._cache_file._index_name
    stem = index[: -len(".nbi")]
    data = sorted(
        name for name in os.listdir(folder) if name.startswith(stem + ".") and name.endswith(".nbc")
    )
    return data + [index]


def main(argv: Sequence[str]) -> None:
    """``python -m dasktrees.core.kernel_bundle``: ``bake FOLDER [PROCESSES]`` (what a wheel's
    build runs); ``bake``'s own steps ``compile SIGNATURES K N`` (the entries from the K-th of N
    on) and ``copy SIGNATURES FOLDER``."""
    if argv[0] == "bake":
        written = bake(argv[1], int(argv[2]) if len(argv) > 2 else 2)
        print(f"dasktrees: {written} files of compiled kernels in {argv[1]}")
    elif argv[0] in ("compile", "copy"):
        with open(argv[1], encoding="utf-8") as file:
            entries = loads(file.read())
        if argv[0] == "copy":
            print(copy_bundle(entries, argv[2]))
            return
        k, n = int(argv[2]), int(argv[3])
        start = k * len(entries) // n
        compile_entries(entries[start:] + entries[:start])
    else:
        raise SystemExit(f"unknown command {argv[0]!r}: bake, compile or copy")


if __name__ == "__main__":
    main(sys.argv[1:])

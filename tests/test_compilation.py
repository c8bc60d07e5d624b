"""Kernels compile once per machine: warm-up into numba's cache, per-kernel locks between
processes, the ``dasktrees warmup`` command and the worker plugin.

Every test that compiles works in a fresh, empty ``NUMBA_CACHE_DIR`` and counts compilations by
numba's dispatcher statistics (a kernel signature missed in the cache was compiled), never by
time. The binning group is the fast one to warm (a few kernels); the whole warm-up is slow.
"""

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

import dasktrees
from dasktrees.command.cli import main
from dasktrees.core import kernel_bundle, kernel_cache
from dasktrees.estimators import warmup

from .conftest import local_client

ROOT = Path(__file__).resolve().parent.parent


def run_python(code, cache_dir, wait=True, bundle=False):
    """Run ``code`` in a new Python process whose numba cache is ``cache_dir`` (None: this
    process's); returns the JSON its last line prints (or the ``Popen`` when not ``wait``).
    The kernels bundled with an installed dasktrees (``core.kernel_bundle``) are off unless
    ``bundle``: what compiles is then what a process compiles without them."""
    env = dict(os.environ)
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(cache_dir)
    if not bundle:
        env[kernel_bundle.OFF] = "0"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if not wait:
        return process
    return result_of(process)


def result_of(process):
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def compiled_here():
    """What this process compiled: ``{"kernel signature": times}`` (numba's cache misses)."""
    return {
        f"{name} {sig}": n
        for name, d in kernel_cache.kernels().items()
        for sig, n in d.stats.cache_misses.items()
    }


# The same, printed by a child process.
COMPILED = """
import json
from tests.test_compilation import compiled_here
print(json.dumps(compiled_here()))
"""


def signatures_here():
    """Every kernel signature this process has code for, compiled or loaded from the cache:
    ``["kernel signature", ...]`` (a kernel called by another that was loaded whole has none)."""
    return sorted(
        f"{name} {sig}" for name, d in kernel_cache.kernels().items() for sig in d.overloads
    )


def test_every_kernel_compiles_under_its_lock():
    for name, dispatcher in kernel_cache.kernels().items():
        assert hasattr(dispatcher.compile, "__wrapped__"), name


CALLEE = """
from numba import njit

@njit(cache=True)
def value():
    return {value}
"""

CALLER = """
from numba import njit
from .callee import value

@njit(cache=True)
def twice():
    return 2 * value()
"""

STAMPED_CALL = """
import json, os, sys
sys.path.insert(0, {folder!r})
from dasktrees.core.kernel_cache import dependency_stamp, stamp_cache
from pkg import caller
if {stamped}:
    pkg = os.path.join({folder!r}, "pkg")
    stamp_cache(caller.twice, dependency_stamp(os.path.join(pkg, "caller.py"), pkg))
print(json.dumps(caller.twice()))
"""


def test_a_stamped_kernel_recompiles_when_a_kernel_it_calls_changes(tmp_path):
    # A kernel's cached code holds the kernels it calls. numba checks only the kernel's own
    # file, so an edit of the callee's file alone left the caller running the old callee: the
    # second call below. The stamp of the files its module imports makes it recompile.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "caller.py").write_text(CALLER)

    def edit_callee(value, mtime):
        (package / "callee.py").write_text(CALLEE.format(value=value))
        os.utime(package / "callee.py", (mtime, mtime))  # distinct times, whatever the clock

    def call(stamped):
        code = STAMPED_CALL.format(folder=str(tmp_path), stamped=stamped)
        return run_python(code, tmp_path / "cache")

    edit_callee(1, 1_000_000_000)
    assert call(stamped=False) == 2
    edit_callee(5, 1_000_000_100)
    assert call(stamped=False) == 2  # numba alone: the stale copy of the callee
    assert call(stamped=True) == 10
    edit_callee(7, 1_000_000_200)
    assert call(stamped=True) == 14


# A package whose modules import each other: ``kernels`` imports ``helpers`` (relative, in
# parentheses over lines) and ``pkg.sub.deep`` (absolute); ``helpers`` imports ``constants`` in
# a package of its own; ``loose`` is imported by nobody, ``lazy`` only inside a function.
PACKAGE = {
    "__init__.py": "",
    "kernels.py": (
        "from .helpers import (\n    twice,\n)\nimport pkg.sub.deep\nimport numpy as np\n"
        "def load():\n    from . import lazy\n"
    ),
    "helpers.py": "from .sub import constants\ndef twice(x):\n    return 2 * x\n",
    "sub/__init__.py": "",
    "sub/constants.py": "N = 1\n",
    "sub/deep.py": '"""\nfrom here on, prose\n"""\n',
    "loose.py": "x = 1\n",
    "lazy.py": "x = 1\n",
}


def write_package(root, files):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def stamp_of(root, module="kernels.py"):
    kernel_cache._stamps.clear()  # the files change under this process here
    kernel_cache._imports.clear()
    return kernel_cache.dependency_stamp(str(root / module), str(root))


def test_a_kernels_sources_are_its_module_and_what_it_imports(tmp_path):
    root = tmp_path / "pkg"
    write_package(root, PACKAGE)
    found = kernel_cache._sources_closure(str(root / "kernels.py"), str(root))
    assert sorted(os.path.relpath(path, root) for path in found) == [
        "helpers.py",
        "kernels.py",
        os.path.join("sub", "__init__.py"),
        os.path.join("sub", "constants.py"),
        os.path.join("sub", "deep.py"),
    ]


def test_the_stamp_changes_with_a_dependencys_content_only(tmp_path):
    root = tmp_path / "pkg"
    write_package(root, PACKAGE)
    before = stamp_of(root)
    for name in ("loose.py", "lazy.py", "notes.txt"):  # no dependency of the kernels
        (root / name).write_text("y = 2\n")
    os.utime(root / "sub" / "constants.py", (1_000_000_000, 1_000_000_000))  # content unchanged
    assert stamp_of(root) == before
    copy = tmp_path / "elsewhere" / "pkg"  # the same files written anew in another folder
    write_package(copy, PACKAGE)
    assert stamp_of(copy) == before
    loose = stamp_of(root, "loose.py")
    (root / "sub" / "constants.py").write_text("N = 2\n")  # a constant a kernel may read
    assert stamp_of(root) != before
    assert stamp_of(root, "loose.py") == loose  # which loose.py does not import


def test_every_kernel_cache_is_stamped_with_its_sources():
    import dasktrees.estimators.forests  # noqa: F401 - most kernels
    from dasktrees.learner import grower

    root = os.path.dirname(os.path.dirname(kernel_cache.__file__))
    # the growth loop's sources: the kernels it calls, the constants they read
    sources = {
        os.path.relpath(path, root) for path in kernel_cache._sources_closure(grower.__file__, root)
    }
    assert {
        os.path.join("core", "dtypes.py"),
        os.path.join("learner", "histogram.py"),
        os.path.join("learner", "splitting.py"),
    } <= sources
    assert not {path for path in sources if path.startswith(("estimators", "command", "forest"))}
    assert kernel_cache._package_root(grower.__name__, grower.__file__) == root
    init = os.path.join(root, "core", "__init__.py")
    assert kernel_cache._package_root("dasktrees.core", init) == root
    kernel_cache._stamps.clear()  # computed again, not remembered from the kernels' definitions
    for name, dispatcher in kernel_cache.kernels().items():
        path = sys.modules[dispatcher.py_func.__module__].__file__
        stamp = kernel_cache.dependency_stamp(path, root)
        assert dispatcher._cache._cache_file._source_stamp == stamp, name


# numba as another version may have it: dispatcher statistics that do not name the cache's folder
# (numba reads them nowhere itself), and a cache file whose source stamp cannot be set again once
# numba has set it. numba itself works as before.
OTHER_NUMBA = """
    import json, os, warnings
    from types import SimpleNamespace

    import numpy as np
    from numba.core import caching, dispatcher

    def stats(self):
        return SimpleNamespace(cache_hits=self._cache_hits, cache_misses=self._cache_misses)

    dispatcher.Dispatcher.stats = property(stats)

    class FrozenStamp(caching.IndexDataCacheFile):
        def __setattr__(self, name, value):
            if name == "_source_stamp" and name in self.__dict__:
                raise AttributeError("_source_stamp is read-only")
            super().__setattr__(name, value)

    caching.IndexDataCacheFile = FrozenStamp
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import dasktrees
        from dasktrees.core import kernel_bundle, kernel_cache
        from dasktrees.learner import binning

        for name, dispatcher in kernel_cache.kernels().items():  # again: nothing new to say
            kernel_cache.patch_kernel(name, dispatcher)
        X = np.random.default_rng(0).normal(size=(300, 3))
        codes = dasktrees.BinMapper(max_bins=16).fit(X).transform(X)
    dispatchers = kernel_cache.kernels().values()
    stamp = kernel_cache.dependency_stamp(binning.__file__, os.path.dirname(dasktrees.__file__))
    stamps = [d._cache._cache_file._source_stamp for d in dispatchers]
    print(json.dumps({
        "warnings": [
            [w.category.__name__, str(w.message)] for w in caught if "numba" in str(w.message)
        ],
        "locked": sum(hasattr(d.compile, "__wrapped__") for d in dispatchers),
        "stamped": sum(s == stamp for s in stamps),
        "compiled": kernel_cache.compile_counts()[0],
        "bins": int(codes.max()) + 1,
    }))
"""


def test_another_numbas_internals_warn_once_and_kernels_compile_as_numba_alone(tmp_path):
    result = run_python(OTHER_NUMBA, tmp_path)
    [[category, message]] = result["warnings"]
    assert category == "RuntimeWarning"
    assert "no Dispatcher.stats.cache_path" in message
    assert "AttributeError while patching: _source_stamp is read-only" in message
    assert "no per-kernel lock" in message and "no dependency stamp" in message
    assert result["locked"] == result["stamped"] == 0  # numba's own behaviour, every kernel
    assert result["compiled"] > 0 and result["bins"] == 16  # the kernels compile and run


def _fake_kernel(**parts):
    """An object with what ``patch_kernel`` patches of a numba dispatcher (a kernel's
    ``compile``, ``overloads``, ``stats``, ``py_func``), but for the ``parts`` set to None."""

    def compile(sig):
        return sig

    kernel = {
        "compile": compile,
        "overloads": {},
        "stats": SimpleNamespace(cache_path=None),
        "py_func": compile,
        **parts,
    }
    return SimpleNamespace(**{name: part for name, part in kernel.items() if part is not None})


def test_unexpected_dispatchers_are_left_as_they_are_with_one_warning_a_patch(monkeypatch):
    # The stamp needs numba's cache file (none here); the lock needs compile(sig) and overloads.
    fakes = {"a": _fake_kernel(), "b": _fake_kernel(compile=None), "c": _fake_kernel(overloads=[])}
    monkeypatch.setattr(kernel_cache, "_patched", set())
    monkeypatch.setattr(kernel_cache, "_reported", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            for name, fake in fakes.items():
                kernel_cache.patch_kernel(name, fake)
    stamp, lock = caught  # the first kernel's reason for each, never again
    assert stamp.category is lock.category is RuntimeWarning
    assert "no Dispatcher._cache._cache_file._source_stamp" in str(stamp.message)
    assert "no dependency stamp" in str(stamp.message)
    assert "no Dispatcher.compile(sig) of one argument" in str(lock.message)
    assert "no per-kernel lock" in str(lock.message)
    assert "fall back to numba's own caching" in str(lock.message)
    assert hasattr(fakes["a"].compile, "__wrapped__")  # what numba has is still patched
    assert not hasattr(fakes["b"], "compile")
    assert not hasattr(fakes["c"].compile, "__wrapped__")
    assert fakes["a"].compile("float64(float64)") == "float64(float64)"  # no cache: no lock


def test_warmup_fills_an_empty_cache_and_the_next_process_compiles_nothing(tmp_path):
    warm = """
        import json, dasktrees
        r = dasktrees.warmup(groups=["binning"])
        print(json.dumps([r.compiled, r.loaded]))
    """
    compiled, loaded = run_python(warm, tmp_path)
    assert compiled > 0 and loaded == 0
    assert list(tmp_path.rglob("*.nbc")) and list(tmp_path.rglob("*.nbi"))
    compiled, loaded = run_python(warm, tmp_path)
    assert compiled == 0 and loaded > 0


def test_processes_started_at_once_compile_each_kernel_once(tmp_path):
    # Both processes import dasktrees, meet at a barrier (two files), then bin the same data: the
    # first to take a kernel's lock compiles it, the other waits and loads it from the cache.
    code = f"""
        import os, sys, time
        import numpy as np
        import dasktrees
        barrier = {str(tmp_path / "barrier")!r}
        os.makedirs(barrier, exist_ok=True)
        open(os.path.join(barrier, str(os.getpid())), "w").close()
        while len(os.listdir(barrier)) < 2:
            time.sleep(0.01)
        X = np.random.default_rng(0).normal(size=(300, 3))
        mapper = dasktrees.BinMapper(subsample=100).fit(X)
        mapper.transform(X)
        mapper.transform(X.astype(np.float32))
    """
    cache = tmp_path / "cache"
    code = textwrap.dedent(code) + COMPILED
    processes = [run_python(code, cache, wait=False) for _ in range(2)]
    first, second = (result_of(p) for p in processes)
    assert first or second  # something was compiled
    assert set(first).isdisjoint(second), (first, second)  # by one process only
    assert all(n == 1 for n in {**first, **second}.values())


def test_warmup_in_two_processes_compiles_each_group_once(tmp_path):
    code = """
        import json, dasktrees
        r = dasktrees.warmup(processes=2, groups=["binning"])
        print(json.dumps([r.compiled, r.loaded]))
    """
    compiled, loaded = run_python(code, tmp_path)
    alone, _ = run_python(
        """
        import json, dasktrees
        r = dasktrees.warmup(groups=["binning"])
        print(json.dumps([r.compiled, r.loaded]))
        """,
        tmp_path / "alone",
    )
    assert compiled == alone  # between them, the two processes compiled what one does alone
    assert loaded > 0


def test_unknown_group_is_an_error():
    with pytest.raises(ValueError, match="unknown warmup groups"):
        dasktrees.warmup(groups=["nope"])


def test_cli_warmup(monkeypatch, capsys):
    # The command as a user runs it, on the binning group only (the whole warm-up is slow).
    monkeypatch.setattr(warmup, "WARMUP_GROUPS", {"binning": warmup._warm_binning})
    assert main(["warmup", "--processes", "1"]) == 0
    out = capsys.readouterr().out
    assert "kernel signatures" in out and "cache:" in out
    assert main(["warmup", "--processes", "0"]) == 2
    assert "--processes" in capsys.readouterr().err


def test_plugin_warms_every_worker_of_a_local_cluster(tmp_path):
    env = {"NUMBA_CACHE_DIR": str(tmp_path), kernel_bundle.OFF: "0"}  # the workers compile
    with local_client(n_workers=2, env=env) as client:
        client.register_plugin(dasktrees.WarmupPlugin(groups=["binning"]))
        reports = client.run(lambda dask_worker: vars(dask_worker.dasktrees_warmup))
        compiled = client.run(compiled_here)
    assert len(reports) == 2
    first, second = compiled.values()
    assert first or second
    assert set(first).isdisjoint(second), compiled  # each kernel compiled by one worker only
    assert sum(r["compiled"] for r in reports.values()) == sum(
        sum(c.values()) for c in compiled.values()
    )


@pytest.mark.slow
def test_full_warmup_covers_every_kernel_and_real_use():
    # In this suite's numba cache, not an empty one: the option kernels warm-up compiles are
    # those the rest of the suite then loads, rather than compiled twice. So the test asks
    # what an empty cache would show without needing one: after ``warmup()`` every kernel has
    # its code (compiled or loaded here, or, for one called only by kernels loaded whole,
    # valid entries in its cache index or in the installed bundle, which seeds the cache at
    # its first call), and a real use needs no signature warm-up did not make. (Without the
    # bundle's, a kernel the bundle holds that only bundled kernels call, as ``exact.carry``,
    # passed only when an earlier test had compiled it into the suite's cache.)
    code = """
        import json, dasktrees
        from dasktrees.core import kernel_bundle, kernel_cache
        from tests.test_compilation import signatures_here
        dasktrees.warmup()
        without = sorted(
            n for n, d in kernel_cache.kernels().items()
            if not d.overloads
            and not (kernel_bundle.seed(d) or d._cache._cache_file._load_index())
        )
        print(json.dumps([without, signatures_here()]))
    """
    without_code, warmed = run_python(code, None, bundle=True)
    assert without_code == []
    use = """
        import numpy as np
        from distributed import Client, LocalCluster
        import dasktrees
        X = np.random.default_rng(1).normal(size=(500, 5))
        y = (X[:, 0] > 0).astype(int)
        dasktrees.DecisionTreeClassifier().fit(X, y).predict(X)
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            forest = dasktrees.RandomForestClassifier(n_estimators=3, client=client)
            forest.fit(X, y).predict_proba(X)
            forest.fit(X.astype(np.float32), y).predict_proba(X.astype(np.float32))
        import json
        from tests.test_compilation import signatures_here
        print(json.dumps(signatures_here()))
    """
    used = run_python(textwrap.dedent(use), None, bundle=True)
    assert len(used) > 20
    assert set(used) <= set(warmed)


def test_a_kernel_called_in_a_worker_task_compiles_outside_the_task_thread(tmp_path):
    # A worker samples its task threads' stacks for its profiler; compiling there was slow and
    # made profiles too deep for distributed. The task still gets the kernel's result, and a
    # compilation error still reaches it.
    code = """
        import json, threading
        import numpy as np
        from numba.core import event
        from distributed import Client, LocalCluster
        from dasktrees.core import rng as _random

        threads = []

        class Listener(event.Listener):
            def on_start(self, ev):
                threads.append(threading.current_thread().name)

            def on_end(self, ev):
                pass

        event.register("numba:compile", Listener())

        def uniforms():
            out = np.empty(3)
            _random.row_uniforms(7, 1, np.arange(3), out)
            return out.tolist()

        def task():
            return [uniforms(), threading.current_thread().name]

        def bad_task():
            return _random.row_uniforms(7, 1, "rows", np.empty(3))

        with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            value, task_thread = client.submit(task, pure=False).result()
            try:
                client.submit(bad_task, pure=False).result()
                error = None
            except Exception as e:
                error = type(e).__name__
        print(json.dumps([value, task_thread, threads, error, uniforms()]))
    """
    value, task_thread, threads, error, expected = run_python(code, tmp_path)
    assert value == expected
    assert threads and set(threads) == {"dasktrees-compile"} != {task_thread}
    assert error == "TypingError"


def test_the_client_compiles_the_signatures_its_trees_need_from_a_stump(tmp_path):
    # While workers compile, the client decodes, packs and votes with a stump of the forest's
    # shape (distributed.train._compile_client_kernels). Its kernels must then need no other
    # signature for the real trees and their predictions of float64 rows (many and one): each
    # fit and prediction below finds them already there.
    code = """
        import json
        import numpy as np
        import dasktrees
        from dasktrees.core import kernel_bundle, kernel_cache
        from dasktrees.estimators import forests
        from dasktrees.distributed import train

        # The client keeps the trees as shipped: packing is all it runs of them in a fit
        # (their split nodes; the leaf values of trees whose values the forest does not share).
        CLIENT_KERNELS = [
            "dasktrees.forest.packing._pack_depth_first",
            "dasktrees.forest.packing._write_leaves",
            "dasktrees.forest.voting.vote_rows",
        ]

        def signatures():
            found = kernel_cache.kernels()
            return {k: sorted(map(str, found[k].signatures)) for k in CLIENT_KERNELS}

        steps = []
        grow_forest = forests.grow_forest

        def stump_first(client, data, spec, *args, **kwargs):
            steps.append(signatures())  # what the fits before needed
            train._compile_client_kernels(data, spec)
            steps.append(signatures())
            return grow_forest(client, data, spec, *args, **kwargs)

        forests.grow_forest = stump_first
        rng = np.random.default_rng(0)
        X = rng.normal(size=(300, 4))
        X[rng.random(X.shape) < 0.1] = np.nan
        y = (np.nan_to_num(X[:, 0]) > 0).astype(int)
        for Forest, target in ((dasktrees.RandomForestClassifier, y),
                               (dasktrees.RandomForestRegressor, np.nan_to_num(X[:, 1]) * 2.0),
                               (dasktrees.ExtraTreesClassifier, (y + (X[:, 2] > 1)))):
            model = Forest(n_estimators=3, random_state=0).fit(X.astype(np.float32), target)
            model.predict(X)
            model.predict(X[:1])
        steps.append(signatures())
        print(json.dumps(steps))
    """
    # The test session's cache (not ``warmup.cache_dir()``, a folder inside it, which as a
    # process's NUMBA_CACHE_DIR is a cache of its own, empty in a new checkout): loading is
    # enough to see which signatures a kernel needs.
    steps = run_python(code, None)
    assert any(steps[1].values())  # the stump needed kernels
    for stumped, after_fit in zip(steps[1::2], steps[2::2]):
        assert after_fit == stumped

"""Kernels compiled into the package when it is built (``core.kernel_bundle``): the default
use's and the bundled options' signatures, a bundle baked from them and seeded into an empty
numba cache, and a default fit that compiles none of the kernels of the options it does not use.

As in ``test_compilation.py``, compilations are counted by numba's dispatcher statistics in new
processes on empty caches, never by time.
"""

import ast
import json
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dasktrees.command import default_use
from dasktrees.core import kernel_bundle

from .test_compilation import COMPILED, ROOT, run_python

# Kernels of options a default fit does not use: several target columns (the ``outputs``
# kernels), quantiles, intervals, SHAP, distributed mode's rounds, pruning, Poisson targets.
OPTION_KERNELS = (
    "dasktrees.forest.quantile",
    "dasktrees.forest.conformal",
    "dasktrees.forest.treeshap",
    "dasktrees.distributed.",
    "dasktrees.learner.cost_complexity",
    "dasktrees.forest.truncation",
    "routing.leaves_of_codes",
    "split_from_histograms",
    "poisson_deviance",
)

# Two small kernels, quick to bake: the random streams of the bootstrap.
RNG = [
    entry
    for entry in kernel_bundle.default_signatures()
    if entry[0].endswith((".rng.new_state", ".rng.row_uniforms"))
]

CALL_RNG = """
import numpy as np
from dasktrees.core.rng import new_state, row_uniforms
new_state(7)
row_uniforms(1, 2, np.arange(5), np.empty(5))
"""


@pytest.mark.parametrize(
    "file_name, at_least", [(kernel_bundle.SIGNATURES, 20), (kernel_bundle.OPTION_SIGNATURES, 5)]
)
def test_the_signatures_files_read_back_as_written(file_name, at_least):
    text = Path(kernel_bundle.signatures_path(file_name)).read_text()
    entries = kernel_bundle.loads(text)
    assert kernel_bundle.dumps(entries) == text
    assert len(entries) == len(json.loads(text)) > at_least


def test_every_bundled_kernel_imports_with_numpy_and_numba_alone():
    # A build bakes in an environment of numpy and numba only (setup.py): a kernel module that
    # imports more at its top fails the bake, and the package is built without a bundle.
    modules = sorted({name.rpartition(".")[0] for name, _ in kernel_bundle.bundled_signatures()})
    code = f"""
        import importlib, json, sys

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("dask", "distributed", "pandas", "scipy", "sklearn"):
                    raise ImportError(f"{{name}} is not in a build's environment")

        sys.meta_path.insert(0, Refuse())
        for module in {modules!r}:
            importlib.import_module(module)
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("dasktrees."))))
    """
    assert set(modules) <= set(run_python(code, None))


def test_types_round_trip_through_json():
    from numba import typeof
    from numba.core import types

    record = np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")])
    values = [
        typeof(np.zeros((2, 3), dtype=np.float32, order="F")),
        typeof(record),
        types.literal(3),
        types.Omitted(None),
        types.UniTuple(types.int64, 2),
        types.Tuple([types.float64, types.none, types.boolean]),
    ]
    for value in values:
        assert kernel_bundle.decode_type(json.loads(json.dumps(kernel_bundle.encode_type(value))))
        assert kernel_bundle.decode_type(kernel_bundle.encode_type(value)) == value
    with pytest.raises(TypeError, match="no JSON form"):
        kernel_bundle.encode_type(types.pyobject)


def test_the_installed_bundle_is_found_from_a_checkout_pip_built_in(tmp_path, monkeypatch):
    # Run from a checkout that pip built in place (CI), the checkout's own metadata
    # (dasktrees.egg-info) is found first; its bundle is a path relative to the checkout, where
    # there is none. The installed distribution's is the one to use.
    import importlib.metadata

    installed = tmp_path / "site-packages"
    (installed / "dasktrees" / "_kernels").mkdir(parents=True)

    class Found:
        def __init__(self, root):
            self.root = root

        def locate_file(self, path):
            return Path(self.root) / path

    def distributions(name):
        assert name == "dasktrees"
        return iter([Found(""), Found(installed)])

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(importlib.metadata, "distributions", distributions)
    assert kernel_bundle._find_bundle() in (
        os.path.join(kernel_bundle._package_dir(), "_kernels"),  # a package with its own
        str(installed / "dasktrees" / "_kernels"),
    )
    monkeypatch.setattr(kernel_bundle, "_package_dir", lambda: str(tmp_path / "checkout"))
    assert kernel_bundle._find_bundle() == str(installed / "dasktrees" / "_kernels")


def _setup_py_failure_recorder():
    """``setup.py``'s ``record_bake_failure`` and its ``BAKE_FAILED``, taken out of the file
    (importing it would need setuptools, which a test environment may not have)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    kept = [
        node
        for node in tree.body
        if (isinstance(node, ast.FunctionDef) and node.name == "record_bake_failure")
        or (isinstance(node, ast.Assign) and node.targets[0].id == "BAKE_FAILED")
    ]
    namespace = {"os": os, "sys": sys}
    exec(compile(ast.Module(kept, type_ignores=[]), "setup.py", "exec"), namespace)
    return namespace["record_bake_failure"], namespace["BAKE_FAILED"]


def test_a_build_whose_bake_failed_says_why_at_the_first_compile(tmp_path, capsys):
    # pip -q hides the build's message; the package says it at its first compile instead.
    record_bake_failure, marker_name = _setup_py_failure_recorder()
    assert marker_name == kernel_bundle.BAKE_FAILED
    bundle = tmp_path / "_kernels"
    error = "Traceback (most recent call last):\nImportError: No module named 'dask'"
    record_bake_failure(str(bundle), error)
    assert "built without compiled kernels" in capsys.readouterr().err
    # The two kernels compile in a process that records its warnings.
    recording = f"""
        import json, os, warnings
        os.environ[{kernel_bundle.OFF!r}] = {str(bundle)!r}
        caught = warnings.catch_warnings(record=True).__enter__()
        warnings.simplefilter("always")
    """
    runtime_warnings = (
        "print(json.dumps([str(w.message) for w in caught if w.category is RuntimeWarning]))"
    )
    code = textwrap.dedent(recording) + CALL_RNG + runtime_warnings
    said = run_python(code, tmp_path / "cache", bundle=True)
    assert len(said) == 1, said  # once a process, though two kernels compiled
    assert "installed without its compiled kernels" in said[0]
    assert "ImportError: No module named 'dask'" in said[0]


def test_a_baked_bundle_seeds_an_empty_cache_and_nothing_compiles(tmp_path):
    assert len(RNG) == 2
    bundle = tmp_path / "bundle"
    written = kernel_bundle.bake(str(bundle), processes=2, entries=RNG, cache=str(tmp_path / "c"))
    files = sorted(p.suffix for p in (bundle / "core").iterdir())
    assert written == len(files) == 4 and files.count(".nbi") == 2

    def compiled(cache, setting):
        code = f"import os; os.environ[{kernel_bundle.OFF!r}] = {setting!r}\n"
        return run_python(code + CALL_RNG + COMPILED, cache, bundle=True)

    assert compiled(tmp_path / "seeded", str(bundle)) == {}
    assert list((tmp_path / "seeded").rglob("*.nbi"))
    off = compiled(tmp_path / "off", "0")
    assert sum(off.values()) == 2
    # A cache built here is kept: the bundle seeds only kernels the cache has no index of.
    index = next((tmp_path / "off").rglob("*new_state*.nbi"))
    before = index.read_bytes()
    assert compiled(tmp_path / "off", str(bundle)) == {}
    assert index.read_bytes() == before


@pytest.mark.slow
def test_the_default_use_loads_listed_kernels_only_and_compiles_nothing(tmp_path):
    # The package's list of the default use names none of the options' kernels; the bundled
    # options' list names only theirs.
    listed = kernel_bundle.default_signatures()
    assert not [name for name, _ in listed if any(o in name for o in OPTION_KERNELS)]
    options = {name for name, _ in kernel_bundle.option_signatures()}
    assert {name.rpartition(".")[2] for name in options} >= {
        "quantile_rows", "shap_rows", "add_truncated_votes"
    }  # fmt: skip
    assert not {name for name, _ in listed} & options
    # README command 1 and the other first experiments, on a cluster of worker processes and
    # without a client, then the bundled options, in a new process on an empty cache with the
    # bundle of the installed dasktrees (CI's), else one baked here: every kernel they run
    # loads from it, so none of them compiles, and what the default use loads is on its list.
    # Either fails when a list is out of date: ``python -m dasktrees.command.default_use``
    # (or, for an installed bundle older than the checkout, a reinstall).
    bundle = kernel_bundle.bundle_folder()
    if bundle is None:
        bundle = str(tmp_path / "bundle")
        kernel_bundle.bake(bundle, cache=str(tmp_path / "bake"))
    recorded = default_use.record(bundle)
    assert kernel_bundle.loads(recorded["compiled"]) == []
    assert kernel_bundle.loads(recorded["options"]) == []
    loaded_names = {name for name, _ in kernel_bundle.loads(recorded["loaded"])}
    assert len(loaded_names) > 20
    assert set(_rows(recorded["loaded"])) <= set(_rows(kernel_bundle.dumps(listed)))


def _rows(signatures_text):
    """The signatures of a signatures file's text, one JSON string each."""
    return [json.dumps(row, sort_keys=True) for row in json.loads(signatures_text)]

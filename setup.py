"""Build hook: a wheel built from these sources carries the default use's kernels compiled.

Everything else about the package is declared in ``pyproject.toml``. ``build_py`` copies the
modules into the build folder as usual, then compiles the kernels that a first fit uses
(``dasktrees/default_kernels.json``), and those of the options with the longest first compile
(``dasktrees/option_kernels.json``), into ``dasktrees/_kernels/`` there, with the numba of the
build environment (``[build-system] requires``), in two processes. A fresh install's first fit
then loads them instead of compiling (``dasktrees/core/kernel_bundle.py``; measured in
``docs/benchmarks.md``, "Cold and warm start").

The bundle is an optimisation, never a condition: an editable install, ``DASKTREES_BAKE=0``, a
build without numba or a failing compilation builds the package without it (with a message,
and for a failure a marker that the package warns of at its first compile), and the kernels
compile at their first call as before.
"""

import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

# The marker of a failed bake, in the bundle's folder (``core/kernel_bundle.py``'s BAKE_FAILED:
# the package warns at its first compile, since pip -q hides this build's messages).
BAKE_FAILED = "BAKE_FAILED.txt"


def record_bake_failure(into: str, error: str) -> None:
    """Say that the bake failed: on the build's output, and in ``into`` for the package."""
    message = "dasktrees: built without compiled kernels (they compile at first use):\n"
    print(message + error[-2000:], file=sys.stderr)
    os.makedirs(into, exist_ok=True)
    with open(os.path.join(into, BAKE_FAILED), "w", encoding="utf-8") as marker:
        marker.write(error[-2000:])


class BuildWithKernels(build_py):
    """``build_py`` that also bakes the default use's kernels into the built package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode or os.environ.get("DASKTREES_BAKE", "1") == "0":
            return
        into = os.path.join(self.build_lib, "dasktrees", "_kernels")
        # The built copy of the package compiles, so that the bundle's stamps are those of the
        # files installed; only numpy and numba are imported.
        # (before the build environment's own path, which pip passes the same way).
        path = [os.path.abspath(self.build_lib), os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path)))
        command = [sys.executable, "-m", "dasktrees.core.kernel_bundle", "bake", into]
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            record_bake_failure(into, result.stderr)
            return
        print(result.stdout.strip())


if __name__ == "__main__":  # as setuptools runs it; a test imports the module to check the above
    setup(cmdclass={"build_py": BuildWithKernels})

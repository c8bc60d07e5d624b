"""Instructions a tree's growth executes, counted by valgrind: run before and after a kernel change.

A tree's CPU time on a shared machine moves by tens of percent from run to run; the number of
instructions it executes does not (the same count twice to 0.005 % here). The script runs itself
under ``valgrind --tool=callgrind`` with collection off, loads the kernels from numba's cache,
grows ``--trees`` trees of each ``bench_growth.py`` case with collection on (switched by
callgrind's client requests, from a small C library compiled on the fly with ``cc``), and prints
the instructions of each case. The count moves by about 2 % with the environment (the same code
run with and without ``PYTHONPATH`` set): compare runs made the same way, e.g. the code before
and after from two work trees, each with ``PYTHONPATH``:

    PYTHONPATH=. python benchmarks/count_instructions.py --cases diamonds,flights --trees 2

Needs valgrind with its headers and a C compiler. Under valgrind the imports and the data take a
few minutes; the counted growth is a small part of that. ``--keep DIR`` keeps callgrind's dumps
(``callgrind_annotate --tree=caller`` names numba's functions only by address: their call
counts tell them apart).
"""

import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile

_TOGGLE_C = """
#include <valgrind/callgrind.h>
void count_start(void) {
    CALLGRIND_ZERO_STATS;
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_TOGGLE_COLLECT;
}
void count_stop(void) {
    CALLGRIND_TOGGLE_COLLECT;
    CALLGRIND_DUMP_STATS;
}
"""


def _toggle_library(folder):
    """Compile the client-request library into ``folder``; returns its path."""
    source = os.path.join(folder, "toggle.c")
    library = os.path.join(folder, "libtoggle.so")
    with open(source, "w") as out:
        out.write(_TOGGLE_C)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def grow_counted(cases, n_trees, library):
    """Under valgrind: grow the trees of each case with collection on, one dump per case."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numpy as np
    from bench_growth import prepare

    from dasktrees.learner.grower import _grow_records

    toggle = ctypes.CDLL(library)
    for name in cases:
        grow, workspace, bootstrap = prepare(name)
        w = grow[2]
        if bootstrap:
            w[:] = np.random.default_rng(0).poisson(1.0, len(w))
        _grow_records(*grow, 0, None, workspace)  # the first growth with these weights
        toggle.count_start()
        for seed in range(n_trees):
            _grow_records(*grow, seed, None, workspace)
        toggle.count_stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="diamonds,flights")
    parser.add_argument("--trees", type=int, default=2)
    parser.add_argument("--keep", help="a folder to keep callgrind's dumps in")
    parser.add_argument("--library", help=argparse.SUPPRESS)  # set when run under valgrind
    args = parser.parse_args()
    cases = args.cases.split(",")
    if args.library:
        grow_counted(cases, args.trees, args.library)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind not found")
    with tempfile.TemporaryDirectory() as folder:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--collect-atstart=no",
            f"--callgrind-out-file={folder}/callgrind.out",
            sys.executable,
            os.path.abspath(__file__),
            "--cases",
            args.cases,
            "--trees",
            str(args.trees),
            "--library",
            _toggle_library(folder),
        ]
        subprocess.run(command, check=True, capture_output=True)
        # One dump per case, numbered in order: callgrind.out.1, callgrind.out.2, ...
        for k, name in enumerate(cases, start=1):
            with open(f"{folder}/callgrind.out.{k}") as dump:
                total = int(re.search(r"^summary: (\d+)", dump.read(), re.M).group(1))
            print(
                f"{name:10s} {total / 1e6:10.1f} M instructions for {args.trees} trees", flush=True
            )
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for k in range(1, len(cases) + 1):
                shutil.copy(f"{folder}/callgrind.out.{k}", args.keep)


if __name__ == "__main__":
    main()

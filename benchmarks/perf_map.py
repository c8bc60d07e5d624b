"""Profile tree growth with Linux ``perf``, numba's functions named.

numba compiles in memory, so ``perf report`` shows its code as bare addresses. This script grows
trees for a while (``profile_growth.py``'s data), writes ``/tmp/perf-<pid>.map`` (the file perf
reads for JIT code: start, size and name of every function numba has compiled in the process),
and records itself with perf meanwhile:

    python benchmarks/perf_map.py --data flights --seconds 8
    perf report -i perf.data --no-children --sort sym

A function's size is taken as the distance to the next one, so names are right, sizes
approximate. Numba's own cache must be off (``NUMBA_DISABLE_CACHING=1``, set here): code loaded
from the cache is not in the execution engine's symbol table.

perf cannot annotate such code (it has no file to read the instructions from). With
``--code-of NAME`` the script copies the machine code of the function whose symbol contains
``NAME`` (the function itself rather than its wrappers) to ``<output>.code``, and
after recording lists that function's hottest instruction offsets, to be read with objdump:

    python benchmarks/perf_map.py --data diamonds --code-of grower11_grow_nodes
    objdump -D -b binary -m i386:x86-64 perf.data.code --start-address=0x1817 --stop-address=0x1a80
"""

import argparse
import collections
import ctypes
import os
import shutil
import subprocess
import time

os.environ["NUMBA_DISABLE_CACHING"] = "1"
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from numba.core.registry import cpu_target  # noqa: E402
from profile_growth import dataset  # noqa: E402

from dasktrees import BinMapper, DecisionTreeClassifier, DecisionTreeRegressor  # noqa: E402
from dasktrees.core.params import check_tree_params  # noqa: E402
from dasktrees.learner.grower import Workspace, grow_tree  # noqa: E402


def write_perf_map():
    """Write /tmp/perf-<pid>.map for every function in numba's execution engine."""
    engine = cpu_target.target_context.codegen()._engine
    addresses = {}
    for name in engine._defined_symbols:
        try:
            address = engine.get_function_address(name)
        except Exception:  # noqa: BLE001 - data symbols
            continue
        if address:
            addresses[address] = name
    starts = sorted(addresses)
    path = f"/tmp/perf-{os.getpid()}.map"
    with open(path, "w") as out:
        for start, end in zip(starts, starts[1:] + [starts[-1] + 4096]):
            out.write(f"{start:x} {min(end - start, 1 << 20):x} {addresses[start]}\n")
    return path


def copy_code(map_path, name, out_path):
    """Copy the machine code of the function of the perf map ``map_path`` whose name contains
    ``name`` to ``out_path``; returns its start address and size.

    numba's own function, not its wrappers (``cfunc.`` and ``_ZN7cpython`` symbols, whose
    sizes, taken to the next symbol, may include padding and come out larger); of several
    signatures, the largest."""
    found, wrappers = [], []
    with open(map_path) as lines:
        for line in lines:
            start, size, symbol = line.split(maxsplit=2)
            if name in symbol:
                own = symbol.startswith("_ZN") and not symbol.startswith("_ZN7cpython")
                (found if own else wrappers).append((int(size, 16), int(start, 16)))
    if not found + wrappers:
        raise SystemExit(f"no function in {map_path} has {name!r} in its name")
    size, start = max(found or wrappers)
    with open(out_path, "wb") as out:
        out.write(ctypes.string_at(start, size))
    return start, size


def hot_offsets(perf, data, start, size, top=30):
    """The ``top`` instruction offsets of the function at ``start`` (``size`` bytes) with the
    most samples in the recording ``data``, and that function's share of all samples."""
    script = subprocess.run(
        [perf, "script", "-i", data, "-F", "ip"], capture_output=True, text=True, check=True
    )
    counts, n_samples = collections.Counter(), 0
    for line in script.stdout.split():
        n_samples += 1
        offset = int(line, 16) - start
        if 0 <= offset < size:
            counts[offset] += 1
    return counts.most_common(top), sum(counts.values()) / max(n_samples, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", choices=["classification", "flights", "diamonds"], default="flights"
    )
    parser.add_argument("--n-samples", type=int, default=1_000_000)
    parser.add_argument("--n-features", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=8.0, help="how long perf records")
    parser.add_argument("--output", default="perf.data")
    parser.add_argument(
        "--code-of", help="list the hottest instructions of the function with this in its name"
    )
    args = parser.parse_args()
    X, y, w = dataset(args)
    mapper = BinMapper(random_state=0).fit(X)
    codes = mapper.transform(X)
    arrays = mapper.kernel_arrays()
    is_classifier = args.data != "diamonds"
    tree = DecisionTreeClassifier if is_classifier else DecisionTreeRegressor
    params = check_tree_params(tree(max_features="sqrt"), len(y), codes.shape[1], is_classifier)
    n_classes = 2 if is_classifier else 1
    y = np.asarray(y, dtype=np.float64)
    workspace = Workspace.for_rows(len(y), n_classes, codes.shape[1], params)
    grow_tree(codes, y, w, arrays, params, n_classes, 0, workspace=workspace)  # compile
    perf_map = write_perf_map()
    print("perf map:", perf_map)
    if args.code_of:
        code = copy_code(perf_map, args.code_of, args.output + ".code")
    perf = shutil.which("perf")
    recorder = None
    if perf:
        command = [perf, "record", "-F", "2000", "-p", str(os.getpid()), "-o", args.output]
        recorder = subprocess.Popen([*command, "--", "sleep", str(args.seconds)])
        time.sleep(0.5)
    stop, seed = time.perf_counter() + args.seconds, 1
    while time.perf_counter() < stop:
        grow_tree(codes, y, w, arrays, params, n_classes, seed, workspace=workspace)
        seed += 1
    if recorder is not None:
        recorder.wait()
        print(f"perf report -i {args.output} --no-children --sort sym")
        if args.code_of:
            hottest, share = hot_offsets(perf, args.output, *code)
            print(f"{share:.1%} of the samples in {args.code_of}; hottest offsets:")
            for offset, n in hottest:
                print(f"  0x{offset:x} {n}")
            print(f"objdump -D -b binary -m i386:x86-64 {args.output}.code --start-address=0x...")
    else:
        print("perf not found: the map is written; record this process's pid yourself")


if __name__ == "__main__":
    main()

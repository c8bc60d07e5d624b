"""Comparisons of dasktrees and scikit-learn table by table, each library in a process of its
own, one after the other, so that neither's threads (an idle LocalCluster, an OpenMP pool) slow
the other's fits (``bench_monotonic.py``, ``bench_poisson.py``)."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

LIBRARIES = ("dasktrees", "scikit-learn")


def run_in_own_processes(script, libraries, arguments):
    """The JSON rows ``python script --library L *arguments`` prints, for each library ``L`` in
    turn, concatenated."""
    rows = []
    for library in libraries:
        done = subprocess.run(
            [sys.executable, str(script), "--library", library, *arguments],
            check=True,
            capture_output=True,
            text=True,
        )
        rows += json.loads(done.stdout)
    return rows


def comparison_main(script, doc, tables, out, run_library, summary):
    """The command line of such a comparison: ``--tables``, ``--trees`` and ``--out`` (default
    ``out``). In a child process (``--library``), print ``run_library(library, tables,
    trees)``'s rows; else run each library in its own process, print ``summary(rows)`` a line
    a table and write the runs and the summary to ``--out``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--tables", nargs="+", default=list(tables))
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--library", default=None, help=argparse.SUPPRESS)  # a child process
    parser.add_argument("--out", default=str(out))
    args = parser.parse_args()
    if args.library:
        print(json.dumps(run_library(args.library, args.tables, args.trees)))
        return
    arguments = ["--trees", str(args.trees), "--tables", *args.tables]
    rows = run_in_own_processes(script, LIBRARIES, arguments)
    result = {"trees": args.trees, "runs": rows, "summary": summary(rows)}
    for line in result["summary"]:
        print(json.dumps(line))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")

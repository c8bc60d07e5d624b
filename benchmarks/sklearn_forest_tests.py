"""scikit-learn's own forest test module run against dasktrees' four forests: how many of its
tests pass, and why the others fail.

    python benchmarks/sklearn_forest_tests.py
    python benchmarks/sklearn_forest_tests.py -k oob      # a subset, as pytest's -k

The installed scikit-learn's ``sklearn/ensemble/tests/test_forest.py`` is copied to a temporary
directory with one change: the four forests (``RandomForestClassifier``,
``RandomForestRegressor``, ``ExtraTreesClassifier``, ``ExtraTreesRegressor``) are imported from
dasktrees instead of ``sklearn.ensemble`` (``RandomTreesEmbedding``, which dasktrees has not,
stays scikit-learn's). pytest runs it in a process of its own, with scikit-learn's fixtures
(``sklearn.conftest``), without a Dask client (the forests run on threads). The outcome of every
test is read from pytest's JUnit XML report; the failures are grouped by the first line of their
error. Writes ``benchmarks/results/sklearn_forest_tests.json``: the counts, each failing test
with its error line, and the groups, largest first.
"""

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
FORESTS = (
    "ExtraTreesClassifier",
    "ExtraTreesRegressor",
    "RandomForestClassifier",
    "RandomForestRegressor",
)
IMPORT = re.compile(r"from sklearn\.ensemble import \((?P<names>[^)]*)\)")


def swapped_module(source: str) -> str:
    """scikit-learn's test module with the four forests imported from dasktrees."""
    match = IMPORT.search(source)
    if match is None:
        raise ValueError("the test module no longer imports the forests from sklearn.ensemble")
    names = [n.strip() for n in match.group("names").split(",") if n.strip()]
    if not set(FORESTS) <= set(names):
        raise ValueError(f"the test module imports {names}, not all of {FORESTS}")
    kept = [n for n in names if n not in FORESTS]
    imports = f"from dasktrees import {', '.join(FORESTS)}\n"
    if kept:
        imports += f"from sklearn.ensemble import {', '.join(kept)}\n"
    return source[: match.start()] + imports + source[match.end() :]


def outcomes(report: Path) -> list[dict]:
    """Each test case of a JUnit XML report: its name, outcome and first line of error."""
    cases = []
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                text = child.get("message") or child.text or ""
                message = text.strip().splitlines()[0][:200] if text.strip() else ""
                break
        cases.append({"test": case.get("name"), "outcome": outcome, "error": message})
    return cases


def main():
    import sklearn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", default=None, help="pytest's -k expression")
    parser.add_argument("--out", default=str(RESULTS / "sklearn_forest_tests.json"))
    args = parser.parse_args()
    source = Path(sklearn.__file__).parent / "ensemble" / "tests" / "test_forest.py"
    with tempfile.TemporaryDirectory() as tmp:
        module = Path(tmp) / "test_sklearn_forest.py"
        module.write_text(swapped_module(source.read_text()))
        report = Path(tmp) / "report.xml"
        command = [sys.executable, "-m", "pytest", str(module), "-q", "-p", "no:cacheprovider"]
        command += ["--junitxml", str(report), "--rootdir", tmp, "-o", "addopts="]
        # scikit-learn's fixtures (``global_random_seed``, ...), as its own test run loads them.
        command += ["-p", "sklearn.conftest"]
        if args.k:
            command += ["-k", args.k]
        subprocess.run(command, cwd=tmp, check=False, capture_output=True)
        cases = outcomes(report)
    counts = collections.Counter(case["outcome"] for case in cases)
    failing = [c for c in cases if c["outcome"] in ("failed", "error")]
    groups = collections.Counter(c["error"] for c in failing)
    result = {
        "scikit-learn": sklearn.__version__,
        "tests": len(cases),
        "counts": dict(counts),
        "passed_share": round(counts["passed"] / max(1, len(cases) - counts["skipped"]), 4),
        "groups": [{"error": e, "tests": n} for e, n in groups.most_common()],
        "failing": failing,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"scikit-learn {sklearn.__version__}: {len(cases)} tests, {dict(counts)}")
    for error, n in groups.most_common(25):
        print(f"{n:4d}  {error}")


if __name__ == "__main__":
    main()

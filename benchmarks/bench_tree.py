"""Single-tree speed: dasktrees vs scikit-learn on make_classification, single thread.

One full-depth tree (min_samples_leaf=1, max_features="sqrt") on float32 data; times binning,
numba compilation (cold, and loading the cache), growth and prediction apart, and
scikit-learn's fit and predict with the same parameters. Prints the figures as JSON and writes
them to ``--json`` (default ``benchmarks/results/tree_<rows>_x_<features>.json``, rows as ``1m``
for a million):

    python benchmarks/bench_tree.py --n-samples 1000000 --n-features 50
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numba  # noqa: E402
import numpy as np  # noqa: E402
import sklearn  # noqa: E402
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.tree import DecisionTreeClassifier as SkTree  # noqa: E402

import dasktrees  # noqa: E402
from dasktrees.estimators.trees import DecisionTreeClassifier  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def default_json(n_samples, n_features):
    """``results/tree_1m_x_50.json`` for a million rows and 50 features."""
    rows = f"{n_samples // 1_000_000}m" if n_samples % 1_000_000 == 0 else str(n_samples)
    return RESULTS / f"tree_{rows}_x_{n_features}.json"


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


_COLD_START = """
import time
start = time.perf_counter()
import numpy as np
from dasktrees import DecisionTreeClassifier
X = np.random.default_rng(0).normal(size=(300, 5)).astype(np.float32)
y = (X[:, 0] > 0).astype(int)
DecisionTreeClassifier(max_features="sqrt", random_state=0).fit(X, y).predict(X)
print(time.perf_counter() - start)
"""


def cold_compile_seconds():
    """Import, compile every kernel a fit and a predict use, and run them on tiny data, in a
    fresh process with an empty numba cache: what a first call costs on a new machine."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        out = subprocess.run(
            [sys.executable, "-c", _COLD_START], env=env, check=True, capture_output=True, text=True
        )
    return float(out.stdout.strip().splitlines()[-1])


def profile_dasktrees(X_train, y_train, X_test, seed):
    """Time each stage of a dasktrees fit; the first tiny fit pays (or loads) the compilation."""

    def warm_up():
        tiny = DecisionTreeClassifier(max_features="sqrt", random_state=0)
        tiny.fit(X_train[:200], y_train[:200]).predict(X_test[:200])

    _, compile_s = timed(warm_up)
    model = DecisionTreeClassifier(max_features="sqrt", min_samples_leaf=1, random_state=seed)
    _, fit_s = timed(model.fit, X_train, y_train)
    # The same fit, broken into its stages.
    mapper = dasktrees.BinMapper(random_state=seed)
    _, bin_fit_s = timed(mapper.fit, X_train)
    _, transform_s = timed(mapper.transform, X_train)
    _, predict_s = timed(model.predict, X_test)
    return model, {
        "cold_compile_s": cold_compile_seconds(),
        "cached_compile_load_s": compile_s,
        "fit_s": fit_s,
        "binning_s": bin_fit_s + transform_s,
        "growth_s": fit_s - (bin_fit_s + transform_s),
        "predict_s": predict_s,
        "n_nodes": model.tree_.node_count,
        "depth": model.get_depth(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=1_000_000)
    parser.add_argument("--n-test", type=int, default=200_000)
    parser.add_argument("--n-features", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-sklearn", action="store_true")
    parser.add_argument("--json", help="default: results/tree_<rows>_x_<features>.json")
    args = parser.parse_args()
    numba.set_num_threads(1)

    X, y = make_classification(
        n_samples=args.n_samples + args.n_test,
        n_features=args.n_features,
        n_informative=args.n_features // 2,
        random_state=args.seed,
    )
    X = X.astype(np.float32)
    X_train, X_test = X[: args.n_samples], X[args.n_samples :]
    y_train, y_test = y[: args.n_samples], y[args.n_samples :]

    model, ours = profile_dasktrees(X_train, y_train, X_test, args.seed)
    ours["test_accuracy"] = float(np.mean(model.predict(X_test) == y_test))
    result = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "versions": {
            "dasktrees": dasktrees.__version__,
            "numba": numba.__version__,
            "scikit-learn": sklearn.__version__,
            "numpy": np.__version__,
        },
        "shape": [args.n_samples, args.n_features],
        "dasktrees": ours,
    }
    if not args.skip_sklearn:
        sk = SkTree(max_features="sqrt", min_samples_leaf=1, random_state=args.seed)
        _, sk_fit = timed(sk.fit, X_train, y_train)
        sk_pred, sk_predict = timed(sk.predict, X_test)
        result["sklearn"] = {
            "fit_s": sk_fit,
            "predict_s": sk_predict,
            "n_nodes": sk.tree_.node_count,
            "depth": sk.get_depth(),
            "test_accuracy": float(np.mean(sk_pred == y_test)),
        }
        result["fit_speedup"] = sk_fit / ours["fit_s"]
        result["predict_speedup"] = sk_predict / ours["predict_s"]
    print(json.dumps(result, indent=2))
    path = Path(args.json or default_json(args.n_samples, args.n_features))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

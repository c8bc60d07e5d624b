"""The default use: the kernels a new user's first runs compile, which a built dasktrees ships
compiled (``core.kernel_bundle``).

The default use is the README's first command (``configs/quickstart.yaml``: a random forest
classifier on a LocalCluster of worker processes, its out-of-bag score and curve, permutation and
out-of-bag impurity importances, predictions of the test rows), the same experiment as a
regression on numeric and categorical columns (ISLR's Carseats, through the ``datasets`` extra),
with extra-trees and with a single tree, and a forest and a tree fitted and predicted without a
client, as scikit-learn users first do.

The bundled options are the uses whose kernels took longest to compile at their first call
(``run_bundled_options``: a quantile forest's fit and quantiles, SHAP values, out-of-bag
pruning; 3-6 s each, where every other option's first call costs under 2 s). A wheel's build
compiles their kernels too, though the default use never runs them.

``record`` runs both in a new process on an empty numba cache, on a cluster whose workers report
what they compile and load, and returns the signatures of each;
``python -m dasktrees.command.default_use`` writes those compiled without a bundle to the
package's ``default_kernels.json`` and ``option_kernels.json``, which a wheel's build compiles.

Every other use (several target columns, distributed mode, intervals, ...) compiles its own
kernels at its first call.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..core import kernel_bundle

# The experiments of the default use: (name, overrides of the quickstart's config). Few trees:
# a kernel's signature does not depend on how many run.
N_TREES = 8
EXPERIMENTS = {
    "quickstart": {},
    "regression": {
        "data": {"train": {"builtin": "carseats"}, "target": "Sales"},
        "model": {"task": "regression"},
        "evaluation": {"metrics": ["r2", "rmse"]},
    },
    "extra_trees": {
        "model": {"kind": "extra_trees", "params": {"n_estimators": N_TREES, "bootstrap": True}}
    },
    "decision_tree": {
        "model": {"kind": "decision_tree", "params": {}},
        "evaluation": {"oob": False, "permutation_importance": False},
    },
}


def _config(overrides: dict[str, Any]) -> dict[str, Any]:
    """The quickstart's experiment with ``overrides`` (merged a section at a time)."""
    config: dict[str, Any] = {
        "name": "default-use",
        "seed": 0,
        "data": {
            "train": {"builtin": "breast_cancer"},
            "target": "target",
            "test": {"fraction": 0.25, "seed": 0},
        },
        "model": {
            "kind": "random_forest",
            "task": "classification",
            "params": {"n_estimators": N_TREES, "max_features": "sqrt"},
        },
        "evaluation": {"oob": True, "permutation_importance": True},
    }
    for section, values in overrides.items():
        config[section] = {**config[section], **values}
    return config


def run_default_use(address: str, folder: Path) -> None:
    """The experiments of ``EXPERIMENTS`` on the scheduler at ``address`` (run directories in
    ``folder``), then a forest and a tree fitted and predicted without a client."""
    from sklearn.datasets import load_breast_cancer

    from ..estimators.forests import RandomForestClassifier
    from ..estimators.trees import DecisionTreeRegressor
    from .config import check_config, parse_config
    from .experiment import run

    for name, overrides in EXPERIMENTS.items():
        config = parse_config({**_config(overrides), "cluster": {"address": address}})
        run(config, check_config(config), output=folder / name, echo=lambda line: None)
    X, y = load_breast_cancer(return_X_y=True)
    RandomForestClassifier(n_estimators=N_TREES, oob_score=True, random_state=0).fit(
        X, y
    ).predict_proba(X)
    DecisionTreeRegressor(random_state=0).fit(X, X[:, 0]).predict(X)


def run_bundled_options() -> None:
    """The bundled options' first calls, without a client: a quantile forest's fit and
    quantiles, SHAP values of a classifier and of a regressor, out-of-bag pruning."""
    from sklearn.datasets import load_breast_cancer, load_diabetes

    from ..estimators.forests import RandomForestClassifier, RandomForestRegressor
    from ..estimators.quantile_forests import RandomForestQuantileRegressor

    X, y = load_diabetes(return_X_y=True)
    quantiles = RandomForestQuantileRegressor(n_estimators=N_TREES, random_state=0).fit(X, y)
    quantiles.predict(X, quantiles=[0.1, 0.5, 0.9])
    RandomForestRegressor(n_estimators=N_TREES, random_state=0).fit(X, y).shap_values(X[:5])
    X, y = load_breast_cancer(return_X_y=True)
    pruned = RandomForestClassifier(n_estimators=N_TREES, prune="oob", random_state=0).fit(X, y)
    pruned.predict_proba(X)
    pruned.shap_values(X[:5])


def _listen() -> list[kernel_bundle.Entry]:
    """Record every dasktrees kernel this process compiles from now on, into the list
    returned (kept as ``builtins._dasktrees_compiled`` for a worker's later ``client.run``)."""
    import builtins

    from numba.core import event

    compiled: list[kernel_bundle.Entry] = []

    class Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            func = ev.data["dispatcher"].py_func
            if func.__module__.startswith("dasktrees."):
                compiled.append((f"{func.__module__}.{func.__qualname__}", tuple(ev.data["args"])))

        def on_end(self, ev: Any) -> None:
            pass

    event.register("numba:compile", Listener())
    builtins._dasktrees_compiled = compiled  # type: ignore[attr-defined]
    return compiled


def _loaded() -> list[kernel_bundle.Entry]:
    """The signatures this process loaded from numba's cache rather than compiled (a kernel
    loaded whole brings its callees' code with it: they are not loaded on their own)."""
    from ..core import kernel_cache

    return [
        (name, tuple(signature))
        for name, dispatcher in kernel_cache.kernels().items()
        for signature in dispatcher.stats.cache_hits
    ]


def _seen_by_worker() -> tuple[str, str]:
    import builtins

    compiled = builtins._dasktrees_compiled  # type: ignore[attr-defined]
    return kernel_bundle.dumps(compiled), kernel_bundle.dumps(_loaded())


def _record_here() -> str:
    """The default use in this process and a LocalCluster of two worker processes, each
    recording what it compiles and what it loads, then the bundled options in this process;
    as ``{"compiled": signatures file's text, "loaded": ..., "options": ...}`` in JSON (the
    default use's unions, and what the options compile after it)."""
    from distributed import Client, LocalCluster

    compiled = _listen()
    loaded: list[kernel_bundle.Entry] = []
    with tempfile.TemporaryDirectory(prefix="dasktrees-default-use-") as folder:
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
            Client(cluster) as client,
        ):
            client.run(_listen)
            run_default_use(cluster.scheduler_address, Path(folder))
            for worker_compiled, worker_loaded in client.run(_seen_by_worker).values():
                compiled += kernel_bundle.loads(worker_compiled)
                loaded += kernel_bundle.loads(worker_loaded)
    loaded += _loaded()
    default = list(compiled)
    # The listener goes on appending to ``compiled``: what the options add comes after, less
    # what a worker compiled for the default use and this process only now.
    run_bundled_options()
    seen = set(default)
    options = [entry for entry in compiled[len(default) :] if entry not in seen]
    return json.dumps(
        {
            "compiled": kernel_bundle.dumps(default),
            "loaded": kernel_bundle.dumps(loaded),
            "options": kernel_bundle.dumps(options),
        }
    )


def record(bundle: str | None = None) -> dict[str, str]:
    """What the default use compiles and loads, and what the bundled options compile after it,
    as signatures files' texts (``"compiled"``, ``"loaded"``, ``"options"``): run in a new
    process on an empty numba cache, with the bundled kernels of the folder ``bundle``, or none
    (then everything they run compiles: the package's two lists)."""
    with tempfile.TemporaryDirectory(prefix="dasktrees-record-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, **{kernel_bundle.OFF: bundle or "0"})
        out = Path(cache) / "signatures.json"
        process = subprocess.run(
            [sys.executable, "-m", "dasktrees.command.default_use", "--here", str(out)],
            env=env,
            capture_output=True,
            text=True,
        )
        if process.returncode != 0:
            raise RuntimeError(f"the default use failed:\n{process.stderr}")
        texts: dict[str, str] = json.loads(out.read_text(encoding="utf-8"))
        return texts


def main(argv: list[str]) -> None:
    """``python -m dasktrees.command.default_use``: write the package's
    ``default_kernels.json`` and ``option_kernels.json`` (``--here FILE``: record in this
    process, into FILE)."""
    if argv[:1] == ["--here"]:
        # Through the module's own name: the functions the workers run are then pickled by
        # reference, as ``__main__``'s would not be.
        from dasktrees.command import default_use

        Path(argv[1]).write_text(default_use._record_here(), encoding="utf-8")
        return
    texts = record()
    for file_name, key in (
        (kernel_bundle.SIGNATURES, "compiled"),
        (kernel_bundle.OPTION_SIGNATURES, "options"),
    ):
        path = Path(kernel_bundle.signatures_path(file_name))
        path.write_text(texts[key], encoding="utf-8")
        print(f"{len(json.loads(texts[key]))} kernel signatures: {path}")


if __name__ == "__main__":
    main(sys.argv[1:])

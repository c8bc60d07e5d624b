"""Model files of forests kept on the workers: each shard saved by the worker that holds it, and
a sharded model loaded onto a cluster's workers or into this process (``modelfile.sharding``
owns the directory's layout and checks; ``modelfile.writing`` and ``reading`` each shard's).

The workers must see the directory where the client does (one machine, or a shared file system).
"""

from __future__ import annotations

import copy
import operator
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..distributed.client import as_completed
from ..distributed.shards import TreeShards, placements
from ..forest.parts import ForestPart
from ..modelfile import reading
from ..modelfile.format import OOB_SCORES
from ..modelfile.integrity import read_manifest
from ..modelfile.sharding import check_listed, shard_directory, write_sharded
from ..modelfile.writing import save as save_model


def save_from_workers(forest: Any, path: str | os.PathLike) -> None:
    """Write the forest kept on the workers ``forest`` as a sharded model at ``path``: each
    shard a model directory written by its worker, then the manifest listing them."""
    shards: TreeShards = forest._tree_shards
    client = shards.client
    skeleton = forest._fitted_skeleton()

    def write_shards(directory: Path) -> list[dict[str, Any]]:
        futures = [
            client.submit(
                _save_part, part, skeleton, str(directory / shard_directory(k)), pure=False
            )
            for k, part in enumerate(shards.parts)
        ]
        # Every shard task ended, written or failed, before the directory may be removed.
        for _ in as_completed(client, futures):
            pass
        checksums = client.gather(futures)
        return [
            {
                "directory": shard_directory(k),
                "n_trees": int(shards.first_trees[k + 1] - shards.first_trees[k]),
                "first_tree": int(shards.first_trees[k]),
                "manifest_sha256": checksum,
            }
            for k, checksum in enumerate(checksums)
        ]

    fitted = {name: float(getattr(forest, name)) for name in OOB_SCORES if hasattr(forest, name)}
    curve = getattr(forest, "oob_curve_", None)
    write_sharded(
        Path(path).absolute(),  # as the workers, whatever their working directory, see it
        type(forest).__name__,
        fitted,
        None if curve is None else [float(v) for v in curve],
        write_shards,
    )


def _save_part(part: ForestPart, skeleton: Any, directory: str) -> str:
    """On the shard's worker: the shard as a model directory of its own; its manifest's
    checksum."""
    forest = copy.copy(skeleton)
    forest.estimators_ = [forest._wrap(tree) for tree in part.trees or []]
    save_model(forest, directory)
    return read_manifest(directory)["manifest_sha256"]


def load_sharded(
    path: str | os.PathLike, manifest: dict, estimators: Mapping[str, type], client: Any = None
) -> Any:
    """The forest of the sharded model at ``path`` (its checked top ``manifest``): on
    ``client``'s workers, a shard a worker task (each read with all of a model's checks), or
    without a client in this process, exactly the forest ``load`` gives of an unsharded file."""
    directory = Path(path).absolute()
    listed = manifest["shards"]
    if client is None:
        forests = [reading.load(directory / s["directory"], estimators) for s in listed]
        forest = forests[0]
        forest._keep_on_client([est for f in forests for est in f.estimators_])
    else:
        where = placements(client, [s["n_trees"] for s in listed])
        loaded = [
            client.submit(
                _load_part,
                str(directory / s["directory"]),
                s["first_tree"],
                s["manifest_sha256"],
                estimators,
                k == 0,
                pure=False,
                workers=[worker],
                allow_other_workers=True,
            )
            for k, (s, worker) in enumerate(zip(listed, where))
        ]
        parts = [client.submit(operator.itemgetter(0), f, pure=False) for f in loaded]
        summaries = client.gather([client.submit(ForestPart.summary, p) for p in parts])
        forest = client.submit(operator.itemgetter(1), loaded[0]).result()
        forest._keep_on_workers(TreeShards.from_parts(parts, summaries, where))
    for name, value in manifest["fitted"].items():
        setattr(forest, name, float(value))
    if manifest["oob_curve"] is not None:
        forest.oob_curve_ = np.array([float(v) for v in manifest["oob_curve"]])
    return forest


def _load_part(
    directory: str,
    first_tree: int,
    listed_sha256: str,
    estimators: Mapping[str, type],
    with_skeleton: bool,
) -> tuple[ForestPart, Any]:
    """On a worker: a shard's model directory, loaded and checked (again the shard the model
    lists: a shard grown again after its worker died is read again, and must not have changed),
    as the forest's part; with ``with_skeleton``, also the estimator without its trees (what
    the client keeps of a forest on the workers)."""
    check_listed(Path(directory), read_manifest(directory), listed_sha256)
    forest = reading.load(directory, estimators)
    part = ForestPart(first_tree, forest._forest, [est.tree_ for est in forest.estimators_])
    if not with_skeleton:
        return part, None
    del forest.estimators_
    forest._forest = None
    return part, forest


def describe_sharded(
    path: str | os.PathLike, manifest: dict, estimators: Mapping[str, type]
) -> dict:
    """``reading.describe`` of a sharded model: its first shard's description, with the whole
    forest's trees, nodes, bytes and out-of-bag score."""
    directory = Path(path)
    shards = [reading.describe(directory / s["directory"], estimators) for s in manifest["shards"]]
    description = shards[0]
    description["trees"] = manifest["n_trees"]
    description["nodes"] = sum(s["nodes"] for s in shards)
    description["size_bytes"] = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
    description["oob_score"] = manifest["fitted"].get("oob_score_")
    description["shards"] = len(shards)
    return description

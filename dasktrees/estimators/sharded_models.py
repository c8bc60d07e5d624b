"""Model files of forests kept on the workers: each shard saved by the worker that holds it, and
a sharded model loaded onto a cluster's workers or into this process (``modelfile.sharding``
owns the directory's layout and checks; ``modelfile.writing`` and ``reading`` each shard's).

The workers must see the directory where the client does (one machine, or a shared file system).
"""

from __future__ import annotations

import copy
import dataclasses
import operator
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..distributed.client import as_completed
from ..distributed.shards import TreeShards, placements
from ..forest.conformal import ConformalScores
from ..forest.parts import ForestPart, Source
from ..forest.quantiles import LeafTargets
from ..modelfile import reading
from ..modelfile.format import OOB_SCORES
from ..modelfile.integrity import check_interval_scores, read_manifest
from ..modelfile.sharding import check_listed, shard_directory, write_sharded
from ..modelfile.writing import save as save_model


def save_sharded(forest: Any, path: str | os.PathLike) -> None:
    """Write ``forest`` as a sharded model at ``path``: a forest kept on the workers each shard
    a model directory written by its worker, a merged forest on the client each fit's trees;
    then the manifest listing them. Each shard's model holds its fit's bin mapper and seed (a
    merged forest's fits differ in them)."""
    # Per part (a shard, or a merged forest's fit on the client): its fit and its first tree in
    # that fit (``BaseForest._part_draws``), and the skeleton of each fit.
    draws = forest._part_draws()
    skeletons: dict[int, Any] = {}
    for source, _ in draws:
        if id(source) not in skeletons:
            skeletons[id(source)] = _source_skeleton(forest, source)
    shards: TreeShards | None = forest._tree_shards
    if shards is None:  # a merged forest on the client: a shard a fit, written here
        sizes = [source.n_trees for source, _ in draws]
    else:
        sizes = [int(n) for n in np.diff(shards.first_trees)]
    firsts = [int(first) for first in np.cumsum([0] + sizes)[:-1]]

    def write_shards(directory: Path) -> list[dict[str, Any]]:
        places = [str(directory / shard_directory(k)) for k in range(len(draws))]
        if shards is None:
            checksums = [
                _save_trees(
                    [est.tree_ for est in forest.estimators_[first : first + n]],
                    skeletons[id(source)],
                    place,
                )
                for (source, _), first, n, place in zip(draws, firsts, sizes, places)
            ]
        else:
            client = shards.client
            futures = [
                client.submit(_save_part, part, skeletons[id(source)], place, pure=False)
                for part, (source, _), place in zip(shards.parts, draws, places)
            ]
            # Every shard task ended, written or failed, before the directory may be removed.
            for _ in as_completed(client, futures):
                pass
            checksums = client.gather(futures)
        return [
            {
                "directory": shard_directory(k),
                "n_trees": n,
                "first_tree": first,
                "part_first_tree": own,
                "manifest_sha256": checksum,
            }
            for k, ((_, own), n, first, checksum) in enumerate(zip(draws, sizes, firsts, checksums))
        ]

    fitted = {name: float(getattr(forest, name)) for name in OOB_SCORES if hasattr(forest, name)}
    curve = getattr(forest, "oob_curve_", None)
    scores = getattr(forest, "oob_interval_scores_", None)
    write_sharded(
        Path(path).absolute(),  # as the workers, whatever their working directory, see it
        type(forest).__name__,
        fitted,
        None if curve is None else [float(v) for v in curve],
        write_shards,
        merged=forest._merged_sources() is not None,
        interval_scores=None
        if scores is None
        else ([float(v) for v in scores.values], [int(c) for c in scores.counts]),
    )


def _source_skeleton(forest: Any, source: Any) -> Any:
    """The skeleton of one fit of the forest (of a merged forest's fits, each its own): its bin
    mapper, seed and rows."""
    skeleton = forest._fitted_skeleton()
    skeleton.bin_mapper_, skeleton._seed, skeleton._n_rows = (
        source.bin_mapper,
        source.seed,
        source.n_rows,
    )
    return skeleton


def _save_trees(
    trees: list, skeleton: Any, directory: str, leaf_targets: LeafTargets | None = None
) -> str:
    """``trees`` as a model directory of their own (the skeleton's forest of them, with the
    ``leaf_targets`` of a quantile forest's); its manifest's checksum."""
    forest = copy.copy(skeleton)
    forest.estimators_ = [forest._wrap(tree) for tree in trees]
    if leaf_targets is not None:
        forest.leaf_targets_ = leaf_targets
    save_model(forest, directory)
    return read_manifest(directory)["manifest_sha256"]


def _save_part(part: ForestPart, skeleton: Any, directory: str) -> str:
    """On the shard's worker: the shard as a model directory of its own (``_save_trees``)."""
    return _save_trees(part.trees or [], skeleton, directory, part.leaf_targets)


def load_sharded(
    path: str | os.PathLike, manifest: dict, estimators: Mapping[str, type], client: Any = None
) -> Any:
    """The forest of the sharded model at ``path`` (its checked top ``manifest``): on
    ``client``'s workers, a shard a worker task (each read with all of a model's checks), or
    without a client in this process, exactly the forest ``load`` gives of an unsharded file
    (a merged forest: the forest ``merge_forests`` makes of its shards' models)."""
    directory = Path(path).absolute()
    listed = manifest["shards"]
    merged = manifest["merged"]
    if client is None:
        forests = [reading.load(directory / s["directory"], estimators) for s in listed]
        forest = forests[0]
        if merged:  # as merge_forests makes it of the shards' models
            forest._sources = _fit_sources(listed, forests)
        forest._keep_on_client([est for f in forests for est in f.estimators_])
        if hasattr(forest, "leaf_targets_"):  # a quantile forest's, leaf after leaf
            forest.leaf_targets_ = LeafTargets.concatenate(f.leaf_targets_ for f in forests)
    else:
        where = placements(client, [s["n_trees"] for s in listed])
        loaded = [
            client.submit(
                _load_part,
                str(directory / s["directory"]),
                s["part_first_tree"],
                s["manifest_sha256"],
                estimators,
                pure=False,
                workers=[worker],
                allow_other_workers=True,
            )
            for s, worker in zip(listed, where)
        ]
        parts = [client.submit(operator.itemgetter(0), f, pure=False) for f in loaded]
        summaries = client.gather([client.submit(ForestPart.summary, p) for p in parts])
        skeletons = client.gather([client.submit(operator.itemgetter(1), f) for f in loaded])
        forest = skeletons[0]
        if merged:
            forest._sources = _fit_sources(listed, skeletons)
            forest.set_params(n_estimators=manifest["n_trees"])
        forest._keep_on_workers(TreeShards.from_parts(parts, summaries, where))
    for name, value in manifest["fitted"].items():
        setattr(forest, name, float(value))
    if manifest["oob_curve"] is not None:
        forest.oob_curve_ = np.array([float(v) for v in manifest["oob_curve"]])
    if manifest.get("interval_scores") is not None:
        forest.oob_interval_scores_ = _interval_scores(manifest["interval_scores"], directory)
    return forest


def _interval_scores(entry: Any, directory: Path) -> ConformalScores:
    """A sharded model's ``oob_interval_scores_`` from its top manifest, checked as a model
    file's arrays are (``integrity.check_interval_scores``)."""
    where = directory / "manifest.json"
    if not isinstance(entry, dict) or set(entry) != {"values", "counts"}:
        raise ValueError(f"{where}: 'interval_scores' must have the fields counts, values")
    try:
        values = np.array(entry["values"], dtype=np.float64)
        counts = np.array(entry["counts"], dtype=np.int64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: 'interval_scores' must hold lists of numbers") from None
    if values.ndim != 1 or counts.ndim != 1 or not np.all(np.isfinite(values)):
        raise ValueError(f"{where}: 'interval_scores' must hold lists of finite numbers")
    arrays = {"interval_score_values": values, "interval_score_counts": counts}
    check_interval_scores(arrays, where)
    return ConformalScores(values, counts, int(counts[-1]) if len(counts) else 0)


def _fit_sources(listed: list[dict], forests: list[Any]) -> list[Source]:
    """The fits (``Source``) of a merged model's shards: a shard whose first tree is its fit's
    first (``part_first_tree`` 0) begins a fit, and the shards after it continue it (a forest
    saved from the workers has several shards a fit). ``forests``: the shards' estimators, for
    their seed, rows and bins."""
    sources: list[Source] = []
    for shard, forest in zip(listed, forests):
        if shard["part_first_tree"] == 0 or not sources:
            sources.append(
                Source(shard["n_trees"], forest._seed, forest._n_rows, forest.bin_mapper_)
            )
        else:
            fit = sources[-1]
            sources[-1] = dataclasses.replace(fit, n_trees=fit.n_trees + shard["n_trees"])
    return sources


def _load_part(
    directory: str, first_tree: int, listed_sha256: str, estimators: Mapping[str, type]
) -> tuple[ForestPart, Any]:
    """On a worker: a shard's model directory, loaded and checked (again the shard the model
    lists: a shard grown again after its worker died is read again, and must not have changed),
    as the forest's part, and its estimator without its trees (what the client keeps of a
    forest on the workers: its bin mapper and seed, for a merged forest's fits)."""
    check_listed(Path(directory), read_manifest(directory), listed_sha256)
    forest = reading.load(directory, estimators)
    trees = [est.tree_ for est in forest.estimators_]
    part = ForestPart(
        first_tree, forest._forest, trees, leaf_targets=getattr(forest, "leaf_targets_", None)
    )
    del forest.estimators_
    forest._forest = None
    if part.leaf_targets is not None:
        forest.leaf_targets_ = None  # kept with the shard's trees, as a fitted one keeps them
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

"""Model files of forests kept on the workers: a directory of shards, each a model of its own.

    model/
      manifest.json    format "dasktrees-sharded-model": the estimator's class, its trees, and
                       per shard its directory, trees, first tree and the checksum of its
                       manifest; the forest's out-of-bag score and curve; its own checksum
      shard-00000/     a complete model directory (``manifest.json``, ``arrays.npz``) of the
      shard-00001/     shard's trees, written by the worker that holds the shard
      ...

A shard is read with every check of a model (``reading.load``), and its manifest must be the one
the top manifest lists: a shard modified, replaced, dropped or added is refused before its trees
are built. This module owns the top manifest and the directory; writing and reading the shards
where they live is the estimators' (``estimators.sharded_models``).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .format import (
    MANIFEST,
    SHARDED_FORMAT,
    Manifest,
    manifest_checksum,
    replace_directory,
    sync_directory,
    write_manifest,
)
from .integrity import read_manifest

SHARDED_FORMAT_VERSION = 1
# What the top manifest lists of each shard.
_SHARD_FIELDS = {"directory", "n_trees", "first_tree", "part_first_tree", "manifest_sha256"}
# What every shard of a forest holds alike (manifest fields, and arrays by their checksums); the
# fits of a merged forest, only the first.
_SHARED_FIELDS = ("estimator", "params", "feature_names", "classes", "fitted", "bins")
_SHARED_ARRAYS = ("bin_edges", "bin_values")
_MERGED_SHARED_FIELDS = _SHARED_FIELDS[:4]


def shard_directory(k: int) -> str:
    """The directory of shard ``k`` within a sharded model."""
    return f"shard-{k:05d}"


def _json_float(value: float) -> float | str:
    """A float as JSON holds it: NaN and infinities (no JSON number) as their text."""
    return value if math.isfinite(value) else str(value)


def write_sharded(
    path: Path,
    estimator: str,
    fitted: dict[str, float],
    oob_curve: list[float] | None,
    write_shards: Callable[[Path], list[dict[str, Any]]],
    merged: bool = False,
    interval_scores: tuple[list[float], list[int]] | None = None,
) -> None:
    """Write a sharded model at ``path``, atomically (``format.replace_directory``):
    ``write_shards(directory)`` writes the shards into the new directory and returns their
    entries (``directory``, ``n_trees``, ``first_tree``, ``manifest_sha256``), then the top
    manifest is written.

    Parameters
    ----------
    path : Path
    estimator : str
        The estimator's class name.
    fitted : dict
        The forest's out-of-bag scores (``format.OOB_SCORES``) it has.
    oob_curve : list of float or None
    write_shards : callable
    merged : bool
        The forest merges fits (``merge_forests``): its shards' bins and seeds may differ.
    interval_scores : (values, counts) or None
        A regression forest's ``oob_interval_scores_`` (``conformal.ConformalScores``).
    """

    def fill(directory: Path) -> None:
        shards = write_shards(directory)
        # A shard task run twice (its worker died) may leave its temporary sibling behind.
        for leftover in directory.glob(".*"):
            shutil.rmtree(leftover, ignore_errors=True)
        manifest: Manifest = {
            "format": SHARDED_FORMAT,
            "format_version": SHARDED_FORMAT_VERSION,
            "estimator": estimator,
            "merged": merged,
            "n_trees": sum(s["n_trees"] for s in shards),
            "shards": shards,
            "fitted": {name: _json_float(value) for name, value in fitted.items()},
            "oob_curve": None if oob_curve is None else [_json_float(v) for v in oob_curve],
            "interval_scores": None
            if interval_scores is None
            else {"values": interval_scores[0], "counts": interval_scores[1]},
        }
        manifest["manifest_sha256"] = manifest_checksum(manifest)
        write_manifest(directory, manifest)
        sync_directory(directory)

    replace_directory(path, fill)


def check_listed(directory: Path, shard_manifest: Manifest, listed_sha256: str) -> None:
    """Refuse a shard whose (checked) manifest is not the one its model lists: modified,
    replaced, or another model's."""
    if shard_manifest["manifest_sha256"] != listed_sha256:
        raise ValueError(
            f"{directory / MANIFEST}: not the shard the model lists (its manifest's checksum "
            "differs): the shard was modified or replaced"
        )


def read_sharded_manifest(path: str | os.PathLike) -> Manifest | None:
    """The checked top manifest of the sharded model at ``path``, or None for a model of one
    directory (``integrity.read_manifest`` checks that one).

    Raises
    ------
    ValueError
        The manifest is modified, corrupt or inconsistent, or a shard's manifest is not the one
        it lists (each shard's own manifest is read and checked here; its arrays are checked
        when it is loaded).
    """
    directory = Path(path)
    file = directory / MANIFEST
    try:
        manifest = json.loads(file.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None  # not sharded, or not a model: ``read_manifest`` says which
    if not isinstance(manifest, dict) or manifest.get("format") != SHARDED_FORMAT:
        return None
    if manifest.get("format_version") != SHARDED_FORMAT_VERSION:
        raise ValueError(
            f"{file}: format_version {manifest.get('format_version')!r} of a sharded model; "
            f"this dasktrees reads {SHARDED_FORMAT_VERSION}"
        )
    if manifest.get("manifest_sha256") != manifest_checksum(manifest):
        raise ValueError(f"{file}: checksum mismatch: the manifest was modified or is corrupt")
    if not isinstance(manifest.get("merged"), bool):
        raise ValueError(f"{file}: 'merged' must be true or false")
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not shards:
        raise ValueError(f"{file}: 'shards' must be a non-empty list")
    first = 0
    common = None
    for k, shard in enumerate(shards):
        if not isinstance(shard, dict) or set(shard) != _SHARD_FIELDS:
            fields = ", ".join(sorted(_SHARD_FIELDS))
            raise ValueError(f"{file}: shard {k} must be listed with the fields {fields}")
        if shard["directory"] != shard_directory(k) or shard["first_tree"] != first:
            raise ValueError(f"{file}: shard {k} is listed out of order")
        if not (directory / shard["directory"]).is_dir():
            raise ValueError(f"{file}: shard {k} ({shard['directory']}) is missing")
        shard_manifest = read_manifest(directory / shard["directory"])
        check_listed(directory / shard["directory"], shard_manifest, shard["manifest_sha256"])
        if shard_manifest["estimator"] != manifest.get("estimator"):
            raise ValueError(f"{file}: shard {k} holds a {shard_manifest['estimator']}")
        if shard_manifest["trees"]["n_trees"] != shard["n_trees"]:
            raise ValueError(f"{file}: shard {k} holds another number of trees than listed")
        # Parts of one forest: the same parameters, columns, classes and bins in every shard.
        if manifest.get("merged") is True:
            shared = [shard_manifest[name] for name in _MERGED_SHARED_FIELDS]
        else:
            shared = [shard_manifest[name] for name in _SHARED_FIELDS]
            shared += [shard_manifest["arrays"][name]["sha256"] for name in _SHARED_ARRAYS]
        if common is not None and shared != common:
            raise ValueError(f"{file}: shard {k} is not of the same forest as shard 0")
        common = shared
        first += shard["n_trees"]
    if first != manifest.get("n_trees"):
        raise ValueError(f"{file}: the shards' trees do not add up to 'n_trees'")
    extra = sorted(
        p.name for p in directory.iterdir() if p.is_dir() and p.name.startswith("shard-")
    )
    if extra != [s["directory"] for s in shards]:
        raise ValueError(f"{directory}: its shard directories are not the ones its manifest lists")
    return manifest

"""Tables in and out of the ``dasktrees`` command: formats, reading, splitting, writing.

Every table is a dask dataframe whose partitions are read where they are used, by the workers:
a file larger than memory is read partition by partition, and no table travels inside a task
graph through the scheduler:

    CSV / Parquet path or glob   --read_table--> dask dataframe --split--> train, test
    builtin dataset --read_builtin-/  (each partition a task that loads the dataset and slices it)
    predictions (dask frame)  --write_table--> one CSV file or a Parquet dataset directory,
                                               written under a temporary name, then renamed
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .datasets import builtin_layout, builtin_rows

# A dask dataframe (``dask.dataframe.DataFrame``).
DaskFrame = Any


def data_format(path: str | os.PathLike) -> str | None:
    """ "csv" or "parquet" from a path's extension (a directory is a Parquet dataset); None if
    neither."""
    lowered = str(path).lower()
    if lowered.endswith((".csv", ".csv.gz")):
        return "csv"
    if lowered.endswith((".parquet", ".pq")) or os.path.isdir(path):
        return "parquet"
    return None


def path_problems(key: str, path: str) -> list[tuple[str, str]]:
    """What is wrong with an input path, as (config key, message) pairs: an unknown format, or
    no file matching it."""
    if data_format(path) is None:
        return [(key, f"cannot tell the format of {path!r}: expected .csv or .parquet")]
    if not glob.glob(str(path)):
        return [(key, f"no file matches {path!r}")]
    return []


def read_table(path: str, blocksize: Any = None, npartitions: int | None = None) -> DaskFrame:
    """A dask dataframe from a CSV or Parquet path or glob (format from the extension).

    Parameters
    ----------
    path : str
        A file, a glob, or a Parquet dataset directory.
    blocksize : int or str, optional
        Bytes per partition (dask's default for Parquet, 64 MB for CSV).
    npartitions : int, optional
        Repartition to this many partitions.
    """
    import dask.dataframe as dd

    if data_format(path) == "csv":
        frame = dd.read_csv(path, blocksize=blocksize or "64MB")
    else:
        frame = dd.read_parquet(path, blocksize=blocksize) if blocksize else dd.read_parquet(path)
    if npartitions is not None:
        frame = frame.repartition(npartitions=npartitions)
    return frame


def read_builtin(name: str, npartitions: int) -> DaskFrame:
    """The builtin dataset ``name`` as a dask dataframe of ``npartitions`` partitions, each read
    by the task that computes it (``datasets.builtin_rows``), never embedded in a graph.

    The columns and the number of rows come from one task too (with a client, on a worker).
    The partitions are the rows ``dd.from_pandas(frame, npartitions, sort=False)`` cuts (the
    frame's index is its row numbers), with the same divisions, so that ``split`` draws the
    same test rows as when the table was sent with the graph.
    """
    import dask
    import dask.dataframe as dd
    import pandas as pd

    meta, n_rows = dask.delayed(builtin_layout, pure=True)(name).compute()
    # The cut of an index alone: no table built or sent.
    rows = pd.DataFrame(index=pd.RangeIndex(n_rows))
    divisions = dd.from_pandas(rows, npartitions=npartitions, sort=False).divisions
    starts = list(divisions[:-1])
    stops = [*starts[1:], n_rows]
    return dd.from_map(
        builtin_rows,
        [name] * len(starts),
        starts,
        stops,
        meta=meta,
        divisions=divisions,
        label=f"builtin-{name}",
        enforce_metadata=False,
    )


def read_train(data: Any) -> DaskFrame:
    """The training table of a config's ``data`` section (before the test split), as a dask
    dataframe: a builtin dataset (``{"builtin": name}``) or a CSV / Parquet path."""
    if isinstance(data.train, dict):
        return read_builtin(data.train["builtin"], data.npartitions or 2)
    return read_table(data.train, data.blocksize, data.npartitions)


def split(data: Any, frame: DaskFrame, seed: int) -> tuple[DaskFrame, DaskFrame | None]:
    """(train, test) dask dataframes for a config's ``data`` section: the test file, a random
    fraction of ``frame`` (``data.test.seed``, else ``seed``), or no test set (None)."""
    test = data.test
    if test is None:
        return frame, None
    if test.path is not None:
        return frame, read_table(test.path, data.blocksize, data.npartitions)
    seed = seed if test.seed is None else test.seed
    return tuple(frame.random_split([1.0 - test.fraction, test.fraction], random_state=seed))


def is_replaceable(path: Path) -> bool:
    """Whether ``write_table`` may write over ``path``: nothing there, a file, or a directory of
    Parquet parts (what it writes) and nothing else."""
    if not path.exists() or path.is_file():
        return True
    return all(p.is_file() and p.suffix == ".parquet" for p in path.iterdir())


def write_table(frame: DaskFrame, path: str | os.PathLike) -> None:
    """Write a dask dataframe to ``path``: one CSV file (gzipped for ``.csv.gz``) or a Parquet
    dataset directory, through a temporary sibling renamed when complete, so that ``path`` is
    never half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        if data_format(path) == "csv":
            compression = "gzip" if path.name.endswith(".gz") else None
            frame.to_csv(
                str(work / path.name), single_file=True, index=False, compression=compression
            )
            os.replace(work / path.name, path)
            work.rmdir()
        else:
            frame.to_parquet(str(work), write_index=False)
            if path.exists():
                shutil.rmtree(path) if path.is_dir() else path.unlink()
            os.replace(work, path)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise

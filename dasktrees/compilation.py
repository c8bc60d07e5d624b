"""Compiling the kernels before the first fit: ``warmup`` on a machine, ``WarmupPlugin`` on a
cluster's workers, and ``dask worker --preload dasktrees.compilation`` (``docs/deployment.md``)."""

from .estimators.warmup import WarmupPlugin, WarmupReport, dask_setup, warmup

__all__ = ["WarmupPlugin", "WarmupReport", "dask_setup", "warmup"]

"""The Dask side of dasktrees: clients, binned partitions, tree tasks and reductions."""

"""Arrays a task keeps from tree to tree for the work of each tree.

Growing and encoding a tree fill scratch arrays of up to megabytes: the split search's
histograms, the bitset table, the encoder's split fields and per-node quantities. Dask's worker
processes return freed memory to the system at once (their nannies set
``MALLOC_TRIM_THRESHOLD_``), so arrays allocated afresh for every tree had their pages faulted
in again for every tree, and encoding a tree on a worker ran several times slower than in a
plain process (docs/benchmarks.md, "Decisions the measurements drove"). A task's
``grower.Workspace`` holds one ``Buffers``, which hands out views of arrays it keeps, by name.
"""

import math

import numpy as np


class Buffers:
    """Arrays kept by name, handed out as views (``empty``, ``table``)."""

    def __init__(self):
        self._arrays = {}

    def empty(self, name, shape, dtype):
        """An uninitialised array of ``shape`` and ``dtype`` (C-contiguous), a view of the one
        kept as ``name``: valid until the next call for ``name``."""
        # math.prod, not np.prod: this runs some twenty times a tree, and numpy's reductions
        # of a short tuple cost more than the work they measure (docs/benchmarks.md).
        dtype = np.dtype(dtype)
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(map(int, shape))
        size = math.prod(shape)
        kept = self._arrays.get(name)
        if kept is None or kept.dtype != dtype or kept.size < size:
            kept = self._arrays[name] = np.empty(max(size, 1), dtype=dtype)
        return kept[:size].reshape(shape)

    def zeros(self, name, shape, dtype=np.float64):
        """``empty``, filled with zeros."""
        array = self.empty(name, shape, dtype)
        array.fill(0)
        return array

    def table(self, name, min_rows, row_shape, dtype):
        """A C-contiguous array of rows of ``row_shape``: every row the array kept as ``name``
        has room for, at least ``min_rows`` (a table that grew for one tree starts the next at
        that size; ``keep`` the grown one)."""
        row_size = math.prod(row_shape)
        kept = self._arrays.get(name)
        rows = 0 if kept is None or kept.dtype != np.dtype(dtype) else kept.size // row_size
        return self.empty(name, (max(min_rows, rows), *row_shape), dtype)

    def keep(self, name, array):
        """Keep the C-contiguous ``array`` as ``name``'s (a table grown by its user)."""
        self._arrays[name] = array.reshape(-1)

    def arrays(self):
        """The arrays kept (views of them handed out may be live)."""
        return list(self._arrays.values())


def scratch_array(buffers, name, shape, dtype):
    """``buffers.empty(name, shape, dtype)``, or a new array when ``buffers`` is None."""
    if buffers is None:
        return np.empty(shape, dtype=dtype)
    return buffers.empty(name, shape, dtype)

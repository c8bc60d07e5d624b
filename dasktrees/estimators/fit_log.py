"""What a forest's fit prints with ``verbose`` (scikit-learn's levels: 0 silent, more says more).

``verbose=1``: a line as each stage of the fit ends (the data binned, the trees grown, cut,
their leaves' targets, the out-of-bag results), with its seconds. ``verbose>=2``: also a line
each time a task's trees arrive (``train.report_progress``), as scikit-learn's forests print a
line a tree from ``verbose=2``. Lines go to standard output, as scikit-learn's do.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from ..distributed.train import current_progress, report_progress


class FitLog:
    """The lines of one fit.

    Parameters
    ----------
    verbose : int
        The estimator's ``verbose``.
    name : str
        The estimator's class name, at the start of each line.
    """

    def __init__(self, verbose: int, name: str):
        self.verbose = int(verbose)
        self.name = name
        self._start = self._last = time.perf_counter()

    def stage(self, message: str) -> None:
        """A stage ended: ``message`` and its seconds (with ``verbose >= 1``)."""
        now = time.perf_counter()
        if self.verbose >= 1:
            print(f"[dasktrees] {self.name}: {message} ({now - self._last:.2f} s)", flush=True)
        self._last = now

    def done(self) -> None:
        """The fit ended: its total seconds."""
        if self.verbose >= 1:
            elapsed = time.perf_counter() - self._start
            print(f"[dasktrees] {self.name}: fitted in {elapsed:.2f} s", flush=True)

    @contextlib.contextmanager
    def trees(self) -> Iterator[None]:
        """Within the block, with ``verbose >= 2``, a line as each task's trees arrive (and
        whatever reported progress before, such as the command's bar, still reports it)."""
        outer = current_progress()
        if self.verbose < 2:
            yield
            return
        start = time.perf_counter()

        def report(done: int, total: int) -> None:
            elapsed = time.perf_counter() - start
            print(f"[dasktrees] {self.name}: {done} of {total} trees ({elapsed:.2f} s)", flush=True)
            if outer is not None:
                outer(done, total)

        with report_progress(report):
            yield

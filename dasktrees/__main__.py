"""``python -m dasktrees``: the ``dasktrees`` command."""

from .cli import console

console()

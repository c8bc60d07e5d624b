"""``python -m dasktrees``: the ``dasktrees`` command."""

from .command.cli import console

console()

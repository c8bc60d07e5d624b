"""The builtin datasets of the ``dasktrees`` command, by name (``docs/experiments.md``)."""

from .command.datasets import BUILTIN, builtin_target, load_builtin

__all__ = ["BUILTIN", "builtin_target", "load_builtin"]

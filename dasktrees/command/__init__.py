"""The ``dasktrees`` command: experiment files, builtin datasets, tables in and out, runs, and
their MLflow tracking."""

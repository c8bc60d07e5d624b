"""The command's error for a bad config or bad arguments: a module of its own, with no imports,
so that ``dasktrees --help`` needs nothing else (``cli``)."""


class ConfigError(Exception):
    """An invalid config: ``problems`` lists ``(dotted_key, message)`` pairs."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__("\n".join(f"{key}: {message}" for key, message in self.problems))

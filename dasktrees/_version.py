"""The package's version, in a module of its own: modules that record it (model files, run
directories) import it without importing the package's estimators."""

__version__ = "0.1.0"

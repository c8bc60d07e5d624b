"""The single-tree learner: histograms, split search, growth, flat trees."""

from .tree import Tree

__all__ = ["Tree"]

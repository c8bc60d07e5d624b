"""The learner: features to bin codes, which rows each tree draws, and one tree grown from them
(histograms, split search, growth, flat trees and the compact state a task ships)."""

from .tree import Tree

__all__ = ["Tree"]

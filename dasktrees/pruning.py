"""Choosing how much to prune a tree: ``select_ccp_alpha`` (cost-complexity pruning's alpha by
cross-validation) and ``reduced_error_prune`` (``docs/pruning.md``)."""

from .estimators.pruning import candidate_alphas, reduced_error_prune, select_ccp_alpha

__all__ = ["candidate_alphas", "reduced_error_prune", "select_ccp_alpha"]

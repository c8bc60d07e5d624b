"""The fitted forest: trees packed for prediction, routing, votes, out-of-bag and loss kernels,
exact sums, the node table, quantiles, SHAP values and standard errors."""

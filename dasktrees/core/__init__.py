"""Shared basics every stage reads: dtypes and bin constants, counter-based random numbers,
validation of local inputs, the table of parameters, impurity formulas, and the kernel cache."""

"""Fitted trees in other forms: text, if-then rules and Graphviz DOT (``text``), and the
equivalent scikit-learn estimators (``scikit_learn``)."""

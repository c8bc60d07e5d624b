"""Export: a fitted tree as indented text, if-then rules or Graphviz DOT, read from its flat arrays.

Everything here reads ``Tree``'s arrays and the bin mapper's categories, never the kernels: a
categorical split's bitset holds bin codes, turned back into category names through
``BinMapper.categories_`` / ``category_bins_`` (a bin shared by a run of neighbouring
categories, beyond ``max_bins``, stands for all of them). Missing values (NaN, and categories not
seen in ``fit``) are written on the side they go, so that rules stay exact on any input:
``Rule.matches`` evaluates a rule's own conditions on raw X and routes every row as the tree
does.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ..core.dtypes import TREE_LEAF
from ..core.validation import check_single_output
from ..learner.binning import BinMapper
from ..learner.tree import Tree
from ..modelfile.format import estimator_kind

__all__ = ["Condition", "Rule", "apply_rules", "export_graphviz", "export_rules", "export_text"]

# What the node impurity is, by criterion ("gain_ratio" chooses splits by gain ratio but a node's
# impurity is its entropy).
_IMPURITY_NAMES = {
    "gini": "gini",
    "entropy": "entropy",
    "log_loss": "entropy",
    "gain_ratio": "entropy",
    "misclassification": "misclassification",
    "squared_error": "squared_error",
    "poisson": "poisson",
}


@dataclasses.dataclass(frozen=True)
class Condition:
    """What one feature must satisfy: a numeric interval or a set of categories, and whether
    missing values satisfy it too.

    Attributes
    ----------
    feature : int
        Column index in X.
    name : str
        Feature name used in the text.
    low, high : float
        Numeric features: the condition holds for ``low < x <= high``; ``-inf`` / ``+inf``
        when unbounded.
    categories : tuple or None
        Categorical features: the known categories that satisfy the condition, in the bin
        mapper's order; None for numeric features.
    known : tuple
        Categorical features: every category seen in ``fit``; any other value is missing.
    missing : bool
        Whether missing values (NaN, and for categorical features unseen categories) satisfy
        the condition.
    """

    feature: int
    name: str
    low: float = -np.inf
    high: float = np.inf
    categories: tuple | None = None
    known: tuple = ()
    missing: bool = False

    @property
    def is_categorical(self) -> bool:
        # The methods below test ``self.categories is not None`` itself: mypy narrows it.
        return self.categories is not None

    def intersect(self, other: Condition) -> Condition:
        """The condition that holds where both hold (same feature)."""
        if self.categories is not None:
            # other tests the same feature, so it is categorical as well.
            kept = set(other.categories)  # type: ignore[arg-type]
            categories = tuple(c for c in self.categories if c in kept)
            return dataclasses.replace(
                self, categories=categories, missing=self.missing and other.missing
            )
        return dataclasses.replace(
            self,
            low=max(self.low, other.low),
            high=min(self.high, other.high),
            missing=self.missing and other.missing,
        )

    def _allows_every_value(self) -> bool:
        if self.categories is not None:
            return len(self.categories) == len(self.known)
        return self.low == -np.inf and self.high == np.inf

    def _allows_no_value(self) -> bool:
        if self.categories is not None:
            return len(self.categories) == 0
        return self.low >= self.high

    def is_always_true(self) -> bool:
        """True when every value, missing included, satisfies the condition."""
        return self.missing and self._allows_every_value()

    def describe(self, decimals: int = 3, missing_word: str | None = "missing") -> str:
        """The condition as text, e.g. ``2.5 < x <= 7.0``, ``Outlook in {sunny}`` or
        ``x <= 2.5 or missing`` (``missing_word`` is what follows "or"; None leaves the
        missing values unsaid)."""
        if self._allows_no_value():
            return f"{self.name} is missing" if self.missing else f"{self.name} in {{}}"
        if self._allows_every_value():
            return f"{self.name} is not missing"
        values = self._describe_values(decimals)
        return f"{values} or {missing_word}" if self.missing and missing_word else values

    def _describe_values(self, decimals: int) -> str:
        if self.categories is not None:
            # Whichever of the allowed and the excluded categories is the shorter list.
            allowed = set(self.categories)
            excluded = [c for c in self.known if c not in allowed]
            if len(self.categories) <= len(excluded):
                return f"{self.name} in {_category_set(self.categories)}"
            return f"{self.name} not in {_category_set(excluded)}"
        if self.low == -np.inf:
            return f"{self.name} <= {_number(self.high, decimals)}"
        if self.high == np.inf:
            return f"{self.name} > {_number(self.low, decimals)}"
        return f"{_number(self.low, decimals)} < {self.name} <= {_number(self.high, decimals)}"

    def matches(self, values: ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each value satisfies the condition.

        Parameters
        ----------
        values : array-like or pandas Series, shape (n_samples,)
            Raw values of this feature (numbers with NaN, or categories).

        Returns
        -------
        ndarray of bool, shape (n_samples,)
        """
        if self.is_categorical:
            series = pd.Series(values, copy=False).astype(object)
            allowed = series.isin(self.categories).to_numpy()
            missing = ~series.isin(self.known).to_numpy()
        else:
            # float64 whatever the input: float32 widens exactly, and the kernels compare the
            # float64 thresholds the same way.
            x = pd.Series(values, copy=False).to_numpy(dtype=np.float64, na_value=np.nan)
            missing = np.isnan(x)
            allowed = (x > self.low) & (x <= self.high)
        return allowed | (missing & self.missing)


@dataclasses.dataclass
class Rule:
    """One leaf of a tree as an if-then rule: ``IF conditions THEN target = prediction``.

    Attributes
    ----------
    constraints : list of Condition
        One per feature tested on the path to the leaf (conditions on the same feature merged:
        intervals intersected, category sets intersected), in the order the path first tests
        them.
    prediction : object
        The leaf's class (classifier, as in ``classes_``) or mean target (regressor).
    support : int
        Training rows (with positive weight) reaching the leaf: ``tree_.n_node_samples``.
    weighted_support : float
        Their weight: ``tree_.weighted_n_node_samples`` (sample and class weights, bootstrap
        counts in a forest).
    purity : float
        Classifier: the share of the predicted class in the leaf's weight. Regressor: the leaf's
        impurity, the weighted variance of the target around ``prediction`` (0 is pure; in
        squared target units).
    leaf : int
        Node index of the leaf in ``tree_``.
    target : str
        Name shown after THEN.
    is_classifier : bool
    decimals : int
        Decimals of the numbers in the text.
    show_missing : bool
        Whether the text says where missing values go (``constraints`` always knows).
    """

    constraints: list[Condition]
    prediction: object
    support: int
    weighted_support: float
    purity: float
    leaf: int
    target: str = "class"
    is_classifier: bool = True
    decimals: int = 3
    show_missing: bool = True

    @property
    def conditions(self) -> list[str]:
        """The constraints as text, e.g. ``["Outlook in {sunny}", "x <= 2.5 or x is missing"]``."""
        return [
            c.describe(self.decimals, f"{c.name} is missing" if self.show_missing else None)
            for c in self.constraints
        ]

    def matches(self, X: ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each row of X satisfies every condition of the rule.

        Parameters
        ----------
        X : array-like or pandas DataFrame, shape (n_samples, n_features)
            Raw features, columns in the training order.

        Returns
        -------
        ndarray of bool, shape (n_samples,)
        """
        table = _as_table(X)
        matched = np.ones(table.shape[0], dtype=bool)
        for condition in self.constraints:
            matched &= condition.matches(_column(table, condition.feature))
        return matched

    def __str__(self) -> str:
        conditions = [f"({text})" if " or " in text else text for text in self.conditions]
        premise = " AND ".join(conditions) if conditions else "TRUE"
        if self.is_classifier:
            outcome, measure = self.prediction, f"purity {self.purity:.2f}"
        else:
            outcome = _number(self.prediction, self.decimals)
            measure = f"variance {_number(self.purity, self.decimals)}"
        support = f"support {self.support}"
        if self.weighted_support != self.support:
            support += f", weight {_number(self.weighted_support, self.decimals)}"
        return f"IF {premise} THEN {self.target} = {outcome} ({support}, {measure})"


def export_rules(
    estimator: BaseEstimator,
    feature_names: Sequence[str] | None = None,
    tree_index: int | None = None,
    decimals: int = 3,
    target_name: str | None = None,
    show_missing: bool = True,
) -> list[Rule]:
    """One if-then rule per leaf of a fitted tree, conditions merged per feature.

    Parameters
    ----------
    estimator : DecisionTreeClassifier, DecisionTreeRegressor or a fitted forest
    feature_names : sequence of str, default=None
        One name per feature; default ``feature_names_in_`` or ``x0, x1, ...``.
    tree_index : int, default=None
        Which of a forest's ``estimators_`` (required for a forest; None or 0 for a tree).
    decimals : int, default=3
        Decimals of thresholds and values in the text (the constraints keep exact values).
    target_name : str, default=None
        Name shown after THEN; default "class" (classifier) or "value" (regressor).
    show_missing : bool, default=True
        Say in the text where missing values go. Where no missing value reached a node in
        training they follow the heavier child, so a tree fitted on complete data still routes
        them; False reads the rules as textbooks write them, for complete data (the rules'
        ``matches`` is exact either way).

    Returns
    -------
    list of Rule
        In the order of the leaves from left to right. Every input row satisfies exactly one
        rule, the one of the leaf the tree routes it to.
    """
    source = _source(estimator, feature_names, tree_index, decimals)
    tree = source.tree
    if target_name is None:
        target_name = "class" if source.classes is not None else "value"
    rules = []
    # (node, its path's conditions by feature)
    stack: list[tuple[int, dict[int, Condition]]] = [(0, {})]
    while stack:
        node, path = stack.pop()
        if tree.children_left[node] == TREE_LEAF:
            rule = _rule(source, node, path, str(target_name), decimals)
            rule.show_missing = show_missing
            rules.append(rule)
            continue
        left, right = _split_conditions(source, node)
        # Right pushed first, so that the left subtree comes out (and is listed) first.
        stack.append((tree.children_right[node], _narrowed(path, right)))
        stack.append((tree.children_left[node], _narrowed(path, left)))
    return rules


def apply_rules(rules: Sequence[Rule], X: ArrayLike) -> np.ndarray:
    """Index in ``rules`` of the rule each row of X satisfies.

    Parameters
    ----------
    rules : list of Rule
        Rules that do not overlap, such as those of one tree (``export_rules``).
    X : array-like or pandas DataFrame, shape (n_samples, n_features)
        Raw features, columns in the training order.

    Returns
    -------
    ndarray of int64, shape (n_samples,)
        -1 for a row no rule covers (never for the complete rule list of a tree).

    Raises
    ------
    ValueError
        When a row satisfies more than one rule.
    """
    table = _as_table(X)
    if not rules:
        return np.full(table.shape[0], -1, dtype=np.int64)
    matched = np.column_stack([rule.matches(table) for rule in rules])
    n_matched = matched.sum(axis=1)
    if (n_matched > 1).any():
        row = int(np.flatnonzero(n_matched > 1)[0])
        raise ValueError(
            f"row {row} satisfies rules {np.flatnonzero(matched[row]).tolist()}: the rules overlap"
        )
    return np.where(n_matched == 1, matched.argmax(axis=1), -1).astype(np.int64)


def export_text(
    estimator: BaseEstimator,
    feature_names: Sequence[str] | None = None,
    tree_index: int | None = None,
    decimals: int = 3,
    show_missing: bool = True,
) -> str:
    """The tree as indented text, one line per branch and per leaf (scikit-learn's layout).

    Each split gives two lines, the condition of its left child then of its right child;
    missing values are named on the side they go (``x <= 2.5 or missing`` / ``x > 2.5``).

    Parameters
    ----------
    estimator : DecisionTreeClassifier, DecisionTreeRegressor or a fitted forest
    feature_names : sequence of str, default=None
        One name per feature; default ``feature_names_in_`` or ``x0, x1, ...``.
    tree_index : int, default=None
        Which of a forest's ``estimators_`` (required for a forest; None or 0 for a tree).
    decimals : int, default=3
        Decimals of thresholds and leaf values.
    show_missing : bool, default=True
        Say where missing values go (see ``export_rules``).

    Returns
    -------
    str
        For example::

            |--- Outlook in {overcast}
            |   |--- class: yes
            |--- Outlook not in {overcast}
            |   |--- ...
    """
    source = _source(estimator, feature_names, tree_index, decimals)
    tree = source.tree
    lines = []
    stack = [(0, 0, None)]  # (node, depth, the condition leading to it; None for the root)
    while stack:
        node, depth, heading = stack.pop()
        if heading is not None:
            lines.append("|   " * (depth - 1) + "|--- " + heading)
        if tree.children_left[node] == TREE_LEAF:
            lines.append("|   " * depth + "|--- " + _leaf_text(source, node, decimals))
            continue
        left, right = _split_conditions(source, node)
        missing = "missing" if show_missing else None
        stack.append((tree.children_right[node], depth + 1, right.describe(decimals, missing)))
        stack.append((tree.children_left[node], depth + 1, left.describe(decimals, missing)))
    return "\n".join(lines) + "\n"


def export_graphviz(
    estimator: BaseEstimator,
    feature_names: Sequence[str] | None = None,
    tree_index: int | None = None,
    class_names: Sequence[str] | None = None,
) -> str:
    """The tree as Graphviz DOT source (render it with ``dot -Tpng``).

    One box per node: the test (true goes to the left child, missing values included when the
    test says "or missing"), the impurity, the training rows, the value (weighted class counts
    or mean target) and, for classifiers, the class. Every edge is labelled True or False.

    Parameters
    ----------
    estimator : DecisionTreeClassifier, DecisionTreeRegressor or a fitted forest
    feature_names : sequence of str, default=None
        One name per feature; default ``feature_names_in_`` or ``x0, x1, ...``.
    tree_index : int, default=None
        Which of a forest's ``estimators_`` (required for a forest; None or 0 for a tree).
    class_names : sequence of str, default=None
        Classifiers only: one name per class, in the order of ``classes_`` (the default).

    Returns
    -------
    str
    """
    source = _source(estimator, feature_names, tree_index, 3)
    class_labels = _class_labels(source, class_names)
    tree = source.tree
    lines = [
        "digraph Tree {",
        'node [shape=box, fontname="helvetica"] ;',
        'edge [fontname="helvetica"] ;',
    ]
    stack = [(0, -1, True)]  # (node, parent, is a left child)
    while stack:
        node, parent, is_left = stack.pop()
        label = "\\n".join(_node_label_lines(source, node, class_labels))
        lines.append(f'{node} [label="{label}"] ;')
        if parent >= 0:
            angle, text = (45, "True") if is_left else (-45, "False")
            lines.append(
                f'{parent} -> {node} [labeldistance=2.5, labelangle={angle}, headlabel="{text}"] ;'
            )
        if tree.children_left[node] != TREE_LEAF:
            stack.append((tree.children_right[node], node, False))
            stack.append((tree.children_left[node], node, True))
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---- what the exports share ---------------------------------------------------------------------


class _Source(NamedTuple):
    """The fitted tree to export and what its arrays need to be read."""

    tree: Tree  # expanded (``Tree.expanded``)
    mapper: BinMapper
    names: list  # one str per feature
    classes: np.ndarray | None  # the classes, None for a regressor
    impurity_name: str


def _source(
    estimator: Any, feature_names: Sequence[str] | None, tree_index: int | None, decimals: int
) -> _Source:
    """Check the arguments (errors name the parameter) and pick the tree to export."""
    kind = estimator_kind(estimator)
    if kind is not None and kind[0] == "forest":
        check_is_fitted(estimator, "estimators_")
        n_trees = len(estimator.estimators_)
        if (
            isinstance(tree_index, bool)
            or not isinstance(tree_index, numbers.Integral)
            or not 0 <= tree_index < n_trees
        ):
            raise ValueError(
                f"tree_index must be an int in [0, {n_trees}) to pick one of the forest's "
                f"estimators_, got {tree_index!r}"
            )
        fitted = estimator.estimators_[tree_index]
    elif kind is not None:
        check_is_fitted(estimator, "tree_")
        if tree_index is not None and (isinstance(tree_index, bool) or tree_index != 0):
            raise ValueError(f"tree_index must be None or 0 for a single tree, got {tree_index!r}")
        fitted = estimator
    else:
        raise TypeError(
            "estimator must be a dasktrees tree or forest, got " + type(estimator).__name__
        )
    if isinstance(decimals, bool) or not isinstance(decimals, numbers.Integral) or decimals < 0:
        raise ValueError(f"decimals must be an int >= 0, got {decimals!r}")
    check_single_output(estimator, "a text export")
    return _Source(
        tree=fitted.tree_.expanded(),
        mapper=fitted.bin_mapper_,
        names=_feature_names(fitted, feature_names),
        classes=getattr(fitted, "classes_", None),
        impurity_name=_IMPURITY_NAMES.get(fitted.criterion, "impurity"),
    )


def _feature_names(fitted, feature_names):
    n_features = fitted.n_features_in_
    if feature_names is None:
        names = getattr(fitted, "feature_names_in_", None)
        if names is None:
            return [f"x{j}" for j in range(n_features)]
        return [str(name) for name in names]
    if isinstance(feature_names, str) or len(feature_names) != n_features:
        got = "a str" if isinstance(feature_names, str) else f"{len(feature_names)} names"
        raise ValueError(f"feature_names must give one name per feature ({n_features}), got {got}")
    return [str(name) for name in feature_names]


def _class_labels(source, class_names):
    if source.classes is None:
        if class_names is not None:
            raise ValueError("class_names applies to classifiers only; this is a regressor")
        return None
    if class_names is None:
        return [str(c) for c in source.classes]
    if isinstance(class_names, str) or len(class_names) != len(source.classes):
        raise ValueError(
            f"class_names must give one name per class ({len(source.classes)}, in the order "
            f"of classes_), got {class_names!r}"
        )
    return [str(c) for c in class_names]


def _split_conditions(source, node):
    """The conditions that send a row to the left and to the right child of ``node``."""
    tree = source.tree
    f = int(tree.feature[node])
    missing_left = bool(tree.missing_go_to_left[node])
    base = Condition(feature=f, name=source.names[f])
    if not tree.is_categorical[node]:
        t = float(tree.threshold[node])
        return (
            dataclasses.replace(base, high=t, missing=missing_left),
            dataclasses.replace(base, low=t, missing=not missing_left),
        )
    known = tuple(source.mapper.categories_[f])
    goes_left = _bits(tree.categorical_bitsets[tree.bitset_idx[node]])
    # A category goes where its bin goes: all the categories of a shared bin together.
    bins = source.mapper.category_bins_[f]
    left = tuple(c for c, b in zip(known, bins) if goes_left[b])
    right = tuple(c for c, b in zip(known, bins) if not goes_left[b])
    return (
        dataclasses.replace(base, categories=left, known=known, missing=missing_left),
        dataclasses.replace(base, categories=right, known=known, missing=not missing_left),
    )


def _bits(bitset):
    """A 256-bit set (uint32 words, code c is bit c % 32 of word c // 32) as 256 bools."""
    return np.unpackbits(
        np.ascontiguousarray(bitset, dtype="<u4").view(np.uint8), bitorder="little"
    )


def _narrowed(path, condition):
    """The path's conditions (feature -> Condition, in first-test order) and one more."""
    path = dict(path)
    previous = path.get(condition.feature)
    path[condition.feature] = condition if previous is None else previous.intersect(condition)
    return path


def _rule(source, leaf, path, target_name, decimals):
    tree = source.tree
    value = tree.value[leaf]
    constraints = [c for c in path.values() if not c.is_always_true()]
    if source.classes is not None:
        k = int(np.argmax(value))  # as the estimators' predict
        prediction, purity = source.classes[k], float(value[k])
    else:
        prediction, purity = float(value[0]), float(tree.impurity[leaf])
    return Rule(
        constraints=constraints,
        prediction=prediction,
        support=int(tree.n_node_samples[leaf]),
        weighted_support=float(tree.weighted_n_node_samples[leaf]),
        purity=purity,
        leaf=int(leaf),
        target=target_name,
        is_classifier=source.classes is not None,
        decimals=decimals,
    )


def _leaf_text(source, node, decimals):
    value = source.tree.value[node]
    if source.classes is not None:
        return f"class: {source.classes[int(np.argmax(value))]}"
    return f"value: {_number(value[0], decimals)}"


def _node_label_lines(source, node, class_labels):
    tree = source.tree
    lines = []
    if tree.children_left[node] != TREE_LEAF:
        lines.append(_split_conditions(source, node)[0].describe())
    lines.append(f"{source.impurity_name} = {_number(tree.impurity[node], 3)}")
    lines.append(f"samples = {int(tree.n_node_samples[node])}")
    if class_labels is None:
        lines.append(f"value = {_number(tree.value[node, 0], 3)}")
    else:
        counts = tree.value[node] * tree.weighted_n_node_samples[node]
        lines.append("value = [" + ", ".join(_number(c, 3) for c in counts) + "]")
        lines.append(f"class = {class_labels[int(np.argmax(tree.value[node]))]}")
    return [line.replace("\\", "\\\\").replace('"', '\\"') for line in lines]


def _number(value, decimals):
    """A float rounded to ``decimals``, without padding zeros: 2.5, 7.0, 0.333."""
    return str(round(float(value), decimals))


def _category_set(categories):
    return "{" + ", ".join(str(c) for c in categories) + "}"


def _as_table(X: ArrayLike) -> pd.DataFrame | np.ndarray:
    return X if isinstance(X, pd.DataFrame) else np.asarray(X)


def _column(X, j):
    return X.iloc[:, j] if isinstance(X, pd.DataFrame) else X[:, j]

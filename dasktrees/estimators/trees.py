"""scikit-learn style tree estimators: validate, bin, delegate to the grower, set attributes."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy.sparse import csr_matrix
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.utils import Bunch, check_random_state
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_consistent_length, check_is_fitted, validate_data

from ..core import class_outputs
from ..core.params import (
    check_monotonic_data,
    check_multi_output,
    check_tree_params,
    friedman_as_squared_error,
)
from ..core.threads import uses_n_jobs
from ..core.validation import (
    check_2d,
    check_poisson_target,
    check_predict_columns,
    check_sample_weight,
    check_target,
)
from ..forest import treeshap
from ..learner.binning import BinMapper
from ..learner.cost_complexity import pruning_path
from ..learner.grower import grow_tree
from ..modelfile.writing import save as save_model


class BaseDecisionTree(BaseEstimator):
    """Shared fit and predict logic of the tree estimators (not for direct use)."""

    def __init__(
        self,
        *,
        criterion,
        splitter="best",
        max_depth=None,
        min_samples_split=2,
        min_samples_leaf=1,
        min_weight_fraction_leaf=0.0,
        max_features=None,
        random_state=None,
        max_leaf_nodes=None,
        min_impurity_decrease=0.0,
        ccp_alpha=0.0,
        max_bins=255,
        categorical_features=None,
        min_samples_category=1,
        categorical_order="node",
        monotonic_cst=None,
        n_jobs=None,
    ):
        self.criterion = criterion
        self.splitter = splitter
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_weight_fraction_leaf = min_weight_fraction_leaf
        self.max_features = max_features
        self.random_state = random_state
        self.max_leaf_nodes = max_leaf_nodes
        self.min_impurity_decrease = min_impurity_decrease
        self.ccp_alpha = ccp_alpha
        self.max_bins = max_bins
        self.categorical_features = categorical_features
        self.min_samples_category = min_samples_category
        self.categorical_order = categorical_order
        self.monotonic_cst = monotonic_cst
        self.n_jobs = n_jobs

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.categorical = True
        tags.input_tags.sparse = True
        return tags

    def _fit(self, X, y, sample_weight, is_classifier):
        X = check_2d(X)
        validate_data(self, X, y, reset=True, skip_check_array=True)
        n_samples, n_features = X.shape
        if n_samples < 2:
            raise ValueError(f"X has {n_samples} sample; at least 2 are needed to fit a tree")
        y = check_target(y, n_samples, is_classifier, multi_output=True)
        check_consistent_length(X, y)
        n_outputs = 1 if y.ndim == 1 else y.shape[1]
        names = getattr(self, "feature_names_in_", None)
        params = check_tree_params(self, n_samples, n_features, is_classifier, names)
        if not is_classifier and self.criterion == "poisson":
            check_poisson_target(y.min(), y.sum())
        weights = check_sample_weight(sample_weight, n_samples)
        n_values = n_outputs  # what a node holds: target columns, or classes
        if is_classifier:
            check_classification_targets(y)
            n_classes: Any
            if n_outputs == 1:
                self.classes_, y_codes = np.unique(y, return_inverse=True)
                n_classes = n_values = len(self.classes_)
                y_fit = y_codes.astype(np.float64)
            else:  # as scikit-learn's: a list of classes, an array of their counts
                self.classes_, y_fit = class_outputs.encode_columns(y)
                n_classes = np.array([len(c) for c in self.classes_], dtype=np.intp)
                n_values = n_outputs * class_outputs.block_size(n_classes)
            self.n_classes_ = n_classes
            if self.class_weight is not None:
                weights = weights * compute_sample_weight(self.class_weight, y)
        else:
            y_fit = y
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        # Rows of zero weight take no part in the fit, not even in placing the bin edges.
        in_fit = np.flatnonzero(weights > 0)
        X_in_fit = (
            X
            if len(in_fit) == n_samples
            else (X.iloc[in_fit] if isinstance(X, pd.DataFrame) else X[in_fit])
        )
        self.bin_mapper_ = BinMapper(
            max_bins=self.max_bins,
            categorical_features=self.categorical_features,
            random_state=seed,
        ).fit(X_in_fit, row_ids=in_fit)
        check_multi_output(
            params, self.criterion, self.bin_mapper_.is_categorical_, n_outputs, names
        )
        check_monotonic_data(
            params, self.bin_mapper_.is_categorical_, n_values if is_classifier else 1, names
        )
        codes = self.bin_mapper_.transform(X)
        self.max_features_ = params.max_features
        self.n_outputs_ = n_outputs
        self.tree_ = grow_tree(
            codes, y_fit, weights, self.bin_mapper_.kernel_arrays(), params, n_values, seed
        )
        return self

    @uses_n_jobs
    def cost_complexity_pruning_path(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Bunch:
        """The minimal cost-complexity pruning path of the tree grown on X and y with these
        parameters but ``ccp_alpha=0``, as scikit-learn's method returns it.

        Returns
        -------
        Bunch with
        ccp_alphas : ndarray of float64
            0, then the effective alpha of each weakest-link step down to the root: pruning at
            ``ccp_alpha=ccp_alphas[i]`` gives the subtree after the last step with that alpha.
        impurities : ndarray of float64
            Total leaf impurity of the subtree after each step (weighted by the leaves'
            share of the total weight).
        """
        est = clone(self).set_params(ccp_alpha=0.0).fit(X, y, sample_weight=sample_weight)
        return pruning_path(est.tree_)

    def _encode(self, X):
        check_is_fitted(self, "tree_")
        X = check_2d(X)
        check_predict_columns(self, X)
        return self.bin_mapper_.encode(X)

    @uses_n_jobs
    def apply(self, X: ArrayLike) -> np.ndarray:
        """Index of the leaf each sample ends up in: ndarray of int64, shape (n_samples,)."""
        encoded = self._encode(X)
        return self.tree_.apply(encoded)

    @uses_n_jobs
    def decision_path(self, X: ArrayLike) -> csr_matrix:
        """Sparse (CSR) indicator of the nodes each sample goes through,
        shape (n_samples, n_nodes)."""
        encoded = self._encode(X)
        return self.tree_.decision_path(encoded)

    def get_depth(self) -> int:
        """Depth of the tree: the longest root-to-leaf path (0 for a single leaf)."""
        check_is_fitted(self, "tree_")
        return self.tree_.max_depth

    def get_n_leaves(self) -> int:
        """Number of leaves of the tree."""
        check_is_fitted(self, "tree_")
        return self.tree_.n_leaves

    @property
    def feature_importances_(self) -> np.ndarray:
        """Mean decrease in impurity per feature, normalized to sum to one."""
        check_is_fitted(self, "tree_")
        return self.tree_.compute_feature_importances()

    def to_sklearn(self) -> BaseEstimator:
        """The equivalent ``sklearn.tree`` estimator, with our nodes in its ``tree_``: it
        predicts as this tree on float32-representable input. Refuses categorical features
        (``ValueError``). See ``dasktrees.sklearn_export.tree_to_sklearn``."""
        # Imported here: scikit-learn's forests and trees would slow importing dasktrees.
        from ..export.scikit_learn import tree_to_sklearn

        return tree_to_sklearn(self)

    @uses_n_jobs
    def shap_values(self, X: ArrayLike) -> np.ndarray:
        """Exact path-dependent TreeSHAP values (Lundberg et al. 2020): each feature's share of
        each row's prediction, as for the forests (``RandomForestRegressor.shap_values``).

        Returns
        -------
        ndarray of shape (n_samples, n_features) for a regressor ((n_samples, n_features, k)
        on k target columns) and (n_samples, n_features, n_classes) for a classifier (on k
        class columns, a list of k such arrays); with ``shap_expected_value_`` each row sums
        to its prediction (class probabilities for a classifier).
        """
        encoded = self._encode(X)
        values = treeshap.shap_values(treeshap.explained_table([self.tree_]), encoded)
        if hasattr(self, "classes_") and self.n_outputs_ > 1:
            return class_outputs.column_blocks(values, self.n_classes_)
        return values if hasattr(self, "classes_") or self.n_outputs_ > 1 else values[:, :, 0]

    @property
    def shap_expected_value_(self) -> float | np.ndarray:
        """What the SHAP values add to: the leaves' values weighted by their training cover (a
        float for a regressor, ndarray (k,) on k target columns, ndarray (n_classes,) for a
        classifier, a list of k such arrays on k class columns)."""
        check_is_fitted(self, "tree_")
        expected = treeshap.explained_table([self.tree_]).expected_values()[0]
        if hasattr(self, "classes_") and self.n_outputs_ > 1:
            return class_outputs.column_blocks(expected, self.n_classes_)
        return expected if hasattr(self, "classes_") or self.n_outputs_ > 1 else float(expected[0])

    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted tree to the model directory ``path``; ``dasktrees.load`` reads it.

        Parameters
        ----------
        path : str or os.PathLike
            Directory to create (an existing model directory there is replaced). The format,
            a JSON manifest and ``.npz`` arrays, is described in docs/models.md.
        """
        save_model(self, path)


class DecisionTreeClassifier(ClassifierMixin, BaseDecisionTree):
    """A CART classification tree grown on binned features.

    Parameters
    ----------
    criterion : {"gini", "entropy", "log_loss", "gain_ratio", "misclassification"}
        Impurity of a node; ``"gain_ratio"`` chooses splits by C4.5's gain ratio (entropy gain
        over split information). Entropies are in bits.
    splitter : {"best", "random"}, default="best"
        ``"random"`` evaluates one uniformly drawn threshold per candidate feature (extra-trees).
    max_depth : int, default=None
    min_samples_split : int or float, default=2
    min_samples_leaf : int or float, default=1
    min_weight_fraction_leaf : float, default=0.0
    max_features : {"sqrt", "log2"}, int, float or None, default=None
        Features drawn at each node; as in scikit-learn, more are drawn while all drawn ones are
        constant in the node.
    random_state : int, RandomState or None, default=None
    max_leaf_nodes : int, default=None
        Grow best-first up to this many leaves.
    min_impurity_decrease : float, default=0.0
    ccp_alpha : float >= 0, default=0.0
        Minimal cost-complexity pruning after growth, as in scikit-learn: weakest links are
        collapsed while their effective alpha is at most ``ccp_alpha`` (docs/pruning.md).
        ``dasktrees.pruning.select_ccp_alpha`` chooses it by cross-validation.
    class_weight : dict, "balanced" or None, default=None
    max_bins : int, default=255
        Bins per feature (numeric quantiles or categories), plus one for missing values.
    categorical_features : list of str or int, bool mask, or None
        Columns to treat as categorical, besides pandas category / object / string / bool ones.
    min_samples_category : int >= 1, default=1
        Categories with fewer rows than this in a node are not split on their own there: they
        are pooled with the node's missing values and go where those go. 1 splits every
        category on its own, as classical CART and C4.5 do (and their textbook examples); the
        forests default to 5, where subset splits on rare categories fit noise
        (docs/trees.md).
    categorical_order : {"node", "tree"}, default="node"
        How the categories of a categorical feature are ordered before the cuts of that order
        are scanned: "node" by the node's own rows, at every node (exact for two classes and
        regression: Breiman et al. 1984, Fisher 1958); "tree" once for the whole tree, by its
        rows (the in-bag rows of a forest's tree), so that deeper nodes cut a fixed order, as
        ranger's ``respect.unordered.factors="order"`` does once per forest. The forests default
        to "tree" (docs/trees.md: measured on twelve real tables).

    Attributes
    ----------
    tree_ : dasktrees.tree.Tree
    classes_ : ndarray of shape (n_classes,)
    n_classes_ : int
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when X had string column names.
    max_features_ : int
    bin_mapper_ : dasktrees.binning.BinMapper
    feature_importances_ : ndarray of shape (n_features,)
    """

    def __init__(
        self,
        *,
        criterion="gini",
        splitter="best",
        max_depth=None,
        min_samples_split=2,
        min_samples_leaf=1,
        min_weight_fraction_leaf=0.0,
        max_features=None,
        random_state=None,
        max_leaf_nodes=None,
        min_impurity_decrease=0.0,
        ccp_alpha=0.0,
        class_weight=None,
        max_bins=255,
        categorical_features=None,
        min_samples_category=1,
        categorical_order="node",
        monotonic_cst=None,
        n_jobs=None,
    ):
        super().__init__(
            criterion=criterion,
            splitter=splitter,
            max_depth=max_depth,
            min_samples_split=min_samples_split,
            min_samples_leaf=min_samples_leaf,
            min_weight_fraction_leaf=min_weight_fraction_leaf,
            max_features=max_features,
            random_state=random_state,
            max_leaf_nodes=max_leaf_nodes,
            min_impurity_decrease=min_impurity_decrease,
            ccp_alpha=ccp_alpha,
            max_bins=max_bins,
            categorical_features=categorical_features,
            min_samples_category=min_samples_category,
            categorical_order=categorical_order,
            monotonic_cst=monotonic_cst,
            n_jobs=n_jobs,
        )
        self.class_weight = class_weight

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # several class columns, multilabel ones among them
        tags.classifier_tags.multi_label = True
        return tags

    @uses_n_jobs
    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> DecisionTreeClassifier:
        """Grow the tree on X (numpy array or pandas DataFrame) and class labels y."""
        return self._fit(X, y, sample_weight, is_classifier=True)

    @uses_n_jobs
    def predict_proba(self, X: ArrayLike) -> np.ndarray | list[np.ndarray]:
        """Class probabilities: weighted class fractions of each sample's leaf,
        shape (n_samples, n_classes); on k class columns a list of k such arrays."""
        encoded = self._encode(X)
        proba = self.tree_.predict(encoded)
        return (
            proba if self.n_outputs_ == 1 else class_outputs.column_blocks(proba, self.n_classes_)
        )

    @uses_n_jobs
    def predict_log_proba(self, X: ArrayLike) -> np.ndarray | list[np.ndarray]:
        """Logarithm of ``predict_proba``."""
        proba = self.predict_proba(X)
        return log_proba(proba) if self.n_outputs_ == 1 else [log_proba(p) for p in proba]

    @uses_n_jobs
    def predict(self, X: ArrayLike) -> np.ndarray:
        """Most probable class of each sample: shape (n_samples,), or (n_samples, k) on k class
        columns (of the first column's classes' dtype, as scikit-learn's)."""
        leaves = self.apply(X)
        if self.n_outputs_ > 1:  # per node, cheaper than per sample
            return class_outputs.column_labels(self.tree_.value, self.classes_)[leaves]
        node_class = np.argmax(self.tree_.value, axis=1)
        return self.classes_.take(node_class[leaves])


class DecisionTreeRegressor(RegressorMixin, BaseDecisionTree):
    """A CART regression tree grown on binned features, with the squared error or the Poisson
    deviance criterion.

    Parameters are those of ``DecisionTreeClassifier`` except ``criterion``
    (``"squared_error"``, or ``"poisson"`` for non-negative targets of positive sum) and
    ``class_weight`` (none).

    ``y`` may have k target columns (multi-output regression, as scikit-learn's): one tree
    predicts them all, its splits chosen by the mean of the outputs' squared errors, and
    ``predict`` returns (n_samples, k). Such a tree takes no Poisson criterion, monotonic
    constraints or categorical features, and is not exported as text (docs/trees.md,
    "Several target columns").
    """

    def __init__(
        self,
        *,
        criterion="squared_error",
        splitter="best",
        max_depth=None,
        min_samples_split=2,
        min_samples_leaf=1,
        min_weight_fraction_leaf=0.0,
        max_features=None,
        random_state=None,
        max_leaf_nodes=None,
        min_impurity_decrease=0.0,
        ccp_alpha=0.0,
        max_bins=255,
        categorical_features=None,
        min_samples_category=1,
        categorical_order="node",
        monotonic_cst=None,
        n_jobs=None,
    ):
        super().__init__(
            criterion=friedman_as_squared_error(criterion),
            splitter=splitter,
            max_depth=max_depth,
            min_samples_split=min_samples_split,
            min_samples_leaf=min_samples_leaf,
            min_weight_fraction_leaf=min_weight_fraction_leaf,
            max_features=max_features,
            random_state=random_state,
            max_leaf_nodes=max_leaf_nodes,
            min_impurity_decrease=min_impurity_decrease,
            ccp_alpha=ccp_alpha,
            max_bins=max_bins,
            categorical_features=categorical_features,
            min_samples_category=min_samples_category,
            categorical_order=categorical_order,
            monotonic_cst=monotonic_cst,
            n_jobs=n_jobs,
        )

    @uses_n_jobs
    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> DecisionTreeRegressor:
        """Grow the tree on X (numpy array or pandas DataFrame) and numeric targets y."""
        return self._fit(X, y, sample_weight, is_classifier=False)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    @uses_n_jobs
    def predict(self, X: ArrayLike) -> np.ndarray:
        """Mean target of each sample's leaf: ndarray of shape (n_samples,), or (n_samples, k)
        for a tree fitted on k target columns."""
        encoded = self._encode(X)
        values = self.tree_.predict(encoded)
        return values if self.n_outputs_ > 1 else values[:, 0]


def log_proba(proba):
    """``np.log(proba)``, minus infinity where a probability is 0, without a warning (a tree's
    and a forest's ``predict_log_proba``)."""
    with np.errstate(divide="ignore"):
        return np.log(proba)

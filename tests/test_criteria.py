"""The classical worked examples of docs/algorithms.md, reproduced to 0.001: Quinlan's (1986) golf
days, Marsland's (2014) evening activities, two binary splits of 29 positives and 35 negatives."""

import numpy as np
import pytest

from dasktrees import DecisionTreeClassifier
from dasktrees.criteria import gain_ratio, information_gain, node_impurity, split_information

GOLF_GAINS = {  # attribute: (information gain, gain ratio)
    "Outlook": (0.247, 0.156),
    "Humidity": (0.152, 0.152),
    "Windy": (0.048, 0.049),
    "Temperature": (0.029, 0.019),
    "Day": (0.940, 0.247),
}


def test_golf_entropy(golf):
    assert node_impurity(golf.Play) == pytest.approx(0.940, abs=1e-3)


@pytest.mark.parametrize("attribute", sorted(GOLF_GAINS))
def test_golf_information_gain_and_gain_ratio(golf, attribute):
    gain, ratio = GOLF_GAINS[attribute]
    assert information_gain(golf.Play, golf[attribute]) == pytest.approx(gain, abs=1e-3)
    assert gain_ratio(golf.Play, golf[attribute]) == pytest.approx(ratio, abs=1e-3)


def test_golf_day_split_information_is_log2_14(golf):
    assert split_information(golf.Day) == pytest.approx(np.log2(14))


def test_activity_gains(activity):
    y = activity.Activity
    assert node_impurity(y) == pytest.approx(1.6855, abs=1e-3)
    assert information_gain(y, activity.Party) == pytest.approx(1.0, abs=1e-3)
    assert information_gain(y, activity.Deadline) == pytest.approx(0.5345, abs=1e-3)
    assert information_gain(y, activity.Lazy) == pytest.approx(0.21, abs=1e-3)


def test_activity_second_level(activity):
    rest = activity[activity.Party == "No"]
    assert node_impurity(rest.Activity) == pytest.approx(1.371, abs=1e-3)
    assert information_gain(rest.Activity, rest.Deadline) == pytest.approx(0.971, abs=1e-3)
    assert information_gain(rest.Activity, rest.Lazy) == pytest.approx(0.420, abs=1e-3)


def _from_counts(*groups):
    """y and x from groups of (positives, negatives): group g becomes x == g."""
    y, x = [], []
    for g, (pos, neg) in enumerate(groups):
        y += [1] * pos + [0] * neg
        x += [g] * (pos + neg)
    return np.array(y), np.array(x)


def test_flight_delays():
    y, x1 = _from_counts((21, 5), (8, 30))
    assert node_impurity(y) == pytest.approx(0.9937, abs=1e-3)
    assert information_gain(y, x1) == pytest.approx(0.2659, abs=1e-3)
    assert node_impurity(y) - information_gain(y, x1) == pytest.approx(0.7278, abs=1e-3)
    y, x2 = _from_counts((18, 27), (11, 8))
    assert information_gain(y, x2) == pytest.approx(0.0195, abs=1e-3)
    assert node_impurity(y) - information_gain(y, x2) == pytest.approx(0.9742, abs=1e-3)


def test_gini_and_misclassification_gains(golf):
    # Hand computed: Gini(S) = 1 - (9/14)^2 - (5/14)^2; Outlook's branches sunny 2/5 yes,
    # overcast 4/4, rain 3/5.
    gini_s = 1 - (9 / 14) ** 2 - (5 / 14) ** 2
    gini_children = 5 / 14 * (1 - 0.4**2 - 0.6**2) * 2
    assert information_gain(golf.Play, golf.Outlook, "gini") == pytest.approx(
        gini_s - gini_children
    )
    miss_children = 5 / 14 * 0.4 + 5 / 14 * 0.4
    assert information_gain(golf.Play, golf.Outlook, "misclassification") == pytest.approx(
        5 / 14 - miss_children
    )


def test_weights_act_as_counts(golf):
    doubled = golf.loc[golf.index.repeat(2)]
    weighted = information_gain(golf.Play, golf.Outlook, sample_weight=np.full(14, 2.0))
    assert weighted == pytest.approx(information_gain(doubled.Play, doubled.Outlook))


@pytest.mark.parametrize("bad", ["gain_ratio", "squared_error", "gin"])
def test_unknown_criterion(golf, bad):
    with pytest.raises(ValueError, match="criterion"):
        information_gain(golf.Play, golf.Outlook, bad)


def test_golf_tree_splits_on_outlook_overcast(golf):
    X = golf[["Temperature", "Outlook", "Humidity", "Windy"]]
    tree = DecisionTreeClassifier(criterion="entropy", random_state=0).fit(X, golf.Play)
    root_feature = tree.tree_.feature[0]
    assert X.columns[root_feature] == "Outlook"
    # The binary split overcast | {rain, sunny} with gain 0.226 bits.
    assert tree.tree_.is_categorical[0] == 1
    assert tree.tree_.impurity[0] == pytest.approx(0.940, abs=1e-3)
    assert tree.feature_importances_.argmax() == root_feature
    left = tree.tree_.children_left[0]
    right = tree.tree_.children_right[0]
    w = tree.tree_.weighted_n_node_samples
    gain = (
        tree.tree_.impurity[0]
        - (w[left] * tree.tree_.impurity[left] + w[right] * tree.tree_.impurity[right]) / w[0]
    )
    assert gain == pytest.approx(0.226, abs=1e-3)
    categories = tree.bin_mapper_.categories_[root_feature]
    mapper_bins = tree.bin_mapper_.category_bins_[root_feature]
    bitset = tree.tree_.categorical_bitsets[tree.tree_.bitset_idx[0]]
    went_left = {c for c, b in zip(categories, mapper_bins) if (bitset[b >> 5] >> (b & 31)) & 1}
    assert went_left in ({"overcast"}, {"rain", "sunny"})
    assert tree.score(X, golf.Play) == 1.0


@pytest.mark.parametrize("criterion", ["entropy", "gini", "gain_ratio"])
def test_activity_tree_splits_on_party(activity, criterion):
    X = activity[["Deadline", "Party", "Lazy"]]
    tree = DecisionTreeClassifier(criterion=criterion, random_state=0).fit(X, activity.Activity)
    assert X.columns[tree.tree_.feature[0]] == "Party"
    assert tree.score(X, activity.Activity) == 1.0

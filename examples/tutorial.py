"""The classical worked examples of docs/algorithms.md, step by step (a short tutorial).

    python examples/tutorial.py

1. Play golf (Quinlan 1986): entropy of the 14 days, information gain and C4.5's gain ratio of
   each attribute, and what the gain ratio does to the day itself, an attribute with 14 values.
2. The party / study / pub / TV example (Marsland 2014, ch. 12): ID3 picks Party at the root,
   then Deadline.
3. A CART tree grown by dasktrees on the golf days, with native categorical splits, printed as
   text and as if-then rules.
4. A random forest on ISLR Carseats: held-out and out-of-bag R^2, importances, and "bragging"
   (the median of the trees instead of their mean, Bühlmann 2003).
"""

import numpy as np

import dasktrees
from dasktrees.criteria import gain_ratio, information_gain, node_impurity, split_information
from dasktrees.datasets import load_builtin

GOLF = load_builtin("golf")
ACTIVITY = load_builtin("activity")


def golf():
    print("1. Play golf: H(Play) = %.3f bits" % node_impurity(GOLF.Play))
    print(f"   {'attribute':<12} {'gain':>6} {'split info':>10} {'gain ratio':>10}")
    for attribute in ("Day", "Outlook", "Temperature", "Humidity", "Windy"):
        x = GOLF[attribute]
        print(
            f"   {attribute:<12} {information_gain(GOLF.Play, x):6.3f} "
            f"{split_information(x):10.3f} {gain_ratio(GOLF.Play, x):10.3f}"
        )
    print(
        "   Day has the largest gain: every day is pure, a split that learns nothing. The gain\n"
        "   ratio divides it by log2(14) = 3.807 bits of split information, from 0.940 down to\n"
        "   0.247, but on 14 rows that is still the largest ratio: an identifier has to be left\n"
        "   out of the data, as the tree below does. Among the others Outlook wins either way.\n"
    )


def activity():
    y = ACTIVITY.Activity
    print("2. Party, study, pub or TV: H(Activity) = %.3f bits" % node_impurity(y))
    for attribute in ("Party", "Deadline", "Lazy"):
        print(f"   gain({attribute}) = {information_gain(y, ACTIVITY[attribute]):.3f}")
    rest = ACTIVITY[ACTIVITY.Party == "No"]
    print("   ID3 splits on Party; on the Party = No branch:")
    for attribute in ("Deadline", "Lazy"):
        print(f"     gain({attribute}) = {information_gain(rest.Activity, rest[attribute]):.3f}")
    print("   so Deadline comes next, as in ID3's tree.\n")


def cart_on_golf():
    X = GOLF.drop(columns=["Day", "Play"]).astype("category")
    tree = dasktrees.DecisionTreeClassifier(criterion="entropy", random_state=0).fit(X, GOLF.Play)
    print("3. A CART tree (binary splits, categories grouped) on the golf days:")
    print(dasktrees.export_text(tree, show_missing=False))
    print("   read as rules, one per leaf:")
    for rule in dasktrees.export_rules(tree, target_name="Play", show_missing=False):
        print(f"   {rule}")
    print()


def forest_on_carseats():
    try:
        data = load_builtin("carseats")
    except ImportError:
        print('4. (skipped: pip install "dasktrees[datasets]" for ISLR Carseats)')
        return
    y = data.pop("Sales").to_numpy(dtype=float)
    from sklearn.metrics import r2_score
    from sklearn.model_selection import train_test_split

    X_train, X_test, y_train, y_test = train_test_split(data, y, test_size=0.25, random_state=0)
    print("4. Random forest on Carseats (400 stores, Sales), m = p/3 features per split:")
    for aggregation in ("mean", "median"):
        forest = dasktrees.RandomForestRegressor(
            n_estimators=300,
            max_features=1 / 3,
            oob_score=True,
            aggregation=aggregation,
            random_state=0,
        ).fit(X_train, y_train)
        print(
            f"   {aggregation:>6} of the trees: test R^2 "
            f"{r2_score(y_test, forest.predict(X_test)):.3f}"
        )
    print(f"   out-of-bag R^2 (mean of the out-of-bag trees): {forest.oob_score_:.3f}")
    top = np.argsort(forest.feature_importances_)[::-1][:3]
    print("   most important: " + ", ".join(data.columns[i] for i in top))


if __name__ == "__main__":
    golf()
    activity()
    cart_on_golf()
    forest_on_carseats()

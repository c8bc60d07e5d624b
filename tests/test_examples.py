"""The examples that run in seconds run here, so that they keep working."""

import runpy
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name, monkeypatch, tmp_path, *argv):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [name, *argv])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")


def test_tutorial(monkeypatch, tmp_path, capsys):
    run_example("tutorial.py", monkeypatch, tmp_path)
    out = capsys.readouterr().out
    assert "H(Play) = 0.940 bits" in out
    assert "gain(Party) = 1.000" in out
    assert "|--- Outlook in {overcast}" in out
    assert "IF Outlook in {overcast} THEN Play = yes (support 4, purity 1.00)" in out
    assert "test R^2" in out


def test_hitters_pruning(monkeypatch, tmp_path, capsys):
    run_example("hitters_pruning.py", monkeypatch, tmp_path, "--plot", "cv.png")
    out = capsys.readouterr().out
    assert "one-standard-error rule" in out and "THEN log(Salary) =" in out
    assert (tmp_path / "cv.png").stat().st_size > 10_000


def test_shap_summary(monkeypatch, tmp_path, capsys):
    args = ("--rows", "2000", "--trees", "5", "--plot-rows", "500", "--plot", "shap.png")
    run_example("shap_summary.py", monkeypatch, tmp_path, *args)
    out = capsys.readouterr().out
    assert "mean |SHAP value| over 2000 diamonds" in out
    error = float(out.split("prediction, max error ")[1].split()[0])
    assert error < 1e-9
    # Size drives the price: carat or a dimension first, the depth and table ratios last.
    ranking = [line.split()[1] for line in out.splitlines() if line.startswith("  ")]
    assert len(ranking) == 9 and ranking[0] in {"carat", "x", "y", "z"}
    assert {"depth", "table"} <= set(ranking[-4:])
    assert "summary plot of " in out  # about 500: a dask sample takes a fraction
    assert (tmp_path / "shap.png").stat().st_size > 10_000


def test_tuning(monkeypatch, tmp_path, capsys):
    run_example(
        "tuning.py", monkeypatch, tmp_path, "--rows", "2000", "--trees", "5", "--trials", "3"
    )
    out = capsys.readouterr().out
    assert out.count("out-of-bag R^2") == 3 + 1  # each trial, and the best one
    assert "best params: max_features " in out and "min_samples_leaf " in out
    r2 = float(out.split("test R^2 ")[1].split()[0])
    assert 0.9 < r2 <= 1.0
    assert "on 400 held-out diamonds" in out

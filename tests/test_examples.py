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

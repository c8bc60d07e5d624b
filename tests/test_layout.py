"""The module map of docs/design.md lists every module of the package, and no other."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dasktrees"
DESIGN = ROOT / "docs" / "design.md"

# A row of the map: its first cell is a module path in backticks.
MAP_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")


def module_map():
    """Module paths listed in the table of the "Module map" section, in order."""
    lines = DESIGN.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Module map")
    modules = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        match = MAP_ROW.match(line)
        if match:
            modules.append(match.group(1))
    return modules


def package_modules():
    return {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts
    }


def test_module_map_lists_every_module_once():
    listed = module_map()
    assert len(listed) == len(set(listed)), "a module is listed twice"
    assert set(listed) == package_modules(), (
        f"not in the map: {sorted(package_modules() - set(listed))}; "
        f"in the map but not in the package: {sorted(set(listed) - package_modules())}"
    )

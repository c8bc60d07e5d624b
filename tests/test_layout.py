"""The layout of the package: docs/design.md's module map lists every module and no other; no
two modules import each other, even through others or from inside a function; the tree learner
imports nothing above it."""

import ast
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


# ---- imports -------------------------------------------------------------------------------------


def module_name(path):
    """``dasktrees/tree/grower.py`` -> ``dasktrees.tree.grower``; a package's ``__init__.py``
    -> the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path, modules):
    """The package's modules that ``path`` imports anywhere (module level or in a function):
    ``from .x import name`` is module ``x``, or ``x.name`` when that is a module itself."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "dasktrees"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] == "dasktrees":
                found |= {
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                }
    return found - {name}


def import_graph():
    paths = [ROOT / relative for relative in sorted(package_modules())]
    paths = {module_name(path): path for path in paths}
    return {name: imported_modules(path, paths) for name, path in paths.items()}


def test_no_import_cycles():
    graph = import_graph()

    def reach(start):
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(graph.get(module, ()))
        return seen

    reachable = {module: reach(module) for module in graph}
    cycles = sorted(
        (a, b) for a in graph for b in reachable[a] if a < b and a in reachable.get(b, ())
    )
    assert not cycles, f"modules that import each other (directly or through others): {cycles}"


# What the tree learner may import besides itself: dtypes, hashing and impurity formulas.
TREE_MAY_IMPORT = {"dasktrees._dtypes", "dasktrees._random", "dasktrees.criteria"}


def test_the_tree_learner_imports_nothing_above_it():
    def in_learner(name):  # the package, not dasktrees.treeshap
        return name == "dasktrees.tree" or name.startswith("dasktrees.tree.")

    for module, imports in import_graph().items():
        if in_learner(module):
            above = {m for m in imports if not in_learner(m)} - TREE_MAY_IMPORT
            assert not above, f"{module} imports {sorted(above)}"

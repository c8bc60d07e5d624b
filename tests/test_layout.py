"""The layout of the package, as docs/design.md declares it.

* Its "Layers" table puts every module in one layer and says which layers each may import;
  every import of every module (module level or inside a function) stays within those.
* Its "Module map" lists every module once, with the layer the table gives it.
* No two modules import each other, even through others; no two folders either.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dasktrees"
DESIGN = ROOT / "docs" / "design.md"

# A table row whose first cell is a name or a path in backticks: | `x` | ... | or | x | ... |
ROW = re.compile(r"^\|(.+)\|\s*$")
CODE = re.compile(r"`([^`]+)`")


def section_rows(title):
    """The cells of the table rows of the section ``## title`` (header and rule left out)."""
    lines = DESIGN.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"## {title}")
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        match = ROW.match(line)
        if match:
            cells = [cell.strip() for cell in match.group(1).split("|")]
            if set(cells[0]) <= {"-", ":"} or cells[0] in ("layer", "module"):
                continue
            rows.append(cells)
    return rows


def layer_table():
    """``[(layer, paths, may_import)]`` in the table's order, lowest first. A path ending in
    ``/`` is a folder (every module under it), any other a module file."""
    layers = []
    for cells in section_rows("Layers"):
        name = cells[0].strip("`")
        paths = CODE.findall(cells[1])
        may_import = set(CODE.findall(cells[-1]))
        layers.append((name, paths, may_import))
    return layers


def module_map():
    """``{module path: layer}`` from the table of the "Module map" section, checking that no
    module is listed twice."""
    listed = {}
    for cells in section_rows("Module map"):
        path = cells[0].strip("`")
        assert path not in listed, f"{path} is listed twice in the module map"
        listed[path] = cells[1]
    return listed


def package_modules():
    return {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts
    }


def module_name(path):
    """``dasktrees/learner/grower.py`` -> ``dasktrees.learner.grower``; a package's
    ``__init__.py`` -> the package."""
    parts = Path(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of_path():
    """``{module path: layer}`` from the layers table: a module belongs to the layer naming it,
    else to the layer naming the deepest folder that holds it."""
    layers = layer_table()
    owner = {}
    for path in package_modules():
        best = None
        for name, paths, _ in layers:
            for declared in paths:
                if declared == path:
                    best = (len(declared) + 1000, name)
                elif declared.endswith("/") and path.startswith(declared):
                    if best is None or len(declared) > best[0]:
                        best = (len(declared), name)
        owner[path] = best[1] if best else None
    return owner


def imported_modules(path, modules):
    """The package's modules that ``path`` imports anywhere (module level or in a function):
    ``from .x import name`` is module ``x``, or ``x.name`` when that is a module itself."""
    name = module_name(path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse((ROOT / path).read_text(encoding="utf-8"))):
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
    """``{module name: imported module names}`` over every module of the package."""
    paths = {module_name(path): path for path in sorted(package_modules())}
    return {name: imported_modules(path, paths) for name, path in paths.items()}


# ---- the declared order ----------------------------------------------------------------------


def test_each_layer_may_import_only_layers_below_it():
    seen = set()
    for name, paths, may_import in layer_table():
        assert paths, f"layer {name} names no folder or module"
        assert may_import <= seen, (
            f"layer {name} may import {sorted(may_import - seen)}, not below it"
        )
        seen.add(name)


def test_every_module_is_in_a_layer():
    owner = layer_of_path()
    assert not [path for path, layer in owner.items() if layer is None], (
        "modules in no layer of docs/design.md: "
        + str(sorted(path for path, layer in owner.items() if layer is None))
    )


def upward_imports(graph):
    """``[(module, imported module, its layer)]`` for every import the layers table forbids."""
    owner = {module_name(path): layer for path, layer in layer_of_path().items()}
    allowed = {name: may_import | {name} for name, _, may_import in layer_table()}
    return sorted(
        (module, target, owner.get(target))
        for module, targets in graph.items()
        for target in targets
        if owner.get(target) not in allowed[owner[module]]
    )


def test_every_import_follows_the_layers():
    bad = upward_imports(import_graph())
    assert not bad, (
        f"imports the layers of docs/design.md forbid (module, import, its layer): {bad}"
    )


def test_an_upward_import_is_caught():
    # The check itself: a learner module importing an estimator is reported.
    graph = import_graph()
    graph["dasktrees.learner.grower"] = graph["dasktrees.learner.grower"] | {
        "dasktrees.estimators.forests"
    }
    assert upward_imports(graph) == [
        ("dasktrees.learner.grower", "dasktrees.estimators.forests", "estimators")
    ]


def test_module_map_lists_every_module_once_in_its_layer():
    listed = module_map()
    assert set(listed) == package_modules(), (
        f"not in the map: {sorted(package_modules() - set(listed))}; "
        f"in the map but not in the package: {sorted(set(listed) - package_modules())}"
    )
    owner = layer_of_path()
    wrong = {path: (layer, owner[path]) for path, layer in listed.items() if layer != owner[path]}
    assert not wrong, f"module map layer differs from the layers table (map, table): {wrong}"


# ---- no cycles ---------------------------------------------------------------------------------


def cycles(graph):
    def reach(start):
        seen, todo = set(), list(graph[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        return seen

    reachable = {node: reach(node) for node in graph}
    return sorted(
        (a, b) for a in graph for b in reachable[a] if a < b and a in reachable.get(b, ())
    )


def test_no_import_cycles_between_modules():
    found = cycles(import_graph())
    assert not found, f"modules that import each other (directly or through others): {found}"


def test_no_import_cycles_between_folders():
    def folder(name):  # dasktrees.learner.grower -> dasktrees.learner; a top-level module itself
        return ".".join(name.split(".")[:2])

    graph = {}
    for module, targets in import_graph().items():
        graph.setdefault(folder(module), set()).update(
            folder(t) for t in targets if folder(t) != folder(module)
        )
    found = cycles(graph)
    assert not found, f"folders that import each other: {found}"

"""The layout's two rules, read from the source with `ast` (every import: at the top, in a
function, under TYPE_CHECKING): the layers import one way (benchmarks -> lis_tui -> tools ->
isolation), only the TUI modules import textual, and no files import each other in a circle.
A package's `__init__` and the modules inside it are not counted as a circle (it re-exports
them; they take a name from it, which Python has set up before it imports them): the same rule as
the project's before-stop check."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("isolation", "tools", "lis_tui")
LAYERS = {"isolation": 0, "tools": 1, "lis_tui": 2, "benchmarks": 3}
TUI = ("lis_tui/app/",)


def modules() -> dict[str, Path]:
    """Dotted name -> file, for the three packages and the benchmarks."""
    found = {}
    for top in (*PACKAGES, "benchmarks"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `path` imports: `from a.b import c` is a.b.c where c is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and not _nested(name, t))
    return found


def _nested(a: str, b: str) -> bool:
    """One is the other, or a package holding it."""
    return a == b or a.startswith(f"{b}.") or b.startswith(f"{a}.")


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index, low, on, stack, groups, counter = {}, {}, set(), [], [], [0]
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on:
                low[node] = min(low[node], index[child])
    return groups


def test_no_files_import_each_other_in_a_circle():
    assert circles(graph()) == []


def test_the_circle_finder_finds_one():
    """The check above can fail: a made-up pair and a three-step loop are found, a chain is not."""
    edges = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(circles(edges)) == [["a", "b"], ["c", "d", "e"]]


def test_layers_import_one_way_and_only_the_tui_imports_textual():
    wrong, textual = [], []
    known = modules()
    for name, path in known.items():
        layer = LAYERS[name.partition(".")[0]]
        wrong += [f"{name} -> {t}" for t in imports(name, path, known) if LAYERS[t.partition(".")[0]] > layer]
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        uses = any(isinstance(n, ast.Import) and any(a.name.split(".")[0] == "textual" for a in n.names)
                   or isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "textual"
                   for n in ast.walk(tree))
        if uses and name.partition(".")[0] != "benchmarks" and not rel.startswith(TUI):
            textual.append(rel)
    assert wrong == [] and textual == [], (wrong, textual)

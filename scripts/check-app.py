#!/usr/bin/env python3
"""Holds the ECG app to the rules of a client of zerohop (issue 43): its modules do not import
one another in a circle, and it uses zerohop only through zerohop's public names.

Cycles: every import among the package's own modules is an edge, wherever it runs (at module
level, inside a function, under `if TYPE_CHECKING:`) and in whichever form (`from . import x`,
`from .x import y`, `from zerohop_ecg.x import y`, `import zerohop_ecg.x`). `from . import x` is
an edge to the submodule x when there is one, else to the package's __init__; the __init__
importing its submodules to re-export them is an edge like any other. A function-local import
defers a cycle, it does not remove it: the two modules still cannot be understood, tested or
moved apart.

Private names: `import zerohop._x`, `from zerohop import _x`, `from zerohop._zerohop import ...`,
`from zerohop.x import _y`, `zerohop._x` (also through `import zerohop as zh`), `getattr(zerohop,
"_x")`, `importlib.import_module("zerohop._x")`, and any relative import that climbs out of the
package (`from .. import _zerohop`, `from .._zerohop import X`: possible only while the app lived
inside zerohop, at python/zerohop/ecg). Dunders (`zerohop.__version__`) are public.

Usage: scripts/check-app.py [--package DIR] [--name NAME] [-v]. DIR defaults to
apps/ecg/python/zerohop_ecg, or python/zerohop/ecg (`zerohop.ecg`) until the app has moved;
NAME defaults to the dotted name DIR's __init__.py files give it. Exits 1 with each cycle (its
modules in order, and where each import is) and each private use (file:line) otherwise.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "apps" / "ecg" / "python" / "zerohop_ecg"
OLD_APP, OLD_NAME = ROOT / "python" / "zerohop" / "ecg", "zerohop.ecg"
LIBRARY = "zerohop"

MODULE_LEVEL, FUNCTION_LOCAL, TYPE_CHECKING_ONLY = "module-level", "function-local", "TYPE_CHECKING"


@dataclass(frozen=True)
class Site:
    """Where an import is: file, line, and when it runs."""

    path: Path
    line: int
    kind: str

    def __str__(self) -> str:
        return f"{shown(self.path)}:{self.line} ({self.kind})"


@dataclass
class Report:
    name: str
    modules: dict[str, Path]
    # module -> imported module -> the imports that make the edge
    graph: dict[str, dict[str, list[Site]]] = field(default_factory=dict)
    private: list[str] = field(default_factory=list)  # private zerohop uses, each at file:line
    unreadable: list[str] = field(default_factory=list)
    cycles: list[list[str]] = field(default_factory=list)
    circles: list[list[str]] = field(default_factory=list)  # the strongly connected groups

    @property
    def edges(self) -> int:
        return sum(len(deps) for deps in self.graph.values())

    def problems(self) -> list[str]:
        lines = []
        for cycle in self.cycles:
            lines.append("cycle: " + " -> ".join(cycle))
            for a, b in zip(cycle, cycle[1:]):
                sites = ", ".join(map(str, self.graph[a][b]))
                lines.append(f"    {a} -> {b}: {sites}")
        for circle in self.circles:
            if len(circle) > 2:
                lines.append(f"{len(circle)} modules in one circle: {', '.join(circle)}")
        return lines + self.private + self.unreadable


def shown(path: Path) -> str:
    """The path as a developer would open it: relative to the current folder when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def is_library(dotted: str) -> bool:
    return dotted == LIBRARY or dotted.startswith(LIBRARY + ".")


def private_part(dotted: str) -> bool:
    return any(is_private(part) for part in dotted.split(".")[1:])


def module_name(root: Path, name: str, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([name, *parts])


def dotted_name(root: Path) -> str:
    """The import name a package folder has: its name, under each parent holding __init__.py."""
    parts = [root.name]
    parent = root.resolve().parent
    while (parent / "__init__.py").is_file():
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts)


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


Statement = ast.Import | ast.ImportFrom


def imports(node: ast.AST, kind: str = MODULE_LEVEL) -> Iterator[tuple[Statement, str]]:
    """Every import statement under `node`, with when it runs."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node, kind
        return
    if isinstance(node, ast.If) and is_type_checking(node.test):
        for stmt in node.body:
            yield from imports(stmt, TYPE_CHECKING_ONLY)
        for stmt in node.orelse:
            yield from imports(stmt, kind)
        return
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    if isinstance(node, functions) and kind == MODULE_LEVEL:
        kind = FUNCTION_LOCAL
    for child in ast.iter_child_nodes(node):
        yield from imports(child, kind)


def flatten(node: ast.expr) -> str | None:
    """`a.b.c` for a chain of attributes on a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = flatten(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


class Package:
    def __init__(self, root: Path, name: str):
        self.root, self.name = root, name
        files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
        self.modules = {module_name(root, name, p): p for p in files}
        # Extension modules (a stub or a built library beside the sources, no .py): leaves of
        # the graph, since compiled code imports none of the package's Python modules.
        native = (p for p in root.rglob("*") if p.suffix in (".pyi", ".so", ".pyd"))
        self.native = {module_name(root, name, p.with_name(p.name.split(".")[0] + ".py"))
                       for p in native} - set(self.modules)

    def inside(self, dotted: str) -> bool:
        return dotted == self.name or dotted.startswith(self.name + ".")

    def own(self, dotted: str) -> str | None:
        """The package's module that importing `dotted` (a module or a name in one) runs."""
        while dotted and self.inside(dotted):
            if dotted in self.modules:
                return dotted
            dotted = dotted.rpartition(".")[0]
        return None

    def base(self, module: str, level: int) -> str | None:
        """What `level` leading dots mean in `module`; None above the top-level package."""
        is_init = self.modules[module].name == "__init__.py"
        package = module if is_init else module.rpartition(".")[0]
        parts = package.split(".")
        if level - 1 >= len(parts):
            return None
        return ".".join(parts[: len(parts) - (level - 1)])

    def check(self) -> Report:
        report = Report(self.name, self.modules)
        for module, path in self.modules.items():
            report.graph[module] = {}
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            except SyntaxError as e:
                report.unreadable.append(f"{shown(path)}:{e.lineno}: does not parse: {e.msg}")
                continue
            self.check_module(module, path, tree, report)
        report.circles, report.cycles = find_cycles(report.graph)
        return report

    def check_module(self, module: str, path: Path, tree: ast.Module, report: Report) -> None:
        deps = report.graph[module]
        aliases: dict[str, str] = {LIBRARY: LIBRARY}  # names bound to zerohop or a part of it

        def edge(target: str | None, site: Site) -> None:
            if target is not None and target != module:
                sites = deps.setdefault(target, [])
                if site not in sites:
                    sites.append(site)

        def private(line: int, what: str, dotted: str, source: ast.AST, kind: str = "") -> None:
            names = "names" if ", " in dotted else "name"
            report.private.append(
                f"{shown(path)}:{line}: {what} zerohop's private {names} {dotted} "
                f"(`{ast.unparse(source)}`{', ' + kind if kind else ''}): use zerohop's public "
                "API, as any client does"
            )

        for node, kind in imports(tree):
            site = Site(path, node.lineno, kind)
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if self.inside(alias.name):
                        edge(self.own(alias.name), site)
                    elif is_library(alias.name):
                        if private_part(alias.name):
                            private(node.lineno, "imports", alias.name, node, kind)
                        bound = alias.name if alias.asname else LIBRARY
                        aliases[alias.asname or LIBRARY] = bound
                continue
            if node.level:
                base = self.base(module, node.level)
                if base is None:
                    report.private.append(
                        f"{shown(path)}:{node.lineno}: `{ast.unparse(node)}` climbs out of the "
                        f"top-level package {self.name}"
                    )
                    continue
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            names = []
            for alias in node.names:
                full = source if alias.name == "*" else f"{source}.{alias.name}"
                if self.inside(full) and full in self.native:
                    continue
                if self.inside(full) and full in self.modules:
                    edge(full, site)
                elif self.inside(source):
                    edge(self.own(source), site)
                else:
                    names.append(full)
                    if is_library(source) and alias.name != "*":
                        aliases[alias.asname or alias.name] = full
            hidden = [full for full in names if is_library(full) and private_part(full)]
            if hidden:
                private(node.lineno, "imports", ", ".join(hidden), node, kind)
            elif names and node.level:
                report.private.append(
                    f"{shown(path)}:{node.lineno}: `{ast.unparse(node)}` climbs out of the package "
                    f"{self.name}: import {source} by its absolute name"
                )

        for use in ast.walk(tree):
            if isinstance(use, ast.Attribute) and is_private(use.attr):
                target = self.resolve(flatten(use.value), aliases)
                if target is not None and not self.inside(target):
                    private(use.lineno, "uses", f"{target}.{use.attr}", use)
            elif isinstance(use, ast.Call) and use.args:
                func = flatten(use.func) or ""
                first = use.args[0]
                if func == "getattr" and len(use.args) >= 2:
                    target = self.resolve(flatten(first), aliases)
                    attr = use.args[1]
                    if (target is not None and not self.inside(target)
                            and isinstance(attr, ast.Constant) and isinstance(attr.value, str)
                            and is_private(attr.value)):
                        private(use.lineno, "uses", f"{target}.{attr.value}", use)
                elif func.rpartition(".")[2] in ("import_module", "__import__"):
                    if (isinstance(first, ast.Constant) and isinstance(first.value, str)
                            and is_library(first.value) and not self.inside(first.value)
                            and private_part(first.value)):
                        private(use.lineno, "imports", first.value, use)

    def resolve(self, dotted: str | None, aliases: dict[str, str]) -> str | None:
        """The zerohop name `dotted` stands for, through the module's zerohop aliases."""
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head not in aliases:
            return None
        return f"{aliases[head]}.{rest}" if rest else aliases[head]


def find_cycles(graph: dict[str, dict[str, list[Site]]]) -> tuple[list[list[str]], list[list[str]]]:
    """The groups of modules that import one another in a circle (Tarjan), and cycles that
    cover each group's imports: for each import a -> b that no earlier cycle passes, a -> b
    and the shortest way from b back to a, so that every import in a circle is shown."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(graph.get(node, {})):
            if dep not in graph:
                continue
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    groups.sort()

    cycles: list[list[str]] = []
    for group in groups:
        members = set(group)
        covered: set[tuple[str, str]] = set()
        for a in group:
            for b in sorted(graph[a]):
                if b not in members or (a, b) in covered:
                    continue
                # The shortest way back from b to a, breadth-first within the group.
                came_from = {b: b}
                frontier = [b]
                while a not in came_from:
                    following = []
                    for node in frontier:
                        for dep in sorted(graph[node]):
                            if dep in members and dep not in came_from:
                                came_from[dep] = node
                                following.append(dep)
                    frontier = following
                    assert frontier or a in came_from, "a strongly connected group leads back"
                path = [a]
                while path[-1] != b:
                    path.append(came_from[path[-1]])
                cycle = [a, *reversed(path)]
                covered.update(zip(cycle, cycle[1:]))
                cycles.append(cycle)
    return groups, cycles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", type=Path,
                        help=f"the app's package folder (default {APP.relative_to(ROOT)})")
    parser.add_argument("--name",
                        help="its import name (default: from the folder's __init__.py files)")
    parser.add_argument("-v", action="store_true", help="print the import graph")
    args = parser.parse_args(argv)

    root, name = args.package, args.name
    if root is None:
        if APP.is_dir():
            root = APP
        else:
            root, name = OLD_APP, name or OLD_NAME
            print(f"check-app: {APP.relative_to(ROOT)} is not there yet; checking "
                  f"{OLD_APP.relative_to(ROOT)} ({OLD_NAME})", file=sys.stderr)
    if not root.is_dir():
        print(f"check-app: {root} is not a folder", file=sys.stderr)
        return 2
    name = name or dotted_name(root)
    report = Package(root, name).check()

    if args.v:
        for module, deps in sorted(report.graph.items()):
            print(f"{module} -> {' '.join(sorted(deps))}")
    problems = report.problems()
    if problems:
        print(f"{shown(root)} ({name}) breaks the rules of a zerohop client:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        print(f"check-app: {name}: {len(report.modules)} modules, {report.edges} imports, "
              f"{len(report.cycles)} cycle(s), {len(report.private)} private zerohop use(s)",
              file=sys.stderr)
        return 1
    print(f"check-app: {name}: {len(report.modules)} modules, {report.edges} imports, no cycle, "
          "no private zerohop name")
    return 0


if __name__ == "__main__":
    sys.exit(main())

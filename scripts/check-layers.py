#!/usr/bin/env python3
"""Holds the Python extension crate to its layers and to its size: no module cycles, no
module using a layer above its own, no import of the Python package from Rust, and at most
CODE_LINES lines of code (blank and comment
lines not counted), since what the crate holds is conversion and error mapping; tables,
specs and wire formats belong to the core crate, where Rust tests, Miri and fuzzing reach
them (issue 25: the crate had 4,589 such lines, then 3,561 once the pickle, Arrow, schema
and spec logic moved).

Layers, bottom to top (a file's layer is its folder under src/; lib.rs is above all):
base, memory, protocols, tables, process, api. A file may use its own layer and the ones
below; within a layer, files must not use each other in a circle. Exits 1 with the offending
edges otherwise.
"""

import re
import sys
from pathlib import Path

LAYERS = ["base", "memory", "protocols", "tables", "process", "api"]
# 3850 until 2026-11-27, when the ECG binding left for the app's own extension (#43) and the
# capsule rules and bounded argument readers for the shared zerohop-pyo3 crate: 2,966 lines.
CODE_LINES = 3000
# `py.import("zerohop")`, `.import(intern!(py, "zerohop.memory"))`, ...; the extension module
# itself (`zerohop._zerohop`, for pickle's rebuild functions) is not the package.
DETOUR = re.compile(r"""\bimport\(\s*(?:intern!\(\s*py\s*,\s*)?"(zerohop(?:\.(?!_zerohop")[\w.]+)?)"\s*\)?""")
SRC = Path(
    sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "-v" else Path(__file__).resolve().parents[1] / "crates/zerohop-python/src"
)


def module_of(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "mod":
        parts.pop()
    return "::".join(parts) or "lib"


def uses(text: str) -> set[str]:
    """Every `crate::a::b` path the file names, as `a::b` (or `a` for a layer's mod.rs)."""
    text = re.sub(r"//[^\n]*", "", text)
    found: set[str] = set()
    for group in re.finditer(r"crate::([a-z_]+)::\{([^;]*?)\}\s*;", text, re.S):
        for name in re.findall(r"(?:^|[{,\s])([a-z_]+)(?=\s*(?:::|,|\}|$))", group.group(2)):
            found.add(f"{group.group(1)}::{name}")
    for path in re.finditer(r"crate::([a-z_]+)(?:::([a-z_]+))?", text):
        found.add(path.group(1) + (f"::{path.group(2)}" if path.group(2) else ""))
    # Paths through a `use crate::layer;` or `use crate::layer::{module, ...}` alias.
    for alias in re.finditer(r"(?<![:\w])([a-z_]+)::([a-z_]+)", text):
        head, tail = alias.groups()
        if head in LAYERS:
            found.add(f"{head}::{tail}")
    return found


def main() -> int:
    files = {module_of(p): p for p in SRC.rglob("*.rs")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        deps = set()
        for name in uses(path.read_text()):
            target = name if name in files else name.split("::")[0]
            if target in files and target != module:
                deps.add(target)
        graph[module] = deps

    def rank(module: str) -> int:
        head = module.split("::")[0]
        return LAYERS.index(head) if head in LAYERS else len(LAYERS)

    problems = []
    unknown = sorted(m for m in files if m != "lib" and m.split("::")[0] not in LAYERS)
    problems += [f"{m}: not in a layer folder ({', '.join(LAYERS)})" for m in unknown]
    for module, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if rank(dep) > rank(module):
                problems.append(f"{module} uses {dep}, a layer above it")

    # Cycles (a layer's mod.rs registering its children is the children's parent, not a peer).
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                problems.append("cycle: " + " -> ".join(stack[stack.index(dep) :] + [dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)

    # The crate calls its own functions, not itself through Python: importing the package
    # (`zerohop`, `zerohop.memory`, ...) from Rust is a detour the layers cannot see.
    for module, path in sorted(files.items()):
        text = re.sub(r"//[^\n]*", "", path.read_text())
        for found in DETOUR.finditer(text):
            line = text.count("\n", 0, found.start()) + 1
            problems.append(f"{module}:{line}: imports the Python package {found.group(1)!r} "
                            "from Rust: call the crate's own function instead")

    code = sum(
        1
        for path in files.values()
        for line in path.read_text().splitlines()
        if line.strip() and not line.strip().startswith("//")
    )
    if code > CODE_LINES:
        problems.append(
            f"{code} lines of code, over the {CODE_LINES} an extension of conversions needs: "
            "move the logic into the core crate (zerohop) and convert here"
        )

    if problems:
        print(f"{SRC} breaks its layering:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    if "-v" in sys.argv:
        for module, deps in sorted(graph.items()):
            print(f"{module} -> {' '.join(sorted(deps))}")
    edges = sum(len(d) for d in graph.values())
    print(f"check-layers: {len(files)} modules, {edges} uses, no cycle, no upward use, "
          f"{code} lines of code (at most {CODE_LINES})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

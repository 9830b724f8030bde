"""The shape of the house: the simulator's modules import one way (no cycles, lazy imports included), no
module of the simulator imports torch, and no file is longer than one sitting's read."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "simulator"
MAX_LINES = 500
"""STYLE.md: one idea per file, about 100-500 lines."""


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Modules of `simulator` that `path` imports, anywhere in the file (function-level imports too)."""
    mod = _module(path)
    pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = pkg[:len(pkg) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                out.add(target + "." + alias.name)
            out.add(target)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for mod, path in files.items():
        deps = set()
        for name in _imports(path):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != mod and not mod.startswith(name + ".") and name != "simulator":
                if files[name].name != "__init__.py":
                    deps.add(name)
        graph[mod] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        state[n] = 2
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_simulator_modules_import_one_way():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_simulator_never_imports_torch():
    offenders = [str(p.relative_to(ROOT)) for p in PKG.rglob("*.py")
                 if any(n == "torch" or n.startswith("torch.") for n in _imports(p))]
    assert not offenders


def test_no_simulator_file_is_longer_than_one_sitting():
    long = {str(p.relative_to(ROOT)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long

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


LAYERS = {
    "plan": ("cost", "evaluate", "report", "sweep", "cli", "validate", "run", "wholerun"),
    "cost": ("evaluate", "report", "sweep", "cli", "validate", "run", "wholerun"),
    "evaluate": ("report", "sweep", "cli", "validate", "wholerun"),
}
"""Data flows one way: what happens (plan/) is priced (cost/) and timed (evaluate/); nothing below reaches
back up into the layers that use it (evaluate/ may call run.py's nothing: it is above it too)."""


def test_each_layer_imports_only_the_layers_below_it():
    graph = _graph()
    wrong = []
    for mod, deps in graph.items():
        parts = mod.split(".")
        if len(parts) < 3 or parts[1] not in LAYERS:
            continue
        for dep in deps:
            above = dep.split(".")[1]
            if above in LAYERS[parts[1]]:
                wrong.append(f"{mod} -> {dep}")
    assert not wrong, wrong


def test_inputs_import_nothing_of_the_model_but_the_schedule_registry():
    """The scenario is plain data at the bottom: it validates against the schedule registry (a pure table)
    and nothing else of the model."""
    inputs = ("simulator.scenario", "simulator.model", "simulator.topology", "simulator.schema", "simulator.inputs")
    graph = _graph()
    wrong = [f"{m} -> {d}" for m in inputs for d in graph[m]
             if d.split(".")[1] in ("plan", "cost", "evaluate", "report", "sweep", "cli", "validate", "wholerun")
             and d != "simulator.plan.schedules"]
    assert not wrong, wrong

"""Golden reports: the shipped scenarios' `run --json` (engine and analytic) checked against files in
tests/golden/, as SimPy checks its examples against `.out` files. A change that moves any number fails
here and shows up as a reviewed diff of the golden file.

Regenerate after a deliberate model change, and say in the commit which numbers moved and why:
    CLUSTERSIM_UPDATE_GOLDENS=1 python -m pytest -q tests/test_golden.py
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from simulator.run import simulate
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
SCENARIOS = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))
VOLATILE = {("sim", "wall_s")}
"""Fields that measure this machine, not the model: left out of the comparison and the files."""
REL_TOL = 1e-9
"""Floating-point noise only: summation order may change in the last bits, a model change may not."""


def _strip(report: dict) -> dict:
    out = json.loads(json.dumps(report))
    for outer, inner in VOLATILE:
        out.get(outer, {}).pop(inner, None)
    return out


def _diff(want, got, path: str = "") -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}.{k}: missing" for k in want if k not in got]
        out += [f"{path}.{k}: new key" for k in got if k not in want]
        for k in want:
            if k in got:
                out += _diff(want[k], got[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(want)} items -> {len(got)}"]
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in _diff(a, b, f"{path}[{i}]")]
    if isinstance(want, float) or isinstance(got, float):
        if isinstance(want, (int, float)) and isinstance(got, (int, float)) and \
                math.isclose(want, got, rel_tol=REL_TOL, abs_tol=1e-12):
            return []
        return [f"{path}: {want!r} -> {got!r}"]
    return [] if want == got else [f"{path}: {want!r} -> {got!r}"]


@pytest.mark.parametrize("estimator", ["engine", "analytic"])
@pytest.mark.parametrize("name", SCENARIOS)
def test_shipped_scenario_report_matches_its_golden_file(name: str, estimator: str):
    report = _strip(simulate(load_scenario(ROOT / "scenarios" / f"{name}.yaml"), estimator))
    path = GOLDEN / f"{name}.{estimator}.json"
    if os.environ.get("CLUSTERSIM_UPDATE_GOLDENS"):
        path.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    assert path.exists(), f"no golden file {path.name}: run with CLUSTERSIM_UPDATE_GOLDENS=1"
    diffs = _diff(json.loads(path.read_text()), report)
    assert not diffs, f"{name} ({estimator}) differs from {path.name}:\n  " + "\n  ".join(diffs[:40])


def test_every_shipped_scenario_has_golden_files():
    names = {p.name for p in GOLDEN.glob("*.json")}
    assert names == {f"{n}.{e}.json" for n in SCENARIOS for e in ("engine", "analytic")}

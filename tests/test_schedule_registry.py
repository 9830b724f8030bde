"""The schedule registry (issue 37): a schedule is one `ScheduleSpec` in `schedules.SCHEDULES`, and the
rest of the simulator asks the spec. A schedule registered only here runs end to end (scenario validation,
memory, the analytic estimate, the engine, the sweep's space, the exports), and no module outside
schedules.py names a schedule."""
import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.errors import ScenarioError
from simulator.report.export import FRAMEWORKS, unsupported
from simulator.run import simulate
from simulator.scenario import load_scenario
from simulator.plan.schedules import SCHEDULES, pipeline_schedule, schedule_spec
from simulator.sweep.space import enumerate_layouts, parse_fix

ROOT = Path(__file__).resolve().parent.parent
S8 = str(ROOT / "scenarios/8b_8gpu.yaml")
PP2 = ["parallel.pp=2", "parallel.dp=4", "parallel.zero=1"]  # 16 micro-batches over 2 stages


@pytest.fixture
def toy(monkeypatch):
    """'toy-1f1b': 1F1B's spec under another name, with no framework that runs it, registered for one test."""
    spec = replace(SCHEDULES["1f1b"], name="toy-1f1b", frameworks=(), torch_class=None, sweep_preference=99)
    monkeypatch.setitem(SCHEDULES, spec.name, spec)
    return spec


@pytest.fixture
def toy_v(monkeypatch):
    """'toy-v': ZB-V's spec under another name, wanting at least 3*pp micro-batches, out of the sweep's default."""
    spec = replace(SCHEDULES["zbv"], name="toy-v", min_m_per_pp=3, frameworks=(), torch_class=None,
                   sweep_preference=98, sweep_default=False, sweep_note="a test's toy")
    monkeypatch.setitem(SCHEDULES, spec.name, spec)
    return spec


def _without(report: dict, *paths: tuple[str, str]) -> dict:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in report.items()}
    for outer, inner in paths:
        del out[outer][inner]
    return out


@pytest.mark.parametrize("estimator", ["analytic", "engine"])
def test_a_copy_of_1f1b_registered_in_a_test_reports_what_1f1b_reports(toy, estimator):
    ref = simulate(load_scenario(S8, PP2), estimator)
    got = simulate(load_scenario(S8, PP2 + ["parallel.pp_schedule=toy-1f1b"]), estimator)
    assert got["layout"]["pp_schedule"] == "toy-1f1b"
    assert got["iteration_time_s"] > 0 and got["memory"] == ref["memory"]
    assert _without(got, ("layout", "pp_schedule"), ("sim", "wall_s")) == _without(ref, ("layout", "pp_schedule"), ("sim", "wall_s"))


def test_a_registered_schedule_brings_its_own_rules_to_scenario_validation(toy_v):
    assert load_scenario(S8, PP2 + ["parallel.pp_schedule=toy-v"]).parallel.vpp == 2  # its vpp when none is written
    with pytest.raises(ScenarioError) as e:
        load_scenario(S8, PP2 + ["parallel.pp_schedule=toy-v", "parallel.vpp=3"])
    assert e.value.path == "parallel.vpp" and "V-shaped" in str(e.value)
    with pytest.raises(ScenarioError) as e:  # 2 micro-batches per rank: toy-v wants 3*pp = 6
        load_scenario(S8, PP2 + ["parallel.pp_schedule=toy-v", "parallel.vpp=2", "training.global_batch=16"])
    assert e.value.path == "training.global_batch" and "3*pp = 6" in str(e.value)


def test_a_v_shaped_copy_places_and_times_as_its_original(toy_v):
    assert pipeline_schedule("toy-v", 2, 2, 16) == pipeline_schedule("zbv", 2, 2, 16)
    got = simulate(load_scenario(S8, PP2 + ["parallel.pp_schedule=toy-v", "parallel.vpp=2"]), "analytic")
    ref = simulate(load_scenario(S8, PP2 + ["parallel.pp_schedule=zbv", "parallel.vpp=2"]), "analytic")
    assert (got["iteration_time_s"], got["memory"]) == (ref["iteration_time_s"], ref["memory"])


def test_an_unregistered_schedule_is_refused_with_the_registry_names():
    with pytest.raises(ScenarioError) as e:
        load_scenario(S8, PP2 + ["parallel.pp_schedule=toy-1f1b"])
    assert e.value.path == "parallel.pp_schedule" and " | ".join(SCHEDULES) in str(e.value)


def test_the_sweep_space_takes_registered_schedules_by_their_spec(toy, toy_v):
    sc = load_scenario(S8, PP2)
    default = {(l.pp_schedule, l.vpp) for l in enumerate_layouts(sc) if l.pp == 2}
    assert ("toy-1f1b", 1) in default and not any(s == "toy-v" for s, _ in default)
    fixed = {(l.pp_schedule, l.vpp) for l in enumerate_layouts(sc, parse_fix(["parallel.pp_schedule=toy-v"]))}
    assert fixed == {("toy-v", 2)}


def test_exports_refuse_a_schedule_no_framework_runs(toy):
    sc = load_scenario(S8, PP2 + ["parallel.pp_schedule=toy-1f1b"])
    for framework in FRAMEWORKS:
        assert any("pipeline schedule toy-1f1b" in r for r in unsupported(sc, framework))


def test_replay_refuses_a_schedule_without_a_torch_class(toy):
    from calibrate.replay.plan import ReplayOptions, plan_replay
    sc = load_scenario(str(ROOT / "scenarios/replay/pp2-1f1b.yaml"), ["parallel.pp_schedule=toy-1f1b"])
    with pytest.raises(ScenarioError) as e:
        plan_replay(sc, ReplayOptions(steps=2, warmup=1))
    assert e.value.path == "parallel.pp_schedule" and "no torch.distributed.pipelining class" in str(e.value)
    assert plan_replay(load_scenario(str(ROOT / "scenarios/replay/pp2-1f1b.yaml")), ReplayOptions(steps=2, warmup=1)).schedule == "Schedule1F1B"


def test_every_spec_is_consistent():
    """Names match their keys, sweep preferences are unique, frameworks are the exports', and every spec's
    rank lists hold each pass once on the rank its placement names."""
    assert all(name == spec.name for name, spec in SCHEDULES.items())
    assert len({s.sweep_preference for s in SCHEDULES.values()}) == len(SCHEDULES)
    assert {fw for s in SCHEDULES.values() for fw, _ in s.frameworks} <= set(FRAMEWORKS)
    for spec in SCHEDULES.values():
        pp, vpp, m = 4, spec.vpp or spec.min_vpp, 4 * max(2, spec.min_m_per_pp)
        assert spec.check(pp, vpp, m) is None
        for rank, acts in enumerate(spec.rank_lists(pp, vpp, m)):
            assert {spec.chunk_rank(pp, vpp, a.chunk) for a in acts} == {rank}
            assert len(spec.inflight(rank, pp, vpp, m)) == vpp


# ----------------------------------------------------------------------------------- no names elsewhere

PACKAGES = ("simulator", "calibrate")
"""The code that must ask the registry; scenarios, tests, docs, validation and benchmark scripts pick
schedules by name as a user does."""
ALLOWED = {("simulator/validate/playbook.py", "1f1b")}
"""The nanotron dataset adapter writes its runs' schedule (nanotron's OneForwardOneBackwardPipelineEngine)
into scenario mappings, as a scenario file would (issue 37 moves the adapter out of the core)."""


def _docstring_ids(tree: ast.AST) -> set[int]:
    """Strings standing alone as statements: docstrings of modules, classes and functions, and the
    ones under fields and constants."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def test_no_module_outside_schedules_names_a_schedule():
    """A schedule's name in a string (not a docstring) outside schedules.py is a special case the
    registry should hold."""
    word = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, sorted(SCHEDULES, key=len, reverse=True))) + r")(?![\w-])")
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "simulator/plan/schedules.py":
                continue
            tree = ast.parse(path.read_text())
            docs = _docstring_ids(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                    for name in word.findall(node.value):
                        if (rel, name) not in ALLOWED:
                            found.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not found, "schedule names outside the registry:\n" + "\n".join(found)

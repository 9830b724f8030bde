"""The reference pages in docs/ agree with the code: the scenario reference is what `python -m simulator
docs` generates now, every scenario/model/topology key has a description, and docs/report.md lists exactly
the keys `run --json` prints."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli.docs_cmd import render, render_modules, undocumented
from simulator.run import simulate
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def test_scenario_reference_is_current():
    assert (ROOT / "docs" / "scenario.md").read_text() == render(), "run `python -m simulator docs`"


def test_module_map_is_current():
    """docs/modules.md lists every module with its docstring's summary, as `python -m simulator docs` writes it."""
    assert (ROOT / "docs" / "modules.md").read_text() == render_modules(), "run `python -m simulator docs`"


def test_frameworks_page_is_generated_from_the_framework_files():
    from simulator.cli.frameworks_doc import render_frameworks
    assert (ROOT / "docs" / "frameworks.md").read_text() == render_frameworks(), "run `python -m simulator docs`"


def test_every_scenario_model_and_topology_key_has_a_description():
    assert undocumented() == []


def test_docs_check_fails_on_a_stale_file_and_passes_on_a_fresh_one(tmp_path):
    out = tmp_path / "scenario.md"
    out.write_text("stale\n")
    cmd = [sys.executable, "-m", "simulator", "docs", "--check", "--out", str(out)]
    stale = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert stale.returncode == 1 and "stale" in stale.stderr
    subprocess.run([sys.executable, "-m", "simulator", "docs", "--out", str(out)], cwd=ROOT, check=True,
                   capture_output=True)
    assert subprocess.run(cmd, cwd=ROOT, capture_output=True).returncode == 0


def key_paths(obj, prefix="") -> set[str]:
    """Dotted paths of a report; list items as `[]`, the five comm dimensions as `<dim>`."""
    out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            name = "<dim>" if prefix in ("comm", "contention_s") else k
            path = f"{prefix}.{name}" if prefix else name
            out.add(path)
            out |= key_paths(v, path)
    elif isinstance(obj, list) and obj and isinstance(obj[0], dict):
        out |= key_paths(obj[0], prefix + "[]")
    return out


def documented_keys() -> set[str]:
    text = (ROOT / "docs" / "report.md").read_text()
    keys = set()
    for line in text.splitlines():
        m = re.match(r"\| (`[^|]+`) \|", line)
        if m:
            keys |= set(re.findall(r"`([^`]+)`", m.group(1)))
    return keys


@pytest.fixture(scope="module")
def reports():
    sc = load_scenario(ROOT / "scenarios" / "70b_512gpu.yaml")
    return {e: simulate(sc, estimator=e) for e in ("engine", "analytic")}


def test_report_page_lists_exactly_the_keys_run_json_prints(reports):
    printed = key_paths(reports["engine"]) | key_paths(reports["analytic"])
    documented = documented_keys()
    assert printed - documented == set(), "keys printed but not in docs/report.md"
    assert documented - printed == set(), "keys in docs/report.md that run --json does not print"


def test_both_estimators_print_the_same_keys_but_what_only_a_timeline_measures(reports):
    engine, analytic = key_paths(reports["engine"]), key_paths(reports["analytic"])
    assert engine - analytic == {"memory.timeline_peak_gib"}
    assert analytic - engine == set()


DOC_REF = re.compile(r"docs/([a-z_]+)\.md(?:,? §(\d+(?:\.\d+)?))?")


def test_every_docs_reference_in_the_repository_names_an_existing_page_and_section():
    """`docs/modeling.md §3.2` in a comment, docstring, topology or page: the page exists and has a heading
    numbered 3.2."""
    missing, checked = [], 0
    for path in ROOT.rglob("*"):
        if path.suffix not in (".py", ".yaml", ".md") or ".git" in path.parts or not path.is_file():
            continue
        for m in DOC_REF.finditer(path.read_text()):
            checked += 1
            page = ROOT / "docs" / f"{m.group(1)}.md"
            if not page.exists():
                missing.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
            elif m.group(2) and not re.search(rf"^#+ {re.escape(m.group(2))}\.? ", page.read_text(), re.M):
                missing.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert missing == [] and checked > 50

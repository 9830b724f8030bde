"""`python -m simulator compare`: both scenarios side by side, the best value per row marked."""
import json
from pathlib import Path

from simulator.cli.main import main
from simulator.cli.compare_cmd import best_indices, compare_rows

ROOT = Path(__file__).resolve().parent.parent
A = str(ROOT / "scenarios" / "8b_8gpu.yaml")


def other(tmp_path):
    b = tmp_path / "tp2.yaml"
    b.write_text((ROOT / "scenarios" / "8b_8gpu.yaml").read_text().replace("name: ", "name: TP2 variant of ")
                 .replace("dp: 8", "dp: 4").replace("tp: 1", "tp: 2"))
    return str(b)


def test_compare_shows_both_scenarios_and_marks_the_best(tmp_path, capsys):
    b = other(tmp_path)
    assert main(["compare", A, b, "--estimator", "analytic"]) == 0
    out = capsys.readouterr().out
    assert "8b_8gpu" in out and "tp2" in out and "TP2 variant of" in out
    assert "! tp" in out and "! dp" in out  # layout rows that differ
    row = next(line for line in out.splitlines() if line.strip().startswith("tokens/s per GPU"))
    assert row.count("*") == 1
    assert "x the throughput of" in out or "ties with" in out


def test_compare_json_lists_reports_and_best(tmp_path, capsys):
    b = other(tmp_path)
    assert main(["compare", A, b, "--json", "--estimator", "analytic"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["file"] for s in doc["scenarios"]] == [A, b]
    tps = [s["report"]["tokens_per_s_per_gpu"] for s in doc["scenarios"]]
    assert doc["best"]["tokens/s per GPU"] == [tps.index(max(tps))]


def test_compare_needs_two_scenarios(capsys):
    assert main(["compare", A]) == 2


def test_compare_bad_scenario_exits_2(tmp_path, capsys):
    assert main(["compare", A, str(tmp_path / "missing.yaml")]) == 2


def test_best_indices_respect_direction_and_ties():
    assert best_indices([3.0, 1.0, 2.0], +1) == [0]
    assert best_indices([3.0, 1.0, 2.0], -1) == [1]
    assert best_indices([1.0, 1.0], -1) == []  # all equal: nothing to mark
    assert best_indices([None, 2.0], +1) == []


def test_compare_rows_flag_layout_differences():
    r = {"gpus": 8, "layout": {"dp": 8, "tp": 1}, "iteration_time_s": 1.0, "memory": {"fits": True, "verdict": "fits", "peak_gib": 10.0, "capacity_gib": 80.0},
         "estimator": "analytic"}
    s = {**r, "layout": {"dp": 4, "tp": 2}, "iteration_time_s": 2.0}
    rows = {x["row"]: x for x in compare_rows([r, s])}
    assert rows["tp"]["differs"] and not rows["gpus"]["differs"]
    assert rows["step time (s)"]["best"] == [0]

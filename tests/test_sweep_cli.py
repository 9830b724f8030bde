"""`python -m simulator sweep`: exit codes, --json, explanations, plots (sweep_cmd.py, plots.py)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli.main import main
from simulator.sweep.tasks import Evaluation
from simulator.sweep.space import Layout
from types import SimpleNamespace

from simulator.cli.sweep_cmd import explain_win, misses_memory_keeps_out, overflow_text, reason

ROOT = Path(__file__).resolve().parent.parent
S8B = str(ROOT / "scenarios" / "8b_8gpu.yaml")
QUICK = ["--engine-top", "0", "--jobs", "1", "--fix", "training.micro_batch=1,2", "--fix", "parallel.cp=1"]


def lay(**kw):
    base = dict(tp=8, pp=1, cp=1, ep=1, dp=64, micro_batch=1, sp=True, zero=1, pp_schedule="1f1b", vpp=1, recompute="none")
    return Layout(**{**base, **kw})


def ev(layout, step, **breakdown):
    b = {"compute_s": 5.0, "recompute_s": 0.0, "bubble_s": 0.0, "exposed_tp_s": 0.0, "exposed_dp_s": 0.0,
         "exposed_pp_s": 0.0, "exposed_cp_s": 0.0, "exposed_ep_s": 0.0, "optimizer_s": 0.0, **breakdown}
    assert abs(sum(b.values()) - step) < 1e-9
    summary = {"iteration_time_s": step, "tokens_per_s_per_gpu": 1e6 / step, "mfu": 0.4, "breakdown": b, "estimator": "analytic"}
    return Evaluation(layout=layout, status="ok", summary=summary, memory={"peak_gib": 40.0, "capacity_gib": 79.65, "fits": True})


# ----------------------------------------------------------------------------------- exit codes

@pytest.mark.parametrize("argv", [
    ["--fix", "parallel.bogus=1"],
    ["--fix", "parallel.tp=abc"],
    ["--fix", "tp=2", "--fix", "tp=4"],
    ["--export-out", "x.toml"],
    ["--export", "megatron", "--json"],
    ["--plot", "/no/such/dir/prefix"],
    ["--top", "-1"],
])
def test_bad_sweep_arguments_exit_2(argv, capsys):
    assert main(["sweep", S8B, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_bad_fix_exits_2_from_the_shell():
    p = subprocess.run([sys.executable, "-m", "simulator", "sweep", S8B, "--fix", "parallel.bogus=1"], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and "--fix" in p.stderr and "Traceback" not in p.stderr


def test_unknown_export_framework_is_an_argparse_error():
    with pytest.raises(SystemExit) as e:
        main(["sweep", S8B, "--export", "deepspeed"])
    assert e.value.code == 2


def test_missing_scenario_exits_2(capsys):
    assert main(["sweep", "no/such.yaml"]) == 2


# ----------------------------------------------------------------------------------- output

def test_json_is_a_list_best_first(capsys):
    assert main(["sweep", S8B, "--json", "--top", "4", *QUICK]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 1 <= len(out) <= 4
    assert all(set(e) == {"parallel", "training", "estimator", "report"} for e in out)
    tps = [e["report"]["tokens_per_s_per_gpu"] for e in out]
    assert tps == sorted(tps, reverse=True)
    assert all(e["report"]["memory"]["fits"] for e in out)
    assert all(e["report"]["layout"]["tp"] == e["parallel"]["tp"] for e in out)


def test_json_with_engine_rows_is_ranked_by_its_reported_throughput(capsys):
    argv = ["--engine-top", "2", "--jobs", "1", "--fix", "training.micro_batch=1,2", "--fix", "parallel.cp=1"]
    assert main(["sweep", S8B, "--json", "--top", "6", *argv]) == 0
    out = json.loads(capsys.readouterr().out)
    tps = [e["report"]["tokens_per_s_per_gpu"] for e in out]
    assert tps == sorted(tps, reverse=True)
    assert all(e["estimator"] == e["report"]["estimator"] for e in out)
    assert [e["estimator"] for e in out].count("engine") >= 2 and out[0]["estimator"] == "engine"


def test_text_output_explains_the_ranking(capsys, tmp_path):
    assert main(["sweep", S8B, "--top", "3", *QUICK, "--plot", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    for part in ("tok/s/GPU", "Where the step goes", "Why #1 beats #2", "Playbook", "scenario's own layout"):
        assert part in out
    for kind in ("scatter", "breakdown", "memory"):
        png = tmp_path / f"s_{kind}.png"
        assert png.exists() and png.read_bytes()[:4] == b"\x89PNG"


def test_export_goes_to_the_file(tmp_path, capsys):
    out = tmp_path / "best.yaml"
    assert main(["sweep", S8B, "--top", "2", *QUICK, "--export", "nanotron", "--export-out", str(out)]) == 0
    import yaml
    doc = yaml.safe_load(out.read_text())
    assert doc["parallelism"]["dp"] * doc["parallelism"]["tp"] * doc["parallelism"]["pp"] == 8  # nanotron 0.4: no CP


# ----------------------------------------------------------------------------------- explanations

def test_reason_names_tp_leaving_the_node():
    assert "TP stays inside a node" in reason("exposed_tp_s", lay(tp=8), lay(tp=16, dp=32), 8, 1024)


def test_explain_win_names_the_largest_differences():
    a = ev(lay(tp=8, pp=4, dp=16), 6.0, bubble_s=0.6, exposed_tp_s=0.4)
    b = ev(lay(tp=16, pp=4, dp=8), 6.6, bubble_s=0.6, exposed_tp_s=1.0)
    text = explain_win(a, b, 8, 1024)
    assert "less exposed TP communication (0.60 s) because TP stays inside a node (TP8 on NVLink vs TP16 across nodes)" in text
    assert text.startswith(a.layout.label()) and "has 1.10x the throughput of" in text and "step 9.1 % shorter" in text


def test_explain_win_says_what_the_winner_pays():
    a = ev(lay(pp=8, dp=8, zero=1), 6.0, bubble_s=1.0)
    b = ev(lay(pp=1, dp=64, zero=3), 7.0, exposed_dp_s=2.0)
    text = explain_win(a, b, 8, 1024)
    assert "ZeRO-1 instead of ZeRO-3" in text and "more on pipeline bubble" in text


def test_explain_win_calls_near_equal_layouts_a_tie():
    assert "ties with" in explain_win(ev(lay(), 6.0, exposed_tp_s=1.0), ev(lay(sp=False), 6.001, exposed_tp_s=1.001), 8, 1024)


def test_overflow_text_names_the_stage_and_the_largest_part():
    mem = {"capacity_gib": 79.65, "peak_gib": 90.0, "fits": False, "per_stage": [
        {"stage": 0, "weights_gib": 10.0, "grads_gib": 20.0, "optimizer_gib": 5.0, "activations_gib": 50.0, "buffers_gib": 5.0, "peak_gib": 90.0},
        {"stage": 1, "weights_gib": 10.0, "grads_gib": 20.0, "optimizer_gib": 5.0, "activations_gib": 30.0, "buffers_gib": 5.0, "peak_gib": 70.0}]}
    text = overflow_text(Evaluation(layout=lay(pp=2), status="oom", memory=mem))
    assert "stage 0 needs 90.0 GiB of 79.7 (over by 10.3 GiB" in text and "mostly activations (50.0 GiB" in text


def test_only_misses_faster_than_the_best_are_reported():
    """A layout that does not fit and would be slower than #1 anyway is no loss to report (a 70B sweep printed
    its 115 tok/s/GPU miss under "the fastest layouts that do not fit" beside a 1,000 tok/s/GPU winner)."""
    best = ev(lay(), 6.0, bubble_s=1.0)
    slow, fast, faster = (replace_status(ev(lay(pp=p), s, compute_s=s)) for p, s in ((8, 60.0), (2, 5.5), (4, 4.0)))
    result = SimpleNamespace(ranked=[best], infeasible=[slow, fast, faster])
    assert misses_memory_keeps_out(result) == [faster, fast]
    assert misses_memory_keeps_out(SimpleNamespace(ranked=[], infeasible=[slow, fast])) == [fast, slow]


def replace_status(e):
    from dataclasses import replace
    return replace(e, status="oom")

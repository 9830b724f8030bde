"""The command line: bad input gives exit 2 and one clear line; good input a report."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GOOD = ROOT / "scenarios" / "70b_512gpu.yaml"


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "simulator", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def bad(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


BAD_SCENARIOS = {
    "typo_key": GOOD.read_text().replace("micro_batch:", "micro_bach:"),
    "typo_section": GOOD.read_text().replace("parallel:", "paralel:"),
    "wrong_type": GOOD.read_text().replace("seq_len: 4096", "seq_len: long"),
    "impossible_layout": GOOD.read_text().replace("dp: 8", "dp: 4"),
    "layers_not_divisible": GOOD.read_text().replace("pp: 8", "pp: 32").replace("dp: 8", "dp: 2"),
    "heads_not_divisible": GOOD.read_text().replace(
        "model: llama3-70b", "model: {arch: llama, layers: 80, hidden: 8192, ffn_hidden: 28672, heads: 12, head_dim: 128,"
        " kv_heads: 4, vocab: 128256}"),
    "unknown_preset": GOOD.read_text().replace("model: llama3-70b", "model: llama9-1t"),
    "unknown_topology": GOOD.read_text().replace("topology: dgx-h100", "topology: dgx-h900"),
    "unknown_schedule": GOOD.read_text().replace("pp_schedule: 1f1b", "pp_schedule: 2f2b"),
    "not_a_mapping": "- just\n- a list\n",
    "python_tag": "name: !!python/object/apply:os.system ['echo hacked']\nmodel: llama3-70b\n",
    "broken_yaml": "name: [unclosed\n",
    "empty_file": "",
    "batch_not_divisible": GOOD.read_text().replace("global_batch: 1024", "global_batch: 1001"),
    "negative": GOOD.read_text().replace("nodes: 64", "nodes: -1"),
}


@pytest.mark.parametrize("case", sorted(BAD_SCENARIOS))
def test_bad_scenario_exits_2_with_one_line(tmp_path, case):
    r = run("run", bad(tmp_path, BAD_SCENARIOS[case]), "--trace", tmp_path / "t.json")
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "t.json").exists()  # nothing half-written


def test_missing_file_and_bad_override_exit_2(tmp_path):
    assert run("run", tmp_path / "nope.yaml").returncode == 2
    r = run("run", GOOD, "--set", "parallel.tp")
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    r = run("run", GOOD, "--set", "parallel.zero=5")
    assert r.returncode == 2 and "parallel.zero" in r.stderr


def test_error_names_key_path(tmp_path):
    r = run("run", bad(tmp_path, BAD_SCENARIOS["typo_key"]))
    assert "training.micro_bach" in r.stderr and "unknown key" in r.stderr


def test_run_json_has_contract_keys():
    r = run("run", GOOD, "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    for key in ("name", "gpus", "iteration_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu",
                "mfu", "bubble_fraction", "comm", "overlap_fraction", "memory", "sim"):
        assert key in rep
    assert set(rep["comm"]) >= {"tp", "dp", "pp", "cp", "ep"}
    assert rep["gpus"] == 512 and rep["memory"]["fits"]
    assert 0 < rep["mfu"] < 1


def test_run_is_deterministic():
    a = json.loads(run("run", GOOD, "--json").stdout)
    b = json.loads(run("run", GOOD, "--json").stdout)
    a.pop("sim"), b.pop("sim")
    assert a == b


def test_human_report_mentions_fit_and_estimator():
    r = run("run", GOOD)
    assert r.returncode == 0, r.stderr
    assert "fits" in r.stdout and "estimator" in r.stdout

"""The whole training run (issue 41): days, GPU-hours, cost, interruptions, checkpoints and goodput."""
from __future__ import annotations

import json
from dataclasses import replace
import math
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.errors import ScenarioError
from simulator.scenario import load_scenario
from simulator.wholerun.checkpoint import checkpoint
from simulator.wholerun.failures import (DEFAULT_FAILURES_PER_GPU_HOUR, daly_interval, goodput, mtbi_s,
                                         optimal_interval, young_interval)
from simulator.wholerun.model import phase_run, whole_run
from simulator.run_spec import Phase, parse_run, parse_tokens

ROOT = Path(__file__).resolve().parent.parent
S70 = str(ROOT / "scenarios" / "70b_512gpu.yaml")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulator", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_70b_with_15t_tokens_prints_days_gpu_hours_cost_interruptions_goodput():
    r = _cli("run", S70, "--tokens", "15T", "--estimator", "analytic")
    assert r.returncode == 0, r.stderr
    for word in ("whole run: 15T tokens", "days", "GPU-hours", "cost", "$", "interruptions", "goodput",
                 "checkpoint", "interval", "restart cost"):
        assert word in r.stdout, word


def test_json_has_a_whole_run_key_with_consistent_totals():
    r = _cli("run", S70, "--tokens", "15T", "--estimator", "analytic", "--json")
    w = json.loads(r.stdout)["whole_run"]
    assert w["tokens"] == 15e12
    assert w["gpu_hours"] == pytest.approx(512 * w["days"] * 24)
    assert w["cost"] == pytest.approx(w["gpu_hours"] * w["price_per_gpu_hour"])
    assert 0 < w["goodput"] < 1 and w["days"] > w["failure_free_days"]


def test_bad_token_count_is_a_clear_error_with_exit_2():
    r = _cli("run", S70, "--tokens", "15X", "--estimator", "analytic")
    assert r.returncode == 2 and "--tokens" in r.stderr and "Traceback" not in r.stderr


def test_unknown_run_key_names_its_path():
    with pytest.raises(ScenarioError, match="run.checkpoint.every"):
        parse_run({"tokens": "1T", "checkpoint": {"every": 5}})


@pytest.mark.parametrize("text,value", [("15T", 15e12), ("500B", 5e11), ("2.5M", 2.5e6), ("3k", 3e3), (1e9, 1e9)])
def test_token_suffixes_are_powers_of_1000(text, value):
    assert parse_tokens(text, "x") == value


def test_training_tokens_in_the_scenario_is_the_run_length():
    sc = load_scenario(S70, ["training.tokens=2T"])
    assert sc.run.tokens == 2e12


def test_doubling_gpus_at_the_same_per_gpu_speed_halves_days_and_doubles_interruptions_per_day():
    small = load_scenario(S70)
    big = load_scenario(S70, ["cluster.nodes=128", "parallel.dp=16"])
    phase = Phase(tokens=15e12, name="run")
    step = 8.0  # same global batch on twice the GPUs at the same tokens/s per GPU: half the step
    a = whole_run([(small, phase, step, "given")])
    b = whole_run([(big, phase, step / 2, "given")])
    assert b.days / a.days == pytest.approx(0.5, rel=0.03)
    assert (b.interruptions / b.days) / (a.interruptions / a.days) == pytest.approx(2.0, rel=1e-9)


@pytest.mark.parametrize("delta,mtbi", [(17.0, 2.0e5), (3.0, 6.5e3), (60.0, 3.6e4), (300.0, 8.6e4)])
def test_chosen_interval_is_within_5_percent_of_young_daly(delta, mtbi):
    tau = optimal_interval(delta, 900.0, mtbi)
    assert tau == pytest.approx(daly_interval(delta, mtbi), rel=0.05)
    assert tau == pytest.approx(young_interval(delta, mtbi), rel=0.05)


def test_phase_interval_rounded_to_steps_stays_within_5_percent_of_young():
    sc = load_scenario(S70)
    p = phase_run(sc, Phase(tokens=15e12), 8.78, "given", per_gpu_hour=DEFAULT_FAILURES_PER_GPU_HOUR)
    assert p.interval_chosen == "optimal"
    assert p.interval_s == pytest.approx(young_interval(p.checkpoint.stall_s, p.mtbi_s), rel=0.05)


def test_goodput_falls_as_checkpoint_cost_rises():
    m, r = 2.0e4, 900.0
    values = [goodput(optimal_interval(d, r, m), d, r, m) for d in (1.0, 10.0, 60.0, 300.0)]
    assert values == sorted(values, reverse=True) and len(set(values)) == 4


def test_goodput_falls_as_mean_time_between_interruptions_falls():
    d, r = 20.0, 900.0
    values = [goodput(optimal_interval(d, r, m), d, r, m) for m in (1e6, 1e5, 2e4, 5e3)]
    assert values == sorted(values, reverse=True) and len(set(values)) == 4


def test_mtbi_is_inverse_in_gpus():
    assert mtbi_s(1024, 1e-5) == pytest.approx(2 * mtbi_s(2048, 1e-5))
    assert math.isinf(mtbi_s(8, 0.0))


def test_checkpoint_saves_weights_and_adam_states_once():
    sc = load_scenario(S70)
    ck = checkpoint(sc)
    from simulator.params import total_params
    assert ck.total_bytes == pytest.approx(14 * total_params(sc.model))  # bf16 W 2 + fp32 master 4 + m, v 8
    assert ck.per_rank_bytes >= ck.total_bytes / sc.gpus


def test_async_checkpoint_stalls_only_for_the_host_copy_and_holds_host_memory():
    sc = load_scenario(S70)
    sync, asyn = checkpoint(sc), checkpoint(sc, asynchronous=True)
    assert asyn.stall_s == asyn.host_copy_s < sync.stall_s == sync.write_s
    assert asyn.host_bytes_per_node == asyn.per_node_bytes and sync.host_bytes_per_node == 0


def test_user_interval_is_kept_and_a_worse_one_costs_goodput():
    sc = load_scenario(S70)
    kw = dict(per_gpu_hour=DEFAULT_FAILURES_PER_GPU_HOUR)
    best = phase_run(sc, Phase(tokens=1e12), 8.78, "given", **kw)
    user = phase_run(sc, Phase(tokens=1e12), 8.78, "given", interval_steps=20, **kw)
    assert user.interval_chosen == "user" and user.interval_steps == 20
    assert user.goodput < best.goodput


def test_phases_are_priced_separately_and_add_up(tmp_path):
    text = Path(S70).read_text() + ("run:\n  phases:\n    - {tokens: 1T}\n"
                                    "    - {tokens: 0.1T, seq_len: 8192, global_batch: 512, name: long context}\n")
    path = tmp_path / "phased.yaml"
    path.write_text(text)
    r = _cli("run", str(path), "--estimator", "analytic", "--json")
    assert r.returncode == 0, r.stderr
    w = json.loads(r.stdout)["whole_run"]
    assert [p["name"] for p in w["phases"]] == ["phase 1", "long context"]
    assert w["tokens"] == pytest.approx(1.1e12)
    assert w["phases"][1]["tokens_per_step"] == 8192 * 512 and w["phases"][1]["estimator"] == "analytic"
    assert w["days"] * 86400 == pytest.approx(sum(p["wall_s"] for p in w["phases"]))


def test_run_plot_is_written(tmp_path):
    out = tmp_path / "run.png"
    r = _cli("run", S70, "--tokens", "1T", "--estimator", "analytic", "--run-plot", str(out))
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 10_000


def test_llama3_validation_prints_the_comparison():
    r = subprocess.run([sys.executable, "validation/whole_run_llama3.py", "--no-simulate"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "466" in r.stdout and "RSC-1" in r.stdout and "RSC-2" in r.stdout


def test_sweep_objective_a_layout_slightly_faster_per_step_with_a_slower_checkpoint_loses():
    from dataclasses import dataclass, field

    from simulator.sweep.tasks import sibling_scenario
    from simulator.sweep.space import layout_of
    from simulator.wholerun.sweep_objective import rerank

    @dataclass(frozen=True)
    class Ev:
        layout: object
        numbers: dict

    @dataclass(frozen=True)
    class Result:
        ranked: list
        notes: list = field(default_factory=list)

    # slow storage (20 MB/s per node), so the checkpoint matters: TP8 PP8's largest stage writes 9 % more per
    # rank than ZeRO-3 PP1 spreads evenly; worth ~0.4 % of goodput, so a layout 0.2 % faster per step loses
    base = load_scenario(S70)
    base = replace(base, topology=replace(base.topology, storage=replace(base.topology.storage, write_gbs=0.02)))
    pp8 = layout_of(base)
    zero3 = layout_of(load_scenario(S70, ["parallel.tp=1", "parallel.pp=1", "parallel.dp=512", "parallel.zero=3",
                                          "training.recompute=full"]))
    fast, slower = Ev(pp8, {"iteration_time_s": 8.0, "estimator": "given"}), Ev(zero3, {"iteration_time_s": 8.016, "estimator": "given"})
    result, runs = rerank(Result(ranked=[fast, slower]), base, "time-to-train", 15e12, sibling=sibling_scenario)
    assert runs[pp8].phases[0].checkpoint.write_s > 1.05 * runs[zero3].phases[0].checkpoint.write_s
    assert [ev.layout for ev in result.ranked] == [zero3, pp8]
    assert "time-to-train" in result.notes[-1]


def test_sweep_objective_needs_tokens():
    r = _cli("sweep", S70, "--objective", "cost", "--jobs", "1")
    assert r.returncode == 2 and "--tokens" in r.stderr


def test_cost_a_layout_2_percent_faster_per_step_on_twice_the_gpus_costs_more():
    small = load_scenario(S70)
    big = load_scenario(S70, ["cluster.nodes=128", "parallel.dp=16"])
    phase = Phase(tokens=1e12)
    a = whole_run([(small, phase, 8.0, "given")], price_per_gpu_hour=2.0)
    b = whole_run([(big, phase, 8.0 / 1.02, "given")], price_per_gpu_hour=2.0)
    assert b.days < a.days and b.cost > 1.9 * a.cost


def test_sampled_runs_finish_when_dalys_expected_wall_time_says():
    """Monte Carlo check of failures.wall_per_work: the plot's sample paths (exponential faults, roll-back
    to the last checkpoint, restarts that faults can interrupt) end on average at the expected time."""
    from simulator.wholerun.plot import sample_path

    sc = load_scenario(S70)
    run = whole_run([(sc, Phase(tokens=1e12), 8.78, "given")], per_gpu_hour=1e-3)  # M = 1.95 h: ~300 faults a run
    ends = [sample_path(run, seed)[0][-1] for seed in range(6)]
    assert sum(ends) / len(ends) == pytest.approx(run.wall_s, rel=0.02)
    assert run.goodput < 0.9  # failures matter at this rate: the check is not of a failure-free run

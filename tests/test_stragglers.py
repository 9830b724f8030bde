"""Slow GPUs (`cluster.stragglers`, `cluster.slow_gpus`): each stage at its slowest GPU's pace."""
from pathlib import Path

import pytest

from simulator.cost.costs import build_cost_model
from simulator.errors import ScenarioError
from simulator.evaluate.analytic import estimate
from simulator.evaluate.engine import simulate_engine
from simulator.plan.stage_speed import stage_speeds
from simulator.run import simulate
from simulator.scenario import load_scenario, scenario_from_mapping
from simulator.stragglers import rank_speeds

ROOT = Path(__file__).resolve().parent.parent


def test_a_sync_dp_job_with_one_gpu_thirty_percent_slower_runs_about_thirty_percent_slower():
    """The 8B on 8 GPUs is compute-bound: every rank waits for the slow one at each FSDP collective."""
    base = simulate(load_scenario(ROOT / "scenarios" / "8b_8gpu.yaml"), estimator="analytic")
    slow = simulate(load_scenario(ROOT / "scenarios" / "8b_8gpu.yaml", ["cluster.stragglers=[{rank: 3, slowdown: 1.3}]"]),
                    estimator="analytic")
    assert slow["iteration_time_s"] / base["iteration_time_s"] == pytest.approx(1.3, abs=0.02)
    assert slow["stragglers"]["pacing"] == [{"stage": 0, "rank": 3, "slowdown": 1.3}]
    assert slow["stragglers"]["homogeneous_step_s"] == pytest.approx(base["iteration_time_s"])


def _small(stragglers, **parallel):
    raw = {"model": {"arch": "llama", "layers": 8, "hidden": 512, "ffn_hidden": 1024, "heads": 8, "vocab": 4000},
           "training": {"seq_len": 512, "global_batch": 16, "micro_batch": 1},
           "cluster": {"topology": "dgx-h100", "nodes": 1, "stragglers": stragglers},
           "parallel": {"tp": 2, "pp": 2, "dp": 2, "sp": True, **parallel}}
    return scenario_from_mapping(raw)


@pytest.mark.parametrize("stragglers, parallel, rel", [
    ([{"rank": 5, "slowdown": 1.5}], {}, 1e-6),
    # slow GPUs in two different pipelines: one representative pipeline holds both paces (the classes are
    # per stage, not per replica), within 1 % of every rank simulated
    ([{"rank": 0, "slowdown": 1.2}, {"rank": 7, "slowdown": 2.0}], {}, 0.01),
    # overlapped ZeRO-1 buckets: in full mode each starts when the slow replica releases it, and the fast
    # replicas' compute beside it is slowed at other moments than the slow one's (sm_share)
    ([{"rank": 2, "slowdown": 1.4}], {"zero": 1, "overlap_dp": True}, 0.01),
])
def test_one_rank_per_stage_class_equals_simulating_every_rank(stragglers, parallel, rel):
    sc = _small(stragglers, **parallel)
    cost = build_cost_model(sc)
    rep = simulate_engine(sc, cost, contention=False)
    full = simulate_engine(sc, cost, full=True, contention=False)
    assert rep.iteration_time_s == pytest.approx(full.iteration_time_s, rel=rel)
    assert estimate(sc, cost, in_pass_sharing=False).iteration_time_s == pytest.approx(rep.iteration_time_s, rel=1e-9)


def test_a_stage_goes_at_its_slowest_gpu_and_a_node_slows_all_its_gpus():
    sc = _small([{"node": 0, "slowdown": 1.1}, {"rank": 6, "slowdown": 1.7}])
    speed, who = stage_speeds(sc)
    assert speed == (1.1, 1.7) and who[1] == 6
    assert len(rank_speeds(sc.cluster.stragglers, None, sc.gpus, sc.gpus_per_node)) == 8


def test_slow_gpus_drawn_at_random_are_the_same_every_time():
    sc = load_scenario(ROOT / "scenarios" / "405b_16k.yaml",
                       ["cluster.slow_gpus={share: 0.001, slowdown_min: 1.1, slowdown_max: 1.4, seed: 7}"])
    a = rank_speeds([], sc.cluster.slow_gpus, sc.gpus, 8)
    assert a == rank_speeds([], sc.cluster.slow_gpus, sc.gpus, 8) and len(a) == 16
    assert all(1.1 <= x <= 1.4 for x in a.values())


@pytest.mark.parametrize("stragglers, path", [
    ([{"slowdown": 1.2}], "cluster.stragglers[0]"),
    ([{"rank": 1, "node": 0, "slowdown": 1.2}], "cluster.stragglers[0]"),
    ([{"rank": 8, "slowdown": 1.2}], "cluster.stragglers[0].rank"),
    ([{"rank": 1, "slowdown": 0.5}], "cluster.stragglers[0].slowdown"),
])
def test_bad_stragglers_name_the_key(stragglers, path):
    with pytest.raises(ScenarioError) as e:
        _small(stragglers)
    assert e.value.path == path

"""HSDP (`parallel.dp_replicate`): sharded inside each replica, gradients all-reduced across replicas."""
from pathlib import Path

import pytest

from simulator.cost.costs import build_cost_model
from simulator.errors import ScenarioError
from simulator.evaluate.analytic import estimate
from simulator.evaluate.engine import simulate_engine
from simulator.plan.layout import group_shape
from simulator.plan.lower import build_plan
from simulator.plan.memory import static_bytes
from simulator.scenario import load_scenario, scenario_from_mapping

ROOT = Path(__file__).resolve().parent.parent
S8B = ROOT / "scenarios" / "8b_8gpu.yaml"


def test_the_shard_group_is_the_replicas_neighbours_and_states_divide_by_it():
    flat, hsdp = load_scenario(S8B), load_scenario(S8B, ["parallel.dp_replicate=2"])
    assert group_shape(hsdp, "dp_cp").ranks == (0, 1, 2, 3) and group_shape(hsdp, "dp_rep").ranks == (0, 4)
    a, b = static_bytes(flat, 0), static_bytes(hsdp, 0)
    assert b["optimizer"] == pytest.approx(2 * a["optimizer"]) and b["weights"] == pytest.approx(2 * a["weights"])


def test_every_gradient_reduce_scatter_is_followed_by_its_shard_all_reduce_across_replicas():
    sc = load_scenario(S8B, ["parallel.dp_replicate=2"])
    dp = build_plan(sc).stages[0].dp[0]
    comms = [c for blocks in dp.z3_scatter.values() for block in blocks for c in block]
    rs = [c for c in comms if c.collective == "reduce_scatter"]
    ar = [c for c in comms if c.group == "dp_rep"]
    assert rs and len(ar) == len(rs)
    assert all(a.collective == "all_reduce" and a.bytes == pytest.approx(r.bytes / 4) for r, a in zip(rs, ar))


@pytest.mark.parametrize("overrides", [("parallel.dp_replicate=2",), ("parallel.dp_replicate=4", "parallel.zero=1")])
def test_both_evaluators_and_every_rank_agree_under_hsdp(overrides):
    sc = load_scenario(S8B, ["framework=megatron", *overrides])
    cost = build_cost_model(sc)
    rep = simulate_engine(sc, cost, contention=False)
    assert estimate(sc, cost, in_pass_sharing=False).iteration_time_s == pytest.approx(rep.iteration_time_s, rel=1e-9)
    assert simulate_engine(sc, cost, full=True, contention=False).iteration_time_s == pytest.approx(rep.iteration_time_s, rel=1e-6)


def test_hsdp_needs_a_sharded_stage_and_a_divisor():
    for bad in (["parallel.dp_replicate=2", "parallel.zero=0"], ["parallel.dp_replicate=3"]):
        with pytest.raises(ScenarioError) as e:
            load_scenario(S8B, ["framework=megatron", *bad])
        assert e.value.path == "parallel.dp_replicate"


def test_the_frameworks_name_it_their_way():
    titan = load_scenario(S8B, ["framework.data_parallel_replicate_degree=2"])
    mega = load_scenario(S8B, ["framework=megatron", "framework.num_distributed_optimizer_instances=2", "parallel.zero=1"])
    assert titan.parallel.dp_replicate == 2 and mega.parallel.dp_replicate == 2

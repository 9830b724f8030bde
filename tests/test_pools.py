"""Mixed GPU pools (`cluster.pools`): each pool's GPU and node, placed in node order; pipeline stages inside pools;
`parallel.pp_balance: speed` splits the layers by each stage's speed; each pool's memory against its own GPU."""
import pytest
from evaluators import three_step_times

from simulator.cost.costs import build_cost_model
from simulator.cost.pp_balance import balanced, speed_split, stage_layer_times
from simulator.errors import ScenarioError
from simulator.plan.paces import stage_pools
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping

H100_A100 = [{"gpu": "dgx-h100", "nodes": 1}, {"gpu": "dgx-a100", "nodes": 1}]


def _small(pools=H100_A100, cluster=None, global_batch=16, **parallel):
    raw = {"model": {"arch": "llama", "layers": 8, "hidden": 1024, "ffn_hidden": 2048, "heads": 8, "vocab": 4000},
           "training": {"seq_len": 1024, "global_batch": global_batch, "micro_batch": 1},
           "cluster": {"topology": "dgx-h100", "nodes": 2, "gpus_per_node": 4, "pools": pools, **(cluster or {})},
           "parallel": {"tp": 2, "pp": 2, "sp": True, **parallel}}
    return scenario_from_mapping(raw)


def _three(sc):
    return three_step_times(sc)


def test_one_pool_of_the_scenario_topology_gives_the_numbers_of_no_pools():
    assert _three(_small([{"gpu": "dgx-h100", "nodes": 2}])) == _three(_small([]))


def test_a_stage_on_a100s_runs_slower_than_on_h100s_and_the_job_runs_at_the_a100_stage_pace():
    mixed, h100, a100 = (_three(_small(p))[0] for p in (H100_A100, [], [{"gpu": "dgx-a100", "nodes": 2}]))
    assert h100 < mixed <= a100


@pytest.mark.parametrize("parallel, cluster", [
    ({}, {}),
    ({"pp_balance": "speed"}, {}),
    ({"pp_balance": "speed"}, {"stragglers": [{"rank": 1, "slowdown": 1.3}]}),
    ({}, {"degraded_links": [{"node": 1, "link": "nvlink", "bandwidth": 0.5}]}),
    ({"tp": 1, "pp": 4}, {}),
])
def test_analytic_representative_and_every_rank_agree_on_pools(parallel, cluster):
    sc = balanced(_small(cluster=cluster, **parallel))
    a, rep, full = _three(sc)
    assert rep == pytest.approx(a, rel=1e-6)
    assert full == pytest.approx(a, rel=1e-6)


@pytest.mark.parametrize("parallel, cluster", [
    ({"order": "tp-cp-pp-ep-dp"}, {}),  # each DP replica (pipeline) in one pool
    ({"order": "tp-cp-pp-ep-dp", "zero": 1}, {}),
    ({"tp": 4, "pp": 1}, {}),  # plain data parallelism over the two pools
    ({"order": "tp-cp-pp-ep-dp", "pp_balance": "speed"}, {"degraded_links": [{"node": 0, "link": "nic", "bandwidth": 0.5}]}),
])
def test_pools_on_different_dp_replicas_run_at_the_slower_pool_in_every_mode(parallel, cluster):
    """Even batch shares: the A100 replica sets the pace, the H100 one waits at the gradient sync."""
    sc = balanced(_small(cluster=cluster, **parallel))
    assert stage_pools(sc) == (1,) * sc.parallel.pp
    a, rep, full = _three(sc)
    assert rep == pytest.approx(a, rel=1e-6)
    assert full == pytest.approx(a, rel=1e-6)
    assert a > _three(balanced(_small([], cluster=cluster, **parallel)))[0]


def test_pools_on_different_dp_replicas_with_expert_parallelism_are_refused():
    raw = {"model": {"arch": "llama", "layers": 4, "hidden": 512, "ffn_hidden": 1024, "heads": 8, "vocab": 4000,
                     "moe": {"experts": 4, "top_k": 1, "expert_ffn_hidden": 512}},
           "training": {"seq_len": 1024, "global_batch": 16},
           "cluster": {"topology": "dgx-h100", "nodes": 2, "gpus_per_node": 4, "pools": H100_A100},
           "parallel": {"tp": 1, "pp": 1, "ep": 2, "order": "tp-cp-dp-ep-pp"}}
    with pytest.raises(ScenarioError, match="EP groups over two pools"):
        scenario_from_mapping(raw)


def test_ranks_are_placed_pool_by_pool_in_node_order():
    assert stage_pools(_small(tp=1, pp=4)) == (0, 0, 1, 1)
    assert stage_pools(_small(list(reversed(H100_A100)), tp=1, pp=4)) == (0, 0, 1, 1)


def test_speed_balancing_gives_the_faster_stage_more_layers_and_beats_the_even_split():
    even = _small()
    fast = balanced(_small(pp_balance="speed"))
    t = stage_layer_times(even, build_cost_model(even))
    assert t[1] > t[0]
    assert fast.parallel.pp_layers[0] > fast.parallel.pp_layers[1]
    assert sum(fast.parallel.pp_layers) == 8
    assert _three(fast)[0] < _three(even)[0]


@pytest.mark.parametrize("layers, times, split", [
    (8, (1.0, 1.0), [4, 4]),
    (9, (1.0, 1.0), [5, 4]),
    (32, (2.19, 5.01), [22, 10]),
    (4, (1.0, 100.0), [3, 1]),
])
def test_speed_split_minimises_the_slowest_stage_with_at_least_one_layer_each(layers, times, split):
    assert speed_split(layers, times) == split


def test_even_balance_on_equal_stages_is_the_even_split():
    sc = balanced(_small([], pp_balance="speed"))
    assert sc.parallel.pp_layers == [4, 4]


def test_each_pool_gets_its_memory_verdict_against_its_own_gpu():
    r = simulate(_small([{"gpu": "dgx-h100", "nodes": 1}, {"gpu": "hgx-h200", "nodes": 1}]), estimator="analytic")
    pools = r["pools"]["pools"]
    assert [p["gpu"] for p in pools] == ["dgx-h100", "hgx-h200"]
    assert pools[1]["capacity_gib"] > pools[0]["capacity_gib"]
    assert [p["stages"] for p in pools] == [[0], [1]]
    assert all(p["fits"] for p in pools) and r["memory"]["fits"]
    assert simulate(_small([]), estimator="analytic")["pools"] is None


@pytest.mark.parametrize("pools, parallel, cluster, where, what", [
    ([{"gpu": "dgx-h100", "nodes": 1}], {}, {}, "cluster.pools", "sum to 1"),
    ([{"gpu": "nope", "nodes": 1}, {"gpu": "dgx-a100", "nodes": 1}], {}, {}, "cluster.pools[0].gpu", "unknown topology"),
    ([{"gpu": "dgx-h100", "nodes": 1, "x": 1}, {"gpu": "dgx-a100", "nodes": 1}], {}, {}, "cluster.pools[0]", ""),
    (H100_A100, {"tp": 8, "pp": 1}, {}, "cluster.pools", "TP group would span two pools"),
    (H100_A100, {"pp_balance": "speed", "pp_layers": [4, 4]}, {}, "parallel.pp_layers", "pp_balance"),
    (H100_A100, {"pp_balance": "speed", "pp_schedule": "interleaved-1f1b", "vpp": 2}, {}, "parallel.pp_balance", "vpp"),
    (H100_A100, {}, {"profile": "x.json"}, "cluster.pools", "profile"),
])
def test_what_pools_do_not_support_is_refused_with_its_key_path(pools, parallel, cluster, where, what):
    with pytest.raises(ScenarioError) as e:
        _small(pools, cluster=cluster, **parallel)
    assert str(e.value).startswith(where) and what in str(e.value)


def test_speed_balancing_gives_back_layers_a_stage_cannot_hold():
    """Stage 1 paced by a straggler: headroom set so that stage 0 holds its uncapped share minus one layer (stage 1
    holds one more within it): the split moves a layer back."""
    from dataclasses import replace

    from simulator.plan.memory import GIB, stage_memory
    slow = {"stragglers": [{"rank": 5, "slowdown": 1.6}]}
    free = balanced(_small([], cluster=slow, pp_balance="speed"))
    n0 = free.parallel.pp_layers[0]
    assert n0 > 4
    fewer = replace(free, parallel=replace(free.parallel, pp_layers=[n0 - 1, 8 - n0 + 1]))
    assert stage_memory(fewer, 1).peak < stage_memory(fewer, 0).peak
    cap = float(free.topology.gpu.memory_gib)
    room = cap - (stage_memory(free, 0).peak + stage_memory(fewer, 0).peak) / 2 / GIB
    capped = balanced(_small([], cluster={**slow, "memory_headroom_gib": room}, pp_balance="speed"))
    assert capped.parallel.pp_layers == [n0 - 1, 8 - n0 + 1]


def test_the_sweep_searches_the_balance_on_a_mixed_cluster_and_builds_speed_balanced_candidates():
    from simulator.sweep.space import enumerate_layouts, parse_fix
    from simulator.sweep.tasks import candidate_scenario
    mixed = _small()
    lays = enumerate_layouts(mixed, parse_fix(["parallel.tp=2", "parallel.pp=2", "training.micro_batch=1"]))
    assert {lay.pp_balance for lay in lays} == {"even", "speed"}
    assert {lay.pp_balance for lay in enumerate_layouts(_small([]))} == {"even"}
    lay = next(x for x in lays if x.pp_balance == "speed" and x.vpp == 1)
    assert "speed-balanced" in lay.label()
    raw = {"model": {"arch": "llama", "layers": 8, "hidden": 1024, "ffn_hidden": 2048, "heads": 8, "vocab": 4000},
           "training": {"seq_len": 1024, "global_batch": 16, "micro_batch": 1},
           "cluster": {"topology": "dgx-h100", "nodes": 2, "gpus_per_node": 4, "pools": H100_A100}}
    assert candidate_scenario(raw, None, lay).parallel.pp_layers == balanced(_small(pp_balance="speed")).parallel.pp_layers


def test_mfu_divides_by_the_mean_peak_of_the_cluster_gpus():
    from simulator.plan.flops import mfu_peak_flops
    h100, a100 = (mfu_peak_flops(_small([{"gpu": g, "nodes": 2}])) for g in ("dgx-h100", "dgx-a100"))
    assert mfu_peak_flops(_small()) == pytest.approx((h100 + a100) / 2)
    assert h100 == mfu_peak_flops(_small([]))


def _four(**parallel):
    """2 H100 + 2 A100 nodes of 4 GPUs, TP4: one DP replica per node, two per pool."""
    pools = [{"gpu": "dgx-h100", "nodes": 2}, {"gpu": "dgx-a100", "nodes": 2}]
    return _small(pools, cluster={"nodes": 4}, global_batch=64, **{"tp": 4, "pp": 1, **parallel})


def test_dp_shares_by_speed_give_the_faster_pool_more_micro_batches_and_keep_the_global_batch():
    from simulator.cost.pp_balance import dp_shares
    sc = _four(dp_balance="speed")
    shares = dp_shares(sc, build_cost_model(sc))
    assert [s.pool for s in shares] == [0, 1] and [s.replicas for s in shares] == [2, 2]
    assert shares[0].micro_batches > shares[1].micro_batches
    total = sum(s.replicas * s.micro_batches - s.fewer for s in shares)
    assert total == sc.training.global_batch // sc.training.micro_batch
    assert all(0 <= s.fewer < s.replicas for s in shares)


def test_dp_shares_by_speed_beat_even_shares_and_both_estimators_agree():
    even = simulate(_four(), estimator="analytic")
    fast = {e: simulate(_four(dp_balance="speed"), estimator=e) for e in ("analytic", "engine")}
    assert fast["engine"]["iteration_time_s"] == pytest.approx(fast["analytic"]["iteration_time_s"], rel=1e-6)
    assert fast["analytic"]["iteration_time_s"] < even["iteration_time_s"]
    assert fast["analytic"]["tokens_per_s"] * fast["analytic"]["iteration_time_s"] == pytest.approx(even["tokens_per_s"] * even["iteration_time_s"])
    shares = fast["analytic"]["pools"]["dp_shares"]
    assert [s["gpu"] for s in shares] == ["dgx-h100", "dgx-a100"]


def test_dp_shares_on_one_gpu_kind_are_even_and_change_nothing():
    same = [{"gpu": "dgx-h100", "nodes": 2}, {"gpu": "dgx-h100", "nodes": 2}]
    a = simulate(_small(same, cluster={"nodes": 4}, tp=4, pp=1, dp_balance="speed"), estimator="analytic")
    b = simulate(_small(same, cluster={"nodes": 4}, tp=4, pp=1), estimator="analytic")  # global batch 16: 4 each
    assert [s["micro_batches"] for s in a["pools"]["dp_shares"]] == [4, 4]
    assert a["iteration_time_s"] == pytest.approx(b["iteration_time_s"], rel=1e-12)
    assert a["hfu"] == pytest.approx(b["hfu"], rel=1e-12)


@pytest.mark.parametrize("pools, parallel, where", [
    ([], {"dp_balance": "speed"}, "parallel.dp_balance"),
    (H100_A100, {"dp_balance": "speed", "order": "tp-cp-ep-dp-pp", "tp": 1, "pp": 2}, "parallel.dp_balance"),  # a replica over both pools
])
def test_dp_shares_need_pools_with_one_pool_per_replica(pools, parallel, where):
    with pytest.raises(ScenarioError) as e:
        _small(pools, **parallel)
    assert str(e.value).startswith(where)


@pytest.mark.parametrize("parallel", [{}, {"zero": 1}, {"tp": 2, "pp": 2, "order": "tp-cp-pp-ep-dp"}])
def test_dp_shares_every_rank_simulated_agrees_with_one_class_per_pool(parallel):
    """Each replica runs its own micro-batches with --full; the gradient sync is a real rendezvous."""
    sc = _four(dp_balance="speed", **parallel)
    a = simulate(sc, estimator="analytic")
    rep = simulate(sc, estimator="engine")
    full = simulate(sc, estimator="engine", full=True)
    assert rep["iteration_time_s"] == pytest.approx(a["iteration_time_s"], rel=1e-6)
    assert full["iteration_time_s"] == pytest.approx(a["iteration_time_s"], rel=0.01)
    assert full["hfu"] == pytest.approx(a["hfu"], rel=0.01)


def test_dp_shares_with_every_rank_simulated_refuse_per_micro_batch_dp_collectives():
    with pytest.raises(ScenarioError, match="--full"):
        simulate(_four(dp_balance="speed", zero=3), estimator="engine", full=True)


def test_the_sweep_searches_dp_shares_where_each_replica_sits_in_one_pool():
    from simulator.sweep.space import enumerate_layouts, parse_fix
    lays = enumerate_layouts(_four(), parse_fix(["parallel.tp=4", "training.micro_batch=1"]))
    assert {(x.pp, x.dp_balance) for x in lays if x.pp == 1} == {(1, "even"), (1, "speed")}
    assert {x.dp_balance for x in enumerate_layouts(_small([]))} == {"even"}
    assert "dp-speed" in next(x for x in lays if x.dp_balance == "speed").label()


@pytest.mark.parametrize("node", [0, 1])
def test_dp_shares_price_each_class_on_its_own_pool_s_links(node):
    """PP inside each replica's node (tp-cp-pp-ep-dp: a replica per node and pool): a degraded NVLink slows the
    class of its own pool; both estimators agree."""
    link = {"degraded_links": [{"node": node, "link": "nvlink", "bandwidth": 0.1}]}
    par = {"order": "tp-cp-pp-ep-dp", "dp_balance": "speed"}
    healthy = simulate(_small(global_batch=64, **par), estimator="analytic")
    slow = {e: simulate(_small(global_batch=64, cluster=link, **par), estimator=e) for e in ("analytic", "engine")}
    assert slow["engine"]["iteration_time_s"] == pytest.approx(slow["analytic"]["iteration_time_s"], rel=1e-6)
    assert slow["analytic"]["iteration_time_s"] > healthy["iteration_time_s"]
    shares = {d["gpu"]: d["micro_batches"] for d in slow["analytic"]["pools"]["dp_shares"]}
    before = {d["gpu"]: d["micro_batches"] for d in healthy["pools"]["dp_shares"]}
    slowed = "dgx-h100" if node == 0 else "dgx-a100"
    assert shares[slowed] < before[slowed]  # the slowed pool's replicas take fewer micro-batches

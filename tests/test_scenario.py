"""Scenario loading: strict validation, overrides, layout checks."""
import pytest

from simulator.errors import ScenarioError
from simulator.plan.layout import group_ranks, group_shape, rank_chunks
from simulator.scenario import load_scenario, scenario_from_mapping

BASE = {
    "name": "t",
    "model": "llama3-8b",
    "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1},
    "cluster": {"topology": "dgx-h100", "nodes": 2},
    "parallel": {"tp": 8, "pp": 1, "dp": 2},
}


def load(overrides=(), raw=None):
    return scenario_from_mapping(raw or BASE, list(overrides))


def test_shipped_70b_scenario():
    sc = load_scenario("scenarios/70b_512gpu.yaml")
    assert sc.gpus == 512 and sc.dp == 8 and sc.micro_batches == 128


def test_dp_is_derived_when_omitted():
    raw = {**BASE, "parallel": {"tp": 4, "pp": 2}}
    assert load(raw=raw).dp == 2


def test_override_changes_value_and_preset_fields():
    sc = load(["parallel.tp=4", "parallel.dp=4", "model.layers=16"])
    assert sc.parallel.tp == 4 and sc.model.layers == 16 and sc.model.hidden == 4096


@pytest.mark.parametrize("override, path", [
    (["parallel.tpp=2"], "parallel.tpp"),
    (["training.seq_len=abc"], "training.seq_len"),
    (["training.recompute=some"], "training.recompute"),
    (["model=smollm-360m", "parallel.tp=2", "parallel.dp=8"], "parallel.tp"),
    (["parallel.dp=3"], "parallel"),
    (["training.global_batch=63"], "training.global_batch"),
    (["parallel.ep=2"], "parallel.ep"),
    (["parallel.pp=3", "parallel.dp=null", "parallel.tp=2", "cluster.nodes=3"], "parallel.pp"),
    (["parallel.pp_schedule=interleaved-1f1b"], "parallel.vpp"),
    (["parallel.pp_schedule=zbv", "parallel.vpp=1"], "parallel.vpp"),
    (["cluster.topology=nope"], "cluster.topology"),
    (["model=nope"], "model"),
    (["parallel.sp=yes please"], "parallel.sp"),
    (["parallel.order=tp-dp-pp"], "parallel.order"),
    (["training.micro_batch=0"], "training.micro_batch"),
    (["parallel.pp_layers=[10,10]", "parallel.pp=2", "parallel.dp=1"], "parallel.pp_layers"),
])
def test_bad_layouts_name_the_key(override, path):
    with pytest.raises(ScenarioError) as e:
        load(override)
    assert e.value.path == path, str(e.value)


def test_layers_that_do_not_divide_get_a_pp_layers_to_paste():
    """32 layers over pp 3: the error names a near-even split, the smaller shares at the ends (the last first: it
    holds the LM head), which loads as given."""
    from simulator.inputs import near_even_split
    assert near_even_split(61, 32) == [1] + [2] * 29 + [1, 1] and near_even_split(80, 3) == [27, 27, 26]
    with pytest.raises(ScenarioError) as e:
        load(["parallel.pp=3", "parallel.dp=null", "parallel.tp=2", "cluster.nodes=3"])
    assert "e.g. [11, 11, 10]" in str(e.value)
    assert rank_chunks(load(["parallel.pp=3", "parallel.dp=null", "parallel.tp=2", "cluster.nodes=3",
                             "parallel.pp_layers=[11,11,10]"]), 2)[0][1] == list(range(22, 32))


def test_bool_is_not_an_integer():
    with pytest.raises(ScenarioError, match="parallel.tp"):
        load(["parallel.tp=true"])


def test_fp8_needs_fp8_hardware():
    with pytest.raises(ScenarioError, match="fp8"):
        load(["training.precision=fp8", "cluster.topology=cpu-host", "cluster.nodes=1", "cluster.gpus_per_node=16"])


def test_tp_group_is_innermost_and_inside_a_node():
    sc = load_scenario("scenarios/70b_512gpu.yaml")
    assert group_ranks(sc, "tp") == list(range(8))
    assert group_shape(sc, "tp").nodes == 1
    assert group_shape(sc, "dp").nodes == 8


def test_order_puts_dp_inside_the_node():
    sc = load_scenario("scenarios/70b_512gpu.yaml", ["parallel.order=ep-dp-tp-cp-pp"])
    assert group_shape(sc, "dp").nodes == 1
    assert group_shape(sc, "tp").nodes == 8


def test_v_schedules_put_first_and_last_chunk_on_rank_zero():
    raw = {**BASE, "parallel": {"tp": 8, "pp": 2, "dp": 1, "pp_schedule": "zbv", "vpp": 2}}
    sc = load(raw=raw)
    chunks = [c for c, _ in rank_chunks(sc, 0)]
    assert chunks == [0, 3]


def test_ep_groups_borrow_from_dp():
    """Whole experts at every TP rank (`parallel.etp` unset under a framework that does not split experts over TP:
    Megatron's default splits them, tests/test_moe_folding.py)."""
    raw = {**BASE, "framework": "deepspeed", "model": "mixtral-8x7b", "parallel": {"tp": 2, "pp": 1, "dp": 8, "ep": 4}}
    sc = load(raw=raw)
    ep = group_ranks(sc, "ep")
    assert len(ep) == 4 and ep == [0, 2, 4, 6]
    assert group_shape(sc, "edp").size == 2 * 8 // 4


def test_ep_after_dp_strides_the_ep_group_across_dp():
    """tp-cp-dp-ep-pp: EP outside DP, so an EP group takes every (dp/ep)-th DP rank and the expert-DP
    peers are neighbours; the same ranks as tp-cp-ep-dp-pp's groups, swapped."""
    raw = {**BASE, "framework": "deepspeed", "model": "mixtral-8x7b",
           "parallel": {"tp": 2, "pp": 1, "dp": 8, "ep": 4, "order": "tp-cp-dp-ep-pp"}}
    sc = load(raw=raw)
    assert group_ranks(sc, "ep") == [0, 4, 8, 12]
    assert group_ranks(sc, "edp") == [0, 1, 2, 3]
    inner = load(raw={**raw, "parallel": {**raw["parallel"], "order": "tp-cp-ep-dp-pp"}})
    assert group_ranks(inner, "ep") == [0, 2, 4, 6] and group_ranks(inner, "edp") == [0, 1, 8, 9]


@pytest.mark.parametrize("order", ["ep-tp-cp-dp-pp", "tp-ep-cp-dp-pp", "tp-cp-dp-pp-ep"])
def test_order_rejects_ep_away_from_dp(order):
    with pytest.raises(ScenarioError, match="ep apart from dp") as e:
        load([f"parallel.order={order}"])
    assert e.value.path == "parallel.order"


def test_efficiency_overrides_are_validated():
    with pytest.raises(ScenarioError) as e:
        load(["cluster.efficiency={gemmm: 0.5}"])
    assert e.value.path == "cluster.efficiency.gemmm"
    with pytest.raises(ScenarioError, match="cluster.efficiency.gemm"):
        load(["cluster.efficiency={gemm: 1.5}"])
    # the scenario's own keys, beside what its framework fixes (Megatron's fitted gemm_fp8)
    assert load(["cluster.efficiency={gemm: 0.5}"]).cluster.efficiency == {"gemm": 0.5, "gemm_fp8_vs_bf16": 1.036,
                                                                          "gemm_mxfp8_vs_fp8": 0.88}
    # each key in its own unit: microseconds, and a share of the compute rate that may be 0 but not 1
    assert load(["cluster.efficiency={dp_ring_step_latency_us: 5.0}"]).cluster.efficiency["dp_ring_step_latency_us"] == 5.0
    assert load(["cluster.efficiency={comm_sm_share: 0}"]).cluster.efficiency["comm_sm_share"] == 0
    with pytest.raises(ScenarioError, match=r"\[0, 1\)"):
        load(["cluster.efficiency={comm_sm_share: 1.0}"])


def test_internode_tp_overhead_applies_only_when_tp_leaves_the_node():
    from simulator.cost.costs import build_cost_model
    from simulator.plan.opgraph import Comm
    sc = load(["cluster.efficiency={tp_internode_overhead_s: 0.001}"])
    cost = build_cost_model(sc)
    op = Comm("x", "tp", "all_gather", 1e6)
    inside, spread = group_shape(sc, "tp"), group_shape(load(["parallel.order=ep-dp-tp-cp-pp"]), "tp")
    plain = build_cost_model(load())
    assert cost.comm_time(op, inside) == pytest.approx(plain.comm_time(op, inside))
    assert cost.comm_time(op, spread) == pytest.approx(plain.comm_time(op, spread) + 0.001)


def test_internode_tp_overhead_grows_with_the_nodes_tp_spans():
    from simulator.cost.costs import build_cost_model
    from simulator.plan.opgraph import Comm
    sc = load(["cluster.efficiency={tp_internode_overhead_s: 0.001}", "cluster.nodes=4", "parallel.tp=32",
               "parallel.dp=1"])
    op = Comm("x", "tp", "all_gather", 1e6)
    shape = group_shape(sc, "tp")
    assert shape.nodes == 4
    plain = build_cost_model(load(["cluster.nodes=4", "parallel.tp=32", "parallel.dp=1"]))
    assert build_cost_model(sc).comm_time(op, shape) == pytest.approx(plain.comm_time(op, shape) + 3 * 0.001)

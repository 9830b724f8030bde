"""MoE parallel folding (`parallel.etp: 1`, simulator/ep_spec.py): the expert layers on Megatron's expert grid
over all tp x cp x dp ranks of a stage (etp-ep-edp, innermost first), where `etp: null` keeps clustersim's
EP groups cut from dp x cp at each TP rank. Expected groups are Megatron's RankGenerator read by hand: rank =
etp index + etp*(ep index + ep*(edp index + edp*pp index)) for order tp-cp-ep-dp-pp (cp has size 1 there)."""
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cost.costs import build_cost_model
from simulator.errors import ScenarioError
from simulator.evaluate.analytic import estimate
from simulator.evaluate.engine import simulate_engine
from simulator.params import layer_params
from simulator.plan.ep_dispatch import ep_message_bytes
from simulator.plan.layout import group_ranks, group_shape
from simulator.plan.memory import zero_groups
from simulator.plan.opgraph import shard
from simulator.plan.sharded_params import rank_params
from simulator.report.export import approximations, megatron_args
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
MIXTRAL = ROOT / "scenarios" / "mixtral_ep.yaml"  # 8 experts top-2, h 4096, f_e 14336, 32 layers, dgx-h100
# 16 GPUs on 2 nodes: tp 2 x dp 4 x pp 2; a stage is 8 ranks (one node), ranks 0-7 and 8-15
SMALL = ["cluster.nodes=2", "parallel.dp=4", "parallel.tp=2", "parallel.pp=2", "training.global_batch=16"]


def small(*overrides):
    return load_scenario(MIXTRAL, SMALL + list(overrides))


def test_ep_groups_are_megatrons_consecutive_runs_of_the_expert_grid():
    sc = small("parallel.ep=4", "parallel.etp=1")
    assert [group_ranks(sc, "ep", r) for r in (0, 5, 9, 15)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


def test_expert_dp_groups_stride_by_ep_inside_the_stage():
    sc = small("parallel.ep=4", "parallel.etp=1")
    assert [group_ranks(sc, "edp", r) for r in (0, 3, 9)] == [[0, 4], [3, 7], [9, 13]]
    assert group_ranks(sc, "etp", 5) == [5]


def test_ep_outside_dp_in_the_order_strides_the_ep_group():
    """Order tp-cp-dp-ep-pp: expert rank = edp index + edp*ep index, edp = 8/4 = 2."""
    sc = small("parallel.ep=4", "parallel.etp=1", "parallel.order=tp-cp-dp-ep-pp")
    assert group_ranks(sc, "ep", 0) == [0, 2, 4, 6] and group_ranks(sc, "edp", 0) == [0, 1]


def test_without_etp_ep_groups_stay_at_one_tp_rank():
    """Whole experts at every TP rank (a framework that does not split them over TP): the TP peers hold the same
    experts, so they are expert-DP peers; Megatron's default splits them (etp = tp), and its TP peers hold other
    shards."""
    sc = small("parallel.ep=4", "framework=deepspeed")
    assert sc.parallel.etp is None
    assert group_ranks(sc, "ep", 0) == [0, 2, 4, 6] and group_ranks(sc, "edp", 0) == [0, 1]
    split = small("parallel.ep=4")
    assert split.parallel.etp == 2 and group_ranks(split, "ep", 0) == [0, 2, 4, 6] and group_ranks(split, "edp", 0) == [0]


def test_ep_may_exceed_dp_when_folded_over_tp():
    sc = small("parallel.ep=8", "parallel.etp=1")
    assert group_ranks(sc, "ep", 0) == list(range(8)) and group_ranks(sc, "edp", 0) == [0]


def test_with_tp_1_folding_builds_the_groups_clustersim_built_before():
    base = ["parallel.tp=1", "parallel.dp=8", "parallel.ep=4"]
    a, b = small(*base), small(*base, "parallel.etp=1")
    for dim in ("ep", "edp"):
        assert [group_ranks(a, dim, r) for r in range(16)] == [group_ranks(b, dim, r) for r in range(16)]


def test_expert_parameters_per_rank_are_whole_experts_over_ep():
    """ep 8 over the 8 ranks of a stage: one whole expert (3 h f_e) per MoE layer, 16 layers per stage."""
    sc = small("parallel.ep=8", "parallel.etp=1")
    assert rank_params(sc, 0).expert == 16 * 3 * 4096 * 14336
    assert layer_params(sc.model, 0).experts / 8 == 3 * 4096 * 14336


def test_expert_optimizer_states_shard_over_the_folded_expert_dp_group():
    """ZeRO-1 (the scenario's distributed optimizer): dense states over dp x cp = 4, experts over edp."""
    assert zero_groups(small("parallel.ep=4", "parallel.etp=1")) == (4, 2)
    assert zero_groups(small("parallel.ep=8", "parallel.etp=1")) == (4, 1)


def test_each_rank_dispatches_its_own_sequence_parallel_shard():
    """seq 4096 / tp 2 = 2048 tokens x top-2 x h 4096 x 2 B x ep_imbalance 1.2 per dispatch."""
    sc = small("parallel.ep=8", "parallel.etp=1")
    z = shard(sc)
    assert ep_message_bytes(sc, z, z.T // z.t, "dispatch") == pytest.approx(2048 * 2 * 4096 * 2 * 1.2)


def test_folding_keeps_an_ep_group_inside_a_node_that_dp_alone_would_split():
    """tp 2 x dp 8 on 2 nodes, ep 8: from dp alone the group is every other rank over both nodes; folded
    over tp it is the 8 ranks of one node, and its all-to-alls are cheaper."""
    base = ["parallel.pp=1", "parallel.dp=8", "parallel.ep=8"]
    a, b = small(*base), small(*base, "parallel.etp=1")
    assert group_shape(a, "ep").nodes == 2 and group_shape(b, "ep").nodes == 1
    ep_a = estimate(a, build_cost_model(a)).comm["ep"][0]
    ep_b = estimate(b, build_cost_model(b)).comm["ep"][0]
    assert ep_b < ep_a


@pytest.mark.parametrize("extra", [["parallel.ep=8"], ["parallel.ep=4", "parallel.order=tp-cp-dp-ep-pp"]])
def test_analytic_engine_and_full_engine_agree_on_a_folded_layout(extra):
    sc = small("parallel.etp=1", *extra)
    cost = build_cost_model(sc)
    a = estimate(sc, cost, in_pass_sharing=False)
    e = simulate_engine(sc, cost, contention=False)
    f = simulate_engine(sc, cost, full=True, contention=False)
    assert a.iteration_time_s == pytest.approx(e.iteration_time_s, rel=1e-9)
    assert f.iteration_time_s == pytest.approx(e.iteration_time_s, rel=1e-9)


def test_analytic_engine_and_full_engine_agree_with_the_ep_all_to_all_overlap():
    """4 nodes, a stage over 2 of them; interleaved 1F1B with Megatron's EP overlap (the corpus rows' recipe)."""
    sc = small("cluster.nodes=4", "parallel.dp=8", "training.global_batch=32", "parallel.pp_schedule=interleaved-1f1b",
               "parallel.vpp=2", "parallel.ep_overlap=true", "parallel.ep=8", "parallel.etp=1")
    cost = build_cost_model(sc)
    e = simulate_engine(sc, cost, contention=False)
    assert estimate(sc, cost, in_pass_sharing=False).iteration_time_s == pytest.approx(e.iteration_time_s, rel=1e-9)
    assert simulate_engine(sc, cost, full=True, contention=False).iteration_time_s == pytest.approx(e.iteration_time_s, rel=1e-9)


def test_megatron_export_names_the_expert_tensor_parallel_size():
    args = megatron_args(small("parallel.ep=8", "parallel.etp=1"))
    i = args.index("--expert-tensor-parallel-size")
    assert args[i + 1] == "1"
    args = megatron_args(small("parallel.ep=4"))  # Megatron's default, written out: etp = tp
    assert args[args.index("--expert-tensor-parallel-size") + 1] == "2"


def test_megatron_export_says_when_experts_were_simulated_unsplit_without_etp():
    whole = small("parallel.ep=4", "framework=deepspeed")
    assert any("--expert-tensor-parallel-size" in a for a in approximations(whole, "megatron"))
    assert not any("--expert-tensor-parallel-size" in a for a in approximations(small("parallel.ep=4"), "megatron"))
    assert not any("--expert-tensor-parallel-size" in a for a in approximations(small("parallel.ep=4", "parallel.etp=1"), "megatron"))


@pytest.mark.parametrize("overrides, key, allowed", [
    (["parallel.ep=8"], "parallel.ep", "a divisor of tp*cp*dp / etp"),
    (["parallel.ep=4", "parallel.etp=4"], "parallel.etp", "1 (MoE parallel folding), 2 (tp)"),
    (["parallel.ep=4", "parallel.sp=false"], "parallel.sp", "true"),
    (["parallel.ep=4", "parallel.order=cp-tp-ep-dp-pp"], "parallel.order", "tp innermost"),
    (["parallel.ep=8", "parallel.etp=1", "parallel.dp=2", "parallel.pp=4"], "parallel.ep", "a divisor of tp*cp*dp"),
    (["parallel.ep=4", "parallel.etp=1", "parallel.sp=false"], "parallel.sp", "true"),
    (["parallel.ep=4", "parallel.etp=1", "parallel.order=pp-tp-cp-ep-dp"],
     "parallel.order", "pp last"),
])
def test_layouts_megatron_cannot_fold_are_refused_with_the_key(overrides, key, allowed):
    with pytest.raises(ScenarioError) as err:
        small(*overrides)
    assert err.value.path == key and allowed in str(err.value), str(err.value)


def test_etp_on_a_dense_model_is_refused():
    with pytest.raises(ScenarioError) as err:
        load_scenario(ROOT / "scenarios" / "8b_8gpu.yaml", ["parallel.etp=1"])
    assert err.value.path == "parallel.etp"


def test_a_refused_etp_exits_2_on_the_command_line_without_a_traceback():
    r = subprocess.run([sys.executable, "-m", "simulator", "run", str(MIXTRAL), "--set", "parallel.etp=4"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "parallel.etp" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_megatron_splits_each_expert_over_tp_when_etp_is_unset():
    """Megatron's --expert-tensor-parallel-size defaults to tp (MLM arguments.py:587-588): the received rows are
    all-gathered over the TP group before the experts and their partial outputs reduce-scattered after them
    (token_dispatcher.py:741-750, :824-831), each rank holds 1/etp of every local expert and computes its columns for
    etp x the rows: the same expert FLOPs as whole experts, half their parameters."""
    from simulator.plan.layer_ops import EXPERT_TP_GATHER, EXPERT_TP_SCATTER, layer_forward, layer_passes
    split, whole = small("parallel.ep=4"), small("parallel.ep=4", "framework=deepspeed")
    layer = next(i for i in range(split.model.layers) if split.model.is_moe_layer(i))
    fwd = {n.op.name: n.op for n in layer_forward(split, layer, shard(split)).nodes}
    ref = {n.op.name: n.op for n in layer_forward(whole, layer, shard(whole)).nodes}
    gather, scatter = fwd[EXPERT_TP_GATHER], fwd[EXPERT_TP_SCATTER]
    # the dispatcher's own collectives: on the EP stream between its all-to-alls, priced on the TP group
    assert (gather.dim, gather.group, gather.collective) == ("ep", "tp", "all_gather")
    assert (scatter.dim, scatter.group, scatter.collective) == ("ep", "tp", "reduce_scatter")
    names = [n.op.name for n in layer_forward(split, layer, shard(split)).nodes if n.op.name.startswith(("ep_", "etp_"))]
    assert names == ["ep_counts", "ep_dispatch", EXPERT_TP_GATHER, "ep_sort", "ep_unsort", EXPERT_TP_SCATTER, "ep_combine"]
    z = shard(split)
    rows = z.T // z.t * split.model.moe.top_k * split.parallel.ep_imbalance * 2  # both TP ranks' received rows
    assert gather.bytes == pytest.approx(rows * z.h * z.ab) == pytest.approx(scatter.bytes)
    assert EXPERT_TP_GATHER not in ref and EXPERT_TP_SCATTER not in ref
    for name in ("expert_fc1", "expert_fc2"):
        assert fwd[name].flops == pytest.approx(ref[name].flops, rel=1e-3)  # rows per expert rounded
    assert rank_params(split, 0).expert == pytest.approx(rank_params(whole, 0).expert / 2)
    bwd = {n.op.name: n.op for n in layer_passes(split, layer).B if n.op.name.startswith("etp_")}
    assert all(op.group == "tp" and op.dim == "ep" for op in bwd.values())
    assert bwd[EXPERT_TP_GATHER + "_bwd"].collective == "reduce_scatter"
    assert bwd[EXPERT_TP_SCATTER + "_bwd"].collective == "all_gather"

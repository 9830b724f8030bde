"""FP8 on the wire (`plan/float8_comm.py`): torchtitan's float8 TP all-gathers and FSDP's FP8 weight all-gathers."""
import pytest

from simulator.errors import ScenarioError
from simulator.plan.blocks import chunk_blocks
from simulator.plan.float8_comm import AMAX_BYTES, FP8_BYTES, PRECOMPUTE_AMAX_BYTES, cast_shares
from simulator.plan.layer_ops import layer_passes
from simulator.plan.lower import build_plan
from simulator.plan.memory import buffer_bytes
from simulator.plan.opgraph import Comm, fp8_cast, gemm, shard
from simulator.plan.step_ops import head_gemm, optimizer_bytes_per_param, optimizer_op
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping

MODEL = {"arch": "llama", "layers": 4, "hidden": 1024, "ffn_hidden": 4096, "heads": 16, "kv_heads": 4, "vocab": 32000}


def _scenario(framework="torchtitan", tp=1, dp=8, precision="fp8", zero=3, **options):
    fw = {"name": framework, **({"float8": precision == "fp8"} if framework == "torchtitan" else {}), **options}
    return scenario_from_mapping({
        "model": MODEL, "framework": fw,
        "cluster": {"topology": "dgx-h100", "nodes": max(1, tp * dp // 8), "gpus_per_node": min(8, tp * dp)},
        "parallel": {"tp": tp, "dp": dp, "zero": zero},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": dp, "precision": precision}})


def _tp(nodes):
    return [(n.op.collective, n.op.bytes) for n in nodes if isinstance(n.op, Comm) and n.op.dim == "tp"]


def test_torchtitan_float8_gathers_tp_activations_in_fp8_and_reduce_scatters_in_bf16():
    sc = _scenario(tp=4, dp=2)
    z, p = shard(sc), layer_passes(sc, 0)
    for nodes in (p.F, p.B):
        for coll, nbytes in _tp(nodes):
            assert nbytes == z.T * z.h * (FP8_BYTES if coll == "all_gather" else 2)
    assert len(_tp(p.F)) == 4 and len(_tp(p.B)) == 4


def test_megatron_fp8_keeps_its_tp_collectives_16_bit():
    sc = _scenario(framework="megatron", tp=4, dp=2, zero=1)
    z = shard(sc)
    assert all(nbytes == z.T * z.h * 2 for _, nbytes in _tp(layer_passes(sc, 0).F))


def test_under_fp8_tp_the_column_linear_input_is_cast_before_its_all_gather_on_the_shard():
    sc = _scenario(tp=4, dp=2)
    names = [n.op.name for n in layer_passes(sc, 0).F]
    assert names.index("fp8_cast_qkv") < names.index("sp_allgather_attn") < names.index("qkv")
    z = shard(sc)
    cast = fp8_cast(sc, gemm("qkv", z.T, z.q + 2 * z.kv, z.h, z), cast_shares(sc, "qkv"))
    assert cast.shape[0] == z.T * z.h / 4


def _layer_block(sc):
    blocks = chunk_blocks(sc, 0, True, {})
    return next(b for b in blocks["F"] if b.key == "L0")


def _gathers(sc):
    plan = build_plan(sc)
    return [c for c in plan.stages[0].dp[0].z3_gather["F"][1]]


def test_fsdp_float8_all_gather_sends_the_linear_weights_at_one_byte_and_the_norms_at_two():
    sc = _scenario(float8_fsdp_all_gather=True, float8_precompute_scale=True)
    block = _layer_block(sc)
    norms = sum(t for t in block.tensors_dense if t <= 2 * MODEL["hidden"])
    linears = block.params_dense - norms
    gather = [c for c in _gathers(sc) if c.collective == "all_gather"]
    assert len(gather) == 1 and gather[0].bytes == pytest.approx(linears * FP8_BYTES + norms * 2)
    plain = [c for c in _gathers(_scenario()) if c.collective == "all_gather"]
    assert plain[0].bytes == pytest.approx(block.params_dense * 2)


def test_without_precomputed_scales_each_fp8_weight_all_reduces_its_amax_first():
    sc = _scenario(float8_fsdp_all_gather=True)
    ars = [c for c in _gathers(sc) if c.collective == "all_reduce"]
    block = _layer_block(sc)
    assert len(ars) == sum(1 for t in block.tensors_dense if t > 2 * MODEL["hidden"]) > 0
    assert all(c.bytes == AMAX_BYTES for c in ars)
    assert not [c for c in _gathers(_scenario(float8_fsdp_all_gather=True, float8_precompute_scale=True))
                if c.collective == "all_reduce"]


def test_precomputed_scales_read_the_weight_shards_once_at_the_optimizer_step():
    on = _scenario(float8_fsdp_all_gather=True, float8_precompute_scale=True)
    off = _scenario(float8_fsdp_all_gather=True)
    assert optimizer_op(on, 1e6).bytes - optimizer_op(off, 1e6).bytes == pytest.approx(1e6 * PRECOMPUTE_AMAX_BYTES)
    assert optimizer_op(on, 1e6).shape[1] == pytest.approx((optimizer_bytes_per_param(on) + PRECOMPUTE_AMAX_BYTES)
                                                            / optimizer_bytes_per_param(on))


def test_fp8_gathered_weights_are_cast_on_their_shard_and_held_at_one_byte():
    on, off = _scenario(float8_fsdp_all_gather=True), _scenario()
    z = shard(on)
    g = gemm("fc2", z.T, z.h, MODEL["ffn_hidden"], z)
    assert fp8_cast(on, g, cast_shares(on, "fc2")).shape[1] == pytest.approx(fp8_cast(off, g, cast_shares(off, "fc2")).shape[1] / 8)
    assert buffer_bytes(on, 0)["zero3_params"] == pytest.approx(buffer_bytes(off, 0)["zero3_params"] / 2)


def test_the_fp8_all_gather_is_ignored_where_fsdp_does_not_shard_the_parameters():
    sc = _scenario(zero=0, float8_fsdp_all_gather=True)
    z = shard(sc)
    g = gemm("fc2", z.T, z.h, MODEL["ffn_hidden"], z)
    assert cast_shares(sc, "fc2") == (1.0, 1.0, 1.0)


def test_filtering_the_output_layer_keeps_the_lm_head_in_bf16():
    z = shard(_scenario())
    assert head_gemm(_scenario(), z, 32000).dtype == "fp8"
    assert head_gemm(_scenario(float8_filter_output=True), z, 32000).dtype == "bf16"


def test_the_float8_options_need_float8_on():
    with pytest.raises(ScenarioError) as e:
        _scenario(precision="bf16", float8_fsdp_all_gather=True)
    assert e.value.path == "framework.float8_fsdp_all_gather"


def test_fp8_gathers_make_the_step_faster_and_both_estimators_agree():
    base = _scenario(tp=4, dp=2)
    on = _scenario(tp=4, dp=2, float8_fsdp_all_gather=True, float8_precompute_scale=True)
    t = {k: simulate(on, estimator=k)["iteration_time_s"] for k in ("analytic", "engine")}
    assert t["analytic"] == pytest.approx(t["engine"], rel=1e-6)
    assert simulate(on)["comm"]["dp"]["time_s"] < simulate(base)["comm"]["dp"]["time_s"]


def test_under_pipelining_fsdp_s_once_a_step_gather_is_fp8_too():
    def gathered(**options):
        raw = {"model": MODEL, "framework": {"name": "torchtitan", "float8": True, **options},
               "cluster": {"topology": "dgx-h100", "nodes": 1},
               "parallel": {"dp": 4, "pp": 2, "zero": 3},
               "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 8, "precision": "fp8"}}
        plan = build_plan(scenario_from_mapping(raw))
        return sum(b.comm.bytes for st in plan.stages for d in st.dp.values() for b in d.params)
    h, v, layers = MODEL["hidden"], MODEL["vocab"], MODEL["layers"]
    q, kv, f = h, h // 4, MODEL["ffn_hidden"]
    linears = layers * (h * (q + 2 * kv) + q * h + 3 * h * f) + v * h  # the layers' and the LM head's (in FP8)
    other = v * h + (2 * layers + 1) * h                                # the embedding and the norms
    expected = (linears + 2 * other) / (2 * (linears + other))
    assert gathered(float8_fsdp_all_gather=True) / gathered() == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize("recipe, act, weight, wgrad", [("tensorwise", 7, 7, "fp8"), ("rowwise", 8, 10, "fp8"),
                                                        ("rowwise_with_gw_hp", 3, 6, "bf16")])
def test_each_torchao_recipe_casts_as_torchao_s_roofline_counts_and_runs_its_weight_gradient(recipe, act, weight, wgrad):
    sc = _scenario(zero=0, float8_recipe=recipe)
    z = shard(sc)
    g = gemm("fc2", z.T, z.h, MODEL["ffn_hidden"], z)
    cast = fp8_cast(sc, g, cast_shares(sc, "fc2"))
    assert cast.shape[-1] == act
    assert cast.bytes == pytest.approx(act * z.T * MODEL["ffn_hidden"] + weight * MODEL["ffn_hidden"] * z.h)
    p = layer_passes(sc, 0)
    assert {n.op.dtype for n in p.W if n.op.kind == "gemm" and n.op.name.endswith("_wgrad")} == {wgrad}


def test_rowwise_float8_gathers_tp_activations_in_bf16_and_refuses_fsdp_s_fp8_gather():
    sc = _scenario(tp=4, dp=2, float8_recipe="rowwise")
    z = shard(sc)
    assert all(nbytes == z.T * z.h * 2 for _, nbytes in _tp(layer_passes(sc, 0).F))
    with pytest.raises(ScenarioError) as e:
        _scenario(float8_recipe="rowwise", float8_fsdp_all_gather=True)
    assert e.value.path == "framework.float8_fsdp_all_gather" and "float8_recipe tensorwise" in e.value.problem


def test_axiswise_recipes_rescale_each_backward_fp8_gemm_s_output():
    def rescales(recipe):
        p = layer_passes(_scenario(zero=0, float8_recipe=recipe), 0)
        return sorted(n.op.name for n in p.B + p.W if n.op.name.endswith("_rescale"))
    assert rescales("tensorwise") == []
    assert rescales("rowwise") == sorted([f"{g}_{k}_rescale" for g in ("qkv", "out_proj", "fc1", "fc2")
                                          for k in ("dgrad", "wgrad")])
    assert rescales("rowwise_with_gw_hp") == sorted(f"{g}_dgrad_rescale" for g in ("qkv", "out_proj", "fc1", "fc2"))

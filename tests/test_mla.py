"""DeepSeek's MLA priced at the FLOPs it has (`plan/mla_ops.py`): four low-rank projections, not q, k and v at full
rank; attention matmuls at its 192-wide query-key and 128-wide value heads; and selective recompute's modules
(Megatron-Core `recompute_modules`) re-running what they drop: MLA's up projections, the experts' activation, the
layernorms."""
import pytest

from simulator.model import ModelSpec  # noqa: F401 (the preset's type)
from simulator.plan import mla_ops
from simulator.plan.flops import attention_flops_per_token
from simulator.plan.layer_ops import layer_forward, layer_passes
from simulator.plan.opgraph import Compute, shard
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping


def dsv3(*, tp=1, sp=False, modules=None, recompute="none"):
    training = {"seq_len": 4096, "global_batch": 64, "micro_batch": 1, "precision": "bf16", "recompute": recompute}
    if modules is not None:
        training["recompute_modules"] = modules
    return scenario_from_mapping({
        "name": "dsv3", "model": "deepseek-v3", "training": training,
        "cluster": {"topology": "h800", "nodes": 8},
        "parallel": {"dp": 64 // tp, "tp": tp, "sp": sp, "ep": 8, "zero": 1}})


def _gemms(nodes):
    return {n.op.name: n.op for n in nodes if isinstance(n.op, Compute) and n.op.kind == "gemm"}


def test_deepseek_v3_projections_are_69_7_million_macs_per_token_not_411():
    sc = dsv3()
    z = shard(sc)
    ops = _gemms(layer_forward(sc, 5, z).nodes)
    # q_down 7168x1536 + q_up 1536x(128x192) + kv_down 7168x(512+64) + kv_up 512x(128x256)
    macs = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256
    assert ops["qkv"].flops / (2 * z.T) == pytest.approx(macs, rel=1e-3)
    assert ops["out_proj"].shape == (z.T, 7168, 128 * 128)  # reads heads x v_head_dim


def test_under_tp_and_sp_the_down_projections_run_on_each_ranks_tokens_and_the_up_projections_on_its_heads():
    sc = dsv3(tp=2, sp=True)
    z = shard(sc)
    macs = z.T_sp * mla_ops.down_macs(sc.model) + z.T * mla_ops.up_macs(sc.model) / 2
    assert _gemms(layer_forward(sc, 5, z).nodes)["qkv"].flops / 2 == pytest.approx(macs, rel=1e-3)


def test_under_sp_mla_gathers_its_latents_not_the_hidden_state():
    """Megatron's MLA under SP all-gathers the up projections' inputs, the query and key-value latents, and the RoPE
    key: 1,536 + 512 + 64 values a token on DeepSeek-V3, not its 7,168-wide hidden state; the backward reduce-scatters
    the same. The MLP's gather keeps the hidden state's width."""
    from simulator.plan.layer_ops import ATTN_GATHER
    from simulator.plan.opgraph import Comm
    sc = dsv3(tp=2, sp=True)
    z = shard(sc)
    comms = {n.op.name: n.op for n in layer_passes(sc, 5, z).B if isinstance(n.op, Comm)}
    fwd = {n.op.name: n.op for n in layer_forward(sc, 5, z).nodes if isinstance(n.op, Comm)}
    assert fwd[ATTN_GATHER].bytes == pytest.approx(z.T * 2112 * z.ab)
    assert comms[ATTN_GATHER + "_bwd"].bytes == pytest.approx(z.T * 2112 * z.ab)
    mlp = [op for name, op in fwd.items() if op.dim == "tp" and op.collective == "all_gather" and name != ATTN_GATHER]
    assert mlp and all(op.bytes == pytest.approx(z.T * 7168 * z.ab) for op in mlp)


def test_mla_attention_counts_its_192_wide_qk_and_128_wide_v_as_the_model_flops_do():
    sc = dsv3()
    z = shard(sc)
    attn = next(n.op for n in layer_forward(sc, 5, z).nodes if isinstance(n.op, Compute) and n.op.kind == "attention")
    per_layer_fwd = attention_flops_per_token(sc.model, 4096) / 3 / (sc.model.layers + sc.model.mtp_layers)
    assert attn.flops / z.T == pytest.approx(per_layer_fwd, rel=1e-9)


def test_hardware_flops_and_model_flops_agree_without_recompute():
    r = simulate(dsv3(), "analytic")
    assert r["hfu"] >= r["mfu"] and r["hfu"] / r["mfu"] < 1.05  # FlashAttention's backward counts 2.5x its forward


@pytest.mark.parametrize("modules, rerun", [
    (["mla_up_proj"], {"qkv_up_recompute"}), (["moe_act"], {"expert_act"}), (["layernorm"], {"norm1", "norm2"}),
    (["core_attn"], {"attn"})])  # Megatron-Core checkpoints the core attention whatever its kernel
def test_each_selective_module_re_runs_its_forward_ops_at_the_head_of_the_backward(modules, rerun):
    sc = dsv3(recompute="selective", modules=modules)
    b = layer_passes(sc, 5, shard(sc)).B
    again = {n.op.name for n in b if n.tag == "R" and isinstance(n.op, Compute) and not n.op.name.startswith("fp8_cast")}
    assert again == rerun


def test_mla_up_proj_re_runs_the_up_projections_macs_and_costs_recompute_time():
    sc = dsv3(recompute="selective", modules=["mla_up_proj"])
    z = shard(sc)
    op = mla_ops.up_rerun(sc, z)
    assert op.flops / 2 == pytest.approx(z.T * mla_ops.up_macs(sc.model), rel=1e-3)
    assert simulate(sc, "analytic")["breakdown"]["recompute_s"] > 0


@pytest.mark.parametrize("framework, reruns", [("megatron", True), ("deepspeed", False)])
def test_selective_recompute_re_runs_a_flash_attention_forward_where_the_framework_checkpoints_it(framework, reruns):
    from simulator.scenario import load_scenario
    from pathlib import Path
    s70 = str(Path(__file__).resolve().parent.parent / "scenarios/70b_512gpu.yaml")
    sc = load_scenario(s70, [f"framework={framework}", "training.recompute=selective", "training.attention=flash"])
    b = layer_passes(sc, 3, shard(sc)).B
    assert any(n.tag == "R" and isinstance(n.op, Compute) and n.op.kind == "attention" for n in b) is reruns
    eager = load_scenario(s70, [f"framework={framework}", "training.recompute=selective", "training.attention=eager"])
    assert any(n.tag == "R" for n in layer_passes(eager, 3, shard(eager)).B)  # eager attention: both frameworks

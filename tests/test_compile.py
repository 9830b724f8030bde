"""torchtitan's `compile` option (plan/fusion.py) and its op-level selective activation checkpointing
(plan/op_sac.py), against hand-computed byte and FLOP counts on a tiny Llama and against the 8B scenario's step."""
import pytest

from simulator.cost.costs import build_cost_model
from simulator.errors import ScenarioError
from simulator.plan.activations import layer_activation_terms
from simulator.plan.layer_ops import layer_passes
from simulator.plan.opgraph import Comm, Compute
from simulator.run import simulate
from simulator.scenario import load_scenario, scenario_from_mapping

T, H, F, HEADS, KV_HEADS, D = 128, 256, 512, 4, 2, 64
"""Tiny Llama: one sequence of 128 tokens, hidden 256, FFN 512, 4 query heads and 2 K/V heads of 64."""
Q, KV = HEADS * D, KV_HEADS * D


def tiny(compile_=False, tp=1, precision="bf16", recompute="selective", framework="torchtitan"):
    fw = {"name": framework, "compile": compile_} if framework == "torchtitan" else framework
    raw = {"name": "tiny", "framework": fw,
           "model": {"arch": "llama", "layers": 2, "hidden": H, "ffn_hidden": F, "heads": HEADS, "kv_heads": KV_HEADS,
                     "vocab": 1024},
           "training": {"seq_len": T, "global_batch": 8 // tp, "micro_batch": 1, "precision": precision,
                        "recompute": recompute, "attention": "flash"},
           "cluster": {"topology": "dgx-h100", "nodes": 1},
           "parallel": {"dp": 8 // tp, "tp": tp, "zero": 3}}
    return scenario_from_mapping(raw)


def ops(nodes, tag=None):
    return {n.op.name: n.op for n in nodes if isinstance(n.op, Compute) and (tag is None or n.tag == tag)}


# ----------------------------------------------------------------------------------- compile

def test_compiled_residual_add_and_next_norm_are_one_kernel_that_reads_h_once():
    """Eager: residual add (read x, a; write h: 3 passes) then the norm (read h, write: 2). Fused: read x and a,
    write h (still needed) and the normed output: 4 passes of T x H bf16, one launch."""
    f = ops(layer_passes(tiny(compile_=True, recompute="none"), 0).F)
    fused = f["residual1+norm2"]
    assert fused.bytes == 4 * T * H * 2 and fused.repeat == 1
    assert "norm2" not in f and "residual1" not in f


def test_compiled_norm_backward_and_residual_gradient_fuse_without_their_intermediate():
    """Norm backward (read x, dy; write dx: 3 passes) + the residual's gradient add (read dx, dout; write: 3):
    dx never reaches HBM, 6 - 2 = 4 passes."""
    b = ops(layer_passes(tiny(compile_=True, recompute="none"), 0).B)
    assert b["norm2_bwd+residual1_bwd"].bytes == 4 * T * H * 2


def test_eager_rope_and_swiglu_are_pytorchs_kernel_chains():
    """Complex RoPE in fp32: 20 B per q/k element in 3 kernels each (fused: 4 B, one kernel); silu then mul:
    10 B per FFN element in 2 kernels forward, 18 B in 3 backward (fused: 6 and 10)."""
    eager = layer_passes(tiny(compile_=False, recompute="none"), 0)
    comp = layer_passes(tiny(compile_=True, recompute="none"), 0)
    fe, fc, be, bc = ops(eager.F), ops(comp.F), ops(eager.B), ops(comp.B)
    assert fe["rope"].bytes == 20 * T * (Q + KV) and fe["rope"].repeat == 6
    assert fc["rope"].bytes == 4 * T * (Q + KV) and fc["rope"].repeat == 1
    assert fe["swiglu"].bytes == 10 * T * F and fe["swiglu"].repeat == 2
    assert fc["swiglu"].bytes == 6 * T * F
    assert be["swiglu_bwd"].bytes == pytest.approx(18 * T * F) and be["swiglu_bwd"].repeat == 3
    assert bc["swiglu_bwd"].bytes == pytest.approx(10 * T * F)


def test_eager_torchao_casts_are_six_kernels_of_33_bytes_and_compiled_two_of_5_beside_the_transpose():
    """Per quantized element: eager abs, max, to fp32, * scale, clamp, to fp8 = 33 B; Inductor: the amax reduction
    and one cast = 5 B; both + 2 B for the transposed copy. The forward cast covers the input and the weight."""
    act, weight = T * H, H * (Q + 2 * KV)
    eager = ops(layer_passes(tiny(compile_=False, precision="fp8", recompute="none"), 0).F)["fp8_cast_qkv"]
    assert eager.bytes == pytest.approx(35 * (act + weight)) and eager.repeat == 12
    comp = ops(layer_passes(tiny(compile_=True, precision="fp8", recompute="none"), 0).F)
    fused = comp["norm1+fp8_cast_qkv"]  # the cast's amax read of the norm's output runs in the norm's kernel
    assert fused.bytes == pytest.approx(2 * 2 * T * H + 7 * (act + weight) - 2 * act)
    assert fused.repeat == 1 + 4 - 1  # the input's amax reduction is the norm's kernel


def test_gemms_and_attention_are_the_same_with_and_without_compile():
    eager, comp = layer_passes(tiny(compile_=False), 0), layer_passes(tiny(compile_=True), 0)
    heavy = lambda lp: sorted((o.name, o.flops, o.bytes) for o in ops(lp.F + lp.B + lp.W).values()  # noqa: E731
                              if o.kind in ("gemm", "attention"))
    assert heavy(eager) == heavy(comp)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_compile_lowers_the_8b_step_by_the_memory_bound_time_it_removes_and_no_more(precision):
    """The 8B torchtitan scenario (one DGX H100, FSDP, comm hidden): the compiled step is the eager step less what
    its layers' memory-bound ops save, and never below the eager step with every layer's memory-bound op free."""
    step, elt = {}, {}
    for c in (False, True):
        sc = load_scenario("scenarios/8b_8gpu.yaml", [f"framework={{name: torchtitan, compile: {str(c).lower()}}}",
                                                      f"training.precision={precision}"])
        cost, lp = build_cost_model(sc), layer_passes(sc, 0)
        per_layer = sum(cost.compute_time(n.op) for n in lp.F + lp.B if isinstance(n.op, Compute) and n.op.kind == "elementwise")
        elt[c] = per_layer * sc.model.layers * sc.micro_batches
        step[c] = simulate(sc, "analytic")["iteration_time_s"]
    assert step[True] < step[False]
    assert step[False] - step[True] == pytest.approx(elt[False] - elt[True], rel=0.02)
    assert step[True] >= step[False] - elt[False]


def test_compile_is_an_option_of_torchtitan_only():
    with pytest.raises(ScenarioError, match="framework.compile"):
        tiny(framework={"name": "megatron", "compile": True})
    with pytest.raises(ScenarioError, match="framework.compile"):
        tiny(compile_="yes")


def test_a_framework_with_fused_kernels_is_not_rewritten():
    a = layer_passes(tiny(framework="megatron", recompute="none"), 0)
    assert ops(a.F)["rope"].bytes == 4 * T * (Q + KV) and ops(a.F)["rope"].repeat == 1


# ----------------------------------------------------------------------------------- op-level SAC

def test_op_sac_stores_the_block_input_and_the_saved_ops_outputs():
    """mms in order: wqkv (1, saved), wo (2), w1 (3, saved), w3 (4), w2 (5, saved); SDPA saved (output and fp32
    log-sum-exp); plus the checkpointed block's input. bf16."""
    terms = layer_activation_terms(tiny(), 0)
    assert terms == {"layer_input": 2 * T * H, "qkv_output": 2 * T * (Q + 2 * KV),
                     "attn": 2 * T * Q + 4 * HEADS * T, "fc1_0_output": 2 * T * F, "fc2_output": 2 * T * H}


def test_op_sac_recomputes_every_second_matmul_and_the_elementwise_ops_in_the_backward():
    """Recomputed GEMM FLOPs: wo 2*T*Q*H and w3 2*T*H*F; the replay also runs the norms, RoPE, SwiGLU and residual
    adds, and never the attention."""
    b = layer_passes(tiny(), 0).B
    replay = [n.op for n in b if n.tag == "R"]
    gemm_flops = sum(o.flops for o in replay if isinstance(o, Compute) and o.kind == "gemm")
    assert gemm_flops == 2 * T * Q * H + 2 * T * H * F
    names = {o.name for o in replay}
    assert {"norm1", "rope", "norm2", "swiglu", "residual1", "residual2"} <= names
    assert not any(isinstance(o, Compute) and o.kind == "attention" for o in replay)


def test_op_sac_under_sequence_parallel_tp_saves_the_reduce_scatters_and_gathers_again():
    """TP 2 with SP: each reduce-scatter's output (T/2 x H) is saved; both all-gathers run again in the replay.
    The row-parallel w2's partial output is T x H."""
    sc = tiny(tp=2)
    terms = layer_activation_terms(sc, 0)
    assert terms["sp_reducescatter_attn"] == terms["sp_reducescatter_mlp"] == 2 * (T // 2) * H
    assert terms["layer_input"] == 2 * (T // 2) * H and terms["fc2_output"] == 2 * T * H
    replay = [n.op for n in layer_passes(sc, 0).B if n.tag == "R"]
    assert sorted(o.collective for o in replay if isinstance(o, Comm)) == ["all_gather", "all_gather"]


def test_op_sac_stores_less_than_no_recompute_and_more_than_full():
    none, full, sac = (sum(layer_activation_terms(tiny(recompute=r), 0).values()) for r in ("none", "full", "selective"))
    assert full < sac < none


def test_megatron_selective_is_still_core_attention():
    terms = layer_activation_terms(tiny(framework="megatron"), 0)
    assert "flash_lse" not in terms and "q" in terms


def test_async_tp_without_compile_is_refused_as_torchtitan_refuses_it():
    raw = lambda fw: {"name": "t", "framework": fw, "model": "llama3-8b",  # noqa: E731
                      "training": {"seq_len": 1024, "global_batch": 4}, "cluster": {"topology": "dgx-h100", "nodes": 1},
                      "parallel": {"dp": 4, "tp": 2}}
    with pytest.raises(ScenarioError, match="framework.async_tp.*needs compile true"):
        scenario_from_mapping(raw({"name": "torchtitan", "async_tp": True}))
    assert scenario_from_mapping(raw({"name": "torchtitan", "async_tp": True, "compile": True})).overlap_tp


def test_op_sac_replay_holds_what_the_layer_would_store_beside_what_it_saved():
    """While a block's backward replays it, the tensors it did not save are live again, one layer at a time."""
    from simulator.plan.memory import _layer_transients
    from simulator.plan.opgraph import shard
    sc = tiny()
    none, sac = (sum(layer_activation_terms(sc, 0, r).values()) for r in ("none", "selective"))
    assert _layer_transients(sc, 0, shard(sc))["recompute_layer"] == pytest.approx(none - sac)

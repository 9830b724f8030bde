"""Megatron-Core's `mlp` recompute module (`training.recompute_modules`): a dense layer's MLP is checkpointed on its
input and re-run whole at the head of the layer's backward, TP collectives included; MoE layers keep theirs
(transformer_layer.py:537-539 at d98e8a64: `if not self.is_moe_layer`)."""
import pytest

from simulator.plan.activations import QUANTIZED_STORE_BYTES, dense_mlp_terms, layer_activation_terms
from simulator.plan.layer_ops import dense_mlp_span, layer_forward, layer_passes
from simulator.plan.memory import buffer_bytes
from simulator.plan.opgraph import Comm, shard
from simulator.run import simulate
from simulator.scenario import load_scenario

S70 = "scenarios/70b_512gpu.yaml"  # Llama 3 70B, TP8 with SP, PP8
DSV3 = "validation/scenarios/deepseek_v3.yaml"  # DeepSeek-V3: layers 0-2 dense, the rest MoE


def _s70(modules: str):
    return load_scenario(S70, ["training.recompute=selective", f"training.recompute_modules={modules}"])


def test_the_dense_mlp_keeps_only_its_input():
    off, on = layer_activation_terms(_s70("[core_attn]"), 3), layer_activation_terms(_s70("[core_attn, mlp]"), 3)
    dropped = set(off) - set(on)
    assert dropped == set(dense_mlp_terms(_s70("[core_attn]"), shard(_s70("[core_attn]"))))
    assert dropped == {"gate", "up", "fc2_input"}
    assert on["fc1_input"] == off["fc1_input"]


def test_under_fp8_the_checkpoint_keeps_the_16_bit_input_it_was_called_with():
    fp8 = ["training.precision=fp8", "training.recompute=selective"]
    off = layer_activation_terms(load_scenario(S70, fp8 + ["training.recompute_modules=[core_attn]"]), 3)
    on = layer_activation_terms(load_scenario(S70, fp8 + ["training.recompute_modules=[core_attn, mlp]"]), 3)
    assert on["fc1_input"] == pytest.approx(2 / QUANTIZED_STORE_BYTES["fp8"] * off["fc1_input"])  # bf16, not the FP8 copy


def test_the_backward_re_runs_the_whole_module_collectives_included():
    sc = _s70("[core_attn, mlp]")
    z = shard(sc)
    span = dense_mlp_span(layer_forward(sc, 3, z))
    names = [op.name for op in span]
    assert names[0] == "sp_allgather_mlp" and names[-1] == "sp_reducescatter_mlp"
    assert {"fc1", "fc2"} <= set(names)
    rerun = [n.op for n in layer_passes(sc, 3, z).B if n.tag == "R"]
    assert [op.name for op in rerun if op.name in names] == names
    assert sum(isinstance(op, Comm) for op in rerun) == 2


def test_moe_layers_keep_their_mlp():
    sc = load_scenario(DSV3, ["training.recompute_modules=[layernorm, mla_up_proj, mlp]"])
    z = shard(sc)
    assert dense_mlp_span(layer_forward(sc, 5, z)) == []
    assert dense_mlp_span(layer_forward(sc, 1, z))  # a dense layer of DeepSeek-V3
    base = load_scenario(DSV3, ["training.recompute_modules=[layernorm, mla_up_proj]"])
    assert layer_activation_terms(sc, 5) == layer_activation_terms(base, 5)
    assert sum(layer_activation_terms(sc, 1).values()) < sum(layer_activation_terms(base, 1).values())


def test_the_re_run_holds_the_modules_tensors_for_one_layer_and_costs_a_forward_of_the_mlp():
    on, off = _s70("[core_attn, mlp]"), _s70("[core_attn]")
    assert buffer_bytes(on, 3)["recompute_layer"] == pytest.approx(sum(dense_mlp_terms(on, shard(on)).values()))
    assert buffer_bytes(off, 3)["recompute_layer"] == 0.0
    r_on, r_off = simulate(on, estimator="analytic"), simulate(off, estimator="analytic")
    assert r_on["breakdown"]["recompute_s"] > 10 * r_off["breakdown"]["recompute_s"]
    assert r_on["memory"]["peak_gib"] < r_off["memory"]["peak_gib"]

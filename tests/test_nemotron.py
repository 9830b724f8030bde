"""Nemotron (arch nemotron): LayerNorm, no linear biases, a two-GEMM squared-ReLU MLP, RoPE on part of each
head, no dropout; the presets as NeMo 24.07 trains them and the NeMo 24.07 corpus rows that use them."""
from pathlib import Path

import pytest
import yaml

from simulator.errors import ScenarioError
from simulator.model import load_model, model_from_hf_config, model_from_mapping
from simulator.params import total_params
from simulator.plan import memory as mem
from simulator.plan.flops import training_flops_per_token
from simulator.plan.layer_ops import layer_forward
from simulator.plan.opgraph import shard
from simulator.report.export import megatron_args, unsupported
from simulator.scenario import scenario_from_mapping
from simulator.validate.corpus import corpus_runs

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "validation" / "references" / "corpus" / "nemo_24_07_h100.yaml"
PRESETS = {"nemotron3-8b": (32, 4096, 16384, 32, 32), "nemotron3-22b": (40, 6144, 24576, 48, 48),
           "nemotron4-340b": (96, 18432, 73728, 96, 8)}
"""layers, hidden, FFN, heads, KV heads: NeMo-Framework-Launcher 24.07 conf/training/nemotron/*.yaml."""
TABLE = {"nemotron3-8b": (12701, 653), "nemotron3-22b": (4256, 554), "nemotron4-340b": (322, 678)}
"""NeMo 24.07 performance summary rows: tokens/s/GPU and model TFLOP/s/GPU."""


def row(run_id: str) -> dict:
    return next(r for r in yaml.safe_load(CORPUS.read_text())["runs"] if r["id"] == run_id)


def scenario(run_id: str, **training):
    raw = row(run_id)["scenario"]
    return scenario_from_mapping({**raw, "training": {**raw["training"], **training}})


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_read_as_nemotron_with_the_recipes_sizes(name):
    m = load_model(name)
    assert (m.layers, m.hidden, m.ffn_hidden, m.heads, m.n_kv) == PRESETS[name]
    assert (m.arch, m.vocab, m.tie_embeddings, m.partial_rotary_factor) == ("nemotron", 256000, False, 0.5)
    assert not m.gated_mlp and m.rotary and not m.hidden_dropout and m.positions == 0


def test_parameters_are_two_mlp_matrices_and_layernorms_without_linear_biases():
    m = load_model("nemotron4-340b")
    h, f, kv, v = m.hidden, m.ffn_hidden, m.kv_dim, m.vocab
    layer = 2 * h * h + 2 * h * kv + 2 * h * f + 4 * h  # q and out, k and v, up and down, two LayerNorms (w, b)
    assert total_params(m) == m.layers * layer + 2 * v * h + 2 * h  # + embedding, untied head, final LayerNorm
    assert 340e9 < total_params(m) < 342e9


@pytest.mark.parametrize("name", sorted(TABLE))
def test_presets_give_the_model_flops_nemo_published(name):
    """NeMo's model TFLOP/s counts 6N + non-causal attention; with a vocabulary of 256,000 the presets land
    within rounding of the table's TFLOP/s over tokens/s."""
    tokens, tflops = TABLE[name]
    ours = training_flops_per_token(load_model(name), 4096, causal=False)
    assert ours == pytest.approx(tflops * 1e12 / tokens, rel=1e-3)


def test_the_mlp_is_two_gemms_around_one_squared_relu():
    sc = scenario("nemotron-8b-dgx-h100-64gpu-fp8")
    z = shard(sc)
    ops = {n.op.name: n.op for n in layer_forward(sc, 0, z).nodes}
    f = sc.model.ffn_hidden // z.t
    assert ops["fc1"].shape[1] == f and ops["fc2"].shape[2] == f  # not 2f: no gate
    assert ops["squared_relu"].bytes == pytest.approx(2 * z.T * f * z.ab)  # one read, one write: GeLU's pass
    assert "rope" in ops and not {"swiglu", "gelu"} & set(ops)


def test_a_layer_stores_the_activation_input_and_no_dropout_mask():
    sc = scenario("nemotron-8b-dgx-h100-64gpu-fp8", precision="bf16")
    terms = mem.layer_activation_terms(sc, 0)
    z = shard(sc)
    assert terms["act_input"] == terms["fc2_input"] == z.ab * z.T * sc.model.ffn_hidden / z.t
    assert not {"gate", "up"} & set(terms) and not any("dropout" in k for k in terms)


def test_hf_config_of_model_type_nemotron_is_arch_nemotron():
    cfg = {"model_type": "nemotron", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
           "vocab_size": 1000, "intermediate_size": 4096, "partial_rotary_factor": 0.5}
    m = model_from_hf_config(cfg)
    assert (m.arch, m.gated_mlp, m.partial_rotary_factor) == ("nemotron", False, 0.5)
    assert model_from_hf_config({**cfg, "model_type": "llama"}).gated_mlp


def test_partial_rotary_factor_needs_rope():
    base = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 100}
    with pytest.raises(ScenarioError, match="partial_rotary_factor"):
        model_from_mapping({**base, "arch": "gpt", "partial_rotary_factor": 0.5})
    assert model_from_mapping({**base, "arch": "nemotron"}).ffn_hidden == 256  # Megatron's 4h default


def test_megatron_export_writes_nemotrons_switches_and_nanotron_refuses_it():
    sc = scenario("nemotron-22b-dgx-h100-64gpu-fp8")
    args = megatron_args(sc)
    assert {"--squared-relu", "--apply-layernorm-1p", "--disable-bias-linear"} <= set(args) and "--swiglu" not in args
    assert args[args.index("--rotary-percent") + 1] == "0.5" and args[args.index("--normalization") + 1] == "LayerNorm"
    assert args[args.index("--position-embedding-type") + 1] == "rope"
    assert any("Llama" in why for why in unsupported(sc, "nanotron"))


def test_the_8b_and_22b_rows_are_scored_and_the_340b_row_says_why_not():
    cases, skipped = corpus_runs()
    scored = {c["id"] for c in cases}
    assert {"corpus/nemo_24_07_h100:nemotron-8b-dgx-h100-64gpu-fp8",
            "corpus/nemo_24_07_h100:nemotron-22b-dgx-h100-64gpu-fp8"} <= scored
    why = next(s["reason"] for s in skipped if s["id"] == "nemo_24_07_h100:nemotron-340b-dgx-h100-128gpu-fp8")
    assert "overlap_p2p_comm False" in why and "nemotron_340b.yaml:135-136" in why

"""Multi-token prediction (DeepSeek-V3 §2.2; Megatron-Core multi_token_prediction.py): the model field, its
parameters and FLOPs, its place on the last pipeline stage, its ops, memory and recomputation."""
from dataclasses import replace

import pytest

from simulator.errors import ScenarioError
from simulator.model import load_model, model_from_hf_config, model_from_mapping
from simulator.params import flop_params, layer_params, total_params
from simulator.plan.blocks import chunk_blocks
from simulator.plan.flops import attention_flops_per_token, model_flops_per_step
from simulator.plan.layout import last_chunk, rank_chunks
from simulator.plan.memory import static_bytes
from simulator.plan.mtp import mtp_comms, mtp_passes
from simulator.plan.opgraph import Compute, shard
from simulator.plan.step_ops import tied_embedding_allreduce
from simulator.scenario import load_scenario

S70 = "scenarios/70b_512gpu.yaml"  # Llama 3 70B, TP8 (SP) PP8 DP8, untied embeddings
FLASH_MODEL_SHARE = 3 / 3.5  # as tests/test_ops.py: FA's backward is 2.5x, the convention counts 2x


def _plan_flops(sc) -> float:
    """Model FLOPs of every compute op of the plan's blocks (recomputation excluded), all ranks."""
    total = 0.0
    for r in range(sc.parallel.pp):
        chunks = rank_chunks(sc, r)
        has_emb = 0 in [c for c, _ in chunks]
        for c, _ in chunks:
            blocks = chunk_blocks(sc, c, has_emb, {})
            for kind in ("F", "B", "W"):
                for n in (n for b in blocks[kind] for n in b.nodes):
                    if isinstance(n.op, Compute) and n.tag != "R":
                        total += n.op.flops * (FLASH_MODEL_SHARE if n.op.kind == "attention" else 1.0 if n.op.kind == "gemm" else 0.0)
    return total * sc.parallel.tp * sc.parallel.cp * sc.dp * sc.micro_batches


def test_the_deepseek_v3_preset_reads_num_nextn_predict_layers():
    assert load_model("deepseek-v3").mtp_layers == 1


def test_a_config_without_num_nextn_predict_layers_has_no_mtp():
    assert load_model("llama3-70b").mtp_layers == 0


def test_a_negative_depth_is_refused_with_its_key():
    with pytest.raises(ScenarioError) as e:
        model_from_mapping({"arch": "llama", "layers": 2, "hidden": 64, "ffn_hidden": 128, "heads": 4, "vocab": 100,
                            "mtp_layers": -1})
    assert e.value.path == "model.mtp_layers"


def test_a_bad_config_value_names_the_config_key():
    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "vocab_size": 100, "num_nextn_predict_layers": -2}
    with pytest.raises(ScenarioError) as e:
        model_from_hf_config(cfg)
    assert "num_nextn_predict_layers" in e.value.path


def test_mtp_layers_beyond_the_layer_bound_are_refused():
    with pytest.raises(ScenarioError) as e:
        model_from_mapping({"arch": "llama", "layers": 2040, "hidden": 64, "ffn_hidden": 128, "heads": 4, "vocab": 100,
                            "mtp_layers": 9})
    assert e.value.path == "model.mtp_layers"


def test_the_mtp_module_adds_its_layer_projection_and_norms_to_the_parameters():
    """DeepSeek-V3: 671 B main model; Hugging Face's 685 B adds a 14 B MTP module that stores its own embedding
    and head copies (model card), which Megatron shares: 11.6 B here, 13.5 B with the two V x h copies."""
    m = load_model("deepseek-v3")
    mtp = total_params(m) - total_params(replace(m, mtp_layers=0))
    assert mtp == layer_params(m, m.layers - 1).total + 2 * m.hidden ** 2 + 3 * m.hidden
    assert (mtp + 2 * m.vocab * m.hidden) / 1e9 == pytest.approx(14.0, abs=0.6)


def test_each_depth_adds_one_layer_one_projection_and_one_head_to_the_model_flops():
    """Megatron-LM training.py num_floating_point_operations: the MTP layers count as layers (MoE when the last
    layer is), the eh_proj's 2h^2 and one more pass through the logits per depth."""
    m = load_model("deepseek-v3")
    base = replace(m, mtp_layers=0)
    last = layer_params(m, m.layers - 1)
    routed = m.moe.top_k * last.experts // m.moe.experts
    per_depth = last.attn + last.mlp + routed + 2 * m.hidden ** 2 + m.vocab * m.hidden
    for d in (1, 2):
        assert flop_params(replace(m, mtp_layers=d)) - flop_params(base) == d * per_depth
        extra_attention = attention_flops_per_token(replace(m, mtp_layers=d), 4096) - attention_flops_per_token(base, 4096)
        assert extra_attention == pytest.approx(d * attention_flops_per_token(base, 4096) / m.layers)


@pytest.mark.parametrize("scenario, overrides", [
    (S70, ["model.mtp_layers=1"]),
    (S70, ["model.mtp_layers=2", "parallel.sp=false"]),
    ("scenarios/mixtral_ep.yaml", ["model.mtp_layers=1", "parallel.ep_imbalance=1.0", "training.recompute=full"]),
])
def test_the_plans_ops_add_up_to_the_model_flops_with_mtp(scenario, overrides):
    sc = load_scenario(scenario, overrides)
    want = model_flops_per_step(sc.model, sc.training.seq_len, sc.training.global_batch)
    assert _plan_flops(sc) == pytest.approx(want, rel=1e-9)


def test_the_mtp_module_sits_on_the_last_stage_after_its_layers():
    sc = load_scenario(S70, ["model.mtp_layers=1"])
    m, pp = sc.model, sc.parallel.pp
    assert all(m.layers not in ls for r in range(pp - 1) for _, ls in rank_chunks(sc, r))
    assert rank_chunks(sc, pp - 1)[-1][1][-1] == m.layers
    keys = [b.key for b in chunk_blocks(sc, last_chunk(sc), False, {})["F"]]
    assert keys[-2:] == ["MTP1", "head"] and keys[-3] == f"L{m.layers - 1}"


def test_the_last_stage_grows_by_the_mtp_parameters_and_an_embedding_copy():
    """Untied model at pp > 1: the MTP stage keeps a copy of the word embedding (Megatron language_module.py
    setup_embeddings_and_output_layer) beside the module's layer, projection and norms; other stages unchanged."""
    on, off = load_scenario(S70, ["model.mtp_layers=1"]), load_scenario(S70)
    m, t, last = on.model, on.parallel.tp, on.parallel.pp - 1
    lp = layer_params(m, m.layers)
    params = (lp.attn + lp.mlp + lp.mtp_proj) / t + lp.norms + m.vocab * m.hidden / t
    grow = {k: static_bytes(on, last)[k] - static_bytes(off, last)[k] for k in ("weights", "grads", "optimizer")}
    per_param = {k: static_bytes(off, last)[k] / (static_bytes(off, last)["weights"] / 2) for k in grow}
    for k in grow:
        assert grow[k] == pytest.approx(params * per_param[k], rel=1e-9)
    assert static_bytes(on, 0) == static_bytes(off, 0)


DSV3 = "validation/scenarios/deepseek_v3.yaml"  # DeepSeek-V3, PP16 EP64 DualPipe, MTP depth 1


def test_dualpipe_keeps_one_embedding_table_on_the_rank_holding_both_ends():
    """DeepSeek-V3 §3.2.3: DualPipe puts the embedding and the output head (with the MTP module) on one rank so
    that the MTP module and the main model share them physically: rank 0 holds no second table. The same layout
    under a schedule that places the ends apart keeps Megatron's copy on the head's rank."""
    from simulator.plan.sharded_params import head_rank_tensors, rank_params
    dual = load_scenario(DSV3)
    m = dual.model
    assert len(head_rank_tensors(dual, True)) == 2  # the final norm and the head only
    assert len(head_rank_tensors(dual, False)) == 3  # a head rank without the embedding still keeps a copy
    edges = rank_params(dual, 0)
    assert edges.embedding and edges.head
    one_f = load_scenario(DSV3, ["parallel.pp_schedule=1f1b", "parallel.vpp=1"])
    assert head_rank_tensors(one_f, False)[-1] == m.vocab * m.hidden / one_f.parallel.tp


def test_the_embedding_copy_is_summed_with_the_first_stages():
    assert tied_embedding_allreduce(load_scenario(S70)) is None
    c = tied_embedding_allreduce(load_scenario(S70, ["model.mtp_layers=1"]))
    assert c is not None and c.collective == "all_reduce"


def test_the_projection_gathers_its_input_and_output_over_tp_with_sp():
    sc = load_scenario(S70, ["model.mtp_layers=1"])
    z = shard(sc)
    fwd = [c for c in mtp_comms(mtp_passes(sc, sc.model.layers, z)) if c.name.startswith("mtp_")]
    assert [(c.name, c.collective, c.bytes) for c in fwd[:2]] == [
        ("mtp_sp_allgather_eh_proj", "all_gather", 2 * z.T * z.h * z.ab), ("mtp_eh_proj_allgather", "all_gather", z.T * z.h * z.ab)]


def test_full_recompute_reruns_the_projection_and_the_block_method_skips_the_module():
    """Megatron checkpoints the module with the uniform method and warns that block is not supported for MTP."""
    def recomputed(overrides):
        sc = load_scenario(S70, ["model.mtp_layers=1"] + overrides)
        return {n.op.name for n in mtp_passes(sc, sc.model.layers, shard(sc)).B if n.tag == "R"}
    assert "mtp_eh_proj" in recomputed(["training.recompute=full"])
    assert recomputed(["training.recompute=full", "training.recompute_layers=1"]) == set()


def test_nemo_25_09s_deepseek_v3_flops_per_token_count_the_mtp_module():
    """The published model TFLOP/s over tokens/s of NeMo 25.09's DeepSeek-V3 rows is the model FLOPs per token
    NVIDIA counts: 260.0-260.6 G, which is clustersim's count with the MTP module (260.6 G), 4 % above without it."""
    import yaml
    from pathlib import Path
    doc = yaml.safe_load((Path(__file__).parents[1] / "validation/references/corpus/megatron_bridge_25_09.yaml").read_text())
    rows = [r for r in doc["runs"] if r["id"].startswith("deepseekv3-") and r["layout"]["precision"] != "FP8-MX"]
    assert len(rows) == 3
    m = load_model("deepseek-v3")
    with_mtp = model_flops_per_step(m, 4096, 1) / 4096
    without = model_flops_per_step(replace(m, mtp_layers=0), 4096, 1) / 4096
    for r in rows:
        published = r["measured"]["model_tflops_per_gpu"] * 1e12 / r["measured"]["tokens_per_s_per_gpu"]
        assert published == pytest.approx(with_mtp, rel=0.003), r["id"]
        assert abs(published / without - 1) > 0.03, r["id"]


def _dsv3(framework, model="deepseek-v3"):
    from simulator.scenario import scenario_from_mapping
    return scenario_from_mapping({"model": model, "framework": framework,
                                  "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1},
                                  "cluster": {"topology": "h800", "nodes": 32},
                                  "parallel": {"pp": 16, "ep": 16, "dp": 16, "pp_layers": [4] * 15 + [1]}})


def test_torchtitan_trains_a_preset_without_mtp_unless_the_scenario_writes_a_depth():
    """torchtitan's DeepSeek-V3 registry builds MTP layers only when asked (num_mtp_layers=0 by default,
    torchtitan.yaml mtp_from_config); Megatron runs the config's depth (Megatron-Bridge's recipe sets 1)."""
    assert _dsv3("torchtitan").model.mtp_layers == 0
    assert _dsv3("megatron").model.mtp_layers == 1
    from simulator.scenario import scenario_from_mapping
    written = scenario_from_mapping({"model": {"arch": "llama", "layers": 8, "hidden": 1024, "ffn_hidden": 4096, "heads": 8,
                                               "vocab": 32000, "mtp_layers": 1},
                                     "framework": "torchtitan", "training": {"seq_len": 2048, "global_batch": 8, "micro_batch": 1},
                                     "cluster": {"topology": "dgx-h100", "nodes": 1}, "parallel": {"dp": 8}})
    assert written.model.mtp_layers == 1

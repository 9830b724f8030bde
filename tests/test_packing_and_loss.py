"""Packed documents with a document mask (plan/documents.py) and the loss kernels (`training.loss`)."""
from pathlib import Path

import pytest

from simulator.errors import ScenarioError
from simulator.plan.documents import packing
from simulator.run import simulate
from simulator.scenario import load_scenario, scenario_from_mapping

ROOT = Path(__file__).resolve().parent.parent


def test_documents_of_an_eighth_of_the_sequence_cost_the_sum_of_their_squares():
    pk = packing("fixed", 1024.0, 0.0, (), 8192, 1, 1, "zigzag")
    assert pk.cost_vs_causal == pytest.approx(8 * 1024 * 1025 / (8192 * 8193), rel=1e-9)
    whole = packing("fixed", 8192.0, 0.0, (), 8192, 1, 1, "zigzag")
    assert whole.cost_vs_causal == pytest.approx(1.0)


def test_a_spread_of_lengths_costs_more_than_fixed_lengths_of_the_same_mean():
    fixed = packing("fixed", 2048.0, 0.0, (), 32768, 1, 1, "zigzag").cost_vs_causal
    spread = packing("lognormal", 2048.0, 4096.0, (), 32768, 1, 1, "zigzag").cost_vs_causal
    assert spread > 1.5 * fixed, "E[l^2] / E[l] grows with the variance"


def test_zigzag_cp_is_uneven_under_a_document_mask_and_per_document_balancing_is_not():
    zig = packing("fixed", 3000.0, 0.0, (), 8192, 4, 1, "zigzag")
    doc = packing("fixed", 3000.0, 0.0, (), 8192, 4, 1, "document")
    assert doc.cp_busiest_vs_causal == pytest.approx(doc.cost_vs_causal)
    assert zig.cp_busiest_vs_causal > 1.2 * zig.cost_vs_causal
    one_doc = packing("fixed", 8192.0, 0.0, (), 8192, 4, 1, "zigzag")
    assert one_doc.cp_busiest_vs_causal == pytest.approx(1.0, rel=1e-3), "zig-zag balances one causal document"


def test_the_packing_is_drawn_the_same_way_every_time():
    args = ("lognormal", 700.0, 900.0, (), 16384, 2, 2, "zigzag")
    packing.cache_clear()
    first = packing(*args)
    packing.cache_clear()
    assert packing(*args) == first


def _128k(mask, **training):
    raw = {"model": "llama3-8b", "framework": "megatron",
           "training": {"seq_len": 131072, "global_batch": 8, "micro_batch": 1, "recompute": "full",
                        "documents": {"distribution": "fixed", "mean": 16384}, "attention_mask": mask, **training},
           "cluster": {"topology": "dgx-h100", "nodes": 4}, "parallel": {"tp": 4, "cp": 8, "sp": True}}
    return scenario_from_mapping(raw)


def test_a_128k_context_run_moves_with_its_documents():
    causal = simulate(_128k("causal"), estimator="analytic")
    docs = simulate(_128k("document"), estimator="analytic")
    assert docs["attention"]["cost_vs_causal"] == pytest.approx(0.125, rel=1e-3)
    assert docs["iteration_time_s"] < 0.8 * causal["iteration_time_s"], "attention dominates at 128K"
    assert docs["model"]["flops_per_step"] < causal["model"]["flops_per_step"]
    assert docs["mfu"] <= 1.0


def test_a_histogram_file_is_read_and_a_bad_one_named(tmp_path):
    good = tmp_path / "lengths.csv"
    good.write_text("length,weight\n512,3\n4096,1\n")
    sc = load_scenario(ROOT / "scenarios" / "1b_1gpu.yaml",
                       [f"training.documents={{distribution: histogram, file: {good}}}", "training.attention_mask=document"])
    assert sc.training.documents.bins == [[512.0, 3.0], [4096.0, 1.0]]
    bad = tmp_path / "bad.csv"
    bad.write_text("512,3\nlots,1\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(ROOT / "scenarios" / "1b_1gpu.yaml", [f"training.documents={{distribution: histogram, file: {bad}}}"])
    assert e.value.path == "training.documents.file" and "line 2" in e.value.problem


@pytest.mark.parametrize("documents, path", [
    ({"distribution": "lognormal", "mean": 100}, "training.documents.spread"),
    ({"distribution": "uniform", "mean": 100, "spread": 100}, "training.documents.spread"),
    ({"distribution": "histogram"}, "training.documents.bins"),
    ({"distribution": "histogram", "bins": [[0, 1]]}, "training.documents.bins[0]"),
    ({"distribution": "zipf", "mean": 3}, "training.documents.distribution"),
])
def test_bad_documents_name_the_key(documents, path):
    with pytest.raises(ScenarioError) as e:
        load_scenario(ROOT / "scenarios" / "1b_1gpu.yaml", [f"training.documents={documents}"])
    assert e.value.path == path


def test_a_document_mask_needs_documents():
    with pytest.raises(ScenarioError) as e:
        load_scenario(ROOT / "scenarios" / "1b_1gpu.yaml", ["training.attention_mask=document"])
    assert e.value.path == "training.attention_mask"


# ----------------------------------------------------------------------------------- loss

def _last_stage(loss):
    sc = load_scenario(ROOT / "scenarios" / "1b_1gpu.yaml", [f"training.loss={loss}"])
    r = simulate(sc, estimator="analytic")
    return r, r["memory"]["per_stage"][-1]


def test_cut_cross_entropy_lowers_the_peak_by_the_logits_buffers_the_memory_model_names():
    """1B (vocab 128K), micro-batch 4 x 4096: the standard loss keeps 4sbV fp32 logits and a 4sbV gradient;
    cut keeps one fp32 log-sum-exp per token."""
    from simulator.plan.memory import head_activation_terms
    std_r, std = _last_stage("standard")
    cut_r, cut = _last_stage("cut")
    sc = load_scenario(ROOT / "scenarios" / "1b_1gpu.yaml")
    tokens, vocab = 4 * 4096, sc.model.vocab
    logits = head_activation_terms(sc)["logits"]
    assert logits == 4 * tokens * vocab
    saved = (std["allocated_peak_gib"] - cut["allocated_peak_gib"]) * 2**30
    assert saved == pytest.approx(2 * 4 * tokens * vocab - 4 * tokens, rel=0.02)
    assert cut_r["iteration_time_s"] < std_r["iteration_time_s"], "no fp32 passes over the logits"


def test_the_fused_loss_keeps_bf16_logits_and_no_gradient_copy():
    _, std = _last_stage("standard")
    _, fused = _last_stage("fused")
    tokens, vocab = 4 * 4096, 128256
    assert (std["allocated_peak_gib"] - fused["allocated_peak_gib"]) * 2**30 == pytest.approx((4 + 4 - 2) * tokens * vocab, rel=0.02)


def test_cut_cross_entropy_recomputes_the_logits_in_the_backward():
    std, _ = _last_stage("standard")
    cut, _ = _last_stage("cut")
    assert cut["hfu"] > std["hfu"] * (cut["mfu"] / std["mfu"]) * 1.001, "the recomputed LM head counts in HFU only"


def test_a_chunked_fused_loss_holds_one_chunk_of_logits_and_the_head_inputs_gradient():
    sc_whole = load_scenario(ROOT / "scenarios" / "1b_1gpu.yaml", ["training.loss=fused"])
    sc_chunk = load_scenario(ROOT / "scenarios" / "1b_1gpu.yaml", ["training.loss=fused", "training.loss_chunk_tokens=4096"])
    whole = simulate(sc_whole, estimator="analytic")["memory"]["per_stage"][-1]
    chunk = simulate(sc_chunk, estimator="analytic")["memory"]["per_stage"][-1]
    tokens, vocab, hidden = 4 * 4096, sc_whole.model.vocab, sc_whole.model.hidden
    saved = 2 * tokens * vocab - 2 * tokens * hidden - 2 * 4096 * vocab
    assert (whole["allocated_peak_gib"] - chunk["allocated_peak_gib"]) * 2**30 == pytest.approx(saved, rel=0.01)
    with pytest.raises(ScenarioError) as e:
        load_scenario(ROOT / "scenarios" / "1b_1gpu.yaml", ["training.loss_chunk_tokens=4096"])
    assert e.value.path == "training.loss_chunk_tokens"

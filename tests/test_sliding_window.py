"""Sliding window attention (`model.sliding_window`, `model.full_attention_every`; plan/documents.py prices the mask)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.errors import ScenarioError
from simulator.model import model_from_hf_config, model_from_mapping
from simulator.plan.documents import SEED, TOKENS_DRAWN, draw_lengths, keys_seen, layer_mask, packing
from simulator.plan.flops import attention_flops_per_token, scenario_model_flops
from simulator.plan.layer_ops import layer_passes
from simulator.run import simulate
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "8b_8gpu.yaml"


def _pairs(doc: np.ndarray, window) -> np.ndarray:
    """Brute force: per query of each sequence (rows of `doc`, document ids), the keys it may see."""
    q = np.arange(doc.shape[1])
    visible = (q[None, :] <= q[:, None]) & (doc[:, :, None] == doc[:, None, :])
    if window is not None:
        visible &= q[None, :] > q[:, None] - window
    return visible.sum(axis=2)


def _stream(distribution, mean, spread, seq_len):
    """The token stream `packing` draws, as document ids per sequence (the same seed and lengths)."""
    n_seq = max(8, TOKENS_DRAWN // seq_len)
    lengths = draw_lengths(distribution, mean, spread, (), n_seq * seq_len, np.random.default_rng(SEED))
    return np.repeat(np.arange(len(lengths)), lengths)[:n_seq * seq_len].reshape(n_seq, seq_len)


def _load(*sets, **training):
    """8B on 8 H100 (FSDP), full recompute, at 32K tokens unless `training` says otherwise, with `sets` on top."""
    base = [f"training.{k}={v}" for k, v in {"seq_len": 32768, "global_batch": 8, "recompute": "full", **training}.items()]
    return load_scenario(SCENARIO, base + list(sets))


def _attention_flops(lp) -> float:
    return sum(n.op.flops for n in lp.F + lp.B if getattr(n.op, "kind", "") == "attention")


# ----------------------------------------------------------------------------------- exact counts

@pytest.mark.parametrize("s", [1, 5, 16, 33])
@pytest.mark.parametrize("w", [1, 2, 7, 16, 40])
def test_keys_seen_is_the_brute_force_pair_count_of_one_piece(s, w):
    assert keys_seen(s, w) == _pairs(np.zeros((1, s), dtype=int), w).sum()
    assert keys_seen(s, None) == s * (s + 1) // 2


@pytest.mark.parametrize("w", [None, 3, 10, 64])
def test_the_mask_cost_is_the_brute_force_pair_count_with_documents(w):
    s = 64
    got = packing("lognormal", 20.0, 15.0, (), s, 1, 1, "zigzag", w)
    pairs = np.concatenate([_pairs(chunk, w).sum(axis=1) for chunk in np.array_split(_stream("lognormal", 20.0, 15.0, s), 16)])
    assert got.cost_vs_causal == pytest.approx(pairs.mean() / (s * (s + 1) / 2), rel=1e-12)


def test_a_window_without_documents_is_the_closed_form():
    s, w = 32768, 4096
    pk = packing("fixed", float(s), 0.0, (), s, 1, 1, "zigzag", w)
    closed = (w * (w + 1) / 2 + (s - w) * w) / (s * (s + 1) / 2)
    assert pk.cost_vs_causal == pytest.approx(closed, rel=1e-12)
    assert pk.kernel_tokens == w


@pytest.mark.parametrize("cp", [2, 3])
@pytest.mark.parametrize("w", [None, 5, 13])
def test_zigzag_cp_loads_are_the_brute_force_busiest_rank(cp, w):
    s = 48
    got = packing("uniform", 14.0, 9.0, (), s, cp, 1, "zigzag", w)
    doc = _stream("uniform", 14.0, 9.0, s)
    per_query = _pairs(doc, w)
    chunk = np.arange(s) // (s // (2 * cp))
    rank = np.minimum(chunk, 2 * cp - 1 - chunk)
    loads = np.stack([per_query[:, rank == r].sum(axis=1) for r in range(cp)], axis=1)
    assert got.cp_busiest_vs_causal == pytest.approx((loads.max(axis=1) / (s * (s + 1) / 2 / cp)).mean(), rel=1e-12)


def test_per_document_cp_loads_are_the_brute_force_busiest_rank_under_a_window():
    """Documents of 24 tokens in sequences of 48 over cp 2: every document cut in 4 parts of 6, dealt zig-zag."""
    s, cp, w, length = 48, 2, 5, 24
    got = packing("fixed", float(length), 0.0, (), s, cp, 1, "document", w)
    doc = _stream("fixed", float(length), 0.0, s)
    per_query = _pairs(doc, w)
    part = (np.arange(s) % length) // (length // (2 * cp))
    rank = np.minimum(part, 2 * cp - 1 - part)
    loads = np.stack([per_query[:, rank == r].sum(axis=1) for r in range(cp)], axis=1)
    assert got.cp_busiest_vs_causal == pytest.approx((loads.max(axis=1) / (s * (s + 1) / 2 / cp)).mean(), rel=1e-12)
    assert got.cp_busiest_vs_causal > got.cost_vs_causal, "the first part of each document holds the window's ramp"


# ----------------------------------------------------------------------------------- the model

def test_full_attention_every_n_slides_all_but_every_n_th_layer():
    m = model_from_mapping({"arch": "llama", "layers": 6, "hidden": 64, "heads": 4, "vocab": 100, "sliding_window": 8,
                            "full_attention_every": 3, "mtp_layers": 1})
    assert [m.is_sliding_layer(i) for i in range(6)] == [True, True, False, True, True, False]
    assert m.is_sliding_layer(6) == m.is_sliding_layer(5), "an MTP layer attends like the last"
    assert m.sliding_layers == 4


@pytest.mark.parametrize("sets, key", [
    (["model.full_attention_every=2"], "model.full_attention_every"),
    (["model.sliding_window=0"], "model.sliding_window"),
    (["model.sliding_window=wide"], "model.sliding_window"),
    (["model.sliding_window=4096", "model.full_attention_every=-1"], "model.full_attention_every"),
])
def test_a_bad_window_exits_2_naming_the_key(tmp_path, sets, key):
    trace = tmp_path / "t.json"
    args = [a for s in sets for a in ("--set", s)]
    r = subprocess.run([sys.executable, "-m", "simulator", "run", str(SCENARIO), *args, "--trace", str(trace)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and key in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not trace.exists()


# ----------------------------------------------------------------------------------- Hugging Face configs

BASE = {"hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}


def test_mistral_v01_slides_every_layer():
    m = model_from_hf_config({**BASE, "model_type": "mistral", "sliding_window": 4096})
    assert (m.sliding_window, m.full_attention_every, m.sliding_layers) == (4096, 0, 6)
    assert model_from_hf_config({**BASE, "model_type": "mistral", "sliding_window": None}).sliding_window is None


def test_qwen2_without_use_sliding_window_has_no_window():
    m = model_from_hf_config({**BASE, "model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False,
                              "max_window_layers": 28})
    assert m.sliding_window is None
    assert model_from_hf_config({**BASE, "model_type": "qwen2", "sliding_window": 4096}).sliding_window is None, \
        "transformers' Qwen2Config defaults use_sliding_window to false"


def test_qwen2_with_use_sliding_window_slides_the_layers_from_max_window_layers():
    on = {**BASE, "model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": True}
    assert model_from_hf_config({**on, "max_window_layers": 0}).sliding_layers == 6
    assert model_from_hf_config({**on, "max_window_layers": 6}).sliding_window is None, "no layer from 6 on"
    with pytest.raises(ScenarioError) as e:
        model_from_hf_config({**on, "max_window_layers": 3})
    assert "max_window_layers" in e.value.path


def test_gemma2_slides_the_even_layers():
    m = model_from_hf_config({**BASE, "model_type": "gemma2", "sliding_window": 4096})
    assert m.full_attention_every == 2 and [m.is_sliding_layer(i) for i in range(6)] == [True, False] * 3


def test_gemma3_reads_sliding_window_pattern():
    m = model_from_hf_config({**BASE, "num_hidden_layers": 26, "model_type": "gemma3_text", "sliding_window": 512,
                              "sliding_window_pattern": 6})
    assert m.full_attention_every == 6 and [i for i in range(26) if not m.is_sliding_layer(i)] == [5, 11, 17, 23]


@pytest.mark.parametrize("kinds, every", [
    (["sliding_attention", "sliding_attention", "full_attention"] * 2, 3),
    (["sliding_attention"] * 6, 0),
    (["full_attention"] * 6, None),
])
def test_layer_types_give_the_period(kinds, every):
    m = model_from_hf_config({**BASE, "model_type": "cohere2", "sliding_window": 1024, "layer_types": kinds})
    assert (m.full_attention_every if m.sliding_window else None) == every


@pytest.mark.parametrize("kinds, problem", [
    (["full_attention", "sliding_attention", "full_attention", "full_attention", "sliding_attention", "sliding_attention"],
     "not every N-th"),
    (["sliding_attention", "chunked_attention"] * 3, "not a list of layer types"),
    (["sliding_attention"] * 5, "5 entries for 6 layers"),
])
def test_layer_types_without_a_period_are_named(kinds, problem):
    with pytest.raises(ScenarioError) as e:
        model_from_hf_config({**BASE, "model_type": "cohere2", "sliding_window": 1024, "layer_types": kinds})
    assert e.value.path == "model config.json layer_types" and problem in e.value.problem


# ----------------------------------------------------------------------------------- pricing

def test_a_window_no_shorter_than_the_sequence_changes_nothing():
    plain = simulate(_load(seq_len=8192), "analytic")
    wide = simulate(_load("model.sliding_window=8192", seq_len=8192), "analytic")
    for r in (plain, wide):
        r.pop("sim", None)
        r.pop("scenario", None)
    assert wide["attention"].pop("sliding_window") == 8192 and wide["attention"].pop("sliding_layers") == 32
    plain["attention"].pop("sliding_window"), plain["attention"].pop("sliding_layers")
    wide["model"].pop("name", None), plain["model"].pop("name", None)
    assert json.dumps(wide, sort_keys=True) == json.dumps(plain, sort_keys=True)


def test_a_mistral_window_at_32k_prices_less_attention_a_faster_step_and_fewer_model_flops():
    full, swa = _load(), _load("model.sliding_window=4096")
    assert _attention_flops(layer_passes(swa, 0)) < 0.3 * _attention_flops(layer_passes(full, 0))
    r_full, r_swa = simulate(full, "analytic"), simulate(swa, "analytic")
    assert r_swa["iteration_time_s"] < 0.8 * r_full["iteration_time_s"], "attention dominates an 8B layer at 32K"
    cost = layer_mask(swa, 0).cost_vs_causal
    attention = attention_flops_per_token(full.model, 32768) * 32768 * 8
    assert r_full["model"]["flops_per_step"] - r_swa["model"]["flops_per_step"] == pytest.approx(attention * (1 - cost), rel=1e-9)
    assert r_swa["attention"]["cost_vs_causal"] == pytest.approx(cost)
    assert "sliding window" in scenario_model_flops(swa)[1] and "sliding window" not in scenario_model_flops(full)[1]


def test_the_windowed_kernel_is_priced_as_causal_sequences_of_the_window_carrying_the_same_work():
    sc = _load("model.sliding_window=4096")
    plain = next(n.op for n in layer_passes(_load(), 0).F if n.op.kind == "attention")
    op = next(n.op for n in layer_passes(sc, 0).F if n.op.kind == "attention")
    bh, s_q, s_kv = op.shape[:3]
    assert (s_q, s_kv) == (4096, 4096)
    # bh is a whole number of sequences: the work matches to half a sequence of 4096
    assert bh * 4096 * 4097 / 2 == pytest.approx(plain.shape[0] * keys_seen(32768, 4096), abs=4096 * 4097 / 4)
    assert op.flops == pytest.approx(plain.flops * layer_mask(sc, 0).cost_vs_causal, rel=1e-12)


def test_full_attention_every_2_prices_the_odd_layers_full():
    full, swa = _load(), _load("model.sliding_window=4096", "model.full_attention_every=2")
    assert _attention_flops(layer_passes(swa, 1)) == pytest.approx(_attention_flops(layer_passes(full, 1)))
    assert _attention_flops(layer_passes(swa, 0)) < 0.3 * _attention_flops(layer_passes(swa, 1))
    assert simulate(swa, "analytic")["attention"]["sliding_layers"] == 16
    share = (1 + layer_mask(swa, 0).cost_vs_causal) / 2
    attention = attention_flops_per_token(full.model, 32768) * 32768 * 8
    assert scenario_model_flops(full)[0] - scenario_model_flops(swa)[0] == pytest.approx(attention * (1 - share), rel=1e-9)


def test_with_cp_the_compute_takes_the_busiest_rank_and_the_ring_traffic_stays():
    full, swa = _load("parallel.dp=4", "parallel.cp=2"), _load("parallel.dp=4", "parallel.cp=2", "model.sliding_window=4096")
    busiest = layer_mask(swa, 0).cp_busiest_vs_causal
    assert layer_mask(swa, 0).cost_vs_causal < busiest < 0.3
    assert _attention_flops(layer_passes(swa, 0)) == pytest.approx(busiest * _attention_flops(layer_passes(full, 0)), rel=1e-12)
    comm = lambda sc: sorted((n.op.name, n.op.bytes) for n in layer_passes(sc, 0).F + layer_passes(sc, 0).B
                             if getattr(n.op, "dim", "") == "cp")
    assert comm(swa) == comm(full) and comm(full)


@pytest.mark.parametrize("sets", [
    ("model.sliding_window=4096", "model.full_attention_every=2"),
    ("model.sliding_window=4096", "parallel.dp=4", "parallel.cp=2"),
    ("model.sliding_window=2048", "training.attention_mask=document",
     "training.documents={distribution: lognormal, mean: 3000, spread: 4000}"),
])
def test_the_analytic_listing_and_the_engine_agree_under_a_window(sets):
    from simulator.cost.costs import build_cost_model
    from simulator.evaluate.analytic import estimate
    from simulator.evaluate.engine import simulate_engine
    sc = _load(*sets)
    cost = build_cost_model(sc)
    a, e = estimate(sc, cost, in_pass_sharing=False), simulate_engine(sc, cost, contention=False)
    assert a.iteration_time_s == pytest.approx(e.iteration_time_s, rel=1e-9)


def test_stages_holding_different_numbers_of_full_layers_agree_across_the_three_evaluators():
    """pp 4 over 32 layers with a full layer every 6th: stage 2 holds two full layers (17, 23), the others one;
    the engine's representative mode, its --full run and the analytic listing give the same step."""
    from evaluators import three_step_times
    sc = _load("model.sliding_window=4096", "model.full_attention_every=6", "parallel.dp=2", "parallel.pp=4",
               "parallel.zero=1", "parallel.pp_schedule=1f1b")
    full_layers = [[i for i in range(8 * s, 8 * s + 8) if not sc.model.is_sliding_layer(i)] for s in range(4)]
    assert full_layers == [[5], [11], [17, 23], [29]]
    analytic, representative, whole = three_step_times(sc)
    assert representative == pytest.approx(whole, rel=1e-9)
    assert analytic == pytest.approx(whole, rel=1e-3)


def test_the_text_report_names_the_window_and_its_layers():
    from simulator.report.text import format_report
    text = format_report(simulate(_load("model.sliding_window=4096", "model.full_attention_every=2"), "analytic"))
    line = next(x for x in text.splitlines() if x.strip().startswith("attention:"))
    assert "sliding window 4,096 tokens on 16 layer(s)" in line and "0.617x the causal mask's work" in line


def test_the_mistral_7b_preset_is_the_paper_s_table_and_slides_every_layer():
    """Jiang et al. 2023 (arXiv 2310.06825) Table 1: dim 4096, 32 layers, head_dim 128, hidden_dim 14336, 32 heads,
    8 KV heads, window 4096, vocabulary 32000; 7.24 B parameters with its untied head."""
    from simulator.model import load_model
    from simulator.params import total_params
    m = load_model("mistralai/Mistral-7B-v0.1")
    assert (m.hidden, m.layers, m.d_head, m.ffn_hidden, m.heads, m.n_kv, m.vocab) == (4096, 32, 128, 14336, 32, 8, 32000)
    assert m.sliding_window == 4096 and m.full_attention_every == 0 and m.sliding_layers == 32
    assert total_params(m) == pytest.approx(7.24e9, rel=0.002)

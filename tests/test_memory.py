"""Per-rank memory model (simulator/memory.py): states, activations, micro-batches in flight, buffers."""
from pathlib import Path

import pytest

from simulator.plan import memory as mem
from simulator.plan.layout import rank_chunks
from simulator.plan.sharded_params import rank_params
from simulator.errors import ScenarioError
from simulator.scenario import load_scenario, scenario_from_mapping

ROOT = Path(__file__).resolve().parent.parent
S70B = ROOT / "scenarios" / "70b_512gpu.yaml"


def llama70b(*overrides):
    return load_scenario(S70B, list(overrides))


def gpt(t=8, sp=False, **training):
    """GPT-3 175B shape (KOR22 Table 3) on one DGX node, one layer per test is enough."""
    tr = {"seq_len": 2048, "global_batch": 1, "recompute": "none", "attention": "eager", **training}
    return scenario_from_mapping({
        "model": {"arch": "gpt", "layers": 4, "hidden": 12288, "ffn_hidden": 4 * 12288, "heads": 96, "vocab": 51200},
        "training": tr, "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus_per_node": t},
        "parallel": {"tp": t, "sp": sp}})


def moe(**parallel):
    """Mixtral-8x7B on two DGX nodes, TP2 PP2 DP4 (EP borrows from DP)."""
    return scenario_from_mapping({
        "model": "mixtral-8x7b", "training": {"seq_len": 4096, "global_batch": 32, "recompute": "selective"},
        "cluster": {"topology": "dgx-h100", "nodes": 2},
        "parallel": {"tp": 2, "pp": 2, "dp": 4, "sp": True, "zero": 1, **parallel}})


# --------------------------------------------------------------------------- model states

@pytest.mark.parametrize("zero,expected", [(0, 16), (1, 4 + 12 / 64), (2, 2 + 14 / 64), (3, 16 / 64)])
def test_zero_paper_bytes_per_param_with_16bit_grads(zero, expected):
    assert mem.state_bytes_per_param("bf16", 2, "adamw", zero, 64).total == pytest.approx(expected)


@pytest.mark.parametrize("precision,zero,expected",
                         [("bf16", 0, 18), ("bf16", 1, 6 + 12 / 8), ("fp32", 0, 16), ("fp32", 1, 8 + 8 / 8)])
def test_megatron_distributed_optimizer_table(precision, zero, expected):
    assert mem.state_bytes_per_param(precision, 4, "adamw", zero, 8).total == pytest.approx(expected)


def test_sgd_keeps_only_the_master_copy():
    assert mem.state_bytes_per_param("bf16", 4, "sgd", 0, 1).optimizer == 4
    assert mem.state_bytes_per_param("fp32", 4, "sgd", 0, 1).optimizer == 0


def test_70b_stage0_states_are_7_5_bytes_per_param():
    sc = llama70b()
    assert sum(mem.static_bytes(sc, 0).values()) == pytest.approx(7.5 * rank_params(sc, 0).total)
    assert sum(mem.static_bytes(sc, 0).values()) / 1e9 == pytest.approx(9.01, rel=5e-3)


def test_zero3_states_shrink_with_dp():
    small = sum(mem.static_bytes(llama70b("parallel.zero=3", "parallel.dp=8"), 0).values())
    large = sum(mem.static_bytes(llama70b("parallel.zero=3", "parallel.dp=16", "cluster.nodes=128"), 0).values())
    assert large == pytest.approx(small / 2)


def test_expert_states_shard_over_the_expert_dp_group():
    sc = moe(ep=4, zero=1, etp=1)
    dense_group, expert_group = mem.zero_groups(sc)
    # folded experts are not tensor-split, so TP peers join the expert-DP group: tp * dp * cp / ep = 2
    assert (dense_group, expert_group) == (4, 2)
    rp = rank_params(sc, 0)
    # fp32 master + Adam (12 B) divided by 4 for dense params, by 2 for routed experts
    assert mem.static_bytes(sc, 0)["optimizer"] == pytest.approx(rp.dense * 12 / 4 + rp.expert * 12 / 2)
    split = moe(ep=2, zero=1)  # Megatron's default, etp = tp: each expert split over TP, its shards over dp * cp / ep
    assert split.parallel.etp == 2 and mem.zero_groups(split) == (4, 2)
    assert rank_params(split, 0).expert == pytest.approx(rank_params(moe(ep=2, zero=1, etp=1), 0).expert / 2)


@pytest.mark.parametrize("dtype, k", [("fp32", 12), ("bf16", 8), ("fp16", 8), ("fp8", 6)])
def test_adam_moments_at_a_lower_precision_shrink_the_optimizer_states_and_the_step(dtype, k):
    """`training.adam_moment_dtype` (Megatron's precision-aware optimizer, DeepSeek-V3's BF16 moments): the fp32 master
    plus two moments of 4, 2 or 1 bytes each; the step reads and writes both moments once, so its traffic falls by
    4 x (4 - moment) bytes a parameter, and a profile's measured AdamW (fp32 moments) is scaled by that ratio."""
    from simulator.plan.step_ops import optimizer_bytes_per_param, optimizer_op
    assert mem.state_bytes_per_param("bf16", 4, "adamw", 0, 1, moment_dtype=dtype).optimizer == k
    sc = llama70b(f"training.adam_moment_dtype={dtype}")
    from dataclasses import fields
    from simulator.scenario import Training
    assert next(f for f in fields(Training) if f.name == "adam_moment_dtype").metadata["choices"] == tuple(mem.MOMENT_BYTES)
    saved = 4 * (4 - mem.MOMENT_BYTES[dtype])
    assert optimizer_bytes_per_param(sc) == optimizer_bytes_per_param(sc, "adamw", "fp32") - saved
    op = optimizer_op(sc, 1e6)
    assert op.shape[1:] == (() if dtype == "fp32" else ((optimizer_bytes_per_param(sc)) / optimizer_bytes_per_param(sc, "adamw", "fp32"),))
    assert mem.memory_report(sc).per_stage[0].optimizer == pytest.approx(
        mem.memory_report(llama70b()).per_stage[0].optimizer * k / 12)


def test_dualpipev_holds_each_parameter_once():
    base = llama70b("parallel.pp_schedule=zbv", "parallel.vpp=2")
    dual = llama70b("parallel.pp_schedule=dualpipev", "parallel.vpp=2")
    for r in range(8):
        assert mem.static_bytes(dual, r) == mem.static_bytes(base, r)
    assert sum(rank_params(dual, r).total for r in range(8)) == pytest.approx(
        sum(rank_params(llama70b(), r).total for r in range(8)))


def test_layer_rank_params_agree_with_ops_rank_params():
    for sc in (llama70b(), moe(ep=2), gpt()):
        for r in range(sc.parallel.pp):
            layers = [i for _, ls in rank_chunks(sc, r) for i in ls]
            total = sum(mem.layer_rank_params(sc, i) for i in layers) + sum(mem._end_unit_params(sc, r))
            assert total == pytest.approx(rank_params(sc, r).total)


# --------------------------------------------------------------------------- activations per layer

def test_gpt_tensor_parallel_layer_is_kor22_eq2():
    sc, t, s, h, a = gpt(), 8, 2048, 12288, 96
    assert mem.activation_bytes_per_layer(sc, 0) == pytest.approx(s * h * (10 + 24 / t + 5 * a * s / (h * t)))


def test_sequence_parallel_divides_every_layer_tensor_by_t():
    for rc in ("none", "selective", "full"):
        assert mem.activation_bytes_per_layer(gpt(sp=True, recompute=rc), 0) == pytest.approx(
            mem.activation_bytes_per_layer(gpt(t=1, recompute=rc), 0) / 8)


def test_full_recompute_below_selective_below_none():
    vals = [mem.activation_bytes_per_layer(gpt(sp=True, recompute=rc), 0) for rc in ("full", "selective", "none")]
    assert vals[0] < vals[1] < vals[2]


def test_flash_attention_stores_no_scores():
    flash = mem.layer_activation_terms(llama70b("training.recompute=none"), 0)
    eager = mem.layer_activation_terms(llama70b("training.recompute=none", "training.attention=eager"), 0)
    assert "softmax_output" not in flash and "flash_lse" in flash
    assert eager["softmax_output"] == 2 * (64 // 8) * 4096 ** 2  # 2as^2b/t, no dropout for llama


def test_llama_selective_layer_is_sb_12h_4hkv_6f_over_t():
    sc = llama70b()
    s, h, kv, f = 4096, 8192, 1024, 28672
    assert mem.activation_bytes_per_layer(sc, 0) == pytest.approx(s * (12 * h + 4 * kv + 6 * f) / 8)


def test_full_recompute_keeps_the_sequence_sharded_layer_input():
    assert mem.activation_bytes_per_layer(llama70b("training.recompute=full"), 0) == 2 * 4096 * 8192 / 8


def test_context_parallel_divides_the_sequence():
    base = mem.activation_bytes_per_layer(llama70b(), 0)
    cp2 = mem.activation_bytes_per_layer(llama70b("parallel.cp=2", "parallel.dp=4"), 0)
    assert cp2 == pytest.approx(base / 2)


def test_moe_expert_activations_grow_with_top_k_and_imbalance():
    sc = moe(ep=2, etp=1)
    layer = next(i for i in range(sc.model.layers) if sc.model.is_moe_layer(i))
    base = mem.layer_activation_terms(sc, layer)
    skew = mem.layer_activation_terms(moe(ep=2, ep_imbalance=1.5, etp=1), layer)
    tokens = 4096 // 2  # SP shard routed by this rank
    assert base["expert_fc1_input"] == 2 * tokens * 2 * 4096  # top_k = 2
    assert skew["expert_fc1_input"] == pytest.approx(1.5 * base["expert_fc1_input"])
    # the weighted SwiGLU keeps one fp32 probability per dispatched row, so it grows with the rows too
    assert skew["expert_probs"] == pytest.approx(1.5 * base["expert_probs"]) == pytest.approx(1.5 * 2 * tokens * 4)


# --------------------------------------------------------------------------- in flight

def test_afab_holds_m_microbatches_on_stage0():
    sc = llama70b("parallel.pp_schedule=afab")
    assert mem.inflight_microbatches(sc, 0) == sc.micro_batches == 128


def test_1f1b_holds_p_minus_rank():
    sc = llama70b()
    assert [mem.inflight_microbatches(sc, r) for r in range(8)] == [8, 7, 6, 5, 4, 3, 2, 1]


def test_1f1b_capped_by_microbatches():
    sc = llama70b("training.global_batch=32")  # m = 4 < p = 8
    assert mem.inflight_microbatches(sc, 0) == 4


def test_1f1b_stage0_holds_one_microbatch_through_all_layers():
    """KOR22 Eq. 5: p micro-batches of L/p layers = one micro-batch through L layers."""
    sc = llama70b()
    layers_part = mem.activation_bytes_in_flight(sc, 0) - 8 * sum(mem.embedding_activation_terms(sc).values())
    assert layers_part == pytest.approx(80 * mem.activation_bytes_per_layer(sc, 0))


@pytest.mark.parametrize("v,mult", [(2, 1.4375), (5, 1.175), (10, 1.0875)])
def test_interleaved_rank0_is_kor22_formula(v, mult):
    sc = llama70b("parallel.pp_schedule=interleaved-1f1b", f"parallel.vpp={v}")
    assert mem.inflight_microbatches(sc, 0) == pytest.approx(8 * mult)


def test_interleaved_last_rank_holds_one_pass_of_the_last_chunk():
    sc = llama70b("parallel.pp_schedule=interleaved-1f1b", "parallel.vpp=2")
    counts = mem.inflight_per_chunk(sc, 7)
    assert counts[15] == 1 and counts[7] == 8


def test_zbv_matches_1f1b_stage0_on_every_rank():
    sc = llama70b("parallel.pp_schedule=zbv", "parallel.vpp=2")
    assert [mem.inflight_microbatches(sc, r) for r in range(8)] == [8] * 8


def test_dualpipev_holds_2p_plus_1_stage_passes():
    sc = llama70b("parallel.pp_schedule=dualpipev", "parallel.vpp=2")
    for r in range(8):
        assert sum(mem.inflight_per_chunk(sc, r).values()) == 17
        assert mem.inflight_microbatches(sc, r) == 8.5
    assert mem.inflight_per_chunk(sc, 0)[15] == 1  # the loss chunk: its F is followed by its B


def test_logits_live_on_the_last_stage_only():
    sc = llama70b()
    head = mem.head_activation_terms(sc)
    assert head["logits"] == 4 * 4096 * 128256 / 8
    first = mem.chunk_activation_bytes(sc, 0, 0)
    last = mem.chunk_activation_bytes(sc, 7, 7)
    assert last - first == pytest.approx(sum(head.values()) - sum(mem.embedding_activation_terms(sc).values()))


def test_chunk_on_another_rank_is_refused():
    with pytest.raises(ValueError):
        mem.chunk_activation_bytes(llama70b(), 0, 3)


# --------------------------------------------------------------------------- buffers and report

def test_zero3_gathers_two_layers_and_one_layer_of_grads():
    sc = llama70b("parallel.zero=3")
    buf = mem.buffer_bytes(sc, 3)  # interior stage: layers only
    layer = mem.layer_rank_params(sc, 30)
    assert buf["zero3_params"] == pytest.approx(2 * layer * 2)
    assert buf["zero3_grads"] == pytest.approx(layer * 4)
    assert mem.buffer_bytes(llama70b(), 3)["zero3_params"] == 0


def test_ring_cp_holds_an_extra_kv_chunk_and_dkv():
    buf = mem.buffer_bytes(llama70b("parallel.cp=2", "parallel.dp=4"), 0)
    tokens, kv = 4096 // 2, 1024 // 8
    assert buf["cp_kv"] == 2 * (2 * tokens * 2 * kv)


def test_cpu_host_has_no_cuda_allowances():
    sc = scenario_from_mapping({"model": "smollm-360m", "training": {"seq_len": 256, "global_batch": 2},
                                "cluster": {"topology": "cpu-host", "nodes": 1, "gpus_per_node": 2},
                                "parallel": {"dp": 2}})
    buf = mem.buffer_bytes(sc, 0)
    assert buf["cuda_context"] == buf["nccl"] == buf["fragmentation"] == 0


def test_peak_is_the_sum_of_its_parts():
    for sc in (llama70b(), llama70b("parallel.zero=3", "training.recompute=full"), moe(ep=4)):
        for s in mem.memory_report(sc).per_stage:
            assert s.peak == pytest.approx(s.weights + s.grads + s.optimizer + s.activations + s.buffers)
            assert s.buffers == pytest.approx(mem.buffers_total(s.buffer_kinds))


def test_70b_report_fits_and_eager_costs_more():
    rep = mem.memory_report(llama70b())
    assert rep.fits and rep.peak_gib == max(s.peak for s in rep.per_stage) / mem.GIB
    s0 = rep.per_stage[0]
    assert s0.activations / 1e9 == pytest.approx(11.24, rel=5e-3)
    eager = mem.memory_report(llama70b("training.attention=eager", "training.recompute=none")).per_stage[0]
    assert eager.activations / 1e9 == pytest.approx(32.72, rel=5e-3)


def test_report_json_has_the_contract_keys():
    out = mem.memory_report(llama70b()).to_json()
    assert set(out) == {"capacity_gib", "peak_gib", "free_gib", "headroom_gib", "fits", "verdict", "per_stage"}
    assert set(out["per_stage"][0]) == {"stage", "weights_gib", "grads_gib", "optimizer_gib", "activations_gib",
                                        "buffers_gib", "peak_gib", "optimizer_step_gib", "allocated_peak_gib"}
    assert out["capacity_gib"] == 79.65


def test_out_of_place_zero_gather_holds_a_full_weight_buffer_in_the_optimizer_step():
    """nanotron's ZeRO-1 gathers the updated bf16 weights into a separate buffer: + 2 (1 + 1/dp) B/param."""
    inplace = mem.memory_report(llama70b("parallel.zero=1")).per_stage[0]
    buffer = mem.memory_report(llama70b("parallel.zero=1", "parallel.zero_gather_inplace=false")).per_stage[0]
    dp = llama70b().dp
    params = inplace.weights / 2
    assert buffer.optimizer_step - inplace.optimizer_step == pytest.approx(2 * params * (1 + 1 / dp), rel=1e-9)
    assert inplace.optimizer_step == pytest.approx(inplace.weights + inplace.grads + inplace.optimizer)
    assert buffer.peak >= buffer.optimizer_step


# --------------------------------------------------------------------------- torch.autocast (PyTorch AMP)

GPU_1B = ROOT / "scenarios" / "replay" / "gpu" / "1b-accum.yaml"


def test_autocast_holds_18_bytes_per_cast_weight_in_backward_and_16_at_the_optimizer_step():
    """fp32 parameter (its own master) 4 + fp32 .grad 4 + Adam m, v 8, plus autocast's cached bf16 copy (2)
    until the step's backward ends: the same 18 B/param as Megatron's bf16 layout with fused fp32
    accumulation, but 2 fewer than the unfused one, and the copy is gone at the optimizer step."""
    sc = load_scenario(GPU_1B)
    assert sc.training.autocast
    params = rank_params(sc, 0).total
    st = mem.static_bytes(sc, 0)
    assert (st["weights"], st["grads"], st["optimizer"]) == pytest.approx((4 * params, 4 * params, 8 * params))
    cache = mem.buffer_bytes(sc, 0)["autocast_cache"]
    norms = sc.model.layers * 2 * sc.model.hidden + sc.model.hidden
    assert cache == pytest.approx(2 * (params - norms))  # tied: the table is cast once, for the LM head
    s = mem.stage_memory(sc, 0)
    assert s.optimizer_step == pytest.approx(16 * params + sum(s.buffer_kinds[k] for k in mem.OPTIMIZER_TRANSIENTS))
    megatron = load_scenario(GPU_1B, ["training.autocast=false", "training.grad_accum_fused=false"])
    saved = 20 * params - (16 * params + cache * (1 + mem.ALLOCATOR_FRAGMENTATION))  # the cache is allocated each step
    # what autocast's eager code keeps beyond that (activations, the loss's second temporary) is
    # tests/test_autocast_saved.py's; here the state and the cache alone
    state = lambda m: m.weights + m.grads + m.optimizer  # noqa: E731
    m = mem.stage_memory(megatron, 0)
    assert state(m) - (state(s) + cache * (1 + mem.ALLOCATOR_FRAGMENTATION)) == pytest.approx(saved, rel=1e-6)
    assert saved > 1.8 * params


def test_autocast_is_refused_where_it_cannot_be_the_layout():
    for override, allowed in (("training.precision=fp32", "precision bf16"), ("training.grad_dtype=bf16", "grad_dtype fp32"),
                              ("parallel.zero=1", "parallel.zero 0")):
        with pytest.raises(ScenarioError, match="training.autocast") as e:
            load_scenario(GPU_1B, [override])
        assert allowed in str(e.value)


def test_allocated_peak_is_what_the_caching_allocator_holds():
    """`torch.cuda.max_memory_allocated` sees tensors only: the peak less the CUDA context, NCCL's
    buffers and the fragmentation slack, and never less than the optimizer step's allocation."""
    for sc in (load_scenario(GPU_1B), llama70b()):
        for r in range(sc.parallel.pp):
            s = mem.stage_memory(sc, r)
            k = s.buffer_kinds
            assert k["cuda_context"] > 0 and k["fragmentation"] > 0
            backward = s.weights + s.grads + s.optimizer + s.activations + s.buffers
            expected = max(backward - k["cuda_context"] - k["nccl"] - k["fragmentation"], s.optimizer_step)
            assert s.allocated_peak == pytest.approx(expected) and s.allocated_peak < s.peak
            assert s.as_gib()["allocated_peak_gib"] == pytest.approx(s.allocated_peak / mem.GIB)


def test_the_replay_predicts_the_allocated_peak_it_measures():
    pytest.importorskip("torch")
    from calibrate.replay.report import predict
    sc = load_scenario(GPU_1B)
    predicted, why = predict(sc)
    assert why is None
    assert predicted["peak_memory_gib"] == pytest.approx(mem.stage_memory(sc, 0).allocated_peak / mem.GIB)


def _fsdp_scenario(reshard: bool, overrides=()):
    from pathlib import Path

    from simulator.scenario import load_scenario
    root = Path(__file__).resolve().parent.parent
    return load_scenario(root / "scenarios" / "8b_8gpu.yaml",
                         ["framework=megatron", f"parallel.reshard_after_forward={'true' if reshard else 'false'}", *overrides])


def test_fsdp2_without_resharding_gathers_once_per_micro_batch_and_holds_the_unsharded_parameters():
    """FSDP2's reshard_after_forward=False (the `zero3-no-reshard` policy): each block's parameters are
    all-gathered before its forward only, so a step moves half the gather bytes, and the rank holds its
    unsharded parameters from the forward to the backward instead of a few blocks at a time."""
    from simulator.plan.lower import build_plan
    from simulator.plan.memory import buffer_bytes
    from simulator.plan.sharded_params import param_bytes, rank_params

    def gather_bytes(sc, kinds=("F", "B", "BW")):
        plan = build_plan(sc)
        counts = {}
        for st in plan.stages[0].steps:
            counts[(st.chunk, st.kind)] = counts.get((st.chunk, st.kind), 0) + 1
        return sum(n * sum(c.bytes for cs in plan.stages[0].dp[chunk].z3_gather.get(kind, ()) for c in cs)
                   for (chunk, kind), n in counts.items() if kind in kinds)

    resharded, kept = _fsdp_scenario(True), _fsdp_scenario(False)
    assert gather_bytes(kept) == pytest.approx(gather_bytes(resharded, ("F",)))  # the forward's gathers only
    assert gather_bytes(resharded) > 1.9 * gather_bytes(kept)  # all but the embedding's again for the backward
    held = buffer_bytes(kept, 0)["zero3_params"]
    assert held == pytest.approx(rank_params(kept, 0).total * param_bytes(kept))
    assert held > 4 * buffer_bytes(resharded, 0)["zero3_params"]


def test_reshard_after_forward_is_a_zero3_setting():
    from simulator.errors import ScenarioError
    with pytest.raises(ScenarioError, match="reshard_after_forward"):
        _fsdp_scenario(False, ("parallel.zero=1",))

"""Op lists: FLOPs are conserved across the layout; collectives sit where Megatron puts them."""
import pytest

from simulator.plan.flops import model_flops_per_step
from simulator.plan.step_ops import dp_buckets, head_backward, head_forward, param_gather_buckets
from simulator.plan.sharded_params import layer_rank_params, layer_rank_tensors, rank_params, rank_tensors
from simulator.plan.layer_ops import layer_passes
from simulator.plan.opgraph import Comm, Compute, shard
from simulator.scenario import load_scenario

FLASH_MODEL_SHARE = 3 / 3.5  # FA runs fwd + 2.5x bwd; the model convention counts 3x fwd (docs/modeling.md §2.4)


def model_flops_from_ops(sc):
    z = shard(sc)
    total = 0.0
    for r in range(sc.parallel.pp):
        rp = rank_params(sc, r)
        lists = []
        for layer in rp.layers:
            lp = layer_passes(sc, layer, z)
            lists += [lp.F, lp.B, lp.W]
        if rp.head:
            b, w = head_backward(sc, z)
            lists += [head_forward(sc, z), b, w]
        for nodes in lists:
            for n in nodes:
                if isinstance(n.op, Compute) and n.tag != "R":
                    if n.op.kind == "gemm":
                        total += n.op.flops
                    elif n.op.kind == "attention":
                        total += n.op.flops * FLASH_MODEL_SHARE
    return total * sc.parallel.tp * sc.parallel.cp * sc.dp * sc.micro_batches


@pytest.mark.parametrize("overrides", [
    [],
    ["parallel.cp=2", "parallel.dp=4"],
    ["parallel.cp=4", "parallel.dp=2"],
    ["parallel.cp=2", "parallel.dp=4", "parallel.cp_comm=allgather"],
    ["parallel.tp=4", "parallel.dp=16", "parallel.sp=false"],
    ["parallel.pp=4", "parallel.dp=16", "parallel.pp_schedule=interleaved-1f1b", "parallel.vpp=2"],
    ["training.recompute=full"],
])
def test_flops_of_all_ops_equal_model_flops(overrides):
    sc = load_scenario("scenarios/70b_512gpu.yaml", overrides)
    want = model_flops_per_step(sc.model, sc.training.seq_len, sc.training.global_batch)
    assert model_flops_from_ops(sc) == pytest.approx(want, rel=1e-9)


def test_moe_flops_conserved_with_balanced_routing():
    sc = load_scenario("scenarios/mixtral_ep.yaml", ["parallel.ep_imbalance=1.0"])
    want = model_flops_per_step(sc.model, sc.training.seq_len, sc.training.global_batch)
    assert model_flops_from_ops(sc) == pytest.approx(want, rel=1e-6)


def test_moe_imbalance_loads_the_busiest_rank():
    a = load_scenario("scenarios/mixtral_ep.yaml", ["parallel.ep_imbalance=1.0"])
    b = load_scenario("scenarios/mixtral_ep.yaml", ["parallel.ep_imbalance=1.5"])
    assert model_flops_from_ops(b) > model_flops_from_ops(a)


def comms(nodes):
    return [(n.op.collective, n.op.dim) for n in nodes if isinstance(n.op, Comm)]


def test_sp_puts_two_allgathers_and_two_reducescatters_per_layer_forward():
    sc = load_scenario("scenarios/70b_512gpu.yaml")
    lp = layer_passes(sc, 0)
    assert sorted(comms(lp.F)) == sorted([("all_gather", "tp")] * 2 + [("reduce_scatter", "tp")] * 2)
    # backward: the transposes, plus Megatron's two wgrad re-gathers (KOR22 §4.2.2), issued under the dgrad GEMMs
    # (parallel.tp_linear_async, Megatron's default) or, without it, in the weight-gradient pass
    assert len(comms(lp.B)) == 6 and len(comms(lp.W)) == 0
    blocking = layer_passes(load_scenario("scenarios/70b_512gpu.yaml", ["parallel.tp_linear_async=false"]), 0)
    assert len(comms(blocking.B)) == 4 and len(comms(blocking.W)) == 2


def test_tp_without_sp_all_reduces_twice_each_way():
    sc = load_scenario("scenarios/70b_512gpu.yaml", ["parallel.sp=false"])
    lp = layer_passes(sc, 0)
    assert comms(lp.F) == [("all_reduce", "tp")] * 2
    assert comms(lp.B) == [("all_reduce", "tp")] * 2


def test_tp_bytes_per_layer_match_megatron_volume():
    """4 collectives of S_a = 2sbh bytes per layer forward (docs/modeling.md §4.2)."""
    sc = load_scenario("scenarios/70b_512gpu.yaml")
    lp = layer_passes(sc, 0)
    s_a = 2 * 4096 * 8192
    assert [n.op.bytes for n in lp.F if isinstance(n.op, Comm)] == [s_a] * 4


def test_ep_has_four_token_all_to_alls_per_moe_layer_and_a_count_exchange_before_dispatch():
    """Dispatch and combine each way, and in forward a count exchange of 8 B per expert just before the
    dispatch (the variable-size all-to-all needs the split sizes; backward reuses them)."""
    sc = load_scenario("scenarios/mixtral_ep.yaml", ["parallel.etp=1"])  # (expert TP adds its own: test_moe_folding.py)
    lp = layer_passes(sc, 0)
    fwd = [n.op for n in lp.F if isinstance(n.op, Comm) and n.op.dim == "ep"]
    bwd = [n.op for n in lp.B if isinstance(n.op, Comm) and n.op.dim == "ep"]
    assert all(c.collective == "all_to_all" for c in fwd + bwd)
    assert [c.name for c in fwd] == ["ep_counts", "ep_dispatch", "ep_combine"]
    assert fwd[0].bytes == 8 * sc.model.moe.experts
    assert len(bwd) == 2 and all(c.bytes == fwd[1].bytes for c in bwd)


def test_ep_regroups_received_rows_by_local_expert_only_when_a_rank_holds_several():
    """After the dispatch a rank's rows come grouped by source rank; with more than one local expert they
    are sorted by expert before the expert GEMMs and back after them (torchtitan generate_permute_indices,
    Megatron sort_chunks_by_idxs), each a gather of the received rows, forward and backward."""
    def names(sc, nodes):
        return [n.op.name for n in nodes if isinstance(n.op, Compute) and "sort" in n.op.name]
    several = load_scenario("scenarios/mixtral_ep.yaml", ["parallel.ep=4", "parallel.etp=1"])  # 8 experts: 2 per rank
    lp = layer_passes(several, 0)
    fwd = [n.op for n in lp.F]
    order = [op.name for op in fwd if op.name in ("ep_dispatch", "ep_sort", "expert_fc1", "expert_fc2", "ep_unsort",
                                                    "ep_combine")]
    assert order == ["ep_dispatch", "ep_sort", "expert_fc1", "expert_fc2", "ep_unsort", "ep_combine"]
    z = shard(several)
    routed = z.T // z.t  # each TP rank routes its sequence-parallel shard
    rows = round(routed * several.model.moe.top_k * several.parallel.ep_imbalance)
    sort = next(op for op in fwd if op.name == "ep_sort")
    assert sort.bytes == 2 * rows * several.model.hidden * z.ab
    assert sorted(names(several, lp.B)) == ["ep_sort_bwd", "ep_unsort_bwd"]
    one = load_scenario("scenarios/mixtral_ep.yaml")  # ep 8: one expert per rank
    assert not names(one, layer_passes(one, 0).F) and not names(one, layer_passes(one, 0).B)
    none = load_scenario("scenarios/mixtral_ep.yaml", ["parallel.ep=1"])
    assert not names(none, layer_passes(none, 0).F)


def test_full_recompute_repeats_the_forward_in_backward():
    sc = load_scenario("scenarios/70b_512gpu.yaml", ["training.recompute=full"])
    lp = layer_passes(sc, 0)
    recomputed = [n.op.name for n in lp.B if n.tag == "R" and isinstance(n.op, Compute)]
    forward = [n.op.name for n in lp.F if isinstance(n.op, Compute)]
    assert recomputed == forward


def test_deps_point_backwards():
    for f in ("scenarios/70b_512gpu.yaml", "scenarios/mixtral_ep.yaml"):
        sc = load_scenario(f, ["parallel.cp=2", "parallel.dp=" + ("4" if "70b" in f else "8")])
        lp = layer_passes(sc, 0)
        for nodes in (lp.F, lp.B, lp.W):
            for i, n in enumerate(nodes):
                assert all(0 <= d < i for d in n.deps)


def test_unfused_fp32_grad_accumulation_adds_a_pass_over_the_gradients():
    fused = load_scenario("scenarios/70b_512gpu.yaml")
    unfused = load_scenario("scenarios/70b_512gpu.yaml", ["training.grad_accum_fused=false"])
    assert not [n for n in layer_passes(fused, 0).W if n.op.name == "grad_accum_fp32"]
    acc = [n.op for n in layer_passes(unfused, 0).W if n.op.name == "grad_accum_fp32"]
    assert len(acc) == 1 and acc[0].bytes == pytest.approx(10 * 855_654_400 / 8, rel=1e-3)


def test_gemm_efficiency_override_slows_gemms():
    from simulator.cost.costs import build_cost_model
    base = load_scenario("scenarios/70b_512gpu.yaml")
    slow = load_scenario("scenarios/70b_512gpu.yaml", ["cluster.efficiency={gemm: 0.27}"])
    qkv = next(n.op for n in layer_passes(base, 0).F if n.op.name == "qkv")
    assert build_cost_model(slow).compute_time(qkv) > 1.9 * build_cost_model(base).compute_time(qkv) - 1e-5


@pytest.mark.parametrize("phase", ["fwd", "bwd"])
def test_flash_attention_at_head_dim_64_runs_at_the_fa2_share_of_its_head_dim_128_speed(phase):
    """FA2 on H100 at 4k tokens: 284 / 319 TFLOP/s forward, 279 / 310 backward at head dim 64 / 128 (FA3
    paper, Figs. 4-5). The same FLOPs at head dim 64 take 1/0.895 as long, at 96 in between, above 128 the same.
    This is the spec-based fallback's rule (a GPU without published attention points)."""
    from dataclasses import replace
    from simulator.cost.costs import KERNEL_OVERHEAD_S, build_cost_model
    sc = load_scenario("scenarios/70b_512gpu.yaml")
    cost = replace(build_cost_model(sc), published_kernels=False)
    attn = next(n.op for n in (layer_passes(sc, 0).F + layer_passes(sc, 0).B) if isinstance(n.op, Compute)
                and n.op.kind == "attention" and n.op.shape[5] == phase)
    assert attn.shape[3] == 128
    def secs(d):
        return cost.compute_time(replace(attn, bytes=0.0, shape=attn.shape[:3] + (d,) + attn.shape[4:])) - KERNEL_OVERHEAD_S
    assert secs(64) / secs(128) == pytest.approx(1 / 0.895, rel=1e-9)
    assert secs(128) < secs(96) < secs(64)
    assert secs(256) == pytest.approx(secs(128), rel=1e-12)


def test_unfused_accumulation_in_fp32_training_moves_12_bytes_per_param():
    """PyTorch autograd adds each micro-batch's fp32 gradient into `.grad`: read both, write one."""
    sc = load_scenario("scenarios/70b_512gpu.yaml", ["training.grad_accum_fused=false", "training.precision=fp32"])
    acc = [n.op for n in layer_passes(sc, 0).W if n.op.name == "grad_accum_fp32"]
    assert len(acc) == 1 and acc[0].bytes == pytest.approx(12 * 855_654_400 / 8, rel=1e-3)


def test_deepspeed_bf16_optimizer_casts_each_gradient_to_fp32_then_adds_it_every_micro_batch():
    """DeepSpeed's BF16_Optimizer (bf16 weights, fp32 accumulation): `hp_grad.add_(lp.grad.to(fp32))` after
    every micro-batch, a cast (read 2 + write 4 B/param) and an fp32 add (read 8 + write 4): 18 B/param,
    against Megatron's accumulation fused into the weight-gradient GEMM (none)."""
    sc = load_scenario("scenarios/70b_512gpu.yaml", ["framework=deepspeed", "training.grad_dtype=fp32"])
    assert not sc.training.grad_accum_fused and sc.framework.spec.grad_accum_cast.value is True
    w = {n.op.name: n.op for n in layer_passes(sc, 0).W}
    assert w["upcast_wgrad"].bytes == pytest.approx(6 * 855_654_400 / 8, rel=1e-3)
    assert w["grad_accum_fp32"].bytes == pytest.approx(12 * 855_654_400 / 8, rel=1e-3)


def test_sharded_gradients_add_no_full_size_accumulation_pass():
    """Under ZeRO-2 each micro-batch's gradients are reduce-scattered as they come: no full-size accumulator
    (DeepSpeed stage 2 takes its ZeRO optimizer, not BF16_Optimizer, engine.py:1316-1318)."""
    sc = load_scenario("scenarios/70b_512gpu.yaml", ["framework=deepspeed", "training.grad_dtype=fp32", "parallel.zero=2",
                                                   "parallel.pp=1", "parallel.dp=64"])
    assert not [n for n in layer_passes(sc, 0).W if n.op.name.startswith("grad_accum")]


def test_deepspeed_bf16_gradients_accumulate_through_autograd_in_bf16():
    """Without fp32 accumulation DeepSpeed's gradients add up in `.grad` (bf16): read 2 + 2, write 2 B/param."""
    sc = load_scenario("scenarios/70b_512gpu.yaml", ["framework=deepspeed"])
    assert sc.training.grad_dtype == "bf16"
    acc = [n.op for n in layer_passes(sc, 0).W if n.op.name.startswith("grad_accum")]
    assert [a.name for a in acc] == ["grad_accum_bf16"]
    assert acc[0].bytes == pytest.approx(6 * 855_654_400 / 8, rel=1e-3)


def test_ring_steps_are_one_causal_block_then_unmasked_half_blocks_merged_in_forward_only():
    sc = load_scenario("scenarios/8b_8gpu.yaml", ["parallel.cp=4", "parallel.dp=2"])
    z = shard(sc)
    lp = layer_passes(sc, 0, z)
    attn = [n.op for n in lp.F if isinstance(n.op, Compute) and n.op.kind == "attention"]
    assert [a.shape[1:3] + a.shape[4:5] for a in attn] == [(z.s, z.s, 0.5)] + [(z.s, z.s // 2, 1.0)] * 3
    assert len({a.flops for a in attn}) == 1  # zig-zag: every step does the same work
    names = lambda nodes: [n.op.name for n in nodes]  # noqa: E731
    assert [x for x in names(lp.F) if x.startswith("cp_merge")] == ["cp_merge1", "cp_merge2", "cp_merge3"]
    assert not [x for x in names(lp.B) if x.startswith("cp_merge")]
    assert len([x for x in names(lp.B) if x.startswith("cp_accumulate")]) == 4
    ring = [n.op for n in lp.F + lp.B if isinstance(n.op, Comm) and n.op.dim == "cp"]
    assert not all(c.blocking for c in ring)  # on GPUs the K/V hops overlap the blocks


def test_ring_hops_block_where_communication_takes_the_compute_cores_turn():
    sc = load_scenario("scenarios/replay/cp2.yaml")
    assert not sc.topology.node.comm_overlaps_compute
    lp = layer_passes(sc, 0, shard(sc))
    assert all(n.op.blocking for n in lp.F + lp.B if isinstance(n.op, Comm))


def test_gpt_layers_add_learned_positions_not_rope_and_drop_out_before_each_residual():
    """GPT (Megatron) has no rotary pass; its bias-dropout-add writes a byte mask per element on top of the
    residual's three passes (KOR22 §4.1). Llama pays RoPE and a plain residual add."""
    from simulator.plan.opgraph import RESIDUAL_PASSES
    from simulator.validate.accuracy import case_scenario, reference_cases
    gpt = case_scenario(next(c for c in reference_cases() if c.id == "megatron_kor22:22b-full"))
    llama = load_scenario("scenarios/70b_512gpu.yaml")
    for sc, rope, mask_bytes in ((gpt, False, 1), (llama, True, 0)):
        z = shard(sc)
        forward = {n.op.name: n.op for n in layer_passes(sc, 0, z).F if isinstance(n.op, Compute)}
        assert ("rope" in forward) == rope
        elements = z.T_sp * z.h
        assert forward["residual1"].bytes == elements * (RESIDUAL_PASSES[0] * z.ab + mask_bytes)


def test_autocast_casts_each_weight_once_a_step_and_each_gradient_every_micro_batch():
    """Over a step of m micro-batches: one fp32 -> bf16 cast of the layer's weights (6 B/param, served from
    autocast's cache afterwards), m upcasts of the bf16 gradient to fp32 (6 each) and m - 1 adds into .grad
    (12 each; the first gradient is kept as it is). The weight cast has no backward of its own: its
    ToCopyBackward0 is the gradient's upcast."""
    from simulator.plan.sharded_params import autocast_layer_params
    sc = load_scenario("scenarios/replay/gpu/1b-accum.yaml")
    m = sc.micro_batches
    assert m == 4
    lp = layer_passes(sc, 0)
    params = autocast_layer_params(sc, 0)
    cast = [n.op for n in lp.F if n.op.name == "autocast_cast"]
    upcast = [n.op for n in lp.W if n.op.name == "upcast_wgrad"]
    acc = [n.op for n in lp.W if n.op.name == "grad_accum_fp32"]
    assert len(cast) == 1 and m * cast[0].bytes == pytest.approx(6 * params)
    grads = sum(layer_rank_params(sc, 0))
    assert len(upcast) == 1 and m * upcast[0].bytes == pytest.approx(grads * 6 * m)
    assert upcast[0].dtype == "bf16"  # priced on the upcast curve of its 16-bit source
    assert len(acc) == 1 and m * acc[0].bytes == pytest.approx(grads * 12 * (m - 1))
    assert not [n for n in lp.B if n.op.name.startswith("autocast_cast")]
    rc = layer_passes(load_scenario("scenarios/replay/gpu/1b-accum.yaml", ["training.recompute=full"]), 0)
    assert [n.op.name for n in rc.B].count("autocast_cast") == 0  # recompute reads the cached copy


@pytest.mark.parametrize("name,overrides", [
    ("8b_8gpu", []),
    ("70b_512gpu", []),
    ("mixtral_ep", []),
    ("70b_512gpu", ["model=deepseek-v3", "parallel.pp=1", "parallel.tp=8", "parallel.dp=64"]),
    ("8b_8gpu", ["model=gpt3-175b", "parallel.tp=8", "parallel.dp=1"]),
])
def test_rank_tensors_hold_the_ranks_parameters(name, overrides):
    """The tensors DP buckets are cut from add up to the rank's parameters, layer by layer and per rank."""
    sc = load_scenario(f"scenarios/{name}.yaml", overrides)
    for layer in range(sc.model.layers):
        d, e = layer_rank_tensors(sc, layer)
        assert (sum(d), sum(e)) == pytest.approx(layer_rank_params(sc, layer), rel=1e-12)
        assert min(d) > 0 and len(d) >= 5
    for r in range(sc.parallel.pp):
        d, e = rank_tensors(sc, r)
        rp = rank_params(sc, r)
        assert (sum(d), sum(e)) == pytest.approx((rp.dense, rp.expert), rel=1e-12)


def test_ddp_buckets_hold_whole_tensors_and_close_at_the_cap():
    """PyTorch DDP's rule: tensors in definition order fill a bucket until it holds at least the cap; a
    tensor above the cap is a bucket alone; buckets come out in backward order. `even` cuts equal ones."""
    sc = load_scenario("scenarios/8b_8gpu.yaml", ["parallel.dp_bucket_mb=10"])
    mb = 1e6
    tensors = [1 * mb, 4 * mb, 30 * mb, 2 * mb, 2 * mb, 1 * mb, 8 * mb]  # elements; 1 byte each below
    assert dp_buckets(sc, tensors, 1) == [13 * mb, 35 * mb]  # 1 + 4 + 30 in the first, 2 + 2 + 1 + 8 after
    assert dp_buckets(sc, [30 * mb, 1 * mb, 4 * mb], 1) == [5 * mb, 30 * mb]  # the last one may stay under it
    assert param_gather_buckets(sc, tensors) == [10 * mb, 60 * mb, 10 * mb, 16 * mb]  # forward order; 2 B each
    even = load_scenario("scenarios/8b_8gpu.yaml", ["parallel.dp_bucket_mb=10", "parallel.dp_bucketing=even"])
    assert dp_buckets(even, tensors, 1) == pytest.approx([9.6 * mb] * 5)
    # Llama-3-8B at tp 1 in 25 MB of bf16: one bucket per QKV, O, gate+up and down projection (all above
    # the cap; the norms ride along), the embedding and the LM head alone: 4 x 32 + 2
    sc = load_scenario("scenarios/8b_8gpu.yaml", ["parallel.tp=1", "parallel.dp=8", "parallel.dp_bucket_mb=25"])
    dense, _ = rank_tensors(sc, 0)
    assert len(dp_buckets(sc, dense, 2)) == 4 * 32 + 2
    assert sum(dp_buckets(sc, dense, 2)) == pytest.approx(2 * sum(dense))


def _ds_pipeline(framework: str = "deepspeed"):
    return load_scenario("scenarios/70b_512gpu.yaml", [f"framework={framework}", "parallel.sp=false"])


def test_deepspeed_pipeline_sends_each_tp_rank_its_slice_of_the_activation():
    """DeepSpeed's pipe engine partitions a stage's output over TP and sends only the rank's slice
    (pipe/engine.py:754, pipe_partitioned on by default): s*b*h*2 / t bytes, where Megatron without SP
    sends the whole tensor from every TP rank."""
    from simulator.plan.step_ops import pp_activation_bytes
    ds, meg = _ds_pipeline(), _ds_pipeline("megatron")
    z = shard(ds)
    full = z.T * z.h * 2
    assert pp_activation_bytes(ds) == pytest.approx(full / 8)
    assert pp_activation_bytes(meg) == pytest.approx(full)


def test_deepspeed_middle_stage_gathers_its_input_before_forward_and_output_and_gradient_before_backward():
    """The receiver all-gathers the slice over TP before its forward (engine.py:726); before the backward the
    sender all-gathers its stored output and the received gradient (:833, :848). The first layer's compute
    waits for them."""
    from simulator.plan.blocks import chunk_blocks
    sc = _ds_pipeline()
    z = shard(sc)
    blocks = chunk_blocks(sc, 3, False, {})
    for kind, names in (("F", ["pp_input_allgather"]), ("B", ["pp_output_allgather", "pp_grad_allgather"]),
                        ("BW", ["pp_output_allgather", "pp_grad_allgather"])):
        nodes = blocks[kind][0].nodes
        gathers = [i for i, n in enumerate(nodes) if isinstance(n.op, Comm) and n.op.name.startswith("pp_")]
        assert [nodes[i].op.name for i in gathers] == names and gathers == list(range(len(names)))
        assert all(nodes[i].op.collective == "all_gather" and nodes[i].op.dim == "tp"
                   and nodes[i].op.bytes == pytest.approx(z.T * z.h * 2) for i in gathers)
        first_compute = next(n for n in nodes if isinstance(n.op, Compute))
        assert set(gathers) <= set(first_compute.deps)
    assert not [n for b in blocks["W"] for n in b.nodes if n.op.name.startswith("pp_")]


def test_pipeline_ends_gather_only_what_they_receive():
    """The first stage receives no activation (no forward gather) and the last sends none (no backward gathers)."""
    from simulator.plan.blocks import chunk_blocks
    sc = _ds_pipeline()
    names = lambda bl: [n.op.name for b in bl for n in b.nodes if n.op.name.startswith("pp_")]  # noqa: E731
    first, last = chunk_blocks(sc, 0, True, {}), chunk_blocks(sc, 7, False, {})
    assert names(first["F"]) == [] and names(first["B"]) == ["pp_output_allgather", "pp_grad_allgather"]
    assert names(last["F"]) == ["pp_input_allgather"] and names(last["B"]) == []


def test_megatron_pipeline_runs_no_partition_gathers():
    from simulator.plan.blocks import chunk_blocks
    blocks = chunk_blocks(_ds_pipeline("megatron"), 3, False, {})
    assert not [n for k in blocks for b in blocks[k] for n in b.nodes if n.op.name.startswith("pp_")]

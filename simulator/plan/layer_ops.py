"""One transformer layer's ops on one rank for one micro-batch: forward F, input-grad backward B (with
any recomputation in front) and weight-grad W, kept apart so zero-bubble schedules can move W
(`layer_passes`). Each entry is a `Node` (`opgraph.py`): an op and the indices of the nodes in the same
list it waits for.

Where Megatron puts TP/SP collectives: NAR21 §3.2, KOR22 §4.2.2 and docs/modeling.md §4.2; CP: docs/modeling.md
4.3 (RFA); EP: 4.5 (MEG-MAP). Memory-bound byte counts: docs/modeling.md §7.3 (derived).
"""
from __future__ import annotations

from dataclasses import replace

from . import autocast_ops, fusion, mla_ops, op_sac
from .autocast_ops import (cast_weights, input_cast, input_cast_backward, is_input_cast, is_weight_cast,
                           weight_grad_accumulation)
from .float8_comm import cast_shares, fp8_tp_gathers, tp_collective_bytes
from .tp_overlap import chunk_tp_overlap, overlap_mode, wgrad_input_saved
from .attention_ops import attention_backward, attention_forward
from .fp8_attention import FP8_ATTENTION_CASTS
from .opgraph import (FP8_CASTS, GELU_PASSES, NORM_PASSES, QUANTIZED, RESIDUAL_PASSES, ROPE_PASSES, SWIGLU_PASSES, Comm,
                      Compute, LayerPasses, OpList, Shard, elementwise, fp8_cast, fp8_cast_backward, gemm, residual_add,
                      shard, tp_collective)
from ..scenario import Scenario
from .layout import layer_recompute, recompute_modules
from .schedules import schedule_spec
from .ep_dispatch import ep_message_bytes
from .policy import scenario_policy
from .sharded_params import autocast_layer_params, expert_tp, layer_rank_params, param_bytes

# ----------------------------------------------------------------------------------- one layer

def _gathered_gemm(sc: Scenario, z: Shard, seq: OpList, gather: str | None, g: Compute) -> None:
    """A column linear behind its SP all-gather (`gather`, its name; None without SP) and its FP8 cast: the cast
    runs before the all-gather where the framework gathers FP8 (`float8_comm.fp8_tp_gathers`: the gathered
    tensor is the GEMM's FP8 operand, so the all-gather stays next to its GEMM), else right before the GEMM."""
    cast = fp8_cast(sc, g, cast_shares(sc, g.name))
    early = cast is not None and gather is not None and fp8_tp_gathers(sc)
    if early:
        seq.compute(cast)
    if gather is not None:
        seq.comm(_layer_gather(sc, z, gather))
    if cast is not None and not early:
        seq.compute(cast)
    seq.compute(g)


def _layer_gather(sc: Scenario, z: Shard, name: str) -> Comm:
    """A layer's SP all-gather of a column linear's input: 16-bit, or FP8 where the framework gathers FP8
    (`float8_comm.tp_collective_bytes`), of the hidden state or, before MLA's up projections, of its latents."""
    return replace(tp_collective(sc, z, name, "all_gather"), bytes=tp_collective_bytes(sc, z, "all_gather", _gathered_width(sc, name)))


def _gathered_width(sc: Scenario, name: str) -> int | None:
    """Values per token a TP collective named `name` moves: MLA's latents for the attention's SP gather
    (`mla_ops.sp_gather_width`) and what mirrors it, else the hidden state (None)."""
    return mla_ops.sp_gather_width(sc.model) if sc.model.mla and name.startswith(ATTN_GATHER) else None


def _mlp_ops(sc: Scenario, z: Shard, moe: bool):
    """(forward GEMM/act list) for a dense MLP or the shared experts; FFN sharded by TP."""
    m = sc.model
    if moe:
        f = m.moe.shared_ffn * m.moe.shared_experts // z.t
    else:
        f = m.ffn_hidden // z.t
    if f == 0:
        return []
    n1 = 2 * f if m.gated_mlp else f
    act = elementwise(activation_name(sc), z.T * f, (SWIGLU_PASSES if m.gated_mlp else GELU_PASSES)[0], z)
    pre = "shared_" if moe else ""
    return [gemm(pre + "fc1", z.T, n1, z.h, z), act, gemm(pre + "fc2", z.T, z.h, f, z)]


def activation_name(sc: Scenario) -> str:
    """The dense MLP's activation op: SwiGLU (llama), GeLU (gpt) or squared ReLU (nemotron, priced as GeLU's
    one fused pass: `ModelSpec.arch`)."""
    arch = sc.model.arch
    return "swiglu" if sc.model.gated_mlp else ("squared_relu" if arch == "nemotron" else "gelu")


def _moe_tokens(sc: Scenario, z: Shard) -> tuple[int, float]:
    """Tokens this rank routes (its SP shard: T/t) and expert-token rows it computes (x top_k x imbalance)."""
    routed = z.T // z.t if z.t > 1 else z.T
    return routed, routed * sc.model.moe.top_k * sc.parallel.ep_imbalance


def _gemm(sc: Scenario, seq: OpList, g: Compute) -> None:
    """A GEMM on the compute stream, behind its FP8 input quantization when it runs in FP8 (`opgraph.fp8_cast`)."""
    cast = fp8_cast(sc, g, cast_shares(sc, g.name))
    if cast is not None:
        seq.compute(cast)
    seq.compute(g)


def _compute(sc: Scenario, seq: OpList, op: Compute) -> None:
    if op.kind == "gemm":
        _gemm(sc, seq, op)
    else:
        seq.compute(op)


def _maybe(seq: OpList, op: Compute | None) -> None:
    if op is not None:
        seq.compute(op)


def layer_forward(sc: Scenario, layer: int, z: Shard, tag: str = "") -> OpList:
    m, p = sc.model, sc.parallel
    seq = OpList(tag)
    sp = p.sp and z.t > 1
    _maybe(seq, cast_weights(sc, "autocast_cast", autocast_layer_params(sc, layer)) if not tag else None)
    seq.compute(elementwise("norm1", z.T_sp * z.h, NORM_PASSES[0], z))
    _maybe(seq, input_cast(sc, z, "qkv"))
    qkv = mla_ops.projections(sc, z) if m.mla else gemm("qkv", z.T, z.q + 2 * z.kv, z.h, z)
    _gathered_gemm(sc, z, seq, ATTN_GATHER if sp else None, qkv)
    if m.rotary:
        seq.compute(elementwise("rope", z.T * (mla_ops.rope_width(m, z) if m.mla else z.q + z.kv), ROPE_PASSES[0], z))
    attention_forward(sc, z, seq, layer)
    _gemm(sc, seq, gemm("out_proj", z.T, z.h, z.kv if m.mla else z.q, z))  # MLA's reads heads x v (`mla_ops`)
    if m.parallel_block:
        _parallel_mlp(sc, z, seq, sp)
        return seq
    if z.t > 1:
        seq.comm(tp_collective(sc, z, "sp_reducescatter_attn" if sp else "tp_allreduce_attn", "reduce_scatter" if sp else "all_reduce"))
    seq.compute(residual_add(sc, z, "residual1"))
    seq.compute(elementwise("norm2", z.T_sp * z.h, NORM_PASSES[0], z))
    moe = m.is_moe_layer(layer)
    if moe:
        e = m.moe
        routed, rows = _moe_tokens(sc, z)
        seq.compute(gemm("router", routed, e.experts, z.h, z))
        seq.compute(elementwise("permute", routed * e.top_k * z.h, 2, z))
        if p.ep > 1:
            seq.comm(Comm("ep_counts", "ep", "all_to_all", float(e.experts * EP_COUNT_BYTES)))
            seq.comm(Comm("ep_dispatch", "ep", "all_to_all", ep_message_bytes(sc, z, routed, "dispatch")))
        et = expert_tp(sc)
        if et > 1:  # the expert-TP group's received rows, gathered once they have arrived (token_dispatcher.py:741-750)
            seq.comm(Comm(EXPERT_TP_GATHER, "ep", "all_gather", float(rows * et * z.h * z.ab), group="tp"))
        rows *= et
        local = e.experts // p.ep
        per_expert = max(1, int(round(rows / local)))
        fe = e.expert_ffn_hidden // et  # this rank's columns of fc1, rows of fc2
        local_sort = p.ep > 1 and local > 1
        if local_sort:  # the received rows come grouped by source rank: regroup them by local expert
            seq.compute(elementwise("ep_sort", round(rows) * z.h, 2, z))
        _gemm(sc, seq, gemm("expert_fc1", per_expert, 2 * fe if m.gated_mlp else fe, z.h, z, repeat=local))
        seq.compute(elementwise("expert_act", rows * fe, (SWIGLU_PASSES if m.gated_mlp else GELU_PASSES)[0], z))
        _gemm(sc, seq, gemm("expert_fc2", per_expert, z.h, fe, z, repeat=local))
        if local_sort:
            seq.compute(elementwise("ep_unsort", round(rows) * z.h, 2, z))
        if et > 1:  # the partial expert outputs summed and scattered back (token_dispatcher.py:824-831)
            seq.comm(Comm(EXPERT_TP_SCATTER, "ep", "reduce_scatter", float(rows * z.h * z.ab), group="tp"))
        if p.ep > 1:
            seq.comm(Comm("ep_combine", "ep", "all_to_all", ep_message_bytes(sc, z, routed, "combine")))
        seq.compute(elementwise("unpermute", routed * e.top_k * z.h, 2, z))
        shared = _mlp_ops(sc, z, moe=True)
        if shared:
            _gathered_gemm(sc, z, seq, "sp_allgather_shared" if sp else None, shared[0])
            for op in shared[1:]:
                _compute(sc, seq, op)
            if z.t > 1:
                seq.comm(tp_collective(sc, z, "sp_reducescatter_shared" if sp else "tp_allreduce_shared",
                                  "reduce_scatter" if sp else "all_reduce"))
    else:
        mlp = _mlp_ops(sc, z, moe=False)
        _maybe(seq, input_cast(sc, z, "fc1") if mlp else None)
        if mlp:  # (none where tp exceeds ffn_hidden)
            _gathered_gemm(sc, z, seq, "sp_allgather_mlp" if sp else None, mlp[0])
        for op in mlp[1:]:
            _compute(sc, seq, op)
        if z.t > 1:
            seq.comm(tp_collective(sc, z, "sp_reducescatter_mlp" if sp else "tp_allreduce_mlp", "reduce_scatter" if sp else "all_reduce"))
    seq.compute(residual_add(sc, z, "residual2"))
    return seq


def _parallel_mlp(sc: Scenario, z: Shard, seq: OpList, sp: bool) -> None:
    """The MLP branch of a parallel block (`model.parallel_block`), after the attention branch's out-projection:
    it reads the same normalised (and, with SP, gathered) input, so no second norm or all-gather; the
    out-projection's partial output is FC2's accumulator (C = A B + C: one more read of a T x h tensor), and
    the branches' sum goes through one all-reduce (one reduce-scatter with SP) and one residual add. The
    backward mirrors it (`layer_passes`): one gather of the output gradient, both branches' dgrads summed into
    the QKV dgrad's output, one reduce-scatter (or all-reduce) of the input gradient."""
    ops = _mlp_ops(sc, z, moe=False)
    if not ops:
        raise ValueError("a parallel block's MLP has no columns on this rank")  # tp > ffn_hidden: refused upstream
    for op in ops[:-1]:
        _compute(sc, seq, op)
    _compute(sc, seq, replace(ops[-1], bytes=ops[-1].bytes + BRANCH_SUM_READ * z.T * z.h * z.ab))
    if z.t > 1:
        seq.comm(tp_collective(sc, z, "sp_reducescatter_block" if sp else "tp_allreduce_block",
                               "reduce_scatter" if sp else "all_reduce"))
    seq.compute(residual_add(sc, z, "residual"))


EXPERT_TP_GATHER, EXPERT_TP_SCATTER = "etp_allgather_experts", "etp_reducescatter_experts"
"""With expert TP (`parallel.etp` = tp > 1), the all-gather of the received rows over the TP group before the
experts and the reduce-scatter of their partial outputs after them; in the backward the one becomes the other. Both
are the token dispatcher's (MLM token_dispatcher.py:741-750, :824-831): they run on the EP stream, between its
all-to-alls, priced on the TP group (`Comm.group`), and count as expert-parallel communication in the report."""

BRANCH_SUM_READ = 1
"""Passes over a T x h tensor that summing a parallel block's two branches adds: the other branch's output
read as the GEMM's C operand (cuBLAS beta = 1; Transformer Engine's GEMM `accumulate`)."""

EP_COUNT_BYTES = 8
"""Bytes per expert of the token-count exchange that precedes every EP dispatch: the ranks must know how
many rows each will receive before the variable-size all-to-all (torchtitan `expert_parallel.py`: an
`all_to_all_single` of int64 counts per expert; Megatron's all-to-all dispatcher gathers the same counts).
Forward only: the backward all-to-alls reuse the forward's split sizes."""

ATTN_GATHER = "sp_allgather_attn"
"""The attention's SP all-gather, before its QKV linear (or MLA's up projections: `mla_ops.sp_gather_width`)."""
COLUMN_LINEARS = ("qkv", "fc1", "shared_fc1")
"""Column-parallel GEMMs: their input is the SP all-gather's output."""
_BWD_COMM = {"all_gather": "reduce_scatter", "reduce_scatter": "all_gather", "all_to_all": "all_to_all"}


def backward_of(op: Compute, z: Shard) -> tuple[Compute | None, Compute | None]:
    """(input-grad op, weight-grad op) for a forward compute op."""
    if op.kind == "gemm":
        m, n, k = op.shape
        dgrad = Compute(op.name + "_dgrad", "gemm", op.flops, op.bytes, op.dtype, (m, k, n), op.repeat)
        if op.name in ("attn_scores",):
            return dgrad, None
        wgrad = Compute(op.name + "_wgrad", "gemm", op.flops, op.bytes, op.dtype, (k, n, m), op.repeat)
        return dgrad, wgrad
    if op.kind == "elementwise" and op.name.startswith("fp8_cast_"):
        return fp8_cast_backward(op), None
    if op.kind == "elementwise":
        passes = {"norm": NORM_PASSES, "swiglu": SWIGLU_PASSES, "expert_act": SWIGLU_PASSES, "gelu": GELU_PASSES,
                  "squared_relu": GELU_PASSES, "rope": ROPE_PASSES, "residual": RESIDUAL_PASSES}
        key = next((k for k in passes if op.name.startswith(k)), None)
        fwd, bwd = passes[key] if key else (2, 2)
        return Compute(op.name + "_bwd", "elementwise", 0.0, op.bytes * bwd / fwd, op.dtype, op.shape), None
    return None, None


def tp_linear_async(sc: Scenario) -> bool:
    """`parallel.tp_linear_async` where it applies: tp > 1, comm that can overlap, `overlap_tp` off, weight
    gradients computed with their dgrads (not a split-backward schedule). With SP the column linear's input
    re-gather runs under its dgrad GEMM and its dgrad's reduce-scatter under its wgrad GEMM; without SP its dgrad's
    all-reduce runs under its wgrad GEMM (Megatron-Core tensor_parallel/layers.py:696, :708; Transformer Engine v2.8
    linear.py:737-752). NCCL runs the collectives on the SMs the overlapped GEMM needs (the reason Megatron's
    --tp-comm-overlap moves them to copy engines): that cost is `cluster.efficiency.comm_sm_share` (`sm_share.py`)."""
    p = sc.parallel
    return (p.tp_linear_async and p.tp > 1 and not sc.overlap_tp and sc.topology.node.comm_overlaps_compute
            and not schedule_spec(p.pp_schedule).splits_backward)


def layer_passes(sc: Scenario, layer: int, z: Shard | None = None) -> LayerPasses:
    """F, B and W node lists of one layer for one micro-batch on one rank."""
    z = z or shard(sc)
    fwd = layer_forward(sc, layer, z)
    b = OpList()
    rc = layer_recompute(sc, layer)
    op_level = rc == "selective" and op_sac.applies(sc)
    if rc == "full":
        b.extend(layer_forward(sc, layer, z, tag="R"))
    elif op_level:  # torchtitan's SAC: the block's forward replays, saved ops served from their cache
        b.extend(op_sac.recompute_list(sc, z, tuple(fwd.nodes)))
    elif rc == "selective":
        b.extend(_module_reruns(sc, z, fwd))
    w_ops: list[Compute] = []
    wgrad_ag: list[Comm] = []
    sp = sc.parallel.sp and z.t > 1
    async_linear = tp_linear_async(sc)
    regather = None  # async column linear: its re-gather's node, then its wgrads wait for the dgrad's reduce-scatter
    parallel = sc.model.parallel_block
    micro_pipeline = sc.overlap_tp and overlap_mode(sc) == "micro_pipeline"
    saved_input = wgrad_input_saved(sc)
    last_gemm = None  # the GEMM the walk met last: the one a forward all-gather fed
    attention_done = False
    for node in reversed(fwd.nodes):
        op = node.op
        if isinstance(op, Comm):
            if op.dim == "cp":
                continue  # handled with the attention backward
            if op.name in (EXPERT_TP_GATHER, EXPERT_TP_SCATTER):  # the same rows back: scatter <-> gather, blocking
                b.comm(Comm(op.name + "_bwd", op.dim, _BWD_COMM[op.collective], op.bytes, group=op.group))
                last_gemm = None
                continue
            if op.name == "ep_counts":
                continue  # the backward all-to-alls reuse the forward's split sizes
            if op.collective == "all_reduce":  # TP g -> f: backward all-reduce sits after the column-parallel dgrad
                continue
            if regather is not None and op.dim == "tp" and op.collective == "all_gather":
                # the column linear's dgrad reduce-scatter, under its wgrad GEMM (which needs the re-gather)
                ag, wgrads = regather
                rs = b.comm(Comm(op.name + "_bwd", "tp", "reduce_scatter", op.bytes, blocking=False), extra=(ag,))
                for wgrad in wgrads:
                    b.compute(wgrad, extra=(ag,))
                b.pending.append(rs)
                regather = None
                continue
            blocking = op.blocking
            if micro_pipeline and op.dim == "tp" and op.collective == "all_gather" and (parallel or not _one_linear(sc, last_gemm)):
                # the dgrad's reduce-scatter reads the sum of several linears' dgrads: not a matmul's output, so
                # the micro-pipeline pass leaves it a plain collective the norm's backward waits for
                blocking = True
            bwd = _BWD_COMM[op.collective]
            # an FP8 gather's gradient: 16-bit
            nbytes = tp_collective_bytes(sc, z, bwd, _gathered_width(sc, op.name)) if op.dim == "tp" else op.bytes
            b.comm(Comm(op.name + "_bwd", op.dim, bwd, nbytes, blocking))
            last_gemm = None
            if op.collective == "all_gather" and sp and not saved_input:
                # Megatron re-gathers the SP input for the weight gradient (KOR22 §4.2.2), overlapped with dgrad
                wgrad_ag.append(Comm(op.name + "_wgrad", "tp", "all_gather", op.bytes,
                                     blocking=not sc.overlap_tp or micro_pipeline))
            continue
        if op.name.startswith("cp_merge"):
            continue  # the ring backward's blocks use the merged log-sum-exp; no backward of their own
        if op.name.startswith(FP8_ATTENTION_CASTS):
            continue  # FP8 attention's casts: the backward's own are `attention_backward`'s
        if op.kind == "attention":
            if attention_done:
                continue  # the CP ring's forward steps share one backward (emitted once, all steps)
            attention_done = True
            if rc == "selective" and not op_level and core_attn_reruns(sc):
                sub = OpList("R")
                attention_forward(sc, z, sub, layer)
                b.extend(sub)
            attention_backward(sc, z, b, layer)
            continue
        if is_weight_cast(op):
            continue  # its backward is the weight gradients' upcast, in grad_accum_ops
        if is_input_cast(op):
            for upcast in input_cast_backward(op):
                b.compute(upcast)
            continue
        if op.kind == "gemm":
            last_gemm = op.name
        dgrad, wgrad = backward_of(op, z)
        casts = FP8_CASTS[sc.framework.linear_recipe(sc.training.precision)] if op.dtype in QUANTIZED else None
        if wgrad is not None and casts is not None and casts.wgrad_bf16:
            wgrad = _in_bf16(wgrad, z)
        rescales = op.kind == "gemm" and casts is not None and casts.rescales_backward
        if parallel and op.name == "qkv":  # the MLP branch's input gradient is this dgrad's accumulator
            dgrad = replace(dgrad, bytes=dgrad.bytes + BRANCH_SUM_READ * z.T * z.h * z.ab)
        if async_linear and sp and op.name in COLUMN_LINEARS and wgrad is not None:
            # re-gather the SP input under the dgrad GEMM; the wgrad comes with the reduce-scatter (above). A
            # parallel block's two column linears read one gathered input: the second shares the first's re-gather
            if regather is None:
                width = (_gathered_width(sc, ATTN_GATHER) if op.name == "qkv" else None) or z.h  # qkv's input: MLA's latents
                regather_op = replace(tp_collective(sc, z, op.name + "_regather_wgrad", "all_gather"), blocking=False,
                                      bytes=float(z.T * width * z.ab))
                regather = (b.comm(regather_op), [wgrad])
            else:
                regather[1].append(wgrad)
            b.compute(dgrad)
            continue
        if dgrad is not None:
            b.compute(dgrad)
            if rescales:
                b.compute(_rescale(dgrad, z))
        # without SP a column linear all-reduces its input gradient (a parallel block its two branches' once, after
        # the QKV dgrad); async (`tp_linear_async`), under its wgrad GEMM, which then follows the dgrad at once
        allreduce = (tp_collective(sc, z, f"tp_allreduce_{op.name}_dgrad", "all_reduce")
                     if op.kind == "gemm" and op.name in COLUMN_LINEARS and z.t > 1 and not sp
                     and not (parallel and op.name == "fc1") else None)
        if allreduce is not None and async_linear and wgrad is not None:
            issued = b.comm(replace(allreduce, blocking=False))
            b.compute(wgrad)
            if rescales and wgrad.dtype in QUANTIZED:
                b.compute(_rescale(wgrad, z))
            b.pending.append(issued)
            continue
        if wgrad is not None:
            w_ops.append(wgrad)
            if rescales and wgrad.dtype in QUANTIZED:
                w_ops.append(_rescale(wgrad, z))
        if allreduce is not None:
            b.comm(allreduce)
    # weight-grad list: norm weight grads are folded into their backward kernels
    w = OpList()
    ag = {c.name.split("_", 2)[-1].replace("_wgrad", ""): c for c in wgrad_ag}
    for op in w_ops:
        # a parallel block's FC1 reads the attention's gathered input: its weight gradient, met first, waits for it
        key = {"qkv_wgrad": "attn", "fc1_wgrad": "attn" if parallel else "mlp", "shared_fc1_wgrad": "shared"}.get(op.name)
        if key and key in ag:
            # the re-gather reads the saved SP-sharded input: with overlap_tp it starts at once, behind earlier
            # W GEMMs; without, it runs in line like every other TP collective
            w.comm(ag.pop(key), after_compute=not sc.overlap_tp or micro_pipeline)
            w.pending = [len(w.nodes) - 1]
        w.compute(op)
    for acc in grad_accum_ops(sc, sum(layer_rank_params(sc, layer))):
        w.compute(acc)
    passes = fusion.apply(sc, LayerPasses(layer, autocast_ops.apply(sc, tuple(fwd.nodes), z),
                                          autocast_ops.apply(sc, tuple(b.nodes), z), tuple(w.nodes)))
    if sc.overlap_tp and sp:  # each TP collective rides its GEMM in t chunks (tp_overlap.py)
        mode = overlap_mode(sc)
        # a weight gradient reads the gathered input as its right operand: the micro-pipeline pass does not fuse it
        w_nodes = passes.W if mode == "micro_pipeline" else chunk_tp_overlap(passes.W, z.t, mode)
        return LayerPasses(layer, chunk_tp_overlap(passes.F, z.t, mode), chunk_tp_overlap(passes.B, z.t, mode), w_nodes)
    return passes


def core_attn_reruns(sc: Scenario) -> bool:
    """Whether selective recompute re-runs the attention forward in the backward: `core_attn` among its modules, and the
    attention eager or the framework checkpointing the core attention whatever its kernel (`core_attn_checkpoints_flash`:
    Megatron-Core; legacy Megatron and Megatron-DeepSpeed call FlashAttention outside the checkpoint)."""
    flash = sc.framework.spec.core_attn_checkpoints_flash
    return "core_attn" in recompute_modules(sc) and (sc.training.attention == "eager" or bool(flash and flash.value))


RERUN_OPS = {"layernorm": ("norm1", "norm2"), "moe_act": ("expert_act",)}
"""Megatron-Core `recompute_modules` that re-run forward ops of the layer in the backward, by op name (`_module_reruns`);
core_attn is the attention forward (`core_attn_reruns`, in the attention backward's place), mla_up_proj MLA's up
projections (`mla_ops.up_rerun`)."""


def _module_reruns(sc: Scenario, z: Shard, fwd: OpList) -> OpList:
    """What selective recompute's modules re-run at the head of the layer's backward (Megatron-Core
    `CheckpointWithoutOutput` around the layernorms, the experts' activation and MLA's up projections: their outputs
    are dropped after the forward and recomputed when the backward reaches them): `RERUN_OPS` and MLA's up
    projections, each as the forward ran it."""
    mods = recompute_modules(sc)
    names = {name for mod in mods for name in RERUN_OPS.get(mod, ())}
    out = OpList("R")
    for node in fwd.nodes:
        if isinstance(node.op, Compute) and node.op.name in names:
            out.compute(node.op)
    if "mla_up_proj" in mods and sc.model.mla:
        _gemm(sc, out, mla_ops.up_rerun(sc, z))
    if "mlp" in mods:
        for op in dense_mlp_span(fwd):
            if isinstance(op, Comm):
                out.comm(op)
            else:
                out.compute(op)
    return out


def dense_mlp_span(fwd: OpList) -> list:
    """The ops of a dense layer's MLP module in forward order, between its pre-norm and its residual add: FP8 casts,
    the SP all-gather, FC1, the activation, FC2 and its reduce-scatter (or all-reduce). Megatron-Core's `mlp` recompute
    module checkpoints exactly this module (transformer_layer.py:537-539 at d98e8a64, MoE layers excluded; :992-1011
    te_checkpoint / tensor_parallel.checkpoint of `self.mlp` on the pre-MLP norm's output), so the backward re-runs all
    of it, collectives included. Empty for an MoE layer (its router comes after the norm)."""
    ops = [n.op for n in fwd.nodes]
    names = [op.name for op in ops]
    if "norm2" not in names or "residual2" not in names:
        return []
    span = ops[names.index("norm2") + 1:names.index("residual2")]
    return [] if any(op.name == "router" for op in span) else span


def _rescale(g: Compute, z: Shard) -> Compute:
    """The pass that applies an axiswise recipe's scales to a backward GEMM's output (`Fp8Casts.rescales_backward`):
    read and write the m x n output."""
    m, n, _ = g.shape
    return elementwise(g.name + "_rescale", m * n * g.repeat, 2, z)


def _in_bf16(g: Compute, z: Shard) -> Compute:
    """A GEMM run in bf16 instead of FP8: its operands at 2 bytes (the recipe's rowwise_with_gw_hp weight gradient)."""
    m, n, k = g.shape
    return replace(g, dtype="bf16", bytes=float((m * k + k * n) * 2 + m * n * z.ab) * g.repeat)


def _one_linear(sc: Scenario, gemm_name: str | None) -> bool:
    """Whether the plan GEMM `gemm_name` is one linear of the framework (its dgrad a single matmul's output):
    torchtitan's gated MLP runs w1 and w3 as two (`op_sac.LINEARS`); its Llama 3 QKV is one fused linear."""
    if gemm_name not in COLUMN_LINEARS:
        return False
    return not (sc.model.gated_mlp and op_sac.LINEARS.get(gemm_name, 1) > 1)


def grad_accum_ops(sc: Scenario, params: float) -> list[Compute]:
    """`grad += new_grad` after each micro-batch's backward when the accumulation is not fused into the
    weight-gradient GEMM (nanotron's FP32GradientAccumulator, PyTorch autograd's `.grad` accumulation);
    none when it is fused (Megatron's gradient_accumulation_fusion). Memory-bound: read the new gradient
    (weight dtype), read and write the accumulator (grad dtype): 2 + 4 + 4 = 10 B/param for bf16 into
    fp32, 12 for fp32 training. Under `training.autocast` every micro-batch upcasts its bf16 gradient to
    fp32 and all but the first add it into `.grad`; a framework that casts then adds (`_casts_then_adds`) does
    both every micro-batch (`autocast_ops.weight_grad_accumulation`). None under a policy that shards gradients
    (ZeRO-2/3: each micro-batch's gradients are reduce-scattered as they come, and a rank adds only its 1/N
    shard, not priced)."""
    tr = sc.training
    if tr.autocast and params > 0:
        return weight_grad_accumulation(sc, params, first_kept=True)
    if tr.grad_accum_fused or params <= 0 or scenario_policy(sc).shards_grads:
        return []
    if _casts_then_adds(sc):
        return weight_grad_accumulation(sc, params, first_kept=False)
    moved = params * (param_bytes(sc) + 2 * tr.grad_bytes)
    dtype = "bf16" if tr.grad_bytes == 2 else "fp32"
    return [Compute(f"grad_accum_{dtype}", "elementwise", 0.0, moved, dtype, (int(params),))]


def _casts_then_adds(sc: Scenario) -> bool:
    """Whether the framework accumulates bf16 gradients into fp32 through an explicit fp32 copy of each one
    (`Framework.grad_accum_cast`): DeepSpeed's BF16_Optimizer runs `hp_grad.add_(lp.grad.to(fp32))` for every
    parameter after every micro-batch's backward, a cast (6 B/param) and an fp32 add (12), the first
    micro-batch included (its accumulator starts at zero)."""
    flag = sc.framework.spec.grad_accum_cast
    return bool(flag and flag.value) and sc.training.grad_bytes == 4 and param_bytes(sc) == 2



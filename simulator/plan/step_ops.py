"""The per-step work around the layers: the pipeline's ends (embedding, LM head and loss), what one
PP send carries, the collectives of a step's end (SP's norm gradients, tied embeddings), the
optimizer step, and how gradients and parameters are cut into DP buckets.
"""
from __future__ import annotations

from dataclasses import replace

from bisect import bisect_left
from typing import Sequence

from .float8_comm import PRECOMPUTE_AMAX_BYTES, fp8_param_gathers, head_in_fp8
from .memory import MOMENT_BYTES
from . import autocast_ops
from .autocast_ops import cast_weights, input_cast, input_cast_backward
from .layer_ops import backward_of, grad_accum_ops
from .opgraph import (CCE_LSE_BYTES, CROSS_ENTROPY_BYTES, FUSED_CROSS_ENTROPY_BYTES, GEMM_BYTES, NORM_PASSES, QUANTIZED,
                      Comm, Compute, Node, OpList, Shard, elementwise, gemm, shard, tp_collective)
from ..params import final_norm_params, layer_params
from ..scenario import Scenario
from .sharded_params import autocast_head_params, param_bytes, rank_params

# ----------------------------------------------------------------------------------- ends of the pipeline

def embedding_forward(sc: Scenario, z: Shard | None = None) -> tuple[Node, ...]:
    """Vocab-parallel embedding lookup, then all-reduce over TP (reduce-scatter with SP)."""
    z = z or shard(sc)
    seq = OpList()
    seq.compute(elementwise("embedding", z.T * z.h, 2, z))
    if z.t > 1:
        sp = sc.parallel.sp
        seq.comm(tp_collective(sc, z, "embedding_reducescatter" if sp else "embedding_allreduce", "reduce_scatter" if sp else "all_reduce"))
    return tuple(seq.nodes)


def embedding_backward(sc: Scenario, z: Shard | None = None) -> tuple[Node, ...]:
    z = z or shard(sc)
    seq = OpList()
    if z.t > 1 and sc.parallel.sp:
        seq.comm(tp_collective(sc, z, "embedding_allgather_bwd", "all_gather"))
    seq.compute(elementwise("embedding_bwd", z.T * z.h, 3, z))
    return tuple(seq.nodes)


def head_gemm(sc: Scenario, z: Shard, v: int) -> Compute:
    """The LM head's GEMM (tokens x vocab shard x hidden). Under FP8 it stays BF16 unless the framework runs its
    output layer in FP8 (`fp8_output_layer`: Megatron's output layer is a plain ColumnParallelLinear, not a TE
    module; torchtitan's float8 converter swaps every nn.Linear its empty `filter_fqns` does not name)."""
    if z.dtype in QUANTIZED and not (z.dtype == "fp8" and head_in_fp8(sc)):
        z = replace(z, gb=GEMM_BYTES["bf16"], dtype="bf16")
    return gemm("lm_head", z.T, v, z.h, z)


def head_forward(sc: Scenario, z: Shard | None = None) -> tuple[Node, ...]:
    """Final norm, LM head (vocab-parallel), cross-entropy in fp32 with its TP all-reduces of per-token
    max / sum / target logit (Megatron vocab_parallel_cross_entropy)."""
    z = z or shard(sc)
    m = sc.model
    seq = OpList()
    seq.compute(elementwise("final_norm", z.T_sp * z.h, NORM_PASSES[0], z))
    if z.t > 1 and sc.parallel.sp:
        seq.comm(tp_collective(sc, z, "sp_allgather_head", "all_gather"))
    v = -(-m.vocab // z.t)
    for cast in (cast_weights(sc, "autocast_cast_head", autocast_head_params(sc, z)), input_cast(sc, z, "lm_head")):
        if cast is not None:
            seq.compute(cast)
    loss = sc.training.loss
    head = head_gemm(sc, z, v)
    if loss == "cut":  # the logits stay on chip: only the log-sum-exp per token is written
        seq.compute(replace(head, name="lm_head_cce", bytes=head.bytes - z.T * v * z.ab + CCE_LSE_BYTES * z.T))
    else:
        seq.compute(head)
        per_logit = FUSED_CROSS_ENTROPY_BYTES[0] if loss == "fused" else CROSS_ENTROPY_BYTES[0]
        seq.compute(elementwise(f"cross_entropy{'_fused' if loss == 'fused' else ''}", z.T * v, per_logit, z, elt_bytes=1))
    if z.t > 1:
        seq.comm(Comm("ce_allreduce", "tp", "all_reduce", float(3 * z.T * 4)))
    return autocast_ops.apply(sc, tuple(seq.nodes), z)


def head_backward(sc: Scenario, z: Shard | None = None) -> tuple[tuple[Node, ...], tuple[Node, ...]]:
    """(B, W) of the loss, LM head and final norm."""
    z = z or shard(sc)
    m = sc.model
    v = -(-m.vocab // z.t)
    b = OpList()
    head = head_gemm(sc, z, v)
    loss = sc.training.loss
    if loss == "cut":
        # Cut Cross-Entropy's backward recomputes each block of logits on chip (a recomputation: HFU, not MFU)
        r = OpList("R")
        r.compute(replace(head, name="lm_head_cce_recompute", bytes=head.bytes - z.T * v * z.ab))
        b.extend(r)
    else:
        per_logit = FUSED_CROSS_ENTROPY_BYTES[1] if loss == "fused" else CROSS_ENTROPY_BYTES[1]
        b.compute(elementwise(f"cross_entropy{'_fused' if loss == 'fused' else ''}_bwd", z.T * v, per_logit, z, elt_bytes=1))
    dgrad, wgrad = backward_of(head, z)
    b.compute(dgrad)
    cast = input_cast(sc, z, "lm_head")
    for upcast in input_cast_backward(cast) if cast is not None else ():
        b.compute(upcast)
    if z.t > 1:
        sp = sc.parallel.sp
        b.comm(tp_collective(sc, z, "sp_reducescatter_head_bwd" if sp else "tp_allreduce_head_bwd", "reduce_scatter" if sp else "all_reduce"))
    b.compute(elementwise("final_norm_bwd", z.T_sp * z.h, NORM_PASSES[1], z))
    w = OpList()
    w.compute(wgrad)
    for acc in grad_accum_ops(sc, m.vocab * m.hidden / z.t):
        w.compute(acc)
    return autocast_ops.apply(sc, tuple(b.nodes), z), tuple(w.nodes)


def pp_partitioned(sc: Scenario) -> bool:
    """Whether the framework sends each TP rank's 1/t slice between stages and all-gathers it over TP
    (`Framework.pp_partitioned`: DeepSpeed's pipe_partitioned / grad_partitioned), with tp > 1 and pp > 1."""
    flag = sc.framework.spec.pp_partitioned
    return bool(flag is not None and flag.value and sc.parallel.tp > 1 and sc.parallel.pp > 1)


def pp_activation_bytes(sc: Scenario, z: Shard | None = None) -> float:
    """Bytes one rank sends to the next stage per micro-batch: s*b*h activations (each TP rank sends
    its 1/t share with SP, NAR21 §4.1 scatter/gather, or where the framework partitions its sends,
    `pp_partitioned`)."""
    z = z or shard(sc)
    full = z.T * z.h * z.ab
    return float(full / z.t if ((sc.parallel.sp or pp_partitioned(sc)) and z.t > 1) else full)


def pp_partition_gathers(sc: Scenario, kind: str, z: Shard | None = None) -> tuple[Node, ...]:
    """The TP all-gathers a partitioned pipeline (`pp_partitioned`) runs on the compute stream before a
    stage's pass, s*b*h activations each (`opgraph.tp_collective`'s size): before the forward of a stage
    that receives ("F"), the received slice; before the backward of a stage that sends ("B"), its stored
    output, then the received gradient's slice (DS pipe/engine.py:726, :833, :848)."""
    z = z or shard(sc)
    seq = OpList()
    names = {"F": ("pp_input_allgather",), "B": ("pp_output_allgather", "pp_grad_allgather")}[kind]
    for name in names:
        seq.comm(tp_collective(sc, z, name, "all_gather"))
    return tuple(seq.nodes)


def sp_norm_grad_allreduce(sc: Scenario, pp_rank: int) -> Comm | None:
    """With sequence parallelism each TP rank's norm-weight gradients cover its sequence shard only: one
    coalesced all-reduce of them over the TP group per step, after the last backward (Megatron
    `finalize_model_grads` -> `_allreduce_layernorm_grads`; nanotron `sync_tied_weights_gradients`).
    Bytes: the stage's norm weights (two per layer, the final norm on the head stage) x gradient bytes."""
    if not (sc.parallel.sp and sc.parallel.tp > 1):
        return None
    rp = rank_params(sc, pp_rank)
    norms = sum(layer_params(sc.model, i).norms for i in rp.layers) + (final_norm_params(sc.model) if rp.head else 0)
    if norms <= 0:
        return None
    return Comm("sp_norm_grad_allreduce", "tp", "all_reduce", norms * sc.training.grad_bytes, blocking=True)


def tied_embedding_allreduce(sc: Scenario) -> Comm | None:
    """Tied embeddings on two pipeline stages (the input embedding's and the LM head's): the two copies'
    gradients are summed after the last backward, one all-reduce between the two stages (Megatron
    `_allreduce_word_embedding_grads`, nanotron `sync_tied_weights_gradients`). Bytes: the table's share
    on one rank (vocab x hidden / t) x gradient bytes. MTP keeps an embedding copy on the last stage too
    (`sharded_params.head_rank_tensors`), summed the same way. None when neither applies or one stage holds both."""
    from .layout import chunk_owner, last_chunk
    shared = sc.model.tie_embeddings or sc.model.mtp_layers > 0
    if not shared or chunk_owner(sc, 0)[0] == chunk_owner(sc, last_chunk(sc))[0]:
        return None
    return Comm("tied_embedding_all_reduce", "dp", "all_reduce",
                sc.model.vocab * sc.model.hidden / sc.parallel.tp * sc.training.grad_bytes, blocking=True, group="embd")


LAMB_EXTRA_BYTES = 20
"""LAMB's HBM traffic per parameter beyond AdamW's, as apex's FusedLAMB runs it (csrc/multi_tensor_lamb.cu):
stage 1 is Adam's pass but writes the update over the gradient (+4, the master not written), the per-tensor
L2 norms of the master and of the update read both (+8), stage 2 reads update and master and writes the
master (+12): 4 + 8 + 12 - 4 = 20 B (You et al. 2020, "Large Batch Optimization for Deep Learning", Alg. 2).
The norms' cross-rank sum under a sharded optimizer (a few bytes per tensor) is not priced."""


LOSS_SCALE_BYTES = 8
"""fp16 training's dynamic loss scaler, per (sharded) parameter: before the step the fp32 gradients are unscaled in
place and checked for inf/NaN, one multi-tensor pass that reads and writes each (4 + 4 B): Megatron-Core's
MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan (megatron/core/optimizer/optimizer.py:
torch._amp_foreach_non_finite_check_and_unscale_ over the main grads, then a one-value all-reduce of found_inf over
the model-parallel group, not priced), as torch.amp.GradScaler.unscale_ does for PyTorch AMP. bf16 has no scaler."""


def optimizer_bytes_per_param(sc: Scenario, optimizer: str | None = None, moment_dtype: str | None = None) -> float:
    """HBM traffic of one optimizer step per (sharded) parameter: AdamW reads grad, master, m, v and writes
    master, m, v and the 16-bit weight (~30 B with fp32 moments, docs/modeling.md §7.4; m and v at
    `training.adam_moment_dtype`, `memory.MOMENT_BYTES`) plus ~4 B for the global grad norm; LAMB adds
    `LAMB_EXTRA_BYTES`; SGD reads grad and master and writes master and weight; fp16 adds the loss scaler's
    unscale pass (`LOSS_SCALE_BYTES`)."""
    optimizer = optimizer or sc.training.optimizer
    low = sc.training.precision != "fp32" and not sc.training.autocast  # autocast keeps no 16-bit copy to write
    scaler = _loss_scale_bytes(sc)
    if optimizer in ("adamw", "lamb"):
        moments = 2 * MOMENT_BYTES[moment_dtype or sc.training.adam_moment_dtype]
        return 2 * 4 + moments + 4 + moments + (2 if low else 0) + 4 + (LAMB_EXTRA_BYTES if optimizer == "lamb" else 0) + scaler
    return 2 * 4 + 4 + (2 if low else 0) + 4 + scaler


def optimizer_op(sc: Scenario, params_on_rank: float) -> Compute:
    """The optimizer step on this rank's parameter shard. A calibration profile measures AdamW's kernels (fp32
    moments): LAMB's and 16- or 8-bit moments' shape carries their bytes over that AdamW's, which `CostModel` scales a
    measured time by (all multi-tensor, memory-bound passes)."""
    per_param = optimizer_bytes_per_param(sc) + _precompute_amax_bytes(sc)
    adamw = optimizer_bytes_per_param(sc, "adamw", "fp32") - _loss_scale_bytes(sc)
    shape: tuple = (int(params_on_rank),)
    if per_param != adamw:  # LAMB, low-bit moments, the loss scaler's or the FP8 amax pass beside the AdamW a profile measured
        shape += (per_param / adamw,)
    return Compute("optimizer_step", "optimizer", 0.0, params_on_rank * per_param, "fp32", shape)


def _loss_scale_bytes(sc: Scenario) -> int:
    """`LOSS_SCALE_BYTES` under fp16 training (its dynamic loss scaler), else 0."""
    return LOSS_SCALE_BYTES if sc.training.precision == "fp16" else 0


def _precompute_amax_bytes(sc: Scenario) -> float:
    """torchtitan's `float8_precompute_scale`: the amax pass over the weight shards after the optimizer step
    (`float8_comm.PRECOMPUTE_AMAX_BYTES` per parameter), else 0."""
    if fp8_param_gathers(sc) and sc.framework.option("float8_precompute_scale"):
        return float(PRECOMPUTE_AMAX_BYTES)
    return 0.0


def dp_buckets(sc: Scenario, tensors: Sequence[float], elt_bytes: int) -> list[float]:
    """Gradient buckets (bytes of the reduced dtype each) of parameter `tensors` (elements, in definition
    order), in the order backward releases them (last first). `dp_bucketing: param` (PyTorch DDP's
    `_compute_bucket_assignment_by_size`, Megatron's grad buffer): whole tensors in definition order, a bucket
    closing once it holds `parallel.dp_bucket_mb`, so a tensor larger than that is a bucket alone and the
    last bucket may hold less (DDP's smaller first bucket, 1 MiB, is not modelled); `even`: the bytes cut
    into equal buckets of at most dp_bucket_mb."""
    cap = sc.parallel.dp_bucket_mb * 1e6
    sizes = [t * elt_bytes for t in tensors if t > 0]
    if not sizes:
        return []
    if sc.parallel.dp_bucketing == "even":
        total = sum(sizes)
        n = max(1, int(-(-total // cap)))
        return [total / n] * n
    out, acc = [], 0.0
    for s in sizes:
        acc += s
        if acc >= cap:
            out.append(acc)
            acc = 0.0
    if acc > 0:
        out.append(acc)
    return out[::-1]


def bucket_release_blocks(buckets: Sequence[float], block_bytes: Sequence[float]) -> list[int]:
    """Per gradient bucket (bytes, in the order backward releases them): the index of the block (blocks in
    backward order, their gradient bytes) whose backward completes the bucket's last byte, i.e. releases
    it (MEG-DDP: buckets fill in reverse layer order). Both estimators time the releases with it."""
    cum, acc = [], 0.0
    for b in block_bytes:
        acc += b
        cum.append(acc)
    out, end = [], 0.0
    for b in buckets:
        end += b
        out.append(min(bisect_left(cum, end * (1 - 1e-9)), len(cum) - 1))
    return out


def param_gather_buckets(sc: Scenario, tensors: Sequence[float]) -> list[float]:
    """ZeRO-1/2's all-gather of the updated parameter `tensors` (bytes per collective, in forward order):
    the gradient buckets (`dp_buckets`) reversed, or all in one (`parallel.zero_gather: whole`, nanotron's
    `_all_gather_params`)."""
    if sc.parallel.zero_gather == "whole":
        total = sum(tensors)
        return [total * param_bytes(sc)] if total > 0 else []
    return dp_buckets(sc, tensors, param_bytes(sc))[::-1]

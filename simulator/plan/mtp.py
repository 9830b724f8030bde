"""Multi-token prediction (MTP): the ops of one MTP module for one micro-batch on one rank, as one layer's
F, B and W lists (`opgraph.LayerPasses`), so the chunk builder (`blocks.chunk_blocks`) and both evaluators
treat it as one more layer of the last pipeline chunk.

Module k of D (DeepSeek-V3 report §2.2, Fig. 3, Eq. 21-25; Megatron-Core
megatron/core/transformer/multi_token_prediction.py `MultiTokenPredictionLayer`, at
d98e8a64ddf34856e74b24714e3bedb2f5a39553), after the main model's layers on the last stage:
  1. the shared embedding looks up the tokens shifted by k (`_get_embeddings`: roll_tensor, then the
     GPTModel's own `embedding`, a copy on the last stage when pp > 1: `sharded_params.head_rank_tensors`);
  2. RMSNorm of that embedding (`enorm`) and of depth k-1's hidden states (`hnorm`), concatenated;
  3. `eh_proj`, a ColumnParallelLinear 2h -> h/t (gather_output False), then its output all-gathered over
     TP (`gather_from_tensor_model_parallel_region`) and, with SP, scattered back to the sequence shard
     (a local slice): with SP its input is all-gathered first as every column linear's is;
  4. one transformer layer like the model's last (`layer_ops.layer_passes` of layer index `layers + k - 1`);
  5. `final_layernorm`, then the main model's output layer and a cross-entropy (`process_mtp_loss`), the
     loss scaled by `mtp_loss_scaling_factor` (a scalar: no cost).
Backward mirrors it; the head's and the embedding's weight gradients accumulate into the shared tensors.
Recompute: with `training.recompute: full` Megatron checkpoints steps 2-5's module (`_checkpointed_forward`,
the uniform method; `layout.layer_recompute` says when), so the norms and the projection re-run in front of
the layer's own recomputation; the head and loss are outside the checkpoint.
"""
from __future__ import annotations

from dataclasses import replace

from .float8_comm import cast_shares
from .layer_ops import _gemm, backward_of, layer_passes
from .opgraph import (NORM_PASSES, Comm, Compute, LayerPasses, Node, OpList, Shard, elementwise, fp8_cast, fp8_cast_backward,
                      gemm, tp_collective)
from .layout import layer_recompute
from .tp_overlap import wgrad_input_saved
from .step_ops import embedding_backward, embedding_forward, head_backward, head_forward
from ..scenario import Scenario


def _list(nodes: tuple[Node, ...], tag: str = "") -> OpList:
    """An OpList holding `nodes` (deps already local to them), ready to be `extend`ed onto another."""
    seq = OpList(tag)
    seq.nodes = [Node(n.op, n.deps, tag or n.tag) for n in nodes]
    computes = [i for i, n in enumerate(nodes) if isinstance(n.op, Compute)]
    seq.last_compute = computes[-1] if computes else None
    return seq


def eh_proj_gemm(z: Shard) -> Compute:
    """tokens x (h / t) x 2h: the projection's column shard."""
    return gemm("mtp_eh_proj", z.T, -(-z.h // z.t), 2 * z.h, z)


def _proj_forward(sc: Scenario, z: Shard, tag: str = "") -> OpList:
    """Steps 2-3: enorm, hnorm, (SP all-gather of the 2h input,) eh_proj, TP all-gather of its output."""
    seq = OpList(tag)
    sp = sc.parallel.sp and z.t > 1
    seq.compute(elementwise("mtp_enorm", z.T_sp * z.h, NORM_PASSES[0], z))
    seq.compute(elementwise("mtp_hnorm", z.T_sp * z.h, NORM_PASSES[0], z))
    if sp:
        ag = tp_collective(sc, z, "mtp_sp_allgather_eh_proj", "all_gather")
        seq.comm(replace(ag, bytes=2 * ag.bytes))
    _gemm(sc, seq, eh_proj_gemm(z))
    if z.t > 1:
        seq.comm(tp_collective(sc, z, "mtp_eh_proj_allgather", "all_gather"))
    return seq


def _proj_backward(sc: Scenario, z: Shard, b: OpList) -> Compute | None:
    """The projection's input gradient onto `b`; returns its weight-gradient GEMM. The output all-gather's
    backward is a split (no traffic); with SP the scatter's backward is an all-gather of the gradient, and
    the input gradient (2h wide) is reduce-scattered, else all-reduced (a column linear's f -> g)."""
    sp = sc.parallel.sp and z.t > 1
    if sp:
        b.comm(tp_collective(sc, z, "mtp_sp_allgather_eh_proj_bwd", "all_gather"))
    cast = fp8_cast(sc, eh_proj_gemm(z), cast_shares(sc, "eh_proj"))
    if cast is not None:  # FP8: the output gradient is quantized for the dgrad and wgrad GEMMs
        b.compute(fp8_cast_backward(cast))
    dgrad, wgrad = backward_of(eh_proj_gemm(z), z)
    b.compute(dgrad)
    if z.t > 1:
        c = tp_collective(sc, z, "mtp_eh_proj_dgrad_" + ("reducescatter" if sp else "allreduce"),
                          "reduce_scatter" if sp else "all_reduce")
        b.comm(replace(c, bytes=2 * c.bytes))
    b.compute(elementwise("mtp_enorm_bwd", z.T_sp * z.h, NORM_PASSES[1], z))
    b.compute(elementwise("mtp_hnorm_bwd", z.T_sp * z.h, NORM_PASSES[1], z))
    return wgrad


def _head_forward(sc: Scenario, z: Shard) -> tuple[Node, ...]:
    """Step 5: the main head's forward (final norm, LM head, loss) without autocast's weight cast, which the
    main head's forward already made and autocast's cache serves."""
    nodes = head_forward(sc, z)
    if not any(n.op.name == "autocast_cast_head" for n in nodes):
        return nodes
    keep = [i for i, n in enumerate(nodes) if n.op.name != "autocast_cast_head"]
    where = {old: new for new, old in enumerate(keep)}
    return tuple(Node(nodes[i].op, tuple(where[d] for d in nodes[i].deps if d in where), nodes[i].tag) for i in keep)


def mtp_passes(sc: Scenario, layer: int, z: Shard) -> LayerPasses:
    """F, B and W of the MTP module whose transformer layer is `layer` (module docstring)."""
    inner = layer_passes(sc, layer, z)
    f = OpList()
    f.extend(_list(embedding_forward(sc, z)))
    f.extend(_proj_forward(sc, z))
    f.extend(_list(inner.F))
    f.extend(_list(_head_forward(sc, z)))
    hb, hw = head_backward(sc, z)
    b = OpList()
    b.extend(_list(hb))
    if layer_recompute(sc, layer) == "full":
        b.extend(_proj_forward(sc, z, tag="R"))
    b.extend(_list(inner.B))
    proj_wgrad = _proj_backward(sc, z, b)
    w = OpList()
    w.extend(_list(hw))
    w.extend(_list(inner.W))
    if sc.parallel.sp and z.t > 1 and not wgrad_input_saved(sc):
        # the weight gradient reads the gathered 2h input, which Megatron's column linear gathers again (KOR22 §4.2.2)
        ag = tp_collective(sc, z, "mtp_sp_allgather_eh_proj_wgrad", "all_gather")
        w.comm(replace(ag, bytes=2 * ag.bytes, blocking=True))
    if proj_wgrad is not None:
        w.compute(proj_wgrad)
    w.extend(_list(embedding_backward(sc, z)))
    return LayerPasses(layer, tuple(f.nodes), tuple(b.nodes), tuple(w.nodes))


def mtp_comms(passes: LayerPasses) -> list[Comm]:
    """The module's collectives, forward then backward then weight gradient (for reports and tests)."""
    return [n.op for lst in (passes.F, passes.B, passes.W) for n in lst if isinstance(n.op, Comm)]

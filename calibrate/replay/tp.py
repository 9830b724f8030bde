"""Tensor (and sequence) parallelism with PyTorch's DTensor `parallelize_module`.

The plan is torchtitan's Llama one (pre-refactor `torchtitan/models/llama3/infra/parallelize.py`,
docs/ecosystem.md §2.5): vocab-parallel embedding, column-parallel wq/wk/wv/w1/w3, row-parallel wo/w2,
column-parallel LM head. With sequence parallelism the norms run on sequence shards (`SequenceParallel`)
and each block's attention and MLP input is all-gathered (`PrepareModuleInput` Shard(1) -> Replicate)
while wo/w2 reduce-scatter back to Shard(1) (Korthikanti et al. 2022 §4.2.2). Without SP the activations
stay replicated and wo/w2 all-reduce (Megatron TP, Narayanan et al. 2021 §3.2).
With SP each TP rank's norm weight gradient covers its sequence shard only (a Partial DTensor):
`reduce_partial_grads` sums them in one coalesced all-reduce over the TP group after the last backward,
as Megatron (`finalize_model_grads` -> `_allreduce_layernorm_grads`) and nanotron (tied-parameter
gradients, `sync_tied_weights_gradients`) do; left Partial, DTensor would all-reduce them again on
every optimizer op that reads them (27 all-reduces per AdamW step for the tiny Llama).
The LM head all-gathers the vocab-sharded logits (output_layouts=Replicate) so the loss is the same
plain cross-entropy as in the reference and a pipeline stage passes plain tensors.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)

from .llama import Transformer


def top_plan(model: Transformer, sp: bool) -> dict:
    """Plan for the embedding, final norm and LM head of a (possibly partial) model."""
    act = Shard(1) if sp else Replicate()
    plan = {}
    if model.tok_embeddings is not None:
        plan["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=act)
    if model.norm is not None and sp:
        plan["norm"] = SequenceParallel()
    if model.output is not None:
        plan["output"] = ColwiseParallel(input_layouts=act, output_layouts=Replicate(), use_local_output=True)
    return plan


def block_plan(sp: bool) -> dict:
    """Plan for one dense transformer block (module names as in llama.Block)."""
    plan = {
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)) if sp else RowwiseParallel(),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)) if sp else RowwiseParallel(),
        "feed_forward.w3": ColwiseParallel(),
    }
    if sp:
        plan.update({
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        })
    return plan


def apply_tp(model: Transformer, tp_mesh: DeviceMesh, sp: bool) -> None:
    """Shard `model` in place over `tp_mesh` (plan.py refuses MoE blocks under TP)."""
    parallelize_module(model, tp_mesh, top_plan(model, sp))
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, block_plan(sp))


def reduce_partial_grads(mods: list[Transformer], tp_mesh: DeviceMesh) -> int:
    """Sum every Partial-placement gradient (the SP norm weights) over `tp_mesh` in one flat all-reduce
    and store it back as Replicate; returns how many gradients it reduced."""
    grads = [(q, q.grad) for mod in mods for q in mod.parameters()
             if isinstance(q.grad, DTensor) and any(pl.is_partial() for pl in q.grad.placements)]
    if not grads:
        return 0
    local = [g.to_local() for _, g in grads]
    flat = torch.cat([t.reshape(-1) for t in local])
    dist.all_reduce(flat, group=tp_mesh.get_group())
    for (q, g), piece in zip(grads, torch.split(flat, [t.numel() for t in local])):
        placements = [Replicate() if pl.is_partial() else pl for pl in g.placements]
        q.grad = DTensor.from_local(piece.view_as(g.to_local()), g.device_mesh, placements, run_check=False)
    return len(grads)

"""ZeRO-1/2/3 with PyTorch's FSDP2 (`fully_shard`), per block and then at the root (torchtitan).

All three shard parameters, gradients and optimizer state over dp x cp (experts over their edp mesh);
they differ in when FSDP2 communicates, which is what the stages mean for time and memory:

| zero | reshard_after_forward | gradient reduce-scatter | parameters between micro-batches |
|---|---|---|---|
| 3 | True (all-gather again in backward) | every micro-batch (sharded accumulation) | sharded |
| 2 | False | every micro-batch (sharded accumulation) | kept unsharded until the last backward |
| 1 | False | only after the last micro-batch (full gradients accumulate) | kept unsharded until the last backward |

So ZeRO-1 and -2 hold full parameters through the step like their DeepSpeed namesakes and gather them
once per step (docs/modeling.md §4.1: RS grads + AG params); what differs from DeepSpeed is that parameters are
re-sharded between steps instead of all-gathered right after the optimizer. Under pipeline parallelism
torch's `PipelineStage` drives these flags itself and defers every reduce-scatter to the last backward.
`set_gradient_divide_factor(1)` with `set_force_sum_reduction_for_comms` makes the reduction a plain sum: the loss is already normalised by the step's
token count. On GPU the mixed-precision policy computes in bf16 and reduces in fp32.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from .llama import Transformer


def apply_zero(parts: list[Transformer], zero: int, mesh: DeviceMesh, *, expert_parallel: bool,
               expert_mesh: Optional[DeviceMesh], bf16: bool) -> None:
    """Shard every part in place. Under EP the experts get their own FSDP unit on the edp mesh, or, when
    each expert slice lives on one rank only (edp = 1), stay outside FSDP altogether."""
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    reshard = zero == 3
    for part in parts:
        ignored: set = set()
        for block in part.layers.values():
            if block.moe and expert_parallel:
                experts = block.feed_forward.experts
                if expert_mesh is not None:
                    fully_shard(experts, mesh=expert_mesh, reshard_after_forward=reshard, mp_policy=mp)
                else:
                    ignored |= set(experts.parameters())
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp, ignored_params=ignored or None)
        fully_shard(part, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp, ignored_params=ignored or None)
        for m in part.modules():
            if isinstance(m, FSDPModule):
                m.set_gradient_divide_factor(1.0)
                m.set_force_sum_reduction_for_comms(True)  # plain SUM: gloo has no PREMUL_SUM or AVG


def set_micro_batch(parts: list[Transformer], zero: int, last: bool) -> None:
    """Before each micro-batch's backward (no pipeline): the table above."""
    for part in parts:
        if zero == 1:
            part.set_requires_gradient_sync(last)
        if zero in (1, 2):
            part.set_reshard_after_backward(last)

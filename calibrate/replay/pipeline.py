"""Pipeline parallelism with torch.distributed.pipelining: one `PipelineStage` per local model chunk and
the scenario's schedule class (`ScheduleSpec.torch_class`). Chunk placement is the simulator's
(`simulator.plan.layout.rank_chunks`: round-robin for interleaved 1F1B, V-shaped for ZBV and DualPipeV), which
is also what torch's schedules expect. `scale_grads=False`: the loss function already divides by the
step's token count, so micro-batch gradients are summed as in the reference. `return_outputs=False`: a
training step needs the losses, not the last stage's logits, so the schedule neither keeps every
micro-batch's logits to the end of the step nor concatenates them (torch's default does both: on the
replay's pp2 plan one 8 MB `cat` a step and 8 retained logit tensors that no model counts).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.distributed as dist

from .llama import Transformer


@dataclass(frozen=True, kw_only=True, eq=False)
class Pipeline:
    schedule: object
    has_first: bool
    """This rank holds chunk 0 and feeds the tokens."""
    has_last: bool
    """This rank holds the last chunk and computes the loss."""

    def step(self, inputs: torch.Tensor, labels: torch.Tensor) -> Optional[torch.Tensor]:
        """Run all micro-batches of one step (forward and backward). Returns the sum of this rank's
        micro-batch losses (last stage) or None."""
        losses: list = []
        args = (inputs,) if self.has_first else ()
        kwargs = {"target": labels, "losses": losses} if self.has_last else {}
        self.schedule.step(*args, return_outputs=False, **kwargs)
        return torch.stack([l.detach() for l in losses]).sum() if self.has_last else None


def build_pipeline(parts: list[tuple[int, Transformer]], *, schedule: str, stages_total: int, micro_batches: int,
                   group: dist.ProcessGroup, device: torch.device, loss_fn: Callable) -> Pipeline:
    import torch.distributed.pipelining as pipelining
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle
    stages = [pipelining.PipelineStage(mod, chunk, stages_total, device, group=group) for chunk, mod in parts]
    cls = getattr(pipelining, schedule)
    target = stages[0] if issubclass(cls, PipelineScheduleSingle) else stages  # GPipe, 1F1B: one stage per rank
    sched = cls(target, micro_batches, loss_fn=loss_fn, scale_grads=False)
    chunks = [c for c, _ in parts]
    return Pipeline(schedule=sched, has_first=0 in chunks, has_last=stages_total - 1 in chunks)

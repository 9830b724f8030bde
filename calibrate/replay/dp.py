"""Data parallelism without sharding (zero = 0): bucketed gradient all-reduce overlapped with backward.

Our own instead of `DistributedDataParallel`: DDP cannot take DTensor (TP-sharded) parameters nor
reduce expert weights over a different group than dense ones (torchtitan likewise applies DDP only
without TP). The mechanics are DDP's (Li et al. 2020, "PyTorch Distributed", §3.2.3): parameters in
reverse registration order (about the order backward produces them) are packed into buckets of
`dp_bucket_mb`; a post-accumulate-grad hook counts each parameter's gradient; on the final micro-batch
of the step, a bucket whose gradients are all complete starts an async all-reduce (SUM: the loss is
already normalised by the step's token count), and buckets start strictly in index order so every
rank issues the collectives in the same sequence. Earlier micro-batches only accumulate locally (no
communication, like DDP's `no_sync`). `finish()` starts whatever has not started (parameters that got
no hook, e.g. zero-bubble schedules computing weight gradients with autograd.grad), waits, and
makes each gradient a view of its reduced bucket, laid out like its parameter.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


@dataclass(kw_only=True, eq=False)
class _Bucket:
    params: list[nn.Parameter]
    pending: int = 0
    flat: torch.Tensor | None = None
    work: object | None = None


@dataclass(kw_only=True, eq=False)
class _GroupBuckets:
    group: dist.ProcessGroup
    buckets: list[_Bucket]
    next_launch: int = 0


@dataclass(kw_only=True, eq=False)
class BucketedAllReduce:
    groups: list[_GroupBuckets]
    micro_batches: int
    overlap: bool = True
    """False (scenario overlap_dp: false): every bucket starts in finish(), after the whole backward."""
    counts: dict = field(default_factory=dict)
    where: dict = field(default_factory=dict)
    """id(param) -> (group index, bucket index)."""

    @classmethod
    def attach(cls, param_groups: list[tuple[dist.ProcessGroup, list[nn.Parameter]]], bucket_mb: float,
               micro_batches: int, overlap: bool = True) -> "BucketedAllReduce":
        cap = bucket_mb * 1e6
        self = cls(groups=[], micro_batches=micro_batches, overlap=overlap)
        for gi, (group, params) in enumerate(param_groups):
            buckets, cur, size = [], [], 0.0
            for p in reversed(params):
                cur.append(p)
                size += _local(p).numel() * _local(p).element_size()
                if size >= cap:
                    buckets.append(_Bucket(params=cur))
                    cur, size = [], 0.0
            if cur:
                buckets.append(_Bucket(params=cur))
            self.groups.append(_GroupBuckets(group=group, buckets=buckets))
            for bi, b in enumerate(buckets):
                for p in b.params:
                    self.where[id(p)] = (gi, bi)
                    p.register_post_accumulate_grad_hook(self._on_grad)
        self._reset()
        return self

    def _reset(self) -> None:
        self.counts = {k: 0 for k in self.where}
        for g in self.groups:
            g.next_launch = 0
            for b in g.buckets:
                b.pending, b.flat, b.work = len(b.params), None, None

    def _on_grad(self, p: nn.Parameter) -> None:
        k = id(p)
        self.counts[k] += 1
        if self.counts[k] != self.micro_batches:
            return  # not the final micro-batch: accumulate locally, no communication
        gi, bi = self.where[k]
        self.groups[gi].buckets[bi].pending -= 1
        if self.overlap:
            self._launch_ready(self.groups[gi], force=False)

    def _launch_ready(self, g: _GroupBuckets, force: bool) -> None:
        while g.next_launch < len(g.buckets) and (force or g.buckets[g.next_launch].pending == 0):
            b = g.buckets[g.next_launch]
            b.flat = torch.cat([_local_grad(p).reshape(-1) for p in b.params])
            b.work = dist.all_reduce(b.flat, op=dist.ReduceOp.SUM, group=g.group, async_op=True)
            g.next_launch += 1

    def finish(self) -> None:
        """After the last backward of the step: complete every bucket and write the sums back."""
        for g in self.groups:
            self._launch_ready(g, force=True)
        for g in self.groups:
            for b in g.buckets:
                b.work.wait()
                offset = 0
                for p in b.params:
                    n = _local(p).numel()
                    p.grad = _wrap_like(p, b.flat[offset:offset + n].view_as(_local(p)))
                    offset += n
        self._reset()


def _local_grad(p: nn.Parameter) -> torch.Tensor:
    """The gradient's local tensor laid out like the parameter's. A DTensor gradient may come back with
    other placements than its parameter (e.g. a replicated embedding gradient for a vocab-sharded
    weight); every DP rank must pack the same layout, so redistribute to the parameter's."""
    g = p.grad
    if g is None:
        return torch.zeros_like(_local(p))
    if hasattr(g, "to_local") and tuple(g.placements) != tuple(p.placements):
        g = g.redistribute(p.device_mesh, p.placements)
    return _local(g)


def _wrap_like(p: nn.Parameter, local: torch.Tensor) -> torch.Tensor:
    if hasattr(p, "to_local"):
        from torch.distributed.tensor import DTensor
        return DTensor.from_local(local, p.device_mesh, p.placements, run_check=False)
    return local

"""Routed experts (Mixtral-style top-k softmax router, SwiGLU experts) and expert parallelism.

PyTorch has no EP API (docs/ecosystem.md §2.5), so this is our own, in torchtitan's manner
(`torchtitan/distributed/expert_parallel.py`): tokens are sorted by expert, counts are exchanged with
`all_to_all_single`, and the tokens go to the rank owning their expert and come back with the
autograd-aware `_functional_collectives.all_to_all_single_autograd` (dispatch and combine; their
backward is the reverse all-to-all, docs/modeling.md §4.5). Experts are contiguous blocks of E/ep per EP rank.
No token dropping, no auxiliary load-balancing loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from simulator.model import ModelSpec


@dataclass(frozen=True, kw_only=True, eq=False)
class EPGroup:
    """This rank's expert-parallel group."""
    group: dist.ProcessGroup
    size: int
    rank: int
    """Index of this rank in the group: it owns experts [rank * E/size, (rank+1) * E/size)."""


class GroupedExperts(nn.Module):
    """The SwiGLU experts this rank owns, one weight set per expert keyed by its global index:
    w1.<e>/w3.<e> [hidden, ffn], w2.<e> [ffn, hidden] (HF Mixtral and Megatron's SequentialMLP keep a
    list of experts too). Per-expert parameters, not stacked [E_local, ...] tensors: each expert's weight
    gradient is its GEMM's output and goes straight into its `.grad`. Stacked weights cost either a
    stack-sized zero-filled gradient per expert (`self.w1[e]`: select_backward, E^2 work) or, unbound,
    a stack of the E gradients per weight per micro-batch (UnbindBackward), ~1-2 ms per MoE layer and
    micro-batch on this project's CPU host; neither is a cost of the model, and grouped-GEMM kernels that
    avoid it (torch._grouped_mm) have no CPU backward in torch 2.13. Named by global index, every EP
    rank's experts start from the reference's weights (llama.init_weights seeds a parameter by name)."""

    def __init__(self, hidden: int, ffn: int, first_expert: int, local_experts: int):
        super().__init__()
        ids = [str(first_expert + i) for i in range(local_experts)]
        self.w1 = nn.ParameterDict({e: nn.Parameter(torch.empty(hidden, ffn)) for e in ids})
        self.w2 = nn.ParameterDict({e: nn.Parameter(torch.empty(ffn, hidden)) for e in ids})
        self.w3 = nn.ParameterDict({e: nn.Parameter(torch.empty(hidden, ffn)) for e in ids})

    def forward(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """x: tokens sorted by local expert, counts[e] rows each. Every expert runs (possibly on zero
        rows) so every parameter gets a gradient and the DP/ZeRO buckets see the same tensors on all ranks."""
        outs, start = [], 0
        for e, n in zip(self.w1.keys(), counts):
            xe = x[start:start + n]
            start += n
            outs.append((F.silu(xe @ self.w1[e]) * (xe @ self.w3[e])) @ self.w2[e])
        return torch.cat(outs)


def _a2a(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group: dist.ProcessGroup) -> torch.Tensor:
    from torch.distributed._functional_collectives import all_to_all_single_autograd
    y = all_to_all_single_autograd(x, out_splits, in_splits, group)
    return y.wait() if hasattr(y, "wait") else y


class MoE(nn.Module):
    def __init__(self, m: ModelSpec, ep: Optional[EPGroup]):
        super().__init__()
        moe = m.moe
        self.top_k = moe.top_k
        self.num_experts = moe.experts
        self.ep = ep
        size, rank = (ep.size, ep.rank) if ep else (1, 0)
        local = moe.experts // size
        self.gate = nn.Linear(m.hidden, moe.experts, bias=False)
        self.received_rows: list[int] = []
        """Expert-token rows this rank received, one entry per dispatch (EP only; `ep_imbalance`)."""
        self.experts = GroupedExperts(m.hidden, moe.expert_ffn_hidden, rank * local, local)
        self.shared_expert = None
        if moe.shared_experts:
            from .llama import FeedForward
            self.shared_expert = FeedForward(m.hidden, moe.shared_ffn * moe.shared_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xf = x.reshape(-1, shape[-1])
        routed, order, counts, weights = permute(xf, self.gate(xf), self.top_k, self.num_experts)
        if self.ep is None:
            y = self.experts(routed, counts.tolist())
        else:
            y = self._dispatch_compute_combine(routed, counts)
        out = unpermute(y, order, weights).view(shape)
        if self.shared_expert is not None:
            out = out + self.shared_expert(x)
        return out

    def _dispatch_compute_combine(self, routed: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        ep, group = self.ep.size, self.ep.group
        local = self.num_experts // ep
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=group)  # [src rank, local expert] row counts
        self.received_rows.append(int(recv_counts.sum()))
        send_splits = counts.view(ep, local).sum(1).tolist()
        recv_splits = recv_counts.view(ep, local).sum(1).tolist()
        received = _a2a(routed, recv_splits, send_splits, group)  # dispatch
        per_expert = recv_counts.view(ep, local).sum(0).tolist()
        if local == 1:  # one expert here: the received rows are already its rows
            return _a2a(self.experts(received, per_expert), send_splits, recv_splits, group)  # combine
        local_ids = torch.arange(local, device=routed.device).repeat(ep)
        rows, order = sort_rows(received, torch.repeat_interleave(local_ids, recv_counts))
        back = unsort_rows(self.experts(rows, per_expert), order)  # back to (source rank, expert) order
        return _a2a(back, send_splits, recv_splits, group)  # combine


# The routing's data movement, shared with calibrate's memory probe (probes/memory.py), which times
# exactly these as the simulator's `permute`, `unpermute`, `ep_sort` and `ep_unsort` ops.

def permute(x: torch.Tensor, logits: torch.Tensor, top_k: int, experts: int):
    """Top-k routing (Mixtral: softmax over the chosen k) and the gather of every token's k copies into
    expert order. x [T, h], logits [T, E] -> (rows [T*k, h] sorted by expert, order [T*k] (row i is
    token order[i] // k's slot), counts [E], weights [T, k])."""
    top_logits, top_idx = logits.topk(top_k, dim=-1)
    weights = torch.softmax(top_logits.float(), dim=-1).to(x.dtype)
    flat = top_idx.reshape(-1)
    order = torch.argsort(flat, stable=True)
    return x[order // top_k], order, torch.bincount(flat, minlength=experts), weights


def unpermute(y: torch.Tensor, order: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The expert outputs back in (token, slot) order, weighted and summed over the k slots: [T*k, h] ->
    [T, h]."""
    tokens, k = weights.shape
    out = unsort_rows(y, order)
    return (out.view(tokens, k, -1) * weights.unsqueeze(-1)).sum(dim=1)


def sort_rows(x: torch.Tensor, row_expert: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows grouped by expert, stable (after an EP dispatch the rows arrive grouped by source rank):
    (x[order], order)."""
    order = torch.argsort(row_expert, stable=True)
    return x[order], order


def unsort_rows(y: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The inverse of `sort_rows`' gather: row i of the result is the row that `order` moved from i."""
    return y[torch.argsort(order)]


def ep_imbalance(mods: list[nn.Module], ep: Optional[EPGroup], device: torch.device) -> Optional[float]:
    """The routing's load imbalance as the simulator's `parallel.ep_imbalance` defines it (rows on the busiest
    EP rank / mean), per dispatch, averaged over every dispatch of the run; the same number on every rank
    of the EP group. None without EP. The ranks of an EP group dispatch the same layers in the same order
    (a recompute repeats a dispatch on all of them), so the i-th entries of their lists belong together."""
    if ep is None:
        return None
    rows = [n for mod in mods for m in mod.modules() if isinstance(m, MoE) for n in m.received_rows]
    if not rows:
        return None
    mine = torch.tensor(rows, dtype=torch.float64, device=device)
    every = torch.empty(ep.size * len(rows), dtype=torch.float64, device=device)
    dist.all_gather_into_tensor(every, mine, group=ep.group)
    per = every.view(ep.size, len(rows))
    mean = per.mean(0).clamp_min(1.0)
    return float((per.max(0).values / mean).mean())

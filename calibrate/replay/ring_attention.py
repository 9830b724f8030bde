"""Context parallelism: causal ring attention over the CP group, zig-zag load balanced (and the
all-gather variant for `cp_comm: allgather`).

torch's `context_parallel` has no CPU SDPA sharding rule (ECOSYSTEM.md 2.5), so this is our own, after
picotron (`context_parallel/context_parallel.py`: K/V passed around the ring with P2P, blockwise
softmax merged through the log-sum-exp) and ring-flash-attention's zig-zag variant (`zigzag_ring_flash_attn.py`:
rank r holds sequence chunks r and 2c-1-r of 2c, so all ranks do the same causal work).

Forward: c steps; at each the rank attends its two query chunks to the K/V block it holds while the
block moves on to the next rank (`batch_isend_irecv`, overlapped with the block's compute).
Backward: K/V go round again; each block's dK/dV accumulator travels with it and after c hops is back
with its owner (MODELING.md 4.3: c-1 K/V transfers forward, c-1 K/V and c dK/dV transfers backward).
`allgather_attention` is Llama 3's variant (§3.3.2): all-gather K/V (reduce-scatter of dK/dV in backward,
from autograd) and one masked attention over the whole sequence.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F


@dataclass(frozen=True, kw_only=True, eq=False)
class CPGroup:
    """This rank's context-parallel group."""
    group: dist.ProcessGroup
    ranks: tuple[int, ...]
    """Global ranks in ring order."""
    rank: int
    """Index of this rank in `ranks`."""

    @property
    def size(self) -> int:
        return len(self.ranks)

    def chunks(self, index: int) -> tuple[int, int]:
        """Zig-zag chunk ids (of 2c) held by group member `index`."""
        return index, 2 * self.size - 1 - index

    def positions(self, index: int, local_len: int, device) -> torch.Tensor:
        """Sequence positions held by member `index` (data.zigzag_positions, from the local length)."""
        half = local_len // 2
        return torch.cat([torch.arange(c * half, (c + 1) * half, device=device) for c in self.chunks(index)])


def _exchange(t: torch.Tensor, cp: CPGroup) -> tuple[torch.Tensor, list]:
    """Start sending `t` to the next rank and receiving the previous rank's into a new buffer."""
    buf = torch.empty_like(t)
    nxt, prv = cp.ranks[(cp.rank + 1) % cp.size], cp.ranks[(cp.rank - 1) % cp.size]
    ops = [dist.P2POp(dist.isend, t.contiguous(), nxt, cp.group), dist.P2POp(dist.irecv, buf, prv, cp.group)]
    return buf, dist.batch_isend_irecv(ops)


def _wait(works: list) -> None:
    for w in works:
        w.wait()


def _expand(t: torch.Tensor, rep: int) -> torch.Tensor:
    return t if rep == 1 else t.repeat_interleave(rep, dim=1)


def _fold(t: torch.Tensor, rep: int) -> torch.Tensor:
    """Sum an [b, H, n, d] gradient back to the [b, H/rep, n, d] K/V heads it came from."""
    if rep == 1:
        return t
    b, h, n, d = t.shape
    return t.view(b, h // rep, rep, n, d).sum(2)


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return s


def _pairs(cp: CPGroup, src: int):
    """(query half, key half, causal) for the sub-blocks that survive the causal mask."""
    for a, qc in enumerate(cp.chunks(cp.rank)):
        for b, kc in enumerate(cp.chunks(src)):
            if qc > kc:
                yield a, b, False
            elif qc == kc:
                yield a, b, True


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cp: CPGroup):
        rep, scale = q.shape[1] // k.shape[1], 1.0 / math.sqrt(q.shape[-1])
        qs = q.chunk(2, dim=2)
        out = [torch.zeros(x.shape, dtype=torch.float32, device=q.device) for x in qs]
        lse = [torch.full(x.shape[:-1], float("-inf"), device=q.device) for x in qs]
        kv = torch.stack([k, v])
        for step in range(cp.size):
            src = (cp.rank - step) % cp.size
            if step < cp.size - 1:
                nxt, works = _exchange(kv, cp)
            ks, vs = _expand(kv[0], rep).chunk(2, dim=2), _expand(kv[1], rep).chunk(2, dim=2)
            for a, b, causal in _pairs(cp, src):
                s = _scores(qs[a], ks[b], scale, causal)
                l_blk = torch.logsumexp(s, dim=-1)
                o_blk = torch.exp(s - l_blk.unsqueeze(-1)) @ vs[b].float()
                l_new = torch.logaddexp(lse[a], l_blk)
                out[a] = out[a] * torch.exp(lse[a] - l_new).unsqueeze(-1) + o_blk * torch.exp(l_blk - l_new).unsqueeze(-1)
                lse[a] = l_new
            if step < cp.size - 1:
                _wait(works)
                kv = nxt
        o = torch.cat(out, dim=2)
        ctx.save_for_backward(q, k, v, o, torch.cat(lse, dim=2))
        ctx.cp = cp
        return o.to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, o, lse = ctx.saved_tensors
        cp = ctx.cp
        rep, scale = q.shape[1] // k.shape[1], 1.0 / math.sqrt(q.shape[-1])
        dout = dout.float()
        delta = (dout * o).sum(-1)  # D = rowsum(dO * O) (FlashAttention-2 backward)
        qs, dos, ds, ls = q.chunk(2, 2), dout.chunk(2, 2), delta.chunk(2, 2), lse.chunk(2, 2)
        dq = [torch.zeros(x.shape, dtype=torch.float32, device=q.device) for x in qs]
        kv = torch.stack([k, v])
        dkv = torch.zeros(kv.shape, dtype=torch.float32, device=q.device)
        for step in range(cp.size):
            src = (cp.rank - step) % cp.size
            if step < cp.size - 1:
                nxt, works = _exchange(kv, cp)
            ks, vs = _expand(kv[0], rep).chunk(2, dim=2), _expand(kv[1], rep).chunk(2, dim=2)
            dk = [torch.zeros(x.shape, dtype=torch.float32, device=q.device) for x in ks]
            dv = [torch.zeros(x.shape, dtype=torch.float32, device=q.device) for x in vs]
            for a, b, causal in _pairs(cp, src):
                p = torch.exp(_scores(qs[a], ks[b], scale, causal) - ls[a].unsqueeze(-1))
                dv[b] += p.transpose(-1, -2) @ dos[a]
                dp = dos[a] @ vs[b].float().transpose(-1, -2)
                dsc = p * (dp - ds[a].unsqueeze(-1))
                dq[a] += (dsc @ ks[b].float()) * scale
                dk[b] += (dsc.transpose(-1, -2) @ qs[a].float()) * scale
            dkv = dkv + torch.stack([_fold(torch.cat(dk, 2), rep), _fold(torch.cat(dv, 2), rep)])
            if cp.size > 1:
                dkv, dkv_works = _exchange(dkv, cp)  # the accumulator follows its block round the ring
                _wait(dkv_works)
            if step < cp.size - 1:
                _wait(works)
                kv = nxt
        # after c hops the accumulator we hold is our own block's
        return torch.cat(dq, 2).to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cp: CPGroup) -> torch.Tensor:
    """Causal attention of this rank's zig-zag query chunks against the whole sequence.
    q [b, H, s_local, d], k/v [b, G, s_local, d] (GQA: H a multiple of G) -> [b, H, s_local, d]."""
    return _RingAttention.apply(q, k, v, cp)


def allgather_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cp: CPGroup) -> torch.Tensor:
    """Same contract as `ring_attention`, with K/V all-gathered over the CP group in one collective."""
    from torch.distributed._functional_collectives import all_gather_single_autograd

    def gather(t: torch.Tensor) -> torch.Tensor:
        out = all_gather_single_autograd(t.contiguous(), gather_dim=2, group=cp.group)
        return out.wait() if hasattr(out, "wait") else out

    rep, n = q.shape[1] // k.shape[1], q.shape[2]
    keys = torch.cat([cp.positions(i, n, q.device) for i in range(cp.size)])
    mask = cp.positions(cp.rank, n, q.device)[:, None] >= keys[None, :]
    return F.scaled_dot_product_attention(q, _expand(gather(k), rep), _expand(gather(v), rep), attn_mask=mask)

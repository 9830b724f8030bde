"""Context parallelism: causal ring attention over the CP group, zig-zag load balanced (and the
all-gather variant for `cp_comm: allgather`).

torch's `context_parallel` has no CPU SDPA sharding rule (docs/ecosystem.md §2.5), so this is our own, after
picotron (`context_parallel/context_parallel.py`: K/V passed around the ring with P2P, blockwise
softmax merged through the log-sum-exp) and ring-flash-attention's zig-zag variant (`zigzag_ring_flash_attn.py`:
rank r holds sequence chunks r and 2c-1-r of 2c, so all ranks do the same causal work).

Forward: c steps; at each the rank attends its queries to the K/V block it holds while the block moves
on to the next rank (`batch_isend_irecv`, issued before the block's compute): step 0 one causal block
over its own two chunks, later steps one unmasked half block (`_step_blocks`), merged through the
log-sum-exp. On CPU each block is the flash kernel with log-sum-exp output (as ring-flash-attention
calls flash-attn per block), elsewhere the same maths with materialised scores.
Backward: K/V go round again; each block's dK/dV accumulator travels with it and after c hops is back
with its owner (docs/modeling.md §4.3: c-1 K/V transfers forward, c-1 K/V and c dK/dV transfers backward).
An arriving accumulator is waited for only after the next block's backward has run (ring-flash-attention
waits for its dK/dV exchange the same way), so only the last hop is not overlapped with compute.
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


def _received(exchange: tuple[torch.Tensor, list]) -> torch.Tensor:
    """The buffer of an `_exchange`, once its send and receive are done."""
    buf, works = exchange
    _wait(works)
    return buf


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


def _block_forward(q, k, v, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(output in fp32, log-sum-exp [b, H, s_q]) of one attention block. On CPU: the flash kernel that
    returns its log-sum-exp (what SDPA runs, and what the simulator's attention table measured); on other
    devices the same maths with the scores materialised."""
    if q.device.type == "cpu":
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q.contiguous(), k.contiguous(), v.contiguous(), 0.0, causal, scale=scale)
        return o.float(), lse
    s = _scores(q, k, scale, causal)
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse.unsqueeze(-1)) @ v.float(), lse


def _block_backward(dout, q, k, v, out, lse, causal: bool, scale: float):
    """(dQ, dK, dV) of one block given the merged output and log-sum-exp (FlashAttention-2's backward:
    the block's probabilities are exp(scores - global lse), D = rowsum(dO * O) of the merged output)."""
    if q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout.contiguous(), q.contiguous(), k.contiguous(), v.contiguous(), out.to(q.dtype).contiguous(),
            lse.contiguous(), 0.0, causal, scale=scale)
    p = torch.exp(_scores(q, k, scale, causal) - lse.unsqueeze(-1))
    dout = dout.float()
    dp = dout @ v.float().transpose(-1, -2)
    dsc = p * (dp - (dout * out.float()).sum(-1).unsqueeze(-1))
    return (dsc @ k.float()) * scale, (dsc.transpose(-1, -2) @ q.float()) * scale, p.transpose(-1, -2) @ dout


def _step_blocks(cp: CPGroup, src: int, half: int) -> tuple[slice, slice]:
    """(query slice, key slice) of the local sequence that survive the causal mask when this rank holds
    member `src`'s K/V (src != own): src's chunks (src, 2c-1-src) against ours (r, 2c-1-r). src < r: its
    first chunk precedes both of ours and its second follows both -> all queries x first key half.
    src > r: both its chunks precede our second and follow our first -> second query half x all keys.
    Either way half of a full s_local x s_local block, with no mask (ring-flash-attention's zig-zag)."""
    whole = slice(None)
    return (whole, slice(0, half)) if src < cp.rank else (slice(half, None), whole)


def _merge(out, lse, o_blk, l_blk) -> tuple[torch.Tensor, torch.Tensor]:
    """Blockwise softmax: combine two partial results through their log-sum-exps."""
    l_new = torch.logaddexp(lse, l_blk)
    return out * torch.exp(lse - l_new).unsqueeze(-1) + o_blk * torch.exp(l_blk - l_new).unsqueeze(-1), l_new


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cp: CPGroup):
        rep, scale, half = q.shape[1] // k.shape[1], 1.0 / math.sqrt(q.shape[-1]), q.shape[2] // 2
        kv = torch.stack([k, v])
        out = lse = None
        for step in range(cp.size):
            src = (cp.rank - step) % cp.size
            if step < cp.size - 1:
                nxt, works = _exchange(kv, cp)
            kk, vv = _expand(kv[0], rep), _expand(kv[1], rep)
            if step == 0:  # our own chunks, in increasing order: one causal block
                out, lse = _block_forward(q, kk, vv, True, scale)
            else:
                qs, ks = _step_blocks(cp, src, half)
                o_blk, l_blk = _block_forward(q[:, :, qs], kk[:, :, ks], vv[:, :, ks], False, scale)
                out[:, :, qs], lse[:, :, qs] = _merge(out[:, :, qs], lse[:, :, qs], o_blk, l_blk)
            if step < cp.size - 1:
                _wait(works)
                kv = nxt
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.cp = cp
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, o, lse = ctx.saved_tensors
        cp = ctx.cp
        rep, scale, half = q.shape[1] // k.shape[1], 1.0 / math.sqrt(q.shape[-1]), q.shape[2] // 2
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        kv = torch.stack([k, v])
        dkv = torch.zeros(kv.shape, dtype=torch.float32, device=q.device)
        arriving = None  # (buffer, works): the accumulator of the block we hold, on its way from the previous rank
        for step in range(cp.size):
            src = (cp.rank - step) % cp.size
            if step < cp.size - 1:
                nxt, works = _exchange(kv, cp)
            kk, vv = _expand(kv[0], rep), _expand(kv[1], rep)
            qs, ks = (slice(None), slice(None)) if step == 0 else _step_blocks(cp, src, half)
            dq_b, dk_b, dv_b = _block_backward(dout[:, :, qs], q[:, :, qs], kk[:, :, ks], vv[:, :, ks],
                                               o[:, :, qs], lse[:, :, qs], step == 0, scale)
            dq[:, :, qs] += dq_b
            if arriving is not None:  # waited only now: its transfer overlapped this block's backward
                dkv = _received(arriving)
            dkv[0][:, :, ks] += _fold(dk_b.float(), rep)
            dkv[1][:, :, ks] += _fold(dv_b.float(), rep)
            if cp.size > 1:
                arriving = _exchange(dkv, cp)  # the accumulator follows its block round the ring
            if step < cp.size - 1:
                _wait(works)
                kv = nxt
        if arriving is not None:
            dkv = _received(arriving)
        # after c hops the accumulator we hold is our own block's
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None


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

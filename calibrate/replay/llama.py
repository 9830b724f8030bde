"""The model the executor trains: a Llama-style transformer (RMSNorm, RoPE, GQA attention, SwiGLU or
routed experts, untied LM head) built from a `simulator.model.ModelSpec`.

Module and parameter names follow torchtitan's llama3 (`tok_embeddings`, `layers.<i>.attention.wq`,
`feed_forward.w1/w2/w3`, `norm`, `output`) so its tensor-parallel plan applies unchanged (tp.py).
`layers` is a ModuleDict keyed by the global layer index, so a pipeline stage is the same class with
fewer layers and the same names, and `init_weights` seeds every parameter from its name: a stage, a
TP shard or an EP expert slice starts from exactly the weights of the single-process reference.
Attention variants (SDPA "flash", eager softmax, ring attention for CP) are chosen by `AttentionCore`;
MoE layers are in experts.py.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from simulator.model import ModelSpec

from .experts import MoE, EPGroup
from .ring_attention import CPGroup, allgather_attention, ring_attention

NORM_EPS = 1e-5
ROPE_THETA = 10000.0
INIT_STD = 0.02
"""GPT-2 / Megatron default init std for weight matrices."""


@dataclass(frozen=True, kw_only=True)
class AttentionCore:
    """How q, k, v become the attention output on this rank."""
    kind: str = "flash"
    """flash: F.scaled_dot_product_attention (scores never stored); eager: explicit softmax (scores stored)."""
    recompute: bool = False
    """Selective recompute (Korthikanti et al. 2022 §4): recompute the core attention in backward."""
    cp: Optional[CPGroup] = None
    """Context-parallel attention over this group (zig-zag layout) when set."""
    cp_comm: str = "ring"
    """ring: K/V passed round the group (ring_attention); allgather: K/V all-gathered (Llama 3)."""

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [b, H, s, d], k/v [b, G, s, d] -> [b, H, s, d], causal."""
        if self.cp is not None:
            fn = allgather_attention if self.cp_comm == "allgather" else ring_attention
            return fn(q, k, v, self.cp)
        fn = _eager_attention if self.kind == "eager" else _sdpa_attention
        if self.recompute:
            return checkpoint(fn, q, k, v, use_reentrant=False)
        return fn(q, k, v)


def _expand_kv(q: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    rep = q.shape[1] // t.shape[1]
    return t if rep == 1 else t.repeat_interleave(rep, dim=1)


def _sdpa_attention(q, k, v):
    return F.scaled_dot_product_attention(q, _expand_kv(q, k), _expand_kv(q, v), is_causal=True)


def _eager_attention(q, k, v):
    k, v = _expand_kv(q, k), _expand_kv(q, v)
    s = q.shape[2]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


def rope_tables(positions: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [len(positions), head_dim] for rotate-half RoPE (Su et al. 2021; HF Llama layout)."""
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = positions.to(torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[None, :, None, :].to(x.dtype) + rot * sin[None, :, None, :].to(x.dtype)


class Attention(nn.Module):
    def __init__(self, m: ModelSpec, positions: torch.Tensor, core: AttentionCore):
        super().__init__()
        self.head_dim = m.d_head
        self.wq = nn.Linear(m.hidden, m.heads * m.d_head, bias=False)
        self.wk = nn.Linear(m.hidden, m.n_kv * m.d_head, bias=False)
        self.wv = nn.Linear(m.hidden, m.n_kv * m.d_head, bias=False)
        self.wo = nn.Linear(m.heads * m.d_head, m.hidden, bias=False)
        cos, sin = rope_tables(positions, m.d_head)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.core = core

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads: under TP the column-parallel projections hold heads/tp and kv_heads/tp (torchtitan)
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        q, k = _rotate(q, self.cos, self.sin), _rotate(k, self.cos, self.sin)
        o = self.core(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x) (Shazeer 2020)."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, m: ModelSpec, layer: int, positions: torch.Tensor, core: AttentionCore,
                 full_recompute: bool, ep: Optional[EPGroup]):
        super().__init__()
        self.attention_norm = nn.RMSNorm(m.hidden, eps=NORM_EPS)
        self.attention = Attention(m, positions, core)
        self.ffn_norm = nn.RMSNorm(m.hidden, eps=NORM_EPS)
        self.moe = m.is_moe_layer(layer)
        self.feed_forward = MoE(m, ep) if self.moe else FeedForward(m.hidden, m.ffn_hidden)
        self.full_recompute = full_recompute

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.full_recompute:
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


class Transformer(nn.Module):
    """The whole model, or one pipeline chunk of it (first: has the embedding; last: norm and head)."""

    def __init__(self, m: ModelSpec, *, layer_ids: list[int], first: bool, last: bool, positions: torch.Tensor,
                 core: AttentionCore, full_recompute: bool = False, ep: Optional[EPGroup] = None):
        super().__init__()
        self.tok_embeddings = nn.Embedding(m.vocab, m.hidden) if first else None
        self.layers = nn.ModuleDict({str(i): Block(m, i, positions, core, full_recompute, ep) for i in layer_ids})
        self.norm = nn.RMSNorm(m.hidden, eps=NORM_EPS) if last else None
        self.output = nn.Linear(m.hidden, m.vocab, bias=False) if last else None
        if m.tie_embeddings and first and last:
            self.output.weight = self.tok_embeddings.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        for layer in self.layers.values():
            h = layer(h)
        if self.norm is not None:
            h = self.norm(h)
        return self.output(h) if self.output is not None else h


def _generator(seed: int, name: str) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 7919 + zlib.crc32(name.encode()))


@torch.no_grad()
def init_weights(model: nn.Module, seed: int) -> None:
    """Seed each parameter from its name: norms 1, matrices N(0, INIT_STD). Experts are named by their
    global index (experts.GroupedExperts), so EP ranks hold exactly the reference's experts."""
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.fill_(1.0)
            continue
        p.copy_(torch.randn(p.shape, generator=_generator(seed, name)) * INIT_STD)


def token_loss(logits: torch.Tensor, labels: torch.Tensor, total_tokens: int) -> torch.Tensor:
    """Sum of the token cross-entropies over the step's total token count: summed over micro-batches
    and ranks this is the step's mean loss, however the batch is split (no per-micro-batch averaging)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="sum") / total_tokens

"""DeepSeek's multi-head latent attention (MLA): its four projections, priced at the FLOPs they have.

MLA (DeepSeek-V2 §2.1; DeepSeek-V3 §2.1.1) does not project the hidden state to full-rank queries, keys and values.
Per token it runs two down projections from the hidden size h to small latents, normalises them, and two up
projections from the latents to the heads (Megatron-Core `MLASelfAttention`, megatron/core/transformer/
multi_latent_attention.py: `linear_q_down_proj`, `q_layernorm`, `linear_q_up_proj`, `linear_kv_down_proj`,
`kv_layernorm`, `linear_kv_up_proj`; DeepSeek-V3: h 7,168, q latent 1,536, kv latent 512 plus a 64-wide shared RoPE
key, 128 heads of 128 + 64 query/key and 128 value dims):

  q_down  h -> q_lora               q_up   q_lora -> heads x (qk_nope + qk_rope)
  kv_down h -> kv_lora + qk_rope    kv_up  kv_lora -> heads x (qk_nope + v)

and the output projection reads heads x v, not heads x (qk_nope + qk_rope). DeepSeek-V3: 69.7 M multiply-adds per
token, where q, k and v at full rank (h x (q + 2 kv)) would be 411 M, and 117 M in the output projection, not 176 M.

Under TP the down projections are duplicated (`parallel_mode='duplicated'`: every TP rank holds the whole weight and
runs it on its own tokens, the SP shard, or every token without SP) and the up projections are column-parallel
(1/t of the heads). All four are priced as ONE GEMM node standing where a QKV GEMM stands (`qkv`), of their summed
multiply-adds on this rank over the layer's T gathered rows (n = MACs / (T h)), so the TP, FP8 and overlap rules of
a QKV GEMM apply unchanged. Under sequence parallelism the down projections run on the rank's own rows and what is
all-gathered is their output: the up projections are column-parallel linears that gather their SP-sharded inputs,
the query and key-value latents, and the shared RoPE key is gathered on its own (Megatron-Core
multi_latent_attention.py `get_query_key_value_tensors` at d98e8a64: "kv_compressed:[s / TP, b, kv_lora_rank]",
`gather_from_sequence_parallel_region(k_pos_emb)`): T x (1,536 + 512 + 64) values a layer on DeepSeek-V3, not the
hidden state's T x 7,168 (`sp_gather_width`; the backward's reduce-scatter and any re-gather for the weight
gradients the same). Not modelled: the up projections' small inner dimension (512, 1,536) running less efficiently
than the node's h-deep GEMM; the latent norms (memory-bound, small). RoPE rotates only the 64-wide parts
(`rope_width`).

`training.recompute_modules: [mla_up_proj]` (Megatron-Core `recompute_up_proj`: the up projections' outputs are
discarded after the core attention and re-run in the backward, `qkv_up_checkpoint`) re-runs the up projections:
`up_rerun`, one GEMM node of their multiply-adds (n = the two up projections' outputs side by side, k their mean
depth).
"""
from __future__ import annotations

from ..model import ModelSpec
from .opgraph import Compute, Shard, gemm


def down_macs(m: ModelSpec) -> int:
    """Multiply-adds per token of the two down projections (the whole weight: duplicated over TP)."""
    a = m.mla
    q = m.hidden * a.q_lora_rank if a.q_lora_rank else 0
    return q + m.hidden * (a.kv_lora_rank + a.qk_rope_head_dim)


def up_outputs(m: ModelSpec) -> tuple[int, int]:
    """Output widths of the query and key-value up projections (all heads); without a query latent
    (q_lora_rank 0) the query is projected from h directly and counts as its up projection."""
    a = m.mla
    return m.heads * (a.qk_nope_head_dim + a.qk_rope_head_dim), m.heads * (a.qk_nope_head_dim + a.v_head_dim)


def up_macs(m: ModelSpec) -> int:
    """Multiply-adds per token of the up projections (all heads; column-parallel, 1/t of them per rank)."""
    a = m.mla
    q_out, kv_out = up_outputs(m)
    return q_out * (a.q_lora_rank or m.hidden) + kv_out * a.kv_lora_rank


def projections(sc, z: Shard) -> Compute:
    """The four projections as one GEMM node on this rank (module docstring): T gathered rows, k = h."""
    m = sc.model
    down_rows = z.T_sp if (sc.parallel.sp and z.t > 1) else z.T
    macs = down_rows * down_macs(m) + z.T * up_macs(m) / z.t
    return gemm("qkv", z.T, max(1, round(macs / (z.T * z.h))), z.h, z)


def sp_gather_width(m: ModelSpec) -> int:
    """Values per token MLA all-gathers under sequence parallelism (module docstring): the query latent (the hidden
    state where the model has none: its query projection is then column-parallel on it), the key-value latent and
    the shared RoPE key."""
    a = m.mla
    return (a.q_lora_rank or m.hidden) + a.kv_lora_rank + a.qk_rope_head_dim


def rope_width(m: ModelSpec, z: Shard) -> int:
    """Values per token RoPE rotates on this rank: each local head's qk_rope part of the query and the one shared
    qk_rope key (DeepSeek-V3: 128/t x 64 + 64), not the whole query and key."""
    return (m.heads // z.t + 1) * m.mla.qk_rope_head_dim


def up_rerun(sc, z: Shard) -> Compute:
    """The up projections re-run in the backward under `mla_up_proj` (module docstring)."""
    m = sc.model
    n = sum(up_outputs(m)) // z.t
    return gemm("qkv_up_recompute", z.T, n, max(1, round(up_macs(m) / sum(up_outputs(m)))), z)

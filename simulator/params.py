"""Parameter counts: whole model (total and active per token) and per GPU after TP/PP/EP sharding.

Llama: attn = h*(a*d_h) + 2*h*(g*d_h) + (a*d_h)*h, MLP = 3*h*f, norms 2h per layer, final norm h,
embedding V*h and an untied LM head V*h (docs/modeling.md §1.2, after Megatron's theoretical_memory_usage.py).
GPT: 12h^2 + 13h per layer, final LayerNorm 2h, learned positions s*h (docs/modeling.md §1.1).
MoE: E_r * 3*h*f_e routed + shared experts + router h*E_r (docs/modeling.md §1.3). MLA: DeepSeek-V3's
low-rank Q and KV projections (DSV3 §2.1.1, Hugging Face modeling_deepseek_v3.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from .model import ModelSpec


@dataclass(frozen=True, slots=True)
class LayerParams:
    attn: int
    """Attention projections (and their biases)."""
    mlp: int
    """Dense MLP, or the shared experts of an MoE layer, plus the router."""
    experts: int
    """Routed experts (all of them)."""
    norms: int

    @property
    def total(self) -> int:
        return self.attn + self.mlp + self.experts + self.norms


def attention_params(m: ModelSpec) -> int:
    h = m.hidden
    if m.mla:
        a, c = m.heads, m.mla
        qk = c.qk_nope_head_dim + c.qk_rope_head_dim
        q = (h * c.q_lora_rank + c.q_lora_rank + c.q_lora_rank * a * qk) if c.q_lora_rank else h * a * qk
        kv = h * (c.kv_lora_rank + c.qk_rope_head_dim) + c.kv_lora_rank + c.kv_lora_rank * a * (c.qk_nope_head_dim + c.v_head_dim)
        return q + kv + a * c.v_head_dim * h
    proj = h * m.q_dim + 2 * h * m.kv_dim + m.q_dim * h
    if m.arch == "gpt":
        proj += m.q_dim + 2 * m.kv_dim + h  # biases
    return proj


def mlp_params(m: ModelSpec, ffn: int) -> int:
    """One dense FFN of inner size `ffn`: SwiGLU 3*h*f; GeLU 2*h*f plus biases f + h."""
    h = m.hidden
    if m.gated_mlp:
        return 3 * h * ffn
    return 2 * h * ffn + ffn + h


def norm_params(m: ModelSpec) -> int:
    """Two norms per layer: RMSNorm has a weight (h), LayerNorm a weight and a bias (2h)."""
    return 2 * m.hidden * (1 if m.arch == "llama" else 2)


def layer_params(m: ModelSpec, i: int) -> LayerParams:
    norms = norm_params(m)
    attn = attention_params(m)
    if m.is_moe_layer(i):
        e = m.moe
        mlp = e.shared_experts * mlp_params(m, e.shared_ffn) + m.hidden * e.experts
        return LayerParams(attn=attn, mlp=mlp, experts=e.experts * mlp_params(m, e.expert_ffn_hidden), norms=norms)
    return LayerParams(attn=attn, mlp=mlp_params(m, m.ffn_hidden), experts=0, norms=norms)


def embedding_params(m: ModelSpec) -> int:
    """Input embedding (and learned positions); the LM head is counted apart when untied."""
    return m.vocab * m.hidden + m.positions * m.hidden


def final_norm_params(m: ModelSpec) -> int:
    return m.hidden * (1 if m.arch == "llama" else 2)


def lm_head_params(m: ModelSpec) -> int:
    return 0 if m.tie_embeddings else m.vocab * m.hidden


def total_params(m: ModelSpec) -> int:
    layers = sum(layer_params(m, i).total for i in range(m.layers))
    return layers + embedding_params(m) + final_norm_params(m) + lm_head_params(m)


def active_params(m: ModelSpec) -> int:
    """Parameters one token touches: top_k of the routed experts (MIX: 12.9 B of 46.7 B for Mixtral)."""
    total = 0
    for i in range(m.layers):
        p = layer_params(m, i)
        routed = (m.moe.top_k * mlp_params(m, m.moe.expert_ffn_hidden)) if p.experts else 0
        total += p.attn + p.mlp + p.norms + routed
    return total + embedding_params(m) + final_norm_params(m) + lm_head_params(m)


def flop_params(m: ModelSpec) -> int:
    """The N of 6N: active parameters that do matmuls (no embedding lookup, no norms), LM head counted
    even when tied (it is a matmul either way). docs/modeling.md §2.3."""
    total = 0
    for i in range(m.layers):
        p = layer_params(m, i)
        routed = (m.moe.top_k * mlp_params(m, m.moe.expert_ffn_hidden)) if p.experts else 0
        total += p.attn + p.mlp + routed
    return total + m.vocab * m.hidden

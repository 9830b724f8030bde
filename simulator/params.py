"""Parameter counts: whole model (total and active per token) and per GPU after TP/PP/EP sharding.

Llama: attn = h*(a*d_h) + 2*h*(g*d_h) + (a*d_h)*h, MLP = 3*h*f, norms 2h per layer, final norm h,
embedding V*h and an untied LM head V*h (docs/modeling.md §1.2, after Megatron's theoretical_memory_usage.py).
GPT: 12h^2 + 13h per layer, final LayerNorm 2h, learned positions s*h (docs/modeling.md §1.1).
Nemotron: Llama's attention (no biases), MLP 2*h*f, LayerNorms 2h each (weight and bias), untied head.
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
    mtp_proj: int = 0
    """An MTP module's projection of [norm(embedding); norm(hidden)] 2h -> h (`eh_proj`, no bias); 0 for a main layer."""

    @property
    def total(self) -> int:
        return self.attn + self.mlp + self.experts + self.norms + self.mtp_proj


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
    """One dense FFN of inner size `ffn`: SwiGLU 3*h*f; GeLU 2*h*f plus biases f + h; Nemotron's squared-ReLU
    MLP 2*h*f (no biases)."""
    h = m.hidden
    if m.gated_mlp:
        return 3 * h * ffn
    return 2 * h * ffn + (ffn + h if m.arch == "gpt" else 0)


def norm_params(m: ModelSpec) -> int:
    """Two norms per layer (one in a parallel block): RMSNorm has a weight (h), LayerNorm a weight and a bias (2h)."""
    return (1 if m.parallel_block else 2) * m.hidden * (1 if m.arch == "llama" else 2)


def mtp_extra_norm_params(m: ModelSpec) -> int:
    """An MTP module's three norms around its layer: of the embedding (enorm), of the previous depth's hidden
    states (hnorm) and before the shared head (final_layernorm) (Megatron-Core multi_token_prediction.py
    MultiTokenPredictionLayer; DeepSeek-V3 report §2.2 Eq. 21 and the output head's norm)."""
    return 3 * final_norm_params(m)


def mtp_proj_params(m: ModelSpec) -> int:
    """eh_proj: 2h -> h, no bias (Megatron-Core `eh_proj`, bias=False; DeepSeek-V3 Eq. 21's M_k)."""
    return 2 * m.hidden * m.hidden


def layer_params(m: ModelSpec, i: int) -> LayerParams:
    """Layer i; from `m.layers` on, an MTP module: its transformer layer (like the last main layer) plus its
    three norms and projection (`mtp_proj`); the embedding and the head are shared, not counted again."""
    norms = norm_params(m) + (mtp_extra_norm_params(m) if m.is_mtp_layer(i) else 0)
    proj = mtp_proj_params(m) if m.is_mtp_layer(i) else 0
    attn = attention_params(m)
    if m.is_moe_layer(i):
        e = m.moe
        mlp = e.shared_experts * mlp_params(m, e.shared_ffn) + m.hidden * e.experts
        return LayerParams(attn=attn, mlp=mlp, experts=e.experts * mlp_params(m, e.expert_ffn_hidden), norms=norms,
                           mtp_proj=proj)
    return LayerParams(attn=attn, mlp=mlp_params(m, m.ffn_hidden), experts=0, norms=norms, mtp_proj=proj)


def all_layer_ids(m: ModelSpec) -> range:
    """The main layers, then the MTP modules' (`ModelSpec.mtp_layer_ids`)."""
    return range(m.layers + m.mtp_layers)


def embedding_params(m: ModelSpec) -> int:
    """Input embedding (and learned positions); the LM head is counted apart when untied."""
    return m.vocab * m.hidden + m.positions * m.hidden


def final_norm_params(m: ModelSpec) -> int:
    return m.hidden * (1 if m.arch == "llama" else 2)


def lm_head_params(m: ModelSpec) -> int:
    return 0 if m.tie_embeddings else m.vocab * m.hidden


def total_params(m: ModelSpec) -> int:
    layers = sum(layer_params(m, i).total for i in all_layer_ids(m))
    return layers + embedding_params(m) + final_norm_params(m) + lm_head_params(m)


def active_params(m: ModelSpec) -> int:
    """Parameters one token touches: top_k of the routed experts (MIX: 12.9 B of 46.7 B for Mixtral), MTP
    modules included."""
    total = 0
    for i in all_layer_ids(m):
        p = layer_params(m, i)
        routed = (m.moe.top_k * mlp_params(m, m.moe.expert_ffn_hidden)) if p.experts else 0
        total += p.attn + p.mlp + p.norms + p.mtp_proj + routed
    return total + embedding_params(m) + final_norm_params(m) + lm_head_params(m)


def flop_params(m: ModelSpec) -> int:
    """The N of 6N: active parameters that do matmuls (no embedding lookup, no norms), LM head counted
    even when tied (it is a matmul either way). docs/modeling.md §2.3. Each MTP depth adds its layer, its
    2h -> h projection and one more pass through the shared head, as Megatron-LM counts it
    (training.py num_floating_point_operations: `* (mtp_num_layers + 1)  # MTP + final logit`, the
    eh_proj's `2 * hidden_size * hidden_size`, its layer in `num_layers + mtp_num_layers`); Megatron's
    `3 * hidden_size` for the MTP norms is left out, as every norm is here (3/(2h) of the projection's)."""
    total = 0
    for i in all_layer_ids(m):
        p = layer_params(m, i)
        routed = (m.moe.top_k * mlp_params(m, m.moe.expert_ffn_hidden)) if p.experts else 0
        total += p.attn + p.mlp + p.mtp_proj + routed
    return total + m.vocab * m.hidden * (1 + m.mtp_layers)

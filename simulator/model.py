"""The model: one `ModelSpec` for dense (Llama, GPT) and MoE (Mixtral, DeepSeek-V3) transformers.

A scenario's `model` is a preset name (a Hugging Face style `config.json` under `simulator/presets/`),
a path to any Hugging Face `config.json`, or a mapping in the contract's own keys. Everything is
normalised here; parameter counts live in `params.py`, FLOPs in `flops.py`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .errors import ScenarioError
from .schema import from_mapping, to_mapping

PRESET_DIR = Path(__file__).with_name("presets")


@dataclass(frozen=True, kw_only=True)
class MoESpec:
    experts: int = field(metadata={"min": 1})
    """Routed experts per MoE layer."""
    top_k: int = field(metadata={"min": 1})
    """Routed experts each token visits."""
    expert_ffn_hidden: int = field(metadata={"min": 1})
    """FFN inner size of one routed expert (SwiGLU: size of each of gate and up)."""
    shared_experts: int = field(default=0, metadata={"min": 0})
    """Always-on experts per MoE layer (DeepSeek)."""
    shared_ffn_hidden: Optional[int] = None
    """FFN inner size of one shared expert; defaults to expert_ffn_hidden."""
    dense_layers: int = field(default=0, metadata={"min": 0})
    """The first k layers are dense (DeepSeek's first_k_dense_replace)."""
    layer_freq: int = field(default=1, metadata={"min": 1})
    """Every layer_freq-th layer after the dense ones is MoE (Megatron moe_layer_freq)."""
    capacity_factor: Optional[float] = None
    """Token-dropping capacity factor; null = no dropping."""

    @property
    def shared_ffn(self) -> int:
        return self.shared_ffn_hidden if self.shared_ffn_hidden is not None else self.expert_ffn_hidden


@dataclass(frozen=True, kw_only=True)
class MLASpec:
    """DeepSeek multi-head latent attention (DSV3 §2.1.1)."""
    q_lora_rank: int = 0
    """0 = no low-rank query projection."""
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    arch: str = field(metadata={"choices": ("llama", "gpt")})
    """llama: RMSNorm, SwiGLU, RoPE, GQA, no biases. gpt: LayerNorm and linear biases, 4h GeLU MLP, learned positions."""
    layers: int = field(metadata={"min": 1})
    hidden: int = field(metadata={"min": 1})
    ffn_hidden: int = field(metadata={"min": 1})
    """Dense FFN inner size (SwiGLU: each of gate/up)."""
    heads: int = field(metadata={"min": 1})
    kv_heads: Optional[int] = None
    """KV heads (GQA groups); null = heads (plain multi-head attention)."""
    vocab: int = field(metadata={"min": 1})
    tie_embeddings: bool = False
    head_dim: Optional[int] = None
    """Per-head size; null = hidden / heads."""
    positions: int = field(default=0, metadata={"min": 0})
    """Learned position-embedding rows (GPT-2/3); 0 for rotary models."""
    moe: Optional[MoESpec] = None
    mla: Optional[MLASpec] = None
    rope_theta: Optional[float] = None
    """Rotary base (config.json rope_theta); null = the framework's default. Only the exports read it:
    it changes what the model learns, not what a step costs."""
    name: str = "custom"

    # --- derived sizes -------------------------------------------------------------------
    @property
    def d_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def n_kv(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def q_dim(self) -> int:
        """Width of the query projection output (a * d_h)."""
        if self.mla:
            return self.heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim)
        return self.heads * self.d_head

    @property
    def kv_dim(self) -> int:
        """Width of K (= of V) per token (g * d_h)."""
        if self.mla:
            return self.heads * self.mla.v_head_dim
        return self.n_kv * self.d_head

    @property
    def gated_mlp(self) -> bool:
        return self.arch == "llama"

    @property
    def rotary(self) -> bool:
        """Rotary positions on Q and K (llama); GPT adds learned positions to the embedding instead."""
        return self.arch == "llama"

    @property
    def hidden_dropout(self) -> bool:
        """Dropout on each sublayer's output before the residual add (GPT, Megatron's bias-dropout-add)."""
        return self.arch == "gpt"

    def is_moe_layer(self, i: int) -> bool:
        """Layer i (0-based) is MoE: after the dense prefix, every layer_freq-th layer."""
        if not self.moe or i < self.moe.dense_layers:
            return False
        return (i - self.moe.dense_layers) % self.moe.layer_freq == 0

    @property
    def moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.layers))


def _check_model(m: ModelSpec, path: str) -> ModelSpec:
    if m.hidden % m.heads and m.head_dim is None:
        raise ScenarioError(f"{path}.heads", f"{m.heads} does not divide hidden {m.hidden}; give head_dim")
    if m.heads % m.n_kv:
        raise ScenarioError(f"{path}.kv_heads", f"{m.n_kv} does not divide heads {m.heads}", "a divisor of heads")
    if m.moe:
        if m.moe.top_k > m.moe.experts:
            raise ScenarioError(f"{path}.moe.top_k", f"{m.moe.top_k} exceeds experts {m.moe.experts}")
        if m.moe.dense_layers >= m.layers:
            raise ScenarioError(f"{path}.moe.dense_layers", f"{m.moe.dense_layers} leaves no MoE layer of {m.layers}")
    return m


def model_from_mapping(raw: Any, path: str = "model") -> ModelSpec:
    return _check_model(from_mapping(ModelSpec, raw, path), path)


def model_to_mapping(m: ModelSpec) -> dict:
    return to_mapping(m)


def _get(cfg: dict, *keys, default=None):
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


def model_from_hf_config(cfg: dict, name: str = "custom", path: str = "model") -> ModelSpec:
    """Normalise a Hugging Face `config.json` (Llama, Mistral, Qwen, GPT-2/GPT-3/GPT-NeoX-style, Mixtral,
    Qwen-MoE, DeepSeek-V2/V3) into a ModelSpec. Field names: transformers' configuration_*.py files
    (see ECOSYSTEM.md 2.2)."""
    if not isinstance(cfg, dict):
        raise ScenarioError(path, "a Hugging Face config must be a JSON object")
    mtype = str(cfg.get("model_type", "")).lower()
    gpt = mtype in ("gpt2", "gpt3", "openai-gpt", "gpt_neox", "gptj", "gpt_bigcode", "opt") or "n_embd" in cfg
    try:
        hidden = int(_get(cfg, "hidden_size", "n_embd", "d_model"))
        layers = int(_get(cfg, "num_hidden_layers", "n_layer", "num_layers"))
        heads = int(_get(cfg, "num_attention_heads", "n_head", "num_heads"))
        vocab = int(_get(cfg, "vocab_size"))
    except (TypeError, ValueError):
        raise ScenarioError(path, "config.json lacks hidden_size / num_hidden_layers / num_attention_heads / vocab_size")
    kv = _get(cfg, "num_key_value_heads", "multi_query_group_num")
    if cfg.get("multi_query") is True:
        kv = 1
    ffn = _get(cfg, "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size")
    if ffn is None:
        ffn = 4 * hidden
    moe = None
    experts = _get(cfg, "n_routed_experts", "num_local_experts", "num_experts")
    if experts:
        expert_ffn = _get(cfg, "moe_intermediate_size", default=ffn)
        shared = int(_get(cfg, "n_shared_experts", default=0) or 0)
        shared_ffn = _get(cfg, "shared_expert_intermediate_size")
        if shared_ffn and not shared:
            shared = 1
        moe = MoESpec(
            experts=int(experts),
            top_k=int(_get(cfg, "num_experts_per_tok", "moe_topk", default=2)),
            expert_ffn_hidden=int(expert_ffn),
            shared_experts=shared,
            shared_ffn_hidden=int(shared_ffn) if shared_ffn else None,
            dense_layers=int(_get(cfg, "first_k_dense_replace", default=0) or 0),
            layer_freq=int(_get(cfg, "moe_layer_freq", "decoder_sparse_step", default=1) or 1),
        )
    mla = None
    if cfg.get("kv_lora_rank"):
        mla = MLASpec(
            q_lora_rank=int(cfg.get("q_lora_rank") or 0),
            kv_lora_rank=int(cfg["kv_lora_rank"]),
            qk_nope_head_dim=int(cfg.get("qk_nope_head_dim", 128)),
            qk_rope_head_dim=int(cfg.get("qk_rope_head_dim", 64)),
            v_head_dim=int(cfg.get("v_head_dim", 128)),
        )
    positions = int(_get(cfg, "n_positions", "max_position_embeddings", default=0)) if gpt else 0
    tie = cfg.get("tie_word_embeddings")
    if tie is None:
        tie = gpt  # GPT-2/3 tie input and output embeddings; Llama-family configs say so explicitly
    m = ModelSpec(
        arch="gpt" if gpt else "llama",
        layers=layers, hidden=hidden, ffn_hidden=int(ffn), heads=heads,
        kv_heads=int(kv) if kv else None, vocab=vocab, tie_embeddings=bool(tie),
        head_dim=int(cfg["head_dim"]) if cfg.get("head_dim") else None,
        positions=positions, moe=moe, mla=mla,
        rope_theta=float(cfg["rope_theta"]) if cfg.get("rope_theta") and not gpt else None, name=str(cfg.get("_name_or_path") or name),
    )
    return _check_model(m, path)


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


def load_model(spec: Any, base_dir: Path | None = None, path: str = "model") -> ModelSpec:
    """Resolve a scenario's `model` value: preset name, path to a config.json, or a mapping."""
    if isinstance(spec, dict):
        return model_from_mapping(spec, path)
    if not isinstance(spec, str):
        raise ScenarioError(path, f"expected a preset name, a path to config.json or a mapping, got {spec!r}")
    preset = PRESET_DIR / f"{spec}.json"
    file = preset if preset.exists() else Path(spec)
    if not file.is_absolute() and not file.exists() and base_dir is not None:
        file = base_dir / spec
    if not file.exists():
        raise ScenarioError(path, f"unknown model {spec!r}", "a preset (" + ", ".join(preset_names()) + ") or a path to a config.json")
    try:
        cfg = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ScenarioError(path, f"cannot read {file}: {e}")
    return model_from_hf_config(cfg, name=file.stem, path=path)

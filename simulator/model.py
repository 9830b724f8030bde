"""The model: one `ModelSpec` for dense (Llama, GPT, Nemotron) and MoE (Mixtral, DeepSeek-V3) transformers.

A scenario's `model` is a preset name (a Hugging Face style `config.json` under `simulator/presets/`),
a path to any Hugging Face `config.json`, or a mapping in the contract's own keys. Everything is
normalised here; parameter counts live in `params.py`, FLOPs in `flops.py`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from .errors import ScenarioError
from .inputs import existing_file, read_json_file, short, spelling
from .schema import from_mapping, to_mapping

PRESET_DIR = Path(__file__).with_name("presets")

# Upper bounds: each far above any published model, low enough that one step's ops, FLOPs and bytes stay
# small numbers to build and exact to add up (a value beyond them is a typo or an attack, not a model).
MAX_LAYERS = 2048
"""16x Llama 3 405B's 126 layers; the simulator builds each layer's ops (10**9 layers exhausted memory)."""
MAX_WIDTH = 1 << 20
"""hidden / ffn sizes: 20x the widest published FFN (53,248 for Llama 3 405B)."""
MAX_HEADS = 4096
"""Attention (and KV) heads: 32x Llama 3 405B's 128."""
MAX_HEAD_DIM = 4096
"""Per-head size: 16x the largest in use (256, Gemma)."""
MAX_VOCAB = 1 << 24
"""16.7 M tokens: 64x the largest vocabularies (Gemma's 256 K)."""
MAX_POSITIONS = 1 << 24
"""Learned position rows (GPT-style): far above GPT-3's 2,048."""
MAX_EXPERTS = 1 << 16
"""Routed experts per layer: 256x DeepSeek-V3's 256."""
MAX_MTP_LAYERS = 64
"""Multi-token prediction depth: 64x DeepSeek-V3's 1 (its report also tries D = 2; each depth is a layer)."""
MTP_DEPTH_KEYS = ("mtp_layers", "num_nextn_predict_layers", "mtp_num_layers")
"""Keys that state a multi-token-prediction depth: clustersim's, config.json's, Megatron's."""
MAX_CAPACITY_FACTOR = 1024.0
"""Capacity factor: above experts / top_k it drops nothing; real runs use 1-2."""


@dataclass(frozen=True, kw_only=True)
class MoESpec:
    experts: int = field(metadata={"min": 1, "max": MAX_EXPERTS})
    """Routed experts per MoE layer, at most MAX_EXPERTS."""
    top_k: int = field(metadata={"min": 1, "max": MAX_EXPERTS})
    """Routed experts each token visits (<= experts)."""
    expert_ffn_hidden: int = field(metadata={"min": 1, "max": MAX_WIDTH})
    """FFN inner size of one routed expert (SwiGLU: size of each of gate and up), at most MAX_WIDTH."""
    shared_experts: int = field(default=0, metadata={"min": 0, "max": MAX_EXPERTS})
    """Always-on experts per MoE layer (DeepSeek)."""
    shared_ffn_hidden: Optional[int] = field(default=None, metadata={"min": 1, "max": MAX_WIDTH})
    """FFN inner size of one shared expert; defaults to expert_ffn_hidden."""
    dense_layers: int = field(default=0, metadata={"min": 0, "max": MAX_LAYERS})
    """The first k layers are dense (DeepSeek's first_k_dense_replace)."""
    layer_freq: int = field(default=1, metadata={"min": 1, "max": MAX_LAYERS})
    """Every layer_freq-th layer after the dense ones is MoE (Megatron moe_layer_freq)."""
    capacity_factor: Optional[float] = field(default=None, metadata={"gt": 0.0, "max": MAX_CAPACITY_FACTOR})
    """Token-dropping capacity factor (> 0, at most MAX_CAPACITY_FACTOR); null = no dropping."""
    groups: int = field(default=1, metadata={"min": 1, "max": MAX_EXPERTS})
    """Group-limited routing (config.json n_group): the routed experts split into this many equal groups..."""
    top_groups: Optional[int] = field(default=None, metadata={"min": 1, "max": MAX_EXPERTS})
    """... of which a token picks this many (topk_group) before its top_k experts among them; null = all
    groups. With expert parallelism over as many nodes as groups, each group on one node, a token reaches
    at most top_groups nodes (DeepSeek-V3 report §3.2.2: node-limited routing, at most 4 nodes)."""

    @property
    def shared_ffn(self) -> int:
        return self.shared_ffn_hidden if self.shared_ffn_hidden is not None else self.expert_ffn_hidden


@dataclass(frozen=True, kw_only=True)
class MLASpec:
    """DeepSeek multi-head latent attention (DSV3 §2.1.1)."""
    q_lora_rank: int = field(default=0, metadata={"min": 0, "max": MAX_WIDTH})
    """0 = no low-rank query projection."""
    kv_lora_rank: int = field(default=512, metadata={"min": 1, "max": MAX_WIDTH})
    """Rank of the compressed K/V latent."""
    qk_nope_head_dim: int = field(default=128, metadata={"min": 1, "max": MAX_HEAD_DIM})
    """Per-head query/key size without rotary position."""
    qk_rope_head_dim: int = field(default=64, metadata={"min": 0, "max": MAX_HEAD_DIM})
    """Per-head query/key size that carries the rotary position."""
    v_head_dim: int = field(default=128, metadata={"min": 1, "max": MAX_HEAD_DIM})
    """Per-head value size."""


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    arch: str = field(metadata={"choices": ("llama", "gpt", "nemotron")})
    """llama: RMSNorm, SwiGLU, RoPE, GQA, no biases. gpt: LayerNorm and linear biases, 4h GeLU MLP, learned positions.
    nemotron (NVIDIA's Nemotron-3 / Nemotron-4, transformers' NemotronForCausalLM): LayerNorm (zero-centred
    gamma, weight and bias), no linear biases, a two-GEMM MLP with squared ReLU (relu(x)^2, not gated), RoPE,
    GQA, no dropout. Its MLP costs what the GeLU MLP does: two GEMMs and one fused elementwise op that stores its
    input for the backward (NeMo r2.0.0rc1 nemo/collections/nlp/modules/common/megatron/utils.py:179-187:
    squared_relu compiled by torch.compile into one kernel; megatron_base_model.py:480-486: no bias, not gated)."""
    layers: int = field(metadata={"min": 1, "max": MAX_LAYERS, "why": "the simulator builds every layer's ops"})
    """Transformer layers, at most MAX_LAYERS."""
    hidden: int = field(metadata={"min": 1, "max": MAX_WIDTH})
    """Model (hidden) dimension, at most MAX_WIDTH."""
    ffn_hidden: int = field(metadata={"min": 1, "max": MAX_WIDTH})
    """Dense FFN inner size (SwiGLU: each of gate/up), at most MAX_WIDTH. Omitted in a mapping: Megatron's default
    (`default_ffn_hidden`): 4 x hidden for gpt and nemotron, int(4 x hidden x 2/3 / 64) x 64 for llama."""
    heads: int = field(metadata={"min": 1, "max": MAX_HEADS})
    """Query heads."""
    kv_heads: Optional[int] = field(default=None, metadata={"min": 1, "max": MAX_HEADS})
    """KV heads (GQA groups, a divisor of heads); null = heads (plain multi-head attention)."""
    vocab: int = field(metadata={"min": 1, "max": MAX_VOCAB})
    """Vocabulary size (as padded by the framework)."""
    tie_embeddings: bool = False
    """The LM head shares the input embedding's weights."""
    head_dim: Optional[int] = field(default=None, metadata={"min": 1, "max": MAX_HEAD_DIM})
    """Per-head size; null = hidden / heads."""
    positions: int = field(default=0, metadata={"min": 0, "max": MAX_POSITIONS})
    """Learned position-embedding rows (GPT-2/3); 0 for rotary models."""
    moe: Optional[MoESpec] = None
    """Mixture of experts (see `model.moe`); null = dense model."""
    mla: Optional[MLASpec] = None
    """DeepSeek latent attention (see `model.mla`); null = standard attention."""
    mtp_layers: int = field(default=0, metadata={"min": 0, "max": MAX_MTP_LAYERS})
    """Multi-token prediction depth D (config.json num_nextn_predict_layers; Megatron --mtp-num-layers): after
    the main model, D sequential modules each predict one token further (DeepSeek-V3 report §2.2, Fig. 3).
    Module k normalises the previous depth's hidden states and the embedding of the tokens shifted by k
    (RMSNorm each), projects their concatenation 2h -> h, runs one transformer layer like the model's last
    (MLA + MoE for DeepSeek-V3), a final norm, then the shared LM head and a cross-entropy loss. The
    embedding and the head are the main model's; the modules sit on the last pipeline stage (`plan/mtp.py`).
    0 = none (at most MAX_MTP_LAYERS)."""
    parallel_block: bool = False
    """Attention and MLP side by side on one normalised input, y = x + Attn(LN(x)) + MLP(LN(x)) (GPT-J, PaLM
    §2 "Parallel Layers", GPT-NeoX's use_parallel_residual, Falcon's parallel_attn, Cohere; MegaScale's
    "parallel transformer block", Jiang et al. 2024 §3.1), instead of one after the other. One norm and one
    residual add per layer; under TP the two branches' partial outputs are summed before one all-reduce (with
    SP, one all-gather of the shared input and one reduce-scatter of the sum) instead of two each. A model
    whose two branches normalise separately (GPT-NeoX, Falcon-40B: two norms of the same input) is priced with
    one (the second norm is one memory-bound pass over the layer input). Dense layers only."""
    sliding_window: Optional[int] = field(default=None, metadata={"min": 1, "max": MAX_POSITIONS})
    """Sliding attention window W (config.json sliding_window): a sliding layer's query attends to itself and the W - 1
    tokens before it, keys q - W < k <= q (transformers masking_utils.py `sliding_window_overlay`); FlashAttention's
    window_size = (left, right) counts the keys beside the diagonal, so W is its (W - 1, 0) (transformers' flash path
    passes (W - 1, W - 1) with causal on, the same band). Mistral 7B v0.1: 4096. null = no window (<= MAX_POSITIONS)."""
    full_attention_every: int = field(default=0, metadata={"min": 0, "max": MAX_LAYERS})
    """With a sliding_window: 0 = every layer slides; N = layers N-1, 2N-1, ... (0-based, every N-th) attend to
    all earlier tokens and the rest slide. Gemma 2 = 2 (transformers configuration_gemma2.py: layer i slides
    when (i + 1) % 2, the even layers); Gemma 3 = its sliding_window_pattern, 6 (configuration_gemma3.py:
    slides when (i + 1) % N). Needs sliding_window."""
    partial_rotary_factor: Optional[float] = field(default=None, metadata={"gt": 0.0, "max": 1.0})
    """Share of each query / key head that RoPE rotates (config.json partial_rotary_factor; Megatron
    --rotary-percent; Nemotron 0.5); null = all of it. Only the exports read it: the fused RoPE kernel reads and
    writes whole Q and K either way, copying the part it does not rotate (NVIDIA/TransformerEngine@01b5648e
    transformer_engine/common/fused_rope/fused_rope.cu fused_rope_block_forward / _backward, `if (d > d2)`)."""
    rope_theta: Optional[float] = field(default=None, metadata={"min": 1.0, "max": 1e12})
    """Rotary base (config.json rope_theta); null = the framework's default. Only the exports read it:
    it changes what the model learns, not what a step costs."""
    name: str = "custom"
    """Label for reports; a preset sets its own."""

    # --- derived sizes -------------------------------------------------------------------
    @property
    def d_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def attention_head_dim(self) -> float:
        """Head dim of the attention's two matmuls together: d_head; MLA's mean of its query-key and value dims
        ((192 + 128) / 2 on DeepSeek-V3: 4 s^2 heads d counts QK^T and PV as `flops.attention_flops_per_token`)."""
        a = self.mla
        return (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim) / 2 if a else self.d_head

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
        """Rotary positions on Q and K (llama, nemotron); GPT adds learned positions to the embedding instead."""
        return self.arch != "gpt"

    @property
    def hidden_dropout(self) -> bool:
        """Dropout on each sublayer's output before the residual add (GPT, Megatron's bias-dropout-add)."""
        return self.arch == "gpt"

    def is_moe_layer(self, i: int) -> bool:
        """Layer i (0-based) is MoE: after the dense prefix, every layer_freq-th layer. Indices from `layers`
        on are the MTP modules' layers (`mtp_layer_ids`), MoE when the model's last layer is (Megatron-LM
        training.py num_floating_point_operations: `num_moe_layers += last_layer_is_moe * mtp_num_layers`)."""
        if i >= self.layers:
            i = self.layers - 1
        if not self.moe or i < self.moe.dense_layers:
            return False
        return (i - self.moe.dense_layers) % self.moe.layer_freq == 0

    def is_sliding_layer(self, i: int) -> bool:
        """Layer i (0-based) attends through the sliding window (`sliding_window`, `full_attention_every`); an MTP
        module's layer (i >= layers) like the model's last, as `is_moe_layer` reads it."""
        if self.sliding_window is None:
            return False
        if i >= self.layers:
            i = self.layers - 1
        n = self.full_attention_every
        return n == 0 or (i + 1) % n != 0

    @property
    def sliding_layers(self) -> int:
        """Main layers that slide."""
        return sum(self.is_sliding_layer(i) for i in range(self.layers))

    def is_mtp_layer(self, i: int) -> bool:
        """Layer index i is the transformer layer of an MTP module (Hugging Face numbers DeepSeek-V3's
        MTP module `model.layers.61`, after the 61 main layers: the same indices)."""
        return i >= self.layers

    @property
    def mtp_layer_ids(self) -> range:
        """Layer indices of the MTP modules' transformer layers, depth 1 first."""
        return range(self.layers, self.layers + self.mtp_layers)

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
        if m.moe.experts % m.moe.groups:
            raise ScenarioError(f"{path}.moe.groups", f"{m.moe.groups} does not divide experts {m.moe.experts}", "a divisor of experts")
        if m.moe.top_groups is not None and m.moe.top_groups > m.moe.groups:
            raise ScenarioError(f"{path}.moe.top_groups", f"{m.moe.top_groups} exceeds groups {m.moe.groups}", f"1 .. {m.moe.groups}")
        if m.moe.dense_layers >= m.layers:
            raise ScenarioError(f"{path}.moe.dense_layers", f"{m.moe.dense_layers} leaves no MoE layer of {m.layers}")
    if m.parallel_block and m.moe:
        raise ScenarioError(f"{path}.parallel_block", "a parallel block with MoE layers is not modelled",
                            "false for a model with moe")
    if m.partial_rotary_factor is not None and not m.rotary:
        raise ScenarioError(f"{path}.partial_rotary_factor", f"{m.partial_rotary_factor} for arch {m.arch}, which has no RoPE",
                            "null, or arch llama / nemotron")
    if m.full_attention_every and m.sliding_window is None:
        raise ScenarioError(f"{path}.full_attention_every", f"{m.full_attention_every} without a sliding_window",
                            "0, or give model.sliding_window")
    if m.mtp_layers and m.layers + m.mtp_layers > MAX_LAYERS:
        raise ScenarioError(f"{path}.mtp_layers", f"{m.mtp_layers} MTP layers after {m.layers} exceed MAX_LAYERS = {MAX_LAYERS}",
                            f"0 .. {MAX_LAYERS - m.layers}")
    return m


def default_ffn_hidden(arch: str, hidden: int) -> int:
    """Megatron's FFN size when none is given: 4h (gpt, nemotron), or with SwiGLU two-thirds of it rounded down to a multiple
    of 64 (the same parameters as 4h over three matrices; MLM megatron/training/arguments.py,
    `if args.ffn_hidden_size is None`)."""
    return int(4 * hidden * 2 / 3 / 64) * 64 if arch == "llama" else 4 * hidden


def model_from_mapping(raw: Any, path: str = "model") -> ModelSpec:
    if isinstance(raw, dict) and "ffn_hidden" not in raw and raw.get("arch") in ("llama", "gpt", "nemotron") \
            and isinstance(raw.get("hidden"), int) and not isinstance(raw.get("hidden"), bool) and raw["hidden"] > 0:
        default = default_ffn_hidden(raw["arch"], raw["hidden"])
        if default >= 1:  # a llama hidden below 24 rounds to 0: the key stays missing
            raw = {**raw, "ffn_hidden": default}
    return _check_model(from_mapping(ModelSpec, raw, path), path)


def model_to_mapping(m: ModelSpec) -> dict:
    return to_mapping(m)


def _get(cfg: dict, *keys, default=None):
    """(value, the config key it came from) for the first of `keys` the config sets (not null)."""
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k], k
    return default, None


def model_from_hf_config(cfg: dict, name: str = "custom", path: str = "model") -> ModelSpec:
    """Normalise a Hugging Face `config.json` (Llama, Mistral, Qwen, GPT-2/GPT-3/GPT-NeoX-style, Mixtral,
    Qwen-MoE, DeepSeek-V2/V3, Nemotron: model_type nemotron is arch nemotron) into a ModelSpec. Field names: transformers' configuration_*.py files
    (see docs/ecosystem.md §2.2).

    The config's values are gathered into the contract's own mapping as they are and validated by
    `model_from_mapping`, so a model checks the same whichever way it arrives; an error names the
    config key the bad value came from."""
    if not isinstance(cfg, dict):
        raise ScenarioError(path, "a Hugging Face config must be a JSON object")
    source: dict[str, str] = {}  # contract key path -> config key

    def take(key: str, *names, default=None):
        value, came_from = _get(cfg, *names, default=default)
        if came_from is not None:
            source[key] = came_from
        return value

    mtype = str(cfg.get("model_type", "")).lower()
    gpt = mtype in ("gpt2", "gpt3", "openai-gpt", "gpt_neox", "gptj", "gpt_bigcode", "opt") or "n_embd" in cfg
    raw: dict[str, Any] = {
        "arch": "gpt" if gpt else ("nemotron" if mtype == "nemotron" else "llama"),
        "hidden": take("hidden", "hidden_size", "n_embd", "d_model"),
        "layers": take("layers", "num_hidden_layers", "n_layer", "num_layers"),
        "heads": take("heads", "num_attention_heads", "n_head", "num_heads"),
        "vocab": take("vocab", "vocab_size"),
    }
    missing = [k for k in ("hidden", "layers", "heads", "vocab") if raw[k] is None]
    if missing:
        raise ScenarioError(path, f"config.json lacks {missing[0]} (hidden_size / num_hidden_layers / "
                                  "num_attention_heads / vocab_size)")
    kv = take("kv_heads", "num_key_value_heads", "multi_query_group_num")
    if cfg.get("multi_query") is True:
        kv, source["kv_heads"] = 1, "multi_query"
    if kv is not None:
        raw["kv_heads"] = kv
    ffn = take("ffn_hidden", "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size")
    raw["ffn_hidden"] = ffn if ffn is not None else _times(4, raw["hidden"])
    experts = take("moe.experts", "n_routed_experts", "num_local_experts", "num_experts")
    if experts:
        shared = take("moe.shared_experts", "n_shared_experts", default=0) or 0
        shared_ffn = take("moe.shared_ffn_hidden", "shared_expert_intermediate_size")
        if shared_ffn and not shared:
            shared = 1
        raw["moe"] = {
            "experts": experts,
            "top_k": take("moe.top_k", "num_experts_per_tok", "moe_topk", default=2),
            "expert_ffn_hidden": take("moe.expert_ffn_hidden", "moe_intermediate_size", default=raw["ffn_hidden"]),
            "shared_experts": shared,
            "shared_ffn_hidden": shared_ffn or None,
            "dense_layers": take("moe.dense_layers", "first_k_dense_replace", default=0) or 0,
            "layer_freq": take("moe.layer_freq", "moe_layer_freq", "decoder_sparse_step", default=1) or 1,
            "groups": take("moe.groups", "n_group", default=1) or 1,
            "top_groups": take("moe.top_groups", "topk_group"),
        }
    if cfg.get("kv_lora_rank"):
        raw["mla"] = {"q_lora_rank": take("mla.q_lora_rank", "q_lora_rank") or 0,
                      "kv_lora_rank": take("mla.kv_lora_rank", "kv_lora_rank")}
        for key, default in (("qk_nope_head_dim", 128), ("qk_rope_head_dim", 64), ("v_head_dim", 128)):
            raw["mla"][key] = take(f"mla.{key}", key, default=default)
    mtp = take(*MTP_DEPTH_KEYS)
    if mtp is not None:
        raw["mtp_layers"] = mtp
    if gpt:
        raw["positions"] = take("positions", "n_positions", "max_position_embeddings", default=0)
    parallel = _parallel_block(cfg, mtype)
    if parallel is not None:
        raw["parallel_block"], source["parallel_block"] = parallel
    tie = cfg.get("tie_word_embeddings")
    raw["tie_embeddings"] = gpt if tie is None else tie  # GPT-2/3 tie; Llama-family configs say so explicitly
    if cfg.get("head_dim"):
        raw["head_dim"] = take("head_dim", "head_dim")
    window = _sliding_window(cfg, mtype, raw["layers"], path)
    if window is not None:
        raw["sliding_window"] = take("sliding_window", "sliding_window")
        source["full_attention_every"] = window[1]
        raw["full_attention_every"] = window[0]
    if cfg.get("rope_theta") is not None and not gpt:
        raw["rope_theta"] = take("rope_theta", "rope_theta")
    if cfg.get("partial_rotary_factor") is not None and not gpt:
        raw["partial_rotary_factor"] = take("partial_rotary_factor", "partial_rotary_factor")
    raw["name"] = str(cfg.get("_name_or_path") or name)[:200]
    try:
        return model_from_mapping(raw, path)
    except ScenarioError as e:
        key = e.path[len(path) + 1:] if e.path.startswith(path + ".") else ""
        if key in source:
            raise ScenarioError(f"{path} config.json {source[key]}", e.problem, e.allowed) from None
        raise


PARALLEL_BLOCK_KEYS = {"gpt_neox": ("use_parallel_residual", True), "falcon": ("parallel_attn", True),
                       "stablelm": ("use_parallel_residual", False)}
"""config.json keys that choose the parallel block, with transformers' default where the key is absent
(GPTNeoXConfig, FalconConfig, StableLmConfig __init__ defaults)."""
ALWAYS_PARALLEL = ("gptj", "cohere", "phi")
"""Model types whose decoder layer always sums attention and MLP of one input (transformers GPTJBlock,
CohereDecoderLayer, PhiDecoderLayer: `attn_output + feed_forward_hidden_states + residual`)."""


def _parallel_block(cfg: dict, mtype: str) -> tuple[Any, str] | None:
    """(the `parallel_block` value, the config key it came from) for configs that say, else None."""
    if mtype in ALWAYS_PARALLEL:
        return True, "model_type"
    key, default = PARALLEL_BLOCK_KEYS.get(mtype, ("use_parallel_residual", None))
    value = cfg.get(key, default)
    return None if value is None else (value, key if key in cfg else "model_type")


LAYER_TYPES = ("sliding_attention", "full_attention")
"""config.json `layer_types` entries clustersim reads (transformers masking_utils.py LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING)."""
QWEN_MAX_WINDOW_LAYERS = 28
"""transformers configuration_qwen2.py / qwen3's default max_window_layers: layers from it on slide."""


def _sliding_window(cfg: dict, mtype: str, layers, path: str) -> tuple[int, str] | None:
    """(full_attention_every, the config key it came from) when the config slides a window over some layer, else
    None. Sources (transformers 5.24 configuration_*.py): `layer_types`, a list of "sliding_attention" /
    "full_attention" per layer, wins; Qwen2/Qwen3 slide only with `use_sliding_window: true`, the layers from
    `max_window_layers` on; gemma2 slides the even layers ((i + 1) % 2); gemma3 every layer but each
    `sliding_window_pattern`-th (default 6); any other config with a `sliding_window` (Mistral 7B v0.1)
    slides every layer."""
    if cfg.get("sliding_window") is None or cfg.get("use_sliding_window", not mtype.startswith("qwen")) is False:
        return None  # Qwen's configs default use_sliding_window to false
    kinds, key = cfg.get("layer_types"), "layer_types"
    if kinds is None and cfg.get("use_sliding_window") is True:
        first = cfg.get("max_window_layers", QWEN_MAX_WINDOW_LAYERS)
        if isinstance(first, int) and isinstance(layers, int):
            kinds, key = [LAYER_TYPES[i < first] for i in range(layers)], "max_window_layers"
    if kinds is None:
        if mtype == "gemma2":
            return 2, "model_type"
        if mtype.startswith("gemma3"):
            n = cfg.get("sliding_window_pattern", 6)
            return n, "sliding_window_pattern"
        return 0, "sliding_window"
    where = f"{path} config.json {key}"
    if not isinstance(kinds, list) or not all(k in LAYER_TYPES for k in kinds):
        raise ScenarioError(where, f"{short(kinds)} is not a list of layer types", " / ".join(LAYER_TYPES) + " per layer")
    if isinstance(layers, int) and len(kinds) != layers:
        raise ScenarioError(where, f"{len(kinds)} entries for {layers} layers", "one per layer")
    full = [i for i, k in enumerate(kinds) if k == "full_attention"]
    if len(full) == len(kinds):
        return None
    if not full:
        return 0, key
    n = full[0] + 1
    if any(((i + 1) % n == 0) != (k == "full_attention") for i, k in enumerate(kinds)):
        raise ScenarioError(where, f"full-attention layers {short(full)} are not every N-th layer",
                            "all sliding, or full attention on layers N-1, 2N-1, ... (model.full_attention_every)")
    return n, key


def _times(k: int, value):
    """k * value when value is a number (the FFN default of GPT configs); else value, for the checks to name."""
    return k * value if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


def _spelling(name: str) -> str:
    """A model name as compared with the presets': the part after a Hugging Face organisation (`meta-llama/`),
    lower case, letters and digits only, without a leading `meta` (`Meta-Llama-3.1-8B`)."""
    bare = spelling(name.rsplit("/", 1)[-1])
    return bare[len("meta"):] if bare.startswith("metallama") else bare


def preset_alias(name: str) -> str | None:
    """The preset a model name means, written as users write it (`Llama-3.1-8B`, `meta-llama/Llama-3.1-70B`,
    `llama3_8b`, `DeepSeek-V3`), or None. Llama 3.1 is read as the Llama 3 preset of its size: the same layers,
    widths, heads and vocabulary (Meta's config.json of both; 3.1 changes the RoPE scaling and context length,
    which the training sequence length here sets)."""
    want = _spelling(name).replace("llama31", "llama3", 1)
    return next((p for p in preset_names() if _spelling(p) == want), None)


def without_config_mtp(model: ModelSpec, model_value: Any, from_config=None) -> ModelSpec:
    """`model` without the MTP depth its preset or config.json named, for a framework that builds MTP modules only
    when asked (`from_config`: its `Framework.mtp_from_config`, false there); a scenario `model` mapping that
    writes a depth keeps it, and so does every model under a framework without that entry or with it true."""
    if from_config is None or from_config.value or (isinstance(model_value, dict) and any(k in model_value for k in MTP_DEPTH_KEYS)):
        return model
    return replace(model, mtp_layers=0) if model.mtp_layers else model


def load_model(spec: Any, base_dir: Path | None = None, path: str = "model") -> ModelSpec:
    """Resolve a scenario's `model` value: preset name, path to a config.json, or a mapping."""
    if isinstance(spec, dict):
        return model_from_mapping(spec, path)
    if not isinstance(spec, str):
        raise ScenarioError(path, f"expected a preset name, a path to config.json or a mapping, got {short(spec)}")
    candidates = [Path(spec)] + ([base_dir / spec] if base_dir is not None else [])
    if "/" not in spec and "\\" not in spec:
        candidates.insert(0, PRESET_DIR / f"{spec}.json")
    file = existing_file(spec, *candidates)
    if file is None and not spec.endswith(".json") and preset_alias(spec) is not None:
        file = PRESET_DIR / f"{preset_alias(spec)}.json"  # a preset by another spelling, or a hub id of one
    if file is None:
        raise ScenarioError(path, f"unknown model {short(spec)}", "a preset (" + ", ".join(preset_names()) + ") or a path to a config.json")
    cfg = read_json_file(file, f"{path} {file}")
    return model_from_hf_config(cfg, name=file.stem, path=path)

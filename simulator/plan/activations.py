"""Activations one layer stores for its backward, one micro-batch on one rank, tensor by tensor (the
`memory.py` sum's per-layer part), and the embedding's and the loss's extras.

Sources (docs/modeling.md §3.2): KOR22 Eq. 1-4 and Table 2 (GPT), the Llama-style bookkeeping derived
there; Megatron-Core's `recompute_modules` for what selective recompute re-runs; DeepSeek-V3 report
§3.2.3 and §3.3 for MLA's up-projection recompute and FP8-cached activations.
"""
from __future__ import annotations

from ..scenario import Scenario
from . import op_sac
from .autocast_saved import autocast_layer_terms
from .fp8_attention import stored_qkv_bytes, widths
from .layer_ops import core_attn_reruns, layer_forward
from .layout import layer_recompute, recompute_modules, recomputes_mlp
from .tp_overlap import wgrad_input_saved
from .opgraph import CCE_LSE_BYTES, DROPOUT_MASK_BYTES, FP8_STORE_BYTES, Shard, shard
from .sharded_params import expert_tp

TOKEN_ID_BYTES = 8
"""int64 token ids (input ids on the first stage, MEG-MEM `8*s*b*p`; labels on the last)."""
LOSS_MASK_BYTES = 4
"""Megatron's per-token fp32 loss mask on the last stage (`get_batch`)."""
LOGIT_BYTES = 4
"""Logits are turned into fp32 for the cross-entropy, which keeps them for backward (KOR22 §4.3)."""
LSE_BYTES = 4
"""FlashAttention keeps one fp32 log-sum-exp per (head, query) for its backward (FA2 §3.1)."""
ROUTER_PROB_BYTES = 4
"""MoE router scores over all experts, fp32, kept for backward (Megatron `topk_softmax_with_capacity`:
`torch.softmax(logits, dtype=torch.float32)` with pre-softmax, or the sigmoid scores of DeepSeek-V3;
its default post-top-k softmax keeps only top_k per token, so this is the larger case)."""
PERMUTED_PROB_BYTES = 4
"""The fp32 routing probability of each dispatched row, kept by the experts' weighted SwiGLU: Megatron-Core's
TEGroupedMLP multiplies the probabilities into the activation (`weighted_bias_swiglu_impl(...,
permuted_probs)`, moe/experts.py) and unpermutes without them, so the expert outputs are not kept."""
FP8_INPUT_STORE_BYTES = 1
"""`training.activation_func_fp8_input_store`: the SwiGLU input cast to float8_e4m3fn for the backward
(Megatron-Core fused_bias_swiglu `fp8_input_store`: `input.to(torch.float8_e4m3fn)`, no scale)."""
FP8_GEMM_INPUTS = ("qkv_input", "fc1_input", "fc2_input", "expert_fc1_input", "expert_fc2_input", "shared_fc2_input")
"""Stored tensors whose only backward use is an FP8 GEMM's weight gradient: under precision fp8 the
GEMM keeps its FP8-cast input, not the 16-bit one (Transformer Engine Linear / GroupedLinear save the
quantized input; DeepSeek-V3 report §3.3.4: "cache activations in FP8 format for the backward pass of
the Linear operator"); under precision fp4 its NVFP4 copy. The attention output stays 16-bit: the attention
backward reads it too."""
NVFP4_STORE_BYTES = 0.5 + 1 / 16
"""An NVFP4 GEMM input kept for the weight gradient: its column-wise E2M1 copy with one E4M3 scale per 16 values
(TransformerEngine at 5671fd36 pytorch/module/linear.py:386-399: the row-wise data is discarded once the forward
GEMM has run, `update_usage(rowwise_usage=False, columnwise_usage=True)`)."""
QUANTIZED_STORE_BYTES = {"fp8": FP8_STORE_BYTES, "fp4": NVFP4_STORE_BYTES}
"""Training precision -> bytes per element of a stored quantized GEMM input (`FP8_GEMM_INPUTS`)."""


def _s_kv(sc: Scenario, z: Shard) -> int:
    """Keys a local query attends to: the whole sequence (s), also under CP (each CP rank's queries
    see every chunk's keys)."""
    return z.s * sc.parallel.cp


def _moe_rows(sc: Scenario, z: Shard) -> tuple[int, float]:
    """(tokens this rank routes, expert-token rows its experts compute). Routed tokens are the SP
    shard T/t (as `ops` does); rows = routed * top_k * ep_imbalance, capped by the capacity factor."""
    e = sc.model.moe
    routed = z.T // z.t if z.t > 1 else z.T
    skew = sc.parallel.ep_imbalance if e.capacity_factor is None else min(sc.parallel.ep_imbalance, e.capacity_factor)
    return routed, routed * e.top_k * skew


def _mlp_terms(sc: Scenario, z: Shard, ffn_per_rank: float, rows: float, prefix: str, drop_act: bool = False) -> dict[str, float]:
    """Stored tensors of one FFN after its input: GeLU input and FC2 input (KOR22 §4.1: 8sbh + 8sbh
    at f = 4h), or SwiGLU gate, up and FC2 input (docs/modeling.md §3.2: 6sbf). `drop_act`: the
    activation's output (the FC2 input) is recomputed from its input (recompute module moe_act). The
    SwiGLU input in FP8 with `activation_func_fp8_input_store`."""
    ab = z.ab
    act = FP8_INPUT_STORE_BYTES if sc.training.activation_func_fp8_input_store and sc.model.gated_mlp else ab
    if sc.model.gated_mlp:
        out = {f"{prefix}gate": act * rows * ffn_per_rank, f"{prefix}up": act * rows * ffn_per_rank}
    else:
        out = {f"{prefix}act_input": ab * rows * ffn_per_rank}
    if not drop_act:
        out[f"{prefix}fc2_input"] = ab * rows * ffn_per_rank
    return out


def dense_mlp_terms(sc: Scenario, z: Shard) -> dict[str, float]:
    """A dense layer's MLP tensors after its input (`_mlp_terms`): stored for the backward, or, under the `mlp`
    recompute module, alive only while the backward re-runs the module (`memory._layer_transients`)."""
    return _mlp_terms(sc, z, sc.model.ffn_hidden / z.t, z.T, "")


def layer_activation_terms(sc: Scenario, layer: int, recompute: str | None = None) -> dict[str, float]:
    """Bytes stored for backward by one layer, one micro-batch, on one rank, by tensor.

    GPT (KOR22 §4.1, with dropout): LayerNorm inputs 4sbh, QKV input 2sbh, Q K V 6sbh, out-proj input
    2sbh, attention dropout mask sbh, FC1 input 2sbh, GeLU input 8sbh, FC2 input 8sbh, MLP dropout mask
    sbh = 34sbh; eager attention adds softmax output 2as^2b, its dropout mask as^2b, dropout output
    2as^2b (Eq. 1). TP splits all but the norm inputs, linear inputs and masks (Eq. 2: 10 + 24/t);
    SP splits those too (Eq. 4). Llama (docs/modeling.md §3.2, derived): RMSNorm inputs, QKV input, Q, K, V
    (GQA widths), out-proj input, FC1 input, gate, up, FC2 input = sb(12h + 4h_kv + 6f); no dropout, so
    eager attention stores only the softmax output (2as^2b), which is also the AV input.
    Flash attention stores no scores, only an fp32 log-sum-exp. Selective recompute re-runs the modules
    of `recompute_modules`: core_attn drops the score terms (KOR22 Table 2) and the LSE (the core
    attention is re-run from Q, K, V); layernorm the pre-norms' outputs (QKV / FC1 / router input);
    mla_up_proj MLA's Q, K, V (re-projected from the stored latents); moe_act the experts' FC2 input; mlp a dense
    layer's MLP tensors but its input.
    Full recompute keeps only the layer input: 2sbh, or 2sbh/t with SP since the tensor between layers
    is sequence-sharded in Megatron (docs/modeling.md §3.2, derived; KOR22 Table 2 gives 2sbh for its
    non-SP layout). CP: local s/c queries against all s keys. MoE layer: router input and fp32
    probabilities, the dispatched rows (tokens x top_k x ep_imbalance) through the expert FFN, the
    per-row probability the weighted SwiGLU keeps (`PERMUTED_PROB_BYTES`; a GeLU expert keeps its
    outputs for the weighted combine instead), and shared experts as a dense FFN. A parallel block
    (`model.parallel_block`) keeps one norm input and one projection input for both branches, and one
    dropout mask. Under precision fp8
    the inputs kept only for FP8 GEMMs are stored in FP8 (`FP8_GEMM_INPUTS`)."""
    rc = recompute or layer_recompute(sc, layer)
    m, z = sc.model, shard(sc)
    if m.is_mtp_layer(layer):  # under full recompute the module's checkpoint holds the layer's input too
        return _mtp_terms(sc, z, rc) | ({} if rc == "full" else _layer_terms(sc, layer, rc, z))
    return _layer_terms(sc, layer, rc, z)


MTP_HEAD_PREFIX = "mtp_head_"
"""Keys of an MTP module's own pass through the head in `layer_activation_terms` (outside its checkpoint)."""


def _mtp_terms(sc: Scenario, z: Shard, rc: str) -> dict[str, float]:
    """An MTP module's tensors around its layer (`plan/mtp.py`): the inputs of enorm and hnorm (sbh each, /t with
    SP), eh_proj's 2h-wide input (the SP shard: Megatron's column linear re-gathers it for the weight gradient),
    the final norm's input, and its own pass through the head (`head_activation_terms`: head input, logits,
    labels, loss mask). Under full recompute the module keeps only its two inputs, hidden states and shifted
    embedding (`_checkpointed_forward`); the head's tensors are outside the checkpoint."""
    ab, Tsp, h = z.ab, z.T_sp, z.h
    head = {MTP_HEAD_PREFIX + k: v for k, v in head_activation_terms(sc).items() if k != "final_norm_input"}
    if rc == "full":
        return {"mtp_hidden_input": ab * Tsp * h, "mtp_embedding_input": ab * Tsp * h} | head
    return {"mtp_enorm_input": ab * Tsp * h, "mtp_hnorm_input": ab * Tsp * h, "mtp_eh_proj_input": 2 * ab * Tsp * h,
            "mtp_final_norm_input": ab * Tsp * h} | head


def _layer_terms(sc: Scenario, layer: int, rc: str, z: Shard) -> dict[str, float]:
    """`layer_activation_terms` of the transformer layer itself."""
    terms = _fused_layer_terms(sc, layer, rc, z)
    return autocast_layer_terms(sc, z, terms) if sc.training.autocast and not sc.model.is_moe_layer(layer) else terms


def _fused_layer_terms(sc: Scenario, layer: int, rc: str, z: Shard) -> dict[str, float]:
    """The layer's stored tensors as fused kernels (Megatron / Transformer Engine) keep them."""
    m = sc.model
    ab, T, Tsp, h = z.ab, z.T, z.T_sp, z.h
    if rc == "full":
        return {"layer_input": ab * Tsp * h}
    if rc == "selective" and op_sac.applies(sc):  # torchtitan's op-level SAC: the saved ops' outputs
        return op_sac.op_sac(sc, z, tuple(layer_forward(sc, layer, z, tag="R").nodes)).saved
    mods = recompute_modules(sc, rc)
    _, k_width, _, o_width = widths(sc, z)
    terms = {"norm1_input": ab * Tsp * h, "qkv_input": ab * Tsp * h}
    if not (m.mla and "mla_up_proj" in mods):
        qkv_b = stored_qkv_bytes(sc, z, recomputed=rc != "none" and "core_attn" in mods and core_attn_reruns(sc))
        terms.update({"q": qkv_b * T * z.q, "k": qkv_b * T * k_width, "v": qkv_b * T * z.kv})
    terms["attn_out"] = ab * T * o_width
    if m.mla:
        # approximation: compressed q and kv latents kept twice (norm input, up-projection input), full sequence
        terms["mla_latents"] = 2 * ab * T * (m.mla.q_lora_rank + m.mla.kv_lora_rank)
    if m.hidden_dropout:  # the mask ops' bias-dropout-add writes (`ops._residual`)
        terms["attn_dropout_mask"] = DROPOUT_MASK_BYTES * Tsp * h
    if rc == "none" or "core_attn" not in mods:
        scores = z.b * z.heads * z.s * _s_kv(sc, z)
        if sc.training.attention == "eager":
            terms["softmax_output"] = ab * scores
            if m.arch == "gpt":
                terms["softmax_dropout_mask"] = DROPOUT_MASK_BYTES * scores
                terms["softmax_dropout_output"] = ab * scores
        else:
            terms["flash_lse"] = LSE_BYTES * z.b * z.heads * z.s
    terms["norm2_input"] = ab * Tsp * h
    if m.is_moe_layer(layer):
        e = m.moe
        routed, rows = _moe_rows(sc, z)
        et = expert_tp(sc)  # with expert TP the experts keep the gathered rows, each its 1/et of the columns
        terms["router_input"] = ab * Tsp * h
        terms["router_probs"] = ROUTER_PROB_BYTES * routed * e.experts
        rows *= et
        terms["expert_fc1_input"] = ab * rows * h
        terms.update(_mlp_terms(sc, z, e.expert_ffn_hidden / et, rows, "expert_", drop_act="moe_act" in mods))
        if m.gated_mlp:
            terms["expert_probs"] = PERMUTED_PROB_BYTES * rows
        else:
            terms["expert_output"] = ab * routed * e.top_k * h
        if e.shared_experts:
            terms.update(_mlp_terms(sc, z, e.shared_experts * e.shared_ffn / z.t, T, "shared_"))
    else:
        terms["fc1_input"] = ab * Tsp * h
        if not recomputes_mlp(sc, layer, rc):  # the mlp module keeps only its input (the checkpoint's), re-runs the rest
            terms.update(dense_mlp_terms(sc, z))
    if m.hidden_dropout:
        terms["mlp_dropout_mask"] = DROPOUT_MASK_BYTES * Tsp * h
    if m.parallel_block:  # one norm, whose output both branches read; one bias-dropout-add of their sum
        for k in ("norm2_input", "fc1_input", "attn_dropout_mask"):
            terms.pop(k, None)
    if wgrad_input_saved(sc) and sc.parallel.sp and z.t > 1:
        # DTensor TP: the column linears' autograd keeps the all-gathered input, not the SP shard
        for k in ("qkv_input", "fc1_input"):
            if k in terms:
                terms[k] = ab * T * h
    if "layernorm" in mods:  # the pre-norms' outputs, re-normed from their stored inputs
        for k in ("qkv_input", "fc1_input", "router_input"):
            terms.pop(k, None)
    if sc.training.precision in QUANTIZED_STORE_BYTES:
        for k in FP8_GEMM_INPUTS:
            if k == "fc1_input" and recomputes_mlp(sc, layer, rc):
                continue  # the checkpoint keeps the 16-bit norm output it is called with, not the GEMM's FP8 copy
            if k in terms:
                terms[k] *= QUANTIZED_STORE_BYTES[sc.training.precision] / ab
    return terms


def activation_bytes_per_layer(sc: Scenario, layer: int) -> float:
    """Bytes one layer keeps for backward, one micro-batch, one rank (sum of `layer_activation_terms`)."""
    return float(sum(layer_activation_terms(sc, layer).values()))


def embedding_activation_terms(sc: Scenario) -> dict[str, float]:
    """First chunk, per micro-batch: input ids (MEG-MEM 8sb) and, for GPT, the embedding dropout mask
    (KOR22 §4.3: sbh/t with SP)."""
    z = shard(sc)
    terms = {"input_ids": TOKEN_ID_BYTES * z.T}
    if sc.model.arch == "gpt":
        terms["embedding_dropout_mask"] = DROPOUT_MASK_BYTES * z.T_sp * z.h
    return terms


def head_activation_terms(sc: Scenario) -> dict[str, float]:
    """Last chunk, per micro-batch (KOR22 §4.3): final-norm input 2sbh/t, LM-head input 2sbh/t (both
    /t only with SP), fp32 logits 4sbV/t kept by the cross-entropy (`training.loss: standard`; fused: the bf16
    logits, turned into their gradient in place, 2sbV/t; cut: one fp32 log-sum-exp per token), labels and
    loss mask."""
    z = shard(sc)
    v = -(-sc.model.vocab // z.t)
    logits = {"standard": LOGIT_BYTES * z.T * v, "fused": z.ab * z.T * v, "cut": CCE_LSE_BYTES * z.T}[sc.training.loss]
    if sc.training.loss_chunk_tokens is not None:  # chunked fused loss: the head input's gradient, not the logits
        logits = z.ab * z.T * z.h
    return {"final_norm_input": z.ab * z.T_sp * z.h, "lm_head_input": z.ab * z.T_sp * z.h,
            "logits": logits, "labels": TOKEN_ID_BYTES * z.T, "loss_mask": LOSS_MASK_BYTES * z.T}

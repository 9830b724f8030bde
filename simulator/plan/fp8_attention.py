"""FP8 attention: Transformer Engine's fused attention in FP8 (Megatron's `--fp8-dot-product-attention`, the framework
option `fp8_dot_product_attention`), what it runs around the kernel and what it keeps.

TransformerEngine v2.8 (transformer_engine/pytorch/attention/dot_product_attention/backends.py, FusedAttnFunc) with
Q, K and V as separate tensors, as Megatron-Core passes them after RoPE:

- forward: `combine_and_quantize` (utils.py:2002-2047) concatenates Q, K, V (`torch.cat`: read 2 B, write 2 B per
  element) and quantizes the result in one quantizer call; the kernel runs on FP8 Q, K, V (cuDNN's FP8 backend).
  Under delayed scaling the kernel's output O is FP8 and is dequantized for the output projection (read 1 B, write
  2 B); under current scaling with `NVTE_DPA_FP8CS_O_in_F16` (on by default, backends.py:139) the kernel writes O in
  BF16.
- saved for the backward: Q, K, V in FP8 (1 B each, one scale per tensor), and O (FP8 under delayed scaling, BF16
  under current scaling) with the softmax statistics (backends.py:1193-1202).
- backward: dO is quantized (one quantizer call); under delayed scaling dQ, dK, dV come out FP8 and are dequantized
  (`combine_and_dequantize`), under current scaling the kernel writes them in BF16 (:1455-1470).

A quantization reads the BF16 tensor once under delayed scaling (the scale from the amax history) and twice under
current scaling (its amax, then the cast) in three kernels (amax, scale, cast), as the linears' casts
(`opgraph.TE_DELAYED`, `opgraph.TE_CURRENT`), writing 1 B. Not priced: the amax reductions over the TP / CP group,
the S and dP scales' history (delayed in both recipes).

On a context-parallel ring (TransformerEngine v2.8 context_parallel.py, AttnFuncWithCPAndKVP2P) the K/V chunks travel
quantized: the forward sends the FP8 K and V (:1349, `torch.cat` of their uint8 data), and the backward sends them again
for cp - 1 steps (:2077-2089) but does not pass dK and dV around the ring: each step's partial dK, dV go into a buffer of
cp chunks of uint8 (:1975-1981), exchanged by one all-to-all issued at the ring's last step (:2090-2096) and waited for
after that step's kernel (:2313-2315). `attention_ops` prices that traffic (`cp_ring_bytes_per_element`), the
all-to-all after the last step's kernel, not beside it; the per-step accumulation of
dQ, dK, dV is priced as the BF16 ring's (fp32 adds), where TE writes FP8 partials and sums them once at the end (delayed
scaling, :2409-2430) or adds fp32 copies (current scaling). Its all-gather path (cp_comm allgather) gets no FP8 argument
(attn_forward_func_with_cp, :3803-3807): the attention would run in BF16, so that combination is refused.

Which recipe: Transformer Engine's NVTE_DPA_FP8_RECIPE (the option `dpa_fp8_recipe`): unset, the linears' recipe
where it is per-tensor (delayed or current scaling); MXFP8 and NVFP4 linears have no FP8 attention of their own and
need it named (dot_product_attention.py:552-635, which asserts otherwise).
"""
from __future__ import annotations

from ..errors import ScenarioError
from ..scenario import Scenario
from .opgraph import QUANTIZED, TE_CURRENT, TE_DELAYED, Compute, Shard

CONCAT_BYTES = 4
"""Bytes per element of `torch.cat` of Q, K and V before their one quantization: read 2, write 2 (BF16)."""
DPA_CASTS = {"delayed": TE_DELAYED, "tensorwise": TE_CURRENT}
"""The attention's recipe -> the linears' casts of the same scaling, whose reads and launches it shares."""
QUANTIZE_BYTES = {r: 2 * c.reads + 1 for r, c in DPA_CASTS.items()}
"""Bytes per element of one FP8 quantization of a BF16 tensor: the recipe's reads of 2 B (delayed scaling once, current
scaling twice: amax then cast) and one 1 B write, no transpose: 3 and 5."""
QUANTIZE_KERNELS = {r: c.kernels_per_tensor for r, c in DPA_CASTS.items()}
"""Kernels one quantization launches: one fused cast; amax, scale and cast under current scaling."""
DEQUANTIZE_BYTES = 3
"""Bytes per element of dequantizing an FP8 tensor to BF16: read 1, write 2."""
FP8_ATTENTION_STORE_BYTES = 1
"""Bytes per element of Q, K, V kept in FP8 for the backward (E4M3, one fp32 scale per tensor)."""
FP8_ATTENTION_CASTS = "fp8_attn_"
"""The prefix of FP8 attention's cast ops' names: the layer's backward walk skips the forward's (`layer_ops`)."""
BLOCK_SCALED_WORDS = {"te_mxfp8": "MXFP8 (fp8_recipe mxfp8)", "te_nvfp4": "NVFP4 (training.precision fp4)"}
"""The linears' block-scaled recipes in the scenario's words, for the error that asks for `dpa_fp8_recipe`."""
RECIPE_OF_LINEARS = {"te_delayed": "delayed", "te_current": "tensorwise"}
"""The linears' recipe (`frameworks/spec.FP8_RECIPES`) -> the attention's where `dpa_fp8_recipe` follows it."""


def fp8_attention_recipe(sc: Scenario) -> str | None:
    """'delayed' or 'tensorwise' where the attention runs in FP8 (`fp8_dot_product_attention` under fp8 or fp4
    training), else None. `ScenarioError` for a combination Transformer Engine refuses."""
    if not sc.framework.option("fp8_dot_product_attention"):
        return None
    at = "framework.fp8_dot_product_attention"
    if sc.training.precision not in QUANTIZED:
        raise ScenarioError(at, f"true with training.precision {sc.training.precision}",
                            "training.precision fp8 | fp4, or fp8_dot_product_attention: false")
    if sc.training.attention == "eager" or sc.framework.attention_kernel != "cudnn":
        kernel = "eager" if sc.training.attention == "eager" else sc.framework.attention_kernel
        raise ScenarioError(at, f"true with the {kernel} attention kernel (FP8 attention is Transformer Engine's "
                            "cuDNN fused attention)", "training.attention: flash with the cudnn kernel, or false")
    if sc.parallel.cp > 1 and sc.parallel.cp_comm == "allgather":
        raise ScenarioError("parallel.cp_comm", "allgather with framework.fp8_dot_product_attention (TransformerEngine "
                            "v2.8 passes its all-gather context parallelism no FP8: the attention would run in BF16, "
                            "context_parallel.py:3803-3807)", "ring, or fp8_dot_product_attention: false")
    named = sc.framework.option("dpa_fp8_recipe")
    if named in QUANTIZE_BYTES:
        return named
    linear = sc.framework.linear_recipe(sc.training.precision)
    if linear not in RECIPE_OF_LINEARS:
        word = BLOCK_SCALED_WORDS.get(linear, linear)
        raise ScenarioError("framework.dpa_fp8_recipe", f"follow with {word} linears, whose recipe has no FP8 attention "
                            "(TransformerEngine dot_product_attention.py:630-635 asserts)", "delayed | tensorwise")
    return RECIPE_OF_LINEARS[linear]


def attention_dtype(sc: Scenario, z: Shard) -> str:
    """What an attention op computes in: fp8 under FP8 attention, else the activations' 16-bit dtype (attention
    stays BF16 under FP8 or NVFP4 linears), or the training dtype (bf16, fp16, fp32)."""
    if fp8_attention_recipe(sc) is not None:
        return "fp8"
    return "bf16" if z.dtype in QUANTIZED else z.dtype


def widths(sc: Scenario, z: Shard) -> tuple[int, int, int, int]:
    """Per-token widths of Q, K, V and O on this rank (MLA: K as wide as Q, O heads x value head dim)."""
    m = sc.model
    return z.q, (z.q if m.mla else z.kv), z.kv, (z.heads * m.mla.v_head_dim if m.mla else z.q)


def forward_casts(sc: Scenario, z: Shard) -> tuple[list[Compute], list[Compute]]:
    """One layer's forward casts: (before the kernel: Q, K, V concatenated and quantized; after it: O dequantized
    under delayed scaling). Empty without FP8 attention."""
    recipe = fp8_attention_recipe(sc)
    if recipe is None:
        return [], []
    q, k, v, o = widths(sc, z)
    qkv = z.T * (q + k + v)
    before = [Compute(FP8_ATTENTION_CASTS + "quantize_qkv", "elementwise", 0.0,
                      float(qkv * (CONCAT_BYTES + QUANTIZE_BYTES[recipe])), "bf16", (qkv,), 1 + QUANTIZE_KERNELS[recipe])]
    after = ([Compute(FP8_ATTENTION_CASTS + "dequantize_o", "elementwise", 0.0, float(z.T * o * DEQUANTIZE_BYTES), "bf16",
                      (z.T * o,))] if recipe == "delayed" else [])
    return before, after


def backward_casts(sc: Scenario, z: Shard) -> tuple[list[Compute], list[Compute]]:
    """One layer's backward casts: (before the kernel: dO quantized; after it: dQ, dK, dV dequantized under delayed
    scaling). Empty without FP8 attention."""
    recipe = fp8_attention_recipe(sc)
    if recipe is None:
        return [], []
    q, k, v, o = widths(sc, z)
    before = [Compute(FP8_ATTENTION_CASTS + "quantize_do", "elementwise", 0.0, float(z.T * o * QUANTIZE_BYTES[recipe]), "bf16",
                      (z.T * o,), QUANTIZE_KERNELS[recipe])]
    qkv = z.T * (q + k + v)
    after = ([Compute(FP8_ATTENTION_CASTS + "dequantize_dqkv", "elementwise", 0.0, float(qkv * DEQUANTIZE_BYTES), "bf16", (qkv,))]
             if recipe == "delayed" else [])
    return before, after


def cp_ring_bytes_per_element(sc: Scenario, z: Shard) -> int:
    """Bytes per element of the K/V chunks a context-parallel ring passes on, and of the dK/dV partials FP8 attention
    exchanges after it: FP8 (1 B) under FP8 attention, else the activations' bytes (module docstring)."""
    return FP8_ATTENTION_STORE_BYTES if fp8_attention_recipe(sc) is not None else z.ab


def stored_qkv_bytes(sc: Scenario, z: Shard, recomputed: bool) -> int:
    """Bytes per element of the Q, K, V a layer keeps for its backward: FP8 under FP8 attention, unless the core
    attention is recomputed (Megatron's checkpoint keeps its BF16 inputs and re-runs the quantization), else the
    activations' bytes."""
    return FP8_ATTENTION_STORE_BYTES if fp8_attention_recipe(sc) is not None and not recomputed else z.ab

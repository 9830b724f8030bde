"""What plain PyTorch model code keeps for its backward under `torch.autocast` (`training.autocast: true`),
beyond the fused-kernel bookkeeping of `activations.py`.

`training.autocast` is the replay executor's bf16 (calibrate/replay/llama.py and train.py): fp32 weights,
one `torch.autocast(dtype=bfloat16)` over the step, eager PyTorch ops written the way torchtitan's Llama
writes them (separate wq / wk / wv and w1 / w3 projections, `F.silu(w1 x) * w3 x`, GQA keys and values
expanded with `repeat_interleave` before SDPA, `F.cross_entropy` on the logits cast to fp32). Its autograd
graph keeps, per layer and micro-batch:
- **the residual stream in fp32**: the embedding is not on autocast's cast list, so its output is fp32, and
  every residual add of fp32 and a bf16 projection is fp32; each RMSNorm keeps its fp32 input;
- **one bf16 copy of a projection's input per projection**: autocast caches casts of leaf tensors that
  require grad only (ATen autocast_mode.cpp `cached_cast`: `arg.is_leaf() && arg.requires_grad()`), so the
  fp32 norm output is cast afresh by each of wq, wk, wv (three copies) and w1, w3 (two), each kept by its
  GEMM for the weight gradient;
- **the SwiGLU's four tensors**: silu keeps its input (the gate), the product keeps both factors (silu's
  output and the up projection), w2 keeps the product (fused SwiGLU kernels keep the first three only);
- **the expanded keys and values**: SDPA keeps its inputs as given, heads/kv_heads times the GQA tensors;
- **the out-projection's input copy**: `o.transpose(1, 2).reshape(...)` of SDPA's output is a copy (the
  transposed view is not contiguous), kept by wo beside SDPA's own saved output;
- **a second fp32 logits-sized temporary in the loss backward**: nll_loss's backward writes a dense fp32
  gradient of the log-probabilities and log_softmax's backward a new one for the logits, while the saved
  log-probabilities are still held: three logits-sized fp32 tensors at once, one more than the vocab-parallel
  cross-entropy (`memory.buffer_bytes` logits_grad) that computes its gradient in place.

Measured on an H200 (validation/results/replay_gpu_h200.md, Llama 3.2 1B, 4 micro-batches of 2 x 2048): the
fused-kernel bookkeeping read the peak 13.8 % low without recompute and 8.5 % low with full recompute.
"""
from __future__ import annotations

from ..scenario import Scenario
from .opgraph import Shard

RESIDUAL_BYTES = 4
"""fp32 residual stream (above): the norms' saved inputs and a fully recomputed layer's stored input."""
PROJECTION_CASTS = {"qkv": 3, "fc1": 2, "lm_head": 1}
"""bf16 copies of one norm output, one per projection that reads it (wq, wk, wv; w1, w3 of a gated MLP; the LM
head)."""
CE_BWD_TEMPORARIES = 2
"""fp32 logits-sized temporaries alive together in F.cross_entropy's backward (above)."""


def projection_casts(m, reader: str) -> int:
    """bf16 copies made of the activation that `reader` (qkv, fc1, lm_head) reads: one per projection (w1 alone
    without a gated MLP; a parallel block's QKV input also feeds w1 and w3)."""
    if reader == "fc1":
        return PROJECTION_CASTS["fc1"] if m.gated_mlp else 1
    if reader == "qkv" and m.parallel_block:
        return PROJECTION_CASTS["qkv"] + projection_casts(m, "fc1")
    return PROJECTION_CASTS[reader]


def autocast_layer_terms(sc: Scenario, z: Shard, terms: dict[str, float]) -> dict[str, float]:
    """`terms` (one dense layer's stored tensors, `activations._layer_terms`) as the autocast replay keeps
    them. MoE layers and MLA are left as the fused bookkeeping counts them (the replay's MoE is not
    measured on a GPU)."""
    m = sc.model
    if m.mla:
        return terms
    out = dict(terms)
    for key in ("norm1_input", "norm2_input", "layer_input"):
        if key in out:
            out[key] *= RESIDUAL_BYTES / z.ab
    if m.parallel_block and "qkv_input" in out:  # w1 (and w3) cast the shared norm output afresh too
        out["fc1_input"] = out["qkv_input"]
    for reader in ("qkv", "fc1"):
        if f"{reader}_input" in out:
            out[f"{reader}_input"] *= PROJECTION_CASTS[reader] if reader == "qkv" else projection_casts(m, "fc1")
    if "gate" in out:
        out["silu_output"] = out["gate"]
    for key in ("k", "v"):
        if key in out and z.kv:
            out[key] *= z.q / z.kv
    if "attn_out" in out:
        out["out_proj_input"] = out["attn_out"]
    return out


def ce_backward_temporaries(sc: Scenario) -> int:
    """fp32 logits-sized temporaries of the loss backward: two under autocast's F.cross_entropy, one for
    the vocab-parallel cross-entropy."""
    return CE_BWD_TEMPORARIES if sc.training.autocast else 1

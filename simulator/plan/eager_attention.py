"""Eager (unfused) attention as the kernels it runs, each priced on its own roofline and summed.

Before FlashAttention, Megatron-LM's attention (`CoreAttention` in megatron/model/transformer.py, 2021-22; the
same in Megatron-DeepSpeed and NeMo 1.x, `training.attention: eager` here) is four kernels in the forward, on the
rank's b x heads score matrices of s_q x s_kv entries (every entry: the causal mask is applied, not skipped):

1. scores = baddbmm(Q, K^T) / sqrt(d): a batched GEMM, 2 S d FLOPs, reads Q and K, writes the S scores;
2. probs = FusedScaleMaskSoftmax(scores): one fused kernel, reads and writes S entries;
3. probs = dropout(probs) (GPT's attention dropout, under the TP RNG tracker): reads S entries, writes S and a
   one-byte mask per entry; Llama-style models have none;
4. context = bmm(probs, V): a batched GEMM, 2 S d FLOPs, reads the S probabilities and V, writes the output.

Autograd runs their backwards in reverse: bmm's two GEMMs (dP = dO V^T writes S entries; dV = P^T dO reads them),
dropout's (reads the gradient and the mask, writes S), the fused softmax's (reads the gradient and the saved
probabilities, writes S), baddbmm's two GEMMs (dQ = dS K, dK = dS^T Q, each reading the S gradients).
S = (b x heads) x s_q x s_kv. Each kernel takes max(its FLOPs at the GEMM curve, its bytes at
`costs.EAGER_HBM_EFFICIENCY` of HBM peak, fitted on FlashAttention-2's published PyTorch baseline on an A100) plus
the per-kernel gap: the kernels run one after another, so their times add (a single roofline over the summed
FLOPs and bytes would let the GEMMs' compute hide the softmax's traffic, which it cannot).
"""
from __future__ import annotations

from dataclasses import dataclass

EAGER = "eager"
"""The attention op's kernel tag (`Compute.shape[6]`) for eager attention without dropout."""
EAGER_DROPOUT = "eager-dropout"
"""The tag for eager attention with an attention dropout (GPT)."""
MASK_BYTES = 1
"""Dropout's mask: one byte (torch.bool) per entry, as the activation memory counts it (`activations.py`)."""


@dataclass(frozen=True)
class Kernel:
    """One kernel of eager attention: its FLOPs (0 for a memory-bound one) and HBM bytes read and written."""
    name: str
    flops: float
    bytes: float


def eager_kernels(bh: int, s_q: int, s_kv: int, d: int, phase: str, dropout: bool, elt_bytes: int) -> list[Kernel]:
    """The kernels of one eager attention pass (`phase` 'fwd' or 'bwd') on `bh` = batch x heads score matrices
    of head dim `d`, elements of `elt_bytes` (module docstring)."""
    S = float(bh) * s_q * s_kv
    q, kv = float(bh) * s_q * d, float(bh) * s_kv * d  # Q (and O, dO, dQ) / K (and V, dK, dV) elements
    e = elt_bytes
    gemm = 2.0 * S * d
    if phase == "fwd":
        out = [Kernel("scores_bmm", gemm, e * (q + kv + S)), Kernel("softmax", 0.0, e * 2 * S)]
        if dropout:
            out.append(Kernel("dropout", 0.0, (2 * e + MASK_BYTES) * S))
        return out + [Kernel("context_bmm", gemm, e * (S + kv + q))]
    out = [Kernel("grad_probs_bmm", gemm, e * (q + kv + S)), Kernel("grad_v_bmm", gemm, e * (S + q + kv))]
    if dropout:
        out.append(Kernel("dropout_bwd", 0.0, (2 * e + MASK_BYTES) * S))
    return out + [Kernel("softmax_bwd", 0.0, e * 3 * S), Kernel("grad_q_bmm", gemm, e * (S + kv + q)),
                  Kernel("grad_k_bmm", gemm, e * (S + q + kv))]


def eager_flops(bh: int, s_q: int, s_kv: int, d: int, phase: str) -> float:
    """The pass's GEMM FLOPs, every entry computed: 4 S d forward, 8 S d backward."""
    return sum(k.flops for k in eager_kernels(bh, s_q, s_kv, d, phase, False, 2))

"""Training FLOPs. Convention (stated in every report): matmul FLOPs only, 2 per multiply-add, backward =
2x forward, attention counted causally (only the lower triangle), LM head counted, embedding lookup not,
recomputation not (that is HFU, not MFU). This is Megatron-LM's `num_floating_point_operations`
(docs/modeling.md §2.3): per token 6*N + 6*L*h_q*s; PaLM/Korthikanti count attention non-causally (12*L*h_q*s).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import ModelSpec
from ..params import flop_params

if TYPE_CHECKING:
    from ..scenario import Scenario

FLOP_CONVENTION = "6N + causal attention (Megatron num_floating_point_operations); recompute excluded"


def attention_flops_per_token(m: ModelSpec, seq_len: int, causal: bool = True) -> float:
    """3 passes x 2 FLOP/MAC x keys seen (s/2 causal, s otherwise) x a*(d_qk + d_v) per layer."""
    if m.mla:
        width = m.heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim + m.mla.v_head_dim)
    else:
        width = 2 * m.q_dim
    keys = seq_len / 2 if causal else seq_len
    return 3 * 2 * keys * width * (m.layers + m.mtp_layers)  # an MTP module's layer attends like any other


def training_flops_per_token(m: ModelSpec, seq_len: int, causal: bool = True) -> float:
    """6*N_active (matmul params incl. LM head) + attention term."""
    return 6 * flop_params(m) + attention_flops_per_token(m, seq_len, causal)


def model_flops_per_step(m: ModelSpec, seq_len: int, global_batch: int, attention_share: float = 1.0) -> float:
    """`attention_share`: the attention a mask leaves over the causal mask's (packed documents, a sliding window: `documents.py`)."""
    dense = 6 * flop_params(m) + attention_flops_per_token(m, seq_len) * attention_share
    return dense * seq_len * global_batch


DOCUMENT_CONVENTION = "; attention as the document mask leaves it"
WINDOW_CONVENTION = "; attention as the sliding window leaves it"


def scenario_model_flops(sc: "Scenario") -> tuple[float, str]:
    """(model FLOPs per step, the convention they follow) of a scenario: with `training.attention_mask:
    document` only the attention within documents counts (the causal mask's across documents is not work
    the model does), and under `model.sliding_window` only the keys inside each sliding layer's window: the
    attention share is the mean over the attending layers (main and MTP) of each one's work over the causal
    mask's (`documents.mean_cost_vs_causal`)."""
    from .documents import attention_layers, layer_window, mean_cost_vs_causal, scenario_packing  # noqa: PLC0415
    share = mean_cost_vs_causal(sc)
    flops = model_flops_per_step(sc.model, sc.training.seq_len, sc.training.global_batch, share)
    windowed = any(layer_window(sc, i) is not None for i in attention_layers(sc))
    convention = FLOP_CONVENTION + (DOCUMENT_CONVENTION if scenario_packing(sc) is not None else "")
    return flops, convention + (WINDOW_CONVENTION if windowed else "")


def gemm_dtype(sc: "Scenario") -> str:
    """The precision the step's GEMMs run in: `training.precision` (autocast requires bf16, and its
    GEMMs run in bf16). The cost model prices every matmul at `peak_flops(op.dtype)` with this dtype
    (`ops.py`), fp32 at the FP32 peak (no TF32); fp16 as bf16 (`opgraph.priced_dtype`)."""
    from .opgraph import priced_dtype  # noqa: PLC0415 (opgraph imports the scenario)
    return priced_dtype(sc.training.precision)


def mfu_peak_flops(sc: "Scenario") -> float:
    """Dense peak FLOP/s per GPU that MFU and HFU divide by (docs/metrics.md): the peak of the precision
    the GEMMs run in. The numerator of either is at most what those GEMMs could do at that peak, so
    MFU <= 100 %, and HFU (recomputation included) >= MFU since both share this denominator. The
    datasheet's peak, not the power-capped one: MFU is a share of what the GPU is sold as. With `cluster.pools`,
    the mean over every GPU of the cluster (each pool's peak weighted by its nodes)."""
    if sc.pool_topologies:
        nodes = [p.nodes for p in sc.cluster.pools]
        return sum(n * t.nominal_peak_flops(gemm_dtype(sc)) for n, t in zip(nodes, sc.pool_topologies)) / sum(nodes)
    return sc.topology.nominal_peak_flops(gemm_dtype(sc))

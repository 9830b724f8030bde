"""`cluster.efficiency`: a software stack's measured efficiencies over the spec roofline and the published kernels,
as a scenario or a framework file gives them (`frameworks/*.yaml` efficiency entries land here too), checked key
by key; `cost/costs.py` reads them."""
from __future__ import annotations

from .errors import ScenarioError

EFFICIENCY_KEYS = ("gemm", "gemm_fp8", "gemm_fp8_vs_bf16", "gemm_mxfp8_vs_fp8", "triton_fa_vs_transfer", "attention_fwd", "attention_bwd", "hbm", "tp_comm_overhead_s", "tp_internode_overhead_s",
                   "tp_host_s", "tp_host_per_rank_s", "dp_comm_overhead_s", "dp_ring_step_latency_us",
                   "comm_sm_share")
"""`cluster.efficiency` overrides: a software stack's measured efficiencies (e.g. nanotron's GEMMs and
FlashAttention-2 fitted on the playbook's fit split, simulator/playbook.py). dp_comm_overhead_s: seconds
added to every DP collective; dp_ring_step_latency_us: the per-step floor of DP rings across nodes
(reduce-scatter, all-gather) in place of the topology's `fabric.ring_step_latency_us`; comm_sm_share:
the share of a GPU's compute rate that an in-flight collective takes (`sm_share.py`); gemm_fp8: FP8 GEMMs at this
fraction of the FP8 peak; gemm_fp8_vs_bf16: FP8 GEMMs at this multiple of the fraction of the BF16 peak this GPU's
GEMMs sustain in a training step (`cost/sustained.py`; Transformer Engine's in frameworks/transformer_engine.yaml),
gemm_fp8 taking precedence; gemm_mxfp8_vs_fp8: block-scaled (MXFP8) GEMMs at this multiple of the per-tensor FP8
GEMMs' speed (Transformer Engine's, frameworks/transformer_engine.yaml); triton_fa_vs_transfer: the Triton
FlashAttention kernel (attention family triton_fa, MPT's attn_impl triton) at this multiple of the speed its published
transfer gives (kernel_data.json transfers.triton_fa; Composer's, frameworks/composer.yaml)."""

MAX_OVERHEAD_S = 60.0
"""A per-collective software overhead (cluster.efficiency *_s) of a minute is already absurd."""


def check_efficiency(efficiency: dict) -> None:
    """`cluster.efficiency`: known EFFICIENCY_KEYS, each in its range (fractions, seconds, microseconds, an SM share)."""
    for key, value in efficiency.items():
        if key not in EFFICIENCY_KEYS:
            raise ScenarioError(f"cluster.efficiency.{key}", "unknown key", ", ".join(EFFICIENCY_KEYS))
        if key.endswith("_s"):
            ok, allowed = 0 <= value <= MAX_OVERHEAD_S, f"seconds in [0, {MAX_OVERHEAD_S:g}]"
        elif key.endswith("_us"):
            ok, allowed = 0 <= value <= MAX_OVERHEAD_S * 1e6, f"microseconds in [0, {MAX_OVERHEAD_S * 1e6:g}]"
        elif key == "comm_sm_share":
            ok, allowed = 0 <= value < 1, "a fraction in [0, 1)"
        elif key in ("gemm_fp8_vs_bf16", "gemm_mxfp8_vs_fp8", "triton_fa_vs_transfer"):
            ok, allowed = 0 < value <= 2, "a multiple in (0, 2]"
        else:
            ok, allowed = 0 < value <= 1, "a fraction in (0, 1]"
        if not ok:
            raise ScenarioError(f"cluster.efficiency.{key}", f"{value} is out of range", allowed)

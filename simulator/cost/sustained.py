"""GEMM speed inside a training step, against the published kernel curves (`kernel_data.py`).

The published GEMM points are microbenchmarks: one shape timed in a tight loop (OpenXLA's table, cuBLAS and
DeepGEMM figures, maximum-achievable-matmul sweeps). On H100 they put large BF16 GEMMs at ~0.80 of the dense
peak (the fitted curve's eta_max 0.798). Inside a training step the same GEMMs run slower: every published BF16
H100 run clustersim is checked against read 1.3-1.6x too fast at the microbenchmark curve, on three stacks that
share nothing but the GPU (nanotron in the Ultra-Scale Playbook, Meta's Llama 3 405B runs, torchtitan on AWS,
LLM Foundry at short sequences). Why is not settled here (sustained clocks under the board's power limit over a
whole step rather than a loop of one kernel, caches and HBM shared with the memory-bound kernels between GEMMs);
what is measured is how much.

The number is *fitted*, on one fit split, and transferred:
- fitted: the playbook's fit split (nanotron, Llama 1B / 3B / 8B on one to eight H100 nodes; its one-node tp = 1
  runs, whose step is GEMMs, FlashAttention-2 and memory-bound ops, read 1.61x fast at 0.78 of peak) put the
  GEMMs' peak efficiency at 0.55 of the BF16 dense peak (grid 0.55 / 0.56 / 0.57: median APE 5.66 / 5.64 /
  5.71 %; `costs.ATTENTION_HEAD_DIM_FACTOR`). It used to be nanotron's own `cluster.efficiency.gemm`; as a
  fraction of the published curve it gives the playbook the same scores (fit MAPE 34.5 %, median 6.0 %;
  validation 15.1 %, median 7.5 %, against 7.6 % with the flat constant);
- transferred, not fitted: the same fraction for every dtype (FP8 GEMMs are priced by their published curve
  times the fraction, where a framework does not fit its own, as Megatron's `gemm_fp8` does) and for every
  framework; to H200, the same GH100 die at the same 700 W, and to the H100's variants that name it as their
  `gpu.chip` (H800; no H200 / H800 training run was fitted).
Checked on the published validation rows (`python -m simulator validate --set published`), none used to fit:
Llama 3 405B on 8K / 16K H100 +27.6 / +27.7 / +13.2 % -> -3.3 / -2.6 / -2.8 %; torchtitan's Llama 3 8B on 32 H100
+50.7..+58.0 % -> +16.4..+22.3 % (its FP8/BF16 pair's ratio error -4.2 -> +2.9 %); LLM Foundry's MPT at sequence
512 (BF16) +42 / +43 % -> +5 / +7 %.

GEMM times from a calibration profile are microbenchmarks too (calibrate times one shape in a loop): on a GPU
listed here they take the same share (`CostModel.compute_time`). Not derated: A100 (its spec 0.78 already sits
under the A100's published ceilings, and Megatron's A100 papers read +2..+12 % with it) and Blackwell (no
training run on a fit split).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SustainedGemm:
    """The BF16 peak efficiency large GEMMs sustain inside a training step on one GPU model."""
    bf16_peak_efficiency: float
    source: str


H100_SUSTAINED = SustainedGemm(
    0.55, "fitted on the Ultra-Scale Playbook's fit split (nanotron, 1B/3B/8B on H100): one-node tp = 1 runs read "
          "1.61x fast at 0.78 of peak; grid 0.55-0.57 (simulator/cost/sustained.py)")
SUSTAINED_GEMM = {
    "H100 SXM5 80GB": H100_SUSTAINED,
    "H200 SXM 141GB": SustainedGemm(H100_SUSTAINED.bf16_peak_efficiency,
                                    "H100's fitted value: the same GH100 die at the same 700 W (not fitted on H200 runs)"),
}
"""topology `gpu.kernel_chip` (its `gpu.chip`, else its name) -> the sustained BF16 GEMM efficiency; GPUs not listed
keep the published curve. Variants of a listed chip (H800, Grand Teton's 96 GB H100) name it as their `gpu.chip`."""


def sustained_fraction(gpu_name: str, bf16_peak_efficiency: float) -> float:
    """The fraction of a GPU's published GEMM speed a training step sustains: the sustained BF16 efficiency over
    the published BF16 curve's eta_max (`bf16_peak_efficiency`), at most 1; 1 for a GPU without a fitted value.
    The same fraction applies to every dtype of that GPU."""
    s = SUSTAINED_GEMM.get(gpu_name)
    if s is None or bf16_peak_efficiency <= 0:
        return 1.0
    return min(1.0, s.bf16_peak_efficiency / bf16_peak_efficiency)

"""Memory-bound kernels: cuDNN's published norm kernels against the time clustersim prices a norm at.

    python validation/memory_bound_kernels.py

Reads validation/references/kernels/norms_cudnn.yaml: NVIDIA cudnn-frontend's RMSNorm / LayerNorm benchmark (cuDNN
9.19.1, bf16, L2 flushed between calls) on an H200, a GB200 and a GB300 at 15 training shapes each. clustersim prices
a norm as a memory-bound op (`plan/opgraph.py` NORM_PASSES: 2 passes over the tensor forward, 3 backward, 2 B each)
at `costs.HBM_EFFICIENCY` of the topology's HBM bandwidth plus the per-kernel gap `costs.KERNEL_OVERHEAD_S`
(`CostModel.spec_compute_time`). Both numbers are assumptions in the code ("80-90 % of HBM peak", "a few
microseconds"); this is their check against published kernels, not a fit.

For each GPU and phase the script prints the published time (the benchmark's bytes over its GB/s), the priced time,
their ratio (> 1: clustersim too slow), the share of HBM peak the kernel reached, and per GPU and phase the MAPE of
the time over every shape and over the large ones (at least `LARGE_BYTES` moved), where the HBM share decides.

A report, not a gate: it exits 0 whatever the error (tests/test_memory_bound_kernels.py holds the band).
"""
from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.cost.costs import CostModel  # noqa: E402
from simulator.plan.opgraph import NORM_PASSES, Compute  # noqa: E402
from simulator.topology import load_topology  # noqa: E402

REFERENCE = ROOT / "validation" / "references" / "kernels" / "norms_cudnn.yaml"
LARGE_BYTES = 64e6
"""Bytes a call moves from which the HBM share, not the per-kernel gap, sets its time (a 16K x 4K bf16 norm moves
~270 MB forward; DeepSeek-V3's 8K x 128 one 4 MB)."""
ACT_BYTES = 2
"""bf16."""
STAT_BYTES = 4
"""The benchmark's fp32 inverse variance (and LayerNorm's mean) per row."""


def benchmark_bytes(norm: str, bias: bool, n: int, c: int, phase: str) -> float:
    """Bytes the benchmark counts for one call (cudnn-frontend benchmark/norms/benchmark_single_norm.py,
    compute_bandwidth_bytes, at df73764)."""
    nc = n * c
    stats = 1 if norm == "rms_norm" else 2
    if phase == "fwd":
        return (nc + c + (c if bias else 0)) * ACT_BYTES + nc * ACT_BYTES + n * STAT_BYTES * stats
    grads = c + (c if norm == "layer_norm" else 0) + (c if bias else 0)
    return (2 * nc + c) * ACT_BYTES + n * STAT_BYTES * stats + (nc + grads) * ACT_BYTES


@dataclass(frozen=True)
class Point:
    gpu: str
    shape: str
    phase: str
    bytes: float
    published_s: float
    priced_s: float
    hbm_share: float
    """The benchmark's bytes over its time over the topology's HBM peak."""

    @property
    def ratio(self) -> float:
        return self.priced_s / self.published_s


def points() -> list[Point]:
    ref = yaml.safe_load(REFERENCE.read_text())
    out = []
    for g in ref["gpus"]:
        topo = load_topology(g["topology"])
        cost = CostModel(topo)
        peak = topo.gpu.hbm_bandwidth_gbs * 1e9
        for shape, norm, bias, n, c, _, _, fwd_gbps, bwd_gbps in g["rows"]:
            for phase, gbps, passes in (("fwd", fwd_gbps, NORM_PASSES[0]), ("bwd", bwd_gbps, NORM_PASSES[1])):
                nbytes = benchmark_bytes(norm, bias, n, c, phase)
                published = nbytes / (gbps * 1e9)
                op = Compute("norm1" if phase == "fwd" else "norm1_bwd", "elementwise", 0.0,
                             float(n * c * passes * ACT_BYTES), "bf16", (n * c,))
                out.append(Point(g["device"], shape, phase, nbytes, published, cost.spec_compute_time(op),
                                 nbytes / published / peak))
    return out


def mape(ps: list[Point]) -> float:
    return statistics.mean(abs(p.ratio - 1) for p in ps) if ps else float("nan")


def main() -> int:
    ps = points()
    print("Norm kernels (cuDNN 9.19.1, bf16; cudnn-frontend's published benchmark) against clustersim's memory-bound "
          "pricing (2 / 3 passes at the HBM share, plus the per-kernel gap)")
    for gpu in dict.fromkeys(p.gpu for p in ps):
        print(f"\n{gpu}")
        print(f"  {'shape':24s} {'phase':5s} {'MB':>7s} {'pub us':>7s} {'priced':>7s} {'ratio':>6s} {'HBM share':>9s}")
        for p in (p for p in ps if p.gpu == gpu):
            print(f"  {p.shape:24s} {p.phase:5s} {p.bytes / 1e6:7.1f} {p.published_s * 1e6:7.1f} {p.priced_s * 1e6:7.1f}"
                  f" {p.ratio:6.2f} {p.hbm_share:9.2f}")
        for phase in ("fwd", "bwd"):
            mine = [p for p in ps if p.gpu == gpu and p.phase == phase]
            large = [p for p in mine if p.bytes >= LARGE_BYTES]
            print(f"  {phase}: time MAPE {mape(mine):.1%} over {len(mine)} shapes; {mape(large):.1%} over the "
                  f"{len(large)} moving >= {LARGE_BYTES / 1e6:.0f} MB, whose HBM share is "
                  f"{min(p.hbm_share for p in large):.2f}-{max(p.hbm_share for p in large):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""DeepSeek-V3-shaped attention (MLA) through cuDNN: published TFLOP/s against the speed clustersim prices it at.

    python validation/mla_attention.py

Reads validation/references/kernels/mla_attention_cudnn.yaml: cudnn-frontend's published runs of DeepSeek-V3's
attention shape (query-key head dim 192, value head dim 128, causal, BF16) on H200, GB200 and GB300, and NVIDIA's
Megatron Core MoE report's Table 9 (Hopper, Blackwell). clustersim prices MLA from the GPU's own MLA tables
(kernel_data.json `mla_attention`: the cudnn-frontend points above, so those sets read 0 by construction and check
only the transcription), else at the mean head dim, 160, from its head-dim-128 cuDNN tables
(`kernel_data.GpuKernels.attention_efficiency`, the topology's peak, the set's cuDNN release where it names one). The
MoE report's Table 9 is in no data of clustersim's: it is the independent check. For each point the script prints
published and priced TFLOP/s forward and backward, their ratio, and per set the error of one forward + backward
(time-weighted: the backward counts 2.5 times the forward's FLOPs) - what a training step pays.

A report, not a gate: it exits 0 whatever the error (tests/test_mla_attention.py holds the band).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.cost.costs import CostModel, mla_head_dims  # noqa: E402
from simulator.model import load_model  # noqa: E402
from simulator.topology import load_topology  # noqa: E402

REFERENCE = ROOT / "validation" / "references" / "kernels" / "mla_attention_cudnn.yaml"
BACKWARD_FLOPS = 2.5
"""A backward's FLOPs over its forward's (the benchmark's and clustersim's convention)."""


@dataclass(frozen=True)
class Point:
    set: str
    seq: int
    published: tuple[float, float]
    """Forward, backward TFLOP/s as published."""
    priced: tuple[float, float]

    def ratio(self, phase: int) -> float:
        return self.priced[phase] / self.published[phase]

    @property
    def step_ratio(self) -> float:
        """Published over priced time of one forward + backward: > 1, clustersim is too fast."""
        def t(tf):
            return 1 / tf[0] + BACKWARD_FLOPS / tf[1]
        return t(self.published) / t(self.priced)


def mla_head_dim() -> float:
    return load_model("deepseek-v3").attention_head_dim


def pricer(topology: str, cudnn_version: str | None, dims: tuple):
    """seq, d_head -> clustersim's cuDNN TFLOP/s forward and backward for a causal BF16 attention on `topology`'s GPU
    (its tables looked up once per set; MLA's own table for `dims`, its two head dims, where the GPU has one)."""
    topo = load_topology(topology)
    kernels = CostModel(topo, cudnn_version=cudnn_version).kernels()
    peak = topo.gpu.peak_tflops["bf16"] * topo.gpu.compute_clock_fraction
    return lambda seq, d_head: tuple(kernels.attention_efficiency("cudnn", phase, True, d_head, seq, dims) * peak
                                     for phase in ("fwd", "bwd"))


def load(path: Path = REFERENCE) -> list[dict]:
    return yaml.safe_load(path.read_text())["sets"]


def points(sets: list[dict]) -> list[Point]:
    model = load_model("deepseek-v3")
    d, dims = model.attention_head_dim, mla_head_dims(model)
    out = []
    for s in sets:
        priced = pricer(s["topology"], s.get("cudnn_version"), dims)
        out += [Point(s["id"], int(seq), (float(f), float(b)), priced(int(seq), d)) for seq, f, b in s["points"]]
    return out


def report(sets: list[dict]) -> list[Point]:
    pts = points(sets)
    print(f"MLA attention (DeepSeek-V3: head dims 192 / 128; without an MLA table priced at {mla_head_dim():g}), cuDNN,"
          " causal, BF16")
    for s in sets:
        mine = [p for p in pts if p.set == s["id"]]
        print(f"\n{s['id']}: {s['gpu']}, topology {s['topology']}, cuDNN {s.get('cudnn_version') or 'not stated'}"
              f"{', deterministic backward' if s.get('deterministic_backward') else ''}")
        print(f"  {'seq':>6s} {'fwd pub':>8s} {'priced':>7s} {'ratio':>6s} {'bwd pub':>8s} {'priced':>7s} {'ratio':>6s}"
              f" {'fwd+bwd':>8s}")
        for p in mine:
            print(f"  {p.seq:6d} {p.published[0]:8.0f} {p.priced[0]:7.0f} {p.ratio(0):6.2f} {p.published[1]:8.0f}"
                  f" {p.priced[1]:7.0f} {p.ratio(1):6.2f} {p.step_ratio - 1:+7.1%}")
        mean = sum(abs(p.step_ratio - 1) for p in mine) / len(mine)
        print(f"  forward + backward time error: mean {mean:.1%} (> 0: clustersim too fast)")
    return pts


def main() -> int:
    report(load())
    return 0


if __name__ == "__main__":
    sys.exit(main())

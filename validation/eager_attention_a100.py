"""Eager attention's kernel model against FlashAttention-2's published PyTorch baseline on an A100 80GB.

    python validation/eager_attention_a100.py [--efficiency E ...] [--json]

Reads validation/references/kernels/fa2_a100_attention.yaml (the FA2 README's A100 forward + backward figure:
TFLOP/s per sequence length, head dim 64 / 128, causal or not). For every PyTorch point it turns the published
rate into seconds (the benchmark's FLOP convention: 3.5 x 4 b s^2 h d, halved when causal) and prices the same
work as clustersim prices eager attention (`plan/eager_attention.py`: the scores' batched GEMM, the softmax, the
context GEMM and their backwards, every entry computed) plus the one kernel the benchmark has that Megatron's
fused scale-mask-softmax does not: its causal mask's add (reads and writes the scores). The GEMMs take the A100's
GEMM curve (topologies/dgx-a100.yaml); the score-sized traffic runs at the HBM share given (default
`costs.EAGER_HBM_EFFICIENCY`, which was fitted here). Prints per point the published and predicted time and their
error, then the time MAPE; with several --efficiency values, one MAPE line each (the fit's grid).

A report, not a gate: it exits 0 whatever the error (tests/test_eager_attention.py holds the fitted value to its
MAPE).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator.cost import costs  # noqa: E402
from simulator.plan.eager_attention import Kernel, eager_kernels  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "validation" / "references" / "kernels" / "fa2_a100_attention.yaml"


def published_points(ref: dict) -> list[dict]:
    """Every PyTorch point with a number: head_dim, causal, seq, batch, heads, seconds (forward + backward)."""
    out = []
    for panel in ref["panels"]:
        d, causal = panel["head_dim"], panel["causal"]
        for s, tflops in zip(ref["seq"], panel["pytorch"]):
            if tflops is None:
                continue
            b, h = ref["tokens"] // s, ref["model_width"] // d
            counted = 3.5 * 4 * b * s * s * h * d / (2 if causal else 1)  # benchmark_flash_attention.flops(fwd_bwd)
            out.append({"head_dim": d, "causal": causal, "seq": s, "batch": b, "heads": h,
                        "tflops": tflops, "seconds": counted / (tflops * 1e12)})
    return out


def benchmark_kernels(p: dict) -> list[Kernel]:
    """The benchmark's attention_pytorch as kernels: clustersim's eager list (no dropout: p = 0 is a no-op) and,
    with the causal mask, the add of the float mask to the scores (read and write every entry, fp16)."""
    bh, s, d = p["batch"] * p["heads"], p["seq"], p["head_dim"]
    ks = eager_kernels(bh, s, s, d, "fwd", False, 2) + eager_kernels(bh, s, s, d, "bwd", False, 2)
    if p["causal"]:
        ks.append(Kernel("causal_mask_add", 0.0, 2 * 2 * float(bh) * s * s))
    return ks


def errors(efficiency: float) -> list[dict]:
    """Per published point: measured and predicted seconds and the signed error (%), at HBM share `efficiency`."""
    ref = yaml.safe_load(REFERENCE.read_text())
    sc = load_scenario(str(ROOT / "scenarios/8b_8gpu.yaml"), ["cluster.topology=dgx-a100", "training.global_batch=8"])
    cm = costs.build_cost_model(sc)
    rows = []
    for p in published_points(ref):
        t = cm.kernels_time(benchmark_kernels(p), "bf16", efficiency)
        rows.append({**p, "predicted_s": t, "error_pct": (t - p["seconds"]) / p["seconds"] * 100})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--efficiency", type=float, nargs="*", default=[costs.EAGER_HBM_EFFICIENCY])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.json:
        print(json.dumps({str(e): errors(e) for e in a.efficiency}))
        return 0
    if len(a.efficiency) == 1:
        rows = errors(a.efficiency[0])
        print(f"{'head_dim':>8} {'causal':>6} {'seq':>6} {'published TFLOP/s':>17} {'published ms':>12} {'predicted ms':>12} {'error':>7}")
        for r in rows:
            print(f"{r['head_dim']:>8} {str(r['causal']):>6} {r['seq']:>6} {r['tflops']:>17} {r['seconds'] * 1e3:>12.2f} "
                  f"{r['predicted_s'] * 1e3:>12.2f} {r['error_pct']:>+6.1f}%")
    for e in a.efficiency:
        errs = [r["error_pct"] for r in errors(e)]
        print(f"HBM share {e:.2f}: time MAPE {statistics.mean(map(abs, errs)):.1f} % over {len(errs)} points "
              f"(median {statistics.median(errs):+.1f} %, {min(errs):+.0f} .. {max(errs):+.0f} %; < 0: predicted faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

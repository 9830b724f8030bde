"""The default kernel pricing against every published kernel point: each point of a GPU in
simulator/cost/kernel_data.json (the data the default prices from) is priced by `CostModel.spec_compute_time` on a
topology with that GPU, twice: by the published curves (`new`, the default) and by the spec-based constants alone
(`old`, `published_kernels=False`). No fitting here, only the table: GEMMs are priced by the published curve
itself, before the share of it a training step sustains (`simulator/cost/sustained.py`, printed per GPU).

    python validation/kernel_ceiling.py [--gpu "H100 SXM5 80GB"] [--json]

ratio = model time / published time: below 1 the model prices the kernel faster than it was measured
(optimistic), above 1 slower. Attention points are priced with their own kernel family. GEMM points with a side
below gemm_curve.MIN_FIT_DIM are held out of the curve's fit (marked `held out`); the rest were used to fit it, so
their new ratios are ~1 by construction, up to the curve's two parameters. Maximum-achievable points (`ceiling`)
only cap the curve: their ratio must be >= 1 (the model never beats the best measured matmul). Ops are built as the plan builds them: GEMMs with `opgraph.gemm`
(2mnk FLOPs, operands and result once each), attention with `layer_ops._attention_op`'s flash formulas
(4 * bh * s_q * s_kv * d, x0.5 causal, x2.5 backward; bytes Q, K, V, O, twice in backward), written out
here because that builder needs a whole scenario; a forward+backward point (`phase: fwd_bwd`) is its forward op
plus its backward op. The published point's own shape and dtype are used.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from types import SimpleNamespace  # noqa: E402

from simulator.cost.costs import CostModel  # noqa: E402
from simulator.cost.gemm_curve import used_in_fit  # noqa: E402
from simulator.cost.kernel_data import gpu_points, load_data  # noqa: E402
from simulator.errors import ScenarioError  # noqa: E402
from simulator.plan.opgraph import ACT_BYTES, GEMM_BYTES, Compute, Shard, gemm  # noqa: E402
from simulator.topology import load_topology  # noqa: E402

TOPOLOGY_OF_GPU = {"H100 SXM5 80GB": "dgx-h100", "A100 SXM4 80GB": "dgx-a100", "H200 SXM 141GB": "hgx-h200",
                   "B200 (GB200 superchip)": "gb200-nvl72", "B200 (HGX/DGX, 1,000 W)": "dgx-b200",
                   "B300 (GB300 superchip)": "gb300-nvl72", "B300 (HGX/DGX, 1,100 W)": "dgx-b300"}
"""A shipped topology whose gpu.name is each GPU of the data file."""
BATCH_HEADS_TOKENS = 16384 * 2048
"""The FA3 paper's benchmark sizes its inputs so batch x seqlen = 16k and heads x head dim = 2048."""


def _sizes(dtype: str) -> Shard:
    """A Shard carrying only what `opgraph.gemm` reads (element bytes and dtype); the rest is unused."""
    return Shard(b=1, s=1, T=1, T_sp=1, t=1, h=1, q=1, kv=1, heads=1, d_head=1,
                 ab=ACT_BYTES[dtype], gb=GEMM_BYTES[dtype], dtype=dtype)


def gemm_op(p) -> Compute:
    return gemm("published", p.m, p.n, p.k, _sizes(p.dtype))


def attention_op(p) -> Compute:
    """Flash attention as `layer_ops._attention_op` prices it, for multi-head attention (K/V width = Q width)."""
    frac = 0.5 if (p.causal and p.s_q == p.s_kv) else 1.0
    flops = 4.0 * p.batch_heads * p.s_q * p.s_kv * p.d_head * frac * (2.5 if p.phase == "bwd" else 1.0)
    elem = ACT_BYTES["bf16" if p.dtype == "fp16" else p.dtype]  # fp16 elements are bf16's 2 bytes
    io = (2 * p.batch_heads * p.s_q * p.d_head + 2 * p.batch_heads * p.s_kv * p.d_head) * elem
    io *= 2 if p.phase == "bwd" else 1
    return Compute("attn", "attention", flops, float(io), p.dtype,
                   (p.batch_heads, p.s_q, p.s_kv, p.d_head, frac, p.phase))


class PublishedCurve(CostModel):
    """The default pricing with GEMMs at the published curve's own speed (no training-step share)."""

    def sustained_gemm_fraction(self) -> float:
        return 1.0


def sustained_line(gpu: str) -> str:
    """What the default prices a GEMM at inside a training step on this GPU, against the curve above."""
    frac = CostModel(topology=load_topology(TOPOLOGY_OF_GPU[gpu])).sustained_gemm_fraction()
    return (f"in a training step GEMMs are priced at {frac:.3f} of this curve's speed (simulator/cost/sustained.py)"
            if frac < 1.0 else "in a training step GEMMs are priced at this curve's speed")


def rows(gpu: str) -> list[dict]:
    topology = load_topology(TOPOLOGY_OF_GPU[gpu])
    pts = gpu_points(gpu)
    out = []
    for q in pts["gemm"]:
        p = SimpleNamespace(**q)
        op = gemm_op(p)
        new, old = PublishedCurve(topology=topology), CostModel(topology=topology, published_kernels=False)
        out.append({"kind": "gemm", "what": f"{p.dtype} {p.m}x{p.n}x{p.k}", "published_tflops": p.tflops,
                    "published_s": op.flops / (p.tflops * 1e12),
                    "new_s": new.spec_compute_time(op),
                    "old_s": old.spec_compute_time(op), "held_out": not used_in_fit(q),
                    "role": "ceiling" if q.get("max_achievable") else ("fit" if used_in_fit(q) else "held out"),
                    "source": p.source})
    for q in pts["attention"]:
        bh = BATCH_HEADS_TOKENS // (q["seq"] * q["d_head"])
        # a forward+backward figure's point is the forward op and the backward op, one after the other
        ops = [attention_op(SimpleNamespace(batch_heads=bh, s_q=q["seq"], s_kv=q["seq"], d_head=q["d_head"],
                                            causal=q["causal"], phase=ph, dtype=q["dtype"]))
               for ph in (("fwd", "bwd") if q["phase"] == "fwd_bwd" else (q["phase"],))]
        new = CostModel(topology=topology, attention_kernel=q["family"])
        old = CostModel(topology=topology, attention_kernel=q["family"], published_kernels=False)
        mask = "causal" if q["causal"] else "full"
        out.append({"kind": "attention",
                    "what": f"{q['family']} {q['dtype']} {q['phase']} {mask} d{q['d_head']} s{q['seq']}",
                    "published_tflops": q["tflops"], "published_s": sum(op.flops for op in ops) / (q["tflops"] * 1e12),
                    "new_s": sum(new.spec_compute_time(op) for op in ops),
                    "old_s": sum(old.spec_compute_time(op) for op in ops), "held_out": False, "role": "table",
                    "source": q["source"]})
    for r in out:
        r["new_ratio"] = r["new_s"] / r["published_s"]
        r["old_ratio"] = r["old_s"] / r["published_s"]
    return out


def family(r: dict) -> str:
    """GEMMs by dtype (held-out points apart) and attention by kernel, dtype and phase: the summary's groups."""
    words = r["what"].split()
    if r["kind"] == "gemm":
        return f"gemm {words[0]} {r['role']}"
    return f"attention {' '.join(words[:3])}"


def summary(rs: list[dict]) -> str:
    """Per family: points, and the median and range of the new and old model/published ratios."""
    groups: dict[str, list[dict]] = {}
    for r in rs:
        groups.setdefault(family(r), []).append(r)
    lines = [f"{'family':<30} {'points':>6} {'new median':>10} {'new range':>15} {'old median':>10} {'old range':>15}"]
    for name, g in groups.items():
        nv, ov = [r["new_ratio"] for r in g], [r["old_ratio"] for r in g]
        lines.append(f"{name:<30} {len(g):>6} {statistics.median(nv):>10.3f} {min(nv):>7.3f}-{max(nv):<7.3f} "
                     f"{statistics.median(ov):>10.3f} {min(ov):>7.3f}-{max(ov):<7.3f}")
    return "\n".join(lines)


def table(rs: list[dict]) -> str:
    lines = [f"{'kind':<10} {'kernel':<38} {'pub TFLOP/s':>11} {'pub us':>9} {'new us':>9} {'new/pub':>8} "
             f"{'old/pub':>8}"]
    for r in rs:
        lines.append(f"{r['kind']:<10} {r['what']:<38} {r['published_tflops']:>11.1f} {r['published_s'] * 1e6:>9.1f} "
                     f"{r['new_s'] * 1e6:>9.1f} {r['new_ratio']:>8.3f} {r['old_ratio']:>8.3f}"
                     + (f"  {r['role']}" if r["kind"] == "gemm" else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="append", help="a GPU of kernel_data.json (default: every GPU with a topology)")
    ap.add_argument("--json", action="store_true", help="rows as JSON instead of the table")
    a = ap.parse_args(argv)
    try:
        gpus = a.gpu or [g for g in load_data()["gpus"] if g in TOPOLOGY_OF_GPU]
        unknown = [g for g in gpus if g not in TOPOLOGY_OF_GPU]
        if unknown:
            raise ScenarioError("--gpu", f"{unknown[0]!r} has no topology here", " | ".join(TOPOLOGY_OF_GPU))
        out = {g: rows(g) for g in gpus}
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print("\n\n".join(f"== {g}\n{table(rs)}\n\n{summary(rs)}\n{sustained_line(g)}" for g, rs in out.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

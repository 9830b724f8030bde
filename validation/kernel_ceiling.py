"""How optimistic the spec-based kernel constants are: each published kernel point of a `*-published` profile
against `CostModel.spec_compute_time` for the same op on the profile's topology. No fitting, only the table.

    python validation/kernel_ceiling.py [--profile calibrate/profiles/h100-sxm-published.json] [--json]

ratio = spec time / published time: below 1 the default cost model prices the kernel faster than it was
measured (optimistic), above 1 slower. Ops are built as the plan builds them: GEMMs with `opgraph.gemm`
(2mnk FLOPs, operands and result once each), attention with `layer_ops._attention_op`'s flash formulas
(4 * bh * s_q * s_kv * d, x0.5 causal, x2.5 backward; bytes Q, K, V, O, twice in backward), written out
here because that builder needs a whole scenario. The published point's own shape and dtype are used.
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

from simulator.cost.costs import CostModel  # noqa: E402
from simulator.errors import ScenarioError  # noqa: E402
from simulator.plan.opgraph import ACT_BYTES, GEMM_BYTES, Compute, Shard, gemm  # noqa: E402
from simulator.cost.profile import load_profile  # noqa: E402
from simulator.topology import load_topology  # noqa: E402

DEFAULT_PROFILE = ROOT / "calibrate" / "profiles" / "h100-sxm-published.json"


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
    io = (2 * p.batch_heads * p.s_q * p.d_head + 2 * p.batch_heads * p.s_kv * p.d_head) * ACT_BYTES[p.dtype]
    io *= 2 if p.phase == "bwd" else 1
    return Compute("attn", "attention", flops, float(io), p.dtype,
                   (p.batch_heads, p.s_q, p.s_kv, p.d_head, frac, p.phase))


def rows(profile) -> list[dict]:
    topology = load_topology(profile.spec.topology if profile.spec else "dgx-h100")
    cm = CostModel(topology=topology)
    out = []
    for p in profile.gemm:
        op = gemm_op(p)
        out.append({"kind": "gemm", "what": f"{p.dtype} {p.m}x{p.n}x{p.k}", "published_s": p.cost_s,
                    "published_tflops": op.flops / p.cost_s / 1e12, "spec_s": cm.spec_compute_time(op)})
    for p in profile.attention:
        op = attention_op(p)
        mask = "causal" if p.causal else "full"
        out.append({"kind": "attention", "what": f"{p.backend} {p.dtype} {p.phase} {mask} d{p.d_head} s{p.s_q} bh{p.batch_heads}",
                    "published_s": p.cost_s, "published_tflops": op.flops / p.cost_s / 1e12, "spec_s": cm.spec_compute_time(op)})
    for r in out:
        r["ratio"] = r["spec_s"] / r["published_s"]
    return out


def family(r: dict) -> str:
    """GEMMs by dtype and attention by kernel, dtype and phase: the groups the summary reports."""
    words = r["what"].split()
    return f"gemm {words[0]}" if r["kind"] == "gemm" else f"attention {' '.join(words[:3])}"


def summary(rs: list[dict]) -> str:
    """Per family: how many points and the smallest, median and largest spec/published ratio."""
    groups: dict[str, list[float]] = {}
    for r in rs:
        groups.setdefault(family(r), []).append(r["ratio"])
    lines = [f"{'family':<28} {'points':>6} {'min':>7} {'median':>7} {'max':>7}"]
    for name, v in groups.items():
        lines.append(f"{name:<28} {len(v):>6} {min(v):>7.3f} {statistics.median(v):>7.3f} {max(v):>7.3f}")
    return "\n".join(lines)


def table(rs: list[dict]) -> str:
    lines = [f"{'kind':<10} {'kernel':<44} {'published us':>13} {'TFLOP/s':>8} {'spec us':>10} {'spec/pub':>9}"]
    for r in rs:
        lines.append(f"{r['kind']:<10} {r['what']:<44} {r['published_s'] * 1e6:>13.1f} {r['published_tflops']:>8.0f} "
                     f"{r['spec_s'] * 1e6:>10.1f} {r['ratio']:>9.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=str(DEFAULT_PROFILE))
    ap.add_argument("--json", action="store_true", help="rows as JSON instead of the table")
    a = ap.parse_args(argv)
    try:
        rs = rows(load_profile(a.profile))
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(rs, indent=1) if a.json else table(rs) + "\n\n" + summary(rs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

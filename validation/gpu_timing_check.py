"""Does calibrate's timer read a short GPU kernel's time, not the host's? Small GEMMs (and a large one as a
control) timed three ways on this GPU:

- as issued: calibrate/timing.py's `measure` with queuing switched off (an event pair around each call as the host
  issues it: a kernel shorter than the host's time per call reads the host's time);
- queued: `measure` as calibrate runs it (short calls queued in chunks behind `torch.cuda._sleep`, one event pair
  per chunk);
- traced: the kernels' own time in a torch.profiler trace (validation/profile_vs_trace.py's `traced_seconds`).

    python validation/gpu_timing_check.py [--json]

Exits 0 when every queued time is within TOLERANCE (plus a launch gap) of the traced one, 1 when not, 0 with a message without a GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))

TOLERANCE = 0.10
LAUNCH_GAP_S = 2e-6
"""Allowed on top of TOLERANCE: queued calls run back to back, so each also carries the gap between one kernel's end
and the next one's start, which a trace's kernel time leaves out (a microsecond or two on Hopper)."""
SHAPES = [(128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
          (2048, 8192, 2048), (8192, 8192, 8192)]
"""(m, n, k): from well under the host's ~30 us per call to a 1.1 TFLOP control."""
TRACE_REPS = 50


def rows(device) -> list[dict]:
    import calibrate.timing as timing  # noqa: PLC0415
    from calibrate.plan import GemmSpec, default_plan  # noqa: PLC0415
    from calibrate.probes import DTYPES, gemm  # noqa: PLC0415
    from profile_vs_trace import traced_seconds  # noqa: PLC0415

    plan = default_plan(device.type, quick=False)  # its budget: what the full GPU sweep times each point with
    dtypes = ["bf16"] + (["fp8"] if gemm.has_fp8(device) else [])
    specs = [GemmSpec(dtype=d, m=m, n=n, k=k) for d in dtypes for m, n, k in SHAPES]
    pools = timing.Pools(device, plan.pool_cap_bytes)
    for spec in specs:
        pools.need(DTYPES[spec.dtype], gemm.operand_shapes(spec))
    runners = [gemm.runner(spec, pools.get(DTYPES[spec.dtype])) for spec in specs]
    queued = [timing.measure(fn, device, plan.budget) for fn in runners]
    saved = timing.QUEUE_AHEAD_BELOW_S
    timing.QUEUE_AHEAD_BELOW_S = 0.0
    try:
        issued = [timing.measure(fn, device, plan.budget) for fn in runners]
    finally:
        timing.QUEUE_AHEAD_BELOW_S = saved
    traced = traced_seconds([((lambda fn=fn: fn), TRACE_REPS) for fn in runners], device)
    return [{"dtype": s.dtype, "shape": [s.m, s.n, s.k], "issued_s": a.mean_s, "queued_s": q.mean_s,
             "traced_s": t, "error": q.mean_s / t - 1.0, "tflops": 2 * s.m * s.n * s.k / q.mean_s / 1e12}
            for s, a, q, t in zip(specs, issued, queued, traced)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        print("gpu_timing_check: torch is not installed; nothing to check")
        return 0
    if not torch.cuda.is_available():
        print("gpu_timing_check: no CUDA device; nothing to check")
        return 0
    out = rows(torch.device("cuda", 0))
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{'dtype':5} {'m x n x k':>18} {'issued us':>10} {'queued us':>10} {'traced us':>10} {'queued/traced':>14}"
              f" {'TFLOP/s':>8}")
        for r in out:
            print(f"{r['dtype']:5} {'x'.join(map(str, r['shape'])):>18} {r['issued_s'] * 1e6:10.1f} "
                  f"{r['queued_s'] * 1e6:10.1f} {r['traced_s'] * 1e6:10.1f} {r['error']:+13.1%} {r['tflops']:8.0f}")
    bad = [r for r in out if abs(r["queued_s"] - r["traced_s"]) > TOLERANCE * r["traced_s"] + LAUNCH_GAP_S]
    print(f"{len(out) - len(bad)} of {len(out)} queued times within {TOLERANCE:.0%} + {LAUNCH_GAP_S * 1e6:.0f} us of the "
          "traced kernel time")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

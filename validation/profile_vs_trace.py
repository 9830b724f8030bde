"""Predicted per-op times (a calibration profile through simulator/profile.py) against a torch.profiler trace
of the same ops run for real, one row per distinct compute op of a single-device scenario.

    python validation/profile_vs_trace.py [--scenario FILE] [--profile FILE] [--tolerance 0.10] [--json]

On a GPU: a single-GPU scenario (default scenarios/1b_1gpu.yaml) and the GPU's profile
(calibrate/profiles/<gpu>.json); kernel time is the CUDA time under each op's record_function range. On a
CPU: a one-process cpu-host scenario (default: the replay's tiny Llama on one process) and
calibrate/profiles/cpu-host.json; time is the range's CPU (wall) time, with the profile's thread count.
The profiler's own per-op bookkeeping (some microseconds per aten op) lands inside that time, so small
composite CPU ops (a norm's backward is ~10 aten ops) read slower in the trace than in the profile. Exits 0
when the time-weighted total is within the tolerance (and prints how many single ops are), 1 when not,
and 0 with a message when nothing applies (no torch, no profile for this device, a multi-device scenario).
Ops the profile does not cover are shown (priced by the spec roofline) but left out of the verdict.
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.cost.costs import build_cost_model  # noqa: E402
from simulator.errors import ScenarioError  # noqa: E402
from simulator.plan.opgraph import Compute  # noqa: E402
from simulator.scenario import Scenario, load_scenario, scenario_from_mapping  # noqa: E402

TOLERANCE = 0.10
GPU_SCENARIO = ROOT / "scenarios" / "1b_1gpu.yaml"
CPU_MODEL = {"arch": "llama", "layers": 4, "hidden": 256, "ffn_hidden": 768, "heads": 8, "kv_heads": 4, "vocab": 1024}
"""scenarios/replay/tiny-llama.json, written out so this runs without the replay's files."""
TARGET_S = 0.1
"""Traced seconds aimed for per op (repeats within [5, 50])."""


def cpu_scenario(profile: Path) -> Scenario:
    return scenario_from_mapping({
        "name": "tiny Llama, one CPU process", "model": CPU_MODEL,
        "training": {"seq_len": 256, "global_batch": 1, "micro_batch": 1, "precision": "fp32", "recompute": "none"},
        "cluster": {"topology": "cpu-host", "nodes": 1, "gpus_per_node": 1, "profile": str(profile)},
        "parallel": {"tp": 1}})


def op_runners(sc: Scenario, ops: list[Compute], device, seed: int = 0) -> list:
    """Per op, a factory of the callable that runs it for real: the calibration probes' kernels at the op's shape,
    with inputs rotating through the same kind of random pool (so the trace and the profile see the same caches).
    Factories, so that one op's retained graphs are freed before the next op's are built: a 1B model's
    cross-entropy backward keeps BWD_GRAPHS fp32 logits graphs of several GiB each, and all ops' graphs at once
    outgrew an 80 GB H100 (2026-11-27)."""
    from calibrate.plan import AttentionSpec, GemmSpec, default_plan, elementwise_spec  # noqa: PLC0415
    from calibrate.probes import DTYPES, attention, gemm, memory, optimizer  # noqa: PLC0415
    from calibrate.timing import Pools  # noqa: PLC0415

    def spec_of(op: Compute):
        if op.kind == "gemm":
            return GemmSpec(dtype=op.dtype, m=op.shape[0], n=op.shape[1], k=op.shape[2])
        if op.kind == "attention":
            bh, sq, skv, d, frac, _ = op.shape
            return AttentionSpec(dtype="bf16" if op.dtype == "fp8" else op.dtype, batch_heads=bh, s_q=sq, s_kv=skv,
                                 d_head=d, causal=frac < 1.0)
        if op.kind == "elementwise":
            return elementwise_spec(sc, op)
        return None

    plan = default_plan(device.type, quick=False)
    pools = Pools(device, plan.pool_cap_bytes, seed)
    specs = [spec_of(op) for op in ops]
    for op, spec in zip(ops, specs):
        shapes = {"gemm": gemm.operand_shapes, "attention": attention.operand_shapes,
                  "elementwise": memory.layout}.get(op.kind)
        if shapes:
            pools.need(DTYPES[spec.dtype], shapes(spec))

    def make(op: Compute, spec):
        if op.kind == "gemm":
            one = gemm.runner(spec, pools.get(DTYPES[spec.dtype]))
            return lambda i: [one(i * op.repeat + j) for j in range(op.repeat)]
        if op.kind == "attention":
            return attention.runner(spec, op.shape[5], pools.get(DTYPES[spec.dtype]))  # SDPA's default back end
        if op.kind == "elementwise":
            phase = "bwd" if op.name.endswith("_bwd") and memory.PASSES[spec.op][1] is not None else "fwd"
            return memory.runner(spec, phase, pools.get(DTYPES[spec.dtype]), seed)
        return optimizer.runner(int(op.shape[0]), "default", device, plan.optimizer_tensor_elements, seed)
    return [functools.partial(make, op, spec) for op, spec in zip(ops, specs)]


def traced_seconds(runs: list[tuple], device) -> list[float]:
    """For each (make, reps), make() building the op's callable: the median over repeats of its time in one
    torch.profiler trace: CUDA kernel time inside its record_function range on a GPU, the range's CPU (wall) time
    on a CPU. One op at a time: built, warmed up (3 calls), traced, and dropped before the next is built."""
    import torch  # noqa: PLC0415
    from torch.profiler import ProfilerActivity, profile, record_function  # noqa: PLC0415

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for j, (make, reps) in enumerate(runs):
            fn = make()
            for i in range(3):
                fn(i)
            if cuda:
                torch.cuda.synchronize(device)
            for i in range(reps):
                with record_function(f"clustersim_op_{j}"):
                    fn(i)
            if cuda:
                torch.cuda.synchronize(device)
            del fn
    spans: dict[str, list[float]] = {}
    for e in prof.events():
        if e.name.startswith("clustersim_op_"):
            # CPU: the range's wall time, as calibrate's timer sees a call (autograd engine included)
            spans.setdefault(e.name, []).append((e.device_time_total if cuda else e.cpu_time_total) * 1e-6)
    return [statistics.median(spans[f"clustersim_op_{j}"]) for j in range(len(runs))]


def compare(sc: Scenario, device) -> list[dict]:
    from calibrate.plan import scenario_compute_ops  # noqa: PLC0415

    cm = build_cost_model(sc)
    ops = scenario_compute_ops(sc)
    measured = [cm.profile.compute_time(op) for op in ops]
    predicted = [t if t is not None else cm.spec_compute_time(op) for op, t in zip(ops, measured)]
    reps = [int(min(50, max(5, TARGET_S / max(p, 1e-6)))) for p in predicted]
    runs = list(zip(op_runners(sc, ops, device), reps))
    traced = traced_seconds(runs, device)
    # an op whose runner launched no kernel (traced 0 s: its autograd call has nothing to run) has no error
    return [{"op": op.name, "kind": op.kind, "shape": list(op.shape), "predicted_s": p, "traced_s": t,
             "error": p / t - 1.0 if t > 0 else None, "from_profile": m is not None and t > 0}
            for op, m, p, t in zip(ops, measured, predicted, traced)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", help="a single-device scenario (default: see the module docstring)")
    ap.add_argument("--profile", help="calibration profile (default: calibrate/profiles/<this device>.json)")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        print("skipped: torch is not installed (pip install '.[calibrate]')")
        return 0
    from calibrate.cli import default_profile_path  # noqa: PLC0415
    from calibrate.provenance import device_name  # noqa: PLC0415
    from simulator.cost.profile_load import load_profile  # noqa: PLC0415

    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    profile = Path(args.profile) if args.profile else default_profile_path(device, device_name(device))
    if not profile.exists():
        print(f"skipped: no calibration profile for this {device.type} at {profile} "
              f"(run python -m calibrate {'--gpu 0' if device.type == 'cuda' else '--device cpu'})")
        return 0
    try:
        prof = load_profile(profile)
        if prof.provenance.device_type != device.type:
            print(f"skipped: {profile} was measured on {prof.provenance.device_type}, this run has {device.type}")
            return 0
        if args.scenario:
            sc = load_scenario(args.scenario, [f"cluster.profile={profile.resolve()}"])
        elif device.type == "cuda":  # on the topology of the profile's GPU (an H200's profile is refused on dgx-h100)
            on = [f"cluster.topology={prof.spec.topology}"] if prof.spec is not None else []
            sc = load_scenario(GPU_SCENARIO, [f"cluster.profile={profile.resolve()}", *on])
        else:
            sc = cpu_scenario(profile.resolve())
    except ScenarioError as e:
        print(f"profile_vs_trace: {e}", file=sys.stderr)
        return 2
    if sc.gpus != 1:
        print(f"skipped: {sc.name} runs on {sc.gpus} devices; this compares single-device op times")
        return 0
    if device.type == "cpu":
        torch.set_num_threads(prof.provenance.threads)
    rows = compare(sc, device)
    covered = [r for r in rows if r["from_profile"]]
    total_pred = sum(r["predicted_s"] for r in covered)
    total_traced = sum(r["traced_s"] for r in covered)
    total_err = total_pred / total_traced - 1.0 if total_traced else float("nan")
    within = sum(abs(r["error"]) <= args.tolerance for r in covered)
    if args.json:
        print(json.dumps({"scenario": sc.name, "profile": str(profile), "device": device_name(device), "rows": rows,
                          "total_error": total_err, "ops_within_tolerance": within, "ops_from_profile": len(covered)}))
    else:
        print(f"{sc.name} on {device_name(device)}, profile {profile}")
        print(f"{'op':<22} {'kind':<11} {'shape':<34} {'predicted us':>12} {'traced us':>10} {'error':>7}")
        for r in rows:
            if r["error"] is None:
                print(f"{r['op']:<22} {r['kind']:<11} {str(tuple(r['shape'])):<34} {r['predicted_s'] * 1e6:>12.1f} "
                      f"{'-':>10} {'-':>7}  (no kernel traced)")
                continue
            mark = "" if r["from_profile"] else "  (spec roofline: not in the profile)"
            ok = "" if abs(r["error"]) <= args.tolerance or not r["from_profile"] else " *"
            print(f"{r['op']:<22} {r['kind']:<11} {str(tuple(r['shape'])):<34} {r['predicted_s'] * 1e6:>12.1f} "
                  f"{r['traced_s'] * 1e6:>10.1f} {r['error']:>+7.1%}{ok}{mark}")
        print(f"\n{within} of {len(covered)} profiled ops within {args.tolerance:.0%} (* = outside); "
              f"time-weighted total {total_pred * 1e3:.2f} ms predicted vs {total_traced * 1e3:.2f} ms traced "
              f"({total_err:+.1%})")
    return 0 if abs(total_err) <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())

"""Where a replayed step's time goes on the GPU, against where the simulator puts it: a torch.profiler trace of one
step (`python -m calibrate replay SCENARIO --torch-trace FILE`, or `validation/replay_gpu.py --trace-mode MODE`)
summed by kernel class, beside the same step priced from a calibration profile (the simulator's own trace, summed
by the plan's op kinds).

    python validation/step_trace.py TRACE[.gz] --scenario FILE --profile FILE [--set KEY=VALUE ...] [--by-launcher N]
                                    [--json]

The scenario is priced on the topology of the profile's GPU unless `--set cluster.topology=...` says otherwise.

Kernel classes, by kernel name (`KERNEL_CLASSES`): attention (FlashAttention, cuDNN's fused attention, any SDPA
kernel), GEMM (cuBLAS / CUTLASS / nvjet kernels), optimizer (every kernel launched inside PyTorch's
`Optimizer.step` range, whatever its name), memory-bound (the rest: norms, activations, casts, the loss, copies).
It also prints the GPU's busy time (the union of kernel intervals) and the step's span (first kernel start to last
kernel end): a span well above the busy time is a step the GPU waited in (the host issuing ops; the profiler slows
the host too, `calibrate replay --torch-trace` records Python frames, so compare the span with the measured steps'
time as well), a busy time well above the predicted kernels' sum is kernels running slower in the step than they
were calibrated alone.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))

CLASSES = ("gemm", "attention", "memory-bound", "optimizer")
KERNEL_CLASSES = (("attention", ("flash", "fmha", "sdpa", "attention", "attn")),
                  ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "splitk")))
"""Name fragments (lower case) per class, tried in order (cuDNN's attention kernels also say sm90 / xmma)."""
OPTIMIZER_RANGE = "Optimizer.step"
"""The prefix of the CPU range torch.profiler records around every optimizer step (`Optimizer.step#AdamW.step`)."""
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
"""Trace categories of the host calls that launch kernels (cudaLaunchKernel; cuLaunchKernel from the driver API, which
cuBLAS's and Triton's kernels may use): their `correlation` names the kernel they launched."""
SDPA_LAUNCHERS = ("ScaledDotProduct", "aten::scaled_dot_product_attention", "aten::_scaled_dot_product")
"""Launchers (`_launcher`) of SDPA's forward op and backward nodes: every kernel they launch is attention, the helper
kernels too (cuDNN's backward runs a dO.O pass and zeroes and converts its dQ accumulator, memory-bound by name),
because calibrate's attention probe times the whole SDPA call (calibrate/probes/attention.py)."""
SIMULATOR_KIND = {"gemm": "gemm", "attention": "attention", "elementwise": "memory-bound", "optimizer": "optimizer"}
"""The plan's op kinds (simulator.plan.opgraph.Compute.kind) as kernel classes."""


@dataclass(frozen=True)
class StepKernels:
    by_class_s: dict[str, float]
    kernels: int
    busy_s: float
    """Union of the kernels' intervals."""
    span_s: float
    """First kernel's start to last kernel's end."""


def read_trace(path: Path) -> dict:
    """A Chrome trace as torch.profiler writes it, or gzipped (`validation/gpu_session.sh` gzips it)."""
    if path.suffix == ".gz":
        import gzip  # noqa: PLC0415
        with gzip.open(path, "rt") as f:
            return json.load(f)
    return json.loads(path.read_text())


AUTOGRAD_NODE = "autograd::engine::evaluate_function: "
"""The prefix of the CPU range autograd records around each backward node it runs (`... ToCopyBackward0`)."""


def _launcher(names: list[str]) -> str:
    """What launched a kernel, from the CPU ranges open at its launch (outermost first): the optimizer step, else
    the backward's autograd node, else the outermost ATen op of the forward."""
    if any(n.startswith(OPTIMIZER_RANGE) for n in names):
        return OPTIMIZER_RANGE
    node = next((n for n in names if n.startswith(AUTOGRAD_NODE)), None)
    if node is not None:
        return node[len(AUTOGRAD_NODE):]
    return next((n for n in names if n.startswith("aten::")), "other")


def launchers(events: list[dict]) -> dict[int, str]:
    """Each launch's correlation id -> what launched it (`_launcher`), by a sweep over each thread's CPU ranges."""
    by_thread: dict = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        if e.get("cat") in ("cpu_op", "user_annotation"):
            by_thread.setdefault(e.get("tid"), []).append((e["ts"], 0, -e.get("dur", 0.0), e))
        elif e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {}):
            by_thread.setdefault(e.get("tid"), []).append((e["ts"], 1, 0.0, e))
    out: dict[int, str] = {}
    for items in by_thread.values():
        items.sort(key=lambda x: x[:3])  # ranges before launches at one time, outer ranges before inner
        open_ranges: list[dict] = []
        for ts, is_launch, _, e in items:
            while open_ranges and open_ranges[-1]["ts"] + open_ranges[-1].get("dur", 0.0) < ts:
                open_ranges.pop()
            if is_launch:
                out[e["args"]["correlation"]] = _launcher([r["name"] for r in open_ranges])
            else:
                open_ranges.append(e)
    return out


def by_launcher(trace: dict) -> list[dict]:
    """Kernel time grouped by what launched each kernel and its class, largest first (microsecond trace times)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    who = launchers(events)
    groups: dict[tuple[str, str], list[float]] = {}
    for k in events:
        if k.get("ph") == "X" and k.get("cat") == "kernel":
            key = (who.get(k.get("args", {}).get("correlation"), "other"), kernel_class(k["name"]))
            g = groups.setdefault(key, [0, 0.0])
            g[0] += 1
            g[1] += k["dur"] * 1e-6
    return [{"launcher": a, "class": c, "kernels": n, "traced_s": t}
            for (a, c), (n, t) in sorted(groups.items(), key=lambda kv: -kv[1][1])]


def kernel_class(name: str) -> str:
    low = name.lower()
    for cls, fragments in KERNEL_CLASSES:
        if any(f in low for f in fragments):
            return cls
    return "memory-bound"


def traced_kernels(trace: dict) -> StepKernels:
    """Kernel time by class in a Chrome trace of torch.profiler (times in microseconds)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    ranges = [(e["ts"], e["ts"] + e.get("dur", 0.0)) for e in events
              if e.get("ph") == "X" and str(e.get("name", "")).startswith(OPTIMIZER_RANGE)]
    launched_in_step = {e["args"]["correlation"] for e in events
                        if e.get("ph") == "X" and e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {})
                        and any(a <= e["ts"] <= b for a, b in ranges)}
    who = launchers(events)
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    by_class = dict.fromkeys(CLASSES, 0.0)
    for k in kernels:
        corr = k.get("args", {}).get("correlation")
        cls = ("optimizer" if corr in launched_in_step else
               "attention" if who.get(corr, "").startswith(SDPA_LAUNCHERS) else kernel_class(k["name"]))
        by_class[cls] += k["dur"] * 1e-6
    spans = sorted((k["ts"], k["ts"] + k["dur"]) for k in kernels)
    busy, end = 0.0, float("-inf")
    for a, b in spans:
        if b > end:
            busy += b - max(a, end)
            end = b
    span = max(b for _, b in spans) - spans[0][0] if spans else 0.0
    return StepKernels(by_class, len(kernels), busy * 1e-6, span * 1e-6)


def predicted_by_class(sc) -> dict[str, float]:
    """The step as the simulator prices it, its compute summed by kernel class (the engine's trace, one event per
    op and micro-batch)."""
    import tempfile  # noqa: PLC0415

    from calibrate.plan import scenario_compute_ops  # noqa: PLC0415
    from calibrate.replay.plan import as_replayed  # noqa: PLC0415
    from simulator.run import simulate  # noqa: PLC0415

    replayed = as_replayed(sc)
    kinds = {op.name: SIMULATOR_KIND.get(op.kind, "memory-bound") for op in scenario_compute_ops(replayed)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        report = simulate(replayed, trace_path=path)
        events = json.loads(path.read_text())["traceEvents"]
    out = dict.fromkeys(CLASSES, 0.0)
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "compute":
            continue
        op = str(e["name"]).rsplit(" ", 1)[-1]
        if op in kinds:
            out[kinds[op]] += e["dur"] * 1e-6
    out["optimizer"] = report["breakdown"]["optimizer_s"]  # the trace names its one event "optimizer step"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="torch.profiler Chrome trace of one step")
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--profile", required=True, help="the calibration profile the step is priced from")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--by-launcher", type=int, default=0, metavar="N",
                    help="also list the N largest groups of kernels by what launched them (autograd node or ATen op)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from replay_gpu import profile_topology  # noqa: PLC0415
    from simulator.errors import ScenarioError  # noqa: PLC0415
    from simulator.scenario import load_scenario  # noqa: PLC0415
    try:
        trace = read_trace(Path(args.trace))
        sets = (*args.set, *profile_topology(json.loads(Path(args.profile).read_text()), args.set))
        sc = load_scenario(args.scenario, [*sets, f"cluster.profile={args.profile}"])
    except (OSError, ValueError, ScenarioError) as e:
        print(f"step_trace: {e}", file=sys.stderr)
        return 2
    traced = traced_kernels(trace)
    if traced.kernels == 0:
        print(f"step_trace: {args.trace} has no GPU kernel events (a trace of a CPU run?); nothing to compare",
              file=sys.stderr)
        return 2
    predicted = predicted_by_class(sc)
    rows = [{"class": c, "predicted_s": predicted[c], "traced_s": traced.by_class_s[c],
             "error": predicted[c] / traced.by_class_s[c] - 1.0 if traced.by_class_s[c] else None} for c in CLASSES]
    total = {"predicted_s": sum(predicted.values()), "kernels_s": sum(traced.by_class_s.values()),
             "busy_s": traced.busy_s, "span_s": traced.span_s, "kernels": traced.kernels}
    groups = by_launcher(trace)[:args.by_launcher] if args.by_launcher > 0 else []
    if args.json:
        print(json.dumps({"rows": rows, "total": total, **({"by_launcher": groups} if groups else {})}, indent=1))
        return 0
    print(f"{'class':14} {'predicted ms':>13} {'traced ms':>10} {'error':>8}")
    for r in rows:
        err = f"{r['error']:+7.1%}" if r["error"] is not None else "      -"
        print(f"{r['class']:14} {r['predicted_s'] * 1e3:13.1f} {r['traced_s'] * 1e3:10.1f} {err:>8}")
    print(f"{'all kernels':14} {total['predicted_s'] * 1e3:13.1f} {total['kernels_s'] * 1e3:10.1f} "
          f"{total['predicted_s'] / max(total['kernels_s'], 1e-12) - 1:+7.1%}")
    print(f"traced step: {traced.kernels} kernels, GPU busy {traced.busy_s * 1e3:.1f} ms of a {traced.span_s * 1e3:.1f} ms"
          f" span ({1 - traced.busy_s / max(traced.span_s, 1e-12):.1%} idle)")
    if groups:
        print(f"\n{'launched by':48} {'class':13} {'kernels':>8} {'traced ms':>10}")
        for g in groups:
            print(f"{g['launcher'][:48]:48} {g['class']:13} {g['kernels']:8d} {g['traced_s'] * 1e3:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m calibrate replay SCENARIO [--steps N] [--json] ...` (docs/interface.md): run the scenario's plan
for real with torch.distributed, check its losses against a single-process run, and print predicted
vs measured. `calibrate/__main__.py` dispatches here; `python -m calibrate.replay` works too.

Exit codes: 0 ran and the losses and gradient norms match the reference (or were not checked); 1 a rank
failed, the run timed out, or the losses or gradient norms differ from the reference; 2 bad input (one line on stderr, before any process starts).
"""
from __future__ import annotations

import argparse
import json
import math
import sys

from simulator.errors import ScenarioError
from simulator.progress import PhaseLines, Stopwatch
from simulator.scenario import load_scenario

from .launch import ReplayFailed, launch, under_torchrun
from .plan import ReplayOptions, plan_replay
from .report import build_report, format_table


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line on stderr, exit 2 (argparse would print the usage too)
        print(f"error: {self.prog}: {' '.join(message.split())}", file=sys.stderr)
        sys.exit(2)


MAX_STEPS = 100_000
"""--steps: each is a real optimizer step of the scenario on this machine."""
MAX_TIMEOUT_S = 7 * 24 * 3600.0
"""--timeout: a week."""


def check_numbers(args) -> None:
    """Every numeric flag in range (finite, bounded), before the scenario is read or a rank started."""
    def bad(flag, value, allowed):
        raise ScenarioError(flag, f"{value} is out of range", allowed)
    if not 1 <= args.steps <= MAX_STEPS:
        bad("--steps", args.steps, f"1 .. {MAX_STEPS:,}")
    if not 0 <= args.warmup < args.steps:
        bad("--warmup", args.warmup, "0 <= warmup < steps")
    if args.threads is not None and not 1 <= args.threads <= 1024:
        bad("--threads", args.threads, "1 .. 1024")
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= MAX_TIMEOUT_S):
        bad("--timeout", args.timeout, f"seconds in (0, {MAX_TIMEOUT_S:.0f}]")
    if args.rtol is not None and not (math.isfinite(args.rtol) and 0 < args.rtol <= 1):
        bad("--rtol", args.rtol, "a relative tolerance in (0, 1]")
    if not (math.isfinite(args.lr) and 0 < args.lr <= 1e3):
        bad("--lr", args.lr, "a learning rate in (0, 1000]")
    if not 0 <= args.seed <= 2**63 - 1:
        bad("--seed", args.seed, "0 .. 2**63-1")
    if args.torch_trace:
        from simulator.outputs import check_output  # noqa: PLC0415
        check_output(args.torch_trace, "--torch-trace")


def _parser() -> argparse.ArgumentParser:
    d = ReplayOptions()
    ap = _Parser(prog="python -m calibrate replay",
                                 description="Run a scenario's parallel plan for real and compare it with the simulator.")
    ap.add_argument("scenario", help="scenario YAML")
    ap.add_argument("--steps", type=int, default=d.steps, help=f"optimizer steps, warm-up included (default {d.steps})")
    ap.add_argument("--warmup", type=int, default=d.warmup, help=f"steps left out of the timing median (default {d.warmup})")
    ap.add_argument("--json", action="store_true", help="print one JSON object (docs/interface.md) instead of the table")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario key (dotted path)")
    ap.add_argument("--device", default=d.device, choices=("auto", "cpu", "cuda"),
                    help="auto: cpu for the cpu-host topology, cuda otherwise")
    ap.add_argument("--threads", type=int, default=None, help="torch threads per rank (default: cores / ranks)")
    ap.add_argument("--timeout", type=float, default=d.timeout_s, help=f"seconds before the whole run is stopped (default {d.timeout_s:.0f})")
    ap.add_argument("--torch-trace", default=None, metavar="FILE", help="torch.profiler Chrome trace (with Python frames) of one extra step, per rank")
    ap.add_argument("--rtol", type=float, default=None, help="loss tolerance vs the reference (default 1e-4 fp32, 2e-2 bf16)")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--no-reference", action="store_true", help="skip the single-process loss check")
    ap.add_argument("--memory-timeline", default=None, metavar="FILE",
                    help="instead of the replay: record PyTorch's CPU memory timeline of the scenario's one-process "
                         "run (all degrees 1) into FILE as JSON; validation/memory_timeline.py compares it with the simulation")
    return ap


def main(argv: list[str]) -> int:
    from calibrate.cli import terminate_on_sigterm  # noqa: PLC0415
    terminate_on_sigterm()  # `python -m calibrate.replay` comes here directly
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse: usage errors are exit 2, --help is 0
        return int(e.code or 0)
    clock = Stopwatch("replay")
    try:
        check_numbers(args)
        options = ReplayOptions(steps=args.steps, warmup=args.warmup, seed=args.seed, lr=args.lr, device=args.device,
                                threads=args.threads, timeout_s=args.timeout, torch_trace=args.torch_trace,
                                rtol=args.rtol, reference=not args.no_reference)
        plan = plan_replay(load_scenario(args.scenario, args.set), options)
        if plan.scenario.cluster.profile != "default":  # read and checked now, not after the ranks ran
            from simulator.cost.profile_load import load_profile, profile_warnings  # noqa: PLC0415
            for w in profile_warnings(plan.scenario, load_profile(plan.scenario.cluster.profile)):
                print(f"warning: {w}", file=sys.stderr)
    except ScenarioError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if args.memory_timeline:
        return _memory_timeline(plan.scenario, args)
    try:
        return _run(plan, options, args, clock)
    except KeyboardInterrupt:
        print("error: replay interrupted; every rank was stopped", file=sys.stderr)
        return 130


def _memory_timeline(sc, args) -> int:
    """`--memory-timeline FILE`: PyTorch's memory as the step runs (calibrate/replay/memory_timeline.py)."""
    from simulator.outputs import Outputs, check_output, strict_json  # noqa: PLC0415
    from .memory_timeline import record_memory_timeline  # noqa: PLC0415
    try:
        check_output(args.memory_timeline, "--memory-timeline", (".json",))
        rec = record_memory_timeline(sc, steps=args.steps, seed=args.seed, threads=args.threads or 1)
    except (ValueError, ScenarioError) as e:
        print(f"error: --memory-timeline: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    with Outputs() as out:
        with open(out.temp(args.memory_timeline), "w") as f:
            f.write(strict_json(rec, indent=1))
        out.commit()
    peak = max(b for _, b in rec["levels"]) if rec["levels"] else 0
    print(f"memory timeline: {len(rec['levels'])} levels over {len(rec['passes'])} passes, peak {peak / 2**20:.2f} MiB "
          f"-> {args.memory_timeline}")
    return 0


def _run(plan, options, args, clock) -> int:
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    from .host_speed import host_speed
    profile = plan.scenario.cluster.profile
    phase = PhaseLines("replay", enabled=None if not under_torchrun() else False)  # on a terminal only
    if not under_torchrun():
        phase("timing the host against the profile")
    before = host_speed(profile, plan.device) if not under_torchrun() else None
    phase(f"{plan.world} ranks on {plan.device}, {options.steps} steps")
    try:
        measured = launch(plan)
    except ReplayFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if measured is None:  # a torchrun rank other than 0
        return 0
    phase("timing the host again")
    after = host_speed(profile, plan.device) if before is not None else None
    from .train import run_reference
    if options.reference:
        phase("single-process reference run")
    reference = run_reference(plan) if options.reference else None
    report = build_report(plan, measured, reference, host=(before, after))
    print(json.dumps(_finite(report), allow_nan=False) if args.json else format_table(report), flush=True)
    clock.report()  # stderr: stdout stays one JSON object with --json
    return 1 if False in (report["loss_matches_reference"], report["grad_norm_matches_reference"]) else 0


def _finite(obj):
    """The report with every NaN or infinite number as null: --json is strict JSON (a timing that failed to
    measure is no number)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj

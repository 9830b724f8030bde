"""`python -m calibrate replay SCENARIO [--steps N] [--json] ...` (docs/interface.md): run the scenario's plan
for real with torch.distributed, check its losses against a single-process run, and print predicted
vs measured. `calibrate/__main__.py` dispatches here; `python -m calibrate.replay` works too.

Exit codes: 0 ran and the losses and gradient norms match the reference (or were not checked); 1 a rank
failed, the run timed out, or the losses or gradient norms differ from the reference; 2 bad input (one line on stderr, before any process starts).
"""
from __future__ import annotations

import argparse
import json
import sys

from simulator.errors import ScenarioError
from simulator.progress import PhaseLines, Stopwatch
from simulator.scenario import load_scenario

from .launch import ReplayFailed, launch, under_torchrun
from .plan import ReplayOptions, plan_replay
from .report import build_report, format_table


def _parser() -> argparse.ArgumentParser:
    d = ReplayOptions()
    ap = argparse.ArgumentParser(prog="python -m calibrate replay",
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
    return ap


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse: usage errors are exit 2, --help is 0
        return int(e.code or 0)
    options = ReplayOptions(steps=args.steps, warmup=args.warmup, seed=args.seed, lr=args.lr, device=args.device,
                            threads=args.threads, timeout_s=args.timeout, torch_trace=args.torch_trace,
                            rtol=args.rtol, reference=not args.no_reference)
    clock = Stopwatch("replay")
    try:
        plan = plan_replay(load_scenario(args.scenario, args.set), options)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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
    print(json.dumps(report, indent=None) if args.json else format_table(report), flush=True)
    clock.report()  # stderr: stdout stays one JSON object with --json
    return 1 if False in (report["loss_matches_reference"], report["grad_norm_matches_reference"]) else 0

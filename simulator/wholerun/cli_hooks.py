"""`run --tokens 15T ...`: the flags of the whole-run section and the glue that prices each phase with
`run.simulate` and adds `whole_run` to the report (cli.cmd_run calls `add_arguments` and `attach`)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..errors import ScenarioError
from ..scenario import Scenario, read_yaml, scenario_from_mapping
from ..run_spec import Phase, parse_tokens


def add_arguments(p) -> None:
    g = p.add_argument_group("whole training run (issue 41)")
    g.add_argument("--tokens", metavar="N", help="train N tokens (K/M/B/T suffixes, e.g. 15T): adds the whole-run section")
    g.add_argument("--price-per-gpu-hour", type=float, metavar="USD", help="price for the cost (default: a list-price snapshot)")
    g.add_argument("--failures-per-gpu-hour", type=float, metavar="RATE",
                   help="interruptions per GPU-hour (default: Kokolis et al. 2024, RSC-1)")
    g.add_argument("--checkpoint-interval", type=float, metavar="S", help="compute seconds between checkpoints (default: optimal)")
    g.add_argument("--async-checkpoint", action="store_true", help="asynchronous checkpoints (stall only for the host copy)")
    g.add_argument("--phase-estimator", choices=("engine", "analytic"), default="analytic",
                   help="estimator for phases whose shape differs from the scenario's (default analytic, for speed)")
    g.add_argument("--run-plot", metavar="FILE", help="write tokens against wall-clock days (PNG/SVG/PDF)")


def _phase_scenario(path: str, overrides: list[str], phase: Phase) -> Scenario:
    raw = read_yaml(Path(path))
    return scenario_from_mapping(raw, overrides + phase.scenario_overrides(), base_dir=Path(path).parent)


def check(args, sc: Scenario) -> None:
    """Bad whole-run flags fail before anything is simulated or written."""
    if args.tokens is not None:
        parse_tokens(args.tokens, "--tokens")
    if args.run_plot:
        if args.tokens is None and not sc.run.phases:
            raise ScenarioError("--run-plot", "needs a token count", "--tokens N, or run.tokens / run.phases in the scenario")
        if Path(args.run_plot).suffix.lower() not in (".png", ".svg", ".pdf"):
            raise ScenarioError("--run-plot", f"{args.run_plot!r} has no .png, .svg or .pdf suffix")
    for flag, value in (("--price-per-gpu-hour", args.price_per_gpu_hour), ("--failures-per-gpu-hour", args.failures_per_gpu_hour),
                        ("--checkpoint-interval", args.checkpoint_interval)):
        if value is not None and not value >= 0 or (flag == "--checkpoint-interval" and value is not None and value <= 0):
            raise ScenarioError(flag, f"{value} is out of range", "a positive number" if flag == "--checkpoint-interval" else ">= 0")


def attach(args, sc: Scenario, report: dict):
    """Price every phase and return the `WholeRun` (None when no tokens were given). The phase with the
    scenario's own shape reuses `report`; others are simulated with --phase-estimator."""
    from ..run import simulate
    from .model import whole_run

    spec = sc.run
    if args.tokens is not None:
        if len(spec.phases) > 1:
            raise ScenarioError("--tokens", "the scenario's run.phases set their own tokens", "drop --tokens or the phases")
        spec = replace(spec, phases=(Phase(tokens=parse_tokens(args.tokens, "--tokens"), name="whole run"),))
    if not spec.phases:
        return None
    priced = []
    for phase in spec.phases:
        if not phase.scenario_overrides():
            priced.append((sc, phase, report["iteration_time_s"], report["estimator"]))
            continue
        psc = _phase_scenario(args.scenario, list(args.set or []), phase)
        rep = simulate(psc, estimator=args.phase_estimator)
        priced.append((psc, phase, rep["iteration_time_s"], rep["estimator"]))
    ck = spec.checkpoint
    return whole_run(priced, per_gpu_hour=args.failures_per_gpu_hour if args.failures_per_gpu_hour is not None
                     else spec.failures_per_gpu_hour,
                     price_per_gpu_hour=args.price_per_gpu_hour if args.price_per_gpu_hour is not None
                     else spec.price_per_gpu_hour,
                     interval_s=args.checkpoint_interval if args.checkpoint_interval is not None else ck.interval_s,
                     interval_steps=None if args.checkpoint_interval is not None else ck.interval_steps,
                     asynchronous=args.async_checkpoint or ck.async_)

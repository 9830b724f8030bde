"""`python -m simulator ...`: argument parsing and exit codes (0 ok, 2 bad input, 1 anything else).

Bad input raises `ScenarioError` anywhere below; it is caught here and printed as one line, with no
traceback. Output files are written only after the simulation succeeded (nothing half-written).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import ScenarioError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own exit code is 2 too; keep its message to one line
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def _writable(path: str | None, flag: str) -> None:
    if path is None:
        return
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise ScenarioError(flag, f"directory {parent} does not exist")


def cmd_run(args) -> int:
    from .scenario import load_scenario

    for flag, value in (("--trace", args.trace), ("--plot", args.plot), ("--memory-plot", args.memory_plot),
                        ("--run-plot", args.run_plot)):
        _writable(value, flag)
    sc = load_scenario(args.scenario, args.set or [])
    from .wholerun import cli_hooks
    cli_hooks.check(args, sc)
    from .report import format_report
    from .run import simulate

    report = simulate(sc, estimator=args.estimator, full=args.full, trace_path=args.trace, plot_path=args.plot,
                      memory_plot_path=args.memory_plot)
    run = cli_hooks.attach(args, sc, report)  # the whole training run, when tokens are given (issue 41)
    if run is not None:
        report["whole_run"] = run.to_json()
        if args.run_plot:
            from .wholerun.plot import plot_run
            plot_run(run, args.run_plot, title=sc.name)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
        if run is not None:
            from .wholerun.report import format_whole_run
            print("\n" + format_whole_run(report["whole_run"]))
        for label, value in (("trace", args.trace), ("timeline plot", args.plot), ("memory plot", args.memory_plot),
                             ("run plot", args.run_plot if run is not None else None)):
            if value:
                print(f"  {label} written to {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m simulator", description="clustersim: simulate LLM training on a cluster")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="simulate one training step of a scenario and report")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument("--json", action="store_true", help="print the report as one JSON object")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario key (dotted path)")
    run.add_argument("--estimator", choices=("engine", "analytic"), default="engine",
                     help="discrete-event engine (default) or the closed-form fast path")
    run.add_argument("--full", action="store_true", help="simulate every rank instead of one per pipeline stage")
    run.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace (JSON)")
    run.add_argument("--plot", metavar="FILE", help="write a timeline plot (PNG/SVG/PDF)")
    run.add_argument("--memory-plot", metavar="FILE", help="write memory over time per stage (PNG/SVG/PDF)")
    from .wholerun.cli_hooks import add_arguments
    add_arguments(run)
    run.set_defaults(func=cmd_run)
    for name in ("collectives_cmd", "sweep_cmd", "compare_cmd", "validate_cmd", "docs_cmd"):
        try:
            module = __import__(f"simulator.{name}", fromlist=["add_parser"])
        except ModuleNotFoundError as e:
            if e.name == f"simulator.{name}":
                continue  # that command has not landed
            raise
        sub_parser = module.add_parser(sub)
        if sub_parser is not None and sub_parser.get_default("func") is None:
            sub_parser.set_defaults(func=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0

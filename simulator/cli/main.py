"""`python -m simulator ...`: argument parsing and exit codes (0 ok, 2 bad input, 1 anything else).

Bad input raises `ScenarioError` anywhere below; it is caught here and printed as one line, with no
traceback. Output paths are checked before simulating and the files written whole or not at all
(`outputs.py`); --json is strict JSON.
"""
from __future__ import annotations

import argparse
import sys

from ..errors import ScenarioError
from .args import overrides


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own exit code is 2 too; one line, no usage text
        print(f"error: {self.prog}: {' '.join(message.split())}", file=sys.stderr)
        sys.exit(2)


def cmd_run(args) -> int:
    from ..outputs import Outputs, check_distinct, check_output, strict_json, PLOT_SUFFIXES  # noqa: PLC0415
    from ..scenario import load_scenario

    files = {"--trace": args.trace, "--plot": args.plot, "--memory-plot": args.memory_plot, "--run-plot": args.run_plot}
    for flag, value in files.items():
        if value is not None:
            check_output(value, flag, None if flag == "--trace" else PLOT_SUFFIXES)
    check_distinct(files)
    sc = load_scenario(args.scenario, overrides(args))
    from ..wholerun import cli_hooks  # noqa: PLC0415
    cli_hooks.check(args, sc)
    from ..report.text import format_report  # noqa: PLC0415
    from ..run import simulate  # noqa: PLC0415

    with Outputs() as out:
        temp = {flag: out.temp(v) if v else None for flag, v in files.items()}
        report = simulate(sc, estimator=args.estimator, full=args.full, trace_path=temp["--trace"], plot_path=temp["--plot"],
                          memory_plot_path=temp["--memory-plot"])
        run = cli_hooks.attach(args, sc, report)  # the whole training run, when tokens are given
        if run is not None:
            report["whole_run"] = run.to_json()
            if args.run_plot:
                from ..wholerun.plot import plot_run  # noqa: PLC0415
                plot_run(run, temp["--run-plot"], title=sc.name)
        if args.json:
            text = strict_json(report, indent=2)
        else:
            text = format_report(report)
            if run is not None:
                from ..wholerun.report import format_whole_run  # noqa: PLC0415
                text += "\n\n" + format_whole_run(report["whole_run"])
        out.commit()
    print(text)
    if not args.json:
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
    run.add_argument("--allow-profile-mismatch", action="store_true",
                     help="price with a calibration profile of another device kind than the topology's GPU (the report warns)")
    from ..wholerun.cli_hooks import add_arguments  # noqa: PLC0415
    add_arguments(run)
    run.set_defaults(func=cmd_run)
    from . import collectives_cmd, compare_cmd, docs_cmd, sweep_cmd, validate_cmd  # noqa: PLC0415
    for module in (collectives_cmd, sweep_cmd, compare_cmd, validate_cmd, docs_cmd):
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
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except RecursionError:  # a structure nested past what inputs.MAX_DEPTH lets through should not exist
        print("error: input nested too deeply", file=sys.stderr)
        return 2
    except OSError as e:
        from ..outputs import write_error  # noqa: PLC0415
        if isinstance(e, BrokenPipeError):
            return 0
        err = write_error(e)
        if err is None:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0

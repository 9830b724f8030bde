"""`python -m simulator validate`: simulate reference training runs and print how far off we are.

    python -m simulator validate [--set playbook|published|all] [--split fit|validation|all] [--sample N]
                                 [--estimator analytic|engine] [--network measured|spec] [--csv FILE]
                                 [--verbose] [--json | --markdown]
                                 [--plot FILE] [--profile FILE]

The work is in `validate.py`; this file parses options (bad ones exit 2) and prints; progress on a
terminal and the wall time at the end go to stderr (`progress.py`).
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import ScenarioError
from ..validate.playbook import NETWORK, NETWORK_CHOICES


def add_parser(sub):
    p = sub.add_parser("validate", help="predicted vs measured on real training runs (playbook, published)")
    p.add_argument("--set", dest="sets", choices=("playbook", "published", "all"), default="all",
                   help="which reference runs (default all)")
    p.add_argument("--split", choices=("fit", "validation", "all"), default="all",
                   help="playbook split: fit = 1B/3B/8B, validation = 80B/469G (default all)")
    p.add_argument("--sample", type=int, metavar="N",
                   help="a deterministic stratified sample of N runs (fast enough for CI)")
    p.add_argument("--estimator", choices=("analytic", "engine"), default="analytic",
                   help="closed-form estimate (default; 4,000 runs in minutes) or the discrete-event engine")
    p.add_argument("--network", choices=NETWORK_CHOICES, default=NETWORK,
                   help="playbook jobs: each priced with the NVLink/EFA busbw nanotron measured for it (default), "
                        "or all with the topology YAML")
    p.add_argument("--csv", metavar="FILE", help="the playbook CSV (default: $CLUSTERSIM_PLAYBOOK_CSV, else "
                                                 "validation/data/playbook/nanotron_ultrascale_runs.csv)")
    p.add_argument("--verbose", "-v", action="store_true", help="also print predicted vs measured per run")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object (with --verbose: per run too)")
    out.add_argument("--markdown", action="store_true", help="print only the results table, in markdown")
    p.add_argument("--plot", metavar="FILE", help="write predicted vs measured (log-log) to FILE (PNG/SVG/PDF)")
    p.add_argument("--profile", metavar="FILE", help="price every reference run on this calibration profile's GPU from "
                                                     "it (python -m calibrate --gpu N); the others keep the published data")
    return p


def run(args) -> int:
    from ..progress import PhaseProgress, Stopwatch  # noqa: PLC0415
    from ..validate.accuracy import validate  # noqa: PLC0415
    from ..validate.tables import format_text, markdown_table, plot, to_json  # noqa: PLC0415

    clock = Stopwatch("validate")

    if args.sample is not None and args.sample < 1:
        raise ScenarioError("--sample", f"{args.sample}", "a positive number of runs")
    from ..outputs import PLOT_SUFFIXES, Outputs, check_output, strict_json  # noqa: PLC0415
    if args.plot:
        check_output(args.plot, "--plot", PLOT_SUFFIXES)
    if args.csv and not Path(args.csv).is_file():
        raise ScenarioError("--csv", f"no such file {args.csv}")
    if args.profile and not Path(args.profile).is_file():
        raise ScenarioError("--profile", f"no such file {args.profile}", "a calibration profile (JSON)")
    sets = ("playbook", "published") if args.sets == "all" else (args.sets,)

    with PhaseProgress() as bar:  # on a terminal only, on stderr
        result = validate(sets=sets, split=args.split, sample=args.sample, estimator=args.estimator, csv=args.csv,
                          progress=lambda i, n: bar("reference runs simulated", i, n), network=args.network,
                          profile=args.profile)
    if not result["outcomes"]:
        raise ScenarioError("--set/--split", "no reference runs selected")
    if args.plot:
        with Outputs() as out:
            plot(result, out.temp(args.plot))
            out.commit()
    if args.json:
        print(strict_json(to_json(result, args.verbose), indent=1, default=str))
    elif args.markdown:
        print(markdown_table(result))
    else:
        if result["profile"] is not None:
            p = result["profile"]
            print(f"{p['runs']} runs on {p['gpu']} priced from the profile {p['path']}\n")
        print(format_text(result, args.verbose))
        if args.plot:
            print(f"  plot written to {args.plot}")
    sys.stdout.flush()
    clock.report()
    return 0

"""`python -m simulator compare A.yaml B.yaml ...`: the reports side by side.

One column per scenario, one row per number of the `run --json` report; in each row the best value
is marked `*` (higher is better for throughput, MFU and free memory; lower for time, bubble, exposed
communication and memory), and layout rows whose values differ are marked `!`. A closing sentence
says why the fastest beats the next (`sweep_cmd.explain_win`). `--json` prints the reports and, per
row, the indices of the best.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import ScenarioError
from ..report.text import memory_verdict

LAYOUT_ROWS = ("gpus", "dp", "tp", "pp", "cp", "ep", "zero", "sp", "pp_schedule", "vpp", "micro_batch", "micro_batches", "recompute")
METRIC_ROWS = (
    # (key, label, format, better: +1 higher, -1 lower)
    ("iteration_time_s", "step time (s)", "{:.3f}", -1),
    ("tokens_per_s", "tokens/s", "{:,.0f}", +1),
    ("tokens_per_s_per_gpu", "tokens/s per GPU", "{:,.1f}", +1),
    ("model_tflops_per_gpu", "model TFLOP/s per GPU", "{:.1f}", +1),
    ("mfu", "MFU", "{:.1%}", +1),
    ("bubble_fraction", "bubble", "{:.1%}", -1),
    ("overlap_fraction", "comm hidden", "{:.1%}", +1),
    ("breakdown.compute_s", "compute (s)", "{:.3f}", -1),
    ("breakdown.recompute_s", "recompute (s)", "{:.3f}", -1),
    ("breakdown.bubble_s", "bubble (s)", "{:.3f}", -1),
    ("comm.tp.exposed_s", "TP exposed (s)", "{:.3f}", -1),
    ("comm.dp.exposed_s", "DP exposed (s)", "{:.3f}", -1),
    ("comm.pp.exposed_s", "PP exposed (s)", "{:.3f}", -1),
    ("comm.cp.exposed_s", "CP exposed (s)", "{:.3f}", -1),
    ("comm.ep.exposed_s", "EP exposed (s)", "{:.3f}", -1),
    ("breakdown.optimizer_s", "optimizer (s)", "{:.3f}", -1),
    ("memory.peak_gib", "peak memory (GiB)", "{:.1f}", -1),
    ("memory.free_gib", "free memory (GiB)", "{:.1f}", +1),
)
RELATIVE_TIE = 1e-6
"""Values this close (relative) are equally best."""


def _get(report: dict, key: str):
    node = report
    for part in key.split("."):
        if part == "free_gib" and part not in node:  # a report from before the key existed
            return node["capacity_gib"] - node["peak_gib"]
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return None
    return node


def best_indices(values: list, better: int) -> list[int]:
    """Indices of the best value(s) in a row (None never wins; all-equal rows mark nobody)."""
    nums = [(i, v) for i, v in enumerate(values) if isinstance(v, (int, float))]
    if len(nums) < 2:
        return []
    top = max(v * better for _, v in nums)
    best = [i for i, v in nums if abs(v * better - top) <= RELATIVE_TIE * max(abs(top), 1e-12)]
    return [] if len(best) == len(nums) else best


def compare_rows(reports: list[dict]) -> list[dict]:
    """[{"row", "values": [formatted], "best": [indices], "differs": bool}] for layout and metric rows."""
    rows = []
    for key in LAYOUT_ROWS:
        vals = [r["gpus"] if key == "gpus" else r["layout"].get(key) for r in reports]
        rows.append({"row": key, "values": [str(v) for v in vals], "best": [], "differs": len(set(map(str, vals))) > 1})
    for key, label, fmt, better in METRIC_ROWS:
        vals = [_get(r, key) for r in reports]
        if all(v in (None, 0, 0.0) for v in vals) and key.startswith(("comm.", "breakdown.")):
            continue
        rows.append({"row": label, "key": key, "values": ["-" if v is None else fmt.format(v) for v in vals],
                     "raw": vals, "best": best_indices(vals, better), "differs": len(set(map(str, vals))) > 1})
    said = [memory_verdict(r["memory"]) for r in reports]
    rows.append({"row": "fits in memory", "values": said, "best": [], "differs": len(set(said)) > 1})
    rows.append({"row": "estimator", "values": [r["estimator"] for r in reports], "best": [], "differs": False})
    return rows


def format_compare(names: list[str], reports: list[dict], rows: list[dict]) -> str:
    cells = [["", *names]] + [[("! " if r["differs"] and not r["best"] else "  ") + r["row"],
                               *[v + (" *" if i in r["best"] else "  ") for i, v in enumerate(r["values"])]] for r in rows]
    widths = [max(len(row[c]) for row in cells) for c in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("* best in its row; ! layout keys that differ")
    return "\n".join(lines) + "\n"


def why_fastest(scenarios, reports) -> str:
    """`sweep_cmd.explain_win` for the fastest against the next fastest."""
    from ..sweep.tasks import Evaluation
    from ..sweep.space import layout_of  # noqa: PLC0415
    from .sweep_cmd import explain_win  # noqa: PLC0415
    order = sorted(range(len(reports)), key=lambda i: reports[i]["iteration_time_s"])
    a, b = order[0], order[1]
    ev = [Evaluation(layout=layout_of(scenarios[i]), status="ok", report=reports[i], memory=reports[i]["memory"]) for i in (a, b)]
    gpn = min(scenarios[a].gpus_per_node, scenarios[b].gpus_per_node)
    text = explain_win(ev[0], ev[1], gpn, scenarios[a].training.global_batch)
    if scenarios[a].training.global_batch != scenarios[b].training.global_batch or scenarios[a].model != scenarios[b].model:
        text += " (note: the scenarios differ in model or batch, not only in layout)"
    return text


def add_parser(subparsers):
    p = subparsers.add_parser("compare", help="simulate several scenarios and show their reports side by side")
    p.add_argument("scenarios", nargs="+", metavar="SCENARIO", help="two or more scenario YAML files")
    p.add_argument("--json", action="store_true", help="print {scenarios: [{file, report}], best: {row: [indices]}}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key in every scenario")
    p.add_argument("--estimator", choices=("engine", "analytic"), default="engine")
    p.add_argument("--plot", metavar="PREFIX", help="write PREFIX_breakdown.png and PREFIX_memory.png")
    p.add_argument("--allow-profile-mismatch", action="store_true",
                   help="price with a calibration profile of another device kind than the topology's GPU (warns)")
    return p


def run(args) -> int:
    from ..run import simulate  # noqa: PLC0415
    from ..scenario import load_scenario  # noqa: PLC0415

    if len(args.scenarios) < 2:
        raise ScenarioError("compare", f"needs at least two scenarios, got {len(args.scenarios)}")
    from .args import overrides  # noqa: PLC0415
    from ..outputs import Outputs, check_output, strict_json  # noqa: PLC0415

    plots = {k: f"{args.plot}_{k}.png" for k in ("breakdown", "memory")} if args.plot else {}
    for path in plots.values():
        check_output(path, "--plot")
    scenarios = [load_scenario(path, overrides(args)) for path in args.scenarios]
    reports = [simulate(sc, estimator=args.estimator) for sc in scenarios]
    stems = [Path(p).stem for p in args.scenarios]
    names = stems if len(set(stems)) == len(stems) else [f"{i + 1}:{s}" for i, s in enumerate(stems)]
    rows = compare_rows(reports)
    if plots:
        from ..report.plots import plot_memory_per_stage, plot_step_breakdown  # noqa: PLC0415
        with Outputs() as out:
            plot_step_breakdown([{"label": n, "breakdown": r["breakdown"]} for n, r in zip(names, reports)],
                                out.temp(plots["breakdown"]), "Where the step goes")
            plot_memory_per_stage([{"label": n, "memory": r["memory"]} for n, r in zip(names, reports)],
                                  out.temp(plots["memory"]), "Memory per GPU by pipeline stage")
            out.commit()
    if args.json:
        print(strict_json({"scenarios": [{"file": f, "report": r} for f, r in zip(args.scenarios, reports)],
                           "best": {r["row"]: r["best"] for r in rows if "key" in r}}, indent=2))
    else:
        print("\n".join(f"{n}: {sc.name}" for n, sc in zip(names, scenarios)) + "\n")
        print(format_compare(names, reports, rows), end="")
        print("\n" + why_fastest(scenarios, reports))
    if plots:
        paths = list(plots.values())
        print(("" if args.json else "plots written: " + ", ".join(paths)), file=sys.stderr if args.json else sys.stdout)
    return 0

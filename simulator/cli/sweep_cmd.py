"""`python -m simulator sweep SCENARIO`: the ranked layouts, why the best wins, what does not fit.

The search is `sweep.run_sweep`; this file parses the command line, shows progress (`progress.py`:
on a terminal; the wall time on stderr at the end), and turns the
result into tables and plain sentences: the step breakdown of the top layouts, why the best beats
the runner-up (the largest differences of their breakdowns, with the layout difference behind each),
how the ranking compares with the Ultra-Scale Playbook's advice, and for layouts that do not fit, what
overflows and by how much. `--export` writes the chosen layout as a framework config (`export.py`),
`--plot` the figures (`plots.py`).
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from ..errors import ScenarioError
from ..report.export import FRAMEWORKS
from ..report.text import memory_verdict

BREAKDOWN_WORDS = {
    "compute_s": "compute", "recompute_s": "recomputation", "bubble_s": "pipeline bubble",
    "exposed_tp_s": "exposed TP communication", "exposed_dp_s": "exposed DP/ZeRO communication",
    "exposed_pp_s": "exposed PP communication", "exposed_cp_s": "exposed CP communication",
    "exposed_ep_s": "exposed EP communication", "exposed_offload_s": "waits for offloaded activations",
    "optimizer_s": "optimizer step",
}
"""The report's `breakdown` keys, in words; they sum to the step time."""
BREAKDOWN_COLUMNS = ("compute_s", "recompute_s", "bubble_s", "exposed_tp_s", "exposed_dp_s", "exposed_pp_s",
                     "exposed_cp_s", "exposed_ep_s", "optimizer_s")
THIN_HEADROOM_GIB = 2.0
"""Below this much free memory the best layout gets a warning: it fits only by the memory model's own
allowances (fragmentation, CUDA context, NCCL buffers)."""
TIE = 0.005
"""Layouts within 0.5 % of each other are called tied (below the estimators' resolution)."""


# ----------------------------------------------------------------------------------- explanations

def _micro_batches(lay, global_batch: int) -> int:
    return global_batch // (lay.dp * lay.micro_batch)


def _sched(lay) -> str:
    return lay.pp_schedule + (f" (v={lay.vpp})" if lay.vpp > 1 else "")


def reason(key: str, a, b, gpus_per_node: int, global_batch: int) -> str:
    """Why layout `a` spends less on breakdown `key` than layout `b`, from their differences ('' if
    no single key difference explains it)."""
    if key == "exposed_tp_s":
        if a.tp <= gpus_per_node < b.tp:
            return f"TP stays inside a node (TP{a.tp} on NVLink vs TP{b.tp} across nodes)"
        if a.tp == 1:
            return f"there is no tensor parallelism (TP1 vs TP{b.tp})"
        if a.tp < b.tp:
            return f"the TP group is smaller (TP{a.tp} vs TP{b.tp})"
        if a.tp == b.tp and a.sp != b.sp:
            return f"sequence parallel is {'on' if a.sp else 'off'}"
        if a.tp == b.tp and a.micro_batch != b.micro_batch:
            return f"micro-batch {a.micro_batch} vs {b.micro_batch} changes how much TP traffic hides behind compute"
        return ""
    if key == "bubble_s":
        if a.pp == 1:
            return f"there is no pipeline (PP1 vs PP{b.pp})"
        ma, mb = _micro_batches(a, global_batch), _micro_batches(b, global_batch)
        if (a.pp_schedule, a.vpp) != (b.pp_schedule, b.vpp):
            return f"{_sched(a)} instead of {_sched(b)}, PP{a.pp} x {ma} micro-batches vs PP{b.pp} x {mb}"
        return f"PP{a.pp} with {ma} micro-batches vs PP{b.pp} with {mb} (bubble ~ (p-1)/m)"
    if key == "exposed_dp_s":
        if a.zero != b.zero:
            why = " (ZeRO-3 all-gathers every layer's parameters again for each micro-batch)" if b.zero == 3 else ""
            return f"ZeRO-{a.zero} instead of ZeRO-{b.zero}{why}"
        if a.tp * a.pp > b.tp * b.pp:
            return f"each rank holds 1/{a.tp * a.pp} of the weights vs 1/{b.tp * b.pp}, so it has fewer gradients to reduce"
        if (a.dp * a.cp) != (b.dp * b.cp):
            return f"the gradient group is {'smaller' if a.dp * a.cp < b.dp * b.cp else 'larger'} (DPxCP {a.dp * a.cp} vs {b.dp * b.cp})"
        return ""
    if key == "compute_s":
        rows_a, rows_b = a.micro_batch / (a.tp * a.cp), b.micro_batch / (b.tp * b.cp)
        if rows_a > rows_b:
            return (f"its GEMMs are larger and closer to peak (micro-batch {a.micro_batch} over TP{a.tp}xCP{a.cp} vs "
                    f"{b.micro_batch} over TP{b.tp}xCP{b.cp})")
        return ""
    if key == "recompute_s":
        return f"it fits without recomputation ({b.recompute} recompute re-runs the forward)" if a.recompute == "none" \
            else f"{a.recompute} instead of {b.recompute} recomputation"
    if key == "optimizer_s":
        return f"ZeRO-{a.zero} shards the optimizer step over {a.dp * a.cp} ranks" if a.zero >= 1 else ""
    if key == "exposed_pp_s":
        if a.pp < b.pp:
            return f"fewer pipeline stages (PP{a.pp} vs PP{b.pp})"
        return f"{_sched(a)} vs {_sched(b)}" if (a.pp_schedule, a.vpp) != (b.pp_schedule, b.vpp) else ""
    if key == "exposed_cp_s":
        return f"CP{a.cp} vs CP{b.cp}" if a.cp != b.cp else ""
    if key == "exposed_ep_s":
        return f"EP{a.ep} vs EP{b.ep}" if a.ep != b.ep else ""
    return ""


def comparable(a, b) -> tuple[dict, dict, str]:
    """The two layouts' numbers from the same estimator: the engine's when both have them."""
    if a.report and b.report and a.report["estimator"] == b.report["estimator"] == "engine":
        return a.report, b.report, "engine"
    return a.summary or a.report, b.summary or b.report, "analytic"


def throughput_ratio(na: dict, nb: dict) -> float:
    """a's tokens/s per GPU over b's: "1.40x the throughput"."""
    return na["tokens_per_s_per_gpu"] / nb["tokens_per_s_per_gpu"]


def step_saving(na: dict, nb: dict) -> float:
    """How much shorter a's step is than b's, as a fraction of b's: "step 28.6 % shorter". Not the same
    number as the throughput gain (1.40x the throughput is a step 28.6 % shorter, not "40 % faster")."""
    return (nb["iteration_time_s"] - na["iteration_time_s"]) / nb["iteration_time_s"]


def win_head(a_label: str, b_label: str, na: dict, nb: dict, est: str) -> str:
    """"A has 1.40x the throughput of B (step 28.6 % shorter, 0.52 s per step, engine)", or "A ties with B"
    within `TIE`. The one wording for a throughput ratio and a step-time saving (docs/metrics.md)."""
    dt = nb["iteration_time_s"] - na["iteration_time_s"]
    save = step_saving(na, nb)
    if abs(save) < TIE:
        return f"{a_label} ties with {b_label} ({abs(dt):.2f} s per step apart, {est})"
    step = f"step {save * 100:.1f} % shorter" if save > 0 else f"step {-save * 100:.1f} % longer"
    return (f"{a_label} has {throughput_ratio(na, nb):.2f}x the throughput of {b_label} "
            f"({step}, {abs(dt):.2f} s per step, {est})")


def explain_win(a, b, gpus_per_node: int, global_batch: int, gains: int = 2) -> str:
    """One sentence: why `a` (an Evaluation) is faster than `b`: the largest breakdown differences."""
    na, nb, est = comparable(a, b)
    dt = nb["iteration_time_s"] - na["iteration_time_s"]
    head = win_head(a.layout.label(), b.layout.label(), na, nb, est)
    if abs(step_saving(na, nb)) < TIE:
        return head + "."
    deltas = {k: nb["breakdown"].get(k, 0.0) - na["breakdown"].get(k, 0.0) for k in BREAKDOWN_WORDS}
    order = sorted(deltas, key=lambda k: -deltas[k])
    parts = []
    for k in order[:gains]:
        if deltas[k] <= 0.1 * abs(dt):
            break
        why = reason(k, a.layout, b.layout, gpus_per_node, global_batch)
        parts.append(f"less {BREAKDOWN_WORDS[k]} ({deltas[k]:.2f} s)" + (f" because {why}" if why else ""))
    worst = order[-1]
    if deltas[worst] < -0.1 * abs(dt):
        why = reason(worst, b.layout, a.layout, gpus_per_node, global_batch)
        parts.append(f"although it spends {-deltas[worst]:.2f} s more on {BREAKDOWN_WORDS[worst]}" + (f" ({why})" if why else ""))
    return head + (": " + "; ".join(parts) if parts else "") + "."


def overflow_text(ev, headroom_gib: float = 0.0) -> str:
    """What overflows in a layout that does not fit, and by how much (its memory report per stage);
    with a headroom, the limit is the capacity less the headroom."""
    mem = ev.memory
    cap = mem["capacity_gib"]
    limit = cap - headroom_gib
    worst = max(mem["per_stage"], key=lambda s: s["peak_gib"])
    kinds = {k: worst[f"{k}_gib"] for k in ("weights", "grads", "optimizer", "activations", "buffers")}
    big = max(kinds, key=kinds.get)
    over = [s["stage"] for s in mem["per_stage"] if s["peak_gib"] > limit] or [worst["stage"]]
    stages = f"stage {over[0]}" if len(over) == 1 else f"stages {over[0]}-{over[-1]}" if over == list(range(over[0], over[-1] + 1)) \
        else "stages " + ",".join(map(str, over))
    of = f"{cap:.1f}" + (f" less {headroom_gib:.1f} headroom" if headroom_gib else "")
    return (f"{ev.layout.label()}: stage {worst['stage']} needs {worst['peak_gib']:.1f} GiB of {of} "
            f"(over by {worst['peak_gib'] - limit:.1f} GiB; {stages} over), mostly {big} ({kinds[big]:.1f} GiB; "
            + ", ".join(f"{k} {v:.1f}" for k, v in kinds.items()) + ")")


def _rank(result, ev) -> str:
    return f"#{result.ranked.index(ev) + 1}" if ev in result.ranked else "unranked"


def _versus(result, best, other) -> str:
    """The comparison sentence, or a pointer to it when it is the runner-up's (already printed)."""
    if len(result.ranked) > 1 and other is result.ranked[1]:
        return "it is the runner-up (#2, above)."
    return explain_win(best, other, result.gpus_per_node, result.global_batch)


def advice_notes(result, sc) -> list[str]:
    """The ranking against the Playbook's practical advice (TP inside a node; ZeRO-3 only when memory
    needs it), with the reason wherever the ranking disagrees."""
    from ..sweep.space import model_state_floor_gib, param_split  # noqa: PLC0415
    if not result.ranked:
        return []
    gpn, gb = result.gpus_per_node, sc.training.global_batch
    best = result.ranked[0]
    out = []
    cross = next((ev for ev in result.ranked if ev.layout.tp > gpn), None)
    inside = next((ev for ev in result.ranked if ev.layout.tp <= gpn), None)
    if best.layout.tp <= gpn:
        line = f"TP inside a node: agrees (TP{best.layout.tp} <= {gpn} GPUs per node)."
        if cross:
            line += f" The best layout with TP across nodes ({_rank(result, cross)}): " + _versus(result, best, cross)
        out.append(line)
    else:
        out.append(f"TP inside a node: DISAGREES, TP{best.layout.tp} spans nodes. " + explain_win(best, inside, gpn, gb) if inside
                   else f"TP inside a node: no layout with TP <= {gpn} fits.")
    lay = best.layout
    twin = result.zero_twin
    if lay.zero == 3:
        if twin is not None and twin.status == "oom":
            why = f"memory forces it: with ZeRO-1 {overflow_text(twin, result.headroom_gib)}"
        elif twin is not None:
            why = "ZeRO-1 on the same layout fits, yet ZeRO-3 wins here: " + explain_win(best, twin, gpn, gb)
        else:
            floor = model_state_floor_gib(sc, replace(lay, zero=1), param_split(sc))
            why = (f"memory forces it: with ZeRO-1 the model states alone would need >= {floor:.0f} GiB per GPU"
                   if floor > result.capacity_gib - result.headroom_gib else "ZeRO-1 on the same layout was not estimated")
        line = f"ZeRO-3 vs ZeRO-1: the best layout uses ZeRO-3 at DPxCP = {lay.dp * lay.cp}; {why}"
        z1 = next((ev for ev in result.ranked if ev.layout.zero in (0, 1)), None)
        if z1 is not None:
            line += f" The best ZeRO-0/1 layout ({_rank(result, z1)}): " + _versus(result, best, z1)
        out.append(line)
    else:
        line = f"ZeRO-3 vs ZeRO-{lay.zero}: agrees, the best layout does not need ZeRO-3 (DPxCP = {lay.dp * lay.cp})."
        if twin is not None:
            line += " ZeRO-3 on the same layout: " + (explain_win(best, twin, gpn, gb) if twin.status == "ok"
                                                      else f"does not even fit: {overflow_text(twin, result.headroom_gib)}.")
        z3 = next((ev for ev in result.ranked if ev.layout.zero == 3), None)
        if z3 is not None:
            line += f" The best ZeRO-3 layout ({_rank(result, z3)}): " + _versus(result, best, z3)
        out.append(line)
    return out


# ----------------------------------------------------------------------------------- text

def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).ljust(w) if i == 1 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]


def misses_memory_keeps_out(result) -> list:
    """The layouts that do not fit and whose analytic estimate beats #1's throughput, fastest first: what memory
    costs this sweep. A layout that does not fit and would be slower than #1 anyway tells the user nothing, so it
    is left out; where nothing fits, every estimated layout that does not fit counts."""
    floor = result.ranked[0].tokens_per_s_per_gpu if result.ranked else 0.0
    return sorted((ev for ev in result.infeasible if ev.summary and ev.summary["tokens_per_s_per_gpu"] > floor),
                  key=lambda ev: -ev.summary["tokens_per_s_per_gpu"])


def format_sweep(result, sc, top: int) -> str:
    c = result.counts
    gb = sc.training.global_batch
    out = [f"Sweep: {result.name}",
           f"  {result.gpus} GPUs ({result.gpus_per_node} per node, {result.capacity_gib:.1f} GiB each), global batch {gb} x {sc.training.seq_len}",
           f"  {c['enumerated']:,} layouts enumerated; {c['pruned_by_state_floor']:,} exceed memory on model states alone; "
           f"{c['structures']:,} structures tried ({c['memory_checks']:,} memory checks, {c['oom_checked'] + c['oom_implied']:,} do not fit); "
           f"{c['estimated']:,} estimated, {c['structures_expanded']} expanded over schedules/ZeRO; {c['simulated_engine']} simulated by the engine",
           f"  a layout fits when it leaves {result.headroom_gib:.1f} GiB free per GPU (--headroom)", ""]
    shown = result.ranked if top <= 0 else result.ranked[:top]
    if not shown:
        out.append("  No layout fits in memory.")
    rows = []
    for i, ev in enumerate(shown):
        n = ev.numbers
        mem = ev.memory
        rows.append([str(i + 1), ev.layout.label(), f"{n['tokens_per_s_per_gpu']:,.0f}", f"{n['mfu'] * 100:.1f}",
                     f"{n['iteration_time_s']:.2f}", f"{mem['peak_gib']:.1f}", f"{mem['capacity_gib'] - mem['peak_gib']:.1f}", ev.estimator])
    if rows:
        out += ["  " + x for x in _table(rows, ["#", "layout", "tok/s/GPU", "MFU %", "step s", "peak GiB", "free GiB", "estimator"])]
        out.append("")
    if shown and shown[0].memory["capacity_gib"] - shown[0].memory["peak_gib"] < THIN_HEADROOM_GIB:
        free = shown[0].memory["capacity_gib"] - shown[0].memory["peak_gib"]
        out.append(f"  Caution: #1 leaves {free:.1f} GiB free per GPU, inside the memory model's margin of error; "
                   f"--headroom GIB ranks only layouts that keep that much free.")
        out.append("")
    ref = result.reference
    if ref is not None and ref.report is not None and result.ranked:
        best = result.ranked[0]
        state = memory_verdict(ref.memory)
        line = (f"  The scenario's own layout {ref.layout.label()} ({state}): {ref.tokens_per_s_per_gpu:,.0f} tok/s/GPU "
                f"({ref.report['estimator']})")
        if ref.tokens_per_s_per_gpu:
            line += "; " + win_head("the best", "this layout", best.numbers, ref.report, best.estimator)
        out.append(line + ".")
        out.append("")
    if rows:
        brows = []
        for i, ev in enumerate(shown[: min(len(shown), 8)]):
            b = ev.numbers["breakdown"]
            brows.append([str(i + 1), ev.layout.label()] + [f"{b.get(k, 0.0):.2f}" for k in BREAKDOWN_COLUMNS]
                         + [f"{ev.numbers['iteration_time_s']:.2f}", ev.estimator])
        out.append("  Where the step goes (seconds per step on the critical rank; exposed communication per dimension):")
        out += ["  " + x for x in _table(brows, ["#", "layout", "compute", "recomp", "bubble", "TP", "DP", "PP", "CP", "EP", "optim", "step", "estimator"])]
        out.append("")
    if len(result.ranked) > 1:
        best, second = result.ranked[0], result.ranked[1]
        out.append("  Why #1 beats #2: " + explain_win(best, second, result.gpus_per_node, gb))
        key = lambda l: (l.tp, l.pp, l.ep, l.zero)  # noqa: E731
        other = next((ev for ev in result.ranked[1:] if key(ev.layout) != key(best.layout)
                      and comparable(best, ev)[1]["iteration_time_s"] > comparable(best, ev)[0]["iteration_time_s"] * (1 + TIE)), None)
        if other is not None and other is not second:
            out.append(f"  Against the next different layout ({_rank(result, other)}): " + explain_win(best, other, result.gpus_per_node, gb))
        out.append("")
        out.append("  Against the Ultra-Scale Playbook's advice:")
        out += ["  - " + line for line in advice_notes(result, sc)]
        out.append("")
    fast_misses = misses_memory_keeps_out(result)
    if fast_misses:
        out.append("  Faster than #1 but do not fit (analytic step time as if they did):" if result.ranked
                   else "  The fastest layouts that do not fit (analytic step time as if they did):")
        out += [f"  - {ev.summary['tokens_per_s_per_gpu']:,.0f} tok/s/GPU: " + overflow_text(ev, result.headroom_gib) for ev in fast_misses[:3]]
        out.append("")

    for note in result.notes:
        out.append(f"  note: {note}")
    return "\n".join(out).rstrip() + "\n"


# ----------------------------------------------------------------------------------- command line



def add_parser(subparsers):
    p = subparsers.add_parser("sweep", help="enumerate the valid layouts of a scenario and rank them")
    p.add_argument("scenario", help="scenario YAML file (its model, batch and cluster are kept)")
    p.add_argument("--json", action="store_true", help="print the ranked layouts as JSON (docs/interface.md)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="layouts to show (0 = all that fit; default 10)")
    p.add_argument("--engine-top", type=int, default=4, metavar="K",
                   help="simulate the K most promising layouts with the discrete-event engine (default 4; 0 = analytic only)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="J", help="worker processes (default: all cores)")
    p.add_argument("--fix", action="append", default=[], metavar="KEY=V1,V2",
                   help="set the values a sweep key takes (narrows or widens the default), e.g. parallel.tp=4,8 or training.recompute=selective")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario key first")
    p.add_argument("--headroom", type=float, default=None, metavar="GIB",
                   help="memory each GPU must keep free for a layout to count as fitting (default: the scenario's "
                        "cluster.memory_headroom_gib, else 5 %% of the GPU's memory, 4.0 GiB on an H100; docs/metrics.md)")
    p.add_argument("--expand", type=int, default=None, metavar="S", help="structures phase 2 expands (default 12)")
    p.add_argument("--export", choices=FRAMEWORKS,
                   help="write the sweep's first layout (or the best the framework can run) as that framework's "
                        "config: torchtitan 0.3, torchtitan-0.2 (TOML job file), Megatron-LM core_v0.16.1, nanotron 0.4")
    p.add_argument("--export-out", metavar="FILE", help="where --export writes (default: stdout after the table)")
    p.add_argument("--plot", metavar="PREFIX", help="write PREFIX_scatter.png, PREFIX_breakdown.png, PREFIX_memory.png")
    p.add_argument("--objective", choices=("throughput", "time-to-train", "cost"), default="throughput",
                   help="rank by tokens/s per GPU (default) or by the whole run over --tokens (wholerun)")
    p.add_argument("--tokens", metavar="N", help="tokens of the whole run for --objective (K/M/B/T suffixes)")
    p.add_argument("--price-per-gpu-hour", type=float, metavar="USD", help="price for --objective cost")
    p.add_argument("--ray", metavar="ADDRESS", help="run the simulations on a Ray cluster (optional dependency)")
    p.add_argument("--allow-profile-mismatch", action="store_true",
                   help="price with a calibration profile of another device kind than the topology's GPU (warns)")
    return p


MAX_JOBS = 1024
"""Worker processes: more than any host has cores."""
MAX_COUNT = 1 << 20
"""--top, --engine-top, --expand: far beyond the layouts any scenario has."""


def check_numbers(args) -> None:
    """Every numeric flag in range (finite, bounded) before anything starts."""
    import math  # noqa: PLC0415
    for flag, value, low, high in (("--top", args.top, 0, MAX_COUNT), ("--engine-top", args.engine_top, 0, MAX_COUNT),
                                   ("--jobs", args.jobs, 1, MAX_JOBS), ("--expand", args.expand, 0, MAX_COUNT)):
        if value is not None and not low <= value <= high:
            raise ScenarioError(flag, f"{value} is out of range", f"{low} .. {high:,}")
    if args.headroom is not None and not (math.isfinite(args.headroom) and 0 <= args.headroom <= 1e5):
        raise ScenarioError("--headroom", f"{args.headroom} is out of range", "GiB in [0, 100000]")


def run(args) -> int:
    from ..progress import PhaseProgress, Stopwatch  # noqa: PLC0415
    from ..sweep.search import SweepOptions, run_sweep, sweep_base
    from ..sweep.runners import make_runner
    from ..sweep.space import DEFAULT_EXPAND, parse_fix  # noqa: PLC0415

    clock = Stopwatch("sweep")
    from .args import overrides  # noqa: PLC0415
    from ..outputs import Outputs, check_distinct, check_output, strict_json  # noqa: PLC0415
    from ..cost.profile_load import load_profile, profile_warnings  # noqa: PLC0415

    fixed = parse_fix(args.fix)
    check_numbers(args)
    if args.export_out and not args.export:
        raise ScenarioError("--export-out", "given without --export", "--export " + "|".join(FRAMEWORKS))
    if args.export and args.json and not args.export_out:
        raise ScenarioError("--export", "with --json needs --export-out FILE (stdout holds the JSON)")
    plots = [f"{args.plot}_{k}.png" for k in ("scatter", "breakdown", "memory")] if args.plot else []
    for path, flag in [(args.export_out, "--export-out")] + [(p, "--plot") for p in plots]:
        if path:
            check_output(path, flag)
    check_distinct({"--export-out": args.export_out, **{f"--plot ({p})": p for p in plots}})
    sc, raw, base_dir = sweep_base(args.scenario, overrides(args))
    if sc.cluster.profile != "default":
        for w in profile_warnings(sc, load_profile(sc.cluster.profile)):
            print(f"warning: {w}", file=sys.stderr)
    options = SweepOptions(fixed=fixed, top=args.top, engine_top=args.engine_top,
                           expand=DEFAULT_EXPAND if args.expand is None else args.expand, headroom_gib=args.headroom)
    whole = None
    if args.objective != "throughput":
        from ..wholerun.sweep_objective import run_tokens  # noqa: PLC0415
        whole = run_tokens(sc, args.tokens)
    runner = make_runner(args.jobs, args.ray)
    try:
        with PhaseProgress() as progress:  # on a terminal only, on stderr (stdout may be --json)
            result = run_sweep(sc, raw, base_dir, options, runner, progress)
    finally:
        runner.close()
    runs = {}
    if whole is not None:  # the whole run ranks the layouts (issue 41)
        from ..sweep.tasks import sibling_scenario  # noqa: PLC0415
        from ..wholerun.sweep_objective import rerank  # noqa: PLC0415
        result, runs = rerank(result, sc, args.objective, whole, sibling=sibling_scenario,
                              price_per_gpu_hour=args.price_per_gpu_hour)
    shown = result.ranked if args.top <= 0 else result.ranked[: args.top]
    exported = None
    if args.export:
        from ..report.export import export_best  # noqa: PLC0415
        exported = export_best(result.ranked, args.export, sc, raw, base_dir)
    with Outputs() as out:  # every file whole, or none
        if args.json:
            body = strict_json([{**ev.to_json(), **({"whole_run": runs[ev.layout].to_json()} if runs else {})}
                                for ev in shown], indent=2) + "\n"
        else:
            body = format_sweep(result, sc, args.top)
            if runs:
                from ..wholerun.sweep_objective import format_objective  # noqa: PLC0415
                body += format_objective(result, runs, args.objective, args.top)
        if exported is not None and args.export_out:
            Path(out.temp(args.export_out)).write_text(exported[0])
        written = []
        if args.plot:
            from ..report.plots import sweep_plots  # noqa: PLC0415
            prefix = out.temp_prefix(args.plot)
            written = [f"{args.plot}{p[len(prefix):]}" for p in sweep_plots(result, prefix)]
        out.commit()
    print(body, end="")
    if exported is not None:
        text, chosen, warnings = exported
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        if args.export_out:
            if not args.json:
                print(f"  {args.export} config for {chosen.layout.label()} written to {args.export_out}")
        else:
            print(f"\n# --- {args.export} config for {chosen.layout.label()} ---")
            print(text, end="")
    if written and not args.json:
        print("  plots written: " + ", ".join(written))
    sys.stdout.flush()
    clock.report()
    return 0

"""`sweep --objective time-to-train|cost`: rank the sweep's layouts by the whole run, not the step.

Each fitting layout's step time (engine or analytic, as the sweep priced it) goes through the same
`model.whole_run` as `run --tokens`: its checkpoint (the largest stage's share per rank sets the write
time), its interval, its interruptions on the sweep's GPUs. A layout a little faster per step whose
checkpoint is slower to write (a pipeline stage holding the embedding) or that needs asynchronous
checkpoints' host memory can finish later. time-to-train ranks by expected wall-clock days, cost by
dollars (the same order on one GPU count and price; both are given so the table says what it ranks by).
"""
from __future__ import annotations

from dataclasses import replace

from ..errors import ScenarioError
from ..scenario import Scenario
from .model import WholeRun, whole_run
from ..run_spec import Phase, parse_tokens

OBJECTIVES = ("throughput", "time-to-train", "cost")


def run_tokens(sc: Scenario, tokens: str | None) -> float:
    """--tokens, else the scenario's run.tokens; an error naming both when neither is given."""
    if tokens is not None:
        return parse_tokens(tokens, "--tokens")
    if sc.run.phases:
        return sc.run.tokens
    raise ScenarioError("--objective", "time-to-train and cost need a token count",
                        "--tokens N (e.g. 15T) or run.tokens / training.tokens in the scenario")


def layout_run(sc: Scenario, step_s: float, estimator: str, tokens: float, **kw) -> WholeRun:
    return whole_run([(sc, Phase(tokens=tokens, name="whole run"), step_s, estimator)], **kw)


def rerank(result, sc: Scenario, objective: str, tokens: float, *, sibling, **kw):
    """`result` (a SweepResult) with `ranked` ordered by the objective, and {layout: WholeRun}.
    `sibling(sc, layout)` builds a candidate's scenario (sweep.sibling_scenario)."""
    price = kw.get("price_per_gpu_hour")
    if price is not None and not price >= 0:
        raise ScenarioError("--price-per-gpu-hour", f"{price} is out of range", ">= 0")
    runs = {}
    for ev in result.ranked:
        n = ev.numbers
        runs[ev.layout] = layout_run(sibling(sc, ev.layout), n["iteration_time_s"], n.get("estimator", ""), tokens, **kw)
    if objective == "time-to-train":
        key = lambda ev: (runs[ev.layout].days, ev.layout)  # noqa: E731
    else:
        key = lambda ev: (runs[ev.layout].cost if runs[ev.layout].cost is not None else runs[ev.layout].gpu_hours,  # noqa: E731
                          ev.layout)
    ranked = sorted(result.ranked, key=key)
    note = (f"ranked by {objective} over {tokens / 1e12:.3g}T tokens (wholerun): expected days with interruptions,"
            " checkpoints and restarts, not tokens/s")
    return replace(result, ranked=ranked, notes=list(result.notes) + [note]), runs


def format_objective(result, runs: dict, objective: str, top: int) -> str:
    """A table of the layouts in the objective's order with the whole-run numbers beside the step."""
    rows = []
    shown = result.ranked if top <= 0 else result.ranked[:top]
    for i, ev in enumerate(shown, 1):
        w = runs[ev.layout]
        p = w.phases[0]
        rows.append([str(i), ev.layout.label(), f"{ev.tokens_per_s_per_gpu:,.0f}", f"{w.days:.2f}",
                     f"{w.gpu_hours:,.0f}", "n/a" if w.cost is None else f"${w.cost:,.0f}", f"{w.interruptions:.0f}",
                     f"{p.checkpoint.write_s:.1f}", f"{p.interval_s / 60:.1f}", f"{w.goodput * 100:.2f} %"])
    header = ["#", "layout", "tok/s/GPU", "days", "GPU-hours", "cost", "interruptions", "ckpt write s", "interval min",
              "goodput"]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 1 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    out = [f"\n  whole run, ranked by {objective}"] + ["  " + fmt(header), "  " + fmt(["-" * w for w in widths])]
    return "\n".join(out + ["  " + fmt(r) for r in rows]) + "\n"

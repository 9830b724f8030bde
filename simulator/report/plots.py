"""Figures for sweeps and reports (matplotlib, Agg backend, written to files).

- `plot_sweep_scatter`: every layout's throughput against its peak memory per GPU, coloured by MFU,
  those that do not fit marked beyond the capacity line (after the Ultra-Scale Playbook's benchmark
  figure);
- `plot_step_breakdown`: where the step goes, stacked, for the top layouts;
- `plot_memory_per_stage`: memory per pipeline stage by kind against the GPU's capacity.
Inputs are plain dicts (report pieces), so `sweep_cmd`, `compare_cmd` and tests can all call them.
"""
from __future__ import annotations

from pathlib import Path

from .text import memory_verdict

BREAKDOWN_STYLE = (
    ("compute_s", "compute", "#4C72B0"), ("recompute_s", "recompute", "#8172B2"), ("bubble_s", "bubble", "#CCB974"),
    ("exposed_tp_s", "TP exposed", "#C44E52"), ("exposed_dp_s", "DP/ZeRO exposed", "#DD8452"),
    ("exposed_pp_s", "PP exposed", "#937860"), ("exposed_cp_s", "CP exposed", "#DA8BC3"),
    ("exposed_ep_s", "EP exposed", "#8C8C8C"), ("exposed_offload_s", "offload exposed", "#64B5CD"),
    ("optimizer_s", "optimizer", "#55A868"),
)
"""Breakdown keys of the report, their legend names and colours."""
MEMORY_STYLE = (("weights", "#4C72B0"), ("grads", "#DD8452"), ("optimizer", "#55A868"), ("activations", "#C44E52"),
                ("buffers", "#8C8C8C"))


def _pyplot():
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    return plt


def plot_sweep_scatter(points: list[dict], capacity_gib: float, path: str, title: str = "") -> str:
    """points: {"label", "peak_gib", "tokens_per_s_per_gpu", "mfu", "fits", "mark" ('best' | 'own' | '')}.
    Layouts that fit are dots coloured by MFU; those that do not are grey crosses (their step time as
    if they fitted)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 5.2), dpi=110)
    ok = [p for p in points if p["fits"]]
    bad = [p for p in points if not p["fits"] and p.get("tokens_per_s_per_gpu")]
    if bad:
        ax.scatter([p["peak_gib"] for p in bad], [p["tokens_per_s_per_gpu"] for p in bad], marker="x", s=22,
                   color="#999999", linewidths=1.0, label=f"does not fit ({len(bad)})")
    if ok:
        sc = ax.scatter([p["peak_gib"] for p in ok], [p["tokens_per_s_per_gpu"] for p in ok], c=[p["mfu"] * 100 for p in ok],
                        cmap="viridis", s=20, alpha=0.85, edgecolors="none", label=f"fits ({len(ok)})")
        fig.colorbar(sc, ax=ax, pad=0.01).set_label("MFU (%)")
    ax.axvline(capacity_gib, color="#C44E52", linestyle="--", linewidth=1.2)
    ax.text(capacity_gib, ax.get_ylim()[1], f" {capacity_gib:.0f} GiB per GPU", color="#C44E52", va="top", ha="left", fontsize=8)
    x0, x1 = ax.get_xlim()
    for p in points:
        if p.get("mark") in ("best", "own") and p.get("tokens_per_s_per_gpu"):
            best = p["mark"] == "best"
            ax.scatter([p["peak_gib"]], [p["tokens_per_s_per_gpu"]], marker="*" if best else "D", s=170 if best else 60,
                       facecolors="#FFD700" if best else "none", edgecolors="black", linewidths=1.0, zorder=5)
            right_half = p["peak_gib"] > x0 + 0.55 * (x1 - x0)
            ax.annotate(("best: " if best else "scenario's: ") + p["label"], (p["peak_gib"], p["tokens_per_s_per_gpu"]),
                        xytext=(-10 if right_half else 10, 12 if best else -16), textcoords="offset points", fontsize=8,
                        ha="right" if right_half else "left", zorder=6,
                        bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "#BBBBBB", "alpha": 0.9})
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("tokens/s per GPU")
    ax.set_title(title or "Layouts: throughput vs memory", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_step_breakdown(rows: list[dict], path: str, title: str = "") -> str:
    """rows: {"label", "breakdown": {key: seconds}}, best first; one stacked horizontal bar each."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(rows) + 1.6), dpi=110)
    labels = [r["label"] for r in rows][::-1]
    left = [0.0] * len(rows)
    for key, name, colour in BREAKDOWN_STYLE:
        vals = [r["breakdown"].get(key, 0.0) for r in rows][::-1]
        if not any(v > 0 for v in vals):
            continue
        ax.barh(labels, vals, left=left, color=colour, label=name, height=0.6)
        left = [a + b for a, b in zip(left, vals)]
    for y, total in enumerate(left):
        ax.text(total, y, f" {total:.2f} s", va="center", fontsize=8)
    ax.set_xlabel("seconds per optimizer step (critical rank)")
    ax.set_xlim(0, max(left, default=1.0) * 1.12)
    ax.set_title(title or "Where the step goes", fontsize=10)
    ax.tick_params(axis="y", labelsize=8)
    handles, names = ax.get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 5), fontsize=8, frameon=False)
    legend_rows = -(-len(names) // 5)
    fig.tight_layout(rect=(0, 0.045 * legend_rows * 6 / (0.55 * len(rows) + 1.6), 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_memory_per_stage(panels: list[dict], path: str, title: str = "") -> str:
    """panels: {"label", "memory": the report's memory object}; stacked bars per pipeline stage by
    kind, the GPU's capacity as a line."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 0.6, 4.4), dpi=110, squeeze=False,
                             sharey=True)
    top = max([pnl["memory"]["capacity_gib"] for pnl in panels] + [pnl["memory"]["peak_gib"] for pnl in panels]) * 1.1
    for ax, pnl in zip(axes[0], panels):
        mem = pnl["memory"]
        stages = [s["stage"] for s in mem["per_stage"]]
        bottom = [0.0] * len(stages)
        for kind, colour in MEMORY_STYLE:
            vals = [s[f"{kind}_gib"] for s in mem["per_stage"]]
            ax.bar(stages, vals, bottom=bottom, color=colour, label=kind, width=0.7)
            bottom = [a + b for a, b in zip(bottom, vals)]
        ax.axhline(mem["capacity_gib"], color="black", linestyle="--", linewidth=1)
        ax.text(stages[-1] + 0.4, mem["capacity_gib"], "capacity", fontsize=7, ha="right", va="bottom")
        limit = mem["capacity_gib"] - mem.get("headroom_gib", 0.0)  # fits = peak <= capacity - headroom (docs/metrics.md)
        verdict = "fits" if mem["fits"] else f"{memory_verdict(mem).lower()}: over the fit limit by {mem['peak_gib'] - limit:.1f} GiB"
        ax.set_title(f"{pnl['label']}\npeak {mem['peak_gib']:.1f} GiB, {verdict}", fontsize=8)
        ax.set_xlabel("pipeline stage")
        ax.set_xticks(stages)
        ax.set_ylim(0, top)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("GiB per GPU")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(MEMORY_STYLE), fontsize=8, frameon=False)
    fig.suptitle(title or "Memory per pipeline stage", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


def sweep_plots(result, prefix: str, top: int = 8) -> list[str]:
    """The three figures of a `sweep.SweepResult`: PREFIX_scatter.png, PREFIX_breakdown.png, PREFIX_memory.png."""
    best = result.ranked[0] if result.ranked else None
    own = result.reference.layout if result.reference is not None else None
    points = []
    for ev in result.ranked:
        n = ev.summary or ev.report
        mark = "best" if ev is best else "own" if ev.layout == own else ""
        points.append({"label": ev.layout.label(), "peak_gib": ev.memory["peak_gib"], "tokens_per_s_per_gpu": n["tokens_per_s_per_gpu"],
                       "mfu": n["mfu"], "fits": True, "mark": mark})
    if own is not None and all(p["mark"] != "own" for p in points) and result.reference.report is not None:
        r = result.reference.report
        points.append({"label": own.label(), "peak_gib": r["memory"]["peak_gib"], "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"],
                       "mfu": r["mfu"], "fits": r["memory"]["fits"], "mark": "own"})
    for ev in result.infeasible:
        if ev.summary:
            points.append({"label": ev.layout.label(), "peak_gib": ev.memory["peak_gib"],
                           "tokens_per_s_per_gpu": ev.summary["tokens_per_s_per_gpu"], "mfu": ev.summary["mfu"], "fits": False, "mark": ""})
    paths = [plot_sweep_scatter(points, result.capacity_gib, f"{prefix}_scatter.png",
                                f"{result.name}: the layouts estimated (analytic)")]
    # one estimator per figure: the engine's layouts (and the scenario's own, simulated the same way) when
    # the engine ran, else the analytic top
    est = best.numbers["estimator"] if best is not None else "analytic"
    chosen = [(i, ev) for i, ev in enumerate(result.ranked) if ev.numbers.get("estimator") == est][:top]
    rows = [{"label": f"#{i + 1} {ev.layout.label()}", "breakdown": ev.numbers["breakdown"]} for i, ev in chosen]
    ref = result.reference
    if ref is not None and ref.report is not None and ref.report["estimator"] == est and all(ev.layout != ref.layout for _, ev in chosen):
        rows.append({"label": f"scenario's {ref.layout.label()}", "breakdown": ref.report["breakdown"]})
    if rows:
        paths.append(plot_step_breakdown(rows, f"{prefix}_breakdown.png", f"{result.name}: where the step goes ({est})"))
    panels = []
    if best is not None:
        panels.append({"label": f"best: {best.layout.label()}", "memory": best.memory})
    if result.reference is not None and result.reference.memory and (best is None or result.reference.layout != best.layout):
        panels.append({"label": f"scenario's: {result.reference.layout.label()}", "memory": result.reference.memory})
    misses = sorted(result.infeasible, key=lambda ev: (-(ev.summary or {}).get("tokens_per_s_per_gpu", 0.0), ev.overflow_gib))
    if misses:
        panels.append({"label": f"fastest that does not fit: {misses[0].layout.label()}", "memory": misses[0].memory})
    if panels:
        paths.append(plot_memory_per_stage(panels, f"{prefix}_memory.png", f"{result.name}: memory per GPU by pipeline stage"))
    return [str(Path(p)) for p in paths]

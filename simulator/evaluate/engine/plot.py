"""Matplotlib pictures of a simulated step (Agg backend, written to a file).

`plot_timeline`: a Gantt chart, one row per (stage, stream): passes on the compute stream coloured by
kind (F, B, W, B+W, optimizer), one bar each, and the busy intervals of the tp/cp/ep, dp and pp
streams (adjacent intervals closer than a pixel are merged so a 100k-op step still draws quickly).
`plot_memory`: memory over two simulated steps per stage, stacked like PyTorch's memory profiler
(`torch.profiler._memory_profiler`'s categories): parameters, buffers, gradients (appear at the first
backward), optimizer states (appear at the first optimizer step: Adam's moments are created lazily),
activations (built up by forwards, released by backwards).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

PASS_COLORS = {"F": "#4c72b0", "B": "#55a868", "W": "#8fd19e", "BW": "#3b8a50", "F&B": "#ccb974", "optimizer": "#c44e52"}
STREAM_COLORS = {"tp": "#dd8452", "cp": "#937860", "ep": "#da8bc3", "dp": "#8172b3", "pp": "#64b5cd"}
GIB = 2 ** 30
MAX_STAGES_PLOTTED = 16


def _merge(iv: list[tuple[float, float]], eps: float) -> list[tuple[float, float]]:
    out: list = []
    for a, b in sorted(iv):
        if out and a - out[-1][1] <= eps:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _sample(items: list, n: int) -> list:
    if len(items) <= n:
        return items
    step = (len(items) - 1) / (n - 1)
    return [items[round(i * step)] for i in range(n)]


def plot_timeline(path: Path, sc, eng, traced, res) -> None:
    traced = _sample(sorted(traced, key=lambda r: (r.stage, r.grank)), MAX_STAGES_PLOTTED)
    T = res.iteration_time_s
    eps = T / 4000
    rows: list = []  # (label, {color: intervals})
    for rk in traced:
        rec = rk.rec
        comp: dict = {}
        streams: dict = {d: [] for d in ("tp", "cp", "ep", "dp", "pp")}
        for start, end, st, tpl, explicit in rec.passes:
            comp.setdefault(PASS_COLORS["F&B" if st.pair is not None else st.kind], []).append((start, end))
            if tpl is not None:
                for s in tpl.slices:
                    if s.stream in streams and s.dur > 0:
                        streams[s.stream].append((start + s.start, start + s.start + s.dur))
            else:
                for s in explicit or ():
                    if s.stream in streams and s.dur > 0:
                        streams[s.stream].append((s.start, s.start + s.dur))
        for a, b in rec.optimizer:
            comp.setdefault(PASS_COLORS["optimizer"], []).append((a, b))
        for c, _ in rec.colls:
            if c.end is not None and c.dur > 0:
                streams["dp"].append((c.start, c.end))
        for a, b, *_ in rec.sends + rec.recvs:
            streams["pp"].append((a, b))
        rows.append((f"stage {rk.stage} compute", comp))  # passes stay distinct: one bar each
        for d, iv in streams.items():
            if iv:
                rows.append((f"stage {rk.stage} {d}", {STREAM_COLORS[d]: _merge(iv, eps)}))
    fig, ax = plt.subplots(figsize=(14, max(3.0, 0.28 * len(rows) + 1.5)))
    for y, (label, by_color) in enumerate(rows):
        edge = dict(edgecolor="white", linewidth=0.3) if label.endswith("compute") else dict(linewidth=0)
        for color, iv in by_color.items():
            ax.broken_barh([(a, b - a) for a, b in iv], (y - 0.4, 0.8), facecolors=color, **edge)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, T)
    ax.set_xlabel("time (s)")
    ax.set_title(f"{sc.name}: {sc.parallel.pp_schedule}, pp={sc.parallel.pp} m={sc.micro_batches}, "
                 f"step {T:.3f} s, bubble {res.bubble_fraction:.1%}", fontsize=9)
    handles = [Patch(color=c, label=k) for k, c in PASS_COLORS.items()]
    handles += [Patch(color=c, label=k) for k, c in STREAM_COLORS.items()]
    ax.legend(handles=handles, loc="upper right", fontsize=7, ncol=5)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def memory_series(sc, rk) -> tuple[list[float], dict[str, list[float]]]:
    """Times and stacked components (bytes) of one rank over a two-step run, op by op
    (`plan/memory_timeline.py`: Adam's states appear at the first step, unfused gradients during the
    first backward and go at zero_grad, activations rise through each forward and fall through each
    backward)."""
    from ...plan.memory_timeline import levels_by_category  # noqa: PLC0415
    from .trace import counter_detail, rank_memory_events  # noqa: PLC0415
    times, comps = levels_by_category(rank_memory_events(sc, rk, detail=counter_detail(sc, rk)))
    if rk.end > times[-1]:
        times.append(rk.end)
        for col in comps.values():
            col.append(col[-1])
    return times, comps


def memory_ylim(capacity_gib: float, top_gib: float) -> float:
    """Upper y limit of a memory panel: the capacity line and the highest stack both inside, with room
    for the legend."""
    return max(capacity_gib, top_gib, 1e-3) * 1.12


def plot_memory(path: Path, sc, eng) -> None:
    """Two simulated steps (`eng` ran with steps=2): stacked memory per stage."""
    from ...plan.memory import memory_report  # noqa: PLC0415
    rep = memory_report(sc)
    traced = _sample([rk for rk in sorted(eng.ranks, key=lambda r: r.stage) if rk.rec is not None], 8)
    fig, axes = plt.subplots(len(traced), 1, figsize=(12, 2.1 * len(traced) + 1), sharex=True, squeeze=False)
    colors = ["#4c72b0", "#999999", "#dd8452", "#c44e52", "#55a868"]
    for ax, rk in zip(axes[:, 0], traced):
        times, comps = memory_series(sc, rk)
        ys = [[v / GIB for v in series] for series in comps.values()]
        ax.stackplot(times, *ys, labels=list(comps), colors=colors, step="post")
        ax.axhline(rep.capacity_gib, color="k", lw=0.8, ls="--")
        if rep.headroom_gib > 0:
            ax.axhline(rep.capacity_gib - rep.headroom_gib, color="k", lw=0.6, ls=":")
        ax.set_ylabel(f"stage {rk.stage}\nGiB", fontsize=8)
        ax.set_ylim(0, memory_ylim(rep.capacity_gib, max(sum(v) for v in zip(*ys))))
    axes[0, 0].legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), fontsize=7, ncol=5, frameon=False)
    axes[-1, 0].set_xlabel("time (s), two optimizer steps")
    fig.suptitle(f"{sc.name}: memory per stage over two steps (capacity {rep.capacity_gib:.1f} GiB dashed, "
                 f"fit limit {rep.capacity_gib - rep.headroom_gib:.1f} GiB dotted)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""Tokens trained against wall-clock days: one seeded sample of the run with its interruptions and
checkpoints marked, next to the failure-free line and the expected (goodput) line.

The sample draws interruption times from the model's exponential law (mean time between interruptions
M, seed fixed so the figure is reproducible); after each, the job loses the work since its last
checkpoint and spends the restart cost R before training again, and a fault during the restart starts it
over, as `failures.wall_per_work` assumes (Daly 2006).
"""
from __future__ import annotations

import random
from pathlib import Path

from ..errors import ScenarioError
from .failures import DAY_S
from .model import PhaseRun, WholeRun

MAX_CHECKPOINT_MARKS = 400
"""Beyond this many checkpoints the marks would merge into a line: every k-th is drawn (the legend says k)."""


def sample_path(run: WholeRun, seed: int = 0) -> tuple[list[float], list[float], list[tuple[float, float]], list[tuple[float, float]]]:
    """(wall seconds, tokens) of one sampled run, plus the (wall, tokens) of each checkpoint and of each
    interruption (at the moment of the fault, before the roll-back)."""
    rng = random.Random(seed)
    t = tokens = 0.0
    xs, ys, cks, faults = [0.0], [0.0], [], []
    for p in run.phases:
        t, tokens = _phase_path(p, rng, t, tokens, xs, ys, cks, faults)
    return xs, ys, cks, faults


def _phase_path(p: PhaseRun, rng: random.Random, t: float, tokens: float, xs, ys, cks, faults):
    rate = p.tokens_per_step / p.step_s
    delta = p.checkpoint.stall_s
    next_fault = t + rng.expovariate(1.0 / p.mtbi_s) if p.mtbi_s != float("inf") else float("inf")
    saved, done, left = tokens, tokens, p.tokens
    end = tokens + left
    while done < end - 1e-6:
        chunk = min(p.interval_s, (end - done) / rate)
        if t + chunk + delta <= next_fault:
            t += chunk
            done += chunk * rate
            xs.append(t), ys.append(done)
            t += delta
            saved = done
            cks.append((t, done))
            xs.append(t), ys.append(done)
            continue
        lost_at = next_fault
        done_at = done + max(0.0, min(chunk, lost_at - t)) * rate
        xs.append(lost_at), ys.append(done_at)
        faults.append((lost_at, done_at))
        done = saved
        xs.append(lost_at), ys.append(done)
        # faults keep arriving while the job restarts (memoryless); each starts the restart over (Daly 2006)
        next_fault = lost_at + rng.expovariate(1.0 / p.mtbi_s)
        t = lost_at + p.restart_s
        while next_fault < t:
            faults.append((next_fault, done))
            t = next_fault + p.restart_s
            next_fault += rng.expovariate(1.0 / p.mtbi_s)
        xs.append(t), ys.append(done)
    return t, done


def _failure_free_seconds(run: WholeRun):
    """tokens -> failure-free compute seconds to reach them (phase by phase)."""
    def at(tokens: float) -> float:
        t = n = 0.0
        for p in run.phases:
            rate = p.tokens_per_step / p.step_s
            if tokens <= n + p.tokens:
                return t + (tokens - n) / rate
            t += p.compute_s
            n += p.tokens
        return t
    return at


def plot_run(run: WholeRun, path: str, title: str = "", seed: int = 0) -> None:
    """Write the figure to `path` (format from the suffix)."""
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    if Path(path).suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ScenarioError("--run-plot", f"{path!r} has no .png, .svg or .pdf suffix")
    xs, ys, cks, faults = sample_path(run, seed)
    fig, (ax, lag_ax) = plt.subplots(2, 1, figsize=(10, 7.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    scale = 1e12 if run.tokens >= 1e12 else 1e9
    unit = "T" if scale == 1e12 else "B"
    ff_x, ff_y, t, n = [0.0], [0.0], 0.0, 0.0
    for p in run.phases:
        t += p.compute_s
        n += p.tokens
        ff_x.append(t / DAY_S), ff_y.append(n / scale)
    ax.plot(ff_x, ff_y, color="0.6", ls="--", lw=1.2, label=f"failure-free ({run.failure_free_days:.1f} days)")
    ax.plot([0, run.days], [0, run.tokens / scale], color="tab:green", lw=1, ls=":",
            label=f"expected ({run.days:.1f} days, goodput {run.goodput * 100:.1f} %)")
    ax.plot([x / DAY_S for x in xs], [y / scale for y in ys], color="tab:blue", lw=1.0,
            label=f"one sampled run (seed {seed})")
    every = max(1, len(cks) // MAX_CHECKPOINT_MARKS)
    if cks:
        ax.plot([c[0] / DAY_S for c in cks[::every]], [c[1] / scale for c in cks[::every]], "|", color="tab:blue",
                ms=5, alpha=0.6, label="checkpoint" + (f" (every {every}th drawn)" if every > 1 else ""))
    if faults:
        ax.plot([f[0] / DAY_S for f in faults], [f[1] / scale for f in faults], "x", color="tab:red",
                ms=6 if len(faults) < 300 else 3, alpha=1.0 if len(faults) < 300 else 0.4,
                label=f"interruption ({len(faults)} in this sample, {run.interruptions:.0f} expected)")
    ax.set_ylabel(f"tokens trained ({unit})")
    # the lag behind the failure-free line: wall time spent minus the failure-free time of the tokens done
    ff_of = _failure_free_seconds(run)
    lag_ax.plot([x / DAY_S for x in xs], [(x - ff_of(y)) / 3600 for x, y in zip(xs, ys)], color="tab:blue", lw=0.8)
    if faults:
        lag_ax.plot([f[0] / DAY_S for f in faults], [(f[0] - ff_of(f[1])) / 3600 for f in faults], "x", color="tab:red", ms=4)
    lag_ax.plot([0, run.days], [0, (run.wall_s - run.compute_s) / 3600], color="tab:green", lw=1, ls=":")
    lag_ax.set_ylabel("hours behind failure-free")
    lag_ax.set_xlabel("wall-clock days")
    lag_ax.grid(alpha=0.3)
    ax.set_title(title or "whole training run")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

"""Test oracles for pipeline schedules: `makespan` executes rank lists with free communication (what the
engine's timeline must reduce to when every collective is free), `peak_inflight` counts the activations
a rank's list holds. Test helpers, not product code: the evaluators list the plan (`plan/lower.py`).
"""
from __future__ import annotations

from collections.abc import Sequence

from simulator.plan.schedules import KINDS, Action


def peak_inflight(actions: list[Action]) -> int:
    """Most (chunk, micro-batch) pairs whose F has run and whose B has not, over one rank's list:
    activations held, in units of one micro-batch through one chunk (L/(pp*vpp) layers). The smaller
    stash a split backward keeps from B until W (ZB's M_W) is not counted."""
    held = peak = 0
    for a in actions:
        if a.kind == "F":
            held += 1
            peak = max(peak, held)
        elif a.kind == "B":
            held -= 1
    return peak


def makespan(schedule: list[list[Action]], pp: int, vpp: int,
             t_f: float | Sequence[float] = 1, t_b: float | Sequence[float] = 1,
             t_w: float | Sequence[float] = 1) -> tuple[float, list[float]]:
    """Execute the lists with free communication: each rank runs its list in order, one pass at a time,
    each pass starting when the rank is free and the passes it waits for are done: F(c-1) before F(c);
    F(c) and B(c+1) before B(c); B(c) before W(c). A pass time
    is one number for every chunk or one per chunk (uneven stages). Returns (makespan, busy time per
    rank). The analytic estimate's exact 1F1B / AFAB span and the engine tests' oracle; raises ValueError
    on a deadlock (some rank's next pass waits for a pass that can never run)."""
    n_chunks = pp * vpp
    cost = [t if isinstance(t, Sequence) else [t] * n_chunks for t in (t_f, t_b, t_w)]
    kind_index = {k: i for i, k in enumerate(KINDS)}
    m = 1 + max((a.mb for acts in schedule for a in acts), default=-1)
    done: list[list[list[float | None]]] = [[[None] * m for _ in range(n_chunks)] for _ in KINDS]
    f_done, b_done, _ = done
    pos = [0] * len(schedule)
    clock = [0.0] * len(schedule)
    busy = [0.0] * len(schedule)
    progress = True
    while progress:
        progress = False
        for r, acts in enumerate(schedule):
            i, now = pos[r], clock[r]
            while i < len(acts):
                a = acts[i]
                c, mb, k = a.chunk, a.mb, kind_index[a.kind]
                if k == 0:  # F(c-1) before F(c)
                    dep = f_done[c - 1][mb] if c > 0 else 0.0
                elif k == 1:  # F(c) and B(c+1) before B(c)
                    dep = f_done[c][mb]
                    if dep is not None and c < n_chunks - 1:
                        up = b_done[c + 1][mb]
                        dep = None if up is None else max(dep, up)
                else:  # B(c) before W(c)
                    dep = b_done[c][mb]
                if dep is None:
                    break
                t = cost[k][c]
                now = max(now, dep) + t
                done[k][c][mb] = now
                busy[r] += t
                i += 1
            if i != pos[r]:
                pos[r], clock[r], progress = i, now, True
    stuck = {r: acts[pos[r]] for r, acts in enumerate(schedule) if pos[r] < len(acts)}
    if stuck:
        raise ValueError(f"deadlock: next pass per stuck rank {stuck}")
    return max(clock, default=0.0), busy


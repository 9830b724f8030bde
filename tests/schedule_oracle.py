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


def _dep(done, a: Action, route: int) -> float | None:
    """When the passes `a` waits for are done (None: not yet): F(c-1) before F(c); F(c) and B(c+1)
    before B(c); B(c) before W(c); c-1 and c+1 within the micro-batch's route of `route` chunks."""
    f_done, b_done, _ = done
    if a.kind == "F":
        return f_done[a.chunk - 1][a.mb] if a.chunk % route else 0.0
    if a.kind == "B":
        dep = f_done[a.chunk][a.mb]
        if dep is not None and (a.chunk + 1) % route:
            up = b_done[a.chunk + 1][a.mb]
            dep = None if up is None else max(dep, up)
        return dep
    return b_done[a.chunk][a.mb]


def _overlap_group(acts: list[Action], i: int) -> list[Action]:
    """The passes run as one from position i: an overlapped F (`Action.overlap`) with the B after it and
    that B's W when it follows at once (DualPipe's full backward), else the one pass."""
    a = acts[i]
    if not (a.overlap and i + 1 < len(acts) and acts[i + 1].kind == "B"):
        return [a]
    b = acts[i + 1]
    w = acts[i + 2] if i + 2 < len(acts) else None
    if w is not None and w.kind == "W" and (w.chunk, w.mb) == (b.chunk, b.mb):
        return [a, b, w]
    return [a, b]


def makespan(schedule: list[list[Action]], pp: int, vpp: int,
             t_f: float | Sequence[float] = 1, t_b: float | Sequence[float] = 1,
             t_w: float | Sequence[float] = 1, routes: int = 1) -> tuple[float, list[float]]:
    """Execute the lists with free communication: each rank runs its list in order, one pass at a time,
    each pass starting when the rank is free and the passes it waits for are done: F(c-1) before F(c);
    F(c) and B(c+1) before B(c); B(c) before W(c). A pass time
    is one number for every chunk or one per chunk (uneven stages). Returns (makespan, busy time per
    rank). `routes` 2: two model copies, a micro-batch through one copy's pp*vpp/2 chunks (DualPipe). An
    overlapped pair (`_overlap_group`) runs as one pass, its outputs ready when it ends. The
    analytic estimate's exact 1F1B / AFAB span and the engine tests' oracle; raises ValueError
    on a deadlock (some rank's next pass waits for a pass that can never run)."""
    n_chunks = pp * vpp
    cost = [t if isinstance(t, Sequence) else [t] * n_chunks for t in (t_f, t_b, t_w)]
    kind_index = {k: i for i, k in enumerate(KINDS)}
    m = 1 + max((a.mb for acts in schedule for a in acts), default=-1)
    done: list[list[list[float | None]]] = [[[None] * m for _ in range(n_chunks)] for _ in KINDS]
    pos = [0] * len(schedule)
    clock = [0.0] * len(schedule)
    busy = [0.0] * len(schedule)
    progress = True
    while progress:
        progress = False
        for r, acts in enumerate(schedule):
            i, now = pos[r], clock[r]
            while i < len(acts):
                group = _overlap_group(acts, i)
                deps = [_dep(done, a, n_chunks // routes) for a in group if a.kind != "W" or len(group) == 1]
                if any(d is None for d in deps):
                    break
                t = sum(cost[kind_index[a.kind]][a.chunk] for a in group)
                now = max([now] + deps) + t
                for a in group:  # a pair's outputs leave when the whole pair ends
                    done[kind_index[a.kind]][a.chunk][a.mb] = now
                busy[r] += t
                i += len(group)
            if i != pos[r]:
                pos[r], clock[r], progress = i, now, True
    stuck = {r: acts[pos[r]] for r, acts in enumerate(schedule) if pos[r] < len(acts)}
    if stuck:
        raise ValueError(f"deadlock: next pass per stuck rank {stuck}")
    return max(clock, default=0.0), busy


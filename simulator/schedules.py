"""Pipeline schedules as per-rank action lists.

`pipeline_schedule(name, pp, vpp, m)` says, for every pipeline rank, in which order it runs the
forward (F), input-grad backward (B) and weight-grad backward (W) of each (chunk, micro-batch). The
SimPy engine executes these lists and enforces the data dependencies; `makespan` here is a small
list-scheduling oracle (the engine tests', and the analytic estimate's exact 1F1B / AFAB span), not the
engine. Chunk placement agrees with `layout.chunk_owner` (see `chunk_rank`). Schedules that do not split the backward emit B immediately
followed by W of the same (chunk, micro-batch). MODELING.md section 6 has the bubble formulas.

For the engine: in schedules that do not split the backward (`not splits_backward(name)`: afab, 1f1b,
interleaved-1f1b) the input gradient goes upstream only after the whole backward, W included; sending
it when B ends would understate their bubble (1F1B p=4 m=8 at equal F/B/W: 20.0 % instead of 27.3 %).

Naming against torch's schedule IR (`torch.distributed.pipelining`, ECOSYSTEM.md 2.5): torch's
`cBm` (full backward) is our B then W, torch's `cIm` is our B, torch's `cWm` is our W; torch's
stage index is our chunk index.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SCHEDULES = ("afab", "1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev")
"""Schedule names as in the scenario contract (`parallel.pp_schedule`)."""

KINDS = ("F", "B", "W")
V_SHAPED = ("zbv", "dualpipev")
SPLIT_BACKWARD = ("zb-h1", "zbv", "dualpipev")
"""Schedules that run the weight-grad pass W apart from the input-grad pass B."""


def splits_backward(name: str) -> bool:
    """True where the upstream gradient may leave when B ends (zero-bubble schedules)."""
    return name in SPLIT_BACKWARD


@dataclass(frozen=True, slots=True)
class Action:
    """One compute pass of one micro-batch through one pipeline chunk."""
    kind: str
    """"F" forward, "B" input-grad backward, "W" weight-grad backward."""
    chunk: int
    """Pipeline chunk 0..pp*vpp-1 in pipeline order (chunk 0 holds the embedding, the last the loss)."""
    mb: int
    """Micro-batch 0..m-1."""


# ------------------------------------------------------------------------------- placement

def chunk_rank(name: str, pp: int, vpp: int, chunk: int) -> int:
    """Pipeline rank that holds `chunk`.

    V schedules (ZB-V, DualPipeV): chunks 0..pp-1 on ranks 0..pp-1, then pp..2pp-1 on ranks pp-1..0.
    Otherwise chunk c on rank c % pp (Megatron virtual pipeline, NAR21 §2.2.2; c = rank when vpp = 1)."""
    if not 0 <= chunk < pp * vpp:
        raise ValueError(f"chunk {chunk} outside 0..{pp * vpp - 1}")
    if name in V_SHAPED:
        return chunk if chunk < pp else 2 * pp - 1 - chunk
    return chunk % pp


def check_schedule_args(name: str, pp: int, vpp: int, m: int) -> None:
    """Raise ValueError unless (name, pp, vpp, m) is a combination the schedule is defined for."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {name!r}; one of {', '.join(SCHEDULES)}")
    if pp < 1 or m < 1:
        raise ValueError(f"pp = {pp} and m = {m} must be >= 1")
    if name in ("afab", "1f1b", "zb-h1") and vpp != 1:
        raise ValueError(f"{name} needs vpp = 1, got {vpp}")
    if name in V_SHAPED and vpp != 2:
        raise ValueError(f"{name} needs vpp = 2 (V shape), got {vpp}")
    if name == "interleaved-1f1b":
        if vpp < 2:
            raise ValueError(f"interleaved-1f1b needs vpp >= 2, got {vpp}")
        if m % pp:
            raise ValueError(f"interleaved-1f1b needs m ({m}) to be a multiple of pp ({pp})")
    if name == "dualpipev" and m < 2 * pp:
        raise ValueError(f"dualpipev needs m >= 2*pp = {2 * pp}, got {m}")


# ------------------------------------------------------------------------------- schedules

def pipeline_schedule(name: str, pp: int, vpp: int, m: int) -> list[list[Action]]:
    """Per pipeline rank, the actions in execution order."""
    check_schedule_args(name, pp, vpp, m)
    if name == "afab":
        return [_afab(r, m) for r in range(pp)]
    if name == "1f1b":
        return [_one_f_one_b(r, pp, m) for r in range(pp)]
    if name == "interleaved-1f1b":
        return [_interleaved(r, pp, vpp, m) for r in range(pp)]
    if name == "zb-h1":
        return [_zb_h1(r, pp, m) for r in range(pp)]
    if name == "zbv":
        return [_zbv(r, pp, m) for r in range(pp)]
    return [_dualpipev(r, pp, m) for r in range(pp)]


def _bw(chunk: int, mb: int) -> list[Action]:
    """A backward that is not split: B and W back to back."""
    return [Action("B", chunk, mb), Action("W", chunk, mb)]


def _afab(rank: int, m: int) -> list[Action]:
    """GPipe / all-forward-all-backward (NAR21 §2.2.1): every forward, then every backward in
    micro-batch order (as torch `ScheduleGPipe`)."""
    out = [Action("F", rank, i) for i in range(m)]
    for i in range(m):
        out += _bw(rank, i)
    return out


def _one_f_one_b(rank: int, pp: int, m: int) -> list[Action]:
    """1F1B / PipeDream-Flush (NAR21 §2.2.1, Megatron `forward_backward_pipelining_without_interleaving`):
    pp-1-rank warm-up forwards, then alternate F and B, then drain the remaining backwards."""
    warm = min(pp - 1 - rank, m)
    out = [Action("F", rank, i) for i in range(warm)]
    for i in range(warm, m):
        out.append(Action("F", rank, i))
        out += _bw(rank, i - warm)
    for i in range(m - warm, m):
        out += _bw(rank, i)
    return out


def _interleaved(rank: int, pp: int, vpp: int, m: int) -> list[Action]:
    """Interleaved 1F1B (NAR21 §2.2.2) in Megatron-core's order (`get_pp_rank_microbatches`,
    `get_schedule_table` with microbatch_group_size_per_vp_stage = pp): forwards walk micro-batches in
    groups of pp per local chunk, backwards the same with local chunks reversed; warm-up is
    (pp-rank-1)*2 + (vpp-1)*pp forwards, capped at m*vpp; then 1F1B; then drain."""
    order = [(mb, local) for g in range(0, m, pp) for local in range(vpp) for mb in range(g, g + pp)]
    fwd = [Action("F", local * pp + rank, mb) for mb, local in order]
    bwd = [(vpp - 1 - local) * pp + rank for _, local in order]
    bwd_mb = [mb for mb, _ in order]
    total = m * vpp
    warm = min((pp - rank - 1) * 2 + (vpp - 1) * pp, total)
    out = fwd[:warm]
    for k in range(warm, total):
        out.append(fwd[k])
        out += _bw(bwd[k - warm], bwd_mb[k - warm])
    for k in range(total - warm, total):
        out += _bw(bwd[k], bwd_mb[k])
    return out


class _Lane:
    """One rank's action list under construction: per-(kind, chunk) counters hand out micro-batch
    numbers in order, and W's of split backwards can wait in a queue (ZB's deferred W)."""
    __slots__ = ("actions", "_next", "_waiting")

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self._next: dict[tuple[str, int], int] = {}
        self._waiting: list[Action] = []

    def _take(self, kind: str, chunk: int) -> int:
        mb = self._next.get((kind, chunk), 0)
        self._next[(kind, chunk)] = mb + 1
        return mb

    def f(self, chunk: int) -> None:
        self.actions.append(Action("F", chunk, self._take("F", chunk)))

    def b(self, chunk: int, defer_w: bool = False) -> None:
        mb = self._take("B", chunk)
        self.actions.append(Action("B", chunk, mb))
        (self._waiting if defer_w else self.actions).append(Action("W", chunk, mb))

    def w(self, chunk: int | None = None) -> bool:
        """Run the oldest waiting W (of `chunk` if given); False if none waits."""
        for i, a in enumerate(self._waiting):
            if chunk is None or a.chunk == chunk:
                self.actions.append(self._waiting.pop(i))
                return True
        return False

    def count(self, kind: str, chunk: int) -> int:
        """How many `kind` passes of `chunk` the lane holds so far."""
        return self._next.get((kind, chunk), 0)


def _zb_h1(rank: int, pp: int, m: int) -> list[Action]:
    """ZB-H1 (Qi et al., ICLR'24 "Zero Bubble Pipeline Parallelism" §3.1, Fig. 3): 1F1B's F/B order
    with the backward split into B and W. Rank r runs its first r B's without their W; from then on
    each B is followed by the oldest waiting W, so r W's stay queued and fill the cool-down bubble,
    which is longer the later the rank (as torch `ScheduleInterleavedZeroBubble` with one stage per
    rank). Bubble (p-1)(T_F+T_B-T_W) for T_W <= T_B; activations as 1F1B (ZB Table 2)."""
    lane = _Lane()
    warm = min(pp - 1 - rank, m)

    def backward() -> None:
        lane.b(rank, defer_w=True)
        if lane.count("B", rank) > rank:
            lane.w()

    for _ in range(warm):
        lane.f(rank)
    for _ in range(m - warm):
        lane.f(rank)
        backward()
    for _ in range(warm):
        backward()
    while lane.w():
        pass
    return lane.actions


def _zbv(rank: int, pp: int, m: int) -> list[Action]:
    """ZB-V (Qi et al., arXiv:2401.10241 §6; sail-sg `handcrafted_zb_v.py`, torch
    `ScheduleZBVZeroBubble`): V-shaped 2 chunks per rank, hand-built for T_F = T_B = T_W.
    Warm-up 2(pp-rank)-1 forwards of the down chunk, rank times (F up, F down), then pp-rank times
    (F up, B+W up); steady (F down, B+W down, F up, B+W up); cool-down rank times (B down, B up) and
    pp-rank times (B down, oldest W down) with W's deferred, then the waiting W's, up chunk first.
    Built for max(m, 2pp-1) micro-batches, then the ones >= m are dropped (as the reference does),
    which keeps every order dependency-safe."""
    down, up = rank, 2 * pp - 1 - rank
    n = max(m, 2 * pp - 1)
    lane = _Lane()
    for _ in range(2 * (pp - rank) - 1):
        lane.f(down)
    for _ in range(rank):
        lane.f(up)
        lane.f(down)
    for _ in range(pp - rank):
        lane.f(up)
        lane.b(up)
    while lane.count("F", up) < lane.count("F", down) or lane.count("F", down) < n:
        if lane.count("F", down) < n:
            lane.f(down)
        lane.b(down)
        lane.f(up)
        lane.b(up)
    for _ in range(rank):
        lane.b(down, defer_w=True)
        lane.b(up, defer_w=True)
    for _ in range(pp - rank):
        lane.b(down, defer_w=True)
        lane.w(down)
    while lane.w(up):
        pass
    while lane.w(down):
        pass
    return [a for a in lane.actions if a.mb < m]


def _dualpipev(rank: int, pp: int, m: int) -> list[Action]:
    """DualPipeV, the V-shaped "cut-in-half" DualPipe (DeepSeek-V3 report §3.2.1;
    deepseek-ai/DualPipe `dualpipev.py`, torch `ScheduleDualPipeV`), 8 steps per rank.
    The overlapped forward+backward pairs of step 4/5 are emitted F first, then B and W (a rank is
    serial here; the engine may overlap their communication). Needs m >= 2pp."""
    down, up = rank, 2 * pp - 1 - rank
    lane = _Lane()
    for _ in range((pp - rank - 1) * 2):        # 1: F down
        lane.f(down)
    for _ in range(rank + 1):                   # 2: F down, F up
        lane.f(down)
        lane.f(up)
    for _ in range(pp - rank - 1):              # 3: B up (split, but its W runs at once), F up
        lane.b(up)
        lane.f(up)
    for _ in range(m - 2 * pp + rank + 1):      # 4: (F down & B up), (F up & B down)
        lane.f(down)
        lane.b(up)
        lane.f(up)
        lane.b(down)
    for _ in range(pp - rank - 1):              # 5: B up, (F up & B down)
        lane.b(up)
        lane.f(up)
        lane.b(down)
    split = False                               # 6: B up, B down; W deferred from the middle on
    for i in range(rank + 1):
        if i == (rank + 1) // 2 and rank % 2 == 1:
            split = True
        lane.b(up, defer_w=split)
        if i == (rank + 1) // 2 and rank % 2 == 0:
            split = True
        lane.b(down, defer_w=split)
    for _ in range(pp - rank - 1):              # 7: oldest W, B down (split)
        lane.w()
        lane.b(down, defer_w=True)
    while lane.w():                             # 8: the remaining W's
        pass
    return lane.actions


# ------------------------------------------------------------------------------- analysis

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


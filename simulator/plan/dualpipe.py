"""DeepSeek's DualPipe family (DeepSeek-V3 report §3.2.1, deepseek-ai/DualPipe): each rank runs the same eight
steps, in which the forward of one micro-batch and the backward of another are paired (`Action.overlap`) so that
each one's all-to-alls run under the other's compute (`plan/overlap.py`).

dualpipe   bidirectional DualPipe (`dualpipe.py`). The model is held twice: copy 0 splits it over the pp ranks in
           order, copy 1 over the same ranks in reverse, so rank r holds stage r of copy 0 and stage p-1-r of copy
           1 (chunks r and 2p-1-r in clustersim's numbering: chunks 0..p-1 are copy 0 on ranks 0..p-1, chunks
           p..2p-1 copy 1 on ranks p-1..0, the V-shaped placement). Half the micro-batches enter at rank 0 and
           run through copy 0, the other half enter at rank p-1 and run through copy 1 (`ScheduleSpec.routes` 2).
           Rank r and rank p-1-r hold the same two stages, so their gradients are summed as data-parallel
           replicas' are (`layout.group_ranks`). Steps with half_rank = min(r, p-1-r) over p/2 half ranks and
           m/2 micro-batches per direction; phase 0 is copy 0 on the first half of the ranks and copy 1 on the
           second (`phase ^= is_in_second_half`). Needs an even p and m, m >= 2p.
dualpipev  the V-shaped "cut-in-half" DualPipe (`dualpipev.py`, torch `ScheduleDualPipeV`): one copy, cut into
           2p chunks placed V-shaped, every micro-batch through all of them; the same steps with rank for
           half_rank, p for the half ranks and m for the micro-batches. Needs m >= 2p.

Bubble (DualPipe README): (p/2 - 1)(F&B + B - 3W) for DualPipe, against (p - 1)(F + B) for 1F1B; activations
p + 1 stage passes (DualPipe) and 2p + 1 chunk passes (DualPipeV).
"""
from __future__ import annotations

from .pipeline_actions import Action, Lane


def _eight_steps(ch0: int, ch1: int, half_rank: int, half_ranks: int, n: int, first: dict[int, int] | None = None) -> list[Action]:
    """The eight steps of `dualpipe.py` / `dualpipev.py` for a rank whose phase-0 and phase-1 chunks are ch0 and
    ch1, over n micro-batches per phase. The overlapped pairs of steps 4 and 5 are emitted F first
    (`Action.overlap`), then B and W; the middle ranks do not overlap their first pair "to further reduce bubble
    size". Steps 3 and 7 split the backward (zero bubble), step 6 from its middle on."""
    h, hr = half_ranks, half_rank
    lane = Lane(first)
    for _ in range((h - hr - 1) * 2):         # 1: nF0
        lane.f(ch0)
    for _ in range(hr + 1):                   # 2: nF0F1
        lane.f(ch0)
        lane.f(ch1)
    for _ in range(h - hr - 1):               # 3: nB1W1F1 (its W at once)
        lane.b(ch1)
        lane.f(ch1)
    for i in range(n - 2 * h + hr + 1):       # 4: nF0B1F1B0
        lane.f(ch0, overlap=not (i == 0 and hr == h - 1))
        lane.b(ch1)
        lane.f(ch1, overlap=True)
        lane.b(ch0)
    for _ in range(h - hr - 1):               # 5: nB1F1B0
        lane.b(ch1)
        lane.f(ch1, overlap=True)
        lane.b(ch0)
    split = False                             # 6: nB1B0, W deferred from the middle on
    for i in range(hr + 1):
        if i == (hr + 1) // 2 and hr % 2 == 1:
            split = True
        lane.b(ch1, defer_w=split)
        if i == (hr + 1) // 2 and hr % 2 == 0:
            split = True
        lane.b(ch0, defer_w=split)
    for _ in range(h - hr - 1):               # 7: nWB0
        lane.w()
        lane.b(ch0, defer_w=True)
    while lane.w():                           # 8: nW
        pass
    return lane.actions


def dualpipev_actions(rank: int, pp: int, vpp: int, m: int) -> list[Action]:
    """DualPipeV: phase 0 the down chunk (rank), phase 1 the up chunk (2p-1-rank), every micro-batch."""
    return _eight_steps(rank, 2 * pp - 1 - rank, rank, pp, m)


def dualpipev_inflight(rank: int, pp: int, vpp: int, m: int) -> list[int]:
    """2p+1 chunk-passes (DualPipe README: "PP+1" activations for PP = 2p stages): down chunk 2p-i, up
    chunk i+1 (steps 1-4: 2(p-i-1) + (i+1) down, i+1 up, then one more forward overlapped with a backward)."""
    return [min(2 * pp - rank, m), min(rank + 1, m)]


def _phases(rank: int, pp: int) -> tuple[int, int, int]:
    """DualPipe: (phase-0 chunk, phase-1 chunk, half_rank) of `rank`. Its copy-0 chunk is `rank`, its copy-1
    chunk 2p-1-rank; phase 0 is copy 0 on the first half of the ranks, copy 1 on the second."""
    copy0, copy1 = rank, 2 * pp - 1 - rank
    second = rank >= pp // 2
    return (copy1, copy0, pp - 1 - rank) if second else (copy0, copy1, rank)


def dualpipe_actions(rank: int, pp: int, vpp: int, m: int) -> list[Action]:
    """Bidirectional DualPipe: micro-batches 0..m/2-1 through copy 0, m/2..m-1 through copy 1."""
    ch0, ch1, hr = _phases(rank, pp)
    return _eight_steps(ch0, ch1, hr, pp // 2, m // 2, first={2 * pp - 1 - rank: m // 2})


def dualpipe_inflight(rank: int, pp: int, vpp: int, m: int) -> list[int]:
    """p+1 stage passes (DualPipe README): p - half_rank on the phase-0 stage (steps 1, 2 and the first overlapped
    forward of step 4), half_rank + 1 on the phase-1 stage; in local order (copy 0's chunk first)."""
    ch0, _, hr = _phases(rank, pp)
    p0, p1 = min(pp - hr, m // 2), min(hr + 1, m // 2)
    return [p0, p1] if ch0 == rank else [p1, p0]

"""Compute beside collectives: NCCL's collective kernels run on the GPU's own SMs (one thread block per
channel, resident for the whole collective, whether its data crosses NVLink or waits on the NIC), so a
GEMM that overlaps one runs on the SMs left over.

A compute op progresses at rate 1 - s while a collective of its rank is in flight beside it and at full
rate otherwise, s = `cluster.efficiency.comm_sm_share` (`CostModel.sm_share`; 0 by default: no
slowdown). Counted: the TP / CP / EP collectives inside a pass (`evaluate/passes.py`) and the gradient
buckets overlapped with the backward that releases them (`overlap_dp`: on every pass that releases them,
i.e. ZeRO-2's every backward; both evaluators, `evaluate/analytic.py` and `engine/sim.py`); not yet:
ZeRO's parameter gathers overlapped with forwards, ZeRO-3's per-layer traffic, PP sends. This is why Megatron's `--tp-comm-overlap` moves the TP transfers to copy
engines (userbuffers); nanotron's async column linears and DDP hooks overlap them with SM kernels.
"""
from __future__ import annotations


def slowed_end(start: float, work: float, busy: list[tuple], share: float) -> float:
    """End of a compute op that takes `work` seconds alone, started at `start`, progressing at 1 - share
    while any interval (begin, end, ...) of `busy` is in flight. With one collective over [b, e], b <= start:
    start + work / (1 - share) if the op ends first, else start + work + share * (e - start)."""
    if share <= 0.0 or work <= 0.0 or not busy:
        return start + work
    rate = 1.0 - share
    t, left = start, work
    for b, e in _union(busy, start):
        if b > t:  # full speed until the next collective
            if t + left <= b:
                return t + left
            left -= b - t
            t = b
        cap = (e - t) * rate
        if left <= cap:
            return t + left / rate
        left -= cap
        t = e
    return t + left


def in_turn(jobs: list[tuple[float, float]], free: float = 0.0) -> list[tuple[float, float]]:
    """(start, end) of collectives (release time, seconds) run one after another on one stream free from
    `free`, each from its release: the in-flight intervals of overlapped gradient buckets (both estimators)."""
    out, at = [], free
    for release, secs in jobs:
        start = max(at, release)
        at = start + secs
        out.append((start, at))
    return out


def beside_end(start: float, work: float, beside: list[tuple[float, float, str]], share: float) -> tuple[float, str | None]:
    """`slowed_end` over collectives (begin, end, dim), and the dimension charged for the slowdown (the
    collective overlapping the op longest; None when it was not slowed)."""
    end = slowed_end(start, work, beside, share)
    if end <= start + work:
        return start + work, None
    return end, max(beside, key=lambda x: min(x[1], end) - max(x[0], start))[2]


def _union(busy: list[tuple], start: float) -> list[tuple[float, float]]:
    """The in-flight time of `busy` after `start`, as sorted disjoint intervals."""
    out: list[list[float]] = []
    for b, e in sorted((max(x[0], start), x[1]) for x in busy if x[1] > start):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return [(b, e) for b, e in out]

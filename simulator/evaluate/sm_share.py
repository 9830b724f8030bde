"""Compute beside collectives: NCCL's collective kernels run on the GPU's own SMs (one thread block per
channel, resident for the whole collective, whether its data crosses NVLink or waits on the NIC), so a
GEMM that overlaps one runs on the SMs left over.

A compute op progresses at rate 1 - s while a collective of its rank is in flight beside it and at full
rate otherwise, s = the collective's share (`CostModel.sm_share`): `cluster.efficiency.comm_sm_share`
(0 by default: no slowdown), and for the expert all-to-alls the SMs their dispatcher's kernels hold over
the GPU's (`cost/ep_sm_share.py`). Where collectives of different shares are in flight together the
largest counts (the SMs they hold might add up; not priced). Counted: the TP / CP / EP collectives inside a pass (`evaluate/passes.py`) and the gradient
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
    return _run(start, work, _spans([(x[0], x[1], share) for x in busy], start))


def _run(start: float, work: float, spans: list[tuple[float, float, float]]) -> float:
    """End of `work` seconds of compute from `start` over sorted disjoint (begin, end, share) spans: rate
    1 - share inside a span, 1 between them."""
    t, left = start, work
    for b, e, share in spans:
        if b > t:  # full speed until the next collective
            if t + left <= b:
                return t + left
            left -= b - t
            t = b
        rate = 1.0 - share
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


def beside_end(start: float, work: float, beside: list[tuple[float, float, str, float]]) -> tuple[float, str | None]:
    """`slowed_end` over collectives (begin, end, dim, share), each at its own share (the largest where
    several are in flight), and the dimension charged for the slowdown (the collective overlapping the op
    longest; None when it was not slowed)."""
    end = _run(start, work, _spans([(x[0], x[1], x[3]) for x in beside], start)) if work > 0.0 else start
    if end <= start + work:
        return start + work, None
    return end, max(beside, key=lambda x: min(x[1], end) - max(x[0], start))[2]


def _spans(busy: list[tuple[float, float, float]], start: float) -> list[tuple[float, float, float]]:
    """The in-flight time of `busy` (begin, end, share) after `start` as sorted disjoint (begin, end, share)
    spans, each at the largest share in flight over it; touching or overlapping collectives of one share make
    one span. One sweep over the sorted begin and end times."""
    opens: dict[float, list[float]] = {}
    closes: dict[float, list[float]] = {}
    for b, e, sh in busy:
        b = max(b, start)
        if e > b and sh > 0.0:
            opens.setdefault(b, []).append(sh)
            closes.setdefault(e, []).append(sh)
    active: dict[float, int] = {}
    out: list[list[float]] = []
    cuts = sorted({*opens, *closes})
    for lo, hi in zip(cuts, cuts[1:]):
        for sh in closes.get(lo, ()):
            active[sh] -= 1
            if not active[sh]:
                del active[sh]
        for sh in opens.get(lo, ()):
            active[sh] = active.get(sh, 0) + 1
        s = max(active, default=0.0)
        if s <= 0.0:
            continue
        if out and out[-1][1] == lo and out[-1][2] == s:
            out[-1][1] = hi
        else:
            out.append([lo, hi, s])
    return [(b, e, s) for b, e, s in out]

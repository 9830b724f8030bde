"""What the engine measured, read off the simulated timeline (not from formulas).

Per simulated rank, over the step [0, T] where T = the latest rank's end (the iteration time):
  busy      = compute + recompute + optimizer seconds on the compute stream;
  exposed_d = seconds the compute stream waited on dimension d's communication (inside passes: TP/CP/EP
              collectives it depends on; outside: a PP receive after the sender's data was ready, DP/ZeRO
              collectives after all group members were ready);
  bubble    = T - busy - sum_d exposed_d: idle for lack of work (pipeline fill/drain, waiting for an
              upstream stage's compute or for a slower peer), excluding its own exposed communication.
The critical rank is the least idle one (the most loaded stage; among equals the one that ends last,
`critical_rank`); `bubble_fraction` (its bubble / T: NAR21's idle share of wall time, (p-1)/(m+p-1) for
1F1B with uniform stages), `comm`, `breakdown` and `overlap_fraction` = 1 - exposed/total communication
are all taken on it, so the headline bubble is the breakdown's. `breakdown` sums to T.
`contention_s` (per dimension, on the critical rank) is how much longer its transfers took than
priced alone because others shared their links (`links.py`): part of `comm` time_s, not a breakdown
term (what of it the compute stream waited for is already in exposed or bubble).
Memory per stage: static states + buffers (`memory.static_bytes`, `memory.buffers_total`) + the peak of
the activation timeline (allocated at F start, released at B end).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .passes import COMM_DIMS
from .sm_share import in_turn, slowed_end


@dataclass(frozen=True, kw_only=True)
class StageResult:
    stage: int
    rank: int
    """Global rank reported for the stage (its worst simulated rank)."""
    end_s: float
    """When the rank finished its step (optimizer and any exposed parameter gather)."""
    compute_s: float
    recompute_s: float
    optimizer_s: float
    bubble_s: float
    comm: dict
    """dim -> (seconds of communication, seconds exposed)."""
    comm_count: dict
    """dim -> number of collectives / p2p sends of non-zero duration the rank issued."""
    contention_s: dict
    """dim -> seconds its transfers took beyond their alone prices (link sharing)."""
    activation_peak_bytes: float
    memory_peak_bytes: float


@dataclass(frozen=True, kw_only=True)
class EngineResult:
    iteration_time_s: float
    """One optimizer step: from the step start (all ranks idle, parameters gathered in steady state) until
    the last rank ends."""
    bubble_fraction: float
    """The critical rank's bubble / iteration time: `breakdown["bubble_s"]` as a share of the step (module
    docstring). Each stage's own bubble is in `stages`."""
    comm: dict
    """dim (tp, dp, pp, cp, ep) -> (time_s, exposed_s) on the critical rank."""
    overlap_fraction: float
    """Hidden / total communication time on the critical rank (0 when it has none)."""
    breakdown: dict
    """Seconds on the critical rank: compute_s, recompute_s, optimizer_s, bubble_s, exposed_<dim>_s; sums to
    iteration_time_s."""
    memory_peak_bytes: tuple
    """Per stage: static + buffers + peak of the activation timeline."""
    events: int
    """SimPy events processed."""
    ops_simulated: int
    """Op instances on the simulated ranks' timelines (each pass's ops, collectives, p2p, optimizer): what
    the events stand for once passes are coarsened into one timed segment each."""
    ranks_simulated: int
    wall_s: float
    hfu_flops: float
    """FLOPs executed in the step by all GPUs, recomputation included."""
    critical_rank: int
    contention_s: dict = field(default_factory=dict)
    """dim (tp, dp, pp, cp, ep) -> seconds the critical rank's transfers took beyond their alone prices
    because concurrent transfers shared their links (`links.py`); included in `comm` time_s, not in
    `breakdown`. All zero with contention off."""
    transfers_shared: int = 0
    """Transfers (all simulated ranks) that ran slower than alone at some point."""
    stages: tuple = field(default_factory=tuple)
    """StageResult per pipeline stage."""
    full: bool = False
    contention: bool = True
    """Whether link sharing between concurrent transfers was on."""


def stage_results(sc, ranks, T: float, static: list[float]) -> list[StageResult]:
    """The worst (most bubble) simulated rank of each stage."""
    best: dict = {}
    for rk in ranks:
        bubble = max(0.0, idle_s(rk, T))
        sr = StageResult(stage=rk.stage, rank=rk.grank, end_s=rk.end, compute_s=rk.compute_s, recompute_s=rk.recompute_s,
                         optimizer_s=rk.optimizer_s, bubble_s=bubble,
                         comm={d: (rk.comm.get(d, 0.0), rk.exposed.get(d, 0.0)) for d in COMM_DIMS},
                         comm_count={d: rk.count.get(d, 0) for d in COMM_DIMS},
                         contention_s={d: rk.contention.get(d, 0.0) for d in COMM_DIMS},
                         activation_peak_bytes=rk.act_peak, memory_peak_bytes=static[rk.stage] + rk.act_peak)
        cur = best.get(rk.stage)
        if cur is None or (sr.bubble_s, sr.memory_peak_bytes) > (cur.bubble_s, cur.memory_peak_bytes):
            best[rk.stage] = sr
    return [best[s] for s in sorted(best)]


def idle_s(rk, T: float) -> float:
    """A rank's seconds of the step without work: T less its compute, recompute, optimizer and exposed communication
    (module docstring: its bubble, before clamping at 0)."""
    busy = rk.compute_s + rk.recompute_s + rk.optimizer_s
    exposed = sum(rk.exposed.get(d, 0.0) for d in COMM_DIMS)
    return T - busy - exposed


def critical_rank(ranks, T: float):
    """The rank that sets the pace: the least idle (T - busy - exposed communication), so the most loaded stage of an
    uneven pipeline (a light first stage of dense layers beside MoE stages only waits on the others); among ranks idle
    alike (within 1e-6 of T: uniform stages) the one that ends last, then the lowest stage."""
    def idle(rk) -> float:
        return round(idle_s(rk, T) / T, 6) if T > 0 else 0.0
    return min(ranks, key=lambda rk: (idle(rk), -rk.end, rk.stage))


def summarize(sc, ranks, static: list[float], *, events: int, wall_s: float, full: bool, links=None) -> EngineResult:
    T = max(rk.end for rk in ranks)
    stages = stage_results(sc, ranks, T, static)
    crit = critical_rank(ranks, T)
    comm = {d: (crit.comm.get(d, 0.0), crit.exposed.get(d, 0.0)) for d in COMM_DIMS}
    exposed = sum(e for _, e in comm.values())
    total = sum(t for t, _ in comm.values())
    breakdown = {"compute_s": crit.compute_s, "recompute_s": crit.recompute_s, "optimizer_s": crit.optimizer_s,
                 "bubble_s": max(0.0, idle_s(crit, T)), **{f"exposed_{d}_s": comm[d][1] for d in COMM_DIMS}}
    replicas = 1 if full else sc.gpus // sc.parallel.pp
    peaks = [0.0] * sc.parallel.pp
    for s in stages:
        peaks[s.stage] = s.memory_peak_bytes
    return EngineResult(
        iteration_time_s=T,
        bubble_fraction=breakdown["bubble_s"] / T if T > 0 else 0.0,
        comm=comm,
        overlap_fraction=min(1.0, max(0.0, 1.0 - exposed / total)) if total > 0 else 0.0,
        breakdown=breakdown,
        memory_peak_bytes=tuple(peaks),
        events=events,
        ops_simulated=sum(rk.ops for rk in ranks),
        ranks_simulated=len(ranks),
        wall_s=wall_s,
        hfu_flops=sum(rk.flops for rk in ranks) * replicas,
        critical_rank=crit.grank,
        contention_s={d: crit.contention.get(d, 0.0) for d in COMM_DIMS},
        transfers_shared=links.slowed if links is not None else 0,
        stages=tuple(stages),
        full=full,
        contention=links is not None,
    )


def add_pass_stats(rk, compute_s: float, recompute_s: float, flops: float, comm: dict, exposed: dict, count: dict,
                   contention: dict | None = None) -> None:
    """Add one pass's totals (a replayed template's or a freshly scheduled pass's) to its rank's accumulators
    (the engine's `RankState`, the analytic's `_Rank`: the names `summarize` reads)."""
    rk.compute_s += compute_s
    rk.recompute_s += recompute_s
    rk.flops += flops
    for d, v in comm.items():
        rk.comm[d] += v
    for d, v in exposed.items():
        rk.exposed[d] += v
    for d, v in count.items():
        rk.count[d] += v
    for d, v in (contention or {}).items():
        rk.contention[d] += v


def receive(rk, ready: float, msg: tuple, blocking: bool) -> float:
    """When a pass that consumes a PP message can start, the rank free at `ready`: the message (arrival, the
    sender's data-ready time, transfer seconds) has arrived; with blocking sends (`parallel.pp_p2p:
    blocking`) a receive posted after the send began holds the rank for the whole transfer. The wait after
    the sender's data was ready is exposed PP time on `rk`, the wait before it bubble."""
    arrival, data_ready, transfer = msg
    if blocking:
        arrival = max(arrival, ready + transfer)
    if arrival > ready:
        rk.exposed["pp"] += arrival - max(ready, data_ready)
        return arrival
    return ready


def wait_until(rk, end: float, ready: float, dim: str, since: float) -> float:
    """The compute stream, free since `since`, waits for a collective of dimension `dim` ending at `end`
    whose members' data was ready at `ready`: the wait after `ready` is exposed `dim` time on `rk`, the wait
    before it peers' skew (bubble). Returns when the stream goes on."""
    if end > since:
        rk.exposed[dim] += max(0.0, min(end - max(since, ready), end - since))
        return end
    return since


def slowed_beside_grads(rk, ready: float, end: float, jobs: list, dp_free: float, share: float) -> float:
    """End of a pass [ready, end] that released overlapped gradient buckets, `jobs` = (release time, seconds)
    each: they run one after another on the rank's dp stream, free from `dp_free`, and take `share` of the
    compute rate while in flight beside the pass (`sm_share.slowed_end`). The slowdown is exposed DP time."""
    if share <= 0.0:
        return end
    slowed = slowed_end(ready, end - ready, in_turn(jobs, dp_free), share)
    rk.exposed["dp"] += slowed - end
    return slowed

"""The analytic step-time estimate: the fast path `sweep` uses to prune, and `run --estimator analytic`.

Per pipeline rank, each pass (F, B, W of a chunk for one micro-batch) is list-scheduled once over its
op graph (compute stream + one stream per communication dimension), which gives its duration and the
communication it leaves exposed. The pipeline then takes its schedule's exact span (`exact_span`: the
schedule's rank lists, as the engine runs them, with free communication; 1F1B's steady state adds
1 p2p per pipeline neighbour, 2 if blocking, `pipeline_time`). The closed forms it generalises, exact
for uniform stages and enough micro-batches (MODELING.md 6):
  1F1B / AFAB      T = (m-1)*max_r(t_r) + sum_r t_r                  (NAR21 Eq. 1)
  interleaved      T = m*max_r(t_r) + (p-1)*max_r(t_r)/v               (NAR21 §2.2.2)
  ZB-H1            T = m*max_r(t_r) + (p-1)*(T_F + T_B - T_W)          (ZB Table 2; m >= p)
  ZB-V             T = m*max_r(t_r) + (p-1)*max(0, T_F + T_B - 2*T_W)  (ZB README; the lists here add
                   the fill delay, (p-1) chunk forwards)
  DualPipeV        T = m*max_r(t_r) + (p/2-1)*max(0, T_F + 2*T_B - 3*T_W) ... (DSV3 Table 2, F&B = F + B)
plus the p2p latency of the first traversal, the exposed DP/ZeRO communication (ZeRO-0's buckets
released block by block over the last backward, `_release_shares`; ZeRO-2's on every backward,
`zero2_backlog`), the tied-embedding gradient all-reduce between the first and the last stage
(`ops.tied_embedding_allreduce`), SP's norm-gradient all-reduce over TP (`ops.sp_norm_grad_allreduce`)
and the optimizer step.
The discrete-event engine measures all of this on a timeline instead; this file stays a formula.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from functools import lru_cache

from .costs import CostModel
from .layout import chunk_owner, group_shape, last_chunk, pair_shape, pp_rank_of_stage_rank, rank_chunks
from .ops import (Comm, Compute, Node, bucket_release_blocks, dp_buckets, embedding_backward, embedding_forward,
                  head_backward, head_forward, layer_passes, optimizer_op, param_bytes, param_gather_buckets,
                  pp_activation_bytes, rank_blocks, rank_params, shard, sp_norm_grad_allreduce,
                  tied_embedding_allreduce)
from .scenario import Scenario
from .schedules import chunk_rank, makespan, pipeline_schedule, schedule_spec
from .sm_share import beside_end, in_turn, slowed_end

DIMS = ("tp", "cp", "ep", "dp", "pp")


@dataclass
class PassTime:
    """One pass (F, B or W of one chunk, one micro-batch) on one rank."""
    duration: float = 0.0
    compute: float = 0.0
    recompute: float = 0.0
    comm: dict = field(default_factory=lambda: defaultdict(float))
    exposed: dict = field(default_factory=lambda: defaultdict(float))
    flops: float = 0.0
    hw_flops: float = 0.0
    host: dict = field(default_factory=lambda: defaultdict(float))
    """Host seconds to issue the pass's collectives, per dimension (`CostModel.host_time`)."""

    def add(self, other: "PassTime", times: float = 1.0) -> None:
        self.duration += other.duration * times
        self.compute += other.compute * times
        self.recompute += other.recompute * times
        self.flops += other.flops * times
        self.hw_flops += other.hw_flops * times
        for d, v in other.comm.items():
            self.comm[d] += v * times
        for d, v in other.exposed.items():
            self.exposed[d] += v * times
        for d, v in other.host.items():
            self.host[d] += v * times

    def host_bound(self, fused: "PassTime | None" = None) -> None:
        """The host runs ahead of the GPU within a pass, so a whole pass takes at least its host time;
        the difference is exposed time of the dimension whose collectives cost it (charged to this pass).
        `fused`: the W pass that runs right after this B on one host clock (schedules without a split
        backward; the engine's fused BW pass): the floor applies to the two together."""
        host = defaultdict(float, self.host)
        for d, v in (fused.host.items() if fused is not None else ()):
            host[d] += v
        total = sum(host.values())
        duration = self.duration + (fused.duration if fused is not None else 0.0)
        if total > duration:
            self.exposed[max(host, key=host.get)] += total - duration
            self.duration += total - duration


def _group(sc: Scenario, op: Comm):
    return group_shape(sc, op.group or op.dim)


def pass_time(sc: Scenario, cost: CostModel, nodes: tuple[Node, ...], groups: dict | None = None) -> PassTime:
    """List-schedule one node list: compute ops in order on the compute stream, each comm on its
    dimension's stream; a compute op that starts after the stream went idle because it waited on a
    comm counts that wait as exposed time of the comm's dimension."""
    groups = groups if groups is not None else {}
    finish = [0.0] * len(nodes)
    free = defaultdict(float)
    out = PassTime()
    beside, share = [], 0.0  # collectives issued so far and the compute share they take (sm_share.py)
    for i, node in enumerate(nodes):
        op = node.op
        ready = max((finish[d] for d in node.deps), default=0.0)
        if isinstance(op, Compute):
            t = cost.compute_time(op)
            start = max(ready, free["compute"])
            if start > free["compute"]:
                # idle because of a dependency: blame the latest-finishing comm it waits for
                waits = [nodes[d].op for d in node.deps if isinstance(nodes[d].op, Comm) and finish[d] > free["compute"]]
                if waits:
                    last = max((d for d in node.deps if isinstance(nodes[d].op, Comm)), key=lambda d: finish[d])
                    out.exposed[nodes[last].op.dim] += start - free["compute"]
            finish[i] = start + t
            if beside:  # slowed by the collectives beside it: exposed time of theirs
                beside = [x for x in beside if x[1] > start]
                finish[i], dim = beside_end(start, t, beside, share)
                if dim:
                    out.exposed[dim] += finish[i] - start - t
            free["compute"] = finish[i]
            if node.tag == "R":
                out.recompute += t
            else:
                out.compute += t
                out.flops += op.flops if op.kind in ("gemm", "attention") else 0.0
            out.hw_flops += op.flops
        else:
            key = op.group or op.dim
            if key not in groups:
                groups[key] = _group(sc, op)
            t = cost.comm_time(op, groups[key])
            out.host[op.dim] += cost.host_time(op, groups[key])
            start = max(ready, free[op.dim])
            finish[i] = start + t
            free[op.dim] = finish[i]
            out.comm[op.dim] += t
            sm = cost.sm_share(groups[key]) if t > 0 else 0.0
            if sm > 0:
                share = sm
                beside.append((start, finish[i], op.dim))
    end = max(finish, default=0.0)
    # communication still running after the last compute op is exposed too
    tail = end - free["compute"]
    if tail > 0:
        last = max(range(len(nodes)), key=lambda i: finish[i])
        out.exposed[nodes[last].op.dim] += tail
    out.duration = end
    return out


@dataclass
class StageTime:
    pp_rank: int
    F: PassTime
    B: PassTime
    W: PassTime
    bwd_blocks: tuple[tuple[float, float, float], ...] = ()
    """The rank's parameter blocks (`ops.rank_blocks`) in backward order: (dense elements, expert elements,
    seconds of its backward, B + W, one micro-batch)."""

    @property
    def total(self) -> float:
        return self.F.duration + self.B.duration + self.W.duration


def stage_times(sc: Scenario, cost: CostModel) -> list[StageTime]:
    """Per pp rank: one micro-batch through all of its chunks (F, B, W summed over chunks)."""
    z = shard(sc)
    groups: dict = {}
    cache: dict = {}
    out = []
    last = sc.parallel.pp * sc.parallel.vpp - 1
    for r in range(sc.parallel.pp):
        F, B, W = PassTime(), PassTime(), PassTime()
        bwd_secs = {}  # backward seconds of the embedding and the LM head blocks
        for chunk, layers in rank_chunks(sc, r):
            for layer in layers:
                moe = sc.model.is_moe_layer(layer)
                if moe not in cache:
                    lp = layer_passes(sc, layer, z)
                    cache[moe] = tuple(pass_time(sc, cost, n, groups) for n in (lp.F, lp.B, lp.W))
                f, b, w = cache[moe]
                F.add(f), B.add(b), W.add(w)
            if chunk == 0:
                F.add(pass_time(sc, cost, embedding_forward(sc, z), groups))
                eb = pass_time(sc, cost, embedding_backward(sc, z), groups)
                B.add(eb)
                bwd_secs["embedding"] = eb.duration
            if chunk == last:
                F.add(pass_time(sc, cost, head_forward(sc, z), groups))
                hb, hw = (pass_time(sc, cost, n, groups) for n in head_backward(sc, z))
                B.add(hb)
                W.add(hw)
                bwd_secs["head"] = hb.duration + hw.duration
        blocks = []
        for kind, layer, dense, expert in reversed(rank_blocks(sc, r)):
            if kind == "layer":
                _, b, w = cache[sc.model.is_moe_layer(layer)]
                secs = b.duration + w.duration
            else:
                secs = bwd_secs[kind]
            blocks.append((sum(dense), sum(expert), secs))
        F.host_bound()
        if schedule_spec(sc.parallel.pp_schedule).splits_backward:
            B.host_bound()
            W.host_bound()
        else:
            B.host_bound(W)
        out.append(StageTime(r, F, B, W, tuple(blocks)))
    return out


@lru_cache(maxsize=256)
def exact_span(schedule: str, pp: int, vpp: int, m: int, forward: tuple[float, ...], backward: tuple[float, ...],
               weight: tuple[float, ...] | float = 0.0) -> float:
    """Span of one step of `schedule` with per-chunk forward, backward and weight-gradient times (chunk c
    on rank `schedules.chunk_rank`; a backward that is not split carries its W in `backward`) and free
    communication: the rank lists of `schedules.pipeline_schedule` run by `schedules.makespan`."""
    span, _ = makespan(_rank_lists(schedule, pp, vpp, m), pp, vpp, forward, backward, weight)
    return span


@lru_cache(maxsize=32)
def _rank_lists(schedule: str, pp: int, vpp: int, m: int) -> list:
    return pipeline_schedule(schedule, pp, vpp, m)


def pipeline_time(sc: Scenario, stages: list[StageTime], p2p_one: float = 0.0) -> float:
    """The span of the pipeline: every schedule's exact span (`exact_span`: its rank lists run with free
    communication) instead of its closed form of MODELING.md 6 (module docstring).

    AFAB and 1F1B take the exact span of their schedule instead of the closed form
    (m-1)*max_r(t_r) + sum_r t_r, which is exact for uniform stages and an upper bound otherwise: with
    nanotron's uneven stages (80B, pp 16, m 64: 6 / 5 ... 5 / 6 / 3 layers) it overstates the pipeline's
    span by 1.8 %, and by 3.9 % when the first stage alone is 22 % slower than the others (their fill and
    drain hide behind its backlog).

    1F1B with `p2p_one` (seconds of one PP send of a micro-batch's activations or their gradient): in the
    steady state a stage may hold at most its distance to the last stage in flight, so a send is never
    hidden behind other micro-batches' work. With `pp_p2p: blocking` each micro-batch pays, on every stage,
    the send it receives and the one it issues in F and in B, one after the other (2 x p2p per pipeline
    neighbour: 4 on an interior stage, 2 on the first and last; nanotron). With `async` the sender goes on,
    so each neighbour costs one p2p per micro-batch (2 on an interior stage, 1 on an end one); the engine
    agrees within 6 % in both modes with sends of 1/6 of a stage's pass (tests/test_engine_comm.py). The
    first traversal's p2p stays outside (`estimate`). AFAB keeps every micro-batch in flight and hides its
    sends.

    Interleaved 1F1B, ZB-H1, ZB-V and DualPipeV: each rank's F, B and W split evenly over its chunks. Their
    closed forms are exact for interleaved 1F1B (m a multiple of p) and for ZB-H1 with m >= p, and fall
    short of the lists elsewhere (tests/test_analytic.py): ZB-H1 at m < p (1.5x at p 4, m 1), ZB-V and
    DualPipeV by their fill delay of (p-1) chunk forwards (ZB-V 1.29x at p = m = 8, 1.04x at m = 4p)."""
    p, v, m = sc.parallel.pp, sc.parallel.vpp, sc.micro_batches
    worst = max(s.total for s in stages)
    if p == 1:
        return m * worst
    s = sc.parallel.pp_schedule
    # each chunk's passes: its rank's split evenly over the rank's chunks (one chunk per rank at vpp = 1)
    owner = [stages[chunk_rank(s, p, v, c)] for c in range(p * v)]
    if schedule_spec(s).splits_backward:
        back, weight = tuple(st.B.duration / v for st in owner), tuple(st.W.duration / v for st in owner)
    else:
        back, weight = tuple((st.B.duration + st.W.duration) / v for st in owner), 0.0
    span = exact_span(s, p, v, m, tuple(st.F.duration / v for st in owner), back, weight)
    if schedule_spec(s).p2p_in_steady_state and p2p_one > 0:
        per_neighbour = 2 if sc.parallel.pp_p2p == "blocking" else 1
        period = max(st.total + per_neighbour * p2p_one * (1 if st.pp_rank in (0, p - 1) else 2) for st in stages)
        span += (m - 1) * (period - worst)
    return span


@dataclass
class AnalyticResult:
    iteration_time_s: float
    bubble_fraction: float
    comm: dict
    overlap_fraction: float
    breakdown: dict
    flops_hw: float
    events: int = 0
    ranks_simulated: int = 0


def _bucket_times(cost: CostModel, op: Comm, group, buckets: list[float]) -> list[float]:
    """Seconds of `op` on each of `buckets` (bytes each); each distinct size priced once."""
    times = {b: cost.comm_time(replace(op, bytes=b), group) for b in set(buckets)}
    return [times[b] for b in buckets]


@dataclass(frozen=True, slots=True)
class DpSync:
    """One pp rank's DP work per step, seconds."""
    sync: float
    """Gradient collectives, all buckets."""
    gather: float
    """ZeRO-1/2 parameter all-gathers."""
    optimizer: float
    grad_buckets: tuple[tuple[float, float], ...]
    """(release, seconds) per gradient bucket in backward order; release: the share of the backward done
    when it is released (`_release_shares`)."""
    first_gather: float
    """The first parameter bucket (the first forward waits for it)."""

    def grad_intervals(self, backward: float) -> list[tuple[float, float]]:
        """(start, end) of each gradient bucket's collective, the backward that releases them taking
        `backward` seconds from 0: one after the other on the DP stream, each from its release."""
        return in_turn([(release * backward, t) for release, t in self.grad_buckets])


def _release_shares(buckets: list[float], block_bytes: list[float], block_secs: list[float]) -> list[float]:
    """Share of the backward done when each bucket (bytes, backward order) is released: when the block
    holding its last byte has finished its backward (blocks in backward order, their gradient bytes and
    backward seconds; `ops.bucket_release_blocks`, the engine's rule). So the LM head's backward comes
    before the first bucket, and the bucket holding the embedding is released at the end. Without blocks,
    every bucket is released at the end."""
    total = sum(block_secs)
    if total <= 0:
        return [1.0] * len(buckets)
    cum_secs, t_acc = [], 0.0
    for secs in block_secs:
        t_acc += secs
        cum_secs.append(t_acc)
    return [min(1.0, cum_secs[k] / total) for k in bucket_release_blocks(buckets, block_bytes)]


def dp_sync_time(sc: Scenario, cost: CostModel, pp_rank: int,
                 bwd_blocks: tuple[tuple[float, float, float], ...] = ()) -> DpSync:
    """One pp rank's DP work: ZeRO-0 all-reduces its gradient buckets (`ops.dp_buckets`); ZeRO-1/2
    reduce-scatter them and all-gather the updated parameters (ZeRO §7.2.1; in the same buckets, or one
    collective with `parallel.zero_gather: whole`); ZeRO-3's per-layer traffic is added separately
    (`zero3_layer_time`). The optimizer updates the rank's shard. `bwd_blocks` (`StageTime.bwd_blocks`) time
    the gradient buckets' releases (`_release_shares`)."""
    p = sc.parallel
    rp = rank_params(sc, pp_rank)
    gb = sc.training.grad_bytes
    sync = gather = first = 0.0
    grads: list[tuple[float, float]] = []
    blocks = rank_blocks(sc, pp_rank)
    for i, group in enumerate(("dp_cp", "edp")):
        tensors = [t for b in blocks for t in b[2 + i]]
        g = group_shape(sc, group)
        if g.size <= 1 or not tensors:
            continue
        coll = "all_reduce" if p.zero == 0 else "reduce_scatter"
        if p.zero < 3:
            buckets = dp_buckets(sc, tensors, gb)
            times = _bucket_times(cost, Comm("dp_grad", "dp", coll, 0.0, group=group), g, buckets)
            shares = _release_shares(buckets, [b[i] * gb for b in bwd_blocks], [b[2] for b in bwd_blocks])
            grads += zip(shares, times)
            sync += sum(times)
        if p.zero in (1, 2):
            times = _bucket_times(cost, Comm("dp_param_allgather", "dp", "all_gather", 0.0, group=group), g,
                                  param_gather_buckets(sc, tensors))
            gather += sum(times)
            first = max(first, times[0])
    shard_params = rp.dense / (group_shape(sc, "dp_cp").size if p.zero >= 1 else 1)
    shard_params += rp.expert / (group_shape(sc, "edp").size if p.zero >= 1 else 1)
    opt = cost.compute_time(optimizer_op(sc, shard_params))
    return DpSync(sync, gather, opt, tuple(sorted(grads, key=lambda x: x[0])), first)


def zero3_layer_time(sc: Scenario, cost: CostModel, pp_rank: int) -> tuple[float, float, float]:
    """ZeRO-3 per micro-batch on one rank. Each layer's parameters are all-gathered before its forward and
    again before its backward, its gradients reduce-scattered (ZeRO §7.2.2): dense parameters over dp x cp,
    routed experts over the expert-DP group (as the engine's `lower._zero3`). Returns (total comm seconds
    per micro-batch, one layer's gathers, one layer's reduce-scatters)."""
    rp = rank_params(sc, pp_rank)
    if sc.parallel.zero != 3 or not rp.layers:
        return 0.0, 0.0, 0.0
    ag = rs = 0.0
    for group, params in (("dp_cp", rp.dense), ("edp", rp.expert)):  # dense over dp x cp, routed experts over edp
        g = group_shape(sc, group)
        if g.size <= 1 or params <= 0:
            continue
        per_layer = params / len(rp.layers)
        ag += cost.comm_time(Comm("zero3_allgather", "dp", "all_gather", per_layer * param_bytes(sc), group=group), g)
        rs += cost.comm_time(Comm("zero3_reducescatter", "dp", "reduce_scatter", per_layer * sc.training.grad_bytes, group=group), g)
    return len(rp.layers) * (2 * ag + rs), ag, rs


def zero2_backlog(syncs: int, sync: float, period: float, slowed: float) -> float:
    """Exposed seconds the earlier micro-batches' overlapped gradient reduce-scatters add to the last one's
    (ZeRO-2: `syncs` = m; 0 with one sync per step). Each backward releases `sync` seconds of work onto the
    DP stream and slows by `slowed` beside it (sm_share.py); backward ends come one steady-state `period`
    apart (first to last: (m - 1) periods on every stage of a uniform 1F1B, and at pp = 1). When the work
    outpaces them the stream falls behind by sync - (period + slowed) per micro-batch, which the last
    backward's release then waits behind:
        extra = (m - 1) * slowed + (m - 1) * max(0, sync - period - slowed)
    (DeepSpeed stage 2 reduces after every backward: each rank keeps only its partition's accumulated
    gradients, deepspeedai/DeepSpeed#2252; the engine releases the buckets on every backward, engine/lower.py.)"""
    if syncs <= 1:
        return 0.0
    return (syncs - 1) * (slowed + max(0.0, sync - period - slowed))


def estimate(sc: Scenario, cost: CostModel) -> AnalyticResult:
    p, m = sc.parallel, sc.micro_batches
    stages = stage_times(sc, cost)
    # ZeRO-3: per layer per micro-batch gathers; exposed where longer than one layer's compute
    z3_exposed = [0.0] * p.pp
    z3_comm = [0.0] * p.pp
    if p.zero == 3:
        for st in stages:
            comm, ag, rs = zero3_layer_time(sc, cost, st.pp_rank)
            if comm:
                n = max(1, len(rank_params(sc, st.pp_rank).layers))
                f_layer, b_layer = st.F.compute / n, (st.B.compute + st.W.compute) / n
                # the two gathers and the reduce-scatter share one DP stream: with prefetch they hide behind
                # the layer's forward and backward compute only as far as their sum fits into it
                hidden = sc.overlap_dp
                exp = n * max(0.0, 2 * ag + rs - f_layer - b_layer) if hidden else comm
                exp += (2 * ag + rs) if hidden else 0.0  # a pass's first gather and last reduce-scatter stick out
                z3_comm[st.pp_rank] = comm * m
                z3_exposed[st.pp_rank] = exp * m
                st.F.duration += exp * 0.5
                st.B.duration += exp * 0.5
    dp_syncs = {st.pp_rank: dp_sync_time(sc, cost, st.pp_rank, st.bwd_blocks) for st in stages}
    zero2_blocking = p.zero == 2 and not sc.overlap_dp
    if zero2_blocking:
        # ZeRO-2 without overlap: every backward waits for its micro-batch's reduce-scatters (on the pass
        # that completes the gradients: W when the schedule splits the backward)
        for st in stages:
            (st.W if schedule_spec(p.pp_schedule).splits_backward else st.B).duration += dp_syncs[st.pp_rank].sync
    # PP p2p on the first traversal (forward and backward), per boundary; 1F1B's steady state in pipeline_time
    p2p = p2p_one = 0.0
    if p.pp > 1:
        same_node = group_shape(sc, "pp").intra_node
        p2p_one = cost.p2p_time(pp_activation_bytes(sc), same_node)
        hops = schedule_spec(p.pp_schedule).p2p_hops(p.pp)
        p2p = 2 * hops * p2p_one
        pp_comm_total = 2 * m * p.vpp * p2p_one
    else:
        pp_comm_total = 0.0
    t_pipe0 = pipeline_time(sc, stages)
    t_pipe = pipeline_time(sc, stages, p2p_one)
    pp_steady = t_pipe - t_pipe0  # sends the 1F1B steady state cannot hide
    # DP / ZeRO and the optimizer, on each rank; the slowest rank decides
    tied, tied_t = tied_embedding_allreduce(sc), 0.0
    tied_stages = (chunk_owner(sc, 0)[0], chunk_owner(sc, last_chunk(sc))[0])
    if tied is not None:
        pair = pair_shape(sc, *(pp_rank_of_stage_rank(sc, r) for r in tied_stages))
        tied_t = cost.comm_time(tied, pair)
    tails, slowed = [], 0.0
    period = max(st.total for st in stages)  # one micro-batch's turn in the steady state
    syncs = m if p.zero == 2 else 1  # ZeRO-2 reduce-scatters every micro-batch's gradients
    for st in reversed(stages):
        ds = dp_syncs[st.pp_rank]
        sync, gather, opt = ds.sync, ds.gather, ds.optimizer
        if sc.overlap_dp:
            last_bwd = st.B.duration + st.W.duration
            # the buckets' collectives slow the backward they run beside (sm_share.py), and the last
            # micro-batch's backward runs from the last stage to the first: a later stage's slowdown delays
            # this one too. Exposed DP time.
            in_flight = ds.grad_intervals(last_bwd)
            bwd_end = slowed_end(0.0, last_bwd, in_flight, cost.sm_share(group_shape(sc, "dp_cp")))
            own = bwd_end - last_bwd
            slowed += own
            exposed_sync = max(0.0, (in_flight[-1][1] if in_flight else 0.0) - bwd_end) + slowed
            exposed_sync += zero2_backlog(syncs, sync, period, own)
            exposed_gather = gather if p.zero_gather == "whole" else max(ds.first_gather, gather - st.F.duration)
        else:
            exposed_sync, exposed_gather = syncs * sync, gather
        in_passes = exposed_sync if zero2_blocking else 0.0  # in t_pipe already (above)
        sync *= syncs
        if st.pp_rank in tied_stages and tied is not None:  # after the rank's gradient buckets, on its DP stream
            sync += tied_t
            exposed_sync += tied_t
        sp_norm = sp_norm_grad_allreduce(sc, st.pp_rank)
        sp_t = cost.comm_time(sp_norm, group_shape(sc, "tp")) if sp_norm is not None else 0.0
        tails.insert(0, (exposed_sync - in_passes + exposed_gather + sp_t + opt, sync + gather, exposed_sync + exposed_gather,
                         opt, sp_t))
    crit = max(range(p.pp), key=lambda r: tails[r][0] + stages[r].total * m)
    tail, dp_total, dp_exposed, opt, sp_norm_t = tails[crit]
    iteration = t_pipe + p2p + tail
    st = stages[crit]
    comm, exposed = defaultdict(float), defaultdict(float)
    for ps in (st.F, st.B, st.W):
        for d, v in ps.comm.items():
            comm[d] += v * m
        for d, v in ps.exposed.items():
            exposed[d] += v * m
    comm["tp"] += sp_norm_t
    exposed["tp"] += sp_norm_t
    comm["dp"] += dp_total + z3_comm[crit]
    exposed["dp"] += dp_exposed + z3_exposed[crit]
    comm["pp"] += max(pp_comm_total, p2p + pp_steady)
    exposed["pp"] += p2p + pp_steady
    work = [s.total * m for s in stages]
    bubble = max(t_pipe0 - w for w in work) / iteration if iteration else 0.0
    total_comm = sum(comm.values())
    total_exposed = sum(min(exposed[d], comm[d]) for d in comm)
    breakdown = {
        "compute_s": (st.F.compute + st.B.compute + st.W.compute) * m,
        "recompute_s": (st.F.recompute + st.B.recompute + st.W.recompute) * m,
        "optimizer_s": opt,
        "bubble_s": max(0.0, t_pipe0 - work[crit]),
        **{f"exposed_{d}_s": min(exposed[d], comm[d]) for d in DIMS},
    }
    # hardware FLOPs over all GPUs: one rank per stage was priced; tp * cp * dp ranks do the same work
    hw = sum((s.F.hw_flops + s.B.hw_flops + s.W.hw_flops) * m for s in stages) * p.tp * p.cp * sc.dp
    return AnalyticResult(
        iteration_time_s=iteration,
        bubble_fraction=bubble,
        comm={d: {"time_s": comm[d], "exposed_s": min(exposed[d], comm[d])} for d in DIMS},
        overlap_fraction=(total_comm - total_exposed) / total_comm if total_comm else 0.0,
        breakdown=breakdown,
        flops_hw=hw,
        ranks_simulated=p.pp,
    )

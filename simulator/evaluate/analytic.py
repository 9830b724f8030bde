"""The analytic estimate: the plan's exact span, listed without an event loop. What `sweep` ranks with,
and `run --estimator analytic`.

It reads the same plan as the engine (`plan/lower.py`: each stage's steps, their blocks, the DP / ZeRO
collectives and where they are released, the tail) and prices every pass with the same list scheduler
(`evaluate/passes.py`). It then lists each stage's steps in order, one pipeline rank per stage (its
TP / CP / DP peers do the same work at the same speed), as the engine's representative mode runs them:
  - a pass starts when the rank is free and its input has arrived: the sender's pass end plus one PP
    send on the sender's stream (`parallel.pp_p2p: blocking` holds the sender until delivery and a late
    receiver for the transfer);
  - DP / ZeRO collectives queue on the rank's dp stream in issue order, from their release (a block's
    gradients complete, a ZeRO-3 prefetch, the step's start for ZeRO-1/2 gathers), and slow the backward
    they run beside (`sm_share.py`); passes that wait on gathers are scheduled block by block;
  - the tail (`TailOp`s) after the last micro-batch: buckets not overlapped, the tied-embedding
    all-reduce (a rendezvous of its two stages), the wait for the dp stream, SP's norm-gradient
    all-reduce, the optimizer, ZeRO-1/2's exposed gathers.
PP sends share their links with the transfers they overlap (DP buckets, ZeRO gathers, in-pass collectives on the
same NIC): a second listing lengthens each send by what sharing cost it in the first (`send_sharing.py`). What it
leaves to the engine: the sharing of the other transfers beyond one pass (a DP bucket slowed by a send or an EP
all-to-all keeps its alone price here), rendezvous with slower peers (`--full`), the memory timeline. Without any
sharing the two agree to rounding (tests/test_analytic.py); with it, to a few tenths of a per cent on the MLPerf
GPT-3 175B layouts, 512 to 10,240 H100 (tests/test_send_sharing.py).
The closed forms this generalises, exact for uniform stages and enough micro-batches:
  1F1B / AFAB      T = (m-1)*max_r(t_r) + sum_r t_r                  (NAR21 Eq. 1)
  interleaved      T = m*max_r(t_r) + (p-1)*max_r(t_r)/v               (NAR21 §2.2.2)
  ZB-H1            T = m*max_r(t_r) + (p-1)*(T_F + T_B - T_W)          (ZB Table 2; m >= p)
"""
from __future__ import annotations

import time
from collections import defaultdict

from ..cost.costs import CostModel
from ..plan.layout import pair_shape, pp_rank_of_stage_rank
from ..plan.opgraph import Comm
from ..cost.paced import PacedCosts
from ..plan.paces import Pace, pair_variants, stage_paces
from ..plan.lower import Plan, StageProgram, Step, build_plan
from ..plan.policy import DP_GROUPS
from ..scenario import Scenario
from .passes import CommSlice, OpTimes, PassScheduler, PassTemplate, build_template, schedule_pass, shared_extra
from .links import both_ways, link_use, send_demand
from .send_sharing import NEGLIGIBLE, ROUNDS, Transfer, send_extras
from .pair_order import pass_blocks
from .results import EngineResult, add_pass_stats, receive, slowed_beside_grads, summarize, wait_until


class _Queued:
    """One collective reserved on a dp stream: its members' data-ready time, start, end and dimension."""
    __slots__ = ("ready", "start", "end", "dim")

    def __init__(self, ready: float, start: float, end: float, dim: str):
        self.ready, self.start, self.end, self.dim = ready, start, end, dim


class _Rank:
    """One stage's representative rank while it is listed: its clock, streams and accumulators (the names
    `results.summarize` reads)."""

    def __init__(self, stage: int, grank: int, pace: Pace = Pace()):
        self.stage, self.grank, self.pace = stage, grank, pace
        self.t = 0.0
        self.pos = 0
        self.dp_free = 0.0
        self.send_free = 0.0
        self.last_dp: _Queued | None = None
        self.compute_s = self.recompute_s = self.optimizer_s = self.flops = 0.0
        self.comm = defaultdict(float)
        self.exposed = defaultdict(float)
        self.count = defaultdict(int)
        self.contention = defaultdict(float)
        self.ops = 0
        self.act_peak = 0.0
        self.end = 0.0
        self.gathers: dict = {}


class Lister:
    """Lists a plan's steps on one representative rank per stage (module docstring)."""

    def __init__(self, sc: Scenario, cost: CostModel, plan: Plan, in_pass_sharing: bool = True, pool: int | None = None,
                 record: bool = False):
        """`record`: keep every transfer listed in `transfers` (`send_sharing.py`)."""
        self.sc, self.cost, self.plan = sc, cost, plan
        self.costs = PacedCosts(sc, cost)
        self.times = OpTimes(sc, cost, costs=self.costs)
        self.share = in_pass_sharing
        self.blocking_p2p = sc.parallel.pp_p2p == "blocking"
        self.overlap = plan.overlap_dp
        self._templates: dict = {}
        self._pairs: dict = {}
        self._group_shapes = {g: self.times.shape(g) for g in (*DP_GROUPS, "dp_rep")}
        self.pool = pool
        # each stage at its slowest member's pace, as the engine runs it (plan/paces.py)
        self.ranks = self._fresh_ranks(stage_paces(sc, pool=pool))
        self._times = {Pace(): self.times}
        self.mailbox: dict = {}
        self._memo: dict = {}
        self.record = record
        self.transfers: list[Transfer] = []
        self.net_passes: list = []
        """(stage, start, template) of the passes listed with in-pass collectives beyond the GPU's port."""
        self.send_extra: dict = {}
        """PP send key -> seconds it lasts beyond its alone price (`send_sharing.send_extras`)."""
        self._uses: dict = {}

    def relist(self, send_extra: dict) -> list[_Rank]:
        """List the step again with each PP send lengthened by `send_extra` (`send_sharing.py`), keeping the
        priced passes; returns the ranks."""
        self.send_extra = send_extra
        self.transfers, self.net_passes = [], []
        self.mailbox = {}
        self.ranks = self._fresh_ranks([rk.pace for rk in self.ranks])
        return self.run()

    def _fresh_ranks(self, paces) -> list[_Rank]:
        """One representative rank per stage at `paces`, nothing listed yet."""
        return [_Rank(s, pp_rank_of_stage_rank(self.sc, s), paces[s]) for s in range(self.sc.parallel.pp)]

    def _use(self, comm: Comm, shape, dur: float, key) -> tuple:
        """`links.link_use` on the topology's nominal links, as the engine loads them (cached under `key`)."""
        u = self._uses.get(key)
        if u is None:
            u = self._uses[key] = link_use(self.cost.topology, comm, shape, dur)
        return u

    # ------------------------------------------------------------------ pricing
    def times_at(self, pace: Pace) -> OpTimes:
        """Op times of a rank at `pace` (`plan/paces.py`)."""
        t = self._times.get(pace)
        if t is None:
            t = self._times[pace] = OpTimes(self.sc, self.cost, pace, self.costs)
        return t

    def template(self, key: tuple, pace: Pace = Pace()) -> PassTemplate:
        """The pass `Step.key` names: (chunk, kind), or an overlapped pair ("FB", F chunk, backward chunk, its
        kind), on a rank at `pace`."""
        t = self._templates.get((key, pace))
        if t is None:
            chunk, kind = (key[1], key[0]) if key[0] == "FB" else key
            times = self.times_at(pace)
            t = self._templates[(key, pace)] = build_template(times, chunk, kind, pass_blocks(times, self.plan.blocks, key),
                                                               share=self.share, only_intra=False)
        return t

    def comm_dur(self, group: str, comm: Comm, pace: Pace = Pace()) -> float:
        """A DP / ZeRO collective (or the tied-embedding all-reduce) of a rank at `pace`, on its group's links."""
        if group == "embd":
            s, t = self._tied_pair()
            return self.times.comm_on(comm, pair_shape(self.sc, self.ranks[s].grank, self.ranks[t].grank),
                                      pace.variants(group))
        return self.times.comm_on(comm, self._group_shapes[group], pace.variants(group))

    def _tied_pair(self) -> tuple[int, int]:
        prog = next(p for p in self.plan.stages if p.tied_partner >= 0)
        return prog.stage, prog.tied_partner

    def p2p(self, src: int, dst: int) -> tuple[float, tuple]:
        """(seconds alone, demand on the links: `links.send_demand`) of a PP send from stage `src` to `dst`."""
        d = self._pairs.get((src, dst))
        if d is None:
            comm = Comm("pp_send_recv", "pp", "send_recv", self.plan.pp_bytes)
            shape = pair_shape(self.sc, self.ranks[src].grank, self.ranks[dst].grank)
            dur = self.times.comm_on(comm, shape, pair_variants(self.sc, src, dst, pool=self.pool))
            d = self._pairs[(src, dst)] = (dur, tuple(send_demand(src, dst, self._use(comm, shape, dur, (comm, shape.ranks, dur))).items()))
        return d

    # ------------------------------------------------------------------ streams
    def join(self, rk: _Rank, group: str, comm: Comm, ready: float) -> _Queued:
        """Reserve a collective on the rank's dp stream (its peers are symmetric: the rendezvous is
        immediate), in issue order."""
        dur = self.comm_dur(group, comm, rk.pace)
        start = max(ready, rk.dp_free)
        q = _Queued(ready, start, start + dur, comm.dim)
        if self.record and dur > 0:
            use = self._use(comm, self._group_shapes[group], dur, (comm, group, dur))  # (the tied pair's: `_tails`)
            self.transfers.append(Transfer(None, start, dur, tuple(both_ways(rk.stage, use).items())))
        rk.dp_free = q.end
        rk.comm[comm.dim] += dur
        rk.ops += 1
        if dur > 0:
            rk.count[comm.dim] += 1
        rk.last_dp = q
        return q

    @staticmethod
    def wait(rk: _Rank, q: _Queued, since: float) -> float:
        """The compute stream, free since `since`, waits for `q` (`results.wait_until`)."""
        return wait_until(rk, q.end, q.ready, q.dim, since)

    # ------------------------------------------------------------------ run
    def run(self) -> list[_Rank]:
        for rk, prog in zip(self.ranks, self.plan.stages):
            rk.gathers = {c: [self.join(rk, g, comm, 0.0) for g, comm, _ in comms] for c, comms in prog.gathers_first}
        progress = True
        while progress:
            progress = False
            for rk, prog in zip(self.ranks, self.plan.stages):
                while rk.pos < len(prog.steps):
                    if not self._step(rk, prog, prog.steps[rk.pos]):
                        break
                    rk.pos += 1
                    progress = True
        stuck = [rk.stage for rk, prog in zip(self.ranks, self.plan.stages) if rk.pos < len(prog.steps)]
        if stuck:
            raise RuntimeError(f"analytic listing deadlock: stages {stuck} wait for a message never sent")
        self._tails()
        return self.ranks

    def _step(self, rk: _Rank, prog: StageProgram, st: Step) -> bool:
        """List one step; False if its input has not been sent yet."""
        ready = rk.t
        keys = [(rk.stage, part.recv_key) for part in st.parts if part.recv_from >= 0]
        if any(k not in self.mailbox for k in keys):
            return False
        for k in keys:  # an overlapped pair starts once both its inputs are in
            ready = receive(rk, ready, self.mailbox.pop(k), self.blocking_p2p)
        if st.gated:
            end = self._gated_memo(rk, prog, st, ready)
        else:
            tpl = self.template(st.key, rk.pace)
            grads, dp_free = [], rk.dp_free
            if st.grad_sync and self.overlap:
                for k, comm, _ in prog.dp[st.chunk].releases.get(st.kind, ()):
                    at = ready + tpl.block_grads[k]
                    self.join(rk, comm.group, comm, at)
                    grads.append((at, comm))
            end = ready + tpl.duration
            if self.record and tpl.net:
                self.net_passes.append((rk.stage, ready, tpl))
            add_pass_stats(rk, tpl.compute_s, tpl.recompute_s, tpl.flops, tpl.comm_s, tpl.exposed_s, tpl.comm_count)
            rk.ops += len(tpl.slices)
            if grads:
                end = self._beside_grads(rk, ready, end, grads, dp_free)
            if st.grad_sync and not self.overlap:
                for _, comm, _ in prog.dp[st.chunk].releases.get(st.kind, ()):
                    self.join(rk, comm.group, comm, end)
        if st.await_sync and rk.last_dp is not None:
            end = self.wait(rk, rk.last_dp, end)
        rk.t = end
        for part in st.parts:
            if part.send_to < 0:
                continue
            alone, demand = self.p2p(rk.stage, part.send_to)
            kind = "F" if part.kind == "F" else "B"
            key = (rk.stage, part.send_to, kind, part.chunk, part.mb)
            start = max(end, rk.send_free)
            if self.record and alone > 0:
                self.transfers.append(Transfer(key, start, alone, demand))
            extra = self.send_extra.get(key, 0.0)
            dur = alone + extra
            rk.send_free = start + dur
            for r in (rk, self.ranks[part.send_to]):  # the engine's `_done`: both ends count the send and its sharing
                r.comm["pp"] += dur
                r.contention["pp"] += extra
            rk.ops += 1
            if dur > 0:
                rk.count["pp"] += 1
            self.mailbox[(part.send_to, (kind, part.chunk, part.mb))] = (start + dur, end, dur)
            if self.blocking_p2p:  # the sender is held until its message is delivered
                rk.t = self.wait(rk, _Queued(end, start, start + dur, "pp"), end)
        return True

    def _beside_grads(self, rk: _Rank, ready: float, end: float, grads: list, dp_free: float) -> float:
        """A pass that released overlapped gradient buckets runs slower beside them (`sm_share.slowed_end`),
        the buckets one after another on the dp stream from their releases; the slowdown is exposed DP."""
        share = self.cost.sm_share(self._group_shapes[grads[0][1].group])
        return slowed_beside_grads(rk, ready, end, [(at, self.comm_dur(c.group, c, rk.pace)) for at, c in grads], dp_free, share)

    def _gated_memo(self, rk: _Rank, prog: StageProgram, st: Step, ready: float) -> float:
        """`_gated`, computed once per (stage, chunk, kind, sync, dp-stream backlog): the pass and the
        collectives it queues are the same up to a shift in time when the dp stream is as far behind at its
        start (ZeRO-3's steady state: every micro-batch after the first few). A ZeRO-1/2 first forward,
        gated on the step's own gathers, is not shift-invariant and is listed each time."""
        if st.param_gated:
            return self._gated(rk, prog, st, ready)
        key = (rk.stage, st.chunk, st.kind, st.grad_sync, round(max(0.0, rk.dp_free - ready), 12))  # stage: its speed too
        hit = self._memo.get(key)
        if hit is None:
            before, listed = _snapshot(rk), len(self.transfers)
            end = self._gated(rk, prog, st, ready)
            last = rk.last_dp
            moved = tuple((t.start - ready, t.dur, t.demand) for t in self.transfers[listed:])
            self._memo[key] = (end - ready, rk.dp_free - ready, _delta(before, _snapshot(rk)),
                               None if last is None else (last.ready - ready, last.start - ready, last.end - ready, last.dim),
                               moved)
            return end
        dur, dp_free, delta, last, moved = hit
        if self.record:
            self.transfers.extend(Transfer(None, ready + at, d, demand) for at, d, demand in moved)
        _apply(rk, delta)
        rk.dp_free = max(rk.dp_free, ready + dp_free)
        if last is not None:
            rk.last_dp = _Queued(ready + last[0], ready + last[1], ready + last[2], last[3])
        return ready + dur

    def _gated(self, rk: _Rank, prog: StageProgram, st: Step, ready: float) -> float:
        """A pass whose blocks wait on DP collectives (ZeRO-3 gathers, prefetched one block ahead with
        overlap; ZeRO-1/2's first forward), scheduled block by block. Returns its end."""
        blocks = self.plan.blocks[(st.chunk, st.kind)]
        dp = prog.dp[st.chunk]
        comms: list | None = [] if self.share else None
        times = self.times_at(rk.pace)
        s = PassScheduler(times, ready, record=False, comms=comms)
        gath = dp.z3_gather.get(st.kind, ())
        releases = dp.releases.get(st.kind, ()) if st.grad_sync else ()
        pending: dict = {}
        joined: list = []

        def issue(k: int, at: float) -> None:
            pending[k] = [self.join(rk, c.group, c, at) for c in gath[k]]
            joined.extend(zip(pending[k], gath[k]))

        if gath and self.overlap:
            issue(0, ready)
        for k, blk in enumerate(blocks):
            wait_for: list = []
            if gath:
                if k not in pending:
                    issue(k, s.anchor)
                wait_for = pending.pop(k)
            elif st.param_gated and dp.param_gate[k] >= 0:
                wait_for = [rk.gathers[st.chunk][dp.param_gate[k]]]
            gate = gate_ready = None
            for q in wait_for:
                if gate is None or q.end > gate:
                    gate, gate_ready = q.end, q.ready
            start = s.block(blk, gate, "dp", gate_ready)
            if gath and self.overlap and k + 1 < len(blocks):
                issue(k + 1, start)
            if self.overlap:
                for kk, comm, _ in releases:
                    if kk == k:
                        joined.append((self.join(rk, comm.group, comm, s.block_grads[-1]), comm))
        end = s.finish()
        if comms:  # in-pass sharing of links, with the DP collectives in flight beside the pass
            beside = [CommSlice(-1, i, "dp", "dp", q.start - ready, q.end - q.start, self.times.use(c))
                      for i, (q, c) in enumerate(joined) if q.end > q.start and q.start < end]
            extra = {key: x for key, x in shared_extra(comms + beside, only_intra=False).items() if key[0] >= 0}
            if extra:
                s = schedule_pass(times, blocks, ready, record=False, extra=extra, gates=s.gates)
                end = s.end
        if not self.overlap:
            for _, comm, _ in releases:
                self.join(rk, comm.group, comm, end)
        add_pass_stats(rk, s.compute_s, s.recompute_s, s.flops, s.comm, s.exposed, s.count)
        rk.ops += sum(len(b.nodes) for b in blocks)
        return end

    def _tails(self) -> None:
        """Every stage's tail; the tied-embedding all-reduce is a rendezvous of its two stages, so both
        tails run up to it first."""
        pending = {}
        for rk, prog in zip(self.ranks, self.plan.stages):
            pending[rk.stage] = iter(prog.tail)
            self._tail_until_tied(rk, pending[rk.stage])
        tied = [rk for rk, prog in zip(self.ranks, self.plan.stages) if prog.tied_allreduce is not None]
        if len(tied) == 2:
            comm = self.plan.stages[tied[0].stage].tied_allreduce
            ready = max(rk.t for rk in tied)
            start = max([ready] + [rk.dp_free for rk in tied])
            dur = self.comm_dur("embd", comm, tied[0].pace)
            for rk in tied:
                q = _Queued(ready, start, start + dur, comm.dim)
                rk.dp_free, rk.last_dp = q.end, q
                rk.comm[comm.dim] += dur
                rk.ops += 1
                rk.count[comm.dim] += 1 if dur > 0 else 0
        for rk in self.ranks:
            for op in pending[rk.stage]:
                self._tail_op(rk, op)
            rk.end = rk.t

    def _tail_until_tied(self, rk: _Rank, ops) -> None:
        for op in ops:
            if op.kind == "issue" and op.comms and op.comms[0][0] == "embd":
                return
            self._tail_op(rk, op)

    def _tail_op(self, rk: _Rank, op) -> None:
        if op.kind == "issue":
            for group, comm, _ in op.comms:
                self.join(rk, group, comm, rk.t)
        elif op.kind == "await":
            if rk.last_dp is not None:
                rk.t = self.wait(rk, rk.last_dp, rk.t)
        elif op.kind == "inline":
            dur = self.times_at(rk.pace)(op.op)
            rk.comm[op.op.dim] += dur
            rk.exposed[op.op.dim] += dur
            rk.count[op.op.dim] += 1
            rk.ops += 1
            rk.t += dur
        else:
            opt = self.times_at(rk.pace)(op.op)
            rk.optimizer_s += opt
            rk.ops += 1
            rk.t += opt


_SCALARS = ("compute_s", "recompute_s", "optimizer_s", "flops", "ops")
_DICTS = ("comm", "exposed", "count")


def _snapshot(rk: _Rank) -> tuple:
    return tuple(getattr(rk, a) for a in _SCALARS) + tuple(dict(getattr(rk, a)) for a in _DICTS)


def _delta(before: tuple, after: tuple) -> tuple:
    n = len(_SCALARS)
    scalars = tuple(a - b for a, b in zip(after[:n], before[:n]))
    dicts = tuple({k: v - b.get(k, 0) for k, v in a.items() if v != b.get(k, 0)} for a, b in zip(after[n:], before[n:]))
    return scalars + dicts


def _apply(rk: _Rank, delta: tuple) -> None:
    n = len(_SCALARS)
    for a, v in zip(_SCALARS, delta[:n]):
        setattr(rk, a, getattr(rk, a) + v)
    for a, d in zip(_DICTS, delta[n:]):
        acc = getattr(rk, a)
        for k, v in d.items():
            acc[k] += v


def estimate(sc: Scenario, cost: CostModel, plan: Plan | None = None, *, in_pass_sharing: bool = True,
             send_sharing: bool | None = None, pool: int | None = None) -> EngineResult:
    """One optimizer step of `sc`, listed from its plan (module docstring). `in_pass_sharing`: collectives of
    different streams that overlap inside a pass share the GPU's intra-node port (the engine's default);
    `send_sharing`: PP sends share their links with the transfers they overlap (`send_sharing.py`; None: as
    `in_pass_sharing`). `pool`: list the representatives of that pool's DP replicas (`plan/paces.stage_paces`; one
    class per pool)."""
    t0 = time.perf_counter()
    plan = plan if plan is not None else build_plan(sc)
    sharing = (in_pass_sharing if send_sharing is None else send_sharing) and sc.parallel.pp > 1
    lister = Lister(sc, cost, plan, in_pass_sharing, pool, record=sharing)
    ranks = lister.run()
    for _ in range(ROUNDS if sharing else 0):
        extra = send_extras(lister.transfers, lister.net_passes)
        if not lister.send_extra and sum(extra.values()) < NEGLIGIBLE * max(rk.t for rk in ranks):
            break
        ranks = lister.relist(extra)
    return summarize(sc, ranks, [0.0] * sc.parallel.pp, events=0, wall_s=time.perf_counter() - t0, full=False)

"""SimPy execution of a `Plan`: one process per simulated rank walks its stage's program.

Each step (one pass of one chunk for one micro-batch) is one timed segment on the rank's compute
stream: it starts when the compute stream is free and its input has arrived (PP receive), runs its
template's duration (`evaluate/passes.py`: TP/CP/EP collectives and their exposed time are inside), then
issues its PP send. Events exist only where ranks or streams interact: a receive that has not been
sent yet, a rendezvous whose peers have not arrived (full mode), a ZeRO gate, the DP/optimizer
barrier, and one timeout per step to advance the clock. DP/ZeRO collectives reserve time on the dp
stream (`fabric.py`) as the templates' blocks release them (overlapped) or after the backward (not).

Link sharing (`links.py`, on unless `contention=False`): DP/ZeRO collectives, the tied-embedding
all-reduce and PP sends carry their demand on the ranks' links (`collectives.link_busy` per class and
direction) and share them with whatever else is in flight on those links; their ends then come from
the link model, one timeout per distinct start or end, instead of being reserved ahead. The seconds a
transfer took beyond its alone price are added to its dimension's communication time and counted
in `contention` on every rank it involves.

Waiting is accounted where it happens: a compute stream that waits for a PP receive counts the part
after the sender's data was ready as exposed pp (transfer and link queueing), the part before as
bubble; a wait on a collective counts the part after all members were ready as exposed on its
dimension, peers' skew as bubble.
"""
from __future__ import annotations

import gc

from ..links import LinkSharing, both_ways, link_use, send_demand
from ..results import add_pass_stats, receive, slowed_beside_grads, wait_until
from ...cost.paced import PacedCosts
from ...plan.paces import NOMINAL
from ..passes import OpTimes, PassScheduler, PassTemplate, build_template, schedule_pass, shared_extra
from ..pair_order import pass_blocks
from ...plan.layout import GroupShape
from ...plan.opgraph import Comm
from ...plan.lower import Plan, StageProgram, Step
from .fabric import Collective, Fabric
from .state import CountingEnvironment, PassFlows, RankState


class Engine:
    """Runs a plan: `Engine(...).run()` fills the ranks' accumulators and recorders."""

    def __init__(self, plan: Plan, cost, ranks: list[RankState], pp_shape, group_shapes: dict, *, steps: int = 1,
                 record_slices: bool = True, contention: bool = True, pp_links=None):
        self.plan, self.cost, self.ranks, self.steps = plan, cost, ranks, steps
        self.sc = plan.sc
        self.env = CountingEnvironment()
        self.links = LinkSharing(self.env) if contention else None
        self.fabric = Fabric(self.env, self.links, self._done)
        self._use: dict = {}
        self._pairs: dict = {}
        """(sender idx, receiver idx) -> (PP send seconds, link use)."""
        self.mailbox: dict = {}
        self.blocking_p2p = self.sc.parallel.pp_p2p == "blocking"
        """`parallel.pp_p2p: blocking`: senders wait for delivery, late receivers for the transfer."""
        self.pp_shape = pp_shape
        """(idx_a, idx_b) -> GroupShape of the pair, for p2p pricing."""
        self.group_shapes = group_shapes
        self.pp_links = pp_links
        """(idx_a, idx_b) -> the pair's links (`plan/paces.pair_variants`); None: healthy."""
        self.costs = PacedCosts(self.sc, cost)
        self.record_slices = record_slices
        self._times: dict = {}
        self._templates: dict = {}
        self._comm_dur: dict = {}
        self._releases: dict = {}
        self._flow = 0
        self.overlap = plan.overlap_dp

    # ------------------------------------------------------------------ pricing
    def times(self, pace) -> OpTimes:
        """Op times of a rank at `pace` (`plan/paces.Pace`; a float: a compute multiplier alone)."""
        if pace not in self._times:
            self._times[pace] = OpTimes(self.sc, self.cost, pace, self.costs)
        return self._times[pace]

    def template(self, key: tuple, speed) -> PassTemplate:
        """The pass `Step.key` names (an overlapped pair: ("FB", F chunk, backward chunk, its kind)) at pace `speed`."""
        t = self._templates.get((key, speed))
        if t is None:
            chunk, kind = (key[1], key[0]) if key[0] == "FB" else key
            t = self._templates[(key, speed)] = build_template(self.times(speed), chunk, kind, pass_blocks(self.times(speed), self.plan.blocks, key),
                                                               share=self.links is not None)
        return t

    def comm_dur(self, comm: Comm, pace=None) -> float:
        """A DP / ZeRO collective of a rank at `pace` (None: healthy links), on its group's links."""
        t = self._comm_dur.get((comm, pace))
        if t is None:
            g = comm.group or comm.dim
            t = self._comm_dur[(comm, pace)] = self.times(1.0).comm_on(comm, self.group_shapes[g],
                                                                       pace.variants(g) if pace is not None else NOMINAL)
        return t

    def link_use(self, comm: Comm, shape: GroupShape, dur: float, key) -> tuple:
        """(link class, share of a rank's link used at full speed) of a transfer priced `dur` alone:
        `collectives.link_busy` / dur, at most 1 (`links.py`). Cached under `key`."""
        use = self._use.get(key)
        if use is None:
            use = self._use[key] = link_use(self.cost.topology, comm, shape, dur)
        return use

    def _done(self, c: Collective) -> None:
        """A transfer with a demand or a message ended: deliver the message, count link contention."""
        if c.payload is not None:  # a PP send: (sender, receiver, mailbox key, data ready, flow id, label)
            src, dst, key, data_ready, fid, label = c.payload
            msg = (c.end, data_ready, c.end - c.start)
            ev = self.mailbox.pop(key, None)
            if ev is not None:
                ev.succeed(msg)
            else:
                self.mailbox[key] = msg
            if fid:
                if src.rec is not None:
                    src.rec.sends.append((c.start, c.end, dst.idx, fid, label))
                if dst.rec is not None:
                    dst.rec.recvs.append((c.start, c.end, src.idx, fid, label))
            owners = (src, dst)
        else:
            owners = c.owners
        if c.demand:
            for rk in owners:
                if (rk.idx, "intra", "out") in c.demand or (rk.idx, "intra", "in") in c.demand:
                    rk.intra_q -= 1
        extra = c.contention_s
        if extra > 0:
            for rk in owners:
                rk.comm[c.dim] += extra
                rk.contention[c.dim] += extra

    # ------------------------------------------------------------------ run
    def run(self) -> None:
        for rk in self.ranks:
            self.env.process(self._rank(rk))
        # CPython's cyclic collector is off while the clock runs: its full collections scan every live
        # object, and objects that wait for many other ranks' events (collectives, messages, flows)
        # survive into the old generation in numbers that grow with the rank count, so with it on the
        # cost per event grows with the ranks (4,096 GPUs --full: 3.5 of 10.5 CPU-s in 25 full
        # collections). The engine's garbage is freed by reference counting; its few cycles wait for
        # the next collection after the run (benchmarks/full_mode_scaling.py).
        collecting = gc.isenabled()
        gc.disable()
        try:
            self.env.run()
        finally:
            if collecting:
                gc.enable()
        stuck = [rk for rk in self.ranks if not rk.done]
        if stuck:
            desc = ", ".join(f"rank {rk.grank} (stage {rk.stage}) waiting on {rk.waiting}" for rk in stuck[:4])
            raise RuntimeError(f"engine deadlock: {len(stuck)} rank(s) never finished: {desc}")

    def _join(self, rk: RankState, group: str, comm: Comm, ready: float, label: str) -> Collective:
        members = rk.groups[group]
        seq = rk.seq[group]
        rk.seq[group] = seq + 1
        dur = self.comm_dur(comm, rk.pace)
        demand = None
        if self.links is not None and dur > 0:
            use = self.link_use(comm, self.group_shapes[group], dur, (comm, group, dur))
            demand = both_ways(rk.idx, use)
            if (rk.idx, "intra", "out") in demand:
                rk.intra_q += 1
        c = self.fabric.join((group, members[0], seq), len(members), dur, comm.dim, label, rk.streams["dp"], ready,
                             demand=demand, owner=rk)
        rk.comm[comm.dim] += dur
        rk.ops += 1
        if dur > 0:
            rk.count[comm.dim] += 1
        rk.last_dp = c
        if rk.rec is not None:
            rk.rec.colls.append((c, label))
        return c

    def _await(self, rk: RankState, c: Collective, since: float, what: str):
        """Generator: wait for `c`; the compute stream, free since `since`, is charged from then to c.end."""
        if c.end is None:
            rk.waiting = what
            yield self.fabric.wait(c)
            rk.waiting = ""
        return wait_until(rk, c.end, c.ready, c.dim, since)

    def _rank(self, rk: RankState):
        env = self.env
        prog = (rk.plan or self.plan).stages[rk.stage]
        t = 0.0
        for step_no in range(self.steps):
            gathers = self._param_gathers(rk, prog, t)
            for st in prog.steps:
                ready = t
                msgs = []
                for part in st.parts:  # an overlapped pair starts once both its inputs are in
                    if part.recv_from < 0:
                        continue
                    key = (rk.idx, part.recv_key, step_no)
                    msg = self.mailbox.pop(key, None)
                    if msg is None:
                        ev = self.mailbox[key] = env.event()
                        rk.waiting = f"receive {part.recv_key}"
                        msg = yield ev
                        rk.waiting = ""
                    msgs.append(msg)
                for msg in msgs:
                    ready = receive(rk, ready, msg, self.blocking_p2p)
                speed = rk.pace
                tpl = self.template(st.key, speed)
                sync = rk.groups.get("sync")
                if sync and tpl.sync_dims:
                    seq = rk.seq["sync"]
                    rk.seq["sync"] = seq + 1
                    c = self.fabric.join(("sync", sync[0], seq), len(sync), 0.0, "sync", "", None, ready)
                    if c.end is None:
                        rk.waiting = f"pass rendezvous {st.kind}{(st.chunk, st.mb)}"
                        yield self.fabric.wait(c)
                        rk.waiting = ""
                    ready = c.end
                if st.gated:
                    end = yield from self._gated_pass(rk, prog, st, ready, speed, gathers)
                else:
                    grads, dp_free = [], rk.streams["dp"].free  # before these buckets join it
                    if st.grad_sync and self.overlap:
                        for k, comm, label in self._grad_releases(prog, st):
                            self._join(rk, comm.group, comm, ready + tpl.block_grads[k], label)
                            grads.append((ready + tpl.block_grads[k], comm))
                    dyn = self._link_comms(rk, tpl.net, tpl.local) if self.links is not None and tpl.comms else ()
                    s = None
                    if dyn:  # its collectives run on the link model: wait for them, re-schedule if slowed
                        s = yield from self._linked_pass(rk, st, ready, speed, PassFlows(self, rk, ready, dyn), tpl.extra,
                                                         host_lead=tpl.host_lead)
                    rk.ops += len(tpl.slices)
                    if s is None:
                        end, drawn = ready + tpl.duration, (tpl, None)
                        add_pass_stats(rk, tpl.compute_s, tpl.recompute_s, tpl.flops, tpl.comm_s, tpl.exposed_s,
                                        tpl.comm_count, tpl.contention_s)
                    else:
                        end, drawn = s.end, (None, tuple(s.slices) if s.record else None)
                        add_pass_stats(rk, s.compute_s, s.recompute_s, s.flops, s.comm, s.exposed, s.count, s.contention)
                    if grads:
                        end = self._beside_grads(rk, ready, end, grads, dp_free)
                    if rk.rec is not None:
                        rk.rec.passes.append((ready, end, st, *drawn))
                    if st.grad_sync and not self.overlap:
                        for k, comm, label in self._grad_releases(prog, st):
                            self._join(rk, comm.group, comm, end, label)
                if st.await_sync and rk.last_dp is not None:
                    # without overlap, per-micro-batch ZeRO-2/3 reduce-scatters block the compute stream
                    end = yield from self._await(rk, rk.last_dp, end, "blocking gradient reduce-scatter")
                self._memory(rk, ready, st.alloc)
                if end > env.now:
                    yield env.timeout(end - env.now)
                self._memory(rk, end, -st.free)
                t = end
                for part in st.parts:
                    if part.send_to < 0:
                        continue
                    c = self._send(rk, part, end, step_no)
                    if self.blocking_p2p:  # the sender is held until its message is delivered
                        t = yield from self._await(rk, c, t, f"blocking send {part.kind}{(part.chunk, part.mb)}")
                        if t > env.now:
                            yield env.timeout(t - env.now)
            t = yield from self._step_tail(rk, prog, t)
        rk.end = t
        rk.done = True

    # ------------------------------------------------------------------ pieces
    def _memory(self, rk: RankState, t: float, delta: float) -> None:
        if delta == 0:
            return
        rk.act += delta
        if rk.act > rk.act_peak:
            rk.act_peak = rk.act
        if rk.rec is not None:
            rk.rec.memory.append((t, rk.act))

    def _send(self, rk: RankState, st: Step, ready: float, step_no: int) -> Collective:
        """PP p2p on the sender's out stream (FIFO, as the analytic listing's `send_free`); the message is
        delivered when it ends (at once, reserved ahead, without link sharing). Two sends reaching one rank at once
        (DualPipe's two directions) do not queue behind each other there: they come over different links, and where
        they share the receiver's NIC the link model shares it (`demand`'s "in" entries). Returns the transfer."""
        dst = self.ranks[rk.pp_peer[st.send_to]]
        pair = self._pairs.get((rk.idx, dst.idx))
        if pair is None:
            shape: GroupShape = self.pp_shape[(rk.idx, dst.idx)]
            comm = Comm("pp_send_recv", "pp", "send_recv", self.plan.pp_bytes)
            dur = self.times(1.0).comm_on(comm, shape, self.pp_links[(rk.idx, dst.idx)] if self.pp_links is not None else NOMINAL)
            use = self.link_use(comm, shape, dur, (comm, shape.ranks, dur)) if self.links is not None else ()
            pair = self._pairs[(rk.idx, dst.idx)] = (dur, use)
        dur, use = pair
        rk.comm["pp"] += dur
        dst.comm["pp"] += dur
        rk.ops += 1
        if dur > 0:
            rk.count["pp"] += 1
        kind = "F" if st.kind == "F" else "B"
        key = (dst.idx, (kind, st.chunk, st.mb), step_no)
        fid, label = 0, ""
        if rk.rec is not None or dst.rec is not None:
            self._flow += 1
            fid, label = self._flow, f"C{st.chunk} mb{st.mb} {'act' if kind == 'F' else 'grad'}"
        demand = None
        if use:
            demand = send_demand(rk.idx, dst.idx, use)
            if (rk.idx, "intra", "out") in demand:
                rk.intra_q += 1
                dst.intra_q += 1
        return self.fabric.join(("send", rk.idx, dst.idx, key), 1, dur, "pp", label, rk.streams["pp send"],
                                ready, demand=demand, payload=(rk, dst, key, ready, fid, label))

    def _param_gathers(self, rk: RankState, prog: StageProgram, t: float) -> dict:
        """ZeRO-1/2 with overlap: the updated parameters' all-gather buckets, issued when the step starts
        (= after the previous step's optimizer: steady state), in the order the forwards need them."""
        return {c: [self._join(rk, g, comm, t, label) for g, comm, label in comms] for c, comms in prog.gathers_first}

    def _link_comms(self, rk: RankState, net: tuple, local: tuple) -> tuple:
        """The in-pass collectives that run on the link model: `net` (they use links beyond the GPU's
        intra-node port) always; `local` (its intra-node port only) too while the rank has DP / PP
        transfers in flight or queued on that port (else the template's pricing stands)."""
        if not local or rk.intra_q == 0:
            return net
        return tuple(sorted(net + local, key=lambda x: (x.start, x.block, x.node)))

    def _linked_pass(self, rk: RankState, st: Step, ready: float, speed: float, flows: "PassFlows", extra: dict,
                     gates: list | None = None, applied: bool = True, host_lead: float = 0.0):
        """Generator: wait until a pass's linked collectives have ended; if link sharing slowed any of
        them, re-schedule the pass with their measured durations (the other collectives keep `extra`,
        in-pass sharing: the template's, `applied` in the first schedule, or a gated pass's, not yet)
        and return that schedule, else None (the first schedule stands).
        The gradient buckets the pass released and the times its successors were told keep the first
        schedule's times (the slow-down reaches them through the pass end)."""
        ev = flows.wait()
        if ev is not None:
            rk.waiting = f"in-pass collectives {st.kind}{(st.chunk, st.mb)}"
            yield ev
            rk.waiting = ""
        if not flows.extra and (not extra or applied and not any(k in flows.keys for k in extra)):
            return None  # nothing it was priced with changed
        merged = {k: v for k, v in (extra or {}).items() if k not in flows.keys}
        merged.update(flows.extra)
        s = schedule_pass(self.times(speed), pass_blocks(self.times(speed), self.plan.blocks, st.key), ready,
                          record=rk.rec is not None and self.record_slices, extra=merged, gates=gates,
                          host_lead=host_lead)
        if flows.last > s.end:  # a collective started later than the re-schedule has it (lag): it ends the pass
            s.exposed[flows.last_dim] += flows.last - s.end
            s.end = flows.last
        return s

    def _gated_pass(self, rk: RankState, prog: StageProgram, st: Step, ready: float, speed: float, gathers: dict):
        """Generator: a pass whose blocks wait on DP collectives (ZeRO-3 gathers; ZeRO-1/2 first forward),
        scheduled block by block at run time. Returns the pass end."""
        blocks = self.plan.blocks[(st.chunk, st.kind)]
        dp = prog.dp[st.chunk]
        linked = self.links is not None
        comms: list | None = [] if linked else None
        unlinked: list = []
        flows = PassFlows(self, rk, ready, ()) if linked else None
        s = PassScheduler(self.times(speed), ready, record=rk.rec is not None and self.record_slices, comms=comms)
        z3 = self.plan.policy.gathers_per_block
        gath = dp.z3_gather.get(st.kind, ()) if z3 else ()
        releases = self._grad_releases(prog, st) if st.grad_sync else []
        pending: dict = {}

        def issue(k, at):
            pending[k] = [self._join(rk, c.group, c, at, f"{blocks[k].key} mb{st.mb} {c.name}") for c in gath[k]]

        if z3 and self.overlap and gath:
            issue(0, ready)
        for k, blk in enumerate(blocks):
            wait_for: list[Collective] = []
            if z3 and gath:
                if k not in pending:
                    issue(k, s.anchor)
                wait_for = pending.pop(k)
            elif st.param_gated and dp.param_gate[k] >= 0:
                wait_for = [gathers[st.chunk][dp.param_gate[k]]]
            gate = gate_ready = None
            for c in wait_for:
                if c.end is None:
                    rk.waiting = f"gather {c.label}"
                    yield self.fabric.wait(c)
                    rk.waiting = ""
                if gate is None or c.end > gate:
                    gate, gate_ready = c.end, c.ready
            start = s.block(blk, gate, "dp", gate_ready)
            if linked and comms:
                dyn = self._link_comms(rk, tuple(c for c in comms if c.net),
                                       tuple(c for c in comms if c.use and not c.net))
                flows.extend(dyn)
                unlinked.extend(c for c in comms if c not in dyn)
                comms.clear()
            if z3 and self.overlap and k + 1 < len(blocks) and gath:
                issue(k + 1, start)
            if st.grad_sync and self.overlap:
                for kk, comm, label in releases:
                    if kk == k:
                        self._join(rk, comm.group, comm, s.block_grads[-1], label)
        end = s.finish()
        if linked:  # in-pass sharing of what is not on the link model, then the linked collectives
            static = shared_extra(unlinked)
            if flows.left or flows.extra or static:
                again = yield from self._linked_pass(rk, st, ready, speed, flows, static, gates=s.gates, applied=False)
                if again is not None:
                    s, end = again, again.end
        rk.ops += sum(len(b.nodes) for b in blocks)
        if st.grad_sync and not self.overlap:
            for _, comm, label in releases:
                self._join(rk, comm.group, comm, end, label)
        add_pass_stats(rk, s.compute_s, s.recompute_s, s.flops, s.comm, s.exposed, s.count, s.contention)
        if rk.rec is not None:
            rk.rec.passes.append((ready, end, st, None, tuple(s.slices) if s.record else None))
        return end

    def _beside_grads(self, rk: RankState, ready: float, end: float, grads: list, dp_free: float) -> float:
        """End of a pass [ready, end] that released overlapped gradient buckets (release time, collective),
        slowed by the compute share their collectives take while in flight beside it (`sm_share.slowed_end`,
        `CostModel.sm_share`): the buckets run one after another on the rank's dp stream, free from
        `dp_free`, from their releases, each for its price alone (the same on every rank, whichever one's
        arrival completed a collective). The slowdown is exposed DP time."""
        share = self.cost.sm_share(self.group_shapes[grads[0][1].group])
        return slowed_beside_grads(rk, ready, end, [(at, self.comm_dur(c, rk.pace)) for at, c in grads], dp_free, share)

    def _grad_releases(self, prog: StageProgram, st: Step) -> list:
        """(block index, collective, label) of the gradient traffic a W/BW pass releases (`ChunkDP.releases`)."""
        key = (prog.stage, st.chunk, st.kind, st.mb)
        out = self._releases.get(key)
        if out is None:
            out = self._releases[key] = [(k, c, label.format(mb=st.mb))
                                         for k, c, label in prog.dp[st.chunk].releases.get(st.kind, ())]
        return out

    def _step_tail(self, rk: RankState, prog: StageProgram, t: float):
        """Generator: the stage's `tail` after the last micro-batch (`plan.lower.TailOp`). Returns the rank's
        end of step."""
        for op in prog.tail:
            if op.kind == "issue":
                for group, comm, label in op.comms:
                    self._join(rk, group, comm, t, label)
            elif op.kind == "await":
                if rk.last_dp is not None:
                    t = yield from self._await(rk, rk.last_dp, t, op.label)
            elif op.kind == "inline":  # symmetric in its group: priced, not a rendezvous
                c = op.op
                dur = self.times(rk.pace)(c)
                if rk.rec is not None:
                    rk.rec.tail.append((t, t + dur, op.label, c.dim))
                rk.comm[c.dim] += dur
                rk.exposed[c.dim] += dur
                rk.count[c.dim] += 1
                rk.ops += 1
                t += dur
            else:  # optimizer
                opt = self.times(rk.pace)(op.op)
                if rk.rec is not None:
                    rk.rec.optimizer.append((t, t + opt))
                rk.optimizer_s += opt
                rk.ops += 1
                t += opt
                if self.env.now < t:
                    yield self.env.timeout(t - self.env.now)
        return t

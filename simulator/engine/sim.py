"""SimPy execution of a `Plan`: one process per simulated rank walks its stage's program.

Each step (one pass of one chunk for one micro-batch) is one timed segment on the rank's compute
stream: it starts when the compute stream is free and its input has arrived (PP receive), runs its
template's duration (`templates.py`: TP/CP/EP collectives and their exposed time are inside), then
issues its PP send. Events exist only where ranks or streams interact: a receive that has not been
sent yet, a rendezvous whose peers have not arrived (full mode), a ZeRO gate, the DP/optimizer
barrier, and one timeout per step to advance the clock. DP/ZeRO collectives reserve time on the dp
stream (`fabric.py`) as the templates' blocks release them (overlapped) or after the backward (not).

Waiting is accounted where it happens: a compute stream that waits for a PP receive counts the part
after the sender's data was ready as exposed pp (transfer and link queueing), the part before as
bubble; a wait on a collective counts the part after all members were ready as exposed on its
dimension, peers' skew as bubble.
"""
from __future__ import annotations

from collections import defaultdict

import simpy

from ..layout import GroupShape
from ..ops import Comm
from .fabric import Collective, Fabric, Stream
from .lower import Plan, StageProgram, Step
from .templates import OpTimes, PassScheduler, PassTemplate, build_template


class CountingEnvironment(simpy.Environment):
    """simpy.Environment that counts the events it processes."""

    def __init__(self):
        super().__init__()
        self.processed = 0

    def step(self):
        self.processed += 1
        return super().step()


class Recorder:
    """What one traced rank did, for the Chrome trace and the plots (absolute times, seconds)."""

    def __init__(self):
        self.passes: list = []
        """(start, end, step, template or None, absolute slices or None)."""
        self.colls: list = []
        """(Collective, label) on the dp stream."""
        self.sends: list = []
        """(start, end, dst idx, flow id, label)."""
        self.recvs: list = []
        """(start, end, src idx, flow id, label)."""
        self.optimizer: list = []
        self.memory: list = []
        """(t, activation bytes held)."""


class RankState:
    """One simulated rank: its streams, groups and accumulators."""

    def __init__(self, idx: int, grank: int, stage: int, speed: float):
        self.idx, self.grank, self.stage, self.speed = idx, grank, stage, speed
        self.streams = {n: Stream(n) for n in ("dp", "pp send", "pp recv")}
        self.groups: dict = {}
        """group name -> tuple of member idx (dp_cp, edp, embd, sync)."""
        self.seq: dict = defaultdict(int)
        self.pp_peer: dict = {}
        """stage -> idx of the rank of that stage this rank exchanges activations with."""
        self.compute_s = self.recompute_s = self.optimizer_s = self.flops = 0.0
        self.comm = defaultdict(float)
        self.exposed = defaultdict(float)
        self.count = defaultdict(int)
        self.ops = 0
        """Op instances this rank executed (every op of every pass, collective, p2p and optimizer)."""
        self.act = 0.0
        self.act_peak = 0.0
        self.end = 0.0
        self.done = False
        self.waiting = ""
        self.rec: Recorder | None = None
        self.last_dp: Collective | None = None


class Engine:
    """Runs a plan: `Engine(...).run()` fills the ranks' accumulators and recorders."""

    def __init__(self, plan: Plan, cost, ranks: list[RankState], pp_shape, group_shapes: dict, *, steps: int = 1,
                 record_slices: bool = True):
        self.plan, self.cost, self.ranks, self.steps = plan, cost, ranks, steps
        self.sc = plan.sc
        self.env = CountingEnvironment()
        self.fabric = Fabric(self.env)
        self.mailbox: dict = {}
        self.pp_shape = pp_shape
        """(idx_a, idx_b) -> GroupShape of the pair, for p2p pricing."""
        self.group_shapes = group_shapes
        self.record_slices = record_slices
        self._times: dict = {}
        self._templates: dict = {}
        self._comm_dur: dict = {}
        self._releases: dict = {}
        self._flow = 0
        self.zero, self.overlap = plan.zero, plan.overlap_dp

    # ------------------------------------------------------------------ pricing
    def times(self, speed: float) -> OpTimes:
        if speed not in self._times:
            self._times[speed] = OpTimes(self.sc, self.cost, speed)
        return self._times[speed]

    def template(self, chunk: int, kind: str, speed: float) -> PassTemplate:
        key = (chunk, kind, speed)
        t = self._templates.get(key)
        if t is None:
            t = self._templates[key] = build_template(self.times(speed), chunk, kind, self.plan.blocks[(chunk, kind)])
        return t

    def comm_dur(self, comm: Comm) -> float:
        t = self._comm_dur.get(comm)
        if t is None:
            t = self._comm_dur[comm] = self.times(1.0).comm_on(comm, self.group_shapes[comm.group or comm.dim])
        return t

    # ------------------------------------------------------------------ run
    def run(self) -> None:
        for rk in self.ranks:
            self.env.process(self._rank(rk))
        self.env.run()
        stuck = [rk for rk in self.ranks if not rk.done]
        if stuck:
            desc = ", ".join(f"rank {rk.grank} (stage {rk.stage}) waiting on {rk.waiting}" for rk in stuck[:4])
            raise RuntimeError(f"engine deadlock: {len(stuck)} rank(s) never finished: {desc}")

    def _join(self, rk: RankState, group: str, comm: Comm, ready: float, label: str) -> Collective:
        members = rk.groups[group]
        seq = rk.seq[group]
        rk.seq[group] = seq + 1
        dur = self.comm_dur(comm)
        c = self.fabric.join((group, members[0], seq), len(members), dur, comm.dim, label, rk.streams["dp"], ready)
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
        if c.end > since:
            exposed = c.end - max(since, c.ready)
            rk.exposed[c.dim] += max(0.0, min(exposed, c.end - since))
            return c.end
        return since

    def _rank(self, rk: RankState):
        env = self.env
        prog = self.plan.stages[rk.stage]
        t = 0.0
        for step_no in range(self.steps):
            gathers = self._param_gathers(rk, prog, t) if self.zero in (1, 2) and self.overlap else {}
            for st in prog.steps:
                ready = t
                if st.recv_from >= 0:
                    key = (rk.idx, st.recv_key, step_no)
                    msg = self.mailbox.pop(key, None)
                    if msg is None:
                        ev = self.mailbox[key] = env.event()
                        rk.waiting = f"receive {st.recv_key}"
                        msg = yield ev
                        rk.waiting = ""
                    arrival, data_ready = msg
                    if arrival > ready:
                        rk.exposed["pp"] += arrival - max(ready, data_ready)
                        ready = arrival
                speed = rk.speed
                tpl = self.template(st.chunk, st.kind, speed)
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
                gated = self.zero == 3 and st.kind != "W" or st.param_gated
                if gated:
                    end = yield from self._gated_pass(rk, prog, st, ready, speed, gathers)
                else:
                    end = ready + tpl.duration
                    rk.ops += len(tpl.slices)
                    rk.compute_s += tpl.compute_s
                    rk.recompute_s += tpl.recompute_s
                    rk.flops += tpl.flops
                    for d, v in tpl.comm_s.items():
                        rk.comm[d] += v
                    for d, v in tpl.exposed_s.items():
                        rk.exposed[d] += v
                    for d, v in tpl.comm_count.items():
                        rk.count[d] += v
                    if st.grad_sync:
                        for k, comm, label in self._grad_releases(prog, st):
                            self._join(rk, comm.group, comm, ready + tpl.block_grads[k] if self.overlap else end, label)
                    if rk.rec is not None:
                        rk.rec.passes.append((ready, end, st, tpl, None))
                if st.grad_sync and not self.overlap and rk.last_dp is not None:
                    # without overlap, per-micro-batch ZeRO-2/3 reduce-scatters block the compute stream
                    end = yield from self._await(rk, rk.last_dp, end, "blocking gradient reduce-scatter")
                self._memory(rk, ready, st.alloc)
                if end > env.now:
                    yield env.timeout(end - env.now)
                self._memory(rk, end, -st.free)
                t = end
                if st.send_to >= 0:
                    self._send(rk, st, end, step_no)
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

    def _send(self, rk: RankState, st: Step, ready: float, step_no: int) -> None:
        """PP p2p: reserve the sender's link out and the receiver's link in (FIFO), deliver at arrival."""
        dst = self.ranks[rk.pp_peer[st.send_to]]
        shape: GroupShape = self.pp_shape[(rk.idx, dst.idx)]
        comm = Comm("pp_send_recv", "pp", "send_recv", self.plan.pp_bytes)
        dur = self.times(1.0).comm_on(comm, shape)
        tx, rx = rk.streams["pp send"], dst.streams["pp recv"]
        start = max(ready, tx.free, rx.free)
        arrival = tx.free = rx.free = start + dur
        rk.comm["pp"] += dur
        dst.comm["pp"] += dur
        rk.ops += 1
        if dur > 0:
            rk.count["pp"] += 1
        kind = "F" if st.kind == "F" else "B"
        key = (dst.idx, (kind, st.chunk, st.mb), step_no)
        msg = (arrival, ready)
        ev = self.mailbox.pop(key, None)
        if ev is not None:
            ev.succeed(msg)
        else:
            self.mailbox[key] = msg
        if rk.rec is not None or dst.rec is not None:
            self._flow += 1
            label = f"C{st.chunk} mb{st.mb} {'act' if kind == 'F' else 'grad'}"
            if rk.rec is not None:
                rk.rec.sends.append((start, arrival, dst.idx, self._flow, label))
            if dst.rec is not None:
                dst.rec.recvs.append((start, arrival, rk.idx, self._flow, label))

    def _param_gathers(self, rk: RankState, prog: StageProgram, t: float) -> dict:
        """ZeRO-1/2 with overlap: the updated parameters' all-gather buckets, issued when the step starts
        (= after the previous step's optimizer: steady state), in the order the forwards need them."""
        first = []
        for st in prog.steps:
            if st.kind == "F" and st.chunk not in first:
                first.append(st.chunk)
        out = {}
        for c in first:
            out[c] = [self._join(rk, b.comm.group, b.comm, t, f"C{c} {b.label}") for b in prog.dp[c].params]
        return out

    def _gated_pass(self, rk: RankState, prog: StageProgram, st: Step, ready: float, speed: float, gathers: dict):
        """Generator: a pass whose blocks wait on DP collectives (ZeRO-3 gathers; ZeRO-1/2 first forward),
        scheduled block by block at run time. Returns the pass end."""
        blocks = self.plan.blocks[(st.chunk, st.kind)]
        dp = prog.dp[st.chunk]
        s = PassScheduler(self.times(speed), ready, record=rk.rec is not None and self.record_slices)
        z3 = self.zero == 3
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
            if z3 and self.overlap and k + 1 < len(blocks) and gath:
                issue(k + 1, start)
            if st.grad_sync and self.overlap:
                for kk, comm, label in releases:
                    if kk == k:
                        self._join(rk, comm.group, comm, s.block_grads[-1], label)
        end = s.finish()
        rk.ops += sum(len(b.nodes) for b in blocks)
        if st.grad_sync and not self.overlap:
            for _, comm, label in releases:
                self._join(rk, comm.group, comm, end, label)
        rk.compute_s += s.compute_s
        rk.recompute_s += s.recompute_s
        rk.flops += s.flops
        for d, v in s.comm.items():
            rk.comm[d] += v
        for d, v in s.exposed.items():
            rk.exposed[d] += v
        for d, v in s.count.items():
            rk.count[d] += v
        if rk.rec is not None:
            rk.rec.passes.append((ready, end, st, None, tuple(s.slices) if s.record else None))
        return end

    def _grad_releases(self, prog: StageProgram, st: Step) -> list:
        """(block index, collective, label) of the gradient traffic a W/BW pass releases: the chunk's DP
        buckets (ZeRO-0/1 on its last backward, ZeRO-2 on every one) or each block's ZeRO-3 reduce-scatter."""
        key = (prog.stage, st.chunk, st.kind, st.mb)
        out = self._releases.get(key)
        if out is None:
            dp = prog.dp[st.chunk]
            if self.zero == 3:
                blocks = self.plan.blocks[(st.chunk, st.kind)]
                out = [(k, c, f"{blocks[k].key} mb{st.mb} {c.name}") for k, cs in enumerate(dp.z3_scatter.get(st.kind, ()))
                       for c in cs]
            else:
                out = [(b.block, b.comm, f"C{st.chunk} {b.label}") for b in dp.grads]
            self._releases[key] = out
        return out

    def _step_tail(self, rk: RankState, prog: StageProgram, t: float):
        """Generator: after the last micro-batch: gradient buckets (when not overlapped), the tied-embedding
        all-reduce, wait for the dp stream, the optimizer, then (ZeRO-1/2 without overlap) the parameter
        all-gather, exposed. Returns the rank's end of step."""
        if self.zero in (0, 1) and not self.overlap:
            for c in prog.chunks:
                for b in prog.dp[c].grads:
                    self._join(rk, b.comm.group, b.comm, t, f"C{c} {b.label}")
        if prog.tied_allreduce is not None:
            self._join(rk, "embd", prog.tied_allreduce, t, "tied embedding all_reduce")
        if rk.last_dp is not None:
            t = yield from self._await(rk, rk.last_dp, t, "gradient sync")
        opt = self.times(rk.speed)(prog.optimizer)
        if rk.rec is not None:
            rk.rec.optimizer.append((t, t + opt))
        rk.optimizer_s += opt
        rk.ops += 1
        t += opt
        if self.env.now < t:
            yield self.env.timeout(t - self.env.now)
        if self.zero in (1, 2) and not self.overlap:
            last = None
            for c in prog.chunks:
                for b in prog.dp[c].params:
                    last = self._join(rk, b.comm.group, b.comm, t, f"C{c} {b.label}")
            if last is not None:
                t = yield from self._await(rk, last, t, "parameter all-gather")
        return t

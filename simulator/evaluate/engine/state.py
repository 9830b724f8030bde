"""What the engine keeps per simulated rank while it runs a plan: its streams and accumulators
(`RankState`), what a traced rank did (`Recorder`), the in-pass collectives it runs on the link model
(`PassFlows`), and a SimPy environment that counts its events.
"""
from __future__ import annotations

from collections import defaultdict, deque

import simpy

from ...plan.paces import Pace
from ..links import both_ways
from ..passes import CommSlice
from .fabric import Collective, Stream


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
        self.tail: list = []
        """(start, end, label, dim) of step-tail collectives priced in place (SP norm gradients)."""
        self.memory: list = []
        """(t, activation bytes held)."""


class RankState:
    """One simulated rank: its streams, groups and accumulators."""

    def __init__(self, idx: int, grank: int, stage: int, speed):
        self.pace = speed if isinstance(speed, Pace) else Pace(speed=float(speed))
        """How it runs (`plan/paces.py`): its compute multiplier, its pool, its groups' links."""
        self.idx, self.grank, self.stage, self.speed = idx, grank, stage, self.pace.speed
        self.streams = {n: Stream(n) for n in ("dp", "pp send")}
        self.groups: dict = {}
        """group name -> tuple of member idx (dp_cp, edp, embd, sync)."""
        self.seq: dict = defaultdict(int)
        self.pp_peer: dict = {}
        """stage -> idx of the rank of that stage this rank exchanges activations with."""
        self.compute_s = self.recompute_s = self.optimizer_s = self.flops = 0.0
        self.comm = defaultdict(float)
        self.exposed = defaultdict(float)
        self.count = defaultdict(int)
        self.contention = defaultdict(float)
        """dim -> seconds its transfers took beyond their alone prices (link sharing)."""
        self.intra_q = 0
        """DP / PP transfers in flight or queued that load this GPU's intra-node port (link sharing)."""
        self.ops = 0
        """Op instances this rank executed (every op of every pass, collective, p2p and optimizer)."""
        self.act = 0.0
        self.act_peak = 0.0
        self.end = 0.0
        self.done = False
        self.waiting = ""
        self.rec: Recorder | None = None
        self.plan = None
        """Its own plan where replicas run different micro-batch counts (`dp_balance: speed` with --full), else None."""
        self.last_dp: Collective | None = None


class PassFlows:
    """The linked collectives of one pass on the link model (`Engine._link_comms`): one chain per
    stream, each collective starting at its scheduled offset, later by what the pass's earlier
    collectives lost to sharing (their lag delays what follows them), and not before the previous one
    of its stream ends. `wait()` fires when all have ended; `extra`: (block, node) -> seconds beyond
    their prices."""

    def __init__(self, eng, rk: RankState, t0: float, comms):
        """`eng`: the `sim.Engine` whose link model and clock the collectives run on."""
        self.links, self.rk, self.t0, self.env = eng.links, rk, t0, eng.env
        self._waiter = None
        self.left = 0
        self.lag = 0.0
        self.last, self.last_dim = t0, None
        """When the latest of its collectives ended, and its dimension."""
        self.extra: dict = {}
        self.keys: set = set()
        self._chains: dict = {}
        self._free: dict = {}
        """stream -> end of its last collective (absent while one is in flight)."""
        self.extend(comms)

    def extend(self, comms) -> None:
        for c in comms:
            if c.stream not in self._chains:
                self._chains[c.stream] = deque()
                self._free[c.stream] = self.t0
            self._chains[c.stream].append(c)
            self.keys.add((c.block, c.node))
            self.left += 1
        for stream in list(self._free):
            self._next(stream)

    def _next(self, stream: str) -> None:
        q = self._chains[stream]
        if not q or stream not in self._free:
            return
        c: CommSlice = q.popleft()
        start = max(self.t0 + c.start + self.lag, self._free.pop(stream))
        idx = self.rk.idx
        self.links.add(both_ways(idx, c.use), start, c.dur, lambda flow, c=c: self._ended(c, flow))

    def _ended(self, c: CommSlice, flow) -> None:
        if flow.slowed:
            x = flow.finish - flow.start - c.dur
            if x > 0:
                self.extra[(c.block, c.node)] = x
                self.lag += x
        self.left -= 1
        if flow.finish > self.last:
            self.last, self.last_dim = flow.finish, c.dim
        self._free[c.stream] = flow.finish
        self._next(c.stream)
        if self.left == 0 and self._waiter is not None:
            self._waiter.succeed()
            self._waiter = None

    def wait(self):
        """An event that fires when every collective added so far has ended (None if they have)."""
        if self.left == 0:
            return None
        if self._waiter is None:
            self._waiter = self.env.event()
        return self._waiter

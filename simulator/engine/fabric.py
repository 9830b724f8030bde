"""Streams and collectives: how ops that leave a rank's compute stream get their start and end times.

A `Stream` is one serial queue of a rank (its dp stream, its PP send or receive link): ops run one at a
time in the order they were issued (NCCL runs a communicator's ops in issue order). A `Collective` is a
rendezvous of all members of its process group: it starts when its last member has arrived (issued it,
with its data ready) and every member's stream has finished the ops issued before it, and it ends
`dur` seconds later on every member's stream. Times are reserved, not waited for: a member that
arrives learns start and end as soon as the group is complete, so only ranks that must *wait* on a
collective cost a SimPy event. In representative mode a data-parallel group has one simulated member
(its peers are symmetric), so its collectives resolve at once; PP pairs and the tied-embedding pair
connect different simulated ranks and are real rendezvous in both modes.
"""
from __future__ import annotations

from collections import deque


class Stream:
    """One serial stream of a rank; `free` is when its last reserved op ends."""
    __slots__ = ("name", "free", "queue")

    def __init__(self, name: str):
        self.name = name
        self.free = 0.0
        self.queue: deque = deque()


class Collective:
    """One collective (or a zero-length pass rendezvous) of one group."""
    __slots__ = ("key", "size", "dur", "dim", "label", "arrived", "ready", "streams", "start", "end", "waiters")

    def __init__(self, key, size: int, dur: float, dim: str, label: str):
        self.key, self.size, self.dur, self.dim, self.label = key, size, dur, dim, label
        self.arrived = 0
        self.ready = 0.0
        """Latest member's data-ready time: before it the group could not start (peers' skew)."""
        self.streams: list[Stream] = []
        self.start: float | None = None
        self.end: float | None = None
        self.waiters: list = []


class Fabric:
    """Pending collectives of one simulation, keyed by (group, sequence number)."""

    def __init__(self, env):
        self.env = env
        self.pending: dict = {}

    def join(self, key, size: int, dur: float, dim: str, label: str, stream: Stream | None, ready: float) -> Collective:
        """Member arrival: its data is ready at `ready` (may be later than now: the rank reserves ahead)."""
        c = self.pending.get(key) if size > 1 else None
        if c is None:
            c = Collective(key, size, dur, dim, label)
            if size > 1:
                self.pending[key] = c
        c.arrived += 1
        if ready > c.ready:
            c.ready = ready
        if stream is not None:
            c.streams.append(stream)
            stream.queue.append(c)
        if c.arrived == size:
            if size > 1:
                del self.pending[key]
            self._resolve_from(c)
        return c

    def wait(self, c: Collective):
        """An event that fires (at once, in simulated time) when `c` is resolved; None if it already is."""
        if c.end is not None:
            return None
        ev = self.env.event()
        c.waiters.append(ev)
        return ev

    def _resolve_from(self, first: Collective) -> None:
        work = [first]
        while work:
            c = work.pop()
            if c.end is not None or c.arrived < c.size:
                continue
            if any(s.queue[0] is not c for s in c.streams):
                continue
            start = c.ready
            for s in c.streams:
                if s.free > start:
                    start = s.free
            c.start, c.end = start, start + c.dur
            for s in c.streams:
                s.queue.popleft()
                s.free = c.end
                if s.queue:
                    work.append(s.queue[0])
            for ev in c.waiters:
                ev.succeed(c)
            c.waiters = []

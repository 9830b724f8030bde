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

With link sharing on (`links.LinkSharing`), a collective or send that carries a `demand` on links is
not reserved ahead: once it can start it becomes a transfer of the link model, and its end (and the
start of what queues behind it on its streams) is known when the clock reaches it, after sharing the
links with whatever else was in flight. Without a demand, or with sharing off, it ends at start + dur.
"""
from __future__ import annotations

from collections import deque
from functools import partial


class Stream:
    """One serial stream of a rank; `free` is when its last reserved op ends."""
    __slots__ = ("name", "free", "queue")

    def __init__(self, name: str):
        self.name = name
        self.free = 0.0
        self.queue: deque = deque()


class Collective:
    """One collective, PP send or zero-length pass rendezvous of one group."""
    __slots__ = ("key", "size", "dur", "dim", "label", "arrived", "ready", "streams", "start", "end", "waiters",
                 "demand", "owners", "payload", "contention_s")

    def __init__(self, key, size: int, dur: float, dim: str, label: str):
        self.key, self.size, self.dur, self.dim, self.label = key, size, dur, dim, label
        self.arrived = 0
        self.ready = 0.0
        """Latest member's data-ready time: before it the group could not start (peers' skew)."""
        self.streams: list[Stream] = []
        self.start: float | None = None
        self.end: float | None = None
        """Set when it ends (at once without link sharing; when the clock reaches it with sharing)."""
        self.waiters: list = []
        self.demand: dict = {}
        """link -> share of it used at full speed, every member's links (`links.py`); empty: no sharing."""
        self.owners: list = []
        """What the members passed as `owner` (the engine's rank states), for `Fabric.on_done`."""
        self.payload = None
        """Anything the caller attaches (a PP send's message)."""
        self.contention_s = 0.0
        """Seconds it took beyond `dur` because it shared links (set when it ends)."""


class Fabric:
    """Pending collectives of one simulation, keyed by (group, sequence number). `links`: the link model
    (None: every collective ends at start + dur, reserved ahead); `on_done(c)` is called when a
    collective with a demand ends."""

    def __init__(self, env, links=None, on_done=None):
        self.env = env
        self.pending: dict = {}
        self.links = links
        self.on_done = on_done

    def join(self, key, size: int, dur: float, dim: str, label: str, stream, ready: float, *,
             demand: dict | None = None, owner=None, payload=None) -> Collective:
        """Member arrival: its data is ready at `ready` (may be later than now: the rank reserves ahead).
        `stream`: the member's stream, a tuple of streams (a send: the sender's out, the receiver's in)
        or None; `demand`: the member's links (merged over members)."""
        c = self.pending.get(key) if size > 1 else None
        if c is None:
            c = Collective(key, size, dur, dim, label)
            if size > 1:
                self.pending[key] = c
        c.arrived += 1
        if ready > c.ready:
            c.ready = ready
        if stream is not None:
            for st in (stream if isinstance(stream, tuple) else (stream,)):
                c.streams.append(st)
                st.queue.append(c)
        if demand:
            c.demand.update(demand)
        if owner is not None:
            c.owners.append(owner)
        if payload is not None:
            c.payload = payload
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
        links = self.links
        while work:
            c = work.pop()
            if c.start is not None or c.arrived < c.size:
                continue
            start = c.ready
            for s in c.streams:
                if s.queue[0] is not c:
                    break
                if s.free > start:
                    start = s.free
            else:
                c.start = start
                if links is None or not c.demand or c.dur <= 0:
                    self._end(c, start + c.dur, work)
                else:  # its end is the link model's to tell; what queues behind it waits until then
                    links.add(c.demand, start, c.dur, partial(self._ended, c))

    def _ended(self, c: Collective, flow) -> None:
        """The link model's end of a transfer: release its streams, start what queued behind it."""
        if flow.slowed:
            c.contention_s = max(0.0, flow.finish - c.start - c.dur)
        work: list = []
        self._end(c, flow.finish, work)
        for nxt in work:
            self._resolve_from(nxt)

    def _end(self, c: Collective, end: float, work: list) -> None:
        c.end = end
        for s in c.streams:
            s.queue.popleft()
            s.free = end
            if s.queue:
                work.append(s.queue[0])
        for ev in c.waiters:
            ev.succeed(c)
        c.waiters = []
        if self.on_done is not None and (c.demand or c.payload is not None):
            self.on_done(c)

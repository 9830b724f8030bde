"""Link sharing: transfers that are in flight at the same time on the same link share its bandwidth.

Static prices (`collectives.collective_time`, siblings=True) already divide each link between the
groups of one dimension that run the same collective at once. What they cannot see is a rank's
*other* traffic in flight at the same moment: a DP gradient bucket still reducing when the pipeline
send of that backward's input gradient leaves on the same NIC, ZeRO-1 parameter all-gathers under the
first forwards' activations, an EP all-to-all crossing the spine while DP buckets do. This module is
the engine's fluid model for that, fed by `fabric.py`.

Links. Every simulated rank has one link per class and direction: `(rank idx, class, "out"|"in")`
with the classes of `collectives.link_busy` (intra = its NVLink / PCIe / host port, uplink, nic,
spine, wan), each of capacity 1 = the share of the hardware the static prices give that rank. A
transfer priced `dur` seconds alone uses `u_l = busy_l / dur` of link l while it runs at full speed
(`busy_l` from `link_busy`; the rest of `dur` is latency, which uses no bandwidth), capped at 1 when
a calibration profile prices it faster than the topology model. Collectives load each member's links
both ways (rings, trees and all-to-alls send and receive the same bytes); a send loads the sender's
links out and the receiver's links in.

Sharing. Active transfers progress at a speed x in (0, 1] of their alone speed, set by max-min
fairness in link share on each transfer's most loaded link, with x <= 1 (progressive filling,
Bertsekas & Gallager, Data Networks 2nd ed. 6.5.2; the rule of `network.max_min_rates`, plus the cap
a transfer's latency puts on its speed). Rates are piecewise constant between starts and ends; at
each, only the connected set of transfers that share a link with the one that changed is
recomputed. A transfer alone runs at x = 1 and ends at exactly start + dur, so wherever nothing
overlaps the engine's numbers are those of the static prices; two transfers that each saturate one
link share it and take twice as long.

Events: one SimPy timeout per distinct start or end time of a transfer (the next one due), plus
stale ones when a new transfer moves the next end earlier; transfers whose ends are still in the
future are only predictions, final when the clock reaches them.

One re-share per instant. Starts and ends at the same instant arrive one by one (each rank's process
adds its transfer when it resumes), but the speeds they set last no time until the clock moves on.
So the links they touch are only marked, and their connected sets are re-shared once, when the
instant is over (a zero-delay timeout: after the processes SimPy has already queued for this instant)
or before anything later is processed; each connected set gets its own progressive filling. The
speeds are those of re-sharing after every start and end, since only the last set of the instant
counts. In every-rank mode the ranks of a data-parallel group send their pipeline messages at the
same instant onto the links of one collective they share: re-sharing after each send cost the size of
the group per send, and the engine's cost grew as ranks x dp (benchmarks/full_mode_scaling.py).
"""
from __future__ import annotations

import heapq
from typing import Callable, Hashable, Mapping

from ..cost.collectives import link_busy

TIME_EPS = 1e-12
"""Seconds: starts and ends closer than this are processed together (the model's times are >= 1e-7 s)."""
LINK_EPS = 1e-12
"""Link share below which a link counts as full in progressive filling."""


def link_use(topology, comm, shape, dur: float) -> tuple:
    """(link class, share of a rank's link it uses at full speed) of a transfer priced `dur` seconds alone:
    `collectives.link_busy` over `dur`, at most 1 (module docstring); empty for a free transfer. The one rule
    both evaluators load links with."""
    busy = link_busy(topology, comm.collective, comm.bytes, shape) if dur > 0 else {}
    return tuple((cls, min(1.0, b / dur)) for cls, b in busy.items() if b > 0)


def both_ways(rank, use: tuple) -> dict:
    """The demand of a collective on `rank`'s links: each link class it uses (`link_use`) out and in (rings, trees
    and all-to-alls send and receive the same bytes)."""
    return {(rank, cls, d): u for cls, u in use for d in ("out", "in")}


def send_demand(src, dst, use: tuple) -> dict:
    """The demand of a point-to-point send: out on the sender's links, in on the receiver's."""
    return {**{(src, cls, "out"): u for cls, u in use}, **{(dst, cls, "in"): u for cls, u in use}}


class Flow:
    """One transfer as the link model sees it."""
    __slots__ = ("fid", "demand", "m", "dur", "rem", "x", "t", "start", "finish", "ver", "done", "slowed")

    def __init__(self, fid: int, demand: Mapping[Hashable, float], start: float, dur: float, done: Callable):
        self.fid = fid
        self.demand = demand
        """link -> share of the link it uses at full speed (0 < u <= 1)."""
        self.m = max(demand.values())
        self.dur = dur
        self.rem = dur
        """Seconds of work left at full speed."""
        self.x = 0.0
        """Current speed (fraction of the alone speed)."""
        self.t = start
        """Time at which `rem` was last brought up to date."""
        self.start = start
        self.finish = None
        """Predicted end at the current speed (final once the clock reaches it)."""
        self.ver = 0
        self.done = done
        self.slowed = False


def max_min_speeds(flows: list[Flow]) -> list[float]:
    """Speed of each flow (fraction of its alone speed) under max-min fair sharing of link share on its
    most loaded link, each capped at 1. All unfrozen flows' shares on their most loaded link rise
    together; a flow freezes when a link it uses fills or it reaches its alone speed."""
    level = 0.0
    left: dict = {}
    weights = []
    for f in flows:
        w = {l: u / f.m for l, u in f.demand.items()}
        weights.append(w)
        for l in w:
            left[l] = 1.0
    share = [0.0] * len(flows)
    rising = list(range(len(flows)))
    while rising:
        grow: dict = {}
        for i in rising:
            for l, w in weights[i].items():
                grow[l] = grow.get(l, 0.0) + w
        step, full_link, capped = float("inf"), None, None
        for l, g in grow.items():
            s = left[l] / g
            if s < step:
                step, full_link, capped = s, l, None
        for i in rising:
            s = flows[i].m - level
            if s < step:
                step, full_link, capped = s, None, i
        step = max(step, 0.0)
        level += step
        for l, g in grow.items():
            left[l] -= step * g
        keep = []
        for i in rising:
            f = flows[i]
            if i == capped or f.m - level <= LINK_EPS * f.m or any(l == full_link or left[l] <= LINK_EPS for l in weights[i]):
                share[i] = min(level, f.m)
            else:
                keep.append(i)
        rising = keep
    return [1.0 if share[i] >= f.m else share[i] / f.m for i, f in enumerate(flows)]


class LinkSharing:
    """The engine's concurrent transfers and their fair shares; `add` one, get `done(flow)` called when it
    ends (`flow.finish`; from a SimPy timeout, or within `add` for what is due by now)."""

    def __init__(self, env):
        self.env = env
        self.now = 0.0
        """Time up to which starts and ends have been processed."""
        self._pending: list = []
        """Heap of (start, fid, flow) not yet started."""
        self._ends: list = []
        """Heap of (predicted end, fid, version, flow); stale versions are skipped."""
        self._on_link: dict = {}
        """link -> {fid: flow} of the active flows using it."""
        self._alarms: list = []
        """Times of the SimPy timeouts in flight (heap)."""
        self._seq = 0
        self._busy = False
        self._dirty: dict = {}
        """Links whose flows changed at `_dirty_t` and are not re-shared yet (one re-share per instant)."""
        self._dirty_t = 0.0
        self.flows = 0
        self.slowed = 0
        """Flows that ran slower than alone at some point."""
        self.late = 0
        """Flows added with a start more than TIME_EPS before `now` (started at `now`: should stay 0)."""

    # ------------------------------------------------------------------ public
    def add(self, demand: Mapping[Hashable, float], start: float, dur: float, done: Callable[[Flow], None]) -> Flow:
        if start < self.now:  # the clock's own rounding (SimPy adds delays to now), or a bug if more
            self.late += start < self.now - TIME_EPS
            start = self.now
        self._seq += 1
        f = Flow(self._seq, demand, start, dur, done)
        self.flows += 1
        if not self._busy:
            self._advance(self.env.now)  # first what is due by now: ends free links
        on_link = self._on_link
        if start <= self.now + TIME_EPS and not any(l in on_link for l in demand):
            # starts now on idle links: full speed until something else arrives (no re-sharing needed)
            for l in demand:
                on_link[l] = {f.fid: f}
            f.x, f.t, f.finish = 1.0, start, start + dur
            heapq.heappush(self._ends, (f.finish, f.fid, f.ver, f))
            if not self._busy:
                self._arm()
            return f
        heapq.heappush(self._pending, (start, f.fid, f))
        if not self._busy:
            self._advance(self.env.now)
        return f

    # ------------------------------------------------------------------ clock
    def _next_time(self) -> float | None:
        ends = self._ends
        while ends and ends[0][2] != ends[0][3].ver:
            heapq.heappop(ends)
        t = ends[0][0] if ends else None
        if self._pending and (t is None or self._pending[0][0] < t):
            t = self._pending[0][0]
        return t

    def _arm(self) -> None:
        # links waiting for their re-share: the instant's timeout (predicted ends are stale until then)
        t = self._dirty_t if self._dirty else self._next_time()
        if t is None or (self._alarms and self._alarms[0] <= t):
            return
        heapq.heappush(self._alarms, t)
        ev = self.env.timeout(max(0.0, t - self.env.now))
        ev.callbacks.append(lambda _ev, t=t: self._alarm(t))

    def _alarm(self, t: float) -> None:
        self._alarms.remove(t)
        heapq.heapify(self._alarms)
        self._advance(max(t, self.env.now), settle=True)

    def _advance(self, until: float, settle: bool = False) -> None:
        """Process every start and end due by `until`, in time order, then arm the next timeout. The
        instant's marked links are re-shared before a later time is processed, and at the end when
        `settle` (the instant is over: called from a timeout)."""
        self._busy = True
        try:
            while True:
                t = self._next_time()
                due = t is not None and t <= until + TIME_EPS
                if self._dirty and (due and t > self._dirty_t + TIME_EPS or not due and settle):
                    self._settle()
                    continue
                if not due:
                    break
                self._step(t)
        finally:
            self._busy = False
        self._arm()

    def _step(self, t: float) -> None:
        """One instant: end the flows due, start the flows due, re-share the links they touch, then
        report the ends (their callbacks may add flows starting now: the loop in `_advance` takes them)."""
        ended, started = [], []
        ends = self._ends
        while ends and ends[0][0] <= t + TIME_EPS:
            end, _, ver, f = heapq.heappop(ends)
            if ver == f.ver:
                f.ver += 1
                ended.append(f)
        while self._pending and self._pending[0][0] <= t + TIME_EPS:
            started.append(heapq.heappop(self._pending)[2])
        self.now = max(self.now, t)
        seeds: dict = {}
        for f in ended:
            for l in f.demand:
                peers = self._on_link[l]
                del peers[f.fid]
                if peers:
                    seeds[l] = None
                else:
                    del self._on_link[l]
        on_link = self._on_link
        for f in started:
            if not seeds and not any(l in on_link for l in f.demand):
                # on idle links: full speed, nothing else to re-share
                for l in f.demand:
                    on_link[l] = {f.fid: f}
                f.x, f.t, f.finish = 1.0, f.start, f.start + f.dur
                heapq.heappush(self._ends, (f.finish, f.fid, f.ver, f))
                continue
            for l in f.demand:
                on_link.setdefault(l, {})[f.fid] = f
                seeds[l] = None
        if seeds:  # re-shared once the instant is over (module docstring)
            if not self._dirty:
                self._dirty_t = t
            self._dirty.update(seeds)
        for f in sorted(ended, key=lambda g: g.fid):
            f.done(f)

    def _settle(self) -> None:
        """Re-share the connected sets of active flows that touch the instant's marked links, each set
        on its own (its speeds depend on its flows alone), in the order of their lowest flow id."""
        seeds, t = self._dirty, self._dirty_t
        self._dirty = {}
        on_link = self._on_link
        seen: set = set()
        comps = []
        for seed in seeds:
            if seed in seen or seed not in on_link:
                continue
            seen.add(seed)
            comp: dict = {}
            links = [seed]
            while links:
                l = links.pop()
                for fid, f in on_link[l].items():
                    if fid not in comp:
                        comp[fid] = f
                        for l2 in f.demand:
                            if l2 not in seen:
                                seen.add(l2)
                                links.append(l2)
            comps.append([comp[k] for k in sorted(comp)])
        for flows in sorted(comps, key=lambda c: c[0].fid):
            self._reshare(t, flows)

    def _reshare(self, t: float, flows: list) -> None:
        """Recompute the speeds of `flows`, one connected set of active flows (by flow id)."""
        speeds = [1.0] if len(flows) == 1 and _alone(flows[0], self._on_link) else max_min_speeds(flows)
        for f, x in zip(flows, speeds):
            if x == f.x:
                continue
            if f.x > 0:
                f.rem = max(0.0, f.rem - (t - f.t) * f.x)
            if x < 1.0 and not f.slowed:
                f.slowed = True
                self.slowed += 1
            f.t, f.x = t, x
            f.finish = t + f.rem / x
            f.ver += 1
            heapq.heappush(self._ends, (f.finish, f.fid, f.ver, f))


def _alone(f: Flow, on_link: dict) -> bool:
    return all(len(on_link[l]) == 1 for l in f.demand)


def fluid_ends(items: list, first_only: bool = False) -> list[float]:
    """End of each (start, dur, demand) when they share links as `LinkSharing` does (offline: all
    starts known; used for the collectives inside one pass template). `first_only`: stop once the first item
    has ended (its end is right; the others' are what they would be had they all ended then)."""
    flows = [Flow(i, demand, start, dur, None) for i, (start, dur, demand) in enumerate(items)]
    pending = sorted(flows, key=lambda f: (f.start, f.fid))
    first = flows[0] if flows else None
    active: list[Flow] = []
    k = 0
    t = pending[0].start if pending else 0.0
    while k < len(pending) or active:
        while k < len(pending) and pending[k].start <= t + TIME_EPS:
            active.append(pending[k])
            k += 1
        if not active:
            t = pending[k].start
            continue
        speeds = max_min_speeds(active) if len(active) > 1 else [1.0]
        nxt = min(f.rem / x for f, x in zip(active, speeds))
        if k < len(pending):
            nxt = min(nxt, pending[k].start - t)
        for f, x in zip(active, speeds):
            f.rem -= nxt * x
        t += nxt
        keep = []
        for f, x in zip(active, speeds):
            if f.rem <= TIME_EPS * max(1.0, f.dur) or f.rem <= 0:
                f.finish = t
            else:
                keep.append(f)
        active = keep
        if first_only and first.finish is not None:
            break
    return [f.finish if f.finish is not None else t for f in flows] if first_only else \
        [f.finish if f.finish is not None else f.start + f.dur for f in flows]

"""Pipeline sends in the analytic listing, slowed by the transfers they share links with.

The engine runs every DP / ZeRO collective, PP send and in-pass collective that leaves the GPU's own port on its
link model (`links.LinkSharing`): a send that leaves while gradient buckets reduce-scatter on the same NIC, or
parameters all-gather for the next forwards, shares the NIC with them and arrives later. The analytic listing prices
every transfer alone, so at scale it reads the pipeline's bubble short. On MLPerf Training v3.1's GPT-3 175B layout
(TP4 PP8 VP12, eight micro-batches per step, 100 MB DP buckets over 320 replicas) the engine's step on 10,240 H100
was 4.3 % longer than the listing's, all of it bubble and PP time (148 against 115 ms of bubble).

What the listing does about it (`analytic.estimate`):
1. it lists the step once, recording every transfer it lists (`Transfer`): its start, its seconds alone and the
   links it loads, by the rule the engine loads them with (`links.link_use` on the stage's representative rank: a
   DP / ZeRO collective or an in-pass collective that leaves the GPU's port, `PassTemplate.net`, both ways on its
   rank; a send out on the sender and in on the receiver);
2. each send is shared with the recorded transfers that overlap it on one of its links, by the engine's own rule
   (`links.fluid_ends`: max-min fair, each at most its alone speed), the window widened until no further transfer
   overlaps the send's shared end (`WIDEN_ROUNDS` at most);
3. unless the extras add up to under `NEGLIGIBLE` of the step, it is listed again, each send lasting its alone price
   plus what sharing added to it (`send_extras`).
Steps 2-3 run `ROUNDS` times in all, each from the previous listing's starts. The in-pass collectives are kept as
their passes (a step lists millions) and become transfers only where a send's window reaches them (`_NetPasses`).

What it leaves to the engine: the DP collectives and in-pass collectives keep their alone prices in the listing
(sharing with the send is computed only to time the send); transfers that do not overlap a send do not share with
each other here; in-pass collectives that stay on the GPU's own port (NVLink) and those of passes gated on ZeRO
gathers are not recorded. Against the engine on the MLPerf layouts this leaves a few tenths of a per cent
(tests/test_send_sharing.py; `python validation/analytic_vs_engine.py`).
"""
from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass

from .links import TIME_EPS, both_ways, fluid_ends

ROUNDS = 1
"""Listings after the first, each with the sends' extra seconds from the one before. On the MLPerf GPT-3 175B layouts
the engine's step is -0.07 / -0.33 % from the listing's after one (10,240 / 4,096 H100) and +0.10 / +0.07 % after two:
a second round is nearer by a few tenths at the price of a third listing, which the sweep pays on every layout."""
NEGLIGIBLE = 1e-4
"""Sends' extra seconds, all stages' summed, below this share of the listed step are not listed again (the step
could move by at most that much)."""
WIDEN_ROUNDS = 4
"""Most times a send's window is widened to take in the transfers that overlap its shared end."""


@dataclass(frozen=True, slots=True)
class Transfer:
    """One transfer the listing listed: `key` names a PP send (None for the others), `demand` the links it loads
    at full speed ((stage, link class, "out" | "in") -> share of the link)."""
    key: tuple | None
    start: float
    dur: float
    demand: tuple

    @property
    def end(self) -> float:
        return self.start + self.dur


class _ByLink:
    """The recorded transfers on each link, by start, to find those that overlap a window."""

    def __init__(self, transfers: list[Transfer]):
        by: dict = defaultdict(list)
        for i, t in enumerate(transfers):
            for link, _ in t.demand:
                by[link].append((t.start, i))
        self.starts, self.index, self.reach = {}, {}, {}
        for link, items in by.items():
            items.sort()
            self.starts[link] = [s for s, _ in items]
            self.index[link] = [i for _, i in items]
            reach, r = [], float("-inf")
            for _, i in items:
                r = max(r, transfers[i].end)
                reach.append(r)
            self.reach[link] = reach
            """The latest end of the transfers up to each position: none before a position whose reach is at
            most `lo` can overlap a window from `lo`."""

    def overlapping(self, link, lo: float, hi: float, transfers: list[Transfer]) -> list[int]:
        starts = self.starts.get(link)
        if not starts:
            return []
        idx, reach = self.index[link], self.reach[link]
        out = []
        k = bisect_left(starts, hi - TIME_EPS) - 1
        while k >= 0 and reach[k] > lo + TIME_EPS:
            i = idx[k]
            if transfers[i].end > lo + TIME_EPS:
                out.append(i)
            k -= 1
        return out


class _NetPasses:
    """The passes with in-pass collectives that leave the GPU's port (`PassTemplate.net`), per stage, by start:
    their collectives become transfers only where a send's window reaches them (a step lists millions)."""

    def __init__(self, passes: list):
        by: dict = defaultdict(list)
        for stage, start, tpl in passes:
            by[stage].append((start, tpl))
        self.starts = {st: [s for s, _ in items] for st, items in by.items()}
        self.tpls = {st: [t for _, t in items] for st, items in by.items()}
        self._rel: dict = {}

    def overlapping(self, stage: int, lo: float, hi: float) -> list[Transfer]:
        """The net collectives of `stage`'s passes that overlap [lo, hi] (a rank's passes follow one another)."""
        starts = self.starts.get(stage)
        if not starts:
            return []
        tpls = self.tpls[stage]
        out = []
        k = bisect_left(starts, hi - TIME_EPS) - 1
        while k >= 0 and starts[k] + tpls[k].duration > lo + TIME_EPS:
            t0 = starts[k]
            offsets, reach, items = self._relative(stage, tpls[k])
            j = bisect_left(offsets, hi - t0 - TIME_EPS) - 1
            while j >= 0 and t0 + reach[j] > lo + TIME_EPS:
                at, dur, demand = items[j]
                if t0 + at + dur > lo + TIME_EPS:
                    out.append(Transfer(None, t0 + at, dur, demand))
                j -= 1
            k -= 1
        return out

    def _relative(self, stage: int, tpl) -> tuple:
        """(offsets, latest end up to each, (offset, seconds, demand)) of a template's net collectives, by offset."""
        key = (stage, id(tpl))
        rel = self._rel.get(key)
        if rel is None:
            items = sorted((c.start, c.dur, tuple(both_ways(stage, c.use).items())) for c in tpl.net)
            reach, r = [], float("-inf")
            for at, dur, _ in items:
                r = max(r, at + dur)
                reach.append(r)
            rel = self._rel[key] = ([at for at, _, _ in items], reach, items)
        return rel


def send_extras(transfers: list[Transfer], passes: list = ()) -> dict:
    """Send key -> seconds the send takes beyond its alone price, shared with the transfers that overlap it on one of
    its links (module docstring, step 2): `transfers` the listing's DP / ZeRO collectives and sends, `passes` the
    (stage, start, template) of its passes with in-pass collectives that leave the GPU's port. Sends that share
    nothing are left out."""
    by_link = _ByLink(transfers)
    net = _NetPasses(passes)
    extras, memo = {}, {}
    for i, s in enumerate(transfers):
        if s.key is None or s.dur <= 0:
            continue
        links = dict(s.demand)
        stages = {link[0] for link in links}
        end = s.end
        peers: dict = {}
        for _ in range(WIDEN_ROUNDS):
            found = {j: transfers[j] for link in links for j in by_link.overlapping(link, s.start, end, transfers) if j != i}
            for stage in stages:
                found.update((("net", t.start, t.demand), t) for t in net.overlapping(stage, s.start, end)
                             if any(link in links for link, _ in t.demand))
            if found.keys() <= peers.keys():
                break
            peers.update(found)
            end = s.start + _shared(s, list(peers.values()), memo)
        if end > s.end + TIME_EPS:
            extras[s.key] = end - s.end
    return extras


def _shared(send: Transfer, peers: list[Transfer], memo: dict) -> float:
    """Seconds from the send's start to its end beside `peers` (`links.fluid_ends`). A step repeats the same
    neighbourhood every micro-batch: it is computed once per shape (starts relative to the send's, links renamed in
    order of appearance)."""
    names: dict = {}
    shape = []
    for t in (send, *sorted(peers, key=lambda t: (t.start, t.dur))):
        shape.append((round(t.start - send.start, 12), t.dur,
                      tuple((names.setdefault(link, len(names)), u) for link, u in t.demand)))
    key = tuple(shape)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = fluid_ends([(at, dur, dict(demand)) for at, dur, demand in shape], first_only=True)[0]
    return hit

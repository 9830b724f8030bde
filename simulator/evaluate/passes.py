"""Pass templates: one pass (F, B, W or a fused B+W of one chunk for one micro-batch) list-scheduled
once over its op graph (the plan's blocks), so both evaluators can run it as a single timed segment.

Every micro-batch of a chunk runs the same ops (the op dataclasses are frozen and identical), so the
relative timeline of a pass is computed once here and replayed m times by the engine: this is the
coarsening that keeps the SimPy event count at "one event per pass plus one per cross-rank
interaction" instead of one per op. The op-level timeline survives in the template's `slices`, which
the trace expands back into one slice per op.

Scheduling rule (list scheduling over the whole pass): nodes run
in list order; a node starts at max(its deps' ends, its stream's free time); compute ops share the
rank's compute stream, a `Comm` uses its dimension's stream (tp, cp, ep); nothing starts before the host
has issued it (a host clock that advances by `CostModel.host_time` per collective). A pass is a sequence of
blocks (embedding, one per layer, LM head); a block's root nodes wait for the previous block's last
compute op and for the blocking comms issued after it (the data they consume). A pass ends when its
last op on any stream ends, so passes never overlap on a rank ("sealed" passes).

Exposed communication (docs/modeling.md §5.5 spirit, measured instead of by ratio): when the compute stream
sits idle before a compute op, the gap is charged to the dimension of the dependency that finished
last (a comm, the previous block's trailing blocking comm, or an external gate such as a ZeRO
parameter all-gather); the idle tail after the last compute op goes to the comm that ends last.

Link sharing inside a pass (`share=True`, `links.py`): collectives of different streams (tp, cp, ep)
that overlap in the pass and only use the GPU's intra-node port share it, worked out here once per
template (fluid sharing of the overlapping ones, re-scheduled with the longer durations until the
schedule stops moving). Collectives that also use other links (NICs, spine, WAN) are priced alone in
the template and listed in `comms` for the engine, which runs them on its link model with the
rank's other traffic (`sim.py`).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from ..cost.costs import CostModel
from ..cost.paced import PacedCosts
from ..plan.layout import GroupShape, group_shape
from ..plan.offload import HostCopy, LayerCopies
from ..plan.opgraph import Comm, Compute
from ..plan.paces import NOMINAL, LinkVariant, Pace
from ..scenario import Scenario
from .sm_share import beside_end
from .links import both_ways, fluid_ends, link_use
from ..plan.blocks import Block

SHARE_ITERATIONS = 8
"""Most re-schedules of a template while in-pass link sharing still moves its collectives (a bound:
shares and schedule are worked out in turn, not solved together)."""

COMM_DIMS = ("tp", "cp", "ep", "dp", "pp", "offload")
"""Communication dimensions, in the contract's order of the report; `offload`: activation offloading's copies to and
from host memory (`plan/offload.py`)."""


@dataclass(frozen=True, slots=True)
class Slice:
    """One op of a scheduled pass: times are offsets from the pass start (templates) or absolute."""
    block: int
    name: str
    letter: str
    stream: str
    start: float
    dur: float
    cat: str
    """compute | recompute | tp | cp | ep: the Chrome trace category."""
    node: int = -1
    """Index of the op in its block's nodes."""


@dataclass(frozen=True, slots=True)
class CommSlice:
    """An in-pass collective as the link model sees it."""
    block: int
    node: int
    stream: str
    dim: str
    start: float
    """Offset from the pass start."""
    dur: float
    """Seconds alone (its price)."""
    use: tuple
    """(link class, share of the rank's link used at full speed), `OpTimes.use`."""

    @property
    def net(self) -> bool:
        """Uses a link beyond the GPU's own intra-node port (NICs, PCIe uplinks, spine, WAN)."""
        return any(cls != "intra" for cls, _ in self.use)


@dataclass(frozen=True, kw_only=True)
class PassTemplate:
    """The relative timeline of one pass and what it costs."""
    chunk: int
    kind: str
    """F | B | W | BW (B and W of the same micro-batch back to back, fused)."""
    blocks: tuple[Block, ...]
    duration: float
    """Seconds from pass start until its last op on any stream ends."""
    compute_s: float
    recompute_s: float
    flops: float
    """FLOPs executed, recomputation included (HFU numerator)."""
    comm_s: dict
    """dim -> seconds of communication issued by the pass."""
    exposed_s: dict
    """dim -> seconds the compute stream sat idle waiting on that dimension inside the pass."""
    comm_count: dict
    """dim -> number of collectives (groups of size > 1) the pass issues."""
    slices: tuple[Slice, ...]
    block_start: tuple[float, ...]
    """Offset of each block's first op."""
    block_grads: tuple[float, ...]
    """Offset at which each block's weight gradients are complete (its last W op); -1 if none."""
    sync_dims: frozenset
    """Dimensions of in-pass collectives over groups of size > 1 (full mode: the pass is a rendezvous)."""
    comms: tuple = ()
    """CommSlice of every in-pass collective that moves bytes, in issue order (with `share` only)."""
    net: tuple = ()
    """The CommSlices that use links beyond the GPU's intra-node port (`CommSlice.net`)."""
    local: tuple = ()
    """The other CommSlices that load some link (the GPU's intra-node port only)."""
    extra: dict = None
    """(block, node) -> seconds added to a collective's price by in-pass link sharing (`share`)."""
    contention_s: dict = None
    """dim -> the sum of `extra` per dimension."""
    host_lead: float = 0.0
    """Seconds the host has issued of the pass when it starts (`steady_host_lead`); 0 where the stack has no
    host cost."""


class OpTimes:
    """Seconds per op, cached per distinct op (the op dataclasses are frozen and hashable).

    `pace` (`plan/paces.py`; a float is a compute multiplier alone): its `speed` multiplies compute times (a slow
    GPU: 1.0 = nominal), its pool's GPU computes, and a collective is priced on its group's links (the slowest;
    `cost/paced.py`); communication is priced on the group shapes of `layout.group_shape`, computed once per
    dimension. `costs`: the evaluator's `PacedCosts`, shared by its OpTimes (built here when not given)."""

    def __init__(self, sc: Scenario, cost: CostModel, speed: float | Pace = 1.0, costs: PacedCosts | None = None):
        self.pace = speed if isinstance(speed, Pace) else Pace(speed=float(speed))
        self.sc, self.cost, self.speed = sc, cost, self.pace.speed
        self.costs = costs if costs is not None else PacedCosts(sc, cost)
        self.compute_cost = self.costs.model(LinkVariant(self.pace.pool))
        self._cache: dict = {}
        self._shapes: dict[str, GroupShape] = {}

    def shape(self, key: str) -> GroupShape:
        if key not in self._shapes:
            self._shapes[key] = group_shape(self.sc, key)
        return self._shapes[key]

    def __call__(self, op) -> float:
        t = self._cache.get(op)
        if t is None:
            if isinstance(op, Compute):
                t = self.compute_cost.compute_time(op) * self.speed
            elif isinstance(op, HostCopy):
                t = self.compute_cost.host_copy_time(op.bytes)
            else:
                key = op.group or op.dim
                t = self.costs.slowest(op, self.shape(key), self.pace.variants(key))[0]
            self._cache[op] = t
        return t

    def host(self, op: Comm) -> float:
        """Host seconds to issue a collective (`CostModel.host_time`; 0 unless the stack has such a cost)."""
        key = ("host", op)
        h = self._cache.get(key)
        if h is None:
            h = self._cache[key] = self.cost.host_time(op, self.shape(op.group or op.dim))
        return h

    def sm_share(self, op: Comm) -> float:
        """Share of the compute rate the collective takes while it runs (`CostModel.sm_share`)."""
        key = ("sm", op)
        u = self._cache.get(key)
        if u is None:
            u = self._cache[key] = self.cost.sm_share(self.shape(op.group or op.dim), op)
        return u

    def use(self, op: Comm) -> tuple:
        """(link class, share of a rank's link it uses at full speed) of an in-pass collective:
        `collectives.link_busy` over its price, at most 1 (`links.py`), on the links that set its price."""
        key = ("use", op)
        u = self._cache.get(key)
        if u is None:
            dur = self(op)
            g = op.group or op.dim
            model = self.costs.slowest(op, self.shape(g), self.pace.variants(g))[1]
            u = self._cache[key] = link_use(model.topology, op, self.shape(g), dur)
        return u

    def comm_on(self, op: Comm, shape: GroupShape, variants: tuple = NOMINAL) -> float:
        """A collective on an explicit group (PP pairs, the tied-embedding pair) over the links `variants`
        (`plan/paces.pair_variants`)."""
        key = (op, shape.ranks if shape.size <= 2 else shape, variants)
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self.costs.slowest(op, shape, variants)[0]
        return t


class PassScheduler:
    """List-schedules the blocks of one pass on one rank, block by block, so that the engine can gate a
    block on an external event (a ZeRO parameter all-gather) between two calls."""

    def __init__(self, times: OpTimes, t0: float = 0.0, record: bool = True, extra: dict | None = None,
                 comms: list | None = None, host_lead: float = 0.0):
        """`extra`: (block, node) -> seconds added to that collective (link sharing); `comms`: a list to
        which each collective that moves bytes is appended as a CommSlice (offsets from `t0`); `host_lead`:
        seconds the host started issuing the pass before `t0` (`host_lead`; math.inf: the host never gates)."""
        self.times = times
        self.t0 = t0
        self.extra = extra
        self.comms = comms
        self.contention = defaultdict(float)
        self.gates: list = []
        """Per block: the (gate, gate_dim, gate_ready) it was scheduled with (to re-schedule it)."""
        self.free = defaultdict(lambda: t0)
        self.host, self.host_dim = t0 - host_lead, None
        """When the host has issued every op so far (`OpTimes.host`): nothing starts before it is issued."""
        self.host_s = 0.0
        """Host seconds spent issuing the pass's ops so far."""
        self.beside: list = []
        """In-flight collectives (start, end, dim, share of the compute rate they take) (`sm_share.py`)."""
        self.anchor, self.anchor_dim = t0, None
        self.end, self.end_dim = t0, None
        self.compute_s = self.recompute_s = self.flops = 0.0
        self.comm = defaultdict(float)
        self.exposed = defaultdict(float)
        self.count = defaultdict(int)
        self.sync_dims: set = set()
        self.record = record
        self.copy_end: dict = {}
        """(layer key, direction) -> when that host copy ends (`plan/offload.py`)."""
        self.copy_gate = -math.inf
        """No root of a later block starts before this: the host copies the compute waited for so far."""
        self.slices: list[Slice] = []
        self.block_start: list[float] = []
        self.block_grads: list[float] = []

    def block(self, blk: Block, gate: float | None = None, gate_dim: str = "dp", gate_ready: float | None = None) -> float:
        """Schedule one block; returns its first op's start. `gate`: no root may start earlier (the end of
        an external collective whose members were all ready at `gate_ready`: idle before that is peers'
        skew, charged to "sync", not to `gate_dim`)."""
        nodes, times = blk.nodes, self.times
        self.gates.append((gate, gate_dim, gate_ready))
        extra, comms = self.extra, self.comms
        finish = [0.0] * len(nodes)
        dims: list[str | None] = [None] * len(nodes)
        free = self.free
        first = None
        grads = -1.0
        last_compute = None
        bi = len(self.block_start)
        if blk.host_before is not None:  # a backward's reloads, issued once the compute before them is
            self._host_copies(bi, blk.host_before, self.anchor)
        for i, node in enumerate(nodes):
            op = node.op
            if node.deps:
                ready, cause = -1.0, None
                for d in node.deps:
                    if finish[d] > ready:
                        ready, cause = finish[d], dims[d]
            else:
                ready, cause = self.anchor, self.anchor_dim
                if gate is not None and gate > ready:
                    ready, cause = gate, "gate"
                if self.copy_gate > ready:
                    ready, cause = self.copy_gate, "offload"
            dur = times(op)
            if isinstance(op, Compute):
                cf = free["compute"]
                start = ready if ready > cf else cf
                if start > cf:
                    if cause == "gate":
                        skew = min(start, gate_ready or cf) - cf
                        if skew > 0:
                            self.exposed["sync"] += skew
                        self.exposed[gate_dim] += start - max(cf, gate_ready or cf)
                    else:
                        self.exposed[cause or "other"] += start - cf
                if self.host > start:  # not issued yet: the host is behind
                    self.exposed[self.host_dim] += self.host - start
                    start = self.host
                end = start + dur
                if self.beside:  # slowed by the collectives beside it: exposed time of theirs
                    self.beside = [x for x in self.beside if x[1] > start]
                    end, slowed = beside_end(start, dur, self.beside)
                    if slowed:
                        self.exposed[slowed] += end - start - dur
                free["compute"] = end
                if node.tag == "R":
                    self.recompute_s += dur
                    cat = "recompute"
                else:
                    self.compute_s += dur
                    cat = "compute"
                self.flops += op.flops
                stream = "compute"
                last_compute = i
                dur = end - start  # the slice spans the op as slowed
            else:
                stream = op.dim
                sf = free[stream]
                start = ready if ready > sf else sf
                h = times.host(op)
                if h:
                    self.host, self.host_dim = self.host + h, op.dim
                    self.host_s += h
                if self.host > start:
                    start = self.host
                if comms is not None and dur > 0:
                    comms.append(CommSlice(bi, i, stream, op.dim, start - self.t0, dur, times.use(op)))
                if extra:
                    x = extra.get((bi, i), 0.0)
                    if x:
                        dur += x
                        self.contention[op.dim] += x
                end = start + dur
                free[stream] = end
                dims[i] = op.dim
                sm = times.sm_share(op) if dur > 0 else 0.0
                if sm > 0:
                    self.beside.append((start, end, op.dim, sm))
                self.comm[op.dim] += dur
                if dur > 0:
                    self.count[op.dim] += 1
                    self.sync_dims.add(op.dim)
                cat = op.dim
            finish[i] = end
            if end > self.end:
                self.end, self.end_dim = end, dims[i]
            if first is None or start < first:
                first = start
            letter = "R" if node.tag == "R" else blk.letters[i]
            if letter == "W":
                grads = max(grads, end)
            if self.record:
                self.slices.append(Slice(bi, op.name, letter, stream, start, dur, cat, i))
        # the next block's roots consume this block's last compute output and its trailing blocking comms
        if last_compute is not None:
            anchor, adim = finish[last_compute], None
            for j in range(last_compute + 1, len(nodes)):
                op = nodes[j].op
                if isinstance(op, Comm) and op.blocking and finish[j] > anchor:
                    anchor, adim = finish[j], op.dim
            self.anchor, self.anchor_dim = anchor, adim
            if blk.host_after is not None:  # a forward's copies, issued when the layer's last compute ends
                self._host_copies(bi, blk.host_after, finish[last_compute])
        self.block_start.append(first if first is not None else self.anchor)
        self.block_grads.append(grads)
        return self.block_start[-1]

    def _host_copies(self, bi: int, lc: LayerCopies, issued: float) -> None:
        """Queue `lc.issue` on their copy streams from `issued` (`OpTimes` prices them), then make the compute wait for
        the copies `lc.wait` names (`copy_gate`). They run on the copy engines: no compute share is taken."""
        for c in lc.issue:
            start = max(issued, self.free[c.stream])
            dur = self.times(c)
            self.free[c.stream] = self.copy_end[(c.key, c.direction)] = start + dur
            self.comm["offload"] += dur
            self.count["offload"] += 1
            if self.record:
                what = "offload" if c.direction == "d2h" else "reload"
                self.slices.append(Slice(bi, f"{what} {c.key}", "F" if c.direction == "d2h" else "B", "offload",
                                         start, dur, "offload"))
        for key in lc.wait:
            self.copy_gate = max(self.copy_gate, self.copy_end[key])

    def finish(self) -> float:
        """End of the pass (all streams); the compute stream's idle tail is charged to the last comm."""
        tail = self.end - self.free["compute"]
        if tail > 0:
            self.exposed[self.end_dim or "other"] += tail
        return self.end


def schedule_pass(times: OpTimes, blocks: tuple[Block, ...], t0: float = 0.0, *, record: bool = True,
                  extra: dict | None = None, gates: list | None = None, comms: list | None = None,
                  host_lead: float = 0.0) -> PassScheduler:
    """List-schedule a whole pass from `t0`; `gates`: per block the (gate, gate_dim, gate_ready) of
    `PassScheduler.block` (a gated pass re-scheduled with other collective durations); `host_lead`: as
    `PassScheduler`'s."""
    s = PassScheduler(times, t0, record=record, extra=extra, comms=comms, host_lead=host_lead)
    for k, b in enumerate(blocks):
        if gates:
            s.block(b, *gates[k])
        else:
            s.block(b)
    s.finish()
    return s


def shared_extra(comms: list, only_intra: bool = True) -> dict:
    """(block, node) -> seconds the collectives of one rank take beyond their prices when those that
    overlap in time share the rank's links (`links.fluid_ends`), across streams. `only_intra`: only
    those whose links are all the GPU's intra-node port (the rest is the engine's)."""
    items = [c for c in comms if c.use and not (only_intra and c.net)]
    if len(items) < 2 or len({c.stream for c in items}) < 2:
        return {}
    items.sort(key=lambda c: c.start)
    reach: dict = {}
    for c in items:  # any two of different streams overlapping at all?
        if any(end > c.start for st, end in reach.items() if st != c.stream):
            break
        reach[c.stream] = max(reach.get(c.stream, 0.0), c.start + c.dur)
    else:
        return {}
    ends = fluid_ends([(c.start, c.dur, both_ways(None, c.use)) for c in items])  # one rank's links
    return {(c.block, c.node): e - c.start - c.dur for c, e in zip(items, ends) if e - c.start - c.dur > 1e-15}


def steady_host_lead(times: OpTimes, blocks: tuple[Block, ...], extra: dict | None = None) -> float:
    """How far ahead of the GPU the host is when a pass starts, in a stream of passes it issues back to back.

    The host issues a pass's ops in order (`OpTimes.host`: a stack's host cost per collective), and nothing
    runs before it is issued. Scheduled from a host that starts with the GPU, a host-bound pass ends with the
    GPU work issued after its last collective (nanotron's forward: the LM head and the cross-entropy, ~5.8 ms
    after the host is done on 1B tp 2), which the scheduler adds to the host time. But the host does not wait
    for the GPU between micro-batches (nanotron's pipeline engines detach the loss and never read it back
    inside a step: `OneForwardOneBackwardPipelineEngine.train_batch_iter`, parallel/pipeline_parallel/engine.py
    at branch nouamane/bench2), so it issues the next pass while the GPU runs that tail: in a stream of passes
    each takes max(its GPU time, its host time), `CostModel.host_time`'s rule. The schedule is max-plus linear
    in the host's start, end = max(A, B - lead) with A the pass on a host that never gates and B on one that
    starts with the GPU, so the lead B - max(A, H) (H: the pass's host seconds) makes the pass end at
    max(A, H). 0 without host cost or where the GPU is slower anyway. Not modelled: host syncs inside a step
    (nanotron's pipeline receives read their metadata with .tolist(), p2p.py), where the host starts level
    with the GPU again (the engine's gated passes are scheduled that way: lead 0)."""
    if not any(times.host(n.op) for b in blocks for n in b.nodes if isinstance(n.op, Comm)):
        return 0.0  # no host cost: the host never gates (every stack but those with cluster.efficiency.tp_host_s)
    hosted = schedule_pass(times, blocks, record=False, extra=extra)
    free = schedule_pass(times, blocks, record=False, extra=extra, host_lead=math.inf)
    return max(0.0, hosted.end - max(free.end, hosted.host_s))


def build_template(times: OpTimes, chunk: int, kind: str, blocks: tuple[Block, ...], share: bool = False,
                   only_intra: bool = True) -> PassTemplate:
    """List-schedule a whole pass from an idle rank at t = 0; with `share`, collectives of different
    streams that overlap on the GPU's intra-node links share them (module docstring); `only_intra=False`:
    on every link they use (the analytic estimate, which has no link model to leave the others to)."""
    comms: list = []
    lead = steady_host_lead(times, blocks)
    s = schedule_pass(times, blocks, comms=comms if share else None, host_lead=lead)
    extra: dict = {}
    if share:
        for _ in range(SHARE_ITERATIONS):
            new = shared_extra(comms, only_intra)
            if new.keys() == extra.keys() and all(abs(new[k] - extra[k]) <= 1e-9 * new[k] + 1e-15 for k in new):
                break
            extra, comms = new, []
            lead = steady_host_lead(times, blocks, extra)
            s = schedule_pass(times, blocks, extra=extra, comms=comms, host_lead=lead)
    return PassTemplate(chunk=chunk, kind=kind, blocks=blocks, duration=s.end, compute_s=s.compute_s,
                        recompute_s=s.recompute_s, flops=s.flops, comm_s=dict(s.comm), exposed_s=dict(s.exposed),
                        comm_count=dict(s.count), slices=tuple(s.slices), block_start=tuple(s.block_start),
                        block_grads=tuple(s.block_grads), sync_dims=frozenset(s.sync_dims), comms=tuple(comms),
                        net=tuple(c for c in comms if c.net), local=tuple(c for c in comms if c.use and not c.net),
                        extra=extra, contention_s=dict(s.contention), host_lead=lead)

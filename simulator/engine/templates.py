"""Pass templates: one pass (F, B, W or a fused B+W of one chunk for one micro-batch) list-scheduled
once over its op graph, so the engine can run it as a single timed segment.

Every micro-batch of a chunk runs the same ops (the op dataclasses are frozen and identical), so the
relative timeline of a pass is computed once here and replayed m times by the engine: this is the
coarsening that keeps the SimPy event count at "one event per pass plus one per cross-rank
interaction" instead of one per op. The op-level timeline survives in the template's `slices`, which
the trace expands back into one slice per op.

Scheduling rule (the same list scheduling as `analytic.pass_time`, extended across layers): nodes run
in list order; a node starts at max(its deps' ends, its stream's free time); compute ops share the
rank's compute stream, a `Comm` uses its dimension's stream (tp, cp, ep). A pass is a sequence of
blocks (embedding, one per layer, LM head); a block's root nodes wait for the previous block's last
compute op and for the blocking comms issued after it (the data they consume). A pass ends when its
last op on any stream ends, so passes never overlap on a rank ("sealed" passes).

Exposed communication (MODELING.md 5.5 spirit, measured instead of by ratio): when the compute stream
sits idle before a compute op, the gap is charged to the dimension of the dependency that finished
last (a comm, the previous block's trailing blocking comm, or an external gate such as a ZeRO
parameter all-gather); the idle tail after the last compute op goes to the comm that ends last.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..costs import CostModel
from ..layout import GroupShape, group_shape
from ..ops import Comm, Compute, Node
from ..scenario import Scenario

COMM_DIMS = ("tp", "cp", "ep", "dp", "pp")
"""Communication dimensions, in the contract's order of the report."""


@dataclass(frozen=True, slots=True)
class Block:
    """A run of nodes that belongs to one layer (or to the embedding or the LM head) within a pass."""
    key: str
    """Label in traces: "L12", "emb", "head"."""
    nodes: tuple[Node, ...]
    letters: tuple[str, ...]
    """Per node: "F", "B" or "W" (which of the layer's lists it came from); "R" for recomputation."""
    params_dense: float = 0.0
    """Parameters of this block on the rank, replicated over dp_cp (ZeRO-3 gathers, DP gradient buckets)."""
    params_expert: float = 0.0
    """Routed-expert parameters, replicated over the expert-DP group."""

    @property
    def makes_grads(self) -> bool:
        return "W" in self.letters


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


class OpTimes:
    """Seconds per op, cached per distinct op (the op dataclasses are frozen and hashable).

    `speed` multiplies compute times (a slow GPU in full mode: 1.0 = nominal); communication is priced on
    the group shapes of `layout.group_shape`, computed once per dimension."""

    def __init__(self, sc: Scenario, cost: CostModel, speed: float = 1.0):
        self.sc, self.cost, self.speed = sc, cost, speed
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
                t = self.cost.compute_time(op) * self.speed
            else:
                t = self.cost.comm_time(op, self.shape(op.group or op.dim))
            self._cache[op] = t
        return t

    def comm_on(self, op: Comm, shape: GroupShape) -> float:
        """A collective on an explicit group (PP pairs, the tied-embedding pair)."""
        key = (op, shape.ranks if shape.size <= 2 else shape)
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self.cost.comm_time(op, shape)
        return t


class PassScheduler:
    """List-schedules the blocks of one pass on one rank, block by block, so that the engine can gate a
    block on an external event (a ZeRO parameter all-gather) between two calls."""

    def __init__(self, times: OpTimes, t0: float = 0.0, record: bool = True):
        self.times = times
        self.t0 = t0
        self.free = defaultdict(lambda: t0)
        self.anchor, self.anchor_dim = t0, None
        self.end, self.end_dim = t0, None
        self.compute_s = self.recompute_s = self.flops = 0.0
        self.comm = defaultdict(float)
        self.exposed = defaultdict(float)
        self.count = defaultdict(int)
        self.sync_dims: set = set()
        self.record = record
        self.slices: list[Slice] = []
        self.block_start: list[float] = []
        self.block_grads: list[float] = []

    def block(self, blk: Block, gate: float | None = None, gate_dim: str = "dp", gate_ready: float | None = None) -> float:
        """Schedule one block; returns its first op's start. `gate`: no root may start earlier (the end of
        an external collective whose members were all ready at `gate_ready`: idle before that is peers'
        skew, charged to "sync", not to `gate_dim`)."""
        nodes, times = blk.nodes, self.times
        finish = [0.0] * len(nodes)
        dims: list[str | None] = [None] * len(nodes)
        free = self.free
        first = None
        grads = -1.0
        last_compute = None
        bi = len(self.block_start)
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
                end = start + dur
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
            else:
                stream = op.dim
                sf = free[stream]
                start = ready if ready > sf else sf
                end = start + dur
                free[stream] = end
                dims[i] = op.dim
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
                self.slices.append(Slice(bi, op.name, letter, stream, start, dur, cat))
        # the next block's roots consume this block's last compute output and its trailing blocking comms
        if last_compute is not None:
            anchor, adim = finish[last_compute], None
            for j in range(last_compute + 1, len(nodes)):
                op = nodes[j].op
                if isinstance(op, Comm) and op.blocking and finish[j] > anchor:
                    anchor, adim = finish[j], op.dim
            self.anchor, self.anchor_dim = anchor, adim
        self.block_start.append(first if first is not None else self.anchor)
        self.block_grads.append(grads)
        return self.block_start[-1]

    def finish(self) -> float:
        """End of the pass (all streams); the compute stream's idle tail is charged to the last comm."""
        tail = self.end - self.free["compute"]
        if tail > 0:
            self.exposed[self.end_dim or "other"] += tail
        return self.end


def build_template(times: OpTimes, chunk: int, kind: str, blocks: tuple[Block, ...]) -> PassTemplate:
    """List-schedule a whole pass from an idle rank at t = 0."""
    s = PassScheduler(times, 0.0, record=True)
    for b in blocks:
        s.block(b)
    duration = s.finish()
    return PassTemplate(chunk=chunk, kind=kind, blocks=blocks, duration=duration, compute_s=s.compute_s,
                        recompute_s=s.recompute_s, flops=s.flops, comm_s=dict(s.comm), exposed_s=dict(s.exposed),
                        comm_count=dict(s.count), slices=tuple(s.slices), block_start=tuple(s.block_start),
                        block_grads=tuple(s.block_grads), sync_dims=frozenset(s.sync_dims))


def concat(parts: list[tuple[tuple[Node, ...], str]]) -> tuple[tuple[Node, ...], tuple[str, ...]]:
    """Join node lists (each with its letter) into one list with re-based deps; the roots of each later
    list wait for the previous list's last compute node (ops.py's `_Seq.extend` rule)."""
    nodes: list[Node] = []
    letters: list[str] = []
    last_compute = None
    for lst, letter in parts:
        off = len(nodes)
        for n in lst:
            deps = tuple(d + off for d in n.deps)
            if not n.deps and last_compute is not None:
                deps = (last_compute,)
            nodes.append(Node(n.op, deps, n.tag))
            letters.append(letter)
        for j in range(len(nodes) - 1, off - 1, -1):
            if isinstance(nodes[j].op, Compute):
                last_compute = j
                break
    return tuple(nodes), tuple(letters)

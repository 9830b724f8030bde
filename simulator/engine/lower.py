"""Lowering: scenario + pipeline schedule -> one program per pipeline stage.

A stage's program is its schedule's actions in execution order (`schedules.pipeline_schedule`), each
turned into a `Step`: which pass template it runs (the op lists of `ops.layer_passes` for the chunk's
layers, plus `embedding_forward/backward` on chunk 0 and `head_forward/backward` on the last chunk),
what it receives from and sends to other stages (`ops.pp_activation_bytes` each way, NAR21 §2.2), and
which data-parallel traffic it releases. The per-step work after the last micro-batch (gradient
buckets when not overlapped, the tied-embedding all-reduce, SP's norm-gradient all-reduce over TP, the
optimizer `ops.optimizer_op`) is in `StageProgram` too. Nothing here is timed: durations come from the
cost model in `templates.py`.

DP / ZeRO traffic (MODELING.md 4.1; ZeRO §7.2; MEG-DO; MEG-DDP for buckets):
  ZeRO-0  all-reduce of gradient buckets (`ops.dp_buckets`) on the last micro-batch's backward;
  ZeRO-1  reduce-scatter of the buckets there, all-gather of the updated parameters (in buckets, or
          one collective after the optimizer with `parallel.zero_gather: whole`);
  ZeRO-2  as ZeRO-1 but the reduce-scatter runs on every micro-batch's backward;
  ZeRO-3  per block (layer, embedding, head): all-gather of its parameters before its forward and again
          before its backward, reduce-scatter of its gradients on every micro-batch.
Dense parameters sync over `dp_cp`, routed experts over `edp` (`ops.rank_params` split).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Callable

from ..layout import chunk_layers, chunk_owner, last_chunk, rank_chunks
from ..ops import (Comm, Compute, bucket_release_blocks, dp_buckets, embedding_backward, embedding_forward, embedding_rank_params, head_backward,
                   head_forward, head_rank_tensors, layer_passes, layer_rank_tensors, optimizer_op, param_bytes,
                   param_gather_buckets, pp_activation_bytes, shard, sp_norm_grad_allreduce, tied_embedding_allreduce)
from ..scenario import Scenario
from ..schedules import Action, chunk_rank, pipeline_schedule, schedule_spec
from .templates import Block, concat

PASS_KINDS = ("F", "B", "W", "BW")


@dataclass(frozen=True, slots=True)
class Step:
    """One action of a stage's schedule, as the engine runs it."""
    kind: str
    """F | B | W | BW (a B immediately followed by its W, run as one pass)."""
    chunk: int
    mb: int
    recv_from: int = -1
    """Stage whose output this pass consumes (F: activations of chunk-1; B: gradients of chunk+1); -1 local."""
    recv_key: tuple = ()
    """Message key ("F"|"B", chunk, mb) of that output."""
    send_to: int = -1
    """Stage that consumes this pass's output; -1 if local or none."""
    grad_sync: bool = False
    """Issue this chunk's DP gradient collectives during this pass (as the blocks produce them)."""
    param_gated: bool = False
    """ZeRO-1/2 with overlap: the first forward of the chunk waits for its parameter all-gather buckets."""
    alloc: float = 0.0
    """Activation bytes allocated at the start (F) ..."""
    free: float = 0.0
    """... and released at the end (B or BW: `memory.py` frees a micro-batch's activations when its B ends)."""


@dataclass(frozen=True, slots=True)
class BucketComm:
    """A DP/ZeRO collective on a group and the block of the pass that releases (or needs) it."""
    block: int
    comm: Comm
    label: str


@dataclass(frozen=True, kw_only=True)
class ChunkDP:
    """The DP/ZeRO traffic of one chunk on its stage."""
    grads: tuple[BucketComm, ...] = ()
    """Gradient buckets in order of readiness; `block` indexes the W/BW pass's blocks."""
    params: tuple[BucketComm, ...] = ()
    """ZeRO-1/2 parameter all-gather buckets in forward order; `block` = first F block needing it."""
    param_gate: tuple[int, ...] = ()
    """Per F block: index in `params` of the last bucket it must wait for (-1: none)."""
    z3_gather: dict = field(default_factory=dict)
    """ZeRO-3: pass kind -> per block, the parameter all-gather(s) it waits for (blocks that run F or B)."""
    z3_scatter: dict = field(default_factory=dict)
    """ZeRO-3: pass kind -> per block, the gradient reduce-scatter(s) it releases (blocks that run W)."""


@dataclass(frozen=True, kw_only=True)
class StageProgram:
    stage: int
    steps: tuple[Step, ...]
    chunks: tuple[int, ...]
    """Global chunk indices on this stage, local order."""
    dp: dict
    """chunk -> ChunkDP."""
    optimizer: Compute
    tied_partner: int = -1
    """Stage holding the other copy of tied embeddings (pp > 1); -1 if none."""
    tied_allreduce: Comm | None = None
    sp_norm_allreduce: Comm | None = None
    """SP: the coalesced all-reduce of the norm-weight gradients over TP before the optimizer."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    sc: Scenario
    stages: tuple[StageProgram, ...]
    blocks: dict
    """(chunk, kind) -> tuple[Block, ...] for kind in F, B, W, BW."""
    n_chunks: int
    zero: int
    overlap_dp: bool
    gathers_gate_forwards: bool
    """ZeRO-1/2's parameter all-gather buckets start with the step and gate the first forwards (overlap_dp
    with `zero_gather: bucketed`); else they run after the optimizer, exposed."""
    pp_bytes: float
    """Bytes of one PP send (activations forward, their gradient backward): `ops.pp_activation_bytes`."""


# ----------------------------------------------------------------------------------- parameters

# ----------------------------------------------------------------------------------- blocks

def chunk_blocks(sc: Scenario, chunk: int, stage_has_embedding: bool, cache: dict) -> dict:
    """kind -> blocks of one chunk's passes. F: [embedding] + layers + [head];
    B, W, BW: [head] + layers in reverse + [embedding] (the embedding's backward is a weight gradient)."""
    z = cache.setdefault("shard", shard(sc))
    layers = chunk_layers_of(sc, chunk)
    first, last = chunk == 0, chunk == last_chunk(sc)

    def lp(layer):
        key = ("lp", sc.model.is_moe_layer(layer))
        if key not in cache:
            cache[key] = layer_passes(sc, layer, z)
        return cache[key]

    def block(key, parts, dense=(), expert=()):
        nodes, letters = concat(parts)
        return Block(key=key, nodes=nodes, letters=letters, tensors_dense=dense, tensors_expert=expert)

    out = {k: [] for k in PASS_KINDS}
    emb_p = (embedding_rank_params(sc),)
    head_p = head_rank_tensors(sc, stage_has_embedding)
    if first:
        out["F"].append(block("emb", [(embedding_forward(sc, z), "F")], emb_p))
    for layer in layers:
        d, e = layer_rank_tensors(sc, layer)
        out["F"].append(block(f"L{layer}", [(lp(layer).F, "F")], d, e))
    if last:
        hb, hw = head_backward(sc, z)
        out["F"].append(block("head", [(head_forward(sc, z), "F")], head_p))
        out["B"].append(block("head", [(hb, "B")], head_p))
        out["W"].append(block("head", [(hw, "W")], head_p))
        out["BW"].append(block("head", [(hb, "B"), (hw, "W")], head_p))
    for layer in reversed(layers):
        d, e = layer_rank_tensors(sc, layer)
        p = lp(layer)
        out["B"].append(block(f"L{layer}", [(p.B, "B")], d, e))
        out["W"].append(block(f"L{layer}", [(p.W, "W")], d, e))
        out["BW"].append(block(f"L{layer}", [(p.B, "B"), (p.W, "W")], d, e))
    if first:
        eb = embedding_backward(sc, z)
        out["W"].append(block("emb", [(eb, "W")], emb_p))
        out["BW"].append(block("emb", [(eb, "W")], emb_p))
    return {k: tuple(v) for k, v in out.items()}


def chunk_layers_of(sc: Scenario, chunk: int) -> list[int]:
    sizes = chunk_layers(sc)
    start = sum(sizes[:chunk])
    return list(range(start, start + sizes[chunk]))


# ----------------------------------------------------------------------------------- DP / ZeRO

def _split_buckets(buckets: list[float]) -> list[tuple[float, float, float]]:
    """Consecutive buckets (`ops.dp_buckets`, `ops.param_gather_buckets`) placed end to end:
    [(bytes, start byte, end byte)]."""
    out, pos = [], 0.0
    for b in buckets:
        out.append((b, pos, pos + b))
        pos += b
    return out


def _grad_buckets(sc: Scenario, blocks: tuple[Block, ...], zero: int, groups: dict) -> tuple[BucketComm, ...]:
    """Gradient buckets of a W/BW pass: bucket j is released by the block whose gradients complete byte
    (j+1)*size in backward order (MEG-DDP: buckets fill in reverse layer order)."""
    coll = "all_reduce" if zero == 0 else "reduce_scatter"
    gb = sc.training.grad_bytes
    found = []
    for g, attr in (("dp_cp", "tensors_dense"), ("edp", "tensors_expert")):
        if groups[g] <= 1:
            continue
        sizes = [sum(getattr(b, attr)) * gb if b.makes_grads else 0.0 for b in blocks]
        tensors = [t for b in reversed(blocks) if b.makes_grads for t in getattr(b, attr)]  # definition order
        buckets = dp_buckets(sc, tensors, gb)
        for j, (nbytes, k) in enumerate(zip(buckets, bucket_release_blocks(buckets, sizes))):
            found.append((k, 0 if g == "dp_cp" else 1, j, Comm(f"grad_{coll}", "dp", coll, nbytes, blocking=False, group=g)))
    found.sort(key=lambda x: (x[0], x[1], x[2]))
    return tuple(BucketComm(k, c, f"{c.group} grad {c.collective} b{j}") for k, _, j, c in found)


def _param_buckets(sc: Scenario, blocks: tuple[Block, ...], groups: dict) -> tuple[tuple[BucketComm, ...], tuple[int, ...]]:
    """ZeRO-1/2 parameter all-gather buckets in forward order, and per F block the last bucket (index in
    the merged list) it waits for: every bucket that starts before the block's last parameter byte."""
    pb = param_bytes(sc)
    found = []
    ends_per_group = {}
    for g, attr in (("dp_cp", "tensors_dense"), ("edp", "tensors_expert")):
        if groups[g] <= 1:
            continue
        sizes = [sum(getattr(b, attr)) * pb for b in blocks]
        cum, acc = [], 0.0
        for s in sizes:
            acc += s
            cum.append(acc)
        ends_per_group[g] = (sizes, cum)
        tensors = [t for b in blocks for t in getattr(b, attr)]
        for j, (nbytes, start, _) in enumerate(_split_buckets(param_gather_buckets(sc, tensors))):
            k = min(bisect_right(cum, start * (1 + 1e-12) + 1e-9), len(blocks) - 1)
            found.append((k, 0 if g == "dp_cp" else 1, j, start, Comm("param_all_gather", "dp", "all_gather", nbytes,
                                                                     blocking=False, group=g)))
    found.sort(key=lambda x: (x[0], x[1], x[2]))
    buckets = tuple(BucketComm(k, c, f"{c.group} param all_gather b{j}") for k, _, j, _, c in found)
    gate = [-1] * len(blocks)
    for idx, (_, gi, _, start, _) in enumerate(found):
        sizes, cum = ends_per_group[("dp_cp", "edp")[gi]]
        for k in range(len(blocks)):
            if sizes[k] > 0 and start < cum[k] * (1 - 1e-12):
                gate[k] = idx  # found is sorted, so the last match is the latest bucket
    return buckets, tuple(gate)


def _zero3(sc: Scenario, blocks: tuple[Block, ...], coll: str, groups: dict) -> tuple[tuple[Comm, ...], ...]:
    """Per block: its ZeRO-3 parameter all-gather(s) (coll all_gather, param dtype) or gradient
    reduce-scatter(s) (grad dtype), dense over dp_cp and experts over edp."""
    elt = param_bytes(sc) if coll == "all_gather" else sc.training.grad_bytes
    name = "zero3_param_all_gather" if coll == "all_gather" else "zero3_grad_reduce_scatter"
    out = []
    for b in blocks:
        cs = []
        for g, n in (("dp_cp", b.params_dense), ("edp", b.params_expert)):
            uses = ("F" in b.letters or "B" in b.letters) if coll == "all_gather" else b.makes_grads
            if groups[g] > 1 and n > 0 and uses:
                cs.append(Comm(name, "dp", coll, n * elt, blocking=False, group=g))
        out.append(tuple(cs))
    return tuple(out)


# ----------------------------------------------------------------------------------- the plan

def lower(sc: Scenario, group_sizes: dict, act_bytes: Callable[[int, int], float]) -> Plan:
    """Build every stage's program. `group_sizes`: size of the dp_cp and edp groups;
    `act_bytes(stage, chunk)`: activation bytes one micro-batch holds in that chunk from F to B/W."""
    p = sc.parallel
    pp, vpp, m = p.pp, p.vpp, sc.micro_batches
    n_chunks = pp * vpp
    sched = pipeline_schedule(p.pp_schedule, pp, vpp, m)
    for c in range(n_chunks):
        if chunk_rank(p.pp_schedule, pp, vpp, c) != chunk_owner(sc, c)[0]:
            raise ValueError(f"schedule places chunk {c} on rank {chunk_rank(p.pp_schedule, pp, vpp, c)}, "
                             f"layout on {chunk_owner(sc, c)[0]}")
    owner = [chunk_owner(sc, c)[0] for c in range(n_chunks)]
    cache: dict = {}
    blocks: dict = {}
    stages = []
    zero, overlap = p.zero, sc.overlap_dp
    gated = overlap and p.zero_gather == "bucketed"
    emb_stage, head_stage = owner[0], owner[-1]
    for r in range(pp):
        chunks = tuple(c for c, _ in rank_chunks(sc, r))
        has_emb = 0 in chunks
        for c in chunks:
            for kind, bl in chunk_blocks(sc, c, has_emb, cache).items():
                blocks[(c, kind)] = bl
        steps = _steps(sched[r], r, owner, n_chunks, zero, overlap, act_bytes, fuse=not schedule_spec(p.pp_schedule).splits_backward,
                       gated=gated)
        dp = {}
        for c in chunks:
            grads = _grad_buckets(sc, blocks[(c, "BW")], zero, group_sizes) if zero < 3 else ()
            params, gate = _param_buckets(sc, blocks[(c, "F")], group_sizes) if zero in (1, 2) else ((), ())
            z3g = {k: _zero3(sc, blocks[(c, k)], "all_gather", group_sizes) for k in PASS_KINDS} if zero == 3 else {}
            z3s = {k: _zero3(sc, blocks[(c, k)], "reduce_scatter", group_sizes) for k in PASS_KINDS} if zero == 3 else {}
            dp[c] = ChunkDP(grads=grads, params=params, param_gate=gate, z3_gather=z3g, z3_scatter=z3s)
        dense = sum(b.params_dense for c in chunks for b in blocks[(c, "F")])
        expert = sum(b.params_expert for c in chunks for b in blocks[(c, "F")])
        shard_params = dense / (group_sizes["dp_cp"] if zero >= 1 else 1) + expert / (group_sizes["edp"] if zero >= 1 else 1)
        tied_partner, tied = -1, None
        if r in (emb_stage, head_stage):
            tied = tied_embedding_allreduce(sc)
            tied_partner = (head_stage if r == emb_stage else emb_stage) if tied is not None else -1
        stages.append(StageProgram(stage=r, steps=steps, chunks=chunks, dp=dp, optimizer=optimizer_op(sc, shard_params),
                                   tied_partner=tied_partner, tied_allreduce=tied,
                                   sp_norm_allreduce=sp_norm_grad_allreduce(sc, r)))
    return Plan(sc=sc, stages=tuple(stages), blocks=blocks, n_chunks=n_chunks, zero=zero, overlap_dp=overlap,
                gathers_gate_forwards=gated, pp_bytes=pp_activation_bytes(sc))


def _steps(actions: list[Action], r: int, owner: list[int], n_chunks: int, zero: int, overlap: bool,
           act_bytes: Callable[[int, int], float], fuse: bool, gated: bool) -> tuple[Step, ...]:
    """Fuse each B immediately followed by its W into one BW pass (`fuse`: schedules that do not split
    the backward), attach p2p partners, DP releases and memory (`gated`: each chunk's first forward waits
    for its ZeRO-1/2 parameter buckets), and check that every dependency on this stage comes earlier in
    the list."""
    done: set = set()
    fused: list[tuple[str, int, int]] = []
    i = 0
    while i < len(actions):
        a = actions[i]
        nxt = actions[i + 1] if i + 1 < len(actions) else None
        if fuse and a.kind == "B" and nxt is not None and nxt.kind == "W" and (nxt.chunk, nxt.mb) == (a.chunk, a.mb):
            fused.append(("BW", a.chunk, a.mb))
            i += 2
        else:
            fused.append((a.kind, a.chunk, a.mb))
            i += 1
    last_bwd = {}
    first_f = {}
    for idx, (k, c, mb) in enumerate(fused):
        if k in ("W", "BW"):
            last_bwd[c] = idx
        if k == "F" and c not in first_f:
            first_f[c] = idx
    out = []
    for idx, (k, c, mb) in enumerate(fused):
        need = []
        recv_from, recv_key, send_to = -1, (), -1
        if k == "F":
            if c > 0:
                (need.append(("F", c - 1, mb)) if owner[c - 1] == r else None)
                if owner[c - 1] != r:
                    recv_from, recv_key = owner[c - 1], ("F", c - 1, mb)
            if c < n_chunks - 1 and owner[c + 1] != r:
                send_to = owner[c + 1]
        elif k in ("B", "BW"):
            need.append(("F", c, mb))
            if c < n_chunks - 1:
                if owner[c + 1] == r:
                    need.append(("B", c + 1, mb))
                else:
                    recv_from, recv_key = owner[c + 1], ("B", c + 1, mb)
            if c > 0 and owner[c - 1] != r:
                send_to = owner[c - 1]
        else:
            need.append(("B", c, mb))
        for d in need:
            if d not in done:
                raise ValueError(f"stage {r}: {k}{(c, mb)} runs before its local dependency {d}")
        if k == "BW":
            done.update({("B", c, mb), ("W", c, mb)})
        else:
            done.add((k, c, mb))
        ends = k in ("W", "BW")
        frees = k in ("B", "BW")  # memory.py: activations are released when the micro-batch's B ends
        sync = ends and ((zero in (0, 1) and overlap and idx == last_bwd[c]) or zero == 2 or zero == 3)
        out.append(Step(kind=k, chunk=c, mb=mb, recv_from=recv_from, recv_key=recv_key, send_to=send_to, grad_sync=sync,
                        param_gated=(k == "F" and zero in (1, 2) and gated and first_f[c] == idx),
                        alloc=act_bytes(r, c) if k == "F" else 0.0, free=act_bytes(r, c) if frees else 0.0))
    return tuple(out)

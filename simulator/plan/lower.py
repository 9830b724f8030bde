"""Lowering: scenario + pipeline schedule -> one program per pipeline stage.

A stage's program is its schedule's actions in execution order (`schedules.pipeline_schedule`), each
turned into a `Step`: which pass template it runs (the op lists of `layer_ops.layer_passes` for the chunk's
layers, plus `embedding_forward/backward` on chunk 0 and `head_forward/backward` on the last chunk),
what it receives from and sends to other stages (`step_ops.pp_activation_bytes` each way, NAR21 §2.2), and
which data-parallel traffic it releases. The per-step work after the last micro-batch (gradient
buckets when not overlapped, the tied-embedding all-reduce, SP's norm-gradient all-reduce over TP, the
optimizer `step_ops.optimizer_op`, the parameter all-gathers that follow it) is the stage's `tail`, in order.
Nothing here is timed: both evaluators read this plan (`evaluate/analytic.py` lists it, `evaluate/engine`
replays it on a timeline) and price its ops through the cost model (`evaluate/passes.py`).

DP / ZeRO traffic (docs/modeling.md §4.1; ZeRO §7.2; MEG-DO; MEG-DDP for buckets), as the sharding policy
(`plan/policy.py`) says:
  ZeRO-0  all-reduce of gradient buckets (`step_ops.dp_buckets`) on the last micro-batch's backward;
  ZeRO-1  reduce-scatter of the buckets there, all-gather of the updated parameters (in buckets, or
          one collective after the optimizer with `parallel.zero_gather: whole`);
  ZeRO-2  as ZeRO-1 but the reduce-scatter runs on every micro-batch's backward;
  ZeRO-3  per block (layer, embedding, head): all-gather of its parameters before its forward and again
          before its backward, reduce-scatter of its gradients on every micro-batch.
Dense parameters sync over `dp_cp`, routed experts over `edp` (`sharded_params.rank_params` split).
"""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable

from .layout import chunk_owner, group_shape, is_first_chunk, rank_chunks
from .float8_comm import amax_all_reduces, dense_gather_bytes, fp8_param_gathers
from .step_ops import (bucket_release_blocks, dp_buckets, optimizer_op, param_gather_buckets, pp_activation_bytes,
                        sp_norm_grad_allreduce, tied_embedding_allreduce)
from .sharded_params import param_bytes
from .opgraph import Comm, Compute
from ..pipeline_spec import chunks_per_copy
from ..scenario import Scenario
from .schedules import Action, chunk_rank, pipeline_schedule, schedule_spec
from .blocks import PASS_KINDS, Block, chunk_blocks
from .overlap import overlapped_block
from .ep_overlap import ep_overlap_schedule
from .policy import DP_GROUPS, ShardingPolicy, scenario_policy


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
    """This pass releases gradient traffic (`ChunkDP.releases[kind]`): with `Plan.overlap_dp` as its blocks
    produce the gradients, else when the pass ends."""
    await_sync: bool = False
    """The compute stream waits for the released traffic before going on (ZeRO-2/3 without overlap)."""
    param_gated: bool = False
    """ZeRO-1/2 with overlap: the first forward of the chunk waits for its parameter all-gather buckets."""
    gated: bool = False
    """Its blocks wait on DP collectives (ZeRO-3's per-block gathers on F, B and BW; `param_gated`): it is
    scheduled block by block at run time, not replayed from a template."""
    alloc: float = 0.0
    """Activation bytes allocated at the start (F) ..."""
    free: float = 0.0
    """... and released at the end (B or BW: `memory.py` frees a micro-batch's activations when its B ends)."""
    pair: "Step | None" = None
    """An F run together with this backward of another micro-batch as one pass (`Action.overlap`, DualPipe's
    overlapped chunk, `plan/overlap.py`): a BW where the schedule runs the W at once (DualPipe's
    `_forward_backward_chunk` runs a full backward), else a B. Its receive, send and release of
    activations are the pair's; a backward that releases gradient traffic is not paired."""

    @property
    def key(self) -> tuple:
        """The pass it runs in `Plan.blocks`: (chunk, kind), or ("FB", F chunk, B chunk, B's kind) for a pair."""
        return (self.chunk, self.kind) if self.pair is None else ("FB", self.chunk, self.pair.chunk, self.pair.kind)

    @property
    def parts(self) -> tuple["Step", ...]:
        """The step and its pair: each receives and sends its own message."""
        return (self,) if self.pair is None else (self, self.pair)


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
    releases: dict = field(default_factory=dict)
    """pass kind (W, BW) -> (block index, collective, label) of the gradient traffic a pass that syncs
    releases: the chunk's buckets (ZeRO-0/1/2) or each block's ZeRO-3 reduce-scatters."""


@dataclass(frozen=True, slots=True)
class TailOp:
    """One thing a stage does after its last micro-batch, in order."""
    kind: str
    """issue: join `comms` on the dp stream (each (group, collective, label)); await: the compute stream
    waits for the dp stream's last collective; inline: a collective priced in place on the compute stream
    (symmetric in its group, no rendezvous); optimizer: the optimizer step (`op`)."""
    comms: tuple = ()
    op: object = None
    label: str = ""


@dataclass(frozen=True, kw_only=True)
class StageProgram:
    stage: int
    steps: tuple[Step, ...]
    chunks: tuple[int, ...]
    """Global chunk indices on this stage, local order."""
    dp: dict
    """chunk -> ChunkDP."""
    optimizer: Compute
    tail: tuple = ()
    """TailOp list after the last micro-batch (module docstring)."""
    gathers_first: tuple = ()
    """(chunk, (group, collective, label)...) per chunk in first-forward order: ZeRO-1/2's parameter
    all-gathers issued when the step starts, gating the first forwards (overlap_dp with `zero_gather:
    bucketed`; otherwise they are in the tail, after the optimizer)."""
    tied_partner: int = -1
    """Stage holding the other copy of tied embeddings (pp > 1); -1 if none."""
    tied_allreduce: Comm | None = None


@dataclass(frozen=True, kw_only=True)
class Plan:
    sc: Scenario
    stages: tuple[StageProgram, ...]
    blocks: dict
    """(chunk, kind) -> tuple[Block, ...] for kind in F, B, W, BW."""
    n_chunks: int
    policy: ShardingPolicy
    """How DP shards and syncs the parameters (`plan/policy.py`)."""
    overlap_dp: bool
    pp_bytes: float
    """Bytes of one PP send (activations forward, their gradient backward): `step_ops.pp_activation_bytes`."""


# ----------------------------------------------------------------------------------- DP / ZeRO

def _split_buckets(buckets: list[float]) -> list[tuple[float, float, float]]:
    """Consecutive buckets (`step_ops.dp_buckets`, `step_ops.param_gather_buckets`) placed end to end:
    [(bytes, start byte, end byte)]."""
    out, pos = [], 0.0
    for b in buckets:
        out.append((b, pos, pos + b))
        pos += b
    return out


def _grad_buckets(sc: Scenario, blocks: tuple[Block, ...], coll: str, groups: dict) -> tuple[BucketComm, ...]:
    """Gradient buckets of a W/BW pass: bucket j is released by the block whose gradients complete byte
    (j+1)*size in backward order (MEG-DDP: buckets fill in reverse layer order)."""
    gb = sc.training.grad_bytes
    found = []
    for g, attr in zip(DP_GROUPS, ("tensors_dense", "tensors_expert")):
        if groups[g] <= 1:
            continue
        sizes = [sum(getattr(b, attr)) * gb if b.makes_grads else 0.0 for b in blocks]
        tensors = [t for b in reversed(blocks) if b.makes_grads for t in getattr(b, attr)]  # definition order
        buckets = dp_buckets(sc, tensors, gb)
        for j, (nbytes, k) in enumerate(zip(buckets, bucket_release_blocks(buckets, sizes))):
            found.append((k, 0 if g == "dp_cp" else 1, j, Comm(f"grad_{coll}", "dp", coll, nbytes, blocking=False, group=g)))
            if g == "dp_cp" and groups.get("dp_rep", 1) > 1:  # HSDP: the shard's all-reduce across the replicas
                found.append((k, 0, j, hsdp_replica_allreduce(nbytes, groups["dp_cp"])))
    found.sort(key=lambda x: (x[0], x[1], x[2]))
    return tuple(BucketComm(k, c, f"{c.group} grad {c.collective} b{j}") for k, _, j, c in found)


def hsdp_replica_allreduce(shard_group_bytes: float, shard_group: int) -> Comm:
    """HSDP (`parallel.dp_replicate`): after a reduce-scatter over the shard group leaves each rank 1/n of the
    bucket, that 1/n is all-reduced across the replicas (PyTorch FSDP2's HSDP, Megatron's distributed
    optimizer instances)."""
    return Comm("grad_replica_all_reduce", "dp", "all_reduce", shard_group_bytes / max(1, shard_group),
                blocking=False, group="dp_rep")


def _param_buckets(sc: Scenario, blocks: tuple[Block, ...], groups: dict) -> tuple[tuple[BucketComm, ...], tuple[int, ...]]:
    """ZeRO-1/2 parameter all-gather buckets in forward order, and per F block the last bucket (index in
    the merged list) it waits for: every bucket that starts before the block's last parameter byte."""
    pb = param_bytes(sc)
    found = []
    ends_per_group = {}
    for g, attr in zip(DP_GROUPS, ("tensors_dense", "tensors_expert")):
        if groups[g] <= 1:
            continue
        sizes = [sum(getattr(b, attr)) * pb for b in blocks]
        cum, acc = [], 0.0
        for s in sizes:
            acc += s
            cum.append(acc)
        ends_per_group[g] = (sizes, cum)
        tensors = [t for b in blocks for t in getattr(b, attr)]
        # FSDP's FP8 weight gathers under PP (float8_comm): each bucket at the blocks' mean bytes per element
        fp8 = (sum(dense_gather_bytes(sc, b.key, b.tensors_dense) for b in blocks) / max(1e-30, sum(sizes))
               if g == "dp_cp" and fp8_param_gathers(sc) else 1.0)
        for j, (nbytes, start, _) in enumerate(_split_buckets(param_gather_buckets(sc, tensors))):
            nbytes *= fp8
            k = min(bisect_right(cum, start * (1 + 1e-12) + 1e-9), len(blocks) - 1)
            found.append((k, 0 if g == "dp_cp" else 1, j, start, Comm("param_all_gather", "dp", "all_gather", nbytes,
                                                                     blocking=False, group=g)))
    found.sort(key=lambda x: (x[0], x[1], x[2]))
    buckets = tuple(BucketComm(k, c, f"{c.group} param all_gather b{j}") for k, _, j, _, c in found)
    gate = [-1] * len(blocks)
    for idx, (_, gi, _, start, _) in enumerate(found):
        sizes, cum = ends_per_group[DP_GROUPS[gi]]
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
        for g, n in zip(DP_GROUPS, (b.params_dense, b.params_expert)):
            uses = ("F" in b.letters or "B" in b.letters) if coll == "all_gather" else b.makes_grads
            if groups[g] > 1 and n > 0 and uses:
                nbytes = n * elt
                if coll == "all_gather" and g == "dp_cp":  # FP8 weights where FSDP gathers them so (float8_comm)
                    cs.extend(amax_all_reduces(sc, b.key, b.tensors_dense, g))
                    nbytes = dense_gather_bytes(sc, b.key, b.tensors_dense)
                cs.append(Comm(name, "dp", coll, nbytes, blocking=False, group=g))
                if coll == "reduce_scatter" and g == "dp_cp" and groups.get("dp_rep", 1) > 1:
                    cs.append(hsdp_replica_allreduce(n * elt, groups["dp_cp"]))
        out.append(tuple(cs))
    return tuple(out)


# ----------------------------------------------------------------------------------- the plan

def build_plan(sc: Scenario, act_bytes: Callable[[int, int], float] | None = None) -> Plan:
    """The plan of `sc` (`lower` with the scenario's dp_cp and edp group sizes). `act_bytes(stage, chunk)`:
    activation bytes one micro-batch holds in that chunk from F to B/W (the engine's memory timeline);
    without it, 0 (the analytic estimate takes memory from `memory.py`)."""
    sizes = {"dp_cp": group_shape(sc, "dp_cp").size, "edp": group_shape(sc, "edp").size,
             "dp_rep": sc.parallel.dp_replicate}
    return lower(sc, sizes, act_bytes or (lambda r, c: 0.0))


def lower(sc: Scenario, group_sizes: dict, act_bytes: Callable[[int, int], float]) -> Plan:
    """Build every stage's program. `group_sizes`: size of the dp_cp and edp groups;
    `act_bytes(stage, chunk)`: activation bytes one micro-batch holds in that chunk from F to B/W."""
    p = sc.parallel
    pp, vpp, m = p.pp, p.vpp, sc.micro_batches
    n_chunks = pp * vpp
    sched = (ep_overlap_schedule if p.ep_overlap else pipeline_schedule)(p.pp_schedule, pp, vpp, m)
    for c in range(n_chunks):
        if chunk_rank(p.pp_schedule, pp, vpp, c) != chunk_owner(sc, c)[0]:
            raise ValueError(f"schedule places chunk {c} on rank {chunk_rank(p.pp_schedule, pp, vpp, c)}, "
                             f"layout on {chunk_owner(sc, c)[0]}")
    owner = [chunk_owner(sc, c)[0] for c in range(n_chunks)]
    cache: dict = {}
    blocks: dict = {}
    stages = []
    pol, overlap = scenario_policy(sc), sc.overlap_dp
    gated = overlap and p.zero_gather == "bucketed" and pol.gathers_after_step
    emb_stage, head_stage = owner[0], owner[-1]
    for r in range(pp):
        # by stage within its copy: under DualPipe rank r and rank p-1-r hold the same two stages (in swapped local
        # order) and reduce them together, so both issue their per-chunk collectives in the same order
        chunks = tuple(sorted((c for c, _ in rank_chunks(sc, r)), key=lambda c: c % chunks_per_copy(p)))
        has_emb = any(is_first_chunk(sc, c) for c in chunks)
        for c in chunks:
            for kind, bl in chunk_blocks(sc, c, has_emb, cache).items():
                blocks[(c, kind)] = bl
        steps = _steps(sched[r], r, owner, chunks_per_copy(p), pol, overlap, act_bytes,
                       fuse=not schedule_spec(p.pp_schedule).splits_backward,
                       gated=gated)
        for st in steps:
            if st.pair is not None and st.key not in blocks:
                b = st.pair
                blocks[st.key] = (overlapped_block(blocks[(st.chunk, "F")], blocks[(b.chunk, b.kind)],
                                                   f"C{st.chunk}F+C{b.chunk}{b.kind}"),)
        dp = {}
        for c in chunks:
            per_block = pol.gathers_per_block
            grads = () if per_block else _grad_buckets(sc, blocks[(c, "BW")], pol.grad_collective, group_sizes)
            params, gate = _param_buckets(sc, blocks[(c, "F")], group_sizes) if pol.gathers_after_step else ((), ())
            z3g = {k: _zero3(sc, blocks[(c, k)], "all_gather", group_sizes) for k in PASS_KINDS
                   if k == "F" or pol.regather_for_backward} if per_block else {}
            z3s = {k: _zero3(sc, blocks[(c, k)], "reduce_scatter", group_sizes) for k in PASS_KINDS} if per_block else {}
            dp[c] = ChunkDP(grads=grads, params=params, param_gate=gate, z3_gather=z3g, z3_scatter=z3s,
                            releases=_releases(pol, c, blocks, grads, z3s))
        dense = sum(b.params_dense for c in chunks for b in blocks[(c, "F")])
        expert = sum(b.params_expert for c in chunks for b in blocks[(c, "F")])
        shard_params = (dense / pol.state_divisors(group_sizes["dp_cp"])[2]
                        + expert / pol.state_divisors(group_sizes["edp"])[2])
        tied_partner, tied = -1, None
        if r in (emb_stage, head_stage):
            tied = tied_embedding_allreduce(sc)
            tied_partner = (head_stage if r == emb_stage else emb_stage) if tied is not None else -1
        opt, sp_norm = optimizer_op(sc, shard_params), sp_norm_grad_allreduce(sc, r)
        first = []
        for st in steps:
            if st.kind == "F" and st.chunk not in first:
                first.append(st.chunk)
        stages.append(StageProgram(stage=r, steps=steps, chunks=chunks, dp=dp, optimizer=opt,
                                   tail=_tail(pol, overlap, gated, chunks, dp, tied, sp_norm, opt),
                                   gathers_first=tuple((c, _labelled(c, dp[c].params)) for c in first) if gated else (),
                                   tied_partner=tied_partner, tied_allreduce=tied))
    return Plan(sc=sc, stages=tuple(stages), blocks=blocks, n_chunks=n_chunks, policy=pol, overlap_dp=overlap,
                pp_bytes=pp_activation_bytes(sc))


def _labelled(chunk: int, buckets: tuple[BucketComm, ...]) -> tuple:
    return tuple((b.comm.group, b.comm, f"C{chunk} {b.label}") for b in buckets)


def _releases(pol: ShardingPolicy, chunk: int, blocks: dict, grads: tuple[BucketComm, ...], z3s: dict) -> dict:
    """pass kind -> (block index, collective, label) a syncing W/BW pass of `chunk` releases."""
    out = {}
    for kind in ("W", "BW"):
        if pol.gathers_per_block:
            bl = blocks[(chunk, kind)]
            out[kind] = tuple((k, c, f"{bl[k].key} mb{{mb}} {c.name}") for k, cs in enumerate(z3s.get(kind, ()))
                              for c in cs)
        else:
            out[kind] = tuple((b.block, b.comm, f"C{chunk} {b.label}") for b in grads)
    return out


def _tail(pol: ShardingPolicy, overlap: bool, gated: bool, chunks: tuple, dp: dict, tied: Comm | None, sp_norm: Comm | None,
          opt: Compute) -> tuple[TailOp, ...]:
    """After the last micro-batch: ZeRO-0/1's gradient buckets when not overlapped, the tied-embedding
    all-reduce, wait for the dp stream, SP's norm-gradient all-reduce over TP, the optimizer, then
    (ZeRO-1/2 unless the gathers gate the next step's forwards) the parameter all-gathers, exposed."""
    out = []
    if not pol.grad_sync_every_micro_batch and not overlap:
        grads = tuple(x for c in chunks for x in _labelled(c, dp[c].grads))
        if grads:
            out.append(TailOp("issue", comms=grads))
    if tied is not None:
        out.append(TailOp("issue", comms=(("embd", tied, "tied embedding all_reduce"),)))
    out.append(TailOp("await", label="gradient sync"))
    if sp_norm is not None:
        out.append(TailOp("inline", op=sp_norm, label="sp norm grads all_reduce"))
    out.append(TailOp("optimizer", op=opt))
    if pol.gathers_after_step and not gated:
        params = tuple(x for c in chunks for x in _labelled(c, dp[c].params))
        if params:
            out += [TailOp("issue", comms=params), TailOp("await", label="parameter all-gather")]
    return tuple(out)


def _steps(actions: list[Action], r: int, owner: list[int], route: int, pol: ShardingPolicy, overlap: bool,
           act_bytes: Callable[[int, int], float], fuse: bool, gated: bool) -> tuple[Step, ...]:
    """Fuse each B immediately followed by its W into one BW pass (`fuse`: schedules that do not split
    the backward), attach p2p partners (a micro-batch's route is `route` consecutive chunks: every chunk, or one
    model copy's under DualPipe), DP releases and memory (`gated`: each chunk's first forward waits
    for its ZeRO-1/2 parameter buckets), and check that every dependency on this stage comes earlier in
    the list."""
    done: set = set()
    fused: list[tuple[str, int, int]] = []
    paired: set[int] = set()
    """Indices in `fused` of the B's that run with the F before them (`Action.overlap`)."""
    i = 0
    while i < len(actions):
        a = actions[i]
        nxt = actions[i + 1] if i + 1 < len(actions) else None
        pair_bw = a.kind == "B" and len(fused) in paired  # DualPipe's overlapped backward is a full one
        if (fuse or pair_bw) and a.kind == "B" and nxt is not None and nxt.kind == "W" and (nxt.chunk, nxt.mb) == (a.chunk, a.mb):
            fused.append(("BW", a.chunk, a.mb))
            i += 2
        else:
            if a.overlap and nxt is not None and nxt.kind == "B" and not pol.gathers_per_block:
                paired.add(len(fused) + 1)
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
        has_prev, has_next = c % route > 0, (c + 1) % route > 0
        if k == "F":
            if has_prev:
                (need.append(("F", c - 1, mb)) if owner[c - 1] == r else None)
                if owner[c - 1] != r:
                    recv_from, recv_key = owner[c - 1], ("F", c - 1, mb)
            if has_next and owner[c + 1] != r:
                send_to = owner[c + 1]
        elif k in ("B", "BW"):
            need.append(("F", c, mb))
            if has_next:
                if owner[c + 1] == r:
                    need.append(("B", c + 1, mb))
                else:
                    recv_from, recv_key = owner[c + 1], ("B", c + 1, mb)
            if has_prev and owner[c - 1] != r:
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
        sync = ends and (pol.grad_sync_every_micro_batch or (overlap and idx == last_bwd[c]))
        step = Step(kind=k, chunk=c, mb=mb, recv_from=recv_from, recv_key=recv_key, send_to=send_to, grad_sync=sync,
                    await_sync=sync and not overlap,
                    param_gated=(k == "F" and gated and first_f[c] == idx),
                    gated=(pol.gathers_per_block and (k == "F" or (k != "W" and pol.regather_for_backward)))
                    or (k == "F" and gated and first_f[c] == idx),
                    alloc=act_bytes(r, c) if k == "F" else 0.0, free=act_bytes(r, c) if frees else 0.0)
        if idx in paired and not out[-1].gated and not step.grad_sync:
            f = out.pop()
            step = replace(f, pair=step, free=step.free)
        out.append(step)
    return tuple(out)


def step_compute_ops(plan: Plan) -> Counter:
    """Every compute op of one step on one representative rank per stage, with how often it runs
    (recomputation and the optimizer included): what calibration measures and what the report's
    "measured share of compute" weighs."""
    passes = Counter((part.chunk, part.kind) for prog in plan.stages for st in prog.steps for part in st.parts)
    out: Counter = Counter()
    for key, n in passes.items():
        for blk in plan.blocks[key]:
            for node in blk.nodes:
                if isinstance(node.op, Compute):
                    out[node.op] += n
    for prog in plan.stages:
        out[prog.optimizer] += 1
    return out

"""What one rank computes and communicates, op by op: the shared vocabulary of the analytic estimate,
the discrete-event engine and `calibrate --scenario`.

`layer_passes` gives, for one transformer layer and one micro-batch on one rank (after TP/SP/CP/EP
sharding), three op lists: forward F, input-grad backward B (with any recomputation in front) and
weight-grad W, kept apart so zero-bubble schedules can move W. Each entry is a `Node`: an op and the
indices of the nodes in the same list it waits for. Compute ops run on the rank's compute stream in
list order; a `Comm` runs on its dimension's stream. Per-step work (embedding, LM head and loss,
pipeline sends, DP/ZeRO gradient and parameter collectives, the optimizer) is built by the other
functions here.

Where Megatron puts TP/SP collectives: NAR21 §3.2, KOR22 §4.2.2 and MODELING.md 4.2; CP: MODELING.md
4.3 (RFA); EP: 4.5 (MEG-MAP). Memory-bound byte counts: MODELING.md 7.3 (derived).
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, replace
from typing import Sequence, Union

from .params import final_norm_params, layer_params, norm_params
from .scenario import Scenario
from .schedules import schedule_spec

ACT_BYTES = {"fp32": 4, "bf16": 2, "fp8": 2}  # activations stay bf16 under fp8 training (DSV3 §3.3)
GEMM_BYTES = {"fp32": 4, "bf16": 2, "fp8": 1}


@dataclass(frozen=True, slots=True)
class Compute:
    name: str
    """What the op is, in the field's words: qkv, attn, out_proj, fc1, act, fc2, norm1, router, ..."""
    kind: str
    """gemm | attention | elementwise | optimizer"""
    flops: float
    bytes: float
    """HBM bytes read and written."""
    dtype: str
    shape: tuple = ()
    """gemm: (m, n, k); attention: (batch*heads, s_q, s_kv, d_head, causal_fraction, 'fwd'|'bwd');
    elementwise: (elements,)."""
    repeat: int = 1
    """Identical kernels this op stands for (grouped expert GEMMs); flops and bytes are the total."""


@dataclass(frozen=True, slots=True)
class Comm:
    name: str
    dim: str
    """tp | cp | ep | dp | pp (dp also carries ZeRO traffic; the group is dp*cp for dense params)."""
    collective: str
    """all_reduce | all_gather | reduce_scatter | all_to_all | send_recv"""
    bytes: float
    """Buffer size S as nccl-tests defines it: the full (gathered) array for AG/RS, the send buffer for a2a."""
    blocking: bool = True
    """Blocking: the next compute op waits for it. Otherwise only the node(s) listing it as a dep wait."""
    group: str = ""
    """Process group name when it is not `dim` (dp_cp for dense gradients, edp for expert gradients)."""


Op = Union[Compute, Comm]


@dataclass(frozen=True, slots=True)
class Node:
    op: Op
    deps: tuple[int, ...] = ()
    """Indices (in the same list) this node waits for, besides stream order."""
    tag: str = ""
    """R for recomputation ops (HFU, not MFU)."""


@dataclass(frozen=True, slots=True)
class LayerPasses:
    layer: int
    F: tuple[Node, ...]
    B: tuple[Node, ...]
    W: tuple[Node, ...]


class _Seq:
    """Builds a node list with stream semantics: compute waits for the previous compute and for every
    blocking comm issued since; a comm waits for the compute that produced its input."""

    def __init__(self, tag: str = ""):
        self.nodes: list[Node] = []
        self.last_compute: int | None = None
        self.pending: list[int] = []
        self.tag = tag

    def _deps(self, extra=()):
        deps = ([self.last_compute] if self.last_compute is not None else []) + self.pending + list(extra)
        return tuple(sorted(set(deps)))

    def compute(self, op: Compute, extra=()) -> int:
        self.nodes.append(Node(op, self._deps(extra), self.tag))
        self.pending = []
        self.last_compute = len(self.nodes) - 1
        return self.last_compute

    def comm(self, op: Comm, extra=(), after_compute: bool = True) -> int:
        deps = ([self.last_compute] if (after_compute and self.last_compute is not None) else []) + list(extra)
        self.nodes.append(Node(op, tuple(sorted(set(deps))), self.tag))
        i = len(self.nodes) - 1
        if op.blocking:
            self.pending.append(i)
        return i

    def extend(self, other: "_Seq") -> None:
        off = len(self.nodes)
        for n in other.nodes:
            self.nodes.append(Node(n.op, tuple(d + off for d in n.deps), n.tag))
        # the appended sequence's first nodes waited on nothing of ours: chain them
        if other.nodes and off:
            first = self.nodes[off]
            base = ([self.last_compute] if self.last_compute is not None else []) + self.pending
            self.nodes[off] = Node(first.op, tuple(sorted(set(first.deps) | set(base))), first.tag)
        if other.last_compute is not None:
            self.last_compute = other.last_compute + off
        self.pending = [p + off for p in other.pending]


# ----------------------------------------------------------------------------------- sizes

@dataclass(frozen=True, slots=True)
class Shard:
    """Per-rank sizes of one micro-batch (MODELING.md section 0 notation)."""
    b: int
    s: int
    """Local sequence length s/c."""
    T: int
    """Tokens on the rank, b*s/c (before SP)."""
    T_sp: int
    """Tokens in the SP regions (T/t with SP, else T)."""
    t: int
    h: int
    q: int
    """Query width per rank, a*d_h/t."""
    kv: int
    """K (= V) width per rank; with t > g a head is replicated."""
    heads: int
    """Query heads per rank."""
    d_head: int
    ab: int
    """Activation bytes per element."""
    gb: int
    """GEMM operand bytes per element."""
    dtype: str


def shard(sc: Scenario) -> Shard:
    m, p, tr = sc.model, sc.parallel, sc.training
    t = p.tp
    s_loc = tr.seq_len // p.cp
    T = tr.micro_batch * s_loc
    kv = m.kv_dim // t if m.n_kv >= t or m.mla else m.kv_dim // m.n_kv
    return Shard(b=tr.micro_batch, s=s_loc, T=T, T_sp=T // t if (p.sp and t > 1) else T, t=t, h=m.hidden,
                 q=m.q_dim // t, kv=kv, heads=m.heads // t, d_head=m.d_head, ab=ACT_BYTES[tr.precision],
                 gb=GEMM_BYTES[tr.precision], dtype=tr.precision)


def gemm(name: str, m: int, n: int, k: int, z: Shard, repeat: int = 1) -> Compute:
    """2mnk FLOPs; bytes = operands and result once each (NAR21 App.; MODELING.md 7.1)."""
    return Compute(name, "gemm", 2.0 * m * n * k * repeat, float((m * k + k * n) * z.gb + m * n * z.ab) * repeat,
                   z.dtype, (m, n, k), repeat)


def elementwise(name: str, elements: float, passes: float, z: Shard, elt_bytes: int | None = None) -> Compute:
    """Memory-bound: `passes` reads+writes of `elements` (MODELING.md 7.3, derived byte counts)."""
    return Compute(name, "elementwise", 0.0, float(elements * passes * (elt_bytes or z.ab)), "bf16" if z.ab == 2 else "fp32",
                   (int(elements),))


# Passes over the tensor (reads + writes) for memory-bound ops, forward and backward (MODELING.md 7.3).
NORM_PASSES = (2, 3)
SWIGLU_PASSES = (3, 5)
GELU_PASSES = (2, 3)
ROPE_PASSES = (2, 2)
RESIDUAL_PASSES = (3, 3)
CROSS_ENTROPY_BYTES = (38, 14)
"""Bytes per logit of the vocab-parallel cross-entropy as Megatron (`VocabParallelCrossEntropy`) and nanotron
(`_ShardedCrossEntropy`) run it, unfused, in fp32. Forward: cast the bf16 logits to fp32 (read 2, write 4),
max (read 4), subtract the max (4 + 4), exp (4 + 4), sum (read 4), normalise to the softmax kept for the
backward (4 + 4) = 38. Backward: scale the softmax in place by the loss gradient (4 + 4), cast the gradient
back to bf16 (read 4, write 2) = 14. The target-logit gather and its correction touch one logit per token."""
DROPOUT_MASK_BYTES = 1
"""Dropout masks are bytes (KOR22 §4.1): Megatron's bias-dropout-add writes one in forward, the backward
reads it, and the memory model keeps it (`memory.layer_activation_terms`)."""


def _residual(sc: Scenario, z: Shard, name: str) -> Compute:
    """Residual add: read x and the residual, write the sum; GPT's bias-dropout-add also writes its
    byte mask (+1 byte per element)."""
    passes = RESIDUAL_PASSES[0] + (DROPOUT_MASK_BYTES / z.ab if sc.model.hidden_dropout else 0.0)
    return elementwise(name, z.T_sp * z.h, passes, z)


def _tp_comm(sc: Scenario, z: Shard, name: str, collective: str) -> Comm:
    return Comm(name, "tp", collective, float(z.T * z.h * z.ab), blocking=not sc.overlap_tp)


# ----------------------------------------------------------------------------------- attention

def _attention_flops(z: Shard, s_kv: int, causal_fraction: float) -> float:
    """Forward 4*b*s_q*s_kv*d_h per head (QK^T and AV), times the causal fraction (FA benchmark)."""
    return 4.0 * z.b * z.s * s_kv * z.d_head * z.heads * causal_fraction


def _attention_op(sc: Scenario, z: Shard, name: str, s_kv: int, causal_fraction: float, bwd: bool) -> Compute:
    """Flash: fwd 1x, bwd 2.5x (recomputes the scores, FA benchmark_flash_attention.py);
    bytes = Q, K, V, O (and dO, dQ, dK, dV in backward). Eager: the s^2 scores go through HBM."""
    flops = _attention_flops(z, s_kv, causal_fraction)
    io = (2 * z.T * z.q + 2 * z.b * s_kv * z.kv) * z.ab
    if sc.training.attention == "eager":
        scores = z.b * z.heads * z.s * s_kv
        flops = 4.0 * z.b * z.s * s_kv * z.d_head * z.heads  # eager computes masked entries too
        io += scores * z.ab * (6 if not bwd else 8)  # write scores, softmax read/write, dropout mask
        flops *= 2.0 if bwd else 1.0
    else:
        flops *= 2.5 if bwd else 1.0
        io *= 2 if bwd else 1
    return Compute(name, "attention", flops, float(io), z.dtype,
                   (z.b * z.heads, z.s, s_kv, z.d_head, causal_fraction, "bwd" if bwd else "fwd"))


def _attention_forward(sc: Scenario, z: Shard, seq: _Seq, tag: str = "") -> None:
    c = sc.parallel.cp
    kv_bytes = float(2 * z.T * z.kv * z.ab)  # local K and V chunk
    if c == 1:
        seq.compute(_attention_op(sc, z, "attn", z.s, 0.5, bwd=False))
    elif sc.parallel.cp_comm == "allgather":
        seq.comm(Comm("cp_kv_allgather", "cp", "all_gather", kv_bytes * c))
        # local queries (head-tail balanced) against the whole gathered sequence: on average half of it
        seq.compute(_attention_op(sc, z, "attn", z.s * c, 0.5, bwd=False))
    else:
        # zig-zag ring (RFA): step 0 is the local causal block, steps 1..c-1 unmasked half blocks against
        # remote K/V (s_local queries x s_local/2 keys, or half the queries x all keys: the same work),
        # each merged into the running output through the log-sum-exp (fp32: read O, O_blk, write O)
        prev = None
        for i in range(c):
            extra = (prev,) if prev is not None else ()
            if i < c - 1:
                # pass the chunk on as soon as it arrived (the first one right after the QKV projection)
                nxt = seq.comm(Comm(f"cp_kv_ring{i}", "cp", "send_recv", kv_bytes, blocking=not sc.overlap_cp),
                               extra=extra, after_compute=(i == 0))
            seq.compute(_ring_step_attention(sc, z, f"attn_step{i}", i, bwd=False), extra=extra)
            if i > 0:
                seq.compute(elementwise(f"cp_merge{i}", z.T * z.q, 3, z, elt_bytes=4))
            prev = nxt if i < c - 1 else None


def _ring_step_attention(sc: Scenario, z: Shard, name: str, step: int, bwd: bool) -> Compute:
    """Step 0: causal s_local x s_local; later steps: an unmasked s_local x s_local/2 block (zig-zag)."""
    if step == 0:
        return _attention_op(sc, z, name, z.s, 0.5, bwd=bwd)
    return _attention_op(sc, z, name, z.s // 2, 1.0, bwd=bwd)


def _attention_backward(sc: Scenario, z: Shard, seq: _Seq) -> None:
    c = sc.parallel.cp
    kv_bytes = float(2 * z.T * z.kv * z.ab)
    if c == 1:
        seq.compute(_attention_op(sc, z, "attn_bwd", z.s, 0.5, bwd=True))
    elif sc.parallel.cp_comm == "allgather":
        seq.comm(Comm("cp_kv_allgather_bwd", "cp", "all_gather", kv_bytes * c))
        seq.compute(_attention_op(sc, z, "attn_bwd", z.s * c, 0.5, bwd=True))
        seq.comm(Comm("cp_dkv_reduce_scatter", "cp", "reduce_scatter", kv_bytes * c))
    else:
        # ring backward: K/V travel again (c-1 steps) and dK/dV travel with them (c steps) (RFA); each step
        # adds its block's dQ and dK/dV into fp32 accumulators
        prev = None
        for i in range(c):
            extra = (prev,) if prev is not None else ()
            if i < c - 1:
                nxt = seq.comm(Comm(f"cp_kv_ring_bwd{i}", "cp", "send_recv", kv_bytes, blocking=not sc.overlap_cp),
                               extra=extra, after_compute=(i == 0))
            seq.compute(_ring_step_attention(sc, z, f"attn_bwd_step{i}", i, bwd=True), extra=extra)
            seq.compute(elementwise(f"cp_accumulate{i}_bwd", z.T * (z.q + 2 * z.kv), 3, z, elt_bytes=4))
            seq.comm(Comm(f"cp_dkv_ring{i}", "cp", "send_recv", kv_bytes, blocking=(i == c - 1) or not sc.overlap_cp))
            prev = nxt if i < c - 1 else None


# ----------------------------------------------------------------------------------- one layer

def _mlp_ops(sc: Scenario, z: Shard, moe: bool):
    """(forward GEMM/act list) for a dense MLP or the shared experts; FFN sharded by TP."""
    m = sc.model
    if moe:
        f = m.moe.shared_ffn * m.moe.shared_experts // z.t
    else:
        f = m.ffn_hidden // z.t
    if f == 0:
        return []
    n1 = 2 * f if m.gated_mlp else f
    act = elementwise("swiglu" if m.gated_mlp else "gelu", z.T * f, (SWIGLU_PASSES if m.gated_mlp else GELU_PASSES)[0], z)
    pre = "shared_" if moe else ""
    return [gemm(pre + "fc1", z.T, n1, z.h, z), act, gemm(pre + "fc2", z.T, z.h, f, z)]


def _moe_tokens(sc: Scenario, z: Shard) -> tuple[int, float]:
    """Tokens this rank routes (its SP shard: T/t) and expert-token rows it computes (x top_k x imbalance)."""
    routed = z.T // z.t if z.t > 1 else z.T
    return routed, routed * sc.model.moe.top_k * sc.parallel.ep_imbalance


def layer_forward(sc: Scenario, layer: int, z: Shard, tag: str = "") -> _Seq:
    m, p = sc.model, sc.parallel
    seq = _Seq(tag)
    sp = p.sp and z.t > 1
    cast = autocast_cast_op(sc, "autocast_cast", autocast_layer_params(sc, layer)) if not tag else None
    if cast is not None:
        seq.compute(cast)
    seq.compute(elementwise("norm1", z.T_sp * z.h, NORM_PASSES[0], z))
    if z.t > 1 and sp:
        seq.comm(_tp_comm(sc, z, "sp_allgather_attn", "all_gather"))
    seq.compute(gemm("qkv", z.T, z.q + 2 * z.kv, z.h, z))
    if m.rotary:
        seq.compute(elementwise("rope", z.T * (z.q + z.kv), ROPE_PASSES[0], z))
    _attention_forward(sc, z, seq, tag)
    seq.compute(gemm("out_proj", z.T, z.h, z.q, z))
    if z.t > 1:
        seq.comm(_tp_comm(sc, z, "sp_reducescatter_attn" if sp else "tp_allreduce_attn", "reduce_scatter" if sp else "all_reduce"))
    seq.compute(_residual(sc, z, "residual1"))
    seq.compute(elementwise("norm2", z.T_sp * z.h, NORM_PASSES[0], z))
    moe = m.is_moe_layer(layer)
    if moe:
        e = m.moe
        routed, rows = _moe_tokens(sc, z)
        seq.compute(gemm("router", routed, e.experts, z.h, z))
        seq.compute(elementwise("permute", routed * e.top_k * z.h, 2, z))
        a2a = float(routed * e.top_k * z.h * z.ab * p.ep_imbalance)
        if p.ep > 1:
            seq.comm(Comm("ep_counts", "ep", "all_to_all", float(e.experts * EP_COUNT_BYTES)))
            seq.comm(Comm("ep_dispatch", "ep", "all_to_all", a2a))
        local = e.experts // p.ep
        per_expert = max(1, int(round(rows / local)))
        fe = e.expert_ffn_hidden
        local_sort = p.ep > 1 and local > 1
        if local_sort:  # the received rows come grouped by source rank: regroup them by local expert
            seq.compute(elementwise("ep_sort", round(rows) * z.h, 2, z))
        seq.compute(gemm("expert_fc1", per_expert, 2 * fe if m.gated_mlp else fe, z.h, z, repeat=local))
        seq.compute(elementwise("expert_act", rows * fe, (SWIGLU_PASSES if m.gated_mlp else GELU_PASSES)[0], z))
        seq.compute(gemm("expert_fc2", per_expert, z.h, fe, z, repeat=local))
        if local_sort:
            seq.compute(elementwise("ep_unsort", round(rows) * z.h, 2, z))
        if p.ep > 1:
            seq.comm(Comm("ep_combine", "ep", "all_to_all", a2a))
        seq.compute(elementwise("unpermute", routed * e.top_k * z.h, 2, z))
        shared = _mlp_ops(sc, z, moe=True)
        if shared:
            if sp:
                seq.comm(_tp_comm(sc, z, "sp_allgather_shared", "all_gather"))
            for op in shared:
                seq.compute(op)
            if z.t > 1:
                seq.comm(_tp_comm(sc, z, "sp_reducescatter_shared" if sp else "tp_allreduce_shared",
                                  "reduce_scatter" if sp else "all_reduce"))
    else:
        if sp:
            seq.comm(_tp_comm(sc, z, "sp_allgather_mlp", "all_gather"))
        for op in _mlp_ops(sc, z, moe=False):
            seq.compute(op)
        if z.t > 1:
            seq.comm(_tp_comm(sc, z, "sp_reducescatter_mlp" if sp else "tp_allreduce_mlp", "reduce_scatter" if sp else "all_reduce"))
    seq.compute(_residual(sc, z, "residual2"))
    return seq


EP_COUNT_BYTES = 8
"""Bytes per expert of the token-count exchange that precedes every EP dispatch: the ranks must know how
many rows each will receive before the variable-size all-to-all (torchtitan `expert_parallel.py`: an
`all_to_all_single` of int64 counts per expert; Megatron's all-to-all dispatcher gathers the same counts).
Forward only: the backward all-to-alls reuse the forward's split sizes."""

COLUMN_LINEARS = ("qkv", "fc1", "shared_fc1")
"""Column-parallel GEMMs: their input is the SP all-gather's output."""
_BWD_COMM = {"all_gather": "reduce_scatter", "reduce_scatter": "all_gather", "all_to_all": "all_to_all"}


def _backward_of(op: Compute, z: Shard) -> tuple[Compute | None, Compute | None]:
    """(input-grad op, weight-grad op) for a forward compute op."""
    if op.kind == "gemm":
        m, n, k = op.shape
        dgrad = Compute(op.name + "_dgrad", "gemm", op.flops, op.bytes, op.dtype, (m, k, n), op.repeat)
        if op.name in ("attn_scores",):
            return dgrad, None
        wgrad = Compute(op.name + "_wgrad", "gemm", op.flops, op.bytes, op.dtype, (k, n, m), op.repeat)
        return dgrad, wgrad
    if op.kind == "elementwise":
        passes = {"norm": NORM_PASSES, "swiglu": SWIGLU_PASSES, "expert_act": SWIGLU_PASSES, "gelu": GELU_PASSES,
                  "rope": ROPE_PASSES, "residual": RESIDUAL_PASSES}
        key = next((k for k in passes if op.name.startswith(k)), None)
        fwd, bwd = passes[key] if key else (2, 2)
        return Compute(op.name + "_bwd", "elementwise", 0.0, op.bytes * bwd / fwd, op.dtype, op.shape), None
    return None, None


def tp_linear_async(sc: Scenario) -> bool:
    """`parallel.tp_linear_async` where it applies: SP over tp > 1, comm that can overlap, `overlap_tp` off,
    weight gradients computed with their dgrads (not a split-backward schedule). NCCL runs the collectives
    on the SMs the overlapped GEMM needs (the reason Megatron's --tp-comm-overlap moves them to copy
    engines): that cost is `cluster.efficiency.comm_sm_share` (`sm_share.py`)."""
    p = sc.parallel
    return (p.tp_linear_async and p.sp and p.tp > 1 and not sc.overlap_tp and sc.topology.node.comm_overlaps_compute
            and not schedule_spec(p.pp_schedule).splits_backward)


def layer_passes(sc: Scenario, layer: int, z: Shard | None = None) -> LayerPasses:
    """F, B and W node lists of one layer for one micro-batch on one rank."""
    z = z or shard(sc)
    fwd = layer_forward(sc, layer, z)
    b = _Seq()
    rc = sc.training.recompute
    if rc == "full":
        b.extend(layer_forward(sc, layer, z, tag="R"))
    w_ops: list[Compute] = []
    wgrad_ag: list[Comm] = []
    sp = sc.parallel.sp and z.t > 1
    async_linear = tp_linear_async(sc)
    regather = None  # async column linear: its re-gather's node, then its wgrad waits for the dgrad's reduce-scatter
    attention_done = False
    for node in reversed(fwd.nodes):
        op = node.op
        if isinstance(op, Comm):
            if op.dim == "cp":
                continue  # handled with the attention backward
            if op.name == "ep_counts":
                continue  # the backward all-to-alls reuse the forward's split sizes
            if op.collective == "all_reduce":  # TP g -> f: backward all-reduce sits after the column-parallel dgrad
                continue
            if regather is not None and op.dim == "tp" and op.collective == "all_gather":
                # the column linear's dgrad reduce-scatter, under its wgrad GEMM (which needs the re-gather)
                ag, wgrad = regather
                rs = b.comm(Comm(op.name + "_bwd", "tp", "reduce_scatter", op.bytes, blocking=False), extra=(ag,))
                b.compute(wgrad, extra=(ag,))
                b.pending.append(rs)
                regather = None
                continue
            b.comm(Comm(op.name + "_bwd", op.dim, _BWD_COMM[op.collective], op.bytes, op.blocking))
            if op.collective == "all_gather" and sp:
                # Megatron re-gathers the SP input for the weight gradient (KOR22 §4.2.2), overlapped with dgrad
                wgrad_ag.append(Comm(op.name + "_wgrad", "tp", "all_gather", op.bytes, blocking=not sc.overlap_tp))
            continue
        if op.name.startswith("cp_merge"):
            continue  # the ring backward's blocks use the merged log-sum-exp; no backward of their own
        if op.kind == "attention":
            if attention_done:
                continue  # the CP ring's forward steps share one backward (emitted once, all steps)
            attention_done = True
            if rc == "selective" and sc.training.attention == "eager":
                sub = _Seq("R")
                _attention_forward(sc, z, sub)
                b.extend(sub)
            _attention_backward(sc, z, b)
            continue
        dgrad, wgrad = _backward_of(op, z)
        if async_linear and op.name in COLUMN_LINEARS and wgrad is not None:
            # re-gather the SP input under the dgrad GEMM; the wgrad comes with the reduce-scatter (above)
            regather_op = replace(_tp_comm(sc, z, op.name + "_regather_wgrad", "all_gather"), blocking=False)
            regather = (b.comm(regather_op), wgrad)
            b.compute(dgrad)
            continue
        if dgrad is not None:
            b.compute(dgrad)
        if wgrad is not None:
            w_ops.append(wgrad)
        if op.kind == "gemm" and op.name in COLUMN_LINEARS and z.t > 1 and not sp:
            b.comm(_tp_comm(sc, z, f"tp_allreduce_{op.name}_dgrad", "all_reduce"))
    # weight-grad list: norm weight grads are folded into their backward kernels
    w = _Seq()
    ag = {c.name.split("_", 2)[-1].replace("_wgrad", ""): c for c in wgrad_ag}
    for op in w_ops:
        key = {"qkv_wgrad": "attn", "fc1_wgrad": "mlp", "shared_fc1_wgrad": "shared"}.get(op.name)
        if key and key in ag:
            # the re-gather reads the saved SP-sharded input: with overlap_tp it starts at once, behind earlier
            # W GEMMs; without, it runs in line like every other TP collective
            w.comm(ag.pop(key), after_compute=not sc.overlap_tp)
            w.pending = [len(w.nodes) - 1]
        w.compute(op)
    acc = grad_accum_op(sc, sum(layer_rank_params(sc, layer)))
    if acc is not None:
        w.compute(acc)
    return LayerPasses(layer, tuple(fwd.nodes), tuple(b.nodes), tuple(w.nodes))


def grad_accum_op(sc: Scenario, params: float) -> Compute | None:
    """`grad += new_grad` after each micro-batch's backward when the accumulation is not fused into the
    weight-gradient GEMM (nanotron's FP32GradientAccumulator, PyTorch autograd's `.grad` accumulation);
    None when it is fused (Megatron's gradient_accumulation_fusion). Memory-bound: read the new gradient
    (weight dtype), read and write the accumulator (grad dtype): 2 + 4 + 4 = 10 B/param for bf16 into
    fp32, 12 for fp32 training. Under `training.autocast` every micro-batch casts its bf16 gradient to
    fp32 (6 B/param) and all but the first add it into `.grad` (12): 6 + 12 (m-1)/m B/param on average."""
    tr = sc.training
    if tr.autocast and params > 0:
        m = sc.micro_batches
        moved = params * (AUTOCAST_CAST_BYTES + AUTOCAST_GRAD_ADD_BYTES * (m - 1) / m)
        return Compute("grad_accum_fp32", "elementwise", 0.0, moved, "fp32", (int(params),))
    if tr.grad_accum_fused or params <= 0:
        return None
    moved = params * (param_bytes(sc) + 2 * tr.grad_bytes)
    dtype = "bf16" if tr.grad_bytes == 2 else "fp32"
    return Compute(f"grad_accum_{dtype}", "elementwise", 0.0, moved, dtype, (int(params),))


AUTOCAST_CAST_BYTES = 6
"""A cast between a bf16 and an fp32 copy of one parameter: read 2 + write 4 (or read 4 + write 2)."""
AUTOCAST_GRAD_ADD_BYTES = 12
"""`.grad += g` in fp32: read both, write one (AccumulateGrad; the first micro-batch's gradient is kept as is)."""


def autocast_layer_params(sc: Scenario, layer: int) -> float:
    """Weights of one layer that autocast casts to bf16 on one rank: all but the norms' (whose ops run in
    fp32 and take their weights as they are)."""
    return sum(layer_rank_params(sc, layer)) - norm_params(sc.model)


def autocast_head_params(sc: Scenario, z: Shard) -> float:
    """The LM head's weight on one rank, which autocast casts for the head GEMM (tied or not: with tied
    embeddings the lookup reads the fp32 table and only the head casts it)."""
    return -(-sc.model.vocab // z.t) * z.h


def autocast_cast_op(sc: Scenario, name: str, params: float) -> Compute | None:
    """Under `training.autocast`, the fp32 -> bf16 cast of `params` weights that the step's first forward
    makes and autocast's cache serves to the other micro-batches: 6 B/param once a step, emitted in every
    micro-batch's forward as 6/m B/param (one op list serves all m micro-batches). None without autocast."""
    if not sc.training.autocast or params <= 0:
        return None
    moved = params * AUTOCAST_CAST_BYTES / sc.micro_batches
    return Compute(name, "elementwise", 0.0, moved, "fp32", (int(params),))


def layer_rank_params(sc: Scenario, layer: int) -> tuple[float, float]:
    """(dense, expert) parameters of one layer on one rank: linears / t with K/V projections replicated
    when t > kv_heads, norms replicated (MODELING.md 1.4), routed experts / ep (expert TP = 1)."""
    m, p = sc.model, sc.parallel
    lp = layer_params(m, layer)
    attn = lp.attn
    if p.tp > m.n_kv and not m.mla:
        kv_part = 2 * m.hidden * m.kv_dim
        attn += kv_part * (p.tp / m.n_kv - 1)
    return attn / p.tp + lp.mlp / p.tp + lp.norms, lp.experts / p.ep


# ----------------------------------------------------------------------------------- ends of the pipeline

def embedding_forward(sc: Scenario, z: Shard | None = None) -> tuple[Node, ...]:
    """Vocab-parallel embedding lookup, then all-reduce over TP (reduce-scatter with SP)."""
    z = z or shard(sc)
    seq = _Seq()
    seq.compute(elementwise("embedding", z.T * z.h, 2, z))
    if z.t > 1:
        sp = sc.parallel.sp
        seq.comm(_tp_comm(sc, z, "embedding_reducescatter" if sp else "embedding_allreduce", "reduce_scatter" if sp else "all_reduce"))
    return tuple(seq.nodes)


def embedding_backward(sc: Scenario, z: Shard | None = None) -> tuple[Node, ...]:
    z = z or shard(sc)
    seq = _Seq()
    if z.t > 1 and sc.parallel.sp:
        seq.comm(_tp_comm(sc, z, "embedding_allgather_bwd", "all_gather"))
    seq.compute(elementwise("embedding_bwd", z.T * z.h, 3, z))
    return tuple(seq.nodes)


def head_forward(sc: Scenario, z: Shard | None = None) -> tuple[Node, ...]:
    """Final norm, LM head (vocab-parallel), cross-entropy in fp32 with its TP all-reduces of per-token
    max / sum / target logit (Megatron vocab_parallel_cross_entropy)."""
    z = z or shard(sc)
    m = sc.model
    seq = _Seq()
    seq.compute(elementwise("final_norm", z.T_sp * z.h, NORM_PASSES[0], z))
    if z.t > 1 and sc.parallel.sp:
        seq.comm(_tp_comm(sc, z, "sp_allgather_head", "all_gather"))
    v = -(-m.vocab // z.t)
    cast = autocast_cast_op(sc, "autocast_cast_head", autocast_head_params(sc, z))
    if cast is not None:
        seq.compute(cast)
    seq.compute(gemm("lm_head", z.T, v, z.h, z))
    seq.compute(elementwise("cross_entropy", z.T * v, CROSS_ENTROPY_BYTES[0], z, elt_bytes=1))
    if z.t > 1:
        seq.comm(Comm("ce_allreduce", "tp", "all_reduce", float(3 * z.T * 4)))
    return tuple(seq.nodes)


def head_backward(sc: Scenario, z: Shard | None = None) -> tuple[tuple[Node, ...], tuple[Node, ...]]:
    """(B, W) of the loss, LM head and final norm."""
    z = z or shard(sc)
    m = sc.model
    v = -(-m.vocab // z.t)
    b = _Seq()
    b.compute(elementwise("cross_entropy_bwd", z.T * v, CROSS_ENTROPY_BYTES[1], z, elt_bytes=1))
    head = gemm("lm_head", z.T, v, z.h, z)
    dgrad, wgrad = _backward_of(head, z)
    b.compute(dgrad)
    if z.t > 1:
        sp = sc.parallel.sp
        b.comm(_tp_comm(sc, z, "sp_reducescatter_head_bwd" if sp else "tp_allreduce_head_bwd", "reduce_scatter" if sp else "all_reduce"))
    b.compute(elementwise("final_norm_bwd", z.T_sp * z.h, NORM_PASSES[1], z))
    w = _Seq()
    w.compute(wgrad)
    acc = grad_accum_op(sc, m.vocab * m.hidden / z.t)
    if acc is not None:
        w.compute(acc)
    return tuple(b.nodes), tuple(w.nodes)


def pp_activation_bytes(sc: Scenario, z: Shard | None = None) -> float:
    """Bytes one rank sends to the next stage per micro-batch: s*b*h activations (each TP rank sends
    its 1/t share with SP, NAR21 §4.1 scatter/gather)."""
    z = z or shard(sc)
    full = z.T * z.h * z.ab
    return float(full / z.t if (sc.parallel.sp and z.t > 1) else full)


# ----------------------------------------------------------------------------------- per-step work

@dataclass(frozen=True, slots=True)
class RankParams:
    """Parameters held by one rank of a pipeline stage (all its chunks), after TP and EP sharding."""
    dense: float
    """Replicated over the dp*cp group (attention, dense MLP, shared experts, router, norms, embeddings)."""
    expert: float
    """Routed-expert parameters (replicated over the expert-DP group)."""
    layers: tuple[int, ...]
    embedding: bool
    head: bool

    @property
    def total(self) -> float:
        return self.dense + self.expert


def embedding_rank_params(sc: Scenario) -> float:
    """The input embedding on its rank: the vocab table split by t, learned positions replicated."""
    m = sc.model
    return m.vocab * m.hidden / sc.parallel.tp + m.positions * m.hidden


def head_rank_tensors(sc: Scenario, has_embedding: bool) -> tuple[float, ...]:
    """The final norm, then the LM head split by t: untied, or the tied copy on a last stage that does not
    hold the embedding (MODELING 1.4)."""
    m = sc.model
    norm = float(final_norm_params(m))
    if not m.tie_embeddings or sc.parallel.pp > 1 or not has_embedding:
        return norm, m.vocab * m.hidden / sc.parallel.tp
    return (norm,)


def rank_params(sc: Scenario, pp_rank: int) -> RankParams:
    """Linears and vocab tables split by t; norms replicated (MODELING.md 1.4); routed experts split by ep,
    not by t (expert tensor parallel = 1); K/V projections replicated when t > kv_heads."""
    from .layout import last_chunk, rank_chunks
    chunks = rank_chunks(sc, pp_rank)
    layers = tuple(i for _, ls in chunks for i in ls)
    dense = expert = 0.0
    for i in layers:
        d, e = layer_rank_params(sc, i)
        dense += d
        expert += e
    ids = [c for c, _ in chunks]
    has_emb = 0 in ids
    has_head = last_chunk(sc) in ids
    if has_emb:
        dense += embedding_rank_params(sc)
    if has_head:
        for x in head_rank_tensors(sc, has_emb):
            dense += x
    return RankParams(dense=dense, expert=expert, layers=layers, embedding=has_emb, head=has_head)


def rank_blocks(sc: Scenario, pp_rank: int) -> list[tuple[str, int, tuple[float, ...], tuple[float, ...]]]:
    """The rank's parameter blocks in definition order (all its chunks): ("embedding", -1, tensors, ()),
    ("layer", i, `layer_rank_tensors`), ("head", -1, the final norm and the LM head, ()); tensors in
    elements, dense then expert. The backward produces their gradients in the reverse order."""
    from .layout import last_chunk, rank_chunks
    out: list[tuple[str, int, tuple[float, ...], tuple[float, ...]]] = []
    chunks = rank_chunks(sc, pp_rank)
    has_emb = 0 in [c for c, _ in chunks]
    for c, layers in chunks:
        if c == 0:
            out.append(("embedding", -1, (embedding_rank_params(sc),), ()))
        for i in layers:
            out.append(("layer", i, *layer_rank_tensors(sc, i)))
        if c == last_chunk(sc):
            out.append(("head", -1, head_rank_tensors(sc, has_emb), ()))
    return out


def rank_tensors(sc: Scenario, pp_rank: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(dense, expert) parameter tensors of one rank (all its chunks), elements each, in definition order:
    the tensors of its `rank_blocks` (as `rank_params`)."""
    blocks = rank_blocks(sc, pp_rank)
    return tuple(t for b in blocks for t in b[2]), tuple(t for b in blocks for t in b[3])


def sp_norm_grad_allreduce(sc: Scenario, pp_rank: int) -> Comm | None:
    """With sequence parallelism each TP rank's norm-weight gradients cover its sequence shard only: one
    coalesced all-reduce of them over the TP group per step, after the last backward (Megatron
    `finalize_model_grads` -> `_allreduce_layernorm_grads`; nanotron `sync_tied_weights_gradients`).
    Bytes: the stage's norm weights (two per layer, the final norm on the head stage) x gradient bytes."""
    if not (sc.parallel.sp and sc.parallel.tp > 1):
        return None
    rp = rank_params(sc, pp_rank)
    norms = len(rp.layers) * norm_params(sc.model) + (final_norm_params(sc.model) if rp.head else 0)
    if norms <= 0:
        return None
    return Comm("sp_norm_grad_allreduce", "tp", "all_reduce", norms * sc.training.grad_bytes, blocking=True)


def tied_embedding_allreduce(sc: Scenario) -> Comm | None:
    """Tied embeddings on two pipeline stages (the input embedding's and the LM head's): the two copies'
    gradients are summed after the last backward, one all-reduce between the two stages (Megatron
    `_allreduce_word_embedding_grads`, nanotron `sync_tied_weights_gradients`). Bytes: the table's share
    on one rank (vocab x hidden / t) x gradient bytes. None when the model is untied or one stage holds both."""
    from .layout import chunk_owner, last_chunk
    if not sc.model.tie_embeddings or chunk_owner(sc, 0)[0] == chunk_owner(sc, last_chunk(sc))[0]:
        return None
    return Comm("tied_embedding_all_reduce", "dp", "all_reduce",
                sc.model.vocab * sc.model.hidden / sc.parallel.tp * sc.training.grad_bytes, blocking=True, group="embd")


def optimizer_bytes_per_param(sc: Scenario) -> float:
    """HBM traffic of one optimizer step per (sharded) parameter: AdamW reads grad, master, m, v and writes
    master, m, v and the 16-bit weight (~30 B, MODELING.md 7.4) plus ~4 B for the global grad norm;
    SGD reads grad and master and writes master and weight."""
    low = sc.training.precision != "fp32" and not sc.training.autocast  # autocast keeps no 16-bit copy to write
    if sc.training.optimizer == "adamw":
        return 4 * 4 + 3 * 4 + (2 if low else 0) + 4
    return 2 * 4 + 4 + (2 if low else 0) + 4


def optimizer_op(sc: Scenario, params_on_rank: float) -> Compute:
    return Compute("optimizer_step", "optimizer", 0.0, params_on_rank * optimizer_bytes_per_param(sc), "fp32",
                   (int(params_on_rank),))


def param_bytes(sc: Scenario) -> int:
    return 4 if sc.training.precision == "fp32" else 2


def layer_rank_tensors(sc: Scenario, layer: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(dense, expert) parameter tensors of one layer on one rank, elements each, in definition order:
    norm, fused QKV projection (all of attention but the output projection), output projection, norm,
    MLP input (SwiGLU's fused gate+up: 2/3 of it), MLP output; an MoE layer's router, its shared experts'
    input and output, and its routed experts as two grouped tensors. Sums to `layer_rank_params`; the
    fused layout is nanotron's and Megatron's (`qkv_proj` / `linear_qkv`, `gate_up_proj` / `linear_fc1`)."""
    m, p = sc.model, sc.parallel
    dense, expert = layer_rank_params(sc, layer)
    lp = layer_params(m, layer)
    norm = lp.norms / 2
    out_proj = m.hidden * (m.heads * m.mla.v_head_dim if m.mla else m.q_dim) / p.tp
    attn = dense - lp.norms - (lp.mlp / p.tp)
    mlp_in_share = 2 / 3 if m.gated_mlp else 0.5
    if lp.experts:
        e = m.moe
        router = m.hidden * e.experts / p.tp
        shared = lp.mlp / p.tp - router
        mlp = (router,) + ((shared * mlp_in_share, shared * (1 - mlp_in_share)) if shared > 0 else ())
        experts = (expert * mlp_in_share, expert * (1 - mlp_in_share)) if expert > 0 else ()
    else:
        mlp = (lp.mlp / p.tp * mlp_in_share, lp.mlp / p.tp * (1 - mlp_in_share))
        experts = ()
    return (norm, attn - out_proj, out_proj, norm) + mlp, experts


def dp_buckets(sc: Scenario, tensors: Sequence[float], elt_bytes: int) -> list[float]:
    """Gradient buckets (bytes of the reduced dtype each) of parameter `tensors` (elements, in definition
    order), in the order backward releases them (last first). `dp_bucketing: param` (PyTorch DDP's
    `_compute_bucket_assignment_by_size`, Megatron's grad buffer): whole tensors in definition order, a bucket
    closing once it holds `parallel.dp_bucket_mb`, so a tensor larger than that is a bucket alone and the
    last bucket may hold less (DDP's smaller first bucket, 1 MiB, is not modelled); `even`: the bytes cut
    into equal buckets of at most dp_bucket_mb."""
    cap = sc.parallel.dp_bucket_mb * 1e6
    sizes = [t * elt_bytes for t in tensors if t > 0]
    if not sizes:
        return []
    if sc.parallel.dp_bucketing == "even":
        total = sum(sizes)
        n = max(1, int(-(-total // cap)))
        return [total / n] * n
    out, acc = [], 0.0
    for s in sizes:
        acc += s
        if acc >= cap:
            out.append(acc)
            acc = 0.0
    if acc > 0:
        out.append(acc)
    return out[::-1]


def bucket_release_blocks(buckets: Sequence[float], block_bytes: Sequence[float]) -> list[int]:
    """Per gradient bucket (bytes, in the order backward releases them): the index of the block (blocks in
    backward order, their gradient bytes) whose backward completes the bucket's last byte, i.e. releases
    it (MEG-DDP: buckets fill in reverse layer order). Both estimators time the releases with it."""
    cum, acc = [], 0.0
    for b in block_bytes:
        acc += b
        cum.append(acc)
    out, end = [], 0.0
    for b in buckets:
        end += b
        out.append(min(bisect_left(cum, end * (1 - 1e-9)), len(cum) - 1))
    return out


def param_gather_buckets(sc: Scenario, tensors: Sequence[float]) -> list[float]:
    """ZeRO-1/2's all-gather of the updated parameter `tensors` (bytes per collective, in forward order):
    the gradient buckets (`dp_buckets`) reversed, or all in one (`parallel.zero_gather: whole`, nanotron's
    `_all_gather_params`)."""
    if sc.parallel.zero_gather == "whole":
        total = sum(tensors)
        return [total * param_bytes(sc)] if total > 0 else []
    return dp_buckets(sc, tensors, param_bytes(sc))[::-1]

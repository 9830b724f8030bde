"""Per-rank memory: model states, activations held for backward, temporary buffers, and the peak.

For pipeline rank r (every TP/CP/DP rank of a stage holds the same amounts):

    peak(r) = weights + grads + optimizer                           static_bytes(sc, r)
            + sum over chunks c of n_c * chunk_activation_bytes(c)  activations in flight
            + buffers_total(buffer_bytes(sc, r))                   temporaries and allowances

where n_c (`inflight_per_chunk`) is the number of micro-batches whose forward through chunk c has run
and whose backward (B) has not, at the rank's worst moment. For the discrete-event engine: allocate
`chunk_activation_bytes(c)` when F of (c, micro-batch) starts and free it when its B ends; the
transient buffers live only inside one layer's (or the loss's) pass; the rest are held all step.

Sources (docs/modeling.md): model states §3.1 (ZeRO §5.1-5.3, MEG-DO); per-layer activations §3.2
(`activations.py`: KOR22 Eq. 1-4, Table 2; Llama-style bookkeeping; recompute modules; FP8 caching); ends of the pipeline §3.3 (KOR22 §4.3,
MEG-MEM); micro-batches in flight §3.4 (NAR21, KOR22 §4.2.3, ZB, DualPipe README); buffers §3.5.
Neighbours: `ops.rank_params` (parameters per rank), `ops.shard` (per-rank tensor sizes), `layout`
(groups, chunks). The report calls `memory_report`; validation/memory_reference.py checks the
published numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .float8_comm import FP8_BYTES, fp8_params, fp8_weight_params, gathered_param_bytes
from . import op_sac
from .autocast_saved import ce_backward_temporaries
from .memory_fit import MemoryReport, headroom_gib, stage_capacities, verdict
from .layout import (chunk_owner, group_shape, is_first_chunk, is_last_chunk, layer_recompute, rank_chunks,
                     recomputes_mlp)
from .sharded_params import (autocast_head_params, autocast_layer_params, embedding_rank_params, head_rank_tensors,
                             param_bytes, rank_params)
from .opgraph import Shard, shard
from .activations import (LOGIT_BYTES, MTP_HEAD_PREFIX, _moe_rows, _s_kv, activation_bytes_per_layer, dense_mlp_terms,
                          embedding_activation_terms, head_activation_terms, layer_activation_terms)
from .sharded_params import layer_rank_params as ops_layer_rank_params
from .policy import scenario_policy, sharding_policy
from ..scenario import Scenario
from .schedules import schedule_spec
from .ep_overlap import ep_overlap_inflight
from . import offload

GIB = 2 ** 30
"""Bytes per GiB (docs/report.md: GiB = 2^30 bytes)."""

# ----------------------------------------------------------------------------------- constants

WEIGHT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 2, "fp4": 2}
"""Module weights per precision; FP8 training keeps 16-bit weights and casts them per GEMM (DSV3 §3.3,
Transformer Engine `fp8_autocast`)."""
MASTER_BYTES = 4
"""fp32 master copy of each weight under bf16/fp8 training (ZeRO §3.1; MEG-DO)."""
MOMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes of each of Adam's first and second moments by `training.adam_moment_dtype`: fp32 (ZeRO §3.1: K = 12 with the
master), or 16 / 8 bits under Megatron's precision-aware optimizer (TE FusedAdam's exp_avg_dtype, exp_avg_sq_dtype;
an FP8 moment's per-tensor scale is not counted) and DeepSeek-V3's BF16 moments (report §3.3.4). LAMB keeps the same
two."""
MOMENT_OPTIMIZERS = ("adamw", "lamb")
"""Optimizers that keep Adam's two moments per parameter."""
AUTOCAST_CACHE_BYTES = 2
"""`training.autocast`: the bf16 copy autocast caches of each fp32 weight it casts (leaf tensors that
require grad), kept until the outermost autocast context exits (torch.autocast `_enter`/`_exit`,
`clear_autocast_cache`); the replay wraps the whole step's forwards and backwards in one context."""
FP8_WEIGHT_CACHE_BYTES = 2
"""FP8 training: Transformer Engine casts each weight to FP8 once per step and keeps the copy and its
transpose across micro-batches (`is_first_microbatch`); Hopper FP8 GEMMs take only the TN layout,
so the dgrad GEMM needs the transposed copy: 1 + 1 bytes per parameter on the rank."""
FP4_WEIGHT_CACHE_BYTES = 0.5 + 0.5 + 2 / 16
"""FP4 (NVFP4) training: the same cache of each weight's row-wise and column-wise E2M1 copies (0.5 B each) with one
E4M3 scale per 16 values each (TransformerEngine at 5671fd36 pytorch/csrc/extensions/cast.cpp bulk_allocate_nvfp4_tensors:
data of the last dim / 2, scale_inv per 16; their padding to 128 x 4 tiles not counted)."""
WEIGHT_CACHE_BYTES = {"fp8": FP8_WEIGHT_CACHE_BYTES, "fp4": FP4_WEIGHT_CACHE_BYTES}
"""Training precision -> bytes per parameter of the quantized weight cache (`plan/opgraph.QUANTIZED`)."""
DP_BUCKETS_IN_FLIGHT = 2
"""ZeRO-2/3: one gradient bucket being reduce-scattered while the next fills (DeepSpeed keeps two
`ipg` buffers with `overlap_comm`; DS-CFG). ZeRO-0/1 reduce in place in Megatron's contiguous
fp32 grad buffer, whose buckets are views (MEG-DDP; docs/modeling.md §3.5): no extra memory."""
ZERO3_LIVE_UNITS = 2
"""ZeRO-3 / FSDP: the gathered parameters of the current layer plus the prefetched next one."""
CUDA_CONTEXT_BYTES = 400e6
"""CUDA context with lazy module loading (CUDA >= 11.7, PyTorch's default): "around 400MB"
(PyTorch maintainer, pytorch/pytorch#109888; PR #86509 measured 287 MB lazy vs 667 MB eager)."""
NCCL_CHANNELS = 32
"""Channels NCCL opens per communicator on an 8 x H100 NVLink node (nccl#1685 log: channels 00..31)."""
NCCL_PEERS_PER_CHANNEL = 2
"""Ring algorithms connect each rank to 2 peers per channel regardless of scale (NCCL maintainer,
nccl#864 / nccl#986)."""
NCCL_CONNECTION_BYTES = 10 * 2 ** 20
"""One connection's FIFOs: Simple 4 MiB (NCCL_BUFFSIZE default) + LL128 ~4.7 MiB + LL 0.5 MiB,
allocated as 10 MiB (10485760-byte allocations in nccl#1685's ALLOC log)."""
ALLOCATOR_FRAGMENTATION = 0.05
"""Caching-allocator slack on memory allocated and freed during the step (activations and
temporaries): MEG-MEM's flat 5 %. Model states live in contiguous buffers allocated once (Megatron's
param/grad buffers, ZeRO §6.2's pre-allocated contiguous buffers), so they are not charged."""
BUCKET_MB_BYTES = 1e6
"""`parallel.dp_bucket_mb` counts 10^6 bytes (as `ops.dp_buckets` reads it)."""
NO_CUDA_INTERCONNECTS = ("host",)
"""Topologies whose "GPUs" are CPU processes (cpu-host): no CUDA context, NCCL or caching allocator."""

LAYER_TRANSIENTS = ("sp_gather", "cp_kv", "ep_all_to_all", "attention_scores", "recompute_layer", "offload_in_flight")
"""Buffer kinds that live inside one layer's pass; they coexist with each other."""
HEAD_TRANSIENTS = ("logits_grad", "head_sp_gather")
"""Buffer kinds that live inside the loss / LM-head backward (never during a layer's pass)."""
OUTSIDE_ALLOCATOR = ("cuda_context", "nccl")
"""Held buffer kinds that PyTorch's caching allocator does not hold (no fragmentation, not in
`torch.cuda.max_memory_allocated`)."""
HELD_BUFFERS = ("dp_buckets", "zero3_params", "zero3_grads", "quantized_weight_cache", "autocast_cache") + OUTSIDE_ALLOCATOR
"""Buffer kinds held through the step."""
SCORE_TERMS = ("softmax_output", "softmax_dropout_mask", "softmax_dropout_output")
"""The a*s^2 tensors of eager attention that selective recompute drops (KOR22 Table 2)."""
OPTIMIZER_TRANSIENTS = ("zero_gather",)
"""Buffer kinds that live only in the optimizer step, after the backward freed the activations."""
BUFFER_KINDS = LAYER_TRANSIENTS + HEAD_TRANSIENTS + HELD_BUFFERS + OPTIMIZER_TRANSIENTS + ("fragmentation",)


# ----------------------------------------------------------------------------------- model states

@dataclass(frozen=True, kw_only=True, slots=True)
class StateBytes:
    """Bytes per parameter of one replica group member, by kind."""
    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


UNFUSED_BF16_GRAD_BYTES = 2
"""With unfused fp32 accumulation (training.grad_accum_fused: false) each parameter also keeps its bf16
gradient (nanotron: 1B dp8 ZeRO-0 measures 25.07 GiB = 20.07 B/param, playbook fit split)."""


def state_bytes_per_param(precision: str, grad_bytes: int, optimizer: str, zero: int, group: int,
                          autocast: bool = False, moment_dtype: str = "fp32") -> StateBytes:
    """Bytes per parameter: weights W (4 fp32, 2 bf16/fp8), grads G, optimizer K (fp32 master 4 unless
    fp32 training, + Adam m, v 8; SGD without momentum keeps only the master). ZeRO over `group` ranks:
    stage >= 1 divides K, >= 2 also G, 3 also W (ZeRO §5.1-5.3: 16, 4 + 12/N, 2 + 14/N, 16/N with
    W = G = 2, K = 12; MEG-DO: 18 and 6 + 12/d for bf16 weights and fp32 grads), the moments at `moment_dtype`.
    `autocast`: the fp32 parameter is its own master (W = 4, K = Adam's 8); its bf16 copy is a buffer (`autocast_cache`)."""
    w = 4 if autocast else WEIGHT_BYTES[precision]
    k = sum(optimizer_state_parts(precision, optimizer, autocast, moment_dtype))
    dw, dg, dk = sharding_policy(zero).state_divisors(group)
    return StateBytes(weights=w / dw, grads=grad_bytes / dg, optimizer=k / dk)


def optimizer_state_parts(precision: str, optimizer: str, autocast: bool, moment_dtype: str) -> tuple[float, float]:
    """(master, moments) bytes per parameter of the optimizer state K: the fp32 master (none under fp32 training or
    autocast, whose fp32 parameter is its own master) and Adam's m and v at `moment_dtype` (none for SGD)."""
    master = 0 if precision == "fp32" or autocast else MASTER_BYTES
    moments = 2 * MOMENT_BYTES[moment_dtype] if optimizer in MOMENT_OPTIMIZERS else 0
    return master, moments


def training_state_bytes(tr, zero: int, group: int) -> StateBytes:
    """`state_bytes_per_param` of a scenario's `training` section (precision, gradient dtype, optimizer, autocast,
    moment dtype) under ZeRO stage `zero` over `group` ranks."""
    return state_bytes_per_param(tr.precision, tr.grad_bytes, tr.optimizer, zero, group, tr.autocast, tr.adam_moment_dtype)


def zero_groups(sc: Scenario) -> tuple[int, int]:
    """(dense, expert) sharding group sizes: dp*cp for dense parameters, the expert-DP group for
    routed experts (layout groups `dp_cp` and `edp`)."""
    return group_shape(sc, "dp_cp").size, group_shape(sc, "edp").size


def static_bytes(sc: Scenario, pp_rank: int, *, groups: tuple[int, int] | None = None) -> dict[str, float]:
    """Weights, gradients and optimizer states on one rank of pipeline stage `pp_rank`:
    dense parameters sharded over dp*cp, routed experts over the expert-DP group (docs/modeling.md §3.1).
    V schedules hold each chunk once: DualPipeV's "2x parameters" (DualPipe README) is per device
    with 2 of the 2*pp stages, i.e. this rank's own two chunks, not a second copy.
    `groups`: `zero_groups(sc)` if already known (it is the same for every stage)."""
    tr, z = sc.training, sc.parallel.zero
    rp = rank_params(sc, pp_rank)
    dense_group, expert_group = groups or zero_groups(sc)
    d, e = training_state_bytes(tr, z, dense_group), training_state_bytes(tr, z, expert_group)
    grads = rp.dense * d.grads + rp.expert * e.grads
    if not tr.grad_accum_fused and tr.precision != "fp32" and tr.grad_bytes == 4 and not tr.autocast:
        grads += UNFUSED_BF16_GRAD_BYTES * rp.total  # the bf16 .grad kept beside the fp32 buffer
    weights = rp.dense * d.weights + rp.expert * e.weights
    if fp8_params(sc):  # the float8 linears' weights are FP8 (their shards under ZeRO-3); no 16-bit copy
        fd, fe = fp8_weight_params(sc, pp_rank)
        weights -= (fd * d.weights + fe * e.weights) * (1 - FP8_BYTES / WEIGHT_BYTES[tr.precision])
    return {"weights": weights,
            "grads": grads,
            "optimizer": rp.dense * d.optimizer + rp.expert * e.optimizer}


def layer_rank_params(sc: Scenario, layer: int) -> float:
    """Parameters of one layer on one rank (`ops.layer_rank_params`, dense + expert)."""
    return sum(ops_layer_rank_params(sc, layer))


def _end_unit_params(sc: Scenario, pp_rank: int) -> list[float]:
    """Embedding / LM-head parameters on the rank (the ZeRO-3 units at the ends of the pipeline)."""
    rp = rank_params(sc, pp_rank)
    units = []
    if rp.embedding:
        units.append(embedding_rank_params(sc))
    if rp.head:
        units.append(sum(head_rank_tensors(sc, rp.embedding)))
    return units


def _chunk_layers(sc: Scenario, pp_rank: int, chunk: int) -> list[int]:
    for c, layers in rank_chunks(sc, pp_rank):
        if c == chunk:
            return layers
    raise ValueError(f"pipeline chunk {chunk} is not on pp rank {pp_rank} (it is on {chunk_owner(sc, chunk)[0]})")


def chunk_activation_bytes(sc: Scenario, pp_rank: int, chunk: int) -> float:
    """One micro-batch through pipeline chunk `chunk` (global index, as `layout.rank_chunks` gives) on
    pp rank `pp_rank`: its layers plus the embedding extras on a route's first chunk and the head extras on its last."""
    total = sum(activation_bytes_per_layer(sc, i) - offload.moved_bytes(sc, i) for i in _chunk_layers(sc, pp_rank, chunk))
    if is_first_chunk(sc, chunk):
        total += sum(embedding_activation_terms(sc).values())
    if is_last_chunk(sc, chunk):
        total += sum(head_activation_terms(sc).values())
    return float(total)


# ----------------------------------------------------------------------------------- in flight

def inflight_per_chunk(sc: Scenario, pp_rank: int) -> dict[int, float]:
    """Per pipeline chunk on the rank: micro-batches whose F has run and whose B has not, at the
    rank's peak: the schedule's `ScheduleSpec.inflight` (schedules.py has each formula with its source:
    NAR21, KOR22 §4.2.3, ZB, DualPipe)."""
    p = sc.parallel
    chunks = [c for c, _ in rank_chunks(sc, pp_rank)]
    if p.ep_overlap:  # Megatron's combined 1F1B: one warm-up forward more (plan/ep_overlap.py)
        counts = ep_overlap_inflight(p.pp_schedule, pp_rank, p.pp, p.vpp, sc.micro_batches)
    else:
        counts = schedule_spec(p.pp_schedule).inflight(pp_rank, p.pp, p.vpp, sc.micro_batches)
    return {c: float(n) for c, n in zip(chunks, counts)}


def inflight_microbatches(sc: Scenario, pp_rank: int) -> float:
    """Micro-batches in flight through this rank's layers: the chunk counts of `inflight_per_chunk`
    weighted by the chunks' layers (their plain mean when the rank has no layers)."""
    counts = inflight_per_chunk(sc, pp_rank)
    layers = {c: len(ls) for c, ls in rank_chunks(sc, pp_rank)}
    total = sum(layers.values())
    if total == 0:
        return sum(counts.values()) / len(counts)
    return sum(counts[c] * layers[c] for c in counts) / total


def activation_bytes_in_flight(sc: Scenario, pp_rank: int) -> float:
    """sum over the rank's chunks of in-flight count x `chunk_activation_bytes`."""
    return float(sum(n * chunk_activation_bytes(sc, pp_rank, c) for c, n in inflight_per_chunk(sc, pp_rank).items()))


# ----------------------------------------------------------------------------------- buffers

def _layer_transients(sc: Scenario, layer: int, z: Shard) -> dict[str, float]:
    """Temporaries alive during one layer's pass (docs/modeling.md §3.5): SP all-gathered input (2sbh);
    ring CP: the next K/V chunk plus the dK/dV travelling back in backward (RFA); all-gather CP: the
    gathered K/V and the full dK/dV before the reduce-scatter; EP all-to-all send buffer; eager
    attention: the raw QK^T scores, plus the recomputed score tensors under selective recompute;
    full recompute: the layer's whole working set while it is re-run (less its stored input); the `mlp` recompute
    module: the dense MLP's tensors while it is re-run."""
    m, p, rc = sc.model, sc.parallel, layer_recompute(sc, layer)
    out = dict.fromkeys(LAYER_TRANSIENTS, 0.0)
    if p.sp and z.t > 1:
        out["sp_gather"] = z.ab * z.T * z.h
    if p.cp > 1:
        kv = z.ab * z.T * ((z.q if m.mla else z.kv) + z.kv)
        out["cp_kv"] = 2 * kv if p.cp_comm == "ring" else 2 * kv * p.cp
    if m.is_moe_layer(layer) and p.ep > 1:
        out["ep_all_to_all"] = z.ab * _moe_rows(sc, z)[1] * z.h
    if sc.training.attention == "eager":
        scores = z.b * z.heads * z.s * _s_kv(sc, z)
        out["attention_scores"] = z.ab * scores
        if rc == "selective" and not op_sac.applies(sc):
            kept = layer_activation_terms(sc, layer, "none")
            out["attention_scores"] += sum(kept.get(k, 0.0) for k in SCORE_TERMS)
    if rc == "full":  # an MTP module's head and loss run outside its checkpoint: not part of the re-run
        rerun = {k: v for k, v in layer_activation_terms(sc, layer, "none").items() if not k.startswith(MTP_HEAD_PREFIX)}
        out["recompute_layer"] = sum(rerun.values()) - z.ab * z.T_sp * z.h
    elif rc == "selective" and op_sac.applies(sc):  # the replay's tensors beside the saved ones, one layer at a time
        out["recompute_layer"] = max(0.0, sum(layer_activation_terms(sc, layer, "none").values())
                                     - sum(layer_activation_terms(sc, layer).values()))
    elif rc == "selective" and recomputes_mlp(sc, layer):  # the MLP re-run's tensors
        out["recompute_layer"] = sum(dense_mlp_terms(sc, z).values())
    return out


def buffer_bytes(sc: Scenario, pp_rank: int, *, groups: tuple[int, int] | None = None) -> dict[str, float]:
    """Temporary buffers and allowances on one rank, by kind (`BUFFER_KINDS`). Layer transients are
    those of the rank's worst layer; `buffers_total` says how they combine. `groups` as in
    `static_bytes`."""
    z = shard(sc)
    tr, p = sc.training, sc.parallel
    out = dict.fromkeys(BUFFER_KINDS, 0.0)
    layers = [i for _, ls in rank_chunks(sc, pp_rank) for i in ls]
    if layers:
        worst = max((_layer_transients(sc, i, z) for i in layers), key=lambda d: sum(d.values()))
        out.update(worst)
        out["offload_in_flight"] = offload.in_flight_bytes(sc, layers)
    if any(is_last_chunk(sc, c) for c, _ in rank_chunks(sc, pp_rank)):
        # the standard loss's fp32 gradient of the logits; the fused one writes it in place, cut never makes it
        out["logits_grad"] = (ce_backward_temporaries(sc) * LOGIT_BYTES * z.T * -(-sc.model.vocab // z.t)
                              if tr.loss == "standard" else 0.0)
        if tr.loss_chunk_tokens is not None:  # one chunk's bf16 logits at a time, in the forward
            out["logits_grad"] = z.ab * min(tr.loss_chunk_tokens, z.T) * -(-sc.model.vocab // z.t)
        out["head_sp_gather"] = z.ab * z.T * z.h if (p.sp and z.t > 1) else 0.0
    rp = rank_params(sc, pp_rank)
    dense_group, expert_group = groups or zero_groups(sc)
    units = [layer_rank_params(sc, i) for i in layers] + _end_unit_params(sc, pp_rank)
    unit = max(units, default=0.0)
    pol = scenario_policy(sc)
    if pol.grad_sync_every_micro_batch and (dense_group > 1 or expert_group > 1):
        out["dp_buckets"] = DP_BUCKETS_IN_FLIGHT * min(p.dp_bucket_mb * BUCKET_MB_BYTES, rp.total * tr.grad_bytes)
    if pol.gathers_after_step and dense_group > 1 and not p.zero_gather_inplace:
        out["zero_gather"] = param_bytes(sc) * rp.total * (1 + 1 / dense_group)
    if pol.gathers_per_block:
        # resharded: the blocks being gathered, used and prefetched; kept from forward to backward: every
        # block of the rank stays gathered through the steady state (a micro-batch is always in flight)
        out["zero3_params"] = (ZERO3_LIVE_UNITS * unit if pol.regather_for_backward else rp.total) * gathered_param_bytes(sc)
        out["zero3_grads"] = unit * tr.grad_bytes
    if tr.precision in WEIGHT_CACHE_BYTES:
        out["quantized_weight_cache"] = WEIGHT_CACHE_BYTES[tr.precision] * (ZERO3_LIVE_UNITS * unit if pol.gathers_per_block else rp.total)
        if fp8_params(sc) and not pol.gathers_per_block:  # the FP8 weight itself is in `weights`: the transpose here
            out["quantized_weight_cache"] -= FP8_BYTES * sum(fp8_weight_params(sc, pp_rank))
    if tr.autocast:  # bf16 copies of the cast weights, from the first forward to the step's last backward
        out["autocast_cache"] = AUTOCAST_CACHE_BYTES * (sum(autocast_layer_params(sc, i) for i in layers)
                                                        + (autocast_head_params(sc, z) if rp.head else 0))
    if sc.topology.node.interconnect not in NO_CUDA_INTERCONNECTS:
        out["cuda_context"] = CUDA_CONTEXT_BYTES
        per_communicator = NCCL_CHANNELS * NCCL_PEERS_PER_CHANNEL * NCCL_CONNECTION_BYTES
        out["nccl"] = _communicators(sc, (dense_group, expert_group)) * per_communicator
        dynamic = activation_bytes_in_flight(sc, pp_rank) + _transient_total(out) + sum(
            out[k] for k in HELD_BUFFERS if k not in OUTSIDE_ALLOCATOR)
        out["fragmentation"] = ALLOCATOR_FRAGMENTATION * dynamic
    return out


def _communicators(sc: Scenario, groups: tuple[int, int]) -> int:
    """NCCL communicators a rank uses: tp, cp, pp, the dp*cp gradient group and, for MoE with ep > 1,
    the ep and expert-DP groups (those of size > 1)."""
    p = sc.parallel
    dense_group, expert_group = groups
    sizes = [p.tp, p.cp, p.pp, dense_group]
    if sc.model.moe and p.ep > 1:
        sizes += [p.ep, expert_group]
    return sum(1 for n in sizes if n > 1)


def _transient_total(buffers: dict[str, float]) -> float:
    """Layer temporaries coexist with each other; the loss/head ones come at another time."""
    return max(sum(buffers[k] for k in LAYER_TRANSIENTS), sum(buffers[k] for k in HEAD_TRANSIENTS))


def buffers_total(buffers: dict[str, float]) -> float:
    """Held buffers + the larger of the layer and head temporaries + fragmentation."""
    return sum(buffers[k] for k in HELD_BUFFERS) + _transient_total(buffers) + buffers["fragmentation"]


# ----------------------------------------------------------------------------------- report

@dataclass(frozen=True, kw_only=True, slots=True)
class StageMemory:
    """Peak memory of one rank of pipeline stage `stage`, in bytes."""
    stage: int
    weights: float
    grads: float
    optimizer: float
    activations: float
    """Stored for backward, all micro-batches in flight at the peak."""
    buffers: float
    """`buffers_total` of `buffer_bytes`."""
    peak: float
    """The larger of the backward's (weights + grads + optimizer + activations + buffers) and the
    optimizer step's (`optimizer_step` + CUDA context and NCCL)."""
    optimizer_step: float = 0.0
    """Allocated during the optimizer step: weights + grads + optimizer + its transients (`OPTIMIZER_TRANSIENTS`)."""
    allocated_peak: float = 0.0
    """What PyTorch's caching allocator holds in tensors at the peak (`torch.cuda.max_memory_allocated`):
    `peak` less the CUDA context, NCCL's buffers (allocated outside it) and the fragmentation slack
    (reserved, not allocated)."""
    buffer_kinds: dict[str, float] = field(default_factory=dict)
    """`buffer_bytes` by kind, for reports and tests."""

    def as_gib(self) -> dict:
        return {"stage": self.stage, "weights_gib": self.weights / GIB, "grads_gib": self.grads / GIB,
                "optimizer_gib": self.optimizer / GIB, "activations_gib": self.activations / GIB,
                "buffers_gib": self.buffers / GIB, "peak_gib": self.peak / GIB,
                "optimizer_step_gib": self.optimizer_step / GIB, "allocated_peak_gib": self.allocated_peak / GIB}


def stage_memory(sc: Scenario, pp_rank: int, *, groups: tuple[int, int] | None = None) -> StageMemory:
    """Peak of one rank of stage `pp_rank` (the module docstring gives the sum)."""
    groups = groups or zero_groups(sc)
    st = static_bytes(sc, pp_rank, groups=groups)
    act = activation_bytes_in_flight(sc, pp_rank)
    kinds = buffer_bytes(sc, pp_rank, groups=groups)
    buf = buffers_total(kinds)
    states = st["weights"] + st["grads"] + st["optimizer"]
    step = states + sum(kinds[k] for k in OPTIMIZER_TRANSIENTS)
    outside = sum(kinds[k] for k in OUTSIDE_ALLOCATOR)
    peak = max(states + act + buf, step + outside)
    allocated = max(states + act + buf - outside - kinds["fragmentation"], step)
    return StageMemory(stage=pp_rank, weights=st["weights"], grads=st["grads"], optimizer=st["optimizer"],
                       activations=act, buffers=buf, peak=peak, optimizer_step=step, allocated_peak=allocated,
                       buffer_kinds=kinds)


def memory_report(sc: Scenario) -> MemoryReport:
    """Per-stage peaks; fits when the worst stage leaves the scenario's headroom free (`fits`)."""
    groups = zero_groups(sc)
    stages = [stage_memory(sc, r, groups=groups) for r in range(sc.parallel.pp)]
    peak = max(s.peak for s in stages) / GIB
    cap = float(sc.topology.gpu.memory_gib)
    room = headroom_gib(sc)
    if sc.pool_topologies:  # mixed pools: each stage against its own GPU; the headline is the tightest stage's
        caps = stage_capacities(sc)
        worst = min(range(len(stages)), key=lambda r: caps[r][0] - caps[r][1] - stages[r].peak / GIB)
        said = verdict([(s.peak / GIB, c, h) for s, (c, h) in zip(stages, caps)])
        return MemoryReport(capacity_gib=caps[worst][0], peak_gib=stages[worst].peak / GIB, per_stage=stages,
                            headroom_gib=caps[worst][1], verdict=said)
    return MemoryReport(capacity_gib=cap, peak_gib=peak, per_stage=stages, headroom_gib=room, verdict=verdict([(peak, cap, room)]))

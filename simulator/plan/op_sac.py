"""torchtitan's op-level selective activation checkpointing (`training.recompute: selective` under a framework
whose `selective_recompute` is `op`): what each transformer block stores for its backward, and what it re-runs.

The policy (torchtitan b5bcd76 torchtitan/distributed/activation_checkpoint.py:31-94, 185-287, `SelectiveAC`,
the trainer's default, trainer.py:108-110) wraps each block in `checkpoint_wrapper` with a selective-checkpoint
context. Every ATen op of the block's forward is either MUST_SAVE, its outputs kept until the backward, or
PREFER_RECOMPUTE, re-run when the backward replays the block's forward:
- saved (`_get_default_save_ops`, :39-94): the compute-intensive ops of torch's partitioner list (aten.mm,
  addmm, bmm, _scaled_mm, the SDPA kernels; torch 2.13.0 torch/_functorch/partitioners.py:2971-2983), cuDNN /
  math SDPA, aten.max (the FP8 amax), topk, reduce_scatter_tensor and all_to_all_single;
- but every second aten.mm (:269-273): a counter of mms per block forward, fresh for each call (:243-244), and
  an even count is recomputed; mms of the router's weight shape are always recomputed (:196-198, 265-266);
- everything else is recomputed: norms, RoPE, SwiGLU, residual adds, FP8 casts (their amax is saved, the
  cast re-runs because the backward's GEMMs need its output), and the TP all-gathers (all_gather_into_tensor is
  not in the list: the backward gathers the sequence-parallel activations again) and all-reduces.
With its early-stop off (`early_stop=False`, :284) the replay runs the block's whole forward; saved ops return
their cached outputs. Grouped expert GEMMs (aten._grouped_mm) are not in the list: recomputed.

Llama 3 at the commit read fuses Q, K and V into one linear (models/llama3/__init__.py:131, fuse_qkv=True), so a
dense block's mms are wqkv (1, saved), wo (2, recomputed), w1 (3, saved), w3 (4, recomputed), w2 (5, saved).
The plan's GEMM ops map to torchtitan's linears by `LINEARS`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .opgraph import Comm, Compute, Node, OpList, Shard

LINEARS = {"fc1": 2, "shared_fc1": 2}
"""Plan GEMMs that are several torchtitan linears called in turn (w1 then w3, equal halves of the plan's N) when
the MLP is gated; every other plan GEMM is one linear."""
FORCED_RECOMPUTE = ("router",)
"""GEMMs recomputed whatever their count (`force_recompute_mm_shapes_by_fqns`: moe.router.gate)."""
NOT_MM = ("expert_fc1", "expert_fc2")
"""Grouped expert GEMMs: not aten.mm, not counted, not saved."""
CP_RING = "cp_"
"""Context parallelism's ring (the K/V exchange, the log-sum-exp merges of the steps' outputs) is taken as part
of the saved attention and not re-run (assumption: torch's ring attention runs inside the SDPA call it
replaces); each step's SDPA output is saved."""
LSE_BYTES = 4
"""SDPA's fp32 log-sum-exp, one per (head, query), an output of the saved attention op."""


@dataclass(frozen=True)
class OpSac:
    saved: dict
    """Stored tensor name -> bytes (one micro-batch, one rank)."""
    rerun: tuple
    """The ops (Compute or Comm) the backward's replay runs, in forward order."""


def applies(sc) -> bool:
    """Whether `training.recompute: selective` means op-level SAC in the scenario's framework."""
    sel = sc.framework.spec.selective_recompute
    return sc.training.recompute == "selective" and sel is not None and sel.value == "op"


def _sdpa_saved(sc) -> bool:
    """Whether the save list holds the SDPA op the scenario runs: always, but cuDNN's SDPA in torchtitan releases
    before pytorch/torchtitan b39377f9f (#2095, 2025-12-01, "add all SDPA backends to op_sac_save_list"), whose list
    named the flash and memory-efficient kernels only (torchtitan/parallelisms/parallelize_llama.py:206-207 at
    25ec560): the framework option `op_sac_saves_cudnn` false. Unsaved, the attention forward re-runs in the
    backward's replay."""
    if sc.framework.option("op_sac_saves_cudnn") is False and sc.training.attention != "eager":
        return sc.framework.attention_kernel != "cudnn"
    return True


def _pieces(op: Compute, gated: bool) -> list[Compute]:
    """The torchtitan linears a plan GEMM stands for (`LINEARS`), each its own GEMM op."""
    n_lin = LINEARS.get(op.name, 1) if gated else 1
    if n_lin == 1:
        return [op]
    m, n, k = op.shape
    part = n // n_lin
    return [Compute(f"{op.name}_{i}", "gemm", 2.0 * m * part * k * op.repeat,
                    op.bytes * part / n, op.dtype, (m, part, k), op.repeat) for i in range(n_lin)]


def _attention_outputs(sc, z: Shard, op: Compute) -> float:
    """Bytes of a saved SDPA call's outputs: the output (T x q) and the fp32 log-sum-exp; the math kernel
    (`training.attention: eager`) returns its attention weights instead of the log-sum-exp."""
    bh, s_q, s_kv = op.shape[:3]
    out = z.ab * z.T * z.q
    if sc.training.attention == "eager":
        return out + z.ab * bh * s_q * s_kv
    return out + LSE_BYTES * z.b * z.heads * z.s


def op_sac(sc, z: Shard, forward: tuple[Node, ...]) -> OpSac:
    """The policy applied to one layer's forward node list (`layer_ops.layer_forward`)."""
    saved = {"layer_input": float(z.ab * z.T_sp * z.h)}  # the checkpointed block's input
    rerun: list = []
    mm_count = 0
    gated = sc.model.gated_mlp
    for node in forward:
        op = node.op
        if isinstance(op, Comm):
            if op.collective == "reduce_scatter" and op.dim == "tp":
                saved[op.name] = op.bytes / z.t  # each rank keeps its shard of the full buffer
            elif op.collective == "all_to_all":
                saved[op.name] = op.bytes
            elif op.dim != "cp":
                rerun.append(op)  # TP all-gathers and all-reduces are gathered again
            continue
        if op.name.startswith(CP_RING):
            continue
        if op.kind == "attention":
            if _sdpa_saved(sc):
                saved[op.name] = saved.get(op.name, 0.0) + _attention_outputs(sc, z, op)
            else:
                rerun.append(op)
            continue
        if op.kind != "gemm":
            rerun.append(op)
            continue
        for piece in _pieces(op, gated):
            if op.name.startswith(FORCED_RECOMPUTE) or op.name.startswith(NOT_MM):
                rerun.append(piece)
                continue
            mm_count += 1
            if mm_count % 2 == 1:
                m, n, _ = piece.shape
                saved[piece.name + "_output"] = float(z.ab * m * n * piece.repeat)
            else:
                rerun.append(piece)
    return OpSac(saved=saved, rerun=tuple(rerun))


def recompute_list(sc, z: Shard, forward: tuple[Node, ...]) -> OpList:
    """The backward's replay of one block (`op_sac`), as an "R"-tagged op list on the usual streams."""
    seq = OpList("R")
    for op in op_sac(sc, z, forward).rerun:
        if isinstance(op, Comm):
            seq.comm(op)
        else:
            seq.compute(op)
    return seq


"""The kernels plain PyTorch code adds to a step under `torch.autocast` (`training.autocast: true`): the dtype flow
around the fused-kernel plan, priced in both evaluators (`layer_ops` and `step_ops` call it; what the same code
keeps for its backward is `autocast_saved.py`).

`training.autocast` is the replay executor's bf16 (calibrate/replay/llama.py and train.py): fp32 weights, one
`torch.autocast(dtype=bfloat16)` over the step. What its kernels move, per layer and micro-batch:
- **the residual stream in fp32** (the embedding is not on autocast's cast list, so its output is fp32): each
  RMSNorm reads and writes fp32 (`RESIDUAL_BYTES` per element where the plan counts 2); each residual add reads the
  fp32 stream and the bf16 projection output and writes fp32 (4 + 2 + 4 = 10 B); its backward sums the two
  branches' fp32 gradients where the stream forks (12 B) and casts the projection branch's to bf16 (AddBackward0's
  cast: 4 + 2 B), 18 B in all;
- **one downcast of a norm output per projection that reads it** (`autocast_saved.projection_casts`: wq, wk, wv;
  w1, w3; the LM head): autocast caches casts of leaf tensors only, so each linear casts the fp32 activation
  afresh (`CAST_BYTES` each). Backward, each cast's ToCopyBackward0 upcasts its bf16 gradient to fp32 (the
  `upcast` kernel: PyTorch's casting copy, slower than a plain copy) and autograd adds the n fp32 gradients
  (n - 1 adds of `GRAD_ADD_BYTES`);
- **the weights' casts**: once a step (autocast's cache serves the other micro-batches: `cast_weights` prices
  it as 1/m a micro-batch), and their backward is each weight gradient's upcast, every micro-batch, before it
  is added into `.grad` (`layer_ops.grad_accum_ops`); the cast op itself has no other backward.

Seen in a torch.profiler trace of one replayed step on an H200 (Llama 3.2 1B, 4 micro-batches of 2 x 2048,
validation/results/step_trace_h200.md): 81 activation casts per micro-batch (16 layers x 5, and the head's),
their 81 upcasts at 2.0-2.3 TB/s counting 6 B per element where a same-dtype copy ran at 4.2, and 3 gradient sums
per layer; the weight gradients' upcasts at 2.0 TB/s.
MoE layers and MLA are left as the plan counts them (the replay's MoE is not measured on a GPU).
"""
from __future__ import annotations

from dataclasses import replace

from ..scenario import Scenario
from .autocast_saved import RESIDUAL_BYTES, projection_casts
from .opgraph import DROPOUT_MASK_BYTES, Compute, Node, Shard

CAST_BYTES = 6
"""A cast between a bf16 and an fp32 copy of one element: read 2 + write 4 (or read 4 + write 2)."""
GRAD_ADD_BYTES = 12
"""An fp32 add of two gradients into a third tensor or in place (`.grad += g`): read two, write one, 4 B each."""
RESIDUAL_ADD_BYTES = (10, 18)
"""Bytes per element of the residual add in the fp32 stream: forward read fp32 + bf16, write fp32; backward the
fork's fp32 sum (12) and the projection branch's cast to bf16 (6) (module docstring)."""
NORM_NAMES = ("norm1", "norm2", "final_norm")
RESIDUAL_NAMES = ("residual1", "residual2", "residual")


def input_cast(sc: Scenario, z: Shard, reader: str) -> Compute | None:
    """The downcasts of the fp32 activation that `reader`'s projections read (`reader`: qkv, fc1 or lm_head),
    one per projection (`repeat`), each of z.T x z.h elements (the gathered input under SP); None without
    autocast or for MLA's projections."""
    if not sc.training.autocast or (reader == "qkv" and sc.model.mla):
        return None
    n = projection_casts(sc.model, reader)
    elements = z.T * z.h
    return Compute(f"cast_{reader}_input", "elementwise", 0.0, float(n * elements * CAST_BYTES), "fp32",
                   (int(elements),), n)


def is_input_cast(op: Compute) -> bool:
    return op.kind == "elementwise" and op.name.startswith("cast_") and op.name.endswith("_input")


def input_cast_backward(op: Compute) -> list[Compute]:
    """ToCopyBackward0 of each of `op`'s casts (the bf16 gradient upcast to fp32), then the fp32 sum of the n
    gradients (n - 1 adds)."""
    reader = op.name[len("cast_"):-len("_input")]
    elements, n = op.shape[0], op.repeat
    out = [Compute(f"upcast_{reader}_input_grad", "elementwise", 0.0, float(n * elements * CAST_BYTES), "bf16",
                   (elements,), n)]
    if n > 1:
        out.append(Compute(f"sum_{reader}_input_grads", "elementwise", 0.0, float((n - 1) * elements * GRAD_ADD_BYTES),
                           "fp32", ((n - 1) * elements,), n - 1))
    return out


def cast_weights(sc: Scenario, name: str, params: float) -> Compute | None:
    """The fp32 -> bf16 cast of `params` weights that the step's first forward makes and autocast's cache serves
    to the other micro-batches: `CAST_BYTES` per parameter once a step, emitted in every micro-batch's forward as
    1/m of it (one op list serves all m micro-batches). None without autocast."""
    if not sc.training.autocast or params <= 0:
        return None
    return Compute(name, "elementwise", 0.0, params * CAST_BYTES / sc.micro_batches, "fp32", (int(params),))


def is_weight_cast(op: Compute) -> bool:
    return op.kind == "elementwise" and op.name.startswith("autocast_cast")


def weight_grad_accumulation(sc: Scenario, params: float, first_kept: bool) -> list[Compute]:
    """Adding one micro-batch's bf16 weight gradients into fp32 ones: the upcast (`CAST_BYTES` per parameter, the
    `upcast` kernel) and the fp32 add (`GRAD_ADD_BYTES`). `first_kept`: the first micro-batch's upcast gradient
    becomes the accumulator (PyTorch's AccumulateGrad), so m - 1 of m micro-batches add; otherwise every one
    does (an accumulator that starts at zero)."""
    m = sc.micro_batches
    share = (m - 1) / m if first_kept else 1.0
    out = [Compute("upcast_wgrad", "elementwise", 0.0, params * CAST_BYTES, "bf16", (int(params),))]
    if share > 0:
        out.append(Compute("grad_accum_fp32", "elementwise", 0.0, params * GRAD_ADD_BYTES * share, "fp32",
                           (int(params),)))
    return out


def in_fp32_stream(sc: Scenario, op: Compute, z: Shard) -> Compute:
    """A norm or residual op as it runs on autocast's fp32 residual stream (module docstring); other ops as
    they are."""
    if op.kind != "elementwise" or not sc.training.autocast or z.ab == RESIDUAL_BYTES:
        return op
    base = op.name[:-len("_bwd")] if op.name.endswith("_bwd") else op.name
    if base in NORM_NAMES:
        return replace(op, bytes=op.bytes * RESIDUAL_BYTES / z.ab, dtype="fp32")
    if base in RESIDUAL_NAMES:  # (GPT's bias-dropout-add also writes, and its backward reads, the byte mask)
        per_elt = RESIDUAL_ADD_BYTES[op.name.endswith("_bwd")] + (DROPOUT_MASK_BYTES if sc.model.hidden_dropout else 0)
        return replace(op, bytes=float(op.shape[0] * per_elt), dtype="fp32")
    return op


def apply(sc: Scenario, nodes: tuple[Node, ...], z: Shard) -> tuple[Node, ...]:
    """`nodes` with their norms and residual adds on the fp32 stream (unchanged without autocast)."""
    if not sc.training.autocast:
        return nodes
    return tuple(Node(in_fp32_stream(sc, n.op, z), n.deps, n.tag) if isinstance(n.op, Compute) else n for n in nodes)

"""What FP8 training changes in communication, where a framework sends FP8 tensors instead of 16-bit ones, and
which of its tensors are FP8 on the way (a weight or activation cast on its shard before the all-gather).

torchtitan with tensorwise float8 (torchao's Float8Linear) does this in two places:
- **TP** (`fp8_tp_all_gather` in the framework file): Float8ColwiseParallel / PrepareFloat8ModuleInput cast a
  column linear's sequence-parallel input to FP8 before the all-gather, and NoopFwToFloat8BwDynamic casts the
  output gradient to FP8 before the backward's all-gather: every TP all-gather of a layer carries 1 byte per
  element; the reduce-scatters (the row linears' outputs, the column linears' input gradients) stay 16-bit.
  The casts then run on the 1/t shard instead of the gathered tensor.
- **FSDP** (option `float8_fsdp_all_gather`): each float8 linear's weight shard is cast to FP8 before the
  parameter all-gather (WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather), so a block's gather carries its
  linear weights at 1 byte each (norms and embeddings 16-bit) and the gathered weight needs no cast per forward.
  Its scale needs the weight's amax over the whole FSDP group: without `float8_precompute_scale` one all-reduce
  per weight before its all-gather; with it, one amax pass over the local shards after the optimizer step
  (`PRECOMPUTE_AMAX_BYTES`) and one all-reduce of the stacked amaxes (a few bytes per tensor, not priced).

Sources: the framework file's entries (torchtitan v0.2.2 parallelize.py, job_config.py, float8.py; pytorch/ao
torchao/float8/float8_tensor_parallel.py and fsdp_utils.py).
"""
from __future__ import annotations

from ..scenario import Scenario
from .opgraph import Comm, Shard
from .sharded_params import param_bytes, rank_blocks

TENSORWISE = "torchao_tensorwise"
"""The recipe whose FP8 tensors can be gathered (one scale per tensor): torchtitan turns the FP8 TP all-gathers on
only without a rowwise recipe (TT022 parallelize.py:77-86) and refuses the FSDP one with any recipe_name
(float8.py:80-85)."""
FP8_BYTES = 1
"""Bytes per element of an FP8 (e4m3 / e5m2) tensor."""
AMAX_BYTES = 4
"""One fp32 amax: what each per-weight amax all-reduce carries."""
PRECOMPUTE_AMAX_BYTES = 4
"""HBM bytes per parameter of `precompute_float8_dynamic_scale_for_fsdp`: one read of the fp32 weight shard
(torch._foreach_norm(weights, ord=inf)), at the optimizer step."""


def head_in_fp8(sc: Scenario) -> bool:
    """Whether `training.precision: fp8` runs the LM head in FP8 (`step_ops.head_gemm`; its weight is then an FP8
    gather too): the framework's `fp8_output_layer`, unless the scenario filters it out (torchtitan's
    `float8_filter_output`, filter_fqns = ["output"])."""
    fw = sc.framework.spec.fp8_output_layer
    return (bool(fw is not None and fw.value) and not sc.framework.option("float8_filter_output")
            and not sc.framework.option("mx"))  # torchtitan's MX converter filters "output" by default


def fp8_tp_gathers(sc: Scenario) -> bool:
    """Whether the layers' TP all-gathers carry FP8 (module docstring)."""
    entry = sc.framework.spec.fp8_tp_all_gather
    return (bool(entry is not None and entry.value) and sc.training.precision == "fp8" and sc.parallel.tp > 1
            and sc.framework.fp8_recipe == TENSORWISE)


def tp_collective_bytes(sc: Scenario, z: Shard, collective: str, width: int | None = None) -> float:
    """Bytes of one TP collective of a layer's T x `width` activation (default the hidden size h; MLA's latents,
    `mla_ops.sp_gather_width`) or its gradient on this rank."""
    elt = FP8_BYTES if collective == "all_gather" and fp8_tp_gathers(sc) else z.ab
    return float(z.T * (z.h if width is None else width) * elt)


PER_TENSOR_TE = ("te_delayed", "te_current")
"""Transformer Engine recipes whose FP8 parameters Megatron's distributed optimizer gathers in FP8 (one scale per
tensor); its MXFP8 parameters are gathered in bf16 through the gradient buffer (`fp8_params`)."""


def fp8_params(sc: Scenario) -> bool:
    """Whether the linears' weights are kept only as FP8 tensors (Megatron's `fp8_param_gather`, TE's fp8_model_init:
    "Keep the compute param in fp8 ... and perform the param all-gather in fp8", MLM core_v0.14.0
    megatron/training/arguments.py:1248-1250): no 16-bit copy of them beside the FP8 weight and its transpose
    (`memory.FP8_WEIGHT_CACHE_BYTES`). Megatron-Bridge's FP8 recipes all set it (mixed_precision.py at v0.2.0:218,
    :251, :289)."""
    return sc.training.precision == "fp8" and bool(sc.framework.option("fp8_param_gather"))


def fp8_param_gathers(sc: Scenario) -> bool:
    """Whether the sharded data-parallel group all-gathers the float8 linears' weights in FP8: torchtitan's
    `float8_fsdp_all_gather`, or Megatron's `fp8_param_gather` with a per-tensor recipe (its distributed optimizer's
    parameter buffer is uint8 for them: MLM core_v0.14.0 megatron/core/distributed/distributed_data_parallel.py:
    226-233; each rank quantizes its shard after the step and one packed all-reduce of the amaxes follows,
    fp8_utils.py:194-267, a few bytes not priced; MXFP8 parameters are gathered in bf16 through the gradient
    buffer, param_and_grad_buffer.py:680-692). Only where the group shards (`parallel.zero` >= 1 over more than one
    rank), as torchtitan turns its switch on only with data_parallel_shard_degree > 1."""
    p = sc.parallel
    torchao = bool(sc.framework.option("float8_fsdp_all_gather"))
    megatron = fp8_params(sc) and sc.framework.fp8_recipe in PER_TENSOR_TE
    return (sc.training.precision == "fp8" and (torchao or megatron) and p.zero >= 1
            and p.dp * p.cp // p.dp_replicate > 1)


def fp8_weight_params(sc: Scenario, pp_rank: int) -> tuple[float, float]:
    """(dense, expert) elements of the rank's float8 linear weights: a layer's tensors but its norms, every routed
    expert tensor, the LM head where it runs in FP8 (`_fp8_tensors`); not the embedding."""
    dense = expert = 0.0
    for kind, i, d, e in rank_blocks(sc, pp_rank):
        key = f"L{i}" if kind == "layer" else ("head" if kind == "head" else "emb")
        dense += sum(_fp8_tensors(sc, key, d))
        expert += sum(e)
    return dense, expert


def block_layer(sc: Scenario, key: str) -> int | None:
    """The layer index of a block's key ("L12" -> 12, "MTP1" -> the first MTP layer); None for "emb"/"head"."""
    if key.startswith("MTP"):
        return sc.model.layers + int(key[3:]) - 1
    return int(key[1:]) if key.startswith("L") else None


def _fp8_tensors(sc: Scenario, key: str, tensors: tuple[float, ...]) -> tuple[float, ...]:
    """A block's dense tensors that are float8 linear weights: a layer's all but its norms (a norm holds at most
    2 x hidden elements, a LayerNorm's weight and bias; every linear more), the LM head where it runs in FP8
    (`head_in_fp8`; `head_rank_tensors` puts it second, after the final norm), none of the embedding."""
    if block_layer(sc, key) is not None:
        return tuple(t for t in tensors if t > 2 * sc.model.hidden)
    return (tensors[1],) if key == "head" and len(tensors) > 1 and head_in_fp8(sc) else ()


def dense_gather_bytes(sc: Scenario, key: str, tensors: tuple[float, ...]) -> float:
    """Bytes of one parameter all-gather of a block's dense tensors: 16-bit (or fp32) elements, the float8 linear
    weights at 1 byte under `float8_fsdp_all_gather`."""
    total = sum(tensors) * param_bytes(sc)
    if not fp8_param_gathers(sc):
        return total
    return total - sum(_fp8_tensors(sc, key, tensors)) * (param_bytes(sc) - FP8_BYTES)


def amax_all_reduces(sc: Scenario, key: str, tensors: tuple[float, ...], group: str) -> tuple[Comm, ...]:
    """The per-weight amax all-reduces in front of a block's FP8 parameter all-gather (without
    `float8_precompute_scale`): one per float8 linear weight tensor of the block."""
    if not (fp8_param_gathers(sc) and sc.framework.option("float8_fsdp_all_gather")) \
            or sc.framework.option("float8_precompute_scale"):
        return ()  # Megatron reduces its shards' amaxes in one packed all-reduce (fp8_param_gathers)
    return tuple(Comm("fp8_weight_amax_all_reduce", "dp", "all_reduce", float(AMAX_BYTES), blocking=False, group=group)
                 for _ in _fp8_tensors(sc, key, tensors))


COLUMN_INPUTS = ("qkv", "fc1", "shared_fc1")
"""GEMMs whose input is a layer's SP all-gather (cast before it under FP8 TP)."""
ROW_OUTPUTS = ("out_proj", "fc2", "shared_fc2")
"""GEMMs whose output gradient the backward all-gathers (cast before it under FP8 TP)."""


def cast_shares(sc: Scenario, gemm_name: str) -> tuple[float, float, float]:
    """The parts of a GEMM's activation, weight and output gradient this rank quantizes (`opgraph.fp8_cast`): a
    column linear's input and a row linear's output gradient on their 1/t shard where TP gathers FP8 (cast before
    the all-gather); a weight on its 1/group FSDP shard under `float8_fsdp_all_gather` (the gathered weight is
    FP8 already); else all of each."""
    p = sc.parallel
    tp = fp8_tp_gathers(sc)
    act = 1.0 / p.tp if tp and gemm_name in COLUMN_INPUTS else 1.0
    grad = 1.0 / p.tp if tp and gemm_name in ROW_OUTPUTS else 1.0
    weight = 1.0 / max(1, p.dp * p.cp // p.dp_replicate) if fp8_param_gathers(sc) else 1.0
    return act, weight, grad


def gathered_param_bytes(sc: Scenario) -> float:
    """Bytes per element of a gathered parameter held for compute: FP8 under `float8_fsdp_all_gather` (the
    linears dominate a layer; its norms' 16-bit bytes are left out), else the parameter dtype's."""
    return float(FP8_BYTES) if fp8_param_gathers(sc) else float(param_bytes(sc))

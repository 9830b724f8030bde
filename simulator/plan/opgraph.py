"""The op vocabulary: what one rank computes (`Compute`) and communicates (`Comm`), as nodes of a list
with stream semantics (`OpList`), and the per-rank sizes every op is built from (`Shard`).

The lists themselves are built by `layer_ops.py` (one transformer layer's F, B and W passes) and
`step_ops.py` (the pipeline's ends and the per-step work); the parameters a rank holds by
`sharded_params.py`. Compute ops run on the rank's compute stream in list order; a `Comm` runs on its
dimension's stream. Memory-bound byte counts: docs/modeling.md §7.3 (derived).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Union

from ..scenario import Scenario

ACT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 2, "fp4": 2}  # activations stay 16-bit under fp8 / fp4 (DSV3 §3.3)
GEMM_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5}
PRICED_AS = {"fp16": "bf16"}
"""Precisions whose tensor-core work is priced as another's: fp16 runs at bf16's rate on every GPU clustersim
describes (the datasheets' dense peaks are equal: A100 312, H100 989, B200 2,250 TFLOP/s; `topologies/*.yaml`
peak_tflops) and the published GEMM and attention points are BF16's (`cost/kernel_data.json`)."""


def priced_dtype(precision: str) -> str:
    """The dtype a training precision's GEMMs and attention are priced in (`PRICED_AS`, else the precision)."""
    return PRICED_AS.get(precision, precision)
QUANTIZED = ("fp8", "fp4")
"""Training precisions whose linears' GEMMs run quantized (FP8; NVFP4's E2M1), their casts priced by the framework's
recipe (`Fp8Casts`); attention, norms and the LM head stay 16-bit."""
FP8_STORE_BYTES = 1 + 4 / 128
"""An activation kept in FP8 (E4M3) with one fp32 scale per 1x128 tile (DeepSeek-V3 report §3.3.2,
fine-grained quantization; Transformer Engine's blockwise recipe uses the same activation tiles)."""


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


class OpList:
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

    def extend(self, other: "OpList") -> None:
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
    """Per-rank sizes of one micro-batch (docs/modeling.md §0 notation)."""
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
    d_head: float
    ab: int
    """Activation bytes per element."""
    gb: float
    """GEMM operand bytes per element (NVFP4's E2M1: 0.5)."""
    dtype: str


def shard(sc: Scenario) -> Shard:
    m, p, tr = sc.model, sc.parallel, sc.training
    t = p.tp
    s_loc = tr.seq_len // p.cp
    T = tr.micro_batch * s_loc
    kv = m.kv_dim // t if m.n_kv >= t or m.mla else m.kv_dim // m.n_kv
    return Shard(b=tr.micro_batch, s=s_loc, T=T, T_sp=T // t if (p.sp and t > 1) else T, t=t, h=m.hidden,
                 q=m.q_dim // t, kv=kv, heads=m.heads // t, d_head=m.attention_head_dim, ab=ACT_BYTES[tr.precision],
                 gb=GEMM_BYTES[tr.precision], dtype=priced_dtype(tr.precision))


def gemm(name: str, m: int, n: int, k: int, z: Shard, repeat: int = 1) -> Compute:
    """2mnk FLOPs; bytes = operands and result once each (NAR21 App.; docs/modeling.md §7.1)."""
    return Compute(name, "gemm", 2.0 * m * n * k * repeat, float((m * k + k * n) * z.gb + m * n * z.ab) * repeat,
                   z.dtype, (m, n, k), repeat)


@dataclass(frozen=True, slots=True)
class Fp8Casts:
    """What one FP8 quantization of a bf16 tensor moves, per element, and how often a weight is quantized."""
    reads: int
    """Reads of the bf16 tensor (2 B each): 1 with delayed scaling (the scale comes from the amax history; the cast
    records the new amax), 2 with current/dynamic scaling (its amax, then the cast)."""
    written: int
    """Bytes written per element: the FP8 copy (1), plus its transpose where the recipe keeps one."""
    transpose_copy: int
    """Bytes moved per element making a transposed FP8 copy later (read 1 + write 1), where the recipe makes one."""
    weight_per_step: bool
    """The weight's FP8 copy is made once per step and kept across micro-batches (else every micro-batch)."""
    kernels_per_tensor: int = 1
    """Kernels one tensor's quantization launches: 1 for a fused cast; 3 for Transformer Engine's current scaling
    (amax, scale, cast)."""
    grouped_fused: bool = True
    """A grouped GEMM's per-expert tensors are quantized by one multi-tensor kernel (TE's delayed scaling); false:
    one quantization per expert (`kernels_per_tensor` each)."""
    weight_bytes: Optional[int] = None
    """Bytes moved per weight element where they differ from `per_element` (a recipe that scales the weight along
    each axis from its bf16 copy); None: the same."""
    wgrad_bf16: bool = False
    """The weight-gradient GEMM runs in bf16 on the bf16 input and output gradient (torchao's rowwise_with_gw_hp)."""
    rescales_backward: bool = False
    """The backward's FP8 GEMMs (slow accumulation) run as cuBLAS's tensorwise kernel, then one pass over the output
    applies the row and column scales (read and write it): torchao's axiswise recipes (pytorch/ao 8c81863
    torchao/float8/float8_ops.py:44-55, addmm_float8_unwrapped: "The rowwise CUTLASS-based kernel is so slow without
    fast-accum that we'd rather use the tensorwise cuBLAS-based kernel and do the scaling manually afterwards";
    config.py:174-176, only the forward GEMM uses fast accumulation; pytorch/ao #1325, #2184)."""

    def per_element(self) -> int:
        return 2 * self.reads + self.written + self.transpose_copy

    def per_weight_element(self) -> int:
        return self.weight_bytes if self.weight_bytes is not None else self.per_element()


TE_DELAYED = Fp8Casts(reads=1, written=2, transpose_copy=0, weight_per_step=True)
"""Transformer Engine, delayed scaling (Megatron's default recipe, transformer_config.py:594-600; DeepSpeed and
nanotron run TE's recipes): one read (TE docs, 'FP8 Delayed Scaling': current scaling reads a tensor twice, delayed
once, https://nvidia.github.io/TransformerEngine/features/low_precision_training/fp8_delayed_scaling/), and its
cast-transpose writes the FP8 tensor and its transpose, because Hopper's FP8 GEMMs take only the TN layout; the
weight's pair is cast on a step's first micro-batch and cached (`is_first_microbatch`, memory.FP8_WEIGHT_CACHE_BYTES)."""
TE_CURRENT = Fp8Casts(reads=2, written=2, transpose_copy=0, weight_per_step=True, kernels_per_tensor=3, grouped_fused=False)
"""Transformer Engine's per-tensor current scaling (Megatron's --fp8-recipe tensorwise, TE's Float8CurrentScaling:
NVIDIA/Megatron-LM core_v0.14.0 megatron/core/fp8_utils.py:438-441). Each tensor is read twice (its amax, then the
cast) and quantized by three launches, TransformerEngine v2.6 transformer_engine/pytorch/csrc/extensions/cast.cpp:
45-81 (nvte_compute_amax, nvte_compute_scale_from_amax, nvte_quantize_v2; the amax's memset,
common/recipe/current_scaling.cu:63, not priced). A grouped GEMM's inputs and output gradients are quantized
expert by expert: split_quantize (module/grouped_linear.py:127, :299-306) runs one fused multi-tensor kernel for
delayed scaling only (cast.cpp:156-189, "Currently only have fused kernel for FP8 delayed scaling"; the same in
v2.7-v2.9). Written as TE_DELAYED (the FP8 copy and its transpose: Hopper's TN layout; Blackwell's non-TN FP8
GEMMs skip the transpose, quantizer.cpp:217, not priced apart); the weights' copies kept across micro-batches."""
TE_MXFP8 = Fp8Casts(reads=1, written=2, transpose_copy=0, weight_per_step=True, grouped_fused=False)
"""Transformer Engine's MXFP8 block scaling (Megatron's --fp8-recipe mxfp8, TE's MXFP8BlockScaling; Blackwell only,
`GPUSpec.mx_formats`). One kernel per tensor reads the bf16 tensor once and writes both the row-scaled and the
column-scaled FP8 copies, each with one E8M0 scale per 32 values computed in the same pass: no amax kernel, no
scale kernel, no transpose (the column-scaled copy keeps the layout). TransformerEngine v2.6
transformer_engine/common/util/cast_kernels.cuh:1047-1053 and :1150-1162 (cast_mxfp8_2D_kernel, BIDIMENSIONAL:
rowwise and colwise outputs from one read), pytorch/tensor/mxfp8_tensor.py:105-116 (the columnwise data is
`empty_like(data)`, scales of shape/32), pytorch/csrc/extensions/cast.cpp:156-189 (a grouped GEMM's experts
quantized one by one: the multi-tensor kernel is delayed scaling's only). The scales' bytes (2/32 B per element,
1.6 % of the cast's 4 B) are not priced. The weights' copies are made once per step (Megatron-Bridge's MXFP8
recipe gathers the bf16 parameters into the gradient buffer and quantizes them into the modules' MXFP8 weights:
Megatron-LM core_v0.14.0 megatron/core/distributed/param_and_grad_buffer.py:304-320,
reuse_grad_buf_for_mxfp8_param_ag; the gather moves bf16, as without fp8_param_gather)."""
TE_NVFP4 = Fp8Casts(reads=3, written=1, transpose_copy=0, weight_per_step=True, kernels_per_tensor=3, weight_bytes=5)
"""Transformer Engine's NVFP4 block scaling (Megatron's --fp4-format e2m1 --fp4-recipe nvfp4, TE's NVFP4BlockScaling;
`training.precision: fp4`, a GPU with an fp4 peak): E2M1 values with an E4M3 scale per 16 and an fp32 scale per tensor
from its amax. An input activation or output gradient (TransformerEngine at Megatron-Bridge v0.3.0's pin, 5671fd36,
pytorch/csrc/quantizer.cpp NVFP4Quantizer::quantize_impl) is read three times in three kernels: one pass for both
amaxes (the tensor's and its random-Hadamard-transformed transpose's, nvte_hadamard_transform_amax), the row-wise
quantization (nvte_quantize_v2) and the column-wise one fused with the 16x16 Hadamard transform
(nvte_hadamard_transform_cast_fusion_columnwise), writing 0.5 + 0.5 B: 7 B per element (the scales' 2/16 B not
priced). Weights (common/recipe/__init__.py NVFP4BlockScaling: 2D 16x16 scaling, no Hadamard transform) take an amax
and one quantization writing both copies: 5 B, once per step. A grouped GEMM's experts are quantized by fused
multi-tensor kernels (pytorch/csrc/extensions/cast.cpp split_quantize_nvfp4_impl). Stochastic rounding of the
gradients runs inside the cast (not priced apart)."""
TORCHAO_TENSORWISE = Fp8Casts(reads=2, written=1, transpose_copy=2, weight_per_step=False)
"""torchao's Float8Linear with dynamic tensorwise scaling (torchtitan's float8 default, float8.py:65-100): every
forward computes the input's and the weight's amax and casts them (two reads each, one FP8 write), the backward
casts the output gradient the same way, and the backward's GEMMs take transposed FP8 copies of the saved input,
weight and gradient (read 1 + write 1). pytorch/ao torchao/float8/float8_linear.py @024fe94: Float8Linear.forward
calls cast_input_to_float8 and cast_weight_to_float8_t on every call; manual_float8_matmul_with_args_in_float8
saves both FP8 tensors and multiplies by their .t() in backward."""
TE_DELAYED_UNCACHED = replace(TE_DELAYED, weight_per_step=False)
"""Transformer Engine's delayed scaling where the caller does not pass `is_first_microbatch` (LLM Foundry's MPT
calls its te.Linear modules as plain modules): TE casts the weight again on every forward (TransformerEngine v0.10
transformer_engine/pytorch/module/linear.py:87, `update_fp8_weights = is_first_microbatch is None or ...`)."""
TORCHAO_ROWWISE = Fp8Casts(reads=2, written=2, transpose_copy=2, weight_per_step=False, weight_bytes=10,
                           rescales_backward=True)
"""torchao's rowwise recipe (torchtitan's float8 `recipe_name: rowwise`; its default at the commit read): a rowwise
scale cannot be transposed, so the backward's column-scaled copies are made from the bf16 tensor. As torchao's own
roofline counts them (pytorch/ao torchao/testing/training/roofline_utils.py, get_tensor_memory_traffic_ovhd_s,
compiled kernels): an input or output gradient in two kernels, bf16 -> FP8 along dim 0 plus a bf16 copy along dim 1
(read 2, write 1 + 2), then that copy -> FP8 (read 2, write 1): 8 B per element; a weight in three, FP8 along dim 0
(3), a bf16 transpose (4), FP8 along dim 1 (3): 10 B. The forward's rowwise-scaled GEMM (PyTorch's CUTLASS kernel, fast
accumulation) is priced at the FP8 curve as tensorwise's: the same roofline takes one achievable share of the FP8 peak
for every recipe, and pytorch/pytorch #147971 (2025-02) measured most shapes at 90-100 % of tensorwise's speed (a
tail down to 50 %, not priced); the backward's run tensorwise and rescale (`rescales_backward`)."""
TORCHAO_ROWWISE_GW_HP = Fp8Casts(reads=1, written=1, transpose_copy=0, weight_per_step=False, weight_bytes=6,
                                 wgrad_bf16=True, rescales_backward=True)
"""torchao's rowwise_with_gw_hp: input and output gradient cast once, along dim 0 (read 2, write 1: 3 B), the weight
along both axes (3 + 3: 6 B; the same roofline file), and the weight-gradient GEMM in bf16 on the bf16 tensors."""
TORCHAO_MXFP8 = Fp8Casts(reads=2, written=2, transpose_copy=0, weight_per_step=False, kernels_per_tensor=2)
"""torchao's MXLinear (torchtitan's MX converter, recipe mxfp8_cublas; Blackwell only): every call casts the input,
the weight and, in the backward, the output gradient along each of the two dimensions in two kernels, each
reading the bf16 tensor (read 2, write 1 + 2: 6 B per element; the scales' 1/32 B not priced), as torchao's own
roofline counts them (pytorch/ao torchao/testing/training/roofline_utils.py, mxfp8_cublas: "kernel 1: x_bf16 ->
x_mxfp8_dim0, kernel 2: x_bf16 -> x_mxfp8_dim1", no fusion assumed); no weight cache across micro-batches. The
GEMMs are cuBLAS's block-scaled ones (torch._scaled_mm)."""
FP8_CASTS = {"te_delayed": TE_DELAYED, "te_delayed_uncached": TE_DELAYED_UNCACHED, "te_current": TE_CURRENT,
             "te_mxfp8": TE_MXFP8, "te_nvfp4": TE_NVFP4,
             "torchao_tensorwise": TORCHAO_TENSORWISE, "torchao_rowwise": TORCHAO_ROWWISE,
             "torchao_rowwise_gw_hp": TORCHAO_ROWWISE_GW_HP, "torchao_mxfp8": TORCHAO_MXFP8}
"""A framework file's `fp8_recipe` or `fp4_recipe` (frameworks/spec.py FP8_RECIPES, FP4_RECIPES) -> the casts it prices."""


def fp8_cast(sc: Scenario, g: Compute, shares: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> Compute | None:
    """The FP8 quantizations a GEMM needs in forward, as one memory-bound op before it: its input activation
    (m x k per kernel) and its weight (k x n), each `Fp8Casts.per_element` bytes per element; the weight once per
    step (1/m of it per micro-batch) where the recipe caches it. shape = (activation elements, weight elements,
    output-gradient elements, bytes per element): the backward quantizes the output gradient (m x n) the same way
    (`fp8_cast_backward`). `repeat`: the kernels one micro-batch's activation quantization launches
    (`Fp8Casts.kernels_per_tensor`, per expert where the recipe has no multi-tensor kernel); the weights' launches,
    once per step where cached, are not counted. None for a GEMM not in FP8. The amax reductions across ranks are
    not priced. `shares`: the parts of the activation, weight and output gradient this rank casts
    (`float8_comm.cast_shares`: a shard where the framework casts before an FP8 all-gather)."""
    if g.dtype not in QUANTIZED or g.kind != "gemm":
        return None
    m, n, k = g.shape
    casts = FP8_CASTS[sc.framework.linear_recipe(sc.training.precision)]
    per_elt = casts.per_element()
    act, weight, grad = (x * g.repeat * share for x, share in zip((m * k, k * n, m * n), shares))
    nbytes = per_elt * act + casts.per_weight_element() * (weight / sc.micro_batches if casts.weight_per_step else weight)
    launches = casts.kernels_per_tensor * (1 if casts.grouped_fused else g.repeat)
    return Compute("fp8_cast_" + g.name, "elementwise", 0.0, float(nbytes), "bf16", (act, weight, grad, per_elt), launches)


def fp8_cast_backward(op: Compute) -> Compute:
    """The backward's quantization of the GEMM's output gradient (m x n), for its dgrad and wgrad GEMMs."""
    _, _, grad, per_elt = op.shape
    return Compute(op.name + "_bwd", "elementwise", 0.0, float(per_elt * grad), "bf16", (grad,), op.repeat)


def elementwise(name: str, elements: float, passes: float, z: Shard, elt_bytes: int | None = None) -> Compute:
    """Memory-bound: `passes` reads+writes of `elements` (docs/modeling.md §7.3, derived byte counts)."""
    return Compute(name, "elementwise", 0.0, float(elements * passes * (elt_bytes or z.ab)), "bf16" if z.ab == 2 else "fp32",
                   (int(elements),))


# Passes over the tensor (reads + writes) for memory-bound ops, forward and backward (docs/modeling.md §7.3).
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
FUSED_CROSS_ENTROPY_BYTES = (6, 4)
"""Bytes per logit of a fused cross-entropy (`training.loss: fused`) as TransformerEngine's Triton kernel runs it
(transformer_engine/pytorch/triton/cross_entropy.py, Megatron's `--cross-entropy-fusion-impl te`): forward,
one pass reading the bf16 logits for the running max and sum, a second reading them again and writing the
gradient (softmax minus the target) in place of the logits (2 + 2 + 2); backward, scale that gradient by the
loss's in place (read 2, write 2). No fp32 copy is made."""
CCE_LSE_BYTES = 4
"""Cut Cross-Entropy (Wijmans et al. 2024, arXiv 2411.09009, `training.loss: cut`) computes the logits block by
block on chip from the LM head's input and weight and writes only one fp32 log-sum-exp per token; its backward
recomputes the blocks (the gradient filtering that skips negligible blocks is not priced)."""
DROPOUT_MASK_BYTES = 1
"""Dropout masks are bytes (KOR22 §4.1): Megatron's bias-dropout-add writes one in forward, the backward
reads it, and the memory model keeps it (`memory.layer_activation_terms`)."""


def residual_add(sc: Scenario, z: Shard, name: str) -> Compute:
    """Residual add: read x and the residual, write the sum; GPT's bias-dropout-add also writes its
    byte mask (+1 byte per element)."""
    passes = RESIDUAL_PASSES[0] + (DROPOUT_MASK_BYTES / z.ab if sc.model.hidden_dropout else 0.0)
    return elementwise(name, z.T_sp * z.h, passes, z)


def tp_collective(sc: Scenario, z: Shard, name: str, collective: str) -> Comm:
    return Comm(name, "tp", collective, float(z.T * z.h * z.ab), blocking=not sc.overlap_tp)

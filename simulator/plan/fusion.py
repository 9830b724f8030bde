"""What torch.compile changes in a PyTorch-native framework's layers (torchtitan's `compile` option): the
memory-bound ops, as a rewrite of one layer's F and B node lists (`layer_ops.layer_passes` applies it, so
both evaluators see it).

The plan's memory-bound ops (`opgraph.elementwise`, `fp8_cast`) are priced as one fused kernel each, as
Megatron's Transformer Engine and Apex kernels run them. A framework with a `compile` option
(`frameworks/*.yaml`) runs PyTorch's own ops instead:
- **compile off (eager)**: each op is the chain of ATen kernels its Python code calls, every intermediate
  written to HBM and read back, one launch each (`EAGER`);
- **compile on**: torchtitan compiles each TransformerBlock (torchtitan/distributed/compile.py:39-72,
  `transformer_block.compile(fullgraph=True)`), and Inductor fuses each chain of pointwise ops into one
  kernel that reads the chain's external inputs and writes its outputs (intermediates stay in registers).
  A reduction that the next op needs whole (torchao's tensorwise amax before its cast) ends a kernel: that
  chain is two kernels. Where two plan ops meet in one kernel (`PAIRS`: a residual add into the next
  RMSNorm, a norm or SwiGLU into the FP8 cast of its output, a norm's backward into the gradient
  accumulation of the residual), the consumer's read of the producer's output goes, and so does the
  producer's write where nothing else reads that output.
GEMMs and attention are not touched: without max-autotune Inductor calls ATen's cuBLAS GEMMs (torch 2.13.0
torch/_inductor/utils.py:2844-2847 `use_aten_gemm_kernels`, config.py:514-520), and SDPA stays the
cuDNN/flash kernel. RMSNorm is one kernel either way (torch 2.13's `nn.RMSNorm` dispatches to the fused
`aten._fused_rms_norm` on CUDA). Compilation is a one-time cost of the first steps, not priced per step.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .opgraph import (NORM_PASSES, RESIDUAL_PASSES, ROPE_PASSES, SWIGLU_PASSES, Compute, LayerPasses, Node)
from ..scenario import Scenario


@dataclass(frozen=True)
class EagerChain:
    """How PyTorch runs one plan op unfused: bytes moved per element of the op's tensor (bf16 activations)
    and kernels launched, forward and backward, beside the fused op's own bytes per element."""
    fused_bytes: tuple[float, float]
    """Bytes per element of the plan's fused op (forward, backward): its passes x 2 B."""
    eager_bytes: tuple[float, float]
    eager_kernels: tuple[int, int]
    source: str

    def factor(self, bwd: bool) -> float:
        return self.eager_bytes[bwd] / self.fused_bytes[bwd]


ROPE_EAGER = EagerChain(
    fused_bytes=(2.0 * ROPE_PASSES[0], 2.0 * ROPE_PASSES[1]),
    eager_bytes=(20.0, 20.0), eager_kernels=(6, 6),
    source="torchtitan b5bcd76 torchtitan/models/common/rope.py:254-264 (ComplexRoPE, Llama 3's): per tensor "
           "query.float() (read 2, write 4 B), the complex product with the cache (read 4, write 4), type_as back "
           "to bf16 (read 4, write 2) = 20 B per element, three kernels each for q and k; the backward runs the "
           "same three in reverse (the conjugate product)")
"""Fused: read and write each q / k element once (4 B per element), one kernel."""
SWIGLU_EAGER = EagerChain(
    fused_bytes=(2.0 * SWIGLU_PASSES[0], 2.0 * SWIGLU_PASSES[1]),
    eager_bytes=(10.0, 18.0), eager_kernels=(2, 3),
    source="torchtitan b5bcd76 torchtitan/models/common/feed_forward.py:53-54 (w2(F.silu(w1(x)) * w3(x))): forward "
           "silu (read 2, write 2) then mul (read 2 + 2, write 2) = 10 B per element of f; backward mul's two "
           "gradients (g * up, g * silu: read 4, write 2 each) and silu_backward (read 4, write 2) = 18 B")
"""Fused: read gate and up, write the product (6 B); backward read g, gate, up, write both gradients (10 B)."""
TORCHAO_CAST_EAGER_BYTES = 33.0
"""Bytes per element of one eager torchao tensorwise FP8 quantization of a bf16 tensor: `tensor_to_amax` is
torch.max(torch.abs(x)) (abs: read 2, write 2; max: read 2), then `_ToFloat8ConstrFunc.forward` runs
tensor.to(torch.float32) (read 2, write 4), * scale (read 4, write 4), and `to_fp8_saturated`'s clamp (read 4,
write 4) and .to(float8) (read 4, write 1) (pytorch/ao torchao/float8/float8_training_tensor.py @074fdd4,
float8_utils.py): 33 B in six tensor-sized kernels (the scalar amax-to-scale kernels are not counted). Fused by
Inductor: the amax reduction (read 2) and one cast kernel (read 2, write 1) = 5 B in two kernels, which is what
`opgraph.TORCHAO_TENSORWISE` prices (plus the transposed copy, the same either way)."""
CAST_KERNELS = {"eager": 6, "compiled": 2}
"""Kernels per quantized tensor (above)."""

EAGER_CHAINS = {"rope": ROPE_EAGER, "swiglu": SWIGLU_EAGER, "expert_act": SWIGLU_EAGER}
"""Plan ops (by name prefix) that PyTorch runs as several kernels; norms, residual adds and the rest are one
ATen kernel each and keep their plan bytes."""


@dataclass(frozen=True)
class Pair:
    """Two plan ops that one Inductor kernel runs, the second reading the first's output."""
    first: str
    second: str
    """Name prefixes of the producer and the consumer (backward ops end in `_bwd`)."""
    reads_saved: float
    """Passes over the consumer's tensor that no longer reach HBM (its reads of the producer's output)."""
    write_saved: bool
    """The producer's output is read by nothing else, so it is not written either."""
    why: str


PAIRS = (
    Pair("residual", "norm", 1.0, False,
         "h = x + attn(...) then ffn_norm(h) (llama3/model.py:48-49): the norm reads h from registers; h is still "
         "written (the second residual add and the backward read it)"),
    Pair("norm", "fp8_cast_", 1.0, False,
         "the norm's output feeds the FP8 cast: its amax reduction runs in the norm's kernel; the cast kernel, "
         "after the reduction, reads the norm's output again"),
    Pair("swiglu", "fp8_cast_", 1.0, False, "as norm -> cast, for the w2 input"),
    Pair("norm2_bwd", "residual1_bwd", 1.0, True,
         "the norm's input gradient is added to the residual's gradient in the same kernel: that gradient is "
         "neither written nor read back"),
)
"""Adjacent pairs fused under compile (adjacent on the compute stream, the second waiting only for the first)."""


def runs_eager_kernels(sc: Scenario) -> bool:
    """Whether the scenario runs PyTorch ops rather than fused kernels: its framework has a `compile` option, or
    it is `training.autocast`'s plain PyTorch code (the replay's model, plan/autocast_saved.py)."""
    return "compile" in sc.framework.spec.options or sc.training.autocast


def compiled(sc: Scenario) -> bool:
    return "compile" in sc.framework.spec.options and bool(sc.framework.option("compile"))


def _is_cast(op: Compute) -> bool:
    return op.kind == "elementwise" and op.name.startswith("fp8_cast_")


def _cast_tensors(op: Compute) -> int:
    """Tensors a cast op quantizes: the input and the weight forward, the output gradient backward."""
    return 1 if op.name.endswith("_bwd") else 2


def eager_op(op: Compute) -> Compute:
    """`op` as PyTorch runs it without compile: its eager chain's bytes, one launch per kernel (`repeat`)."""
    if op.kind != "elementwise":
        return op
    bwd = op.name.endswith("_bwd")
    if _is_cast(op):
        # bytes per element of the fused cast (`Fp8Casts.per_element`): forward in its shape, backward from its size
        per_elt = op.bytes / op.shape[0] if bwd else op.shape[-1]
        fused_cast = 5.0  # TORCHAO_CAST_EAGER_BYTES' fused form; the rest of per_elt is the transposed copy
        return replace(op, bytes=op.bytes * (per_elt - fused_cast + TORCHAO_CAST_EAGER_BYTES) / per_elt,
                       repeat=CAST_KERNELS["eager"] * _cast_tensors(op))
    chain = next((c for k, c in EAGER_CHAINS.items() if op.name.startswith(k)), None)
    if chain is None:
        return op
    return replace(op, bytes=op.bytes * chain.factor(bwd), repeat=chain.eager_kernels[bwd])


def as_probed(op: Compute, eager_plan: bool) -> tuple[Compute, float]:
    """`op` as the memory-bound probe ran it, and the factor from the probe's time to `op`'s. The probe runs RoPE
    and SwiGLU as PyTorch's eager chains (calibrate/probes/memory.py): an eager plan's op is that chain already;
    a fused kernel on the same tensor moves fused/eager of the chain's bytes at the bandwidth the chain reached
    on it (so a profile point prices both, whatever sizes it was measured at)."""
    chain = next((c for k, c in EAGER_CHAINS.items() if op.name.startswith(k)), None)
    if eager_plan or op.kind != "elementwise" or chain is None:
        return op, 1.0
    return eager_op(op), 1.0 / chain.factor(op.name.endswith("_bwd"))


def eager_chains(sc: Scenario) -> bool:
    """Whether the plan's RoPE and SwiGLU ops are PyTorch's eager chains (eager kernels, no compile)."""
    return runs_eager_kernels(sc) and not compiled(sc)


def compiled_op(op: Compute) -> Compute:
    """`op` as one Inductor kernel (its plan bytes); a tensorwise FP8 cast is two kernels per tensor."""
    if _is_cast(op):
        return replace(op, repeat=CAST_KERNELS["compiled"] * _cast_tensors(op))
    return op


def fused_pair(a: Compute, b: Compute, pair: Pair) -> Compute:
    """One kernel for `a` then `b`: their bytes less `reads_saved` passes over b's tensor (the consumer's
    elements x 2 B per pass; a cast's amax read is of its input, `shape[0]` elements) and, when `write_saved`,
    one pass for the producer's dead output; launches a.repeat + b.repeat - 1."""
    if _is_cast(b):
        elements = b.shape[0]
        per_pass = 2.0 * elements
    else:
        elements = b.shape[0] if b.shape else 0
        per_pass = b.bytes / _passes(b)
    saved = pair.reads_saved * per_pass + (per_pass if pair.write_saved else 0.0)
    return Compute(f"{a.name}+{b.name}", "elementwise", 0.0, max(0.0, a.bytes + b.bytes - saved), a.dtype,
                   (elements,), a.repeat + b.repeat - 1)


def _passes(op: Compute) -> float:
    bwd = op.name.endswith("_bwd")
    for prefix, passes in (("norm", NORM_PASSES), ("residual", RESIDUAL_PASSES)):
        if op.name.startswith(prefix):
            return passes[bwd]
    raise ValueError(f"no pass count for {op.name}")


def _pair_of(a: Compute, b: Compute) -> Pair | None:
    if a.kind != "elementwise" or b.kind != "elementwise":
        return None
    bwd_a, bwd_b = a.name.endswith("_bwd"), b.name.endswith("_bwd")
    for p in PAIRS:
        if (a.name.startswith(p.first) and b.name.startswith(p.second) and bwd_a == bwd_b
                and (p.first.endswith("_bwd") or not bwd_a)):
            return p
    return None


def fuse_adjacent(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
    """Merge each `PAIRS` pair of compute nodes that are neighbours in the list, the second waiting only for
    the first (no collective between them: its input would have to be in HBM)."""
    out = list(nodes)
    i = 0
    while i + 1 < len(out):
        a, b = out[i], out[i + 1]
        pair = _pair_of(a.op, b.op) if isinstance(a.op, Compute) and isinstance(b.op, Compute) else None
        if pair is None or b.deps != (i,) or a.tag != b.tag:
            i += 1
            continue
        merged = Node(fused_pair(a.op, b.op, pair), a.deps, a.tag)
        rest = [Node(n.op, tuple(sorted({(d if d < i + 1 else (i if d == i + 1 else d - 1)) for d in n.deps})), n.tag)
                for n in out[i + 2:]]
        out = out[:i] + [merged] + rest
    return tuple(out)


def _rewrite(nodes: tuple[Node, ...], fn) -> tuple[Node, ...]:
    return tuple(Node(fn(n.op), n.deps, n.tag) if isinstance(n.op, Compute) else n for n in nodes)


def apply(sc: Scenario, passes: LayerPasses) -> LayerPasses:
    """One layer's passes as the framework's kernels run them (module docstring); unchanged for a framework
    that runs fused kernels."""
    if not runs_eager_kernels(sc):
        return passes
    if not compiled(sc):
        return replace(passes, F=_rewrite(passes.F, eager_op), B=_rewrite(passes.B, eager_op))
    return replace(passes, F=fuse_adjacent(_rewrite(passes.F, compiled_op)),
                   B=fuse_adjacent(_rewrite(passes.B, compiled_op)))

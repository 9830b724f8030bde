"""The calibration profile's schema: the point types of each table (GEMM, attention, elementwise,
optimizer, framework overhead, collectives), their provenance, and the accepted ranges of a lookup.
`profile.py` reads a file into these and answers lookups; `calibrate/` writes them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from .nccl_algorithms import COLLECTIVES

MIN_TIME_S = 1e-9
"""No kernel, copy or collective completes in under a nanosecond (a GPU kernel launch alone is ~2 us)."""
MAX_DEVICE_FLOPS = 1e17
"""A measured GEMM or attention point faster than 100 PFLOP/s (20x B200's FP8 peak) is a bad time, not a
device: 1e-300 s GEMMs once gave an MFU of 5."""

SCHEMA_VERSION = 1
"""Bump when a field changes meaning; readers refuse other versions with a message naming both."""

GEMM_DIM_BELOW = 2.0
"""A GEMM dimension may sit this factor under the smallest measured one (throughput falls fast below)."""
GEMM_DIM_ABOVE = 64.0
"""...and this factor over the largest: a bigger GEMM is more of the same tiles, at the saturated throughput."""
WORK_BELOW = 2.0
WORK_ABOVE = 64.0
"""Attention work (b*heads*s_q*s_kv) range around the measured points."""
D_HEAD_NEAR = 1.5
"""An unmeasured head dim outside the measured ones borrows the nearest within this factor (time ~ d)."""
STREAM_BELOW = 4.0
STREAM_ABOVE = 64.0
"""Memory-bound kernels and the optimizer: a launch floor below, constant bandwidth above."""
COMM_ABOVE = 16.0
"""Collectives above the largest measured size: constant busbw (the largest sizes are bandwidth-bound)."""

GEMM_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
PHASES = ("fwd", "bwd")
TIERS = ("intra_node", "inter_node")
MOE_KINDS = ("moe_permute", "moe_unpermute", "row_gather")
"""The MoE routing's gathers (`_KIND_OF_NAME` says what each is)."""
ELEMENTWISE_KINDS = ("rmsnorm", "layernorm", "swiglu", "gelu", "rope", "residual_add", "cross_entropy",
                     "embedding", "copy", "upcast") + MOE_KINDS

_KIND_OF_NAME = (
    ("final_norm", ("rmsnorm", "layernorm")),
    ("norm", ("rmsnorm", "layernorm")),
    ("swiglu", ("swiglu",)),
    ("expert_act", ("swiglu", "gelu")),
    ("gelu", ("gelu",)),
    ("rope", ("rope",)),
    ("residual", ("residual_add",)),
    ("cross_entropy", ("cross_entropy",)),
    ("embedding", ("embedding",)),
    ("permute", ("moe_permute",)),
    ("unpermute", ("moe_unpermute",)),
    ("ep_sort", ("row_gather",)),
    ("ep_unsort", ("row_gather",)),
    ("upcast", ("upcast",)),
    ("sum_", ("residual_add",)),
)
"""simulator.ops elementwise op names -> measured kernels, best match first; every name falls back to a
device copy of the same bytes (profiles measured before a kind existed). Norms try RMSNorm first: the op
does not say which norm the architecture uses (calibrate --scenario measures the right one). The MoE
kinds are the routing's gathers as the replay runs them (calibrate/replay/experts.py): `moe_permute` top-k
routing and the gather into expert order, `moe_unpermute` the inverse gather and the weighted sum over
the k slots, `row_gather` a stable sort of rows by expert and its gather (EP's local sort, and unsort).
`upcast` is a 16-bit tensor copied to a new fp32 one (`x.float()`, autograd's backward of a cast to bf16): PyTorch
runs it through its generic casting copy kernel, not the vectorized one a same-dtype copy or a downcast gets (about
half the device copy's GB/s on an H200, validation/results/step_trace_h200.md). `sum_` ops add fp32 gradients
(read two, write one: a residual add's bytes)."""


def elementwise_kinds(name: str) -> tuple[str, ...]:
    """Measured kernels that stand for the `simulator.ops` elementwise op `name`, best first."""
    for prefix, kinds in _KIND_OF_NAME:
        if name.startswith(prefix):
            return kinds + ("copy",)
    return ("copy",)


def elementwise_phase(name: str) -> str:
    return "bwd" if name.endswith("_bwd") else "fwd"


# ----------------------------------------------------------------------------------- the file's schema

@dataclass(frozen=True, kw_only=True)
class Provenance:
    device_type: str = field(metadata={"choices": ("cuda", "cpu")})
    device_name: str
    """torch.cuda.get_device_name, or the CPU model for --device cpu."""
    device_index: int = 0
    device_count: int = field(default=1, metadata={"min": 1})
    """Devices visible (GPUs for CUDA, gloo processes for CPU collectives)."""
    torch_version: str
    cuda_version: Optional[str] = None
    driver_version: Optional[str] = None
    cudnn_version: Optional[str] = None
    nccl_version: Optional[str] = None
    cpu_model: str
    cpu_count: int = field(metadata={"min": 1})
    threads: int = field(metadata={"min": 1})
    """torch intra-op threads the kernels ran with."""
    hostname: str
    date: str
    """UTC, ISO 8601."""
    command: str
    python_version: str
    clustersim_version: str
    git_commit: Optional[str] = None
    load_average_start: Optional[list[float]] = None
    """1/5/15-minute load averages when the run started and ended (a loaded host gives noisy numbers)."""
    load_average_end: Optional[list[float]] = None
    quick: bool = False
    scenario: Optional[str] = None
    """The --scenario file whose shapes were measured, if any."""
    wall_s: float = field(default=0.0, metadata={"min": 0.0})
    merged_from: Optional[list[str]] = None
    """Other runs whose points this file holds (whole tables, or kinds the run above did not measure), each as
    'TABLES: COMMAND (DATE, where)'; the fields above describe the run that measured the rest."""


@dataclass(frozen=True, kw_only=True)
class SpecRef:
    """The topology GPU the device was matched to, for achieved-vs-peak figures."""
    topology: str
    gpu_name: str
    peak_tflops: dict[str, float] = field(default_factory=dict)
    hbm_bandwidth_gbs: float = 0.0


@dataclass(frozen=True, kw_only=True)
class _Timed:
    """What every measured point carries (calibrate/timing.py): the median, mean and spread over repeats."""
    time_s: float = field(metadata={"min": 0.0})
    """Median over repeats."""
    mean_s: Optional[float] = field(default=None, metadata={"min": 0.0})
    """Mean over repeats (profiles written before it have none)."""
    p10_s: float = field(metadata={"min": 0.0})
    p90_s: float = field(metadata={"min": 0.0})
    reps: int = field(metadata={"min": 1})

    @property
    def cost_s(self) -> float:
        """Seconds the simulator prices the point at: the mean when measured, else the median. A step runs
        many such ops and pays their expected time, which the mean estimates and the median does not when
        the repeats are skewed (a shared CPU host; on a GPU the two agree)."""
        return self.time_s if self.mean_s is None else self.mean_s


@dataclass(frozen=True, kw_only=True)
class GemmPoint(_Timed):
    dtype: str = field(metadata={"choices": GEMM_DTYPES})
    m: int = field(metadata={"min": 1})
    n: int = field(metadata={"min": 1})
    k: int = field(metadata={"min": 1})
    """C[m, n] = A[m, k] @ B[k, n], FLOPs 2mnk (simulator.ops.gemm)."""
    set: str = field(default="grid", metadata={"choices": ("grid", "transformer", "scenario")})
    """grid: the full m x n x k product the interpolation uses; transformer / scenario: exact shapes."""
    tflops: float = field(metadata={"min": 0.0})


@dataclass(frozen=True, kw_only=True)
class AttentionPoint(_Timed):
    dtype: str = field(metadata={"choices": GEMM_DTYPES})
    backend: str
    """default (what SDPA picks unasked) | flash | efficient | cudnn | math."""
    batch_heads: int = field(metadata={"min": 1})
    s_q: int = field(metadata={"min": 1})
    s_kv: int = field(metadata={"min": 1})
    d_head: int = field(metadata={"min": 1})
    causal: bool
    phase: str = field(metadata={"choices": PHASES})
    tflops: float = field(metadata={"min": 0.0})
    """FLOPs as simulator.ops counts them: 4*bh*s_q*s_kv*d, x0.5 causal, x2.5 backward."""


@dataclass(frozen=True, kw_only=True)
class ElementwisePoint(_Timed):
    op: str = field(metadata={"choices": ELEMENTWISE_KINDS})
    phase: str = field(metadata={"choices": PHASES})
    dtype: str
    elements: int = field(metadata={"min": 1})
    """As simulator.ops counts them (norm: tokens*hidden, swiglu: tokens*ffn, cross_entropy: tokens*vocab)."""
    bytes: float = field(metadata={"min": 0.0})
    """HBM bytes by simulator.ops's convention (elements x passes x element bytes)."""
    gbs: float = field(metadata={"min": 0.0})


@dataclass(frozen=True, kw_only=True)
class CopyPoint(_Timed):
    """Host-device copies (recorded for offload studies; not priced by the simulator yet)."""
    direction: str = field(metadata={"choices": ("h2d", "d2h")})
    pinned: bool
    bytes: float = field(metadata={"min": 0.0})
    gbs: float = field(metadata={"min": 0.0})


@dataclass(frozen=True, kw_only=True)
class OptimizerPoint(_Timed):
    optimizer: str = field(default="adamw", metadata={"choices": ("adamw",)})
    impl: str = field(metadata={"choices": ("default", "foreach", "fused", "for_loop")})
    """default = what torch.optim.AdamW picks unasked (foreach on CUDA, a for loop on CPU)."""
    params: int = field(metadata={"min": 1})
    tensors: int = field(metadata={"min": 1})


FRAMEWORK_MODES = ("plain", "eager", "dtensor", "fsdp")
FRAMEWORK_LINEARS = {"qkv": 3, "fc1": 2}
"""nn.Linear calls behind one simulator.ops GEMM (separate wq/wk/wv; SwiGLU's w1 and w3): each pays the
per-module host overhead. Assumes a gated MLP for fc1 (the Llama models the replay runs)."""
FRAMEWORK_OPS = ("linear", "elementwise", "optimizer", "tp_block", "collective", "fsdp_block", "fsdp_collectives")


@dataclass(frozen=True, kw_only=True)
class FrameworkPoint(_Timed):
    """Host (CPU) time per op of a tiny op, kernel negligible (calibrate/probes/framework.py): plain = no
    autograd, plain tensors (what the kernel probes include); eager = nn.Module + autograd recording; dtensor =
    through DTensor (TP's Colwise/Rowwise nn.Linear, a Shard DTensor op; for optimizer: one AdamW step per
    DTensor parameter, as FSDP2 and TP hold them). Simulator ops pay (mode - plain) on top of the kernel."""
    mode: str = field(metadata={"choices": FRAMEWORK_MODES})
    op: str = field(metadata={"choices": FRAMEWORK_OPS})
    phase: str = field(metadata={"choices": ("fwd", "bwd", "step")})
    """fwd: the op; bwd: its backward (for linear: dgrad and wgrad together); step: per parameter tensor."""
    bytes: float = field(default=0.0, metadata={"min": 0.0})
    """Size of the measured shape: tp_block / collective: one TP collective's full buffer; fsdp_block /
    fsdp_collectives: one FSDP unit's unsharded parameter bytes; 0 for the other ops (and for tp_block rows
    from profiles that measured one tiny shape only)."""


@dataclass(frozen=True, kw_only=True)
class CollectivePoint(_Timed):
    collective: str = field(metadata={"choices": COLLECTIVES})
    backend: str
    group_size: int = field(metadata={"min": 2})
    tier: str = field(default="intra_node", metadata={"choices": TIERS})
    size_bytes: float = field(metadata={"min": 1.0})
    """nccl-tests `size`: the full buffer (n x the per-rank part for all-gather and reduce-scatter)."""
    dtype: str = "fp32"
    algbw_gbs: float = field(metadata={"min": 0.0})
    busbw_gbs: float = field(metadata={"min": 0.0})
    """algbw x factor (docs/ecosystem.md §2.4): all_reduce 2(n-1)/n, all_gather/reduce_scatter/all_to_all (n-1)/n, send_recv 1."""
    in_step_s: Optional[float] = field(default=None, metadata={"min": 0.0})
    """CPU (gloo) only: the collective's cost inside a training step, issued before a few ms of compute and
    waited for after it, less that compute alone (calibrate/collectives.py `_in_step`). On a host whose
    every core runs a rank gloo's threads have no core of their own, so this exceeds `time_s`; the
    simulator prices the collective with it when present."""


@dataclass(frozen=True, kw_only=True)
class Check:
    """A probe's reference check (llm.c dev/cuda): its kernels against a float64 (or plain) reference."""
    probe: str
    what: str
    max_error: Optional[float]
    """null when the error was not a finite number (the probe's output held NaN or Inf)."""
    tolerance: float
    ok: bool


@dataclass(frozen=True, kw_only=True)
class Skipped:
    table: str
    what: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class Curve:
    """y(x) through points sorted by x: piecewise linear in log-log inside; the caller's rule outside."""
    xs: tuple[float, ...]
    ys: tuple[float, ...]

    @staticmethod
    def of(pairs) -> "Curve":
        """From (x, y) pairs; several y at one x are combined by their geometric mean."""
        by_x: dict[float, list[float]] = {}
        for x, y in pairs:
            by_x.setdefault(float(x), []).append(float(y))
        xs = sorted(by_x)
        ys = [math.exp(sum(math.log(v) for v in by_x[x]) / len(by_x[x])) for x in xs]
        return Curve(xs=tuple(xs), ys=tuple(ys))

    def inside(self, x: float) -> float:
        """Interpolated, held at the end values outside the points."""
        return log_interp(min(max(x, self.xs[0]), self.xs[-1]), list(self.xs), list(self.ys))

    def log_linear(self, x: float) -> float:
        """Interpolated; below the first point, the first segment's log-log slope continued."""
        return log_interp(min(x, self.xs[-1]), list(self.xs), list(self.ys))

    def streaming(self, x: float, below: float, above: float) -> float | None:
        """Memory-bound rule: floor at the first point down to x0/below, linear in x up to xn*above."""
        if x <= 0 or x < self.xs[0] / below or x > self.xs[-1] * above:
            return None
        if x > self.xs[-1]:
            return self.ys[-1] * x / self.xs[-1]
        return self.inside(x)


def log_interp(x: float, xs: list[float], ys: list[float]) -> float:
    """Piecewise-linear interpolation of log(y) over log(x), clamped to the end slopes."""
    if len(xs) == 1:
        return ys[0] * x / xs[0]
    lx = [math.log(v) for v in xs]
    ly = [math.log(max(v, 1e-30)) for v in ys]
    t = math.log(x)
    if t <= lx[0]:
        i = 0
    elif t >= lx[-1]:
        i = len(lx) - 2
    else:
        i = max(j for j in range(len(lx) - 1) if lx[j] <= t)
    slope = (ly[i + 1] - ly[i]) / (lx[i + 1] - lx[i]) if lx[i + 1] != lx[i] else 0.0
    return math.exp(ly[i] + slope * (t - lx[i]))

"""One cost-model interface: how long an op takes on this cluster.

`CostModel.compute_time(op)` prices a `Compute` op and `CostModel.comm_time(op, group)` a `Comm` on a
process group. The spec-based default is a roofline with stated efficiency curves (below, with
sources); a calibration profile (`cluster.profile`) and the topology-aware collective algorithms plug in
behind the same two methods, so the analytic estimate and the engine never change when they do.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from . import collectives
from ..plan.eager_attention import EAGER_DROPOUT, eager_kernels
from ..plan.fp8_attention import fp8_attention_recipe
from ..plan.fusion import as_probed, eager_chains
from .ep_sm_share import ep_sm_share
from .gemm_curve import EPILOGUE_SERIAL, result_bytes
from .kernel_data import GpuKernels, gpu_kernels, load_data, published_gpus
from .sustained import SUSTAINED_GEMM, sustained_fraction
from ..errors import ScenarioError
from ..frameworks.spec import BLOCK_SCALED_RECIPES
from ..plan.layout import GroupShape
from ..plan.opgraph import Comm, Compute
from ..topology import Topology

# --- spec-based efficiency curves (the "default profile") --------------------------------------
GEMM_PEAK_EFFICIENCY = 0.78
"""Large bf16 GEMMs on H100 reach ~75-80 % of dense peak with cuBLAS (FA3 §1 cites 80-90 % for tuned
GEMMs; we take the lower end for the shapes transformers use). Replaced by measurements in a profile."""
GEMM_HALF_EFFICIENCY_S = 2.0e-6
"""A GEMM whose ideal time at peak is this short reaches half its peak efficiency: small GEMMs do not
fill the device (wave quantisation, launch and tail). 2 us = 2e9 FLOPs on an H100; as a time it carries
over to other devices (on the CPU profile the fitted knee is ~1e6 FLOPs at ~0.12 TFLOP/s, ~8 us)."""
ATTENTION_EFFICIENCY = {"fwd": 0.55, "bwd": 0.45}
"""FlashAttention-2/3 on H100: FA2 ~35 % of peak, FA3 fwd up to 75 % (FA3 abstract); a middle value."""
ATTENTION_HEAD_DIM_FACTOR = ((64, 0.895), (128, 1.0))
"""FlashAttention's efficiency falls with the head dimension below 128 (fewer FLOPs per byte of Q/K/V tile
loaded): FA2 on H100 SXM5 at 4k tokens runs 284 / 319 TFLOP/s forward (causal) and 279 / 310 backward at head
dim 64 / 128 (FA3 paper, arXiv 2407.08608, Figs. 4-5), 0.89 and 0.90 of its head-dim-128 speed. The
efficiencies above (and a stack's `attention_fwd` / `attention_bwd`) hold at 128; between the points the factor
is interpolated linearly, outside them it is the nearest point's (above 128 not modelled). Applied to every
attention op; eager attention is bound by its scores' HBM traffic anyway. Playbook fit split: MAPE 34.9 ->
34.8 %, median APE 5.71 -> 5.66 %, the 1B's (head dim 64) one-node tp 1 runs 1.03 -> 1.01 of measured; the
GEMM efficiency stays 0.55 (0.56 / 0.57: median 5.64 / 5.71 %)."""
HBM_EFFICIENCY = 0.80
"""Streaming memory-bound kernels reach 80-90 % of HBM peak (docs/modeling.md §7.3, assumption)."""
EAGER_HBM_EFFICIENCY = 0.50
"""Eager attention's kernels move their score-sized tensors at this share of HBM peak (`plan/eager_attention.py`):
fitted on FlashAttention-2's published PyTorch-attention baseline on an A100 80GB (20 points, head dim 64 / 128,
causal or not, sequence 512-8k; validation/references/kernels/fa2_a100_attention.yaml), priced as that benchmark's
kernels (the eager list plus its causal mask's add): time MAPE 38.5 % at HBM_EFFICIENCY's 0.80, 11.2 % at 0.45,
6.7 % at 0.48, 6.2 % at 0.50, 7.3 % at 0.52, 10.8 % at 0.55 (`python validation/eager_attention_a100.py`). Row
softmaxes and score-sized GEMM outputs at head-dim K do not stream like a copy. Transferred to every GPU."""
KERNEL_OVERHEAD_S = 4e-6
"""Per-kernel launch/tail gap on the GPU stream (assumption, a few microseconds)."""


def attention_head_dim_factor(d_head: float) -> float:
    """FlashAttention's speed at head dimension `d_head` relative to 128 (`ATTENTION_HEAD_DIM_FACTOR`)."""
    (d0, f0), (d1, f1) = ATTENTION_HEAD_DIM_FACTOR
    d = min(max(float(d_head), d0), d1)
    return f0 + (f1 - f0) * (d - d0) / (d1 - d0)


@dataclass(frozen=True)
class CommSpec:
    """Alpha-beta parameters for one group shape: time = steps*alpha + bytes_on_wire / bandwidth."""
    alpha_s: float
    bandwidth_Bps: float


@dataclass
class CostModel:
    topology: Topology
    precision: str = "bf16"
    profile: object | None = None
    """A calibration profile (calibrate/profile schema) consulted first when given."""
    efficiency: dict = field(default_factory=dict)
    """`cluster.efficiency` overrides (`efficiency_spec.EFFICIENCY_KEYS`)."""
    framework: dict = field(default_factory=dict)
    """How the step runs on the host, for the profile's `framework` table (Profile.framework_overhead):
    mode ('eager' | 'dtensor'), fsdp (ZeRO through FSDP2), dtensor_names, param_tensors. Empty: eager, no DTensor."""
    attention_kernel: str = "cudnn"
    """The attention kernel family the framework runs (`frameworks/*.yaml` attention_kernel, or an option's:
    `kernel_data.FAMILIES`); "eager" under `training.attention: eager` (`plan/eager_attention.py`)."""
    ep_dispatcher: str = "alltoall"
    """`parallel.ep_dispatcher`: whose kernels run the expert all-to-alls, and so how many SMs they hold
    beside compute (`sm_share`, `ep_sm_share.py`)."""
    optimizer_impl: str | None = None
    """Adam's implementation (`training.optimizer_impl`, else the framework's): which of a profile's optimizer
    curves prices the step (`Profile.optimizer_time`)."""
    eager_chains: bool = False
    """The plan's RoPE and SwiGLU are PyTorch's eager chains (`plan/fusion.py eager_chains`): a profile's
    memory-bound points, measured on those chains, price them as measured and a fused kernel by its bytes."""
    block_scaled_fp8: bool = False
    """The FP8 GEMMs scale 32-value blocks (Transformer Engine's MXFP8: `frameworks/spec.py` BLOCK_SCALED_RECIPES):
    they run at `cluster.efficiency.gemm_mxfp8_vs_fp8` times the per-tensor FP8 GEMMs' speed."""
    cudnn_version: str | None = None
    """`cluster.cudnn_version`: the cuDNN release whose published attention points price cuDNN attention
    (`cudnn_release.py`); None: the newest published."""
    mla_head_dims: tuple | None = None
    """Multi-head latent attention's (query-key, value) head dims (`model.mla`), which the GPU's `mla_attention`
    tables price; None: the model's attention has one head dim."""
    fp8_attention: str | None = None
    """The FP8 attention recipe (`plan/fp8_attention.py`: 'delayed' | 'tensorwise') where the attention runs in FP8,
    for the report's kernel line; None: 16-bit attention."""
    published_kernels: bool = True
    """Price GEMMs and attention from the GPU's published kernel points (`kernel_data.py`); False: the spec-based
    constants only (validation/kernel_ceiling.py's comparison column)."""
    _dp_topologies: dict = field(default_factory=dict, repr=False, compare=False)
    _kernels: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """The published curves of the GPU, once looked up (`kernels`); not carried over by dataclasses.replace."""

    def __post_init__(self) -> None:
        chip = self.topology.gpu.chip
        if chip is not None and chip not in published_gpus():
            raise ScenarioError(f"topology {self.topology.name}: gpu.chip", f"{chip!r} has no published kernel data",
                                " | ".join(published_gpus()))

    # ------------------------------------------------------------------ compute
    def peak_flops(self, dtype: str) -> float:
        return self.topology.peak_flops(dtype)

    def kernels(self) -> GpuKernels | None:
        """The published kernel curves of this topology's GPU (`kernel_data.py`); None for a GPU without points."""
        if not self.published_kernels:
            return None
        if "kernels" not in self._kernels:  # looked up once per model: compute_time asks for every op
            gpu = self.topology.gpu
            hbm = gpu.hbm_bandwidth_gbs * 1e9 * HBM_EFFICIENCY
            # Published points were measured at rated power: efficiencies are fractions of the datasheet peak,
            # which a power limit then scales like the peak itself (gpu.power_limit_w).
            peaks = tuple(sorted((d, self.topology.nominal_peak_flops(d)) for d in gpu.peak_tflops))
            self._kernels["kernels"] = gpu_kernels(gpu.kernel_chip, peaks, hbm, GEMM_PEAK_EFFICIENCY,
                                                   GEMM_HALF_EFFICIENCY_S, KERNEL_OVERHEAD_S,
                                                   cudnn_version=self.cudnn_version)
        return self._kernels["kernels"]

    def gemm_curve(self, dtype: str) -> tuple[float, float]:
        """(eta_max, knee seconds) of this GPU's GEMMs in `dtype`: `cluster.efficiency.gemm` with the spec knee when
        given (a stack's fitted fraction of peak replaces the curve), else the published curve (else the constants)
        times the fraction of it a training step sustains on this GPU (`sustained.py`)."""
        if "gemm" in self.efficiency:
            return self.efficiency["gemm"], GEMM_HALF_EFFICIENCY_S
        eta, knee = self._per_tensor_curve(dtype)
        if dtype == "fp8" and self.block_scaled_fp8:
            eta *= self.efficiency.get("gemm_mxfp8_vs_fp8", 1.0)
        return eta, knee

    def _per_tensor_curve(self, dtype: str) -> tuple[float, float]:
        """`gemm_curve` for per-tensor scaled FP8 and every other dtype."""
        k = self.kernels()
        curve = k.gemm.get(dtype) if k is not None else None
        knee = curve.half_efficiency_s if curve is not None else GEMM_HALF_EFFICIENCY_S
        if dtype == "fp8" and "gemm_fp8" in self.efficiency:  # a stack's FP8 GEMMs at its own fraction, the curve's knee
            return self.efficiency["gemm_fp8"], knee
        if dtype == "fp8" and "gemm_fp8_vs_bf16" in self.efficiency:  # ... or at a multiple of the BF16 GEMMs' share
            return self.efficiency["gemm_fp8_vs_bf16"] * self.sustained_bf16_efficiency(), knee
        eta = curve.peak_efficiency if curve is not None else GEMM_PEAK_EFFICIENCY
        return eta * self.sustained_gemm_fraction(), knee

    def _bf16_eta_max(self) -> float:
        """The published BF16 curve's eta_max; the spec constant where there is none."""
        k = self.kernels()
        bf16 = k.gemm.get("bf16") if k is not None else None
        return bf16.peak_efficiency if bf16 is not None else GEMM_PEAK_EFFICIENCY

    def sustained_bf16_efficiency(self) -> float:
        """The fraction of the BF16 dense peak large BF16 GEMMs sustain in a training step on this GPU: the BF16
        curve's eta_max times `sustained_gemm_fraction`."""
        return self._bf16_eta_max() * self.sustained_gemm_fraction()

    def sustained_gemm_fraction(self) -> float:
        """The fraction of the published GEMM speed this GPU sustains in a training step (`sustained.py`), taken
        against its BF16 curve's eta_max (the spec constant where it has none); 1 with published kernels off."""
        if not self.published_kernels:
            return 1.0
        return sustained_fraction(self.topology.gpu.kernel_chip, self._bf16_eta_max())

    def gemm_efficiency(self, flops: float, dtype: str = "bf16") -> float:
        """eta_max * F / (F + F_half), F_half = peak * knee (`gemm_curve`)."""
        eta, knee = self.gemm_curve(dtype)
        half = self.peak_flops(dtype) * knee
        return eta * flops / (flops + half)

    def attention_efficiency(self, op: Compute) -> float:
        """Fraction of the bf16 peak an attention kernel reaches: `cluster.efficiency.attention_<phase>` (at head dim
        128, scaled by `attention_head_dim_factor`) when given, else the published table of `attention_kernel` at the
        op's mask, head dim and sequence length (geometric mean of query and key lengths; MLA by its own table where the
        GPU has one, `mla_head_dims`; the Triton FlashAttention family times `cluster.efficiency.triton_fa_vs_transfer`),
        else the constants; an FP8 attention op at that times `fp8_attention_ratio`."""
        return self._attention_efficiency_bf16(op) * self.fp8_attention_ratio(op)

    def fp8_attention_ratio(self, op: Compute) -> float:
        """1 for a 16-bit attention op; for an FP8 one (`plan/fp8_attention.py`), cuDNN's published FP8 over BF16 speed
        at its phase, mask, head dim and sequence length on this GPU (`GpuKernels.fp8_attention_ratio`). A GPU
        without FP8 attention points cannot price it: `ScenarioError`."""
        if op.dtype != "fp8" or op.kind != "attention":
            return 1.0
        b, s_q, s_kv, d_head, frac = op.shape[:5]
        r = self.fp8_attention_kernels().fp8_attention_ratio(op.shape[5], frac < 1.0, d_head, math.sqrt(s_q * s_kv))
        if r is None:
            raise ScenarioError("framework.fp8_dot_product_attention",
                                f"no published FP8 attention {op.shape[5]} figure for {self.topology.gpu.kernel_chip}")
        return r

    def fp8_attention_kernels(self) -> GpuKernels:
        """The GPU's published kernels, which price FP8 attention; `ScenarioError` where they hold no FP8 attention
        figure (`kernel_data.json` fp8_attention)."""
        k = self.kernels()
        if k is None or not k.fp8_ratios:
            have = sorted(n for n in published_gpus() if load_data()["gpus"][n].get("fp8_attention"))
            raise ScenarioError("framework.fp8_dot_product_attention",
                                f"true on {self.topology.gpu.kernel_chip}, which has no published FP8 attention figure "
                                "(simulator/cost/kernel_data.json fp8_attention)",
                                f"false, or a GPU (gpu.chip) of {' | '.join(have)}")
        return k

    def _attention_efficiency_bf16(self, op: Compute) -> float:
        """`attention_efficiency` of the op's 16-bit kernel."""
        phase = op.shape[5] if len(op.shape) > 5 else "fwd"
        key = f"attention_{phase}"
        if key not in self.efficiency:
            k = self.kernels()
            if k is not None:
                b, s_q, s_kv, d_head, frac = op.shape[:5]
                eff = k.attention_efficiency(self.attention_kernel, phase, frac < 1.0, d_head, math.sqrt(s_q * s_kv),
                                             self.mla_head_dims)
                if eff is not None:
                    if self.attention_kernel == "triton_fa":  # the kernel against its transfer's reading (composer.yaml)
                        eff *= self.efficiency.get("triton_fa_vs_transfer", 1.0)
                    return eff
        return self.efficiency.get(key, ATTENTION_EFFICIENCY[phase]) * attention_head_dim_factor(op.shape[3])

    def kernel_source(self) -> str:
        """Where this model's kernel speeds come from, for the report: published points or the spec constants."""
        k = self.kernels()
        gpu = self.topology.gpu
        over = sorted(x for x in self.efficiency if x == "gemm" or x.startswith("attention_"))
        if k is None:
            base = f"spec-based constants (no published kernel points for {gpu.name})"
        else:
            fitted = sorted(d for d, c in k.gemm.items() if c.points)
            fitted = [f"{', '.join(fitted)} (on {k.gemm_from}'s points: the same dense peaks)"] if fitted and k.gemm_from else fitted
            how = {"fp4": "fitted FP4/BF16 ratio (transferred, not fitted here)"}
            moved = sorted(f"{d} from bf16 by {c.transferred_from}'s {how.get(d, 'max-achievable ratio')}"
                           for d, c in k.gemm.items() if c.transferred_from)
            capped = sorted(d for d, c in k.gemm.items() if not c.points and not c.transferred_from)
            gemm = "; ".join(x for x in (f"GEMM {', '.join(fitted)} fitted to measured shapes" if fitted else "",
                                         f"GEMM {', '.join(moved)}" if moved else "",
                                         f"GEMM {', '.join(capped)} spec constants under a published ceiling"
                                         + (f" of {k.gemm_from} (the same dense peaks)" if k.gemm_from else "")
                                         if capped else "") if x) or "GEMM spec constants"
            chip = gpu.name if gpu.chip in (None, gpu.name) else f"{gpu.chip}, the chip of {gpu.name}"
            attention = (f"eager kernels, their traffic at {EAGER_HBM_EFFICIENCY:.2f} of HBM peak (fitted on "
                         "FlashAttention-2's published PyTorch baseline)" if self.attention_kernel == "eager"
                         else k.attention_source(self.attention_kernel) or "spec constants")
            base = f"published kernel points for {chip} ({gemm}; attention {attention})"
        frac = self.sustained_gemm_fraction()
        if frac < 1.0 and "gemm" not in self.efficiency:
            how = "fitted" if SUSTAINED_GEMM[gpu.kernel_chip].source.startswith("fitted") else "transferred, not fitted"
            base += f"; GEMMs at {frac:.2f} of that speed, as training steps sustain it on this GPU ({how}, cost/sustained.py)"
        if gpu.compute_clock_fraction < 1.0:
            by_lock = gpu.locked_clock_fraction < gpu.power_clock_fraction
            why = (f"the SM clock locked at {gpu.locked_clock_mhz:g} MHz (rated {gpu.peak_clock_mhz:g} MHz)" if by_lock
                   else f"the {gpu.power_limit_w:g} W power limit (of {gpu.tdp_w:g} W)")
            base += f"; tensor-core work at {gpu.compute_clock_fraction:.2f} of its rated speed under {why}"
        if k is not None and self.mla_head_dims and any(key[0] == self.attention_kernel and key[3] == self.mla_head_dims
                                                        for key in k.mla):
            base += f"; MLA from its own {self.attention_kernel} tables (head dims {self.mla_head_dims[0]} / {self.mla_head_dims[1]})"
        if self.fp8_attention is not None and k is not None and k.fp8_ratios:
            base += (f"; FP8 attention ({self.fp8_attention} scaling) at cuDNN's published FP8 / BF16 speed of one run "
                     f"({k.fp8_releases}; kernel_data.json fp8_attention)")
        if self.attention_kernel == "triton_fa" and self.efficiency.get("triton_fa_vs_transfer", 1.0) != 1.0:
            base += f"; the Triton attention at {self.efficiency['triton_fa_vs_transfer']:g}x its transfer (cluster.efficiency)"
        return base + (f", overridden by cluster.efficiency {', '.join(over)}" if over else "")

    def spec_compute_time(self, op: Compute) -> float:
        hbm = self.topology.gpu.hbm_bandwidth_gbs * 1e9 * self.efficiency.get("hbm", HBM_EFFICIENCY)
        t_mem = op.bytes / hbm
        if op.kind == "gemm":
            per = op.flops / op.repeat
            t_c = op.flops / (self.peak_flops(op.dtype) * self.gemm_efficiency(per, op.dtype))
            if "gemm" not in self.efficiency and self.kernels() is not None:  # the curves were fitted with it
                t_c += EPILOGUE_SERIAL * result_bytes(op.shape, op.dtype) * op.repeat / hbm
        elif op.kind == "attention" and len(op.shape) > 6:
            return self._eager_attention_time(op)
        elif op.kind == "attention":
            # BF16 tables; FP8 attention (`plan/fp8_attention.py`) at their speed times cuDNN's FP8 / BF16 ratio
            t_c = op.flops / (self.peak_flops("bf16") * self.attention_efficiency(op))
        else:
            t_c = 0.0
        return max(t_c, t_mem) + KERNEL_OVERHEAD_S * op.repeat

    def _eager_attention_time(self, op: Compute) -> float:
        """Eager attention's kernels one after another (`plan/eager_attention.py`), each the longer of its GEMM FLOPs
        on the GPU's GEMM curve and its bytes at `EAGER_HBM_EFFICIENCY` of HBM peak; in bf16 under FP8 training as
        every attention here (fp32 on a CPU profile)."""
        bh, s_q, s_kv, d, _, phase, tag = op.shape
        dtype = "fp32" if op.dtype == "fp32" else "bf16"
        return self.kernels_time(eager_kernels(bh, s_q, s_kv, d, phase, tag == EAGER_DROPOUT, 4 if dtype == "fp32" else 2), dtype)

    def kernels_time(self, kernels, dtype: str = "bf16", hbm_share: float = EAGER_HBM_EFFICIENCY) -> float:
        """Seconds for eager attention's `kernels` (`plan/eager_attention.Kernel`) run one after another, their
        traffic at `hbm_share` of HBM peak (`validation/eager_attention_a100.py` varies it to fit it)."""
        hbm = self.topology.gpu.hbm_bandwidth_gbs * 1e9 * hbm_share
        total = 0.0
        for k in kernels:
            t_c = k.flops / (self.peak_flops(dtype) * self.gemm_efficiency(k.flops, dtype)) if k.flops else 0.0
            total += max(t_c, k.bytes / hbm) + KERNEL_OVERHEAD_S
        return total

    def measured_time(self, op: Compute) -> float | None:
        """Kernel seconds of `op` from the calibration profile, None where it holds nothing that applies (or there
        is none): the optimizer by its implementation, the other ops as the probe ran them (`as_probed`), attention
        from the back end of this scenario's kernel (`Profile.attention_backend`). A profile's GEMM times stand as
        measured, without the published points' in-training share: on an H200 a 1B step's GEMM kernels ran faster
        than calibrate's (`sustained.py`)."""
        if self.profile is None:
            return None
        if op.kind == "optimizer":
            t = self.profile.optimizer_time(op.shape[0], self.optimizer_impl)
            # LAMB, a loss scaler, an amax pass: AdamW's measured speed over their bytes
            return t * op.shape[1] if t is not None and len(op.shape) > 1 else t
        probed, scale = as_probed(op, self.eager_chains)
        t = self.profile.compute_time(probed, self.attention_kernel)
        # a profile times 16-bit attention; FP8 attention at cuDNN's published FP8 / BF16 ratio of it
        return None if t is None else t * scale / self.fp8_attention_ratio(op)

    def compute_time(self, op: Compute) -> float:
        t = self.measured_time(op)
        if t is not None and getattr(self.profile, "framework", None):
            # host time per op (autograd, DTensor dispatch) that the isolated kernel probes do not include
            fw = self.profile.framework_overhead(op, self.framework.get("mode", "eager"),
                                                 tuple(self.framework.get("dtensor_names", ())),
                                                 int(self.framework.get("param_tensors", 0)),
                                                 bool(self.framework.get("dtensor_params", False)))
            t += fw
        if t is None:
            t = self.spec_compute_time(op)
        return t

    # ------------------------------------------------------------------ communication
    def comm_spec(self, group: GroupShape) -> CommSpec:
        """Alpha-beta summary of a group from `collectives.group_alpha_beta`: NCCL's per-step latency
        (intra- or inter-node) and the large-message ring busbw through the group's bottleneck link."""
        alpha, busbw = collectives.group_alpha_beta(self.topology, group)
        return CommSpec(alpha, busbw)

    def comm_time(self, op: Comm, group: GroupShape) -> float:
        """Seconds for `op` on `group`: the profile's measurement or the collectives model, plus the stack's
        per-collective adders (`tp_comm_overhead_s`, `tp_internode_overhead_s`, `dp_comm_overhead_s`)."""
        n = group.size
        if n <= 1 or op.bytes <= 0:
            return 0.0
        overhead = 0.0
        if op.dim == "tp":
            overhead = self.efficiency.get("tp_comm_overhead_s", 0.0)
            if not group.intra_node:  # per extra node the group's ring crosses
                overhead += (group.nodes - 1) * self.efficiency.get("tp_internode_overhead_s", 0.0)
        elif op.dim == "dp":
            overhead = self.efficiency.get("dp_comm_overhead_s", 0.0)
        if self.profile is not None:
            t = self.profile.comm_time(op, group)
            if t is not None:
                if op.dim == "tp" and self.framework.get("mode") == "dtensor":
                    # TP collectives go through DTensor redistributes: host time beyond the raw collective
                    t += self.profile.tp_comm_overhead(op.bytes)
                elif op.dim == "dp" and self.framework.get("fsdp"):
                    # ZeRO collectives go through FSDP2 (copy-in/out, hooks), per unit of op.bytes
                    t += self.profile.zero_comm_overhead(op.bytes)
                return t + overhead
        topology = self.topology
        step = self.efficiency.get("dp_ring_step_latency_us") if op.dim == "dp" else None
        if step is not None and not group.intra_node and op.collective != "all_reduce":
            topology = self._dp_topology(step)
        return collectives.collective_time(topology, op.collective, op.bytes, group) + overhead

    def _dp_topology(self, step_us: float) -> Topology:
        """The topology with DP rings' step latency (`dp_ring_step_latency_us`); one object per value, so
        the collectives' caches keep hitting."""
        t = self._dp_topologies.get(step_us)
        if t is None:
            t = dataclasses.replace(self.topology, fabric=dataclasses.replace(self.topology.fabric, ring_step_latency_us=step_us))
            self._dp_topologies[step_us] = t
        return t

    def host_copy_time(self, nbytes: float) -> float:
        """Seconds to copy `nbytes` between the GPU and host memory on a copy engine: bytes / `gpu.host_link_gbs` (the
        topology's sustained figure with every GPU of the node copying; activation offloading, `plan/offload.py`)."""
        return nbytes / (self.topology.gpu.host_link_gbs * 1e9)

    def host_time(self, op, group: GroupShape) -> float:
        """Seconds the host spends issuing `op` (the GPU cannot start it, nor anything after it, earlier):
        the schedulers keep a host clock per pass, so a pass takes max(its GPU time, its host time).

        One stack effect is priced (`cluster.efficiency`, 0 by default): each TP collective costs
        tp_host_s + tp x tp_host_per_rank_s of host time. Seen in the playbook's nanotron runs: a layer
        never runs faster than a floor that does not grow with the micro-batch, whatever pp; flat in tp in
        the cluster's healthy network state (`playbook.NANOTRON_EFFICIENCY`), growing with tp in its slow
        one (`playbook.SLOW_STATE_TP_HOST`)."""
        if not (isinstance(op, Comm) and op.dim == "tp" and group.size > 1):
            return 0.0
        e = self.efficiency
        return e.get("tp_host_s", 0.0) + group.size * e.get("tp_host_per_rank_s", 0.0)

    def sm_share(self, group: GroupShape, op: Comm | None = None) -> float:
        """Share of the compute rate a collective on `group` takes while it runs beside compute
        (`sm_share.slowed_end`), for any group of more than one rank (the kernels hold their SMs for the
        whole collective, inside a node or across): an expert all-to-all, the SMs of its dispatcher's
        kernels over the GPU's (`ep_sm_share.ep_sm_share`); any other, `comm_sm_share`."""
        if group.size <= 1:
            return 0.0
        if op is not None and op.dim == "ep" and op.collective == "all_to_all":
            return ep_sm_share(self.ep_dispatcher, self.topology.gpu.sms)
        return self.efficiency.get("comm_sm_share", 0.0)

    def p2p_time(self, nbytes: float, same_node: bool) -> float:
        return collectives.p2p_time(self.topology, nbytes, same_node)


def priced_attention_kernel(sc) -> str:
    """The attention kernel a scenario is priced with: "eager" under `training.attention: eager` (its unfused ops,
    `plan/eager_attention.py`), else the framework's family."""
    return "eager" if sc.training.attention == "eager" else sc.framework.attention_kernel


def build_cost_model(sc) -> CostModel:
    """The cost model a scenario asks for: spec-based, or with its calibration profile. `ScenarioError` for FP8
    attention that Transformer Engine refuses or that no published figure prices (`plan/fp8_attention.py`)."""
    profile = None
    if sc.cluster.profile not in ("default", "", None):
        from .profile_load import load_profile  # noqa: PLC0415 (optional piece, lands with calibration)
        profile = load_profile(sc.cluster.profile)
    model = CostModel(topology=sc.topology, precision=sc.training.precision, profile=profile,
                     efficiency=dict(sc.cluster.efficiency),
                     attention_kernel=priced_attention_kernel(sc),
                     block_scaled_fp8=sc.framework.fp8_recipe in BLOCK_SCALED_RECIPES,
                     ep_dispatcher=sc.parallel.ep_dispatcher, eager_chains=eager_chains(sc),
                     optimizer_impl=optimizer_impl(sc),
                     cudnn_version=sc.cluster.cudnn_version, mla_head_dims=mla_head_dims(sc.model),
                     fp8_attention=fp8_attention_recipe(sc),
                     framework=framework_context(sc) if profile is not None and profile.framework else {})
    if model.fp8_attention is not None:  # checked before any op needs it: a clear error, not one inside the engine
        model.fp8_attention_kernels()
    return model


DTENSOR_ELEMENTWISE = ("norm", "final_norm", "residual", "embedding")
"""simulator.ops elementwise ops that run on DTensors under TP with sequence parallelism (torchtitan's plan:
SequenceParallel norms, residual adds of Shard(1) activations, the vocab-parallel embedding)."""
PARAM_TENSORS_PER_LAYER = 9
"""Parameter tensors per transformer block (2 norms, wq/wk/wv/wo, 3 MLP or router + 3 stacked experts - 1)."""


def mla_head_dims(model) -> tuple | None:
    """MLA's (query-key, value) head dims: nope + rope, v (DeepSeek-V3: 128 + 64, 128); None without MLA."""
    a = model.mla
    return (a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim) if a else None


def optimizer_impl(sc) -> str | None:
    """The scenario's `training.optimizer_impl`, else its framework's (`frameworks/*.yaml`), else None (PyTorch's
    default)."""
    fw = sc.framework.spec.optimizer_impl
    return sc.training.optimizer_impl or (fw.value if fw is not None else None)


def framework_context(sc) -> dict:
    """The `CostModel.framework` of a scenario: DTensor modules under TP, DTensor parameters under TP or
    ZeRO (FSDP2 shards parameters as DTensors), and the parameter tensors on the busiest pp rank."""
    from ..plan.sharded_params import rank_params  # noqa: PLC0415
    p = sc.parallel
    tensors = 0
    for r in range(p.pp):
        rp = rank_params(sc, r)
        tensors = max(tensors, PARAM_TENSORS_PER_LAYER * len(rp.layers) + int(rp.embedding) + 2 * int(rp.head))
    return {"mode": "dtensor" if p.tp > 1 else "eager",
            "fsdp": p.zero > 0,
            "dtensor_params": p.tp > 1 or p.zero > 0,
            "dtensor_names": DTENSOR_ELEMENTWISE if (p.tp > 1 and p.sp) else (),
            "param_tensors": tensors}


def bytes_fmt(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"

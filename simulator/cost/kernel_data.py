"""Kernel speed from published measurements: the default pricing of a topology's GPU.

`kernel_data.json` (next to this file) holds, per GPU (keyed by the topology's `gpu.name`), GEMM TFLOP/s by shape
and dtype and attention TFLOP/s by kernel family, phase, mask, head dim and sequence length, each point with its
source. From them:

- a GEMM efficiency curve per (GPU, dtype): eta(F) = eta_max * F / (F + F_half), the form the spec-based model
  always had (small GEMMs do not fill the device), with eta_max and the knee fitted to the published shapes
  (least squares in log time, through the same roofline and launch gap `CostModel.spec_compute_time` adds). With
  fewer than `gemm_curve.MIN_POINTS_FOR_KNEE` shapes the knee stays the spec-based one. Maximum-achievable-matmul points (the
  best shape of a sweep) are ceilings: they cap eta_max and never raise it, so a GPU/dtype with only such a point
  keeps the spec-based eta_max where that is below the ceiling (BF16 on A100 and GB200's B200 here; the shipped
  H200 topology names the H100 as its `gpu.chip`). BF16 on H100
  and on HGX B200 is fitted to OpenXLA's published per-shape matmul table (1024-4096 per side) and a few points at
  larger shapes.
- an attention efficiency table per kernel family (flash2, flash3, cudnn, triton_fa): the published TFLOP/s over peak,
  interpolated linearly in log2(sequence length) and in head dim between published head dims; outside the
  published range the nearest point's value. Where a family has no point for the op's mask (no causal backward
  figure is published) the other mask's points are used; a head dim a mask's table lacks takes the other mask's
  ratio between head dims.
- multi-head latent attention by its own shape (`mla_attention` in a GPU's entry: DeepSeek-V3's query-key head dim 192
  and value head dim 128, cuDNN's published tables), read before the tables by one head dim, where MLA would be
  priced at the mean of its two head dims (`ModelSpec.attention_head_dim`); one release per GPU, whatever the run's;
- a transfer (`transfers` in the data file) for a family published on one GPU only, next to another family at the
  same shapes: on a GPU with the other (base) family's table and no points of its own, the family runs at the base
  family's efficiency times its published ratio to it at the op's mask, head dim and sequence length (`Transfer`).
  MPT's Triton FlashAttention (`triton_fa`) is published only beside FlashAttention-2 on an A100 (FA2 paper, Fig. 4,
  forward+backward); the paper's text gives the forward's share of the gap (`forward_gap`), which splits that sum
  between the phases (`Transfer.phase_ratio`).
- cuDNN releases: a cuDNN point may name its release (`cudnn_version`); where a table holds several, the run's
  `cluster.cudnn_version` picks one (`cudnn_release.select`: the newest not newer than it; by default the newest).
- FP8 attention (`fp8_attention` in a GPU's entry: cuDNN's FP8 fused attention, which Transformer Engine runs under
  `fp8_dot_product_attention`): each point is published beside the same run's BF16 figure at the same shape
  (`bf16_tflops`), and prices FP8 attention as the GPU's BF16 table at the op's shape times that ratio
  (`GpuKernels.fp8_attention_ratio`), its release picked as the BF16 tables' are. The ratio, not the FP8 figure,
  carries over: the BF16 tables may come from another run or release than the FP8 pair.
- a head-dim transfer (`head_dim_ratio` in a GPU's entry): a head dim the GPU's tables lack at both masks is priced
  at the nearest published head dim's value times the same family's ratio between the two on the GPU it names
  (B200 and GB200's cuDNN and FlashAttention-2 are published at head dim 128 only; the H100's ratios price 64).
- a GEMM transfer (`gemm_from` in a GPU's entry): a GPU with no published GEMM point of its own and the same dense
  tensor-core peaks as another fits its curves to that GPU's points (GB300's B300 to GB200's B200).
- an attention transfer (`attention_from` in a GPU's entry): a GPU with no published attention point of its own
  takes the named GPU's attention tables and their rules (`attention`, `mla_attention`, `fp8_attention`,
  `head_dim_ratio`, `fwd_bwd_split`) in TFLOP/s, as they were published (the HGX B300 from the GB300's B300, the same
  Blackwell Ultra part at another board power): `gpu_entry`.
- an FP8 transfer (`fp8_gemm_from` in a GPU's entry): a GPU with a BF16 curve and no FP8 point takes the BF16 curve
  with eta_max times the named GPU's ratio of maximum-achievable FP8 to BF16 efficiency (`fp8_from_bf16`; the HGX
  B200 from the GB200's B200, the same die).
- a forward+backward point (`phase: fwd_bwd`) of a GPU with no per-phase figure (FlashAttention-2 on the A100: the
  README's fwd+bwd figure only) is priced as a forward and a backward point: its time shared between the phases as
  the same family shares it on the GPU its `fwd_bwd_split` names, at the same mask, head dim and sequence length
  (`split_fwd_bwd`; a transfer of that GPU's forward/backward balance, `phase_points`).

A GPU, dtype or family without points is priced by the spec-based constants in costs.py (`kernel_source` says
which). No fitting to training throughput happens here: only kernel points.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import ScenarioError
from ..inputs import read_json_file
from . import cudnn_release
from .gemm_curve import OPERAND_BYTES, GemmCurve, fit_gemm_curve, fp4_from
from .kernel_data_check import FAMILIES, FP8_ATTENTION_FIELDS, MLA_FIELDS, PHASES, check_data  # noqa: F401 (re-exported)

DATA_FILE = Path(__file__).with_name("kernel_data.json")
BACKWARD_FLOPS_PER_FORWARD = 2.5
"""Attention backward FLOPs over forward FLOPs as the FlashAttention papers count them (FA2 paper, arXiv 2307.08691,
§4.1: 2 matmuls forward, 5 backward with the recomputation), the weights of a forward+backward figure's two phases."""


@dataclass(frozen=True)
class AttentionTable:
    """Published efficiencies (TFLOP/s / bf16 peak) of one (family, phase, causal, head dim), by sequence length."""
    seqs: tuple[float, ...]
    efficiencies: tuple[float, ...]

    def at(self, seq: float) -> float:
        """Linear in log2(seq) between points; the nearest point's value outside them."""
        x = math.log2(max(seq, 1.0))
        xs = [math.log2(s) for s in self.seqs]
        if x <= xs[0]:
            return self.efficiencies[0]
        for i in range(1, len(xs)):
            if x <= xs[i]:
                w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
                return self.efficiencies[i - 1] + w * (self.efficiencies[i] - self.efficiencies[i - 1])
        return self.efficiencies[-1]


@dataclass(frozen=True)
class Transfer:
    """A family priced through another one (`base`): its published TFLOP/s over the base family's at the same shapes
    on the GPU that measured both (`gpu`), by mask and head dim, each an AttentionTable of ratios by sequence length."""
    base: str
    gpu: str
    ratios: dict
    """(causal, d_head) -> AttentionTable of family / base TFLOP/s"""
    forward_gap: float | None = None
    """base / family speed in the forward pass alone, where the source gives it (the ratios are forward+backward);
    None: the one ratio for both phases."""

    def ratio(self, causal: bool, d_head: float, seq: float) -> float:
        """The op's mask's ratio (else the other mask's), linear in head dim between the published ones and the
        nearest one's beyond them, linear in log2(seq) as the tables are."""
        return at_mask_and_head_dim(self.ratios, causal, d_head, seq)

    def phase_ratio(self, phase: str, causal: bool, d_head: float, seq: float,
                    base_fwd: float | None, base_bwd: float | None) -> float:
        """The family / base speed in one phase, given the base's forward and backward efficiencies at the shape.

        The published ratio R is of forward+backward time: with forward FLOPs F and backward 2.5 F
        (`BACKWARD_FLOPS_PER_FORWARD`), the base takes t_f = F / e_f and t_b = 2.5 F / e_b, the family (t_f + t_b) / R.
        The forward runs at r_f = 1 / forward_gap of the base; the backward takes the rest:
        r_b = t_b / ((t_f + t_b) / R - t_f / r_f), so the two phases together take the time the figure measured.
        Without a forward gap, or without both base phases, both phases run at R."""
        r = self.ratio(causal, d_head, seq)
        if self.forward_gap is None or not base_fwd or not base_bwd or phase not in ("fwd", "bwd"):
            return r
        r_f = 1.0 / self.forward_gap
        if phase == "fwd":
            return r_f
        t_f, t_b = 1.0 / base_fwd, BACKWARD_FLOPS_PER_FORWARD / base_bwd
        return t_b / ((t_f + t_b) / r - t_f / r_f)


def at_mask_and_head_dim(tables: dict, causal: bool, d_head: float, seq: float) -> float:
    """`tables` ((causal, head dim) -> AttentionTable) at the op's mask, else the other mask (the one published),
    by `at_head_dim`."""
    masks = {c for c, _ in tables}
    mask = causal if causal in masks else next(iter(masks))
    return at_head_dim({d: t for (c, d), t in tables.items() if c == mask}, d_head, seq)


def at_head_dim(tables: dict, d_head: float, seq: float) -> float:
    """`tables` (head dim -> AttentionTable) at `seq`, linear in head dim between the published head dims and the
    nearest one's value beyond them."""
    dims = sorted(tables)
    if d_head <= dims[0]:
        return tables[dims[0]].at(seq)
    if d_head >= dims[-1]:
        return tables[dims[-1]].at(seq)
    hi = next(i for i, d in enumerate(dims) if d >= d_head)
    d0, d1 = dims[hi - 1], dims[hi]
    e0 = tables[d0].at(seq)
    return e0 + (d_head - d0) / (d1 - d0) * (tables[d1].at(seq) - e0)


def split_fwd_bwd(tflops: float, ref_fwd: float, ref_bwd: float) -> tuple[float, float]:
    """A forward+backward figure's TFLOP/s as forward and backward TFLOP/s, shared as a reference shares its time.

    The figure counts P = 3.5 F / T: forward F FLOPs, backward 2.5 F (`BACKWARD_FLOPS_PER_FORWARD`, the FA2 benchmark's
    `flops(..., mode="fwd_bwd")`), over the forward+backward time T. The reference (any unit, both phases the same)
    spends the share q = (1 / ref_fwd) / (1 / ref_fwd + 2.5 / ref_bwd) of its time forward. Forward: F / (q T) =
    P / (3.5 q); backward: 2.5 F / ((1 - q) T) = 2.5 P / (3.5 (1 - q)). The two times add up to T."""
    bwd_w = BACKWARD_FLOPS_PER_FORWARD
    q = (1.0 / ref_fwd) / (1.0 / ref_fwd + bwd_w / ref_bwd)
    return tflops / ((1.0 + bwd_w) * q), bwd_w * tflops / ((1.0 + bwd_w) * (1.0 - q))


@dataclass(frozen=True)
class GpuKernels:
    gpu: str
    gemm: dict
    """dtype -> GemmCurve"""
    attention: dict
    """(family, phase, causal, d_head) -> AttentionTable"""
    transfers: dict = field(default_factory=dict)
    """family -> Transfer, for the families this GPU has no points of (`transfer_of`)."""
    split_by: dict = field(default_factory=dict)
    """family -> the GPU whose forward/backward balance split this GPU's fwd_bwd points of it (`phase_points`)."""
    head_dims_from: "GpuKernels | None" = None
    """The GPU (its tables in TFLOP/s) whose ratio between head dims prices a head dim this GPU's tables lack at
    both masks (the data file's `head_dim_ratio`); None: the nearest head dim's value."""
    gemm_from: str = ""
    """The GPU whose published GEMM points this GPU's curves are fitted to (the data file's `gemm_from`: the same
    dense tensor-core peaks, no GEMM point of its own); "": its own points."""
    cudnn_releases: str = ""
    """The cuDNN release(s) its cuDNN tables were priced from, for the report (`cudnn_release.describe`); "": the
    points name none."""
    mla: dict = field(default_factory=dict)
    """(family, phase, causal, (d_qk, d_v)) -> AttentionTable of multi-head latent attention measured at its own
    head dims (the data file's `mla_attention`), which prices it before the tables by one head dim."""
    fp8_ratios: dict = field(default_factory=dict)
    """(phase, causal, d_head) -> AttentionTable of cuDNN's FP8 over BF16 TFLOP/s in one run (the data file's
    `fp8_attention`), at the release `cudnn_release.select` picks; empty: no FP8 attention is published here."""
    fp8_releases: str = ""
    """The cuDNN release those ratios were taken at, for the report (`cudnn_release.describe`)."""
    attention_from: str = ""
    """The GPU whose published attention tables this GPU takes (the data file's `attention_from`); "": its own."""

    def fp8_attention_ratio(self, phase: str, causal: bool, d_head: float, seq: float) -> float | None:
        """cuDNN's FP8 attention speed over its BF16 speed at this shape: the op's mask's table (else the other
        mask's: the 9.13.1 runs are causal only), the nearest published head dim's (128 only), linear in log2(seq);
        None without FP8 points."""
        tables = {k[1:]: t for k, t in self.fp8_ratios.items() if k[0] == phase}
        return at_mask_and_head_dim(tables, causal, d_head, seq) if tables else None

    def attention_source(self, family: str) -> str | None:
        """What prices `family`'s attention on this GPU, for the report; None: no table (the spec constants)."""
        if family in self.split_by:
            return (f"{family} tables, published forward+backward and split into the phases by {family}'s "
                    f"forward/backward time on the {self.split_by[family]} "
                    f"(a transfer, simulator/cost/kernel_data.json fwd_bwd_split)")
        if any(k[0] == family for k in self.attention):
            ref = self.head_dims_from
            tables = f"{family} tables" + (f" ({self.cudnn_releases})" if family == "cudnn" and self.cudnn_releases else "")
            if self.attention_from:
                tables += f" of the {self.attention_from} (a transfer, simulator/cost/kernel_data.json attention_from)"
            if ref is not None and any(k[0] == family for k in ref.attention):
                return (f"{tables}, head dims they lack by {family}'s ratio between head dims on the {ref.gpu} "
                        f"(a transfer, simulator/cost/kernel_data.json head_dim_ratio)")
            return tables
        t = self.transfers.get(family)
        if t is not None and any(k[0] == t.base for k in self.attention):
            split = " (forward+backward, split by its published forward gap)" if t.forward_gap else ""
            return (f"{family} = {t.base} tables x its published ratio to {t.base} on the {t.gpu}{split} "
                    f"(a transfer, simulator/cost/kernel_data.json transfers)")
        return None

    def attention_efficiency(self, family: str, phase: str, causal: bool, d_head: float, seq: float,
                             mla: tuple | None = None) -> float | None:
        """The family's published efficiency at this shape; None when the family has no points for the phase.
        Multi-head latent attention (`mla`: its query-key and value head dims) is read from its own table where the
        GPU has one for the family, phase and mask (`mla_attention`), linear in log2(seq); else as d_head.
        The op's mask's table when the family has one (else the other mask's), linear in head dim between its
        published head dims; beyond them, the nearest head dim's value times the other mask's ratio between the
        two head dims where that mask has both (cuDNN's causal forward is published at head dim 128 only), else
        times the ratio on the GPU `head_dims_from` names (the data file's `head_dim_ratio`). A family
        without points here but with a `Transfer`: the base family's efficiency times the published ratio, split
        between the phases where the transfer has a forward gap (`Transfer.phase_ratio`)."""
        own = self.mla.get((family, phase, causal, mla)) if mla is not None else None
        if own is not None:
            return own.at(seq)
        masks = {k[2] for k in self.attention if k[0] == family and k[1] == phase}
        if not masks:
            t = self.transfers.get(family)
            base = self.attention_efficiency(t.base, phase, causal, d_head, seq) if t is not None else None
            if base is None:
                return None
            fwd, bwd = (self.attention_efficiency(t.base, ph, causal, d_head, seq) for ph in ("fwd", "bwd"))
            return base * t.phase_ratio(phase, causal, d_head, seq, fwd, bwd)
        mask = causal if causal in masks else next(iter(masks))
        value = self._at_dims(family, phase, mask, d_head, seq)
        dims = self._dims(family, phase, mask)
        nearest = min(max(d_head, dims[0]), dims[-1])
        other = (not mask) in masks and self._dims(family, phase, not mask)
        if nearest != d_head and other and other[0] <= min(d_head, nearest) and max(d_head, nearest) <= other[-1]:
            value *= (self._at_dims(family, phase, not mask, d_head, seq)
                      / self._at_dims(family, phase, not mask, nearest, seq))
        elif nearest != d_head and self.head_dims_from is not None:
            ref = self.head_dims_from
            at_op, at_nearest = (ref.attention_efficiency(family, phase, causal, d, seq) for d in (d_head, nearest))
            if at_op and at_nearest:
                value *= at_op / at_nearest
        return value

    def _dims(self, family, phase, mask) -> list:
        return sorted(k[3] for k in self.attention if k[:3] == (family, phase, mask))

    def _at_dims(self, family, phase, mask, d_head, seq) -> float:
        return at_head_dim({k[3]: t for k, t in self.attention.items() if k[:3] == (family, phase, mask)}, d_head, seq)


@lru_cache(maxsize=4)
def load_data(path: str = str(DATA_FILE)) -> dict:
    """The data file, checked: each GPU's gemm and attention points with the fields the curves read."""
    data = read_json_file(Path(path), "kernel data")
    where = f"kernel data {Path(path).name}"
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), dict):
        raise ScenarioError(where, "expected an object with 'gpus'", "gpu name -> {gemm: [...], attention: [...]}")
    check_data(data, where)
    return data


ATTENTION_KEYS = ("attention", "mla_attention", "fp8_attention", "head_dim_ratio", "fwd_bwd_split")
"""What an attention transfer (`attention_from`) takes from the GPU it names: its tables and the rules that read them."""


def gpu_entry(gpu_name: str, path: str = str(DATA_FILE)) -> dict:
    """One GPU's entry of the data file ({} when absent); with `attention_from`, the named GPU's attention tables and
    rules (`ATTENTION_KEYS`) in place of the ones it lacks."""
    gpus = load_data(path)["gpus"]
    entry = gpus.get(gpu_name, {})
    by = entry.get("attention_from")
    if not by:
        return entry
    ref = gpus[by["gpu"]]
    return {**entry, **{k: ref[k] for k in ATTENTION_KEYS if k in ref and not entry.get(k)}}


def transfer_of(family: str, path: str = str(DATA_FILE)) -> Transfer | None:
    """The published ratio of `family` to its base family, by mask, head dim and sequence length (shapes where
    the source gives both); None when the data file has no transfer for it."""
    t = load_data(path).get("transfers", {}).get(family)
    if t is None:
        return None
    speed: dict = {}
    for p in t["points"]:
        speed.setdefault((bool(p["causal"]), int(p["d_head"]), p["dtype"], float(p["seq"])), {})[p["family"]] = p["tflops"]
    groups: dict = {}
    for (causal, d_head, _, seq), fams in speed.items():
        if family in fams and t["base"] in fams:
            groups.setdefault((causal, d_head), {})[seq] = fams[family] / fams[t["base"]]
    ratios = {k: AttentionTable(tuple(sorted(v)), tuple(v[s] for s in sorted(v))) for k, v in groups.items()}
    gap = t.get("forward_gap")
    return Transfer(t["base"], t["gpu"], ratios, float(gap["value"]) if gap else None) if ratios else None


def gpu_points(gpu_name: str, path: str = str(DATA_FILE), cudnn_version: str | None = None) -> dict:
    """The published points of one GPU ({'gemm': [...], 'attention': [...]}); empty lists when none. Of cuDNN
    points published for several releases, those of the release `cudnn_release.select` picks for `cudnn_version`
    (None: the newest)."""
    entry = gpu_entry(gpu_name, path)
    attention, _ = cudnn_release.select(list(entry.get("attention", [])), cudnn_version)
    return {"gemm": list(entry.get("gemm", [])), "attention": attention}


def one_head_dim(p: dict) -> int:
    """An ordinary attention point's head dim: its tables' key."""
    return int(p["d_head"])


def mla_point_dims(p: dict) -> tuple[int, int]:
    """A multi-head latent attention point's (query-key, value) head dims: its tables' key (`mla_attention`)."""
    return int(p["d_qk"]), int(p["d_v"])


def attention_tables(points: list[dict], peaks: dict | None, head=one_head_dim) -> dict:
    """(family, phase, causal, head(point)) -> AttentionTable of the per-phase points' TFLOP/s over `peaks[dtype]`
    (FLOP/s; points of a dtype it lacks are left out), or in TFLOP/s where `peaks` is None. `head`: the head dim
    (`one_head_dim`), or MLA's pair (`mla_point_dims`). A later point at the same shape replaces an earlier one."""
    groups: dict = {}
    for p in points:
        if p["phase"] == "fwd_bwd" or (peaks is not None and p["dtype"] not in peaks):
            continue
        key = (p["family"], p["phase"], bool(p["causal"]), head(p))
        eff = p["tflops"] if peaks is None else p["tflops"] * 1e12 / peaks[p["dtype"]]
        groups.setdefault(key, {})[float(p["seq"])] = eff
    return {k: AttentionTable(tuple(sorted(v)), tuple(v[s] for s in sorted(v))) for k, v in groups.items()}


def reference_kernels(gpu_name: str, path: str = str(DATA_FILE)) -> GpuKernels:
    """Another GPU's published per-phase attention tables in TFLOP/s, whose ratios price a transfer to this one
    (`fwd_bwd_split`, `head_dim_ratio`); its forward+backward points are left out (`attention_tables`). Each table
    is its oldest release's (`cudnn_release.OLDEST`), so a ratio between head dims is taken within one release."""
    points = gpu_points(gpu_name, path, cudnn_release.OLDEST)["attention"]
    return GpuKernels(gpu_name, {}, attention_tables(points, None))


def phase_points(gpu_name: str, path: str = str(DATA_FILE), cudnn_version: str | None = None) -> list[dict]:
    """One GPU's attention points by phase: its forward and backward points as published, and each forward+backward
    point as a forward and a backward point, `split_fwd_bwd` by the same family's tables on the GPU its
    `fwd_bwd_split` names (in TFLOP/s, at the point's mask, head dim and sequence length, with the tables' fallbacks).
    A split point keeps the published value (`fwd_bwd_tflops`) and names the GPU it was split by (`split_by`). A
    published per-phase point comes after the split ones, so it wins at a shape both give."""
    entry = gpu_entry(gpu_name, path)
    points = gpu_points(gpu_name, path, cudnn_version)["attention"]
    split = []
    if any(p["phase"] == "fwd_bwd" for p in points):
        by = entry["fwd_bwd_split"]["gpu"]
        ref = reference_kernels(by, path)
        for p in (p for p in points if p["phase"] == "fwd_bwd"):
            shape = (bool(p["causal"]), p["d_head"], p["seq"])
            ref_fwd, ref_bwd = (ref.attention_efficiency(p["family"], ph, *shape) for ph in ("fwd", "bwd"))
            for phase, tflops in zip(("fwd", "bwd"), split_fwd_bwd(p["tflops"], ref_fwd, ref_bwd)):
                split.append(dict(p, phase=phase, tflops=tflops, fwd_bwd_tflops=p["tflops"], split_by=by))
    return split + [p for p in points if p["phase"] != "fwd_bwd"]


def published_gpus(path: str = str(DATA_FILE)) -> list[str]:
    """The GPUs the data file has points for (the names a topology's `gpu.chip` may give)."""
    return sorted(load_data(path)["gpus"])


def fp8_from_bf16(bf16: GemmCurve, ref_gpu: str, peak_ratio: float, knee_s: float, path: str = str(DATA_FILE)) -> GemmCurve:
    """An FP8 curve from a BF16 one (`fp8_gemm_from`): eta_max times `ref_gpu`'s best maximum-achievable FP8 TFLOP/s
    over its best BF16 one, over the FP8/BF16 dense peak ratio (`peak_ratio`, this GPU's: the reference is the
    same die). The knee is not transferred (`knee_s`, the spec knee): on the H100, where both are fitted, FP8's is
    9x BF16's (13.9 against 1.5 us)."""
    best = {dt: max((p["tflops"] for p in gpu_points(ref_gpu, path)["gemm"] if p["dtype"] == dt and p.get("max_achievable")),
                    default=None) for dt in ("fp8", "bf16")}
    if best["fp8"] is None or best["bf16"] is None:
        raise ValueError(f"{ref_gpu} has no maximum-achievable FP8 and BF16 points to transfer from")
    ratio = best["fp8"] / best["bf16"] / peak_ratio
    return GemmCurve(bf16.peak_efficiency * ratio, knee_s, 0, False, transferred_from=ref_gpu)


@lru_cache(maxsize=16)
def gpu_kernels(gpu_name: str, peaks: tuple, hbm_Bps: float, default_eta: float, default_knee_s: float,
                overhead_s: float, path: str = str(DATA_FILE), cudnn_version: str | None = None) -> GpuKernels | None:
    """The curves and tables of one GPU (`peaks`: sorted (dtype, FLOP/s) pairs of the topology; `cudnn_version`: the
    cuDNN release of the run, `cudnn_release.select`); None without points."""
    pts = gpu_points(gpu_name, path)
    if not pts["gemm"] and not pts["attention"]:
        return None
    peak = dict(peaks)
    gemm = {}
    entry = gpu_entry(gpu_name, path)
    borrowed = entry.get("gemm_from")
    if borrowed and not pts["gemm"]:
        pts["gemm"] = gpu_points(borrowed["gpu"], path)["gemm"]
    for dtype in sorted({p["dtype"] for p in pts["gemm"]}):
        if dtype not in peak:
            continue
        operand = OPERAND_BYTES.get(dtype, 2)
        curve = fit_gemm_curve([p for p in pts["gemm"] if p["dtype"] == dtype], peak[dtype], hbm_Bps,
                               default_eta, default_knee_s, overhead_s, operand)
        if curve is not None:
            gemm[dtype] = curve
    fp8_from = entry.get("fp8_gemm_from")
    if fp8_from and "fp8" not in gemm and "bf16" in gemm and "fp8" in peak:
        gemm["fp8"] = fp8_from_bf16(gemm["bf16"], fp8_from["gpu"], peak["fp8"] / peak["bf16"], default_knee_s, path)
    fp4_by = entry.get("fp4_gemm_from")
    if fp4_by and "fp4" not in gemm and "bf16" in gemm and "fp4" in peak:
        ref_peaks = tuple(sorted((d, v * 1e12) for d, v in fp4_by["peak_tflops"].items()))
        ref = gpu_kernels(fp4_by["gpu"], ref_peaks, hbm_Bps, default_eta, default_knee_s, overhead_s, path)
        if ref is not None and {"fp4", "bf16"} <= set(ref.gemm):
            gemm["fp4"] = fp4_from(gemm["bf16"], ref.gemm, fp4_by["gpu"])
    points = phase_points(gpu_name, path, cudnn_version)
    attention = attention_tables(points, peak)
    _, releases = cudnn_release.select(entry.get("attention", []), cudnn_version)
    split_by = {p["family"]: p["split_by"] for p in points if "split_by" in p and p["dtype"] in peak}
    own = {k[0] for k in attention}
    transfers = {f: t for f in load_data(path).get("transfers", {}) if f not in own
                 for t in [transfer_of(f, path)] if t is not None}
    by = entry.get("head_dim_ratio")
    fp8_points, fp8_chosen = cudnn_release.select(list(entry.get("fp8_attention", [])), cudnn_version)
    ratios = attention_tables([dict(p, tflops=p["tflops"] / p["bf16_tflops"]) for p in fp8_points], None)
    return GpuKernels(gpu_name, gemm, attention, transfers, split_by, reference_kernels(by["gpu"], path) if by else None,
                      borrowed["gpu"] if borrowed and pts["gemm"] else "",
                      cudnn_release.describe(releases),
                      attention_tables(entry.get("mla_attention", []), peak, mla_point_dims),
                      {k[1:]: t for k, t in ratios.items()}, cudnn_release.describe(fp8_chosen),
                      (entry.get("attention_from") or {}).get("gpu", ""))

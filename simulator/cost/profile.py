"""Calibration profiles: measured kernel and collective times that `CostModel` consults before its roofline.

`python -m calibrate` (the `calibrate/` package, the only part that touches torch) writes the JSON file;
this module reads it (no torch), validates it strictly and answers two questions:

* `Profile.compute_time(op)`: seconds for a `Compute` op, interpolated in log space over measured points;
* `Profile.comm_time(op, group)`: seconds for a `Comm` on a process group, from the collective tables.

plus the host time the isolated kernel probes do not see (the `framework` table, CPU only:
`Profile.framework_overhead(op, ...)` per compute op - autograd, DTensor modules under TP, DTensor
parameters in the optimizer under TP/FSDP2 - and, per collective by its size, `Profile.tp_comm_overhead`
(DTensor's redistribute path) and `Profile.zero_comm_overhead` (FSDP2's copies and hooks), measured on two
gloo ranks; `CostModel` adds them on the profile path only).

Both return None when the profile holds nothing applicable, and the cost model then falls back to the
spec roofline (the report's "measured share of compute" says how much of the step came from measurements). The accepted
ranges, beyond which a lookup gives None rather than extrapolating, are the constants below:

| table | looked up by | below the smallest point | above the largest point |
|---|---|---|---|
| gemm | dtype, (m, n, k) | each dim down to 1/2 of the grid's smallest (log-linear) | each dim up to 64x the grid's largest, at the throughput of the largest (time linear in the dim) |
| attention | dtype, d_head, causal, fwd/bwd; work = b*heads*s_q*s_kv; the back end of the scenario's kernel family (`SDPA_BACKEND`; none for FlashAttention-3 and Triton on a GPU profile: the published tables price them), else SDPA's default, else the fastest | down to 1/2 (log-linear) | up to 64x, time linear in work |
| elementwise | kind, fwd/bwd, dtype; HBM bytes | down to 1/4, at the smallest point's time (launch floor) | up to 64x, at the largest point's bandwidth |
| optimizer | parameters | down to 1/4 (floor) | up to 64x, linear |
| collectives | collective, group size, tier; bytes | any size, at the smallest point's time (latency floor) | up to 16x, at the largest point's busbw |

Schema: docs/interface.md "Calibration profile"; writer: `calibrate/cli.py`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

from ..plan.layout import GroupShape
from ..plan.opgraph import Comm, Compute
from .profile_schema import (AttentionPoint, COMM_ABOVE, Check, CollectivePoint, CopyPoint, Curve, D_HEAD_NEAR,
                             ElementwisePoint, FRAMEWORK_LINEARS, FrameworkPoint, GEMM_DIM_ABOVE, GEMM_DIM_BELOW,
                             GemmPoint, OptimizerPoint, Provenance, STREAM_ABOVE, STREAM_BELOW, Skipped, SpecRef, WORK_ABOVE, WORK_BELOW, elementwise_kinds,
                             elementwise_phase)

SDPA_BACKEND = {"cudnn": "cudnn", "flash2": "flash", "eager": "math"}
"""The SDPA back end a profile measured (calibrate/probes/attention.py BACKENDS, torch.nn.attention.SDPBackend) that
runs each attention kernel family of the plan: cuDNN's fused attention is CUDNN_ATTENTION; FlashAttention-2 is
FLASH_ATTENTION (PyTorch vendors FlashAttention-2's kernels, aten/src/ATen/native/transformers/cuda/flash_attn);
eager attention (matmul, softmax, matmul) is MATH, PyTorch's composition of the same ops. FlashAttention-3 and MPT's
Triton kernel (`triton_fa`) are in no back end."""

# ----------------------------------------------------------------------------------- lookups

def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)


@dataclass(frozen=True, kw_only=True)
class _GemmGrid:
    """log(throughput) over the full m x n x k product of one dtype's grid points."""
    axes: tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]
    log_thr: dict

    def time(self, m: int, n: int, k: int) -> float | None:
        q = (m, n, k)
        cells = []
        for d in range(3):
            ax = self.axes[d]
            if q[d] < ax[0] / GEMM_DIM_BELOW or q[d] > ax[-1] * GEMM_DIM_ABOVE:
                return None
            x = min(q[d], ax[-1])  # above the grid: throughput of the largest (saturated) dim
            if len(ax) == 1:
                cells.append(((ax[0], 1.0),))
                continue
            i = 0
            while i < len(ax) - 2 and ax[i + 1] <= x:
                i += 1
            w = math.log(x / ax[i]) / math.log(ax[i + 1] / ax[i])  # w < 0 below the grid: log-linear
            cells.append(((ax[i], 1.0 - w), (ax[i + 1], w)))
        log_thr = 0.0
        for a, wa in cells[0]:
            for b, wb in cells[1]:
                for c, wc in cells[2]:
                    log_thr += wa * wb * wc * self.log_thr[(a, b, c)]
        return 2.0 * m * n * k / math.exp(log_thr)


def _gemm_grid(points: list[GemmPoint]) -> _GemmGrid | None:
    """The grid points of one dtype, if they form a full product (else None)."""
    times: dict[tuple, list[float]] = {}
    for p in points:
        if p.set == "grid":
            times.setdefault((float(p.m), float(p.n), float(p.k)), []).append(p.cost_s)
    if not times:
        return None
    axes = tuple(tuple(sorted({key[d] for key in times})) for d in range(3))
    if len(times) != len(axes[0]) * len(axes[1]) * len(axes[2]):
        return None
    log_thr = {key: math.log(2.0 * key[0] * key[1] * key[2] / min(ts)) for key, ts in times.items()}
    return _GemmGrid(axes=axes, log_thr=log_thr)


def _nearest_gemm(points: list[GemmPoint], m: int, n: int, k: int) -> float | None:
    """Without a grid: inverse-distance weighting of log throughput over points within a factor
    GEMM_DIM_BELOW in every dim (Chebyshev distance in log space)."""
    lim = math.log(GEMM_DIM_BELOW)
    weights, acc = 0.0, 0.0
    for p in points:
        d = max(abs(math.log(m / p.m)), abs(math.log(n / p.n)), abs(math.log(k / p.k)))
        if d > lim:
            continue
        w = 1.0 / (d * d + 1e-12)
        weights += w
        acc += w * math.log(2.0 * p.m * p.n * p.k / p.cost_s)
    if weights == 0.0:
        return None
    return 2.0 * m * n * k / math.exp(acc / weights)


def attention_work(batch_heads: float, s_q: float, s_kv: float, causal_fraction: float) -> float:
    """Score entries computed: b*heads*s_q*s_kv, times the causal fraction (0.5 for a causal square)."""
    return batch_heads * s_q * s_kv * causal_fraction


@dataclass(frozen=True, kw_only=True)
class Profile:
    """A loaded calibration profile (see the module docstring for the lookups and their ranges)."""
    schema_version: int
    provenance: Provenance
    spec: Optional[SpecRef] = None
    gemm: list[GemmPoint] = field(default_factory=list)
    attention: list[AttentionPoint] = field(default_factory=list)
    elementwise: list[ElementwisePoint] = field(default_factory=list)
    host_device: list[CopyPoint] = field(default_factory=list)
    optimizer: list[OptimizerPoint] = field(default_factory=list)
    framework: list[FrameworkPoint] = field(default_factory=list)
    collectives: list[CollectivePoint] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    source: str = field(default="", init=False, compare=False)
    """The file it was read from (set by load_profile)."""
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    # ---------------------------------------------------------------- indexes, built on first use
    @cached_property
    def _gemm_by_dtype(self) -> dict:
        out: dict[str, dict] = {}
        for p in self.gemm:
            d = out.setdefault(p.dtype, {"points": [], "exact": {}})
            d["points"].append(p)
            key = (p.m, p.n, p.k)
            d["exact"][key] = min(d["exact"].get(key, math.inf), p.cost_s)
        for d in out.values():
            d["grid"] = _gemm_grid(d["points"])
        return out

    def _attention_index(self, backend: str | None = None) -> dict:
        """(dtype, causal, phase) -> {d_head: Curve of time over work}, plus the exact points, of one SDPA back end's
        points where `backend` is given, else at each shape the `default` back end's time (what SDPA picks unasked,
        as model code runs it), else the fastest."""
        key = ("attention index", backend)
        if key in self._memo:
            return self._memo[key]
        by_backend: dict[tuple, dict[str, float]] = {}
        for p in self.attention:
            if backend is not None and p.backend != backend:
                continue
            shape = (p.dtype, p.causal, p.phase, p.d_head, p.batch_heads, p.s_q, p.s_kv)
            times = by_backend.setdefault(shape, {})
            times[p.backend] = min(times.get(p.backend, math.inf), p.cost_s)
        best = {k: v.get("default", min(v.values())) for k, v in by_backend.items()}
        curves: dict[tuple, dict[int, list]] = {}
        for (dtype, causal, phase, d, bh, sq, skv), t in best.items():
            frac = 0.5 if (causal and sq == skv) else 1.0
            curves.setdefault((dtype, causal, phase), {}).setdefault(d, []).append((attention_work(bh, sq, skv, frac), t))
        self._memo[key] = {"exact": best,
                           "curves": {k: {d: Curve.of(v) for d, v in ds.items()} for k, ds in curves.items()}}
        return self._memo[key]

    def attention_backend(self, kernel: str | None) -> tuple[bool, str | None]:
        """(priced from this profile, the SDPA back end's points to use) for the attention kernel family `kernel`
        a scenario runs (`costs.priced_attention_kernel`). A profile holds what PyTorch's SDPA measured, per back
        end (calibrate/probes/attention.py): `SDPA_BACKEND` maps a family to its back end where the profile has
        points of it; a family no SDPA back end runs (FlashAttention-3, MPT's Triton kernel) is not priced from a
        GPU profile at all (its published table prices it); otherwise, and with no family, SDPA's default."""
        if kernel is None:
            return True, None
        backend = SDPA_BACKEND.get(kernel)
        if backend is None and self.provenance.device_type == "cuda":
            return False, None
        return True, backend if any(p.backend == backend for p in self.attention) else None

    @cached_property
    def _elementwise_curves(self) -> dict:
        pts: dict[tuple, list] = {}
        for p in self.elementwise:
            pts.setdefault((p.op, p.phase, p.dtype), []).append((p.bytes, p.cost_s))
        return {k: Curve.of(v) for k, v in pts.items()}

    @cached_property
    def _optimizer_curves(self) -> dict:
        pts: dict[str, list] = {}
        for p in self.optimizer:
            pts.setdefault(p.impl, []).append((p.params, p.cost_s))
        return {k: Curve.of(v) for k, v in pts.items()}

    def optimizer_time(self, params: float, impl: Optional[str] = None) -> float | None:
        """Seconds of one optimizer step over `params` parameters: the curve of implementation `impl` where it was
        measured, else what AdamW runs unasked (`default`: foreach on a GPU, the per-tensor loop on a CPU), else any."""
        curves = self._optimizer_curves
        for name in ((impl,) if impl else ()) + ("default", "fused", "foreach", "for_loop"):
            if name in curves:
                return curves[name].streaming(params, STREAM_BELOW, STREAM_ABOVE)
        return None

    @cached_property
    def _collective_curves(self) -> dict:
        pts: dict[tuple, list] = {}
        for p in self.collectives:
            pts.setdefault((p.collective, p.group_size, p.tier), []).append(
                (p.size_bytes, p.cost_s if p.in_step_s is None else p.in_step_s))
        return {k: Curve.of(v) for k, v in pts.items()}

    # ---------------------------------------------------------------- the two questions
    def compute_time(self, op: Compute, attention_kernel: str | None = None) -> float | None:
        """Seconds for `op` from the measurements, or None where none applies (the roofline is used).
        `attention_kernel`: the family the scenario's attention runs (`attention_backend`)."""
        key = (op.kind, op.name if op.kind == "elementwise" else "", op.dtype, op.shape, op.repeat, op.bytes,
               attention_kernel if op.kind == "attention" else None)
        if key not in self._memo:
            self._memo[key] = self._compute_time(op, attention_kernel)
        return self._memo[key]

    def _compute_time(self, op: Compute, attention_kernel: str | None = None) -> float | None:
        if op.kind == "gemm":
            t = self.gemm_time(op.dtype, *op.shape[:3])
            return None if t is None else t * op.repeat
        if op.kind == "attention":
            priced, backend = self.attention_backend(attention_kernel)
            if not priced:
                return None
            bh, sq, skv, d, frac, phase = op.shape[:6]
            return self.attention_time("bf16" if op.dtype == "fp8" else op.dtype, bh, sq, skv, d, frac, phase,
                                       backend)
        if op.kind == "elementwise":
            return self.elementwise_time(op.name, op.dtype, op.bytes)
        if op.kind == "optimizer":
            return self.optimizer_time(op.shape[0])
        return None

    def gemm_time(self, dtype: str, m: int, n: int, k: int) -> float | None:
        table = self._gemm_by_dtype.get(dtype)
        if table is None:
            return None
        exact = table["exact"].get((m, n, k))
        if exact is not None:
            return exact
        if table["grid"] is not None:
            return table["grid"].time(m, n, k)
        return _nearest_gemm(table["points"], m, n, k)

    def attention_time(self, dtype: str, bh: int, s_q: int, s_kv: int, d: int, causal_fraction: float,
                       phase: str, backend: str | None = None) -> float | None:
        idx = self._attention_index(backend)
        causal = causal_fraction < 1.0
        exact = idx["exact"].get((dtype, causal, phase, d, bh, s_q, s_kv))
        if exact is not None and (not causal or s_q != s_kv or _close(causal_fraction, 0.5)):
            return exact
        work = attention_work(bh, s_q, s_kv, causal_fraction)
        # prefer the table of the same masking; the other one is used by equal work (causal blocks skip half)
        for table in (causal, not causal):
            by_d = idx["curves"].get((dtype, table, phase))
            if by_d:
                t = _attention_by_d(by_d, d, work)
                if t is not None:
                    return t
        return None

    def elementwise_time(self, name: str, dtype: str, nbytes: float) -> float | None:
        curves = self._elementwise_curves
        phase = elementwise_phase(name)
        for kind in elementwise_kinds(name):
            for ph in (phase, "fwd"):
                # same dtype first; another dtype's curve by bytes otherwise (bandwidth is dtype-blind)
                keys = [(kind, ph, dtype)] + sorted(k for k in curves if k[:2] == (kind, ph) and k[2] != dtype)
                for key in keys:
                    if key in curves:
                        return curves[key].streaming(nbytes, STREAM_BELOW, STREAM_ABOVE)
        return None

    @cached_property
    def _framework_index(self) -> dict:
        out: dict[tuple, list[float]] = {}
        for p in self.framework:
            out.setdefault((p.mode, p.op, p.phase), []).append(p.cost_s)
        return {k: min(v) for k, v in out.items()}

    def framework_overhead(self, op: Compute, mode: str, dtensor_names: tuple[str, ...] = (),
                           param_tensors: int = 0, dtensor_params: bool = False) -> float:
        """Host seconds `op` pays on top of its isolated kernel time (0 without a framework table).

        mode: 'eager' (nn.Module + autograd) or 'dtensor' (TP's DTensor modules); dtensor_params: the
        optimizer steps DTensor parameters (FSDP2 and TP hold them so). Under 'dtensor' the GEMMs and the elementwise ops whose
        names start with one of `dtensor_names` (sequence-parallel norms, residuals, the vocab-parallel
        embedding) go through DTensor; the rest (RoPE, SwiGLU, attention on local shards) run eager.
        A GEMM op stands for FRAMEWORK_LINEARS of nn.Linear calls (fused QKV = 3, SwiGLU fc1 = 2); a backward
        GEMM (dgrad, wgrad) carries half of the linear's backward overhead each. The optimizer pays
        (mode - plain) per parameter tensor (the optimizer probe already holds plain tensors' cost)."""
        idx = self._framework_index
        if not idx:
            return 0.0

        def extra(m: str, kind: str, phase: str, base: float) -> float:
            t = idx.get((m, kind, phase))
            return 0.0 if t is None else max(0.0, t - base)
        plain_linear = idx.get(("plain", "linear", "fwd"), 0.0)
        plain_elt = idx.get(("plain", "elementwise", "fwd"), 0.0)
        if op.kind == "gemm":
            base = op.name
            for suffix in ("_dgrad", "_wgrad"):
                if base.endswith(suffix):
                    base = base[: -len(suffix)]
            linears = FRAMEWORK_LINEARS.get(base, 1) * op.repeat
            if base != op.name:
                return linears * extra(mode, "linear", "bwd", 2.0 * plain_linear) / 2.0
            return linears * extra(mode, "linear", "fwd", plain_linear)
        if op.kind == "elementwise":
            m = mode if (mode == "dtensor" and op.name.startswith(dtensor_names)) else "eager"
            return extra(m, "elementwise", elementwise_phase(op.name), plain_elt)
        if op.kind == "optimizer" and dtensor_params:
            return param_tensors * extra("dtensor", "optimizer", "step", idx.get(("plain", "optimizer", "step"), 0.0))
        return 0.0

    def _framework_rows_by_bytes(self, ops: tuple[str, ...]) -> list[tuple[float, dict]]:
        """[(bytes, {(mode, phase): seconds})] of the framework rows of `ops`, one entry per measured size,
        smallest first (the two-rank block probes measure each size as a set of rows)."""
        rows: dict = {}
        for p in self.framework:
            if p.op in ops:
                rows.setdefault(p.bytes, {})[(p.mode, p.phase)] = p.cost_s
        return sorted(rows.items())

    @cached_property
    def _tp_overhead_points(self) -> list[tuple[float, float]]:
        """[(collective bytes, host seconds per TP collective)] from the tp_block rows, sorted by bytes."""
        idx = self._framework_index
        lin = 2.0 * (idx.get(("dtensor", "linear", "fwd"), 0.0) + idx.get(("dtensor", "linear", "bwd"), 0.0))
        out = []
        for nbytes, r in self._framework_rows_by_bytes(("tp_block", "collective")):
            if not all(k in r for k in (("dtensor", "fwd"), ("dtensor", "bwd"), ("plain", "step"))):
                continue
            # a block: its two DTensor linears' host overhead, the rank-local GEMMs (eager rows; none
            # measured for the tiny shape, whose GEMMs are negligible), four raw collectives
            local = r.get(("eager", "fwd"), 0.0) + r.get(("eager", "bwd"), 0.0)
            extra = r[("dtensor", "fwd")] + r[("dtensor", "bwd")] - lin - local - 4.0 * r[("plain", "step")]
            out.append((nbytes, max(0.0, extra / 4.0)))
        return out

    def tp_comm_overhead(self, nbytes: float) -> float:
        """Host seconds a TP collective of `nbytes` costs through DTensor beyond the raw collective
        (redistribute, functional collective, wait, subclass wrapping, the copies that gather and scatter
        along the sequence), from the two-rank tp_block measurements: a block's forward + backward, less
        its two DTensor linears' overhead, its rank-local GEMMs and its four raw collectives, per
        collective; linear in the bytes between measured sizes (`_interp_overhead`). 0 without them."""
        return _interp_overhead(self._tp_overhead_points, nbytes)

    @cached_property
    def _zero_overhead_points(self) -> list[tuple[float, float]]:
        """[(unit bytes, host seconds per collective)] from the fsdp_block rows, sorted by bytes."""
        out = []
        need = [("fsdp", "fwd"), ("fsdp", "bwd"), ("eager", "fwd"), ("eager", "bwd"), ("plain", "step")]
        for nbytes, r in self._framework_rows_by_bytes(("fsdp_block", "fsdp_collectives")):
            if nbytes > 0 and all(k in r for k in need):
                extra = r[need[0]] + r[need[1]] - r[need[2]] - r[need[3]] - r[need[4]]
                out.append((nbytes, max(0.0, extra / 3.0)))
        return out

    def zero_comm_overhead(self, unit_bytes: float) -> float:
        """Host seconds a ZeRO collective costs through FSDP2 beyond the raw collective (copy-in to the
        flat buffer, copy-out into the parameters, chunk-cat of the gradients, pre/post hooks), per
        collective of a unit of `unit_bytes` parameter bytes: a ZeRO-3 unit's forward + backward under FSDP2,
        less the same unit unsharded and its three raw collectives (two all-gathers, one reduce-scatter),
        over three; linear in the bytes between measured sizes (`_interp_overhead`). 0 without fsdp_block rows."""
        return _interp_overhead(self._zero_overhead_points, unit_bytes)

    def comm_time(self, op: Comm, group: GroupShape) -> float | None:
        """Seconds for `op` on `group` from the collective tables; None when this collective, group size
        or tier (intra-node / inter-node) was not measured."""
        tier = "intra_node" if group.nodes <= 1 else "inter_node"
        curves = self._collective_curves
        if op.collective == "send_recv":
            # point to point is a pair whatever the group: take the smallest measured ring
            sizes = sorted(g for (c, g, t) in curves if c == "send_recv" and t == tier)
            curve = curves.get(("send_recv", sizes[0], tier)) if sizes else None
        else:
            curve = curves.get((op.collective, group.size, tier))
        if curve is None or op.bytes <= 0 or op.bytes > curve.xs[-1] * COMM_ABOVE:
            return None
        if op.bytes > curve.xs[-1]:
            return curve.ys[-1] * op.bytes / curve.xs[-1]
        return curve.inside(op.bytes)


def _attention_by_d(by_d: dict, d: int, work: float) -> float | None:
    def at(dd: int) -> float | None:
        c = by_d[dd]
        if work < c.xs[0] / WORK_BELOW or work > c.xs[-1] * WORK_ABOVE:
            return None
        return c.ys[-1] * work / c.xs[-1] if work > c.xs[-1] else c.log_linear(work)

    if d in by_d:
        return at(d)
    lower = [x for x in by_d if x < d]
    upper = [x for x in by_d if x > d]
    if lower and upper:
        lo, hi = max(lower), min(upper)
        t_lo, t_hi = at(lo), at(hi)
        if t_lo is None or t_hi is None:
            return None
        w = math.log(d / lo) / math.log(hi / lo)
        return math.exp((1 - w) * math.log(t_lo) + w * math.log(t_hi))
    near = max(lower) if lower else min(upper)
    if max(d / near, near / d) > D_HEAD_NEAR:
        return None
    t = at(near)
    return None if t is None else t * d / near


def _interp_overhead(points: list[tuple[float, float]], nbytes: float) -> float:
    """Piecewise linear in bytes through [(bytes, seconds)] (a fixed host cost plus copies that grow
    with the bytes): flat below the smallest size, along the last segment above the largest; 0 if empty."""
    if not points:
        return 0.0
    if len(points) == 1 or nbytes <= points[0][0]:
        return points[0][1]
    i = next((j for j in range(1, len(points)) if nbytes <= points[j][0]), len(points) - 1)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return max(0.0, y0 + (y1 - y0) * (nbytes - x0) / (x1 - x0))

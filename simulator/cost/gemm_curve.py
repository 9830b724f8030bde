"""GEMM efficiency curves: one (GPU, dtype)'s eta(F) = eta_max * F / (F + peak * knee), fitted to published GEMM
shapes, and the transfers that make a curve for a dtype a GPU has no point of from its BF16 curve and another GPU's
(`kernel_data.py` reads the points and assembles a GPU's curves; `costs.py` prices GEMMs with them). The fit and
its ceilings: `fit_gemm_curve`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

OPERAND_BYTES = {"fp32": 4, "fp8": 1, "fp4": 0.5}
"""Bytes per GEMM operand element by dtype (the 16-bit dtypes 2): NVFP4's E2M1 packs two values in a byte (its E4M3
block scales, 1/16 B per value, not counted)."""
MIN_POINTS_FOR_KNEE = 3
"""Points of one (GPU, dtype) needed to fit the small-GEMM knee as well as eta_max; below it the knee is the
spec-based `GEMM_HALF_EFFICIENCY_S` (two maximum-achievable points at large shapes say nothing about small ones)."""
MIN_FIT_DIM = 1024
"""GEMM points with a side below this are held out of the fit (and reported as such by validation/kernel_ceiling.py):
DeepGEMM's m = 64 / 128 rows are decode-shaped, bound by latency and a memory bandwidth well below the roofline's,
and its k = 512 row by writing a large output; the curve's one knee cannot follow them, and training GEMMs
(tokens x hidden sizes) have every side in the thousands."""
KNEE_GRID_S = tuple(0.25e-6 * 1.25 ** i for i in range(32))
"""Knee times tried by the fit: 0.25 us to ~250 us in 25 % steps."""


@dataclass(frozen=True)
class GemmCurve:
    """eta(F) = peak_efficiency * F / (F + peak * half_efficiency_s) for one (GPU, dtype)."""
    peak_efficiency: float
    half_efficiency_s: float
    points: int
    knee_fitted: bool
    transferred_from: str = ""
    """The GPU whose FP8/BF16 (`kernel_data.fp8_from_bf16`) or FP4/BF16 (`fp4_from`) relation made this curve from the
    BF16 one; "" for a fitted curve."""


def used_in_fit(point: dict) -> bool:
    """Whether a GEMM point enters its curve's fit: a measured shape (not a maximum-achievable ceiling) with every
    side at least `MIN_FIT_DIM`."""
    return not point.get("max_achievable", False) and min(point["m"], point["n"], point["k"]) >= MIN_FIT_DIM


def _gemm_model_s(flops, nbytes, peak, hbm_Bps, eta, knee_s, overhead_s):
    """The spec-based GEMM time (costs.py): roofline of the curve's compute time and HBM time, plus the launch gap."""
    t_c = (flops + peak * knee_s) / (peak * eta)
    return max(t_c, nbytes / hbm_Bps) + overhead_s


def _rows(points, operand_bytes):
    out = []
    for p in points:
        m, n, k = p["m"], p["n"], p["k"]
        flops = 2.0 * m * n * k
        out.append((flops, float((m * k + k * n) * operand_bytes + m * n * 2), flops / (p["tflops"] * 1e12)))
    return out


def fit_gemm_curve(points: list[dict], peak: float, hbm_Bps: float, default_eta: float, default_knee_s: float,
                   overhead_s: float, operand_bytes: int) -> GemmCurve | None:
    """eta_max and the knee from the measured shapes (`used_in_fit`), then capped by the maximum-achievable points.

    Fit: for a knee, log eta = mean of log((F + peak*knee) / (peak * (t_pub - gap))) zeroes the mean log error of
    the compute-bound time; the knee is the grid value with the smallest total squared log error through the
    roofline (`MIN_POINTS_FOR_KNEE` shapes or more; else the spec knee). Without measured shapes eta_max is the
    spec-based `default_eta`. Cap: a maximum-achievable point (the best mean time of a shape sweep) is a ceiling,
    not a typical shape, so it only lowers eta_max to where the curve does not beat it. Bytes as `opgraph.gemm`
    counts them: operands at `operand_bytes`, the bf16 result once. None when there is no point at all."""
    fit = _rows(filter(used_in_fit, points), operand_bytes)
    caps = _rows([p for p in points if p.get("max_achievable")], operand_bytes)
    if not fit and not caps:
        return None
    eta, knee = default_eta, default_knee_s
    if fit:
        knees = KNEE_GRID_S if len(fit) >= MIN_POINTS_FOR_KNEE else (default_knee_s,)
        best = None
        for kn in knees:
            logs = [math.log((f + peak * kn) / (peak * max(t - overhead_s, 1e-12))) for f, b, t in fit]
            e = math.exp(sum(logs) / len(logs))
            err = sum(math.log(_gemm_model_s(f, b, peak, hbm_Bps, e, kn, overhead_s) / t) ** 2 for f, b, t in fit)
            if best is None or err < best[0] - 1e-12:
                best = (err, e, kn)
        eta, knee = best[1], best[2]
    for f, b, t in caps:
        eta = min(eta, (f + peak * knee) / (peak * max(t - overhead_s, 1e-12)))
    return GemmCurve(min(eta, 1.0), knee, len(fit), len(fit) >= MIN_POINTS_FOR_KNEE)


def fp4_from(bf16: GemmCurve, ref: dict, ref_gpu: str) -> GemmCurve:
    """An FP4 curve from this GPU's BF16 one (`fp4_gemm_from`): eta_max times the reference GPU's (`ref_gpu`) fitted
    FP4 eta_max over its fitted BF16 eta_max (`ref`: dtype -> GemmCurve), and the reference's FP4 knee (in seconds,
    so at this GPU's own FP4 peak the same FLOPs reach the same share of it)."""
    return GemmCurve(bf16.peak_efficiency * ref["fp4"].peak_efficiency / ref["bf16"].peak_efficiency,
                     ref["fp4"].half_efficiency_s, 0, False, transferred_from=ref_gpu)

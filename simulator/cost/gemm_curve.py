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
EPILOGUE_SERIAL = 0.6
"""Share of a GEMM's result write (m x n, bf16, at the GPU's HBM speed) that does not overlap its main loop: a GEMM
with a short reduction (small k) and a large result spends a visible part of its time storing the result after its
tiles' main loops. A shape-blind curve (eta of the FLOPs alone) cannot see it: on the H100, xwhzz/tilelang's
m = n = 8192 sweep over k runs 386 / 520 / 628 / 705 / 736 TFLOP/s at k = 256 / 512 / 1,024 / 2,048 / 4,096, which the
curve fitted without this term priced at 0.64 / 0.70 / 0.82 / 0.91 / 0.94 of the measured time, and DeepGEMM's
4096 x 32768 x 512 FP8 shape at 0.55 (validation/kernel_ceiling.py). Fitted on the three curves with shapes of
every side (H100 BF16, 33 shapes; H100 FP8, 5; HGX B200 BF16, 30): root-mean-square log error of each curve's fit at
0 / 0.25 / 0.5 / 0.6 / 0.75 / 0.9 / 1.0: H100 BF16 0.058 / 0.052 / 0.051 / 0.052 / 0.055 / 0.061 / 0.067, H100 FP8
0.102 / 0.081 / 0.063 / 0.057 / 0.050 / 0.046 / 0.046, B200 BF16 0.046 / 0.039 / 0.035 / 0.034 / 0.034 / 0.034 / 0.034;
the summed squared errors are lowest at 0.5-0.6 (0.1030 / 0.1027). At 0.6 the held-out H100 points (k = 256 / 512,
below MIN_FIT_DIM) read 0.86 / 0.89 and the FP8 k = 512 one 0.77; the sweep's k = 1,024-16,384 points 0.92-0.94. The same share for every GPU and dtype (one
mechanism: the epilogue's stores); GEMMs priced from a calibration profile are not touched."""
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


def result_bytes(shape: tuple, dtype: str) -> float:
    """Bytes of one GEMM's result (shape (m, n, k): m x n), bf16 unless the GEMM is fp32 (FP8 and FP4 GEMMs write
    bf16, as `opgraph.gemm` counts them)."""
    return float(shape[0] * shape[1] * (4 if dtype == "fp32" else 2))


def _gemm_model_s(flops, nbytes, out_bytes, peak, hbm_Bps, eta, knee_s, overhead_s):
    """The spec-based GEMM time (`CostModel.spec_compute_time`): the curve's compute time plus the result's write that does not
    overlap it (`EPILOGUE_SERIAL`), at least the HBM time of all its bytes, plus the launch gap."""
    t_c = (flops + peak * knee_s) / (peak * eta) + EPILOGUE_SERIAL * out_bytes / hbm_Bps
    return max(t_c, nbytes / hbm_Bps) + overhead_s


def _rows(points, operand_bytes):
    """(FLOPs, bytes, result bytes, published seconds) of each point."""
    out = []
    for p in points:
        m, n, k = p["m"], p["n"], p["k"]
        flops = 2.0 * m * n * k
        out.append((flops, float((m * k + k * n) * operand_bytes + m * n * 2), float(m * n * 2),
                    flops / (p["tflops"] * 1e12)))
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
            logs = [math.log((f + peak * kn) / (peak * max(t - overhead_s - EPILOGUE_SERIAL * c / hbm_Bps, 1e-12)))
                    for f, b, c, t in fit]
            e = math.exp(sum(logs) / len(logs))
            err = sum(math.log(_gemm_model_s(f, b, c, peak, hbm_Bps, e, kn, overhead_s) / t) ** 2 for f, b, c, t in fit)
            if best is None or err < best[0] - 1e-12:
                best = (err, e, kn)
        eta, knee = best[1], best[2]
    for f, b, c, t in caps:
        eta = min(eta, (f + peak * knee) / (peak * max(t - overhead_s - EPILOGUE_SERIAL * c / hbm_Bps, 1e-12)))
    return GemmCurve(min(eta, 1.0), knee, len(fit), len(fit) >= MIN_POINTS_FOR_KNEE)


def fp4_from(bf16: GemmCurve, ref: dict, ref_gpu: str) -> GemmCurve:
    """An FP4 curve from this GPU's BF16 one (`fp4_gemm_from`): eta_max times the reference GPU's (`ref_gpu`) fitted
    FP4 eta_max over its fitted BF16 eta_max (`ref`: dtype -> GemmCurve), and the reference's FP4 knee (in seconds,
    so at this GPU's own FP4 peak the same FLOPs reach the same share of it)."""
    return GemmCurve(bf16.peak_efficiency * ref["fp4"].peak_efficiency / ref["bf16"].peak_efficiency,
                     ref["fp4"].half_efficiency_s, 0, False, transferred_from=ref_gpu)

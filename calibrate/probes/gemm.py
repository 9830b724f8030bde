"""GEMM probe: C[m, n] = A[m, k] @ B[k, n] in fp32, bf16 and fp8 (torch._scaled_mm, where the GPU has it).

FLOPs 2mnk (docs/modeling.md §7.1). fp32 runs with TF32 off (true fp32, what `precision: fp32` means); fp8 uses
per-tensor scales with a bf16 output (the Transformer Engine recipe's GEMM), B column-major as cuBLASLt
requires. Operands rotate through a random pool larger than the last-level cache.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch

from ..plan import GemmSpec
from ..timing import Pools, RandomPool, measure
from . import CHECK_TOLERANCE, DTYPES, CheckResult, Context, Skip, Task, relative_error, run_check, tensor


def has_fp8(device: torch.device) -> bool:
    """torch._scaled_mm needs CUDA compute capability 8.9 (Ada) or 9.0+ (Hopper, Blackwell)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9) and hasattr(torch, "_scaled_mm")


@contextlib.contextmanager
def true_fp32():
    """fp32 GEMMs without TF32 (torch's default, set explicitly in case a caller changed it)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def b_shape(dtype: str, n: int, k: int) -> tuple[int, int]:
    """How B is stored: (k, n) row-major, or (n, k) for fp8 (cuBLASLt wants B column-major)."""
    return (n, k) if dtype == "fp8" else (k, n)


def gemm_call(dtype: str, a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
    """One GEMM of a (m, k) and B stored as `b_shape` says; fp8 takes a float32 scalar `scale` for both."""
    if dtype == "fp8":
        return torch._scaled_mm(a, b.t(), scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    return torch.mm(a, b)


def unit_scale(device: torch.device) -> torch.Tensor:
    return torch.ones((), device=device, dtype=torch.float32)


def operand_shapes(spec: GemmSpec) -> list[tuple[int, int]]:
    return [(spec.m, spec.k), b_shape(spec.dtype, spec.n, spec.k)]


def runner(spec: GemmSpec, pool: RandomPool) -> Callable[[int], torch.Tensor]:
    """Call i multiplies the i-th operand set of the rotating pool."""
    scale = unit_scale(pool.data.device)
    shapes = operand_shapes(spec)
    return lambda i: gemm_call(spec.dtype, *pool.take(shapes, i), scale)


def checks(ctx: Context) -> list[CheckResult]:
    out = []
    for dtype in sorted({s.dtype for s in ctx.plan.gemm}):
        def err(dtype=dtype) -> float:
            if dtype == "fp8" and not has_fp8(ctx.device):
                raise Skip("fp8 GEMMs need torch._scaled_mm on a GPU of compute capability >= 8.9")
            m, n, k = 128, 96, 160
            a = tensor((m, k), DTYPES[dtype], ctx.device, ctx.seed)
            b = tensor(b_shape(dtype, n, k), DTYPES[dtype], ctx.device, ctx.seed + 1)
            with true_fp32():
                c = gemm_call(dtype, a, b, unit_scale(ctx.device))
            bt = b.double().t() if dtype == "fp8" else b.double()
            return relative_error(c, a.double() @ bt)
        out.append(run_check(f"gemm {dtype}", "gemm", CHECK_TOLERANCE[dtype], err))
    return out


def tasks(ctx: Context) -> list[Task]:
    pools = Pools(ctx.device, ctx.plan.pool_cap_bytes, ctx.seed)
    for s in ctx.plan.gemm:
        pools.need(DTYPES[s.dtype], operand_shapes(s))

    def run(spec: GemmSpec) -> dict:
        fn = runner(spec, pools.get(DTYPES[spec.dtype]))
        with true_fp32():
            t = measure(fn, ctx.device, ctx.plan.budget)
        flops = 2.0 * spec.m * spec.n * spec.k
        return {"dtype": spec.dtype, "m": spec.m, "n": spec.n, "k": spec.k, "set": spec.set, **t.as_fields(),
                "tflops": flops / t.time_s / 1e12}

    return [Task(table="gemm", what=f"gemm {s.dtype} {s.m}x{s.n}x{s.k}", requires=f"gemm {s.dtype}",
                 run=lambda s=s: run(s)) for s in ctx.plan.gemm]

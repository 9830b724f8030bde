"""Optimizer probe: one torch.optim.AdamW step over P fp32 parameters, per implementation.

Implementations: default (what AdamW picks unasked: foreach on CUDA, a per-tensor loop on CPU), foreach,
fused, for_loop. Parameters are split into tensors of at most `Plan.optimizer_tensor_elements` (a layer's
matrix on the models the device runs: per-tensor overhead is part of the cost, and on CPUs the size of the
step's temporaries decides whether glibc serves them from the heap or from fresh, page-faulting mmaps).
Traffic ~30 bytes/param (docs/modeling.md §7.4).
"""
from __future__ import annotations

import torch

from ..timing import measure
from . import CheckResult, Context, Task, check_entry, first_line

IMPL_KWARGS = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}, "for_loop": {"foreach": False}}
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
CHECK_TOLERANCE = 1e-5
"""Relative difference of parameters after three steps, fp32 against a float64 for-loop reference."""


def tensor_sizes(params: int, chunk: int) -> list[int]:
    """How `params` parameters are split into tensors of at most `chunk` elements."""
    return [chunk] * (params // chunk) + ([params % chunk] if params % chunk else [])


def make_params(params: int, device: torch.device, seed: int, chunk: int, dtype=torch.float32) -> list[torch.nn.Parameter]:
    sizes = tensor_sizes(params, chunk)
    gen = torch.Generator(device=device).manual_seed(seed)
    out = []
    for n in sizes:
        # generated in fp32 on the device (fast at a billion parameters), then cast: the float64 check
        # reference holds the same values
        p = torch.nn.Parameter(torch.randn(n, device=device, generator=gen).add_(0.05).to(dtype))
        p.grad = torch.randn(n, device=device, generator=gen).mul_(1e-2).to(dtype)
        out.append(p)
    return out


def checks(ctx: Context) -> list[CheckResult]:
    out = []
    for impl in ctx.plan.optimizer_impls:
        key = f"optimizer adamw {impl}"
        try:
            ps = make_params(3000, ctx.device, ctx.seed, 1024)
            ref = make_params(3000, ctx.device, ctx.seed, 1024, torch.float64)
            opt = torch.optim.AdamW(ps, **ADAMW, **IMPL_KWARGS[impl])
            ref_opt = torch.optim.AdamW(ref, **ADAMW, foreach=False)
            for _ in range(3):
                opt.step()
                ref_opt.step()
            err = max(float((p.detach().double() - r.detach()).abs().max() / r.detach().abs().max()) for p, r in zip(ps, ref))
        except Exception as e:  # noqa: BLE001 (an implementation missing on this device is recorded)
            out.append(CheckResult(key=key, entry=None, reason=first_line(e)))
            continue
        out.append(CheckResult(key=key, entry=check_entry("optimizer", key, err, CHECK_TOLERANCE)))
    return out


def runner(params: int, impl: str, device: torch.device, chunk: int, seed: int = 0):
    """Call i: one AdamW step (implementation `impl`) over `params` parameters in tensors of at most `chunk`
    elements, with fixed gradients."""
    opt = torch.optim.AdamW(make_params(params, device, seed, chunk), **ADAMW, **IMPL_KWARGS[impl])

    def step(i: int):
        with torch.no_grad():
            opt.step()
    return step


def tasks(ctx: Context) -> list[Task]:
    def run(params: int, impl: str) -> dict:
        chunk = ctx.plan.optimizer_tensor_elements
        t = measure(runner(params, impl, ctx.device, chunk, ctx.seed), ctx.device, ctx.plan.budget)
        return {"optimizer": "adamw", "impl": impl, "params": params, "tensors": len(tensor_sizes(params, chunk)),
                **t.as_fields()}

    return [Task(table="optimizer", what=f"adamw {impl} {p} params", requires=f"optimizer adamw {impl}",
                 run=lambda p=p, impl=impl: run(p, impl))
            for p in ctx.plan.optimizer_params for impl in ctx.plan.optimizer_impls]

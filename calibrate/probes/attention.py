"""Attention probe: torch scaled_dot_product_attention forward and backward, per back end.

Back ends: flash, efficient (memory-efficient), cudnn, math, each forced with `sdpa_kernel` (those a
device lacks are recorded as skipped), and default: whatever SDPA picks unasked, which is what plain
PyTorch model code (and the replay) runs, so simulator/profile.py prefers it. Q, K, V are (1, b*heads, s, d_head); FLOPs as simulator.ops counts
them: 4*bh*s_q*s_kv*d, halved for a causal square, x2.5 for the backward (FlashAttention's benchmark).
The backward is timed as `autograd.grad` of a retained graph (the forward is not in the timing).
"""
from __future__ import annotations

import contextlib
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..plan import AttentionSpec
from ..timing import Pools, RandomPool, measure
from . import CHECK_TOLERANCE, DTYPES, CheckResult, Context, Skip, Task, relative_error, run_check, tensor

BACKENDS = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def backend(name: str):
    """A context that forces back end `name` (default: forces nothing)."""
    return contextlib.nullcontext() if BACKENDS[name] is None else sdpa_kernel([BACKENDS[name]])
BWD_GRAPHS = 4
"""Retained forward graphs the backward rotates through (each holds its saved activations)."""


def attention_flops(spec: AttentionSpec, phase: str) -> float:
    causal = 0.5 if (spec.causal and spec.s_q == spec.s_kv) else 1.0
    return 4.0 * spec.batch_heads * spec.s_q * spec.s_kv * spec.d_head * causal * (2.5 if phase == "bwd" else 1.0)


def _reference(q, k, v, causal: bool) -> torch.Tensor:
    """softmax(QK^T / sqrt(d) + causal mask) V in float64, written out."""
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        mask = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _unavailable(e: Exception) -> bool:
    text = str(e)
    return "No viable backend" in text or "not supported" in text.lower() or "not compiled" in text.lower()


def checks(ctx: Context) -> list[CheckResult]:
    out = []
    for dtype in sorted({s.dtype for s in ctx.plan.attention}):
        for name in ctx.plan.attention_backends:
            def err(dtype=dtype, name=name) -> float:
                q, k, v = (tensor((1, 2, 128, 64), DTYPES[dtype], ctx.device, ctx.seed + j).requires_grad_() for j in range(3))
                try:
                    with backend(name):
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        grads = torch.autograd.grad(o, (q, k, v), torch.ones_like(o))
                except RuntimeError as e:
                    if _unavailable(e):
                        raise Skip(f"{name} back end not available for {dtype} on {ctx.device.type}") from None
                    raise
                qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
                ref = _reference(qr, kr, vr, True)
                ref_grads = torch.autograd.grad(ref, (qr, kr, vr), torch.ones_like(ref))
                return max([relative_error(o, ref)] + [relative_error(g, r) for g, r in zip(grads, ref_grads)])
            out.append(run_check(f"attention {name} {dtype}", "attention", CHECK_TOLERANCE[dtype], err))
    return out


def operand_shapes(spec: AttentionSpec) -> list[tuple[int, ...]]:
    """q, k, v and dO (for the backward): (1, b*heads, s, d_head)."""
    q = (1, spec.batch_heads, spec.s_q, spec.d_head)
    kv = (1, spec.batch_heads, spec.s_kv, spec.d_head)
    return [q, kv, kv, q]


def runner(spec: AttentionSpec, phase: str, pool: RandomPool) -> Callable[[int], object]:
    """Call i: SDPA forward on the i-th operand set, or the backward of one of BWD_GRAPHS retained graphs.
    Build and call it inside the `backend` context it is measured with."""
    shapes = operand_shapes(spec)
    if phase == "fwd":
        def fwd(i: int):
            q, k, v, _ = pool.take(shapes, i)
            return F.scaled_dot_product_attention(q, k, v, is_causal=spec.causal)
        return fwd
    graphs = []
    for g in range(BWD_GRAPHS):
        q, k, v, do = (t.detach().requires_grad_(j < 3) for j, t in enumerate(pool.take(shapes, g)))
        graphs.append(((q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=spec.causal), do))

    def bwd(i: int):
        inputs, o, do = graphs[i % BWD_GRAPHS]
        return torch.autograd.grad(o, inputs, do, retain_graph=True)
    return bwd


def tasks(ctx: Context) -> list[Task]:
    pools = Pools(ctx.device, ctx.plan.pool_cap_bytes, ctx.seed)
    for s in ctx.plan.attention:
        pools.need(DTYPES[s.dtype], operand_shapes(s))

    def run(spec: AttentionSpec, name: str, phase: str) -> dict:
        work = spec.batch_heads * spec.s_q * spec.s_kv
        if name == "math" and work > ctx.plan.math_max_work:
            raise Skip(f"math back end above {ctx.plan.math_max_work:.0f} score entries (it stores them all)")
        try:
            with backend(name):
                t = measure(runner(spec, phase, pools.get(DTYPES[spec.dtype])), ctx.device, ctx.plan.budget)
        except RuntimeError as e:
            if _unavailable(e):
                raise Skip(f"{name} back end not available for this shape/dtype") from None
            raise
        return {"dtype": spec.dtype, "backend": name, "batch_heads": spec.batch_heads, "s_q": spec.s_q,
                "s_kv": spec.s_kv, "d_head": spec.d_head, "causal": spec.causal, "phase": phase, **t.as_fields(),
                "tflops": attention_flops(spec, phase) / t.time_s / 1e12}

    return [Task(table="attention", requires=f"attention {b} {s.dtype}", run=lambda s=s, b=b, p=p: run(s, b, p),
                 what=f"attention {b} {s.dtype} bh={s.batch_heads} s={s.s_q}x{s.s_kv} d={s.d_head} "
                      f"{'causal' if s.causal else 'full'} {p}")
            for s in ctx.plan.attention for b in ctx.plan.attention_backends for p in ("fwd", "bwd")]

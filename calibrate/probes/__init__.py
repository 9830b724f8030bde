"""Kernel probes, one file per op kind (llm.c dev/cuda pattern): gemm.py, attention.py, memory.py
(memory-bound kernels and host-device copies), optimizer.py.

Each module has `checks(ctx) -> list[CheckResult]` (its kernels against a float64 reference on a small
shape) and `tasks(ctx) -> list[Task]` (one measurement each, returning a profile entry). A task whose
check failed, or that raises (a missing back end, out of memory), becomes a `skipped` entry with its
reason; the run goes on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..plan import Plan

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn}

CHECK_TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 5e-3, "fp8": 2e-2}
"""Max |result - float64 reference| / max |reference| accepted per dtype (bf16 keeps 8 mantissa bits: a
relative rounding of 2^-8 = 0.4 % per output, accumulated in fp32)."""


class Skip(Exception):
    """A measurement that cannot be taken here (back end missing, unsupported dtype); the message says why."""


@dataclass(frozen=True, kw_only=True)
class Context:
    device: torch.device
    plan: Plan
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class Task:
    table: str
    """The profile table the entry goes to."""
    what: str
    """Human label, also the key of the skipped entry."""
    requires: str
    """The check this measurement relies on (a failed check skips it)."""
    run: Callable[[], dict]


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    key: str
    entry: dict | None
    """A profile `checks` entry, or None when the check could not run."""
    reason: str | None = None
    """Why it could not run (e.g. the back end is missing); its tasks are then skipped with this reason."""


def relative_error(result: torch.Tensor, reference: torch.Tensor) -> float:
    ref = reference.detach().double()
    result = result.detach()
    return float((result.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def check_entry(probe: str, what: str, err: float, tol: float) -> dict:
    return {"probe": probe, "what": what, "max_error": err, "tolerance": tol, "ok": bool(err <= tol)}


def run_check(key: str, probe: str, tol: float, fn: Callable[[], float]) -> CheckResult:
    """Run a check that returns its relative error; an exception means the kernel is unavailable."""
    try:
        err = fn()
    except Skip as e:
        return CheckResult(key=key, entry=None, reason=str(e))
    except Exception as e:  # noqa: BLE001 (any failure of a missing kernel is recorded, not fatal)
        return CheckResult(key=key, entry=None, reason=first_line(e))
    return CheckResult(key=key, entry=check_entry(probe, key, err, tol))


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def tensor(shape, dtype: torch.dtype, device: torch.device, seed: int) -> torch.Tensor:
    """Random non-zero data for checks (normal, pushed away from zero)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    x = x * 0.5 + torch.where(x >= 0, 0.05, -0.05)
    return x.to(device=device, dtype=torch.float32).to(dtype)  # via fp32: float64 -> float8 is not a cast torch has

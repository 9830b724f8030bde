"""Timing kernels properly: warm-up, many repeats, mean, median and spread, rotating inputs.

GPU: a CUDA event pair around every repeat (device time, no host sync in the loop); short calls are queued
in chunks while the GPU sleeps (`QUEUE_AHEAD_BELOW_S`), one event pair around each chunk, so that a sample is the
time per call of kernels run back to back (launch gaps included, as in a step), not of the host issuing them. CPU: a
`time.perf_counter_ns` pair around every repeat (CPU torch ops are synchronous; `torch.cpu.synchronize`
is called for symmetry). Inputs rotate through a pool of random data larger than the last-level cache,
so a repeat does not find its operands cached by the one before (`RandomPool`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .plan import Budget


@dataclass(frozen=True, kw_only=True)
class Timing:
    time_s: float
    """Median of the repeats."""
    mean_s: float
    """Mean of the repeats: what an op costs on average, so what a step of many such ops pays (the
    simulator prices with it). On a GPU the two agree; on a shared CPU host the repeats are skewed right
    (preemptions, a host speed that switches between two states): a GEMM's mean read up to 20 % above
    its median."""
    p10_s: float
    p90_s: float
    reps: int

    def as_fields(self) -> dict:
        return {"time_s": self.time_s, "mean_s": self.mean_s, "p10_s": self.p10_s, "p90_s": self.p90_s,
                "reps": self.reps}


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of an already sorted list."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples: list[float]) -> Timing:
    s = sorted(samples)
    return Timing(time_s=percentile(s, 50), mean_s=math.fsum(s) / len(s), p10_s=percentile(s, 10),
                  p90_s=percentile(s, 90), reps=len(s))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    else:
        torch.cpu.synchronize()


NOISY_SPREAD = 2.0
"""p90/p10 above which a point is measured once more (another process took the core part of the time)..."""
RETRY_BUDGET_S = 0.25
"""...if its first attempt cost less than this; the two attempts' repeats are then summarised together
(keeping the faster attempt would price the host's fast moments only, not what a step meets)."""


QUEUE_AHEAD_BELOW_S = 1e-3
"""GPU: a call shorter than this (synchronised warm-up, host included) is timed with the GPU kept busy while the
host queues the repeats (`torch.cuda._sleep` first). Timed as issued, a kernel shorter than the host's time to
issue one call reads the host's time: 26-37 us for calibrate's GEMM and attention calls on an H200
(validation/published_vs_measured.py's "floor" rows, 2026-11-26)."""
QUEUE_AHEAD_MARGIN = 1.5
"""The sleep outlasts the host's queuing of the repeats by this factor (the warm-up time per call bounds the
host's share from above)."""
QUEUE_AHEAD_CHUNK = 32
"""Repeats queued behind one sleep. The host can queue only so many launches before it blocks (CUDA's
pending-launch queue holds about a thousand, events included); a chunk of 32 calls of up to ~30 kernels each stays
under it, and each chunk's sleep is queued behind the chunk before, so the GPU waits while the host queues the next."""
QUEUE_AHEAD_MAX_REPS = 8 * QUEUE_AHEAD_CHUNK
"""At most this many queued repeats (eight chunk samples). A short call's repeats are sized from its synchronised
warm-up, which the host's time dominates (45-55 us a GEMM call on an H200, whatever the kernel's 3-25 us), so the
budget's target would ask for about a thousand: a sleep of ~75 ms for ~5 ms of kernels. Uncapped, the full GPU sweep
outgrew its 380 s limit on an H200 (2026-11-26)."""
SLEEP_CLOCK_HZ = 2.0e9
"""Cycles per second assumed to turn the sleep's seconds into `torch.cuda._sleep` cycles: about the H100 / H200
boost clock (1.98 GHz); a slower clock only lengthens the sleep."""


def queue_ahead_cycles(per_call_s: float, reps: int) -> int:
    """`torch.cuda._sleep` cycles for `reps` calls of `per_call_s` (0: long calls need none)."""
    if per_call_s >= QUEUE_AHEAD_BELOW_S:
        return 0
    return int(QUEUE_AHEAD_MARGIN * reps * per_call_s * SLEEP_CLOCK_HZ)


def queue_ahead_chunks(per_call_s: float, reps: int) -> list[tuple[int, int]]:
    """(first repeat, sleep cycles) for each chunk of at most QUEUE_AHEAD_CHUNK repeats that starts with a sleep;
    one chunk with no sleep for long calls."""
    if per_call_s >= QUEUE_AHEAD_BELOW_S:
        return [(0, 0)]
    return [(first, queue_ahead_cycles(per_call_s, min(QUEUE_AHEAD_CHUNK, reps - first)))
            for first in range(0, reps, QUEUE_AHEAD_CHUNK)]


def measure(fn: Callable[[int], object], device: torch.device, budget: Budget) -> Timing:
    """Time `fn(i)` (i = repeat index, for rotating inputs): warm-up, then mean/median/p10/p90 of repeats;
    a noisy point (see NOISY_SPREAD) is measured once more if that is cheap (RETRY_BUDGET_S)."""
    start = time.perf_counter()
    samples, calls = _measure_once(fn, device, budget, 0)
    first = summarize(samples)
    if first.p90_s <= NOISY_SPREAD * first.p10_s or time.perf_counter() - start > RETRY_BUDGET_S:
        return first
    return summarize(samples + _measure_once(fn, device, budget, calls)[0])


def _measure_once(fn: Callable[[int], object], device: torch.device, budget: Budget,
                  first_call: int) -> tuple[list[float], int]:
    """(the repeats' seconds, the next call index): calls are numbered on from `first_call` so that a
    second attempt rotates through fresh inputs too."""
    start = time.perf_counter()
    calls = first_call
    warm: list[float] = []
    while len(warm) < budget.min_warmup or (time.perf_counter() - start < budget.warmup_s and len(warm) < 1000):
        _sync(device)
        t0 = time.perf_counter()
        fn(calls)
        _sync(device)
        warm.append(time.perf_counter() - t0)
        calls += 1
    # the fastest warm-up call after the first (which carries one-time set-up) sizes the repeats: robust
    # to a call that a loaded host preempted
    per_call = max(min(warm[1:] or warm), 1e-7)
    reps = int(min(budget.max_reps, max(budget.min_reps, math.ceil(budget.target_s / per_call))))
    if device.type == "cuda":
        if per_call >= QUEUE_AHEAD_BELOW_S:  # long calls: an event pair around each
            spans = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), 1)
                     for _ in range(reps)]
            for i, (a, b, _) in enumerate(spans):
                a.record()
                fn(calls + i)
                b.record()
        else:  # short calls: one pair around each queued chunk, so no event's own cost lands in a call's time
            reps = min(reps, QUEUE_AHEAD_MAX_REPS)
            spans = []
            for first, cycles in queue_ahead_chunks(per_call, reps):
                n = min(QUEUE_AHEAD_CHUNK, reps - first)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda._sleep(cycles)  # the GPU waits while the host queues the chunk: it then runs back to back
                a.record()
                for i in range(first, first + n):
                    fn(calls + i)
                b.record()
                spans.append((a, b, n))
        torch.cuda.synchronize(device)
        samples = [a.elapsed_time(b) * 1e-3 / n for a, b, n in spans]
    else:
        samples = []
        for i in range(reps):
            t0 = time.perf_counter_ns()
            fn(calls + i)
            torch.cpu.synchronize()
            samples.append((time.perf_counter_ns() - t0) * 1e-9)
    return samples, calls + reps


def cache_bytes(device: torch.device) -> int:
    """Last-level cache to defeat: the GPU's L2, or the CPU's L3 (sysfs; 32 MiB when unknown)."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20))
    for index in (3, 2):
        try:
            text = open(f"/sys/devices/system/cpu/cpu0/cache/index{index}/size").read().strip()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
        return int(text.rstrip("KMGkmg")) * unit
    return 32 << 20


class RandomPool:
    """One block of random non-zero data (normal, then scaled and offset away from zero) from which
    operands are cut as contiguous views at rotating offsets: repeat i of a point reads a different part
    of a pool at least twice the last-level cache, without allocating per repeat.

    Owned by one probe run (not module state); `take(shapes, i)` returns views, never copies.
    """

    BLOCK = 1 << 22
    """Random elements generated; the pool repeats them (caches work on addresses, not values)."""

    def __init__(self, device: torch.device, dtype: torch.dtype, elements: int, seed: int = 0):
        gen = torch.Generator(device="cpu").manual_seed(seed)
        block = torch.randn(min(elements, self.BLOCK), generator=gen, dtype=torch.float32)
        block = block.mul_(0.5).add_(torch.where(block >= 0, 0.05, -0.05))  # no exact zeros
        block = block.to(device=device)
        # fill in float32 and convert once: float8 tensors support few ops (repeat is not one of them)
        self.data = block.repeat(-(-elements // block.numel()))[:elements].to(dtype).contiguous()
        self.elements = elements

    @staticmethod
    def elements_for(device: torch.device, dtype: torch.dtype, largest_set: int, cap_bytes: int) -> int:
        """Elements for a pool that rotates `largest_set`-element operand sets through 2x the cache,
        capped at `cap_bytes` (memory) but never below one set."""
        esize = torch.empty((), dtype=dtype).element_size()
        want = largest_set + 2 * cache_bytes(device) // esize
        return int(max(largest_set, min(want, cap_bytes // esize)))

    def take(self, shapes: list[tuple[int, ...]], i: int) -> list[torch.Tensor]:
        """Operands of the given shapes for repeat i: one set of contiguous views, sets spaced through
        the pool (64-element aligned) so consecutive repeats touch different memory."""
        sizes = [-(-math.prod(s) // 64) * 64 for s in shapes]
        per_set = sum(sizes)
        if per_set == 0:
            return []
        slots = max(1, (self.elements - per_set) // per_set + 1)
        base = (i % slots) * per_set
        out = []
        for shape, size in zip(shapes, sizes):
            n = math.prod(shape)
            start = min(base, self.elements - n)
            out.append(self.data[start:start + n].view(shape))
            base += size
        return out


class Pools:
    """One RandomPool per dtype, sized for the largest operand set registered with `need` and made on first
    `get` (so a probe that never runs allocates nothing). Owned by one probe run or validation run."""

    def __init__(self, device: torch.device, cap_bytes: int, seed: int = 0):
        self.device, self.cap_bytes, self.seed = device, cap_bytes, seed
        self.largest: dict[torch.dtype, int] = {}
        self.pools: dict[torch.dtype, RandomPool] = {}

    def need(self, dtype: torch.dtype, shapes: list[tuple[int, ...]]) -> None:
        size = sum(-(-math.prod(s) // 64) * 64 for s in shapes)
        self.largest[dtype] = max(self.largest.get(dtype, 0), size)

    def get(self, dtype: torch.dtype) -> RandomPool:
        if dtype not in self.pools:
            n = RandomPool.elements_for(self.device, dtype, self.largest.get(dtype, 0), self.cap_bytes)
            self.pools[dtype] = RandomPool(self.device, dtype, n, self.seed)
        return self.pools[dtype]

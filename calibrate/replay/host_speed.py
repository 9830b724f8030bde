"""How fast this host runs the profile's own kernels now, against when the profile was measured.

A shared machine's speed drifts: on this project's 2-core VM one process training the tiny Llama took
0.29-0.40 s a step within minutes, one GEMM measured 0.47 ms at one calibration and 0.63 ms three
hours later, and back-to-back checks read 1.0x and 1.45x the profile's times seconds apart. So the replay re-times a few of the profile's GEMM points in the parent process (no rank
running, the profile's thread count, the same timing code as `calibrate`) right before the ranks start
and right after they end. The ratio measured / profile (median over the points; > 1: the host is
slower now) is reported next to the error. It does not change the prediction: it says how much of a
miss is the host and how much the model.

Those two checks see one core at two moments; the slow state comes and goes per core within seconds
(two ranks training side by side: one at 68 ms a micro-batch, the other at 88-96 ms, then the other
way round). So on CPU each rank also times one small GEMM right before and right after every step
(`probe_timer`, ~6 ms), and `steady_steps` keeps the steps in which every rank's probes were within
STEADY_TOLERANCE of the fastest probe of the run: the steps the whole world ran at the host's fast
speed, the one a profile measured on an idle host describes.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from ..plan import Budget, GemmSpec
from ..probes.gemm import operand_shapes, runner, true_fp32
from ..timing import Pools, measure

POINTS = 6
"""GEMM points re-timed, spread over the profile's fp32 points of 0.2-5 ms."""
BUDGET = Budget(warmup_s=0.02, min_warmup=3, min_reps=10, max_reps=200, target_s=0.1)
"""About 0.15 s a point: a second or so per check."""


def speed_points(profile: dict) -> list[dict]:
    """Up to POINTS fp32 GEMM rows of the profile, 0.2-5 ms each, evenly spread by time."""
    rows = sorted((g for g in profile.get("gemm", []) if g.get("dtype") == "fp32" and 2e-4 <= g["time_s"] <= 5e-3),
                  key=lambda g: g["time_s"])
    if len(rows) <= POINTS:
        return rows
    return [rows[round(i * (len(rows) - 1) / (POINTS - 1))] for i in range(POINTS)]


def host_speed(profile_path: Optional[str], device: str) -> Optional[dict]:
    """{"ratio": median measured/profile, "points": n} on CPU with a CPU profile; None otherwise."""
    if device != "cpu" or not profile_path or not Path(profile_path).is_file():
        return None
    profile = json.loads(Path(profile_path).read_text())
    if profile.get("provenance", {}).get("device_type") != "cpu":
        return None
    rows = speed_points(profile)
    if not rows:
        return None
    dev = torch.device("cpu")
    specs = [GemmSpec(dtype="fp32", m=g["m"], n=g["n"], k=g["k"]) for g in rows]
    pools = Pools(dev, 1 << 30)
    for s in specs:
        pools.need(torch.float32, operand_shapes(s))
    threads = torch.get_num_threads()
    torch.set_num_threads(int(profile["provenance"].get("threads") or 1))
    try:
        with true_fp32():
            ratios = [measure(runner(s, pools.get(torch.float32)), dev, BUDGET).time_s / g["time_s"]
                      for s, g in zip(specs, rows)]
    finally:
        torch.set_num_threads(threads)
    return {"ratio": statistics.median(ratios), "points": len(ratios)}


PROBE_MKN = (256, 256, 1536)
"""The per-step probe GEMM (m, k, n): ~1.3 ms fp32 on one core of this project's VM, the tiny Llama's fc1."""
PROBE_REPS = 5
STEADY_TOLERANCE = 0.10
"""A step is steady when every probe of every rank around it is within 10 % of the run's fastest probe
(the fast and slow states are ~1.3-1.45x apart; repeat probes in one state agree within a few %)."""
STEADY_MIN_STEPS = 2
"""Fewer steady steps than this: no steady figure (a median of one step is a sample, not a measurement)."""


def probe_timer(seed: int = 0) -> Callable[[], float]:
    """A function timing PROBE_MKN on this process's threads PROBE_REPS times: the fastest, in seconds."""
    m, k, n = PROBE_MKN
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)

    def probe() -> float:
        best = float("inf")
        for _ in range(PROBE_REPS):
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
        return best
    return probe


def steady_steps(probes_per_rank: list[list[tuple[float, float]]], first: int,
                 tolerance: float = STEADY_TOLERANCE) -> tuple[list[int], Optional[float]]:
    """(indices >= first of the steps whose every (before, after) probe on every rank is within
    (1 + tolerance) x the fastest probe over all ranks and measured steps, that fastest probe)."""
    measured = [rank[first:] for rank in probes_per_rank]
    fastest = min((t for rank in measured for pair in rank for t in pair), default=None)
    if fastest is None:
        return [], None
    limit = (1 + tolerance) * fastest
    return [first + i for i in range(len(measured[0])) if all(max(rank[i]) <= limit for rank in measured)], fastest

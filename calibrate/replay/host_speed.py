"""How fast this host runs the profile's own kernels now, against when the profile was measured.

A shared machine's speed drifts: on this project's 2-core VM one process training the tiny Llama took
0.29-0.40 s a step within minutes, one GEMM measured 0.47 ms at one calibration and 0.63 ms three
hours later, and back-to-back checks read 1.0x and 1.45x the profile's times seconds apart. So the replay re-times a few of the profile's GEMM points in the parent process (no rank
running, the profile's thread count, the same timing code as `calibrate`) right before the ranks start
and right after they end. The ratio measured / profile (median over the points; > 1: the host is
slower now) is reported next to the error. It does not change the prediction: it says how much of a
miss is the host and how much the model.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Optional

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

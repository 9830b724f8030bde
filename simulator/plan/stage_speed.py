"""Which pipeline stage runs at which pace: the slowest GPU of each stage (`cluster.stragglers`,
`cluster.slow_gpus`; simulator/stragglers.py).

Representative mode simulates one rank per stage. A stage's TP/CP/EP peers meet at every layer's
collectives and its DP replicas at the gradient sync, so the stage goes at the pace of its slowest member:
its representative stands for the slowest replica, and the step is that replica's pipeline (the other
replicas wait at the gradient sync). This is the equivalence-class view of the issue: ranks that do the same
work at the same speed are one class; a handful of stragglers cost what the homogeneous job costs.
"""
from __future__ import annotations

import numpy as np

from ..stragglers import rank_speeds
from .layout import rank_index


def stage_speeds(sc, speeds: dict[int, float] | None = None) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Per pipeline stage: the compute multiplier of its slowest GPU and that GPU's global rank (-1: none).
    `speeds`: the scenario's `rank_speeds` where the caller has them already."""
    if speeds is None:
        speeds = rank_speeds(sc.cluster.stragglers, sc.cluster.slow_gpus, sc.gpus, sc.gpus_per_node)
    pp = sc.parallel.pp
    best, who = [1.0] * pp, [-1] * pp
    if speeds:
        ranks = np.array(sorted(speeds))
        stage_of = rank_index(sc, "pp", ranks)
        for r, s in zip(ranks, stage_of):
            x = speeds[int(r)]
            if x > best[int(s)]:
                best[int(s)], who[int(s)] = x, int(r)
    return tuple(best), tuple(who)

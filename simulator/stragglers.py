"""`cluster.stragglers` and `cluster.slow_gpus`: GPUs that run slower than their peers, as the scenario gives them
(read strictly). A straggler slows the compute of its own GPU by its `slowdown`; every synchronous group it is
in (its TP/CP/EP group each layer, its pipeline, its DP group at the gradient sync) then runs at its pace, so a
pipeline stage runs at the pace of its slowest GPU (`plan/stage_speed.py`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .errors import ScenarioError

MAX_SLOWDOWN = 100.0
"""A GPU 100x slower than its peers is broken, not slow."""


@dataclass(frozen=True, kw_only=True)
class Straggler:
    """One slow GPU (`rank`) or every GPU of one node (`node`)."""
    rank: Optional[int] = field(default=None, metadata={"min": 0})
    """Global rank (as `parallel.order` places ranks: rank = node x gpus_per_node + local GPU)."""
    node: Optional[int] = field(default=None, metadata={"min": 0})
    """Node index: all its GPUs (a slow host, a throttled chassis)."""
    slowdown: float = field(metadata={"min": 1.0, "max": MAX_SLOWDOWN})
    """Compute-time multiplier (1.3 = 30 % slower)."""


@dataclass(frozen=True, kw_only=True)
class SlowGpus:
    """A share of the GPUs drawn slow at random (seeded): the fleet's stragglers without naming them."""
    share: float = field(metadata={"min": 0.0, "max": 1.0})
    """Fraction of the GPUs that are slow."""
    slowdown_min: float = field(default=1.1, metadata={"min": 1.0, "max": MAX_SLOWDOWN})
    slowdown_max: float = field(default=1.3, metadata={"min": 1.0, "max": MAX_SLOWDOWN})
    """Each slow GPU's multiplier is drawn uniformly in [slowdown_min, slowdown_max]."""
    seed: int = 0
    """The draw's seed (the same scenario, the same slow GPUs)."""


def check_stragglers(stragglers, slow: Optional[SlowGpus], gpus: int, gpus_per_node: int) -> None:
    for i, s in enumerate(stragglers):
        where = f"cluster.stragglers[{i}]"
        if (s.rank is None) == (s.node is None):
            raise ScenarioError(where, "needs exactly one of rank and node", "{rank: R, slowdown: X} or {node: N, slowdown: X}")
        if s.rank is not None and s.rank >= gpus:
            raise ScenarioError(f"{where}.rank", f"{s.rank} but the cluster has {gpus} GPUs", f"0 .. {gpus - 1}")
        if s.node is not None and s.node * gpus_per_node >= gpus:
            raise ScenarioError(f"{where}.node", f"{s.node} but the cluster has {gpus // gpus_per_node} nodes",
                                f"0 .. {gpus // gpus_per_node - 1}")
    if slow is not None and slow.slowdown_max < slow.slowdown_min:
        raise ScenarioError("cluster.slow_gpus.slowdown_max", f"{slow.slowdown_max:g} below slowdown_min {slow.slowdown_min:g}",
                            f">= {slow.slowdown_min:g}")


def rank_speeds(stragglers, slow: Optional[SlowGpus], gpus: int, gpus_per_node: int) -> dict[int, float]:
    """{global rank: compute multiplier} of every slow GPU (the slowest where several entries name one)."""
    out: dict[int, float] = {}

    def put(r: int, x: float) -> None:
        out[r] = max(out.get(r, 1.0), x)

    if slow is not None and slow.share > 0:
        rng = np.random.default_rng(slow.seed)
        n = int(round(slow.share * gpus))
        picked = rng.choice(gpus, size=n, replace=False) if n else []
        values = rng.uniform(slow.slowdown_min, slow.slowdown_max, size=len(picked))
        for r, x in zip(picked, values):
            put(int(r), float(x))
    for s in stragglers:
        if s.rank is not None:
            put(s.rank, s.slowdown)
        else:
            for r in range(s.node * gpus_per_node, (s.node + 1) * gpus_per_node):
                put(r, s.slowdown)
    return out


"""When a layout fits in memory: one definition (docs/metrics.md), used by `memory.memory_report`, the
sweep's fit checks and every report, and the report's `memory` object. The peak itself is `memory.py`'s.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..scenario import Scenario

DEFAULT_HEADROOM_FRACTION = 0.05
"""Default memory a layout must leave free, as a share of the GPU's memory (`cluster.memory_headroom_gib`
null). The peak already counts the CUDA context, NCCL's buffers and the allocator's slack (`memory.py`); the
headroom is for the memory model's own error, whose bar is 5 % of the measured peak (README, Accuracy:
3.0 % mean error on the playbook validation split, 8.7 % on the fit split), and for what it does not
see (other processes, cuBLAS/cuDNN workspaces, allocator spikes). 4.0 GiB on an 80 GB H100."""


def headroom_gib(sc: "Scenario") -> float:
    """Memory a GPU must keep free for a layout to fit: `cluster.memory_headroom_gib`, or
    `DEFAULT_HEADROOM_FRACTION` of the GPU's memory."""
    if sc.cluster.memory_headroom_gib is not None:
        return float(sc.cluster.memory_headroom_gib)
    return DEFAULT_HEADROOM_FRACTION * float(sc.topology.gpu.memory_gib)


def stage_capacities(sc: "Scenario") -> list[tuple[float, float]]:
    """Per pipeline stage: (its GPU's memory, the headroom it must keep), GiB. With `cluster.pools` each stage's
    pool's GPU (`plan/paces.stage_pool_sets`; the smallest where the stage spans pools), else the topology's."""
    from .paces import stage_pool_sets  # noqa: PLC0415 (paces reads the rank grid; this module sits below it)
    out = []
    for ps in stage_pool_sets(sc):  # a stage over several pools: its GPU with the least memory
        cap = min(float((sc.pool_topologies[p] if sc.pool_topologies else sc.topology).gpu.memory_gib) for p in ps)
        room = sc.cluster.memory_headroom_gib
        out.append((cap, float(room) if room is not None else DEFAULT_HEADROOM_FRACTION * cap))
    return out


def fits(peak_gib: float, capacity_gib: float, headroom: float) -> bool:
    """The one definition of "fits" (docs/metrics.md): the worst stage's peak leaves `headroom` GiB free."""
    return peak_gib <= capacity_gib - headroom


VERDICTS = ("fits", "tight", "does not fit")
"""The report's memory verdict (docs/metrics.md): `fits` leaves the headroom free; `tight` is over the headroom
but under the GPU's memory, inside the memory model's own error, so the model cannot say either way (every
published run trained: `validate --set published` counts those it reads tight or over); `does not fit` is over the
GPU's memory."""


def verdict(peaks: list[tuple[float, float, float]]) -> str:
    """`VERDICTS` of a layout from each stage's (peak, its GPU's memory, the headroom it keeps), GiB: `fits` when
    every stage fits (`fits`), `does not fit` when any stage's peak is over its GPU's memory, else `tight`."""
    if all(fits(p, c, h) for p, c, h in peaks):
        return "fits"
    return "does not fit" if any(p > c for p, c, _ in peaks) else "tight"


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryReport:
    capacity_gib: float
    """The GPU's memory (topology `gpu.memory_gib`)."""
    peak_gib: float
    """Worst stage."""
    per_stage: list
    """`memory.StageMemory` of every pipeline stage."""
    verdict: str
    """`verdict` of the stages' peaks (`VERDICTS`)."""
    headroom_gib: float = 0.0
    """Memory the layout had to leave free to fit (`headroom_gib(sc)`)."""

    @property
    def fits(self) -> bool:
        """Every stage leaves its headroom free (`fits`): the verdict `fits`."""
        return self.verdict == "fits"

    def to_json(self) -> dict:
        """The report's `memory` object; `free_gib` = capacity - peak."""
        return {"capacity_gib": self.capacity_gib, "peak_gib": self.peak_gib, "free_gib": self.capacity_gib - self.peak_gib,
                "headroom_gib": self.headroom_gib, "fits": self.fits, "verdict": self.verdict,
                "per_stage": [s.as_gib() for s in self.per_stage]}

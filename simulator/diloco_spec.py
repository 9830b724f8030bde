"""`parallel.diloco`: training across datacenters DiLoCo's way (Douillard et al. 2023, arXiv 2311.08105), as the
scenario gives it (read strictly; `evaluate/diloco.py` prices it).

Each datacenter (`topology.datacenters.sites`) trains its own replica with the scenario's layout inside the site
(the data-parallel groups never leave it) for `outer_every` inner steps, then the replicas all-reduce their
pseudo-gradients (the change of the parameters since the last outer step) over the WAN and take an outer
optimizer step. `compression` is what the outer all-reduce sends per parameter; `overlap` runs it beside the next
`outer_every` inner steps (the replicas apply it one outer step late: streaming / overlapped DiLoCo, Douillard
et al. 2025, arXiv 2501.18512)."""
from __future__ import annotations

from dataclasses import dataclass, field

OUTER_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0, "int4": 0.5}
"""Bytes per parameter the outer all-reduce sends: fp32 pseudo-gradients (DiLoCo), bf16, or quantised to 8 or 4
bits (Streaming DiLoCo reports 4-bit outer gradients with no loss of quality, arXiv 2501.18512)."""
MAX_OUTER_EVERY = 1 << 20


@dataclass(frozen=True, kw_only=True)
class DiLoCo:
    outer_every: int = field(metadata={"min": 1, "max": MAX_OUTER_EVERY})
    """H: inner steps between outer synchronisations (DiLoCo: 500)."""
    compression: str = field(default="fp32", metadata={"choices": tuple(OUTER_BYTES)})
    """What the outer all-reduce sends per parameter: fp32, bf16, fp8 or int4."""
    overlap: bool = False
    """The outer all-reduce runs beside the next H inner steps (exposed only where it is longer than they are)."""

"""Cluster hardware: the GPU, the node and the scale-out fabric, read from `topologies/<name>.yaml`.

Only specs live here (plain frozen dataclasses, strict loading). The cluster graph and collective
algorithms that use them are in `network.py` and `collectives.py`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from .errors import ScenarioError
from .schema import from_mapping

TOPOLOGY_DIR = Path(__file__).resolve().parent.parent / "topologies"


@dataclass(frozen=True, kw_only=True)
class GPUSpec:
    name: str
    memory_gib: float = field(metadata={"min": 0.001})
    """HBM capacity usable by the framework (what torch.cuda reports as total), GiB = 2^30 bytes."""
    hbm_bandwidth_gbs: float = field(metadata={"min": 0.001})
    """Peak HBM bandwidth, GB/s (1e9 bytes/s)."""
    peak_tflops: dict[str, float] = field(default_factory=dict)
    """Dense peak per dtype (fp32, tf32, bf16, fp16, fp8), TFLOP/s, without 2:4 sparsity."""
    sources: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    gpus: int = field(metadata={"min": 1})
    interconnect: str = field(default="nvswitch", metadata={"choices": ("nvswitch", "nvlink", "pcie", "host")})
    """nvswitch: all-to-all NVLink through switches; pcie: GPUs share a PCIe switch; host: CPU processes."""
    bandwidth_gbs: float = field(metadata={"min": 0.0})
    """Intra-node bandwidth per GPU per direction, GB/s (H100 NVLink4: 450)."""
    latency_us: float = field(default=2.0, metadata={"min": 0.0})
    """Per-step latency of an intra-node collective hop."""
    nvls: bool = False
    """NVLink SHARP (in-switch reduction) available for all-reduce."""
    nics: int = field(default=0, metadata={"min": 0})
    """Scale-out NICs per node (one per GPU on DGX H100)."""
    nic_bandwidth_gbs: float = field(default=0.0, metadata={"min": 0.0})
    """Per NIC per direction, GB/s (400 Gb/s NDR: 50)."""
    nic_latency_us: float = field(default=5.0, metadata={"min": 0.0})
    """Per-step latency of an inter-node hop (NIC, switch, software)."""


@dataclass(frozen=True, kw_only=True)
class FabricSpec:
    rail_optimized: bool = True
    """GPU i of every node reaches GPU i of every other node through its own leaf (rail)."""
    oversubscription: float = field(default=1.0, metadata={"min": 1.0})
    """Leaf-to-spine oversubscription (1 = full bisection)."""
    leaf_radix: int = field(default=64, metadata={"min": 2})
    """Ports per leaf switch that face nodes."""
    switch_latency_us: float = field(default=0.6, metadata={"min": 0.0})


@dataclass(frozen=True, kw_only=True)
class DatacenterLink:
    bandwidth_gbs: float = field(metadata={"min": 0.0})
    """Bandwidth of the WAN link between neighbouring sites, per direction, GB/s."""
    distance_km: float = field(default=0.0, metadata={"min": 0.0})
    latency_ms: Optional[float] = None
    """One-way latency; null = distance / (2/3 c) in fibre."""


@dataclass(frozen=True, kw_only=True)
class DatacenterSpec:
    sites: int = field(default=1, metadata={"min": 1})
    nodes_per_site: Optional[int] = None
    link: Optional[DatacenterLink] = None


@dataclass(frozen=True, kw_only=True)
class Topology:
    name: str
    description: str = ""
    gpu: GPUSpec
    node: NodeSpec
    fabric: FabricSpec = field(default_factory=FabricSpec)
    datacenters: Optional[DatacenterSpec] = None
    sources: list[str] = field(default_factory=list)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for a training precision; fp8 falls back to bf16 where the GPU has none."""
        t = self.gpu.peak_tflops
        value = t.get(dtype) or (t.get("bf16") if dtype == "fp8" else None) or t.get("fp32")
        return float(value) * 1e12


def topology_names() -> list[str]:
    return sorted(p.stem for p in TOPOLOGY_DIR.glob("*.yaml"))


def load_topology(spec: str, base_dir: Path | None = None, path: str = "cluster.topology") -> Topology:
    """A name in topologies/ (without extension) or a path to a topology YAML."""
    if not isinstance(spec, str):
        raise ScenarioError(path, f"expected a topology name or path, got {spec!r}")
    file = TOPOLOGY_DIR / f"{spec}.yaml"
    if not file.exists():
        file = Path(spec)
        if not file.is_absolute() and base_dir is not None and not file.exists():
            file = base_dir / spec
    if not file.exists() or file.is_dir():
        raise ScenarioError(path, f"unknown topology {spec!r}", ", ".join(topology_names()) + " or a path to a YAML file")
    try:
        raw = yaml.safe_load(file.read_text())
    except yaml.YAMLError as e:
        raise ScenarioError(path, f"{file} is not valid YAML: {str(e).splitlines()[0]}")
    return from_mapping(Topology, raw, f"topology {file.name}")

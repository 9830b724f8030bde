"""Cluster hardware: the GPU, the node and the scale-out fabric, read from `topologies/<name>.yaml`.

Only specs live here (plain frozen dataclasses, strict loading). Where ranks sit and which links a
process group crosses are in `network.py`; the collective algorithms that price them in `collectives.py`.
Bandwidths are GB/s = 1e9 bytes/s per direction; latencies in microseconds unless a name says otherwise.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Optional


from .errors import ScenarioError
from .inputs import existing_file, read_yaml_file, short
from .schema import from_mapping, to_mapping

TOPOLOGY_DIR = Path(__file__).resolve().parent.parent / "topologies"

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
MAX_NODE_GPUS = 4096
"""GPUs in one NVLink domain: 7x NVL576, the largest announced; the collectives table walks each size."""
MAX_BANDWIDTH_GBS = 1e6
"""Any bandwidth, GB/s: 125x B200's 8 TB/s of HBM; a larger figure is a unit slip."""
MAX_MEMORY_GIB = 1e5
"""Device memory, GiB: 500x B200's 192 GB."""
MAX_PEAK_TFLOPS = 1e5
"""Dense peak, TFLOP/s: 20x B200's FP8 4.5 PFLOP/s."""
MAX_POWER_W = 1e5
"""Board power, W: 70x GB300's 1,400 W."""
POWER_CAP_EXPONENT = 1.0
"""A GEMM-bound kernel under a power cap runs at (cap / rated power) ** this of its rated speed. Dense
tensor-core work draws the board's full power at the rated clock; below it the clock falls with the cap
at near-constant voltage, so throughput falls about linearly: cuBLAS GEMMs on a GB300 capped at 500 W of
its 1,400 W ran ~617 TFLOP/s against ~1,600-2,174 at 1,400 W (0.28-0.39 of it, against 0.36 linear and 0.71
cubic; facebookexperimental/triton PR #2023, 2026-07-14), and an H100 capped at 600 W of 700 loses 10-15 %
of pre-training step throughput (factryze.ai "Power capping", read 2026-11-25; 14 % linear, 5 % cubic).
Memory-bound kernels are not slowed (HBM runs its own clock)."""
MAX_CLOCK_MHZ = 1e4
"""An SM clock, MHz: 5x H100's 1,980 MHz maximum."""
MAX_SMS = 1024
"""Streaming multiprocessors per GPU: 7x B200's 148; a larger figure is not one GPU."""
MAX_LATENCY_US = 1e7
"""Any latency, us: 10 s (the slowest measured, a degraded pipeline send, is 250 ms)."""
FIBRE_KM_PER_S = 299_792.458 * 2 / 3
"""Light in optical fibre travels at about 2/3 c (refractive index ~1.5): ~5 us per km."""


@dataclass(frozen=True, kw_only=True)
class GPUSpec:
    name: str
    """The GPU model, e.g. "H100 SXM 80GB" (a calibration profile's device is compared with it)."""
    memory_gib: float = field(metadata={"min": 0.001, "max": MAX_MEMORY_GIB})
    """HBM capacity usable by the framework (what torch.cuda reports as total), GiB = 2^30 bytes."""
    hbm_bandwidth_gbs: float = field(metadata={"min": 0.001, "max": MAX_BANDWIDTH_GBS})
    """Peak HBM bandwidth, GB/s (1e9 bytes/s)."""
    peak_tflops: dict[str, float] = field(default_factory=dict)
    """Dense peak per dtype (fp32, tf32, bf16, fp16, fp8, fp4: NVFP4), TFLOP/s, without 2:4 sparsity; each in
    (0, MAX_PEAK_TFLOPS]."""
    sources: list[str] = field(default_factory=list)
    """Where each figure comes from; figures not checked against a primary source say "unverified"."""
    tdp_w: Optional[float] = field(default=None, metadata={"min": 1.0, "max": MAX_POWER_W})
    """Rated board power (W) at which `peak_tflops` holds (H100 SXM 700, A100 SXM 400); null = not stated."""
    sms: Optional[int] = field(default=None, metadata={"min": 1, "max": MAX_SMS})
    """Streaming multiprocessors on the die (H100 SXM 132, A100 108, B200 148): an expert all-to-all's
    kernels hold some of them, which the compute overlapped with it loses (`cost/ep_sm_share.py`);
    null = not stated (that SM cost is then not priced)."""
    power_limit_w: Optional[float] = field(default=None, metadata={"min": 1.0, "max": MAX_POWER_W})
    """The power cap the cluster runs its GPUs at (`nvidia-smi -pl`), at most `tdp_w`; null = the rated
    power. Tensor-core work slows in proportion (`compute_clock_fraction`); HBM bandwidth does not."""
    peak_clock_mhz: Optional[float] = field(default=None, metadata={"min": 1.0, "max": MAX_CLOCK_MHZ})
    """The SM clock at which `peak_tflops` are stated (NVIDIA's boost clock for tensor-core work: H100 SXM 1,830 MHz,
    989.4 BF16 TFLOP/s = 132 SMs x 4,096 dense FLOP per clock; A100 SXM 1,410, 312 = 108 x 2,048); null = not
    stated (a clock lock is then refused)."""
    locked_clock_mhz: Optional[float] = field(default=None, metadata={"min": 1.0, "max": MAX_CLOCK_MHZ})
    """The SM clock the cluster locks its GPUs at (`nvidia-smi -lgc F,F`, common in benchmarks); null = free clocks.
    Tensor-core work runs at locked / peak_clock_mhz of its rated speed (at most 1: above the rated clock the
    power limit holds it), or at the power limit's share where that is lower (`compute_clock_fraction`); HBM
    bandwidth and host time do not change."""
    host_link_gbs: Optional[float] = field(default=None, metadata={"min": 0.001, "max": MAX_BANDWIDTH_GBS})
    """Copy bandwidth between this GPU and its host memory, each direction, GB/s, as the copy engines sustain it with
    every GPU of the node copying at once (PCIe Gen5 x16 on an x86 node; NVLink-C2C to the Grace CPU on a GB200 / GB300
    superchip): prices activation offloading (`training.offload_layers`, `plan/offload.py`); null = not stated
    (offloading is then refused)."""
    mx_formats: bool = False
    """Tensor cores that scale each 32-element block themselves (the OCP microscaling formats: MXFP8, with one E8M0
    scale per 32 values), as Blackwell's (compute capability 10.0) do: Transformer Engine's MXFP8 recipe runs only
    there (`framework.fp8_recipe: mxfp8`). false: per-tensor FP8 scaling only (Hopper, Ada)."""
    chip: Optional[str] = None
    """The GPU whose published kernel measurements price this one (a GPU of `simulator/cost/kernel_data.json`,
    e.g. "H100 SXM5 80GB"), for a variant of the same chip at the same rated peaks that differs in memory,
    power limit or links (H800; Meta's Grand Teton H100 with 96 GB HBM2e): its GEMM curve, attention tables
    and in-training GEMM share apply, at this GPU's own HBM bandwidth and power limit. null = `name`."""

    @property
    def kernel_chip(self) -> str:
        """The name the published kernel data and the sustained GEMM share are looked up by: `chip`, else `name`."""
        return self.chip or self.name

    @property
    def power_clock_fraction(self) -> float:
        """Share of the rated tensor-core throughput sustained under `power_limit_w`:
        (power_limit_w / tdp_w) ** POWER_CAP_EXPONENT; 1 without a power limit."""
        if self.power_limit_w is None or self.tdp_w is None:
            return 1.0
        return min(1.0, self.power_limit_w / self.tdp_w) ** POWER_CAP_EXPONENT

    @property
    def locked_clock_fraction(self) -> float:
        """Share of the rated tensor-core throughput at `locked_clock_mhz`: locked / peak_clock_mhz, at most 1;
        1 at free clocks."""
        if self.locked_clock_mhz is None or self.peak_clock_mhz is None:
            return 1.0
        return min(1.0, self.locked_clock_mhz / self.peak_clock_mhz)

    @property
    def compute_clock_fraction(self) -> float:
        """Share of the rated tensor-core throughput sustained: the lower of the power limit's
        (`power_clock_fraction`) and the clock lock's (`locked_clock_fraction`); the clock a GPU runs at is the
        lowest any of them allows."""
        return min(self.power_clock_fraction, self.locked_clock_fraction)


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    gpus: int = field(metadata={"min": 1, "max": MAX_NODE_GPUS})
    """GPUs in one node = one NVLink domain (72 for GB200 NVL72), at most MAX_NODE_GPUS."""
    interconnect: str = field(default="nvswitch", metadata={"choices": ("nvswitch", "nvlink", "pcie", "host")})
    """nvswitch: all-to-all NVLink through switches; nvlink: direct NVLink (priced like nvswitch);
    pcie: GPUs hang off PCIe switches; host: CPU processes talking through host memory (gloo)."""
    bandwidth_gbs: float = field(metadata={"min": 0.0, "max": MAX_BANDWIDTH_GBS})
    """Intra-node bandwidth per GPU per direction, GB/s (H100 NVLink4: 450; PCIe Gen4 x16: 32)."""
    latency_us: Optional[float] = field(default=None, metadata={"min": 0.0, "max": MAX_LATENCY_US})
    """Per-step latency of an intra-node ring hop with NCCL's Simple protocol; null = NCCL's table for
    the interconnect (NVLink 3.4 us, PCIe 5.7 us). The only intra-node latency for `host`."""
    nvls: bool = False
    """NVLink SHARP (in-switch reduction) available for all-reduce."""
    bus_efficiency: Optional[float] = field(default=None, metadata={"min": 0.001})
    """Large-message ring busbw / bandwidth_gbs; null = the constant for the interconnect in collectives.py."""
    alltoall_efficiency: Optional[float] = field(default=None, metadata={"min": 0.001})
    """Large-message NCCL all-to-all rate per GPU over its intra-node links / bandwidth_gbs (an all-to-all is a
    group of sends and receives, copied by NCCL's p2p kernels, not a ring); null = bus_efficiency's."""
    pcie_switches: int = field(default=1, metadata={"min": 1, "max": MAX_NODE_GPUS})
    """PCIe switches the GPUs are split across (pcie interconnect); a ring spanning them crosses the uplinks."""
    switch_uplink_gbs: float = field(default=0.0, metadata={"min": 0.0, "max": MAX_BANDWIDTH_GBS})
    """Bandwidth between PCIe switches (through the CPU root complexes), per direction; 0 = not a bottleneck."""
    nics: int = field(default=0, metadata={"min": 0, "max": 8 * MAX_NODE_GPUS})
    """Scale-out NICs per node (one per GPU on DGX H100). With fewer NICs than GPUs, GPU i uses NIC
    i * nics // gpus; with more (AWS p5: 4 per GPU), GPU i owns NICs i*k .. i*k+k-1, k = nics // gpus."""
    nic_bandwidth_gbs: float = field(default=0.0, metadata={"min": 0.0, "max": MAX_BANDWIDTH_GBS})
    """Per NIC per direction, GB/s (400 Gb/s NDR: 50)."""
    nic_efficiency: Optional[float] = field(default=None, metadata={"min": 0.001})
    """Achieved / nominal NIC bandwidth for large messages; null = the constant in collectives.py (0.94)."""
    nic_p2p_efficiency: Optional[float] = field(default=None, metadata={"min": 0.001})
    """The same for point-to-point sends (pipeline stages, CP rings); null = nic_efficiency. Set apart by
    `measured_network.measured_topology`, which solves the collectives' efficiencies from all-job
    all-gather and all-reduce probes: those have every node sending at once, a lone pipeline send does not."""
    p2p_latency_us: Optional[float] = field(default=None, metadata={"min": 0.0, "max": MAX_LATENCY_US})
    """Measured latency of one point-to-point send (a pipeline send, a CP ring step), in place of NCCL's
    model (base + one ring step); its transfer time comes on top. null = NCCL's model. Set by
    `measured_network.measured_topology` for a job in a state that breaks sends (the playbook's jobs with
    a node whose NVLink was down took ~250 ms per pipeline send: `playbook.DEGRADED_P2P_LATENCY_US`)."""
    nic_tree_efficiency: Optional[float] = field(default=None, metadata={"min": 0.001})
    """The same for NCCL's tree and NVLS-tree all-reduce across nodes; null = nic_efficiency. On the
    playbook's EFA cluster a 1 GiB all-reduce over 8-64 nodes (tree) measured ~180 GB/s busbw, while the
    all-gather rings of the same jobs moved ~315 GB/s per node once their per-step latency is taken out."""
    comm_overlaps_compute: bool = True
    """Communication runs beside compute without slowing it (GPUs: NCCL on its own SMs and copy engines).
    false: the rank's own core moves and reduces the data (gloo between CPU processes), so collectives and
    compute take turns and every collective is exposed (`Scenario.overlap_dp` / `overlap_tp` /
    `overlap_cp`). Measured on the 2-core cpu-host machine (`python benchmarks/cpu_comm_overlap.py`): an
    async gloo all-reduce of 0.25-16 MB next to a GEMM loop hid between -48 % and +16 % of its time (30
    repeats; negative: the pair ran slower than one after the other), i.e. no dependable overlap."""
    nic_latency_us: float = field(default=1.0, metadata={"min": 0.0, "max": MAX_LATENCY_US})
    """Network latency added to each inter-node step on top of NCCL's software latency: NIC to NIC
    through one switch (NCCL's `latencyInter`; added twice for Simple, which flushes)."""


@dataclass(frozen=True, kw_only=True)
class FabricSpec:
    rail_optimized: bool = True
    """GPU i of every node reaches GPU i of every other node in its scalable unit through its own leaf (rail)."""
    oversubscription: float = field(default=1.0, metadata={"min": 1.0, "max": 1024.0})
    """Leaf-to-spine oversubscription (1 = full bisection)."""
    leaf_radix: int = field(default=64, metadata={"min": 2, "max": 1 << 20})
    """Ports per leaf switch that face nodes (rail-optimized: nodes per scalable unit)."""
    switch_latency_us: float = field(default=0.6, metadata={"min": 0.0, "max": MAX_LATENCY_US})
    """Per switch hop; a path through the spine crosses three switches instead of one."""
    ring_step_latency_us: float = field(default=0.0, metadata={"min": 0.0, "max": MAX_LATENCY_US})
    """Measured time of one step of a ring that spans nodes: every step of such a ring (n - 1 for an
    all-gather or reduce-scatter over n ranks, 2(n - 1) for an all-reduce) waits at least this long, the
    intra-node steps included, since the ring moves in lockstep behind its network hops. 0 = NCCL's
    tuning model alone (intra steps at NVLink latency, inter steps at the NIC's). See aws-p5.yaml."""
    ring_core_gbs: float = field(default=0.0, metadata={"min": 0.0, "max": MAX_BANDWIDTH_GBS})
    """Cross-node bandwidth (nominal, per direction) one collective gets in total however many nodes it
    spans: each of its n nodes gets 1/n of it through the spine (`collectives.shares`). 0 = no such limit
    (every shipped topology). aws-p5 once used it for the playbook cluster's slow network state; the
    playbook's own runs show that state slows every collective of a job, small ones too, so it is now
    priced per job from the measured busbw instead (`measured_network.py`)."""


@dataclass(frozen=True, kw_only=True)
class DatacenterLink:
    bandwidth_gbs: float = field(metadata={"min": 0.0, "max": MAX_BANDWIDTH_GBS})
    """Bandwidth of the WAN link between neighbouring sites, per direction, GB/s."""
    distance_km: float = field(default=0.0, metadata={"min": 0.0, "max": 40_075.0})
    """Fibre length between neighbouring sites (sets the latency when latency_ms is null); at most the
    Earth's circumference."""
    latency_ms: Optional[float] = field(default=None, metadata={"min": 0.0, "max": MAX_LATENCY_US / 1e3})
    """One-way latency; null = distance / (2/3 c) in fibre."""

    @property
    def latency_s(self) -> float:
        if self.latency_ms is not None:
            return self.latency_ms * 1e-3
        return self.distance_km / FIBRE_KM_PER_S


@dataclass(frozen=True, kw_only=True)
class DatacenterSpec:
    sites: int = field(default=1, metadata={"min": 1, "max": 1024})
    """Datacenters the nodes are spread over."""
    nodes_per_site: Optional[int] = field(default=None, metadata={"min": 1})
    """Node k sits in site k // nodes_per_site (the last site takes any extra nodes)."""
    arrangement: str = field(default="line", metadata={"choices": ("line", "loop")})
    """line: site i links to i+1; loop: also the last to the first (needs 3+ sites)."""
    link: Optional[DatacenterLink] = None
    """The WAN link between neighbouring sites (see `datacenters.link`)."""


LLAMA3_TECTONIC_SUSTAINED_GBS = 2000.0
"""Meta's Tectonic file system behind the Llama 3 training cluster: 2 TB/s sustained (7 TB/s peak) write
throughput (Llama 3 Herd of Models, 2024, section 3.3.1 Storage), for up to 16k GPUs = 2,048 nodes."""


@dataclass(frozen=True, kw_only=True)
class StorageSpec:
    """Checkpoint storage as one node sees it (wholerun/checkpoint.py)."""
    write_gbs: float = field(default=LLAMA3_TECTONIC_SUSTAINED_GBS / 2048, metadata={"min": 1e-6})
    """Sustained checkpoint write bandwidth per node, GB/s. Default 0.98: Tectonic's 2 TB/s sustained
    shared by the 2,048 nodes of a 16k-GPU job (Llama 3 report, section 3.3.1), the per-node share a file
    system sized for such a cluster gives when every node writes at once."""
    read_gbs: Optional[float] = field(default=None, metadata={"min": 1e-6})
    """Per-node read bandwidth for reloading a checkpoint; null = write_gbs (assumption)."""
    aggregate_write_gbs: Optional[float] = field(default=None, metadata={"min": 1e-6})
    """A cap on the whole file system's write bandwidth, GB/s; null = none beyond nodes x write_gbs."""
    host_copy_gbs: float = field(default=25.0, metadata={"min": 1e-6})
    """Device-to-host copy per GPU for asynchronous checkpoints, GB/s. Assumption: PCIe Gen5 x16 is 64 GB/s
    per direction nominal; a copy of many state tensors into pinned memory gets well under that."""


@dataclass(frozen=True, kw_only=True)
class Topology:
    name: str
    """Short name, usually the file name."""
    description: str = ""
    """Free text: the system it describes."""
    gpu: GPUSpec
    """The accelerator (see `gpu`)."""
    node: NodeSpec
    """One node: its GPUs, their interconnect and its NICs (see `node`)."""
    fabric: FabricSpec = field(default_factory=FabricSpec)
    """The network between nodes (see `fabric`)."""
    datacenters: Optional[DatacenterSpec] = None
    """Nodes spread over several sites joined by WAN links (see `datacenters`); null = one site."""
    storage: StorageSpec = field(default_factory=StorageSpec)
    """Where checkpoints are written and read back (see `storage`): the whole-run estimate's write time."""
    sources: list[str] = field(default_factory=list)
    """Where the node and network figures come from."""

    def nominal_peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for a training precision as the datasheet states it (what MFU divides by); fp8
        falls back to bf16 where the GPU has none."""
        t = self.gpu.peak_tflops
        value = t.get(dtype) or (t.get("bf16") if dtype == "fp8" else None) or t.get("fp32")
        return float(value) * 1e12

    def peak_flops(self, dtype: str) -> float:
        """The dense peak the GPU sustains: the datasheet's under its power limit (`gpu.power_limit_w`)."""
        return self.nominal_peak_flops(dtype) * self.gpu.compute_clock_fraction

    @cached_property
    def key(self) -> str:
        """Canonical text of every field: equal topologies have equal keys (used to cache per topology)."""
        return json.dumps(to_mapping(self), sort_keys=True)

    def __hash__(self) -> int:  # kept by @dataclass (explicit __hash__); fields hold dicts and lists
        return hash(self.key)

    @property
    def sites(self) -> int:
        return self.datacenters.sites if self.datacenters else 1


def topology_names() -> list[str]:
    return sorted(p.stem for p in TOPOLOGY_DIR.glob("*.yaml"))


def check_topology(t: Topology, where: str) -> Topology:
    """Cross-field checks `from_mapping` cannot express; each names the key path."""
    unknown = [k for k in t.gpu.peak_tflops if k not in DTYPES]
    if unknown:
        raise ScenarioError(f"{where}.gpu.peak_tflops.{unknown[0]}", "unknown dtype", " | ".join(DTYPES))
    for k, v in t.gpu.peak_tflops.items():
        if not 0 < v <= MAX_PEAK_TFLOPS:
            raise ScenarioError(f"{where}.gpu.peak_tflops.{k}", f"{v} is out of range", f"(0, {MAX_PEAK_TFLOPS:g}] TFLOP/s")
    g = t.gpu
    if g.power_limit_w is not None and g.tdp_w is None:
        raise ScenarioError(f"{where}.gpu.power_limit_w", "given without gpu.tdp_w (the rated power the peaks hold at)",
                            "gpu.tdp_w too, e.g. 700 for an H100 SXM")
    if g.power_limit_w is not None and g.power_limit_w > g.tdp_w:
        raise ScenarioError(f"{where}.gpu.power_limit_w", f"{g.power_limit_w:g} W is above the rated {g.tdp_w:g} W "
                            "(a higher cap does not raise the datasheet peaks)", f"at most gpu.tdp_w = {g.tdp_w:g}")
    if g.locked_clock_mhz is not None and g.peak_clock_mhz is None:
        raise ScenarioError(f"{where}.gpu.locked_clock_mhz", "given without gpu.peak_clock_mhz (the clock the peaks hold at)",
                            "gpu.peak_clock_mhz too, e.g. 1830 for an H100 SXM")
    if not any(k in t.gpu.peak_tflops for k in ("bf16", "fp32")):
        raise ScenarioError(f"{where}.gpu.peak_tflops", "needs at least a bf16 or an fp32 figure")
    n = t.node
    for key in ("bus_efficiency", "alltoall_efficiency", "nic_efficiency", "nic_p2p_efficiency", "nic_tree_efficiency"):
        v = getattr(n, key)
        if v is not None and v > 1.0:
            raise ScenarioError(f"{where}.node.{key}", f"{v} is above 1", "a fraction in (0, 1]")
    if n.bandwidth_gbs <= 0 and n.gpus > 1:
        raise ScenarioError(f"{where}.node.bandwidth_gbs", "must be positive for a node with more than one GPU")
    if n.nvls and n.interconnect not in ("nvswitch",):
        raise ScenarioError(f"{where}.node.nvls", f"true with interconnect {n.interconnect!r}", "nvls only with nvswitch")
    if n.gpus % n.pcie_switches:
        raise ScenarioError(f"{where}.node.pcie_switches", f"{n.pcie_switches} does not divide {n.gpus} GPUs", "a divisor of node.gpus")
    if n.pcie_switches > 1 and n.interconnect != "pcie":
        raise ScenarioError(f"{where}.node.pcie_switches", f"{n.pcie_switches} with interconnect {n.interconnect!r}", "1 unless interconnect is pcie")
    if (n.nics > 0) != (n.nic_bandwidth_gbs > 0):
        raise ScenarioError(f"{where}.node.nic_bandwidth_gbs", f"nics = {n.nics} with nic_bandwidth_gbs = {n.nic_bandwidth_gbs}",
                            "both zero (single node only) or both positive")
    if n.nics and n.nics % n.gpus and n.gpus % n.nics:
        raise ScenarioError(f"{where}.node.nics", f"{n.nics} NICs for {n.gpus} GPUs",
                            "a divisor or a multiple of node.gpus (GPUs share NICs evenly, or own several each)")
    d = t.datacenters
    if d is not None and d.sites > 1:
        if d.link is None or d.link.bandwidth_gbs <= 0:
            raise ScenarioError(f"{where}.datacenters.link", "a positive link.bandwidth_gbs is required with more than one site")
        if d.nodes_per_site is None:
            raise ScenarioError(f"{where}.datacenters.nodes_per_site", "required with more than one site")
        if d.arrangement == "loop" and d.sites < 3:
            raise ScenarioError(f"{where}.datacenters.arrangement", f"loop with {d.sites} sites", "line, or loop with 3+ sites")
    return t


def topology_from_mapping(raw, where: str = "topology") -> Topology:
    return check_topology(from_mapping(Topology, raw, where), where)


def load_topology(spec: str, base_dir: Path | None = None, path: str = "cluster.topology") -> Topology:
    """A name in topologies/ (without extension) or a path to a topology YAML."""
    if not isinstance(spec, str):
        raise ScenarioError(path, f"expected a topology name or path, got {short(spec)}")
    candidates = [Path(spec)] + ([base_dir / spec] if base_dir is not None else [])
    if "/" not in spec and "\\" not in spec:
        candidates.insert(0, TOPOLOGY_DIR / f"{spec}.yaml")
    file = existing_file(spec, *candidates)
    if file is None:
        raise ScenarioError(path, f"unknown topology {short(spec)}", ", ".join(topology_names()) + " or a path to a YAML file")
    raw = read_yaml_file(file, f"{path} {file}")
    return topology_from_mapping(raw, f"topology {file.name}")

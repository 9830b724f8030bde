"""NCCL's collective algorithms and protocols, priced on the links a process group crosses: the
candidates (ring, double binary tree, NVLS, hierarchical, pairwise all-to-all, send/recv) with their
latency and bandwidth, and how a group shares its links with its siblings. `collectives.py` holds the
entry points and picks the fastest candidate, as NCCL's tuner does (NVIDIA/nccl src/graph/tuning.cc).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from ..errors import ScenarioError
from .network import GroupLayout
from .ep_sm_share import NCCL_ALL_TO_ALL_CHANNELS
from .nvls import NvlsPipeline, without_loop_overhead
from ..topology import Topology

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
PROTOCOLS = ("LL", "LL128", "Simple")

# --- achievable bandwidth, large messages ------------------------------------------------------
NVLINK4_GBS = 450.0
"""H100/H200 NVLink4 per GPU per direction (900 GB/s bidirectional; docs/modeling.md §2.5)."""
RING_BUSBW_H100_GBS = 370.0
"""~370 GB/s busbw for ring AG/RS/AR on 8 x H100 (nccl-tests #212, NVIDIA maintainer; docs/modeling.md §5.3)."""
NVLS_BUSBW_H100_GBS = 480.0
"""~480 GB/s all-reduce busbw with NVLink SHARP on 8 x H100 (nccl-tests #212, #290: 476; #272 H200: 475)."""
BUS_EFFICIENCY = {"nvswitch": RING_BUSBW_H100_GBS / NVLINK4_GBS, "nvlink": RING_BUSBW_H100_GBS / NVLINK4_GBS,
                  "pcie": 0.80, "host": 1.0}
"""Ring busbw / nominal per-direction bandwidth. NVLink: 370/450 (measured, above). PCIe: assumption
(Gen4 x16 reaches ~25 of 32 GB/s in practice; not measured here). host: nominal, calibrate instead."""
NVLS_EFFICIENCY = without_loop_overhead(NVLS_BUSBW_H100_GBS * 1e9 / (2 * 7 / 8)) / 1e9 * (1 + 1 / 8) / NVLINK4_GBS
"""NVLS all-reduce moves S(1 + 1/n) per GPU per direction (multimem ld_reduce of its 1/n slice from the
switch, then st multicast); fitted so 8 x H100 gives 480 GB/s busbw (algbw 274) at large sizes once
`nvls.NvlsPipeline` adds its per-loop cost: the links' rate is 0.73 of NVLink."""
NIC_EFFICIENCY = 47.0 / 50.0
"""46-48 GB/s achieved per 400 Gb/s NDR NIC (nccl-tests #290, NVIDIA maintainer; docs/modeling.md §5.3)."""
WAN_EFFICIENCY = 1.0
"""Long-haul links priced at nominal rate, as Epoch AI's decentralized-training estimate does (assumption)."""

# --- NCCL's tuning model (NVIDIA/nccl src/graph/tuning.cc, 2.19-era file; microseconds) --------
NCCL_BASE_LAT_US = {"tree": {"LL": 6.8, "LL128": 14.0, "Simple": 0.0}, "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
                    "nvls": {"Simple": 0.0}, "nvls_tree": {"Simple": 0.0}}
NCCL_HW_LAT_US = {
    "nvlink": {"tree": {"LL": 0.6, "LL128": 1.25, "Simple": 28.0}, "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
               "nvls": {"Simple": 23.0}, "nvls_tree": {"Simple": 23.0}},
    "pci": {"tree": {"LL": 1.0, "LL128": 1.9, "Simple": 28.0}, "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}},
    "net": {"tree": {"LL": 5.0, "LL128": 8.5, "Simple": 28.0}, "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
            "nvls": {"Simple": 18.0}, "nvls_tree": {"Simple": 14.0}},
}
"""Per-step latency by link kind, algorithm and protocol (`hwLat`); the base latency is `baseLat`."""
NCCL_NET_OVERHEAD_US = 1.0
"""Per-step network post overhead on Intel hosts (`getNetOverhead`), x3 for Simple."""
NCCL_LL_MAX_BUSBW_GBS = {1: 87.7, 2: 39.0, 3: 20.4}
"""LL busbw ceiling: one node (Hopper), two nodes, more (Intel hosts) (`llMaxBws`)."""
NCCL_RING_PLATEAU = 1.4
"""Multi-node ring all-reduce with Simple: latency x1.4 ("plateau effect of ring", sm80+)."""
NCCL_TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
"""Tree bandwidth correction at sizes 64 B x 2^i, i < 23 (`treeCorrectionFactor`)."""
NCCL_P2P_LL_THRESHOLD = 16384
"""Send/recv (and all-to-all) use LL up to this many bytes per peer (NCCL_P2P_LL_THRESHOLD default)."""


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor (doc/PERFORMANCE.md; docs/ecosystem.md §2.4): all-reduce 2(n-1)/n,
    all-gather / reduce-scatter / all-to-all (n-1)/n, send/recv 1."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if collective == "send_recv":
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


@dataclass(frozen=True)
class Candidate:
    """One (algorithm, protocol): time(S) = latency_s + S / (bandwidth_Bps x correction(S)), or its
    `pipeline`'s time where it has one."""
    algorithm: str
    protocol: str
    latency_s: float
    bandwidth_Bps: float
    """algbw reached at large S."""
    bottleneck: str
    max_bytes: float = math.inf
    """Largest S it is used for (LL for send/recv)."""
    busy: tuple = ()
    """(link class, seconds per byte of S) for every class it loads: the time that class (the group's
    share of it, as in `shares`) spends moving the bytes, protocol and latency aside (`link_busy`)."""
    pipeline: NvlsPipeline | None = None
    """NCCL's chunked pipeline (NVLS in one node): its time replaces latency + S / bandwidth."""

    def time(self, nbytes: float) -> float:
        if nbytes > self.max_bytes or self.bandwidth_Bps <= 0:
            return math.inf
        if self.pipeline is not None:
            return self.pipeline.time(nbytes, self.latency_s, self.bandwidth_Bps)
        bw = self.bandwidth_Bps
        if self.algorithm in ("tree", "nvls_tree"):
            i = int(math.log2(max(nbytes, 64) / 64))
            if i < len(NCCL_TREE_CORRECTION[self.protocol]):
                bw *= NCCL_TREE_CORRECTION[self.protocol][i]
        return self.latency_s + nbytes / bw


@dataclass(frozen=True)
class Estimate:
    collective: str
    nbytes: float
    ranks: int
    time_s: float
    algorithm: str
    protocol: str
    bottleneck: str
    latency_s: float = 0.0
    """The latency part of time_s (the rest is bytes over the bottleneck)."""

    @property
    def algbw_GBps(self) -> float:
        return self.nbytes / self.time_s / 1e9 if self.time_s > 0 else 0.0

    @property
    def busbw_GBps(self) -> float:
        return self.algbw_GBps * busbw_factor(self.collective, self.ranks) if self.ranks > 1 else 0.0


# ----------------------------------------------------------------------------------- links

@dataclass(frozen=True)
class Shares:
    """Bytes/s one group gets on each link class after sharing (None: the group does not cross it)."""
    intra: float
    """Per GPU per direction (NVLink, PCIe or host memory)."""
    uplink: float | None
    """Per PCIe switch uplink, when the group spans switches in a node."""
    nic: float | None
    """Per node, all of the group's NICs there together."""
    spine: float | None
    """Per leaf domain, its uplinks to the spine."""
    wan: float | None
    """Per WAN link and direction."""
    nic_gpu: float | None = None
    """One GPU's NICs (what a single send leaving the node gets)."""
    wan_factor: float = 0.0
    """Share of a rank's ring bytes X crossing the busiest WAN link per direction. Loop: 1/2 (half the
    data goes each way round, Epoch AI's bidirectional ring: (k-1)/k S per link for an all-reduce).
    Line of k sites: floor(k/2)/(k-1) (reduce towards and spread from the middle; 1 for two sites)."""


def shares(topology: Topology, L: GroupLayout, concurrent: int = 1, siblings: bool = True,
           traffic: str = "ring") -> Shares:
    """Static contention from the layout: with `siblings`, every node's g/p groups, every leaf domain's
    groups and every site's groups push the same bytes at once, so each gets its ranks' share. `traffic`
    picks the NIC efficiency: "ring" (`node.nic_efficiency`), "tree" (`nic_tree_efficiency`) or "p2p"
    (`nic_p2p_efficiency`), each falling back to nic_efficiency; "alltoall": the ring's, and in the node
    `node.alltoall_efficiency`."""
    n, f = topology.node, topology.fabric
    g_hw = n.gpus
    c = max(1, concurrent)
    bus = n.bus_efficiency or BUS_EFFICIENCY[n.interconnect]
    intra = n.bandwidth_gbs * 1e9 * ((n.alltoall_efficiency or bus) if traffic == "alltoall" else bus) / c
    uplink = None
    if n.interconnect == "pcie" and L.switches > 1 and n.switch_uplink_gbs > 0:
        gps = g_hw // n.pcie_switches
        uplink = n.switch_uplink_gbs * 1e9 * BUS_EFFICIENCY["pcie"] * (L.per_switch / gps if siblings else 1.0) / c
    nic = nic_gpu = spine = wan = None
    wan_factor = 0.0
    if L.nodes > 1:
        if n.nics == 0:
            raise ScenarioError("cluster.nodes", f"topology {topology.name} has no NICs, so a group cannot span {L.nodes} nodes",
                                "1 node")
        special = {"p2p": n.nic_p2p_efficiency, "tree": n.nic_tree_efficiency}.get(traffic)
        eff = special or n.nic_efficiency or NIC_EFFICIENCY
        b_nic = n.nic_bandwidth_gbs * 1e9 * eff
        usable = L.per_node * n.nics / g_hw if siblings else min(n.nics, max(1.0, L.per_node * n.nics / g_hw))
        nic = usable * b_nic / c
        nic_gpu = (n.nics / g_hw if siblings else max(1.0, n.nics / g_hw)) * b_nic / c
        if L.domains > 1:
            if siblings:  # the domain's uplinks, split over every group with ranks under it
                spine = L.nodes_per_domain * L.per_node * n.nics / g_hw * b_nic / f.oversubscription / c
            else:
                leaves = min(n.nics, max(1.0, L.per_node * n.nics / g_hw)) if f.rail_optimized else 1.0
                spine = leaves * f.leaf_radix * b_nic / f.oversubscription / c
            if f.ring_core_gbs > 0:  # the collective's own share of the core, 1/n per node it spans
                core = f.ring_core_gbs * 1e9 * eff / L.nodes / c
                spine = min(spine, core * (L.per_node / g_hw if siblings else 1.0))
        if L.sites > 1:
            d = topology.datacenters
            site_gpus = d.nodes_per_site * L.gpus_per_node
            wan = d.link.bandwidth_gbs * 1e9 * WAN_EFFICIENCY * (L.per_site / site_gpus if siblings else 1.0) / c
            wan_factor = 0.5 if d.arrangement == "loop" else (L.sites // 2) / (L.sites - 1)
    return Shares(intra=intra, uplink=uplink, nic=nic, nic_gpu=nic_gpu, spine=spine, wan=wan, wan_factor=wan_factor)


def bottleneck(loads: dict[str, float], sh: Shares) -> tuple[float, str]:
    """(seconds per byte of S, link class) of the slowest class; loads are bytes per byte of S through
    one GPU's intra link, one switch uplink, one node's NICs, one domain's uplinks, one WAN link."""
    rate = {"intra": sh.intra, "uplink": sh.uplink, "nic": sh.nic, "spine": sh.spine, "wan": sh.wan}
    worst, name = 0.0, "none"
    for cls, load in loads.items():
        if load <= 0 or rate.get(cls) is None:
            continue
        if cls == "wan":
            load *= sh.wan_factor
        t = load / rate[cls]
        if t > worst:
            worst, name = t, cls
    return worst, name


def class_times(loads: dict[str, float], sh: Shares) -> tuple:
    """(link class, seconds per byte of S) of every loaded class: `bottleneck`'s terms, all of them."""
    rate = {"intra": sh.intra, "uplink": sh.uplink, "nic": sh.nic, "spine": sh.spine, "wan": sh.wan}
    out = []
    for cls, load in loads.items():
        if load <= 0 or rate.get(cls) is None:
            continue
        out.append((cls, load * (sh.wan_factor if cls == "wan" else 1.0) / rate[cls]))
    return tuple(out)


def _bw(seconds_per_byte: float) -> float:
    """Bytes/s from seconds per byte (a group whose bytes cross no priced link moves them for free)."""
    return 1 / seconds_per_byte if seconds_per_byte > 0 else math.inf


def net_loads(node_egress: float, L: GroupLayout) -> dict[str, float]:
    """Off-node bytes (per byte of S) leaving one node cross its NICs, and - once per ring traversal -
    the domain's uplinks and the WAN (rings visit nodes, domains and sites in order)."""
    if L.nodes <= 1:
        return {}
    return {"nic": node_egress, "spine": node_egress if L.domains > 1 else 0.0, "wan": node_egress if L.sites > 1 else 0.0}


# ----------------------------------------------------------------------------------- latency

def _intra_kind(topology: Topology) -> str:
    return {"nvswitch": "nvlink", "nvlink": "nvlink", "pcie": "pci", "host": "host"}[topology.node.interconnect]


def protocols(topology: Topology, algorithm: str) -> tuple[str, ...]:
    """NCCL enables LL128 only over NVLink; NVLS is Simple only; gloo (host) has one protocol."""
    kind = _intra_kind(topology)
    if kind == "host" or algorithm.startswith("nvls"):
        return ("Simple",)
    return PROTOCOLS if kind == "nvlink" else ("LL", "Simple")


def step_latency(topology: Topology, L: GroupLayout, algorithm: str, protocol: str) -> tuple[float, float, float]:
    """(base, intra-node step, inter-node step) latency in seconds for NCCL's model (tuning.cc):
    interLat = hwLat[NET] + latencyInter (twice for Simple, which flushes); latencyInter = NIC latency +
    switch hops (3 through the spine). A node's `latency_us` overrides the Simple intra step."""
    n, f = topology.node, topology.fabric
    kind = _intra_kind(topology)
    if kind == "host":
        return 0.0, (n.latency_us or 0.0) * 1e-6, (n.latency_us or 0.0) * 1e-6
    algo = algorithm if algorithm in NCCL_BASE_LAT_US else "ring"
    base = NCCL_BASE_LAT_US[algo].get(protocol, 0.0)
    intra = NCCL_HW_LAT_US[kind].get(algo, NCCL_HW_LAT_US[kind]["ring"]).get(protocol, 0.0)
    if protocol == "Simple" and n.latency_us is not None and algo == "ring":
        intra = n.latency_us
    hops = 3 if L.domains > 1 or L.sites > 1 else 1
    lat_inter = n.nic_latency_us + hops * f.switch_latency_us
    inter = NCCL_HW_LAT_US["net"][algo].get(protocol, 0.0) + lat_inter * (2 if protocol == "Simple" else 1)
    if L.nodes > 1:
        intra = max(intra, NCCL_NET_OVERHEAD_US * (3 if protocol == "Simple" else 1))
    return base * 1e-6, intra * 1e-6, inter * 1e-6


def ring_latency(topology: Topology, L: GroupLayout, collective: str, protocol: str) -> float:
    """NCCL ring: base + (nsteps - nInter) x intra + nInter x inter; nsteps = 2(n-1) for all-reduce,
    n-1 for all-gather / reduce-scatter; nInter = 2N (all-reduce), N-1 (others) over N nodes. WAN:
    propagation across the group's sites once per phase (bidirectional ring, Epoch AI)."""
    base, intra, inter = step_latency(topology, L, "ring", protocol)
    n, N = L.size, L.nodes
    ar = collective == "all_reduce"
    nsteps = 2 * (n - 1) if ar else n - 1
    ninter = (2 * N if ar else N - 1) if N > 1 else 0
    ninter = min(ninter, nsteps)
    t = base + (nsteps - ninter) * intra + ninter * inter
    if ar and N > 1 and protocol == "Simple":
        t *= NCCL_RING_PLATEAU
    step = topology.fabric.ring_step_latency_us * 1e-6
    if N > 1 and step > 0:  # a measured floor per step: the ring moves in lockstep behind its network hops
        t = max(t, base + nsteps * step)
    return t + (2 if ar else 1) * L.wan_span_s


# ----------------------------------------------------------------------------------- algorithms

def _with_protocol(algorithm: str, protocol: str, collective: str, L: GroupLayout, bw: float) -> float:
    """NCCL's protocol bandwidth factors (tuning.cc): ring LL 1/4 (all-reduce or multi-node, else 1/3)
    capped by llMaxBw; ring LL128 0.92 (0.7 at one rank per node); tree 0.92, LL 1/3.8, LL128 7/9
    in a node or 120/128 across nodes."""
    nodes_key = min(L.nodes, 3)
    n = L.size
    if algorithm in ("ring", "hierarchical", "pairwise", "p2p"):
        if protocol == "LL":
            frac = 0.25 if (L.nodes > 1 or collective == "all_reduce") else 1 / 3
            steps = {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "reduce_scatter": n - 1}.get(collective, n)
            cap = NCCL_LL_MAX_BUSBW_GBS[nodes_key] * 1e9 * n / max(steps, 1)
            return min(bw * frac, cap) if algorithm == "ring" else bw * frac
        if protocol == "LL128":
            return bw * (0.7 if (L.per_node < 2 and L.nodes > 1) else 0.92)
        return bw
    if algorithm == "tree":
        bw *= 0.92
        if protocol == "LL":
            return min(bw / 3.8, NCCL_LL_MAX_BUSBW_GBS[nodes_key] * 1e9 / 2)
        if protocol == "LL128":
            return bw * (7 / 9 if L.nodes == 1 else 120 / 128)
        return bw
    return bw


def _ring(topology, L, sh, collective) -> list[Candidate]:
    """Flat ring(s), NCCL style: ranks ordered node by node; channels spread each node's exit over its
    ranks' NICs. Per-rank bytes X = 2(n-1)/n S (all-reduce) or (n-1)/n S; a GPU sends (p-1)/p of X over
    NVLink when the ring leaves its node, all of X when it does not; each node sends X off-node."""
    n, p = L.size, L.per_node
    X = busbw_factor(collective, n)
    loads = {"intra": X * ((p - 1) / p if L.nodes > 1 else 1.0) if p > 1 else 0.0,
             "uplink": X if sh.uplink else 0.0, **net_loads(X, L)}
    t, where = bottleneck(loads, sh)
    out = []
    for proto in protocols(topology, "ring"):
        bw = _with_protocol("ring", proto, collective, L, _bw(t))
        out.append(Candidate("ring", proto, ring_latency(topology, L, collective, proto), bw, where,
                             busy=class_times(loads, sh)))
    return out


def _tree(topology, L, sh) -> list[Candidate]:
    """NCCL double binary tree across nodes, chain inside: each GPU moves 2S over NVLink; a node moves
    S (2 nodes) or 2S (more) over its NICs (nccl #457). Latency base + 2((p-1) intra + log2(N) inter)."""
    p, N = L.per_node, L.nodes
    loads = {"intra": 2.0 if p > 1 else 0.0, "uplink": 2.0 if sh.uplink else 0.0, **net_loads(1.0 if N == 2 else 2.0, L)}
    t, where = bottleneck(loads, sh)
    out = []
    for proto in protocols(topology, "tree"):
        base, intra, inter = step_latency(topology, L, "tree", proto)
        lat = base + 2 * ((p - 1) * intra + int(math.log2(N)) * inter) + 2 * L.wan_span_s
        out.append(Candidate("tree", proto, lat, _with_protocol("tree", proto, "all_reduce", L, _bw(t)), where,
                             busy=class_times(loads, sh)))
    return out


def _nvls(topology, L, sh) -> list[Candidate]:
    """NVLink SHARP: S(1+1/p) per GPU through the switch at NVLS_EFFICIENCY; across nodes (NVLS-tree)
    the reduced S leaves each node once (2 nodes) or twice (tree) over the NICs, pipelined."""
    n, p, N = topology.node, L.per_node, L.nodes
    if not n.nvls or p < 2:
        return []
    sh_nvls = replace(sh, intra=sh.intra * NVLS_EFFICIENCY / (n.bus_efficiency or BUS_EFFICIENCY[n.interconnect]))
    loads = {"intra": 1 + 1 / p, **net_loads(1.0 if N == 2 else 2.0, L)}
    t, where = bottleneck(loads, sh_nvls)
    algo = "nvls" if N == 1 else "nvls_tree"
    base, intra, inter = step_latency(topology, L, algo, "Simple")
    lat = base + intra + (2 * max(1, int(math.log2(N))) * inter + 2 * L.wan_span_s if N > 1 else 0.0)
    return [Candidate(algo, "Simple", lat, _bw(t), where, busy=class_times(loads, sh_nvls),
                      pipeline=NvlsPipeline(heads=p) if N == 1 else None)]


def _hierarchical(topology, L, sh, collective) -> list[Candidate]:
    """docs/modeling.md §5.4, phases one after another: all-reduce = ring reduce-scatter in the node, ring
    all-reduce of the S/p shards across nodes (p rails at once), ring all-gather in the node;
    all-gather = across nodes then in the node; reduce-scatter = the reverse. A candidate for the
    all-reduce only (`candidates`): NCCL runs all-gather and reduce-scatter as flat rings."""
    p, N = L.per_node, L.nodes
    if N < 2 or p < 2:
        return []
    inner = GroupLayout(size=p, gpus_per_node=L.gpus_per_node, nodes=1, per_node=p, switches=L.switches,
                        per_switch=L.per_switch, domains=1, nodes_per_domain=1, sites=1, per_site=p)
    outer = GroupLayout(size=N, gpus_per_node=L.gpus_per_node, nodes=N, per_node=1, switches=1, per_switch=1,
                        domains=L.domains, nodes_per_domain=L.nodes_per_domain, sites=L.sites, per_site=L.per_site,
                        wan_span_s=L.wan_span_s, wan_hops=L.wan_hops)
    sh_in = Shares(intra=sh.intra, uplink=sh.uplink, nic=None, spine=None, wan=None)
    ar = collective == "all_reduce"
    loads_in = {"intra": (2 if ar else 1) * (p - 1) / p, "uplink": (2 if ar else 1) if sh.uplink else 0.0}
    t_in, _ = bottleneck(loads_in, sh_in)
    # across nodes: every node sends (its p rails together) 2(N-1)/N S (all-reduce) or (N-1)/N S
    loads_out = net_loads(busbw_factor("all_reduce" if ar else "all_gather", N), L)
    t_out, where = bottleneck(loads_out, sh)
    busy = class_times(loads_in, sh_in) + class_times(loads_out, sh)  # phases in turn: classes disjoint
    out = []
    for proto in protocols(topology, "ring"):
        lat_in = ring_latency(topology, inner, "reduce_scatter", proto) * (2 if ar else 1)
        lat_out = ring_latency(topology, outer, "all_reduce" if ar else "all_gather", proto)
        # per phase protocol factors, seconds per byte of S added up
        inv = (1 / _with_protocol("hierarchical", proto, collective, inner, _bw(t_in))
               + 1 / _with_protocol("hierarchical", proto, collective, outer, _bw(t_out)))
        out.append(Candidate("hierarchical", proto, lat_in + lat_out, 1 / inv,
                             "intra" if t_in > t_out else where, busy=busy))
    return out


def _pairwise(topology, L, sh) -> list[Candidate]:
    """All-to-all: each rank sends S/n to every other. Over NVLink a GPU sends (p-1)/n S; a node p(n-p)/n S
    off-node; a leaf domain with m nodes m p(n-mp)/n S to the spine; a site to every other. Latency in one
    node: NCCL runs all n-1 peers in one kernel over its p2p channels (`p2p_rounds`; NVIDIA's published
    latencies on one NVL72 rack are flat from EP 8 to 32, validation/collectives_ep_all_to_all.py). Across
    nodes and with gloo, one step per peer (MPICH alltoall_intra_pairwise.c): the published multi-node H100
    rows, NIC-bound, read no better with concurrent peers (MAPE 6.7 % either way)."""
    n, p = L.size, L.per_node
    m = L.nodes_per_domain * p
    ps = L.per_switch
    loads = {"intra": (p - 1) / n, "uplink": ps * (p - ps) / n if sh.uplink else 0.0}
    if L.nodes > 1:
        loads["nic"] = p * (n - p) / n
        loads["spine"] = m * (n - m) / n if L.domains > 1 else 0.0
        if L.sites > 1:  # per-site pair volume x pairs routed over the busiest link, divided back by wan_factor
            k, s = L.sites, L.per_site
            loads["wan"] = s * s / n * _wan_pair_crossings(k, topology.datacenters.arrangement) / sh.wan_factor
    t, where = bottleneck(loads, sh)
    out = []
    for proto in ("LL", "Simple") if _intra_kind(topology) != "host" else ("Simple",):
        base, intra, inter = step_latency(topology, L, "ring", proto)
        one_node = L.nodes == 1 and _intra_kind(topology) != "host"
        lat = base + p2p_rounds(n) * intra if one_node else base + (p - 1) * intra + (n - p) * inter + L.wan_span_s
        cap = NCCL_P2P_LL_THRESHOLD * n if proto == "LL" else math.inf
        out.append(Candidate("pairwise", proto, lat, _with_protocol("pairwise", proto, "all_to_all", L, _bw(t)), where, cap,
                             busy=class_times(loads, sh)))
    return out


def p2p_rounds(n: int) -> int:
    """Peers one NCCL p2p channel serves in turn in an all-to-all of n ranks: a group's sends / receives go
    into one kernel plan, channels per peer halved down to one until the peers fit (NVIDIA/nccl
    src/enqueue.cc:1143-1146 at 5067397c): n - 1 peers over `NCCL_ALL_TO_ALL_CHANNELS`."""
    return max(1, math.ceil((n - 1) / NCCL_ALL_TO_ALL_CHANNELS))


@lru_cache(maxsize=256)
def _wan_pair_crossings(k: int, arrangement: str) -> int:
    """Most ordered site pairs whose shortest route crosses one WAN link in one direction."""
    count: dict[tuple[int, int], int] = {}
    for a in range(k):
        for b in range(k):
            if a == b:
                continue
            step = 1 if b > a else -1
            if arrangement == "loop" and abs(b - a) > k - abs(b - a):
                step = -step
            s = a
            while s != b:
                t = (s + step) % k
                count[(s, t)] = count.get((s, t), 0) + 1
                s = t
    return max(count.values())


def _send_recv(topology, L, sh) -> list[Candidate]:
    """Each member sends S to the next (a pipeline shift; every sibling group at once): S over NVLink
    between neighbours in a node; S off each node through the NICs of the one GPU that sends it
    (NCCL's p2p uses the sender's NIC); S across a domain's uplinks and a WAN link."""
    sh = replace(sh, nic=sh.nic_gpu)
    loads = {"intra": 1.0 if L.per_node > 1 else 0.0, "uplink": 1.0 if sh.uplink else 0.0, **net_loads(1.0, L)}
    if L.sites > 1:
        loads["wan"] = 1.0 / sh.wan_factor  # a chain crosses each site boundary once per direction
    t, where = bottleneck(loads, sh)
    out = []
    for proto in ("LL", "Simple") if _intra_kind(topology) != "host" else ("Simple",):
        if topology.node.p2p_latency_us is not None:  # measured for this node (`NodeSpec.p2p_latency_us`)
            lat = topology.node.p2p_latency_us * 1e-6 + L.wan_step_s
        else:
            base, intra, inter = step_latency(topology, L, "ring", proto)
            lat = base + (inter if L.nodes > 1 else intra) + L.wan_step_s
        cap = NCCL_P2P_LL_THRESHOLD if proto == "LL" else math.inf
        out.append(Candidate("p2p", proto, lat, _with_protocol("p2p", proto, "send_recv", L, _bw(t)), where, cap,
                             busy=class_times(loads, sh)))
    return out


@lru_cache(maxsize=4096)
def candidates(topology: Topology, collective: str, L: GroupLayout, concurrent: int = 1,
               siblings: bool = True) -> tuple[Candidate, ...]:
    """Every applicable (algorithm, protocol) for this collective on this layout."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r} (allowed: {' | '.join(COLLECTIVES)})")
    if L.size <= 1:
        return ()
    sh = shares(topology, L, concurrent, siblings, traffic={"send_recv": "p2p", "all_to_all": "alltoall"}.get(collective, "ring"))
    if collective == "all_reduce":
        sh_tree = shares(topology, L, concurrent, siblings, traffic="tree")
        out = _ring(topology, L, sh, collective) + _tree(topology, L, sh_tree) + _nvls(topology, L, sh_tree) \
            + _hierarchical(topology, L, sh, collective)
    elif collective in ("all_gather", "reduce_scatter"):
        out = _ring(topology, L, sh, collective)  # NCCL has no two-level all-gather / reduce-scatter
    elif collective == "all_to_all":
        out = _pairwise(topology, L, sh)
    else:
        out = _send_recv(topology, L, sh)
    if _intra_kind(topology) == "host":  # gloo: rings, pairwise and p2p only
        out = [c for c in out if c.algorithm in ("ring", "pairwise", "p2p")]
    return tuple(out)

"""The cluster as a network: where a rank sits, which links a process group's traffic crosses, and how
concurrent transfers share links.

Three layers, cheapest first (the simulator never builds a 16,384-GPU graph per collective):

* `locate(topology, rank)` and `group_layout(topology, ranks)`: arithmetic placement (node = rank //
  gpus_per_node, local GPU = rank % gpus_per_node, NIC, leaf, site), cached per group. This is what
  `collectives.py` prices from.
* `path(topology, src, dst)` routes one rank to another and `group_links(topology, ranks)` lists the
  directed links (edges of the graph below) a group's collective crosses, by link kind.
* `build_graph(topology, nodes)`: the whole cluster as a networkx DiGraph (GPUs, NVSwitch or PCIe
  switches, NICs, leaf and spine switches, datacenter gateways and WAN links), for printing and for
  checking the two functions above; build it only for small clusters.

Dynamic contention, for the engine (pure; no state between calls):

    Transfer(name, start_s, link_bytes={link: bytes, ...}, latency_s=0.0)
    fair_share_finish_times(transfers, capacity={link: bytes_per_s}) -> [finish_s per transfer]

Each transfer is a collective (or a send) reduced to the bytes it must push through each link it
uses. Between events, transfers progress at rates set by max-min fair sharing in bytes/s (progressive
filling): every active transfer's rate rises together until a link saturates; transfers on that link
freeze, the rest keep rising. A transfer alone finishes at start + max_l(bytes_l / capacity_l) +
latency_s; two identical transfers forced onto one link each take twice their bandwidth time. `collectives.collective_demand` turns a collective on a group into a
`Transfer`; `link_capacity(topology, link)` gives the capacities.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Hashable, Iterable, Mapping, Sequence

import networkx as nx
import numpy as np

from ..topology import Topology

Link = tuple[str, str]
"""A directed link: (from node, to node), both names of `build_graph` nodes."""


# ----------------------------------------------------------------------------------- names

def gpu_name(node: int, local: int) -> str:
    return f"n{node}.gpu{local}"


def nic_name(node: int, nic: int) -> str:
    return f"n{node}.nic{nic}"


def hub_name(topology: Topology, node: int, local: int) -> str:
    """The intra-node switch a GPU hangs off: NVSwitch, its PCIe switch, or host memory."""
    kind = topology.node.interconnect
    if kind == "pcie":
        return f"n{node}.pcie{(local % topology.node.gpus) // (topology.node.gpus // topology.node.pcie_switches)}"
    return f"n{node}.host" if kind == "host" else f"n{node}.nvsw"


def cpu_name(node: int) -> str:
    return f"n{node}.cpu"


def spine_name(site: int) -> str:
    return f"s{site}.spine"


def gateway_name(site: int) -> str:
    return f"s{site}.gw"


# ----------------------------------------------------------------------------------- placement

@dataclass(frozen=True, slots=True)
class Location:
    rank: int
    node: int
    local: int
    """GPU index inside its node."""
    nic: int
    """First NIC the GPU uses (its rail when rail-optimized); -1 without NICs."""
    site: int
    domain: int
    """Leaf domain inside the site: scalable unit (rail-optimized) or top-of-rack leaf."""


def nics_per_gpu(topology: Topology) -> int:
    n = topology.node
    return max(1, n.nics // n.gpus)


def nodes_per_domain(topology: Topology) -> int:
    """Nodes under one leaf domain: a scalable unit of `leaf_radix` nodes when rail-optimized (one leaf
    per rail), else the nodes whose NICs fill one top-of-rack leaf."""
    n, f = topology.node, topology.fabric
    if f.rail_optimized:
        return f.leaf_radix
    return max(1, f.leaf_radix // max(n.nics, 1))


def site_of_node(topology: Topology, node: int) -> int:
    d = topology.datacenters
    if d is None or d.sites <= 1 or not d.nodes_per_site:
        return 0
    return min(node // d.nodes_per_site, d.sites - 1)


def first_nic(topology: Topology, local: int) -> int:
    n = topology.node
    local %= n.gpus
    if n.nics == 0:
        return -1
    if n.nics >= n.gpus:
        return local * nics_per_gpu(topology)
    return local * n.nics // n.gpus


def locate(topology: Topology, rank: int, gpus_per_node: int | None = None) -> Location:
    """Where a global rank sits: node = rank // gpus_per_node, local GPU = rank % gpus_per_node."""
    g = gpus_per_node or topology.node.gpus
    node, local = divmod(rank, g)
    site = site_of_node(topology, node)
    first = node - (site * topology.datacenters.nodes_per_site if site else 0)
    return Location(rank=rank, node=node, local=local, nic=first_nic(topology, local), site=site,
                    domain=first // nodes_per_domain(topology))


def leaf_of(topology: Topology, loc: Location) -> str:
    if topology.fabric.rail_optimized:
        return f"s{loc.site}.su{loc.domain}.rail{loc.nic}"
    return f"s{loc.site}.leaf{loc.domain}"


@dataclass(frozen=True, slots=True)
class GroupLayout:
    """How one process group sits on the cluster, in the terms the collective cost model needs.

    Counts are maxima over the group's nodes / domains / sites (the busiest one sets the pace)."""
    size: int
    gpus_per_node: int
    nodes: int
    per_node: int
    """Most ranks of the group on one node."""
    switches: int
    """Most PCIe switches the group's ranks span on one node (1 on NVSwitch and host nodes)."""
    per_switch: int
    """Most ranks of the group under one PCIe switch."""
    domains: int
    """Leaf domains (scalable units or top-of-rack leaves) the group spans, over all sites."""
    nodes_per_domain: int
    """Most of the group's nodes in one leaf domain."""
    sites: int
    per_site: int
    """Most ranks of the group in one site."""
    wan_span_s: float = 0.0
    """Largest one-way WAN latency between two of the group's sites (0 in one site)."""
    wan_hops: int = 0
    """WAN links on the longest site-to-site path the group needs."""
    wan_step_s: float = 0.0
    """Largest one-way WAN latency between two consecutive sites of the group (a pipeline hop)."""

    @property
    def intra_node(self) -> bool:
        return self.nodes <= 1


def _site_distance(topology: Topology, a: int, b: int) -> tuple[int, float]:
    """(WAN links, one-way seconds) on the shortest way from site a to site b."""
    d = topology.datacenters
    if a == b or d is None or d.link is None:
        return 0, 0.0
    hops = abs(a - b)
    if d.arrangement == "loop":
        hops = min(hops, d.sites - hops)
    return hops, hops * d.link.latency_s


@lru_cache(maxsize=1024)
def group_layout(topology: Topology, ranks: tuple[int, ...], gpus_per_node: int | None = None) -> GroupLayout:
    """Placement summary of a group of global ranks (cached per topology, ranks and node size);
    arithmetic on the rank numbers, no graph."""
    g = gpus_per_node or topology.node.gpus
    n = topology.node
    r = np.asarray(ranks, dtype=np.int64)
    node, local = r // g, r % g
    d = topology.datacenters
    if d is not None and d.sites > 1 and d.nodes_per_site:
        site = np.minimum(node // d.nodes_per_site, d.sites - 1)
        first = node - site * d.nodes_per_site
    else:
        site, first = np.zeros_like(node), node
    domain = first // nodes_per_domain(topology)
    switch = (local % n.gpus) // max(1, n.gpus // n.pcie_switches)
    _, per_node = np.unique(node, return_counts=True)
    nodes_sw, per_switch = np.unique(node * n.pcie_switches + switch, return_counts=True)
    _, switches = np.unique(nodes_sw // n.pcie_switches, return_counts=True)
    dom_key = np.unique(np.stack([site, domain, node], axis=1), axis=0)
    _, nodes_in_domain = np.unique(dom_key[:, :2], axis=0, return_counts=True)
    sites, per_site = np.unique(site, return_counts=True)
    sites = [int(x) for x in sites]
    hops, span = 0, 0.0
    for i, a in enumerate(sites):
        for b in sites[i + 1:]:
            h, t = _site_distance(topology, a, b)
            if t > span or (t == span and h > hops):
                hops, span = h, t
    step = max((_site_distance(topology, a, b)[1] for a, b in zip(sites, sites[1:])), default=0.0)
    return GroupLayout(
        size=len(ranks), gpus_per_node=g, nodes=len(per_node), per_node=int(per_node.max()),
        switches=int(switches.max()), per_switch=int(per_switch.max()),
        domains=len(nodes_in_domain), nodes_per_domain=int(nodes_in_domain.max()),
        sites=len(sites), per_site=int(per_site.max()), wan_span_s=span, wan_hops=hops, wan_step_s=step)


def uniform_layout(topology: Topology, size: int, nodes: int, per_node: int, gpus_per_node: int | None = None) -> GroupLayout:
    """Layout from counts alone (no rank list): `per_node` consecutive ranks on each of `nodes`
    consecutive nodes. Used when a group's ranks were placed with a node size other than the topology's."""
    ranks = tuple(n * (gpus_per_node or topology.node.gpus) + i for n in range(nodes) for i in range(per_node))[:size]
    return group_layout(topology, ranks, gpus_per_node)


# ----------------------------------------------------------------------------------- routes

def _wan_path(topology: Topology, a: int, b: int) -> list[Link]:
    d = topology.datacenters
    step = 1 if b > a else -1
    if d.arrangement == "loop" and abs(b - a) > d.sites - abs(b - a):
        step = -step
    out, s = [], a
    while s != b:
        t = (s + step) % d.sites
        out.append((gateway_name(s), gateway_name(t)))
        s = t
    return out


def path(topology: Topology, src: int, dst: int, gpus_per_node: int | None = None) -> list[Link]:
    """Directed links from GPU `src` to GPU `dst` (global ranks): through the node's switch when they
    share a node, else GPU -> NIC -> leaf [-> spine [-> WAN ...] -> spine] -> leaf -> NIC -> GPU."""
    if src == dst:
        return []
    a, b = locate(topology, src, gpus_per_node), locate(topology, dst, gpus_per_node)
    ga, gb = gpu_name(a.node, a.local), gpu_name(b.node, b.local)
    if a.node == b.node:
        ha, hb = hub_name(topology, a.node, a.local), hub_name(topology, b.node, b.local)
        if ha == hb:
            return [(ga, ha), (ha, gb)]
        cpu = cpu_name(a.node)
        return [(ga, ha), (ha, cpu), (cpu, hb), (hb, gb)]
    na, nb = nic_name(a.node, a.nic), nic_name(b.node, b.nic)
    la, lb = leaf_of(topology, a), leaf_of(topology, b)
    out = [(ga, na), (na, la)]
    if la != lb:
        out.append((la, spine_name(a.site)))
        if a.site != b.site:
            out.append((spine_name(a.site), gateway_name(a.site)))
            out.extend(_wan_path(topology, a.site, b.site))
            out.append((gateway_name(b.site), spine_name(b.site)))
        out.append((spine_name(b.site), lb))
    out.extend([(lb, nb), (nb, gb)])
    return out


def link_kind(link: Link) -> str:
    """nvlink | pcie | pcie_uplink | host | gpu_nic | nic | leaf_uplink | site | wan, from the names."""
    u, v = link
    if ".gw" in u and ".gw" in v:
        return "wan"
    if ".gw" in u or ".gw" in v:
        return "site"
    if ".spine" in u or ".spine" in v:
        return "leaf_uplink"
    if ".nic" in u and ".gpu" in v or ".gpu" in u and ".nic" in v:
        return "gpu_nic"
    if ".nic" in u or ".nic" in v:
        return "nic"
    if ".cpu" in u or ".cpu" in v:
        return "pcie_uplink"
    if ".pcie" in u or ".pcie" in v:
        return "pcie"
    if ".host" in u or ".host" in v:
        return "host"
    return "nvlink"


def link_capacity(topology: Topology, link: Link) -> float | None:
    """Nominal bytes/s of a directed link; None = not a bottleneck in this model (GPU-NIC PCIe path,
    spine-to-gateway, a PCIe uplink given as 0)."""
    n, f = topology.node, topology.fabric
    kind = link_kind(link)
    if kind in ("nvlink", "pcie", "host"):
        return n.bandwidth_gbs * 1e9
    if kind == "pcie_uplink":
        return n.switch_uplink_gbs * 1e9 or None
    if kind == "nic":
        return n.nic_bandwidth_gbs * 1e9
    if kind == "leaf_uplink":
        return f.leaf_radix * n.nic_bandwidth_gbs * 1e9 / f.oversubscription
    if kind == "wan":
        return topology.datacenters.link.bandwidth_gbs * 1e9
    return None


def group_links(topology: Topology, ranks: Sequence[int], gpus_per_node: int | None = None,
                order: str = "ring") -> dict[str, list[Link]]:
    """The directed links a group's collective crosses, by kind: `ring` routes each member to the next
    (NCCL's ring, the last back to the first); `pairs` routes every member to every other (all-to-all)."""
    ranks = list(ranks)
    if order == "ring":
        hops = [(ranks[i], ranks[(i + 1) % len(ranks)]) for i in range(len(ranks))] if len(ranks) > 1 else []
    elif order == "pairs":
        hops = [(a, b) for a in ranks for b in ranks if a != b]
    else:
        raise ValueError(f"unknown order {order!r}")
    out: dict[str, list[Link]] = {}
    seen: set[Link] = set()
    for a, b in hops:
        for link in path(topology, a, b, gpus_per_node):
            if link not in seen:
                seen.add(link)
                out.setdefault(link_kind(link), []).append(link)
    return out


# ----------------------------------------------------------------------------------- graph

def build_graph(topology: Topology, nodes: int, gpus_per_node: int | None = None) -> nx.DiGraph:
    """The whole cluster of `nodes` nodes as a directed graph; edges carry `kind`, `bandwidth_Bps`
    (None = unconstrained) and `latency_s`. For printing and checks: O(nodes x GPUs) objects."""
    g = gpus_per_node or topology.node.gpus
    n, f = topology.node, topology.fabric
    G = nx.DiGraph(name=topology.name)

    def both(u, v, kind, bw, lat=0.0):
        G.add_edge(u, v, kind=kind, bandwidth_Bps=bw, latency_s=lat)
        G.add_edge(v, u, kind=kind, bandwidth_Bps=bw, latency_s=lat)

    sites = set()
    for node in range(nodes):
        site = site_of_node(topology, node)
        sites.add(site)
        for local in range(g):
            gpu = gpu_name(node, local)
            G.add_node(gpu, kind="gpu", node=node, local=local, site=site)
            hub = hub_name(topology, node, local)
            G.add_node(hub, kind={"pcie": "pcie_switch", "host": "host"}.get(n.interconnect, "nvswitch"))
            both(gpu, hub, link_kind((gpu, hub)), n.bandwidth_gbs * 1e9)
        if n.interconnect == "pcie" and n.pcie_switches > 1:
            G.add_node(cpu_name(node), kind="cpu")
            for s in range(n.pcie_switches):
                both(f"n{node}.pcie{s}", cpu_name(node), "pcie_uplink", n.switch_uplink_gbs * 1e9 or None)
        if n.nics == 0:
            continue
        for local in range(g):
            loc = locate(topology, node * g + local, g)
            for k in range(nics_per_gpu(topology) if n.nics >= g else 1):
                nic = nic_name(node, loc.nic + k)
                G.add_node(nic, kind="nic", node=node)
                both(gpu_name(node, local), nic, "gpu_nic", None)
                leaf_loc = Location(rank=loc.rank, node=node, local=local, nic=loc.nic + k, site=site, domain=loc.domain)
                leaf = leaf_of(topology, leaf_loc)
                G.add_node(leaf, kind="leaf", site=site)
                both(nic, leaf, "nic", n.nic_bandwidth_gbs * 1e9)
                G.add_node(spine_name(site), kind="spine", site=site)
                both(leaf, spine_name(site), "leaf_uplink", f.leaf_radix * n.nic_bandwidth_gbs * 1e9 / f.oversubscription)
    d = topology.datacenters
    if d is not None and d.sites > 1 and len(sites) > 1:
        for s in range(d.sites):
            G.add_node(gateway_name(s), kind="gateway", site=s)
            if spine_name(s) in G:
                both(spine_name(s), gateway_name(s), "site", None)
        pairs = [(s, s + 1) for s in range(d.sites - 1)] + ([(d.sites - 1, 0)] if d.arrangement == "loop" else [])
        for a, b in pairs:
            both(gateway_name(a), gateway_name(b), "wan", d.link.bandwidth_gbs * 1e9, d.link.latency_s)
    return G


# ----------------------------------------------------------------------------------- dynamic sharing

@dataclass(frozen=True)
class Transfer:
    """One collective or send as the network sees it."""
    name: str
    start_s: float
    link_bytes: Mapping[Hashable, float] = field(default_factory=dict)
    """Bytes to push through each link it uses (any hashable link id; `Link` tuples from this module)."""
    latency_s: float = 0.0
    """Fixed delay added after its bytes drain (software and propagation latency)."""


def max_min_rates(active: Sequence[Transfer], capacity: Mapping[Hashable, float]) -> dict[str, float]:
    """Progress rate (fraction of the transfer per second) of each active transfer under max-min fair
    sharing in bytes/s, by progressive filling (Bertsekas & Gallager, Data Networks, 2nd ed., 6.5.2).

    A transfer is one flow whose rate is the bytes/s it pushes through its most loaded link; on link l
    it draws rate x bytes_l / max(bytes). All unfrozen rates rise together; when a link fills, the
    transfers crossing it freeze. Links missing from `capacity` are unconstrained."""
    weight, share = {}, {}
    for t in active:
        links = {l: b for l, b in t.link_bytes.items() if b > 0 and capacity.get(l)}
        weight[t.name] = max(links.values(), default=0.0)
        share[t.name] = {l: b / weight[t.name] for l, b in links.items()}
    rate = {name: 0.0 for name in weight}
    rising = {name for name in weight if weight[name] > 0}
    while rising:
        used: dict = {}
        grow: dict = {}
        for name, links in share.items():
            for l, r in links.items():
                used[l] = used.get(l, 0.0) + rate[name] * r
                if name in rising:
                    grow[l] = grow.get(l, 0.0) + r
        step = min(max(capacity[l] - used[l], 0.0) / r for l, r in grow.items())
        for name in rising:
            rate[name] += step
        full = {l for l, r in grow.items() if capacity[l] - used[l] - step * r <= 1e-9 * capacity[l]}
        rising -= {name for name in rising if full & share[name].keys()} or set(rising)
    return {name: (rate[name] / weight[name] if weight[name] > 0 else math.inf) for name in rate}


def fair_share_finish_times(transfers: Iterable[Transfer], capacity: Mapping[Hashable, float]) -> list[float]:
    """Finish time of each transfer (same order) when they share links max-min fairly.

    Event-driven: between two events (a start, or a transfer's bytes draining) rates are constant
    (`max_min_rates`); finish = the time its bytes drain + latency_s. A transfer alone finishes at
    start + max_l(bytes_l / capacity_l) + latency_s."""
    transfers = list(transfers)
    names = [t.name for t in transfers]
    if len(set(names)) != len(names):
        raise ValueError("transfer names must be unique")
    left = {t.name: 1.0 for t in transfers}
    drained: dict[str, float] = {}
    pending = sorted(transfers, key=lambda t: t.start_s)
    active: list[Transfer] = []
    now = pending[0].start_s if pending else 0.0
    while pending or active:
        while pending and pending[0].start_s <= now:
            active.append(pending.pop(0))
        if not active:
            now = pending[0].start_s
            continue
        rate = max_min_rates(active, capacity)
        dt = min(left[t.name] / rate[t.name] for t in active)
        if pending:
            dt = min(dt, pending[0].start_s - now)
        for t in active:
            left[t.name] = 0.0 if rate[t.name] == math.inf else left[t.name] - dt * rate[t.name]
        now += dt
        for t in list(active):
            if left[t.name] <= 1e-12:
                drained[t.name] = now
                active.remove(t)
    return [drained[t.name] + t.latency_s for t in transfers]

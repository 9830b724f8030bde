"""Collective algorithms close to NCCL's, priced on the links a process group crosses.

API (what `CostModel` and the engine call):

    collective_time(topology, collective, nbytes, group, concurrent=1, *, gpus_per_node=None,
                    siblings=True) -> seconds
    estimate(...same..., algorithms=None) -> Estimate(time_s, algorithm, protocol, bottleneck, algbw, busbw)
    p2p_time(topology, nbytes, same_node) -> seconds
    group_alpha_beta(topology, group) -> (alpha_s, busbw_Bps)
    collective_demand(topology, collective, nbytes, ranks, start_s=0.0, name=...) -> network.Transfer
    link_capacities(topology, *transfers) -> {link: bytes/s}   (then network.fair_share_finish_times)

`collective` is all_reduce | all_gather | reduce_scatter | all_to_all | send_recv; `nbytes` is the
nccl-tests size S (the whole gathered buffer for all_gather / reduce_scatter, a rank's send buffer for
all_to_all, the message for send_recv); `group` a `layout.GroupShape` or a list of global ranks.

Model (docs/modeling.md §5): time = latency + S / algbw for each applicable (algorithm, protocol), fastest
wins, as NCCL's tuner does (NVIDIA/nccl src/graph/tuning.cc). Algorithms: ring (all-reduce, all-gather,
reduce-scatter), double binary tree (all-reduce), NVLS and NVLS-tree (all-reduce where `node.nvls`),
hierarchical (intra-node ring, inter-node ring on the rails, intra-node ring; docs/modeling.md §5.4), pairwise
all-to-all, and send/recv (each member sends to the next, as a pipeline does). algbw is set by the
bottleneck link class - per-GPU NVLink/PCIe, PCIe switch uplinks, the node's NICs, the leaf-to-spine
uplinks of a leaf domain, the WAN link between sites - after sharing (static contention):
`siblings=True` assumes every other group of the same dimension runs the same collective at the same
time (SPMD training; nccl-tests with NCCL_TESTS_SPLIT), so a group gets its ranks' share of each node's
NICs, of each leaf's uplinks and of the WAN; `concurrent` more collectives of this group at once divide
every link further. Small messages do not reach peak: NCCL's protocols (LL, LL128, Simple) trade
per-step latency for bandwidth, and tree bandwidth carries NCCL's size correction.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

from .nccl_algorithms import (BUS_EFFICIENCY, NIC_EFFICIENCY, WAN_EFFICIENCY, Estimate, busbw_factor,
                              candidates, step_latency)
from .network import GroupLayout, Transfer, group_layout, link_capacity, link_kind, path, uniform_layout
from ..topology import Topology

# ----------------------------------------------------------------------------------- entry points

def layout_of(topology: Topology, group, gpus_per_node: int | None = None) -> GroupLayout:
    """GroupLayout of a `GroupShape` or a rank list. A GroupShape placed with a node size other than
    the topology's (a scenario's gpus_per_node override) is re-laid from its counts."""
    ranks = tuple(int(r) for r in (group.ranks if hasattr(group, "ranks") else group))
    L = group_layout(topology, ranks, gpus_per_node)
    if gpus_per_node is None and hasattr(group, "nodes") and (L.nodes, L.per_node) != (group.nodes, group.per_node):
        g = max(group.per_node, topology.node.gpus)
        L = uniform_layout(topology, group.size, group.nodes, group.per_node, g)
    return L


def estimate(topology: Topology, collective: str, nbytes: float, group, concurrent: int = 1, *,
             gpus_per_node: int | None = None, siblings: bool = True,
             algorithms: Sequence[str] | None = None) -> Estimate:
    """The fastest applicable algorithm and protocol (NCCL's choice), with its time and bandwidths;
    `algorithms` restricts the choice (e.g. ("ring",) for NCCL_ALGO=RING)."""
    L = layout_of(topology, group, gpus_per_node)
    best = Estimate(collective, nbytes, L.size, 0.0, "none", "none", "none")
    if L.size <= 1 or nbytes <= 0:
        return best
    for c in candidates(topology, collective, L, int(concurrent), bool(siblings)):
        if algorithms is not None and c.algorithm not in algorithms:
            continue
        t = c.time(nbytes)
        if best.algorithm == "none" or t < best.time_s:
            best = Estimate(collective, nbytes, L.size, t, c.algorithm, c.protocol, c.bottleneck, c.latency_s)
    if best.algorithm == "none":
        raise ValueError(f"no algorithm among {algorithms} applies to {collective} on {L.size} ranks")
    return best


@lru_cache(maxsize=65536)
def _cached_time(topology, collective, nbytes, group, concurrent, gpus_per_node, siblings) -> float:
    return estimate(topology, collective, nbytes, group, concurrent, gpus_per_node=gpus_per_node,
                    siblings=siblings).time_s


def collective_time(topology: Topology, collective: str, nbytes: float, group, concurrent: int = 1, *,
                    gpus_per_node: int | None = None, siblings: bool = True) -> float:
    """Seconds for one collective of nccl-tests size `nbytes` on `group` (GroupShape or ranks), with
    `concurrent` identical collectives of this group sharing its links and, with `siblings`, every
    other group of its dimension running too. Cached per (topology, group, size)."""
    if not hasattr(group, "ranks"):
        group = tuple(int(r) for r in group)
    return _cached_time(topology, collective, float(nbytes), group, int(concurrent), gpus_per_node, bool(siblings))


@lru_cache(maxsize=65536)
def _cached_busy(topology, collective, nbytes, group, gpus_per_node) -> tuple:
    L = layout_of(topology, group, gpus_per_node)
    if L.size <= 1 or nbytes <= 0:
        return ()
    best, best_t = None, math.inf
    for c in candidates(topology, collective, L, 1, True):
        t = c.time(nbytes)
        if best is None or t < best_t:  # estimate's choice: the first of equally fast candidates
            best, best_t = c, t
    if best is None:
        return ()
    scale = 1.0
    wire = nbytes * max((t for _, t in best.busy), default=0.0)
    if best.pipeline is not None and wire > 0:  # NVLS: its loop pauses and fill hold the links too,
        scale = (best_t - best.latency_s) / wire  # as collective_demand's drain time counts them
    return tuple((cls, nbytes * t * scale) for cls, t in best.busy)


def link_busy(topology: Topology, collective: str, nbytes: float, group, *,
              gpus_per_node: int | None = None) -> dict[str, float]:
    """Seconds each link class is busy while one collective of `nbytes` runs alone, for the algorithm
    and protocol `estimate` picks (siblings=True): class -> S x load / share, the terms whose largest is
    the bandwidth part of `collective_time` (for NVLS, scaled up to it: its per-loop pauses and
    pipeline fill, `nvls.NvlsPipeline`, hold the links as well). Classes: intra (a GPU's NVLink / PCIe / host port, per
    direction), uplink (PCIe switch uplinks), nic, spine (leaf-to-spine uplinks), wan; each is the
    share the group's ranks get of it (`shares`), so per rank and per direction. The engine's link
    sharing (`engine/links.py`) divides these by the collective's time to get how much of each link a
    transfer uses when it runs at full speed."""
    if not hasattr(group, "ranks"):
        group = tuple(int(r) for r in group)
    return dict(_cached_busy(topology, collective, float(nbytes), group, gpus_per_node))


def p2p_time(topology: Topology, nbytes: float, same_node: bool) -> float:
    """A pipeline send between neighbouring GPUs: in one node, or between the same GPU of two
    neighbouring nodes (same rail, same leaf), every other GPU sending at the same time."""
    g = topology.node.gpus
    ranks = (0, 1) if same_node else (0, g)
    if same_node and g < 2:
        return 0.0
    return collective_time(topology, "send_recv", nbytes, ranks)


def group_alpha_beta(topology: Topology, group, gpus_per_node: int | None = None) -> tuple[float, float]:
    """(per-step latency in s, large-message ring busbw in bytes/s) of a group, NCCL Simple protocol:
    the alpha-beta summary time = steps x alpha + S x busbw_factor / busbw."""
    L = layout_of(topology, group, gpus_per_node)
    if L.size <= 1:
        return 0.0, math.inf
    ring = [c for c in candidates(topology, "all_reduce", L) if c.algorithm == "ring" and c.protocol == "Simple"][0]
    _, intra, inter = step_latency(topology, L, "ring", "Simple")
    return (inter if L.nodes > 1 else intra), ring.bandwidth_Bps * busbw_factor("all_reduce", L.size)


def ring_channels(ranks: Sequence[int], gpus_per_node: int) -> list[list[int]]:
    """NCCL-style ring orders, one per channel: ranks node by node; channel c enters every node at its
    c-th member, so the p channels leave a node from p different GPUs (and NICs)."""
    by_node: dict[int, list[int]] = {}
    for r in sorted(ranks):
        by_node.setdefault(r // gpus_per_node, []).append(r)
    blocks = list(by_node.values())
    p = max(len(b) for b in blocks)
    channels = p if len(blocks) > 1 else 1
    return [[r for b in blocks for r in b[c % len(b):] + b[:c % len(b)]] for c in range(channels)]


def collective_demand(topology: Topology, collective: str, nbytes: float, ranks: Sequence[int], start_s: float = 0.0,
                      name: str | None = None, gpus_per_node: int | None = None) -> Transfer:
    """The collective as a `network.Transfer` for `fair_share_finish_times`: the bytes it pushes through
    each concrete link when this group runs alone, and the latency of the algorithm NCCL would pick.

    Rings (all-reduce, all-gather, reduce-scatter) move X = busbw_factor x S per rank, split over
    `ring_channels`; a hop that leaves a node goes over NVLink to the GPU that enters the next node and
    out of that GPU's NIC, on its own rail (NCCL's PXN); tree and NVLS all-reduces use the ring's links.
    All-to-all loads every pair's route with S/n; send/recv every member-to-next route with S. The
    bytes are then scaled so the transfer alone drains in exactly the bandwidth time of `estimate`
    (siblings=False) - protocol overheads, NVLS and tree included. Capacities: `link_capacities`."""
    ranks = tuple(int(r) for r in ranks)
    g = gpus_per_node or topology.node.gpus
    est = estimate(topology, collective, nbytes, ranks, gpus_per_node=gpus_per_node, siblings=False)
    n = len(ranks)
    hops: list[tuple[list[int], float]] = []  # (rank route: a, [relay,] b), bytes
    if n > 1 and nbytes > 0:
        if collective == "all_to_all":
            hops = [([a, b], nbytes / n) for a in ranks for b in ranks if a != b]
        elif collective == "send_recv":
            order = sorted(ranks)
            hops = [([a, b], nbytes) for a, b in zip(order, order[1:])]
        else:
            per_rank = 2 * nbytes if est.algorithm in ("tree", "nvls", "nvls_tree") else nbytes * busbw_factor(collective, n)
            channels = ring_channels(ranks, g)
            for order in channels:
                entry = {}
                for r in order:
                    entry.setdefault(r // g, r)  # the member this channel enters each node at
                for a, b in zip(order, order[1:] + order[:1]):
                    relay = entry[a // g]
                    route = [a, b] if a // g == b // g or relay == a else [a, relay, b]
                    hops.append((route, per_rank / len(channels)))
    link_bytes: dict = {}
    for route, nb in hops:
        for a, b in zip(route, route[1:]):
            for link in path(topology, a, b, gpus_per_node):
                link_bytes[link] = link_bytes.get(link, 0.0) + nb
    # scale to the chosen algorithm: alone, the transfer drains in the static estimate's bandwidth time
    cap = link_capacities(topology, Transfer("probe", 0.0, link_bytes))
    alone = max((b / cap[l] for l, b in link_bytes.items() if l in cap), default=0.0)
    if alone > 0:
        k = (est.time_s - est.latency_s) / alone
        link_bytes = {l: b * k for l, b in link_bytes.items()}
    return Transfer(name=name or f"{collective}:{ranks[0]}..{ranks[-1]}", start_s=start_s, link_bytes=link_bytes,
                    latency_s=est.latency_s)


def link_capacities(topology: Topology, *transfers: Transfer) -> dict:
    """Achievable bytes/s of every link the transfers use (nominal x efficiency of its class)."""
    n = topology.node
    eff = {"nvlink": n.bus_efficiency or BUS_EFFICIENCY[n.interconnect], "pcie": n.bus_efficiency or BUS_EFFICIENCY["pcie"],
           "host": n.bus_efficiency or 1.0, "pcie_uplink": BUS_EFFICIENCY["pcie"], "nic": n.nic_efficiency or NIC_EFFICIENCY,
           "leaf_uplink": n.nic_efficiency or NIC_EFFICIENCY, "wan": WAN_EFFICIENCY}
    out = {}
    for t in transfers:
        for link in t.link_bytes:
            cap = link_capacity(topology, link)
            if cap:
                out[link] = cap * eff.get(link_kind(link), 1.0)
    return out

"""`cluster.degraded_links` and `cluster.pools`: a cluster that is not one kind of healthy node, as the scenario
gives it (read strictly). A degraded link is one node's NVLink or NICs at a share of their nominal bandwidth; a
pool is a run of nodes with another topology's GPU and node. Where they change prices: `plan/paces.py` (which
groups cross which link, which pool computes) and `cost/paced.py` (a cost model per pool and link share).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from .errors import ScenarioError
from .inputs import existing_file
from .topology import TOPOLOGY_DIR, Topology, load_topology

LINK_CLASSES = ("nic", "nvlink")
"""nic: the node's scale-out NICs (every collective or send that leaves the node); nvlink: its intra-node
interconnect (every collective with two or more members on the node)."""
MIN_LINK_SHARE = 1e-3
"""A link at under 0.1 % of its bandwidth is down, not degraded (a send would take minutes)."""


@dataclass(frozen=True, kw_only=True)
class DegradedLink:
    """One node's link class at a share of its nominal bandwidth (a NIC that trained down, an NVLink lane off)."""
    node: int = field(metadata={"min": 0})
    """Node index (rank = node x gpus_per_node + local GPU)."""
    link: str = field(metadata={"choices": LINK_CLASSES})
    """nic | nvlink."""
    bandwidth: float = field(metadata={"min": MIN_LINK_SHARE, "max": 1.0})
    """Share of the nominal bandwidth, in (0, 1] (0.5: half speed)."""


@dataclass(frozen=True, kw_only=True)
class Pool:
    """A run of nodes with one topology's GPU and node (its NVLink and NICs); the fabric between nodes stays the
    scenario topology's."""
    gpu: str
    """A topology name in topologies/ (e.g. dgx-a100) or a path to a topology YAML: whose GPU and node to use."""
    nodes: int = field(metadata={"min": 1})
    """Nodes of this pool; pools are placed in order (the first pool's nodes are nodes 0 .. nodes - 1)."""


def rank_grid_of(order: str, sizes: dict) -> tuple[np.ndarray, list[str]]:
    """grid[c_outer, ..., c_inner] = global rank for `parallel.order` (innermost first, ep left out: it borrows dp's
    ranks) and the degrees `sizes`; returns (grid, dims outermost first). `plan/layout.rank_grid` is this; it sits
    here, below plan/, so that the scenario's own checks read the same grid."""
    outer_first = list(reversed([d for d in order.split("-") if d != "ep"]))
    n = 1
    for d in outer_first:
        n *= sizes[d]
    return np.arange(n).reshape([sizes[d] for d in outer_first]), outer_first


def check_degraded_links(links, nodes: int) -> None:
    seen = set()
    for i, d in enumerate(links):
        where = f"cluster.degraded_links[{i}]"
        if d.node >= nodes:
            raise ScenarioError(f"{where}.node", f"{d.node} but the cluster has {nodes} nodes", f"0 .. {nodes - 1}")
        if (d.node, d.link) in seen:
            raise ScenarioError(where, f"node {d.node} {d.link} given twice", "one entry per node and link class")
        seen.add((d.node, d.link))


def link_shares(links) -> dict[int, dict[str, float]]:
    """{node: {link class: share of nominal bandwidth}} of every degraded node."""
    out: dict[int, dict[str, float]] = {}
    for d in links:
        out.setdefault(d.node, {})[d.link] = d.bandwidth
    return out


def resolve_pools(cluster, parallel, topology: Topology, base_dir=None) -> tuple:
    """Each pool's topology (the pool's GPU and node on the scenario's fabric and sites), checked: the pools'
    nodes sum to the cluster's, every pool's node has the scenario's GPUs per node. Returns (pools with paths
    made absolute, topologies). Also refuses `parallel.pp_layers` given with `pp_balance: speed` (which sets them)."""
    if parallel.pp_balance == "speed" and parallel.pp_layers is not None:
        raise ScenarioError("parallel.pp_layers", "given with pp_balance: speed (which sets them)", "one of the two")
    pools, nodes = cluster.pools, cluster.nodes
    gpus_per_node = cluster.gpus_per_node or topology.node.gpus
    if not pools:
        return [], ()
    if cluster.profile not in ("default", "", None):
        raise ScenarioError("cluster.pools", f"given with cluster.profile {cluster.profile!r}, measured on one GPU",
                            "profile: default with pools (each pool priced from its own GPU's specs)")
    total = sum(p.nodes for p in pools)
    if total != nodes:
        raise ScenarioError("cluster.pools", f"nodes sum to {total} but cluster.nodes is {nodes}", f"pools whose nodes sum to {nodes}")
    out, topos = [], []
    for i, p in enumerate(pools):
        where = f"cluster.pools[{i}].gpu"
        name = p.gpu
        if base_dir is not None and "/" in name and not (TOPOLOGY_DIR / f"{name}.yaml").exists():
            local = existing_file(name, base_dir / name)
            if local is not None:
                name = str(local)
        t = load_topology(name, base_dir, where)
        if t.node.gpus < gpus_per_node:
            raise ScenarioError(where, f"{p.gpu}'s node has {t.node.gpus} GPUs, the cluster uses {gpus_per_node} per node",
                                "pools whose nodes have at least the cluster's gpus_per_node GPUs (one node size for all)")
        out.append(dataclasses.replace(p, gpu=name))
        topos.append(dataclasses.replace(topology, gpu=t.gpu, node=t.node, name=f"{topology.name}+{t.name}"))
    return out, tuple(topos)


def pool_of_node(pools, node: int) -> int:
    """Index of the pool that holds `node` (0 without pools)."""
    start = 0
    for i, p in enumerate(pools):
        start += p.nodes
        if node < start:
            return i
    return 0


def check_cluster_mix(sc):
    """Layout checks of `degraded_links` and `pools`: a TP or CP group (in-pass collectives, one pace) inside one
    pool; with pools on different DP replicas (stages over several pools), no expert parallelism; `dp_balance:
    speed` needs each replica inside one pool (`replica_pools`)."""
    check_degraded_links(sc.cluster.degraded_links, sc.cluster.nodes)
    if sc.parallel.pp_balance == "speed" and sc.parallel.vpp != 1:
        raise ScenarioError("parallel.pp_balance", f"speed with vpp {sc.parallel.vpp}", "vpp 1 (one chunk per stage), or even")
    if not sc.cluster.pools:
        if sc.parallel.dp_balance == "speed":
            raise ScenarioError("parallel.dp_balance", "speed without cluster.pools", "even (one GPU kind: equal shares)")
        return sc
    if sc.parallel.diloco is not None:
        raise ScenarioError("cluster.pools", "given with parallel.diloco", "one of the two (pools across sites are not modelled)")
    grid, dims = rank_grid_of(sc.parallel.order, {"tp": sc.parallel.tp, "cp": sc.parallel.cp, "dp": sc.dp,
                                                  "pp": sc.parallel.pp})
    pool = _pool_grid(grid, sc.cluster.pools, sc.gpus_per_node)
    for dim in ("tp", "cp"):
        bad = np.moveaxis(pool, dims.index(dim), -1)
        if (bad.min(axis=-1) != bad.max(axis=-1)).any():
            raise ScenarioError("cluster.pools", f"a {dim.upper()} group would span two pools (its collectives run every layer)",
                                f"{dim} groups inside one pool's nodes")
    if sc.parallel.dp_balance == "speed":  # a replica's micro-batch share is its pool's: one pool per replica
        if replica_pools(sc.parallel.order, {"tp": sc.parallel.tp, "cp": sc.parallel.cp, "dp": sc.dp, "pp": sc.parallel.pp},
                         sc.cluster.pools, sc.gpus_per_node) is None:
            raise ScenarioError("parallel.dp_balance", "speed with a DP replica (its pipeline, TP and CP ranks) over two pools",
                                "each replica inside one pool: dp outermost in parallel.order (e.g. tp-cp-pp-ep-dp)")
    flat = np.moveaxis(pool, dims.index("pp"), 0).reshape(sc.parallel.pp, -1)
    if sc.parallel.ep > 1 and (flat.min(axis=1) != flat.max(axis=1)).any():
        raise ScenarioError("cluster.pools", f"ep {sc.parallel.ep} with pools on different DP replicas (EP groups over two pools)",
                            "pipeline stages inside pools (pp outermost in parallel.order), or ep 1")
    return sc


def _pool_grid(grid: np.ndarray, pools, gpus_per_node: int) -> np.ndarray:
    """The pool index of every rank of `grid`."""
    return np.searchsorted(np.cumsum([p.nodes for p in pools]), grid // gpus_per_node, side="right")


def replica_pools(order: str, sizes: dict, pools, gpus_per_node: int) -> tuple[int, ...] | None:
    """Per DP replica (its pipeline with its TP and CP ranks), the pool it sits in; None when one spans two pools."""
    grid, dims = rank_grid_of(order, sizes)
    per = np.moveaxis(_pool_grid(grid, pools, gpus_per_node), dims.index("dp"), 0).reshape(sizes["dp"], -1)
    if (per.min(axis=1) != per.max(axis=1)).any():
        return None
    return tuple(int(x) for x in per[:, 0])

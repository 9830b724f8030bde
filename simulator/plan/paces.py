"""The pace of a simulated rank: which GPU computes, how much slower (a straggler), and on which links each of its
process groups communicates (a pool's NVLink and NICs, a degraded node's). Both evaluators take one `Pace` per
rank from here (representative mode: `stage_paces`; every rank: `rank_paces`), so the rule lives in one place.

Rules:
  - A collective or send runs at the pace of its slowest link: its group's links are the set of `LinkVariant`s of
    its members' nodes, and it is priced on each and takes the longest (`cost/paced.py`). NCCL's ring moves in
    lockstep, one chunk per step around the ring, so its bandwidth is its slowest hop's (NCCL's ring all-reduce
    busbw = the slowest link's: nccl-tests doc/PERFORMANCE.md, "bus bandwidth"); a tree waits for its slowest
    child the same way.
  - A node's degraded link class counts for a group only where the group crosses it: `nvlink` when two or more
    members sit on that node (TP/CP/EP inside it, a DP or PP hop between its GPUs), `nic` when the group spans
    two or more nodes (DP across nodes, a PP send leaving the node).
  - Representative mode: a stage goes at the pace of its slowest member (its peers meet it at every layer's
    TP/CP/EP collectives and at the gradient sync), so for each group dimension the stage's representative takes
    the union of the links of that dimension's groups in the stage, and a PP pair of stages the union over its
    pipelines. A stage over several pools (pools on different DP replicas, each replica with an even share of the
    batch) computes on its slowest pool's GPU (`slowest_pool`) with its slowest straggler's multiplier (an upper
    bound where the two are in different pools), and its DP groups run over every pool's links. Every rank (`--full`): each rank its own groups; the in-pass dimensions (TP/CP/EP), which start
    every pass together, the union over the rank's TP/CP/EP peers, as for stragglers.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..cluster_mix import link_shares, pool_of_node
from .flops import gemm_dtype
from .layout import chunk_owner, group_ranks, last_chunk, rank_index
from ..stragglers import rank_speeds
from .stage_speed import stage_speeds

GROUP_KEYS = ("tp", "cp", "ep", "dp", "dp_cp", "edp", "dp_rep")
"""Group names a collective of one stage is priced on (`Comm.group or Comm.dim`); PP pairs and the tied-embedding
pair ("embd") join two stages and are priced by `pair_variants`."""
IN_PASS_KEYS = ("tp", "cp", "ep")
DP_KEYS = ("dp", "dp_cp", "edp", "dp_rep")


@dataclass(frozen=True, slots=True)
class LinkVariant:
    """One cost model: a pool's GPU and node, its NVLink and NICs at a share of nominal bandwidth."""
    pool: int = 0
    nvlink: float = 1.0
    nic: float = 1.0


NOMINAL = (LinkVariant(),)


@dataclass(frozen=True, slots=True)
class Pace:
    """How one simulated rank runs. The default is a homogeneous cluster's rank (every number as before)."""
    speed: float = 1.0
    """Compute-time multiplier (its slowest straggler)."""
    pool: int = 0
    """The pool whose GPU computes (`cluster.pools`; 0 without pools)."""
    links: tuple = ()
    """((group key, variants), ...) for groups not on the pool's healthy links; sorted by key."""

    def variants(self, key: str) -> tuple:
        for k, v in self.links:
            if k == key:
                return v
        return (LinkVariant(self.pool),) if self.pool else NOMINAL


def heterogeneous(sc) -> bool:
    """The cluster has pools or degraded links (else every pace is a straggler multiplier alone)."""
    return bool(sc.cluster.pools or sc.cluster.degraded_links)


def group_variants(sc, members, shares: dict | None = None) -> tuple:
    """The links a group of global ranks runs on (module docstring), sorted."""
    shares = link_shares(sc.cluster.degraded_links) if shares is None else shares
    g = sc.gpus_per_node
    counts = Counter(int(r) // g for r in members)
    multi = len(counts) > 1
    pools = sc.cluster.pools
    out = set()
    for node, n in counts.items():
        s = shares.get(node, {})
        out.add(LinkVariant(pool_of_node(pools, node), s.get("nvlink", 1.0) if n > 1 else 1.0,
                            s.get("nic", 1.0) if multi else 1.0))
    return _merge(out)


def _merge(*variant_sets) -> tuple:
    """The union of link sets, less any variant another of its pool dominates (no faster on either link class:
    the collective's price is the slowest of them, so the dominated one never sets it)."""
    out = set()
    for vs in variant_sets:
        out.update(vs)
    kept = [v for v in out if not any(w != v and w.pool == v.pool and w.nvlink <= v.nvlink and w.nic <= v.nic for w in out)]
    return tuple(sorted(kept, key=lambda v: (v.pool, v.nvlink, v.nic)))


def stage_pool_sets(sc) -> tuple[tuple[int, ...], ...]:
    """Per pipeline stage: the pools its GPUs are in (several where pools sit on different DP replicas)."""
    if not sc.cluster.pools:
        return ((0,),) * sc.parallel.pp
    ends = np.cumsum([p.nodes for p in sc.cluster.pools])
    pools = np.searchsorted(ends, np.arange(sc.gpus) // sc.gpus_per_node, side="right")
    stage_of = rank_index(sc, "pp")
    return tuple(tuple(int(x) for x in np.unique(pools[stage_of == s])) for s in range(sc.parallel.pp))


def slowest_pool(sc, pools) -> int:
    """Of `pools`, the one with the lowest dense peak in the GEMMs' precision (then the lowest HBM bandwidth, then
    the first): the GPU a stage over several pools is paced by."""
    dtype = gemm_dtype(sc)
    return min(pools, key=lambda p: (sc.pool_topologies[p].nominal_peak_flops(dtype),
                                     sc.pool_topologies[p].gpu.hbm_bandwidth_gbs, p))


def stage_pools(sc) -> tuple[int, ...]:
    """Per pipeline stage: the pool its representative computes on (the slowest of the stage's pools)."""
    if not sc.cluster.pools:
        return (0,) * sc.parallel.pp
    return tuple(slowest_pool(sc, ps) for ps in stage_pool_sets(sc))


def _degraded_ranks(sc) -> list[int]:
    g = sc.gpus_per_node
    return [n * g + i for n in sorted(link_shares(sc.cluster.degraded_links)) for i in range(g)]


def stage_paces(sc, speeds: dict | None = None, pool: int | None = None) -> tuple[Pace, ...]:
    """Per pipeline stage, the pace of its representative (module docstring). `pool`: the representative of that
    pool's DP replicas (`parallel.dp_balance: speed`, one class per pool): its GPU, its stragglers, its in-pass
    groups' links; the DP groups still span every pool."""
    if pool is not None:
        g = sc.gpus_per_node
        if speeds is None:
            speeds = rank_speeds(sc.cluster.stragglers, sc.cluster.slow_gpus, sc.gpus, sc.gpus_per_node)
        speeds = {r: x for r, x in speeds.items() if pool_of_node(sc.cluster.pools, r // g) == pool}
    speed, _ = stage_speeds(sc, speeds)
    if not heterogeneous(sc):
        return tuple(Pace(speed=x) for x in speed)
    pools = stage_pools(sc) if pool is None else (pool,) * sc.parallel.pp
    shares = link_shares(sc.cluster.degraded_links)
    stage_of = rank_index(sc, "pp")
    links: list[dict] = [{} for _ in range(sc.parallel.pp)]
    for r in _degraded_ranks(sc):
        s = int(stage_of[r])
        for key in GROUP_KEYS:
            vs = group_variants(sc, group_ranks(sc, key, r), shares)
            if key in IN_PASS_KEYS:  # another pool's in-pass group counts only degraded (the representative's own: always)
                vs = (LinkVariant(pools[s]),) + tuple(v for v in vs if v.pool == pools[s]
                                                      or (pool is None and (v.nvlink < 1 or v.nic < 1)))
            links[s][key] = _merge(links[s].get(key, ()), vs)
    for s, ps in enumerate(stage_pool_sets(sc)):
        if len(ps) > 1:  # pools on different DP replicas: the DP collectives of the stage span them
            for key in DP_KEYS:
                links[s][key] = _merge(links[s].get(key, ()), tuple(LinkVariant(p) for p in ps))
    e, h = chunk_owner(sc, 0)[0], chunk_owner(sc, last_chunk(sc))[0]
    if e != h:  # the tied-embedding all-reduce joins the first and last stages
        for s in (e, h):
            links[s]["embd"] = pair_variants(sc, e, h, pool=pool)
    out = []
    for s in range(sc.parallel.pp):
        healthy = (LinkVariant(pools[s]),)
        kept = tuple(sorted((k, v) for k, v in links[s].items() if v != healthy))
        out.append(Pace(speed=speed[s], pool=pools[s], links=kept))
    return tuple(out)


def pair_variants(sc, a: int, b: int, pipelines: bool = True, pool: int | None = None) -> tuple:
    """The links of a PP (or tied-embedding) pair. `pipelines`: a and b are stages, the pair of every pipeline
    (representative mode: the slowest of them; `pool`: of that pool's pipelines); else a and b are global ranks."""
    if not heterogeneous(sc):
        return NOMINAL
    shares = link_shares(sc.cluster.degraded_links)
    if not pipelines:
        return group_variants(sc, (a, b), shares)
    pools = stage_pools(sc) if pool is None else (pool,) * sc.parallel.pp
    out = _merge((LinkVariant(pools[a]),), (LinkVariant(pools[b]),))
    seen = set()
    g = sc.gpus_per_node
    for r in _degraded_ranks(sc):
        if pool is not None and pool_of_node(sc.cluster.pools, r // g) != pool:
            continue
        pg = group_ranks(sc, "pp", r)
        if r in (pg[a], pg[b]) and (pg[a], pg[b]) not in seen:
            seen.add((pg[a], pg[b]))
            out = _merge(out, group_variants(sc, (pg[a], pg[b]), shares))
    return out


def rank_paces(sc, speed: list[float], groups: dict, sync: list) -> list[Pace]:
    """Every rank's pace (`--full`): `speed` per rank (its TP/CP/EP peers' slowest), `groups[key][r]` the members
    of rank r's group `key`, `sync[r]` its TP/CP/EP peers (the rank itself included)."""
    if not heterogeneous(sc):
        return [Pace(speed=x) for x in speed]
    shares = link_shares(sc.cluster.degraded_links)
    memo: dict = {}

    def of(members) -> tuple:
        v = memo.get(members)
        if v is None:
            v = memo[members] = group_variants(sc, members, shares)
        return v

    g = sc.gpus_per_node
    pools = sc.cluster.pools
    out = []
    for r in range(sc.gpus):
        pool = pool_of_node(pools, r // g)
        healthy = (LinkVariant(pool),)
        links = []
        for key, per_rank in sorted(groups.items()):
            if key in IN_PASS_KEYS:
                vs = _merge(*(of(per_rank[x]) for x in sync[r]))
            else:
                vs = of(per_rank[r])
            if vs != healthy:
                links.append((key, vs))
        out.append(Pace(speed=speed[r], pool=pool, links=tuple(links)))
    return out


def degraded_link_effects(sc) -> list[dict]:
    """Per `cluster.degraded_links` entry: the group dimensions whose groups cross it (tp, cp, ep, dp_cp, ...; pp for
    a pipeline send, embd for the tied-embedding pair) and the pipeline stages they belong to (the report)."""
    g = sc.gpus_per_node
    stage_of = rank_index(sc, "pp")
    e, h = chunk_owner(sc, 0)[0], chunk_owner(sc, last_chunk(sc))[0]
    out = []
    for d in sc.cluster.degraded_links:
        dims, stages = set(), set()
        for r in range(d.node * g, (d.node + 1) * g):
            s = int(stage_of[r])
            groups = [(k, group_ranks(sc, k, r), (s,)) for k in GROUP_KEYS]
            pg = group_ranks(sc, "pp", r)
            groups += [("pp", (pg[s], pg[t]), (s, t)) for t in (s - 1, s + 1) if 0 <= t < len(pg)]
            if e != h and s in (e, h) and sc.model.tie_embeddings:
                groups.append(("embd", (pg[e], pg[h]), (e, h)))
            for key, members, st in groups:
                on = sum(1 for x in members if int(x) // g == d.node)
                nodes = len({int(x) // g for x in members})
                if (d.link == "nvlink" and on > 1) or (d.link == "nic" and nodes > 1):
                    dims.add(key)
                    stages.update(st)
        if sc.model.moe is None:  # a dense model has no expert groups
            dims -= {"ep", "edp"}
        if sc.parallel.dp_replicate == 1:
            dims.discard("dp_rep")
        if "dp_cp" in dims:  # the same ranks: DP collectives name their group dp_cp
            dims.discard("dp")
        out.append({"node": d.node, "link": d.link, "bandwidth": d.bandwidth, "groups": sorted(dims),
                    "stages": sorted(stages)})
    return out

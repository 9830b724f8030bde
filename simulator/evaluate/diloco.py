"""DiLoCo across datacenters (`parallel.diloco`, simulator/diloco_spec.py): the inner step inside one site and
the outer synchronisation over the WAN, amortised over the H inner steps between outer steps.

- The inner step is the scenario's layout on one site: nodes / sites nodes, dp / sites data-parallel replicas
  of its own, global_batch / sites sequences (the sites together still take global_batch per inner step), on the
  site's own network (`inner_scenario`). Its data-parallel collectives never cross the WAN.
- The outer all-reduce: every GPU of a site all-reduces its shard of the pseudo-gradient with the GPU in the same
  place in every other site, all of the site's GPUs at once over the WAN links (`collectives.estimate` with its
  siblings, on the sites as the job fills them); a
  GPU's shard is its stage's parameters over tp, split among the site's dp ranks, at the compression's bytes.
- Per inner step: inner + outer / H without overlap; with overlap, only what the outer all-reduce takes beyond
  the H inner steps it runs beside: max(0, outer - H x inner) / H. The WAN's share of the step falls as 1/H.
- The outer optimizer (Nesterov momentum on the fp32 outer parameters, once every H steps) is not priced: one
  elementwise pass over the shard per H inner steps. Its states (fp32 anchor + momentum, 8 B per parameter of the
  shard) are held where DiLoCo's implementations keep them, in host memory (reported, not added to the GPU's peak).
"""
from __future__ import annotations

from dataclasses import replace

from ..cost.collectives import estimate
from ..diloco_spec import OUTER_BYTES
from ..params import total_params
from ..plan.sharded_params import rank_params
from ..scenario import Scenario, validate_layout

OUTER_STATE_BYTES = 8.0
"""fp32 anchor parameters + fp32 Nesterov momentum per parameter of a rank's shard (DiLoCo's outer optimizer)."""


def inner_scenario(sc: Scenario) -> Scenario:
    """The layout on one site (module docstring)."""
    d = sc.topology.datacenters
    sites = d.sites
    topo = replace(sc.topology, datacenters=None)
    p, t = sc.parallel, sc.training
    inner = replace(sc, topology=topo, cluster=replace(sc.cluster, nodes=sc.cluster.nodes // sites),
                    parallel=replace(p, dp=sc.dp // sites, diloco=None),
                    training=replace(t, global_batch=t.global_batch // sites))
    return validate_layout(inner)


def shard_params(sc: Scenario, inner: Scenario) -> float:
    """Parameters one GPU all-reduces over the WAN: the busiest stage's, over tp, split among the site's dp."""
    per_rank = max(rank_params(inner, r).total for r in range(inner.parallel.pp))
    return per_rank / max(1, inner.dp * inner.parallel.cp)


def outer_sync(sc: Scenario, inner_step_s: float) -> dict:
    """The report's `diloco` block (module docstring); `inner_step_s`: the inner scenario's step."""
    dl = sc.parallel.diloco
    inner = inner_scenario(sc)
    sites = sc.topology.datacenters.sites
    site_gpus = inner.gpus
    shard = shard_params(sc, inner)
    nbytes = shard * OUTER_BYTES[dl.compression]
    # the same GPU of every site; the job's GPUs of a site each run such an all-reduce at once ("siblings"), all
    # of them sharing the WAN: priced on the topology with the sites holding the job's nodes
    d = sc.topology.datacenters
    topo = replace(sc.topology, datacenters=replace(d, nodes_per_site=inner.cluster.nodes))
    ranks = tuple(s * site_gpus for s in range(sites))
    outer = estimate(topo, "all_reduce", nbytes, ranks).time_s
    h = dl.outer_every
    exposed = max(0.0, outer - h * inner_step_s) if dl.overlap else outer
    step = inner_step_s + exposed / h
    return {"sites": sites, "outer_every": h, "compression": dl.compression, "overlap": dl.overlap,
            "inner_step_s": inner_step_s, "outer_sync_s": outer, "exposed_per_step_s": exposed / h, "step_s": step,
            "outer_bytes_per_gpu": nbytes,
            "wan_share": (exposed / h) / step if step > 0 else 0.0,
            "outer_state_gib_per_gpu_host": shard * OUTER_STATE_BYTES / 2**30,
            "model_params": total_params(sc.model)}

"""A topology adjusted to the network a job measured: bus bandwidths of 1 GiB probes in, link speeds out.

nanotron measures, before training, 1 GiB fp32 all-reduce / all-gather / reduce-scatter over the 8 GPUs
of one node and over every GPU of the job (`trainer.measure_bandwidth`; nccl-tests reports the same
busbw). Three of those numbers pin what the collectives model prices (`nccl_algorithms.shares`,
`nccl_algorithms.ring_latency`):

- inside a node: `node.bandwidth_gbs` is scaled until the modelled 8-GPU all-reduce reaches the measured
  busbw (only downwards: a measurement above the model's NVLink leaves the spec as it is);
- rings across nodes (all-gather, reduce-scatter: TP and ZeRO): `fabric.ring_step_latency_us` is solved
  so the modelled all-job all-gather reaches the measured busbw, at the topology's ring NIC efficiency.
  A ring spanning nodes moves in lockstep behind its network hops, so every one of its n - 1 steps costs
  that latency: on the playbook's cluster ~40 us in the healthy state (the fit split's all-gathers took
  4.5 / 6.0 / 8.6 / 14.3 / 24.4 ms on 2 / 8 / 16 / 32 / 64 nodes: linear in the ranks, ~41 us each) and
  ~180-320 us in the slow state, whose busbw fell as 1/nodes: a latency state, not a bandwidth one.
  Where the probe is bandwidth-bound (latency under `LATENCY_SHARE_MIN` of it: 2 nodes) the rings' NIC
  efficiency is solved instead and the step latency kept;
- trees across nodes (NCCL's 1 GiB all-reduce): `node.nic_tree_efficiency` is solved so the modelled
  (NVLS-)tree all-reduce reaches the measured all-job busbw (without an all-gather figure, the
  all-reduce sets `nic_efficiency` for every collective, as before the rings got their own);
- point-to-point sends keep the spec's NIC efficiency (`node.nic_p2p_efficiency`): the probes have every
  node sending at once, a pipeline send does not (playbook fit split, 463 multi-node pp > 1 runs in the
  slow network state: median predicted/measured 0.95 at the measured collective speed, 0.99 at the spec's).

The solves are log-space bisections on a quantity the modelled busbw increases with (the latency's
inverse). 21 jobs had a node whose NVLink all-reduce measured ~45 GB/s (a tenth of the others: NVLink
down). The intra-node solve prices their collectives; their pipeline sends were far slower than any
bandwidth explains (a fixed ~250 ms each, fitted on the fit split: `playbook.DEGRADED_P2P_LATENCY_US`),
which a caller passes as `degraded_p2p_latency_us` for jobs whose one-node probe reads below
`DEGRADED_INTRA_FRACTION` of the topology's.
"""
from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from typing import Callable, Optional

from . import collectives
from . import nccl_algorithms
from ..topology import Topology

PROBE_BYTES = 4 * 256 * 2 ** 20
"""nanotron's probe: torch.ones(256 Mi) fp32 = 1 GiB (docs/ecosystem.md: nccl-tests busbw)."""
NIC_EFFICIENCY_RANGE = (1e-3, 1.0)
INTRA_SCALE_RANGE = (1e-3, 1.0)
TREES = ("tree", "nvls_tree")
INV_STEP_LATENCY_RANGE = (1e-5, 100.0)
"""1 / ring step latency, 1/us: 100 ms down to 10 ns per step."""
LATENCY_SHARE_MIN = 0.2
"""Below this share of ring step latency in the modelled all-gather probe (`ring_latency_share`: 2 nodes of
aws-p5 0.14, 4 nodes 0.25, 8 0.40) the probe is bandwidth-bound and cannot pin the latency: its solve
went to ~64 us on the playbook's healthy 2-node jobs against ~40 elsewhere, pricing their tp16 runs at
0.75 of measured (median; 7 runs). There the rings' NIC efficiency is solved instead, the topology's step
latency kept: 0.86."""
DEGRADED_INTRA_FRACTION = 0.25
"""A one-node probe below this share of the topology's modelled busbw is a degraded node, not a slow one
(playbook: healthy ~458, slow ~425, degraded ~45 GB/s, against 477 modelled)."""


def probe_busbw(topology: Topology, nodes: int, gpus_per_node: int, collective: str = "all_reduce",
                algorithms=None) -> float:
    """Modelled busbw, GB/s, of the 1 GiB `collective` over `nodes` x `gpus_per_node` GPUs (the fastest
    of `algorithms`, default all)."""
    ranks = tuple(range(nodes * gpus_per_node))
    return collectives.estimate(topology, collective, float(PROBE_BYTES), ranks, gpus_per_node=gpus_per_node,
                                algorithms=algorithms).busbw_GBps


def ring_latency_share(topology: Topology, nodes: int, gpus_per_node: int) -> float:
    """Share of the modelled 1 GiB all-gather probe over `nodes` that is ring step latency: (n - 1) x
    `fabric.ring_step_latency_us` over the probe's time (0 without a step latency)."""
    n = nodes * gpus_per_node
    step = topology.fabric.ring_step_latency_us * 1e-6
    if step <= 0 or n < 2:
        return 0.0
    probe_s = PROBE_BYTES * (n - 1) / n / (probe_busbw(topology, nodes, gpus_per_node, "all_gather") * 1e9)
    return (n - 1) * step / probe_s


def _bisect(busbw_at: Callable[[float], float], target: float, lo: float, hi: float, iters: int = 40) -> float:
    """x in [lo, hi] (log space) where the increasing busbw_at(x) reaches target; an end if out of range."""
    if busbw_at(hi) <= target:
        return hi
    if busbw_at(lo) >= target:
        return lo
    for _ in range(iters):
        mid = math.sqrt(lo * hi)
        if busbw_at(mid) < target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def _with_node(t: Topology, **changes) -> Topology:
    return dataclasses.replace(t, node=dataclasses.replace(t.node, **changes))


def _with_fabric(t: Topology, **changes) -> Topology:
    return dataclasses.replace(t, fabric=dataclasses.replace(t.fabric, **changes))


@lru_cache(maxsize=4096)
def measured_topology(topology: Topology, nodes: int, gpus_per_node: int,
                      intra_busbw: Optional[float] = None, job_busbw: Optional[float] = None,
                      job_gather_busbw: Optional[float] = None,
                      degraded_p2p_latency_us: Optional[float] = None) -> Topology:
    """`topology` with its NVLink speed, ring step latency and NIC efficiencies set to reproduce the
    measured busbw (GB/s) of the 1 GiB all-reduce over one node (`intra_busbw`), of the all-gather over all
    `nodes` (`job_gather_busbw`: `fabric.ring_step_latency_us`) and of the all-reduce over all nodes
    (`job_busbw`: the trees' `nic_tree_efficiency`, or every collective's `nic_efficiency` when no
    all-gather was measured); None or 0 leaves that part as specified. A one-node probe below
    `DEGRADED_INTRA_FRACTION` of the modelled one sets `node.p2p_latency_us` to `degraded_p2p_latency_us`
    (when given)."""
    intra_busbw, job_busbw, job_gather_busbw = (b if b and b > 0 else None
                                                for b in (intra_busbw, job_busbw, job_gather_busbw))
    t = topology
    if intra_busbw:  # scale <= 1: a measurement above the spec's keeps it (`_bisect`'s end)
        nominal = t.node.bandwidth_gbs
        scale = _bisect(lambda s: probe_busbw(_with_node(t, bandwidth_gbs=nominal * s), 1, gpus_per_node),
                        intra_busbw, *INTRA_SCALE_RANGE)
        if degraded_p2p_latency_us is not None and intra_busbw < DEGRADED_INTRA_FRACTION * probe_busbw(t, 1, gpus_per_node):
            t = _with_node(t, p2p_latency_us=degraded_p2p_latency_us)
        t = _with_node(t, bandwidth_gbs=nominal * scale)
    if nodes < 2 or t.node.nics == 0 or not (job_busbw or job_gather_busbw):
        return t
    spec_eff = t.node.nic_p2p_efficiency or t.node.nic_efficiency or nccl_algorithms.NIC_EFFICIENCY
    t = _with_fabric(t, ring_core_gbs=0.0)
    t = _with_node(t, nic_p2p_efficiency=spec_eff)
    if job_gather_busbw and ring_latency_share(t, nodes, gpus_per_node) < LATENCY_SHARE_MIN:
        # a bandwidth-bound probe pins the rings' NIC efficiency, not their step latency
        eff = _bisect(lambda e: probe_busbw(_with_node(t, nic_efficiency=e), nodes, gpus_per_node, "all_gather"),
                      job_gather_busbw, *NIC_EFFICIENCY_RANGE)
        t = _with_node(t, nic_efficiency=eff)
    elif job_gather_busbw:  # solved as 1 / step latency, which the busbw increases with
        inv = _bisect(lambda x: probe_busbw(_with_fabric(t, ring_step_latency_us=1 / x), nodes, gpus_per_node,
                                            "all_gather"), job_gather_busbw, *INV_STEP_LATENCY_RANGE)
        t = _with_fabric(t, ring_step_latency_us=1 / inv)
    if job_busbw:
        if job_gather_busbw:  # NCCL's 1 GiB all-reduce across nodes is a (NVLS-)tree
            key, algorithms = "nic_tree_efficiency", TREES
        else:  # one efficiency for every collective
            key, algorithms = "nic_efficiency", None
            t = _with_node(t, nic_tree_efficiency=None)
        eff = _bisect(lambda e: probe_busbw(_with_node(t, **{key: e}), nodes, gpus_per_node, algorithms=algorithms),
                      job_busbw, *NIC_EFFICIENCY_RANGE)
        t = _with_node(t, **{key: eff})
    return t

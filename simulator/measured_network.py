"""A topology adjusted to the network a job measured: all-reduce bus bandwidths in, link speeds out.

nanotron measures, before training, a 1 GiB fp32 all-reduce over the 8 GPUs of one node and over every
GPU of the job (`trainer.measure_bandwidth`; nccl-tests reports the same busbw). Those two numbers pin
the two link speeds the collectives model prices (`collectives.shares`):

- inside a node: `node.bandwidth_gbs` is scaled until the modelled 8-GPU all-reduce reaches the measured
  busbw (only downwards: a measurement above the model's NVLink leaves the spec as it is);
- between nodes: with no core limit (`fabric.ring_core_gbs: 0`), `node.nic_efficiency` is solved so the
  modelled all-job all-reduce reaches the measured busbw. Every collective of the job (TP across two
  nodes as much as DP over all of them) then sees that per-node network; point-to-point sends keep the
  spec's NIC efficiency (`node.nic_p2p_efficiency`): a collective over all nodes has every node sending
  at once, a pipeline send does not (playbook fit split, 463 multi-node pp > 1 runs in the slow network
  state: median predicted/measured 0.95 with sends at the measured collective speed, 0.99 at the spec's).

Both solves are log-space bisections on a quantity the modelled busbw increases with. The playbook's
jobs need this (`simulator/playbook.py`): the same cluster ran in two network states (one-node
all-reduce ~458 GB/s and all-job ~175 GB/s on 8-64 nodes, or ~425 GB/s and a busbw falling as 1/nodes,
13 GB/s on 64 nodes), and 21 jobs had a node whose NVLink all-reduce measured ~45 GB/s.
"""
from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from typing import Callable, Optional

from . import collectives
from .topology import Topology

PROBE_BYTES = 4 * 256 * 2 ** 20
"""nanotron's probe: torch.ones(256 Mi) fp32 = 1 GiB (ECOSYSTEM.md: nccl-tests busbw)."""
NIC_EFFICIENCY_RANGE = (1e-3, 1.0)
INTRA_SCALE_RANGE = (1e-3, 1.0)


def all_reduce_busbw(topology: Topology, nodes: int, gpus_per_node: int) -> float:
    """Modelled busbw, GB/s, of the 1 GiB all-reduce over `nodes` x `gpus_per_node` GPUs."""
    ranks = tuple(range(nodes * gpus_per_node))
    return collectives.estimate(topology, "all_reduce", float(PROBE_BYTES), ranks,
                                gpus_per_node=gpus_per_node).busbw_GBps


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


@lru_cache(maxsize=4096)
def measured_topology(topology: Topology, nodes: int, gpus_per_node: int,
                      intra_busbw: Optional[float] = None, job_busbw: Optional[float] = None) -> Topology:
    """`topology` with its NVLink and NIC speeds set to reproduce the measured all-reduce busbw (GB/s)
    over one node (`intra_busbw`) and over all `nodes` (`job_busbw`); None leaves that part as specified."""
    t = topology
    if intra_busbw and intra_busbw > 0:  # scale <= 1: a measurement above the spec's keeps it (`_bisect`'s end)
        nominal = t.node.bandwidth_gbs
        scale = _bisect(lambda s: all_reduce_busbw(_with_node(t, bandwidth_gbs=nominal * s), 1, gpus_per_node),
                        intra_busbw, *INTRA_SCALE_RANGE)
        t = _with_node(t, bandwidth_gbs=nominal * scale)
    if job_busbw and job_busbw > 0 and nodes > 1 and t.node.nics > 0:
        spec_eff = t.node.nic_p2p_efficiency or t.node.nic_efficiency or collectives.NIC_EFFICIENCY
        t = dataclasses.replace(t, fabric=dataclasses.replace(t.fabric, ring_core_gbs=0.0))
        t = _with_node(t, nic_p2p_efficiency=spec_eff)
        eff = _bisect(lambda e: all_reduce_busbw(_with_node(t, nic_efficiency=e), nodes, gpus_per_node),
                      job_busbw, *NIC_EFFICIENCY_RANGE)
        t = _with_node(t, nic_efficiency=eff)
    return t

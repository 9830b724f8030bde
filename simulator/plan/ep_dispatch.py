"""What one expert all-to-all moves per rank: the dispatch of routed tokens to their experts' ranks and
the combine that brings the expert outputs back (`layer_ops.layer_forward` prices them as all-to-alls
over the EP group; their backward mirrors them).

`parallel.ep_dispatcher`:
  alltoall  one copy per (token, routed expert): tokens x top_k x hidden in the activation dtype
            (Megatron's alltoall dispatcher; NCCL all-to-all).
  deepep    a token crosses InfiniBand once per node it reaches and is forwarded to that node's experts
            over NVLink (DeepSeek-V3 report §3.2.2, deepseek-ai/DeepEP normal kernels): the inter-node
            traffic, which bounds the all-to-all, is tokens x nodes-reached x hidden. Priced as an
            all-to-all of that many bytes spread evenly over the EP group, whose inter-node share is
            what crosses InfiniBand; the NVLink forwarding runs beside it and is not priced (DeepSeek's
            IB 50 GB/s vs NVLink 160 GB/s per GPU make IB the bound at up to 3.2 experts per node).
            Dispatch in FP8 under precision fp8 (1 byte + a fp32 scale per 1x128 tile), combine in
            BF16 (report §3.3.4, "Low-Precision Communication").

Nodes a token reaches: with group-limited routing (`moe.groups`, `moe.top_groups`) and one group per
node (groups equal to the nodes the EP group spans), at most top_groups (the report's M = 4); otherwise
the expected number of distinct nodes among top_k experts placed uniformly, N (1 - (1 - 1/N)^k).
"""
from __future__ import annotations

from ..scenario import Scenario
from .layout import group_shape
from .opgraph import FP8_STORE_BYTES, Shard


def nodes_per_token(sc: Scenario) -> float:
    """Distinct nodes of the EP group one routed token's top_k experts sit on (module docstring)."""
    e = sc.model.moe
    n = group_shape(sc, "ep").nodes
    if n <= 1:
        return 1.0
    if e.top_groups is not None and e.groups > 1 and e.groups % n == 0:
        return float(min(e.top_k, n, e.top_groups * n // e.groups if e.groups >= n else e.top_groups))
    return n * (1.0 - (1.0 - 1.0 / n) ** e.top_k)


def ep_message_bytes(sc: Scenario, z: Shard, routed: int, phase: str) -> float:
    """Bytes per rank of one EP all-to-all (`phase` dispatch or combine) for `routed` tokens, busiest
    rank (`parallel.ep_imbalance`)."""
    e, p = sc.model.moe, sc.parallel
    if p.ep_dispatcher == "alltoall":
        return float(routed * e.top_k * z.h * z.ab * p.ep_imbalance)
    elt = FP8_STORE_BYTES if phase == "dispatch" and sc.training.precision == "fp8" else z.ab
    return float(routed * nodes_per_token(sc) * z.h * elt * p.ep_imbalance)

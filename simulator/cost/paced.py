"""Cost models per `LinkVariant` (`plan/paces.py`): a pool's GPU and node, with a degraded node's NVLink or NICs
at their share of nominal bandwidth. `OpTimes` (`evaluate/passes.py`) asks here for the compute model of its
rank's pool and for a collective's price on the links of its group: the slowest of them.

A calibration profile's measured collective is scaled by the spec model's degraded / healthy ratio (the profile
was measured on healthy links); pools with a profile are refused when the scenario is read (it was measured on
one GPU).
"""
from __future__ import annotations

import dataclasses

from ..plan.paces import NOMINAL, LinkVariant
from .costs import CostModel


class PacedCosts:
    """The cost model of each link variant of one scenario, built once on first use from `base`."""

    def __init__(self, sc, base):
        self.sc, self.base = sc, base
        self._models: dict = {}
        self._bare: dict = {}
        self._slowest: dict = {}

    def _topology(self, v: LinkVariant):
        pools = getattr(self.sc, "pool_topologies", ())
        topo = pools[v.pool] if pools else self.base.topology
        if v.nvlink != 1.0 or v.nic != 1.0:
            n = topo.node
            topo = dataclasses.replace(topo, node=dataclasses.replace(n, bandwidth_gbs=n.bandwidth_gbs * v.nvlink,
                                                                      nic_bandwidth_gbs=n.nic_bandwidth_gbs * v.nic))
        return topo

    def model(self, v: LinkVariant):
        """The cost model of `v` (the base model itself for a homogeneous cluster's healthy links)."""
        if v == NOMINAL[0] and not getattr(self.sc, "pool_topologies", ()):
            return self.base
        m = self._models.get(v)
        if m is None:
            # a plain CostModel with the base's settings: a subclass's caches (the sweep's) key on the op, not the links
            keep = {f.name: getattr(self.base, f.name) for f in dataclasses.fields(CostModel) if f.init and f.name != "_dp_topologies"}
            m = self._models[v] = CostModel(**{**keep, "topology": self._topology(v)})
        return m

    def _spec(self, v: LinkVariant):
        """`model(v)` without the profile (the spec model a measured collective is scaled by)."""
        m = self._bare.get(v)
        if m is None:
            m = self._bare[v] = dataclasses.replace(self.model(v), profile=None, _dp_topologies={}, framework={})
        return m

    def _time(self, op, shape, v: LinkVariant) -> float:
        if self.base.profile is None or (v.nvlink == 1.0 and v.nic == 1.0):
            return self.model(v).comm_time(op, shape)
        healthy = LinkVariant(v.pool)
        t = self.model(healthy).comm_time(op, shape)
        nominal = self._spec(healthy).comm_time(op, shape)
        return t * self._spec(v).comm_time(op, shape) / nominal if nominal > 0 else t

    def slowest(self, op, shape, variants: tuple) -> tuple[float, object]:
        """(seconds, cost model) of `op` on `shape` over the links `variants`: the slowest (plan/paces.py)."""
        if variants == NOMINAL and not getattr(self.sc, "pool_topologies", ()):
            return self.base.comm_time(op, shape), self.base
        key = (op, shape, variants)
        hit = self._slowest.get(key)
        if hit is None:
            hit = max(((self._time(op, shape, v), self.model(v)) for v in variants), key=lambda x: x[0])
            self._slowest[key] = hit
        return hit

"""Process groups for one rank, read off one grid (STYLE.md; picotron, Megatron).

The world `DeviceMesh` has the scenario's dense dimensions outermost first (`order` "tp-cp-ep-dp-pp"
-> mesh dims (pp, dp, cp, tp)), exactly `simulator.plan.layout.rank_grid`, so the executor's groups are the
simulator's. Gradients of dense weights reduce over dp x cp (CP ranks hold the same weights);
EP groups are runs of `ep` consecutive members of that (dp, cp) plane and expert gradients reduce over
the strided expert-data-parallel (edp) group, as `simulator.plan.layout.group_ranks` defines them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from simulator.plan.layout import rank_grid
from simulator.scenario import Scenario

from .experts import EPGroup
from .ring_attention import CPGroup


@dataclass(frozen=True, kw_only=True, eq=False)
class Meshes:
    world: DeviceMesh
    coords: dict
    """This rank's index along tp, cp, dp, pp."""
    tp: Optional[DeviceMesh]
    """None when tp == 1."""
    grad: Optional[DeviceMesh]
    """dp x cp mesh for dense gradients / FSDP; None when dp * cp == 1."""
    cp: Optional[CPGroup]
    pp: Optional[dist.ProcessGroup]
    ep: Optional[EPGroup]
    expert_grad: Optional[DeviceMesh]
    """Mesh for expert gradients (edp); None when there is no MoE or it has one member."""

    @property
    def loss_owner(self) -> bool:
        """One rank per distinct slice of data reports its loss (TP ranks repeat it)."""
        return self.coords["tp"] == 0


def build_meshes(sc: Scenario, device_type: str) -> Meshes:
    p = sc.parallel
    grid, dims = rank_grid(sc)  # dims outermost first, e.g. ['pp', 'dp', 'cp', 'tp']
    world = init_device_mesh(device_type, tuple(grid.shape), mesh_dim_names=tuple(dims))
    coords = {d: world.get_local_rank(d) for d in dims}
    tp = world["tp"] if p.tp > 1 else None
    plane = [d for d in dims if d in ("dp", "cp")]  # mesh order; plan.py made them neighbours when both > 1
    sizes = {"dp": sc.dp, "cp": p.cp}
    live = [d for d in plane if sizes[d] > 1]
    if len(live) == 2:
        grad = world[tuple(plane)]._flatten("dp_cp")
    elif live:
        grad = world[live[0]]
    else:
        grad = None
    cp = None
    if p.cp > 1:
        group = world["cp"].get_group()
        cp = CPGroup(group=group, ranks=tuple(dist.get_process_group_ranks(group)), rank=coords["cp"])
    pp = world["pp"].get_group() if p.pp > 1 else None
    ep, expert_grad = None, grad
    if sc.model.moe is not None and p.ep > 1:
        ep, expert_grad = _expert_meshes(sc, device_type, grid, dims)
    if sc.model.moe is None:
        expert_grad = None
    return Meshes(world=world, coords=coords, tp=tp, grad=grad, cp=cp, pp=pp, ep=ep, expert_grad=expert_grad)


def _expert_meshes(sc: Scenario, device_type: str, grid, dims: list[str]) -> tuple[EPGroup, Optional[DeviceMesh]]:
    """A second mesh (others..., edp, ep): the (dp, cp) plane in C order, cut into runs of ep."""
    ep = sc.parallel.ep
    plane = [d for d in dims if d in ("dp", "cp")]
    others = [d for d in dims if d not in plane]
    perm = [dims.index(d) for d in others + plane]
    g = torch.as_tensor(grid).permute(perm)
    n_plane = sc.dp * sc.parallel.cp
    mesh = g.reshape(*g.shape[:len(others)], n_plane // ep, ep)
    names = tuple(f"_{d}" for d in others) + ("edp", "ep")
    em = DeviceMesh(device_type, mesh, mesh_dim_names=names)
    group = em["ep"].get_group()
    epg = EPGroup(group=group, size=ep, rank=em.get_local_rank("ep"))
    return epg, (em["edp"] if n_plane // ep > 1 else None)

"""Where ranks sit and which layers each pipeline rank holds.

One grid for ranks (STYLE.md, after picotron and Megatron): `order` names the dimensions innermost
first ("tp-cp-ep-dp-pp" = Megatron's default: TP inside a node), and every process group is read off
`arange(world).reshape(...)`. EP borrows from the cp x dp ranks, and `ep` stands next to `dp` in the
string (`scenario.validate_layout`): before it ("ep-dp", inner), an EP group is a run of `ep` consecutive
members of the (cp, dp) group in the order the string gives; after it ("dp-ep", outer), it takes every
(cp*dp/ep)-th member, and the expert-data-parallel peers are the runs. With `parallel.etp` 1 (MoE parallel
folding) the expert groups come from Megatron's own expert grid over all tp*cp*dp ranks (`expert_rank_grid`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cluster_mix import rank_grid_of
from ..pipeline_spec import chunks_per_copy
from ..scenario import Scenario
from .schedules import schedule_spec


@dataclass(frozen=True, slots=True)
class GroupShape:
    """How one process group sits on the cluster: the dimension's widest group unless a rank is named (`group_shape`)."""
    dim: str
    size: int
    nodes: int
    """Distinct nodes its ranks span."""
    per_node: int
    """Most ranks of the group on one node."""
    ranks: tuple[int, ...]
    """The group's ranks, for printing and tests."""

    @property
    def intra_node(self) -> bool:
        return self.nodes <= 1


def _dense_order(order: str) -> list[str]:
    return [d for d in order.split("-") if d != "ep"]


def rank_grid(sc: Scenario) -> tuple[np.ndarray, list[str]]:
    """grid[c_outer, ..., c_inner] = global rank; returns (grid, dims outermost first)."""
    return rank_grid_of(sc.parallel.order, {"tp": sc.parallel.tp, "cp": sc.parallel.cp, "dp": sc.dp, "pp": sc.parallel.pp})


def coords(sc: Scenario, rank: int) -> dict[str, int]:
    grid, dims = rank_grid(sc)
    return _coords(grid, dims, rank)


def _coords(grid: np.ndarray, dims: list[str], rank: int) -> dict[str, int]:
    # the grid is arange(world) reshaped: a rank's coordinates are its flat index unravelled (O(1), where
    # searching the grid cost O(world) per call and every-rank mode asks once per group)
    return dict(zip(dims, (int(i) for i in np.unravel_index(rank, grid.shape))))


def rank_index(sc: Scenario, dim: str, ranks=None) -> np.ndarray:
    """Each of `ranks` (default: every rank) indexed along `dim` (its pipeline stage for "pp", its DP replica for
    "dp"): the grid is arange(world) reshaped, so a rank's coordinates are its flat index unravelled."""
    grid, dims = rank_grid(sc)
    return np.unravel_index(np.arange(sc.gpus) if ranks is None else ranks, grid.shape)[dims.index(dim)]


def group_ranks(sc: Scenario, dim: str, rank: int = 0) -> list[int]:
    """Ranks of `dim`'s group that contains `rank`. dim in tp, cp, dp, pp, ep, edp, dp_cp (the dense gradient
    and sharding group: the dp x cp plane, or its shard run under HSDP), dp_rep (HSDP's replicas of it).
    Under DualPipe (`ScheduleSpec.routes` 2) rank r and rank p-1-r hold the same two stages, one of each model
    copy, and sum their gradients as replicas do (deepseek-ai/DualPipe examples/example_dualpipe.py adds the
    mirror rank's gradients to each copy's): the gradient and sharding groups (dp_cp, edp) are the two ranks'
    groups together."""
    ranks = _group_ranks(sc, dim, rank)
    if dim in ("dp_cp", "edp") and schedule_spec(sc.parallel.pp_schedule).routes == 2:
        ranks = sorted(set(ranks) | set(_group_ranks(sc, dim, mirror_rank(sc, rank))))
    return ranks


def mirror_rank(sc: Scenario, rank: int) -> int:
    """The rank at the mirrored pipeline position (pp stage p-1-s), every other coordinate the same."""
    grid, dims = rank_grid(sc)
    c = _coords(grid, dims, rank)
    return int(grid[tuple(sc.parallel.pp - 1 - c[d] if d == "pp" else c[d] for d in dims)])


def _group_ranks(sc: Scenario, dim: str, rank: int) -> list[int]:
    """`group_ranks` within one model copy."""
    grid, dims = rank_grid(sc)
    c = _coords(grid, dims, rank)
    if dim in ("tp", "cp", "dp", "pp"):
        sl = tuple(slice(None) if d == dim else c[d] for d in dims)
        return [int(x) for x in grid[sl].ravel()]
    if dim in ("dp_cp", "dp_rep", "ep", "edp", "dp_plane"):
        # the (cp, dp) plane, flattened with the inner of the two varying fastest
        sl = tuple(slice(None) if d in ("cp", "dp") else c[d] for d in dims)
        plane = [int(x) for x in grid[sl].ravel()]  # C-order: later (inner) dims fastest
        if dim == "dp_plane":
            return plane
        if dim in ("dp_cp", "dp_rep"):
            # HSDP (`parallel.dp_replicate` = R): dense parameters are sharded over runs of n/R neighbouring
            # ranks of the plane (the shard group, `dp_cp`) and replicated across the R runs (`dp_rep`)
            run = len(plane) // sc.parallel.dp_replicate
            pos = plane.index(rank)
            return plane[pos - pos % run: pos - pos % run + run] if dim == "dp_cp" else plane[pos % run::run]
        if sc.parallel.etp is not None:
            return _expert_group(sc, dim, rank)
        ep = sc.parallel.ep
        pos = plane.index(rank)
        names = sc.parallel.order.split("-")
        if names.index("ep") < names.index("dp"):  # ep inner: runs of ep; expert-DP peers every ep-th
            ep_group = lambda sub: sub[pos - pos % ep: pos - pos % ep + ep]  # noqa: E731
            edp_group = lambda sub: sub[pos % ep::ep]  # noqa: E731
        else:  # ep outer: every (n/ep)-th; expert-DP peers the runs of n/ep
            run = len(plane) // ep
            ep_group = lambda sub: sub[pos % run::run]  # noqa: E731
            edp_group = lambda sub: sub[pos - pos % run: pos - pos % run + run]  # noqa: E731
        if dim == "ep":
            return ep_group(plane)
        # expert-data-parallel: ranks holding the same expert shard. Experts are not tensor-split
        # (expert tensor parallel = 1), so TP peers hold the same experts on different tokens too.
        members = []
        for tp_rank in group_ranks(sc, "tp", rank):
            members += edp_group(group_ranks(sc, "dp_plane", tp_rank))
        return sorted(members)
    if dim == "etp":
        return _expert_group(sc, dim, rank) if sc.parallel.etp is not None else [rank]
    raise ValueError(f"unknown group dimension {dim!r}")


def expert_rank_grid(sc: Scenario) -> tuple[np.ndarray, list[str]]:
    """MoE parallel folding (`parallel.etp`, `ep_spec.py`): Megatron's expert RankGenerator, the order string
    with cp of size 1, tp of size etp and dp of size edp = tp*cp*dp / (etp*ep) (Megatron-LM
    megatron/core/parallel_state.py:871-902 at d98e8a64ddf34856e74b24714e3bedb2f5a39553); (grid, dims outermost first)."""
    p = sc.parallel
    sizes = {"tp": p.etp, "cp": 1, "ep": p.ep, "dp": p.tp * p.cp * sc.dp // (p.etp * p.ep), "pp": p.pp}
    dims = list(reversed(p.order.split("-")))
    return np.arange(p.tp * p.cp * sc.dp * p.pp).reshape([sizes[d] for d in dims]), dims


def _expert_group(sc: Scenario, dim: str, rank: int) -> list[int]:
    """`rank`'s group on the expert grid: ep (get_ranks('ep')), edp (get_ranks('dp')) or etp (get_ranks('tp'))."""
    grid, dims = expert_rank_grid(sc)
    c = _coords(grid, dims, rank)
    vary = {"ep": "ep", "edp": "dp", "etp": "tp"}[dim]
    return [int(x) for x in grid[tuple(slice(None) if d == vary else c[d] for d in dims)].ravel()]


def group_shape(sc: Scenario, dim: str, rank: int | None = None) -> GroupShape:
    """How `rank`'s group of `dim` sits on the nodes; without a rank, the dimension's widest group (`widest_group`):
    its collectives run in step on every group, so the one spread over the most nodes sets their pace."""
    ranks = group_ranks(sc, dim, widest_group(sc, dim) if rank is None else rank)
    g = sc.gpus_per_node
    nodes = [r // g for r in ranks]
    counts = np.bincount(nodes)
    return GroupShape(dim=dim, size=len(ranks), nodes=int((counts > 0).sum()), per_node=int(counts.max()), ranks=tuple(ranks))


def widest_group(sc: Scenario, dim: str) -> int:
    """The first rank of `dim`'s group spread over the most nodes (rank 0's group where they tie). Groups of tp, cp,
    dp and pp are runs of the rank grid with one stride; when their size and stride do not tile the node (tp 6 on
    8-GPU nodes: ranks 0-5 on one node, 6-11 over two), they sit differently. The other dimensions are composed from
    these and are taken at rank 0."""
    if dim not in ("tp", "cp", "dp", "pp"):
        return 0
    grid, dims = rank_grid(sc)
    groups = np.moveaxis(grid, dims.index(dim), -1).reshape(-1, grid.shape[dims.index(dim)])  # rows: increasing ranks
    spread = 1 + (np.diff(groups // sc.gpus_per_node, axis=1) != 0).sum(axis=1)
    return int(groups[int(np.argmax(spread)), 0])


def pair_shape(sc: Scenario, a: int, b: int) -> GroupShape:
    """GroupShape of two global ranks (a PP pair or the tied-embedding pair)."""
    g = sc.gpus_per_node
    na, nb = a // g, b // g
    return GroupShape(dim="pp", size=2, nodes=1 if na == nb else 2, per_node=2 if na == nb else 1, ranks=(a, b))


def pp_rank_of_stage_rank(sc: Scenario, pp_rank: int) -> int:
    """A global rank that holds pipeline rank `pp_rank` (tp=cp=dp=0)."""
    grid, dims = rank_grid(sc)
    sl = tuple(pp_rank if d == "pp" else 0 for d in dims)
    return int(grid[sl])


# ----------------------------------------------------------------------------------- layers

def chunk_layers(sc: Scenario) -> list[int]:
    """Layers per model chunk in pipeline order (pp*vpp entries). Under DualPipe's two copies of the model
    (`ScheduleSpec.routes`) each copy splits the layers the same way: pp_layers (or the even split) per copy,
    repeated."""
    p = sc.parallel
    n = chunks_per_copy(p)
    return list(p.pp_layers if p.pp_layers is not None else [sc.model.layers // n] * n) * schedule_spec(p.pp_schedule).routes


def chunk_layer_ids(sc: Scenario, chunk: int) -> list[int]:
    """The decoder layers of pipeline chunk `chunk` (global indices, MTP modules aside): its copy's split, from
    the first layer at the copy's first chunk."""
    sizes = chunk_layers(sc)
    first = chunk - chunk % chunks_per_copy(sc.parallel)
    start = sum(sizes[first:chunk])
    return list(range(start, start + sizes[chunk]))


def is_first_chunk(sc: Scenario, chunk: int) -> bool:
    """Whether `chunk` opens a micro-batch's route: it holds the embedding (chunk 0; under DualPipe also the
    second copy's first chunk)."""
    return chunk % chunks_per_copy(sc.parallel) == 0


def is_last_chunk(sc: Scenario, chunk: int) -> bool:
    """Whether `chunk` ends a micro-batch's route: it holds the LM head, the loss and the MTP modules."""
    return is_first_chunk(sc, chunk + 1)


def layer_recompute(sc: Scenario, layer: int) -> str:
    """The recompute mode of one layer: `training.recompute`, except that with recompute full and
    `training.recompute_layers` N only the first N layers of each model chunk are recomputed and the rest
    store everything ("none"). Megatron's --recompute-method block --recompute-num-layers N checkpoints
    layers l < N of each TransformerBlock, one per pipeline stage and virtual chunk (Megatron-LM
    megatron/core/transformer/transformer_block.py `_checkpointed_forward`, recompute_method == 'block',
    at d98e8a64ddf34856e74b24714e3bedb2f5a39553)."""
    t = sc.training
    if sc.model.is_mtp_layer(layer):
        # an MTP module checkpoints as a whole under full recompute with the uniform method; with the block
        # method (`recompute_layers`) Megatron warns and skips it (multi_token_prediction.py
        # MultiTokenPredictionLayer._checkpointed_forward: "recompute_method == 'block' is not supported for
        # MTP yet. Skipping recompute.")
        return "none" if t.recompute == "full" and t.recompute_layers is not None else t.recompute
    if t.recompute != "full" or t.recompute_layers is None:
        return t.recompute
    start = 0
    for n in chunk_layers(sc):
        if layer < start + n:
            return "full" if layer - start < t.recompute_layers else "none"
        start += n
    raise ValueError(f"layer {layer} is not in the model's {start} layers")


def chunk_owner(sc: Scenario, chunk: int) -> tuple[int, int]:
    """(pp rank, local chunk index) of pipeline chunk `chunk` (0 = first, holds the embedding): the
    schedule's placement (`ScheduleSpec.place`: round-robin c % p, or V-shaped)."""
    p = sc.parallel
    return schedule_spec(p.pp_schedule).place(p.pp, chunk)


def rank_chunks(sc: Scenario, pp_rank: int) -> list[tuple[int, list[int]]]:
    """For a pp rank: [(pipeline chunk index, [global layer indices])] in local chunk order. A route's last chunk
    ends with the MTP modules' layers (`ModelSpec.mtp_layer_ids`): Megatron builds them on the last pipeline
    stage's last virtual chunk (multi_token_prediction.py `get_mtp_num_layers_to_build`, `mtp_on_this_rank`),
    after the decoder layers that `chunk_layers` splits."""
    out = []
    for c in range(sc.parallel.pp * sc.parallel.vpp):
        r, local = chunk_owner(sc, c)
        if r == pp_rank:
            mtp = list(sc.model.mtp_layer_ids) if is_last_chunk(sc, c) else []
            out.append((local, c, chunk_layer_ids(sc, c) + mtp))
    out.sort()
    return [(c, layers) for _, c, layers in out]


def last_chunk(sc: Scenario) -> int:
    """The last pipeline chunk (the LM head's; under DualPipe the second copy's, on rank 0 with the first
    copy's embedding)."""
    return sc.parallel.pp * sc.parallel.vpp - 1


def recompute_modules(sc: Scenario, recompute: str | None = None) -> frozenset[str]:
    """The parts of each layer re-run in the backward under selective recompute
    (`training.recompute_modules`, Megatron-Core's default [core_attn]); empty otherwise."""
    if (recompute or sc.training.recompute) != "selective":
        return frozenset()
    return frozenset(sc.training.recompute_modules or ("core_attn",))


def recomputes_mlp(sc: Scenario, layer: int, recompute: str | None = None) -> bool:
    """Whether the `mlp` recompute module re-runs layer `layer`'s MLP: Megatron-Core checkpoints a dense layer's MLP
    module (transformer_layer.py:537-539 at d98e8a64: not an MoE layer's); a parallel block has no MLP module of its
    own. Its stored tensors (`activations`), the re-run's working set (`memory`) and the re-run itself
    (`layer_ops.dense_mlp_span`) follow it."""
    m = sc.model
    return "mlp" in recompute_modules(sc, recompute) and not m.is_moe_layer(layer) and not m.parallel_block

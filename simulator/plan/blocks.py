"""Blocks: what one pass of one pipeline chunk runs, as runs of op nodes per layer (or the embedding
or the LM head), with the parameter tensors each block owns on its rank.

A block's nodes come from the op vocabulary (`layer_ops.layer_passes`, `step_ops.embedding_forward/backward`,
`head_forward/backward`); a pass (F, B, W, or a fused B+W) is its chunk's blocks in execution order.
Both evaluators price passes from these blocks (`evaluate/passes.py`); nothing here is timed.
"""
from __future__ import annotations

from dataclasses import dataclass

from .layout import chunk_layer_ids, is_first_chunk, is_last_chunk, layer_recompute
from .step_ops import embedding_backward, embedding_forward, head_backward, head_forward, pp_partition_gathers, pp_partitioned
from .sharded_params import embedding_rank_params, head_rank_tensors, layer_rank_tensors
from .layer_ops import layer_passes
from .mtp import mtp_passes
from .offload import LayerCopies, offload_plan
from .opgraph import Compute, Node, shard
from ..scenario import Scenario

PASS_KINDS = ("F", "B", "W", "BW")


@dataclass(frozen=True, slots=True)
class Block:
    """A run of nodes that belongs to one layer (or to the embedding or the LM head) within a pass."""
    key: str
    """Label in traces: "L12", "emb", "head"."""
    nodes: tuple[Node, ...]
    letters: tuple[str, ...]
    """Per node: "F", "B" or "W" (which of the layer's lists it came from); "R" for recomputation."""
    tensors_dense: tuple[float, ...] = ()
    """Parameter tensors of this block on the rank (elements, definition order), replicated over dp_cp
    (ZeRO-3 gathers, DP gradient buckets, which close at tensor boundaries)."""
    tensors_expert: tuple[float, ...] = ()
    """Routed-expert tensors, replicated over the expert-DP group."""
    host_before: LayerCopies | None = None
    """Activation offloading (`plan/offload.py`): host copies issued, then waited for, before the block's roots (a
    backward's reloads)."""
    host_after: LayerCopies | None = None
    """Host copies issued after the block's last compute, waited for before the next block's roots (a forward's)."""

    @property
    def params_dense(self) -> float:
        return sum(self.tensors_dense)

    @property
    def params_expert(self) -> float:
        return sum(self.tensors_expert)

    @property
    def makes_grads(self) -> bool:
        return "W" in self.letters



def chunk_blocks(sc: Scenario, chunk: int, stage_has_embedding: bool, cache: dict) -> dict:
    """kind -> blocks of one chunk's passes. F: [embedding] + layers + [head];
    B, W, BW: [head] + layers in reverse + [embedding] (the embedding's backward is a weight gradient).
    The last chunk's layers end with the MTP modules (`plan/mtp.py`, blocks "MTP1".., one per depth).
    Where the framework partitions its pipeline sends (`step_ops.pp_partitioned`), the TP all-gathers of the
    received slices and of the stored output (`step_ops.pp_partition_gathers`) open the first layer's block of
    a receiving chunk's F and of a sending chunk's B and BW."""
    z = cache.setdefault("shard", shard(sc))
    first, last = is_first_chunk(sc, chunk), is_last_chunk(sc, chunk)
    layers = chunk_layer_ids(sc, chunk) + (list(sc.model.mtp_layer_ids) if last else [])

    def lp(layer):
        mtp = sc.model.is_mtp_layer(layer)
        key = ("mtp" if mtp else "lp", sc.model.is_moe_layer(layer), sc.model.is_sliding_layer(layer), layer_recompute(sc, layer))
        if key not in cache:
            cache[key] = (mtp_passes if mtp else layer_passes)(sc, layer, z)
        return cache[key]

    def name(layer):
        return f"MTP{layer - sc.model.layers + 1}" if sc.model.is_mtp_layer(layer) else f"L{layer}"

    def block(key, parts, dense=(), expert=(), before=None, after=None):
        nodes, letters = concat(parts)
        return Block(key=key, nodes=nodes, letters=letters, tensors_dense=dense, tensors_expert=expert,
                     host_before=before, host_after=after)

    if "offload" not in cache:
        cache["offload"] = offload_plan(sc)
    offload = cache["offload"]
    fwd_copies = offload.forward if offload else {}
    bwd_copies = offload.backward if offload else {}

    part = pp_partitioned(sc) and bool(layers)
    gather_f = [(pp_partition_gathers(sc, "F", z), "F")] if part and not first else []
    gather_b = [(pp_partition_gathers(sc, "B", z), "B")] if part and not last else []
    out = {k: [] for k in PASS_KINDS}
    emb_p = (embedding_rank_params(sc),)
    head_p = head_rank_tensors(sc, stage_has_embedding)
    if first:
        out["F"].append(block("emb", [(embedding_forward(sc, z), "F")], emb_p))
    for i, layer in enumerate(layers):
        d, e = layer_rank_tensors(sc, layer)
        out["F"].append(block(name(layer), (gather_f if i == 0 else []) + [(lp(layer).F, "F")], d, e,
                              after=fwd_copies.get(layer)))
    if last:
        hb, hw = head_backward(sc, z)
        out["F"].append(block("head", [(head_forward(sc, z), "F")], head_p))
        out["B"].append(block("head", [(hb, "B")], head_p))
        out["W"].append(block("head", [(hw, "W")], head_p))
        out["BW"].append(block("head", [(hb, "B"), (hw, "W")], head_p))
    for i, layer in enumerate(reversed(layers)):
        d, e = layer_rank_tensors(sc, layer)
        p = lp(layer)
        g = gather_b if i == 0 else []
        reload = bwd_copies.get(layer)
        out["B"].append(block(name(layer), g + [(p.B, "B")], d, e, before=reload))
        out["W"].append(block(name(layer), [(p.W, "W")], d, e))
        out["BW"].append(block(name(layer), g + [(p.B, "B"), (p.W, "W")], d, e, before=reload))
    if first:
        eb = embedding_backward(sc, z)
        out["W"].append(block("emb", [(eb, "W")], emb_p))
        out["BW"].append(block("emb", [(eb, "W")], emb_p))
    return {k: tuple(v) for k, v in out.items()}


def concat(parts: list[tuple[tuple[Node, ...], str]]) -> tuple[tuple[Node, ...], tuple[str, ...]]:
    """Join node lists (each with its letter) into one list with re-based deps; the roots of each later
    list wait for the previous list's last compute node (`opgraph.OpList.extend`'s rule), and after a list
    of collectives only (the partitioned pipeline's all-gathers) for its blocking collectives."""
    nodes: list[Node] = []
    letters: list[str] = []
    gate: tuple[int, ...] = ()
    for lst, letter in parts:
        off = len(nodes)
        for n in lst:
            deps = tuple(d + off for d in n.deps)
            if not n.deps and gate:
                deps = gate
            nodes.append(Node(n.op, deps, n.tag))
            letters.append(letter)
        computes = [j for j in range(off, len(nodes)) if isinstance(nodes[j].op, Compute)]
        if computes:
            gate = (computes[-1],)
        elif len(nodes) > off:
            gate = tuple(sorted(set(gate) | {j for j in range(off, len(nodes)) if nodes[j].op.blocking}))
    return tuple(nodes), tuple(letters)

"""The parameters one rank holds: per layer, for the embedding and the LM head, per pipeline rank, split
into dense parameters (replicated over dp x cp) and routed experts (over the expert-DP group), as whole
tensors in definition order (DP buckets close at tensor boundaries). docs/modeling.md §1.4.
"""
from __future__ import annotations

from dataclasses import dataclass

from .opgraph import Shard
from ..params import final_norm_params, layer_params, norm_params
from ..scenario import Scenario

def autocast_layer_params(sc: Scenario, layer: int) -> float:
    """Weights of one layer that autocast casts to bf16 on one rank: all but the norms' (whose ops run in
    fp32 and take their weights as they are)."""
    return sum(layer_rank_params(sc, layer)) - layer_params(sc.model, layer).norms


def autocast_head_params(sc: Scenario, z: Shard) -> float:
    """The LM head's weight on one rank, which autocast casts for the head GEMM (tied or not: with tied
    embeddings the lookup reads the fp32 table and only the head casts it)."""
    return -(-sc.model.vocab // z.t) * z.h


def layer_rank_params(sc: Scenario, layer: int) -> tuple[float, float]:
    """(dense, expert) parameters of one layer on one rank: linears / t with K/V projections replicated
    when t > kv_heads, norms replicated (docs/modeling.md §1.4), routed experts / (ep x etp) (`expert_tp`)."""
    m, p = sc.model, sc.parallel
    lp = layer_params(m, layer)
    attn = lp.attn
    if p.tp > m.n_kv and not m.mla:
        kv_part = 2 * m.hidden * m.kv_dim
        attn += kv_part * (p.tp / m.n_kv - 1)
    return attn / p.tp + lp.mlp / p.tp + lp.mtp_proj / p.tp + lp.norms, lp.experts / (p.ep * expert_tp(sc))


def expert_tp(sc: Scenario) -> int:
    """The routed experts' tensor-parallel degree: `parallel.etp` (1, or tp: each expert's fc1 columns and fc2 rows split
    over the TP ranks, `ep_spec.py`), 1 when unset (whole experts at every TP rank)."""
    return sc.parallel.etp or 1


@dataclass(frozen=True, slots=True)
class RankParams:
    """Parameters held by one rank of a pipeline stage (all its chunks), after TP and EP sharding."""
    dense: float
    """Replicated over the dp*cp group (attention, dense MLP, shared experts, router, norms, embeddings)."""
    expert: float
    """Routed-expert parameters (replicated over the expert-DP group)."""
    layers: tuple[int, ...]
    embedding: bool
    head: bool

    @property
    def total(self) -> float:
        return self.dense + self.expert


def embedding_rank_params(sc: Scenario) -> float:
    """The input embedding on its rank: the vocab table split by t, learned positions replicated."""
    m = sc.model
    return m.vocab * m.hidden / sc.parallel.tp + m.positions * m.hidden


def head_rank_tensors(sc: Scenario, has_embedding: bool) -> tuple[float, ...]:
    """The final norm, then the LM head split by t: untied, or the tied copy on a last stage that does not
    hold the embedding (docs/modeling.md §1.4). With MTP and an untied head on a stage apart from the
    embedding's, then a copy of the input embedding for the MTP modules' lookups, kept in step with the
    first stage's by the embedding-group all-reduce as a tied copy is (Megatron-Core language_module.py
    setup_embeddings_and_output_layer: "If use Multi-Token Prediction (MTP), we also need to maintain
    duplicated embedding weights in mtp process stage"; finalize_model_grads.py
    `_allreduce_word_embedding_grads` when `mtp_num_layers`). No copy where the schedule keeps one table on a rank
    that holds both ends (`ScheduleSpec.shares_edge_tables`: DualPipe)."""
    from .schedules import schedule_spec
    m = sc.model
    norm = float(final_norm_params(m))
    one_table = has_embedding and schedule_spec(sc.parallel.pp_schedule).shares_edge_tables
    apart = (sc.parallel.pp > 1 and not one_table) or not has_embedding
    if not m.tie_embeddings or apart:
        head = (norm, m.vocab * m.hidden / sc.parallel.tp)
        return head + ((embedding_rank_params(sc),) if m.mtp_layers and not m.tie_embeddings and apart else ())
    return (norm,)


def rank_params(sc: Scenario, pp_rank: int) -> RankParams:
    """Linears and vocab tables split by t; norms replicated (docs/modeling.md §1.4); routed experts split by ep and
    by the expert TP degree (`expert_tp`); K/V projections replicated when t > kv_heads."""
    from .layout import is_first_chunk, is_last_chunk, rank_chunks
    chunks = rank_chunks(sc, pp_rank)
    layers = tuple(i for _, ls in chunks for i in ls)
    dense = expert = 0.0
    for i in layers:
        d, e = layer_rank_params(sc, i)
        dense += d
        expert += e
    ids = [c for c, _ in chunks]
    has_emb = any(is_first_chunk(sc, c) for c in ids)
    has_head = any(is_last_chunk(sc, c) for c in ids)
    if has_emb:
        dense += embedding_rank_params(sc)
    if has_head:
        for x in head_rank_tensors(sc, has_emb):
            dense += x
    return RankParams(dense=dense, expert=expert, layers=layers, embedding=has_emb, head=has_head)


def rank_blocks(sc: Scenario, pp_rank: int) -> list[tuple[str, int, tuple[float, ...], tuple[float, ...]]]:
    """The rank's parameter blocks in definition order (all its chunks): ("embedding", -1, tensors, ()),
    ("layer", i, `layer_rank_tensors`), ("head", -1, the final norm and the LM head, ()); tensors in
    elements, dense then expert. The backward produces their gradients in the reverse order."""
    from .layout import is_first_chunk, is_last_chunk, rank_chunks
    out: list[tuple[str, int, tuple[float, ...], tuple[float, ...]]] = []
    chunks = rank_chunks(sc, pp_rank)
    has_emb = any(is_first_chunk(sc, c) for c, _ in chunks)
    for c, layers in chunks:
        if is_first_chunk(sc, c):
            out.append(("embedding", -1, (embedding_rank_params(sc),), ()))
        for i in layers:
            out.append(("layer", i, *layer_rank_tensors(sc, i)))
        if is_last_chunk(sc, c):
            out.append(("head", -1, head_rank_tensors(sc, has_emb), ()))
    return out


def rank_tensors(sc: Scenario, pp_rank: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(dense, expert) parameter tensors of one rank (all its chunks), elements each, in definition order:
    the tensors of its `rank_blocks` (as `rank_params`)."""
    blocks = rank_blocks(sc, pp_rank)
    return tuple(t for b in blocks for t in b[2]), tuple(t for b in blocks for t in b[3])


def param_bytes(sc: Scenario) -> int:
    return 4 if sc.training.precision == "fp32" else 2


def layer_rank_tensors(sc: Scenario, layer: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(dense, expert) parameter tensors of one layer on one rank, elements each, in definition order:
    norm, fused QKV projection (all of attention but the output projection), output projection, norm,
    MLP input (SwiGLU's fused gate+up: 2/3 of it), MLP output; an MoE layer's router, its shared experts'
    input and output, and its routed experts as two grouped tensors. Sums to `layer_rank_params`; the
    fused layout is nanotron's and Megatron's (`qkv_proj` / `linear_qkv`, `gate_up_proj` / `linear_fc1`)."""
    m, p = sc.model, sc.parallel
    dense, expert = layer_rank_params(sc, layer)
    lp = layer_params(m, layer)
    norm = norm_params(m) / 2
    out_proj = m.hidden * (m.heads * m.mla.v_head_dim if m.mla else m.q_dim) / p.tp
    attn = dense - lp.norms - (lp.mlp / p.tp) - lp.mtp_proj / p.tp
    mlp_in_share = 2 / 3 if m.gated_mlp else 0.5
    if lp.experts:
        e = m.moe
        router = m.hidden * e.experts / p.tp
        shared = lp.mlp / p.tp - router
        mlp = (router,) + ((shared * mlp_in_share, shared * (1 - mlp_in_share)) if shared > 0 else ())
        experts = (expert * mlp_in_share, expert * (1 - mlp_in_share)) if expert > 0 else ()
    else:
        mlp = (lp.mlp / p.tp * mlp_in_share, lp.mlp / p.tp * (1 - mlp_in_share))
        experts = ()
    block = (norm, attn - out_proj, out_proj, norm) + mlp
    if lp.mtp_proj:  # an MTP module: enorm, hnorm, eh_proj (split by t), its layer, final_layernorm (Megatron's order)
        one = float(final_norm_params(m))
        return (one, one, lp.mtp_proj / p.tp) + block + (one,), experts
    return block, experts

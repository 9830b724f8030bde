"""`parallel.ep*` checks against the model and the rest of the layout: expert parallelism, and
Megatron-Core's EP all-to-all overlap (`parallel.ep_overlap`, `plan/ep_overlap.py`) with what Megatron refuses.

MoE parallel folding (`parallel.etp`, arXiv 2504.14960): the expert layers get their own rank grid over the
same ranks, Megatron's expert RankGenerator (MLM megatron/core/parallel_state.py:871-907): the `parallel.order`
string with cp of size 1, tp of size etp, ep, dp of size edp = world / (etp x ep x pp), pp; EP groups vary ep,
expert-DP groups vary dp (MLM parallel_state.py:1357-1366, 1457). Each rank dispatches the tokens of its own
sequence-parallel shard (the MoE layer's input; MLM moe/moe_layer.py:636-639 refuses TP without SP in training)
over the EP group (token_dispatcher.py:705-711; its expert-TP group is expt_tp, :86). With etp 1 it computes whole
experts. With etp = tp (Megatron's default when --expert-tensor-parallel-size is not given, MLM arguments.py:587-588)
the dispatcher all-gathers the received tokens over the expert-TP group, each rank computes its 1/etp of every
local expert's columns (fc1) and rows (fc2), and reduce-scatters the outputs before the combine (MLM
moe/token_dispatcher.py:741-750, 824-831): `plan/layer_ops.py`. Expert TP is priced on the TP group itself, so it
needs tp innermost in `parallel.order` (then the expert grid's TP groups are the dense grid's); another etp is
refused.

Megatron's refusals are read at NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553 ("MLM"),
megatron/core/transformer/transformer_config.py:3002-3046 and pipeline_parallel/combined_1f1b.py:205-214."""
from __future__ import annotations

import numpy as np

from .cluster_mix import rank_grid_of
from .errors import ScenarioError
from .plan.ep_overlap import ep_overlap_error


def _divides(a: int, b: int) -> bool:
    return a > 0 and b % a == 0


def check_expert_parallel(p, m, t) -> None:
    """`parallel` `p` against model `m` and training `t`: ep divides the experts and dp x cp, and what
    `ep_overlap` needs. Raises ScenarioError with the key path."""
    if p.ep > 1:
        if not m.moe:
            raise ScenarioError("parallel.ep", f"{p.ep} but the model has no experts", "1 for a dense model")
        if not _divides(p.ep, m.moe.experts):
            raise ScenarioError("parallel.ep", f"{p.ep} does not divide the {m.moe.experts} experts", "a divisor of moe.experts")
        if p.etp is None and not _divides(p.ep, p.dp * p.cp):
            raise ScenarioError("parallel.ep", f"{p.ep} does not divide dp*cp = {p.dp * p.cp}",
                                "a divisor of dp*cp, or parallel.etp 1 (MoE parallel folding: a divisor of tp*cp*dp)")
    if p.etp is not None:
        check_expert_folding(p, m)
    if p.ep_overlap:
        check_ep_overlap(p, t)


def check_expert_folding(p, m) -> None:
    """`parallel.etp` (module docstring): what `expert_tp_problem` refuses; ep dividing tp*cp*dp / etp; the same
    pipeline groups for the dense and the expert grid (MLM parallel_state.py:898-907: pp last in the order, or pp 1,
    or edp = dp)."""
    problem = expert_tp_problem(m.moe, p.tp, p.sp, p.order, p.etp)
    if problem:
        raise ScenarioError(*problem)
    world_stage = p.tp * p.cp * p.dp
    if not _divides(p.ep, world_stage // p.etp):
        raise ScenarioError("parallel.ep", f"{p.ep} does not divide tp*cp*dp / etp = {world_stage // p.etp} (etp {p.etp})",
                            "a divisor of tp*cp*dp / etp")
    edp = world_stage // (p.etp * p.ep)
    if not (p.order.endswith("pp") or p.pp == 1 or edp == p.dp) or not _same_pp_groups(p, edp):
        raise ScenarioError("parallel.order", f"{p.order!r} with etp {p.etp}, pp {p.pp} and expert-DP {edp} (dp {p.dp})",
                            "pp last (Megatron asserts the attention and expert grids share their pipeline groups)")


def expert_tp_problem(moe, tp: int, sp: bool, order: str, etp: int | None) -> tuple[str, str, str] | None:
    """(key, what, allowed) where a layout with `etp` set is refused for its expert TP alone: etp other than 1 or tp, a
    model without experts, expert TP off the innermost dimension (it is priced on the TP group) or not dividing the
    experts' FFN, TP without sequence parallelism (Megatron's MoE layer refuses it in training, moe_layer.py:636-639);
    None where it runs, and for `etp` None (whole experts at every TP rank). `check_expert_folding` raises it, the
    sweep skips such candidates."""
    if etp is None:
        return None
    if etp not in (1, tp):
        return ("parallel.etp", f"{etp} with tp {tp}: expert tensor parallelism other than 1 or tp is not modelled",
                f"1 (MoE parallel folding), {tp} (tp), or null")
    if not moe:
        return "parallel.etp", f"{etp} but the model has no experts", "null for a dense model"
    if etp > 1 and not order.startswith("tp-"):
        return ("parallel.order", f"{order!r} with etp {etp}", "tp innermost (expert TP is priced on the TP group: their "
                "ranks must be the same), or parallel.etp 1 (MoE parallel folding)")
    if etp > 1 and moe.expert_ffn_hidden % etp:
        return ("parallel.etp", f"{etp} does not divide the experts' ffn hidden size {moe.expert_ffn_hidden}",
                "a divisor of moe.expert_ffn_hidden")
    if tp > 1 and not sp:
        return ("parallel.sp", f"false with tp {tp} and etp {etp}", "true (Megatron's MoE layer refuses TP without "
                "sequence parallelism in training, moe_layer.py:636-639)")
    return None


def _pp_groups(grid: np.ndarray, dims: list[str]) -> list[tuple[int, ...]]:
    axis = dims.index("pp")
    return sorted(map(tuple, np.moveaxis(grid, axis, -1).reshape(-1, grid.shape[axis]).tolist()))


def _same_pp_groups(p, edp: int) -> bool:
    """The attention grid and the expert grid (`plan/layout.expert_rank_grid`) have the same pipeline groups
    (MLM parallel_state.py:904-907)."""
    dense, dims = rank_grid_of(p.order, {"tp": p.tp, "cp": p.cp, "dp": p.dp, "pp": p.pp})
    sizes = {"tp": p.etp, "cp": 1, "ep": p.ep, "dp": edp, "pp": p.pp}
    names = list(reversed(p.order.split("-")))
    return _pp_groups(dense, dims) == _pp_groups(np.arange(dense.size).reshape([sizes[d] for d in names]), names)


def ep_overlap_problem(ep: int, pp: int, pp_schedule: str, recompute: str, precision: str, zero: int) -> tuple[str, str] | None:
    """(what, allowed) where Megatron refuses --overlap-moe-expert-parallel-comm for this layout, or clustersim does
    not model it; None where it runs (also the sweep's filter)."""
    if ep <= 1:
        return f"true with ep {ep}", "parallel.ep > 1 (MLM transformer_config.py:3013-3015: only with expert model parallelism)"
    problem = ep_overlap_error(pp_schedule, pp)
    if problem:
        return f"true with pp {pp} and pp_schedule {pp_schedule}", problem
    if recompute == "full":
        return "true with training.recompute full", "recompute none or selective (MLM transformer_config.py:3021-3029 refuses full recomputation)"
    if precision == "fp32":
        return "true with training.precision fp32", "precision bf16 or fp8 (MLM transformer_config.py:3034-3037: a bf16 or fp16 model)"
    if zero == 3:
        return "true with parallel.zero 3", ("zero 0-2 (Megatron refuses its FSDP under an interleaved pipeline, MLM combined_1f1b.py:205-214; "
                                             "with pp 1 the per-block gathers are not modelled beside the merged pass)")
    return None


def check_ep_overlap(p, t) -> None:
    """ScenarioError at `parallel.ep_overlap` where `ep_overlap_problem` objects."""
    found = ep_overlap_problem(p.ep, p.pp, p.pp_schedule, t.recompute, t.precision, p.zero)
    if found:
        raise ScenarioError("parallel.ep_overlap", found[0], f"{found[1]}, or false")

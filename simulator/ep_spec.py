"""`parallel.ep*` checks against the model and the rest of the layout: expert parallelism, and
Megatron-Core's EP all-to-all overlap (`parallel.ep_overlap`, `plan/ep_overlap.py`) with what Megatron refuses.

Megatron's refusals are read at NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553 ("MLM"),
megatron/core/transformer/transformer_config.py:3002-3046 and pipeline_parallel/combined_1f1b.py:205-214."""
from __future__ import annotations

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
        if not _divides(p.ep, p.dp * p.cp):
            raise ScenarioError("parallel.ep", f"{p.ep} does not divide dp*cp = {p.dp * p.cp}", "a divisor of dp*cp")
    if p.ep_overlap:
        check_ep_overlap(p, t)


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

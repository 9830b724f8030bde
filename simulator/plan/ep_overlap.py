"""Megatron-Core's EP all-to-all overlap, "combined 1F1B" (`--overlap-moe-expert-parallel-comm`,
`parallel.ep_overlap`): in the 1F1B steady state the forward of one micro-batch and the backward of another
run as one merged pass, so that each one's dispatch and combine all-to-alls are in flight while the other
computes. The merged pass is the pair DualPipeV already runs (`plan/overlap.py`, `Step.pair`); this module
says which F runs with which B, in Megatron's order.

Read at NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553 ("MLM"):
- pp > 1 (interleaved only: MLM megatron/core/transformer/transformer_config.py:3007-3011 asserts a virtual
  pipeline when pp > 1): the warm-up runs one forward more than interleaved 1F1B's, "to ensure the forward
  and backward computations are independent in all 1f1b steps" (MLM pipeline_parallel/schedules.py:966-970);
  each steady step k then runs forward `k + warm-up` together with backward `k`
  (`forward_backward_helper_wrapper(f_virtual_microbatch_id=forward_k, b_virtual_microbatch_id=backward_k)`,
  schedules.py:1485-1506 -> combined_1f1b.py:140-270); the warm-up forwards and the cool-down backwards run
  alone (the same wrapper with one side None).
- pp = 1 (`combined_1f1b_schedule_for_no_pipelining`, combined_1f1b.py:35-137, called at schedules.py:778):
  forward 0 alone, then forward i+1 with backward i, then backward m-1 alone: the same rule with a warm-up
  of 0 + 1.
Inside the merged pass Megatron pairs forward layer i with backward layer L-1-i and alternates their
sub-modules on a compute and a communication stream (models/common/model_chunk_schedule_plan.py:236-313,
:500-580: combine_bwd | dispatch_fwd -> dispatch_bwd | combine_fwd on the communication stream beside
pre_dispatch_fwd | mlp_bwd -> mlp_fwd | pre_dispatch_bwd); `plan/overlap.py` cuts both passes at their
blocking collectives and alternates the segments, the same interleaving up to the order of segments.
The compute beside an in-flight all-to-all runs on the SMs its kernels leave (`cost/ep_sm_share.py`).

Memory: the extra warm-up forward holds one micro-batch more on every rank than the schedule without the
overlap (`ep_overlap_inflight`).
"""
from __future__ import annotations

from .schedules import SCHEDULES, Action, join_names, schedule_spec


def ep_overlap_error(schedule: str, pp: int) -> str | None:
    """Why Megatron does not run the overlap under `schedule` at `pp` stages, with what it runs under
    (None: it does; the registry's `ScheduleSpec.combined_order`)."""
    spec = schedule_spec(schedule)
    if spec.combined_order is not None and not (spec.combined_needs_pp1 and pp > 1):
        return None
    ok = join_names(f"{n} with pp = 1" if s.combined_needs_pp1 else n for n, s in SCHEDULES.items() if s.combined_order)
    return f"pp_schedule {ok} (Megatron asserts a virtual pipeline when pp > 1, MLM transformer_config.py:3007-3011)"


def _order(schedule: str, rank: int, pp: int, vpp: int, m: int) -> tuple[list[Action], list[tuple[int, int]], int]:
    """The schedule's forwards, backwards' (chunk, mb) and warm-up without the overlap."""
    problem = ep_overlap_error(schedule, pp)
    if problem:
        raise ValueError(f"EP overlap with {schedule} at pp = {pp}: needs {problem}")
    return schedule_spec(schedule).combined_order(rank, pp, vpp, m)


def ep_overlap_warmup(schedule: str, rank: int, pp: int, vpp: int, m: int) -> int:
    """Forwards run alone before the first merged step: the schedule's warm-up + 1, capped at m*vpp
    (MLM schedules.py:966-975)."""
    return min(_order(schedule, rank, pp, vpp, m)[2] + 1, m * vpp)


def ep_overlap_actions(schedule: str, rank: int, pp: int, vpp: int, m: int) -> list[Action]:
    """The rank's actions in combined-1F1B order: the warm-up forwards, then each steady forward marked
    `overlap` and followed by the backward it runs with (B then W: the schedules do not split the
    backward), then the cool-down backwards."""
    fwd, bwd, _ = _order(schedule, rank, pp, vpp, m)
    total = m * vpp
    warm = ep_overlap_warmup(schedule, rank, pp, vpp, m)
    out = list(fwd[:warm])
    for k in range(warm, total):
        f = fwd[k]
        out.append(Action("F", f.chunk, f.mb, overlap=True))
        c, mb = bwd[k - warm]
        out += [Action("B", c, mb), Action("W", c, mb)]
    for c, mb in bwd[total - warm:]:
        out += [Action("B", c, mb), Action("W", c, mb)]
    return out


def ep_overlap_schedule(schedule: str, pp: int, vpp: int, m: int) -> list[list[Action]]:
    """Per pipeline rank, the actions in combined-1F1B order (`ep_overlap_actions`)."""
    return [ep_overlap_actions(schedule, r, pp, vpp, m) for r in range(pp)]


def ep_overlap_inflight(schedule: str, rank: int, pp: int, vpp: int, m: int) -> list[int]:
    """Per local chunk, the micro-batches held at the rank's peak: the warm-up forwards and the first
    merged step's forward, whose activations grow while the backward beside it has not yet freed its own
    (one more than the schedule without the overlap), spread over the local chunks as the forwards walk
    them (groups of pp micro-batches per local chunk)."""
    held = min(ep_overlap_warmup(schedule, rank, pp, vpp, m) + 1, m * vpp)
    return [sum(1 for k in range(held) if (k // pp) % vpp == local) for local in range(vpp)]

"""`parallel.pp*` checks against the schedule and the model (`plan/schedules.py` says what each schedule is
defined for): the pipeline degree, chunks per rank, blocking sends, micro-batch counts and how the model's
layers split over the chunks. With DualPipe's two copies of the model (`ScheduleSpec.routes` 2) the layers split
over the pp stages of one copy, and `pp_layers` gives one entry per stage.
"""
from __future__ import annotations

from .errors import ScenarioError
from .inputs import near_even_split
from .plan.schedules import SCHEDULES, join_names, schedule_spec, vpp_allowed


def chunks_per_copy(parallel) -> int:
    """Model chunks one micro-batch runs through: pp*vpp, or pp*vpp / 2 under DualPipe's two copies."""
    return parallel.pp * parallel.vpp // schedule_spec(parallel.pp_schedule).routes


def check_pipeline(p, layers: int, m_micro: int) -> None:
    """The pipeline's keys against `p.pp_schedule`'s spec and the model's `layers` decoder layers, with `m_micro`
    micro-batches per pipeline (ScenarioError naming the key)."""
    s = p.pp_schedule
    spec = schedule_spec(s)
    if spec.pp_error(p.pp):
        raise ScenarioError("parallel.pp", spec.pp_error(p.pp))
    if spec.vpp_error(p.vpp):
        raise ScenarioError("parallel.vpp", f"{p.vpp} with pp_schedule {s}", vpp_allowed(s))
    if p.pp_p2p == "blocking" and not spec.p2p_in_steady_state:
        modelled = join_names(n for n, x in SCHEDULES.items() if x.p2p_in_steady_state)
        raise ScenarioError("parallel.pp_p2p", f"blocking with pp_schedule {s}", f"async (blocking sends are modelled for {modelled})")
    problem = spec.microbatch_error(p.pp, m_micro)
    if problem:
        raise ScenarioError("training.global_batch", problem)
    chunks = chunks_per_copy(p)
    what = f"pp*vpp = {chunks}" if spec.routes == 1 else f"pp = {chunks} (stages of one of {s}'s {spec.routes} model copies)"
    if p.pp_layers is not None:
        if len(p.pp_layers) != chunks:
            raise ScenarioError("parallel.pp_layers", f"has {len(p.pp_layers)} entries", f"{what} entries")
        if any(x < 0 for x in p.pp_layers) or sum(p.pp_layers) != layers:
            raise ScenarioError("parallel.pp_layers", f"sums to {sum(p.pp_layers)}", f"non-negative entries summing to model.layers = {layers}")
    elif layers % chunks and p.pp_balance == "even":  # `speed` splits them itself (cost/pp_balance.py)
        raise ScenarioError("parallel.pp", f"{what} does not divide the model's {layers} layers",
                            f"a divisor of layers, or parallel.pp_layers, e.g. {near_even_split(layers, chunks)}")

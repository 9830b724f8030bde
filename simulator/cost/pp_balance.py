"""`parallel.pp_balance: speed`: pipeline layers per stage in proportion to each stage's speed (mixed pools,
stragglers, degraded links), which sets `parallel.pp_layers`.

Each stage's pace (`plan/paces.py`) prices one decoder layer's forward, backward and weight gradient for one
micro-batch: its compute on the stage's pool's GPU times the straggler multiplier, its TP / CP / EP collectives on
the stage's links, summed (a serial proxy of the layer's time, enough to rank relative throughput). The split
minimises the slowest stage's n_s x t_s over integers n_s >= 1 summing to the layers: layers are dealt one at a
time to the stage whose time after taking it, (n_s + 1) x t_s, is least (the greedy min-max allocation, optimal for
per-stage costs linear in n_s; ties to the earlier stage, so equal speeds give the even split). The embedding and
the LM head are not counted (Megatron's even split does not count them either). A stage whose peak memory would
not fit its GPU (`memory_fit.fits`, each pool against its own) is capped a layer below and the split redone, so
the faster pool takes no more layers than it holds; when every stage overflows the split stands (the memory
verdict says so).
"""
from __future__ import annotations

import dataclasses

from ..errors import ScenarioError
from ..plan.layer_ops import layer_passes
from ..plan.memory import GIB, stage_memory, zero_groups
from ..plan.memory_fit import fits, stage_capacities
from ..plan.layout import group_shape
from ..plan.opgraph import Compute
from ..plan.paces import LinkVariant, stage_paces
from .paced import PacedCosts


def stage_layer_times(sc, cost, pool: int | None = None) -> tuple[float, ...]:
    """Per pipeline stage: seconds of one decoder layer (the model's last) forward + backward for one micro-batch
    at the stage's pace (module docstring); `pool`: of that pool's DP replicas (`plan/paces.stage_paces`)."""
    costs = PacedCosts(sc, cost)
    lp = layer_passes(sc, sc.model.layers - 1)
    nodes = lp.F + lp.B + lp.W
    shapes: dict = {}
    out = []
    for pace in stage_paces(sc, pool=pool):
        model = costs.model(LinkVariant(pace.pool))
        t = 0.0
        for node in nodes:
            op = node.op
            if isinstance(op, Compute):
                t += model.compute_time(op) * pace.speed
            else:
                key = op.group or op.dim
                if key not in shapes:
                    shapes[key] = group_shape(sc, key)
                t += costs.slowest(op, shapes[key], pace.variants(key))[0]
        out.append(t)
    return tuple(out)


def deal(total: int, times, start: int = 0, caps=None) -> list[int]:
    """`total` units (layers, micro-batches) over workers that take `times[i]` seconds per unit, each starting at
    `start` units and holding at most caps[i] while another can still take one: each unit goes to the worker whose
    time after taking it, (n_i + 1) x times[i], is least, ties to the lower index (greedy min-max: optimal for costs
    linear in n_i; equal times give the even split)."""
    k = len(times)
    caps = caps or [total] * k
    n = [start] * k
    for _ in range(total - start * k):
        open_ = [i for i in range(k) if n[i] < caps[i]] or list(range(k))
        j = min(open_, key=lambda i: ((n[i] + 1) * times[i], i))
        n[j] += 1
    return n


def speed_split(layers: int, times, caps=None) -> list[int]:
    """Integer layers per stage minimising max_s n_s x times[s], every n_s >= 1 and at most caps[s] where another
    stage can still take the layer (module docstring)."""
    if layers < len(times):
        raise ValueError(f"{layers} layers over {len(times)} stages")
    return deal(layers, times, start=1, caps=caps)


def _over_capacity(sc) -> list[int]:
    """Stages whose peak does not fit their GPU (`memory_fit.fits`, each stage against its own pool's GPU)."""
    caps = stage_capacities(sc)
    groups = zero_groups(sc)
    return [r for r in range(sc.parallel.pp)
            if not fits(stage_memory(sc, r, groups=groups).peak / GIB, *caps[r])]


def balanced(sc, cost=None):
    """`sc` with `parallel.pp_layers` set by speed when `pp_balance` is speed (else `sc` itself)."""
    p = sc.parallel
    if p.pp_balance != "speed" or p.pp == 1:
        return sc
    if p.vpp != 1:
        raise ScenarioError("parallel.pp_balance", f"speed with vpp {p.vpp}", "vpp 1 (one chunk per stage), or pp_balance: even")
    if sc.model.layers < p.pp:
        raise ScenarioError("parallel.pp_balance", f"speed with {sc.model.layers} layers over pp {p.pp}", "at least one layer per stage")
    if cost is None:
        from .costs import build_cost_model  # noqa: PLC0415
        cost = build_cost_model(sc)
    times = stage_layer_times(sc, cost)
    caps = [sc.model.layers] * p.pp
    while True:  # a stage the split overfills gives back a layer, to the next fastest that still fits
        split = speed_split(sc.model.layers, times, caps)
        out = dataclasses.replace(sc, parallel=dataclasses.replace(p, pp_layers=split))
        over = [r for r in _over_capacity(out) if split[r] > 1]
        if not over or len(over) == p.pp or sum(caps) - len(over) < sc.model.layers:
            return out  # it fits, or no split within the caps holds every layer: the memory verdict says so
        for r in over:  # caps only fall: at most `layers` rounds
            caps[r] = min(caps[r], split[r]) - 1


@dataclasses.dataclass(frozen=True, slots=True)
class DpShare:
    """One pool's DP replicas under `dp_balance: speed`: how many, and their micro-batches per step."""
    pool: int
    replicas: int
    micro_batches: int
    """The most any of its replicas runs (the class simulated: the pool's slowest replica)."""
    fewer: int
    """Replicas that run one micro-batch fewer."""


def replica_micro_batches(sc, cost) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(micro-batches, pool) per DP replica in dp order under `dp_balance: speed` (`dp_shares`' rule)."""
    from ..cluster_mix import pool_of_node  # noqa: PLC0415
    from ..plan.layout import group_ranks  # noqa: PLC0415
    layers = sc.parallel.pp_layers or [sc.model.layers // sc.parallel.pp] * sc.parallel.pp
    owner = [pool_of_node(sc.cluster.pools, r // sc.gpus_per_node) for r in group_ranks(sc, "dp", 0)]
    per_mb = {k: max(n * t for n, t in zip(layers, stage_layer_times(sc, cost, pool=k))) for k in sorted(set(owner))}
    m = deal(sc.training.global_batch // sc.training.micro_batch, [per_mb[o] for o in owner])
    return tuple(m), tuple(owner)


def dp_shares(sc, cost) -> tuple[DpShare, ...]:
    """Micro-batches per DP replica in proportion to its pool's speed (`parallel.dp_balance: speed`), the global batch
    unchanged. A replica's time per micro-batch is its pipeline's slowest stage, n_s x layer time at the pool's
    pace (`stage_layer_times`); the global batch's micro-batches are dealt one at a time to the replica whose time
    after taking one is least (min-max; ties to the lower replica), so the replicas of one pool differ by at most
    one micro-batch (the rounding), and each pool is simulated at its most (representative mode: one class per pool;
    the step waits for the slowest at the gradient sync)."""
    from ..plan.schedules import schedule_spec  # noqa: PLC0415
    m, owner = replica_micro_batches(sc, cost)
    out = []
    spec = schedule_spec(sc.parallel.pp_schedule)
    for k in sorted(set(owner)):
        mine = [m[i] for i, o in enumerate(owner) if o == k]
        top = max(mine)
        low = min(mine)
        problem = next(filter(None, (spec.microbatch_error(sc.parallel.pp, x) for x in sorted(set(mine)))), None) \
            if low else "none"
        if problem:
            raise ScenarioError("parallel.dp_balance", f"speed gives pool {k}'s replicas {low} micro-batches: {problem}",
                                "a larger global_batch, or dp_balance: even")
        out.append(DpShare(pool=k, replicas=len(mine), micro_batches=top, fewer=sum(1 for x in mine if x < top)))
    return tuple(out)

"""One step of a scenario by either estimator, with `parallel.dp_balance: speed` as one class of DP replicas per
pool: each pool's replicas run their own share of the micro-batches (`cost/pp_balance.dp_shares`) at their own
pace (`plan/paces.stage_paces(pool=...)`), the global batch unchanged, and the step is the slowest class's: every
replica meets the others at the gradient sync, so the faster classes wait there (their own timelines are not
simulated past it). With every rank simulated (`--full`, ZeRO 0 or 1), each replica runs its own micro-batches and
the gradient sync is a real rendezvous."""
from __future__ import annotations

from dataclasses import replace

from .cost.pp_balance import DpShare, dp_shares, replica_micro_batches
from .errors import ScenarioError
from .evaluate.analytic import estimate


def class_scenario(sc, share: DpShare):
    """`sc` with every replica running `share.micro_batches` (its pool's class; the DP groups keep their shape)."""
    t = sc.training
    return replace(sc, training=replace(t, global_batch=sc.dp * t.micro_batch * share.micro_batches))


def _one(sc, cost, estimator: str, full: bool, pool, **engine):
    if estimator == "engine":
        from .evaluate.engine import simulate_engine  # noqa: PLC0415 (the engine is optional)
        return simulate_engine(sc, cost, full=full, pool=pool, **engine)
    return estimate(sc, cost, pool=pool)


def step(sc, cost, estimator: str, *, full: bool = False, **engine):
    """(EngineResult, shares or None): one step of `sc` (module docstring). `engine`: trace / plot paths, drawn for
    the slowest class."""
    if sc.parallel.dp_balance != "speed":
        return _one(sc, cost, estimator, full, None, **engine), None
    shares = dp_shares(sc, cost)
    if full:  # every rank, each replica with its own micro-batches: the gradient sync is a real rendezvous
        if sc.parallel.zero >= 2:
            raise ScenarioError("--full", f"with parallel.dp_balance: speed and zero {sc.parallel.zero} (its DP collectives "
                                "run per micro-batch: replicas with different counts would not meet)",
                                "zero 0 or 1, or representative mode (one class per pool)")
        m, _ = replica_micro_batches(sc, cost)
        return _one(sc, cost, estimator, True, None, replica_micro_batches=m, **engine), shares
    runs = [(sh, _one(class_scenario(sc, sh), cost, estimator, False, sh.pool)) for sh in shares]
    slow, res = max(runs, key=lambda x: x[1].iteration_time_s)
    if engine and any(engine.values()):  # the drawings of the class that sets the step
        res = _one(class_scenario(sc, slow), cost, estimator, False, slow.pool, **engine)
    # every replica's work: a class's FLOPs per replica and micro-batch times the micro-batches its replicas run
    hfu = sum(r.hfu_flops / (sc.dp * sh.micro_batches) * (sh.replicas * sh.micro_batches - sh.fewer) for sh, r in runs)
    return replace(res, hfu_flops=hfu, events=sum(r.events for _, r in runs),
                   ranks_simulated=sum(r.ranks_simulated for _, r in runs)), shares

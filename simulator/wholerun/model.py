"""The whole run from its phases: each phase's failure-free compute time from the simulated step, the
checkpoint it writes, the interval it checkpoints at, and the expected wall-clock time once
interruptions, restarts and lost work are counted (failures.wall_per_work, Daly 2006).

Per phase p with step time t_p, tokens per step k_p and N_p tokens:
    T_s  = ceil(N_p / k_p) * t_p                       failure-free compute
    M    = 1 / (gpus * rate)                          mean time between interruptions
    R    = detection + restart + reload + warm-up     restart cost (+ the write in flight, asynchronous)
    tau  = the user's interval, or argmin T_w         compute between checkpoints
    T_w  = T_s * wall_per_work(tau, delta, R, M)      expected wall time; goodput = T_s / T_w
    interruptions = T_w / M; GPU-hours = gpus * T_w / 3600; cost = GPU-hours * price.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..scenario import Scenario
from .checkpoint import Checkpoint, checkpoint
from .failures import (DAY_S, DEFAULT_FAILURES_PER_GPU_HOUR, DETECTION_S, HOUR_S, RESTART_S, WARMUP_STEPS,
                       daly_interval, mtbi_s, optimal_interval, wall_per_work, young_interval)
from .price import ListPrice, list_price
from ..run_spec import Phase


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseRun:
    name: str
    tokens: float
    gpus: int
    step_s: float
    tokens_per_step: int
    steps: int
    estimator: str
    compute_s: float
    """Failure-free compute time T_s."""
    mtbi_s: float
    restart_s: float
    """R: detection + restart + reload + warm-up (+ the asynchronous write in flight)."""
    interval_s: float
    """Compute seconds between checkpoints (a whole number of steps)."""
    interval_steps: int
    interval_chosen: str
    """'optimal' (maximises goodput) or 'user'."""
    young_interval_s: float
    daly_interval_s: float
    checkpoints: int
    wall_s: float
    goodput: float
    interruptions: float
    lost_work_per_interruption_s: float
    checkpoint: Checkpoint


@dataclass(frozen=True, kw_only=True, slots=True)
class WholeRun:
    phases: tuple[PhaseRun, ...]
    failures_per_gpu_hour: float
    failure_source: str
    price_per_gpu_hour: float | None
    price_source: str

    @property
    def tokens(self) -> float:
        return sum(p.tokens for p in self.phases)

    @property
    def wall_s(self) -> float:
        return sum(p.wall_s for p in self.phases)

    @property
    def compute_s(self) -> float:
        return sum(p.compute_s for p in self.phases)

    @property
    def days(self) -> float:
        return self.wall_s / DAY_S

    @property
    def failure_free_days(self) -> float:
        return self.compute_s / DAY_S

    @property
    def gpu_hours(self) -> float:
        return sum(p.gpus * p.wall_s for p in self.phases) / HOUR_S

    @property
    def cost(self) -> float | None:
        return None if self.price_per_gpu_hour is None else self.gpu_hours * self.price_per_gpu_hour

    @property
    def interruptions(self) -> float:
        return sum(p.interruptions for p in self.phases)

    @property
    def goodput(self) -> float:
        return self.compute_s / self.wall_s

    def to_json(self) -> dict:
        return {"tokens": self.tokens, "days": self.days, "failure_free_days": self.failure_free_days,
                "gpu_hours": self.gpu_hours, "cost": self.cost, "price_per_gpu_hour": self.price_per_gpu_hour,
                "price_source": self.price_source, "interruptions": self.interruptions,
                "interruptions_per_day": self.interruptions / self.days, "goodput": self.goodput,
                "failures_per_gpu_hour": self.failures_per_gpu_hour, "failure_source": self.failure_source,
                "phases": [asdict(p) for p in self.phases]}


def restart_cost_s(ck: Checkpoint, step_s: float) -> float:
    """R = detection + restart + reload + warm-up steps; an asynchronous checkpoint still being written
    when the job fails is lost too, so its write time is added (the job rolls back one more interval's
    tail on average; a first-order charge)."""
    return DETECTION_S + RESTART_S + ck.reload_s + WARMUP_STEPS * step_s + (ck.write_s if ck.asynchronous else 0.0)


def phase_run(sc: Scenario, phase: Phase, step_s: float, estimator: str, *, per_gpu_hour: float,
              interval_s: float | None = None, interval_steps: int | None = None,
              asynchronous: bool = False) -> PhaseRun:
    """One phase of the run on `sc` (module docstring). `interval_s` / `interval_steps`: the user's
    checkpoint interval; otherwise the goodput-maximising one, rounded to whole steps."""
    ck = checkpoint(sc, asynchronous)
    k = sc.tokens_per_step
    steps = math.ceil(phase.tokens / k)
    compute = steps * step_s
    m = mtbi_s(sc.gpus, per_gpu_hour)
    r = restart_cost_s(ck, step_s)
    # an asynchronous write must end before the next checkpoint starts: the interval is at least write_s
    lower = max(step_s, ck.write_s if asynchronous else 0.0)
    if interval_steps is not None:
        n, chosen = interval_steps, "user"
    elif interval_s is not None:
        n, chosen = max(1, round(interval_s / step_s)), "user"
    else:
        tau = optimal_interval(ck.stall_s, r, m, lower)
        n, chosen = (steps if math.isinf(tau) else max(1, round(tau / step_s))), "optimal"
    n = min(n, steps)
    tau = n * step_s
    wall = compute * wall_per_work(tau, ck.stall_s, r, m)
    return PhaseRun(name=phase.name, tokens=phase.tokens, gpus=sc.gpus, step_s=step_s, tokens_per_step=k, steps=steps,
                    estimator=estimator, compute_s=compute, mtbi_s=m, restart_s=r, interval_s=tau, interval_steps=n,
                    interval_chosen=chosen, young_interval_s=young_interval(ck.stall_s, m),
                    daly_interval_s=daly_interval(ck.stall_s, m), checkpoints=steps // n, wall_s=wall,
                    goodput=compute / wall, interruptions=wall / m if not math.isinf(m) else 0.0,
                    lost_work_per_interruption_s=tau / 2.0 + (ck.write_s if asynchronous else 0.0), checkpoint=ck)


def whole_run(priced: list[tuple[Scenario, Phase, float, str]], *, per_gpu_hour: float | None = None,
              price_per_gpu_hour: float | None = None, interval_s: float | None = None,
              interval_steps: int | None = None, asynchronous: bool = False) -> WholeRun:
    """The run from its priced phases: (phase scenario, phase, step seconds, estimator) each. Rates and
    prices default to the sourced constants (failures.DEFAULT_FAILURES_PER_GPU_HOUR, price.list_price)."""
    rate = DEFAULT_FAILURES_PER_GPU_HOUR if per_gpu_hour is None else per_gpu_hour
    source = ("Kokolis et al. 2024 (arXiv 2410.21680), RSC-1: 6.50 per 1,000 node-days / 8 GPUs"
              if per_gpu_hour is None else "user")
    phases = tuple(phase_run(sc, ph, step, est, per_gpu_hour=rate, interval_s=interval_s,
                             interval_steps=interval_steps, asynchronous=asynchronous) for sc, ph, step, est in priced)
    if price_per_gpu_hour is not None:
        price: ListPrice | None = ListPrice(per_gpu_hour=price_per_gpu_hour, source="user (--price-per-gpu-hour)")
    else:
        price = list_price(priced[0][0].topology.gpu.name)
    return WholeRun(phases=phases, failures_per_gpu_hour=rate, failure_source=source,
                    price_per_gpu_hour=price.per_gpu_hour if price else None,
                    price_source=price.source if price else f"no list price for {priced[0][0].topology.gpu.name}; "
                                                           "pass --price-per-gpu-hour")

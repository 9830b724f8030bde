"""`simulate(sc)`: one scenario in, the contract's report (a plain dict) out.

The discrete-event engine (`simulator/engine`) produces the numbers by default; `estimator="analytic"`
lists the same plan without events (`evaluate/analytic.py`). Either way the report says which one it was.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import time

from .step_classes import class_scenario, step
from .cost.costs import build_cost_model, priced_attention_kernel
from .cost.pp_balance import balanced, stage_layer_times
from .plan.layout import chunk_layers
from .plan.memory_fit import DEFAULT_HEADROOM_FRACTION, verdict
from .plan.paces import stage_pool_sets
from .evaluate.diloco import inner_scenario, outer_sync
from .plan.documents import attention_summary
from .plan.stage_speed import stage_speeds
from .plan.paces import degraded_link_effects
from .stragglers import rank_speeds
from .plan.flops import mfu_peak_flops, scenario_model_flops
from .plan.memory import GIB, memory_report
from .errors import ScenarioError
from .params import active_params, total_params
from .plan.lower import build_plan, step_compute_ops
from .cost.profile_load import profile_warnings
from .scenario import Scenario

ESTIMATORS = ("engine", "analytic")
MAX_ENGINE_WORK = 1 << 21
"""Rank-layer passes the engine may simulate per step (ranks simulated x micro-batches x layers per rank):
its time and memory grow with them, ~15-25 us each on the 2-core host (the 70B with --full on 512 GPUs,
655 K passes, took 11 s; on 4,096 GPUs, 5.2 M, 121 s). 2**21 keeps a run under about a minute."""


def engine_work(sc: Scenario, full: bool) -> int:
    """Rank-layer passes the engine simulates for one step of `sc`."""
    ranks = sc.gpus if full else sc.parallel.pp
    return ranks * sc.micro_batches * -(-sc.model.layers // sc.parallel.pp)


def _engine_available() -> bool:
    try:
        from .evaluate.engine import simulate_engine  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def measured_compute_fraction(sc: Scenario, cost, plan=None) -> float:
    """Share of one step's compute time (every op occurrence on every pipeline rank of the plan, weighted by
    how often it runs) that the calibration profile priced from measurements rather than the spec roofline."""
    measured = total = 0.0
    for op, n in step_compute_ops(plan if plan is not None else build_plan(sc)).items():
        t = cost.compute_time(op) * n
        total += t
        if cost.measured_time(op) is not None:
            measured += t
    return measured / total if total else 0.0


def with_outer_sync(sc: Scenario, report: dict) -> dict:
    """The inner site's report made the whole job's: the outer synchronisation amortised into the step
    (`evaluate/diloco.py`), throughput and MFU over every site's GPUs, a `diloco` block."""
    block = outer_sync(sc, report["iteration_time_s"])
    step = block["step_s"]
    scale = block["inner_step_s"] / step
    out = dict(report, name=sc.name, gpus=sc.gpus, iteration_time_s=step, tokens_per_s=sc.tokens_per_step / step,
               tokens_per_s_per_gpu=sc.tokens_per_step / step / sc.gpus,
               model_tflops_per_gpu=report["model_tflops_per_gpu"] * scale, mfu=report["mfu"] * scale,
               hfu=report["hfu"] * scale if report.get("hfu") else report.get("hfu"), diloco=block)
    out["layout"] = dict(report["layout"], dp=sc.dp)
    return out


def straggler_summary(sc: Scenario, iteration: float, estimator: str, cost, asked: Scenario | None = None) -> dict:
    """The report's `stragglers` block: how many GPUs are slow, which stage each slow GPU paces, and the step
    the same job takes with no slow GPU (its twin, priced by the same estimator). `asked`: the scenario before
    `pp_balance` split its layers (the twin is balanced by its own speeds)."""
    ranks = rank_speeds(sc.cluster.stragglers, sc.cluster.slow_gpus, sc.gpus, sc.gpus_per_node)
    speed, who = stage_speeds(sc, ranks)
    pacing = [{"stage": s, "rank": r, "slowdown": x} for s, (x, r) in enumerate(zip(speed, who)) if r >= 0]
    slow = len(ranks)
    base = iteration
    if slow:
        asked = asked or sc
        base = _twin_step(balanced(replace(asked, cluster=replace(asked.cluster, stragglers=[], slow_gpus=None))),
                          estimator, cost)
    return {"slow_gpus": slow, "pacing": pacing, "homogeneous_step_s": base, "cost_s": iteration - base}


def _twin_step(twin: Scenario, estimator: str, cost) -> float:
    """The step of `twin` (the scenario without what a report block prices) by the same estimator."""
    return step(twin, cost, estimator)[0].iteration_time_s


def degraded_links_summary(sc: Scenario, iteration: float, estimator: str, cost, asked: Scenario | None = None) -> dict | None:
    """The report's `degraded_links` block: per degraded link, the groups that cross it (plan/paces.py) and the
    stages they pace, and the step the same job takes with every link healthy (same estimator; `asked` as in
    `straggler_summary`). None: no entry."""
    if not sc.cluster.degraded_links:
        return None
    asked = asked or sc
    base = _twin_step(balanced(replace(asked, cluster=replace(asked.cluster, degraded_links=[]))), estimator, cost)
    return {"links": degraded_link_effects(sc), "healthy_step_s": base, "cost_s": iteration - base}


def pools_summary(sc: Scenario, cost, mem, mems: dict | None = None, shares=None) -> dict | None:
    """The report's `pools` block: each pool's GPU, nodes and stages and its memory verdict against its own GPU's
    capacity (`mems`: per pool, its class's report under dp_balance speed); the pipeline split and each stage's
    decoder-layer time at its pace (cost/pp_balance.py); the DP replicas' micro-batch shares (`shares`)."""
    if not sc.cluster.pools:
        return None
    owner = stage_pool_sets(sc)
    room = sc.cluster.memory_headroom_gib
    out = []
    for i, (p, topo) in enumerate(zip(sc.cluster.pools, sc.pool_topologies)):
        stages = [s for s, x in enumerate(owner) if i in x]
        peak = max(((mems or {}).get(i, mem).per_stage[s].peak / GIB for s in stages), default=0.0)
        cap = float(topo.gpu.memory_gib)
        keep = float(room) if room is not None else DEFAULT_HEADROOM_FRACTION * cap
        said = verdict([(peak, cap, keep)])
        out.append({"gpu": Path(p.gpu).stem, "gpu_model": topo.gpu.name, "nodes": p.nodes, "stages": stages,
                    "capacity_gib": cap, "peak_gib": peak, "fits": said == "fits", "verdict": said})
    dp = [{"gpu": out[sh.pool]["gpu"], "replicas": sh.replicas, "micro_batches": sh.micro_batches, "fewer": sh.fewer}
          for sh in shares] if shares else None
    return {"pools": out, "pp_balance": sc.parallel.pp_balance, "pp_layers": chunk_layers(sc),
            "layer_s": list(stage_layer_times(sc, cost)), "dp_balance": sc.parallel.dp_balance, "dp_shares": dp}


def simulate(sc: Scenario, estimator: str = "engine", *, full: bool = False, trace_path=None, plot_path=None,
             memory_plot_path=None) -> dict:
    """Simulate one optimizer step of `sc` and return the `run --json` report (docs/report.md)."""
    if sc.parallel.diloco is not None:  # one site's inner step, then the WAN's outer sync amortised over H
        inner = inner_scenario(sc)
        report = simulate(inner, estimator, full=full, trace_path=trace_path, plot_path=plot_path,
                          memory_plot_path=memory_plot_path)
        return with_outer_sync(sc, report)
    t0 = time.perf_counter()
    asked, sc = sc, balanced(sc)  # parallel.pp_balance: speed sets the layers per stage (cost/pp_balance.py)
    if estimator == "engine" and engine_work(sc, full) > MAX_ENGINE_WORK:
        raise ScenarioError("--estimator engine", f"{engine_work(sc, full):,} rank-layer passes to simulate (ranks x "
                            f"micro-batches x layers per rank{', every rank with --full' if full else ''})",
                            f"at most {MAX_ENGINE_WORK:,} (about a minute): --estimator analytic, fewer micro-batches"
                            + (", or without --full" if full else ""))
    cost = build_cost_model(sc)
    warnings = profile_warnings(sc, cost.profile)
    if estimator == "engine" and not _engine_available():
        estimator = "analytic"
    if estimator == "engine":
        res, shares = step(sc, cost, estimator, full=full, trace_path=trace_path, plot_path=plot_path,
                           memory_plot_path=memory_plot_path)
        mem_peaks = res.memory_peak_bytes
    else:
        res, shares = step(sc, cost, estimator)
        mem_peaks = None
    iteration, bubble, hw = res.iteration_time_s, res.bubble_fraction, res.hfu_flops
    comm = {d: {"time_s": t, "exposed_s": e} for d, (t, e) in res.comm.items()}
    overlap, breakdown = res.overlap_fraction, dict(res.breakdown)
    events, ranks = res.events, res.ranks_simulated
    contention = dict(res.contention_s)
    for d in ("tp", "dp", "pp", "cp", "ep"):
        comm.setdefault(d, {"time_s": 0.0, "exposed_s": 0.0})
    gpus = sc.gpus
    model_flops, convention = scenario_model_flops(sc)
    tflops = model_flops / iteration / gpus / 1e12
    # one denominator for MFU and HFU: the dense peak of the precision the GEMMs run in (docs/metrics.md)
    peak = mfu_peak_flops(sc) / 1e12
    mems = {sh.pool: memory_report(class_scenario(sc, sh)) for sh in shares} if shares else None
    mem = min(mems.values(), key=lambda m: (m.fits, m.capacity_gib - m.peak_gib)) if mems else memory_report(sc)
    mem_json = mem.to_json()
    if mem_peaks is not None:
        mem_json["timeline_peak_gib"] = [round(b / 2**30, 3) for b in mem_peaks]
    coverage = measured_compute_fraction(sc, cost) if cost.profile is not None else 0.0
    return {
        "name": sc.name,
        "gpus": gpus,
        "iteration_time_s": iteration,
        "tokens_per_s": sc.tokens_per_step / iteration,
        "tokens_per_s_per_gpu": sc.tokens_per_step / iteration / gpus,
        "model_tflops_per_gpu": tflops,
        "mfu": tflops / peak,
        "hfu": hw / iteration / gpus / 1e12 / peak if hw else None,
        "bubble_fraction": bubble,
        "stage_idle_fraction": [st.bubble_s / iteration for st in res.stages] if iteration > 0 else [],
        "comm": comm,
        "overlap_fraction": overlap,
        "contention_s": contention,
        "breakdown": breakdown,
        "memory": mem_json,
        "layout": {"dp": sc.dp, "tp": sc.parallel.tp, "pp": sc.parallel.pp, "cp": sc.parallel.cp, "ep": sc.parallel.ep,
                   "etp": sc.parallel.etp, "ep_overlap": sc.parallel.ep_overlap, "zero": sc.parallel.zero, "sp": sc.parallel.sp, "pp_schedule": sc.parallel.pp_schedule,
                   "vpp": sc.parallel.vpp, "micro_batch": sc.training.micro_batch, "micro_batches": sc.micro_batches,
                   "recompute": sc.training.recompute, "loss": sc.training.loss},
        "model": {"name": sc.model.name, "params": total_params(sc.model), "active_params": active_params(sc.model),
                  "flops_per_step": model_flops, "flop_convention": convention},
        "estimator": estimator,
        "framework": sc.framework.to_json(sc.parallel.pp, priced_attention_kernel(sc), sc.model.moe, sc.parallel.ep),
        "stragglers": straggler_summary(sc, iteration, estimator, cost, asked),
        "degraded_links": degraded_links_summary(sc, iteration, estimator, cost, asked),
        "pools": pools_summary(sc, cost, mem, mems, shares),
        "diloco": None,
        "attention": attention_summary(sc),
        "profile": {"source": sc.cluster.profile, "measured_compute_fraction": coverage, "kernels": cost.kernel_source()},
        "sim": {"wall_s": time.perf_counter() - t0, "events": events, "ranks_simulated": ranks},
        "warnings": warnings,
    }

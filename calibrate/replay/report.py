"""Predicted vs measured: the simulator's number for the scenario, the comparison the contract's
`calibrate replay --json` prints, and the readable table.

The prediction is `simulator.run.simulate(sc)` (the `run --json` report). Until that API exists, or if
it fails, `predicted` values are null and the reason is kept in `notes`.
"""
from __future__ import annotations

import os
import statistics
from dataclasses import replace
from typing import Optional

from simulator.scenario import Scenario

from .host_speed import STEADY_MIN_STEPS, STEADY_TOLERANCE, steady_steps
from .plan import ReplayPlan, as_replayed


def predict(sc: Scenario) -> tuple[dict, Optional[str]]:
    """({"iteration_time_s", "peak_memory_gib"}, why they are missing or None). The memory is the worst
    stage's `allocated_peak_gib`, the figure `torch.cuda.max_memory_allocated` measures (no CUDA context,
    NCCL buffers or allocator slack); `peak_gib` where a report lacks it."""
    empty = {"iteration_time_s": None, "peak_memory_gib": None}
    try:
        from simulator.run import simulate
    except ImportError as e:
        return empty, f"no prediction: simulator.run.simulate is not available ({e})"
    try:
        rep = simulate(as_replayed(sc))
        mem = rep.get("memory") or {}
        allocated = [st.get("allocated_peak_gib") for st in mem.get("per_stage") or []]
        peak = max(allocated) if allocated and None not in allocated else mem.get("peak_gib")
        return {"iteration_time_s": rep.get("iteration_time_s"), "peak_memory_gib": peak}, None
    except Exception as e:  # a simulator bug must not hide the measurement
        return empty, f"no prediction: simulate() failed: {type(e).__name__}: {e}"


def _rel(pred: Optional[float], meas: Optional[float]) -> Optional[float]:
    if pred is None or meas is None or meas == 0:
        return None
    return (pred - meas) / meas


def loss_comparison(losses: list[float], reference: Optional[list[float]], rtol: float) -> tuple[Optional[bool], Optional[float]]:
    """(every step within rtol of the reference, largest relative difference)."""
    if reference is None:
        return None, None
    diffs = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference)]
    worst = max(diffs) if diffs else 0.0
    return len(losses) == len(reference) and worst <= rtol, worst


def host_factor(host: tuple) -> Optional[dict]:
    """{"before", "after", "ratio"}: the host's speed on the profile's own GEMMs, before and after the
    ranks ran, over the profile's (`host_speed.py`; > 1: slower now); ratio = their mean."""
    before, after = host
    if before is None or after is None:
        return None
    return {"before": before["ratio"], "after": after["ratio"], "ratio": (before["ratio"] + after["ratio"]) / 2,
            "points": before["points"]}


def steady(measured: dict, predicted_s: Optional[float], warmup: int) -> Optional[dict]:
    """The measured steps during which every rank's probe GEMM ran at the host's fast speed
    (`host_speed.steady_steps`): their median time and the prediction's error against it. None without
    probes (GPU) or with fewer than STEADY_MIN_STEPS such steps."""
    probes = measured.get("speed_probes_s_per_rank")
    if not probes or any(p is None for p in probes):
        return None
    steps, fastest = steady_steps(probes, warmup)
    if fastest is None:
        return None
    out = {"tolerance": STEADY_TOLERANCE, "fastest_probe_s": fastest, "steps": steps,
           "of_steps": len(measured["step_times_s"]) - warmup, "iteration_time_s": None, "relative_error": None}
    if len(steps) >= STEADY_MIN_STEPS:
        out["iteration_time_s"] = statistics.median(measured["step_times_s"][i] for i in steps)
        out["relative_error"] = _rel(predicted_s, out["iteration_time_s"])
    return out


def at_measured_imbalance(sc: Scenario, measured: dict) -> Optional[dict]:
    """With EP: the routing imbalance the run measured (`experts.ep_imbalance`), against the scenario's
    `parallel.ep_imbalance`, and the prediction with the measured one in its place. The executor's router
    decides where tokens go, so a scenario's 1.0 prices a balance the run did not have. None without EP."""
    imb = measured.get("ep_imbalance")
    if imb is None or sc.parallel.ep <= 1:
        return None
    pred, _ = predict(replace(sc, parallel=replace(sc.parallel, ep_imbalance=max(1.0, imb))))
    t = pred["iteration_time_s"]
    return {"measured": imb, "scenario": sc.parallel.ep_imbalance, "predicted_iteration_time_s": t,
            "relative_error": _rel(t, measured["iteration_time_s"])}


def build_report(plan: ReplayPlan, measured: dict, reference: Optional[dict], host: tuple = (None, None)) -> dict:
    """reference: {"losses", "grad_norms"} of the single-process run, or None when not run; host: the
    `host_speed` checks before and after the ranks ran."""
    sc = plan.scenario
    predicted, why = predict(sc)
    peaks = [x for x in measured["peak_memory_gib_per_rank"] if x is not None]
    meas = {"iteration_time_s": measured["iteration_time_s"],
            "peak_memory_gib": max(peaks) if peaks else None,
            "losses": measured["losses"]}
    ref_losses = reference["losses"] if reference else None
    ref_norms = reference["grad_norms"] if reference else None
    match, worst = loss_comparison(measured["losses"], ref_losses, plan.rtol)
    norm_match, norm_worst = loss_comparison(measured["grad_norms"], ref_norms, plan.rtol)
    p = sc.parallel
    notes = list(plan.notes) + ([why] if why else [])
    speed = host_factor(host)
    at_host = None
    if speed is not None and predicted["iteration_time_s"] is not None:
        at_host = _rel(predicted["iteration_time_s"] * speed["ratio"], meas["iteration_time_s"])
    return {
        "name": sc.name,
        "predicted": predicted,
        "measured": meas,
        "relative_error": {k: _rel(predicted[k], meas[k]) for k in ("iteration_time_s", "peak_memory_gib")},
        "loss_matches_reference": match,
        "reference_losses": ref_losses,
        "loss_rtol": plan.rtol,
        "max_loss_rel_diff": worst,
        "grad_norms": measured["grad_norms"],
        "reference_grad_norms": ref_norms,
        "grad_norm_matches_reference": norm_match,
        "max_grad_norm_rel_diff": norm_worst,
        "plan": {"dp": sc.dp, "tp": p.tp, "pp": p.pp, "cp": p.cp, "ep": p.ep, "zero": p.zero, "sp": p.sp,
                 "pp_schedule": p.pp_schedule if p.pp > 1 else None, "vpp": p.vpp, "recompute": sc.training.recompute,
                 "micro_batches": sc.micro_batches, "micro_batch": sc.training.micro_batch,
                 "seq_len": sc.training.seq_len, "global_batch": sc.training.global_batch},
        "device": plan.device, "backend": plan.backend, "world": plan.world, "dtype": plan.dtype,
        "threads_per_rank": plan.threads, "steps": plan.options.steps, "warmup": plan.options.warmup,
        "step_times_s": measured["step_times_s"],
        "peak_rss_gib_per_rank": measured["peak_rss_gib_per_rank"],
        "phases_per_rank": measured.get("phases_per_rank"),
        "load_average": list(os.getloadavg()),
        "host_speed_vs_profile": speed,
        "iteration_time_error_at_host_speed": at_host,
        "speed_probes_s_per_rank": measured.get("speed_probes_s_per_rank"),
        "steady_host": steady(measured, predicted["iteration_time_s"], plan.options.warmup),
        "ep_imbalance": at_measured_imbalance(sc, measured),
        "notes": notes,
    }


def _fmt(x: Optional[float], spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_table(r: dict) -> str:
    p = r["plan"]
    sched = f" {p['pp_schedule']}" if p["pp_schedule"] else ""
    lines = [
        f"replay: {r['name']}",
        f"  {r['world']} ranks on {r['device']}/{r['backend']} ({r['dtype']}, {r['threads_per_rank']} threads/rank), "
        f"{r['steps']} steps ({r['warmup']} warm-up), load average {r['load_average'][0]:.2f}",
        f"  dp={p['dp']} tp={p['tp']}{'+sp' if p['sp'] and p['tp'] > 1 else ''} pp={p['pp']}{sched} cp={p['cp']} "
        f"ep={p['ep']} zero={p['zero']} recompute={p['recompute']}; {p['micro_batches']} micro-batches of {p['micro_batch']}",
        "",
        f"  {'step':>4}  {'loss':>11}  {'reference':>11}  {'rel. diff':>9}  {'grad norm':>10}  {'reference':>10}  "
        f"{'rel. diff':>9}  {'time (s)':>8}",
    ]
    n = len(r["measured"]["losses"])
    ref = r["reference_losses"] or [None] * n
    ref_norm = r["reference_grad_norms"] or [None] * n
    for i in range(n):
        a, b, ga, gb = r["measured"]["losses"][i], ref[i], r["grad_norms"][i], ref_norm[i]
        diff = None if b is None else abs(a - b) / max(abs(b), 1e-12)
        gdiff = None if gb is None else abs(ga - gb) / max(abs(gb), 1e-12)
        warm = " (warm-up)" if i < r["warmup"] else ""
        lines.append(f"  {i:>4}  {a:>11.7f}  {_fmt(b, '11.7f'):>11}  {_fmt(diff, '9.1e'):>9}  {ga:>10.6f}  "
                     f"{_fmt(gb, '10.6f'):>10}  {_fmt(gdiff, '9.1e'):>9}  {r['step_times_s'][i]:>8.3f}{warm}")
    pr, me, er = r["predicted"], r["measured"], r["relative_error"]
    lines += [
        "",
        f"  {'':<20}  {'predicted':>10}  {'measured':>10}  {'error':>8}",
        f"  {'iteration time (s)':<20}  {_fmt(pr['iteration_time_s'], '10.4f'):>10}  {_fmt(me['iteration_time_s'], '10.4f'):>10}  "
        f"{_fmt(None if er['iteration_time_s'] is None else 100 * er['iteration_time_s'], '+7.1f'):>7}%",
        f"  {'peak memory (GiB)':<20}  {_fmt(pr['peak_memory_gib'], '10.3f'):>10}  {_fmt(me['peak_memory_gib'], '10.3f'):>10}  "
        f"{_fmt(None if er['peak_memory_gib'] is None else 100 * er['peak_memory_gib'], '+7.1f'):>7}%",
    ]
    hs = r.get("host_speed_vs_profile")
    if hs is not None:
        lines.append(f"  host speed on the profile's GEMMs: {hs['before']:.2f}x the profile's time before the run, "
                     f"{hs['after']:.2f}x after; the prediction scaled by their mean would be "
                     f"{100 * r['iteration_time_error_at_host_speed']:+.1f}% off (reported, not applied)")
    st = r.get("steady_host")
    if st is not None:
        head = (f"  steady host: {len(st['steps'])} of {st['of_steps']} measured steps ran with every rank's probe GEMM "
                f"within {100 * st['tolerance']:.0f} % of the fastest ({1e3 * st['fastest_probe_s']:.2f} ms)")
        if st["iteration_time_s"] is None:
            lines.append(head + f"; too few for a steady figure (need {STEADY_MIN_STEPS})")
        else:
            err = "" if st["relative_error"] is None else f", error {100 * st['relative_error']:+.1f}%"
            lines.append(head + f": measured {st['iteration_time_s']:.4f} s{err}")
    imb = r.get("ep_imbalance")
    if imb is not None and imb["predicted_iteration_time_s"] is not None:
        lines.append(f"  expert routing: busiest EP rank {imb['measured']:.2f}x the mean (scenario: {imb['scenario']:.2f}); "
                     f"predicted with the measured imbalance {imb['predicted_iteration_time_s']:.4f} s, error "
                     f"{100 * imb['relative_error']:+.1f}% (reported, not applied)")
    if r.get("phases_per_rank"):
        ph = r["phases_per_rank"]
        cpu = ", ".join(f"{x['cpu_s']:.2f}" for x in ph)
        lines.append(f"  rank 0 step split (median): forward+backward {ph[0]['forward_backward_s']:.3f} s, "
                     f"gradient-sync wait {ph[0]['grad_sync_wait_s']:.3f} s, optimizer {ph[0]['optimizer_s']:.3f} s; "
                     f"CPU seconds per rank per step: {cpu}")
    m = r["loss_matches_reference"]
    verdict = "not checked" if m is None else ("yes" if m else "NO")
    lines.append(f"  losses match the single-process reference (rtol {r['loss_rtol']:g}): {verdict}"
                 + ("" if r["max_loss_rel_diff"] is None else f" (largest rel. diff {r['max_loss_rel_diff']:.1e})"))
    g = r["grad_norm_matches_reference"]
    if g is not None:
        lines.append(f"  gradient norms match the reference (rtol {r['loss_rtol']:g}): {'yes' if g else 'NO'}"
                     f" (largest rel. diff {r['max_grad_norm_rel_diff']:.1e})")
    lines += [f"  note: {n}" for n in r["notes"]]
    return "\n".join(lines)

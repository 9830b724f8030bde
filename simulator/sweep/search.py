"""`sweep`: every valid layout of a scenario's model, batch and cluster, ranked by tokens/s per GPU.

The search, from cheap to expensive (each step only sees what the previous one kept):
  1. enumerate (dp, tp, pp, cp, ep, zero, sp, schedule, vpp, micro_batch, recompute) arithmetically,
     with the divisibility rules of `scenario.validate_layout`, so no Scenario is built for an
     impossible layout (`enumerate_layouts`);
  2. drop a layout whose model states alone exceed the GPU (`model_state_floor_gib`, a lower bound);
  3. phase 1, one task per family of "structures" (degrees; micro-batches ascending): the first
     option in preference order that fits (`memory`) is estimated (`analytic.estimate`);
  4. phase 2, for the structures that could still win once their bubble, exposed DP/PP communication
     and recomputation were gone (`optimistic_time_s`): every schedule and sp, then every ZeRO stage;
  5. the most promising K again with the discrete-event engine (`run.simulate`), then rank.
Every task is an independent simulation of plain data (`map_tasks`: serial, a local process pool, or
Ray), so the result does not depend on where it ran. Nothing is cached across scenarios.
Neighbours: `sweep_cmd` (command line, explanations), `plots`, `export`.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Optional


from ..errors import ScenarioError
from ..plan.memory_fit import headroom_gib
from ..model import model_to_mapping
from ..scenario import Scenario, apply_overrides, read_yaml
from ..plan.schedules import schedule_spec
from .runners import SerialRunner
from .space import (DEFAULT_EXPAND, Layout, RECOMPUTE_ORDER, ZERO_ORDER, default_space_note, enumerate_layouts,
                          layout_of, model_state_floor_gib, param_split)
from .tasks import Evaluation, estimate_anyway, first_fit, first_fit_family, full_report

# ----------------------------------------------------------------------------------- the sweep

@dataclass(frozen=True, kw_only=True)
class SweepOptions:
    fixed: dict = field(default_factory=dict)
    """`parse_fix` output: allowed values per Layout field."""
    top: int = 10
    """Layouts the caller will show; phase 2 expands structures that could enter this many."""
    engine_top: int = 4
    """Layouts re-simulated with the discrete-event engine (`engine_picks`; 0: analytic only)."""
    expand: int = DEFAULT_EXPAND
    headroom_gib: Optional[float] = None
    """Memory a layout must leave free on every GPU to count as fitting (a margin for what the memory
    model does not see); None: the scenario's (`memory_fit.headroom_gib`: `cluster.memory_headroom_gib`,
    else 5 % of the GPU's memory). Every candidate and every report of the sweep uses this one value."""
    estimate_infeasible: int = 200
    """Estimate the step time of up to this many layouts that do not fit, closest to fitting first
    (for the report's "faster than #1 but do not fit" and the scatter plot)."""


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    name: str
    gpus: int
    gpus_per_node: int
    global_batch: int
    capacity_gib: float
    headroom_gib: float
    """Memory a layout had to leave free to count as fitting."""
    reference: Optional[Evaluation]
    """The scenario's own layout, estimated like the best."""
    zero_twin: Optional[Evaluation]
    """The best layout with ZeRO-1 instead of ZeRO-3 (or ZeRO-3 instead of 0/1/2), estimated like it,
    fitting or not: the Playbook's ZeRO question on the same layout."""
    ranked: list
    """ok Evaluations, best first."""
    infeasible: list
    """oom Evaluations with a memory report, closest to fitting first."""
    counts: dict
    notes: list


def _rank_key(ev: Evaluation) -> tuple:
    return (-ev.tokens_per_s_per_gpu, ev.layout)


def rank_by_best_estimate(estimated: list, refined: list) -> list:
    """One ranking by the tokens/s per GPU each row reports: a layout the engine simulated (`refined`)
    counts with the engine's number, every other with its analytic estimate. An engine row is not put
    above an analytic row that reads faster: the reader sees one column, sorted."""
    engine_rows = {ev.layout: ev for ev in refined}
    return sorted((engine_rows.get(ev.layout, ev) for ev in estimated), key=_rank_key)


def optimistic_time_s(numbers: dict) -> float:
    """What the step could shrink to if another schedule, ZeRO stage or sp setting removed the whole
    bubble, the exposed DP and PP communication and the recomputation (the breakdown sums to the step)."""
    b = numbers["breakdown"]
    return numbers["iteration_time_s"] - sum(b.get(k, 0.0) for k in ("bubble_s", "exposed_dp_s", "exposed_pp_s", "recompute_s"))


ENGINE_ZERO_QUESTIONS = (0, 1, 3)
"""ZeRO stages whose best contender the engine always checks: plain DP, ZeRO-1 and ZeRO-3 (the
Playbook's question). ZeRO-2 is left to the ranking (the engine reduce-scatters it per micro-batch,
hundreds of thousands of events for a 70B model)."""
ENGINE_CONTENDER = 0.7
"""A layout whose analytic throughput is at least this share of the best one's may still win once the
engine has simulated both (the two estimators differ most on how much DP/ZeRO traffic overlaps)."""


def engine_picks(ranked: list, k: int) -> list[Layout]:
    """Up to k layouts for the engine, best analytic first: the best one, then the best contender
    (`ENGINE_CONTENDER`) of each other ZeRO stage in `ENGINE_ZERO_QUESTIONS`, then the best of further distinct shapes
    (tp, pp, zero). Near-twins (sp on/off, CP traded for micro-batch) would spend the engine on one
    question."""
    picks: dict[tuple, Layout] = {}
    shape = lambda l: (l.tp, l.pp, l.zero)  # noqa: E731
    bar = ENGINE_CONTENDER * ranked[0].tokens_per_s_per_gpu if ranked else 0.0
    for ev in ranked:
        z = ev.layout.zero
        first = not picks
        if len(picks) < k and (first or (z in ENGINE_ZERO_QUESTIONS and ev.tokens_per_s_per_gpu >= bar
                                         and not any(p.zero == z for p in picks.values()))):
            picks.setdefault(shape(ev.layout), ev.layout)
    for ev in ranked:
        if len(picks) >= k:
            break
        picks.setdefault(shape(ev.layout), ev.layout)
    return sorted(picks.values(), key=lambda l: next(i for i, ev in enumerate(ranked) if ev.layout == l))


def _engine_available() -> bool:
    try:
        from ..evaluate.engine import simulate_engine  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def sweep_base(path: str, overrides: list[str] = ()) -> tuple[Scenario, dict, Optional[str]]:
    """(validated scenario, the raw mapping candidates are built from, base directory)."""
    from ..scenario import load_scenario  # noqa: PLC0415
    sc = load_scenario(path, overrides)
    base_dir = str(Path(path).resolve().parent)
    raw = apply_overrides(read_yaml(Path(path)), list(overrides), Path(base_dir))
    raw["model"] = model_to_mapping(sc.model)  # resolved once: no preset or config.json read per candidate
    raw["parallel"] = {k: v for k, v in (raw.get("parallel") or {}).items() if k != "pp_layers"}
    return sc, raw, base_dir


def _options(layouts: Iterable[Layout]) -> tuple[Layout, ...]:
    """Preference order inside a group: lightest recompute first, then ZERO_ORDER."""
    return tuple(sorted(layouts, key=lambda l: (RECOMPUTE_ORDER.index(l.recompute), ZERO_ORDER.index(l.zero), l)))


def _structure(lay: Layout) -> tuple:
    """What phase 1 tries once: the degrees and the micro-batch."""
    return (lay.tp, lay.pp, lay.cp, lay.ep, lay.dp, lay.micro_batch)


def _variant(lay: Layout) -> tuple:
    """What phase 2 varies, besides ZeRO and recompute (tried inside each task)."""
    return (lay.pp_schedule, lay.vpp, lay.sp, lay.pp_balance, lay.dp_balance)


def _canonical(group: list[Layout]) -> tuple:
    """Phase 1's variant: the most preferred schedule (`ScheduleSpec.sweep_preference`), the fewest chunks,
    sequence parallel on where it is allowed (the same traffic as TP without it, less memory: KOR22 §4.2.2), speed
    balancing where it is searched (a non-uniform cluster: the even split is phase 2's)."""
    return min({_variant(l) for l in group}, key=lambda v: (schedule_spec(v[0]).sweep_preference, v[1], not v[2], v[3] != "speed",
                                                         v[4] != "speed"))


def run_sweep(sc: Scenario, raw: dict, base_dir: Optional[str], options: SweepOptions, runner=None,
              progress: Callable[[str, int, int], None] = lambda phase, done, total: None) -> SweepResult:
    """Enumerate, prune, estimate and rank (module docstring). `progress(phase, done, total)` is
    called as tasks finish."""
    runner = runner or SerialRunner()
    # one headroom for the fit checks and the full reports: the candidates carry it as a scenario key
    room = headroom_gib(sc) if options.headroom_gib is None else float(options.headroom_gib)
    options = replace(options, headroom_gib=room)
    raw = {**raw, "cluster": {**(raw.get("cluster") or {}), "memory_headroom_gib": room}}
    sc = replace(sc, cluster=replace(sc.cluster, memory_headroom_gib=room))
    cap = float(sc.topology.gpu.memory_gib) - room
    layouts = enumerate_layouts(sc, options.fixed)
    if not layouts:
        fixed = ", ".join(f"{k}={','.join(map(str, v))}" for k, v in options.fixed.items())
        raise ScenarioError("--fix" if fixed else "sweep", f"no valid layout of {sc.gpus} GPUs" + (f" with {fixed}" if fixed else ""),
                            "values the model and cluster allow (tp dividing heads and ffn, degrees multiplying to the GPUs)")
    counts = {"enumerated": len(layouts)}
    notes = [default_space_note(sc, options.fixed)]
    if sc.parallel.pp_layers is not None:
        notes.append("parallel.pp_layers was dropped: every candidate splits its layers evenly")

    def run(phase, fn, tasks):
        done = [0]
        progress(phase, 0, len(tasks))

        def tick(n):
            done[0] += n
            progress(phase, done[0], len(tasks))
        return runner.map(fn, tasks, tick) if tasks else []

    # 2. model-state floor
    floors: dict[tuple, float] = {}
    split = param_split(sc)
    by_structure: dict[tuple, list[Layout]] = {}
    for lay in layouts:
        key = (_structure(lay), lay.zero)
        if key not in floors:
            floors[key] = model_state_floor_gib(sc, lay, split)
        if floors[key] <= cap:
            by_structure.setdefault(_structure(lay), []).append(lay)
    counts["pruned_by_state_floor"] = len(layouts) - sum(len(v) for v in by_structure.values())
    counts["structures"] = len(by_structure)

    def group(st: tuple, variant: tuple) -> tuple[Layout, ...]:
        return _options(l for l in by_structure[st] if _variant(l) == variant)

    # 3. phase 1: per family (same degrees), micro-batches ascending
    families: dict[tuple, list[tuple[Layout, ...]]] = {}
    for st in sorted(by_structure):
        families.setdefault(st[:5], []).append(group(st, _canonical(by_structure[st])))
    # deep pipelines cost the most per check: start them first so no straggler is left at the end
    tasks = [(raw, base_dir, tuple(families[f]), options.headroom_gib) for f in sorted(families, key=lambda f: (-f[1], f))]
    evaluated: dict[Layout, Evaluation] = {}
    for evs in run("phase 1: one layout per structure", first_fit_family, tasks):
        evaluated.update((ev.layout, ev) for ev in evs)
    ok1 = sorted((ev for ev in evaluated.values() if ev.status == "ok"), key=_rank_key)

    # 4. phase 2, for the structures that could still enter the top: schedules and sp, then ZeRO
    expanded: list[tuple] = []
    if ok1:
        bar = ok1[min(len(ok1), max(options.top, 1), 5) - 1].summary["iteration_time_s"]
        hopeful = sorted((optimistic_time_s(ev.summary), ev.layout) for ev in ok1 if optimistic_time_s(ev.summary) < bar)
        expanded = list(dict.fromkeys([_structure(ok1[0].layout)] + [_structure(l) for _, l in hopeful]))[: max(options.expand, 1)]
    counts["structures_expanded"] = len(expanded)
    best_of = {_structure(ev.layout): ev for ev in ok1}
    tasks = [(raw, base_dir, group(st, v), frozenset(), None, options.headroom_gib) for st in expanded
             for v in sorted({_variant(l) for l in by_structure[st]} - {_variant(best_of[st].layout)})]
    for ev in run("phase 2: schedules and sequence parallel", first_fit, tasks):
        evaluated[ev.layout] = ev
        st = _structure(ev.layout)
        if ev.status == "ok" and _rank_key(ev) < _rank_key(best_of[st]):
            best_of[st] = ev
    tasks = []
    for st in expanded:
        b = best_of[st].layout
        zeros = sorted({l.zero for l in by_structure[st] if _variant(l) == _variant(b)} - {b.zero})
        tasks += [(raw, base_dir, _options(l for l in group(st, _variant(b)) if l.zero == z), frozenset(), None, options.headroom_gib)
                  for z in zeros]
    for ev in run("phase 2: ZeRO stages", first_fit, tasks):
        evaluated[ev.layout] = ev
    ok = {lay: ev for lay, ev in evaluated.items() if ev.status == "ok"}
    counts["memory_checks"] = sum(ev.memory_checks for ev in evaluated.values())
    counts["estimated"] = len(ok)

    # 5. the engine for the most promising K, which then lead the ranking; full reports for what is shown
    engine = options.engine_top > 0 and _engine_available()
    if options.engine_top > 0 and not engine:
        notes.append("the discrete-event engine is not available here: all numbers are analytic")
    ranked = sorted(ok.values(), key=_rank_key)
    refined = []
    if engine:
        tasks = [(raw, base_dir, lay, "engine") for lay in engine_picks(ranked, options.engine_top)]
        refined = [replace(ev, status="ok", summary=ok[ev.layout].summary)
                   for ev in run("engine: the most promising layouts", full_report, tasks)]
        # the engine may move its picks below an analytic row; such a row now on top is simulated too, until
        # the leader is the engine's (at most engine_top more): #1 is never an estimate the engine slowed
        for _ in range(options.engine_top if ranked else 0):  # nothing fits: no leader to check
            top = rank_by_best_estimate(ranked, refined)[0]
            if top.estimator == "engine" or any(ev.layout == top.layout for ev in refined):
                break  # the engine's, or an engine pick reported analytic (past run.MAX_ENGINE_WORK)
            refined += [replace(ev, status="ok", summary=ok[ev.layout].summary) for ev in
                        run("engine: a new leader", full_report, [(raw, base_dir, top.layout, "engine")])]
    if refined:  # the engine may have run none: every pick was refused (e.g. --fix leaving nothing valid)
        ratios = [ev.report["iteration_time_s"] / ev.summary["iteration_time_s"] for ev in refined]
        notes.append(f"{len(refined)} layouts were simulated by the engine; every row is ranked by its best estimate, the "
                     f"engine's where it ran, else the analytic one (column 'estimator'; on those {len(refined)} the engine's "
                     f"step time was {min(ratios):.2f}x to {max(ratios):.2f}x the analytic one)")
    counts["simulated_engine"] = len(refined)
    ranked = rank_by_best_estimate(ranked, refined)
    shown = len(ranked) if options.top <= 0 else options.top
    tasks = [(raw, base_dir, ev.layout) for ev in ranked[:shown] if ev.report is None]
    full = {ev.layout: ev for ev in run("full reports", full_report, tasks)}
    ranked = sorted((replace(full[ev.layout], status="ok", summary=ev.summary) if ev.layout in full else ev for ev in ranked),
                    key=_rank_key)

    # the scenario's own layout, estimated the same way as the best
    own = layout_of(sc)
    est = ranked[0].estimator if ranked else "analytic"
    # the scenario's own layer split (the candidates split evenly: sweep_base drops it), which an uneven model needs
    own_raw = raw if sc.parallel.pp_layers is None else {**raw, "parallel": {**raw["parallel"], "pp_layers": list(sc.parallel.pp_layers)}}
    reference = next((ev for ev in ranked if ev.layout == own), None) if own_raw is raw else None
    if reference is None or reference.estimator != est or reference.report is None:
        reference = run("the scenario's own layout", full_report, [(own_raw, base_dir, own, est)])[0]

    zero_twin = None
    if ranked and ranked[0].layout.dp * ranked[0].layout.cp > 1:
        twin = replace(ranked[0].layout, zero=1 if ranked[0].layout.zero == 3 else 3)
        zero_twin = run("the best layout with the other ZeRO", full_report, [(raw, base_dir, twin, est)])[0]
        if zero_twin.status == "invalid":
            zero_twin = None

    infeasible = [ev for ev in evaluated.values() if ev.status == "oom" and ev.memory is not None]
    counts["oom_checked"] = len(infeasible)
    counts["oom_implied"] = sum(1 for ev in evaluated.values() if ev.status == "oom" and ev.implied)
    rejected = Counter(ev.problem for ev in evaluated.values() if ev.status == "invalid")
    counts["invalid"] = sum(rejected.values())
    if rejected:  # candidates the scenario's own keys make invalid: say why, or "no layout fits" would mislead
        problem, n = rejected.most_common(1)[0]
        notes.append(f"{counts['invalid']:,} candidate layouts were rejected by the scenario's validation ({n:,}: {problem})")
    infeasible.sort(key=lambda ev: (ev.overflow_gib, ev.layout))
    if options.estimate_infeasible > 0:
        n = options.estimate_infeasible
        infeasible = run("layouts that do not fit", estimate_anyway, [(raw, base_dir, ev) for ev in infeasible[:n]]) + infeasible[n:]
    return SweepResult(name=sc.name, gpus=sc.gpus, gpus_per_node=sc.gpus_per_node, global_batch=sc.training.global_batch,
                       capacity_gib=float(sc.topology.gpu.memory_gib), headroom_gib=options.headroom_gib,
                       reference=reference, zero_twin=zero_twin, ranked=ranked, infeasible=infeasible, counts=counts, notes=notes)

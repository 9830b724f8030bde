"""One sweep task: a layout turned into a scenario, checked for memory and estimated (analytic, or the
engine for the most promising), as plain data that any worker can run (`sweep_runners.py`)."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Optional


from ..errors import ScenarioError
from ..step_classes import step
from ..cost.costs import CostModel, build_cost_model
from ..plan.flops import mfu_peak_flops, scenario_model_flops
from ..plan.memory import GIB, memory_report, stage_memory
from ..plan.memory_fit import MemoryReport, verdict
from ..frameworks.resolve import drop_options_setting
from ..cost.pp_balance import balanced
from ..scenario import Scenario, scenario_from_mapping, validate_layout
from ..schema import to_mapping
from .space import Layout, RECOMPUTE_ORDER

# ----------------------------------------------------------------------------------- one task

@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """What became of one layout."""
    layout: Layout
    status: str
    """ok (fits; `summary` holds the estimate) | oom (`memory` says by how much) | invalid."""
    summary: Optional[dict] = None
    """iteration_time_s, tokens_per_s_per_gpu, mfu, bubble_fraction, breakdown, estimator."""
    memory: Optional[dict] = None
    """The contract's `memory` object."""
    report: Optional[dict] = None
    """The full `run.simulate` report, for the layouts that are shown and those the engine simulated."""
    parallel: Optional[dict] = None
    """The full validated `parallel` section of the candidate scenario."""
    training: Optional[dict] = None
    problem: str = ""
    memory_checks: int = 0
    """Memory reports this task computed (fit checks)."""
    implied: bool = False
    """oom without a check of its own: a smaller micro-batch of the same layout did not fit."""
    misses: frozenset = frozenset()
    """(zero, recompute index) pairs of the task's options that did not fit."""

    @property
    def numbers(self) -> dict:
        return self.report or self.summary or {}

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.numbers.get("tokens_per_s_per_gpu", 0.0)

    @property
    def estimator(self) -> str:
        return self.numbers.get("estimator", "")

    @property
    def overflow_gib(self) -> float:
        return self.memory["peak_gib"] - self.memory["capacity_gib"] if self.memory else float("inf")

    def to_json(self) -> dict:
        """The `sweep --json` entry: the layout, which estimator gave the numbers it is ranked by, the report."""
        return {"parallel": self.parallel, "training": self.training, "estimator": self.estimator,
                "report": self.report or self.summary}


def selective_modules(lay: Layout, modules: Optional[list]) -> Optional[list]:
    """A candidate's `training.recompute_modules`: the scenario's own (`modules`) where the layout recomputes
    selectively, which is what they qualify; null under none or full recompute, which they do not apply to."""
    return modules if lay.recompute == "selective" else None


def candidate_scenario(raw: dict, base_dir: Optional[str], lay: Layout) -> Scenario:
    """The scenario `raw` with the layout's keys set, through the same validation as any scenario file."""
    cand = copy.deepcopy(raw)
    for section, values in lay.overrides().items():
        cand.setdefault(section, {}).update(values)
    if (raw.get("training") or {}).get("recompute_modules") is not None:
        cand["training"]["recompute_modules"] = selective_modules(lay, raw["training"]["recompute_modules"])
    if "framework" in cand:  # the layout's own keys replace framework options that set them
        cand["framework"] = drop_options_setting(cand["framework"], {f"{section}.{k}" for section, values
                                                                     in lay.overrides().items() for k in values})
    return balanced(scenario_from_mapping(cand, (), Path(base_dir) if base_dir else None))


def sibling_scenario(sc: Scenario, lay: Layout, modules: Optional[list] = None) -> Scenario:
    """`sc` (built by `candidate_scenario`) with the layout's keys set on its frozen sections and the
    same cross-key validation (`validate_layout`): the values come from the schema's own choices, so
    this is `candidate_scenario` without reading the topology YAML again. `modules`: the sweep's scenario's
    `training.recompute_modules` (`selective_modules`), where `sc` may be a layout that dropped them; null: `sc`'s."""
    modules = sc.training.recompute_modules if modules is None else modules
    return balanced(validate_layout(replace(
        sc, parallel=replace(sc.parallel, **lay.overrides()["parallel"],
                             **({"pp_layers": None} if sc.parallel.pp_balance == "speed" else {})),
        training=replace(sc.training, **lay.overrides()["training"], recompute_modules=selective_modules(lay, modules)))))


def _frugality(lay: Layout) -> tuple:
    """Larger = less memory, other keys equal (ZeRO 3 > 2 > 1 > 0; full > selective > none)."""
    return (lay.zero, RECOMPUTE_ORDER.index(lay.recompute))


def _fits(sc: Scenario, headroom_gib: float = 0.0):
    """(fits, MemoryReport or None): `memory.memory_report`, except that stage 0 and the last stage,
    which hold the most (the most micro-batches in flight; the logits), are computed first and a miss
    there ends the check. Fits = the peak leaves `headroom_gib` free (`memory_fit.fits`)."""
    if sc.pool_topologies:  # mixed pools: each stage against its own GPU (memory_report)
        rep = memory_report(sc)
        return rep.fits, rep
    full = float(sc.topology.gpu.memory_gib)
    cap = full - headroom_gib
    order = list(dict.fromkeys((0, sc.parallel.pp - 1, *range(sc.parallel.pp))))
    stages = {}
    for r in order:
        stages[r] = stage_memory(sc, r)
        if stages[r].peak / GIB > cap and r in (0, sc.parallel.pp - 1):
            return False, None
    per_stage = [stages[r] for r in range(sc.parallel.pp)]
    peak = max(s.peak for s in per_stage) / GIB
    rep = MemoryReport(capacity_gib=full, peak_gib=peak, per_stage=per_stage, headroom_gib=headroom_gib,
                       verdict=verdict([(peak, full, headroom_gib)]))
    return rep.fits, rep


@dataclass
class _RememberingCost(CostModel):
    """One scenario's cost model that prices each distinct collective once, for the one estimate it
    serves and then dropped (a rank's DP buckets are hundreds of equal collectives). `comm_time` is a
    pure function of the op's collective, bytes and group, so the numbers are the same."""
    seen: dict = field(default_factory=dict)

    def comm_time(self, op, group) -> float:
        key = (op.collective, op.bytes, op.dim, op.group, group)
        if key not in self.seen:
            self.seen[key] = super().comm_time(op, group)
        return self.seen[key]


def summarize(sc: Scenario, mem, estimator: str = "analytic") -> dict:
    """The ranking numbers of `run.simulate` (same formulas) from the analytic estimate alone, without
    the rest of the report: the sweep's fast path."""
    base = build_cost_model(sc)
    res = step(sc, _RememberingCost(**{f.name: getattr(base, f.name) for f in fields(base) if f.init}), "analytic")[0]
    it = res.iteration_time_s
    mfu_peak = mfu_peak_flops(sc)
    flops = scenario_model_flops(sc)[0]
    return {"iteration_time_s": it, "tokens_per_s_per_gpu": sc.tokens_per_step / it / sc.gpus,
            "mfu": flops / it / sc.gpus / mfu_peak, "bubble_fraction": res.bubble_fraction,
            "breakdown": dict(res.breakdown), "memory": mem.to_json() if mem is not None else None,
            "estimator": estimator}


def _ok(sc: Scenario, lay: Layout, mem, checks: int) -> Evaluation:
    try:
        summary = summarize(sc, mem)
    except ScenarioError as e:  # dp_balance speed: a share the schedule cannot run (cost/pp_balance.dp_shares)
        return Evaluation(layout=lay, status="invalid", problem=str(e))
    return Evaluation(layout=lay, status="ok", summary=summary, memory=summary["memory"],
                      parallel=to_mapping(sc.parallel), training=to_mapping(sc.training), memory_checks=checks)


def first_fit(raw: dict, base_dir: Optional[str], options: tuple[Layout, ...], known_misses: frozenset = frozenset(),
              built: Optional[Scenario] = None, headroom_gib: float = 0.0) -> Evaluation:
    """Estimate the first of `options` (same degrees and schedule; preference order) that fits.

    Memory falls with the ZeRO stage and with heavier recompute (docs/modeling.md §3.1, 3.2), so an option
    cannot fit when one at least as frugal in both did not: it is skipped unchecked. The preferred
    option is checked first, then the most frugal (a miss there ends the task). When none fits, the
    most frugal comes back as oom with its memory report. `known_misses` holds (zero, recompute) pairs
    already known not to fit (at a smaller micro-batch); `Evaluation.misses` returns them with this
    task's own. `built`: a scenario of the same family already built, to derive the candidates from."""
    modules = (raw.get("training") or {}).get("recompute_modules")
    try:
        base = sibling_scenario(built, options[0], modules) if built is not None else candidate_scenario(raw, base_dir, options[0])
    except ScenarioError as e:
        return Evaluation(layout=options[0], status="invalid", problem=str(e))
    frugal = max(options, key=_frugality)
    known: dict[Layout, tuple] = {}

    def check(lay: Layout) -> bool:
        if lay not in known:
            sc = base if lay == options[0] else sibling_scenario(base, lay, modules)
            known[lay] = (sc,) + _fits(sc, headroom_gib)
        return known[lay][1]

    def misses() -> frozenset:
        return known_misses | {_frugality(f) for f, k in known.items() if not k[1]}

    def cannot_fit(lay: Layout) -> bool:
        z, rc = _frugality(lay)
        return any(fz >= z and frc >= rc for fz, frc in misses())

    def first(lay: Layout) -> bool:
        return not cannot_fit(lay) and check(lay)

    if first(options[0]) or first(frugal):
        for lay in options:
            if (lay in known and known[lay][1]) or (lay not in known and first(lay)):
                sc, _, mem = known[lay]
                return replace(_ok(sc, lay, mem, len(known)), misses=misses())
    sc = known[frugal][0] if frugal in known else sibling_scenario(base, frugal, modules)
    return Evaluation(layout=frugal, status="oom", memory=memory_report(sc).to_json(), parallel=to_mapping(sc.parallel),
                      training=to_mapping(sc.training), memory_checks=len(known) + 1, misses=misses())


def first_fit_family(raw: dict, base_dir: Optional[str], structures: tuple[tuple[Layout, ...], ...],
                     headroom_gib: float = 0.0) -> list[Evaluation]:
    """`first_fit` for structures that differ only in micro-batch, smallest first. Activations grow
    with the micro-batch and nothing else changes (docs/modeling.md §3.2, 3.4), so an option that did not fit
    at one micro-batch does not fit at a larger one: the misses carry over, and once nothing fits,
    the larger micro-batches are oom without a check."""
    out: list[Evaluation] = []
    misses: frozenset = frozenset()
    dead = False
    built = None
    for options in structures:
        if dead:
            out.append(Evaluation(layout=max(options, key=_frugality), status="oom", implied=True,
                                  problem="a smaller micro-batch of this layout already exceeds memory"))
            continue
        if built is None:
            try:
                built = candidate_scenario(raw, base_dir, options[0])
            except ScenarioError:
                pass  # first_fit reports it
        ev = first_fit(raw, base_dir, options, misses, built, headroom_gib)
        out.append(ev)
        misses = ev.misses
        dead = ev.status == "oom"
    return out


def full_report(raw: dict, base_dir: Optional[str], lay: Layout, estimator: str = "analytic") -> Evaluation:
    """`run.simulate`'s whole report for one layout (fits or not)."""
    from ..run import MAX_ENGINE_WORK, engine_work, simulate  # noqa: PLC0415
    try:
        sc = candidate_scenario(raw, base_dir, lay)
    except ScenarioError as e:
        return Evaluation(layout=lay, status="invalid", problem=str(e))
    if estimator == "engine" and engine_work(sc, full=False) > MAX_ENGINE_WORK:
        estimator = "analytic"  # too many micro-batch x layer passes for the engine: the report says analytic
    report = simulate(sc, estimator=estimator)
    return Evaluation(layout=lay, status="ok" if report["memory"]["fits"] else "oom", report=report,
                      memory=report["memory"], parallel=to_mapping(sc.parallel), training=to_mapping(sc.training))


def estimate_anyway(raw: dict, base_dir: Optional[str], ev: Evaluation) -> Evaluation:
    """An oom layout's step time as if it fitted (only to place it on the scatter plot)."""
    sc = candidate_scenario(raw, base_dir, ev.layout)
    return replace(ev, summary=summarize(sc, None))

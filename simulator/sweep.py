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

import copy
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import yaml

from .errors import ScenarioError
from .analytic import estimate
from .costs import CostModel, build_cost_model
from .flops import model_flops_per_step
from .memory import GIB, MemoryReport, memory_report, stage_memory, state_bytes_per_param
from .model import model_to_mapping
from .params import layer_params, total_params
from .scenario import SCHEDULES, Scenario, apply_overrides, read_yaml, scenario_from_mapping, validate_layout
from .schema import to_mapping

# ----------------------------------------------------------------------------------- search space

SWEEP_KEYS = {
    "parallel.dp": "dp", "parallel.tp": "tp", "parallel.pp": "pp", "parallel.cp": "cp", "parallel.ep": "ep",
    "parallel.zero": "zero", "parallel.sp": "sp", "parallel.pp_schedule": "pp_schedule", "parallel.vpp": "vpp",
    "training.micro_batch": "micro_batch", "training.recompute": "recompute",
}
"""Keys `--fix` restricts (dotted scenario path -> Layout field); the short name is accepted too."""
RECOMPUTE_ORDER = ("none", "selective", "full")
"""Lightest first: for one layout, a heavier mode never runs faster (it only adds forward work)."""
ZERO_ORDER = (1, 2, 3, 0)
"""Preference when a structure is first tried: ZeRO-1 costs no more communication than plain DP
(reduce-scatter + all-gather vs all-reduce, ZeRO §7.2.1) with a sharded optimizer step; 2 and 3 only
if memory needs them; 0 holds the most memory, so it is tried last."""
SCHEDULE_ORDER = ("1f1b", "zb-h1", "interleaved-1f1b", "zbv", "dualpipev", "afab")
"""Preference for the first try of a structure: 1F1B holds the fewest activations of the schedules
(MODELING.md 3.4) except ZB-V, which ties; phase 2 tries the others."""
DEFAULT_SCHEDULES = ("1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev")
"""afab is left out by default: the same bubble as 1F1B with m instead of p micro-batches of
activations (MODELING.md 6), so it never ranks above 1F1B; `--fix parallel.pp_schedule=afab` adds it."""
MIN_TOKENS_PER_CP_RANK = 1024
"""Default CP degrees keep at least this many tokens per CP rank: below it the ring's K/V exchange
outlasts each attention step (USP CP section). An assumption that bounds the default space;
`--fix parallel.cp=...` overrides it."""
MAX_DEFAULT_MICRO_BATCH_TOKENS = 65536
"""Default micro-batches hold at most this many tokens (16 sequences of 4096): GEMMs are on their
efficiency plateau long before (MODELING.md 7.1) while activations keep growing with it (KOR22);
`--fix training.micro_batch=...` overrides."""
MAX_DEFAULT_TP_NODES = 2
"""Default TP degrees span at most two nodes: TP collectives run once or twice per layer, and beyond a
node they cross the NICs (USP TP section); TP over two nodes stays in the space so the ranking shows
what leaving the node costs. `--fix parallel.tp=...` overrides."""
MAX_DEFAULT_VPP_CHOICES = 3
"""Interleaved 1F1B: the smallest few chunk counts per pp (larger ones only shave a bubble that is
already small and multiply the PP traffic, NAR21 §2.2.2); `--fix parallel.vpp=...` overrides."""
DEFAULT_EXPAND = 12
"""Phase 2 expands at most this many structures (by optimistic time)."""


@dataclass(frozen=True, order=True, slots=True)
class Layout:
    """One candidate: the sweep's keys. Ordering is the deterministic tie-break."""
    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    micro_batch: int
    sp: bool
    zero: int
    pp_schedule: str
    vpp: int
    recompute: str

    def label(self) -> str:
        parts = [f"TP{self.tp}" + ("+SP" if self.sp and self.tp > 1 else ""), f"PP{self.pp}", f"DP{self.dp}"]
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        parts.append(f"ZeRO-{self.zero}")
        parts.append(f"mb{self.micro_batch}")
        if self.pp > 1:
            parts.append(self.pp_schedule + (f"/v{self.vpp}" if self.vpp > 1 else ""))
        if self.recompute != "none":
            parts.append(f"rc-{self.recompute}")
        return " ".join(parts)

    def overrides(self) -> dict:
        """The scenario keys this layout sets."""
        return {"parallel": {"dp": self.dp, "tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep,
                             "zero": self.zero, "sp": self.sp, "pp_schedule": self.pp_schedule, "vpp": self.vpp},
                "training": {"micro_batch": self.micro_batch, "recompute": self.recompute}}


def layout_of(sc: Scenario) -> Layout:
    p, t = sc.parallel, sc.training
    return Layout(tp=p.tp, pp=p.pp, cp=p.cp, ep=p.ep, dp=sc.dp, micro_batch=t.micro_batch, sp=p.sp,
                  zero=p.zero, pp_schedule=p.pp_schedule, vpp=p.vpp, recompute=t.recompute)


def _check_value(key: str, value: Any) -> Any:
    name = SWEEP_KEYS[key]
    if name == "sp":
        if not isinstance(value, bool):
            raise ScenarioError("--fix", f"{key}={value!r} is not a boolean", "true | false")
    elif name == "pp_schedule":
        if value not in SCHEDULES:
            raise ScenarioError("--fix", f"{key}={value!r} is not a schedule", " | ".join(SCHEDULES))
    elif name == "recompute":
        if value not in RECOMPUTE_ORDER:
            raise ScenarioError("--fix", f"{key}={value!r} is not a recompute mode", " | ".join(RECOMPUTE_ORDER))
    elif name == "zero":
        if value not in (0, 1, 2, 3) or isinstance(value, bool):
            raise ScenarioError("--fix", f"{key}={value!r} is not a ZeRO stage", "0 | 1 | 2 | 3")
    elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ScenarioError("--fix", f"{key}={value!r} is not a positive integer", "integers >= 1")
    return value


def parse_fix(texts: Iterable[str]) -> dict[str, tuple]:
    """['parallel.tp=4,8', 'recompute=selective'] -> {'tp': (4, 8), 'recompute': ('selective',)}.
    A key given twice keeps the values both allow."""
    out: dict[str, tuple] = {}
    for text in texts or ():
        key, sep, values = text.partition("=")
        key = key.strip()
        full = key if key in SWEEP_KEYS else next((k for k, v in SWEEP_KEYS.items() if v == key), None)
        if not sep or full is None:
            raise ScenarioError("--fix", f"{text!r} does not name a sweep key", "KEY=V1,V2 with KEY one of " + ", ".join(SWEEP_KEYS))
        parsed = []
        for item in values.split(","):
            try:
                v = yaml.safe_load(item.strip()) if item.strip() else None
            except yaml.YAMLError:
                v = item.strip()
            parsed.append(_check_value(full, v))
        name = SWEEP_KEYS[full]
        out[name] = tuple(v for v in out[name] if v in parsed) if name in out else tuple(dict.fromkeys(parsed))
        if not out[name]:
            raise ScenarioError("--fix", f"{key}: repeated --fix leaves no value")
    return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tp_ok(sc: Scenario, tp: int) -> bool:
    m = sc.model
    ffn = [m.ffn_hidden] + ([m.moe.expert_ffn_hidden] if m.moe else [])
    kv = m.n_kv
    return m.heads % tp == 0 and (kv % tp == 0 or tp % kv == 0) and all(f % tp == 0 for f in ffn)


def _schedules(sc: Scenario, pp: int, m_micro: int, fixed: dict) -> list[tuple[str, int]]:
    """(schedule, vpp) pairs valid for `pp` pipeline ranks and `m_micro` micro-batches."""
    layers = sc.model.layers
    if pp == 1:
        names = fixed.get("pp_schedule", ("1f1b",))
        name = next((s for s in SCHEDULE_ORDER if s in names and s in ("1f1b", "afab", "zb-h1")), None)
        return [(name, 1)] if name and 1 in fixed.get("vpp", (1,)) else []
    out = []
    for s in fixed.get("pp_schedule", DEFAULT_SCHEDULES):
        if s in ("afab", "1f1b", "zb-h1"):
            vpps = [1]
        elif s in ("zbv", "dualpipev"):
            vpps = [2]
        else:
            vpps = [v for v in _divisors(layers // pp) if v >= 2]
            if "vpp" not in fixed:
                vpps = vpps[:MAX_DEFAULT_VPP_CHOICES]
        for v in vpps:
            if "vpp" in fixed and v not in fixed["vpp"]:
                continue
            if layers % (pp * v):
                continue
            if s == "interleaved-1f1b" and m_micro % pp:
                continue
            if s == "dualpipev" and m_micro < 2 * pp:
                continue
            out.append((s, v))
    return out


def enumerate_layouts(sc: Scenario, fixed: dict | None = None) -> list[Layout]:
    """Every layout of `sc`'s model, batch and cluster that passes `validate_layout`'s arithmetic,
    restricted to the `fixed` values, in `Layout` order. Layouts that differ only in keys that have no
    effect are listed once (sp when tp = 1; ZeRO when dp*cp = 1; schedule when pp = 1)."""
    fixed = fixed or {}
    m, t = sc.model, sc.training
    gpus, gb, seq = sc.gpus, t.global_batch, t.seq_len

    def allowed(name, default):
        return [v for v in default if v in fixed[name]] if name in fixed else list(default)

    def extra(name, default):  # fixed values outside the default set are allowed too (validity decides)
        return sorted(set(fixed[name])) if name in fixed else default

    out = []
    tp_default = [t for t in _divisors(gpus) if t <= MAX_DEFAULT_TP_NODES * sc.gpus_per_node]
    mb_max = max(1, MAX_DEFAULT_MICRO_BATCH_TOKENS // seq)
    for tp in extra("tp", tp_default):
        if gpus % tp or not _tp_ok(sc, tp):
            continue
        for pp in extra("pp", _divisors(gpus // tp)):
            if (gpus // tp) % pp or m.layers % pp:
                continue
            cp_default = [c for c in _divisors(gpus // (tp * pp)) if seq // c >= MIN_TOKENS_PER_CP_RANK]
            for cp in extra("cp", cp_default):
                rest = gpus // (tp * pp)
                if rest % cp or (cp > 1 and seq % (2 * cp)):
                    continue
                dp = rest // cp
                if "dp" in fixed and dp not in fixed["dp"]:
                    continue
                ep_default = _divisors(m.moe.experts) if m.moe else [1]
                for ep in extra("ep", ep_default):
                    if ep > 1 and (not m.moe or m.moe.experts % ep or (dp * cp) % ep):
                        continue
                    for sp in allowed("sp", (True, False) if tp > 1 else (False,)):
                        if sp and seq % (tp * cp):
                            continue
                        mbs = [b for b in _divisors(gb // dp) if b <= mb_max] if gb % dp == 0 else []
                        for mb in extra("micro_batch", mbs):
                            if gb % (dp * mb):
                                continue
                            m_micro = gb // (dp * mb)
                            zeros = allowed("zero", (0, 1, 2, 3) if dp * cp > 1 else (0,))
                            if dp * cp == 1 and "zero" in fixed and not zeros:
                                zeros = [min(fixed["zero"])]  # any stage is plain data parallelism of 1
                            for s, v in _schedules(sc, pp, m_micro, fixed):
                                for z in zeros:
                                    for rc in allowed("recompute", RECOMPUTE_ORDER):
                                        out.append(Layout(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, micro_batch=mb, sp=sp,
                                                          zero=z, pp_schedule=s, vpp=v, recompute=rc))
    return sorted(out)


def default_space_note(sc: Scenario, fixed: dict) -> str:
    """What the default space leaves out (the keys not given to --fix), in one line."""
    parts = []
    if "tp" not in fixed:
        parts.append(f"TP <= {MAX_DEFAULT_TP_NODES * sc.gpus_per_node} ({MAX_DEFAULT_TP_NODES} nodes)")
    if "micro_batch" not in fixed:
        parts.append(f"micro-batches <= {max(1, MAX_DEFAULT_MICRO_BATCH_TOKENS // sc.training.seq_len)} sequences")
    if "cp" not in fixed:
        parts.append(f"CP keeping >= {MIN_TOKENS_PER_CP_RANK} tokens per rank")
    if "vpp" not in fixed:
        parts.append(f"the {MAX_DEFAULT_VPP_CHOICES} smallest interleaved chunk counts")
    if "pp_schedule" not in fixed:
        parts.append("no afab (same bubble as 1f1b, more activations)")
    return ("default search space: " + ", ".join(parts) + "; --fix KEY=VALUES widens or narrows it") if parts else "search space as fixed"


# ----------------------------------------------------------------------------------- cheap bound

def param_split(sc: Scenario) -> tuple[float, float]:
    """(dense, routed-expert) parameters of the whole model."""
    experts = float(sum(layer_params(sc.model, i).experts for i in range(sc.model.layers)))
    return total_params(sc.model) - experts, experts


def model_state_floor_gib(sc: Scenario, lay: Layout, split: tuple[float, float]) -> float:
    """A lower bound on the worst stage's weights + grads + optimizer (GiB): the mean over pipeline
    ranks, with dense parameters split by tp and routed experts by ep (replicated norms and K/V heads
    only add to it; MODELING.md 1.4, 3.1). `split` = `param_split(sc)`."""
    t = sc.training
    dense, experts = split
    d = state_bytes_per_param(t.precision, t.grad_bytes, t.optimizer, lay.zero, lay.dp * lay.cp)
    e = state_bytes_per_param(t.precision, t.grad_bytes, t.optimizer, lay.zero, lay.dp * lay.cp * lay.tp // lay.ep)
    return (dense / lay.tp * d.total + experts / lay.ep * e.total) / lay.pp / GIB


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
        """The `sweep --json` entry (CONTRACT.md)."""
        return {"parallel": self.parallel, "training": self.training, "report": self.report or self.summary}


def candidate_scenario(raw: dict, base_dir: Optional[str], lay: Layout) -> Scenario:
    """The scenario `raw` with the layout's keys set, through the same validation as any scenario file."""
    cand = copy.deepcopy(raw)
    for section, values in lay.overrides().items():
        cand.setdefault(section, {}).update(values)
    return scenario_from_mapping(cand, (), Path(base_dir) if base_dir else None)


def sibling_scenario(sc: Scenario, lay: Layout) -> Scenario:
    """`sc` (built by `candidate_scenario`) with the layout's keys set on its frozen sections and the
    same cross-key validation (`validate_layout`): the values come from the schema's own choices, so
    this is `candidate_scenario` without reading the topology YAML again."""
    return validate_layout(replace(
        sc, parallel=replace(sc.parallel, **lay.overrides()["parallel"]),
        training=replace(sc.training, **lay.overrides()["training"])))


def _frugality(lay: Layout) -> tuple:
    """Larger = less memory, other keys equal (ZeRO 3 > 2 > 1 > 0; full > selective > none)."""
    return (lay.zero, RECOMPUTE_ORDER.index(lay.recompute))


def _fits(sc: Scenario, headroom_gib: float = 0.0):
    """(fits, MemoryReport or None): `memory.memory_report`, except that stage 0 and the last stage,
    which hold the most (the most micro-batches in flight; the logits), are computed first and a miss
    there ends the check. Fits = the peak leaves `headroom_gib` free."""
    cap = float(sc.topology.gpu.memory_gib) - headroom_gib
    order = list(dict.fromkeys((0, sc.parallel.pp - 1, *range(sc.parallel.pp))))
    stages = {}
    for r in order:
        stages[r] = stage_memory(sc, r)
        if stages[r].peak / GIB > cap and r in (0, sc.parallel.pp - 1):
            return False, None
    per_stage = [stages[r] for r in range(sc.parallel.pp)]
    peak = max(s.peak for s in per_stage) / GIB
    full = float(sc.topology.gpu.memory_gib)
    return peak <= cap, MemoryReport(capacity_gib=full, peak_gib=peak, fits=peak <= full, per_stage=per_stage)


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
    res = estimate(sc, _RememberingCost(**{f.name: getattr(base, f.name) for f in fields(base) if f.init}))
    it = res.iteration_time_s
    mfu_peak = sc.topology.peak_flops("bf16" if sc.training.precision == "fp8" else sc.training.precision)
    flops = model_flops_per_step(sc.model, sc.training.seq_len, sc.training.global_batch)
    return {"iteration_time_s": it, "tokens_per_s_per_gpu": sc.tokens_per_step / it / sc.gpus,
            "mfu": flops / it / sc.gpus / mfu_peak, "bubble_fraction": res.bubble_fraction,
            "breakdown": dict(res.breakdown), "memory": mem.to_json() if mem is not None else None,
            "estimator": estimator}


def _ok(sc: Scenario, lay: Layout, mem, checks: int) -> Evaluation:
    summary = summarize(sc, mem)
    return Evaluation(layout=lay, status="ok", summary=summary, memory=summary["memory"],
                      parallel=to_mapping(sc.parallel), training=to_mapping(sc.training), memory_checks=checks)


def first_fit(raw: dict, base_dir: Optional[str], options: tuple[Layout, ...], known_misses: frozenset = frozenset(),
              built: Optional[Scenario] = None, headroom_gib: float = 0.0) -> Evaluation:
    """Estimate the first of `options` (same degrees and schedule; preference order) that fits.

    Memory falls with the ZeRO stage and with heavier recompute (MODELING.md 3.1, 3.2), so an option
    cannot fit when one at least as frugal in both did not: it is skipped unchecked. The preferred
    option is checked first, then the most frugal (a miss there ends the task). When none fits, the
    most frugal comes back as oom with its memory report. `known_misses` holds (zero, recompute) pairs
    already known not to fit (at a smaller micro-batch); `Evaluation.misses` returns them with this
    task's own. `built`: a scenario of the same family already built, to derive the candidates from."""
    try:
        base = sibling_scenario(built, options[0]) if built is not None else candidate_scenario(raw, base_dir, options[0])
    except ScenarioError as e:
        return Evaluation(layout=options[0], status="invalid", problem=str(e))
    frugal = max(options, key=_frugality)
    known: dict[Layout, tuple] = {}

    def check(lay: Layout) -> bool:
        if lay not in known:
            sc = base if lay == options[0] else sibling_scenario(base, lay)
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
    sc = known[frugal][0] if frugal in known else sibling_scenario(base, frugal)
    return Evaluation(layout=frugal, status="oom", memory=memory_report(sc).to_json(), parallel=to_mapping(sc.parallel),
                      training=to_mapping(sc.training), memory_checks=len(known) + 1, misses=misses())


def first_fit_family(raw: dict, base_dir: Optional[str], structures: tuple[tuple[Layout, ...], ...],
                     headroom_gib: float = 0.0) -> list[Evaluation]:
    """`first_fit` for structures that differ only in micro-batch, smallest first. Activations grow
    with the micro-batch and nothing else changes (MODELING.md 3.2, 3.4), so an option that did not fit
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
    from .run import simulate  # noqa: PLC0415
    try:
        sc = candidate_scenario(raw, base_dir, lay)
    except ScenarioError as e:
        return Evaluation(layout=lay, status="invalid", problem=str(e))
    report = simulate(sc, estimator=estimator)
    return Evaluation(layout=lay, status="ok" if report["memory"]["fits"] else "oom", report=report,
                      memory=report["memory"], parallel=to_mapping(sc.parallel), training=to_mapping(sc.training))


def estimate_anyway(raw: dict, base_dir: Optional[str], ev: Evaluation) -> Evaluation:
    """An oom layout's step time as if it fitted (only to place it on the scatter plot)."""
    sc = candidate_scenario(raw, base_dir, ev.layout)
    return replace(ev, summary=summarize(sc, None))


# ----------------------------------------------------------------------------------- where tasks run

class SerialRunner:
    """Runs tasks one after another in this process (the reference for the others)."""

    def map(self, fn: Callable, tasks: list[tuple], on_done: Callable[[int], None] = lambda n: None) -> list:
        out = []
        for t in tasks:
            out.append(fn(*t))
            on_done(1)
        return out

    def close(self) -> None:
        pass


class PoolRunner:
    """A local process pool (`concurrent.futures`); results come back in task order."""

    def __init__(self, jobs: int):
        from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415
        self.pool = ProcessPoolExecutor(max_workers=jobs)

    def map(self, fn: Callable, tasks: list[tuple], on_done: Callable[[int], None] = lambda n: None) -> list:
        from concurrent.futures import as_completed  # noqa: PLC0415
        futures = {self.pool.submit(fn, *t): i for i, t in enumerate(tasks)}
        out: list = [None] * len(tasks)
        for f in as_completed(futures):
            out[futures[f]] = f.result()
            on_done(1)
        return out

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)


class RayRunner:
    """The same tasks as remote functions on a Ray cluster (optional dependency, imported here only).
    The simulator package travels with the job (`runtime_env.py_modules`), so workers need no install."""

    def __init__(self, address: str):
        try:
            import ray  # noqa: PLC0415
        except ImportError:
            raise ScenarioError("--ray", "the optional dependency ray is not installed",
                                "pip install ray (the version in pyproject's ray extra), or run without --ray (local process pool)") from None
        self.ray = ray
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                 runtime_env={"py_modules": [str(Path(__file__).resolve().parent)]})

    def map(self, fn: Callable, tasks: list[tuple], on_done: Callable[[int], None] = lambda n: None) -> list:
        remote = self.ray.remote(fn)
        refs = [remote.remote(*t) for t in tasks]
        pending = list(refs)
        while pending:
            done, pending = self.ray.wait(pending, num_returns=1)
            on_done(len(done))
        return self.ray.get(refs)

    def close(self) -> None:
        """Disconnect this driver; the cluster keeps running (it is not ours to stop)."""
        self.ray.shutdown()


def make_runner(jobs: int, ray_address: Optional[str] = None):
    if ray_address:
        return RayRunner(ray_address)
    return PoolRunner(jobs) if jobs > 1 else SerialRunner()


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
    headroom_gib: float = 0.0
    """Memory a layout must leave free on every GPU to count as fitting (a margin for what the memory
    model does not see)."""
    estimate_infeasible: int = 200
    """Estimate the step time of up to this many layouts that do not fit, closest to fitting first
    (for "the fastest layouts that do not fit" and the scatter plot)."""


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
        from .engine import simulate_engine  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def sweep_base(path: str, overrides: list[str] = ()) -> tuple[Scenario, dict, Optional[str]]:
    """(validated scenario, the raw mapping candidates are built from, base directory)."""
    from .scenario import load_scenario  # noqa: PLC0415
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
    return (lay.pp_schedule, lay.vpp, lay.sp)


def _canonical(group: list[Layout]) -> tuple:
    """Phase 1's variant: SCHEDULE_ORDER's first schedule, the fewest chunks, sequence parallel on
    where it is allowed (the same traffic as TP without it, less memory: KOR22 §4.2.2)."""
    return min({_variant(l) for l in group}, key=lambda v: (SCHEDULE_ORDER.index(v[0]), v[1], not v[2]))


def run_sweep(sc: Scenario, raw: dict, base_dir: Optional[str], options: SweepOptions, runner=None,
              progress: Callable[[str, int, int], None] = lambda phase, done, total: None) -> SweepResult:
    """Enumerate, prune, estimate and rank (module docstring). `progress(phase, done, total)` is
    called as tasks finish."""
    runner = runner or SerialRunner()
    cap = float(sc.topology.gpu.memory_gib) - options.headroom_gib
    layouts = enumerate_layouts(sc, options.fixed)
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
        ratios = [ev.report["iteration_time_s"] / ev.summary["iteration_time_s"] for ev in refined]
        notes.append(f"the first {len(refined)} layouts were simulated by the engine and are ranked by it; the rest are "
                     f"analytic estimates (on those {len(refined)} the engine's step time was "
                     f"{min(ratios):.2f}x to {max(ratios):.2f}x the analytic one)")
    counts["simulated_engine"] = len(refined)
    rest = [ev for ev in ranked if ev.layout not in {r.layout for r in refined}]
    ranked = sorted(refined, key=_rank_key) + rest
    shown = len(ranked) if options.top <= 0 else options.top
    tasks = [(raw, base_dir, ev.layout) for ev in ranked[:shown] if ev.report is None]
    full = {ev.layout: ev for ev in run("full reports", full_report, tasks)}
    ranked = [replace(full[ev.layout], status="ok", summary=ev.summary) if ev.layout in full else ev for ev in ranked]

    # the scenario's own layout, estimated the same way as the best
    own = layout_of(sc)
    est = ranked[0].estimator if ranked else "analytic"
    reference = next((ev for ev in ranked if ev.layout == own), None)
    if reference is None or reference.estimator != est or reference.report is None:
        reference = run("the scenario's own layout", full_report, [(raw, base_dir, own, est)])[0]

    zero_twin = None
    if ranked and ranked[0].layout.dp * ranked[0].layout.cp > 1:
        twin = replace(ranked[0].layout, zero=1 if ranked[0].layout.zero == 3 else 3)
        zero_twin = run("the best layout with the other ZeRO", full_report, [(raw, base_dir, twin, est)])[0]
        if zero_twin.status == "invalid":
            zero_twin = None

    infeasible = [ev for ev in evaluated.values() if ev.status == "oom" and ev.memory is not None]
    counts["oom_checked"] = len(infeasible)
    counts["oom_implied"] = sum(1 for ev in evaluated.values() if ev.status == "oom" and ev.implied)
    infeasible.sort(key=lambda ev: (ev.overflow_gib, ev.layout))
    if options.estimate_infeasible > 0:
        n = options.estimate_infeasible
        infeasible = run("layouts that do not fit", estimate_anyway, [(raw, base_dir, ev) for ev in infeasible[:n]]) + infeasible[n:]
    return SweepResult(name=sc.name, gpus=sc.gpus, gpus_per_node=sc.gpus_per_node, global_batch=sc.training.global_batch,
                       capacity_gib=float(sc.topology.gpu.memory_gib), headroom_gib=options.headroom_gib,
                       reference=reference, zero_twin=zero_twin, ranked=ranked, infeasible=infeasible, counts=counts, notes=notes)

"""Accuracy against real training runs: simulate reference runs and say how far off we are.

Sets of reference runs (`Case`s):
- `playbook`: the Ultra-Scale Playbook's 4,104 nanotron runs (`playbook.py` builds each scenario).
  Split: 1B/3B/8B = fit (the only runs constants may be tuned on), 80B/469G = validation (reported,
  never tuned to). Runs with pp > 1 made before nanotron's PP fix are scored in their own group
  ("pre-pp-fix"), not in the headline; `status: Other` runs have no measurement and are only counted.
- `published`: papers that state the whole layout (`validation/references/*.yaml`), each with its source.

Per set, split and group: throughput MAPE (tokens/s/GPU), step-time MAPE, peak-memory error (rank 0,
vs torch's max_memory_allocated), out-of-memory prediction accuracy, the worst case, and for the
playbook the noise floor (spread of repeated runs of one layout) and measured vs modelled busbw.
`validate_cmd.py` is the command line; `validation/playbook_accuracy.py` writes the results tables.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from ..errors import ScenarioError
from ..plan.memory_fit import fits
from .corpus import corpus_runs, feature_pairs, feature_table, framework_table
from .playbook import DEGRADED_P2P_LATENCY_US, NETWORK, PlaybookRun, build_scenario, network_state, read_runs, zero_twins

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_DIR = ROOT / "validation" / "references"
SETS = ("playbook", "published")
SPLITS = ("fit", "validation")
MAIN_GROUP = "main"
PRE_FIX_GROUP = "pre-pp-fix"


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One reference run: how to build its scenario and what was measured."""
    set: str
    id: str
    label: str
    """Model label (playbook: 1B ... 469G) or the reference's short name."""
    split: str
    """fit | validation"""
    group: str = MAIN_GROUP
    """main, or pre-pp-fix (playbook runs with pp > 1 before nanotron's PP fix), reported apart."""
    status: str = "Success"
    """Success | OOM | Other"""
    tokens_per_s_per_gpu: Optional[float] = None
    step_time_s: Optional[float] = None
    model_tflops_per_gpu: Optional[float] = None
    """Published references that give TFLOP/s (and no tokens/s) are scored on this."""
    mem_gib: Optional[float] = None
    """Measured peak allocated memory of rank 0, GiB. Playbook: nanotron resets the peak statistics after
    the backward (`log_memory` in the first five steps) and the benchmark logs step 3, so this is the
    peak of the gradient sync and optimizer step only: model states and optimizer temporaries, no
    activations. It is scored against the model states of stage 0 (`mem_states_gib`)."""
    mem_reserved_gib: Optional[float] = None
    """Measured peak reserved memory (the caching allocator's high-water mark over the whole step,
    activations included): scored against the predicted stage-0 peak (`mem_peak_gib`)."""
    run: Optional[PlaybookRun] = None
    mapping: Optional[dict] = None
    """Scenario mapping for published references."""
    source: str = ""
    framework: str = ""
    """The training framework the run used: the reference's `stack` where the run used a stack clustersim has
    no file for (Llama 3's own, priced with its scenario's framework: "meta (priced as megatron)"), else
    `framework:` of its scenario; the playbook: nanotron. The per-framework tables group by it."""
    release: str = ""
    """Corpus runs: the release of the performance summary (it decides the split, `corpus.CORPUS_SPLIT`)."""

    @property
    def has_throughput(self) -> bool:
        return self.status == "Success" and (self.tokens_per_s_per_gpu or self.model_tflops_per_gpu) is not None

    @property
    def stratum(self) -> tuple:
        kind = {"Success": "ran", "OOM": "oom"}.get(self.status, "other")
        return (self.set, self.label, kind, self.group)


@dataclass(slots=True)
class Outcome:
    case: Case
    predicted: dict = field(default_factory=dict)
    """tokens_per_s_per_gpu, step_time_s, model_tflops_per_gpu, mem_states_gib and mem_peak_gib (stage 0),
    peak_gib (worst stage), fits, estimator."""
    error: str = ""
    """Why no prediction (a layout clustersim cannot express, or a failure)."""

    def rel(self, key: str, measured_key: str | None = None) -> Optional[float]:
        """(predicted - measured) / measured, None where either is missing."""
        meas = getattr(self.case, measured_key or key)
        pred = self.predicted.get(key)
        if meas is None or pred is None or self.error or not meas:
            return None
        return (pred - meas) / meas


# ----------------------------------------------------------------------------------- cases

def playbook_cases(path=None) -> list[Case]:
    out = []
    for r in read_runs(path):
        group = PRE_FIX_GROUP if (r.pp > 1 and not r.after_pp_fix) else MAIN_GROUP
        out.append(Case(set="playbook", id=f"{r.job_id}:{r.run_name}", label=r.label, split=r.split, group=group,
                        status=r.status, tokens_per_s_per_gpu=r.tokens_per_s_per_gpu, step_time_s=r.step_time_s,
                        mem_gib=r.mem_allocated_gib, mem_reserved_gib=r.mem_reserved_gib, run=r, framework="nanotron",
                        source="Ultra-Scale Playbook benchmark CSV (nanotron, 8 x H100 nodes, AWS EFA)"))
    return out


def reference_cases(directory: Path = REFERENCE_DIR) -> list[Case]:
    """Published runs from validation/references/*.yaml (each file: `source` and a list of `runs`)."""
    out = []
    for file in sorted(Path(directory).glob("*.yaml")):
        doc = yaml.safe_load(file.read_text()) or {}
        for i, run in enumerate(doc.get("runs", [])):
            m = run.get("measured", {})
            out.append(Case(set="published", id=f"{file.stem}:{run.get('id', i)}", label=run.get("label", file.stem),
                            split=run.get("split", "validation"), status="Success",
                            tokens_per_s_per_gpu=m.get("tokens_per_s_per_gpu"), step_time_s=m.get("step_time_s"),
                            model_tflops_per_gpu=m.get("model_tflops_per_gpu"), mem_gib=m.get("mem_gib"),
                            framework=_stack_label(run), mapping=run["scenario"], source=f"{doc.get('source', file.stem)}; {run.get('where', '')}".strip("; ")))
    return out


def corpus_cases() -> tuple[list[Case], list[dict]]:
    """The NeMo / Megatron-Bridge corpus (validate/corpus.py): its scored Cases and its skipped rows."""
    runs, skipped = corpus_runs()
    return [Case(**r) for r in runs], skipped


def _stack_label(run: dict) -> str:
    """A reference run's framework for the tables: its `stack` (the software it ran on, where clustersim has no
    framework file for it) with the framework it is priced as, else its scenario's framework."""
    fw = _framework_name(run["scenario"])
    return f"{run['stack']} (priced as {fw})" if run.get("stack") else fw


def _framework_name(mapping: dict) -> str:
    fw = mapping.get("framework", "megatron")  # clustersim's default framework
    return fw if isinstance(fw, str) else fw.get("name", "megatron")


def load_cases(sets=SETS, split: str = "all", csv=None) -> list[Case]:
    cases = []
    if "playbook" in sets:
        cases += playbook_cases(csv)
    if "published" in sets:
        cases += reference_cases() + corpus_cases()[0]
    return [c for c in cases if split == "all" or c.split == split]


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def stratified_sample(cases: list[Case], n: int) -> list[Case]:
    """A deterministic sample of `n` cases, spread over strata (set, model, ran/OOM/other, group) in
    proportion to their size with at least one per stratum (when n allows). Independent of input order:
    within a stratum, cases are taken in the order of the SHA-1 of their id."""
    if n >= len(cases):
        return list(cases)
    strata: dict[tuple, list[Case]] = defaultdict(list)
    for c in cases:
        strata[c.stratum].append(c)
    keys = sorted(strata)
    for k in keys:
        strata[k].sort(key=lambda c: _hash(c.id))
    quota = {k: 0 for k in keys}
    # one per stratum first (the largest strata first if n is smaller than the number of strata)
    for k in sorted(keys, key=lambda k: (-len(strata[k]), k))[:n]:
        quota[k] = 1
    left = n - sum(quota.values())
    # then the rest by largest remainder of the proportional share
    total = len(cases)
    shares = {k: len(strata[k]) * n / total for k in keys}
    while left > 0:
        k = max(keys, key=lambda k: (shares[k] - quota[k] if quota[k] < len(strata[k]) else -math.inf, -keys.index(k)))
        if quota[k] >= len(strata[k]):
            break
        quota[k] += 1
        left -= 1
    return [c for k in keys for c in strata[k][:quota[k]]]


# ----------------------------------------------------------------------------------- predicting

def case_scenario(case: Case, network: str = NETWORK):
    if case.run is not None:
        return build_scenario(case.run, network=network)
    from ..scenario import scenario_from_mapping  # noqa: PLC0415

    return scenario_from_mapping(case.mapping, base_dir=ROOT)


def on_profile(sc, profile: Optional[tuple[str, str]]):
    """`sc` priced from the calibration profile `profile` = (path, the GPU it measured) when `sc`'s topology has that
    GPU (`validate --profile`); unchanged otherwise."""
    if profile is None or sc.topology.gpu.name != profile[1]:
        return sc
    return dataclasses.replace(sc, cluster=dataclasses.replace(sc.cluster, profile=profile[0]))


def predict(case: Case, estimator: str = "analytic", network: str = NETWORK,
            profile: Optional[tuple[str, str]] = None) -> Outcome:
    """Simulate one case; a layout clustersim rejects or a failure is recorded, not raised."""
    from ..run import simulate  # noqa: PLC0415

    try:
        sc = on_profile(case_scenario(case, network), profile)
    except ScenarioError as e:
        return Outcome(case, error=f"not expressible: {e}")
    try:
        rep = simulate(sc, estimator=estimator)
    except Exception as e:  # noqa: BLE001 (one bad run must not stop a 4,000-run validation)
        return Outcome(case, error=f"{type(e).__name__}: {e}")
    mem = rep["memory"]
    s0 = (mem.get("per_stage") or [{}])[0]  # nanotron logs global rank 0: pipeline stage 0
    states = s0.get("optimizer_step_gib") if s0 else None  # model states + the optimizer step's transients
    return Outcome(case, predicted={
        "tokens_per_s_per_gpu": rep["tokens_per_s_per_gpu"], "step_time_s": rep["iteration_time_s"],
        "model_tflops_per_gpu": rep["model_tflops_per_gpu"],
        "mem_states_gib": states, "mem_peak_gib": s0.get("peak_gib", mem["peak_gib"]),
        # did the run run out of memory: the predicted peak against the whole GPU (no launch headroom)
        "peak_gib": mem["peak_gib"], "fits": fits(mem["peak_gib"], mem["capacity_gib"], headroom=0.0),
        "verdict": mem["verdict"],  # the report's, with the default headroom: fits, tight or does not fit
        "estimator": rep.get("estimator", estimator),
        "breakdown": rep.get("breakdown", {}),
        "priced_from_profile": profile is not None and sc.cluster.profile == profile[0],
    })


def evaluate(cases: list[Case], estimator: str = "analytic", progress=None, network: str = NETWORK,
             profile: Optional[tuple[str, str]] = None) -> list[Outcome]:
    out = []
    for i, c in enumerate(cases):
        if c.status == "Other":
            out.append(Outcome(c, error="status Other: no measurement"))
            continue
        out.append(predict(c, estimator, network, profile))
        if progress and ((i + 1) % 20 == 0 or i + 1 == len(cases)):
            progress(i + 1, len(cases))
    return out


# ----------------------------------------------------------------------------------- scoring

def _mape(errs: list[float]) -> Optional[float]:
    return 100 * sum(abs(e) for e in errs) / len(errs) if errs else None


def pct(x: Optional[float]) -> Optional[float]:
    return None if x is None else 100 * x


def score(outcomes: list[Outcome]) -> dict:
    """Metrics for one set/split/group of outcomes."""
    # tokens/s/GPU where measured; references that only publish TFLOP/s per GPU are scored on that
    thr = [(o, o.rel("tokens_per_s_per_gpu") if o.case.tokens_per_s_per_gpu is not None else o.rel("model_tflops_per_gpu"))
           for o in outcomes if o.case.has_throughput]
    thr = [(o, e) for o, e in thr if e is not None]
    step = [e for o in outcomes if o.case.has_throughput for e in [o.rel("step_time_s")] if e is not None]
    mem = [(o, o.rel("mem_states_gib", "mem_gib")) for o in outcomes if o.case.status == "Success"]
    mem = [(o, e) for o, e in mem if e is not None]
    peak = [e for o in outcomes if o.case.status == "Success" for e in [o.rel("mem_peak_gib", "mem_reserved_gib")]
            if e is not None]
    oom = [o for o in outcomes if o.case.status in ("Success", "OOM") and not o.error]
    right = [o for o in oom if o.predicted["fits"] == (o.case.status == "Success")]
    worst = max(thr, key=lambda t: abs(t[1]), default=None)
    worst_mem = max(mem, key=lambda t: abs(t[1]), default=None)
    return {
        "runs": len(outcomes),
        "throughput": {
            "n": len(thr), "mape_pct": _mape([e for _, e in thr]),
            "median_ape_pct": pct(statistics.median([abs(e) for _, e in thr])) if thr else None,
            "bias_pct": pct(statistics.median([e for _, e in thr])) if thr else None,
            "within_10pct": sum(abs(e) <= 0.10 for _, e in thr), "within_25pct": sum(abs(e) <= 0.25 for _, e in thr),
            "worst": {"id": worst[0].case.id, "error_pct": 100 * worst[1]} if worst else None,
        },
        "step_time": {"n": len(step), "mape_pct": _mape(step)},
        "memory": {
            "n": len(mem), "mape_pct": _mape([e for _, e in mem]),
            "bias_pct": pct(statistics.median([e for _, e in mem])) if mem else None,
            "worst": {"id": worst_mem[0].case.id, "error_pct": 100 * worst_mem[1]} if worst_mem else None,
        },
        "memory_peak": {"n": len(peak), "mape_pct": _mape(peak),
                        "bias_pct": pct(statistics.median(peak)) if peak else None},
        "oom": {
            "n": len(oom), "correct": len(right), "accuracy_pct": 100 * len(right) / len(oom) if oom else None,
            "predicted_fits_but_oom": sum(o.predicted["fits"] and o.case.status == "OOM" for o in oom),
            "predicted_oom_but_ran": sum((not o.predicted["fits"]) and o.case.status == "Success" for o in oom),
            # runs whose report says tight (under the GPU's memory, inside the default headroom): ran / ran out
            "tight_but_ran": sum(o.predicted.get("verdict") == "tight" and o.case.status == "Success" for o in oom),
            "tight_and_oom": sum(o.predicted.get("verdict") == "tight" and o.case.status == "OOM" for o in oom),
        },
        "excluded": {
            "status_other": sum(o.case.status == "Other" for o in outcomes),
            "not_expressible": sum(o.error.startswith("not expressible") for o in outcomes),
            "failed": sum(bool(o.error) and not o.error.startswith(("not expressible", "status Other")) for o in outcomes),
        },
    }


def summarize(outcomes: list[Outcome]) -> list[dict]:
    """One row per (set, split, group), in a stable order."""
    by = defaultdict(list)
    for o in outcomes:
        by[(o.case.set, o.case.split, o.case.group)].append(o)
    order = {s: i for i, s in enumerate(SETS)}
    rows = []
    for key in sorted(by, key=lambda k: (order.get(k[0], 9), SPLITS.index(k[1]) if k[1] in SPLITS else 9, k[2] != MAIN_GROUP, k[2])):
        set_, split, group = key
        est = sorted({o.predicted.get("estimator") for o in by[key] if o.predicted})
        rows.append({"set": set_, "split": split, "group": group, "estimator": ",".join(e for e in est if e) or None,
                     "labels": sorted({o.case.label for o in by[key]}), **score(by[key])})
    return rows


def _spreads(groups) -> tuple[list[float], list[float]]:
    """Per group of >= 2 runs: (max - min) / median; per run: |x - group mean| / group mean."""
    spreads, devs = [], []
    for v in groups:
        x = [c.tokens_per_s_per_gpu for c in v]
        mean = sum(x) / len(x)
        spreads.append((max(x) - min(x)) / statistics.median(x))
        devs += [abs(xi - mean) / mean for xi in x]
    return spreads, devs


def noise_floor(cases: list[Case]) -> dict:
    """How reproducible the measurements are, from the playbook's successful runs.

    Exact repeats: the same model, nodes, dp/tp/pp, ZeRO, micro-batch and accumulation (and, for
    pp > 1, the same side of the PP fix). `mape_pct` is what a perfect predictor of the group mean
    would score on them. The CSV has one (8B, dp2 tp8 pp1: 3,449 and 737 tokens/s/GPU); its repeated
    run names are otherwise different layouts (stale names: the dp/tp/pp columns and nanotron's
    `Local Params` agree with each other, not with the name), so exact repeats cannot give the floor.
    ZeRO twins: layouts that differ only in ZeRO-0 vs ZeRO-1 on one node with pp = 1, where ZeRO changes
    little (the all-reduce becomes a reduce-scatter plus an all-gather over NVLink). Their spread bounds
    the noise floor from above (each number is one timed step: the benchmark logs step 3). Multi-node
    twins (the same, on 2-64 nodes, both jobs in the same network state, `network_state`) add the
    cross-node DP traffic ZeRO reshapes (an all-reduce, or a reduce-scatter plus an all-gather of the same
    bytes), so their spread is a looser bound, but it is the one for the layouts the error is largest on."""
    timed = [c for c in cases if c.run is not None and c.status == "Success" and c.tokens_per_s_per_gpu]
    groups = defaultdict(list)
    for c in timed:
        groups[c.run.layout_key].append(c)
    rep = [v for v in groups.values() if len(v) > 1]
    tw, mt = zero_twins([c.run for c in timed])
    mt_spreads, mt_devs = _spreads(mt)
    spreads, devs = _spreads(rep)
    tw_spreads, tw_devs = _spreads(tw)
    return {
        "layouts_repeated": len(rep), "runs": sum(len(v) for v in rep),
        "median_relative_spread_pct": pct(statistics.median(spreads)) if spreads else None,
        "mape_pct": _mape(devs),
        "zero_twins": {"layouts": len(tw), "runs": sum(len(v) for v in tw),
                       "median_relative_spread_pct": pct(statistics.median(tw_spreads)) if tw_spreads else None,
                       "max_relative_spread_pct": pct(max(tw_spreads)) if tw_spreads else None,
                       "mape_pct": _mape(tw_devs)},
        "multinode_zero_twins": {"layouts": len(mt), "runs": sum(len(v) for v in mt),
                                 "median_relative_spread_pct": pct(statistics.median(mt_spreads)) if mt_spreads else None,
                                 "p90_relative_spread_pct": pct(sorted(mt_spreads)[(9 * len(mt_spreads)) // 10]) if mt_spreads else None,
                                 "max_relative_spread_pct": pct(max(mt_spreads)) if mt_spreads else None,
                                 "mape_pct": _mape(mt_devs)},
    }


SLOW_SEND_FRACTION = 0.6
"""A pipeline run whose measured step exceeds the predicted one by at least this share of the degraded-node
send latency per blocking send shows the slow-send signature (`slow_sends`)."""


def pipeline_sends(run: PlaybookRun) -> int:
    """Blocking sends on the critical 1F1B stage per step (`analytic.pipeline_time`): 4 per micro-batch after
    the first on an interior stage (2 with pp = 2), and 2 per boundary on the first traversal."""
    return (4 if run.pp > 2 else 2) * (run.grad_accum - 1) + 2 * (run.pp - 1)


def slow_sends(outcomes: list[Outcome]) -> dict:
    """A diagnostic, not a filter: per split, the playbook pipeline runs (main group) whose measured minus
    predicted step time, spread over their blocking sends, is at least SLOW_SEND_FRACTION of the degraded
    node's per-send latency (the jobs with a degraded node are priced with it, so they do not show it;
    the ones that still do had nothing in their probes to flag them). Reports how many, the points of
    the split's throughput MAPE they carry, and the MAPE of the other runs."""
    floor = SLOW_SEND_FRACTION * DEGRADED_P2P_LATENCY_US * 1e-6
    out = {}
    for split in SPLITS:
        scored = [(o, o.rel("tokens_per_s_per_gpu")) for o in outcomes
                  if o.case.set == "playbook" and o.case.split == split and o.case.group == MAIN_GROUP
                  and o.case.has_throughput and o.case.tokens_per_s_per_gpu is not None]
        scored = [(o, e) for o, e in scored if e is not None]
        if not scored:
            continue
        slow = [(o, e) for o, e in scored if o.case.run.pp > 1 and o.case.step_time_s and o.predicted.get("step_time_s")
                and (o.case.step_time_s - o.predicted["step_time_s"]) / pipeline_sends(o.case.run) >= floor]
        ids = {id(o) for o, _ in slow}
        rest = [e for o, e in scored if id(o) not in ids]
        out[split] = {"runs": len(slow), "of": len(scored), "ids": sorted(o.case.id for o, _ in slow),
                      "mape_points": 100 * sum(abs(e) for _, e in slow) / len(scored), "rest_mape_pct": _mape(rest)}
    return out


def busbw_check(cases: list[Case]) -> list[dict]:
    """The playbook's measured busbw (1 GiB fp32 all-reduce / all-gather / reduce-scatter over all GPUs of
    the job and over the 8 GPUs of one node, nanotron `measure_bandwidth`), medians per node count and
    network state, against the collectives model's time for the same collective on the topology YAML (the
    raw collective: none of the software stack's per-collective adders)."""
    from ..cost.collectives import collective_time  # noqa: PLC0415
    from ..plan.layout import GroupShape  # noqa: PLC0415

    by_nodes = defaultdict(list)
    for c in cases:
        if c.run is not None and c.run.busbw:
            by_nodes[(c.run.nodes, network_state(c.run))].append(c.run)
    from ..cost.nccl_algorithms import busbw_factor  # noqa: PLC0415
    from ..cost.measured_network import PROBE_BYTES  # noqa: PLC0415

    rows = []
    for nodes, state in sorted(by_nodes):
        runs = by_nodes[(nodes, state)]
        try:
            sc = build_scenario(runs[0], network="spec")
        except ScenarioError:
            continue
        g = sc.gpus_per_node
        for scope, n_nodes in (("intranode8", 1), ("alljob", nodes)):
            n = g * n_nodes
            group = GroupShape(dim="dp", size=n, nodes=n_nodes, per_node=g, ranks=tuple(range(n)))
            for coll in ("all_reduce", "all_gather", "reduce_scatter"):
                vals = [r.busbw[f"{coll}_{scope}"] for r in runs if f"{coll}_{scope}" in r.busbw]
                if not vals:
                    continue
                try:
                    t = collective_time(sc.topology, coll, float(PROBE_BYTES), group)
                except Exception:  # noqa: BLE001 (a diagnostic table must not stop the validation)
                    t = 0.0
                rows.append({"nodes": nodes, "state": state, "scope": scope, "gpus": n, "collective": coll,
                             "runs": len(vals), "measured_busbw_gbps": statistics.median(vals),
                             "modelled_busbw_gbps": busbw_factor(coll, n) * PROBE_BYTES / t / 1e9 if t > 0 else None})
    return rows


def validate(sets=SETS, split: str = "all", sample: int | None = None, estimator: str = "analytic", csv=None,
             progress=None, network: str = NETWORK, profile: Optional[str] = None) -> dict:
    """Everything the command prints: per-set summaries, noise floor, busbw check, per-run outcomes. `profile`: a
    calibration profile that prices every run on its GPU (the others keep the published kernel data)."""
    t0 = time.perf_counter()
    cases = load_cases(sets, split, csv)
    population = len(cases)
    chosen = stratified_sample(cases, sample) if sample else cases
    measured = None
    if profile is not None:
        from ..cost.profile_load import load_profile  # noqa: PLC0415

        prof = load_profile(profile)
        if prof.spec is None:
            raise ScenarioError("--profile", f"{profile} names no GPU (no `spec`): it prices no reference run",
                                "a profile `python -m calibrate --gpu N` wrote")
        measured = (str(Path(profile).resolve()), prof.spec.gpu_name)
    outcomes = evaluate(chosen, estimator, progress, network, measured)
    playbook = [c for c in cases if c.set == "playbook"]
    return {
        "estimator": estimator,
        "network": network,
        "cases": {"population": population, "evaluated": len(chosen), "sample": sample},
        "summary": summarize(outcomes),
        "noise_floor": noise_floor(playbook) if playbook else None,
        "busbw": busbw_check(playbook) if playbook else [],
        "slow_sends": slow_sends(outcomes),
        "frameworks": framework_table(outcomes),
        "features": feature_table(outcomes, case_scenario) if "published" in sets else [],
        "feature_pairs": feature_pairs(outcomes) if "published" in sets else [],
        "corpus_skipped": corpus_cases()[1] if "published" in sets else [],
        "outcomes": outcomes,
        "profile": None if measured is None else {"path": measured[0], "gpu": measured[1], "runs": sum(
            1 for o in outcomes if o.predicted and o.predicted.get("priced_from_profile"))},
        "wall_s": time.perf_counter() - t0,
    }

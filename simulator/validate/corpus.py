"""The published development corpus (issue 38, item 4): NVIDIA's NeMo / Megatron-Bridge performance summaries
transcribed under validation/references/corpus/, as cases of the `published` set, with their fit/validation split.

Split (fixed before any result was seen, never by result; validation/references/corpus/README.md says the same):
by release, older fit, newer validate. NeMo Megatron 22.08 (DGX A100), 24.07 and 25.09 are the fit split (constants may be tuned on them);
NeMo 25.11, 26.02, 26.04 and 26.06 are the validation split (reported, never tuned to). The papers under
validation/references/*.yaml stay validation (their own `split`, default validation).

A corpus row is scored only where it has a `scenario` (this corpus's reading of the row with the recipe's
switches, each cited in the row's `recipe`) and no `skip`. Every other row is listed as skipped with the reason: a
system clustersim has no topology for, a precision it cannot express (FP8 in 128-value blocks), a model without a preset, or
the row's own `skip` (what its recipe does that clustersim cannot say; a row may keep its scenario beside it, so the
transcription stays checked and can be scored again once clustersim prices what the skip names).

Features (`case_features`) are read from the built scenario: precision, context parallel, the pipeline
schedule, TP communication overlap, recomputation. `feature_pairs` finds published cases that are the same run
but for one feature (the same mapping apart from that feature's keys) and compares the ratio of their
measurements with the ratio of their predictions.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Optional

import yaml

CORPUS_SPLIT = {"NeMo Megatron 22.08": "fit", "NeMo 24.07": "fit", "NeMo 25.09 (Megatron-Bridge)": "fit",
                "NeMo 25.11 (Megatron-Bridge)": "validation", "NeMo 26.02 (Megatron-Bridge)": "validation",
                "NeMo 26.04 (Megatron-Bridge)": "validation", "NeMo 26.06 (Megatron-Bridge)": "validation"}
"""Release -> split: the older releases fit, the four newer validate (corpus README); NeMo 26.04 and NeMo 26.06 were
each added as validation before any of their rows was scored. NeMo Megatron 22.08 (the
launcher README's DGX A100 tables) was added as fit before any of its rows was scored: the A100's only fit data."""

SYSTEM_TOPOLOGY = {"DGX-H100": "dgx-h100", "DGX-GB200": "gb200-nvl72", "DGX-GB300": "gb300-nvl72", "DGX-B200": "dgx-b200",
                   "DGX-B300": "dgx-b300", "DGX-A100": "dgx-a100"}
"""Systems of the performance tables that clustersim has a topology for (topologies/)."""

EXPRESSIBLE_PRECISIONS = {"BF16": "bf16", "FP8": "fp8", "FP8-CS": "fp8", "FP8-MX": "fp8", "MXFP8": "fp8", "NVFP4": "fp4"}
"""Table precisions clustersim prices, as `training.precision`; the recipe is the row's `framework.fp8_recipe`
(FP8-CS: tensorwise current scaling; FP8-MX, as 25.09 and 25.11 print it, and MXFP8, as 26.02 does: mxfp8); NVFP4 is
`training.precision: fp4` (Transformer Engine's NVFP4BlockScaling, Megatron's `fp4_recipe`)."""

PRESET_LABELS = {"LLAMA3_8B", "LLAMA3_70B", "LLAMA3.1_405B", "LLAMA3-8B", "LLAMA3-70B", "GPT3-175B", "DeepSeekV3",
                 "Qwen3_30B_a3B", "Qwen3_235B_a22B", "Nemotron-8B", "Nemotron-22B", "Nemotron-340B"}
"""Corpus labels of models clustersim has a preset for (simulator/presets/)."""

FEATURES = ("precision", "cp", "schedule", "tp_overlap", "recompute", "offload")

FP8_OPTIONS = ("framework.float8", "framework.float8_recipe", "framework.float8_fsdp_all_gather",
               "framework.float8_precompute_scale")
"""torchtitan's float8 switches: they come with `training.precision` (float8 sets it) or with one another."""
PAIR_KEYS = (
    ("same recipe, another release", (), ("framework.sdpa_backend", "framework.op_sac_saves_cudnn", "cluster.cudnn_version")),
    ("precision", ("training.precision",), ("framework.tp_comm_overlap", "parallel.overlap_tp", "framework.fp8_recipe",
                                            "framework.fp8_param_gather", *FP8_OPTIONS)),
    ("fp8 recipe", ("framework.float8_recipe", "framework.fp8_recipe"), FP8_OPTIONS),
    ("fp8 all-gather", ("framework.float8_fsdp_all_gather",), FP8_OPTIONS),
    ("recompute", ("training.recompute", "training.recompute_layers"), ("parallel.sp",)),
    ("tp_overlap", ("framework.tp_comm_overlap", "parallel.overlap_tp"), ()),
    ("compile", ("framework.compile",), ()),
    ("attention kernel", ("framework.sdpa_backend",), ()),
    ("ep_overlap", ("framework.overlap_moe_expert_parallel_comm", "parallel.ep_overlap"), ()),
    ("schedule", ("parallel.pp_schedule", "parallel.vpp", "parallel.pp_layers"), ()),
    ("cp", ("parallel.cp",), ("parallel.dp", "training.seq_len", "training.global_batch", "cluster.nodes", "parallel.cp_comm")),
    ("scale", ("parallel.dp", "cluster.nodes"), ("training.global_batch", "training.micro_batch")),
)
"""Pair kinds: (kind, the keys that define it, keys that may change with it). A pair is of the first kind one of
whose defining keys differs and whose keys cover the whole difference (`name` never counts); 'same recipe,
another release' (nothing differs but what the release itself changed: torchtitan's SDPA backend, the cuDNN) is the
measurements' spread across releases, paired across source files only (every other kind within one file, so
'attention kernel' pairs one benchmark's SDPA back ends). `parallel.cp_comm` (ring or all-gather attention) only means something
where cp > 1, so a cp pair may name it on one side only."""


CORPUS_DIR = Path(__file__).resolve().parents[2] / "validation" / "references" / "corpus"


def skip_reason(run: dict) -> str:
    """Why a corpus row is not scored (it has a `skip`, or no scenario)."""
    lay = run["layout"]
    if run.get("skip"):
        return run["skip"]  # the row's own reason: what its recipe does that clustersim cannot say
    if lay["system"] not in SYSTEM_TOPOLOGY:
        return f"no topology for {lay['system']}"
    if lay["precision"] not in EXPRESSIBLE_PRECISIONS:
        return (f"precision {lay['precision']} not expressible (clustersim: bf16, fp8 per tensor or in MXFP8 blocks, "
                "NVFP4)")
    if run["label"] not in PRESET_LABELS:
        return f"no clustersim model for {run['label']}"
    return "no scenario transcribed yet (system, precision and model are expressible)"


def with_release_cudnn(scenario: dict, doc: dict) -> dict:
    """A row's scenario with its release's cuDNN (the file's `cudnn_version`: the container's cuDNN, as the
    release's software versions list it; `cudnn_source` says where) as `cluster.cudnn_version`, unless the row
    names one itself or the file names none (cost/cudnn_release.py then prices the newest published tables)."""
    release = doc.get("cudnn_version")
    cluster = scenario.get("cluster") or {}
    if release is None or "cudnn_version" in cluster:
        return scenario
    return {**scenario, "cluster": {**cluster, "cudnn_version": release}}


def corpus_runs(directory: Path = CORPUS_DIR) -> tuple[list[dict], list[dict]]:
    """(cases, skipped): the `Case` fields of each corpus row with a scenario (accuracy.corpus_cases makes the
    Cases); {id, system, precision, reason} per other row."""
    cases, skipped = [], []
    for file in sorted(Path(directory).glob("*.yaml")):
        doc = yaml.safe_load(file.read_text())
        split = CORPUS_SPLIT.get(doc["release"])
        if split is None:
            raise ValueError(f"{file.name}: release {doc['release']!r} has no split in CORPUS_SPLIT")
        for run in doc["runs"]:
            cid = f"corpus/{file.stem}:{run['id']}"
            if "scenario" not in run or run.get("skip"):
                skipped.append({"id": f"{file.stem}:{run['id']}", "system": run["layout"]["system"], "precision": run["layout"]["precision"],
                                "reason": skip_reason(run)})
                continue
            m = run["measured"]
            fw = run["scenario"].get("framework", "megatron")
            fw = fw if isinstance(fw, str) else fw["name"]
            cases.append(dict(set="published", id=cid, label=run["label"], split=split, release=doc["release"],
                              framework=f"{doc['stack']} (priced as {fw})" if doc.get("stack") else fw,
                              tokens_per_s_per_gpu=m["tokens_per_s_per_gpu"], model_tflops_per_gpu=m.get("model_tflops_per_gpu"),
                              mapping=with_release_cudnn(run["scenario"], doc), source=f"{doc['source']}; {run['where']}"))
    return cases, skipped


# ----------------------------------------------------------------------------------- features

def case_features(sc) -> dict[str, str]:
    """The features a case is reported under, from its built scenario."""
    t, p = sc.training, sc.parallel
    return {"precision": t.precision, "cp": "cp > 1" if p.cp > 1 else "cp = 1",
            "schedule": p.pp_schedule if p.pp > 1 else "no pp",
            "tp_overlap": "on" if (sc.overlap_tp and p.tp > 1) else ("off" if p.tp > 1 else "tp = 1"),
            "recompute": t.recompute if t.recompute_layers is None else "full (block)",
            "offload": "activations offloaded" if t.offload_layers else "none"}


def _err(o) -> Optional[float]:
    c = o.case
    return o.rel("tokens_per_s_per_gpu") if c.tokens_per_s_per_gpu is not None else o.rel("model_tflops_per_gpu")


def _stats(errs: list[float]) -> dict:
    return {"n": len(errs), "mape_pct": 100 * sum(abs(e) for e in errs) / len(errs) if errs else None,
            "median_ape_pct": 100 * statistics.median([abs(e) for e in errs]) if errs else None,
            "bias_pct": 100 * statistics.median(errs) if errs else None}


def framework_table(outcomes: list) -> list[dict]:
    """Per framework and split: throughput error (playbook = nanotron, main group only)."""
    by = defaultdict(list)
    for o in outcomes:
        c = o.case
        if c.set == "playbook" and c.group != "main":
            continue
        e = _err(o) if c.has_throughput else None
        if e is not None:
            by[(c.framework or ("nanotron" if c.set == "playbook" else "megatron"), c.split)].append(e)
    return [{"framework": fw, "split": split, **_stats(v)} for (fw, split), v in sorted(by.items())]


def feature_table(outcomes: list, scenario_of) -> list[dict]:
    """Per framework, feature, value and split: throughput error of the published cases (`scenario_of(case)`
    builds a case's scenario)."""
    by = defaultdict(list)
    for o in outcomes:
        c = o.case
        e = _err(o) if (c.set == "published" and c.has_throughput) else None
        if e is None:
            continue
        feats = case_features(scenario_of(c))
        for f in FEATURES:
            by[(c.framework or "megatron", f, feats[f], c.split)].append(e)
    return [{"framework": fw, "feature": f, "value": v, "split": s, **_stats(errs)}
            for (fw, f, v, s), errs in sorted(by.items(), key=lambda kv: (kv[0][0], FEATURES.index(kv[0][1]), kv[0][2], kv[0][3]))]


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        elif key != "name":
            out[key] = tuple(v) if isinstance(v, list) else v
    return out


def _pair_kind(a: dict, b: dict, same_file: bool) -> Optional[str]:
    """The pair's kind: 'same recipe, another release' across source files only, every other kind within one."""
    keys = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    for kind, defining, also in PAIR_KEYS:
        if (kind == PAIR_KEYS[0][0]) == same_file:
            continue
        if keys <= set(defining) | set(also) and (not defining or keys & set(defining)):
            return kind
    return None


def _meas_pred(o) -> tuple[float, float]:
    key = "tokens_per_s_per_gpu" if o.case.tokens_per_s_per_gpu is not None else "model_tflops_per_gpu"
    return getattr(o.case, key), o.predicted[key]


def feature_pairs(outcomes: list) -> list[dict]:
    """Published cases that differ in one feature only: measured ratio b/a, predicted ratio, and the error of
    the predicted ratio ((pred / meas) - 1). Cases are paired within a source file (one paper, one release) or,
    for 'same recipe, another release', across releases."""
    scored = [o for o in outcomes if o.case.set == "published" and o.case.has_throughput and not o.error and _err(o) is not None]
    flat = {o.case.id: _flat(o.case.mapping) for o in scored}
    rows = []
    for i, a in enumerate(scored):
        for b in scored[i + 1:]:
            same_file = a.case.id.rsplit(":", 1)[0] == b.case.id.rsplit(":", 1)[0]
            kind = _pair_kind(flat[a.case.id], flat[b.case.id], same_file)
            if kind is None:
                continue
            if (a.case.tokens_per_s_per_gpu is None) != (b.case.tokens_per_s_per_gpu is None):
                continue
            (ma, pa), (mb, pb) = _meas_pred(a), _meas_pred(b)
            diff = sorted(k for k in set(flat[a.case.id]) | set(flat[b.case.id]) if flat[a.case.id].get(k) != flat[b.case.id].get(k))
            rows.append({"kind": kind, "a": a.case.id, "b": b.case.id, "split": b.case.split,
                         "differs": {k: [flat[a.case.id].get(k), flat[b.case.id].get(k)] for k in diff},
                         "measured_ratio": mb / ma, "predicted_ratio": pb / pa,
                         "ratio_error_pct": 100 * ((pb / pa) / (mb / ma) - 1)})
    return rows

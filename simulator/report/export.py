"""A layout as a training framework's launch config: torchtitan TOML, Megatron-LM flags, nanotron YAML.

Each writer takes a validated `Scenario` and names the same degrees (docs/ecosystem.md §2.3 maps the
names). A framework that cannot run a layout says why (`unsupported`); `export_best` then takes the
best-ranked layout it can run. Approximations are stated as comments in the file and as warnings.
"""
from __future__ import annotations

import json
import shlex

import yaml

from ..errors import ScenarioError
from ..scenario import Scenario
from ..plan.schedules import DEFAULT_SCHEDULE, SCHEDULES, join_names, schedule_spec

FRAMEWORKS = ("torchtitan", "megatron", "nanotron")
TORCHTITAN_FLAVORS = {"llama3-8b": "8B", "llama3-70b": "70B", "llama3-405b": "405B"}
"""torchtitan's llama3 flavors for clustersim's presets of the same models."""
MEGATRON_FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}
"""Megatron-FSDP `--data-parallel-sharding-strategy` for ZeRO-2 and ZeRO-3 (docs/ecosystem.md §2.3)."""
DTYPE = {"bf16": "bfloat16", "fp32": "float32", "fp8": "bfloat16"}


def framework_schedules(framework: str) -> list[str]:
    """The framework's names of the schedules it runs (`ScheduleSpec.frameworks`), in registry order."""
    return [n for n in (spec.framework_name(framework) for spec in SCHEDULES.values()) if n]


def unsupported(sc: Scenario, framework: str) -> list[str]:
    """Why `framework` cannot run this layout ([] = it can)."""
    p, t = sc.parallel, sc.training
    if framework not in FRAMEWORKS:
        raise ScenarioError("--export", f"unknown framework {framework!r}", " | ".join(FRAMEWORKS))
    out = []
    no_schedule = p.pp > 1 and schedule_spec(p.pp_schedule).framework_name(framework) is None
    runs = framework_schedules(framework)
    if framework == "torchtitan":
        if no_schedule:
            out.append(f"pipeline schedule {p.pp_schedule} (torch pipelining has {', '.join(runs)})")
    elif framework == "megatron":
        if no_schedule:
            out.append(f"pipeline schedule {p.pp_schedule} (Megatron-LM runs {join_names(runs, 'and')})")
    else:
        if p.zero > 1:
            out.append(f"ZeRO-{p.zero} (nanotron's optimizer.zero_stage is 0 or 1)")
        if no_schedule:
            out.append(f"pipeline schedule {p.pp_schedule} (nanotron's pp_engine is {join_names(runs)})")
        if t.recompute == "selective" and t.attention != "flash":
            out.append("selective recomputation (nanotron recomputes whole layers or nothing)")
        if t.precision == "fp8":
            out.append("fp8 training")
    return out


def approximations(sc: Scenario, framework: str) -> list[str]:
    """Where the framework's nearest setting is not quite the layout."""
    p, t = sc.parallel, sc.training
    out = []
    if framework == "torchtitan" and p.zero in (1, 2) and p.dp * p.cp > 1:
        out.append(f"torchtitan has no ZeRO-{p.zero}: FSDP with fsdp_reshard_after_forward = \"never\" keeps the "
                   "parameters gathered from forward to backward (ZeRO-2-like memory) and is the closest")
    if framework == "nanotron" and t.recompute == "selective":
        out.append("selective recomputation with flash attention stores what 'none' stores: recompute_layer = false")
    return out


def _model_lines(sc: Scenario) -> str:
    m = sc.model
    return (f"{m.name}: {m.layers} layers, hidden {m.hidden}, ffn {m.ffn_hidden}, {m.heads} heads, "
            f"{m.n_kv} KV heads, vocab {m.vocab}")


def _comment(lines: list[str], mark: str = "#") -> str:
    return "".join(f"{mark} {line}\n" for line in lines)


def to_torchtitan(sc: Scenario, label: str = "") -> str:
    """torchtitan job config (TOML, `[parallelism]` as in the TOML-era `JobConfig`)."""
    p, t, m = sc.parallel, sc.training, sc.model
    replicate, shard = (p.dp, 1) if p.zero == 0 else (1, p.dp)
    reshard = "never" if p.zero in (1, 2) else "default"
    local = t.global_batch // p.dp if p.pp > 1 else t.micro_batch
    head = [f"torchtitan job config written by clustersim sweep: {label or sc.name}",
            f"model {_model_lines(sc)}",
            f"run: torchrun --nnodes {sc.cluster.nodes} --nproc-per-node {sc.gpus_per_node} -m torchtitan.train --job.config_file THIS_FILE"]
    head += [f"approximation: {a}" for a in approximations(sc, "torchtitan")]
    lines = [_comment(head), "[job]", f"description = {json.dumps(sc.name)}", "", "[model]", 'name = "llama3"']
    if m.name in TORCHTITAN_FLAVORS:
        lines.append(f'flavor = "{TORCHTITAN_FLAVORS[m.name]}"')
    else:
        lines.append(f"# flavor: the torchtitan flavor with these dimensions ({_model_lines(sc)})")
    lines += ["", "[training]", f"seq_len = {t.seq_len}", f"local_batch_size = {local}", f"global_batch_size = {t.global_batch}",
              f'mixed_precision_param = "{DTYPE[t.precision]}"',
              f'mixed_precision_reduce = "{"bfloat16" if t.grad_dtype == "bf16" else "float32"}"', "",
              "[parallelism]", f"data_parallel_replicate_degree = {replicate}", f"data_parallel_shard_degree = {shard}",
              f'fsdp_reshard_after_forward = "{reshard}"', f"tensor_parallel_degree = {p.tp}",
              f"enable_async_tensor_parallel = {'true' if p.overlap_tp and p.tp > 1 else 'false'}",
              f"pipeline_parallel_degree = {p.pp}"]
    if p.pp > 1:
        lines += [f'pipeline_parallel_schedule = "{schedule_spec(p.pp_schedule).framework_name("torchtitan")}"',
                  f"pipeline_parallel_microbatch_size = {t.micro_batch}"]
        if p.vpp > 1:
            lines.append(f"pipeline_parallel_layers_per_stage = {m.layers // (p.pp * p.vpp)}")
    lines += [f"context_parallel_degree = {p.cp}", f"expert_parallel_degree = {p.ep}", "",
              "[activation_checkpoint]", f'mode = "{t.recompute}"']
    if t.recompute == "selective":
        lines.append('selective_ac_option = "op"')
    if t.precision == "fp8":
        lines += ["", "[float8]", "enable_fsdp_float8_all_gather = false"]
    return "\n".join(lines) + "\n"


def megatron_args(sc: Scenario) -> list[str]:
    """Megatron-LM `pretrain_gpt.py` flags for the layout and the model."""
    p, t, m = sc.parallel, sc.training, sc.model
    a = ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp),
         "--context-parallel-size", str(p.cp), "--expert-model-parallel-size", str(p.ep)]
    if p.sp and p.tp > 1:
        a.append("--sequence-parallel")
    if p.vpp > 1 and schedule_spec(p.pp_schedule).framework_name("megatron"):  # Megatron's interleaved 1F1B
        a += ["--num-layers-per-virtual-pipeline-stage", str(m.layers // (p.pp * p.vpp))]
    a += ["--micro-batch-size", str(t.micro_batch), "--global-batch-size", str(t.global_batch),
          "--seq-length", str(t.seq_len), "--max-position-embeddings", str(t.seq_len)]
    if p.zero == 1:
        a.append("--use-distributed-optimizer")
    elif p.zero >= 2:
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", MEGATRON_FSDP_STRATEGY[p.zero]]
    if p.overlap_dp and p.dp * p.cp > 1:
        a.append("--overlap-grad-reduce")
        if p.zero >= 1:
            a.append("--overlap-param-gather")
    if p.overlap_tp and p.tp > 1:
        a.append("--tp-comm-overlap")
    if t.recompute != "none":
        a += ["--recompute-granularity", t.recompute]
        if t.recompute == "full":
            a += ["--recompute-method", "uniform", "--recompute-num-layers", "1"]
    a += ["--fp8-format", "hybrid", "--bf16"] if t.precision == "fp8" else (["--bf16"] if t.precision == "bf16" else [])
    if t.attention == "flash":
        a.append("--use-flash-attn")
    a += ["--num-layers", str(m.layers), "--hidden-size", str(m.hidden), "--ffn-hidden-size", str(m.ffn_hidden),
          "--num-attention-heads", str(m.heads)]
    if m.n_kv != m.heads:
        a += ["--group-query-attention", "--num-query-groups", str(m.n_kv)]
    if m.arch == "llama":
        a += ["--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--disable-bias-linear"]
    if not m.tie_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if m.moe:
        a += ["--num-experts", str(m.moe.experts), "--moe-router-topk", str(m.moe.top_k),
              "--moe-ffn-hidden-size", str(m.moe.expert_ffn_hidden)]
    return a


def to_megatron(sc: Scenario, label: str = "") -> str:
    """One flag (and its value) per line after comment lines: `$(grep -v '^#' FILE)` or `shlex.split`."""
    head = [f"Megatron-LM arguments written by clustersim sweep: {label or sc.name}",
            f"data parallel is implicit: {sc.gpus} GPUs / (tp*pp*cp) = {sc.dp}",
            f"run: torchrun --nnodes {sc.cluster.nodes} --nproc-per-node {sc.gpus_per_node} pretrain_gpt.py $(grep -v '^#' THIS_FILE) ..."]
    args = megatron_args(sc)
    lines, i = [], 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            lines.append(f"{args[i]} {shlex.quote(args[i + 1])}")
            i += 2
        else:
            lines.append(args[i])
            i += 1
    return _comment(head) + "\n".join(lines) + "\n"


def to_nanotron(sc: Scenario, label: str = "") -> str:
    """The layout sections of a nanotron config (YAML): parallelism, tokens, optimizer, model."""
    p, t, m = sc.parallel, sc.training, sc.model
    engine = schedule_spec(p.pp_schedule if p.pp > 1 else DEFAULT_SCHEDULE).framework_name("nanotron")
    doc = {
        "general": {"project": "clustersim", "run": sc.name},
        "parallelism": {"dp": p.dp, "tp": p.tp, "pp": p.pp, "pp_engine": engine,
                        "tp_mode": "REDUCE_SCATTER" if p.sp else "ALL_REDUCE",
                        "tp_linear_async_communication": bool((p.overlap_tp or p.tp_linear_async) and p.sp),
                        "context_parallel_size": p.cp, "expert_parallel_size": p.ep,
                        "recompute_layer": t.recompute == "full"},
        "tokens": {"sequence_length": t.seq_len, "micro_batch_size": t.micro_batch,
                   "batch_accumulation_per_replica": t.global_batch // (p.dp * t.micro_batch)},
        "optimizer": {"zero_stage": p.zero, "accumulate_grad_in_fp32": t.grad_dtype != "bf16"},
        "model": {"dtype": DTYPE[t.precision], "model_config": {
            "hidden_size": m.hidden, "intermediate_size": m.ffn_hidden, "num_hidden_layers": m.layers,
            "num_attention_heads": m.heads, "num_key_value_heads": m.n_kv, "vocab_size": m.vocab,
            "tie_word_embeddings": m.tie_embeddings, "max_position_embeddings": t.seq_len}},
    }
    head = [f"nanotron config sections written by clustersim sweep: {label or sc.name}",
            "merge into a full nanotron config (checkpoints, data, logging, learning rate are not set here)"]
    head += [f"approximation: {a}" for a in approximations(sc, "nanotron")]
    return _comment(head) + yaml.safe_dump(doc, sort_keys=False)


WRITERS = {"torchtitan": to_torchtitan, "megatron": to_megatron, "nanotron": to_nanotron}


def export_layout(sc: Scenario, framework: str, label: str = "") -> str:
    reasons = unsupported(sc, framework)
    if reasons:
        raise ScenarioError("--export", f"{framework} cannot run this layout: " + "; ".join(reasons))
    return WRITERS[framework](sc, label)


def export_best(ranked: list, framework: str, sc: Scenario, raw: dict, base_dir) -> tuple[str, object, list[str]]:
    """(config text, the Evaluation exported, warnings): the best-ranked layout `framework` can run."""
    from ..sweep.tasks import candidate_scenario  # noqa: PLC0415
    if not ranked:
        raise ScenarioError("--export", "no layout fits, nothing to export")
    warnings = []
    for i, ev in enumerate(ranked):
        cand = candidate_scenario(raw, base_dir, ev.layout)
        reasons = unsupported(cand, framework)
        if reasons:
            if i == 0:
                warnings.append(f"the best layout {ev.layout.label()} uses " + "; ".join(reasons) + f", which {framework} cannot run")
            continue
        if i > 0:
            warnings.append(f"exporting #{i + 1} {ev.layout.label()}, the best layout {framework} can run")
        warnings += approximations(cand, framework)
        return WRITERS[framework](cand, ev.layout.label()), ev, warnings
    raise ScenarioError("--export", f"none of the {len(ranked)} ranked layouts can run on {framework}")

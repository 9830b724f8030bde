"""A layout as a training framework's launch config, for a named release of each framework.

  torchtitan      torchtitan 0.3.0: command-line overrides of a `config_registry` function
                  (`--module llama3 --config llama3_70b --parallelism.tensor_parallel_degree 8 ...`);
                  0.3 dropped the TOML job files.
  torchtitan-0.2  torchtitan 0.2.x: the TOML job file (`--job.config_file`), for those still on 0.2.
  megatron        Megatron-LM core_v0.16.1 (megatron-core 0.16.1): `pretrain_gpt.py` arguments, the model
                  and the layout in full, so none of Megatron's defaults stands in for the model.
  nanotron        nanotron 0.4 (its PyPI release): a whole YAML config, for `run_train.py --config-file`.

Each writer takes a validated `Scenario`. A framework that cannot run a layout or a model says why
(`unsupported`); `export_best` then takes the best-ranked layout it can run and says so in the file's
header. Where the framework's nearest setting is not quite the layout, the header says that too
(`approximations`). tests/test_export_frameworks.py reads the exports with each release's own parser,
installed from the package registry; Megatron-LM's parser is not published there, docs/exports.md says
what stands in for it and what was checked by hand.
"""
from __future__ import annotations

import json
import math
import shlex

import yaml

from ..errors import ScenarioError
from ..plan import fusion, op_sac
from ..plan.schedules import DEFAULT_SCHEDULE, SCHEDULES, join_names, schedule_spec
from ..scenario import Scenario

FRAMEWORKS = ("torchtitan", "torchtitan-0.2", "megatron", "nanotron")
TARGETS = {"torchtitan": "torchtitan 0.3.0", "torchtitan-0.2": "torchtitan 0.2.x (0.2.2)",
           "megatron": "Megatron-LM core_v0.16.1 (megatron-core 0.16.1)", "nanotron": "nanotron 0.4"}
"""The release each writer targets; every export names it in its header."""

def torch_schedule(name: str) -> str | None:
    """torch.distributed.pipelining's name for a schedule (`ScheduleSpec.frameworks`, torchtitan's entry); None
    where torch has none (ZB-H1 with one stage per rank: InterleavedZeroBubble needs several)."""
    return schedule_spec(name).framework_name("torchtitan")


def framework_schedules(framework: str) -> list[str]:
    """The framework's names of the schedules it runs (`ScheduleSpec.frameworks`), in registry order."""
    return [n for n in (spec.framework_name(framework) for spec in SCHEDULES.values()) if n]


TORCHTITAN_CONFIGS = {"llama3-8b": ("llama3", "llama3_8b", "8B"), "llama3-70b": ("llama3", "llama3_70b", "70B"),
                      "llama3-405b": ("llama3", "llama3_405b", "405B"),
                      "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b", "671B")}
"""clustersim preset -> torchtitan (module, 0.3 config_registry function, 0.2 flavor) with the same model.
torchtitan sets a model's dimensions in Python, so another model has no command-line form."""
HF_TOKENIZERS = {"llama3-8b": "meta-llama/Meta-Llama-3-8B", "llama3-70b": "meta-llama/Meta-Llama-3-70B",
                 "llama3-405b": "meta-llama/Llama-3.1-405B", "llama3.2-1b": "meta-llama/Llama-3.2-1B",
                 "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1", "smollm-360m": "HuggingFaceTB/SmolLM-360M",
                 "deepseek-v3": "deepseek-ai/DeepSeek-V3"}
"""The Hugging Face tokenizer of each preset (Megatron's HuggingFaceTokenizer, nanotron's tokenizer)."""
MEGATRON_FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}
"""Megatron-FSDP `--data-parallel-sharding-strategy` for ZeRO-2 and ZeRO-3."""
DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "bfloat16", "fp4": "bfloat16"}
NANOTRON_ROPE_THETA = 10000.0
"""nanotron 0.4's Llama builds its rotary embedding with this base and has no config field for it."""


def unsupported(sc: Scenario, framework: str) -> list[str]:
    """Why `framework` cannot run this layout or model ([] = it can)."""
    p, t, m = sc.parallel, sc.training, sc.model
    out = []
    if t.precision == "fp4" and framework != "megatron":
        out.append("fp4 (NVFP4) training, which clustersim prices for Megatron's Transformer Engine recipe only")
    if t.offload_layers and framework != "megatron":
        out.append(f"activation offloading of {t.offload_layers} layers (Megatron's --cpu-offloading-num-layers only)")
    if framework in ("torchtitan", "torchtitan-0.2"):
        if m.name not in TORCHTITAN_CONFIGS:
            out.append(f"model {m.name} (torchtitan configs exist for {', '.join(TORCHTITAN_CONFIGS)}; "
                       "another model needs a config_registry function in Python)")
        if p.pp > 1 and torch_schedule(p.pp_schedule) is None:
            out.append(f"pipeline schedule {p.pp_schedule} (torch pipelining has {', '.join(framework_schedules('torchtitan'))})")
        dense_ranks = (1 if p.zero == 0 else p.dp) * p.cp * p.tp  # 0.3's ParallelismConfig: EP borrows these ranks
        if framework == "torchtitan" and p.ep > 1 and dense_ranks % p.ep:
            out.append(f"expert parallel {p.ep} that does not divide FSDP x CP x TP = {dense_ranks} "
                       "(torchtitan 0.3 takes the EP ranks from FSDP and TP)")
    elif framework == "megatron":
        if p.pp > 1 and schedule_spec(p.pp_schedule).framework_name("megatron") is None:
            out.append(f"pipeline schedule {p.pp_schedule} (Megatron-LM runs {join_names(framework_schedules('megatron'), 'and')})")
    elif framework == "nanotron":
        if p.zero > 1:
            out.append(f"ZeRO-{p.zero} (nanotron's optimizer.zero_stage is 0 or 1)")
        if p.pp > 1 and schedule_spec(p.pp_schedule).framework_name("nanotron") is None:
            out.append(f"pipeline schedule {p.pp_schedule} (nanotron's pp_engine is {join_names(framework_schedules('nanotron'))})")
        if p.cp > 1:
            out.append(f"context parallel {p.cp} (nanotron 0.4 has no context parallelism)")
        if m.moe or m.mla or m.arch != "llama":
            out.append("a model other than a dense Llama (nanotron 0.4's trainer builds Llama and Starcoder2)")
        if t.recompute == "full" or (t.recompute == "selective" and t.attention != "flash"):
            out.append(f"{t.recompute} recomputation (nanotron 0.4's Llama recomputes nothing)")
        if t.precision == "fp8":
            out.append("fp8 training")
    else:
        raise ScenarioError("--export", f"unknown framework {framework!r}", " | ".join(FRAMEWORKS))
    return out


def approximations(sc: Scenario, framework: str) -> list[str]:
    """Where the framework's nearest setting is not quite the layout."""
    p, t, m = sc.parallel, sc.training, sc.model
    out = []
    if framework.startswith("torchtitan"):
        if p.zero in (1, 2) and p.dp * p.cp > 1:
            out.append(f"torchtitan has no ZeRO-{p.zero}: FSDP with fsdp_reshard_after_forward \"never\" keeps the "
                       "parameters gathered from forward to backward (ZeRO-2-like memory) and is the closest")
        if t.recompute == "selective" and not op_sac.applies(sc):
            out.append("torchtitan's selective activation checkpointing is per-op (it saves matmul outputs and "
                       "recomputes every other one), not the attention-only recomputation that was simulated")
        if t.grad_bytes == 2:
            out.append("torchtitan reduces gradients in float32 (mixed_precision_reduce); the layout reduces them in bf16")
    if framework == "torchtitan" and t.precision == "fp8":
        out.append("fp8: torchtitan 0.3 turns on Float8 in the model spec (a config_registry function with a "
                   "Float8LinearConverter, as llama3_8b_mxfp8 does), not on the command line; this file trains in bf16")
    if framework == "megatron" and m.moe and p.ep > 1 and p.tp > 1 and p.etp is None:
        out.append("experts were simulated whole on each rank with EP groups cut from dp x cp at every TP rank; Megatron "
                   "splits them over TP (--expert-tensor-parallel-size defaults to tp): parallel.etp 1 is its folded layout")
    if framework == "megatron" and m.vocab % p.tp:
        out.append(f"Megatron pads the vocabulary ({m.vocab}) to a multiple of the TP degree ({p.tp})")
    if framework == "nanotron":
        if t.recompute == "selective":
            out.append("selective recomputation with flash attention stores what 'none' stores: nanotron recomputes nothing")
        if m.rope_theta and m.rope_theta != NANOTRON_ROPE_THETA:
            out.append(f"nanotron 0.4's Llama uses rotary base {NANOTRON_ROPE_THETA:g}, the model's is {m.rope_theta:g} "
                       "(same cost per step, a different model)")
    if m.parallel_block:
        out.append("the parallel block (model.parallel_block: attention and MLP on one normalised input) is not written: "
                   "the file trains sequential blocks (a second norm per layer and, under TP, twice the layer's TP collectives)")
    if t.optimizer != "adamw":
        out.append(f"training.optimizer {t.optimizer} is not written: the file's optimizer is the framework's AdamW")
    if m.sliding_window is not None:
        out.append(f"the sliding window (model.sliding_window {m.sliding_window}, on {m.sliding_layers} of {m.layers} layers) "
                   "is not written: the file trains every layer with full causal attention, more work than was simulated")
    if p.pp_layers is not None:
        out.append(f"uneven pipeline stages {list(p.pp_layers)} are not written: the framework splits layers evenly")
    return out


def _model_line(sc: Scenario) -> str:
    m = sc.model
    return (f"model {m.name}: {m.layers} layers, hidden {m.hidden}, ffn {m.ffn_hidden}, {m.heads} heads, "
            f"{m.n_kv} KV heads, vocab {m.vocab}" + (f", rotary base {m.rope_theta:g}" if m.rope_theta else ""))


def _header(sc: Scenario, framework: str, label: str, run: str, notes: list[str]) -> list[str]:
    head = [f"{TARGETS[framework]} config written by clustersim sweep for {label or sc.name}",
            f"targets {TARGETS[framework]}: another release may name these settings differently",
            _model_line(sc), f"layout: {sc.gpus} GPUs = tp {sc.parallel.tp} x pp {sc.parallel.pp} x cp {sc.parallel.cp} "
            f"x dp {sc.dp} (ep {sc.parallel.ep} within {'tp x cp x dp, etp 1' if sc.parallel.etp else 'dp x cp'}), ZeRO-{sc.parallel.zero}", f"run: {run}"]
    return head + list(notes) + [f"approximation: {a}" for a in approximations(sc, framework)]


def _comment(lines: list[str], mark: str = "#") -> str:
    return "".join(f"{mark} {line}\n" for line in lines)


def _flag_lines(args: list[str]) -> str:
    """One flag (and its value) per line: `$(grep -v '^#' FILE)` or `shlex.split(text, comments=True)`."""
    lines, i = [], 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            lines.append(f"{args[i]} {shlex.quote(args[i + 1])}")
            i += 2
        else:
            lines.append(args[i])
            i += 1
    return "\n".join(lines) + "\n"


def _torchtitan_batches(sc: Scenario) -> tuple[int, int, int]:
    """(data_parallel_replicate_degree, data_parallel_shard_degree, training.local_batch_size).
    local_batch_size is one rank's batch per gradient-accumulation step; with a pipeline it is the
    whole per-replica batch, split into pipeline micro-batches (torchtitan TrainingConfig)."""
    p, t = sc.parallel, sc.training
    replicate, shard = (p.dp, 1) if p.zero == 0 else (1, p.dp)
    local = t.global_batch // p.dp if p.pp > 1 else t.micro_batch
    return replicate, shard, local


def torchtitan_args(sc: Scenario) -> list[str]:
    """torchtitan 0.3 `ConfigManager.parse_args` arguments: a registry config and its overrides."""
    p, t = sc.parallel, sc.training
    module, config, _ = TORCHTITAN_CONFIGS[sc.model.name]
    replicate, shard, local = _torchtitan_batches(sc)
    a = ["--module", module, "--config", config,
         "--training.seq-len", str(t.seq_len), "--training.local-batch-size", str(local),
         "--training.global-batch-size", str(t.global_batch),
         "--training.mixed-precision-param", DTYPE[t.precision],
         "--parallelism.data-parallel-replicate-degree", str(replicate),
         "--parallelism.data-parallel-shard-degree", str(shard),
         "--parallelism.fsdp-reshard-after-forward", "never" if p.zero in (1, 2) else "default",
         "--parallelism.tensor-parallel-degree", str(p.tp),
         "--parallelism.enable-sequence-parallel" if p.sp else "--parallelism.no-enable-sequence-parallel",
         "--parallelism.pipeline-parallel-degree", str(p.pp)]
    if p.pp > 1:
        a += ["--training.disable-cuda-graphs",  # 0.3's Trainer.Config: CUDA graphs do not support PP yet
              "--parallelism.pipeline-parallel-schedule", torch_schedule(p.pp_schedule),
              "--parallelism.pipeline-parallel-microbatch-size", str(t.micro_batch)]
        if p.vpp > 1:
            a += ["--parallelism.pipeline-parallel-layers-per-stage", str(sc.model.layers // (p.pp * p.vpp))]
    a += ["--parallelism.context-parallel-degree", str(p.cp), "--parallelism.expert-parallel-degree", str(p.ep)]
    if p.overlap_tp and p.tp > 1:  # async TP is a compile pass in 0.3
        a += ["--compile.enable", "--compile.enable-async-tensor-parallel"]
    elif fusion.compiled(sc):
        a += ["--compile.enable"]
    a.append(f"activation-checkpoint:{t.recompute}")  # tyro subcommand: the last argument
    return a


def to_torchtitan(sc: Scenario, label: str = "", notes: tuple[str, ...] = ()) -> str:
    run = (f"torchrun --nnodes {sc.cluster.nodes} --nproc-per-node {sc.gpus_per_node} -m torchtitan.train "
           "$(grep -v '^#' THIS_FILE)")
    return _comment(_header(sc, "torchtitan", label, run, list(notes))) + _flag_lines(torchtitan_args(sc))


def to_torchtitan_toml(sc: Scenario, label: str = "", notes: tuple[str, ...] = ()) -> str:
    """torchtitan 0.2.x job config (TOML, the `JobConfig` sections that 0.3 replaced)."""
    p, t = sc.parallel, sc.training
    module, _, flavor = TORCHTITAN_CONFIGS[sc.model.name]
    replicate, shard, local = _torchtitan_batches(sc)
    run = (f"torchrun --nnodes {sc.cluster.nodes} --nproc-per-node {sc.gpus_per_node} -m torchtitan.train "
           "--job.config_file THIS_FILE (torchtitan 0.2.x only: 0.3 has no TOML job files)")
    lines = [_comment(_header(sc, "torchtitan-0.2", label, run, list(notes))).rstrip("\n"),
             "[job]", f"description = {json.dumps(sc.name)}", "", "[model]", f'name = "{module}"', f'flavor = "{flavor}"',
             *([f'converters = ["quantize.linear.{_torchtitan_converter(sc)}"]'] if t.precision == "fp8" else []), "",
             "[training]", f"seq_len = {t.seq_len}", f"local_batch_size = {local}", f"global_batch_size = {t.global_batch}",
             f'mixed_precision_param = "{DTYPE[t.precision]}"', 'mixed_precision_reduce = "float32"', "",
             "[parallelism]", f"data_parallel_replicate_degree = {replicate}", f"data_parallel_shard_degree = {shard}",
             f'fsdp_reshard_after_forward = "{"never" if p.zero in (1, 2) else "default"}"', f"tensor_parallel_degree = {p.tp}",
             f"enable_async_tensor_parallel = {'true' if p.overlap_tp and p.tp > 1 else 'false'}",
             f"pipeline_parallel_degree = {p.pp}"]
    if p.pp > 1:
        lines += [f'pipeline_parallel_schedule = "{torch_schedule(p.pp_schedule)}"',
                  f"pipeline_parallel_microbatch_size = {t.micro_batch}"]
        if p.vpp > 1:
            lines.append(f"pipeline_parallel_layers_per_stage = {sc.model.layers // (p.pp * p.vpp)}")
    lines += [f"context_parallel_degree = {p.cp}", f"expert_parallel_degree = {p.ep}", "",
              "[activation_checkpoint]", f'mode = "{t.recompute}"']
    if t.recompute == "selective":
        lines.append('selective_ac_option = "op"')
    if (p.overlap_tp and p.tp > 1) or fusion.compiled(sc):
        lines += ["", "[compile]", "enable = true", 'components = ["model", "loss"]']
    if t.precision == "fp8" and _torchtitan_converter(sc) == "mx":  # TT022 job_config.py:766-790 (MXLinear)
        lines += ["", "[quantize.linear.mx]", 'recipe_name = "mxfp8_cublas"', 'filter_fqns = ["output"]']
    elif t.precision == "fp8":  # torchtitan v0.2.2 job_config.py:731-746 (Float8Linear), its llama3_405b.toml's section
        fw = sc.framework
        lines += ["", "[quantize.linear.float8]",
                  f"enable_fsdp_float8_all_gather = {_toml_bool(fw.option('float8_fsdp_all_gather'))}",
                  f"precompute_float8_dynamic_scale_for_fsdp = {_toml_bool(fw.option('float8_precompute_scale'))}",
                  "filter_fqns = " + ('["output"]' if fw.option("float8_filter_output") else "[]")]
    return "\n".join(lines) + "\n"


def _torchtitan_converter(sc: Scenario) -> str:
    """torchtitan 0.2.x's linear converter for FP8 training: "mx" (MXLinear) or "float8"
    (TT022 components/quantization/mx.py:171, float8.py:238)."""
    return "mx" if sc.framework.option("mx") else "float8"


def _toml_bool(value) -> str:
    return "true" if value else "false"


def _megatron_vocab_divisor(vocab: int, tp: int) -> int:
    """`--make-vocab-size-divisible-by`: Megatron pads the vocabulary to a multiple of this times TP;
    the largest divisor up to Megatron's default 128 that leaves this vocabulary unpadded."""
    return math.gcd(vocab // tp, 128) if vocab % tp == 0 else 128


def megatron_args(sc: Scenario) -> list[str]:
    """Megatron-LM `pretrain_gpt.py` arguments for the layout and the model (core_v0.16.1 names)."""
    p, t, m = sc.parallel, sc.training, sc.model
    a = ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp),
         "--context-parallel-size", str(p.cp), "--expert-model-parallel-size", str(p.ep)]
    if p.etp is not None:  # MoE parallel folding (simulator/ep_spec.py)
        a += ["--expert-tensor-parallel-size", str(p.etp)]
    if p.sp and p.tp > 1:
        a.append("--sequence-parallel")
    if p.vpp > 1 and p.pp > 1 and schedule_spec(p.pp_schedule).framework_name("megatron"):  # Megatron's interleaved 1F1B
        a += ["--num-layers-per-virtual-pipeline-stage", str(m.layers // (p.pp * p.vpp))]
    a += ["--micro-batch-size", str(t.micro_batch), "--global-batch-size", str(t.global_batch)]
    if p.zero == 1:
        a.append("--use-distributed-optimizer")
    elif p.zero >= 2:
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", MEGATRON_FSDP_STRATEGY[p.zero],
              "--ckpt-format", "fsdp_dtensor"]
    if p.overlap_dp and p.dp * p.cp > 1:
        a.append("--overlap-grad-reduce")
        if p.zero >= 1:
            a.append("--overlap-param-gather")
    if p.overlap_tp and p.tp > 1:
        a.append("--tp-comm-overlap")
    if p.ep_overlap:  # combined 1F1B with the recipes' deferred weight gradients (Megatron MoE README.md:557-558)
        a += ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
    if t.offload_layers:  # MLM b0cc2706 megatron/training/arguments.py:1236-1237 (turns cpu_offloading on; activations, not weights)
        a += ["--cpu-offloading-num-layers", str(t.offload_layers)]
    if t.recompute != "none":
        a += ["--recompute-granularity", t.recompute]
        if t.recompute == "full" and t.recompute_layers is not None:
            a += ["--recompute-method", "block", "--recompute-num-layers", str(t.recompute_layers)]
        elif t.recompute == "full":
            a += ["--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if t.precision in ("bf16", "fp16", "fp8", "fp4"):
        a.append("--fp16" if t.precision == "fp16" else "--bf16")
        if t.grad_bytes == 4:  # Megatron keeps bf16 gradients unless told otherwise
            a.append("--accumulate-allreduce-grads-in-fp32")
    if t.precision == "fp8":
        a += ["--fp8-format", "hybrid"]
        recipe = sc.framework.option("fp8_recipe")  # Megatron's option; None under a framework without it
        if recipe:
            a += ["--fp8-recipe", recipe]
        if sc.framework.option("fp8_param_gather"):  # MLM arguments.py:1248, :2309 (MXFP8 needs the buffer reuse)
            a += ["--fp8-param-gather"] + (["--reuse-grad-buf-for-mxfp8-param-ag"] if recipe == "mxfp8" else [])
    if t.precision == "fp4":  # MLM transformer_config.py:511-516 at Megatron-Bridge v0.3.0's pin (b0cc2706)
        a += ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
    if sc.framework.option("fp8_dot_product_attention"):  # MLM fp8_utils.py:432-449 (the recipe's fp8_dpa)
        a.append("--fp8-dot-product-attention")
    a += ["--attention-backend", "flash" if t.attention == "flash" else "unfused"]
    # the model
    a += ["--num-layers", str(m.layers), "--hidden-size", str(m.hidden), "--ffn-hidden-size", str(m.ffn_hidden),
          "--num-attention-heads", str(m.heads), "--seq-length", str(t.seq_len)]
    if not m.mla:
        a += ["--kv-channels", str(m.d_head)]
    if m.n_kv != m.heads and not m.mla:
        a += ["--group-query-attention", "--num-query-groups", str(m.n_kv)]
    if m.arch == "llama":
        a += ["--max-position-embeddings", str(t.seq_len), "--position-embedding-type", "rope"]
        if m.rope_theta:
            a += ["--rotary-base", str(int(m.rope_theta))]  # Megatron's --rotary-base is an int
        a += ["--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear"]
    elif m.arch == "nemotron":  # LayerNorm with zero-centred gamma (NeMo's layernorm1p), squared ReLU, no biases
        a += ["--max-position-embeddings", str(t.seq_len), "--position-embedding-type", "rope"]
        if m.rope_theta:
            a += ["--rotary-base", str(int(m.rope_theta))]
        if m.partial_rotary_factor is not None:
            a += ["--rotary-percent", f"{m.partial_rotary_factor:g}"]
        a += ["--normalization", "LayerNorm", "--apply-layernorm-1p", "--squared-relu", "--disable-bias-linear"]
    else:
        a += ["--max-position-embeddings", str(max(m.positions, t.seq_len)), "--position-embedding-type", "learned_absolute"]
    if not m.tie_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if m.name in HF_TOKENIZERS:
        a += ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", HF_TOKENIZERS[m.name]]
    else:  # NullTokenizer adds an end-of-document token to --vocab-size
        a += ["--tokenizer-type", "NullTokenizer", "--vocab-size", str(m.vocab - 1)]
    a += ["--make-vocab-size-divisible-by", str(_megatron_vocab_divisor(m.vocab, p.tp))]
    if m.mla:
        a.append("--multi-latent-attention")
        if m.mla.q_lora_rank:  # Megatron's default (None) is no low-rank query projection
            a += ["--q-lora-rank", str(m.mla.q_lora_rank)]
        a += ["--kv-lora-rank", str(m.mla.kv_lora_rank), "--qk-head-dim", str(m.mla.qk_nope_head_dim),
              "--qk-pos-emb-head-dim", str(m.mla.qk_rope_head_dim), "--v-head-dim", str(m.mla.v_head_dim)]
    if m.moe:
        moe = m.moe
        a += ["--num-experts", str(moe.experts), "--moe-router-topk", str(moe.top_k),
              "--moe-ffn-hidden-size", str(moe.expert_ffn_hidden), "--moe-token-dispatcher-type", "alltoall",
              "--moe-grouped-gemm"]
        if moe.shared_experts:
            a += ["--moe-shared-expert-intermediate-size", str(moe.shared_experts * moe.shared_ffn)]
        if moe.dense_layers or moe.layer_freq > 1:
            pattern = [int(m.is_moe_layer(i)) for i in range(m.layers)]
            a += ["--moe-layer-freq", "[" + ",".join(map(str, pattern)) + "]"]
        if moe.capacity_factor is not None:
            a += ["--moe-expert-capacity-factor", f"{moe.capacity_factor:g}", "--moe-token-drop-policy", "probs"]
    if m.mtp_layers:  # built on the last pipeline stage, as clustersim places it (plan/mtp.py)
        a += ["--mtp-num-layers", str(m.mtp_layers)]
    return a


DPA_RECIPE_ENV = {"delayed": "DelayedScaling", "tensorwise": "Float8CurrentScaling"}
"""`dpa_fp8_recipe` -> Transformer Engine's NVTE_DPA_FP8_RECIPE (v2.8 dot_product_attention.py:552-635)."""


def to_megatron(sc: Scenario, label: str = "", notes: tuple[str, ...] = ()) -> str:
    p = sc.parallel
    # Megatron-LM's validate_args: TP or CP wants 1 (kernel order for overlap), Megatron-FSDP more than 1
    conns = "32" if p.zero >= 2 else ("1" if p.tp * p.cp > 1 else "")
    env = f"CUDA_DEVICE_MAX_CONNECTIONS={conns} " if conns else ""
    dpa = sc.framework.option("dpa_fp8_recipe")  # Transformer Engine reads the attention's recipe from the environment
    if sc.framework.option("fp8_dot_product_attention") and dpa in DPA_RECIPE_ENV:
        env += f"NVTE_DPA_FP8_RECIPE={DPA_RECIPE_ENV[dpa]} "
    run = (f"{env}torchrun --nnodes {sc.cluster.nodes} --nproc-per-node {sc.gpus_per_node} pretrain_gpt.py "
           "$(grep -v '^#' THIS_FILE) --data-path ... --train-iters ... --lr ... (data and schedule are yours)")
    head = _header(sc, "megatron", label, run, list(notes))
    head.insert(4, f"data parallel is implicit: {sc.gpus} GPUs / (tp*pp*cp) = {sc.dp}")
    return _comment(head) + _flag_lines(megatron_args(sc))


def nanotron_config(sc: Scenario) -> dict:
    """A whole nanotron 0.4 `Config` (strict: every key is one of its dataclass fields)."""
    p, t, m = sc.parallel, sc.training, sc.model
    return {
        "general": {"project": "clustersim", "run": sc.name, "seed": 42},
        "parallelism": {"dp": p.dp, "tp": p.tp, "pp": p.pp, "pp_engine": schedule_spec(p.pp_schedule if p.pp > 1 else DEFAULT_SCHEDULE).framework_name("nanotron"),
                        "tp_mode": "REDUCE_SCATTER" if p.sp and p.tp > 1 else "ALL_REDUCE",
                        "tp_linear_async_communication": bool((p.overlap_tp or p.tp_linear_async) and p.sp and p.tp > 1),
                        "expert_parallel_size": p.ep},
        "model": {"dtype": DTYPE[t.precision], "init_method": {"std": 0.02}, "make_vocab_size_divisible_by": 1,
                  "ddp_bucket_cap_mb": int(p.dp_bucket_mb),
                  "model_config": {
                      "is_llama_config": True, "hidden_act": "silu", "hidden_size": m.hidden,
                      "intermediate_size": m.ffn_hidden, "num_hidden_layers": m.layers, "num_attention_heads": m.heads,
                      "num_key_value_heads": m.n_kv, "vocab_size": m.vocab, "tie_word_embeddings": m.tie_embeddings,
                      "max_position_embeddings": t.seq_len, "rms_norm_eps": 1e-5}},
        "tokenizer": {"tokenizer_name_or_path": HF_TOKENIZERS.get(m.name, "YOUR_TOKENIZER")},
        "tokens": {"sequence_length": t.seq_len, "micro_batch_size": t.micro_batch,
                   "batch_accumulation_per_replica": t.global_batch // (p.dp * t.micro_batch), "train_steps": 1000},
        "optimizer": {"zero_stage": p.zero, "accumulate_grad_in_fp32": t.grad_bytes == 4, "weight_decay": 0.1,
                      "clip_grad": 1.0, "adam_eps": 1.0e-8, "adam_beta1": 0.9, "adam_beta2": 0.95,
                      "torch_adam_is_fused": True,
                      "learning_rate_scheduler": {"learning_rate": 3.0e-4, "lr_warmup_steps": 100,
                                                  "lr_warmup_style": "linear", "lr_decay_style": "cosine",
                                                  "min_decay_lr": 3.0e-5}},
        "checkpoints": {"checkpoints_path": "checkpoints", "checkpoint_interval": 1000},
        "logging": {"log_level": "info", "log_level_replica": "info", "iteration_step_info_interval": 1},
        "data": {"seed": 42, "num_loading_workers": 1,
                 "dataset": {"hf_dataset_or_datasets": "YOUR_DATASET", "text_column_name": "text"}},
    }


def to_nanotron(sc: Scenario, label: str = "", notes: tuple[str, ...] = ()) -> str:
    run = (f"torchrun --nnodes {sc.cluster.nodes} --nproc-per-node {sc.gpus_per_node} run_train.py --config-file THIS_FILE")
    head = _header(sc, "nanotron", label, run, list(notes))
    head.append("the layout, model, batch and ZeRO stage are the simulated ones; the dataset, tokenizer (if "
                "YOUR_TOKENIZER), steps, learning rate and checkpoint path are placeholders to set")
    return _comment(head) + yaml.safe_dump(nanotron_config(sc), sort_keys=False)


WRITERS = {"torchtitan": to_torchtitan, "torchtitan-0.2": to_torchtitan_toml, "megatron": to_megatron,
           "nanotron": to_nanotron}


def export_layout(sc: Scenario, framework: str, label: str = "", notes: tuple[str, ...] = ()) -> str:
    reasons = unsupported(sc, framework)
    if reasons:
        raise ScenarioError("--export", f"{framework} cannot run this layout: " + "; ".join(reasons))
    return WRITERS[framework](sc, label, notes)


def export_best(ranked: list, framework: str, sc: Scenario, raw: dict, base_dir) -> tuple[str, object, list[str]]:
    """(config text, the Evaluation exported, warnings): the sweep's first layout when `framework` can
    run it, else the best-ranked one it can, with the reason in the file's header and the warnings."""
    from ..sweep.tasks import candidate_scenario  # noqa: PLC0415
    if not ranked:
        raise ScenarioError("--export", "no layout fits, nothing to export")
    why_not = []
    for i, ev in enumerate(ranked):
        cand = candidate_scenario(raw, base_dir, ev.layout)
        reasons = unsupported(cand, framework)
        if reasons:
            if i < 3:
                why_not.append(f"#{i + 1} {ev.layout.label()} ({ev.tokens_per_s_per_gpu:.0f} tokens/s/GPU) uses "
                               + "; ".join(reasons))
            continue
        est = f", {ev.estimator}" if ev.estimator else ""
        if i == 0:
            notes = [f"this is the sweep's #1 layout ({ev.tokens_per_s_per_gpu:.0f} tokens/s/GPU{est})"]
        else:
            notes = [f"this is the sweep's #{i + 1} layout ({ev.tokens_per_s_per_gpu:.0f} tokens/s/GPU{est}), "
                     f"the best that {TARGETS[framework]} can run; #1 reaches {ranked[0].tokens_per_s_per_gpu:.0f}",
                     *(f"not exported: {w}" for w in why_not)]
            if i > 3:
                notes.append(f"not exported: #4{'' if i == 4 else f' to #{i}'} for the same kind of reason")
        warnings = notes[1:] + approximations(cand, framework) if i else approximations(cand, framework)
        if i:
            warnings.insert(0, f"exporting #{i + 1} {ev.layout.label()}, the best layout {framework} can run")
        return WRITERS[framework](cand, ev.layout.label(), tuple(notes)), ev, warnings
    raise ScenarioError("--export", f"none of the {len(ranked)} ranked layouts can run on {framework}: "
                        + "; ".join(unsupported(candidate_scenario(raw, base_dir, ranked[0].layout), framework)))

"""Build megatron-core's TransformerConfig from Megatron exports; print what it holds, as JSON lines.

Megatron-LM's own argument parser (megatron/training/arguments.py) is not published on PyPI: the
megatron-core wheel ships megatron/core only. The closest official entry point that installs is the
config that pretrain_gpt.py builds from the parsed arguments: `TransformerConfig` (or
`MLATransformerConfig`), whose __post_init__ checks the model against the layout (heads and query
groups against TP, experts against EP, recomputation settings, MoE options). As Megatron-LM's
`core_transformer_config_from_args` does, a flag whose name is a config field is passed as that
field, and a few are renamed; the flags that only the training loop reads (batch sizes, optimizer
sharding, tokenizer, positions) are checked by name against TRAINING_FLAGS, the names Megatron-LM
core_v0.16.1's parser defines (some of which it also copies or converts into the config: those
conversions are repeated below). Usage: megatron_core_parse.py FILE...
"""
import dataclasses
import json
import shlex
import sys
import typing
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
from megatron.core.transformer import MLATransformerConfig, TransformerConfig  # noqa: E402

TRAINING_FLAGS = {
    "micro-batch-size", "global-batch-size", "seq-length", "max-position-embeddings", "position-embedding-type",
    "rotary-base", "use-distributed-optimizer", "overlap-grad-reduce", "overlap-param-gather", "use-megatron-fsdp",
    "data-parallel-sharding-strategy", "ckpt-format", "accumulate-allreduce-grads-in-fp32", "attention-backend",
    "untie-embeddings-and-output-weights", "tokenizer-type", "tokenizer-model", "vocab-size",
    "make-vocab-size-divisible-by", "group-query-attention", "num-layers-per-virtual-pipeline-stage", "swiglu",
    "disable-bias-linear", "num-experts", "bf16", "fp8-format", "multi-latent-attention", "moe-layer-freq",
}
"""Megatron-LM core_v0.16.1 training-argument names (read from its arguments.py) that are not
TransformerConfig fields of the same name."""


def flags(args: list[str]) -> dict:
    out, i = {}, 0
    while i < len(args):
        name = args[i][2:]
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[name], i = args[i + 1], i + 2
        else:
            out[name], i = True, i + 1
    return out


def typed(field_type, value):
    if value is True:
        return True
    origin = [a for a in typing.get_args(field_type) if a is not type(None)] or [field_type]
    for t in origin:
        if t in (int, float, str):
            return t(value)
    return value


def config_of(f: dict):
    cls = MLATransformerConfig if "multi-latent-attention" in f else TransformerConfig
    fields = {fl.name: fl for fl in dataclasses.fields(cls)}
    kw, unknown = {}, []
    for name, value in f.items():
        field = name.replace("-", "_")
        if name in TRAINING_FLAGS:
            continue
        if field in fields:
            kw[field] = typed(fields[field].type, value)
        else:
            unknown.append(name)
    # the renames of Megatron-LM's core_transformer_config_from_args
    kw["gated_linear_unit"] = "swiglu" in f
    if "swiglu" in f:
        kw["activation_func"] = torch.nn.functional.silu
    kw["add_bias_linear"] = "disable-bias-linear" not in f
    if "num-experts" in f:
        kw["num_moe_experts"] = int(f["num-experts"])
    if "num-layers-per-virtual-pipeline-stage" in f:
        kw["virtual_pipeline_model_parallel_size"] = int(f["num-layers"]) // (
            int(f["pipeline-model-parallel-size"]) * int(f["num-layers-per-virtual-pipeline-stage"]))
    if "bf16" in f:
        kw["bf16"] = True
    kw["params_dtype"] = kw["pipeline_dtype"] = torch.bfloat16 if "bf16" in f else torch.float32
    if "fp8-format" in f:
        kw["fp8"] = f["fp8-format"]
    if "moe-layer-freq" in f:
        kw["moe_layer_freq"] = json.loads(f["moe-layer-freq"])
    return cls(**kw), unknown


def main(paths: list[str]) -> None:
    for path in paths:
        f = flags(shlex.split(open(path).read(), comments=True))
        cfg, unknown = config_of(f)
        print(json.dumps({"path": path, "unknown_flags": unknown, "config": type(cfg).__name__,
                          "tp": cfg.tensor_model_parallel_size, "pp": cfg.pipeline_model_parallel_size,
                          "cp": cfg.context_parallel_size, "ep": cfg.expert_model_parallel_size,
                          "sp": cfg.sequence_parallel, "vpp": cfg.virtual_pipeline_model_parallel_size,
                          "layers": cfg.num_layers, "hidden": cfg.hidden_size, "ffn": cfg.ffn_hidden_size,
                          "heads": cfg.num_attention_heads, "query_groups": cfg.num_query_groups,
                          "kv_channels": cfg.kv_channels, "experts": cfg.num_moe_experts,
                          "recompute": cfg.recompute_granularity, "gated": cfg.gated_linear_unit,
                          "normalization": cfg.normalization}))


if __name__ == "__main__":
    main(sys.argv[1:])

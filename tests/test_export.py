"""Launch configs: each export parses with its framework's own format and names the layout's degrees."""
import argparse
import shlex
import tomllib

import pytest
import yaml

from simulator.errors import ScenarioError
from simulator.report.export import (export_best, export_layout, megatron_args, to_megatron, to_nanotron,
                              to_torchtitan, unsupported)
from simulator.scenario import load_scenario
from simulator.sweep.search import sweep_base
from simulator.sweep.tasks import Evaluation, candidate_scenario
from simulator.sweep.space import Layout, layout_of

TORCHTITAN_SCHEDULES = {"afab": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B", "zbv": "ZBVZeroBubble",
                        "dualpipev": "DualPipeV"}
"""torch.distributed.pipelining's `get_schedule_class` names torchtitan's `pipeline_parallel_schedule` takes."""

S70 = "scenarios/70b_512gpu.yaml"
LAYOUTS = [
    ["parallel.tp=8", "parallel.pp=8", "parallel.dp=8", "parallel.zero=1"],
    ["parallel.tp=4", "parallel.pp=4", "parallel.dp=32", "parallel.zero=0", "parallel.pp_schedule=interleaved-1f1b",
     "parallel.vpp=2", "training.recompute=full", "training.micro_batch=2"],
    ["parallel.tp=2", "parallel.pp=1", "parallel.dp=128", "parallel.cp=2", "parallel.zero=3", "training.recompute=none"],
    ["parallel.tp=8", "parallel.pp=2", "parallel.dp=16", "parallel.cp=2", "parallel.zero=2", "parallel.sp=false"],
]


@pytest.fixture(params=range(len(LAYOUTS)))
def sc(request):
    return load_scenario(S70, LAYOUTS[request.param])


def megatron_parser():
    p = argparse.ArgumentParser()
    for flag in ("tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
                 "expert-model-parallel-size", "micro-batch-size", "global-batch-size", "seq-length",
                 "max-position-embeddings", "num-layers-per-virtual-pipeline-stage", "num-layers", "hidden-size",
                 "ffn-hidden-size", "num-attention-heads", "num-query-groups", "recompute-num-layers", "num-experts",
                 "moe-router-topk", "moe-ffn-hidden-size"):
        p.add_argument("--" + flag, type=int)
    for flag in ("recompute-granularity", "recompute-method", "data-parallel-sharding-strategy", "normalization",
                 "position-embedding-type", "fp8-format"):
        p.add_argument("--" + flag)
    for flag in ("sequence-parallel", "use-distributed-optimizer", "use-megatron-fsdp", "overlap-grad-reduce",
                 "overlap-param-gather", "tp-comm-overlap", "bf16", "use-flash-attn", "group-query-attention", "swiglu",
                 "disable-bias-linear", "untie-embeddings-and-output-weights"):
        p.add_argument("--" + flag, action="store_true")
    return p


def test_torchtitan_toml_names_the_degrees(sc):
    doc = tomllib.loads(to_torchtitan(sc))
    par = doc["parallelism"]
    p = sc.parallel
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == sc.dp
    assert (par["data_parallel_shard_degree"] > 1) == (p.zero >= 1)
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"], par["context_parallel_degree"],
            par["expert_parallel_degree"]) == (p.tp, p.pp, p.cp, p.ep)
    if p.pp > 1:
        assert par["pipeline_parallel_schedule"] == TORCHTITAN_SCHEDULES[p.pp_schedule]
        assert par["pipeline_parallel_microbatch_size"] == sc.training.micro_batch
    assert doc["activation_checkpoint"]["mode"] == sc.training.recompute
    assert doc["training"]["global_batch_size"] == sc.training.global_batch
    assert doc["training"]["seq_len"] == sc.training.seq_len


def test_megatron_flags_parse_and_imply_the_same_dp(sc):
    text = to_megatron(sc)
    args = megatron_parser().parse_args(shlex.split(text, comments=True))
    p = sc.parallel
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.context_parallel_size,
            args.expert_model_parallel_size) == (p.tp, p.pp, p.cp, p.ep)
    assert sc.gpus // (args.tensor_model_parallel_size * args.pipeline_model_parallel_size * args.context_parallel_size) == sc.dp
    assert args.sequence_parallel == (p.sp and p.tp > 1)
    assert args.use_distributed_optimizer == (p.zero == 1)
    assert args.micro_batch_size == sc.training.micro_batch and args.global_batch_size == sc.training.global_batch
    if p.pp_schedule == "interleaved-1f1b":
        assert sc.model.layers // (p.pp * args.num_layers_per_virtual_pipeline_stage) == p.vpp
    assert (args.recompute_granularity or "none") == sc.training.recompute
    assert args.num_layers == sc.model.layers and args.num_query_groups == sc.model.n_kv


def test_nanotron_yaml_names_the_degrees():
    sc = load_scenario(S70, ["parallel.tp=4", "parallel.pp=4", "parallel.dp=32", "training.micro_batch=2"])
    doc = yaml.safe_load(to_nanotron(sc))
    par, tok = doc["parallelism"], doc["tokens"]
    assert (par["dp"], par["tp"], par["pp"], par["pp_engine"]) == (32, 4, 4, "1f1b")
    assert par["tp_mode"] == "REDUCE_SCATTER"
    assert tok["micro_batch_size"] * tok["batch_accumulation_per_replica"] * par["dp"] == sc.training.global_batch
    assert doc["optimizer"]["zero_stage"] == 1
    assert doc["model"]["model_config"]["num_key_value_heads"] == 8


def test_frameworks_refuse_what_they_cannot_run():
    z3 = load_scenario(S70, ["parallel.zero=3"])
    assert unsupported(z3, "nanotron") and not unsupported(z3, "megatron") and not unsupported(z3, "torchtitan")
    zb = load_scenario(S70, ["parallel.pp_schedule=zb-h1"])
    assert unsupported(zb, "megatron") and unsupported(zb, "torchtitan")
    with pytest.raises(ScenarioError):
        export_layout(z3, "nanotron")


def test_export_best_skips_to_a_layout_the_framework_runs():
    sc, raw, bd = sweep_base(S70)
    first = Layout(tp=2, pp=1, cp=1, ep=1, dp=256, micro_batch=1, sp=True, zero=3, pp_schedule="1f1b", vpp=1, recompute="none")
    second = layout_of(sc)
    ranked = [Evaluation(layout=first, status="ok"), Evaluation(layout=second, status="ok")]
    text, chosen, warnings = export_best(ranked, "nanotron", sc, raw, bd)
    assert chosen.layout == second
    assert any("ZeRO-3" in w for w in warnings) and any("#2" in w for w in warnings)
    assert yaml.safe_load(text)["parallelism"]["tp"] == 8
    text, chosen, warnings = export_best(ranked, "megatron", sc, raw, bd)
    assert chosen.layout == first and "--data-parallel-sharding-strategy optim_grads_params" in text


def test_moe_export_names_expert_parallel():
    sc, raw, bd = sweep_base("scenarios/mixtral_ep.yaml")
    built = candidate_scenario(raw, bd, layout_of(sc))
    args = megatron_parser().parse_args(megatron_args(built))
    assert args.expert_model_parallel_size == sc.parallel.ep and args.num_experts == 8
    assert tomllib.loads(to_torchtitan(built))["parallelism"]["expert_parallel_degree"] == sc.parallel.ep
    assert yaml.safe_load(to_nanotron(built))["parallelism"]["expert_parallel_size"] == sc.parallel.ep

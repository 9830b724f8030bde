"""Launch configs: each export names the layout's degrees, the model in full, the release it targets, and
why its layout is (or is not) the sweep's first. The frameworks' own parsers read them in
test_export_frameworks.py (slow: they install the frameworks)."""
import shlex
import tomllib

import pytest
import yaml

from simulator.errors import ScenarioError
from simulator.report.export import (TARGETS, export_best, export_layout, megatron_args, nanotron_config,
                                     to_megatron, to_nanotron, to_torchtitan, to_torchtitan_toml, torch_schedule, torchtitan_args,
                                     unsupported)
from simulator.scenario import load_scenario
from simulator.sweep.search import sweep_base
from simulator.sweep.space import Layout, layout_of
from simulator.sweep.tasks import Evaluation, candidate_scenario

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


def flags(args: list[str]) -> dict:
    """--name value / --name (True) pairs; a flag given twice is an error."""
    out, i = {}, 0
    while i < len(args):
        assert args[i].startswith("--"), args[i]
        name = args[i][2:]
        assert name not in out, f"--{name} given twice"
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[name] = args[i + 1]
            i += 2
        else:
            out[name] = True
            i += 1
    return out


def test_torchtitan_args_name_the_degrees_and_a_registry_config(sc):
    args = torchtitan_args(sc)
    assert args[-1] == f"activation-checkpoint:{sc.training.recompute}"  # tyro's subcommand comes last
    f = flags(args[:-1])
    p = sc.parallel
    assert (f["module"], f["config"]) == ("llama3", "llama3_70b")
    assert int(f["parallelism.data-parallel-replicate-degree"]) * int(f["parallelism.data-parallel-shard-degree"]) == sc.dp
    assert (int(f["parallelism.data-parallel-shard-degree"]) > 1) == (p.zero >= 1)
    assert [int(f[f"parallelism.{k}-parallel-degree"]) for k in ("tensor", "pipeline", "context", "expert")] == [p.tp, p.pp, p.cp, p.ep]
    if p.pp > 1:
        assert f["parallelism.pipeline-parallel-schedule"] == torch_schedule(p.pp_schedule)
        assert int(f["training.local-batch-size"]) * sc.dp == sc.training.global_batch
    assert int(f["training.global-batch-size"]) == sc.training.global_batch


def test_torchtitan_file_splits_back_into_the_arguments(sc):
    assert shlex.split(to_torchtitan(sc), comments=True) == torchtitan_args(sc)


def test_torchtitan_02_toml_names_the_degrees_and_says_it_is_for_02(sc):
    text = to_torchtitan_toml(sc)
    assert "torchtitan 0.2" in text.splitlines()[0]
    doc = tomllib.loads(text)
    par, p = doc["parallelism"], sc.parallel
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == sc.dp
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"], par["context_parallel_degree"],
            par["expert_parallel_degree"]) == (p.tp, p.pp, p.cp, p.ep)
    assert doc["model"] == {"name": "llama3", "flavor": "70B"}
    assert doc["activation_checkpoint"]["mode"] == sc.training.recompute


def test_megatron_flags_name_the_layout(sc):
    f = flags(shlex.split(to_megatron(sc), comments=True))
    p = sc.parallel
    assert [int(f[k]) for k in ("tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
                                "expert-model-parallel-size")] == [p.tp, p.pp, p.cp, p.ep]
    assert ("sequence-parallel" in f) == (p.sp and p.tp > 1)
    assert ("use-distributed-optimizer" in f) == (p.zero == 1)
    assert ("use-megatron-fsdp" in f) == (p.zero >= 2)
    assert int(f["micro-batch-size"]) == sc.training.micro_batch and int(f["global-batch-size"]) == sc.training.global_batch
    if p.pp_schedule == "interleaved-1f1b":
        assert sc.model.layers // (p.pp * int(f["num-layers-per-virtual-pipeline-stage"])) == p.vpp
    assert f.get("recompute-granularity", "none") == sc.training.recompute


def test_megatron_flags_name_the_whole_model():
    sc = load_scenario(S70)
    f = flags(megatron_args(sc))
    m = sc.model
    assert (int(f["num-layers"]), int(f["hidden-size"]), int(f["ffn-hidden-size"]), int(f["num-attention-heads"]),
            int(f["num-query-groups"]), int(f["kv-channels"])) == (80, 8192, 28672, 64, 8, 128)
    assert f["rotary-base"] == "500000" and f["position-embedding-type"] == "rope" and f["normalization"] == "RMSNorm"
    assert {"swiglu", "disable-bias-linear", "untie-embeddings-and-output-weights", "group-query-attention",
            "bf16"} <= set(f)
    assert int(f["seq-length"]) == sc.training.seq_len == int(f["max-position-embeddings"])
    assert f["tokenizer-model"] == "meta-llama/Meta-Llama-3-70B"
    # Megatron pads the vocabulary to a multiple of divisor * TP: this divisor leaves 128256 as it is
    assert m.vocab % (int(f["make-vocab-size-divisible-by"]) * sc.parallel.tp) == 0


def test_megatron_names_moe_and_a_vocab_without_a_known_tokenizer():
    sc, raw, bd = sweep_base("scenarios/mixtral_ep.yaml")
    f = flags(megatron_args(candidate_scenario(raw, bd, layout_of(sc))))
    assert int(f["expert-model-parallel-size"]) == sc.parallel.ep and int(f["num-experts"]) == 8
    assert int(f["moe-router-topk"]) == 2 and int(f["moe-ffn-hidden-size"]) == 14336 and f["rotary-base"] == "1000000"
    gpt = load_scenario(S70, ["model=gpt3-175b", "training.seq_len=2048"])
    g = flags(megatron_args(gpt))
    assert g["position-embedding-type"] == "learned_absolute" and "swiglu" not in g and "untie-embeddings-and-output-weights" not in g
    assert g["tokenizer-type"] == "NullTokenizer" and int(g["vocab-size"]) + 1 == gpt.model.vocab  # + end-of-document


def test_megatron_header_sets_cuda_connections_as_megatron_asks():
    tp = to_megatron(load_scenario(S70, LAYOUTS[0]))
    fsdp = to_megatron(load_scenario(S70, LAYOUTS[2]))
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun" in tp and "CUDA_DEVICE_MAX_CONNECTIONS=32 torchrun" in fsdp


def test_nanotron_config_names_the_degrees_and_every_section():
    sc = load_scenario(S70, ["parallel.tp=4", "parallel.pp=4", "parallel.dp=32", "training.micro_batch=2"])
    doc = yaml.safe_load(to_nanotron(sc))
    assert doc == nanotron_config(sc)
    par, tok = doc["parallelism"], doc["tokens"]
    assert (par["dp"], par["tp"], par["pp"], par["pp_engine"]) == (32, 4, 4, "1f1b")
    assert par["tp_mode"] == "REDUCE_SCATTER"
    assert tok["micro_batch_size"] * tok["batch_accumulation_per_replica"] * par["dp"] == sc.training.global_batch
    assert doc["optimizer"]["zero_stage"] == 1
    assert doc["model"]["model_config"]["num_key_value_heads"] == 8
    assert {"general", "parallelism", "model", "tokenizer", "tokens", "optimizer", "checkpoints", "logging", "data"} == set(doc)


@pytest.mark.parametrize("framework,writer", [("torchtitan", to_torchtitan), ("torchtitan-0.2", to_torchtitan_toml),
                                              ("megatron", to_megatron), ("nanotron", to_nanotron)])
def test_every_export_names_the_release_it_targets(framework, writer):
    text = writer(load_scenario(S70))
    assert TARGETS[framework] in text.splitlines()[0] and TARGETS[framework] in text.splitlines()[1]


def test_frameworks_refuse_what_they_cannot_run():
    z3 = load_scenario(S70, ["parallel.zero=3"])
    assert unsupported(z3, "nanotron") and not unsupported(z3, "megatron") and not unsupported(z3, "torchtitan")
    zb = load_scenario(S70, ["parallel.pp_schedule=zb-h1"])
    assert unsupported(zb, "megatron") and unsupported(zb, "torchtitan") and unsupported(zb, "torchtitan-0.2")
    mixtral = load_scenario("scenarios/mixtral_ep.yaml")
    assert any("model mixtral-8x7b" in r for r in unsupported(mixtral, "torchtitan"))
    assert unsupported(load_scenario(S70, ["parallel.cp=2", "parallel.dp=4"]), "nanotron")
    dsv3 = ["model=deepseek-v3", "parallel.ep=8", "parallel.tp=1", "parallel.pp=1", "parallel.dp=512"]
    assert not unsupported(load_scenario(S70, dsv3 + ["parallel.zero=1"]), "torchtitan")
    assert any("expert parallel 8" in r for r in unsupported(load_scenario(S70, dsv3 + ["parallel.zero=0"]), "torchtitan"))
    with pytest.raises(ScenarioError):
        export_layout(z3, "nanotron")


def test_export_of_the_first_layout_says_it_is_the_first():
    sc, raw, bd = sweep_base(S70)
    first = Evaluation(layout=layout_of(sc), status="ok", summary={"tokens_per_s_per_gpu": 1000.0, "estimator": "analytic"})
    text, chosen, warnings = export_best([first], "megatron", sc, raw, bd)
    assert chosen is first and "this is the sweep's #1 layout (1000 tokens/s/GPU, analytic)" in text
    assert not any("exporting #" in w for w in warnings)


def test_export_best_skips_to_a_layout_the_framework_runs_and_says_why():
    sc, raw, bd = sweep_base(S70)
    first = Layout(tp=2, pp=1, cp=1, ep=1, dp=256, micro_batch=1, sp=True, zero=3, pp_schedule="1f1b", vpp=1, recompute="none")
    second = layout_of(sc)
    ranked = [Evaluation(layout=first, status="ok", summary={"tokens_per_s_per_gpu": 1200.0, "estimator": "engine"}),
              Evaluation(layout=second, status="ok", summary={"tokens_per_s_per_gpu": 1000.0, "estimator": "engine"})]
    text, chosen, warnings = export_best(ranked, "nanotron", sc, raw, bd)
    assert chosen.layout == second
    assert any("#2" in w for w in warnings) and any("ZeRO-3" in w for w in warnings)
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert any("#2 layout" in line and "the best that nanotron 0.4 can run; #1 reaches 1200" in line for line in header)
    assert any(line.startswith("# not exported: #1 ") and "ZeRO-3" in line for line in header)
    assert yaml.safe_load(text)["parallelism"]["tp"] == 8
    text, chosen, warnings = export_best(ranked, "megatron", sc, raw, bd)
    assert chosen.layout == first and "--data-parallel-sharding-strategy optim_grads_params" in text


def test_export_best_explains_when_no_layout_can_run():
    sc, raw, bd = sweep_base("scenarios/mixtral_ep.yaml")
    ranked = [Evaluation(layout=layout_of(sc), status="ok", summary={"tokens_per_s_per_gpu": 1.0})]
    with pytest.raises(ScenarioError, match="model mixtral-8x7b"):
        export_best(ranked, "torchtitan", sc, raw, bd)


def test_torchtitan_02_toml_writes_the_float8_section_with_the_fsdp_options():
    sc = load_scenario("scenarios/8b_8gpu.yaml",
                       ["framework={name: torchtitan, float8: true, float8_fsdp_all_gather: true, "
                        "float8_precompute_scale: true, float8_filter_output: true}", "training.precision=fp8"])
    text = to_torchtitan_toml(sc)
    section = text.split("[quantize.linear.float8]\n")[1].splitlines()
    assert section[:3] == ["enable_fsdp_float8_all_gather = true", "precompute_float8_dynamic_scale_for_fsdp = true",
                           'filter_fqns = ["output"]']


def test_a_parallel_block_and_another_optimizer_are_named_as_approximations():
    from simulator.report.export import approximations
    sc = load_scenario("scenarios/8b_8gpu.yaml", ["model.parallel_block=true", "training.optimizer=lamb"])
    notes = " ".join(approximations(sc, "megatron"))
    assert "parallel block" in notes and "lamb is not written" in notes

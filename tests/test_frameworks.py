"""Frameworks as inputs (`framework:`, simulator/frameworks/*.yaml): what each says, and what the scenario's
words then mean."""
from pathlib import Path

import pytest

from simulator.errors import ScenarioError
from simulator.frameworks.spec import FRAMEWORKS, load_framework
from simulator.run import simulate
from simulator.scenario import load_scenario, scenario_from_mapping

ROOT = Path(__file__).resolve().parent.parent
SEVENTY_B = ROOT / "scenarios" / "70b_512gpu.yaml"


def mapping(framework=None, **parallel) -> dict:
    """A 70B layout on 64 DGX H100 nodes, 8 micro-batches per pipeline, with `parallel` on top."""
    raw = {"model": "llama3-70b", "training": {"seq_len": 4096, "global_batch": 512, "micro_batch": 1},
           "cluster": {"topology": "dgx-h100", "nodes": 64},
           "parallel": {"tp": 8, "pp": 8, "sp": True, **parallel}}
    if framework is not None:
        raw["framework"] = framework
    return raw


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_every_framework_file_loads_and_sources_every_entry(name):
    fw = load_framework(name)
    assert fw.name == name and fw.read
    entries = [*fw.zero.values(), *fw.options.values(), *fw.defaults.values(), *fw.efficiency.values(),
               fw.attention_kernel, fw.pp_split]
    assert all(e.source.strip() for e in entries)
    assert set(fw.zero) == {"0", "1", "2", "3"}, "every stage a user may write says what it means here"


def test_megatron_zero2_is_its_distributed_optimizer_and_deepspeed_zero2_reduces_every_micro_batch():
    step = {}
    for fw in ("megatron", "deepspeed"):
        for zero in (1, 2):
            sc = scenario_from_mapping(mapping(fw, zero=zero, overlap_dp=False))
            step[fw, zero] = simulate(sc, estimator="analytic")["iteration_time_s"]
            if fw == "megatron":
                assert sc.parallel.zero == 1
    assert step["megatron", 2] == step["megatron", 1]
    assert step["deepspeed", 2] > step["deepspeed", 1] * 1.02, "a reduce-scatter per micro-batch, 8 per step"
    sc = scenario_from_mapping(mapping("megatron", zero=2))
    assert any("distributed optimizer" in n for n in sc.framework.notes())


@pytest.mark.parametrize("framework, zero, pp", [("torchtitan", 1, 1), ("torchtitan", 2, 8), ("nanotron", 2, 8),
                                                 ("nanotron", 3, 1)])
def test_a_zero_stage_the_framework_does_not_have_is_refused_with_what_it_has(framework, zero, pp):
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(mapping(framework, zero=zero, sp=True, pp=pp))
    assert e.value.path == "parallel.zero" and framework in e.value.problem
    assert "zero3" in e.value.allowed or "zero1" in e.value.allowed


def test_torchtitan_fsdp_under_pipelining_is_priced_as_zero1():
    """torch.distributed.pipelining keeps FSDP2's parameters and gradients unsharded across micro-batches and
    reduce-scatters once per step: ZeRO-1's traffic and memory; without PP torchtitan's FSDP2 is ZeRO-3."""
    flat = scenario_from_mapping(mapping("torchtitan", zero=3, pp=1))
    piped = scenario_from_mapping(mapping("torchtitan", zero=3))
    assert (flat.parallel.zero, flat.parallel.reshard_after_forward) == (3, True)
    assert piped.parallel.zero == 1 and any("pipelining" in n for n in piped.framework.notes(piped.parallel.pp))
    again = scenario_from_mapping(mapping("torchtitan", zero=1))  # the same words, as a sweep re-validates them
    assert again.parallel == piped.parallel


def test_torchtitan_splits_layers_unevenly_counting_embedding_and_output():
    sc = scenario_from_mapping(mapping("torchtitan", zero=3, pp=32, tp=2))
    assert sc.parallel.pp_layers[:2] == [2, 3] and sum(sc.parallel.pp_layers) == 80 and sc.parallel.pp_layers[-1] == 1


def test_torchtitan_runs_sequence_parallel_whenever_tp_is_on():
    sc = scenario_from_mapping(mapping("torchtitan", zero=3, sp=None) | {"parallel": {"tp": 8, "pp": 8, "zero": 3}})
    assert sc.parallel.sp is True


def test_nanotron_balances_uneven_stages_where_megatron_needs_them_to_divide():
    raw = mapping(None, pp=32, tp=2) | {"training": {"seq_len": 4096, "global_batch": 512, "micro_batch": 1}}
    raw["cluster"] = {"topology": "dgx-h100", "nodes": 64}
    sc = scenario_from_mapping({**raw, "framework": "nanotron", "parallel": {**raw["parallel"], "zero": 0}})
    layers = sc.parallel.pp_layers
    assert len(layers) == 32 and sum(layers) == 80 and max(layers) - min(layers) >= 1
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping({**raw, "framework": "megatron"})
    assert e.value.path == "parallel.pp"


def test_megatron_switches_default_off_as_pretrain_gpt_does_and_an_option_turns_them_on():
    bare = scenario_from_mapping(mapping("megatron"))
    assert (bare.parallel.overlap_dp, bare.parallel.overlap_tp, bare.parallel.zero) == (False, False, 0)
    on = scenario_from_mapping(mapping({"name": "megatron", "distributed_optimizer": True,
                                        "overlap_grad_reduce": True, "overlap_param_gather": True}))
    assert (on.parallel.overlap_dp, on.parallel.zero, on.parallel.zero_gather) == (True, 1, "bucketed")
    assert on.parallel.dp_bucket_mb == 160.0, "Megatron's 40 M-parameter buckets of fp32 gradients"


def test_an_option_and_a_scenario_key_that_disagree_are_refused():
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(mapping({"name": "megatron", "overlap_grad_reduce": True}, overlap_dp=False))
    assert e.value.path == "framework.overlap_grad_reduce" and "parallel.overlap_dp" in e.value.problem


@pytest.mark.parametrize("framework, path", [
    ("pytorch-lightning", "framework"),
    ({"overlap_grad_reduce": True}, "framework.name"),
    ({"name": "megatron", "compile": True}, "framework.compile"),
    ({"name": "megatron", "overlap_grad_reduce": "yes"}, "framework.overlap_grad_reduce"),
    ({"name": "deepspeed", "reduce_bucket_size": -5}, "framework.reduce_bucket_size"),
    (["megatron"], "framework"),
])
def test_bad_framework_input_names_the_key(framework, path):
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(mapping(framework))
    assert e.value.path == path


def test_an_option_can_be_set_from_the_command_line_on_a_framework_given_by_name():
    sc = load_scenario(ROOT / "scenarios" / "1b_1gpu.yaml", ["framework.tp_comm_overlap=true"])
    assert sc.parallel.overlap_tp is True and sc.framework.given == ("tp_comm_overlap",)
    with pytest.raises(ScenarioError):  # the 70B scenario says overlap_tp: false itself
        load_scenario(SEVENTY_B, ["framework.tp_comm_overlap=true"])


def test_deepspeed_bucket_size_in_elements_becomes_megabytes_of_bf16_gradients():
    sc = scenario_from_mapping(mapping({"name": "deepspeed", "reduce_bucket_size": 50_000_000}, zero=1))
    assert sc.parallel.dp_bucket_mb == pytest.approx(100.0)


def test_the_report_names_the_framework_it_priced():
    r = simulate(load_scenario(SEVENTY_B), estimator="analytic")
    assert r["framework"]["name"] == "megatron" and r["framework"]["attention_kernel"]
    given = {o["name"] for o in r["framework"]["options"] if o["given"]}
    assert given == {"distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather"}


def test_megatrons_fitted_fp8_gemm_efficiency_prices_fp8_gemms_only():
    """TE's `gemm_fp8_vs_bf16` (fitted on the corpus fit split) replaces the FP8 curve's peak with the share of peak
    the GPU's BF16 GEMMs sustain times the fitted 1.036 (0.59 on H100, BF16 at 0.57); BF16 GEMMs keep theirs."""
    from simulator.cost.costs import build_cost_model
    mega = build_cost_model(scenario_from_mapping(mapping("megatron")))
    titan = build_cost_model(scenario_from_mapping(mapping("torchtitan", zero=3)))
    assert load_framework("megatron").efficiency["gemm_fp8_vs_bf16"].value == 1.036
    assert mega.gemm_curve("fp8")[0] == pytest.approx(1.036 * mega.gemm_curve("bf16")[0]) == pytest.approx(1.036 * 0.57)
    published = titan.kernels().gemm["fp8"].peak_efficiency * titan.sustained_gemm_fraction()
    assert titan.gemm_curve("fp8")[0] == published, "torchtitan keeps the published FP8 curve (as sustained in training)"
    assert mega.gemm_curve("bf16") == titan.gemm_curve("bf16")


@pytest.mark.parametrize("name,head_dtype", [("megatron", "bf16"), ("torchtitan", "fp8")])
def test_the_lm_head_runs_in_fp8_only_where_the_framework_converts_its_output_layer(name, head_dtype):
    """Megatron's output layer is not a TE module (BF16 under FP8); torchtitan's float8 converter swaps it too."""
    from simulator.plan.step_ops import head_backward, head_forward
    raw = mapping(name, zero=3 if name == "torchtitan" else 1)
    raw["training"]["precision"] = "fp8"
    sc = scenario_from_mapping(raw)
    fwd = [n.op for n in head_forward(sc) if n.op.name == "lm_head"]
    b, w = head_backward(sc)
    grads = [n.op for n in (*b, *w) if n.op.name.startswith("lm_head_")]
    assert len(fwd) == 1 and len(grads) == 2
    assert {op.dtype for op in fwd + grads} == {head_dtype}
    assert load_framework(name).fp8_output_layer.value is (head_dtype == "fp8")


def test_a_framework_file_with_a_non_boolean_grad_accum_cast_is_refused():
    from dataclasses import replace
    from simulator.frameworks.spec import Sourced, _check
    fw = replace(load_framework("deepspeed"), grad_accum_cast=Sourced(value="yes", source="a test"))
    with pytest.raises(ScenarioError) as e:
        _check(fw, "deepspeed.yaml")
    assert "grad_accum_cast" in str(e.value) and "true | false" in str(e.value)


def test_an_option_set_on_the_command_line_beside_the_key_it_sets_stands_and_must_agree():
    from simulator.scenario import load_scenario
    sets = ["framework.float8=true", "framework.float8_fsdp_all_gather=true", "training.precision=fp8"]
    sc = load_scenario("scenarios/8b_8gpu.yaml", sets)
    options = dict(sc.framework.options)
    assert options["float8"] is True and options["float8_fsdp_all_gather"] is True and sc.training.precision == "fp8"
    with pytest.raises(ScenarioError) as e:
        load_scenario("scenarios/8b_8gpu.yaml", ["framework.float8=true", "training.precision=bf16"])
    assert e.value.path == "framework.float8"


def test_a_file_s_option_gives_way_to_the_key_it_sets_on_the_command_line(tmp_path):
    from simulator.scenario import load_scenario
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\nframework: {name: torchtitan, float8: true}\ncluster: {topology: dgx-h100, nodes: 1}\n"
                 "parallel: {dp: 8, zero: 3}\ntraining: {seq_len: 8192, global_batch: 8, precision: fp8}\n")
    sc = load_scenario(f, ["training.precision=bf16"])
    assert sc.training.precision == "bf16" and dict(sc.framework.options)["float8"] is False


def test_megatrons_precision_aware_optimizer_sets_the_adam_moment_dtype():
    """framework.exp_avg_dtype (--use-precision-aware-optimizer --exp-avg-dtype): the scenario's moments follow it."""
    sc = load_scenario(ROOT / "scenarios" / "70b_512gpu.yaml", ["framework.exp_avg_dtype=bf16"])
    assert sc.training.adam_moment_dtype == "bf16"
    assert load_scenario(ROOT / "scenarios" / "70b_512gpu.yaml").training.adam_moment_dtype == "fp32"


def _dropless_note(framework: str, ep: int, capacity_factor=None, model="mixtral-8x7b") -> bool:
    """Whether the report's framework notes say the MoE dispatch's host wait is not priced."""
    raw = {"framework": framework, "model": model, "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1},
           "cluster": {"topology": "dgx-h100", "nodes": 1}, "parallel": {"dp": 8, "ep": ep, "zero": 3 if framework == "torchtitan" else 1}}
    sc = scenario_from_mapping(raw, [f"model.moe.capacity_factor={capacity_factor}"] if capacity_factor else [])
    assert sc.model.moe.capacity_factor == capacity_factor
    notes = sc.framework.to_json(sc.parallel.pp, None, sc.model.moe, sc.parallel.ep)["notes"]
    return any("token-dropless MoE dispatch" in n for n in notes)


@pytest.mark.parametrize("framework, ep, capacity_factor, said", [
    ("megatron", 8, None, True), ("megatron", 1, None, True),  # before the EP all-to-all / before the grouped GEMM
    ("megatron", 8, 1.25, False),
    ("torchtitan", 8, None, True), ("torchtitan", 1, None, False),  # only its EP dispatcher reads splits on the host
    ("deepspeed", 8, None, False)])
def test_a_token_dropless_moe_layout_is_told_its_dispatch_host_wait_is_not_priced(framework, ep, capacity_factor, said):
    assert _dropless_note(framework, ep, capacity_factor) is said


def test_a_dense_model_gets_no_moe_dispatch_note():
    raw = {"model": "llama3-8b", "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1},
           "cluster": {"topology": "dgx-h100", "nodes": 1}, "parallel": {"dp": 8}}
    sc = scenario_from_mapping(raw)
    assert not any("MoE" in n for n in sc.framework.notes(1, sc.model.moe, sc.parallel.ep))

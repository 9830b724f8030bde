"""Names as users write them. The frameworks' own names for a pipeline schedule read as the contract's
(`schedules.SCHEDULE_ALIASES`), and model chunks without a named schedule get the interleaved one where the
framework runs it (Megatron selects it from the virtual pipeline size); a model mapping without an FFN size gets
Megatron's; a model named as on the Hugging Face hub (`meta-llama/Llama-3.1-8B`) loads its preset."""
from pathlib import Path

import pytest

from simulator.errors import ScenarioError
from simulator.plan.schedules import SCHEDULE_ALIASES, SCHEDULES, schedule_alias
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
S8 = str(ROOT / "scenarios/8b_8gpu.yaml")
PP2 = ["parallel.pp=2", "parallel.dp=4", "parallel.zero=1"]


@pytest.mark.parametrize("written, name", [
    ("Interleaved1F1B", "interleaved-1f1b"), ("interleaved_1f1b", "interleaved-1f1b"),
    ("ScheduleInterleaved1F1B", "interleaved-1f1b"), ("interleaved 1F1B", "interleaved-1f1b"),
    ("GPipe", "afab"), ("ZBVZeroBubble", "zbv"), ("DualPipeV", "dualpipev"), ("1F1B", "1f1b"), ("ZB-H1", "zb-h1")])
def test_a_framework_name_reads_as_the_contract_name(written, name):
    assert schedule_alias(written) == name


def test_every_alias_names_a_registered_schedule_and_every_schedule_reads_as_itself():
    assert set(SCHEDULE_ALIASES.values()) <= set(SCHEDULES)
    assert all(schedule_alias(n) == n for n in SCHEDULES)


def test_torchtitans_interleaved_zero_bubble_is_not_read_as_zb_h1():
    # several stages per rank in torchtitan; clustersim's zb-h1 has one: left for the choices to refuse
    assert schedule_alias("InterleavedZeroBubble") == "InterleavedZeroBubble"


def test_the_scenario_reads_an_alias_and_refuses_an_unknown_name():
    sc = load_scenario(S8, PP2 + ["parallel.vpp=2", "parallel.pp_schedule=Interleaved1F1B"])
    assert sc.parallel.pp_schedule == "interleaved-1f1b"
    with pytest.raises(ScenarioError) as e:
        load_scenario(S8, PP2 + ["parallel.pp_schedule=LoopedBFS"])
    assert e.value.path == "parallel.pp_schedule" and "interleaved-1f1b" in e.value.allowed


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_chunks_without_a_schedule_run_interleaved_where_the_framework_has_it(framework):
    sc = load_scenario(S8, PP2 + ["parallel.vpp=2", f"framework={framework}"])
    assert sc.parallel.pp_schedule == "interleaved-1f1b"
    assert load_scenario(S8, PP2 + [f"framework={framework}"]).parallel.pp_schedule == "1f1b"


def test_a_schedule_the_user_names_is_kept_and_checked():
    with pytest.raises(ScenarioError) as e:
        load_scenario(S8, PP2 + ["parallel.vpp=2", "parallel.pp_schedule=1f1b"])
    assert e.value.path == "parallel.vpp"


@pytest.mark.parametrize("schedule", ["zbv", "dualpipev"])
def test_a_v_shaped_schedule_without_vpp_gets_its_two_chunks_and_a_written_vpp_is_still_checked(schedule):
    sc = load_scenario(S8, PP2 + ["framework=torchtitan", f"parallel.pp_schedule={schedule}"])
    assert sc.parallel.vpp == 2
    with pytest.raises(ScenarioError) as e:
        load_scenario(S8, PP2 + ["framework=torchtitan", f"parallel.pp_schedule={schedule}", "parallel.vpp=4"])
    assert e.value.path == "parallel.vpp"


def test_torchtitans_interleaved_schedule_without_vpp_gets_two_stages_per_rank_and_megatrons_stays_an_error():
    # torchtitan: a multi-stage schedule without pipeline_parallel_layers_per_stage has 2 stages per rank
    sc = load_scenario(S8, PP2 + ["framework=torchtitan", "parallel.pp_schedule=Interleaved1F1B"])
    assert (sc.parallel.pp_schedule, sc.parallel.vpp) == ("interleaved-1f1b", 2)
    with pytest.raises(ScenarioError) as e:  # Megatron interleaves only with a virtual pipeline size
        load_scenario(S8, PP2 + ["framework=megatron", "parallel.pp_schedule=interleaved-1f1b"])
    assert e.value.path == "parallel.vpp"


def test_deepspeed_has_no_interleaved_schedule_so_chunks_stay_an_error():
    with pytest.raises(ScenarioError) as e:
        load_scenario(S8, PP2 + ["parallel.vpp=2", "framework=deepspeed"])
    assert e.value.path == "parallel.vpp"


# --------------------------------------------------------------------------- the FFN size a user leaves out

def test_a_model_without_ffn_hidden_gets_megatrons_default():
    from simulator.model import default_ffn_hidden, model_from_mapping
    gpt = model_from_mapping({"arch": "gpt", "layers": 2, "hidden": 12288, "heads": 96, "vocab": 51200})
    assert gpt.ffn_hidden == 49152
    llama = model_from_mapping({"arch": "llama", "layers": 2, "hidden": 4096, "heads": 32, "vocab": 32000})
    assert llama.ffn_hidden == default_ffn_hidden("llama", 4096) == 10880  # int(4*4096*2/3/64)*64
    given = model_from_mapping({"arch": "gpt", "layers": 2, "hidden": 64, "ffn_hidden": 100, "heads": 4, "vocab": 64})
    assert given.ffn_hidden == 100
    with pytest.raises(ScenarioError) as e:
        model_from_mapping({"arch": "llama", "layers": 2, "hidden": 16, "heads": 4, "vocab": 64})
    assert e.value.path == "model.ffn_hidden"


# --------------------------------------------------------------------------- model names as users write them

@pytest.mark.parametrize("written, preset", [
    ("Llama-3.1-8B", "llama3-8b"), ("meta-llama/Llama-3.1-70B", "llama3-70b"), ("meta-llama/Meta-Llama-3.1-405B", "llama3-405b"),
    ("llama3_8b", "llama3-8b"), ("deepseek-ai/DeepSeek-V3", "deepseek-v3"), ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
    ("Llama-3.2-1B", "llama3.2-1b")])
def test_a_model_name_as_users_write_it_loads_its_preset(written, preset):
    from simulator.model import load_model
    assert load_model(written) == load_model(preset)


@pytest.mark.parametrize("written", ["llama2-7b", "Llama-3.3-70B", "mistralai/Mixtral-8x7B-v0.1", "llama3-8b.json"])
def test_a_name_no_preset_has_is_still_an_error(written):
    from simulator.model import load_model
    with pytest.raises(ScenarioError) as e:
        load_model(written)
    assert "unknown model" in e.value.problem and "llama3-8b" in e.value.allowed

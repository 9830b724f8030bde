"""torchtitan's `sdpa_backend` option: an option whose value runs another attention kernel family than the framework
file names (spec.Option.attention_kernel, as MPT's attn_impl), so that runs of older torchtitan / PyTorch releases are
priced with the kernel they ran."""
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from simulator.cost.costs import build_cost_model
from simulator.cost.kernel_data import FAMILIES
from simulator.errors import ScenarioError
from simulator.frameworks.spec import ATTENTION_KERNELS, _check, load_framework
from simulator.report.text import format_report
from simulator.run import simulate
from simulator.scenario import load_scenario, scenario_from_mapping

ROOT = Path(__file__).resolve().parent.parent


def titan(**framework) -> dict:
    """Llama-3-8B on 4 DGX H100 nodes, torchtitan FSDP2 with op SAC: the published rows' layout."""
    return {"model": "llama3-8b", "framework": {"name": "torchtitan", **framework},
            "training": {"seq_len": 8192, "global_batch": 32, "micro_batch": 1, "recompute": "selective"},
            "cluster": {"topology": "dgx-h100", "nodes": 4}, "parallel": {"dp": 32, "zero": 3}}


def test_torchtitan_runs_cudnn_attention_by_default_as_the_commit_read_does():
    sc = scenario_from_mapping(titan())
    assert dict(sc.framework.options)["sdpa_backend"] == "cudnn"
    assert sc.framework.attention_kernel == "cudnn" == load_framework("torchtitan").attention_kernel.value
    assert build_cost_model(sc).attention_kernel == "cudnn"


def test_sdpa_backend_flash_prices_flashattention2_and_the_report_prints_it():
    cudnn, flash = (simulate(scenario_from_mapping(titan(sdpa_backend=b)), estimator="analytic") for b in ("cudnn", "flash"))
    assert build_cost_model(scenario_from_mapping(titan(sdpa_backend="flash"))).attention_kernel == "flash2"
    assert (cudnn["framework"]["attention_kernel"], flash["framework"]["attention_kernel"]) == ("cudnn", "flash2")
    assert "attention kernel flash2" in format_report(flash)
    # FlashAttention-2 reaches about 60 % of cuDNN's TFLOP/s at 8K on H100 (the FA3 paper's tables): slower step
    assert flash["tokens_per_s_per_gpu"] < cudnn["tokens_per_s_per_gpu"]


def test_a_backend_torchtitan_does_not_name_is_refused_with_the_choices():
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(titan(sdpa_backend="flash3"))
    assert e.value.path == "framework.sdpa_backend" and "cudnn | flash" in str(e.value)


def test_sdpa_backend_is_not_a_scenario_key_and_leaves_the_other_keys_alone():
    a, b = scenario_from_mapping(titan()), scenario_from_mapping(titan(sdpa_backend="flash"))
    assert "attention_kernel" not in b.framework.scenario_keys
    assert (a.training, a.parallel, a.cluster) == (b.training, b.parallel, b.cluster)


def test_sdpa_backend_can_be_set_from_the_command_line(tmp_path):
    path = tmp_path / "titan.yaml"
    path.write_text(yaml.safe_dump(titan()))
    sc = load_scenario(path, ["framework.sdpa_backend=flash"])
    assert sc.framework.attention_kernel == "flash2" and sc.framework.given == ("sdpa_backend",)


def test_the_framework_kernel_families_are_the_kernel_tables_families():
    assert ATTENTION_KERNELS == FAMILIES


@pytest.mark.parametrize("change, path", [
    ({"attention_kernel": {"cudnn": "cudnn", "flash": "fa2"}}, "options.sdpa_backend.attention_kernel"),
    ({"attention_kernel": {"cudnn": "cudnn", "flash3": "flash3"}}, "options.sdpa_backend.attention_kernel"),
])
def test_an_option_choosing_the_attention_kernel_names_its_own_values_and_known_kernels(change, path):
    fw = load_framework("torchtitan")
    bad = replace(fw, options={**fw.options, "sdpa_backend": replace(fw.options["sdpa_backend"], **change)})
    with pytest.raises(ScenarioError) as e:
        _check(bad, "framework file torchtitan.yaml")
    assert e.value.path == f"framework file torchtitan.yaml.{path}"


def test_every_torchtitan_validation_row_says_which_sdpa_backend_its_versions_ran():
    """The default is the commit read's; a published run of another release must say its own (a comment in each
    file gives the torchtitan / torch versions that decide it)."""
    rows = [run for p in sorted((ROOT / "validation" / "references").glob("torchtitan_*.yaml"))
            for run in yaml.safe_load(p.read_text())["runs"]]
    assert rows and all(r["scenario"]["framework"].get("sdpa_backend") in ("cudnn", "flash") for r in rows)


def _sac_layer(**framework):
    from simulator.plan.layer_ops import layer_forward
    from simulator.plan.op_sac import op_sac, recompute_list
    from simulator.plan.opgraph import shard
    sc = scenario_from_mapping(titan(**framework))
    fwd = tuple(layer_forward(sc, 0, shard(sc), tag="R").nodes)
    return op_sac(sc, shard(sc), fwd), [n.op.kind for n in recompute_list(sc, shard(sc), fwd).nodes]


def test_releases_before_2025_12_re_run_cudnn_attention_in_the_op_sac_replay():
    saved, rerun = _sac_layer(sdpa_backend="cudnn")
    assert "attn" in saved.saved and "attention" not in rerun
    old, old_rerun = _sac_layer(sdpa_backend="cudnn", op_sac_saves_cudnn=False)
    assert "attn" not in old.saved and "attention" in old_rerun
    flash, flash_rerun = _sac_layer(sdpa_backend="flash", op_sac_saves_cudnn=False)  # flash was always saved
    assert "attn" in flash.saved and "attention" not in flash_rerun

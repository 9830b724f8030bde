"""Composer + LLM Foundry as a framework of its own (simulator/frameworks/composer.yaml): its FSDP words, MPT's
attention options, and FP8 as Transformer Engine runs it there (not torchao's casts, which torchtitan runs)."""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simulator.errors import ScenarioError
from simulator.frameworks.spec import FP4_RECIPES, FP8_RECIPES, FRAMEWORKS, load_framework, shared_constants
from simulator.plan.layer_ops import layer_passes
from simulator.plan.opgraph import FP8_CASTS, TE_DELAYED, TORCHAO_TENSORWISE, Compute, shard
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORK_DIR = ROOT / "simulator" / "frameworks"


def mpt(framework="composer", precision="bf16", seq=8192, micro_batch=3, global_batch=144, **parallel) -> dict:
    """MPT-3B on one DGX H100 node, FSDP over 8 GPUs (the LLM Foundry benchmark layout)."""
    return {"framework": framework,
            "model": {"arch": "gpt", "layers": 32, "hidden": 2560, "ffn_hidden": 10240, "heads": 20, "vocab": 50368,
                      "positions": seq, "tie_embeddings": True, "name": "mpt-3b"},
            "training": {"seq_len": seq, "global_batch": global_batch, "micro_batch": micro_batch, "precision": precision},
            "cluster": {"topology": "dgx-h100", "nodes": 1},
            "parallel": {"dp": 8, "tp": 1, "pp": 1, "zero": 3, **parallel}}


def casts(sc) -> list[Compute]:
    """The forward FP8 cast ops of one decoder layer."""
    return [n.op for n in layer_passes(sc, 0).F
            if isinstance(n.op, Compute) and n.op.kind == "elementwise" and n.op.name.startswith("fp8_cast_")]


def test_composer_is_a_framework_with_a_source_for_every_entry():
    assert "composer" in FRAMEWORKS
    fw = load_framework("composer")
    entries = [*fw.zero.values(), *fw.options.values(), *fw.defaults.values(), *fw.efficiency.values(),
               *fw.lacks.values(), fw.attention_kernel, fw.pp_split, fw.fp8_recipe]
    assert all(e.source.strip() for e in entries)
    assert fw.attention_kernel.value == "flash2"
    assert {o: fw.options[o].default for o in ("attn_impl", "sharding_strategy", "mixed_precision")} == \
        {"attn_impl": "triton", "sharding_strategy": "FULL_SHARD", "mixed_precision": "DEFAULT"}


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_every_framework_says_which_fp8_casts_it_runs(name):
    fw = load_framework(name)
    assert fw.fp8_recipe.value in FP8_RECIPES and fw.fp8_recipe.source.strip()


def test_every_fp8_recipe_a_framework_may_name_has_a_pricing():
    assert set(FP8_CASTS) == set(FP8_RECIPES) | set(FP4_RECIPES)


def test_fp8_casts_are_transformer_engines_under_composer_and_torchaos_under_torchtitan():
    comp = casts(scenario_from_mapping(mpt("composer", "fp8")))
    titan = casts(scenario_from_mapping(mpt("torchtitan", "fp8")))
    assert comp and titan and len(comp) == len(titan)
    assert {c.shape[-1] for c in comp} == {TE_DELAYED.per_element()}, "TE's fused cast-transpose: read 1, write 2"
    assert {c.shape[-1] for c in titan} == {TORCHAO_TENSORWISE.per_element()}
    # torchtitan without compile runs torchao's eager chain (six kernels a tensor); TE's cast is one kernel
    assert all(c.repeat == 1 for c in comp) and all(c.repeat == 12 for c in titan)
    assert sum(c.bytes for c in comp) < 0.3 * sum(c.bytes for c in titan)


def test_composer_casts_the_weights_on_every_micro_batch_where_megatron_caches_them():
    """MPT calls te.Linear without is_first_microbatch, so TE casts each weight again in every forward."""
    comp = casts(scenario_from_mapping(mpt("composer", "fp8")))
    mega = casts(scenario_from_mapping(mpt("megatron", "fp8", zero=1)))
    for c, m in zip(comp, mega):
        act, weight, _, per_elt = c.shape
        assert c.bytes == pytest.approx(per_elt * (act + weight))
        assert m.bytes == pytest.approx(per_elt * (act + weight / 6))  # 144 / (8 x 3) = 6 micro-batches


def test_fp8_speeds_mpt_up_under_composer_and_slows_it_under_torchtitan():
    """The LLM Foundry rows measured FP8 1.0-1.35x BF16; torchao's eager casts make it slower, TE's do not."""
    def speedup(fw):
        t = {p: simulate(scenario_from_mapping(mpt(fw, p, seq=512, micro_batch=40, global_batch=1920)),
                         estimator="analytic")["iteration_time_s"] for p in ("bf16", "fp8")}
        return t["bf16"] / t["fp8"]
    assert speedup("composer") > 1.0 > speedup("torchtitan")


def test_te_fp8_gemm_efficiency_lives_once_and_megatron_names_it():
    constant = shared_constants("transformer_engine")["gemm_fp8_vs_bf16"].value
    raw = yaml.safe_load((FRAMEWORK_DIR / "megatron.yaml").read_text())
    assert raw["efficiency"]["gemm_fp8_vs_bf16"]["value"] == "transformer_engine.gemm_fp8_vs_bf16", "named, not a copied number"
    entry = load_framework("megatron").efficiency["gemm_fp8_vs_bf16"]
    assert entry.value == constant and entry.source.startswith("transformer_engine.gemm_fp8_vs_bf16: fitted")
    assert "gemm_fp8_vs_bf16" not in load_framework("torchtitan").efficiency


def fp8_fit_rows() -> list[dict]:
    """Composer's FP8 fit rows (validation/references/llm_foundry_mpt_fit.yaml, split fit)."""
    doc = yaml.safe_load((ROOT / "validation" / "references" / "llm_foundry_mpt_fit.yaml").read_text())
    return [r for r in doc["runs"] if r["split"] == "fit" and r["scenario"]["training"]["precision"] == "fp8"]


def fit_mape(efficiency: dict, fp8_only: bool = False) -> float:
    """Throughput MAPE (%) of Composer's fit rows (only the FP8 ones with `fp8_only`) priced with these
    cluster.efficiency values over the rows' own."""
    doc = yaml.safe_load((ROOT / "validation" / "references" / "llm_foundry_mpt_fit.yaml").read_text())
    rows = fp8_fit_rows() if fp8_only else [r for r in doc["runs"] if r["split"] == "fit"]
    errors = []
    for r in rows:
        eff = {**r["scenario"]["cluster"].get("efficiency", {}), **efficiency}
        mapping = {**r["scenario"], "cluster": {**r["scenario"]["cluster"], "efficiency": eff}}
        rep = simulate(scenario_from_mapping(mapping, base_dir=ROOT), estimator="analytic")
        errors.append(abs(rep["tokens_per_s_per_gpu"] / r["measured"]["tokens_per_s_per_gpu"] - 1))
    return 100 * sum(errors) / len(errors)


def assert_minimum_of_documented_grid(key: str, step: float, fp8_only: bool) -> None:
    """The grid Composer's `key` source states has its smallest fit MAPE at the value, and re-running the fit rows
    at the value and `step` either side reproduces that minimum (the constant goes stale loudly when the pricing
    under it moves)."""
    entry = load_framework("composer").efficiency[key]
    grid_text = entry.source.split("Grid of the value as ")[1]
    values = [float(v) for v in grid_text.split(":")[0].split(" / ")]
    mapes = [float(m) for m in grid_text.split("throughput MAPE ")[1].split(" %")[0].split(" / ")]
    assert len(values) == len(mapes) and values[mapes.index(min(mapes))] == entry.value
    at, below, above = (fit_mape({key: v}, fp8_only) for v in (entry.value, entry.value - step, entry.value + step))
    assert at < below and at < above
    assert at == pytest.approx(min(mapes), abs=0.01)


def test_composer_fits_its_own_fp8_gemm_speed_on_fp8_fit_rows_of_two_models_and_lengths():
    """TE v0.10 (2023) is not the TE 1.x/2.x Megatron's constant was fitted on: Composer's FP8 GEMM share is its own,
    fitted on FP8 fit rows of at least two models and sequence lengths, and it is slower than the transfer."""
    rows = fp8_fit_rows()
    assert len({r["scenario"]["model"]["name"] for r in rows}) >= 2
    assert len({r["scenario"]["training"]["seq_len"] for r in rows}) >= 2
    raw = yaml.safe_load((FRAMEWORK_DIR / "composer.yaml").read_text())["efficiency"]["gemm_fp8_vs_bf16"]
    assert isinstance(raw["value"], float) and "llm_foundry_mpt_fit.yaml" in raw["source"] and "Grid" in raw["source"]
    assert load_framework("composer").efficiency["gemm_fp8_vs_bf16"].value == raw["value"]
    assert raw["value"] < shared_constants("transformer_engine")["gemm_fp8_vs_bf16"].value


def test_composers_fp8_gemm_constant_is_the_minimum_of_its_documented_grid():
    assert_minimum_of_documented_grid("gemm_fp8_vs_bf16", 0.02, fp8_only=True)


def test_the_triton_attention_constant_is_composers_own_and_only_moves_triton_fa():
    """Fitted on Composer's fit split and sourced there; a scenario's cluster.efficiency may override it; it scales
    the Triton kernel's attention and leaves FlashAttention-2's (attn_impl flash) as published."""
    from simulator.cost.costs import build_cost_model
    entry = load_framework("composer").efficiency["triton_fa_vs_transfer"]
    assert entry.value > 1 and "llm_foundry_mpt_fit.yaml" in entry.source and "Grid of the value as" in entry.source
    op = Compute("attn", "attention", 1e12, 0.0, "bf16", (60, 8192, 8192, 128, 0.5, "bwd"))
    base = mpt("composer")
    at = {v: build_cost_model(scenario_from_mapping({**base, "cluster": {**base["cluster"], "efficiency": {"triton_fa_vs_transfer": v}}}))
          for v in (1.0, 2.0)}
    assert at[2.0].attention_efficiency(op) == pytest.approx(2 * at[1.0].attention_efficiency(op))
    assert "the Triton attention at 2x its transfer" in at[2.0].kernel_source()
    assert "Triton attention at" not in at[1.0].kernel_source()
    flash = mpt({"name": "composer", "attn_impl": "flash"})
    one, two = (build_cost_model(scenario_from_mapping({**flash, "cluster": {**flash["cluster"], "efficiency": {"triton_fa_vs_transfer": v}}}))
                for v in (1.0, 2.0))
    assert one.attention_efficiency(op) == two.attention_efficiency(op)


@pytest.mark.slow
def test_composers_triton_attention_constant_is_the_minimum_of_its_documented_grid():
    assert_minimum_of_documented_grid("triton_fa_vs_transfer", 0.05, fp8_only=False)


def test_a_framework_naming_an_unknown_shared_constant_is_refused():
    from dataclasses import replace

    from simulator.frameworks.spec import Sourced, _resolve_shared
    fw = replace(load_framework("composer"), efficiency={"gemm_fp8": Sourced(value="transformer_engine.gemm_fp4", source="x")})
    with pytest.raises(ScenarioError) as e:
        _resolve_shared(fw, "framework file composer.yaml")
    assert e.value.path == "framework file composer.yaml.efficiency.gemm_fp8"


def test_composer_options_set_what_the_rows_ran():
    sc = scenario_from_mapping(mpt({"name": "composer", "attn_impl": "torch", "sharding_strategy": "SHARD_GRAD_OP",
                                    "mixed_precision": "PURE"}))
    assert sc.training.attention == "eager" and sc.parallel.reshard_after_forward is False
    assert sc.training.grad_dtype == "bf16"
    sc = scenario_from_mapping(mpt("composer"))
    assert sc.training.attention == "flash" and sc.parallel.reshard_after_forward is True
    assert sc.training.grad_dtype == "fp32" and sc.training.loss == "fused"
    assert sc.framework.attention_kernel == "triton_fa"
    sc = scenario_from_mapping(mpt({"name": "composer", "attn_impl": "flash"}))
    assert sc.training.attention == "flash" and sc.framework.attention_kernel == "flash2"


def test_attn_impl_triton_prices_attention_with_the_triton_table_and_flash_with_flash2():
    """MPT's causal head-dim-128 attention at 8k: the default (triton) runs at triton_fa's efficiency, FA2's tables
    times the published Triton / FA2 ratio (FA2 paper Fig. 4d, 78 / 182 at 8k, forward+backward; the forward at
    1 / 1.4 of FA2's, the paper's forward gap), times Composer's fitted triton_fa_vs_transfer in both phases;
    attn_impl flash at FA2's own."""
    from simulator.cost.costs import build_cost_model
    fwd, bwd = (Compute("attn", "attention", 1e12, 0.0, "bf16", (60, 8192, 8192, 128, 0.5, ph)) for ph in ("fwd", "bwd"))
    triton = build_cost_model(scenario_from_mapping(mpt("composer")))
    flash = build_cost_model(scenario_from_mapping(mpt({"name": "composer", "attn_impl": "flash"})))
    assert triton.attention_kernel == "triton_fa" and flash.attention_kernel == "flash2"
    k = load_framework("composer").efficiency["triton_fa_vs_transfer"].value
    assert triton.attention_efficiency(fwd) / flash.attention_efficiency(fwd) == pytest.approx(k / 1.4)

    def fwd_bwd(cm):
        return 1 / cm.attention_efficiency(fwd) + 2.5 / cm.attention_efficiency(bwd)
    assert fwd_bwd(flash) / fwd_bwd(triton) == pytest.approx(k * 78 / 182)
    assert "triton_fa = flash2 tables" in triton.kernel_source()


def test_an_option_naming_a_kernel_for_a_value_it_lacks_is_refused():
    from dataclasses import replace as dc_replace
    from simulator.frameworks.spec import _check
    fw = load_framework("composer")
    bad = dc_replace(fw.options["attn_impl"], attention_kernel={"xformers": "flash2"})
    with pytest.raises(ScenarioError) as e:
        _check(dc_replace(fw, options={**fw.options, "attn_impl": bad}), "framework file composer.yaml")
    assert e.value.path == "framework file composer.yaml.options.attn_impl.attention_kernel"


@pytest.mark.parametrize("framework, parallel, path", [
    ({"name": "composer", "attn_impl": "xformers"}, {}, "framework.attn_impl"),
    ({"name": "composer", "sharding_strategy": "NO_SHARD"}, {}, "framework.sharding_strategy"),
    ({"name": "composer", "mixed_precision": "FULL"}, {}, "framework.mixed_precision"),
    ({"name": "composer", "compile": True}, {}, "framework.compile"),
    ("composer", {"zero": 2}, "parallel.zero"),
    ("composer", {"zero": 1}, "parallel.zero"),
    ("composer", {"dp": 4, "tp": 2}, "parallel.tp"),
    ("composer", {"dp": 4, "pp": 2}, "parallel.pp"),
])
def test_bad_composer_input_names_the_key(framework, parallel, path):
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(mpt(framework, **parallel))
    assert e.value.path == path


def test_composer_zero2_points_to_shard_grad_op():
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(mpt("composer", zero=2))
    assert "SHARD_GRAD_OP" in e.value.problem


def test_a_bad_composer_option_exits_2_on_the_command_line(tmp_path):
    raw = mpt({"name": "composer", "attn_impl": "xformers"})
    path = tmp_path / "mpt.yaml"
    path.write_text(yaml.safe_dump(raw))
    r = subprocess.run([sys.executable, "-m", "simulator", "run", str(path)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "framework.attn_impl" in r.stderr and "flash | triton | torch" in r.stderr


def test_the_mpt_reference_rows_are_priced_as_composer():
    doc = yaml.safe_load((ROOT / "validation" / "references" / "llm_foundry_mpt_h100.yaml").read_text())
    assert len(doc["runs"]) == 10
    for run in doc["runs"]:
        fw = run["scenario"]["framework"]
        assert fw["name"] == "composer" and fw["attn_impl"] == "triton" and "stack" not in run

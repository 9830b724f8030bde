"""NVFP4 training (`training.precision: fp4`): Transformer Engine's NVFP4BlockScaling recipe under Megatron
(--fp4-format e2m1 --fp4-recipe nvfp4, Megatron-Bridge's NVFP4 rows): the transformer layers' linears in E2M1 with
E4M3 scales per 16 values, three kernels per activation or gradient (both amaxes, the row-wise cast, the Hadamard
column-wise cast), GEMMs at the GPU's FP4 curve; Blackwell only, Megatron only."""
import copy

import pytest

from simulator.cost.costs import build_cost_model
from simulator.cost.kernel_data import load_data
from simulator.errors import ScenarioError
from simulator.plan.activations import NVFP4_STORE_BYTES, layer_activation_terms
from simulator.plan.lower import build_plan, step_compute_ops
from simulator.plan.memory import FP4_WEIGHT_CACHE_BYTES, buffer_bytes
from simulator.plan.opgraph import FP8_CASTS, TE_MXFP8, TE_NVFP4, fp8_cast
from simulator.report.export import megatron_args, unsupported
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping
from simulator.validate.corpus import corpus_runs

ROW = "corpus/megatron_bridge_26_02:llama3-70b-dgx-gb200-64gpu-nvfp4"
MX_ROW = "corpus/megatron_bridge_26_02:llama3-70b-dgx-gb200-64gpu-mxfp8"
HGX, GB200, GB300 = "B200 (HGX/DGX, 1,000 W)", "B200 (GB200 superchip)", "B300 (GB300 superchip)"


def _mapping(row: str = ROW) -> dict:
    return copy.deepcopy(next(c["mapping"] for c in corpus_runs()[0] if c["id"] == row))


def _small(topology: str = "gb200-nvl72", **training) -> dict:
    """A 4-layer Llama 3 8B shape on 8 GPUs of `topology`, fp4, TP2 with SP."""
    m = {"name": "fp4 test", "framework": "megatron",
         "model": {"arch": "llama", "layers": 4, "hidden": 4096, "ffn_hidden": 14336, "heads": 32, "kv_heads": 8,
                   "vocab": 128256},
         "training": {"seq_len": 4096, "global_batch": 16, "micro_batch": 1, "precision": "fp4", **training},
         "cluster": {"topology": topology, "nodes": 1, "gpus_per_node": 8},
         "parallel": {"dp": 4, "tp": 2, "sp": True, "zero": 1}}
    return m


def _ops(sc) -> dict:
    return {op.name: op for op in step_compute_ops(build_plan(sc))}


def test_the_corpus_rows_run_the_te_nvfp4_recipe():
    sc = scenario_from_mapping(_mapping())
    assert sc.training.precision == "fp4" and sc.framework.linear_recipe("fp4") == "te_nvfp4"
    assert FP8_CASTS["te_nvfp4"] is TE_NVFP4


def test_an_activation_is_read_three_times_and_written_as_two_half_byte_copies():
    """amax pass (the tensor's and its Hadamard transform's), row-wise cast, Hadamard column-wise cast: 3 x 2 B read,
    0.5 + 0.5 B written; a weight (2D 16x16 blocks, no Hadamard): amax and one cast writing both, 2 x 2 + 1 B."""
    assert TE_NVFP4.per_element() == 7 and TE_NVFP4.kernels_per_tensor == 3
    assert TE_NVFP4.per_weight_element() == 5 and TE_NVFP4.weight_per_step and TE_NVFP4.grouped_fused


def test_a_linear_quantizes_its_input_and_a_step_share_of_its_weight():
    sc = scenario_from_mapping(_small())
    g = _ops(sc)["fc1"]
    m, n, k = g.shape
    cast = fp8_cast(sc, g)
    assert g.dtype == "fp4" and cast.repeat == 3
    assert cast.bytes == pytest.approx(7 * m * k + 5 * k * n / sc.micro_batches)


def test_the_linears_gemms_run_in_fp4_on_half_byte_operands_and_the_head_and_attention_stay_bf16():
    fp4, bf16 = (scenario_from_mapping(_small(precision=p)) for p in ("fp4", "bf16"))
    ops, ref = _ops(fp4), _ops(bf16)
    fc1 = ops["fc1"]
    m, n, k = fc1.shape
    assert fc1.bytes == pytest.approx((m * k + k * n) * 0.5 + m * n * 2)
    assert ops["lm_head"].dtype == "bf16"
    c4, c16 = build_cost_model(fp4), build_cost_model(bf16)
    attention = [n for n, o in ops.items() if o.kind == "attention"]
    assert attention and all(c4.compute_time(ops[n]) == c16.compute_time(ref[n]) for n in attention)


def test_the_fp4_curve_is_fitted_to_published_b200_shapes_and_transferred_to_gb200_and_gb300():
    hgx = build_cost_model(scenario_from_mapping(_small("dgx-b200"))).kernels().gemm["fp4"]
    assert hgx.points >= 3 and hgx.knee_fitted and not hgx.transferred_from and 0.4 < hgx.peak_efficiency < 0.8
    for topo in ("gb200-nvl72", "gb300-nvl72"):
        k = build_cost_model(scenario_from_mapping(_small(topo))).kernels()
        assert k.gemm["fp4"].transferred_from == HGX and k.gemm["fp4"].points == 0
    assert {p["dtype"] for p in load_data()["gpus"][HGX]["gemm"]} == {"bf16", "fp4"}


def test_gb300_runs_fp4_gemms_faster_than_gb200_and_bf16_gemms_no_faster():
    """Blackwell Ultra's 15 PF NVFP4 against the GB200's 10, at the same share of peak (transferred); BF16 the same."""
    gemm = {t: _ops(scenario_from_mapping(_small(t)))["fc1"] for t in ("gb200-nvl72", "gb300-nvl72")}
    cm = {t: build_cost_model(scenario_from_mapping(_small(t))) for t in gemm}
    fp4 = {t: cm[t].compute_time(gemm[t]) for t in gemm}
    assert fp4["gb300-nvl72"] < fp4["gb200-nvl72"]
    bf16 = {t: cm[t].gemm_efficiency(1e12, "bf16") * cm[t].peak_flops("bf16") for t in gemm}
    assert bf16["gb300-nvl72"] == pytest.approx(bf16["gb200-nvl72"])


def test_nvfp4_gemms_beat_mxfp8_by_less_than_the_peak_ratio():
    cm = build_cost_model(scenario_from_mapping(_small()))
    f = 2 * 8192 * 14336 * 4096
    fp4, fp8 = (cm.gemm_efficiency(f, d) * cm.peak_flops(d) for d in ("fp4", "fp8"))
    assert 1.0 < fp4 / fp8 < cm.peak_flops("fp4") / cm.peak_flops("fp8")


def test_memory_keeps_half_byte_weight_copies_and_half_byte_gemm_inputs():
    fp4, fp8 = (scenario_from_mapping(_small(precision=p)) for p in ("fp4", "fp8"))
    params = buffer_bytes(fp8, 0)["quantized_weight_cache"] / 2  # 1 + 1 B per parameter under FP8
    assert buffer_bytes(fp4, 0)["quantized_weight_cache"] == pytest.approx(FP4_WEIGHT_CACHE_BYTES * params)
    a4, a8 = layer_activation_terms(fp4, 0), layer_activation_terms(fp8, 0)
    assert a4["fc2_input"] < a8["fc2_input"]
    assert a4["fc2_input"] == pytest.approx(a8["fc2_input"] / (1 + 4 / 128) * NVFP4_STORE_BYTES)


def test_the_end_to_end_gain_over_mxfp8_is_below_the_gemm_bound():
    """FP4 speeds up the linears' GEMMs only: the step gains less than 2x over the same layout in MXFP8."""
    fp4 = simulate(scenario_from_mapping(_mapping()))
    m = _mapping()
    m["training"]["precision"] = "fp8"
    m["framework"]["fp8_recipe"] = "mxfp8"
    mx = simulate(scenario_from_mapping(m))
    assert 1.0 < fp4["tokens_per_s_per_gpu"] / mx["tokens_per_s_per_gpu"] < 2.0


@pytest.mark.parametrize("topology", ["dgx-h100", "hgx-h200"])
def test_a_gpu_without_fp4_tensor_cores_is_refused_at_the_precision(topology):
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(_small(topology))
    assert e.value.path == "training.precision" and "FP4 tensor cores" in str(e.value)


@pytest.mark.parametrize("framework", ["torchtitan", "deepspeed", "nanotron", "composer"])
def test_a_framework_without_an_fp4_recipe_is_refused(framework):
    m = _small()
    m["framework"] = framework
    m["parallel"] = {"dp": 8}
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(m)
    assert e.value.path == "training.precision" and "megatron" in str(e.value)


def test_the_megatron_export_writes_the_fp4_flags_and_other_frameworks_say_they_cannot():
    sc = scenario_from_mapping(_small())
    args = megatron_args(sc)
    i = args.index("--fp4-format")
    assert args[i:i + 4] == ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"] and "--bf16" in args
    assert "--fp8-format" not in args
    assert any("fp4" in r for r in unsupported(sc, "torchtitan"))
    assert not any("fp4" in r for r in unsupported(sc, "megatron"))


def test_tp_comm_overlap_is_off_in_the_nvfp4_recipes_and_on_in_the_mxfp8_one():
    """Megatron-Bridge v0.3.0 turns TP communication overlap off under nvfp4 (llama3_llm_pretrain.py:79, :113)."""
    assert not scenario_from_mapping(_mapping()).parallel.overlap_tp
    assert scenario_from_mapping(_mapping(MX_ROW)).parallel.overlap_tp
    assert TE_MXFP8.per_element() < TE_NVFP4.per_element()


def test_an_nvfp4_layout_never_beats_its_kernels_and_its_gain_over_bf16_is_amdahl_bounded():
    """The kernel-ceiling bar on an NVFP4 corpus row (MFU against the FP4 peak), and Amdahl over BF16: only the GEMMs
    speed up (tests/test_kernel_ceiling.py's two checks)."""
    from tests.test_kernel_ceiling import _gemm_share_and_ratio, kernel_ceiling
    sc4 = scenario_from_mapping(_mapping())
    ceiling, executed, model = kernel_ceiling(sc4)
    assert model <= executed * (1 + 1e-9)
    assert 0 < simulate(sc4, "analytic")["mfu"] <= ceiling
    m = _mapping()
    m["training"]["precision"] = "bf16"
    sc16 = scenario_from_mapping(m)
    share, ratio = _gemm_share_and_ratio(sc16, sc4)
    gain = simulate(sc16, "analytic")["iteration_time_s"] / simulate(sc4, "analytic")["iteration_time_s"]
    assert 1 < ratio and gain <= 1 / (1 - share * (1 - 1 / ratio))

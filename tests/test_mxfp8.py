"""Transformer Engine's MXFP8 recipe (Megatron's --fp8-recipe mxfp8, Megatron-Bridge's FP8-MX / MXFP8 rows): one
kernel per tensor writes its row- and column-scaled FP8 copies from one read, a grouped GEMM's experts one by one, the
weights once per step; it runs only on GPUs whose tensor cores scale 32-value blocks (`GPUSpec.mx_formats`)."""
import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simulator.errors import ScenarioError
from simulator.plan.lower import build_plan, step_compute_ops
from simulator.plan.opgraph import FP8_CASTS, TE_CURRENT, TE_DELAYED, TE_MXFP8, fp8_cast
from simulator.run import simulate
from simulator.cost.costs import build_cost_model
from simulator.frameworks.spec import shared_constants
from simulator.scenario import scenario_from_mapping
from simulator.topology import load_topology
from simulator.validate.corpus import corpus_runs

ROOT = Path(__file__).resolve().parents[1]
DENSE = "corpus/megatron_bridge_25_09:llama3-8b-dgx-b200-8gpu-fp8-cs"
MOE = "corpus/megatron_bridge_25_09:qwen3-30b-a3b-dgx-b200-8gpu-fp8-cs"
EXPERTS_PER_RANK = 16  # Qwen3 30B-A3B: 128 experts over EP 8


def _mapping(row: str, recipe: str, topology: str | None = None) -> dict:
    m = copy.deepcopy(next(c["mapping"] for c in corpus_runs()[0] if c["id"] == row))
    m["framework"]["fp8_recipe"] = recipe
    if topology:
        m["cluster"]["topology"] = topology
    return m


def _ops(sc) -> dict:
    return {op.name: op for op in step_compute_ops(build_plan(sc))}


def test_mxfp8_maps_to_te_mxfp8():
    assert scenario_from_mapping(_mapping(DENSE, "mxfp8")).framework.fp8_recipe == "te_mxfp8"
    assert FP8_CASTS["te_mxfp8"] is TE_MXFP8


def test_one_read_and_both_scaled_copies_per_element():
    """2 B read once, the row-scaled and the column-scaled FP8 copies written (1 B each): delayed scaling's bytes,
    two fewer than current scaling's second read."""
    assert TE_MXFP8.per_element() == 4 == TE_DELAYED.per_element()
    assert TE_CURRENT.per_element() - TE_MXFP8.per_element() == 2
    assert TE_MXFP8.kernels_per_tensor == 1 and TE_MXFP8.transpose_copy == 0 and TE_MXFP8.weight_per_step


def test_a_dense_linear_is_quantized_in_one_kernel_with_fewer_bytes_than_current_scaling():
    mx = scenario_from_mapping(_mapping(DENSE, "mxfp8"))
    cs = scenario_from_mapping(_mapping(DENSE, "tensorwise"))
    a, b = _ops(mx)["fp8_cast_fc1"], _ops(cs)["fp8_cast_fc1"]
    assert a.repeat == 1 and b.repeat == 3
    assert a.bytes < b.bytes


def test_a_grouped_gemm_quantizes_its_experts_one_by_one():
    sc = scenario_from_mapping(_mapping(MOE, "mxfp8"))
    g = _ops(sc)["expert_fc1"]
    assert g.repeat == EXPERTS_PER_RANK
    assert fp8_cast(sc, g).repeat == EXPERTS_PER_RANK


def test_the_gemms_are_the_same_fp8_gemms_and_only_the_casts_change():
    mx, cs = (_ops(scenario_from_mapping(_mapping(DENSE, r))) for r in ("mxfp8", "tensorwise"))
    assert {n: (o.flops, o.dtype) for n, o in mx.items() if o.kind == "gemm"} == \
           {n: (o.flops, o.dtype) for n, o in cs.items() if o.kind == "gemm"}
    assert mx["fc1"].dtype == "fp8"


def test_megatron_prices_its_mxfp8_gemms_at_transformer_engines_fitted_share_of_the_per_tensor_speed():
    """Transformer Engine's block-scaled GEMMs at `gemm_mxfp8_vs_fp8` (0.88, fitted on NeMo 25.09's FP8-MX rows) of its
    per-tensor FP8 GEMMs; BF16 GEMMs and the casts' kernels are not touched by it."""
    te = shared_constants("transformer_engine")["gemm_mxfp8_vs_fp8"]
    assert te.value == 0.88 and te.source.startswith("fitted on the published corpus's fit split only")
    mx, cs = (scenario_from_mapping(_mapping(DENSE, r)) for r in ("mxfp8", "tensorwise"))
    cm_mx, cm_cs = build_cost_model(mx), build_cost_model(cs)
    assert cm_mx.block_scaled_fp8 and not cm_cs.block_scaled_fp8
    assert cm_mx.efficiency["gemm_mxfp8_vs_fp8"] == 0.88
    assert cm_mx.gemm_curve("fp8")[0] == pytest.approx(0.88 * cm_cs.gemm_curve("fp8")[0])
    assert cm_mx.gemm_curve("bf16") == cm_cs.gemm_curve("bf16")


def test_a_scenario_may_set_the_block_scaled_share_itself():
    m = _mapping(DENSE, "mxfp8")
    m["cluster"]["efficiency"] = {"gemm_mxfp8_vs_fp8": 1.0}
    mx1 = simulate(scenario_from_mapping(m), "analytic")["iteration_time_s"]
    mx, cs = (simulate(scenario_from_mapping(_mapping(DENSE, r)), "analytic")["iteration_time_s"]
              for r in ("mxfp8", "tensorwise"))
    assert mx1 < cs < mx  # at 1.0 only its cheaper casts differ; at 0.88 its GEMMs are slower
    m["cluster"]["efficiency"] = {"gemm_mxfp8_vs_fp8": 2.5}
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(m)
    assert e.value.path == "cluster.efficiency.gemm_mxfp8_vs_fp8"


@pytest.mark.parametrize("topology, has", [("dgx-b200", True), ("gb200-nvl72", True), ("dgx-h100", False),
                                            ("hgx-h200", False), ("dgx-a100", False)])
def test_only_blackwell_topologies_have_mx_formats(topology, has):
    assert load_topology(topology).gpu.mx_formats is has


def test_mxfp8_on_a_hopper_gpu_is_refused_at_the_option():
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(_mapping(DENSE, "mxfp8", topology="dgx-h100"))
    assert e.value.path == "framework.fp8_recipe"
    assert "mxfp8" in str(e.value) and "H100" in str(e.value) and "mx_formats" in str(e.value)


def test_mxfp8_in_a_bf16_run_is_not_a_hardware_question():
    m = _mapping(DENSE, "mxfp8", topology="dgx-h100")
    m["training"]["precision"] = "bf16"
    assert scenario_from_mapping(m).training.precision == "bf16"


def test_the_command_line_refuses_it_with_exit_2_and_no_traceback(tmp_path):
    f = tmp_path / "mx.yaml"
    f.write_text(yaml.safe_dump(_mapping(DENSE, "mxfp8", topology="dgx-h100")))
    r = subprocess.run([sys.executable, "-m", "simulator", "run", str(f)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2
    assert "framework.fp8_recipe" in r.stderr and "Traceback" not in r.stderr


# torchtitan's MX converter (torchao MXLinear, recipe mxfp8_cublas)

TT = {"name": "Llama 3 8B on 8 B200, torchtitan MXFP8", "model": "llama3-8b",
      "framework": {"name": "torchtitan", "compile": True, "mx": True},
      "training": {"seq_len": 8192, "global_batch": 8, "micro_batch": 1, "recompute": "selective"},
      "cluster": {"topology": "dgx-b200", "nodes": 1}, "parallel": {"dp": 8, "zero": 3}}


def _tt(**framework):
    m = copy.deepcopy(TT)
    m["framework"].update(framework)
    return scenario_from_mapping(m)


def test_torchtitans_mx_converter_trains_in_fp8_with_torchaos_mx_casts():
    sc = _tt()
    assert sc.training.precision == "fp8" and sc.framework.fp8_recipe == "torchao_mxfp8"
    casts = FP8_CASTS["torchao_mxfp8"]
    assert casts.per_element() == 6 and casts.kernels_per_tensor == 2 and not casts.weight_per_step
    ops = _ops(sc)
    assert ops["fc1"].dtype == "fp8" and ops["fp8_cast_fc1"].repeat == 4  # input and weight, two kernels each
    assert _tt(mx=False).training.precision == "bf16"


def test_its_lm_head_stays_bf16_and_its_gemms_take_the_transferred_block_scaled_share():
    from simulator.plan.float8_comm import head_in_fp8
    sc = _tt()
    assert not head_in_fp8(sc)
    assert build_cost_model(sc).efficiency["gemm_mxfp8_vs_fp8"] == 0.88 and build_cost_model(sc).block_scaled_fp8


def test_mx_and_float8_are_one_converter_or_the_other():
    with pytest.raises(ScenarioError) as e:
        _tt(float8=True)
    assert e.value.path == "framework.mx" and "float8 false" in str(e.value)


def test_mx_on_hopper_is_refused_at_the_option():
    m = copy.deepcopy(TT)
    m["cluster"]["topology"] = "dgx-h100"
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(m)
    assert e.value.path == "framework.mx" and "mx true" in str(e.value)


def test_the_torchtitan_export_writes_the_mx_converter():
    from simulator.report.export import to_torchtitan_toml
    toml = to_torchtitan_toml(_tt())
    assert 'converters = ["quantize.linear.mx"]' in toml and "[quantize.linear.mx]" in toml
    assert "[quantize.linear.float8]" not in toml
    assert 'converters = ["quantize.linear.float8"]' in to_torchtitan_toml(_tt(mx=False, float8=True))


def test_a_pool_of_hopper_gpus_refuses_mxfp8_too():
    m = _mapping(DENSE, "mxfp8")
    m["cluster"].update({"nodes": 2, "gpus_per_node": 4, "pools": [{"gpu": "dgx-b200", "nodes": 1},
                                                                     {"gpu": "dgx-h100", "nodes": 1}]})
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(m)
    assert e.value.path == "framework.fp8_recipe" and "H100" in str(e.value)

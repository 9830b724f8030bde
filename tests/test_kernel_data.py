"""Published kernel points as the default pricing (simulator/cost/kernel_data.py)."""
import json

import pytest

from simulator.cost.costs import (ATTENTION_EFFICIENCY, GEMM_HALF_EFFICIENCY_S, GEMM_PEAK_EFFICIENCY, CostModel)
from simulator.cost.kernel_data import AttentionTable, gpu_points, load_data, used_in_fit
from simulator.errors import ScenarioError
from simulator.plan.opgraph import Compute
from simulator.topology import load_topology

H100 = "H100 SXM5 80GB"


def _gemm(m, n, k, dtype):
    eb = 1 if dtype == "fp8" else 2
    return Compute("g", "gemm", 2.0 * m * n * k, float((m * k + k * n) * eb + m * n * 2), dtype, (m, n, k))


def published_time(cm: CostModel, op: Compute) -> float:
    """The priced time of a compute-bound GEMM at the published curve's speed: the price undone of the fraction a
    training step sustains (`sustained.py`; 1 on GPUs without one)."""
    return cm.spec_compute_time(op) * cm.sustained_gemm_fraction()


def test_every_point_names_its_source_and_url():
    for gpu, entry in load_data()["gpus"].items():
        for p in entry["gemm"] + entry["attention"]:
            assert p["source"] and p["url"].startswith("http"), (gpu, p)


@pytest.mark.parametrize("topology", ["dgx-h100", "dgx-a100", "hgx-h200", "gb200-nvl72", "dgx-b200"])
def test_no_default_gemm_beats_a_maximum_achievable_matmul_point(topology):
    cm = CostModel(load_topology(topology))
    for p in gpu_points(cm.topology.gpu.name)["gemm"]:
        if p.get("max_achievable"):
            op = _gemm(p["m"], p["n"], p["k"], p["dtype"])
            assert cm.spec_compute_time(op) >= op.flops / (p["tflops"] * 1e12) * (1 - 1e-9), p


def test_fp8_gemms_on_h100_are_priced_from_the_measured_shapes_within_a_quarter():
    cm = CostModel(load_topology("dgx-h100"))
    fit = [p for p in gpu_points(H100)["gemm"] if used_in_fit(p) and p["dtype"] == "fp8"]
    assert len(fit) >= 3
    for p in fit:
        op = _gemm(p["m"], p["n"], p["k"], "fp8")
        assert 0.75 < published_time(cm, op) / (op.flops / (p["tflops"] * 1e12)) < 1.25, p


@pytest.mark.parametrize("topology", ["dgx-h100", "dgx-b200"])
def test_bf16_gemms_are_priced_from_the_measured_shapes_within_a_quarter(topology):
    """The fitted BF16 curve (OpenXLA's per-shape table plus cuBLAS points) follows every measured shape."""
    cm = CostModel(load_topology(topology))
    fit = [p for p in gpu_points(cm.topology.gpu.name)["gemm"] if used_in_fit(p) and p["dtype"] == "bf16"]
    assert len(fit) >= 27
    for p in fit:
        op = _gemm(p["m"], p["n"], p["k"], "bf16")
        assert 0.75 < published_time(cm, op) / (op.flops / (p["tflops"] * 1e12)) < 1.25, p


def test_the_h100_bf16_curve_is_fitted_and_stays_under_the_maximum_achievable_matmul():
    """Measured shapes fit eta_max and the knee; at each MAMF ceiling's own shape the priced GEMM (curve plus launch
    gap) is no faster than that ceiling."""
    cm = CostModel(load_topology("dgx-h100"))
    curve = cm.kernels().gemm["bf16"]
    assert curve.knee_fitted and curve.points >= 27
    ceilings = [p for p in gpu_points(H100)["gemm"] if p.get("max_achievable") and p["dtype"] == "bf16"]
    assert ceilings
    for p in ceilings:
        op = _gemm(p["m"], p["n"], p["k"], "bf16")
        assert cm.spec_compute_time(op) >= op.flops / (p["tflops"] * 1e12) * (1 - 1e-9), p


@pytest.mark.parametrize("family,tflops", [("flash2", 319.0), ("flash3", 579.0), ("cudnn", 518.0)])
def test_attention_prices_at_the_published_speed_of_its_kernel_family(family, tflops):
    """Causal forward, head dim 128, 4k tokens (FA3 paper's figure): the op's compute time is its FLOPs at that speed."""
    cm = CostModel(load_topology("dgx-h100"), attention_kernel=family)
    op = Compute("attn", "attention", 4.0 * 32 * 4096 * 4096 * 128 * 0.5, 0.0, "bf16", (32, 4096, 4096, 128, 0.5, "fwd"))
    assert cm.attention_efficiency(op) * 989.4 == pytest.approx(tflops, rel=1e-3)


def test_attention_under_fp8_training_runs_at_the_bf16_speed():
    cm = CostModel(load_topology("dgx-h100"))
    shape = (32, 4096, 4096, 128, 0.5, "fwd")
    ops = [Compute("attn", "attention", 1e12, 0.0, d, shape) for d in ("bf16", "fp8")]
    assert cm.spec_compute_time(ops[0]) == cm.spec_compute_time(ops[1])


def test_sequence_length_is_interpolated_in_log_space_and_clamped_outside():
    t = AttentionTable((1024.0, 4096.0), (0.2, 0.4))
    assert t.at(2048) == pytest.approx(0.3)
    assert t.at(256) == 0.2 and t.at(65536) == 0.4


def test_cluster_efficiency_replaces_the_published_curves():
    """nanotron's stack fit (gemm 0.55, attention 0.35 / 0.30) prices as it did before the published data."""
    eff = {"gemm": 0.55, "attention_fwd": 0.35, "attention_bwd": 0.30}
    new = CostModel(load_topology("dgx-h100"), efficiency=eff, attention_kernel="flash2")
    old = CostModel(load_topology("dgx-h100"), efficiency=eff, attention_kernel="flash2", published_kernels=False)
    for op in (_gemm(8192, 4096, 4096, "bf16"), _gemm(8192, 4096, 4096, "fp8"),
               Compute("a", "attention", 1e12, 1e6, "bf16", (32, 4096, 4096, 128, 0.5, "bwd"))):
        assert new.spec_compute_time(op) == old.spec_compute_time(op)
    assert "overridden by cluster.efficiency" in new.kernel_source()


def test_a_gpu_without_points_is_priced_by_the_spec_constants():
    cm = CostModel(load_topology("pcie-l40s"))
    assert cm.kernels() is None and "spec-based constants" in cm.kernel_source()
    assert cm.gemm_curve("bf16") == (GEMM_PEAK_EFFICIENCY, GEMM_HALF_EFFICIENCY_S)
    op = Compute("a", "attention", 1e12, 0.0, "bf16", (32, 4096, 4096, 128, 0.5, "fwd"))
    assert cm.attention_efficiency(op) == ATTENTION_EFFICIENCY["fwd"]


def test_a_point_without_its_source_is_a_clear_error(tmp_path):
    bad = tmp_path / "k.json"
    bad.write_text(json.dumps({"gpus": {"X": {"gemm": [{"dtype": "bf16", "m": 1, "n": 1, "k": 1, "tflops": 1.0}]}}}))
    with pytest.raises(ScenarioError, match="lacks source, url"):
        load_data(str(bad))


@pytest.mark.parametrize("profile,gpu", [("h100-sxm-published", H100), ("a100-sxm-published", "A100 SXM4 80GB")])
def test_published_profiles_and_the_default_data_hold_the_same_points(profile, gpu):
    """calibrate/profiles/<gpu>-published.json (usable as cluster.profile) and kernel_data.json (the default) agree."""
    from simulator.cost.profile import load_profile
    prof = load_profile(f"calibrate/profiles/{profile}.json")
    fam = {"fa2": "flash2", "fa3": "flash3", "cudnn": "cudnn"}
    pts = gpu_points(gpu)
    gemm = {(p["dtype"], p["m"], p["n"], p["k"]): p["tflops"] for p in pts["gemm"]}
    att = {(p["family"], p["phase"], p["causal"], p["d_head"], p["seq"]): p["tflops"] for p in pts["attention"]}
    assert {(p.dtype, p.m, p.n, p.k): p.tflops for p in prof.gemm} == gemm
    assert {(fam[p.backend], p.phase, p.causal, p.d_head, p.s_q): p.tflops for p in prof.attention} == att

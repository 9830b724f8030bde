"""GB300 NVL72 (Blackwell Ultra): its own published attention tables (cudnn-frontend's GB300 runs beside the GB200
ones, the same software), its GEMM curves fitted to the GB200's B200 points (`kernel_data.json` `gemm_from`: the same
dense peaks, no GB300 GEMM figure published), the B200's in-training GEMM share transferred, MXFP8 in its tensor
cores, and the corpus's DGX-GB300 rows on this topology."""
import json

import pytest

from simulator.cost.costs import CostModel
from simulator.cost.kernel_data import gpu_points, load_data
from simulator.cost.sustained import SUSTAINED_GEMM
from simulator.errors import ScenarioError
from simulator.plan.opgraph import Compute
from simulator.topology import load_topology
from simulator.validate.corpus import SYSTEM_TOPOLOGY

GB300, GB200 = "B300 (GB300 superchip)", "B200 (GB200 superchip)"


def _gemm(m, n, k, dtype="bf16"):
    eb = 1 if dtype == "fp8" else 2
    return Compute("g", "gemm", 2.0 * m * n * k, float((m * k + k * n) * eb + m * n * 2), dtype, (m, n, k))


def _models():
    return CostModel(load_topology("gb300-nvl72")), CostModel(load_topology("gb200-nvl72"))


def test_the_topology_names_the_gpu_the_kernel_data_is_keyed_by():
    t = load_topology("gb300-nvl72")
    assert t.gpu.name == GB300 and t.gpu.mx_formats and t.node.gpus == 72
    gb200 = load_topology("gb200-nvl72").gpu.peak_tflops
    # Blackwell Ultra: the GB200's dense BF16 / FP8 peaks, 1.5x its NVFP4 (15 against 10 PF)
    assert {d: v for d, v in t.gpu.peak_tflops.items() if d != "fp4"} == {d: v for d, v in gb200.items() if d != "fp4"}
    assert t.gpu.peak_tflops["fp4"] == 1.5 * gb200["fp4"]
    assert t.gpu.memory_gib > load_topology("gb200-nvl72").gpu.memory_gib


def test_it_has_no_gemm_point_of_its_own_and_borrows_the_gb200s():
    entry = load_data()["gpus"][GB300]
    assert entry["gemm"] == [] and entry["gemm_from"]["gpu"] == GB200
    gb3, gb2 = _models()
    assert gb3.kernels().gemm_from == GB200 and gb2.kernels().gemm_from == ""


@pytest.mark.parametrize("shape, dtype", [((8192, 14336, 4096), "bf16"), ((16384, 4096, 4096), "fp8"),
                                          ((2048, 2048, 2048), "bf16")])
def test_its_gemms_take_the_gb200s_time(shape, dtype):
    gb3, gb2 = _models()
    op = _gemm(*shape, dtype)
    assert gb3.compute_time(op) == pytest.approx(gb2.compute_time(op), rel=1e-12)


def test_its_cudnn_attention_is_faster_than_the_gb200s_and_flash2_about_the_same():
    """cuDNN 9.17 on both (the same benchmark commit): Blackwell Ultra's doubled exponent rate shows in cuDNN's
    forward (+20 % at 8K), less in its backward; PyTorch's FlashAttention-2 does not use it (within 2 %)."""
    pts = {g: {(p["family"], p["phase"], p["causal"], p["seq"]): p["tflops"]
               for p in gpu_points(g, cudnn_version="9.17.0")["attention"]} for g in (GB300, GB200)}
    assert pts[GB300].keys() == pts[GB200].keys()
    assert pts[GB300][("cudnn", "fwd", True, 8192)] / pts[GB200][("cudnn", "fwd", True, 8192)] == pytest.approx(1899 / 1584)
    for k, v in pts[GB300].items():
        if k[0] == "cudnn" and k[3] >= 4096:
            assert v > pts[GB200][k], k
        if k[0] == "flash2" and k[3] >= 4096:
            assert v == pytest.approx(pts[GB200][k], rel=0.02), k


def test_every_gb300_point_names_a_gb300_file():
    for p in gpu_points(GB300)["attention"]:
        assert "gb300" in (p["source"] + p["url"]).lower() and "GB300" in p["note"], p


def test_the_in_training_gemm_share_is_the_b200s_and_the_report_says_it_is_transferred():
    assert SUSTAINED_GEMM[GB300].bf16_peak_efficiency == SUSTAINED_GEMM[GB200].bf16_peak_efficiency
    gb3, gb2 = _models()
    assert "transferred, not fitted" in gb3.kernel_source() and "of B200 (GB200 superchip)" in gb3.kernel_source()
    assert "(fitted, cost/sustained.py)" in gb2.kernel_source()


def test_the_corpus_prices_dgx_gb300_rows_on_it():
    assert SYSTEM_TOPOLOGY["DGX-GB300"] == "gb300-nvl72"


def test_a_gemm_transfer_must_name_another_gpu_of_the_file(tmp_path):
    data = load_data()
    data["gpus"][GB300]["gemm_from"] = {"gpu": "no such GPU", "rule": "r", "why": "w"}
    bad = tmp_path / "k.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ScenarioError, match="gemm_from"):
        load_data(str(bad))


def test_a_run_on_cudnn_9_13_takes_the_gb300s_own_9_13_1_causal_table():
    """cudnn-frontend's FE 1.15 artifacts (0b1577c) timed the GB300's BF16 causal layer under 9.13.1 (8K forward
    1,716 TFLOP/s, slower than 9.17.0's 1,899): MLPerf v5.1's NeMo 25.09 runs price it; no mask, which that run did
    not time, takes the oldest published table (9.18.1)."""
    pts = gpu_points(GB300, cudnn_version="9.13.1")["attention"]
    causal = {p["cudnn_version"] for p in pts if p["family"] == "cudnn" and p["causal"]}
    plain = {p["cudnn_version"] for p in pts if p["family"] == "cudnn" and not p["causal"]}
    assert causal == {"9.13.1"} and plain == {"9.18.1"}
    fwd = next(p for p in pts if p["family"] == "cudnn" and p["causal"] and p["phase"] == "fwd" and p["seq"] == 8192)
    assert fwd["tflops"] == pytest.approx(1716.056)
    assert "9.13.1 causal" in CostModel(load_topology("gb300-nvl72"), cudnn_version="9.13.1").kernel_source()

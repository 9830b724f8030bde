"""DGX B300 (Blackwell Ultra in the HGX board at 1,100 W): its own published maximum-achievable GEMMs, the GB300's
attention tables by transfer (`kernel_data.json` `attention_from`: the same part, no HGX B300 attention benchmark
published), the B200's in-training GEMM share transferred, and the corpus's DGX-B300 rows on this topology."""
import json

import pytest

from simulator.cost.costs import CostModel
from simulator.cost.kernel_data import gpu_entry, gpu_points, load_data
from simulator.cost.sustained import SUSTAINED_GEMM
from simulator.errors import ScenarioError
from simulator.plan.opgraph import Compute
from simulator.topology import load_topology
from simulator.validate.corpus import SYSTEM_TOPOLOGY, corpus_runs

B300, GB300, B200 = "B300 (HGX/DGX, 1,100 W)", "B300 (GB300 superchip)", "B200 (HGX/DGX, 1,000 W)"


def _model(topology="dgx-b300", **kw):
    return CostModel(load_topology(topology), **kw)


def _attention(seq, bwd=False):
    """One causal head-dim-128 cuDNN attention op of 128 heads (the published benchmark's layer)."""
    flops = 4.0 * seq * seq * 128 * 128 * 0.5 * (2.5 if bwd else 1.0)
    return Compute("attn", "attention", flops, 0.0, "bf16", (128, seq, seq, 128, 0.5, "bwd" if bwd else "fwd"))


def test_the_topology_names_the_gpu_the_kernel_data_is_keyed_by():
    t, b200 = load_topology("dgx-b300"), load_topology("dgx-b200")
    assert t.gpu.name == B300 and t.gpu.mx_formats and t.node.gpus == 8
    # the HGX B200's dense BF16 / FP8 peaks; NVFP4 the GB300's 15 PF at the HGX board's 2,250 / 2,500 of its peaks
    assert {d: t.gpu.peak_tflops[d] for d in ("bf16", "fp8")} == {d: b200.gpu.peak_tflops[d] for d in ("bf16", "fp8")}
    gb300 = load_topology("gb300-nvl72").gpu.peak_tflops
    assert t.gpu.peak_tflops["fp4"] == pytest.approx(gb300["fp4"] * t.gpu.peak_tflops["bf16"] / gb300["bf16"])
    assert t.node.nic_bandwidth_gbs == 2 * b200.node.nic_bandwidth_gbs  # ConnectX-8 800 Gb/s against ConnectX-7's 400


def test_its_gemms_are_priced_under_its_own_published_maximum_achievable_points():
    """ml-engineering's MAMF table, B300 SXM: 1,769 BF16 and 3,353.3 FP8 TFLOP/s at the best shapes found. Priced at
    the published curve's speed (the in-training share undone), each shape runs under its ceiling and near it."""
    m = _model()
    for p in gpu_points(B300)["gemm"]:
        eb = 1 if p["dtype"] == "fp8" else 2
        mm, n, k = p["m"], p["n"], p["k"]
        op = Compute("g", "gemm", 2.0 * mm * n * k, float((mm * k + k * n) * eb + mm * n * 2), p["dtype"], (mm, n, k))
        tflops = op.flops / (m.spec_compute_time(op) * m.sustained_gemm_fraction()) / 1e12
        assert 0.85 * p["tflops"] < tflops <= p["tflops"], (p["dtype"], tflops)
    assert {p["dtype"]: p["tflops"] for p in gpu_points(B300)["gemm"]} == {"bf16": 1769.0, "fp8": 3353.3}


def test_its_attention_is_the_gb300s_tables_in_tflops_and_the_report_says_it_is_a_transfer():
    entry = gpu_entry(B300)
    assert load_data()["gpus"][B300]["attention"] == [] and entry["attention"] == load_data()["gpus"][GB300]["attention"]
    assert entry["fp8_attention"] and entry["mla_attention"]
    b300, gb300 = _model(), _model("gb300-nvl72")
    for op in (_attention(8192), _attention(8192, bwd=True), _attention(32768)):
        assert b300.compute_time(op) == pytest.approx(gb300.compute_time(op), rel=1e-9)
    assert "of the B300 (GB300 superchip) (a transfer, simulator/cost/kernel_data.json attention_from)" in b300.kernel_source()
    assert "attention_from" not in _model("dgx-b200").kernel_source()


def test_the_in_training_gemm_share_is_the_b200s_and_the_report_says_it_is_transferred():
    assert SUSTAINED_GEMM[B300].bf16_peak_efficiency == SUSTAINED_GEMM[B200].bf16_peak_efficiency
    assert "transferred, not fitted" in _model().kernel_source()


def test_the_same_fp8_gemm_runs_about_as_fast_as_on_the_hgx_b200():
    """Both boards at 4,500 FP8 TFLOP/s dense; the published ceilings differ by 2 % (3,353.3 against 3,432.5)."""
    op = Compute("g", "gemm", 2.0 * 16384 * 8192 * 8192, float((16384 * 8192 + 8192 * 8192) + 16384 * 8192 * 2), "fp8",
                 (16384, 8192, 8192))
    ratio = _model("dgx-b200").compute_time(op) / _model().compute_time(op)
    assert 0.95 < ratio < 1.05


def test_an_attention_transfer_must_name_a_gpu_with_tables_for_a_gpu_without(tmp_path):
    data = load_data()
    for bad_by in ("no such GPU", B200):
        d = json.loads(json.dumps(data))
        d["gpus"][B300]["attention_from"]["gpu"] = bad_by
        if bad_by == B200:
            d["gpus"][B300]["attention"] = d["gpus"][B200]["attention"]  # a GPU with tables of its own
        path = tmp_path / "k.json"
        path.write_text(json.dumps(d))
        with pytest.raises(ScenarioError, match="attention_from"):
            load_data(str(path))


def test_the_corpus_prices_dgx_b300_rows_on_it_and_skips_the_hybridep_ones():
    assert SYSTEM_TOPOLOGY["DGX-B300"] == "dgx-b300"
    cases, skipped = corpus_runs()
    b300 = [c for c in cases if "dgx-b300" in c["id"]]
    assert [c["id"].split(":")[-1] for c in b300] == ["qwen3-235b-a22b-dgx-b300-256gpu-mxfp8"]
    reasons = {s["id"].split(":")[-1]: s["reason"] for s in skipped if "dgx-b300" in s["id"]}
    assert "HybridEP" in reasons["deepseekv3-dgx-b300-256gpu-mxfp8"]
    assert "HybridEP" in reasons["qwen3-30b-a3b-dgx-b300-8gpu-mxfp8"]
    assert reasons["gpt-oss-120b-dgx-b300-64gpu-bf16"] == "no clustersim model for GPT OSS 120B"

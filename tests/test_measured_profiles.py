"""The GPU profiles measured on machines lent to the project (calibrate/profiles/*-measured.json): what each holds,
and the one physical fact the H100 and H200 must agree on: the same GH100 die runs compute-bound GEMMs at the same
speed, while memory-bound kernels follow each card's HBM (3.35 against 4.8 TB/s)."""
from pathlib import Path

import pytest

from simulator.cost.profile_load import load_profile

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "calibrate" / "profiles"


@pytest.fixture(scope="module")
def h100():
    return load_profile(PROFILES / "h100-sxm-measured.json")


@pytest.fixture(scope="module")
def h200():
    return load_profile(PROFILES / "h200-sxm-measured.json")


def test_the_h100_profile_is_a_full_sweep_of_an_sxm_h100(h100):
    prov = h100.provenance
    assert prov.device_name == "NVIDIA H100 80GB HBM3" and prov.device_type == "cuda"
    assert not prov.quick and h100.spec.gpu_name == "H100 SXM5 80GB" and h100.spec.hbm_bandwidth_gbs == 3350.0
    assert {p.dtype for p in h100.gemm} >= {"bf16", "fp8", "fp32"}
    assert {p.backend for p in h100.attention} >= {"cudnn", "flash", "efficient", "default"}
    assert {p.op for p in h100.elementwise} >= {"rmsnorm", "swiglu", "rope", "cross_entropy", "copy", "upcast"}
    assert h100.optimizer and not h100.collectives  # one GPU: no collective was measured
    # what the sweep could not measure is listed, not dropped
    assert any(s.table == "collectives" for s in h100.skipped)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("shape", [(2048, 2048, 2048), (4096, 4096, 4096), (16384, 4096, 4096), (8192, 8192, 8192)])
def test_the_same_die_runs_compute_bound_gemms_alike(h100, h200, dtype, shape):
    ratio = h100.gemm_time(dtype, *shape) / h200.gemm_time(dtype, *shape)
    assert 0.93 < ratio < 1.07, (dtype, shape, ratio)


def test_memory_bound_kernels_follow_the_hbm(h100, h200):
    """A large copy: the H200 faster by most of its HBM ratio (4.8 / 3.35 = 1.43), not by nothing."""
    nbytes = 1 << 30
    ratio = h100.elementwise_time("copy", "bf16", nbytes) / h200.elementwise_time("copy", "bf16", nbytes)
    assert 1.2 < ratio < 1.5, ratio


def test_attention_is_priced_from_the_back_end_the_scenario_runs(h100):
    """A profile holds what each SDPA back end measured: cuDNN's fused attention, FlashAttention-2 (SDPA's flash)
    and eager attention (math) are priced from their own points; FlashAttention-3 and MPT's Triton kernel are in no
    back end, so a GPU profile leaves them to the published tables (None here)."""
    from simulator.plan.opgraph import Compute

    op = Compute("attn_fwd", "attention", 0.0, 0.0, "bf16", (16, 4096, 4096, 128, 0.5, "fwd"))
    cudnn = h100.compute_time(op, "cudnn")
    flash = h100.compute_time(op, "flash2")
    math_ = h100.compute_time(op, "eager")
    assert cudnn and flash and math_ and cudnn < flash < math_  # Hopper: cuDNN ~1.9x SDPA's FA2; math stores scores
    assert cudnn == h100.attention_time("bf16", 16, 4096, 4096, 128, 0.5, "fwd", "cudnn")
    assert flash == h100.attention_time("bf16", 16, 4096, 4096, 128, 0.5, "fwd", "flash")
    assert h100.compute_time(op, "flash3") is None and h100.compute_time(op, "triton_fa") is None
    # no family: SDPA's default back end, as before (what the replay's executor calls)
    assert h100.compute_time(op) == h100.attention_time("bf16", 16, 4096, 4096, 128, 0.5, "fwd")


def test_a_cpu_profile_without_the_back_end_prices_sdpa_default():
    cpu = load_profile(PROFILES / "cpu-host.json")
    backends = {p.backend for p in cpu.attention}
    assert "cudnn" not in backends
    assert cpu.attention_backend("cudnn") == (True, None)
    assert cpu.attention_backend("flash3") == (True, None)  # a CPU profile has nothing else to offer


def test_the_report_counts_what_the_profile_priced_with_the_scenarios_attention_kernel():
    """MPT's Triton attention is in no SDPA back end: priced from its published transfer, so the report's measured
    share of compute is below 1; the same model on cuDNN's attention is priced from the profile throughout."""
    from simulator.run import simulate
    from simulator.scenario import scenario_from_mapping

    def share(framework: dict) -> float:
        sc = scenario_from_mapping({
            "name": "MPT-1B-like on 8 H100", "framework": framework,
            "model": {"arch": "gpt", "layers": 24, "hidden": 2048, "ffn_hidden": 8192, "heads": 16, "vocab": 50368,
                      "positions": 2048, "tie_embeddings": True, "name": "mpt-1b"},
            "training": {"seq_len": 2048, "global_batch": 64, "micro_batch": 8, "precision": "bf16"},
            "cluster": {"topology": "dgx-h100", "nodes": 1, "profile": str(PROFILES / "h100-sxm-measured.json")},
            "parallel": {"dp": 8, "zero": 3}})
        return simulate(sc, "analytic")["profile"]["measured_compute_fraction"]

    triton = share({"name": "composer", "attn_impl": "triton"})
    assert 0.5 < triton < 0.99
    assert share({"name": "megatron"}) == pytest.approx(1.0)

"""One definition per metric (docs/metrics.md): the numbers a report gives agree with each other and with
the document that defines them."""
from pathlib import Path

import pytest

from simulator.flops import mfu_peak_flops, model_flops_per_step
from simulator.run import simulate
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
EIGHT_B = ROOT / "scenarios" / "8b_8gpu.yaml"


def _8b(precision: str):
    return load_scenario(EIGHT_B, [f"training.precision={precision}"])


@pytest.mark.parametrize("estimator", ["engine", "analytic"])
@pytest.mark.parametrize("precision", ["fp8", "bf16", "fp32"])
def test_mfu_at_most_one_and_hfu_at_least_mfu(precision, estimator):
    r = simulate(_8b(precision), estimator)
    assert 0 < r["mfu"] <= 1.0
    assert r["hfu"] >= r["mfu"]


@pytest.mark.parametrize("precision,peak_tflops", [("fp8", 1978.9), ("bf16", 989.4), ("fp32", 66.9)])
def test_mfu_is_taken_against_the_peak_of_the_gemm_precision(precision, peak_tflops):
    sc = _8b(precision)
    assert mfu_peak_flops(sc) == pytest.approx(peak_tflops * 1e12)
    r = simulate(sc, "analytic")
    flops = model_flops_per_step(sc.model, sc.training.seq_len, sc.training.global_batch)
    assert r["mfu"] == pytest.approx(flops / r["iteration_time_s"] / sc.gpus / (peak_tflops * 1e12))


def test_fp8_mfu_and_hfu_share_one_denominator():
    """Without recomputation the executed FLOPs are the model's (plus what the convention leaves out), so
    HFU and MFU of an fp8 run are within a few percent of each other: not 2x apart, as when MFU was taken
    against the BF16 peak and HFU against the FP8 one."""
    sc = load_scenario(EIGHT_B, ["training.precision=fp8", "training.recompute=none", "training.global_batch=8"])
    r = simulate(sc, "analytic")
    assert r["mfu"] <= r["hfu"] <= 1.05 * r["mfu"]


# ----------------------------------------------------------------------------------- memory fits

def test_default_headroom_is_five_percent_of_the_gpu():
    from simulator.memory import memory_report
    rep = memory_report(load_scenario(EIGHT_B))
    assert rep.headroom_gib == pytest.approx(0.05 * 79.65)
    assert rep.to_json()["free_gib"] == pytest.approx(rep.capacity_gib - rep.peak_gib)


@pytest.mark.parametrize("margin,fits", [(-0.1, True), (0.1, False)])
def test_a_layout_fits_only_if_it_leaves_the_headroom_free(margin, fits):
    from simulator.memory import memory_report
    free = memory_report(load_scenario(EIGHT_B, ["cluster.memory_headroom_gib=0"])).to_json()["free_gib"]
    rep = memory_report(load_scenario(EIGHT_B, [f"cluster.memory_headroom_gib={free + margin}"]))
    assert rep.fits is fits


def test_no_free_memory_is_not_a_fit():
    """A peak that uses the whole GPU (0.0 GiB free) does not fit under the default headroom."""
    from simulator.memory import fits
    assert not fits(79.65, 79.65, 0.05 * 79.65)
    assert fits(79.65 - 4.0, 79.65, 0.05 * 79.65)

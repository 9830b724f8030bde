"""One definition per metric (docs/metrics.md): the numbers a report gives agree with each other and with
the document that defines them."""
from pathlib import Path

import pytest

from simulator.plan.flops import mfu_peak_flops, model_flops_per_step
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
    from simulator.plan.memory import memory_report
    rep = memory_report(load_scenario(EIGHT_B))
    assert rep.headroom_gib == pytest.approx(0.05 * 79.65)
    assert rep.to_json()["free_gib"] == pytest.approx(rep.capacity_gib - rep.peak_gib)


@pytest.mark.parametrize("margin,fits", [(-0.1, True), (0.1, False)])
def test_a_layout_fits_only_if_it_leaves_the_headroom_free(margin, fits):
    from simulator.plan.memory import memory_report
    free = memory_report(load_scenario(EIGHT_B, ["cluster.memory_headroom_gib=0"])).to_json()["free_gib"]
    rep = memory_report(load_scenario(EIGHT_B, [f"cluster.memory_headroom_gib={free + margin}"]))
    assert rep.fits is fits


def test_no_free_memory_is_not_a_fit():
    """A peak that uses the whole GPU (0.0 GiB free) does not fit under the default headroom."""
    from simulator.plan.memory_fit import fits
    assert not fits(79.65, 79.65, 0.05 * 79.65)
    assert fits(79.65 - 4.0, 79.65, 0.05 * 79.65)


@pytest.mark.parametrize("peak,said", [(75.0, "fits"), (77.0, "tight"), (79.65, "tight"), (80.0, "does not fit")])
def test_the_verdict_says_tight_inside_the_headroom_and_does_not_fit_only_over_the_gpu(peak, said):
    from simulator.plan.memory_fit import verdict
    assert verdict([(peak, 79.65, 0.05 * 79.65)]) == said


def test_a_pooled_layout_takes_its_worst_pools_verdict():
    from simulator.plan.memory_fit import verdict
    assert verdict([(50.0, 79.65, 4.0), (77.0, 79.65, 4.0)]) == "tight"
    assert verdict([(77.0, 79.65, 4.0), (190.0, 184.0, 9.2)]) == "does not fit"


@pytest.mark.parametrize("margin,said,printed", [(-0.1, "fits", "-> fits"), (0.1, "tight", "-> TIGHT")])
def test_the_report_prints_the_verdict(margin, said, printed):
    from simulator.plan.memory import memory_report
    from simulator.report.text import format_report
    free = memory_report(load_scenario(EIGHT_B, ["cluster.memory_headroom_gib=0"])).to_json()["free_gib"]
    r = simulate(load_scenario(EIGHT_B, [f"cluster.memory_headroom_gib={free + margin}"]), "analytic")
    assert r["memory"]["verdict"] == said and (said == "fits") is r["memory"]["fits"]
    assert printed in format_report(r)


# ----------------------------------------------------------------------------------- docs/metrics.md

DOC = (ROOT / "docs" / "metrics.md").read_text()
FLAT = " ".join(DOC.split())
"""The doc with its line breaks folded, for phrases."""
REPORT_METRICS = ("iteration_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "hfu",
                  "breakdown", "overlap_fraction", "memory.peak_gib", "memory.capacity_gib", "memory.free_gib",
                  "memory.headroom_gib", "memory.fits", "memory.verdict")


@pytest.mark.parametrize("key", REPORT_METRICS)
def test_the_doc_defines_each_report_metric_once(key):
    assert DOC.count(f"**`{key}`**") == 1


def test_the_doc_defines_bubble_and_exposed_communication_once():
    assert DOC.count("- **Bubble**") == 1 and DOC.count("- **Exposed communication**") == 1
    assert "idle time of the critical stage waiting on pipeline dependencies over the step" in FLAT


@pytest.fixture(scope="module")
def runs():
    """(scenario, report) pairs: the 8B by both estimators, the 70B (a pipeline: bubble > 0) analytic."""
    s8, s70 = load_scenario(EIGHT_B), load_scenario(ROOT / "scenarios" / "70b_512gpu.yaml")
    return [(s8, simulate(s8, "engine")), (s8, simulate(s8, "analytic")), (s70, simulate(s70, "analytic"))]


@pytest.fixture(scope="module")
def reports(runs):
    return [r for _, r in runs]


def test_throughput_follows_its_definition(runs):
    for sc, r in runs:
        tokens = sc.training.global_batch * sc.training.seq_len
        assert r["tokens_per_s"] == pytest.approx(tokens / r["iteration_time_s"])
        assert r["tokens_per_s_per_gpu"] == pytest.approx(tokens / r["iteration_time_s"] / sc.gpus)
        assert r["model_tflops_per_gpu"] == pytest.approx(r["model"]["flops_per_step"] / r["iteration_time_s"] / sc.gpus / 1e12)


def test_breakdown_sums_to_the_step_and_exposed_is_part_of_the_communication(reports):
    for r in reports:
        assert sum(r["breakdown"].values()) == pytest.approx(r["iteration_time_s"], rel=1e-6)
        total = sum(v["time_s"] for v in r["comm"].values())
        exposed = sum(v["exposed_s"] for v in r["comm"].values())
        for d, v in r["comm"].items():
            assert v["exposed_s"] <= v["time_s"] * (1 + 1e-9) + 1e-12
            assert r["breakdown"].get(f"exposed_{d}_s", 0.0) == pytest.approx(v["exposed_s"], abs=1e-9)
        assert r["overlap_fraction"] == pytest.approx(1 - exposed / total if total else 0.0, abs=1e-9)


def test_memory_fits_follows_its_definition(reports):
    for r in reports:
        m = r["memory"]
        assert m["free_gib"] == pytest.approx(m["capacity_gib"] - m["peak_gib"])
        assert m["fits"] == (m["peak_gib"] <= m["capacity_gib"] - m["headroom_gib"])


def test_the_doc_states_the_default_headroom_and_the_peaks_the_code_uses():
    from simulator.plan.memory_fit import DEFAULT_HEADROOM_FRACTION
    from simulator.topology import load_topology
    assert f"{DEFAULT_HEADROOM_FRACTION * 100:.0f} % of the GPU's memory" in FLAT
    h100 = load_topology("dgx-h100").gpu.peak_tflops
    assert f"FP8 {h100['fp8']:,}, BF16 {h100['bf16']:,}, FP32 {h100['fp32']}" in FLAT


def test_the_doc_wording_example_is_what_the_explanations_say():
    from simulator.cli.sweep_cmd import win_head
    a = {"iteration_time_s": 5.0, "tokens_per_s_per_gpu": 1400.0}
    b = {"iteration_time_s": 7.0, "tokens_per_s_per_gpu": 1000.0}
    text = win_head("A", "B", a, b, "engine")
    assert "A has 1.40x the throughput of B" in text and "step 28.6 % shorter" in text
    assert "A has 1.40x the throughput of B" in FLAT and "step 28.6 % shorter" in FLAT
    assert "faster" not in text

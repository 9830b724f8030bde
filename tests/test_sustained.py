"""GEMMs at the fraction of their published speed a training step sustains (simulator/cost/sustained.py)."""
import pytest

from simulator.cost.costs import GEMM_PEAK_EFFICIENCY, CostModel
from simulator.cost.sustained import B200_SUSTAINED, H100_SUSTAINED, SUSTAINED_GEMM, sustained_fraction
from simulator.topology import load_topology


def test_h100_bf16_gemms_sustain_the_fitted_efficiency():
    cm = CostModel(load_topology("dgx-h100"))
    published = CostModel(load_topology("dgx-h100"), published_kernels=False)
    assert cm.gemm_curve("bf16")[0] == pytest.approx(H100_SUSTAINED.bf16_peak_efficiency) == pytest.approx(0.57)
    assert cm.kernels().gemm["bf16"].peak_efficiency > 0.75, "the published curve itself is left as published"
    assert published.sustained_gemm_fraction() == 1.0


def test_fp8_gemms_take_the_same_fraction_of_their_published_curve():
    cm = CostModel(load_topology("dgx-h100"))
    frac = cm.sustained_gemm_fraction()
    assert 0.6 < frac < 0.75
    assert cm.gemm_curve("fp8")[0] == pytest.approx(cm.kernels().gemm["fp8"].peak_efficiency * frac)
    assert cm.gemm_curve("fp8")[1] == cm.kernels().gemm["fp8"].half_efficiency_s, "the knee is the curve's"


def test_a_frameworks_own_fitted_efficiency_is_not_derated_again():
    cm = CostModel(load_topology("dgx-h100"), efficiency={"gemm_fp8": 0.55})
    assert cm.gemm_curve("fp8")[0] == 0.55
    assert CostModel(load_topology("dgx-h100"), efficiency={"gemm": 0.6}).gemm_curve("bf16")[0] == 0.6


@pytest.mark.parametrize("topology", ["dgx-a100", "pcie-l40s"])
def test_gpus_without_a_fitted_value_keep_their_published_speed(topology):
    cm = CostModel(load_topology(topology))
    assert cm.sustained_gemm_fraction() == 1.0
    assert "sustain" not in cm.kernel_source()


@pytest.mark.parametrize("topology", ["hgx-h200", "h800", "grand-teton-h100"])
def test_the_other_gh100_parts_take_the_h100_value(topology):
    cm = CostModel(load_topology(topology))
    assert cm.topology.gpu.kernel_chip in SUSTAINED_GEMM
    assert cm.gemm_curve("bf16")[0] == pytest.approx(0.57)


def test_the_fraction_never_speeds_a_gpu_up():
    assert sustained_fraction("H100 SXM5 80GB", 0.5) == 1.0
    assert sustained_fraction("unknown GPU", 0.8) == 1.0
    assert sustained_fraction("H100 SXM5 80GB", GEMM_PEAK_EFFICIENCY) == pytest.approx(0.57 / GEMM_PEAK_EFFICIENCY)


def test_the_report_says_the_gemms_are_derated_and_why():
    src = CostModel(load_topology("dgx-h100")).kernel_source()
    assert "sustain" in src and "fitted" in src and "sustained.py" in src


def test_a_profiles_gemm_times_stand_as_measured():
    """A profile measured on the user's GPU is not derated: on an H200 a 1B replay's GEMM kernels ran faster in
    the step than calibrate timed them (sustained.py)."""
    from simulator.cost.profile_load import load_profile
    from simulator.plan.opgraph import Compute
    prof = load_profile("calibrate/profiles/h100-sxm-published.json")
    op = Compute("g", "gemm", 2.0 * 8192 * 8192 * 8192, 3 * 8192 * 8192 * 2.0, "bf16", (8192, 8192, 8192))
    measured = prof.compute_time(op)
    assert measured is not None
    cm = CostModel(load_topology("dgx-h100"), profile=prof)
    assert cm.sustained_gemm_fraction() < 1.0
    assert cm.compute_time(op) == pytest.approx(measured)


@pytest.mark.parametrize("topology", ["dgx-b200", "gb200-nvl72"])
def test_blackwell_gemms_sustain_the_b200_value_in_every_dtype(topology):
    """One value for the B200 die, HGX or GB200: BF16 at 0.47 of peak, and TE's FP8 GEMMs at the same share."""
    cm = CostModel(load_topology(topology))
    assert cm.gemm_curve("bf16")[0] == pytest.approx(B200_SUSTAINED.bf16_peak_efficiency) == pytest.approx(0.47)
    te = CostModel(load_topology(topology), efficiency={"gemm_fp8_vs_bf16": 1.0})
    assert te.gemm_curve("fp8")[0] == pytest.approx(0.47)
    assert "sustain" in cm.kernel_source()


def test_te_fp8_takes_the_gpus_bf16_share_and_an_absolute_override_wins():
    h100 = CostModel(load_topology("dgx-h100"), efficiency={"gemm_fp8_vs_bf16": 1.0})
    assert h100.gemm_curve("fp8")[0] == pytest.approx(h100.gemm_curve("bf16")[0]) == pytest.approx(0.57)
    half = CostModel(load_topology("dgx-h100"), efficiency={"gemm_fp8_vs_bf16": 0.5})
    assert half.gemm_curve("fp8")[0] == pytest.approx(0.285)
    both = CostModel(load_topology("dgx-h100"), efficiency={"gemm_fp8_vs_bf16": 1.0, "gemm_fp8": 0.4})
    assert both.gemm_curve("fp8")[0] == 0.4, "a scenario's own fraction of the FP8 peak takes precedence"

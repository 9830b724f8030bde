"""Published kernel points as the default pricing (simulator/cost/kernel_data.py)."""
import json

import pytest

from simulator.cost.costs import (ATTENTION_EFFICIENCY, GEMM_HALF_EFFICIENCY_S, GEMM_PEAK_EFFICIENCY, CostModel)
from simulator.cost.kernel_data import (FAMILIES, AttentionTable, GpuKernels, Transfer, gpu_points, load_data,
                                        transfer_of)
from simulator.cost.gemm_curve import used_in_fit
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


@pytest.mark.parametrize("topology", ["dgx-h100", "dgx-a100", "hgx-h200", "gb200-nvl72", "dgx-b200", "dgx-b300"])
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


@pytest.mark.parametrize("family,tflops,cudnn", [("flash2", 319.0, None), ("flash3", 579.0, None), ("cudnn", 518.0, "9.18"),
                                                 ("cudnn", 591.0, None), ("cudnn", 591.0, "9.19.1")])
def test_attention_prices_at_the_published_speed_of_its_kernel_family(family, tflops, cudnn):
    """Causal forward, head dim 128, 4k tokens: the op's compute time is its FLOPs at that speed (FA3 paper's figure;
    cuDNN's newest, by default, from cudnn-frontend's 9.19.1 run, and the paper's, which names no release, before)."""
    cm = CostModel(load_topology("dgx-h100"), attention_kernel=family, cudnn_version=cudnn)
    op = Compute("attn", "attention", 4.0 * 32 * 4096 * 4096 * 128 * 0.5, 0.0, "bf16", (32, 4096, 4096, 128, 0.5, "fwd"))
    assert cm.attention_efficiency(op) * 989.4 == pytest.approx(tflops, rel=1e-3)


def test_an_fp8_attention_op_runs_at_cudnns_published_fp8_to_bf16_ratio():
    """9.19.1 on the H200 (the H100 entry), causal 4K forward: the FP8 / BF16 pair of one run sets the speed-up."""
    cm = CostModel(load_topology("dgx-h100"), cudnn_version="9.19.1")
    shape = (32, 4096, 4096, 128, 0.5, "fwd")
    bf16, fp8 = (cm.spec_compute_time(Compute("attn", "attention", 1e15, 0.0, d, shape)) for d in ("bf16", "fp8"))
    pair = next(p for p in load_data()["gpus"]["H100 SXM5 80GB"]["fp8_attention"]
                if p["phase"] == "fwd" and p["causal"] and p["seq"] == 4096 and p["cudnn_version"] == "9.19.1")
    assert bf16 / fp8 == pytest.approx(pair["tflops"] / pair["bf16_tflops"], rel=1e-3)


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
    """calibrate/profiles/<gpu>-published.json (usable as cluster.profile) and kernel_data.json (the default) agree
    on every per-phase point (a profile times one kernel call; a forward+backward figure is not one). The profile
    holds each table's oldest release: the H100's cuDNN points of FlashAttention-3's paper, not cudnn-frontend's
    9.19.1 run, which the default prices (a profile has one point per shape)."""
    from simulator.cost import cudnn_release
    from simulator.cost.profile_load import load_profile
    prof = load_profile(f"calibrate/profiles/{profile}.json")
    fam = {"fa2": "flash2", "fa3": "flash3", "cudnn": "cudnn"}
    pts = gpu_points(gpu, cudnn_version=cudnn_release.OLDEST)
    gemm = {(p["dtype"], p["m"], p["n"], p["k"]): p["tflops"] for p in pts["gemm"]}
    att = {(p["family"], p["phase"], p["causal"], p["d_head"], p["seq"]): p["tflops"] for p in pts["attention"]
           if p["phase"] != "fwd_bwd"}
    assert {(p.dtype, p.m, p.n, p.k): p.tflops for p in prof.gemm} == gemm
    assert {(fam[p.backend], p.phase, p.causal, p.d_head, p.s_q): p.tflops for p in prof.attention} == att


def test_triton_fa_points_load_beside_flash2_at_the_same_shapes():
    """FA2 paper Fig. 4 (A100, fwd+bwd): every Triton point has FA2's at its shape, each with its source."""
    t = load_data()["transfers"]["triton_fa"]
    assert t["base"] == "flash2" and t["gpu"] == "A100 SXM4 80GB" and t["phase"] == "fwd_bwd"
    shapes = {fam: {(p["causal"], p["d_head"], p["seq"]) for p in t["points"] if p["family"] == fam}
              for fam in ("triton_fa", "flash2")}
    assert shapes["triton_fa"] == shapes["flash2"] and len(shapes["flash2"]) == 21
    assert all(p["source"] and p["url"].startswith("http") for p in t["points"])
    ratio = transfer_of("triton_fa").ratios[(True, 128)]
    assert ratio.seqs[-1] == 16384 and ratio.efficiencies[-1] == pytest.approx(80 / 189)


SHAPES = [(True, 128, 8192), (True, 128, 32768), (True, 96, 2048), (False, 64, 4096), (True, 128, 512)]


def test_triton_fa_forward_gap_is_the_fa2_papers_forward_range_middle():
    """FA2 paper §4.1: FlashAttention-2 is 'around 1.3-1.5x faster than FlashAttention in Triton in the forward pass'."""
    gap = load_data()["transfers"]["triton_fa"]["forward_gap"]
    assert (gap["low"], gap["value"], gap["high"]) == (1.3, 1.4, 1.5)
    assert "1.3-1.5x" in gap["source"] and gap["url"] == "https://arxiv.org/abs/2307.08691"
    assert transfer_of("triton_fa").forward_gap == 1.4


@pytest.mark.parametrize("causal,d_head,seq", SHAPES)
def test_triton_fa_forward_on_h100_is_flash2_over_the_forward_gap(causal, d_head, seq):
    k = CostModel(load_topology("dgx-h100")).kernels()
    assert k.attention_efficiency("triton_fa", "fwd", causal, d_head, seq) == pytest.approx(
        k.attention_efficiency("flash2", "fwd", causal, d_head, seq) / 1.4)


def _fwd_bwd_time(k, family, causal, d_head, seq):
    """Forward+backward time per forward FLOP, the FA2 figures' weighting (backward 2.5x the forward's FLOPs)."""
    return sum(w / k.attention_efficiency(family, ph, causal, d_head, seq) for ph, w in (("fwd", 1.0), ("bwd", 2.5)))


@pytest.mark.parametrize("causal,d_head,seq", SHAPES)
def test_triton_fa_forward_and_backward_on_h100_take_the_time_the_published_ratio_gives(causal, d_head, seq):
    """The split moves time between the phases, never adds or removes it: fwd+bwd is flash2's over Fig. 4's ratio."""
    k = CostModel(load_topology("dgx-h100")).kernels()
    ratio = transfer_of("triton_fa").ratio(causal, d_head, seq)
    assert 0.4 < ratio < 0.7
    assert _fwd_bwd_time(k, "triton_fa", causal, d_head, seq) == pytest.approx(
        _fwd_bwd_time(k, "flash2", causal, d_head, seq) / ratio)


@pytest.mark.parametrize("causal,d_head,seq", SHAPES)
def test_triton_fa_backward_trails_flash2_by_more_than_its_forward(causal, d_head, seq):
    """flash_attn_triton.py's docstring: its forward is generally faster than CUDA's, its backward slower."""
    k = CostModel(load_topology("dgx-h100")).kernels()
    fwd, bwd = (k.attention_efficiency("triton_fa", ph, causal, d_head, seq)
                / k.attention_efficiency("flash2", ph, causal, d_head, seq) for ph in ("fwd", "bwd"))
    assert bwd < fwd


def test_a_transfer_without_a_forward_gap_prices_both_phases_at_the_published_ratio():
    t = Transfer("flash2", "A", {(True, 128): AttentionTable((512.0, 4096.0), (0.5, 0.4))})
    for phase in ("fwd", "bwd"):
        assert t.phase_ratio(phase, True, 128, 4096, 0.3, 0.3) == pytest.approx(0.4)


def test_a_forward_gap_splits_a_fwd_bwd_ratio_by_the_flops_each_phase_does():
    """Base at 0.3 forward and 0.25 backward, fwd+bwd ratio 0.5, forward gap 1.25: forward 0.8; backward takes the
    rest of the figure's time: (1/0.3 + 2.5/0.25) / 0.5 = 26.67, minus the forward's (1/0.3) / 0.8 = 4.17, leaves
    22.5 for 10 at the base's speed: 0.444."""
    t = Transfer("flash2", "A", {(True, 128): AttentionTable((4096.0,), (0.5,))}, forward_gap=1.25)
    assert t.phase_ratio("fwd", True, 128, 4096, 0.3, 0.25) == pytest.approx(0.8)
    assert t.phase_ratio("bwd", True, 128, 4096, 0.3, 0.25) == pytest.approx(10 / 22.5)


def test_the_triton_transfer_agrees_with_flashattention_1_on_h100():
    """Cross-check against a number the transfer does not use: flash_attn_triton.py's docstring calls the kernel
    'slightly slower than CUDA forward + backward' (FlashAttention-1), and the FA2 paper's H100 figure (Fig. 7d,
    the flash-attention README's assets/flash2_h100_fwd_bwd_benchmark.png) prints FlashAttention-1 at 135 and 137
    TFLOP/s forward+backward, causal, head dim 128, at 8k and 16k."""
    k = CostModel(load_topology("dgx-h100")).kernels()
    for seq, fa1 in ((8192, 135.0), (16384, 137.0)):
        fwd, bwd = (k.attention_efficiency("triton_fa", ph, True, 128, seq) * 989.4 for ph in ("fwd", "bwd"))
        assert 3.5 / (1 / fwd + 2.5 / bwd) == pytest.approx(fa1, rel=0.05)


def test_a_family_with_a_transfer_but_no_base_table_prices_by_the_constants():
    """No point of the transfer prices a phase by itself: without the base family's table, no efficiency."""
    t = Transfer("flash2", "A", {(True, 128): AttentionTable((4096.0,), (0.5,))}, forward_gap=1.4)
    k = GpuKernels("X", {}, {("cudnn", "fwd", True, 128): AttentionTable((4096.0,), (0.5,))}, {"triton_fa": t})
    assert k.attention_efficiency("triton_fa", "fwd", True, 128, 4096) is None
    assert k.attention_source("triton_fa") is None


@pytest.mark.parametrize("causal,d_head,seq", [(True, 128, 4096), (False, 64, 512), (True, 64, 16384)])
def test_triton_fa_on_the_a100_takes_the_time_fig_4_prints_for_it(causal, d_head, seq):
    """On the GPU that measured both, the transfer gives back the Triton bars: flash2's split table (its fwd+bwd time
    the figure's) over the figure's Triton / FlashAttention-2 ratio."""
    k = CostModel(load_topology("dgx-a100")).kernels()
    triton = next(p["tflops"] for p in load_data()["transfers"]["triton_fa"]["points"] if p["family"] == "triton_fa"
                  and (p["causal"], p["d_head"], p["seq"]) == (causal, d_head, seq))
    assert 3.5 / _fwd_bwd_time(k, "triton_fa", causal, d_head, seq) * 312.0 == pytest.approx(triton)


def test_every_framework_runs_a_known_attention_family():
    from simulator.frameworks.spec import FRAMEWORKS, load_framework
    for name in FRAMEWORKS:
        fw = load_framework(name)
        named = [fw.attention_kernel.value] + [f for o in fw.options.values() for f in (o.attention_kernel or {}).values()]
        assert set(named) <= set(FAMILIES), name


def test_a_forward_gap_without_a_number_or_a_source_is_a_clear_error(tmp_path):
    bad = tmp_path / "k.json"
    bad.write_text(json.dumps({"gpus": {}, "transfers": {"triton_fa": {
        "base": "flash2", "gpu": "A", "phase": "fwd_bwd", "rule": "r", "points": [], "forward_gap": {"value": 1.4}}}}))
    with pytest.raises(ScenarioError, match="forward_gap"):
        load_data(str(bad))


def test_a_transfer_point_of_another_family_is_a_clear_error(tmp_path):
    bad = tmp_path / "k.json"
    p = {"family": "cudnn", "dtype": "fp16", "phase": "fwd_bwd", "causal": True, "d_head": 128, "seq": 512,
         "tflops": 1.0, "source": "s", "url": "http://x"}
    bad.write_text(json.dumps({"gpus": {}, "transfers": {"triton_fa": {"base": "flash2", "gpu": "A", "phase": "fwd_bwd",
                                                                        "rule": "r", "points": [p]}}}))
    with pytest.raises(ScenarioError, match="family 'cudnn'"):
        load_data(str(bad))


@pytest.mark.parametrize("change, says", [({"d_v": None}, "d_v"), ({"phase": "fwd_bwd"}, "phase 'fwd_bwd'"),
                                           ({"family": "flash9"}, "family 'flash9'")])
def test_a_bad_mla_point_is_a_clear_error(tmp_path, change, says):
    p = {"family": "cudnn", "dtype": "bf16", "phase": "fwd", "causal": True, "d_qk": 192, "d_v": 128, "seq": 4096,
         "tflops": 599.0, "source": "s", "url": "http://x", **change}
    p = {k: v for k, v in p.items() if v is not None}
    bad = tmp_path / "k.json"
    bad.write_text(json.dumps({"gpus": {"G": {"gemm": [], "attention": [], "mla_attention": [p]}}}))
    with pytest.raises(ScenarioError, match="mla_attention") as e:
        load_data(str(bad))
    assert says in str(e.value)


def test_the_h200_is_priced_from_the_h100s_published_kernels():
    """hgx-h200 names the H100 as its chip (the same GH100 die; measured on an H200, the H100's published GEMM and
    attention figures read within 3-7 % of it, validation/published_vs_measured.py): its compute-bound kernels cost
    what the H100's do, and the report says whose points price them."""
    h100, h200 = CostModel(load_topology("dgx-h100")), CostModel(load_topology("hgx-h200"))
    for phase in ("fwd", "bwd"):
        op = Compute("a", "attention", 4.0 * 32 * 4096 * 4096 * 128 * 0.5, 0.0, "bf16", (32, 4096, 4096, 128, 0.5, phase))
        assert h200.spec_compute_time(op) == pytest.approx(h100.spec_compute_time(op))
        assert h200.attention_efficiency(op) != ATTENTION_EFFICIENCY[phase]  # a table, not the spec constant
    for dtype in ("bf16", "fp8"):  # within 1 %: the result's serial write (gemm_curve.EPILOGUE_SERIAL) runs at each
        op = _gemm(8192, 8192, 8192, dtype)  # GPU's own HBM bandwidth, and the curve is fitted at it
        assert h200.spec_compute_time(op) == pytest.approx(h100.spec_compute_time(op), rel=0.01)
    assert "H100 SXM5 80GB, the chip of H200 SXM 141GB" in h200.kernel_source()


@pytest.mark.parametrize("topology, cudnn, fwd, bwd", [("dgx-b200", None, 1384.231, 994.850),
                                                        ("gb200-nvl72", "9.17.0", 1584.0, 1211.0),
                                                        ("gb200-nvl72", "9.19.1", 1598.0, 1311.0),
                                                        ("gb200-nvl72", None, 1574.0, 1332.0)])
def test_blackwell_attention_is_priced_from_nvidias_published_cudnn_benchmark(topology, cudnn, fwd, bwd):
    """B200 and GB200 price cuDNN attention from NVIDIA's cudnn-frontend SDPA benchmark (causal, head dim 128), not
    the spec constants: at a published shape the efficiency is the published TFLOP/s over the GPU's BF16 peak, of
    the release the run names (GB200: 9.17.0, 9.19.1, and 9.22.0 by default, the newest)."""
    cm = CostModel(load_topology(topology), cudnn_version=cudnn)
    peak = cm.peak_flops("bf16")
    for phase, tflops in (("fwd", fwd), ("bwd", bwd)):
        op = Compute("a", "attention", 1e12, 0.0, "bf16", (128, 8192, 8192, 128, 0.5, phase))
        assert cm.attention_efficiency(op) == pytest.approx(tflops * 1e12 / peak)
    assert "attention cudnn tables" in cm.kernel_source()


def test_a_head_dim_blackwells_tables_lack_takes_the_h100s_ratio_between_head_dims():
    """B200's cuDNN tables are published at head dim 128 only: head dim 64 runs at 128's value times cuDNN's 64 / 128
    ratio on the H100 (the data file's head_dim_ratio), not at 128's speed. The ratio is taken within one release:
    FlashAttention-3's paper's cuDNN points, the only H100 release with both head dims (its tables before 9.19.1)."""
    b200, h100 = CostModel(load_topology("dgx-b200")), CostModel(load_topology("dgx-h100"), cudnn_version="9.18")

    def eff(cm, d, phase):
        return cm.attention_efficiency(Compute("a", "attention", 1e12, 0.0, "bf16", (32, 8192, 8192, d, 0.5, phase)))
    for phase in ("fwd", "bwd"):
        ratio = eff(h100, 64, phase) / eff(h100, 128, phase)
        assert 0.6 < ratio < 0.9
        assert eff(b200, 64, phase) == pytest.approx(eff(b200, 128, phase) * ratio)
    assert "head_dim_ratio" in b200.kernel_source()


def test_a_head_dim_ratio_must_name_another_gpu_of_the_file(tmp_path):
    data = load_data()
    bad = json.loads(json.dumps(data))
    bad["gpus"]["B200 (HGX/DGX, 1,000 W)"]["head_dim_ratio"] = {"gpu": "nope", "rule": "r", "why": "w"}
    path = tmp_path / "kd.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ScenarioError, match="head_dim_ratio"):
        load_data(str(path))


def test_hgx_b200_fp8_gemms_take_its_bf16_curve_by_the_same_die_s_max_achievable_ratio():
    cm = CostModel(load_topology("dgx-b200"), precision="fp8")
    bf16, fp8 = cm.kernels().gemm["bf16"], cm.kernels().gemm["fp8"]
    gb200 = {p["dtype"]: p["tflops"] for p in gpu_points("B200 (GB200 superchip)")["gemm"] if p.get("max_achievable")}
    assert fp8.transferred_from == "B200 (GB200 superchip)"
    assert fp8.peak_efficiency == pytest.approx(bf16.peak_efficiency * gb200["fp8"] / gb200["bf16"] / 2)
    assert fp8.half_efficiency_s == GEMM_HALF_EFFICIENCY_S  # the knee is not transferred
    assert "fp8 from bf16 by B200 (GB200 superchip)" in cm.kernel_source()
    # so FP8 GEMMs no longer run faster, against their peak, than the BF16 ones do against theirs
    big = (8192, 14336, 4096)
    assert cm.compute_time(_gemm(*big, "bf16")) / cm.compute_time(_gemm(*big, "fp8")) <= 2.0


def test_an_fp8_transfer_must_name_another_gpu_and_say_why(tmp_path):
    data = load_data()
    gpus = dict(data["gpus"], **{"B200 (HGX/DGX, 1,000 W)": dict(data["gpus"]["B200 (HGX/DGX, 1,000 W)"],
                                                               fp8_gemm_from={"gpu": "nowhere"})})
    bad = tmp_path / "k.json"
    bad.write_text(json.dumps({"gpus": gpus}))
    with pytest.raises(ScenarioError, match="fp8_gemm_from"):
        load_data(str(bad))

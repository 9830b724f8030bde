"""validation/published_vs_measured.py: published kernel figures against a measured profile, shape by shape."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("published_vs_measured", ROOT / "validation" / "published_vs_measured.py")
pvm = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = pvm  # its dataclasses look their module up while the class is built
spec.loader.exec_module(pvm)


def _timed(t: float, flops: float) -> dict:
    return {"time_s": t, "mean_s": t, "p10_s": t, "p90_s": t, "reps": 10, "tflops": flops / t / 1e12}


def gemm(dtype: str, m: int, n: int, k: int, t: float, set_: str = "transformer") -> dict:
    return {"dtype": dtype, "m": m, "n": n, "k": k, "set": set_, **_timed(t, 2.0 * m * n * k)}


def attention(backend: str, bh: int, s: int, d: int, causal: bool, phase: str, t: float) -> dict:
    flops = 4.0 * bh * s * s * d * (0.5 if causal else 1.0) * (2.5 if phase == "bwd" else 1.0)
    return {"dtype": "bf16", "backend": backend, "batch_heads": bh, "s_q": s, "s_kv": s, "d_head": d,
            "causal": causal, "phase": phase, **_timed(t, flops)}


def write_pair(tmp_path, published_gemm, measured_gemm, published_attention=(), measured_attention=()):
    """Two small profiles with the shipped files' provenance and specs (H100 published, H200 measured)."""
    paths = []
    for name, shipped, g, a in (("pub.json", pvm.PUBLISHED, published_gemm, published_attention),
                                ("meas.json", pvm.MEASURED, measured_gemm, measured_attention)):
        raw = json.loads(shipped.read_text())
        raw.update(gemm=list(g), attention=list(a), elementwise=[], host_device=[], optimizer=[], framework=[],
                   collectives=[], checks=[], skipped=[])
        (tmp_path / name).write_text(json.dumps(raw))
        paths.append(tmp_path / name)
    return paths


def rows_of(tmp_path, *args):
    pub, meas = write_pair(tmp_path, *args)
    return pvm.compare(pub, meas, sources_path=None, extra=[])[1]


def test_ratio_is_published_over_measured_tflops_at_a_measured_shape(tmp_path):
    # 4096^3: 2*4096^3 = 137.4 GFLOP; published in 200 us (687 TFLOP/s), measured in 250 us (550): 250 / 200
    (row,) = rows_of(tmp_path, [gemm("bf16", 4096, 4096, 4096, 200e-6)],
                     [gemm("bf16", 64, 64, 64, 20e-6), gemm("bf16", 4096, 4096, 4096, 250e-6)])
    assert row.ratio == pytest.approx(1.25)
    assert row.published_tflops == pytest.approx(687.19, abs=0.01)
    assert (row.how, row.bound) == ("exact", "compute")


def test_a_shape_between_grid_points_takes_the_profiles_log_throughput_interpolation(tmp_path):
    # grid m in {1024, 4096}, n = k = 4096: throughput 400 and 800 TFLOP/s; m = 2048 is halfway in log m, so
    # log-linear in throughput gives sqrt(400 * 800) = 565.7 TFLOP/s; published at 600 -> 600 / 565.7
    grid = [gemm("bf16", m, 4096, 4096, 2.0 * m * 4096 * 4096 / (tf * 1e12), "grid")
            for m, tf in ((1024, 400.0), (4096, 800.0))]
    (row,) = rows_of(tmp_path, [gemm("bf16", 2048, 4096, 4096, 2.0 * 2048 * 4096 * 4096 / 600e12)],
                     grid + [gemm("bf16", 64, 64, 64, 10e-6)])
    assert row.measured_tflops == pytest.approx(565.685, rel=1e-4)
    assert row.ratio == pytest.approx(600.0 / 565.685, rel=1e-4)
    assert row.how == "interpolated"


def test_a_gemm_below_the_ridge_is_memory_bound(tmp_path):
    # 8192x8192x256 bf16: 34.4 GFLOP over (2*8192*256 + 8192^2) * 2 B = 142.6 MB = 241 FLOP/B < 295 (H100 ridge)
    (row,) = rows_of(tmp_path, [gemm("bf16", 8192, 8192, 256, 100e-6)],
                     [gemm("bf16", 64, 64, 64, 10e-6), gemm("bf16", 8192, 8192, 256, 80e-6)])
    assert row.bound == "memory"
    assert row.ratio == pytest.approx(0.8)


def test_a_measured_time_at_the_probes_floor_is_reported_apart(tmp_path):
    # smallest measured 30 us; 1024^3 measured at 35 us (< 1.4 x 30) reads the host's time per call, not the kernel's
    (row,) = rows_of(tmp_path, [gemm("bf16", 1024, 1024, 1024, 8e-6)],
                     [gemm("bf16", 64, 64, 64, 30e-6), gemm("bf16", 1024, 1024, 1024, 35e-6)])
    assert row.bound == "floor"
    assert row.ratio == pytest.approx(35 / 8)


def test_attention_is_compared_with_its_sdpa_back_end_and_fa3_with_cudnn(tmp_path):
    shape = (64, 4096, 128, False, "fwd")
    measured = [attention("flash", *shape, 400e-6), attention("cudnn", *shape, 250e-6),
                attention("default", *shape, 240e-6), attention("flash", 16, 512, 128, False, "fwd", 40e-6),
                attention("cudnn", 16, 512, 128, False, "fwd", 40e-6)]
    fa2, fa3, cudnn = rows_of(tmp_path, [], [], [attention("fa2", *shape, 360e-6), attention("fa3", *shape, 220e-6),
                                                 attention("cudnn", *shape, 230e-6)], measured)
    assert (fa2.ratio, fa2.against, fa2.how) == (pytest.approx(400 / 360), "flash", "exact")
    assert fa3.ratio == pytest.approx(250 / 220) and fa3.against.startswith("cudnn (FA3 is not in SDPA)")
    assert cudnn.ratio == pytest.approx(250 / 230)


def test_summary_gives_median_ratio_and_mape_per_group():
    def row(ratio: float, bound: str = "compute") -> object:
        return pvm.Row(table="gemm", group="bf16", chip="H100", what="x", bound=bound, published_tflops=ratio,
                       measured_tflops=1.0, how="exact", against="bf16", source="s")
    (compute, memory) = pvm.summary([row(1.1), row(0.8), row(1.0), row(2.0, "memory")])
    assert (compute["count"], compute["median_ratio"], compute["mape"]) == (3, pytest.approx(1.0), pytest.approx(0.1))
    assert (memory["bound"], memory["count"], memory["mape"]) == ("memory", 1, pytest.approx(1.0))


def test_script_runs_on_the_shipped_files_and_every_summary_group_has_points():
    r = subprocess.run([sys.executable, "validation/published_vs_measured.py", "--json"], capture_output=True,
                       text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    groups = out["by_family"] + out["compute_by_source_or_phase"]
    families = {(s["table"], s["group"].split()[0], s["bound"]) for s in out["by_family"]}
    assert families >= {("gemm", "bf16", "compute"), ("gemm", "fp8", "compute"), ("attention", "fa2", "compute"),
                        ("attention", "fa3", "compute"), ("attention", "cudnn", "compute")}
    assert all(s["count"] > 0 for s in groups), [s for s in groups if s["count"] == 0]


def test_markdown_prints_tables_and_is_deterministic():
    runs = [subprocess.run([sys.executable, "validation/published_vs_measured.py", "--markdown"], capture_output=True,
                           text=True, cwd=ROOT, timeout=60) for _ in range(2)]
    assert runs[0].returncode == 0 and runs[0].stdout == runs[1].stdout
    assert runs[0].stdout.startswith("# Published kernel data") and "| gemm | H100 | bf16 | compute |" in runs[0].stdout


def test_attention_rows_up_to_short_seq_are_summarised_apart():
    def row(seq: int) -> object:
        return pvm.Row(table="attention", group="fa2", chip="H100", what=f"fwd full d128 bh16 s{seq}", bound="compute",
                       published_tflops=1.0, measured_tflops=1.0, how="exact", against="flash", source="s", seq=seq)
    groups = [s["group"] for s in pvm.summary([row(512), row(1024), row(2048), row(16384)])]
    assert groups == ["fa2 s<=1024", "fa2 s>1024"]


def test_a_missing_profile_is_a_clear_error(tmp_path):
    with pytest.raises(pvm.ScenarioError, match="no such file"):
        pvm.compare(tmp_path / "absent.json", pvm.MEASURED, sources_path=None, extra=[])


def test_against_the_lent_h100_memory_bound_rows_compare_and_no_point_is_counted_twice():
    """The H100 measured the published chip itself: the caveat says memory-bound rows compare too, the columns name
    the H100, and kernel_data.json's H100 points (already the published profile's) are not added again."""
    head, rows = pvm.compare(measured_path=pvm.MEASURED_H100)
    published = pvm.load_profile(pvm.PUBLISHED)
    assert sum(r.table == "gemm" for r in rows) == len(published.gemm)
    assert {r.chip for r in rows} == {"H100"}
    assert any(c.startswith("Same chip: the H100") for c in head)
    assert not any("Same die, other memory" in c for c in head)
    text = pvm.render(head, rows, markdown=True, lent="H100")
    assert text.startswith("# Published kernel data against the H100's measured kernels")
    assert "| H100 TFLOP/s |" in text and "H200" not in text
    # the H200's comparison keeps its own wording and adds kernel_data.json's H200 points
    head200, rows200 = pvm.compare()
    assert any("Same die, other memory: the H200" in c for c in head200)
    assert {r.chip for r in rows200} == {"H100", "H200"}


def test_measured_flag_selects_the_profile():
    r = subprocess.run([sys.executable, "validation/published_vs_measured.py", "--measured",
                        "calibrate/profiles/h100-sxm-measured.json", "--json"], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    fam = {(s["group"], s["bound"]): s for s in json.loads(r.stdout)["by_family"]}
    assert fam[("bf16", "compute")]["count"] == 36 and 0.85 < fam[("bf16", "compute")]["median_ratio"] < 1.1


def test_the_h100s_named_cudnn_release_is_compared_with_the_lent_gpus_cudnn():
    """cudnn-frontend's 9.19.1 table (measured on an H200, priced as the H100's from that release on) beside the lent
    GPUs' cuDNN 9.19.0 through SDPA: 20 points (both masks and phases, 2K-32K), at most 10 % faster at the median; the
    lent GPUs measured bh 64 up to 16K, so those rows are exact and the 32K ones interpolated."""
    for path in (pvm.MEASURED, pvm.MEASURED_H100):
        rows = [r for r in pvm.compare(measured_path=path)[1] if r.group == "cudnn 9.19.1"]
        assert len(rows) == 20 and all(r.ratio is not None and r.bound == "compute" for r in rows)
        assert all(r.how == ("interpolated" if r.seq == 32768 else "exact") for r in rows)
        assert 1.0 < sorted(r.ratio for r in rows)[10] < 1.10

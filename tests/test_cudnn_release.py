"""`cluster.cudnn_version`: cuDNN attention priced from the published points of the cuDNN release a run used
(simulator/cost/cudnn_release.py)."""
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cost import cudnn_release
from simulator.cost.costs import build_cost_model
from simulator.cost.kernel_data import gpu_points, load_data
from simulator.errors import ScenarioError
from simulator.plan.opgraph import Compute
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping

ROOT = Path(__file__).resolve().parent.parent
B200 = "B200 (HGX/DGX, 1,000 W)"


def point(seq, version, tflops, causal=True, family="cudnn"):
    return {"family": family, "phase": "fwd", "causal": causal, "d_head": 128, "seq": seq, "tflops": tflops,
            **({"cudnn_version": version} if version else {})}


def b200(**cluster) -> dict:
    """Llama 3.2 1B on one B200 at 8K tokens, torchtitan on cuDNN attention."""
    return {"model": "llama3.2-1b", "framework": {"name": "torchtitan", "sdpa_backend": "cudnn"},
            "training": {"seq_len": 8192, "global_batch": 2, "micro_batch": 2, "recompute": "none"},
            "cluster": {"topology": "dgx-b200", "nodes": 1, "gpus_per_node": 1, **cluster}, "parallel": {"dp": 1}}


def test_release_strings_and_the_order_of_releases():
    assert cudnn_release.release("9.10.2") == (9, 10, 2) and cudnn_release.release("9.9") == (9, 9)
    assert (9, 9, 0) < (9, 10, 2) < (9, 13, 1)  # numeric, not string, order: 9.9 is before 9.10
    assert cudnn_release.not_newer((9, 10, 2), (9, 10)) and not cudnn_release.not_newer((9, 13, 1), (9, 10))
    for bad in ("9", "9.x", "v9.10", "", 9.1):
        with pytest.raises(ScenarioError, match="not a cuDNN release"):
            cudnn_release.release(bad)


def test_the_newest_release_by_default_else_the_newest_not_newer_else_the_oldest():
    pts = [point(1024, "9.13.1", 561.0), point(1024, "9.10.2", 216.0), point(1024, None, 1.0, family="flash2")]
    for wanted, kept in ((None, 561.0), ("9.13.1", 561.0), ("9.14", 561.0), ("9.12", 216.0), ("9.10", 216.0),
                         ("9.9.0", 216.0)):
        got, chosen = cudnn_release.select(pts, wanted)
        assert [p["tflops"] for p in got if p["family"] == "cudnn"] == [kept], wanted
        assert any(p["family"] == "flash2" for p in got)  # points without a release are always taken
    _, chosen = cudnn_release.select(pts, "9.9.0")
    assert cudnn_release.describe(chosen) == "cuDNN 9.10.2 (cluster.cudnn_version 9.9.0 is older than any published)"
    assert cudnn_release.describe(cudnn_release.select(pts, None)[1]) == "cuDNN 9.13.1, the newest published"


def test_each_table_picks_its_own_release():
    """GB200's causal cuDNN points are 9.17.0's and its non-causal ones 9.18.1's: both masks stay priced."""
    pts = [point(2048, "9.17.0", 1069.0), point(2048, "9.18.1", 1232.0, causal=False)]
    for wanted in (None, "9.17.0", "9.18.1"):
        got, _ = cudnn_release.select(pts, wanted)
        assert sorted(p["causal"] for p in got) == [False, True]
    _, chosen = cudnn_release.select(pts, None)
    assert cudnn_release.describe(chosen) == "cuDNN 9.17.0 causal, 9.18.1 no mask, the newest published"
    gb200 = gpu_points("B200 (GB200 superchip)", cudnn_version="9.17.0")["attention"]
    assert {p["causal"] for p in gb200 if p["family"] == "cudnn"} == {False, True}


def test_the_b200_tables_of_two_releases_are_published_and_the_newest_prices_by_default():
    releases = {p.get("cudnn_version") for p in load_data()["gpus"][B200]["attention"] if p["family"] == "cudnn"}
    assert releases == {"9.10.2", "9.13.1"}
    assert {p["cudnn_version"] for p in gpu_points(B200)["attention"] if p["family"] == "cudnn"} == {"9.13.1"}
    assert {p["cudnn_version"] for p in gpu_points(B200, cudnn_version="9.10.2")["attention"]
            if p["family"] == "cudnn"} == {"9.10.2"}


def test_a_b200_run_on_cudnn_9_10_prices_attention_at_that_releases_published_speed():
    """Causal, head dim 128, 8K tokens: 1,211.14 / 945.44 TFLOP/s under cuDNN 9.10.2 (cudnn-frontend f937055),
    1,384.23 / 994.85 under 9.13.1 (0b1577c); FlashAttention-2 is not a cuDNN kernel and does not move."""
    old, new = (build_cost_model(scenario_from_mapping(b200(**kw))) for kw in ({"cudnn_version": "9.10.2"}, {}))
    peak = new.peak_flops("bf16")
    for phase, at_old, at_new in (("fwd", 1211.140, 1384.231), ("bwd", 945.440, 994.850)):
        op = Compute("a", "attention", 1e12, 0.0, "bf16", (128, 8192, 8192, 128, 0.5, phase))
        assert old.attention_efficiency(op) == pytest.approx(at_old * 1e12 / peak)
        assert new.attention_efficiency(op) == pytest.approx(at_new * 1e12 / peak)
    assert "cuDNN 9.10.2 (cluster.cudnn_version 9.10.2)" in old.kernel_source()
    assert "cuDNN 9.13.1, the newest published" in new.kernel_source()
    slow, fast = (simulate(scenario_from_mapping(b200(**kw)), estimator="analytic")["tokens_per_s_per_gpu"]
                  for kw in ({"cudnn_version": "9.10.2"}, {}))
    assert slow < fast
    flash = b200(cudnn_version="9.10.2")
    flash["framework"]["sdpa_backend"] = "flash"
    flash_default = b200()
    flash_default["framework"]["sdpa_backend"] = "flash"
    assert (simulate(scenario_from_mapping(flash), estimator="analytic")["tokens_per_s_per_gpu"]
            == simulate(scenario_from_mapping(flash_default), estimator="analytic")["tokens_per_s_per_gpu"])


def test_a_bad_cudnn_version_is_a_clear_error_at_its_key(tmp_path):
    with pytest.raises(ScenarioError, match="cluster.cudnn_version") as e:
        scenario_from_mapping(b200(cudnn_version="nine"))
    assert "9.10.2" in str(e.value)
    for number in (9.10, 91002):  # YAML reads 9.10 as the number 9.1; torch prints 9.10.2 as 91002
        with pytest.raises(ScenarioError, match="cluster.cudnn_version") as e:
            scenario_from_mapping(b200(cudnn_version=number))
        assert "a quoted string" in str(e.value)
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3.2-1b\ntraining: {seq_len: 2048, global_batch: 8, micro_batch: 8}\n"
                 "cluster: {topology: dgx-b200, nodes: 1, gpus_per_node: 1, cudnn_version: 9.10}\nparallel: {dp: 1}\n")
    r = subprocess.run([sys.executable, "-m", "simulator", "run", str(f)], check=False, capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 2 and "cluster.cudnn_version" in r.stderr and "Traceback" not in r.stderr


def test_the_data_file_rejects_a_release_on_a_point_that_is_not_cudnn(tmp_path):
    import json
    data = {"gpus": {"X": {"gemm": [], "attention": [dict(point(1024, "9.10.2", 100.0, family="flash2"),
                                                            dtype="bf16", source="s", url="http://x")]}}}
    f = tmp_path / "k.json"
    f.write_text(json.dumps(data))
    with pytest.raises(ScenarioError, match="cudnn points only"):
        load_data(str(f))



def test_points_without_a_release_are_a_release_older_than_every_named_one():
    """The H100's cuDNN points of FlashAttention-3's paper name no release; cudnn-frontend's H200 run names 9.19.1:
    a run on an older release takes the paper's, one on 9.19.1 or later (or naming none) takes 9.19.1's."""
    pts = [point(4096, None, 518.0), point(4096, "9.19.1", 591.0), point(4096, None, 368.0, family="flash2")]
    for wanted, kept in ((None, 591.0), ("9.19.1", 591.0), ("9.20.0", 591.0), ("9.18.0", 518.0), ("9.1", 518.0),
                         (cudnn_release.OLDEST, 518.0)):
        got, chosen = cudnn_release.select(pts, wanted)
        assert [p["tflops"] for p in got if p["family"] == "cudnn"] == [kept], wanted
        assert [p["tflops"] for p in got if p["family"] == "flash2"] == [368.0]
    _, chosen = cudnn_release.select(pts, "9.18.0")
    assert cudnn_release.describe(chosen) == \
        "cuDNN older than 9.19.1 (its points name no release) (cluster.cudnn_version 9.18.0)"


def test_a_table_only_named_releases_give_is_left_out_of_a_run_on_the_unnamed_one():
    """The paper gives no causal backward: a run on its release prices causal backward from the non-causal table,
    as before 9.19.1 was added, not from 9.19.1's causal table."""
    bwd = [dict(point(4096, None, 499.0, causal=False), phase="bwd"), dict(point(4096, "9.19.1", 474.0), phase="bwd"),
           point(4096, None, 518.0)]
    got, _ = cudnn_release.select(bwd, "9.18.0")
    assert sorted((p["phase"], p["causal"], p["tflops"]) for p in got) == [("bwd", False, 499.0), ("fwd", True, 518.0)]
    got, _ = cudnn_release.select(bwd, None)
    assert ("bwd", True, 474.0) in [(p["phase"], p["causal"], p["tflops"]) for p in got]


def test_an_h100_run_before_9_19_is_priced_as_the_papers_tables_priced_it():
    """Causal backward at head dim 128 and 8K tokens: the paper's non-causal 518 TFLOP/s before 9.19.1, cudnn-frontend's
    causal 541 from it; the report names the release."""
    def model(**cluster):
        return build_cost_model(scenario_from_mapping({
            "model": "llama3-8b", "training": {"seq_len": 8192, "global_batch": 8, "micro_batch": 1},
            "cluster": {"topology": "dgx-h100", "nodes": 1, **cluster}, "parallel": {"dp": 8}}))
    old, new = model(cudnn_version="9.18.0"), model()
    op = Compute("a", "attention", 1e12, 0.0, "bf16", (32, 8192, 8192, 128, 0.5, "bwd"))
    peak = new.peak_flops("bf16")
    assert old.attention_efficiency(op) * peak / 1e12 == pytest.approx(518.0)
    assert new.attention_efficiency(op) * peak / 1e12 == pytest.approx(541.0)
    assert "cuDNN older than 9.19.1" in old.kernel_source() and "cuDNN 9.19.1, the newest" in new.kernel_source()

"""DeepSeek-V3-shaped attention through cuDNN against its published speed (validation/mla_attention.py): the head dim
MLA is priced at, the FLOP convention the published figures share with clustersim, and the band each set reads in."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import mla_attention as mla  # noqa: E402


@pytest.fixture(scope="module")
def points():
    return mla.points(mla.load())


def test_mla_is_priced_at_the_mean_of_its_head_dims():
    assert mla.mla_head_dim() == (128 + 64 + 128) / 2


def test_the_published_flops_are_clustersims():
    # cudnn-frontend's GB200 row, 4K, batch 2: 0.977 ms forward at 1,406 TFLOP/s; 2 b h s^2 (192 + 128) / 2 causal
    # is 4 b h s^2 160 / 2, clustersim's attention FLOPs at head dim 160
    b, h, s = 2, 128, 4096
    flops = 2 * b * h * s * s * (192 + 128) / 2
    assert flops == 4 * b * h * s * s * 160 / 2
    assert flops / 0.977e-3 / 1e12 == pytest.approx(1406, rel=0.001)


def test_every_set_is_priced(points):
    assert {p.set for p in points} == {s["id"] for s in mla.load()}
    assert all(min(p.priced) > 0 for p in points)


def test_the_published_mla_tables_price_mla_and_the_moe_report_checks_them(points):
    by = {(p.set, p.seq): p for p in points}
    for (s, seq), p in by.items():  # cudnn-frontend's points are the kernel data: they read as published
        if s.startswith("cudnn-frontend"):
            assert p.priced == pytest.approx(p.published, rel=1e-9)
    # the MoE report's Table 9, in no data of clustersim's: at DeepSeek-V3's 4K within 2 % on both; at 16K its backward
    # is faster than the tables (GB200 1,298 against cudnn-frontend's 1,134; Hopper 523 where the H200 table ends at
    # 8K with 442): 10-12 % slow, known and reported
    for s in ("moe-report-table-9-blackwell", "moe-report-table-9-hopper"):
        assert abs(by[(s, 4096)].step_ratio - 1) < 0.02
        assert -0.15 < by[(s, 16384)].step_ratio - 1 < -0.05


def test_mla_tables_price_only_mla_of_their_family():
    """A head-dim-160 attention that is not MLA, and MLA through another kernel family, keep the tables by one head
    dim; a DeepSeek-V3 scenario's cost model carries MLA's two head dims."""
    from simulator.cost.costs import mla_head_dims
    from simulator.model import load_model
    k = mla.CostModel(mla.load_topology("dgx-h100")).kernels()
    dims = mla_head_dims(load_model("deepseek-v3"))
    assert dims == (192, 128) and mla_head_dims(load_model("llama3-8b")) is None
    mla_eff = k.attention_efficiency("cudnn", "bwd", True, 160, 4096, dims)
    plain = k.attention_efficiency("cudnn", "bwd", True, 160, 4096)
    assert mla_eff != plain
    assert k.attention_efficiency("flash3", "bwd", True, 160, 4096, dims) == k.attention_efficiency("flash3", "bwd", True, 160, 4096)
    assert mla_eff * 989.4 == pytest.approx(404, rel=0.01)


def test_the_report_prints_every_set():
    out = subprocess.run([sys.executable, str(ROOT / "validation" / "mla_attention.py")], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert all(s["id"] in out for s in mla.load())
    assert "forward + backward time error" in out

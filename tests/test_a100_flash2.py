"""FlashAttention-2 on the A100 from its published forward+backward figure (simulator/cost/kernel_data.json, the A100's
`fwd_bwd` points; issue 38 item 2): the points, their split into phases by the H100's balance, and the pricing."""
import json
from pathlib import Path

import pytest
import yaml

from simulator.cost.costs import (
    ATTENTION_EFFICIENCY,
    CostModel,
    attention_head_dim_factor,
    build_cost_model,
)
from simulator.cost.kernel_data import (
    gpu_points,
    load_data,
    phase_points,
    split_fwd_bwd,
)
from simulator.errors import ScenarioError
from simulator.plan.opgraph import Compute
from simulator.scenario import scenario_from_mapping
from simulator.topology import load_topology

ROOT = Path(__file__).resolve().parent.parent
A100, H100 = "A100 SXM4 80GB", "H100 SXM5 80GB"
A100_PEAK_TFLOPS = 312.0
"""dgx-a100.yaml's fp16 / bf16 dense peak: the efficiencies are TFLOP/s over it."""


def _figure_labels() -> dict:
    """(causal, head dim, seq) -> FlashAttention-2's printed fwd+bwd TFLOP/s, as the reference file transcribes them."""
    ref = yaml.safe_load((ROOT / "validation/references/kernels/fa2_a100_attention.yaml").read_text())
    return {(p["causal"], p["head_dim"], s): t for p in ref["panels"] for s, t in zip(ref["seq"], p["flash2"])
            if t is not None}


LABELS = _figure_labels()


def test_the_a100_has_one_flash2_point_per_labelled_bar_with_its_source():
    """21 labels are printed (three FlashAttention-2 labels hide behind the legend): one fwd_bwd point each, the
    reference file's number, with the figure as source and the transfer said in its note."""
    pts = gpu_points(A100)["attention"]
    assert len(LABELS) == 21
    assert {(p["causal"], p["d_head"], p["seq"]): p["tflops"] for p in pts} == LABELS
    for p in pts:
        assert (p["family"], p["phase"], p["dtype"]) == ("flash2", "fwd_bwd", "fp16")
        assert "flash2_a100_fwd_bwd_benchmark.png" in p["url"] and p["accessed"]
        assert "FlashAttention-2" in p["source"] and "transfer" in p["note"] and H100 in p["note"]
    assert load_data()["gpus"][A100]["fwd_bwd_split"]["gpu"] == H100


def test_split_fwd_bwd_shares_the_time_as_the_reference_does():
    """Reference forward 300, backward 250 (per 2.5x the FLOPs): forward time 1/300, backward 1/100, q = 1/4. A figure
    of 140 (3.5 / 140 = 0.025 per forward FLOP): forward 0.025 / 4 -> 160, backward 0.01875 for 2.5 -> 133.3."""
    fwd, bwd = split_fwd_bwd(140.0, 300.0, 250.0)
    assert fwd == pytest.approx(160.0) and bwd == pytest.approx(400.0 / 3)


@pytest.mark.parametrize("causal,d_head,seq", sorted(LABELS))
def test_the_a100s_forward_and_backward_take_the_published_fwd_bwd_time(causal, d_head, seq):
    """Priced per phase from the A100's tables, forward time + backward time = the figure's fwd+bwd time."""
    k = CostModel(load_topology("dgx-a100"), attention_kernel="flash2").kernels()
    fwd, bwd = (k.attention_efficiency("flash2", ph, causal, d_head, seq) * A100_PEAK_TFLOPS for ph in ("fwd", "bwd"))
    assert 1 / fwd + 2.5 / bwd == pytest.approx(3.5 / LABELS[(causal, d_head, seq)])


@pytest.mark.parametrize("causal,d_head,seq", [(False, 128, 4096), (False, 64, 512), (True, 128, 16384)])
def test_the_a100s_forward_backward_balance_is_the_h100s(causal, d_head, seq):
    """The split is the transfer: the A100's forward / backward speed is the H100 flash2 tables' at the shape."""
    a100 = CostModel(load_topology("dgx-a100")).kernels()
    h100 = CostModel(load_topology("dgx-h100")).kernels()
    ratio = [k.attention_efficiency("flash2", "fwd", causal, d_head, seq)
             / k.attention_efficiency("flash2", "bwd", causal, d_head, seq) for k in (a100, h100)]
    assert ratio[0] == pytest.approx(ratio[1])


def test_split_points_keep_the_published_number_and_name_the_gpu_they_were_split_by():
    pts = phase_points(A100)
    assert sorted(p["phase"] for p in pts) == ["bwd"] * 21 + ["fwd"] * 21
    assert all(p["split_by"] == H100 and p["fwd_bwd_tflops"] == LABELS[(p["causal"], p["d_head"], p["seq"])]
               for p in pts)
    assert all("split_by" not in p for p in phase_points(H100))


def _a100_scenario(framework) -> object:
    return scenario_from_mapping({
        "framework": framework,
        "model": {"arch": "llama", "layers": 2, "hidden": 2048, "heads": 16, "kv_heads": 16, "ffn_hidden": 5632,
                  "vocab": 32000},
        "training": {"seq_len": 4096, "global_batch": 8, "micro_batch": 1, "precision": "bf16", "attention": "flash"},
        "cluster": {"topology": "dgx-a100", "nodes": 1}})


@pytest.mark.parametrize("framework", ["deepspeed", {"name": "torchtitan", "sdpa_backend": "flash"}])
def test_an_a100_flash2_run_prices_attention_from_the_table_not_the_constants(framework):
    """The op's efficiency is the split table's at its shape (causal, head dim 128, 4096), not ATTENTION_EFFICIENCY."""
    cm = build_cost_model(_a100_scenario(framework))
    assert cm.attention_kernel == "flash2"
    for phase, flops_per in (("fwd", 1.0), ("bwd", 2.5)):
        op = Compute("attn", "attention", 4.0 * 16 * 4096 ** 2 * 128 * 0.5 * flops_per, 1.0, "bf16",
                     (16, 4096, 4096, 128, 0.5, phase))
        table = cm.kernels().attention_efficiency("flash2", phase, True, 128, 4096)
        assert cm.attention_efficiency(op) == pytest.approx(table)
        assert table != pytest.approx(ATTENTION_EFFICIENCY[phase] * attention_head_dim_factor(128), rel=0.02)
    assert "split into the phases by flash2's forward/backward time on the H100" in cm.kernel_source()


def test_nanotrons_fitted_attention_efficiency_still_overrides_the_a100_table():
    """nanotron.yaml fixes attention at 0.35 / 0.30 of peak (fitted on the H100 playbook) on every GPU; the
    report says the table is overridden."""
    cm = build_cost_model(_a100_scenario("nanotron"))
    op = Compute("attn", "attention", 1.0, 1.0, "bf16", (16, 4096, 4096, 128, 0.5, "fwd"))
    assert cm.attention_efficiency(op) == pytest.approx(0.35 * attention_head_dim_factor(128))
    assert "overridden by cluster.efficiency attention_bwd, attention_fwd" in cm.kernel_source()


def test_the_report_says_the_a100_flash2_tables_are_a_split_figure():
    from simulator.run import simulate
    kernels = simulate(_a100_scenario("deepspeed"))["profile"]["kernels"]
    assert "flash2 tables, published forward+backward and split" in kernels and H100 in kernels


def _bad(tmp_path, entry: dict) -> str:
    point = {"family": "flash2", "dtype": "fp16", "phase": "fwd_bwd", "causal": True, "d_head": 128, "seq": 512,
             "tflops": 99.0, "source": "s", "url": "http://x"}
    bad = tmp_path / "k.json"
    bad.write_text(json.dumps({"gpus": {"A": {"gemm": [], "attention": [point], **entry},
                                        "B": {"gemm": [], "attention": [dict(point, phase="fwd")]}}}))
    return str(bad)


def test_fwd_bwd_points_without_a_gpu_to_split_them_by_are_a_clear_error(tmp_path):
    with pytest.raises(ScenarioError, match="gpus.A.fwd_bwd_split.*need a GPU to split them by"):
        load_data(_bad(tmp_path, {}))


def test_a_split_gpu_without_the_familys_backward_is_a_clear_error(tmp_path):
    with pytest.raises(ScenarioError, match="'B' has no flash2 bwd points"):
        load_data(_bad(tmp_path, {"fwd_bwd_split": {"gpu": "B", "rule": "r"}}))


def test_an_unknown_attention_phase_is_a_clear_error(tmp_path):
    bad = tmp_path / "k.json"
    bad.write_text(json.dumps({"gpus": {"A": {"gemm": [], "attention": [
        {"family": "flash2", "dtype": "fp16", "phase": "both", "causal": True, "d_head": 128, "seq": 512,
         "tflops": 99.0, "source": "s", "url": "http://x"}]}}}))
    with pytest.raises(ScenarioError, match="phase.*'both' is unknown"):
        load_data(str(bad))


def test_no_split_phase_beats_the_fa2_papers_best_a100_efficiency():
    """Against a number the split does not use: the FA2 abstract (arXiv 2307.08691) puts FlashAttention-2 at '50-73%
    of the theoretical maximum FLOPs/s on A100'. A balance too forward-heavy would push the forward past 73 %."""
    best = max(p["tflops"] for p in phase_points(A100)) / A100_PEAK_TFLOPS
    assert max(LABELS.values()) / A100_PEAK_TFLOPS < best <= 0.73

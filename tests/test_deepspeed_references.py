"""DeepSpeed validation rows (issue 38, item 4): the published Megatron-DeepSpeed runs under validation/references/
priced with `framework: deepspeed` build with the layout as published, their measured tokens/s agree with their
step time, and the BLOOM pipeline splits follow Megatron-DeepSpeed's 'type:transformer|embedding' partition."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.scenario import scenario_from_mapping

ROOT = Path(__file__).resolve().parent.parent
REFERENCES = ROOT / "validation" / "references"


def deepspeed_runs() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(REFERENCES.glob("*.yaml")):
        for run in yaml.safe_load(path.read_text()).get("runs", []):
            if run["scenario"].get("framework") == "deepspeed":
                out.append((f"{path.stem}:{run['id']}", run))
    return out


RUNS = deepspeed_runs()


FIT_FILE = "bloom_prequel_fit"
FIT = [(r, x) for r, x in RUNS if r.startswith(FIT_FILE + ":")]
VALIDATION = [(r, x) for r, x in RUNS if not r.startswith(FIT_FILE + ":")]


def test_the_deepspeed_framework_has_more_than_one_validation_row():
    assert len(VALIDATION) >= 10
    assert all(run.get("split", "validation") == "validation" for _, run in VALIDATION)


@pytest.mark.parametrize("rid,run", RUNS, ids=[r for r, _ in RUNS])
def test_deepspeed_row_builds_with_its_published_layout_on_all_its_gpus(rid, run):
    sc = scenario_from_mapping(run["scenario"], base_dir=ROOT)
    p = sc.parallel
    assert p.dp * p.tp * p.pp == sc.cluster.nodes * sc.gpus_per_node
    assert sc.framework.name == "deepspeed"
    assert p.pp_schedule == "1f1b" and p.pp_p2p == "blocking"  # DeepSpeed's TrainSchedule, blocking p2p sends


@pytest.mark.parametrize("rid,run", RUNS, ids=[r for r, _ in RUNS])
def test_measured_tokens_per_gpu_agree_with_the_step_time(rid, run):
    """tokens/s/GPU x GPUs x step time = global batch x sequence (to the rounding of the published figures)."""
    s = run["scenario"]
    gpus = s["cluster"]["nodes"] * 8
    tokens = s["training"]["global_batch"] * s["training"]["seq_len"]
    m = run["measured"]
    assert m["tokens_per_s_per_gpu"] * gpus * m["step_time_s"] == pytest.approx(tokens, rel=2e-3)


def _type_transformer_embedding(layers: int, pp: int) -> list[int]:
    """Megatron-DeepSpeed's 'type:transformer|embedding' split as BigScience describes it: layers + 2 units (the
    embedding counted once at each end) in equal parts, the first and last stages each giving one unit to it."""
    per = (layers + 2) // pp
    return [per - 1] + [per] * (pp - 2) + [per - 1] if pp > 1 else [layers]


@pytest.mark.parametrize("rid,run", [(r, x) for r, x in RUNS if r.startswith("bloom_176b")],
                         ids=[r for r, _ in RUNS if r.startswith("bloom_176b")])
def test_bloom_rows_split_the_pipeline_as_the_embedding_counting_partition(rid, run):
    p = run["scenario"]["parallel"]
    assert (70 + 2) % p["pp"] == 0
    assert p["pp_layers"] == _type_transformer_embedding(70, p["pp"])


def test_mtnlg_rows_run_the_530b_model_tp8_pp35_over_280_350_and_420_nodes():
    """MT-NLG: 105 layers of hidden 20,480 (529.6 B parameters with the padded GPT-2 vocabulary), TP8 x PP35, DP =
    nodes / 35, three layers per stage; tokens/s/GPU from the published iteration times at global batch 1,920."""
    from simulator.params import total_params
    runs = yaml.safe_load((REFERENCES / "mtnlg_530b.yaml").read_text())["runs"]
    seen = []
    for run, step in zip(runs, (60.1, 50.2, 44.4)):
        sc = scenario_from_mapping(run["scenario"], base_dir=ROOT)
        assert total_params(sc.model) == pytest.approx(530e9, rel=0.002)
        p = sc.parallel
        assert (p.tp, p.pp, p.dp * 35) == (8, 35, sc.cluster.nodes)
        assert p.pp_layers is None and sc.model.layers == 3 * p.pp  # deepspeed.yaml's even split: 3 blocks per stage
        assert run["measured"]["step_time_s"] == step
        assert run["measured"]["tokens_per_s_per_gpu"] == pytest.approx(1920 * 2048 / (step * sc.gpus), abs=0.006)
        seen.append(sc.cluster.nodes)
    assert seen == [280, 350, 420]


def _pipeline(framework, **parallel) -> dict:
    """GPT-22B-like layers on 4 DGX A100 nodes, TP8 PP4, 16 micro-batches."""
    return {"model": {"arch": "gpt", "layers": 16, "hidden": 6144, "ffn_hidden": 24576, "heads": 64, "vocab": 51200,
                      "positions": 2048, "tie_embeddings": True},
            "framework": framework,
            "training": {"seq_len": 2048, "global_batch": 16, "micro_batch": 1, "precision": "bf16", "recompute": "full",
                         "attention": "eager"},
            "cluster": {"topology": "dgx-a100", "nodes": 4},
            "parallel": {"dp": 1, "tp": 8, "pp": 4, "zero": 1, "sp": False, **parallel}}


def test_deepspeed_pipeline_sends_block_unless_the_scenario_says_otherwise():
    """DeepSpeed's p2p send/recv assert async_op is False (runtime/pipe/p2p.py:46-84): a DeepSpeed 1F1B pipeline is
    priced with blocking sends by default, slower than the same layout with async sends; Megatron's stays async."""
    from simulator.run import simulate
    ds = scenario_from_mapping(_pipeline("deepspeed"))
    ds_async = scenario_from_mapping(_pipeline("deepspeed", pp_p2p="async"))
    mlm = scenario_from_mapping(_pipeline("megatron"))
    assert (ds.parallel.pp_p2p, ds_async.parallel.pp_p2p, mlm.parallel.pp_p2p) == ("blocking", "async", "async")
    t = {k: simulate(sc, estimator="analytic")["iteration_time_s"] for k, sc in (("ds", ds), ("async", ds_async))}
    assert t["ds"] > t["async"]

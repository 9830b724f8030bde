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


def test_the_deepspeed_framework_has_more_than_one_validation_row():
    assert len(RUNS) >= 7
    assert all(run.get("split", "validation") == "validation" for _, run in RUNS)


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


@pytest.mark.parametrize("rid,run", [(r, x) for r, x in RUNS if r.startswith("bloom")],
                         ids=[r for r, _ in RUNS if r.startswith("bloom")])
def test_bloom_rows_split_the_pipeline_as_the_embedding_counting_partition(rid, run):
    p = run["scenario"]["parallel"]
    assert (70 + 2) % p["pp"] == 0
    assert p["pp_layers"] == _type_transformer_embedding(70, p["pp"])

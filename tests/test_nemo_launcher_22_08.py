"""NeMo Megatron 22.08's DGX A100 rows (validation/references/corpus/nemo_launcher_22_08_a100.yaml) against what
NeMo 1.11 (the 22.08 container's) and apex of 2022 do with the recipe at the table commit (issue 38)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ROWS = ROOT / "validation" / "references" / "corpus" / "nemo_launcher_22_08_a100.yaml"


def test_the_nemo_22_08_a100_rows_overlap_the_gradient_reduce_scatter_only_where_nemo_1_11_does():
    """NeMo 1.11 (the 22.08 container's) switches apex DistributedFusedAdam's overlap_grad_sync off under pipeline or
    sequence parallelism (megatron_gpt_model.py:644-647 at v1.11.0): the 175B rows (PP8, SP) reduce-scatter after the
    pipeline, the 5B rows (PP1, no SP) in the last micro-batch's backward (no_sync over the others, :224-241). Both keep
    the distributed optimizer's one fp32 gradient buffer (zero 1), 100 MB buckets and no parameter all-gather overlap."""
    from simulator.scenario import scenario_from_mapping
    from simulator.validate.accuracy import corpus_cases
    cases = [c for c in corpus_cases()[0] if c.id.startswith("corpus/nemo_launcher_22_08_a100:")]
    assert len(cases) == 11
    raw = yaml.safe_load(ROWS.read_text())
    recipes = {r["id"]: r["recipe"] for r in raw["runs"]}
    for c in cases:
        sc = scenario_from_mapping(c.mapping, base_dir=ROOT)
        fw, p = sc.framework, sc.parallel
        pipelined = p.pp > 1 or p.sp
        assert fw.option("overlap_grad_reduce") is (not pipelined), c.id
        assert fw.option("distributed_optimizer") is True and fw.option("overlap_param_gather") is False, c.id
        assert (p.zero, p.dp_bucket_mb) == (1, 100), c.id
        recipe = recipes[c.id.split(":")[1]]
        assert ("megatron_gpt_model.py:644-647" in recipe) is pipelined, c.id


def _rows(path: Path) -> dict:
    return {r["id"]: r for r in yaml.safe_load(path.read_text())["runs"]}


def _per_sequence_s(step_s: float, micro_batches: int, micro_batch: int, pp: int, vpp: int) -> float:
    """One sequence's forward + backward through one stage: the step over the (interleaved) 1F1B slots,
    m + (p - 1) / v, each slot a micro-batch of `micro_batch` sequences."""
    return step_s / (micro_batches + (pp - 1) / vpp) / micro_batch


def test_nemo_22_08_measured_a_175b_sequence_1_3x_slower_than_kor22_where_clustersim_prices_them_alike():
    """The 175B 8-node row (TP8 PP8 1F1B, MBS 2, 1024 micro-batches) against KOR22's 175B selective row (same model,
    GPUs, TP8 PP8, selective + SP; MBS 1, 64 micro-batches, interleaved v = 3): measured, NeMo 22.08 spends 1.31x
    KOR22's time per sequence; predicted, the two are within 3 %. The gap the NeMo rows show is in their figures, not
    in how clustersim prices MBS 2 or the plain 1F1B schedule (the corpus file's header)."""
    from simulator.run import simulate
    from simulator.scenario import scenario_from_mapping
    nemo = _rows(ROWS)["gpt3-175b-dgx-a100-64gpu-bf16"]
    kor = _rows(ROOT / "validation" / "references" / "megatron_kor22.yaml")["175b-selective"]
    tokens = 2048 * 2048
    nemo_step = tokens / (nemo["measured"]["tokens_per_s_per_gpu"] * 64)
    measured = (_per_sequence_s(nemo_step, 1024, 2, 8, 1), _per_sequence_s(kor["measured"]["step_time_s"], 64, 1, 8, 3))
    assert measured[0] / measured[1] == pytest.approx(1.31, abs=0.01)
    pred = []
    for row, (m, b, v) in ((nemo, (1024, 2, 1)), (kor, (64, 1, 3))):
        sc = scenario_from_mapping(row["scenario"], base_dir=ROOT)
        pred.append(_per_sequence_s(simulate(sc)["iteration_time_s"], m, b, 8, v))
    assert abs(pred[0] / pred[1] - 1) < 0.03

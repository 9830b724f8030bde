"""The DeepSpeed fit split (issue 38): BigScience's A100 layout trials before BLOOM's main run
(validation/references/bloom_prequel_fit.yaml) are fit rows of `framework: deepspeed`, with tile-aligned hidden sizes
only, their pipeline splits as Megatron-DeepSpeed's partition methods of the time, and none of them a copy of a
validation row."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.validate.accuracy import reference_cases

ROOT = Path(__file__).resolve().parent.parent
REFERENCES = ROOT / "validation" / "references"
FIT_PATH = REFERENCES / "bloom_prequel_fit.yaml"
FIT_RUNS = yaml.safe_load(FIT_PATH.read_text())["runs"]


def _key(run: dict) -> tuple:
    """A run's exact shape, layout and measurement: what a copy of another row would share."""
    s = run["scenario"]
    model = s["model"] if isinstance(s["model"], str) else sorted((k, v) for k, v in s["model"].items() if k != "name")
    return (repr(model), repr(sorted(s.get("parallel", {}).items())), repr(sorted(s.get("training", {}).items())),
            s.get("cluster", {}).get("nodes"), run.get("measured", {}).get("step_time_s"))


def test_the_fit_file_has_rows_of_every_tensor_parallel_size_it_ran():
    assert {run["scenario"]["parallel"]["tp"] for run in FIT_RUNS} == {1, 2, 4, 8}
    assert len(FIT_RUNS) >= 50


@pytest.mark.parametrize("run", FIT_RUNS, ids=[r["id"] for r in FIT_RUNS])
def test_every_row_is_a_deepspeed_fit_row_with_a_tile_aligned_hidden_size(run):
    assert run["split"] == "fit"
    assert run["scenario"]["framework"] == "deepspeed"
    assert run["scenario"]["model"]["hidden"] % 128 == 0  # 14400 (a cuBLAS tile effect) is left out


def test_row_ids_are_unique():
    ids = [run["id"] for run in FIT_RUNS]
    assert len(ids) == len(set(ids))


def test_no_fit_row_repeats_a_validation_row():
    validation = set()
    for path in sorted(REFERENCES.glob("*.yaml")):
        for run in yaml.safe_load(path.read_text()).get("runs", []):
            if run.get("split", "validation") == "validation" and "scenario" in run:
                validation.add(_key(run))
    assert not [run["id"] for run in FIT_RUNS if _key(run) in validation]


@pytest.mark.parametrize("run", FIT_RUNS, ids=[r["id"] for r in FIT_RUNS])
def test_pipeline_split_is_the_partition_method_of_its_date(run):
    """From 02-27/28 'type:transformer|embedding' (layers + 2 units in equal parts, one embedding unit on the first
    and last stages); before, 'type:transformer' in ceil(layers / pp) chunks (78 over 12: 7 x 11 and 1)."""
    layers, pp = run["scenario"]["model"]["layers"], run["scenario"]["parallel"]["pp"]
    split = run["scenario"]["parallel"]["pp_layers"]
    if "02-28" in run["where"] or "'type:transformer|embed" in run["where"] or layers == 106:
        per = (layers + 2) // pp
        assert (layers + 2) % pp == 0 and split == [per - 1] + [per] * (pp - 2) + [per - 1]
    else:
        chunk = -(-layers // pp)
        assert split[:-1] == [chunk] * (pp - 1) and split[-1] == layers - chunk * (pp - 1)


def test_validate_reads_the_rows_as_deepspeed_fit_cases():
    cases = [c for c in reference_cases() if c.id.startswith("bloom_prequel_fit:")]
    assert len(cases) == len(FIT_RUNS)
    assert {c.split for c in cases} == {"fit"}
    assert {c.framework for c in cases} == {"deepspeed"}


# --------------------------------------------------------------------------- the two values fitted on this split

def _tp_allreduce_seconds(framework: str, topology: str) -> float:
    from simulator.cost.costs import build_cost_model  # noqa: PLC0415
    from simulator.plan.layout import group_shape  # noqa: PLC0415
    from simulator.plan.opgraph import Comm  # noqa: PLC0415
    from simulator.scenario import load_scenario  # noqa: PLC0415
    sc = load_scenario(str(ROOT / "scenarios/8b_8gpu.yaml"),
                       [f"framework={framework}", f"cluster.topology={topology}", "parallel.tp=8", "parallel.dp=1",
                        "parallel.sp=false", "training.global_batch=8"])
    return build_cost_model(sc).comm_time(Comm("tp_allreduce_mlp", "tp", "all_reduce", 64e6), group_shape(sc, "tp"))


def test_deepspeed_pays_its_fitted_cost_on_every_tp_collective_and_megatron_does_not():
    ds, mlm = _tp_allreduce_seconds("deepspeed", "dgx-a100"), _tp_allreduce_seconds("megatron", "dgx-a100")
    assert ds - mlm == pytest.approx(1.25e-3, rel=1e-6)


def test_jean_zay_prices_its_nvlink_at_the_fitted_bandwidth_not_a_dgx_switch():
    from simulator.topology import load_topology  # noqa: PLC0415
    assert load_topology("jean-zay-a100").node.bandwidth_gbs == 110
    assert load_topology("dgx-a100").node.bandwidth_gbs == 300
    jz, dgx = _tp_allreduce_seconds("megatron", "jean-zay-a100"), _tp_allreduce_seconds("megatron", "dgx-a100")
    assert jz > 2 * dgx  # a 64 MB all-reduce over 8 GPUs: bandwidth-bound, 300 / 110 slower less latency

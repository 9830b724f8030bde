"""The transcribed table of published cluster failure rates (validation/references/reliability) and the rule
that picks the simulator's default interruption rate from it (issue 41, item 3).

The rule (README.md beside the table, fixed before any comparison with Llama 3): the default is the median
per-GPU-hour rate of the rows that count unexpected job interruptions (or hardware failures that interrupt a
job) on A100-or-newer clusters of at least 1,000 GPUs, one value per study and cluster, with the count and
its exposure published by the study itself; with fewer than three such studies the default is not changed.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.wholerun.failures import (
    DEFAULT_FAILURES_PER_GPU_HOUR,
    KOKOLIS_GPUS_PER_NODE,
    KOKOLIS_RSC1_FAILURES_PER_NODE_DAY,
    KOKOLIS_RSC2_FAILURES_PER_NODE_DAY,
    failures_per_gpu_hour,
)

TABLE = Path(__file__).resolve().parent.parent / "validation" / "references" / "reliability" / "cluster_failure_rates.yaml"

COUNTS = {"unexpected_job_interruptions", "interrupting_hardware_failures", "hardware_failures", "error_events",
          "node_faults", "restarts", "gpu_failures", "unclear", "none"}
"""What a row's figure counts; only the first two enter the rule's median."""
ELIGIBLE_COUNTS = {"unexpected_job_interruptions", "interrupting_hardware_failures"}
A100_OR_NEWER = {"A100", "A800", "H100", "H800", "H200", "B200", "GB200"}
EVIDENCE = {"published", "inferred_by_third_party", "not_read"}
READ = {"primary", "primary_transcription", "secondary"}
REQUIRED = {"id", "study", "citation", "url", "where", "read", "read_note", "published", "unit", "cluster",
            "period", "counts", "counts_note", "evidence", "events", "gpu_hours", "arithmetic", "per_gpu_hour",
            "in_default", "reason"}


def _rows() -> list[dict]:
    with open(TABLE, encoding="utf-8") as f:
        return yaml.safe_load(f)["rows"]


def _row(row_id: str) -> dict:
    return next(r for r in _rows() if r["id"] == row_id)


def _qualifies(row: dict) -> bool:
    """The rule applied to one row's fields (README.md, "How the rule is applied")."""
    return (row["counts"] in ELIGIBLE_COUNTS and row["cluster"]["gpu_model"] in A100_OR_NEWER
            and (row["cluster"]["gpus"] or 0) >= 1000 and row["evidence"] == "published"
            and row["per_gpu_hour"] is not None)


def test_every_row_has_the_required_fields_with_allowed_values():
    rows = _rows()
    assert rows
    for r in rows:
        assert REQUIRED <= set(r), (r.get("id"), REQUIRED - set(r))
        assert r["counts"] in COUNTS, r["id"]
        assert r["evidence"] in EVIDENCE, r["id"]
        assert r["read"] in READ, r["id"]
        assert {"name", "gpu_model", "gpus", "gpus_per_node"} <= set(r["cluster"]), r["id"]
        assert r["cluster"]["gpus"] is None or r["cluster"]["gpus"] > 0, r["id"]  # null: not stated


def test_row_ids_are_unique():
    ids = [r["id"] for r in _rows()]
    assert len(ids) == len(set(ids))


def test_the_table_records_when_it_was_read():
    with open(TABLE, encoding="utf-8") as f:
        assert yaml.safe_load(f)["read_date"] == "2026-11-26"


@pytest.mark.parametrize("row", _rows(), ids=lambda r: r["id"])
def test_per_gpu_hour_is_the_events_divided_by_the_gpu_hours(row):
    if row["per_gpu_hour"] is None:
        assert row["events"] is None or row["gpu_hours"] is None
        return
    assert row["per_gpu_hour"] == pytest.approx(row["events"] / row["gpu_hours"], rel=1e-3)


@pytest.mark.parametrize("row", _rows(), ids=lambda r: r["id"])
def test_in_default_follows_the_rule(row):
    assert row["in_default"] == _qualifies(row), row["reason"]


def test_at_most_one_row_per_study_and_cluster_enters_the_median():
    keys = [(r["study"], r["cluster"]["name"]) for r in _rows() if r["in_default"]]
    assert len(keys) == len(set(keys))


def test_fewer_than_three_studies_qualify_so_the_default_stays_rsc1():
    """When a third study qualifies this fails: move DEFAULT_FAILURES_PER_GPU_HOUR to the rule's median."""
    studies = {r["study"] for r in _rows() if r["in_default"]}
    assert len(studies) < 3, studies
    assert DEFAULT_FAILURES_PER_GPU_HOUR == failures_per_gpu_hour(KOKOLIS_RSC1_FAILURES_PER_NODE_DAY)


@pytest.mark.parametrize("row_id, per_node_day", [("kokolis-rsc1", KOKOLIS_RSC1_FAILURES_PER_NODE_DAY),
                                                   ("kokolis-rsc2", KOKOLIS_RSC2_FAILURES_PER_NODE_DAY)])
def test_the_simulators_kokolis_constants_are_the_tables_rows(row_id, per_node_day):
    row = _row(row_id)
    assert per_node_day * 1000 == pytest.approx(row["events"])
    assert row["cluster"]["gpus_per_node"] == KOKOLIS_GPUS_PER_NODE
    assert failures_per_gpu_hour(per_node_day) == pytest.approx(row["per_gpu_hour"], rel=1e-3)

"""Mid-size collectives (2-128 MiB) against published nccl-tests figures: NVLS all-reduce in one node
is timed as NCCL pipelines it (simulator/cost/nvls.py), in chunks NCCL shrinks with the message, each
loop of chunks paying a fixed cost, plus a loop to fill the pipeline."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.cost import nvls
from simulator.cost.collectives import estimate
from simulator.topology import load_topology

REFERENCE = Path(__file__).resolve().parent.parent / "validation" / "references" / "collectives" / "nccl_tests_h100.yaml"
H100_8 = tuple(range(8))
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def _table(table_id: str) -> dict:
    tables = {t["id"]: t for t in yaml.safe_load(REFERENCE.read_text())["tables"]}
    return tables[table_id]


@pytest.mark.parametrize("nbytes,chunk", [
    (8 * GiB, 128 * KiB), (GiB, 128 * KiB), (GiB - 1, 64 * KiB), (64 * MiB, 64 * KiB),
    (64 * MiB - 1, 32 * KiB), (8 * MiB, 32 * KiB), (8 * MiB - 1, 16 * KiB), (MiB, 16 * KiB)])
def test_nvls_chunk_shrinks_where_nccl_shrinks_it_on_8_gpus(nbytes, chunk):
    # src/enqueue.cc calcCollChunking: 16 channels x 8 heads; < 1 GiB: 64 KiB, < 64 MiB: 32 KiB, < 8 MiB: 16 KiB
    assert nvls.nvls_chunk_bytes(nbytes, 16 * 8) == chunk


@pytest.mark.parametrize("table_id", ["azure-nd-h100-v5-allreduce-nvls", "azure-nd-h200-v5-allreduce-nvls"])
def test_mid_size_nvls_all_reduce_reads_what_nccl_tests_report(table_id):
    # without the pipeline these read 1.11-1.59x the published busbw (MAPE 33-39 %)
    table = _table(table_id)
    topo = load_topology(table["topology"])
    ratios = [estimate(topo, "all_reduce", s, H100_8).busbw_GBps / b for s, b in table["points"] if 2 * MiB <= s <= 128 * MiB]
    assert len(ratios) == 7
    assert all(0.85 <= r <= 1.15 for r in ratios), ratios
    assert sum(abs(r - 1) for r in ratios) / len(ratios) < 0.08


def test_large_nvls_all_reduce_keeps_its_peak():
    # nccl-tests #212 (NVIDIA): ~480 GB/s busbw on 8 x H100; Azure ND H100 v5 at 8 GiB: 478.9
    e = estimate(load_topology("dgx-h100"), "all_reduce", 8 * GiB, H100_8)
    assert e.algorithm == "nvls" and e.busbw_GBps == pytest.approx(480, rel=0.01)


def test_a_smaller_chunk_costs_more_per_byte():
    # the same bytes in 32 KiB chunks (just under 64 MiB) take longer per byte than in 64 KiB chunks (at 64 MiB)
    topo = load_topology("dgx-h100")
    below, at = (estimate(topo, "all_reduce", s, H100_8, algorithms=("nvls",)) for s in (64 * MiB - 4096, 64 * MiB))
    per_byte_below = below.time_s / below.nbytes
    per_byte_at = at.time_s / at.nbytes
    assert per_byte_below > per_byte_at * 1.05


def test_the_pipeline_fill_is_one_loop_of_the_last_chunk():
    p = nvls.NvlsPipeline(heads=8)
    bw = 290e9
    t = p.time(4 * MiB, 0.0, bw)  # 16 KiB chunks, 2 loops of 128 x 16 KiB
    loops = 4 * MiB / (128 * 16 * KiB)
    fill = nvls.NVLS_LOOP_OVERHEAD_S + 128 * 16 * KiB / bw
    assert t == pytest.approx(4 * MiB / bw + loops * nvls.NVLS_LOOP_OVERHEAD_S + fill)


def test_multi_node_nvls_tree_is_not_chunk_timed():
    # NVLS-tree has its own chunk rule (not modelled): its time stays latency + S / bandwidth
    from simulator.cost.collectives import layout_of
    from simulator.cost.nccl_algorithms import candidates
    topo = load_topology("dgx-h100")
    cands = candidates(topo, "all_reduce", layout_of(topo, tuple(range(16))))
    assert [c.pipeline for c in cands if c.algorithm == "nvls_tree"] == [None]
    assert [c.pipeline.heads for c in candidates(topo, "all_reduce", layout_of(topo, H100_8)) if c.algorithm == "nvls"] == [8]

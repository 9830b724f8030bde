"""TP communication overlapped with its GEMM in tp chunks (simulator/plan/tp_overlap.py)."""
from pathlib import Path

import pytest

from simulator.errors import ScenarioError
from simulator.evaluate.engine import simulate_engine
from simulator.plan.opgraph import Comm, Compute, Node
from simulator.plan.tp_overlap import chunk_tp_overlap
from simulator.run import simulate
from simulator.scenario import load_scenario
from test_engine import CommCost, scenario

ROOT = Path(__file__).resolve().parent.parent


def _gemm(name, m=4096, n=4096, k=4096):
    return Compute(name, "gemm", 2.0 * m * n * k, 3.0 * m * n * 2, "bf16", (m, n, k))


def test_an_all_gather_then_gemm_pair_becomes_a_first_chunk_and_a_pipelined_rest():
    nodes = [Node(_gemm("prev")), Node(Comm("ag", "tp", "all_gather", 8e6, blocking=False), (0,)), Node(_gemm("qkv"), (0,))]
    out = chunk_tp_overlap(nodes, 4)
    names = [n.op.name for n in out]
    assert names == ["prev", "ag_chunk0", "ag_rest", "qkv_chunks", "qkv_last"]
    head, rest, main, last = out[1:]
    assert head.op.blocking and head.op.bytes == 2e6 and not rest.op.blocking and rest.op.bytes == 6e6
    assert main.op.repeat == 3 and main.op.shape == (1024, 4096, 4096) and main.op.flops == pytest.approx(0.75 * nodes[2].op.flops)
    assert 1 in main.deps and set(last.deps) == {2, 3}, "GEMM chunks after the first chunk; the last after the rest"


def test_a_gemm_then_reduce_scatter_pair_leaves_the_last_chunk_exposed_and_its_consumers_wait_for_it():
    nodes = [Node(_gemm("fc2")), Node(Comm("rs", "tp", "reduce_scatter", 8e6, blocking=False), (0,)),
             Node(Compute("residual", "elementwise", 0.0, 1e6, "bf16", (1,)), (0,))]
    out = chunk_tp_overlap(nodes, 4)
    assert [n.op.name for n in out] == ["fc2_first", "rs_rest", "fc2_chunks", "rs_chunk_last", "residual"]
    assert out[3].op.blocking and set(out[3].deps) == {1, 2}
    assert out[4].deps == (3,), "the residual add reads the reduced output"


class FlopCost(CommCost):
    """GEMMs at a fixed rate, collectives alpha-beta on tp: overlap decided by real durations."""

    def __init__(self, topology, bw):
        super().__init__(topology, dims=("tp",))
        self.alpha, self.bw = 0.0, bw

    def compute_time(self, op):
        return op.flops / 1e13 if op.kind == "gemm" else 0.0


@pytest.mark.parametrize("t", [2, 4])
def test_with_gemms_longer_than_their_collectives_about_one_chunk_in_t_stays_exposed(t):
    on = scenario(pp=1, m=2, tp=t, sp=True, overlap_tp=True, layers=4)
    r = simulate_engine(on, FlopCost(on.topology, bw=1e12))
    total, exposed = r.comm["tp"]
    assert total > 0 and 0.7 * total / t <= exposed <= 1.15 * total / t


def test_with_collectives_longer_than_their_gemms_the_excess_is_exposed():
    on = scenario(pp=1, m=2, tp=4, sp=True, overlap_tp=True, layers=4)
    off = scenario(pp=1, m=2, tp=4, sp=True, layers=4)
    slow = 1e8  # collectives ~100x their GEMMs
    r_on, r_off = simulate_engine(on, FlopCost(on.topology, slow)), simulate_engine(off, FlopCost(off.topology, slow))
    assert r_on.comm["tp"][1] > 0.9 * r_off.comm["tp"][1]
    assert r_on.iteration_time_s > 0.95 * r_off.iteration_time_s


def test_the_70b_gains_what_its_exposed_tp_allows_and_no_more():
    """Overlap can save at most the TP time exposed without it, less one chunk in tp of it."""
    off = simulate(load_scenario(ROOT / "scenarios" / "70b_512gpu.yaml"), estimator="analytic")
    on = simulate(load_scenario(ROOT / "scenarios" / "70b_512gpu.yaml", ["parallel.overlap_tp=true"]), estimator="analytic")
    saved = off["iteration_time_s"] - on["iteration_time_s"]
    assert 0 < saved <= off["comm"]["tp"]["exposed_s"] * (1 - 1 / 8)
    assert on["comm"]["tp"]["exposed_s"] >= off["comm"]["tp"]["time_s"] / 8 * 0.9


def test_overlap_tp_needs_sequence_parallelism():
    with pytest.raises(ScenarioError) as e:
        scenario(pp=1, m=2, tp=4, sp=False, overlap_tp=True, layers=4)
    assert e.value.path == "parallel.overlap_tp"

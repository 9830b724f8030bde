"""The analytic listing's PP sends share their links with what they overlap (`evaluate/send_sharing.py`), as the
engine's link model shares them."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.cost.costs import build_cost_model
from simulator.evaluate.analytic import estimate
from simulator.evaluate.engine import simulate_engine
from simulator.evaluate import links
from simulator.evaluate.send_sharing import Transfer, send_extras
from simulator.scenario import scenario_from_mapping

ROOT = Path(__file__).resolve().parent.parent
NIC = (("nic", 1.0),)


def both_ways(stage: int, use: tuple) -> tuple:
    """A collective's demand as the listing records it (`links.both_ways`, as pairs)."""
    return tuple(links.both_ways(stage, use).items())


def send_demand(src: int, dst: int, use: tuple) -> tuple:
    return tuple(links.send_demand(src, dst, use).items())


def test_a_send_beside_a_collective_on_a_saturated_nic_takes_twice_as_long():
    """Two transfers that each fill one link share it and take twice as long (`links.py`): the send's extra is its
    alone time where the collective runs through all of it."""
    dp = Transfer(None, 0.0, 2.0, both_ways(0, NIC))
    send = Transfer(("s",), 0.5, 1.0, send_demand(0, 1, NIC))
    assert send_extras([dp, send]) == {("s",): pytest.approx(1.0)}


def test_a_send_that_overlaps_nothing_or_another_link_keeps_its_alone_price():
    far = Transfer(None, 5.0, 1.0, both_ways(0, NIC))
    other_stage = Transfer(None, 0.0, 3.0, both_ways(2, NIC))  # neither the sender's nor the receiver's links
    nvlink = Transfer(None, 0.0, 3.0, both_ways(0, (("intra", 1.0),)))
    assert send_extras([far, other_stage, nvlink, Transfer(("s",), 0.0, 1.0, send_demand(0, 1, NIC))]) == {}


def test_a_send_shares_the_receivers_links_too_and_its_window_widens_to_what_starts_later():
    """The receiver's collective loads its "in" link; a collective that starts inside the send's shared window (but
    after its alone end) is taken in as well."""
    send = Transfer(("s",), 0.0, 1.0, send_demand(0, 1, NIC))
    at_receiver = Transfer(None, 0.0, 0.5, both_ways(1, NIC))
    later = Transfer(None, 1.2, 4.0, both_ways(0, NIC))
    # 0-1 s: half speed beside the receiver's collective (0.5 s of work done), then alone: ends at 1.5 s ...
    assert send_extras([send, at_receiver]) == {("s",): pytest.approx(0.5)}
    # ... unless a collective starting at 1.2 s on the sender's link (after the alone end, 1 s) halves it again
    assert send_extras([send, at_receiver, later]) == {("s",): pytest.approx(0.8)}


def _mlperf(gpus: int):
    runs = yaml.safe_load((ROOT / "validation" / "references" / "mlperf_training_v3_1_gpt3.yaml").read_text())["runs"]
    raw = next(r["scenario"] for r in runs if int(r["id"].split("-")[2]) == gpus)
    sc = scenario_from_mapping(raw, base_dir=ROOT)
    return sc, build_cost_model(sc)


@pytest.mark.slow
def test_at_10k_gpus_the_listing_reads_the_engines_bubble():
    """MLPerf Training v3.1 GPT-3 175B on 10,240 H100 (TP4 PP8 VP12, 8 micro-batches, DP 320 over InfiniBand): the
    DP buckets' reduce-scatters and all-gathers share the NIC with the pipeline's sends. Listed alone the step read
    4.3 % shorter than the engine's; with the sends shared it reads within 0.5 %, its bubble too."""
    sc, cost = _mlperf(10240)
    e = simulate_engine(sc, cost)
    a = estimate(sc, cost)
    alone = estimate(sc, cost, send_sharing=False)
    assert alone.iteration_time_s < 0.97 * e.iteration_time_s
    assert a.iteration_time_s == pytest.approx(e.iteration_time_s, rel=0.005)
    assert a.breakdown["bubble_s"] == pytest.approx(e.breakdown["bubble_s"], rel=0.1)
    assert a.contention_s["pp"] > 0.0
    assert a.comm["pp"][0] == pytest.approx(e.comm["pp"][0], rel=0.05)


def test_without_pipeline_nothing_is_recorded_or_relisted():
    sc = scenario_from_mapping({"name": "x", "model": "llama3-8b", "cluster": {"topology": "dgx-h100", "nodes": 2},
                                "training": {"seq_len": 2048, "global_batch": 32, "micro_batch": 1},
                                "parallel": {"tp": 1, "pp": 1, "dp": 16, "zero": 3}})
    cost = build_cost_model(sc)
    assert estimate(sc, cost).iteration_time_s == estimate(sc, cost, send_sharing=False).iteration_time_s

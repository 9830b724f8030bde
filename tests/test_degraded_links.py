"""Degraded links (`cluster.degraded_links`): a collective or send whose group crosses a node's degraded link class
runs at that link's share of bandwidth (the slowest hop of its ring); representative mode, the analytic estimate
and every rank simulated agree."""
import pytest
from evaluators import three_step_times

from simulator.cost.costs import build_cost_model
from simulator.errors import ScenarioError
from simulator.plan.paces import LinkVariant, Pace, stage_paces
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping


def _small(links=(), nodes=2, **parallel):
    raw = {"model": {"arch": "llama", "layers": 8, "hidden": 1024, "ffn_hidden": 2048, "heads": 8, "vocab": 4000},
           "training": {"seq_len": 1024, "global_batch": 16, "micro_batch": 1},
           "cluster": {"topology": "dgx-h100", "nodes": nodes, "gpus_per_node": 4, "degraded_links": list(links)},
           "parallel": {"tp": 2, "pp": 2, "sp": True, **parallel}}
    return scenario_from_mapping(raw)


def _three(sc):
    return three_step_times(sc)


def test_a_healthy_cluster_has_nominal_paces():
    assert stage_paces(_small()) == (Pace(), Pace())


@pytest.mark.parametrize("link, parallel", [
    ({"node": 1, "link": "nic", "bandwidth": 0.1}, {}),  # PP sends leave node 1
    ({"node": 1, "link": "nvlink", "bandwidth": 0.1}, {}),  # TP and DP of stage 1 inside node 1
    ({"node": 0, "link": "nic", "bandwidth": 0.1}, {"order": "tp-cp-pp-ep-dp"}),  # DP across the nodes
    ({"node": 0, "link": "nvlink", "bandwidth": 0.2}, {"order": "tp-cp-pp-ep-dp"}),  # TP and PP inside node 0
])
def test_analytic_representative_and_every_rank_agree_and_the_step_slows(link, parallel):
    healthy = _three(_small(**parallel))
    slow = _three(_small([link], **parallel))
    assert slow[1] == pytest.approx(slow[0], rel=1e-6)
    assert slow[2] == pytest.approx(slow[0], rel=1e-6)
    assert slow[0] > healthy[0] * 1.01


def test_one_degraded_replica_among_healthy_ones_paces_its_stage_like_every_rank_does():
    """4 nodes, DP across them: node 2's NVLink slows the TP groups of one replica only; the stage waits for it
    at the gradient sync, as every rank simulated shows."""
    sc = _small([{"node": 2, "link": "nvlink", "bandwidth": 0.25}], nodes=4, order="tp-cp-pp-ep-dp")
    a, rep, full = _three(sc)
    assert rep == pytest.approx(a, rel=1e-6)
    assert full == pytest.approx(a, rel=0.01)


def test_a_link_no_group_crosses_changes_nothing():
    """Node 0's NICs when every group of the job stays inside its node: PP and DP inside nodes (one node)."""
    sc = _small([{"node": 0, "link": "nic", "bandwidth": 0.1}], nodes=1, tp=1)
    assert _three(sc)[0] == pytest.approx(_three(_small(nodes=1, tp=1))[0], rel=1e-12)


def test_the_stage_holding_the_degraded_node_gets_the_degraded_links_for_the_groups_that_cross_them():
    paces = stage_paces(_small([{"node": 1, "link": "nvlink", "bandwidth": 0.5}]))
    assert paces[0] == Pace()
    assert paces[1].variants("tp") == (LinkVariant(0, 0.5, 1.0),)
    assert paces[1].variants("dp_cp") == (LinkVariant(0, 0.5, 1.0),)


def test_the_report_says_which_link_paces_which_groups_and_what_it_costs():
    sc = _small([{"node": 1, "link": "nic", "bandwidth": 0.1}])
    r = simulate(sc, estimator="analytic")
    block = r["degraded_links"]
    assert block["links"] == [{"node": 1, "link": "nic", "bandwidth": 0.1, "groups": ["pp"], "stages": [0, 1]}]
    assert block["healthy_step_s"] == pytest.approx(simulate(_small(), estimator="analytic")["iteration_time_s"])
    assert block["cost_s"] == pytest.approx(r["iteration_time_s"] - block["healthy_step_s"])
    assert simulate(_small(), estimator="analytic")["degraded_links"] is None


@pytest.mark.parametrize("links, where", [
    ([{"node": 2, "link": "nic", "bandwidth": 0.5}], "cluster.degraded_links[0].node"),
    ([{"node": 0, "link": "pcie", "bandwidth": 0.5}], "cluster.degraded_links[0].link"),
    ([{"node": 0, "link": "nic", "bandwidth": 0.0}], "cluster.degraded_links[0].bandwidth"),
    ([{"node": 0, "link": "nic", "bandwidth": 1.5}], "cluster.degraded_links[0].bandwidth"),
    ([{"node": 0, "link": "nic"}], "cluster.degraded_links[0]"),
    ([{"node": 0, "link": "nic", "bandwidth": 0.5, "port": 1}], "cluster.degraded_links[0]"),
    ([{"node": 0, "link": "nic", "bandwidth": 0.5}, {"node": 0, "link": "nic", "bandwidth": 0.4}], "cluster.degraded_links[1]"),
])
def test_bad_degraded_links_are_refused_with_their_key_path(links, where):
    with pytest.raises(ScenarioError) as e:
        _small(links)
    assert where in str(e.value)


class _Measured:
    """A calibration profile that measured every collective at 1 ms (and no compute)."""
    framework = None

    def comm_time(self, op, group):
        return 1e-3

    def compute_time(self, op):
        return None


def test_a_measured_collective_on_a_degraded_link_is_scaled_by_the_spec_models_ratio():
    from dataclasses import replace

    from simulator.cost.paced import PacedCosts
    from simulator.plan.layout import group_shape
    from simulator.plan.opgraph import Comm
    sc = _small(order="tp-cp-pp-ep-dp")
    base = build_cost_model(sc)
    op, shape = Comm("grad", "dp", "all_reduce", 64e6, group="dp_cp"), group_shape(sc, "dp_cp")
    slow = LinkVariant(0, 1.0, 0.25)
    spec = PacedCosts(sc, base)
    ratio = spec.slowest(op, shape, (slow,))[0] / base.comm_time(op, shape)
    assert ratio > 2
    measured = PacedCosts(sc, replace(base, profile=_Measured()))
    assert measured.slowest(op, shape, (slow,))[0] == pytest.approx(1e-3 * ratio)
    assert measured.slowest(op, shape, (LinkVariant(),))[0] == pytest.approx(1e-3)

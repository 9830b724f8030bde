"""A topology set to a job's measured busbw reproduces it, and only where it was measured."""
import pytest

from simulator.cost.collectives import collective_time
from simulator.cost.measured_network import LATENCY_SHARE_MIN, measured_topology, probe_busbw, ring_latency_share
from simulator.topology import load_topology

GB = 1e9


@pytest.fixture(scope="module")
def p5():
    return load_topology("aws-p5")


@pytest.mark.parametrize("nodes, job", [(2, 428.0), (8, 187.0), (16, 50.3), (64, 13.2)])
def test_the_job_busbw_is_reproduced(p5, nodes, job):
    t = measured_topology(p5, nodes, 8, None, job)
    assert probe_busbw(t, nodes, 8) == pytest.approx(job, rel=1e-3)
    assert t.fabric.ring_core_gbs == 0


def test_a_degraded_node_slows_nvlink_and_a_healthy_one_keeps_the_spec(p5):
    slow = measured_topology(p5, 1, 8, 45.0, None)
    assert probe_busbw(slow, 1, 8) == pytest.approx(45.0, rel=1e-3)
    assert slow.node.bandwidth_gbs < p5.node.bandwidth_gbs / 5
    fast = measured_topology(p5, 1, 8, 2000.0, None)  # above what the spec reaches: not raised
    assert fast.node.bandwidth_gbs == p5.node.bandwidth_gbs


@pytest.mark.parametrize("intra, degraded", [(45.0, True), (425.0, False), (458.0, False), (None, False)])
def test_only_a_degraded_node_gets_the_degraded_send_latency(p5, intra, degraded):
    """The playbook's three one-node states: degraded ~45 GB/s (NVLink down), slow ~425, healthy ~458."""
    t = measured_topology(p5, 4, 8, intra, 160.0, 98.0, degraded_p2p_latency_us=250e3)
    assert t.node.p2p_latency_us == (250e3 if degraded else None)
    assert measured_topology(p5, 4, 8, intra, 160.0, 98.0).node.p2p_latency_us is None  # not asked for


def test_every_collective_of_a_slow_job_slows_but_pipeline_sends_keep_the_spec_nic(p5):
    """The slow network state: a 64-node job measured 13 GB/s; TP over 2 of its nodes is slowed as much
    (the playbook's 3B tp16 mbs1: ~165 tokens/s/GPU there, ~1,100 in the healthy state)."""
    healthy = measured_topology(p5, 64, 8, None, 176.0)
    slow = measured_topology(p5, 64, 8, None, 13.0)
    tp16 = tuple(range(16))
    ratio = collective_time(slow, "all_gather", GB, tp16) / collective_time(healthy, "all_gather", GB, tp16)
    assert ratio > 5
    pair = (0, 8)  # one pipeline send between two nodes
    assert collective_time(slow, "send_recv", GB, pair) == pytest.approx(collective_time(p5, "send_recv", GB, pair))


def test_without_measurements_the_spec_is_kept(p5):
    assert measured_topology(p5, 4, 8, None, None) == p5


@pytest.mark.parametrize("nodes, gather, reduce", [(4, 226.0, 207.0), (16, 124.0, 173.0), (64, 44.0, 175.0), (64, 6.0, 13.0)])
def test_the_all_gather_sets_the_ring_latency_and_the_all_reduce_the_trees(p5, nodes, gather, reduce):
    t = measured_topology(p5, nodes, 8, None, reduce, gather)
    assert probe_busbw(t, nodes, 8, "all_gather") == pytest.approx(gather, rel=1e-3)
    assert probe_busbw(t, nodes, 8, "all_reduce", algorithms=("tree", "nvls_tree")) == pytest.approx(reduce, rel=1e-3)
    assert t.node.nic_efficiency == p5.node.nic_efficiency  # the rings' bandwidth stays the spec's


@pytest.mark.parametrize("gather", [222.0, 163.0])
def test_a_bandwidth_bound_probe_sets_the_rings_efficiency_not_their_latency(p5, gather):
    """2 nodes: 15 ring steps of 40 us are 14 % of the 1 GiB all-gather, too little to solve the latency
    from (it went to ~64 us for the healthy jobs' 222 GB/s); the NIC efficiency is solved instead."""
    assert ring_latency_share(p5, 2, 8) < LATENCY_SHARE_MIN < ring_latency_share(p5, 4, 8)
    t = measured_topology(p5, 2, 8, None, 428.0, gather)
    assert probe_busbw(t, 2, 8, "all_gather") == pytest.approx(gather, rel=1e-3)
    assert t.fabric.ring_step_latency_us == p5.fabric.ring_step_latency_us
    assert t.node.nic_efficiency < p5.node.nic_efficiency


def test_the_slow_state_is_a_latency_state_small_tp_messages_slow_the_most(p5):
    """The playbook's slow state (64 nodes: all-gather 6 GB/s vs 44 healthy): solved as a per-step ring
    latency, it slows a 16 MiB TP all-gather over 2 nodes far more than a 1 GiB one."""
    healthy = measured_topology(p5, 64, 8, None, 175.0, 44.0)
    slow = measured_topology(p5, 64, 8, None, 13.0, 6.0)
    assert 25 < healthy.fabric.ring_step_latency_us < 60 < 200 < slow.fabric.ring_step_latency_us
    tp16 = tuple(range(16))
    small = collective_time(slow, "all_gather", 16 * 2**20, tp16) / collective_time(healthy, "all_gather", 16 * 2**20, tp16)
    large = collective_time(slow, "all_gather", 4 * GB, tp16) / collective_time(healthy, "all_gather", 4 * GB, tp16)
    assert small > 3 and large < small / 2

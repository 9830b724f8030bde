"""Collective algorithms: placement-aware links, busbw conventions, the small-message knee, static and
dynamic contention, and the cost-model / CLI entry points."""
from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest

from simulator.cli import collectives_cmd
from simulator.cost.collectives import collective_demand, collective_time, estimate, link_capacities, p2p_time
from simulator.cost.nccl_algorithms import busbw_factor
from simulator.cost.costs import CostModel
from simulator.errors import ScenarioError
from simulator.plan.layout import GroupShape
from simulator.cost.network import Transfer, fair_share_finish_times, group_links
from simulator.plan.opgraph import Comm
from simulator.topology import load_topology

GB = 1 << 30
H100 = load_topology("dgx-h100")
TP_IN_NODE = tuple(range(8))
TP_ACROSS_NODES = tuple(range(0, 64, 8))  # order dp-tp: each TP rank on its own node


def test_tp_inside_a_node_uses_only_nvlink():
    assert set(group_links(H100, TP_IN_NODE)) == {"nvlink"}


def test_tp_spread_across_nodes_crosses_nics_and_is_much_slower():
    kinds = group_links(H100, TP_ACROSS_NODES)
    assert "nic" in kinds and "nvlink" not in kinds
    t_in = collective_time(H100, "all_reduce", 64e6, TP_IN_NODE)
    t_out = collective_time(H100, "all_reduce", 64e6, TP_ACROSS_NODES)
    assert t_out > 5 * t_in
    assert estimate(H100, "all_reduce", 64e6, TP_ACROSS_NODES).bottleneck == "nic"


def test_tp_half_in_each_of_two_nodes_sits_between():
    half = tuple(range(4)) + tuple(range(8, 12))
    t = [collective_time(H100, "all_gather", 256e6, g) for g in (TP_IN_NODE, half, TP_ACROSS_NODES)]
    assert t[0] < t[1] < t[2]


@pytest.mark.parametrize("collective, factor", [("all_reduce", 2 * 7 / 8), ("all_gather", 7 / 8),
                                                 ("reduce_scatter", 7 / 8), ("all_to_all", 7 / 8), ("send_recv", 1.0)])
def test_busbw_is_algbw_times_the_nccl_tests_factor(collective, factor):
    assert busbw_factor(collective, 8) == pytest.approx(factor)
    e = estimate(H100, collective, GB, TP_IN_NODE)
    assert e.algbw_GBps == pytest.approx(GB / e.time_s / 1e9)
    assert e.busbw_GBps == pytest.approx(e.algbw_GBps * factor)


def test_large_message_busbw_on_h100_near_published():
    ring = estimate(H100, "all_reduce", 8 * GB, TP_IN_NODE, algorithms=("ring",))
    assert ring.busbw_GBps == pytest.approx(370, rel=0.03)  # nccl-tests #212
    best = estimate(H100, "all_reduce", 8 * GB, TP_IN_NODE)
    assert best.algorithm == "nvls" and best.busbw_GBps == pytest.approx(480, rel=0.03)
    assert estimate(H100, "all_reduce", 8 * GB, (0, 8)).busbw_GBps == pytest.approx(47, rel=0.03)  # nccl-tests #290


def test_no_nvls_without_nvlink_sharp():
    assert estimate(load_topology("dgx-a100"), "all_reduce", 8 * GB, TP_IN_NODE).algorithm != "nvls"


def test_knee_small_messages_are_latency_bound():
    small = estimate(H100, "all_reduce", 1 << 20, TP_IN_NODE)
    big = estimate(H100, "all_reduce", 8 * GB, TP_IN_NODE)
    assert small.busbw_GBps < 0.5 * big.busbw_GBps
    sizes = [1 << k for k in range(10, 34, 2)]
    bw = [estimate(H100, "all_gather", s, TP_IN_NODE).busbw_GBps for s in sizes]
    assert bw == sorted(bw), "busbw rises with size"


def test_tiny_messages_pick_a_low_latency_protocol():
    assert estimate(H100, "all_reduce", 1024, TP_IN_NODE).protocol == "LL"
    assert estimate(H100, "all_gather", 4 * GB, TP_IN_NODE).protocol == "Simple"


def test_non_rail_nics_are_shared_by_the_dp_rings_of_a_node():
    # 8 L40S share 4 NICs: with every DP ring of the node running, each gets half a NIC
    t = load_topology("pcie-l40s")
    dp = tuple(range(0, 32, 8))
    alone = collective_time(t, "all_reduce", 4 * GB, dp, siblings=False)
    shared = collective_time(t, "all_reduce", 4 * GB, dp, siblings=True)
    assert shared == pytest.approx(2 * alone, rel=0.05)
    # one NIC per GPU (DGX H100): the rings do not meet
    assert collective_time(H100, "all_reduce", 4 * GB, TP_ACROSS_NODES) == pytest.approx(
        collective_time(H100, "all_reduce", 4 * GB, TP_ACROSS_NODES, siblings=False), rel=1e-9)


def test_oversubscribed_spine_slows_groups_that_cross_leaf_domains():
    t = replace(H100, fabric=replace(H100.fabric, leaf_radix=2, oversubscription=4.0))  # 2 nodes per unit
    same_unit, across = (0, 8), (0, 16)
    t_same = collective_time(t, "all_reduce", 4 * GB, same_unit)
    t_across = collective_time(t, "all_reduce", 4 * GB, across)
    assert t_across == pytest.approx(4 * t_same, rel=0.05)
    assert estimate(t, "all_reduce", 4 * GB, across).bottleneck == "spine"


def test_concurrent_collectives_split_the_bandwidth():
    one = estimate(H100, "reduce_scatter", 4 * GB, TP_ACROSS_NODES)
    two = estimate(H100, "reduce_scatter", 4 * GB, TP_ACROSS_NODES, concurrent=2)
    assert two.time_s - two.latency_s == pytest.approx(2 * (one.time_s - one.latency_s), rel=1e-6)


def test_wan_crossing_group_is_bound_by_the_wan_link():
    t = load_topology("two-dc-h100")
    e = estimate(t, "all_reduce", GB, (0, 64 * 8))
    assert e.bottleneck == "wan"
    assert e.latency_s > 2 * t.datacenters.link.latency_s  # there and back over 1,000 km
    assert e.time_s > 10 * collective_time(t, "all_reduce", GB, (0, 8))


def test_nic_less_topology_rejects_multi_node_groups():
    with pytest.raises(ScenarioError, match="no NICs"):
        collective_time(load_topology("cpu-host"), "all_reduce", 1e6, (0, 2))


def test_group_shape_with_a_node_size_override_stays_in_one_node():
    t = load_topology("cpu-host")  # 2 processes per node in the file, 4 in the scenario
    shape = GroupShape(dim="tp", size=4, nodes=1, per_node=4, ranks=(0, 1, 2, 3))
    assert collective_time(t, "all_gather", 1e6, shape) == pytest.approx(
        collective_time(t, "all_gather", 1e6, (0, 1, 2, 3), gpus_per_node=4))


def test_p2p_inside_a_node_is_faster_than_across():
    assert p2p_time(H100, 8e6, same_node=True) < p2p_time(H100, 8e6, same_node=False) / 4


@pytest.mark.parametrize("same_node", [True, False])
def test_a_measured_p2p_latency_replaces_nccls_and_the_transfer_comes_on_top(same_node):
    slow = replace(H100, node=replace(H100.node, p2p_latency_us=250e3))
    assert p2p_time(slow, 1.0, same_node) == pytest.approx(0.25, rel=1e-3)
    transfer = p2p_time(slow, 8e6, same_node) - 0.25
    assert 0 < transfer < p2p_time(H100, 8e6, same_node)  # NCCL's latency gone, the bytes still move
    assert collective_time(slow, "all_gather", 8e6, TP_IN_NODE) == collective_time(H100, "all_gather", 8e6, TP_IN_NODE)


def test_cost_model_delegates_and_consults_the_profile_first():
    shape = GroupShape(dim="tp", size=8, nodes=1, per_node=8, ranks=TP_IN_NODE)
    op = Comm("tp_ag", "tp", "all_gather", 64e6)
    assert CostModel(H100).comm_time(op, shape) == collective_time(H100, "all_gather", 64e6, shape)

    class Profile:
        def comm_time(self, op, group):
            return 1.25

    assert CostModel(H100, profile=Profile()).comm_time(op, shape) == 1.25
    spec = CostModel(H100).comm_spec(shape)
    assert spec.bandwidth_Bps == pytest.approx(370e9, rel=0.01) and spec.alpha_s > 0


# ----------------------------------------------------------------------------- dynamic sharing

def test_two_transfers_forced_onto_one_link_take_twice_as_long():
    cap = {"L": 100.0}
    alone = fair_share_finish_times([Transfer("a", 0.0, {"L": 100.0})], cap)
    both = fair_share_finish_times([Transfer("a", 0.0, {"L": 100.0}), Transfer("b", 0.0, {"L": 100.0})], cap)
    assert alone == [pytest.approx(1.0)] and both == [pytest.approx(2.0), pytest.approx(2.0)]


def test_progressive_filling_gives_leftover_bandwidth_to_the_unconstrained():
    # b is held to 25 B/s by its narrow link; a gets the remaining 75 of the shared one
    cap = {"shared": 100.0, "narrow": 25.0}
    out = fair_share_finish_times([Transfer("a", 0.0, {"shared": 150.0}),
                                   Transfer("b", 0.0, {"shared": 50.0, "narrow": 50.0})], cap)
    assert out == [pytest.approx(2.0), pytest.approx(2.0)]


def test_a_late_transfer_shares_only_while_both_run():
    cap = {"L": 10.0}
    out = fair_share_finish_times([Transfer("a", 0.0, {"L": 10.0}, latency_s=0.5), Transfer("b", 0.5, {"L": 10.0})], cap)
    # a alone for 0.5 s (5 B), then both at 5 B/s: a drains at 1.5 s (+0.5 latency), b has 5 B left at 10 B/s
    assert out == [pytest.approx(2.0), pytest.approx(2.0)]


def test_two_dp_rings_on_one_shared_nic_each_take_about_twice_as_long():
    t = load_topology("pcie-l40s")  # GPUs 0 and 1 share NIC 0
    a = collective_demand(t, "all_reduce", GB, (0, 8), name="a")
    b = collective_demand(t, "all_reduce", GB, (1, 9), name="b")
    c = collective_demand(t, "all_reduce", GB, (2, 10), name="c")  # GPU 2 uses NIC 1
    cap = link_capacities(t, a, b, c)
    t_alone = fair_share_finish_times([a], cap)[0]
    t_ab = fair_share_finish_times([a, b], cap)
    t_ac = fair_share_finish_times([a, c], cap)
    assert t_ab[0] == pytest.approx(2 * t_alone, rel=0.05)
    assert t_ac[0] == pytest.approx(t_alone, rel=1e-6)


@pytest.mark.parametrize("collective, ranks", [("all_reduce", tuple(range(16))), ("all_gather", TP_ACROSS_NODES),
                                               ("all_to_all", tuple(range(16))), ("send_recv", (0, 8, 16))])
def test_a_transfer_alone_takes_the_static_estimate(collective, ranks):
    tr = collective_demand(H100, collective, GB, ranks)
    alone = fair_share_finish_times([tr], link_capacities(H100, tr))[0]
    assert alone == pytest.approx(collective_time(H100, collective, GB, ranks, siblings=False), rel=1e-9)


def test_ring_channels_leave_a_node_through_every_member_nic():
    tr = collective_demand(H100, "all_gather", GB, tuple(range(16)))
    nics = {l for l in tr.link_bytes if l[0].startswith("n0.nic") and ".rail" in l[1]}
    assert len(nics) == 8
    assert not any(".spine" in l[1] for l in tr.link_bytes), "same-rail hops stay under one leaf"


# ----------------------------------------------------------------------------- command line

def _args(**kw):
    base = dict(topology="dgx-h100", nodes=2, json=False, minbytes=1 << 20, maxbytes=1 << 30, stepfactor=32,
                collective=["all_reduce"])
    base.update(kw)
    return argparse.Namespace(**base)


def test_collectives_command_prints_nccl_tests_columns(capsys):
    assert collectives_cmd.run(_args()) == 0
    out = capsys.readouterr().out
    assert "busbw" in out and "8 GPUs x 2 nodes" in out and "1 GPU x 2 nodes" in out


def test_collectives_command_json(capsys):
    collectives_cmd.run(_args(json=True))
    doc = json.loads(capsys.readouterr().out)
    row = doc["groups"][0]["rows"][0]
    assert {"size", "time_us", "algbw", "busbw"} <= row.keys()


def test_collectives_command_rejects_unknown_topology():
    with pytest.raises(ScenarioError, match="unknown topology"):
        collectives_cmd.run(_args(topology="no-such-cluster"))


@pytest.mark.slow
def test_validation_script_passes():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "validation" / "collectives_busbw.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "PASS" in done.stdout


def test_ring_core_limits_each_collective_by_the_nodes_it_spans():
    """fabric.ring_core_gbs: a collective over n nodes gets core/n per node; a small group keeps its speed
    however many nodes the job has, a wide one slows as 1/n (aws-p5 with a 1,875 GB/s core)."""
    free = load_topology("aws-p5")
    assert free.fabric.ring_core_gbs == 0
    free = replace(free, fabric=replace(free.fabric, ring_step_latency_us=0.0))  # bandwidth alone
    p5 = replace(free, fabric=replace(free.fabric, ring_core_gbs=1875.0))
    two = tuple(range(16))  # 2 nodes: 2 x 400 GB/s stays under the core
    assert collective_time(p5, "all_gather", GB, two) == pytest.approx(collective_time(free, "all_gather", GB, two))
    wide = {n: collective_time(p5, "all_gather", GB, tuple(range(8 * n))) for n in (16, 32, 64)}
    assert wide[32] / wide[16] == pytest.approx(2.0, rel=0.1) and wide[64] / wide[32] == pytest.approx(2.0, rel=0.1)
    assert estimate(p5, "all_gather", GB, tuple(range(8 * 64))).bottleneck == "spine"
    assert collective_time(free, "all_gather", GB, tuple(range(8 * 64))) < wide[64] / 5


def test_a_ring_across_nodes_waits_its_step_latency_on_every_step():
    """fabric.ring_step_latency_us: every one of a cross-node ring's n - 1 steps (all-gather) costs at
    least that latency, its NVLink steps too; a ring inside one node is not affected. NCCL has no
    two-level all-gather, so a large group cannot escape it."""
    p5 = load_topology("aws-p5")
    t = replace(p5, fabric=replace(p5.fabric, ring_step_latency_us=100.0))
    two_nodes, one_node = tuple(range(16)), tuple(range(8))
    assert collective_time(t, "all_gather", 1024, two_nodes) >= 15 * 100e-6
    assert collective_time(t, "all_gather", 1024, one_node) == pytest.approx(collective_time(p5, "all_gather", 1024, one_node))
    big = estimate(t, "all_gather", 2**20, tuple(range(512)))
    assert big.algorithm == "ring" and big.time_s >= 511 * 100e-6


def test_a_dimension_is_priced_on_its_widest_group(monkeypatch):
    """TP 6 on 8-GPU nodes: ranks 0-5 share a node, ranks 6-11 span two; every TP collective runs in step, so the
    dimension is priced on a group over two nodes (4 + 2 GPUs), not rank 0's. Where the groups tile the nodes (TP 8),
    the widest is rank 0's."""
    from simulator.plan.layout import group_shape
    from simulator.scenario import load_scenario
    from simulator.run import simulate
    keys = ["model=gpt3-175b", "training.seq_len=2048", "training.global_batch=768", "parallel.sp=false", "parallel.cp=1",
            "parallel.pp=4", "parallel.pp_schedule=1f1b", "parallel.vpp=1", "cluster.nodes=24", "training.recompute=full"]
    six = load_scenario("scenarios/70b_512gpu.yaml", keys + ["parallel.tp=6", "parallel.dp=8"])
    assert group_shape(six, "tp", 0).nodes == 1
    wide = group_shape(six, "tp")
    assert (wide.size, wide.nodes, wide.per_node) == (6, 2, 4) and wide.ranks[0] == 6
    eight = load_scenario("scenarios/70b_512gpu.yaml", keys + ["parallel.tp=8", "parallel.dp=6"])
    assert group_shape(eight, "tp") == group_shape(eight, "tp", 0) and group_shape(eight, "tp").nodes == 1
    # priced on the two-node group: TP takes longer than rank 0's one-node group would
    wide_tp = simulate(six, "analytic")["comm"]["tp"]["time_s"]
    import simulator.plan.layout as layout
    monkeypatch.setattr(layout, "widest_group", lambda sc, dim: 0)
    assert wide_tp > 1.5 * simulate(six, "analytic")["comm"]["tp"]["time_s"]

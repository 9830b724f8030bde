"""Engine link sharing (engine/links.py): transfers in flight at the same time on the same links share
them max-min fairly; alone, a transfer takes exactly its static price."""
import random
from pathlib import Path

import pytest
import simpy

from simulator.cost.collectives import link_busy
from simulator.cost.costs import build_cost_model
from simulator.evaluate.engine import run_engine, simulate_engine
from simulator.evaluate.links import LinkSharing, fluid_ends, max_min_speeds
from simulator.plan.layout import pair_shape
from simulator.cost.network import Transfer, fair_share_finish_times
from simulator.scenario import load_scenario, scenario_from_mapping
from test_engine import CommCost, UniformCost, scenario

ROOT = Path(__file__).resolve().parent.parent
T = 5e-5  # seconds every DP and PP transfer is priced at alone (FixedComm)


class FixedComm(UniformCost):
    """UniformCost (each layer pass LAYER s of compute) plus T seconds per DP or PP transfer."""

    def comm_time(self, op, group):
        return T if group.size > 1 and op.dim in ("dp", "pp") else 0.0


def across_nodes(pp=2, dp=2, m=1, **parallel):
    """One GPU per node: every DP ring and every PP send goes through the NICs. Layers big enough that
    a DP bucket and a PP activation each need more than T on a NIC (so each saturates it at its price)."""
    raw = {"name": "nic", "model": {"arch": "llama", "layers": 2 * pp, "hidden": 1024, "ffn_hidden": 2048, "heads": 8,
                                    "vocab": 1000},
           "training": {"seq_len": 2048, "global_batch": m * dp},
           "cluster": {"topology": "dgx-h100", "nodes": pp * dp, "gpus_per_node": 1},
           "parallel": {"pp": pp, "dp": dp, "zero": 0, "overlap_dp": True, "dp_bucket_mb": 10_000, **parallel}}
    return scenario_from_mapping(raw)


def shipped(name, *overrides):
    sc = load_scenario(ROOT / "scenarios" / f"{name}.yaml", list(overrides))
    return sc, build_cost_model(sc)


# ------------------------------------------------------------------------------- the link model alone

def run_flows(specs):
    """specs: (start, dur, {link: u}) -> ends, through LinkSharing in a bare SimPy environment."""
    env = simpy.Environment()
    links = LinkSharing(env)
    ends = [None] * len(specs)

    def add_at(i, start, dur, demand):
        yield env.timeout(start)
        links.add(demand, start, dur, lambda f, i=i: ends.__setitem__(i, f.finish))

    for i, (start, dur, demand) in enumerate(specs):
        env.process(add_at(i, start, dur, demand))
    env.run()
    return ends


def test_a_transfer_alone_ends_exactly_at_its_price():
    start, dur = 0.123456789, 0.000987654321
    assert run_flows([(start, dur, {"nic": 0.93})]) == [start + dur]


def test_two_transfers_saturating_one_link_take_twice_as_long():
    assert run_flows([(0.0, 1.0, {"nic": 1.0}), (0.0, 1.0, {"nic": 1.0})]) == pytest.approx([2.0, 2.0])


def test_a_later_transfer_slows_the_first_only_while_they_overlap():
    # A alone for 0.5 s, then both at half speed: A's last 0.5 s of work takes 1 s; B then runs alone
    assert run_flows([(0.0, 1.0, {"nic": 1.0}), (0.5, 1.0, {"nic": 1.0})]) == pytest.approx([1.5, 2.0])


def test_transfers_that_fit_together_on_a_link_do_not_slow_down():
    """Latency-bound transfers use part of a link: two using 0.4 each fit."""
    assert run_flows([(0.0, 1.0, {"nic": 0.4}), (0.0, 1.0, {"nic": 0.4})]) == [1.0, 1.0]


def test_max_min_gives_the_unshared_link_what_the_shared_one_leaves():
    """A uses links a and b, B only a, C only b at half its link: A and B split a; C is capped at its
    alone speed and A is held by a, so C runs alone-fast."""
    ends = run_flows([(0.0, 1.0, {"a": 1.0, "b": 1.0}), (0.0, 1.0, {"a": 1.0}), (0.0, 1.0, {"b": 0.5})])
    assert ends == pytest.approx([2.0, 2.0, 1.0])


@pytest.mark.parametrize("seed", range(5))
def test_link_model_matches_network_fair_share_finish_times(seed):
    """Without latency (every transfer saturates its busiest link) LinkSharing is network.py's max-min
    solver: same ends, whether the transfers are known up front (fluid_ends) or arrive over time."""
    rng = random.Random(seed)
    links = ["a", "b", "c"]
    specs = []
    for _ in range(6):
        use = {l: rng.uniform(0.2, 1.0) for l in rng.sample(links, rng.randint(1, 3))}
        top = max(use.values())
        specs.append((rng.uniform(0.0, 2.0), rng.uniform(0.1, 1.0), {l: u / top for l, u in use.items()}))
    transfers = [Transfer(str(i), s, {l: u * d for l, u in dem.items()}) for i, (s, d, dem) in enumerate(specs)]
    want = fair_share_finish_times(transfers, {l: 1.0 for l in links})
    assert run_flows(specs) == pytest.approx(want, rel=1e-9)
    assert fluid_ends(specs) == pytest.approx(want, rel=1e-9)


def test_max_min_speeds_are_one_alone_and_at_most_one():
    from simulator.evaluate.links import Flow
    alone = Flow(1, {"a": 0.7, "b": 0.2}, 0.0, 1.0, None)
    assert max_min_speeds([alone]) == [1.0]
    two = [Flow(1, {"a": 0.7}, 0.0, 1.0, None), Flow(2, {"a": 0.7}, 0.0, 1.0, None)]
    assert max_min_speeds(two) == pytest.approx([1 / 1.4, 1 / 1.4])


# ------------------------------------------------------------------------------- in the engine

def last_backward_transfers(eng):
    """Stage 1 (the last): its gradient bucket all-reduce and the input-gradient send of its backward."""
    rk = eng.ranks[1]
    return [c for c, label in rk.rec.colls if "grad" in label], [(a, b) for a, b, *_ in rk.rec.sends]


def test_a_pp_send_and_a_dp_bucket_on_one_nic_each_take_twice_as_long():
    """The last stage's gradient bucket is released as its backward ends, when the input gradient
    leaves for stage 0: both go out of the same NIC at once, each priced T alone, so each takes 2T."""
    sc = across_nodes()
    cost = FixedComm(topology=sc.topology)
    use = link_busy(sc.topology, "send_recv", 2048 * 1024 * 2, pair_shape(sc, 0, 2))
    assert set(use) == {"nic"} and use["nic"] > T  # the send alone saturates the NIC at price T
    on, _ = run_engine(sc, cost)
    off, _ = run_engine(sc, cost, contention=False)
    (dp_on,), (send_on,) = last_backward_transfers(on)
    (dp_off,), (send_off,) = last_backward_transfers(off)
    assert dp_off.end - dp_off.start == pytest.approx(T, rel=1e-12)
    assert send_off[1] - send_off[0] == pytest.approx(T, rel=1e-12)
    assert dp_on.start == send_on[0] == dp_off.start  # released together
    assert dp_on.end - dp_on.start == pytest.approx(2 * T, rel=1e-9)
    assert send_on[1] - send_on[0] == pytest.approx(2 * T, rel=1e-9)
    r_on = simulate_engine(sc, cost)
    r_off = simulate_engine(sc, cost, contention=False)
    # stage 0 receives the gradient T later and ends T later; the report says where the time went
    assert r_on.iteration_time_s == pytest.approx(r_off.iteration_time_s + T, rel=1e-9)
    assert r_on.stages[1].contention_s["dp"] == pytest.approx(T, rel=1e-9)
    assert r_on.stages[1].contention_s["pp"] == pytest.approx(T, rel=1e-9)
    assert r_on.contention_s["pp"] == pytest.approx(T, rel=1e-9)  # stage 0 is critical: its receive
    assert r_on.comm["pp"][0] == pytest.approx(r_off.comm["pp"][0] + T, rel=1e-9)
    assert sum(r_on.breakdown.values()) == pytest.approx(r_on.iteration_time_s, rel=1e-12)
    assert all(v == 0.0 for v in r_off.contention_s.values())


def test_transfers_on_different_links_do_not_share():
    """The same step with DP inside a node (NVLink) and PP across two nodes (NIC): the last stage's
    bucket and its gradient send are released together as above but use different links, so neither
    slows down."""
    raw = {"name": "split", "model": {"arch": "llama", "layers": 4, "hidden": 1024, "ffn_hidden": 2048, "heads": 8,
                                      "vocab": 1000},
           "training": {"seq_len": 2048, "global_batch": 2},
           "cluster": {"topology": "dgx-h100", "nodes": 2, "gpus_per_node": 2},
           "parallel": {"pp": 2, "dp": 2, "zero": 0, "overlap_dp": True, "dp_bucket_mb": 10_000}}
    sc = scenario_from_mapping(raw)
    cost = FixedComm(topology=sc.topology)
    eng, _ = run_engine(sc, cost)
    (dp,), (send,) = last_backward_transfers(eng)
    assert dp.start == send[0] and dp.end - dp.start == send[1] - send[0] == pytest.approx(T, rel=1e-12)
    on = simulate_engine(sc, cost)
    off = simulate_engine(sc, cost, contention=False)
    assert on.iteration_time_s == off.iteration_time_s
    assert all(v == 0.0 for v in on.contention_s.values())


def test_contention_off_reproduces_the_engine_without_link_sharing():
    """Golden numbers of the engine with link sharing off (they equal the engine before link sharing
    existed; update them only when the cost model itself changes, and say why in the commit)."""
    sc, cost = shipped("70b_512gpu")
    assert simulate_engine(sc, cost, contention=False).iteration_time_s == pytest.approx(9.938877884819043, rel=1e-12)  # Megatron's column linears' backward collectives under their GEMMs (framework default tp_linear_async)
    sc, cost = shipped("mixtral_ep")
    assert simulate_engine(sc, cost, contention=False).iteration_time_s == pytest.approx(4.047538607796385, rel=1e-12)  # the same (was 4.0826 before it)
    sc = scenario(pp=4, m=8, dp=2, tp=2, zero=1)
    r = simulate_engine(sc, CommCost(sc.topology), contention=False)
    assert r.iteration_time_s == pytest.approx(0.06634654336, rel=1e-12)
    assert r.events == 104


def test_70b_dp_and_pp_slow_down_only_where_they_overlap():
    """Shipped 70B (ZeRO-1, overlap_dp, DP and PP over each GPU's own NIC): a transfer takes longer
    than its price only if it overlapped one of the other kind on a NIC they share (a send: its
    sender's or receiver's gradient buckets; a bucket: its rank's sends or receives), and exactly its
    price otherwise. Here the parameter all-gathers end before the first activation leaves, so only
    each stage's last backward meets its reduce-scatters; TP (NVLink, nothing else there) is untouched."""
    sc, cost = shipped("70b_512gpu")
    eng, _ = run_engine(sc, cost)
    dp = {rk.idx: [c for c, _ in rk.rec.colls if c.dur > 0] for rk in eng.ranks}

    def overlaps(a, b, colls):
        return any(c.start < b and a < c.end for c in colls)

    slowed_sends = slowed_buckets = 0
    for rk in eng.ranks:
        for a, b, dst, *_ in rk.rec.sends:
            price = eng._pairs[(rk.idx, dst)][0]
            if overlaps(a, b, dp[rk.idx] + dp[dst]):
                slowed_sends += b - a > price * (1 + 1e-9)
            else:
                assert b - a == pytest.approx(price, rel=1e-12)
        pp = [(a, b) for a, b, *_ in rk.rec.sends + rk.rec.recvs]
        for c in dp[rk.idx]:
            if any(a < c.end and c.start < b for a, b in pp):
                slowed_buckets += c.end - c.start > c.dur * (1 + 1e-9)
            else:
                assert c.end - c.start == pytest.approx(c.dur, rel=1e-12)
            if "param" in c.label:
                assert c.contention_s == 0.0
    assert slowed_sends >= sc.parallel.pp - 1 and slowed_buckets >= sc.parallel.pp - 1
    off = simulate_engine(sc, cost, contention=False)
    on = simulate_engine(sc, cost)
    assert on.contention_s["tp"] == 0.0 and on.comm["tp"] == off.comm["tp"]
    assert 0 < on.contention_s["pp"] < 1e-3
    assert off.iteration_time_s < on.iteration_time_s < off.iteration_time_s * 1.001
    assert sum(on.breakdown.values()) == pytest.approx(on.iteration_time_s, rel=1e-9)


def test_tp_and_cp_collectives_overlapping_in_a_pass_share_nvlink():
    """Two in-pass collectives of different streams issued together on the same GPU's NVLink port
    (a TP all-gather and a CP ring step, each priced T and each filling the port) end at 2T when
    sharing, at T each without; the compute that consumes both starts that much later."""
    from simulator.plan.blocks import Block
    from simulator.evaluate.passes import OpTimes, build_template
    from simulator.plan.opgraph import Comm, Compute, Node

    class InPass(UniformCost):
        def comm_time(self, op, group):
            return T if group.size > 1 else 0.0

        def compute_time(self, op):
            return 1e-4

    sc = scenario(pp=1, m=1, tp=2, cp=2)
    times = OpTimes(sc, InPass(topology=sc.topology))
    nodes = (Node(Comm("ag", "tp", "all_gather", 256e6, blocking=False)),
             Node(Comm("ring", "cp", "send_recv", 128e6, blocking=False)),
             Node(Compute("attn", "attention", 1.0, 1.0, "bf16"), (0, 1)))
    blk = Block(key="L0", nodes=nodes, letters=("F", "F", "F"))
    assert all(u == 1.0 for _, u in times.use(nodes[0].op) + times.use(nodes[1].op))  # both fill the port
    alone = build_template(times, 0, "F", (blk,))
    shared = build_template(times, 0, "F", (blk,), share=True)
    assert alone.duration == pytest.approx(T + 1e-4, rel=1e-12)
    assert shared.duration == pytest.approx(2 * T + 1e-4, rel=1e-9)
    assert shared.contention_s == pytest.approx({"tp": T, "cp": T}, rel=1e-9)
    assert shared.comm_s["tp"] == pytest.approx(2 * T, rel=1e-9)


def test_ep_all_to_alls_share_the_nic_with_dp_and_pp_traffic():
    """Shipped Mixtral (EP8 over two nodes, DP16 over four): the all-to-alls inside the passes run on
    the link model with the gradient buckets and PP sends of the same NICs, so EP slows down where
    they overlap and the step gets longer; the added seconds are in comm time, not in the breakdown."""
    sc, cost = shipped("mixtral_ep")
    off = simulate_engine(sc, cost, contention=False)
    on = simulate_engine(sc, cost)
    assert on.contention_s["ep"] > 0 and on.contention_s["dp"] > 0
    assert on.comm["ep"][0] == pytest.approx(off.comm["ep"][0] + on.contention_s["ep"], rel=1e-9)
    assert on.iteration_time_s > off.iteration_time_s
    assert on.iteration_time_s < off.iteration_time_s * 1.05
    assert sum(on.breakdown.values()) == pytest.approx(on.iteration_time_s, rel=1e-9)


@pytest.mark.parametrize("zero", [0, 1, 3])
def test_representative_equals_full_with_link_sharing(zero):
    sc = across_nodes(pp=2, dp=2, m=4, zero=zero, dp_bucket_mb=20)
    cost = FixedComm(topology=sc.topology)
    rep = simulate_engine(sc, cost)
    full = simulate_engine(sc, cost, full=True)
    assert rep.transfers_shared > 0
    assert full.iteration_time_s == pytest.approx(rep.iteration_time_s, rel=1e-9)
    for d in rep.comm:
        assert full.comm[d] == pytest.approx(rep.comm[d], rel=1e-9, abs=1e-15)
        assert full.contention_s[d] == pytest.approx(rep.contention_s[d], rel=1e-9, abs=1e-15)


def test_representative_equals_full_with_ep_on_the_nics():
    raw = {"name": "moe", "model": {"arch": "llama", "layers": 4, "hidden": 1024, "ffn_hidden": 2048, "heads": 8,
                                    "vocab": 1000, "moe": {"experts": 4, "top_k": 2, "expert_ffn_hidden": 1024}},
           "training": {"seq_len": 2048, "global_batch": 16},
           "cluster": {"topology": "dgx-h100", "nodes": 4, "gpus_per_node": 2},
           "parallel": {"pp": 2, "dp": 4, "ep": 4, "zero": 1, "dp_bucket_mb": 10}}
    sc = scenario_from_mapping(raw)
    cost = build_cost_model(sc)
    rep = simulate_engine(sc, cost)
    full = simulate_engine(sc, cost, full=True)
    assert rep.contention_s["ep"] > 0
    assert full.iteration_time_s == pytest.approx(rep.iteration_time_s, rel=1e-9)
    assert full.contention_s == pytest.approx(rep.contention_s, rel=1e-9, abs=1e-15)


def test_link_sharing_is_deterministic():
    sc, cost = shipped("mixtral_ep")
    a, b = simulate_engine(sc, cost), simulate_engine(sc, cost)
    assert (a.iteration_time_s, a.comm, a.breakdown, a.contention_s, a.events, a.transfers_shared) == \
           (b.iteration_time_s, b.comm, b.breakdown, b.contention_s, b.events, b.transfers_shared)


@pytest.mark.parametrize("collective, ranks", [("all_reduce", tuple(range(0, 64, 8))), ("reduce_scatter", tuple(range(0, 64, 8))),
                                               ("all_reduce", tuple(range(8))), ("all_gather", tuple(range(16))),
                                               ("all_to_all", tuple(range(16))), ("send_recv", (0, 8))])
def test_link_busy_busiest_class_is_the_bandwidth_part_of_the_price(collective, ranks):
    """For large messages (Simple protocol, no protocol bandwidth factor) the busiest link class is busy
    for exactly the bandwidth part of the static price: a transfer alone uses all of its bottleneck."""
    from simulator.cost.collectives import estimate
    from simulator.topology import load_topology
    topo = load_topology("dgx-h100")
    est = estimate(topo, collective, 4e9, ranks)
    assert est.protocol == "Simple"
    busy = link_busy(topo, collective, 4e9, ranks)
    assert max(busy.values()) == pytest.approx(est.time_s - est.latency_s, rel=1e-9)
    assert ("nic" in busy) == (len({r // 8 for r in ranks}) > 1)


def test_tp_collectives_share_nvlink_with_pp_sends_in_one_node():
    """PP inside one node: each activation send leaves over the sender's NVLink port while its next
    forward's TP collectives use the same port; both slow down (TP collectives join the link model
    while the rank has PP or DP traffic on its intra-node port). Representative and full mode agree."""

    class Saturating(UniformCost):  # every TP / PP transfer priced below its NVLink time: fills the port
        def comm_time(self, op, group):
            return 1e-5 if group.size > 1 and op.dim in ("tp", "pp") else 0.0

    raw = {"name": "nvl", "model": {"arch": "llama", "layers": 4, "hidden": 4096, "ffn_hidden": 8192, "heads": 32,
                                    "vocab": 1000},
           "training": {"seq_len": 4096, "global_batch": 4},
           "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus_per_node": 4},
           "parallel": {"pp": 2, "tp": 2, "dp": 1, "sp": True}}
    sc = scenario_from_mapping(raw)
    cost = Saturating(topology=sc.topology)
    off = simulate_engine(sc, cost, contention=False)
    on = simulate_engine(sc, cost)
    assert on.stages[0].contention_s["tp"] > 0 and on.stages[0].contention_s["pp"] > 0
    assert on.iteration_time_s > off.iteration_time_s
    full = simulate_engine(sc, cost, full=True)
    assert full.iteration_time_s == pytest.approx(on.iteration_time_s, rel=1e-9)

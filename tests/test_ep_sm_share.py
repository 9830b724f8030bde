"""The SM cost of expert all-to-alls overlapped with another micro-batch's compute (`cost/ep_sm_share.py`):
the compute beside an in-flight all-to-all runs on the SMs its dispatcher's kernels leave, in DualPipe's
pairs and Megatron's combined 1F1B alike, in both evaluators; an exposed all-to-all costs its own time."""
import dataclasses
from pathlib import Path

import pytest

from simulator.cost.costs import build_cost_model
from simulator.cost.ep_sm_share import DEEPEP_NUM_SMS, EP_COMM_SMS, NCCL_ALL_TO_ALL_CHANNELS, ep_sm_share
from simulator.evaluate.analytic import estimate
from simulator.evaluate.engine import simulate_engine
from simulator.evaluate.passes import OpTimes, build_template
from simulator.plan.layout import group_shape
from simulator.plan.lower import build_plan
from simulator.plan.opgraph import Comm
from simulator.scenario import load_scenario
from simulator.topology import load_topology

ROOT = Path(__file__).resolve().parent.parent
MIXTRAL = ROOT / "scenarios" / "mixtral_ep.yaml"
DUALPIPEV = ["parallel.pp_schedule=dualpipev", "parallel.vpp=2"]
COMBINED_1F1B = ["parallel.pp_schedule=interleaved-1f1b", "parallel.vpp=2", "parallel.ep_overlap=true"]
OVERLAPS = pytest.mark.parametrize("overlap", [DUALPIPEV, COMBINED_1F1B], ids=["dualpipev", "ep_overlap"])


def with_sms(cost, sms):
    """The cost model on the same GPU with `sms` streaming multiprocessors (None: not stated, no SM cost)."""
    t = cost.topology
    return dataclasses.replace(cost, topology=dataclasses.replace(t, gpu=dataclasses.replace(t.gpu, sms=sms)))


def pair_templates(sc, cost):
    """(F alone, its paired B alone, the pair) of one steady pair on stage 0."""
    plan = build_plan(sc)
    st = [st for st in plan.stages[0].steps if st.pair is not None][1]
    times = OpTimes(sc, cost)
    f = build_template(times, st.chunk, "F", plan.blocks[(st.chunk, "F")])
    b = build_template(times, st.pair.chunk, "BW", plan.blocks[(st.pair.chunk, "BW")])
    return f, b, build_template(times, st.chunk, "FB", plan.blocks[st.key])


def test_the_shares_read_the_dispatchers_sm_counts():
    """DeepEP's Buffer.num_sms default 20 (deep_ep/buffers/legacy.py:31); NCCL's 32 p2p channels."""
    assert (DEEPEP_NUM_SMS, NCCL_ALL_TO_ALL_CHANNELS) == (20, 32)
    assert EP_COMM_SMS == {"deepep": 20, "alltoall": 32}
    assert ep_sm_share("deepep", 132) == 20 / 132
    assert ep_sm_share("alltoall", 108) == 32 / 108
    assert ep_sm_share("alltoall", 16) == 15 / 16  # at least one SM left to compute
    assert ep_sm_share("deepep", None) == 0.0


def test_an_unknown_dispatcher_is_refused():
    with pytest.raises(ValueError, match="ep_dispatcher 'nvshmem'"):
        ep_sm_share("nvshmem", 132)


@pytest.mark.parametrize("topology, sms", [("dgx-h100", 132), ("h800", 132), ("hgx-h200", 132), ("dgx-a100", 108),
                                           ("dgx-b200", 148), ("gb200-nvl72", 152), ("gb300-nvl72", 152),
                                           ("cpu-host", None)])
def test_the_topologies_state_their_gpus_sm_count(topology, sms):
    assert load_topology(topology).gpu.sms == sms


@pytest.mark.parametrize("dispatcher, held", [("alltoall", 32), ("deepep", 20)])
def test_the_cost_model_prices_expert_all_to_alls_by_dispatcher_and_the_rest_by_comm_sm_share(dispatcher, held):
    sc = load_scenario(MIXTRAL, [f"parallel.ep_dispatcher={dispatcher}", "cluster.efficiency.comm_sm_share=0.3"])
    cost = build_cost_model(sc)
    ep, tp = group_shape(sc, "ep"), group_shape(sc, "tp")
    assert cost.sm_share(ep, Comm("ep_dispatch", "ep", "all_to_all", 1e6)) == held / 132
    assert cost.sm_share(tp, Comm("sp_allgather_attn", "tp", "all_gather", 1e6)) == 0.3
    assert cost.sm_share(ep) == 0.3  # a group alone (the gradient buckets' call): comm_sm_share


def test_the_deepseek_layout_takes_deepeps_20_sms_and_no_generic_share():
    sc = load_scenario(ROOT / "validation" / "scenarios" / "deepseek_v3.yaml")
    cost = build_cost_model(sc)
    assert "comm_sm_share" not in sc.cluster.efficiency
    assert cost.sm_share(group_shape(sc, "ep"), Comm("ep_dispatch", "ep", "all_to_all", 1e6)) == 20 / 132


@OVERLAPS
def test_the_pair_grows_by_about_the_share_of_its_overlapped_all_to_all(overlap):
    """Without an SM count the pair is as before; with H100's 132 SMs it grows by share x the all-to-all
    time that ran beside compute, within a factor (later ops move once an op is slowed)."""
    sc = load_scenario(MIXTRAL, overlap)
    cost = build_cost_model(sc)
    _, _, off = pair_templates(sc, with_sms(cost, None))
    _, _, on = pair_templates(sc, cost)
    share = 32 / 132
    beside = off.comm_s["ep"] - off.exposed_s.get("ep", 0.0)
    assert beside > 0.3 * off.comm_s["ep"]
    grown = on.duration - off.duration
    assert 0.5 * share * beside < grown <= share * beside * (1 + 1e-9)
    assert on.compute_s == pytest.approx(off.compute_s)  # the same work, slower


@OVERLAPS
@pytest.mark.parametrize("sms", [132, 40, 33])
def test_the_pair_never_takes_longer_than_its_passes_one_after_the_other(overlap, sms):
    """Even with the all-to-all holding 32 of 33 SMs: compute beside it still progresses, so overlapping
    is never worse than not overlapping."""
    sc = load_scenario(MIXTRAL, overlap)
    f, b, fb = pair_templates(sc, with_sms(build_cost_model(sc), sms))
    assert fb.duration <= f.duration + b.duration


def test_the_overlapped_step_is_still_below_the_step_without_the_overlap():
    on = load_scenario(MIXTRAL, COMBINED_1F1B)
    off = load_scenario(MIXTRAL, COMBINED_1F1B[:-1] + ["parallel.ep_overlap=false"])
    assert estimate(on, build_cost_model(on)).iteration_time_s < estimate(off, build_cost_model(off)).iteration_time_s


@OVERLAPS
def test_both_evaluators_charge_the_same_sm_cost(overlap):
    sc = load_scenario(MIXTRAL, overlap)
    cost = build_cost_model(sc)
    steps = {}
    for sms in (None, 132):
        c = with_sms(cost, sms)
        a = estimate(sc, c, in_pass_sharing=False).iteration_time_s
        e = simulate_engine(sc, c, contention=False).iteration_time_s
        assert a == pytest.approx(e, rel=1e-9)
        steps[sms] = a
    assert steps[132] > steps[None]


@pytest.mark.parametrize("estimator", ["analytic", "engine"])
def test_an_exposed_all_to_all_costs_only_its_time(estimator):
    """Plain 1F1B: every expert all-to-all is waited on, nothing computes beside it: no SM cost."""
    sc = load_scenario(MIXTRAL)
    cost = build_cost_model(sc)
    run = estimate if estimator == "analytic" else simulate_engine
    assert run(sc, cost).iteration_time_s == run(sc, with_sms(cost, None)).iteration_time_s

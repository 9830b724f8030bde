"""Discrete-event engine: pipeline bubbles measured on the timeline (docs/modeling.md §6), activation memory
against memory.py, representative vs full mode, determinism, and the accounting identities."""
from dataclasses import replace

import pytest

from simulator.cost.costs import CostModel
from simulator.evaluate.engine import run_engine, simulate_engine
from simulator.evaluate.analytic import estimate
from simulator.plan.schedules import schedule_spec
from simulator.plan.memory import chunk_activation_bytes, memory_report
from simulator.scenario import scenario_from_mapping

LAYER = 1e-3  # seconds per layer per pass (F, B and W each)


class UniformCost(CostModel):
    """Every layer's F, B and W take LAYER seconds (its QKV GEMMs do); everything else, communication
    included, is free."""

    def compute_time(self, op):
        return LAYER if op.name in ("qkv", "qkv_dgrad", "qkv_wgrad") else 0.0

    def comm_time(self, op, group):
        return 0.0


class CommCost(UniformCost):
    """UniformCost plus alpha-beta communication on the listed dimensions (others free)."""

    def __init__(self, topology, dims=("tp", "dp", "pp", "cp", "ep"), bw=1e11, alpha=2e-6):
        super().__init__(topology=topology)
        self.dims, self.bw, self.alpha = dims, bw, alpha

    def comm_time(self, op, group):
        if group.size <= 1 or op.dim not in self.dims:
            return 0.0
        return self.alpha + op.bytes / self.bw


def scenario(pp=4, m=8, schedule="1f1b", vpp=1, layers=None, dp=1, tp=1, cp=1, **parallel):
    layers = layers or 2 * pp * vpp
    raw = {"name": "uniform", "model": {"arch": "llama", "layers": layers, "hidden": 256, "ffn_hidden": 512,
                                        "heads": 4, "vocab": 1000},
           "training": {"seq_len": 128, "global_batch": m * dp},
           # one NVLink node of pp*dp*tp*cp GPUs: a DGX H100 up to 8, else an NVL72 rack (a node holds at most its GPUs)
           "cluster": {"topology": "dgx-h100" if pp * dp * tp * cp <= 8 else "gb200-nvl72", "nodes": 1,
                       "gpus_per_node": pp * dp * tp * cp},
           "parallel": {"pp": pp, "dp": dp, "tp": tp, "cp": cp, "pp_schedule": schedule, "vpp": vpp, **MECHANISM_DEFAULTS,
                        **parallel}}
    if parallel.get("zero") == 2:
        raw["framework"] = "deepspeed"  # the ZeRO-2 that reduce-scatters every micro-batch
        raw["training"]["grad_dtype"] = "fp32"
    return scenario_from_mapping(raw)


MECHANISM_DEFAULTS = {"overlap_dp": True, "zero_gather": "bucketed", "dp_bucket_mb": 25.0, "tp_linear_async": False}
"""The DP settings these mechanism tests were written with (Megatron's default framework leaves both overlaps
off and gathers after the step): gradient buckets under the backward, parameter gathers under the forward; and
every TP collective on the critical path (Megatron's default runs the column linears' backward collectives under
their GEMMs, `parallel.tp_linear_async`: the tests of that mechanism turn it on)."""


def run(sc, cost=None, **kw):
    return simulate_engine(sc, cost or UniformCost(topology=sc.topology), **kw)


# ------------------------------------------------------------------------------- bubbles

@pytest.mark.parametrize("pp, m", [(2, 4), (4, 8), (4, 16), (8, 32), (4, 3)])
@pytest.mark.parametrize("schedule", ["afab", "1f1b"])
def test_bubble_is_p_minus_1_over_m_plus_p_minus_1(pp, m, schedule):
    r = run(scenario(pp, m, schedule))
    assert r.bubble_fraction == pytest.approx((pp - 1) / (m + pp - 1), abs=1e-6)
    assert r.iteration_time_s == pytest.approx((m + pp - 1) * 3 * 2 * LAYER, rel=1e-9)


@pytest.mark.parametrize("pp, m, v", [(4, 8, 2), (4, 8, 4), (2, 6, 3), (8, 16, 2)])
def test_interleaved_bubble_is_p_minus_1_over_vm_plus_p_minus_1(pp, m, v):
    r = run(scenario(pp, m, "interleaved-1f1b", v))
    assert r.bubble_fraction == pytest.approx((pp - 1) / (v * m + pp - 1), abs=1e-6)


@pytest.mark.parametrize("pp, m", [(4, 8), (4, 16), (8, 16)])
def test_zb_h1_bubble_is_a_third_of_1f1b(pp, m):
    """ZB Table 2: (p-1)(T_F + T_B - T_W) vs (p-1)(T_F + T_B + T_W) with T_F = T_B = T_W."""
    base = run(scenario(pp, m, "1f1b")).breakdown["bubble_s"]
    zb = run(scenario(pp, m, "zb-h1")).breakdown["bubble_s"]
    assert zb == pytest.approx(base / 3, rel=1e-6)


@pytest.mark.parametrize("pp, m", [(4, 8), (4, 16), (8, 16), (8, 32)])
def test_zbv_bubble_is_near_zero_when_m_at_least_2p(pp, m):
    """ZB README: ZB-V's bubble ~0 with T_F = T_B = T_W; what is left is the fill of the first F's."""
    zbv = run(scenario(pp, m, "zbv", 2, layers=4 * pp))
    one = run(scenario(pp, m, "1f1b", layers=4 * pp))
    assert zbv.bubble_fraction < 0.25 * one.bubble_fraction
    assert zbv.bubble_fraction < 0.07


@pytest.mark.parametrize("schedule, vpp", [("afab", 1), ("1f1b", 1), ("interleaved-1f1b", 2), ("zb-h1", 1),
                                           ("zbv", 2), ("dualpipev", 2)])
@pytest.mark.parametrize("pp, m", [(2, 4), (4, 8), (4, 12)])
def test_step_time_equals_the_schedule_oracle(schedule, vpp, pp, m):
    """With uniform stages and free communication the engine's step is the oracle's (tests/schedule_oracle.makespan)."""
    from schedule_oracle import makespan
    from simulator.plan.schedules import pipeline_schedule
    if schedule == "dualpipev" and m < 2 * pp:
        pytest.skip("dualpipev needs m >= 2p")
    layers_per_chunk = 2
    sc = scenario(pp, m, schedule, vpp, layers=layers_per_chunk * pp * vpp)
    t = layers_per_chunk * LAYER
    if not schedule_spec(schedule).splits_backward:  # one autograd backward per chunk: the gradient leaves after its W too
        want, _ = makespan(pipeline_schedule(schedule, pp, vpp, m), pp, vpp, t, 2 * t, 0.0)
    else:
        want, _ = makespan(pipeline_schedule(schedule, pp, vpp, m), pp, vpp, t, t, t)
    assert run(sc).iteration_time_s == pytest.approx(want, rel=1e-9)


def test_dualpipev_beats_1f1b():
    dual = run(scenario(4, 16, "dualpipev", 2, layers=16)).bubble_fraction
    assert dual < run(scenario(4, 16, "1f1b", layers=16)).bubble_fraction


def test_single_stage_has_no_bubble():
    r = run(scenario(pp=1, m=8))
    assert r.bubble_fraction == pytest.approx(0.0, abs=1e-12)
    assert r.iteration_time_s == pytest.approx(8 * 2 * 3 * LAYER)


def test_breakdown_sums_to_iteration_time_and_names_the_critical_rank():
    sc = scenario(4, 8, "1f1b", dp=2, tp=2, zero=1)
    r = run(sc, CommCost(sc.topology))
    assert sum(r.breakdown.values()) == pytest.approx(r.iteration_time_s, rel=1e-9)
    assert set(r.comm) == {"tp", "dp", "pp", "cp", "ep", "offload"}
    assert r.stages[0].end_s <= r.iteration_time_s
    assert 0.0 <= r.overlap_fraction <= 1.0


@pytest.mark.parametrize("evaluate", ["engine", "analytic"])
def test_the_critical_rank_is_the_most_loaded_stage_of_an_uneven_pipeline(evaluate):
    """Stage 1 holds 7 of 8 layers: stage 0 ends last (its last backward) but only waits on stage 1, so the
    breakdown is stage 1's and its bubble is 1F1B's (p-1)/(m+p-1) on stage 1's passes; stage 0's idle is larger."""
    sc = scenario(pp=2, m=8, layers=8, pp_layers=[1, 7])
    r = run(sc) if evaluate == "engine" else estimate(sc, UniformCost(topology=sc.topology))
    idle = [st.bubble_s / r.iteration_time_s for st in r.stages]
    assert r.critical_rank == r.stages[1].rank
    assert r.bubble_fraction == pytest.approx(idle[1], abs=1e-9)
    assert r.breakdown["compute_s"] == pytest.approx(8 * 7 * 3 * LAYER, rel=1e-9)
    assert idle[0] > r.bubble_fraction + 0.5
    assert sum(r.breakdown.values()) == pytest.approx(r.iteration_time_s, rel=1e-9)


# ------------------------------------------------------------------------------- memory

@pytest.mark.parametrize("schedule, vpp, m", [("1f1b", 1, 8), ("afab", 1, 8), ("interleaved-1f1b", 2, 8),
                                              ("interleaved-1f1b", 3, 12), ("1f1b", 1, 2), ("zb-h1", 1, 8)])
def test_timeline_memory_peak_agrees_with_memory_report(schedule, vpp, m):
    sc = scenario(4, m, schedule, vpp)
    r = run(sc)
    rep = memory_report(sc)
    for got, want in zip(r.memory_peak_bytes, rep.per_stage):
        assert got == pytest.approx(want.peak, rel=1e-6)


@pytest.mark.parametrize("schedule, held", [("afab", lambda p, m: m), ("1f1b", lambda p, m: p)])
def test_stage0_holds_m_micro_batches_under_afab_and_p_under_1f1b(schedule, held):
    pp, m = 4, 12
    sc = scenario(pp, m, schedule)
    r = run(sc)
    per_mb = chunk_activation_bytes(sc, 0, 0)
    assert r.stages[0].activation_peak_bytes == pytest.approx(held(pp, m) * per_mb, rel=1e-12)


# ------------------------------------------------------------------------------- modes

@pytest.mark.parametrize("kw", [dict(schedule="1f1b", dp=2, tp=2, zero=1),
                                dict(schedule="interleaved-1f1b", vpp=2, dp=2, zero=0, overlap_dp=False),
                                dict(schedule="zb-h1", dp=2, tp=2, zero=3),
                                dict(schedule="1f1b", dp=2, zero=2, cp=2, sp=True, tp=2)])
def test_representative_and_full_give_the_same_step_on_a_homogeneous_cluster(kw):
    sc = scenario(pp=2, m=4, **kw)
    cost = CommCost(sc.topology)
    rep = run(sc, cost)
    full = run(sc, cost, full=True)
    assert full.ranks_simulated == sc.gpus and rep.ranks_simulated == sc.parallel.pp
    assert full.iteration_time_s == pytest.approx(rep.iteration_time_s, rel=1e-12)
    assert full.bubble_fraction == pytest.approx(rep.bubble_fraction, rel=1e-9, abs=1e-12)
    for d in rep.comm:
        assert full.comm[d] == pytest.approx(rep.comm[d], rel=1e-9, abs=1e-15)


def test_a_slow_gpu_slows_the_step_in_full_mode():
    sc = scenario(pp=2, m=4, dp=2, tp=2)
    cost = CommCost(sc.topology)
    base = run(sc, cost, full=True).iteration_time_s
    slow = run(sc, cost, full=True, rank_speed={3: 1.5})
    assert slow.iteration_time_s > base * 1.2
    with pytest.raises(ValueError):
        run(sc, cost, rank_speed={3: 1.5})


def test_results_are_deterministic():
    sc = scenario(4, 8, "interleaved-1f1b", 2, dp=2, tp=2, zero=1)
    cost = CommCost(sc.topology)
    a, b = run(sc, cost), run(sc, cost)
    assert (a.iteration_time_s, a.comm, a.breakdown, a.events) == (b.iteration_time_s, b.comm, b.breakdown, b.events)


def test_hfu_flops_count_recompute_on_every_gpu():
    sc = scenario(2, 4, dp=2, tp=2)
    plain = run(sc).hfu_flops
    recomputed = run(replace(sc, training=replace(sc.training, recompute="full"))).hfu_flops
    assert recomputed > plain * 1.2
    eng, _ = run_engine(sc, UniformCost(topology=sc.topology))
    assert plain == pytest.approx(sum(rk.flops for rk in eng.ranks) * sc.gpus / sc.parallel.pp)


def test_an_impossible_schedule_is_reported_not_hung(monkeypatch):
    """Stage 0 waits for a gradient that stage 1 can only produce after stage 0's next forward."""
    from simulator.plan import lower as lower_mod
    from simulator.plan.schedules import Action

    def bad(name, pp, vpp, m):
        return [[Action("F", 0, 0), Action("B", 0, 0), Action("W", 0, 0), Action("F", 0, 1), Action("B", 0, 1),
                 Action("W", 0, 1)],
                [Action("F", 1, 1), Action("B", 1, 1), Action("W", 1, 1), Action("F", 1, 0), Action("B", 1, 0),
                 Action("W", 1, 0)]]

    monkeypatch.setattr(lower_mod, "pipeline_schedule", bad)
    with pytest.raises(RuntimeError, match="deadlock"):
        run(scenario(pp=2, m=2))
    sc = scenario(pp=2, m=2)
    with pytest.raises(RuntimeError, match="deadlock"):  # the analytic listing of the same plan too
        estimate(sc, UniformCost(topology=sc.topology))


def test_a_schedule_that_breaks_a_local_dependency_is_rejected(monkeypatch):
    from simulator.plan import lower as lower_mod
    from simulator.plan.schedules import Action
    monkeypatch.setattr(lower_mod, "pipeline_schedule",
                        lambda name, pp, vpp, m: [[Action("B", 0, 0), Action("W", 0, 0), Action("F", 0, 0)]])
    with pytest.raises(ValueError, match="local dependency"):
        run(scenario(pp=1, m=1))


# ------------------------------------------------------------------------------- shipped scenario, real cost model

def _shipped(*overrides):
    from pathlib import Path

    from simulator.cost.costs import build_cost_model
    from simulator.scenario import load_scenario
    sc = load_scenario(Path(__file__).resolve().parent.parent / "scenarios" / "70b_512gpu.yaml", list(overrides))
    return sc, build_cost_model(sc)


def test_shipped_70b_agrees_with_the_analytic_estimate():
    from simulator.evaluate.analytic import estimate
    sc, cost = _shipped()
    r = simulate_engine(sc, cost)
    a = estimate(sc, cost)
    assert r.iteration_time_s == pytest.approx(a.iteration_time_s, rel=0.005)
    assert r.comm["tp"][0] == pytest.approx(a.comm["tp"][0], rel=0.005)
    for est in (r, a):  # one bubble figure: the headline is the breakdown's share
        assert sum(est.breakdown.values()) == pytest.approx(est.iteration_time_s, rel=1e-9)
        assert est.bubble_fraction == pytest.approx(est.breakdown["bubble_s"] / est.iteration_time_s, rel=1e-12)


@pytest.mark.parametrize("overrides", [(), ("parallel.pp_schedule=afab", "training.global_batch=64"),
                                       ("parallel.pp_schedule=interleaved-1f1b", "parallel.vpp=2")])
def test_shipped_70b_memory_timeline_peak_is_the_memory_report(overrides):
    sc, cost = _shipped(*overrides)
    r = simulate_engine(sc, cost)
    for got, want in zip(r.memory_peak_bytes, memory_report(sc).per_stage):
        assert got == pytest.approx(want.peak, rel=1e-5)


@pytest.mark.slow
def test_shipped_70b_full_mode_equals_representative():
    sc, cost = _shipped()
    rep = simulate_engine(sc, cost)
    full = simulate_engine(sc, cost, full=True)
    assert full.ranks_simulated == 512
    assert full.iteration_time_s == pytest.approx(rep.iteration_time_s, rel=1e-12)
    assert full.memory_peak_bytes == pytest.approx(rep.memory_peak_bytes, rel=1e-12)

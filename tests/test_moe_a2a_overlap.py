"""Megatron's EP all-to-all overlap, combined 1F1B (`parallel.ep_overlap`, plan/ep_overlap.py): in the
steady state forward k + warm-up and backward k run as one merged pass, each one's expert all-to-alls
under the other's compute; one warm-up forward more than the schedule without it."""
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from schedule_oracle import makespan, peak_inflight
from simulator.cost.costs import build_cost_model
from simulator.errors import ScenarioError
from simulator.evaluate.analytic import Lister, estimate
from simulator.evaluate.engine import simulate_engine
from simulator.evaluate.passes import OpTimes, build_template
from simulator.plan.ep_overlap import ep_overlap_actions, ep_overlap_inflight, ep_overlap_schedule
from simulator.plan.lower import build_plan
from simulator.plan.memory import inflight_per_chunk
from simulator.plan.schedules import interleaved_order, pipeline_schedule
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
MIXTRAL = ROOT / "scenarios" / "mixtral_ep.yaml"
INTERLEAVED = ["parallel.pp_schedule=interleaved-1f1b", "parallel.vpp=2"]


def mixtral(*overrides, overlap=True):
    return load_scenario(MIXTRAL, INTERLEAVED + [f"parallel.ep_overlap={str(overlap).lower()}"] + list(overrides))


def pp1(*overrides, overlap=True):
    """Mixtral with no pipeline: Megatron's no-pipelining combined 1F1B."""
    return load_scenario(MIXTRAL, ["parallel.pp=1", "parallel.dp=32", "training.global_batch=128",
                                   f"parallel.ep_overlap={str(overlap).lower()}"] + list(overrides))


@pytest.mark.parametrize("pp, vpp, m", [(2, 2, 4), (4, 2, 8), (4, 3, 12), (2, 12, 32)])
def test_steady_forward_runs_with_the_backward_warmup_plus_one_before_it(pp, vpp, m):
    """schedules.py:966-970: warm-up 2(p-r-1) + (v-1)p + 1 forwards alone; then forward k + warm-up
    with backward k (schedules.py:1485-1506); then the remaining backwards alone."""
    for rank in range(pp):
        acts = ep_overlap_actions("interleaved-1f1b", rank, pp, vpp, m)
        fwd, bwd, warm = interleaved_order(rank, pp, vpp, m)
        warm = min(warm + 1, m * vpp)
        assert [(a.kind, a.chunk, a.mb) for a in acts[:warm]] == [(f.kind, f.chunk, f.mb) for f in fwd[:warm]]
        pairs = [(a, acts[i + 1]) for i, a in enumerate(acts) if a.overlap]
        assert len(pairs) == m * vpp - warm
        for k, (f, b) in enumerate(pairs):
            assert (f.chunk, f.mb) == (fwd[k + warm].chunk, fwd[k + warm].mb)
            assert b.kind == "B" and (b.chunk, b.mb) == bwd[k]
            assert (b.chunk, b.mb) != (f.chunk, f.mb)  # independent: the reason for the extra warm-up forward


def test_without_a_pipeline_forward_i_plus_1_runs_with_backward_i():
    """combined_1f1b.py:35-137: forward 0 alone, forward i+1 with backward i, backward m-1 alone."""
    got = [(a.kind, a.mb, a.overlap) for a in ep_overlap_actions("1f1b", 0, 1, 1, 4)]
    assert got == [("F", 0, False), ("F", 1, True), ("B", 0, False), ("W", 0, False), ("F", 2, True), ("B", 1, False),
                   ("W", 1, False), ("F", 3, True), ("B", 2, False), ("W", 2, False), ("B", 3, False), ("W", 3, False)]


@pytest.mark.parametrize("pp, vpp, m", [(2, 2, 4), (4, 2, 8), (4, 4, 16), (8, 2, 8)])
def test_every_pass_runs_once_and_the_order_cannot_deadlock(pp, vpp, m):
    sched = ep_overlap_schedule("interleaved-1f1b", pp, vpp, m)
    for acts in sched:
        assert set(Counter((a.kind, a.chunk, a.mb) for a in acts).values()) == {1}
        assert len(acts) == 3 * vpp * m
    span, _ = makespan(sched, pp, vpp)
    plain, _ = makespan(pipeline_schedule("interleaved-1f1b", pp, vpp, m), pp, vpp)
    assert span >= plain  # merged passes cost their sum here (free communication): no gain without comm


@pytest.mark.parametrize("pp, vpp, m", [(2, 2, 4), (4, 2, 8), (4, 3, 12)])
def test_the_extra_warmup_forward_holds_one_micro_batch_more(pp, vpp, m):
    for rank in range(pp):
        counts = ep_overlap_inflight("interleaved-1f1b", rank, pp, vpp, m)
        acts = ep_overlap_actions("interleaved-1f1b", rank, pp, vpp, m)
        # a merged pass's forward grows while its backward still holds: count the pair's F before its B
        assert sum(counts) == min(peak_inflight(pipeline_schedule("interleaved-1f1b", pp, vpp, m)[rank]) + 1, m * vpp)
        assert sum(counts) == peak_inflight(acts)
    assert inflight_per_chunk(pp1(), 0) == {0: 2.0} and inflight_per_chunk(pp1(overlap=False), 0) == {0: 1.0}


def test_the_plan_pairs_each_steady_forward_with_a_full_backward():
    plan = build_plan(mixtral())
    m, vpp, pp = plan.sc.micro_batches, plan.sc.parallel.vpp, plan.sc.parallel.pp
    for prog in plan.stages:
        paired = [st for st in prog.steps if st.pair is not None]
        warm = min(2 * (pp - prog.stage - 1) + (vpp - 1) * pp + 1, m * vpp)
        assert len(paired) == m * vpp - warm
        assert all(st.kind == "F" and st.pair.kind == "BW" for st in paired)
        done = Counter((k, p.chunk, p.mb) for st in prog.steps for p in st.parts for k in p.kind)
        assert set(done.values()) == {1} and len(done) == 3 * len(prog.chunks) * m
    assert not any(st.pair for prog in build_plan(mixtral(overlap=False)).stages for st in prog.steps)


def test_exposed_expert_all_to_all_falls_and_the_step_with_it():
    on, off = mixtral(), mixtral(overlap=False)
    a_on, a_off = (estimate(sc, build_cost_model(sc)) for sc in (on, off))
    assert a_on.breakdown["exposed_ep_s"] < 0.6 * a_off.breakdown["exposed_ep_s"]
    assert a_on.iteration_time_s < a_off.iteration_time_s
    assert a_on.breakdown["compute_s"] == pytest.approx(a_off.breakdown["compute_s"])  # same work, moved


def test_the_step_is_never_below_its_compute_or_its_expert_all_to_all():
    """Neither the compute stream nor the ep stream can do more than run flat out: per rank and per pair."""
    sc = mixtral()
    cost = build_cost_model(sc)
    plan = build_plan(sc)
    step = estimate(sc, cost).iteration_time_s
    for rank in Lister(sc, cost, plan).run():
        assert step >= rank.comm["ep"]
    times = OpTimes(sc, cost)
    st = next(st for st in plan.stages[0].steps if st.pair is not None)
    f = build_template(times, st.chunk, "F", plan.blocks[(st.chunk, "F")])
    b = build_template(times, st.pair.chunk, "BW", plan.blocks[(st.pair.chunk, "BW")])
    fb = build_template(times, st.chunk, "FB", plan.blocks[st.key])
    assert fb.duration >= max(f.compute_s + b.compute_s, fb.comm_s["ep"]) * (1 - 1e-9)
    assert fb.duration < f.duration + b.duration


@pytest.mark.parametrize("make", [mixtral, pp1], ids=["interleaved", "pp1"])
def test_analytic_lists_the_pairs_as_the_engine_runs_them(make):
    sc = make()
    cost = build_cost_model(sc)
    a, e = estimate(sc, cost, in_pass_sharing=False), simulate_engine(sc, cost, contention=False)
    assert a.iteration_time_s == pytest.approx(e.iteration_time_s, rel=1e-9)
    for k, v in e.breakdown.items():
        assert a.breakdown[k] == pytest.approx(v, rel=1e-6, abs=1e-9 * e.iteration_time_s), k


def test_without_a_pipeline_the_overlap_hides_expert_all_to_all_too():
    on, off = pp1(), pp1(overlap=False)
    a_on, a_off = (estimate(sc, build_cost_model(sc)) for sc in (on, off))
    assert a_on.breakdown["exposed_ep_s"] < a_off.breakdown["exposed_ep_s"]


def test_megatron_option_sets_the_key(tmp_path):
    text = MIXTRAL.read_text().replace("  overlap_param_gather: true\n",
                                       "  overlap_param_gather: true\n  overlap_moe_expert_parallel_comm: true\n")
    p = tmp_path / "s.yaml"
    p.write_text(text)
    assert load_scenario(p, INTERLEAVED).parallel.ep_overlap
    assert not load_scenario(MIXTRAL, INTERLEAVED).parallel.ep_overlap  # Megatron's default: off


@pytest.mark.parametrize("overrides, allowed", [
    (["parallel.ep=1"], "ep > 1"),
    (["parallel.pp_schedule=1f1b", "parallel.vpp=1"], "interleaved-1f1b"),
    (["training.recompute=full"], "recompute none or selective"),
    (["parallel.zero=3"], "zero 0-2"),
    (["training.precision=fp32"], "bf16 or fp8"),
])
def test_what_megatron_refuses_is_refused_with_the_key(overrides, allowed):
    with pytest.raises(ScenarioError) as err:
        mixtral(*overrides)
    assert "parallel.ep_overlap" in str(err.value) and allowed in str(err.value)


def test_a_dense_model_is_refused_on_the_command_line_with_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "simulator", "run", str(ROOT / "scenarios" / "8b_8gpu.yaml"),
                        "--set", "parallel.ep_overlap=true", "--trace", str(tmp_path / "t.json")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "parallel.ep_overlap" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "t.json").exists()


def test_the_26_02_qwen3_30b_row_runs_the_recipes_ep_overlap_and_deepep():
    """Megatron-Bridge v0.3.0's H100 FP8-CS Qwen3 30B-A3B sets moe_a2a_overlap and DeepEP: the corpus row's scenario
    says both (the row is skipped for its dropless dispatch's host wait, tests/test_published_data.py, and keeps it)."""
    import yaml

    from simulator.scenario import scenario_from_mapping
    doc = yaml.safe_load((ROOT / "validation" / "references" / "corpus" / "megatron_bridge_26_02.yaml").read_text())
    run = next(r for r in doc["runs"] if r["id"] == "qwen3-30b-a3b-dgx-h100-16gpu-fp8")
    p = scenario_from_mapping(run["scenario"], base_dir=ROOT).parallel
    assert (p.ep_overlap, p.ep_dispatcher, p.pp_schedule, p.vpp, p.ep) == (True, "deepep", "interleaved-1f1b", 12, 8)


def test_the_sweep_lists_only_layouts_megatron_runs_the_overlap_in():
    from simulator.ep_spec import ep_overlap_problem
    from simulator.sweep.space import enumerate_layouts
    sc = mixtral()
    lays = enumerate_layouts(sc)
    assert lays and not [x for x in lays if ep_overlap_problem(x.ep, x.pp, x.pp_schedule, x.recompute, sc.training.precision, x.zero)]
    assert {x.pp_schedule for x in lays if x.pp > 1} == {"interleaved-1f1b"} and all(x.ep > 1 for x in lays)
    assert len(lays) < len(enumerate_layouts(mixtral(overlap=False)))


def test_the_megatron_export_turns_the_overlap_on_as_the_recipes_do():
    from simulator.report.export import megatron_args
    on, off = megatron_args(mixtral()), megatron_args(mixtral(overlap=False))
    assert {"--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"} <= set(on)
    assert not {"--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"} & set(off)

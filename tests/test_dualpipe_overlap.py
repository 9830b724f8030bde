"""DualPipe's overlapped chunk (plan/overlap.py): the forward of one micro-batch and the backward of
another run as one pass, each one's expert all-to-alls in flight under the other's compute."""
from collections import Counter
from pathlib import Path

import pytest

from simulator.cost.costs import build_cost_model
from simulator.evaluate.analytic import Lister
from simulator.evaluate.passes import OpTimes, build_template
from simulator.plan.lower import build_plan
from simulator.plan.schedules import pipeline_schedule
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
MIXTRAL = ROOT / "scenarios" / "mixtral_ep.yaml"
DUALPIPEV = ["parallel.pp_schedule=dualpipev", "parallel.vpp=2"]


def mixtral(*overrides):
    return load_scenario(MIXTRAL, DUALPIPEV + list(overrides))


def pairs(plan, stage):
    return [st for st in plan.stages[stage].steps if st.pair is not None]


def test_dualpipev_overlaps_the_forward_backward_pairs_of_its_steps_4_and_5():
    """dualpipev.py: step 4 runs m - 2p + i + 1 rounds of two overlapped pairs (the last rank's first
    pair not overlapped), step 5 p - i - 1 more pairs; steps 1-3 and 6-8 run alone."""
    pp, m = 4, 16
    for rank, actions in enumerate(pipeline_schedule("dualpipev", pp, 2, m)):
        expected = 2 * (m - 2 * pp + rank + 1) + (pp - rank - 1) - (rank == pp - 1)
        assert sum(a.overlap for a in actions) == expected
        for a, nxt in zip(actions, actions[1:]):
            if a.overlap:
                assert a.kind == "F" and nxt.kind == "B"


def test_a_pair_runs_the_forward_and_the_backward_each_once():
    sc = mixtral()
    plan = build_plan(sc)
    st = pairs(plan, 0)[0]
    (merged,) = plan.blocks[st.key]
    assert st.pair.kind == "BW"  # DualPipe's overlapped backward is a full one (its W at once)
    alone = Counter(n.op for k in ((st.chunk, "F"), (st.pair.chunk, "BW")) for b in plan.blocks[k] for n in b.nodes)
    assert Counter(n.op for n in merged.nodes) == alone
    assert all(d < i for i, n in enumerate(merged.nodes) for d in n.deps)


def test_every_micro_batch_still_runs_f_b_and_w_once_per_chunk():
    plan = build_plan(mixtral())
    for prog in plan.stages:
        done = Counter((k, p.chunk, p.mb) for st in prog.steps for p in st.parts for k in p.kind)
        assert set(done.values()) == {1}
        assert len(done) == 3 * len(prog.chunks) * plan.sc.micro_batches


def test_the_pair_hides_each_passes_all_to_alls_under_the_others_compute():
    """The pair against its forward and its full backward run one after the other."""
    sc = mixtral()
    plan = build_plan(sc)
    times = OpTimes(sc, build_cost_model(sc))
    st = pairs(plan, 0)[len(pairs(plan, 0)) // 2]
    f = build_template(times, st.chunk, "F", plan.blocks[(st.chunk, "F")])
    b = build_template(times, st.pair.chunk, "BW", plan.blocks[(st.pair.chunk, "BW")])
    fb = build_template(times, st.chunk, "FB", plan.blocks[st.key])
    assert fb.comm_s["ep"] == pytest.approx(f.comm_s["ep"] + b.comm_s["ep"])
    assert fb.duration < f.duration + b.duration
    assert fb.exposed_s.get("ep", 0.0) < f.exposed_s.get("ep", 0.0) + b.exposed_s.get("ep", 0.0)
    # neither the compute stream nor the ep stream can do more than run flat out
    assert fb.duration >= max(f.compute_s + b.compute_s, fb.comm_s["ep"]) * (1 - 1e-9)


def test_the_deepseek_layout_exposes_less_expert_all_to_all():
    """PP16 EP64 on 2,048 H800: with pairs the interior stages' exposed EP falls below the EP time by
    about the compute the pairs put beside it (both evaluators agree on it: test_analytic)."""
    sc = load_scenario(ROOT / "validation" / "scenarios" / "deepseek_v3.yaml")
    ranks = Lister(sc, build_cost_model(sc), build_plan(sc)).run()
    mid = ranks[sc.parallel.pp // 2]
    assert mid.exposed["ep"] < 0.85 * mid.comm["ep"]


def test_zero3_passes_stay_alone():
    """ZeRO-3's per-block parameter gathers gate each block of a pass: such passes are not paired."""
    plan = build_plan(mixtral("parallel.zero=3"))
    assert not any(pairs(plan, s) for s in range(plan.sc.parallel.pp))


def test_bidirectional_dualpipe_holds_two_copies_whose_mirror_ranks_reduce_together():
    """DeepSeek-V3's schedule name runs bidirectional DualPipe: rank r and rank p-1-r hold the same two stages, one of
    each copy (the embedding and the LM head on both end ranks), so each rank keeps twice 1F1B's weights and
    gradients; the two ranks' data-parallel groups reduce and shard as one (ZeRO-1's optimizer states as 1F1B's),
    and every rank holds p + 1 stage passes of activations (DualPipe README)."""
    from simulator.plan.layout import group_shape, mirror_rank, rank_chunks
    from simulator.plan.memory import memory_report
    dual = load_scenario(MIXTRAL, ["parallel.pp_schedule=DualPipe", "parallel.pp=4", "parallel.dp=8", "parallel.ep=8"])
    plain = load_scenario(MIXTRAL, ["parallel.pp=4", "parallel.dp=8", "parallel.ep=8"])
    assert dual.parallel.pp_schedule == "dualpipe" and dual.parallel.vpp == 2
    layers = [sorted(i for _, ls in rank_chunks(dual, r) for i in ls) for r in range(4)]
    assert layers[0] == layers[3] == list(range(0, 8)) + list(range(24, 32)) and layers[1] == layers[2]
    assert [c for c, _ in rank_chunks(dual, 0)] == [0, 7] and [c for c, _ in rank_chunks(dual, 3)] == [3, 4]
    assert mirror_rank(dual, 0) in group_shape(dual, "dp_cp").ranks and mirror_rank(dual, 0) in group_shape(dual, "edp").ranks
    assert group_shape(dual, "dp_cp").size == 2 * group_shape(plain, "dp_cp").size
    a, b = memory_report(dual).per_stage[1], memory_report(plain).per_stage[1]
    assert a.weights == pytest.approx(2 * b.weights) and a.grads == pytest.approx(2 * b.grads)
    assert a.optimizer == pytest.approx(b.optimizer)
    plan = build_plan(dual)
    assert all(pairs(plan, s) for s in range(4))


@pytest.mark.parametrize("overlap_dp", [True, False])
def test_every_rank_mode_runs_dualpipe_as_one_rank_per_stage_does(overlap_dp):
    """Simulating every rank, rank r and rank p-1-r rendezvous on each stage's gradient reduction: both issue their
    chunks' collectives stage by stage (their local chunk orders are swapped), also after the pipeline (no overlap)."""
    from simulator.run import simulate
    sc = load_scenario(MIXTRAL, ["parallel.pp_schedule=dualpipe", "parallel.pp=4", "parallel.dp=8",
                                 f"parallel.overlap_dp={str(overlap_dp).lower()}"])
    assert simulate(sc, full=True)["iteration_time_s"] == pytest.approx(simulate(sc)["iteration_time_s"], rel=1e-9)


def test_dualpipe_needs_an_even_pp_and_micro_batch_count():
    from simulator.errors import ScenarioError
    with pytest.raises(ScenarioError) as e:
        load_scenario(MIXTRAL, ["parallel.pp_schedule=dualpipe", "parallel.pp=2", "training.global_batch=272"])
    assert e.value.path == "training.global_batch" and "even" in e.value.problem

"""sweep: enumeration, pruning, ranking, where the tasks run (sweep.py)."""
import itertools
import sys
import types

import pytest

from simulator.errors import ScenarioError
from simulator.plan.memory import memory_report
from simulator.sweep.search import SweepOptions, rank_by_best_estimate, run_sweep, sweep_base
from simulator.sweep.runners import PoolRunner, RayRunner, SerialRunner, make_runner
from simulator.sweep.tasks import candidate_scenario, first_fit
from simulator.sweep.space import Layout, enumerate_layouts, layout_of, model_state_floor_gib, param_split, parse_fix
from simulator.sweep.tasks import Evaluation

S8B = "scenarios/8b_8gpu.yaml"
SMALL = {"micro_batch": (1, 2), "cp": (1, 2)}
"""A smaller space for the tests that run whole sweeps."""


@pytest.fixture(scope="module")
def base8b():
    """The 8B scenario under Megatron's rules (layers divide the stages; ZeRO 0-3)."""
    return sweep_base(S8B, ["framework=megatron"])


def test_the_space_has_the_frameworks_stages_and_splits():
    """torchtitan: DDP or FSDP2 without PP, its FSDP2 priced as ZeRO-1 under PP (one word each); Megatron: its
    ZeRO-2 is its ZeRO-1, so 0, 1 and 3; nanotron splits 32 layers over any number of stages."""
    titan, _, _ = sweep_base(S8B)
    zeros = {(l.pp > 1, l.zero) for l in enumerate_layouts(titan, {"recompute": ("none",)})}
    assert zeros == {(False, 0), (False, 3), (True, 0), (True, 1)}
    mega, _, _ = sweep_base(S8B, ["framework=megatron"])
    assert {l.zero for l in enumerate_layouts(mega, {"recompute": ("none",)})} == {0, 1, 3}
    nano, _, _ = sweep_base(S8B, ["framework=nanotron", "parallel.zero=1", "parallel.tp=1"])
    assert 8 in {l.pp for l in enumerate_layouts(nano, {"tp": (1,), "recompute": ("none",)})}


def _numbers(result):
    """What a ranking says, without wall-clock fields."""
    return [(ev.layout, ev.numbers["iteration_time_s"], ev.numbers["estimator"], ev.memory["peak_gib"]) for ev in result.ranked]


@pytest.fixture(scope="module")
def serial8b(base8b):
    sc, raw, bd = base8b
    return run_sweep(sc, raw, bd, SweepOptions(fixed=SMALL, engine_top=0, top=3), SerialRunner())


# ----------------------------------------------------------------------------------- --fix

def test_parse_fix_accepts_dotted_and_short_keys():
    fixed = parse_fix(["parallel.tp=4,8", "recompute=selective", "parallel.sp=true", "zero=1,3"])
    assert fixed == {"tp": (4, 8), "recompute": ("selective",), "sp": (True,), "zero": (1, 3)}


def test_parse_fix_repeated_key_keeps_the_intersection():
    assert parse_fix(["tp=2,4,8", "parallel.tp=4,8,16"]) == {"tp": (4, 8)}


@pytest.mark.parametrize("text", ["parallel.nonsense=1", "tp", "parallel.zero=5", "training.recompute=some",
                                  "parallel.tp=0", "parallel.pp_schedule=gpipe", "parallel.sp=maybe", "tp=2;tp=4"])
def test_parse_fix_rejects_bad_input(text):
    with pytest.raises(ScenarioError):
        parse_fix([text])


# ----------------------------------------------------------------------------------- enumeration

def test_enumeration_respects_fixed_keys(base8b):
    sc, _, _ = base8b
    lays = enumerate_layouts(sc, {"tp": (2, 4), "recompute": ("selective",), "zero": (1,)})
    assert lays
    assert {l.tp for l in lays} == {2, 4}
    assert {l.recompute for l in lays} == {"selective"}
    assert {l.zero for l in lays} == {1}


def test_enumeration_is_sorted_and_unique(base8b):
    sc, _, _ = base8b
    lays = enumerate_layouts(sc)
    assert lays == sorted(set(lays))


def test_enumerated_layouts_pass_the_scenario_validation(base8b):
    sc, raw, bd = base8b
    lays = enumerate_layouts(sc)
    for lay in lays[:: max(1, len(lays) // 150)]:
        built = candidate_scenario(raw, bd, lay)  # raises ScenarioError if the arithmetic let a bad one through
        assert layout_of(built) == lay


def test_enumeration_finds_every_valid_layout_in_a_grid(base8b):
    """Brute force over a grid of degrees and options: exactly the layouts validation accepts."""
    sc, raw, bd = base8b
    fixed = {"micro_batch": (1, 2), "zero": (1,), "recompute": ("none",), "cp": (1, 2, 3)}
    listed = set(enumerate_layouts(sc, fixed))
    valid = set()
    for tp, pp, cp, sp, (sched, vpp) in itertools.product((1, 2, 3, 4, 8), (1, 2, 4, 8), (1, 2, 3), (True, False),
                                                          (("1f1b", 1), ("zb-h1", 1), ("interleaved-1f1b", 2), ("interleaved-1f1b", 4),
                                                           ("interleaved-1f1b", 8), ("interleaved-1f1b", 16), ("zbv", 2), ("dualpipev", 2))):
        if 8 % (tp * pp * cp):
            continue
        for mb in (1, 2):
            lay = Layout(tp=tp, pp=pp, cp=cp, ep=1, dp=8 // (tp * pp * cp), micro_batch=mb, sp=sp, zero=1,
                         pp_schedule=sched, vpp=vpp, recompute="none")
            try:
                candidate_scenario(raw, bd, lay)
            except ScenarioError:
                continue
            if (tp == 1 and sp) or (pp == 1 and sched != "1f1b"):
                continue  # the same layout as sp off / as 1F1B: listed once
            if sched == "interleaved-1f1b" and vpp not in [v for v in range(2, 33) if (sc.model.layers // pp) % v == 0][:3]:
                continue  # the default space keeps the three smallest chunk counts
            valid.add(lay)
    assert listed == valid


def test_moe_enumeration_offers_expert_parallel_dividing_dp_cp():
    sc, _, _ = sweep_base("scenarios/mixtral_ep.yaml")
    lays = enumerate_layouts(sc, {"tp": (2,), "pp": (2,), "zero": (1,), "recompute": ("none",), "micro_batch": (1,)})
    eps = {l.ep for l in lays}
    assert eps >= {1, 2, 4, 8}
    assert all((l.dp * l.cp) % l.ep == 0 and sc.model.moe.experts % l.ep == 0 for l in lays)


# ----------------------------------------------------------------------------------- pruning

def test_model_state_floor_is_a_lower_bound(base8b):
    sc, raw, bd = base8b
    split = param_split(sc)
    for lay in enumerate_layouts(sc)[::97]:
        mem = memory_report(candidate_scenario(raw, bd, lay))
        worst = max(s.weights + s.grads + s.optimizer for s in mem.per_stage) / 2**30
        assert model_state_floor_gib(sc, lay, split) <= worst + 1e-9


def test_first_fit_takes_the_first_option_that_fits(base8b):
    sc, raw, bd = base8b
    opts = tuple(Layout(tp=1, pp=1, cp=1, ep=1, dp=8, micro_batch=1, sp=False, zero=z, pp_schedule="1f1b", vpp=1,
                        recompute=rc) for rc in ("none", "full") for z in (1, 2, 3))
    ev = first_fit(raw, bd, opts)
    fits = [memory_report(candidate_scenario(raw, bd, o)).fits for o in opts]
    assert ev.status == "ok" and ev.layout == opts[fits.index(True)]


def test_first_fit_reports_the_most_frugal_miss(base8b):
    sc, raw, bd = base8b
    opts = tuple(Layout(tp=1, pp=1, cp=1, ep=1, dp=8, micro_batch=64 // 8, sp=False, zero=z, pp_schedule="1f1b", vpp=1,
                        recompute="none") for z in (1, 2))
    ev = first_fit(raw, bd, opts, headroom_gib=79.0)
    assert ev.status == "oom" and ev.layout.zero == 2
    assert ev.memory["peak_gib"] > ev.memory["capacity_gib"] - 79.0


def test_ranked_layouts_all_fit_and_infeasible_ones_do_not(serial8b):
    assert serial8b.ranked
    for ev in serial8b.ranked:
        assert ev.memory["fits"] and ev.memory["peak_gib"] <= ev.memory["capacity_gib"]
    assert all(ev.status == "oom" and not ev.memory["fits"] for ev in serial8b.infeasible)


def test_headroom_excludes_layouts_that_fit_only_barely(base8b, serial8b):
    sc, raw, bd = base8b
    margin = 40.0
    res = run_sweep(sc, raw, bd, SweepOptions(fixed=SMALL, engine_top=0, top=3, headroom_gib=margin, estimate_infeasible=0))
    assert res.ranked
    assert all(ev.memory["peak_gib"] <= ev.memory["capacity_gib"] - margin for ev in res.ranked)
    assert res.ranked[0].tokens_per_s_per_gpu <= serial8b.ranked[0].tokens_per_s_per_gpu


# ----------------------------------------------------------------------------------- ranking

def test_ranking_is_by_throughput_with_a_layout_tie_break(serial8b):
    keys = [(-ev.tokens_per_s_per_gpu, ev.layout) for ev in serial8b.ranked]
    assert keys == sorted(keys)


def test_shown_layouts_carry_full_reports(serial8b):
    for ev in serial8b.ranked[:3]:
        assert ev.report is not None and ev.report["layout"]["tp"] == ev.layout.tp
        assert ev.report["iteration_time_s"] == pytest.approx(ev.summary["iteration_time_s"], rel=1e-12)
        entry = ev.to_json()
        assert set(entry) == {"parallel", "training", "estimator", "report"} and entry["parallel"]["dp"] == ev.layout.dp


def test_ranking_is_deterministic(base8b, serial8b):
    sc, raw, bd = base8b
    again = run_sweep(sc, raw, bd, SweepOptions(fixed=SMALL, engine_top=0, top=3), SerialRunner())
    assert _numbers(again) == _numbers(serial8b)


def test_fixed_keys_hold_in_the_result(base8b):
    sc, raw, bd = base8b
    res = run_sweep(sc, raw, bd, SweepOptions(fixed=parse_fix(["parallel.tp=2", "training.recompute=full", "parallel.cp=1"]), engine_top=0, top=2))
    assert res.ranked and all(ev.layout.tp == 2 and ev.layout.recompute == "full" for ev in res.ranked)


def test_reference_is_the_scenarios_own_layout(serial8b, base8b):
    sc, _, _ = base8b
    assert serial8b.reference.layout == layout_of(sc)
    assert serial8b.ranked[0].tokens_per_s_per_gpu >= serial8b.reference.tokens_per_s_per_gpu


def _row(tp, tokens, estimator):
    lay = Layout(tp=tp, pp=1, cp=1, ep=1, dp=8 // tp, micro_batch=1, sp=False, zero=1, pp_schedule="1f1b", vpp=1, recompute="none")
    numbers = {"tokens_per_s_per_gpu": tokens, "estimator": estimator}
    return Evaluation(layout=lay, status="ok", **({"report": numbers} if estimator == "engine" else {"summary": numbers}))


def test_an_engine_row_slower_than_an_analytic_row_ranks_below_it():
    """The engine found layout tp1 slower than its analytic estimate and than tp2's analytic estimate."""
    analytic = [_row(1, 1000.0, "analytic"), _row(2, 950.0, "analytic"), _row(4, 900.0, "analytic")]
    ranked = rank_by_best_estimate(analytic, [_row(1, 920.0, "engine")])
    assert [(ev.layout.tp, ev.estimator) for ev in ranked] == [(2, "analytic"), (1, "engine"), (4, "analytic")]


def test_rows_are_ranked_by_their_best_estimate_and_say_which(base8b):
    """Engine numbers where the engine ran, analytic elsewhere; one order by the tokens/s/GPU each row
    reports, whichever estimator gave it."""
    sc, raw, bd = base8b
    res = run_sweep(sc, raw, bd, SweepOptions(fixed=SMALL, engine_top=2, top=6, estimate_infeasible=0))
    tps = [ev.numbers["tokens_per_s_per_gpu"] for ev in res.ranked]
    assert tps == sorted(tps, reverse=True)
    est = [ev.to_json()["estimator"] for ev in res.ranked]
    assert est.count("engine") == res.counts["simulated_engine"] >= 2
    assert est[0] == "engine"  # an analytic row left on top by the engine's corrections is simulated too
    assert all(ev.to_json()["estimator"] == ev.numbers["estimator"] for ev in res.ranked)


# ----------------------------------------------------------------------------------- runners

def test_process_pool_gives_the_serial_results(base8b, serial8b):
    sc, raw, bd = base8b
    pool = PoolRunner(2)
    try:
        res = run_sweep(sc, raw, bd, SweepOptions(fixed=SMALL, engine_top=0, top=3), pool)
    finally:
        pool.close()
    assert _numbers(res) == _numbers(serial8b)
    assert res.counts == serial8b.counts


def test_missing_ray_is_a_clear_input_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ScenarioError, match="ray is not installed"):
        make_runner(2, "auto")


def _fake_ray():
    """A stand-in with Ray's API (init, remote, wait, get) that runs each task when it is submitted."""
    ray = types.ModuleType("ray")
    ray.inits = []
    ray.init = lambda **kw: ray.inits.append(kw)

    class Ref:
        def __init__(self, value):
            self.value = value

    def remote(fn):
        return types.SimpleNamespace(remote=lambda *a: Ref(fn(*a)))
    ray.remote = remote
    ray.wait = lambda refs, num_returns=1: (refs[:num_returns], refs[num_returns:])
    ray.get = lambda refs: [r.value for r in refs]
    ray.shutdown = lambda: None
    return ray


def test_ray_runner_gives_the_serial_results(monkeypatch, base8b, serial8b):
    fake = _fake_ray()
    monkeypatch.setitem(sys.modules, "ray", fake)
    sc, raw, bd = base8b
    runner = RayRunner("ray://head:10001")
    res = run_sweep(sc, raw, bd, SweepOptions(fixed=SMALL, engine_top=0, top=3), runner)
    assert fake.inits and fake.inits[0]["address"] == "ray://head:10001"
    assert fake.inits[0]["runtime_env"]["py_modules"][0].endswith("simulator")
    assert _numbers(res) == _numbers(serial8b)


# ----------------------------------------------------------------------------------- the bars

@pytest.mark.slow
def test_70b_sweep_beats_the_hand_picked_layout_and_keeps_tp_in_a_node():
    sc, raw, bd = sweep_base("scenarios/70b_512gpu.yaml")
    runner = make_runner(2)
    try:
        res = run_sweep(sc, raw, bd, SweepOptions(top=5, engine_top=3), runner)
    finally:
        runner.close()
    assert res.ranked and all(ev.memory["fits"] for ev in res.ranked)
    best = res.ranked[0]
    assert best.tokens_per_s_per_gpu >= res.reference.tokens_per_s_per_gpu
    assert best.layout.tp <= sc.gpus_per_node


# ----------------------------------------------------------------------------------- scenarios the sweep must take

def test_recompute_modules_qualify_only_the_selective_candidates(base8b):
    """A scenario's training.recompute_modules (allowed with selective recompute only) carries to the candidates that
    recompute selectively and is dropped from those that recompute none or all: none is rejected for it."""
    from simulator.sweep.tasks import sibling_scenario
    sc, raw, bd = sweep_base(S8B, ["framework=megatron", "training.recompute=selective",
                                   "training.recompute_modules=[core_attn,layernorm]"])
    lay = {rc: Layout(tp=1, pp=1, cp=1, ep=1, dp=8, micro_batch=1, sp=False, zero=3, pp_schedule="1f1b", vpp=1,
                      recompute=rc) for rc in ("none", "selective", "full")}
    built = {rc: candidate_scenario(raw, bd, l) for rc, l in lay.items()}
    assert built["selective"].training.recompute_modules == ["core_attn", "layernorm"]
    assert built["none"].training.recompute_modules is None and built["full"].training.recompute_modules is None
    # from a candidate that dropped them, a selective sibling takes the scenario's own back
    assert sibling_scenario(built["none"], lay["selective"], ["core_attn", "layernorm"]).training.recompute_modules == \
        ["core_attn", "layernorm"]
    assert sibling_scenario(built["selective"], lay["full"]).training.recompute_modules is None
    ev = first_fit(raw, bd, tuple(lay.values()))
    assert ev.status == "ok" and ev.layout.recompute == "none"


def test_a_sweep_where_nothing_fits_says_so_with_the_engine_on():
    """The 405B on one node: every layout is over memory; the engine's leader check has no leader to check."""
    sc, raw, bd = sweep_base(S8B, ["model=llama3-405b", "training.global_batch=8"])
    res = run_sweep(sc, raw, bd, SweepOptions(top=3, engine_top=2, fixed={"micro_batch": (1,)}), SerialRunner())
    assert res.ranked == [] and res.counts["simulated_engine"] == 0


def test_the_reference_keeps_the_scenarios_own_layer_split():
    """The candidates split layers evenly (sweep_base drops parallel.pp_layers); the scenario's own layout is
    estimated with its own split, which a model whose layers do not divide the stages needs."""
    sc, raw, bd = sweep_base(S8B, ["framework=megatron", "parallel.pp=4", "parallel.dp=2", "parallel.zero=1",
                                   "parallel.pp_layers=[7,9,8,8]"])
    assert "pp_layers" not in raw["parallel"]
    res = run_sweep(sc, raw, bd, SweepOptions(top=2, engine_top=0, fixed={"tp": (1,), "cp": (1,), "micro_batch": (1,)}),
                    SerialRunner())
    assert res.reference.report is not None and res.reference.layout == layout_of(sc)
    assert res.reference.parallel["pp_layers"] == [7, 9, 8, 8]


def test_a_sweep_whose_candidates_the_scenario_rejects_says_why(monkeypatch, base8b):
    """Every candidate rejected by validation: the sweep notes the commonest reason instead of leaving
    'no layout fits' as the only word."""
    import simulator.sweep.tasks as tasks

    def reject(raw, base_dir, lay):
        raise ScenarioError("training.some_key", "given with this layout", "another")
    monkeypatch.setattr(tasks, "candidate_scenario", reject)
    sc, raw, bd = base8b
    res = run_sweep(sc, raw, bd, SweepOptions(top=2, engine_top=0, fixed={"tp": (1,), "cp": (1,), "micro_batch": (1,)}),
                    SerialRunner())
    assert res.ranked == [] and res.counts["invalid"] > 0
    assert any("rejected by the scenario's validation" in n and "training.some_key" in n for n in res.notes)

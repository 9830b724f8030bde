"""validation/playbook_regret.py: the pick is the sweep's first among layouts predicted to fit."""
import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("playbook_regret", ROOT / "validation" / "playbook_regret.py")
regret = importlib.util.module_from_spec(spec)
spec.loader.exec_module(regret)


def run(dp, tp, measured, label="8B", nodes=2, vocab=131072, kv_heads=32, node_busbw=458.0):
    return SimpleNamespace(label=label, kv_heads=kv_heads, heads=32, vocab=vocab, nodes=nodes, global_batch=256, dp=dp, tp=tp,
                           pp=1, zero=1, micro_batch=1, grad_accum=256 // dp, tokens_per_s_per_gpu=measured,
                           busbw={"all_reduce_intranode8": node_busbw}, layout_key=(label, kv_heads, vocab, nodes, dp, tp))


def test_regret_is_the_shortfall_of_the_pick():
    runs = [run(16, 1, 100.0), run(8, 2, 90.0), run(4, 4, 80.0)]
    preds = [{"ok": True, "tokens_per_s_per_gpu": p, "fits": True} for p in (5.0, 9.0, 1.0)]
    (g,) = regret.regret_groups(regret.group_members(runs, preds))
    assert g["pick"].startswith("dp8 tp2") and g["best"].startswith("dp16 tp1")
    assert abs(g["regret"] - 0.10) < 1e-12 and g["pick_rank_measured"] == 2


def test_layouts_predicted_not_to_fit_are_not_picked():
    runs = [run(16, 1, 100.0), run(8, 2, 90.0)]
    preds = [{"ok": True, "tokens_per_s_per_gpu": 5.0, "fits": True}, {"ok": True, "tokens_per_s_per_gpu": 9.0, "fits": False}]
    (g,) = regret.regret_groups(regret.group_members(runs, preds))
    assert g["regret"] == 0.0


def test_engine_numbers_rank_first():
    runs = [run(16, 1, 100.0), run(8, 2, 90.0)]
    preds = [{"ok": True, "tokens_per_s_per_gpu": 5.0, "fits": True, "engine": 8.0},
             {"ok": True, "tokens_per_s_per_gpu": 9.0, "fits": True, "engine": 7.0}]
    (g,) = regret.regret_groups(regret.group_members(runs, preds))
    assert g["regret"] == 0.0 and g["pick_by"] == "engine"


def test_summary_splits_fit_and_validation():
    groups = [{"split": "fit", "regret": 0.0}, {"split": "fit", "regret": 0.05}, {"split": "validation", "regret": 0.01}]
    s = regret.summary(groups)
    assert s["fit"]["groups"] == 2 and s["fit"]["within_bar"] == 0.5 and s["validation"]["within_bar"] == 1.0


def test_model_variants_are_separate_groups():
    """Same label, layout, nodes and batch but another vocabulary or KV-head count is another model: the
    fast 131k-vocab run does not become the 49k variant's best, and each variant is named."""
    runs = [run(16, 1, 100.0), run(8, 2, 90.0), run(16, 1, 70.0, vocab=49152), run(8, 2, 60.0, vocab=49152),
            run(16, 1, 50.0, kv_heads=8), run(8, 2, 40.0, kv_heads=8)]
    preds = [{"ok": True, "tokens_per_s_per_gpu": p, "fits": True} for p in (9.0, 5.0, 5.0, 9.0, 9.0, 5.0)]
    groups = {g["model"]: g for g in regret.regret_groups(regret.group_members(runs, preds))}
    assert set(groups) == {"8B", "8B (vocab49k)", "8B (gqa8)"}
    assert groups["8B"]["regret"] == 0.0 and groups["8B (gqa8)"]["regret"] == 0.0
    assert groups["8B (vocab49k)"]["best_measured"] == 70.0 and abs(groups["8B (vocab49k)"]["regret"] - 1 / 7) < 1e-12


def test_picks_from_another_network_state_are_counted():
    """The pick ran in the slow state (one-node probe ~425 GB/s), the best in the healthy one: the group's
    regret is reported as one whose measured order mixes layout and network state."""
    runs = [run(16, 1, 100.0), run(8, 2, 90.0, node_busbw=425.0), run(4, 4, 95.0, label="3B"), run(2, 8, 80.0, label="3B")]
    preds = [{"ok": True, "tokens_per_s_per_gpu": p, "fits": True} for p in (5.0, 9.0, 5.0, 9.0)]
    groups = {g["model"]: g for g in regret.regret_groups(regret.group_members(runs, preds))}
    assert (groups["8B"]["pick_state"], groups["8B"]["best_state"]) == ("slow", "healthy")
    assert groups["3B"]["pick_state"] == groups["3B"]["best_state"] == "healthy"
    mix = regret.state_mix([dict(g, split="fit") for g in groups.values()])["fit"]
    assert mix["groups_with_regret"] == 2 and mix["mixed_states"] == 1
    assert abs(mix["regret_points_mixed"] - 0.10 / 2) < 1e-12


def twin(zero, measured, nodes=1, node_busbw=458.0):
    r = run(16, 1, measured, nodes=nodes, node_busbw=node_busbw)
    r.zero = zero
    return r


def test_twin_sigma_is_the_median_absolute_deviation_of_zero_twins():
    """Pairs that differ only in ZeRO stage: sigma per run = 1.4826 x median |log ratio| / sqrt(2), one node
    and multi-node apart, and two jobs in different network states are not twins."""
    ratios = (1.01, 1.02, 1.04)
    runs = []
    for i, q in enumerate(ratios):
        a, b = twin(0, 100.0 * q), twin(1, 100.0)
        a.dp = b.dp = 2 ** i  # three distinct layouts
        runs += [a, b]
    runs += [twin(0, 150.0, nodes=4), twin(1, 100.0, nodes=4, node_busbw=425.0)]  # healthy vs slow: not twins
    sig = regret.twin_sigma(runs)
    assert sig["one_node"]["pairs"] == 3 and sig["multi_node"] == {"pairs": 0, "sigma": None}
    assert abs(sig["one_node"]["sigma"] - 1.4826 * math.log(1.02) / math.sqrt(2)) < 1e-12


def test_a_predictor_that_knows_the_truth_has_no_regret_without_noise():
    groups = {("8B", 32, 131072, 2, 256): [(run(16, 1, m), {}) for m in (100.0, 99.0, 90.0)]}
    (f,) = regret.noise_floor(groups, 0.0, 0.0).values()
    assert f == {"groups": 1, "within_bar": 1.0, "all_within_bar": 1.0, "mean_regret": 0.0}


def test_the_noise_floor_falls_with_noise_and_with_close_rivals_and_repeats():
    """Layouts 1 % apart are told apart less often as the noise grows; a rival 30 % behind never wins;
    the same seed gives the same floor."""
    close = ("8B", 32, 131072, 2, 256)
    far = ("3B", 32, 131072, 2, 256)
    groups = {close: [(run(16, 1, m), {}) for m in (100.0, 99.0, 99.0)],
              far: [(run(16, 1, m, label="3B"), {}) for m in (100.0, 70.0)]}
    low, high = (regret.noise_floor({close: groups[close]}, s, s)["fit"] for s in (0.01, 0.05))
    assert 0 < high["within_bar"] < low["within_bar"] < 1 and high["mean_regret"] > low["mean_regret"]
    assert regret.noise_floor({far: groups[far]}, 0.01, 0.01)["fit"]["within_bar"] == 1.0
    both = regret.noise_floor(groups, 0.03, 0.03)
    assert both == regret.noise_floor(groups, 0.03, 0.03)
    assert both["fit"]["all_within_bar"] <= both["fit"]["within_bar"]


def test_the_report_prints_both_noise_floors():
    runs = [twin(0, 101.0), twin(1, 100.0), twin(0, 104.0, nodes=4), twin(1, 100.0, nodes=4)]
    groups = {("8B", 32, 131072, 2, 256): [(run(16, 1, m), {}) for m in (100.0, 99.0)]}
    floors = regret.noise_floors(runs, groups)
    assert floors["twin_sigma"]["multi_node"]["sigma"] > floors["twin_sigma"]["one_node"]["sigma"] > 0
    one, loose = regret.floor_text(floors)
    assert "everywhere (one-node ZeRO twins, 1 pairs)" in one and "of the fit groups (all 1 in" in one
    assert "across nodes (multi-node ZeRO twins, 1 pairs" in loose

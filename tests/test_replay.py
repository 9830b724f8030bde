"""`calibrate replay`, the parts that need no second process: bad plans exit 2 before anything starts,
the synthetic data, the model's deterministic initialisation, ring attention's math, the report."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from calibrate.replay.cli import main  # noqa: E402
from calibrate.replay.data import global_batch, rank_batch, zigzag_positions  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

SCEN = "scenarios/replay"


def _exit(capsys, *args) -> tuple[int, str]:
    rc = main(list(args))
    return rc, capsys.readouterr().err.strip()


@pytest.mark.parametrize("sets, fragment", [
    (["cluster.gpus_per_node=16", "parallel.dp=16", "training.global_batch=16"], "at most 8 processes"),
    (["cluster.nodes=2", "parallel.dp=4"], "one command starts one node"),
    (["cluster.gpus_per_node=8", "parallel.dp=1", "parallel.tp=8"], "does not divide kv_heads"),
    (["model.arch=gpt"], "Llama-style models only"),
    (["parallel.dp=1", "parallel.pp=2", "training.global_batch=1"], "at least pp = 2 micro-batches"),
    (["parallel.dp=2", "parallel.ep=2"], "has no experts"),
    (["training.precision=fp8"], "fp8"),
], ids=["world>8", "two-nodes", "tp>kv", "gpt", "1f1b-few-microbatches", "ep-dense", "fp8"])
def test_bad_plan_is_one_line_and_exit_2(capsys, sets, fragment):
    args = [f"{SCEN}/dp2.yaml"] + [a for s in sets for a in ("--set", s)]
    rc, err = _exit(capsys, *args)
    assert rc == 2
    assert fragment in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_moe_with_tp_is_refused(capsys):
    rc, err = _exit(capsys, f"{SCEN}/moe-ep2.yaml", "--set", "parallel.dp=1", "--set", "parallel.tp=2", "--set", "parallel.ep=1",
                    "--set", "parallel.sp=true")
    assert rc == 2 and "expert tensor parallelism" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_gpu_topology_without_gpus_is_refused(capsys):
    rc, err = _exit(capsys, f"{SCEN}/dp2.yaml", "--set", "cluster.topology=dgx-h100")
    assert rc == 2 and "needs CUDA GPUs" in err


def test_bad_arguments_exit_2(capsys):
    assert main([f"{SCEN}/dp2.yaml", "--steps", "2", "--warmup", "2"]) == 2
    assert main(["no/such/scenario.yaml"]) == 2
    assert main([f"{SCEN}/dp2.yaml", "--no-such-flag"]) == 2


def test_synthetic_batch_is_a_pure_function_of_seed_and_step():
    a = global_batch(7, 3, 4, 32, 100)
    b = global_batch(7, 3, 4, 32, 100)
    c = global_batch(7, 4, 4, 32, 100)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    assert torch.equal(a[0][:, 1:], a[1][:, :-1])  # labels are the next tokens


def test_zigzag_positions_cover_the_sequence_once_with_equal_causal_work():
    seq, cp = 32, 4
    parts = [zigzag_positions(seq, cp, r) for r in range(cp)]
    assert sorted(torch.cat(parts).tolist()) == list(range(seq))
    work = [int((p + 1).sum()) for p in parts]  # keys each query attends to
    assert len(set(work)) == 1


def test_rank_batch_slices_replicas_and_positions():
    x, y = global_batch(1, 0, 4, 16, 50)
    pos = zigzag_positions(16, 2, 1)
    xs, ys = rank_batch(x, y, dp=2, dp_rank=1, positions=pos)
    assert torch.equal(xs, x[2:4][:, pos]) and torch.equal(ys, y[2:4][:, pos])


def test_stage_and_expert_slices_start_from_the_reference_weights():
    from calibrate.replay.experts import EPGroup
    from calibrate.replay.llama import AttentionCore, Transformer, init_weights
    sc = load_scenario(f"{SCEN}/moe-ep2.yaml")
    m, pos = sc.model, torch.arange(8)
    full = Transformer(m, layer_ids=list(range(m.layers)), first=True, last=True, positions=pos, core=AttentionCore())
    stage = Transformer(m, layer_ids=[2, 3], first=False, last=True, positions=pos, core=AttentionCore(),
                        ep=EPGroup(group=None, size=2, rank=1))
    init_weights(full, 5)
    init_weights(stage, 5)
    ref = dict(full.named_parameters())
    names = dict(stage.named_parameters())
    owned = {n.rsplit(".", 1)[1] for n in names if ".experts." in n}
    assert owned == {"2", "3"}  # rank 1 of 2 owns experts 2 and 3 of 4
    for name, p in names.items():
        assert torch.equal(p, ref[name])


def test_ring_attention_on_one_rank_is_causal_attention():
    """With a one-member group the zig-zag sub-blocks (causal, full, causal) must rebuild plain causal
    attention, forward and backward, GQA included."""
    from calibrate.replay.llama import _sdpa_attention
    from calibrate.replay.ring_attention import CPGroup, ring_attention
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 16, 8, generator=g, requires_grad=True)
    k = torch.randn(2, 2, 16, 8, generator=g, requires_grad=True)
    v = torch.randn(2, 2, 16, 8, generator=g, requires_grad=True)
    dout = torch.randn(2, 4, 16, 8, generator=g)
    ring = ring_attention(q, k, v, CPGroup(group=None, ranks=(0,), rank=0))
    grads = torch.autograd.grad(ring, (q, k, v), dout)
    ref = _sdpa_attention(q, k, v)
    ref_grads = torch.autograd.grad(ref, (q, k, v), dout)
    torch.testing.assert_close(ring, ref, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_token_loss_sums_to_the_step_mean_however_the_batch_is_split():
    from calibrate.replay.llama import token_loss
    g = torch.Generator().manual_seed(1)
    logits, labels = torch.randn(4, 6, 10, generator=g), torch.randint(10, (4, 6), generator=g)
    whole = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
    parts = sum(token_loss(logits[i:i + 1], labels[i:i + 1], 24) for i in range(4))
    torch.testing.assert_close(parts, whole)


def test_report_without_prediction_or_reference_still_prints():
    from calibrate.replay.plan import ReplayOptions, plan_replay
    from calibrate.replay.report import build_report, format_table
    plan = plan_replay(load_scenario(f"{SCEN}/dp2.yaml", ["cluster.profile=no/such/profile.json"]), ReplayOptions(steps=2, warmup=1))
    measured = {"losses": [7.0, 6.9], "grad_norms": [1.0, 1.1], "step_times_s": [1.0, 0.5], "iteration_time_s": 0.5,
                "peak_memory_gib_per_rank": [None, None], "peak_rss_gib_per_rank": [0.4, 0.4],
                "phases_per_rank": [{"forward_backward_s": 0.4, "grad_sync_wait_s": 0.05, "optimizer_s": 0.05, "cpu_s": 0.5}] * 2}
    r = build_report(plan, measured, None)
    assert r["predicted"]["iteration_time_s"] is None and r["relative_error"]["iteration_time_s"] is None
    assert r["loss_matches_reference"] is None and r["measured"]["peak_memory_gib"] is None
    assert set(r) >= {"predicted", "measured", "relative_error", "loss_matches_reference"}
    assert "iteration time" in format_table(r)


def test_host_speed_retimes_the_profiles_own_gemms(tmp_path):
    """The drift check re-times up to POINTS of the profile's fp32 GEMMs of 0.2-5 ms and reports
    measured / profile: a profile that claims its 32-wide GEMMs took 0.5-5 ms (far longer than they take: 0.02 of
    that on this project's 2-core VM, 2026-11-27; the 64-wide ones of before read 0.05-0.076 there) reads < 0.05;
    no CPU profile, or a GPU run, gives None; the report scales the prediction by it only in the
    informational field, never in `relative_error`."""
    import json
    from calibrate.replay.host_speed import POINTS, host_speed, speed_points
    from calibrate.replay.plan import ReplayOptions, plan_replay
    from calibrate.replay.report import build_report
    rows = [{"dtype": "fp32", "m": 32, "n": 32 * i, "k": 32, "time_s": 5e-4 * i} for i in range(1, 11)]
    rows += [{"dtype": "fp32", "m": 8, "n": 8, "k": 8, "time_s": 1e-6}, {"dtype": "bf16", "m": 64, "n": 64, "k": 64, "time_s": 1e-3}]
    profile = {"provenance": {"device_type": "cpu", "threads": 1}, "gemm": rows}
    picked = speed_points(profile)
    assert len(picked) == POINTS and all(r["dtype"] == "fp32" and 2e-4 <= r["time_s"] <= 5e-3 for r in picked)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile))
    speed = host_speed(str(path), "cpu")
    assert speed["points"] == POINTS and 0 < speed["ratio"] < 0.05
    assert host_speed(str(path), "cuda") is None and host_speed(str(tmp_path / "none.json"), "cpu") is None
    profile["provenance"]["device_type"] = "cuda"
    path.write_text(json.dumps(profile))
    assert host_speed(str(path), "cpu") is None
    plan = plan_replay(load_scenario(f"{SCEN}/dp2.yaml"), ReplayOptions(steps=2, warmup=1))
    measured = {"losses": [7.0, 6.9], "grad_norms": [1.0, 1.1], "step_times_s": [1.0, 0.5], "iteration_time_s": 0.5,
                "peak_memory_gib_per_rank": [None, None], "peak_rss_gib_per_rank": [0.4, 0.4]}
    r = build_report(plan, measured, None, host=({"ratio": 1.2, "points": 6}, {"ratio": 1.4, "points": 6}))
    pred = r["predicted"]["iteration_time_s"]
    assert r["host_speed_vs_profile"]["ratio"] == pytest.approx(1.3)
    assert r["relative_error"]["iteration_time_s"] == pytest.approx(pred / 0.5 - 1)
    assert r["iteration_time_error_at_host_speed"] == pytest.approx(pred * 1.3 / 0.5 - 1)


def test_steady_steps_keep_only_steps_where_every_rank_ran_fast():
    """A step is steady when every rank's probes before and after it are within the tolerance of the
    run's fastest probe (warm-up steps neither count nor set the fastest); the report's steady figure
    is the median of those steps' times, and it is absent below STEADY_MIN_STEPS steps or without probes."""
    from calibrate.replay.host_speed import probe_timer, steady_steps
    from calibrate.replay.plan import ReplayOptions, plan_replay
    from calibrate.replay.report import build_report, format_table
    fast, slow = 1.0e-3, 1.4e-3
    probes = [[(0.5e-3, 0.5e-3), (fast, fast), (fast, slow), (fast, 1.05e-3), (fast, fast)],
              [(fast, fast), (fast, fast), (fast, fast), (fast, fast), (slow, fast)]]
    assert steady_steps(probes, first=1) == ([1, 3], fast)  # step 0 is warm-up: its 0.5 ms probe is ignored
    assert steady_steps(probes, first=1, tolerance=0.5)[0] == [1, 2, 3, 4]
    plan = plan_replay(load_scenario(f"{SCEN}/dp2.yaml"), ReplayOptions(steps=5, warmup=1))
    times = [2.0, 0.50, 0.70, 0.54, 0.66]
    measured = {"losses": [7.0] * 5, "grad_norms": [1.0] * 5, "step_times_s": times, "iteration_time_s": 0.66,
                "peak_memory_gib_per_rank": [None, None], "peak_rss_gib_per_rank": [0.4, 0.4],
                "speed_probes_s_per_rank": probes}
    r = build_report(plan, measured, None)
    st = r["steady_host"]
    pred = r["predicted"]["iteration_time_s"]
    assert st["steps"] == [1, 3] and st["of_steps"] == 4 and st["iteration_time_s"] == pytest.approx(0.52)
    assert st["relative_error"] == pytest.approx(pred / 0.52 - 1)
    assert r["relative_error"]["iteration_time_s"] == pytest.approx(pred / 0.66 - 1)  # the plain error is kept
    assert "steady host: 2 of 4" in format_table(r)
    measured["speed_probes_s_per_rank"] = [[(slow, slow)] + p[1:] for p in probes]
    measured["speed_probes_s_per_rank"][1][1] = (slow, slow)
    assert build_report(plan, measured, None)["steady_host"]["iteration_time_s"] is None  # one steady step
    del measured["speed_probes_s_per_rank"]
    assert build_report(plan, measured, None)["steady_host"] is None
    probe = probe_timer()
    assert 0 < probe() < 1.0


def test_report_prices_the_measured_routing_imbalance_beside_the_plain_prediction():
    """With EP the report adds the prediction at the run's measured ep_imbalance (slower when the busiest
    rank had more rows than the scenario assumed) and keeps the contract's prediction as it was."""
    from calibrate.replay.plan import ReplayOptions, plan_replay
    from calibrate.replay.report import build_report, format_table
    plan = plan_replay(load_scenario(f"{SCEN}/moe-ep2.yaml"), ReplayOptions(steps=2, warmup=1))
    measured = {"losses": [7.0, 6.9], "grad_norms": [1.0, 1.1], "step_times_s": [1.0, 0.5], "iteration_time_s": 0.5,
                "peak_memory_gib_per_rank": [None, None], "peak_rss_gib_per_rank": [0.4, 0.4], "ep_imbalance": 1.3}
    r = build_report(plan, measured, None)
    imb = r["ep_imbalance"]
    assert imb["measured"] == 1.3 and imb["scenario"] == 1.23  # the scenario states its replay's routing
    assert imb["predicted_iteration_time_s"] > r["predicted"]["iteration_time_s"]
    assert imb["relative_error"] == pytest.approx(imb["predicted_iteration_time_s"] / 0.5 - 1)
    assert "expert routing: busiest EP rank 1.30x" in format_table(r)
    dense = plan_replay(load_scenario(f"{SCEN}/dp2.yaml"), ReplayOptions(steps=2, warmup=1))
    assert build_report(dense, measured, None)["ep_imbalance"] is None


def test_a_gpu_plan_without_autocast_is_told_that_the_executor_trains_through_autocast(monkeypatch):
    """bf16 without ZeRO runs under torch.autocast on a GPU; a scenario that predicts Megatron's layout
    (bf16 weights + fp32 master) instead gets a note, and the GPU bar's own scenario does not."""
    from calibrate.replay import plan as replay_plan
    monkeypatch.setattr(replay_plan, "_available_gpus", lambda: 1)
    options = replay_plan.ReplayOptions(device="cuda")
    gpu = load_scenario("scenarios/replay/gpu/1b-accum.yaml")
    assert not [n for n in replay_plan.plan_replay(gpu, options).notes if "autocast" in n]
    megatron = load_scenario("scenarios/replay/gpu/1b-accum.yaml", ["training.autocast=false"])
    assert [n for n in replay_plan.plan_replay(megatron, options).notes if "training.autocast: true" in n]

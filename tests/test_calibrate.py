"""`python -m calibrate` (calibrate/): atomic profile writes, skipped measurements recorded with their reason,
one-line exit-2 errors, the replay dispatch, scenario-derived shapes, timing helpers, and (slow) a real
`--quick --device cpu` run end to end."""
import json
import math
import os
import subprocess
import sys
import time
import types
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from calibrate import cli  # noqa: E402
from calibrate.atomic import write_atomic  # noqa: E402
from calibrate.collectives import BUSBW_FACTOR, group_sizes  # noqa: E402
from calibrate.plan import AttentionSpec, ElementwiseSpec, GemmSpec, default_plan, scenario_compute_ops, \
    scenario_plan  # noqa: E402
from calibrate.probes import Context, Skip, Task  # noqa: E402
from calibrate.run import RunOptions, _run_task, calibrate, profile_text  # noqa: E402
from calibrate.timing import RandomPool, measure, summarize  # noqa: E402
from calibrate.plan import Budget  # noqa: E402
from rich.console import Console  # noqa: E402
from simulator.plan.layer_ops import layer_passes  # noqa: E402
from simulator.cost.profile_load import load_profile  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CPU = torch.device("cpu")
TINY_BUDGET = Budget(warmup_s=0.0, min_warmup=1, min_reps=3, max_reps=5, target_s=0.001)
PROV = {"device_type": "cpu", "device_name": "cpu", "torch_version": torch.__version__, "cpu_model": "cpu", "cpu_count": 1,
        "threads": 1, "hostname": "h", "date": "2026-01-01T00:00:00+00:00", "command": "test", "python_version": "3",
        "clustersim_version": "0"}


# ----------------------------------------------------------------------------------- atomic writes

def test_atomic_write_replaces_the_whole_file(tmp_path):
    p = tmp_path / "profile.json"
    p.write_text("old")
    write_atomic(p, "new contents")
    assert p.read_text() == "new contents" and os.listdir(tmp_path) == ["profile.json"]


@pytest.mark.parametrize("where, exc", [("os.fsync", OSError("disk full")), ("os.replace", KeyboardInterrupt())])
def test_a_crash_mid_write_leaves_the_old_file_intact_and_no_temp_file(tmp_path, monkeypatch, where, exc):
    p = tmp_path / "profile.json"
    p.write_text('{"old": true}')

    def crash(*args, **kwargs):
        raise exc
    monkeypatch.setattr(where, crash)
    with pytest.raises(type(exc)):
        write_atomic(p, '{"new": ' + "1" * 100000)  # the temp file holds part of it when the crash comes
    monkeypatch.undo()
    assert p.read_text() == '{"old": true}'
    assert os.listdir(tmp_path) == ["profile.json"]


# ----------------------------------------------------------------------------------- skipped measurements

def tiny_plan(**changes):
    plan = default_plan("cpu", quick=True)
    base = dict(budget=TINY_BUDGET, gemm=(), attention=(), elementwise=(), optimizer_params=(), collectives=None,
                pool_cap_bytes=1 << 20)
    return replace(plan, **{**base, **changes})


def test_a_failing_measurement_is_recorded_as_skipped_with_its_reason():
    def oom():
        raise RuntimeError("CUDA out of memory. Tried to allocate 80.00 GiB\nmore text")

    def missing():
        raise Skip("fp8 GEMMs need a GPU")
    entry, skip = _run_task(Task(table="gemm", what="gemm big", requires="gemm fp32", run=oom), {}, CPU)
    assert entry is None and skip == {"table": "gemm", "what": "gemm big",
                                      "reason": "RuntimeError: CUDA out of memory. Tried to allocate 80.00 GiB"}
    _, skip = _run_task(Task(table="gemm", what="gemm fp8", requires="x", run=missing), {}, CPU)
    assert skip["reason"] == "fp8 GEMMs need a GPU"
    _, skip = _run_task(Task(table="gemm", what="g", requires="gemm fp32", run=lambda: {}),
                        {"gemm fp32": "reference check failed: error 1e-1 > 1e-4"}, CPU)
    assert skip["reason"].startswith("reference check failed")


def test_a_missing_back_end_is_skipped_and_the_run_goes_on(tmp_path):
    spec = AttentionSpec(dtype="fp32", batch_heads=2, s_q=64, s_kv=64, d_head=32, causal=True)
    plan = tiny_plan(attention=(spec,), attention_backends=("flash", "cudnn"),
                     gemm=(GemmSpec(dtype="fp32", m=32, n=32, k=32),))
    profile = calibrate(Context(device=CPU, plan=plan), RunOptions(probes=("gemm", "attention"), threads=1, progress=False),
                        PROV, None, Console(file=open(os.devnull, "w")))
    assert [e["backend"] for e in profile["attention"]] == ["flash", "flash"]
    cudnn = [s for s in profile["skipped"] if "cudnn" in s["what"]]
    assert len(cudnn) == 2 and all("not available" in s["reason"] for s in cudnn)
    assert len(profile["gemm"]) == 1 and all(c["ok"] for c in profile["checks"])
    p = tmp_path / "p.json"
    write_atomic(p, profile_text(profile))
    assert len(load_profile(p).skipped) == 2


# ----------------------------------------------------------------------------------- the command line

@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_gpu_without_cuda_is_one_line_and_exit_2(capsys):
    assert cli.main(["--gpu", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CUDA is not available" in err and "--device cpu" in err


@pytest.mark.parametrize("argv, expected", [
    (["--device", "cpu", "--only", "gemm,bogus"], "unknown probe 'bogus'"),
    (["--device", "cpu", "--out", "/nonexistent-dir/p.json"], "does not exist"),
    (["--device", "cpu", "--threads", "0"], "at least 1"),
    (["--device", "cpu", "--scenario", "/nonexistent.yaml"], "no such scenario file"),
    (["--device", "tpu"], "invalid choice"),
    (["--gpu", "0", "--device", "cpu"], "not allowed with"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, expected):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("calibrate: ") and expected in err


def test_replay_is_dispatched_to_the_replay_cli(monkeypatch):
    seen = []
    fake = types.ModuleType("calibrate.replay.cli")
    fake.main = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "calibrate.replay.cli", fake)
    assert cli.main(["replay", "s.yaml", "--steps", "2"]) == 0 and seen == [["s.yaml", "--steps", "2"]]


def test_a_missing_replay_piece_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "calibrate.replay.cli", None)  # import of it fails as if the file were absent
    assert cli.main(["replay", "s.yaml"]) == 1
    assert "calibrate replay: not available" in capsys.readouterr().err


# ----------------------------------------------------------------------------------- shapes from a scenario

def test_scenario_plan_measures_exactly_the_scenarios_gemm_shapes():
    sc = load_scenario(ROOT / "scenarios" / "8b_8gpu.yaml")
    plan = scenario_plan(sc, default_plan("cpu", quick=True))
    lp = layer_passes(sc, 0)
    layer_shapes = {n.op.shape for n in lp.F + lp.B + lp.W if getattr(n.op, "kind", "") == "gemm"}
    plan_shapes = {(g.m, g.n, g.k) for g in plan.gemm}
    assert layer_shapes <= plan_shapes and all(g.set == "scenario" and g.dtype == "bf16" for g in plan.gemm)
    assert plan_shapes == {o.shape for o in scenario_compute_ops(sc) if o.kind == "gemm"}
    attn = {(a.batch_heads, a.s_q, a.d_head) for a in plan.attention}
    z_heads = sc.model.heads // sc.parallel.tp * sc.training.micro_batch
    assert attn == {(z_heads, sc.training.seq_len // sc.parallel.cp, sc.model.d_head)}
    norms = [e for e in plan.elementwise if e.op == "rmsnorm"]
    assert norms and all(e.width == sc.model.hidden and e.elements % e.width == 0 for e in plan.elementwise
                         if e.op in ("rmsnorm", "residual_add"))


def test_a_scenario_calibration_prices_all_of_that_scenarios_compute_exactly(tmp_path):
    """--scenario measures exactly the shapes the scenario's ops have, so every lookup is an exact hit."""
    from simulator.scenario import scenario_from_mapping
    mapping = {"name": "tiny", "model": {"arch": "llama", "layers": 2, "hidden": 64, "ffn_hidden": 128, "heads": 4,
                                         "kv_heads": 2, "vocab": 256},
               "training": {"seq_len": 32, "global_batch": 2, "micro_batch": 1, "precision": "fp32"},
               "cluster": {"topology": "cpu-host", "nodes": 1, "gpus_per_node": 2}, "parallel": {"tp": 2, "sp": True}}
    sc = scenario_from_mapping(mapping)
    plan = scenario_plan(sc, tiny_plan(optimizer_params=(1 << 10,)))
    profile = calibrate(Context(device=CPU, plan=plan),
                        RunOptions(probes=("gemm", "attention", "memory", "optimizer"), threads=1, progress=False),
                        PROV, None, Console(file=open(os.devnull, "w")))
    p = tmp_path / "tiny.json"
    write_atomic(p, profile_text(profile))
    prof = load_profile(p)
    assert not prof.skipped
    gemm_times = {(g.m, g.n, g.k): g.cost_s for g in prof.gemm}
    from simulator.plan.fusion import as_probed, eager_chains
    for op in scenario_compute_ops(sc):
        t = prof.compute_time(as_probed(op, eager_chains(sc))[0])  # a fused RoPE / SwiGLU: the chain the probe ran
        assert t is not None, op
        if op.kind == "gemm":
            assert t == gemm_times[op.shape]


def test_an_moe_scenario_measures_its_routing_gathers_and_prices_them_from_those_points(tmp_path):
    """The MoE routing (top-k + gather, the inverse gather + weighted sum, EP's sort by local expert) is
    measured at the scenario's shapes with the replay's own functions, checked against a float64
    reference, and prices the simulator's permute / unpermute / ep_sort ops, forward and backward."""
    sc = load_scenario(ROOT / "scenarios" / "replay" / "moe-ep2.yaml")
    plan = scenario_plan(sc, tiny_plan(optimizer_params=(1 << 10,)))
    moe = {e.op: e for e in plan.elementwise if e.op in ("moe_permute", "moe_unpermute", "row_gather")}
    rows = sc.training.seq_len * sc.training.micro_batch * sc.model.moe.top_k
    assert set(moe) == {"moe_permute", "moe_unpermute", "row_gather"}
    received = round(rows * sc.parallel.ep_imbalance)  # EP's sort sees the busiest rank's rows
    assert sc.parallel.ep_imbalance > 1 and received > rows
    assert {k: e.elements for k, e in moe.items()} == {"moe_permute": rows * sc.model.hidden,
                                                         "moe_unpermute": rows * sc.model.hidden,
                                                         "row_gather": received * sc.model.hidden}
    assert all(e.width == sc.model.hidden for e in moe.values())
    assert (moe["moe_permute"].experts, moe["moe_permute"].top_k) == (sc.model.moe.experts, sc.model.moe.top_k)
    assert (moe["row_gather"].experts, moe["row_gather"].top_k) == (sc.model.moe.experts // sc.parallel.ep, 1)
    plan = replace(plan, elementwise=tuple(moe.values()))
    profile = calibrate(Context(device=CPU, plan=plan), RunOptions(probes=("memory",), threads=1, progress=False),
                        PROV, None, Console(file=open(os.devnull, "w")))
    path = tmp_path / "moe.json"
    write_atomic(path, profile_text(profile))
    prof = load_profile(path)
    assert not prof.skipped and prof.checks and all(c.ok for c in prof.checks)
    assert {c.what for c in prof.checks} >= {f"elementwise {k} fp32" for k in moe}
    measured = {(p.op, p.phase): p.cost_s for p in prof.elementwise}
    lp = layer_passes(sc, 0)
    ops = {n.op.name: n.op for n in lp.F + lp.B if n.op.name in ("permute", "unpermute_bwd", "ep_sort", "ep_unsort_bwd")}
    assert len(ops) == 4
    assert prof.compute_time(ops["permute"]) == pytest.approx(measured["moe_permute", "fwd"])
    assert prof.compute_time(ops["unpermute_bwd"]) == pytest.approx(measured["moe_unpermute", "bwd"])
    assert prof.compute_time(ops["ep_sort"]) == pytest.approx(measured["row_gather", "fwd"])
    assert prof.compute_time(ops["ep_unsort_bwd"]) == pytest.approx(measured["row_gather", "bwd"])


def test_a_two_rank_framework_measurement_that_hangs_is_stopped_retried_once_and_skipped(monkeypatch):
    """Nothing hangs: past its deadline a two-rank probe's ranks are terminated, it runs once more in fresh
    processes, and a second miss is a Skip naming both reasons (a calibration then goes on without it)."""
    from calibrate.probes import framework
    monkeypatch.setattr(framework, "TWO_RANK_DEADLINE_S", 0.5)
    t0 = time.monotonic()
    with pytest.raises(Skip, match=r"TP block on two gloo ranks: TimeoutError: no result within 0.5 s; then TimeoutError"):
        framework.measure_tp_block("dtensor")
    assert time.monotonic() - t0 < 30


# ----------------------------------------------------------------------------------- timing and collectives helpers

def test_summary_is_median_and_mean_with_p10_and_p90():
    t = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (t.time_s, t.p10_s, t.p90_s, t.reps) == (3.0, 1.4, 4.6, 5)
    assert summarize([1.0, 1.0, 1.0, 5.0]).mean_s == 2.0  # skewed: the mean is what four calls cost on average


def test_random_pool_rotates_through_distinct_non_zero_memory():
    pool = RandomPool(CPU, torch.float32, 1 << 14, seed=1)
    a0, b0 = pool.take([(16, 16), (16, 8)], 0)
    a1, _ = pool.take([(16, 16), (16, 8)], 1)
    assert a0.data_ptr() != a1.data_ptr() and b0.data_ptr() - a0.data_ptr() == 256 * 4
    assert bool((pool.data != 0).all()) and a0.is_contiguous()


def test_measure_respects_the_repeat_bounds():
    calls = []
    t = measure(lambda i: calls.append(i), CPU, TINY_BUDGET)
    assert 3 <= t.reps <= 2 * 5 and t.p10_s <= t.time_s <= t.p90_s  # a noisy point gets a second attempt
    assert calls[:2] == [0, 1] and len(set(calls)) > t.reps  # warm-up and repeats each get their own inputs


def test_a_noisy_point_is_measured_again_and_both_attempts_are_summarised():
    calls = []

    def fn(i):  # the first attempt is disturbed every other call, as by another process on the core
        calls.append(i)
        time.sleep(0.03 if len(calls) <= 6 and len(calls) % 2 else 0.001)
    t = measure(fn, CPU, TINY_BUDGET)
    # both attempts' repeats count: the disturbed calls stay in the mean, the median is a quiet call
    assert len(calls) > 6 and t.reps >= 6 and t.time_s < 0.015 and t.p90_s > 2 * t.time_s and t.mean_s > t.time_s


def test_busbw_factors_are_nccl_tests():
    assert BUSBW_FACTOR["all_reduce"](8) == pytest.approx(1.75)
    assert BUSBW_FACTOR["all_gather"](4) == BUSBW_FACTOR["reduce_scatter"](4) == BUSBW_FACTOR["all_to_all"](4) == 0.75
    assert BUSBW_FACTOR["send_recv"](2) == 1.0
    assert group_sizes(8) == [2, 4, 8] and group_sizes(6) == [2, 4] and group_sizes(1) == []


def _in_step_worker(rank: int, port: int, q) -> None:
    import torch.distributed as dist  # noqa: PLC0415
    from calibrate.collectives import _in_step, _start  # noqa: PLC0415
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        x, y = torch.full((4096,), float(rank + 1)), torch.empty(4096)
        for w in _start("send_recv", x, y, None, rank, 2):
            w.wait()
        got = float(y[0])
        t = _in_step("all_reduce", torch.ones(4096), None, None, rank, 2)
        if rank == 0:
            q.put((got, t))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_in_step_cost_of_a_gloo_collective_is_measured_between_real_ranks():
    from calibrate.collectives import free_port  # noqa: PLC0415
    ctx = torch.multiprocessing.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_in_step_worker, args=(r, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    got, t = q.get(timeout=120)
    for p in procs:
        p.join(timeout=30)
    assert got == 2.0  # the async send/recv ring delivered the peer's buffer
    assert math.isfinite(t) and -0.05 < t < 0.5  # seconds the collective added to a few ms of GEMMs


# ----------------------------------------------------------------------------------- end to end

@pytest.mark.slow
def test_quick_cpu_calibration_end_to_end(tmp_path):
    out = tmp_path / "cpu.json"
    r = subprocess.run([sys.executable, "-m", "calibrate", "--device", "cpu", "--quick", "--out", str(out),
                        "--no-progress"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"wrote {out}" in r.stdout and "TFLOP/s" in r.stdout
    assert r.stderr.strip().splitlines()[-1].startswith("calibrate: wall time ")  # no bar: stderr is a pipe
    prof = load_profile(out)
    assert prof.provenance.quick and prof.provenance.device_type == "cpu" and prof.provenance.wall_s > 0
    for table in ("gemm", "attention", "elementwise", "optimizer", "collectives"):
        assert getattr(prof, table), f"{table} is empty: {[s for s in prof.skipped if s.table == table]}"
    assert {c.collective for c in prof.collectives} == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                         "send_recv"}
    assert all(c.ok for c in prof.checks)
    assert json.loads(out.read_text())["schema_version"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["cpu.json"]


def test_short_gpu_calls_are_queued_behind_a_sleep_long_enough_for_the_host_to_issue_every_repeat():
    """A kernel shorter than the host's time to issue its call reads the host's time if timed as issued; calibrate
    keeps the GPU asleep while it queues the repeats (calibrate/timing.py), long calls need no sleep."""
    from calibrate.timing import QUEUE_AHEAD_BELOW_S, SLEEP_CLOCK_HZ, queue_ahead_cycles
    per_call, reps = 30e-6, 400
    cycles = queue_ahead_cycles(per_call, reps)
    assert cycles / SLEEP_CLOCK_HZ > reps * per_call  # outlasts the host's queuing
    assert cycles / SLEEP_CLOCK_HZ < 2 * reps * per_call  # and not much longer
    assert queue_ahead_cycles(QUEUE_AHEAD_BELOW_S, reps) == 0 and queue_ahead_cycles(5e-3, 10) == 0


def test_queued_repeats_go_in_chunks_that_fit_the_launch_queue_each_behind_its_own_sleep():
    """The host blocks once about a thousand launches are pending; 1,000 repeats queued behind one sleep would drain
    while the host still issues them, and read the host's time again."""
    from calibrate.timing import QUEUE_AHEAD_CHUNK, queue_ahead_chunks, queue_ahead_cycles
    chunks = queue_ahead_chunks(30e-6, 1000)
    assert [first for first, _ in chunks] == list(range(0, 1000, QUEUE_AHEAD_CHUNK))
    assert QUEUE_AHEAD_CHUNK * 3 <= 1024 / 8  # 32 calls of a GEMM (one kernel, two events) with room to spare
    assert chunks[0][1] == queue_ahead_cycles(30e-6, QUEUE_AHEAD_CHUNK)
    assert chunks[-1][1] == queue_ahead_cycles(30e-6, 1000 % QUEUE_AHEAD_CHUNK)
    assert queue_ahead_chunks(5e-3, 20) == [(0, 0)]


def test_a_gpu_calibration_measures_the_per_tensor_adamw_loop_the_replay_steps():
    """The replay steps AdamW with foreach=False; a GPU profile without that implementation priced its optimizer
    from foreach's curve (27 ms where 61 were measured on an H200)."""
    from calibrate.plan import default_plan
    for quick in (False, True):
        assert "for_loop" in default_plan("cuda", quick).optimizer_impls


def test_the_residual_adds_backward_is_timed_as_the_gradient_sum_where_the_stream_forks():
    """An add's backward launches no kernel (its gradient passes through); what the simulator's residual_bwd op
    prices is autograd summing the two branches' gradients of x. Timing autograd.grad of the add read the host's
    call overhead as a kernel (28 TB/s on an H200, 2.4 TB/s on this CPU)."""
    import torch
    from calibrate.plan import ElementwiseSpec
    from calibrate.probes.memory import layout, runner
    spec = ElementwiseSpec(op="residual_add", dtype="fp32", elements=4096, width=64)
    pool = RandomPool(CPU, torch.float32, 4 * 4096)
    g1, g2 = pool.take(layout(spec), 3)
    assert torch.equal(runner(spec, "bwd", pool)(3), g1 + g2)


def test_the_gpu_timing_check_says_nothing_to_check_without_a_gpu_and_times_all_three_ways(monkeypatch, capsys):
    """validation/gpu_timing_check.py exits 0 with a message on a machine without CUDA; its rows (as issued, queued,
    traced) come out for each shape, here on the CPU at one tiny shape."""
    import sys
    import torch
    sys.path.insert(0, str(ROOT / "validation"))
    import gpu_timing_check
    if not torch.cuda.is_available():
        assert gpu_timing_check.main([]) == 0
        assert "no CUDA device" in capsys.readouterr().out
    monkeypatch.setattr(gpu_timing_check, "SHAPES", [(64, 64, 64)])
    monkeypatch.setattr(gpu_timing_check, "TRACE_REPS", 5)
    (row,) = gpu_timing_check.rows(torch.device("cpu"))
    assert row["shape"] == [64, 64, 64] and min(row["issued_s"], row["queued_s"], row["traced_s"]) > 0


def test_a_time_budget_writes_what_was_measured_and_lists_the_rest_as_skipped(tmp_path):
    """--budget-s: a machine lent for a fixed time gets a profile of what fitted in it, not nothing (a full H200
    sweep stopped by `timeout` once wrote no profile at all)."""
    out = tmp_path / "cpu.json"
    assert cli.main(["--device", "cpu", "--quick", "--only", "gemm,optimizer", "--budget-s", "1e-6", "--out", str(out),
                     "--no-progress"]) == 0
    prof = load_profile(out)
    assert not prof.gemm and not prof.optimizer
    assert prof.skipped and all("time budget spent (--budget-s 1e-06)" in s.reason for s in prof.skipped)


def test_a_budget_out_of_range_is_one_line_and_exit_2(capsys):
    assert cli.main(["--device", "cpu", "--budget-s", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--budget-s 0: must be more than 0" in err

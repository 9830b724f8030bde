"""The playbook CSV: parsing, and each row turned into the scenario nanotron ran."""
import csv

import pytest

from simulator.errors import ScenarioError
from simulator.validate.playbook import (FIT_LABELS, build_scenario, nanotron_pp_layers, network_state, read_runs,
                                run_from_row, scenario_mapping)

MODELS = {  # label: (layers, hidden, ffn, heads, tied)   validation/data/playbook/README.md
    "1B": (16, 2048, 8192, 32, True),
    "3B": (28, 3072, 8192, 32, True),
    "8B": (32, 4096, 14336, 32, False),
    "80B": (80, 8192, 28672, 64, False),
    "469G": (126, 16384, 53248, 128, False),
}


def row(label="1B", kv=None, dp=8, tp=1, pp=1, zero=0, mbs=1, status="Success", fix=True, vocab=131072, **extra):
    layers, hidden, ffn, heads, tied = MODELS[label]
    gpus = dp * tp * pp
    acc = 256 // (dp * mbs)
    ran = status == "Success"
    r = {"model_name": f"nanotron-llama-{label}", "playbook_label": label, "layers": layers, "hidden": hidden,
         "ffn_hidden": ffn, "heads": heads, "kv_heads": kv or heads, "vocab": vocab, "tie_word_embeddings": tied,
         "seq_len": 4096, "gpus": gpus, "nodes": max(1, gpus // 8), "gpus_per_node": 8, "tp": tp, "pp": pp, "dp": dp,
         "cp": 1, "ep": 1, "zero_stage": zero, "micro_batch": mbs, "grad_accum": acc, "global_batch_seqs": 256,
         "tp_mode": "REDUCE_SCATTER (sequence-parallel style)", "tp_async_comm": "True" if ran else "",
         "status": status, "oom_error": status == "OOM", "after_pp_fix": fix,
         "tokens_per_s_per_gpu": 40000.0 if ran else "", "step_time_s_derived": 3.2 if ran else "",
         "mem_peak_allocated_gib": 25.0 if ran else "", "mem_peak_reserved_gib": 36.0 if ran else "",
         "busbw_allreduce_alljob_GBps": 425.0 if ran else "", "busbw_allgather_intranode8_GBps": 262.0 if ran else "",
         "job_id": str(abs(hash((label, kv, dp, tp, pp, zero, mbs, status))) % 10**8),
         "run_name": f"{label}_dp{dp}_tp{tp}_pp{pp}_mbs{mbs}_zero{zero}{'_gqa8' if kv == 8 else ''}"}
    r.update(extra)
    return r


def write_csv(path, rows):
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_rows_parse_with_types_and_measurements(tmp_path):
    p = write_csv(tmp_path / "runs.csv", [row(), row("80B", dp=1, tp=8, pp=4, status="OOM"), row("8B", status="Other")])
    runs = read_runs(p)
    assert [r.status for r in runs] == ["Success", "OOM", "Other"]  # OOM and Other rows are kept
    r = runs[0]
    assert (r.layers, r.hidden, r.heads, r.kv_heads, r.vocab, r.tie_embeddings) == (16, 2048, 32, 32, 131072, True)
    assert (r.dp, r.tp, r.pp, r.zero, r.micro_batch, r.grad_accum, r.global_batch) == (8, 1, 1, 0, 1, 32, 256)
    assert r.tokens_per_s_per_gpu == 40000.0 and r.mem_allocated_gib == 25.0 and r.split == "fit"
    assert r.busbw == {"all_reduce_alljob": 425.0, "all_gather_intranode8": 262.0}
    oom = runs[1]
    assert oom.tokens_per_s_per_gpu is None and oom.mem_allocated_gib is None and oom.split == "validation"
    assert oom.tp_async  # not logged for failed runs; the benchmark sets it for every REDUCE_SCATTER run


def test_bad_rows_and_missing_file_are_input_errors(tmp_path):
    with pytest.raises(ScenarioError, match="status"):
        run_from_row(row(status="Crashed"))
    with pytest.raises(ScenarioError, match="layers"):
        run_from_row(row(layers="many"))
    with pytest.raises(ScenarioError, match="cannot read"):
        read_runs(tmp_path / "nope.csv")


def test_1b_maps_to_tied_bf16_fp32_grads_sp_async_tp_on_aws_p5():
    r = run_from_row(row("1B", dp=2, tp=4, zero=1))
    m = scenario_mapping(r)
    assert m["model"]["tie_embeddings"] is True and m["model"]["kv_heads"] == 32
    assert m["framework"]["name"] == "nanotron"
    sc = build_scenario(r)
    t, p = sc.training, sc.parallel
    assert (t.precision, t.recompute, t.attention, t.optimizer, t.grad_dtype, t.grad_accum_fused) == \
        ("bf16", "none", "flash", "adamw", "fp32", False)
    assert (p.dp, p.tp, p.pp, p.zero, p.sp, p.overlap_tp, p.pp_schedule) == (2, 4, 1, 1, True, False, "1f1b")
    assert p.order == "tp-cp-ep-dp-pp" and p.pp_layers is None and p.pp_p2p == "blocking"
    assert (p.dp_bucket_mb, p.zero_gather, p.zero_gather_inplace, p.overlap_dp) == (50.0, "whole", False, False)
    assert sc.topology.name == "aws-p5" and sc.gpus == 8 and sc.micro_batches == 128
    assert sc.training.grad_bytes == 4


def test_80b_is_mha_untied_and_gqa_variant_keeps_8_kv_heads():
    mha = build_scenario(run_from_row(row("80B", dp=1, tp=8, pp=4)))
    assert mha.model.n_kv == 64 and not mha.model.tie_embeddings and mha.parallel.pp_layers == [21, 20, 20, 19]
    gqa = build_scenario(run_from_row(row("80B", kv=8, dp=1, tp=8, pp=4)))
    assert gqa.model.n_kv == 8 and gqa.model.kv_dim == 1024
    big = build_scenario(run_from_row(row("469G", kv=8, dp=1, tp=32, pp=2, vocab=49152)))
    assert big.model.vocab == 49152 and big.parallel.tp == 32 and big.cluster.nodes == 8


def test_nanotron_partition_counts_the_lm_head_and_depends_on_the_pp_fix():
    # 1B: layer cost 4h^2 + 3hf = 67.1M, LM head V*h = 268M = 4 layers: threshold falls on a layer boundary
    assert nanotron_pp_layers(16, 2048, 8192, 32, 131072, 2, inclusive=True) == [10, 6]
    assert nanotron_pp_layers(16, 2048, 8192, 32, 131072, 2, inclusive=False) == [11, 5]
    assert nanotron_pp_layers(28, 3072, 8192, 32, 131072, 2) == [16, 12]  # CSV Local Params: 554M at tp4
    assert nanotron_pp_layers(80, 8192, 28672, 64, 131072, 4) == [21, 20, 20, 19]
    eight = nanotron_pp_layers(16, 2048, 8192, 32, 131072, 8, inclusive=False)
    assert sum(eight) == 16 and eight[-2:] == [0, 0]  # the last ranks hold only the head and the loss


def test_layouts_clustersim_cannot_express_raise_scenario_error():
    with pytest.raises(ScenarioError, match="parallel.tp"):
        build_scenario(run_from_row(row("469G", dp=1, tp=256, pp=1, status="Other")))


def test_the_shared_csv_has_4104_runs_and_all_but_eight_build():
    runs = read_runs()
    assert len(runs) == 4104
    statuses = {s: sum(r.status == s for r in runs) for s in ("Success", "OOM", "Other")}
    assert statuses == {"Success": 1765, "OOM": 1917, "Other": 422}
    assert {r.label for r in runs if r.split == "validation"} == {"80B", "469G"}
    bad = []
    for r in runs[::7] + [r for r in runs if r.tp > 128]:
        try:
            build_scenario(r)
        except ScenarioError:
            bad.append(r)
    assert bad and all(r.tp == 256 and r.status == "Other" for r in bad)


def fit_successes(keep) -> list:
    """The fit split's successful playbook runs for which `keep(run)` holds."""
    return [r for r in read_runs() if r.label in FIT_LABELS and r.status == "Success" and keep(r)]


def predicted_over_measured(runs, estimator: str) -> list[float]:
    """Predicted / measured tokens/s/GPU of each playbook run."""
    from simulator.run import simulate
    return [simulate(build_scenario(r), estimator=estimator)["tokens_per_s_per_gpu"] / r.tokens_per_s_per_gpu
            for r in runs]


def assert_within(runs, bound: float) -> None:
    """Every run's predicted throughput within `bound` of measured, with either estimator."""
    for estimator in ("analytic", "engine"):
        ratios = predicted_over_measured(runs, estimator)
        assert max(abs(x - 1) for x in ratios) < bound, (estimator, ratios)


def test_degraded_node_jobs_pay_their_pipeline_sends():
    """The fit split's 20 timed jobs whose one-node probe read ~45 GB/s ran 1.2-54x slower than their
    compute and collectives explain, ~1 s per micro-batch at pp >= 4 and half that at pp = 2 (4 and 2
    sends per stage): with the degraded send latency and nanotron's blocking sends each is within 10 %
    (without it, 1.2-54x too fast), with either estimator."""
    runs = fit_successes(lambda r: r.after_pp_fix and r.tokens_per_s_per_gpu
                         and 0 < r.busbw.get("all_reduce_intranode8", 0) < 100)
    assert len(runs) == 20 and all(r.pp > 1 for r in runs)
    assert_within(runs, 0.10)


def test_the_slow_network_state_raises_the_host_floor_at_any_pp():
    """A job whose one-node probe reads the slow state gets the slow state's per-TP-collective host floor,
    which grows with tp, whatever its pp; a healthy one, or any job priced with `network: spec`, gets the
    healthy floor, flat in tp."""
    slow = run_from_row(row("1B", dp=2, tp=4, busbw_allreduce_intranode8_GBps=425.0))
    healthy = run_from_row(row("1B", dp=2, tp=4, busbw_allreduce_intranode8_GBps=458.0))
    assert build_scenario(slow).cluster.efficiency["tp_host_per_rank_s"] > 0
    for eff in (build_scenario(healthy).cluster.efficiency, build_scenario(slow, network="spec").cluster.efficiency):
        assert eff["tp_host_s"] > 0 and "tp_host_per_rank_s" not in eff


def test_slow_state_jobs_at_pp1_with_small_micro_batches_run_at_the_floor():
    """The fit split's slow-state pp = 1, mbs 1 jobs with tp 4-8 on 32 nodes took 15-26 ms per layer and
    micro-batch, 2-8x their compute, like the deep pipelines of the same state: with the floor each is
    within 15 % (7-11 % too fast), with either estimator; without it they came out 2-8x too fast."""
    runs = fit_successes(lambda r: r.pp == 1 and r.nodes == 32 and r.micro_batch == 1 and r.tp >= 4
                         and network_state(r) == "slow")
    assert len(runs) == 6
    assert_within(runs, 0.15)


def test_healthy_one_node_tp_jobs_at_mbs1_run_at_the_healthy_floor():
    """The fit split's 14 healthy one-node pp = 1, mbs 1 jobs with tp 2-8 took 4.3-4.6 ms per layer and
    micro-batch whatever the model (1B to 8B) and tp, unless their compute is longer (8B tp2): with the
    healthy host floor each is within 15 % with either estimator; with the flat 150 us GPU adder it
    replaced, 1B tp8 came out 47 % too fast and 8B tp4 20 % too slow."""
    runs = fit_successes(lambda r: r.pp == 1 and r.nodes == 1 and r.micro_batch == 1 and r.tp >= 2
                         and network_state(r) == "healthy")
    assert len(runs) == 14
    assert_within(runs, 0.15)


def test_nanotron_dp_buckets_cost_the_same_at_any_dp():
    """The fit split's 15 timed pure-DP jobs at dp 64-256 (tp = 1, pp = 1, 1B and 3B). Priced with the
    all-gather probe's per-step ring latency, ZeRO-1's throughput came out at 0.22-0.90 of measured and
    ZeRO-0's at up to 1.76; with DDP's buckets of whole tensors (`dp_bucketing: param`) and nanotron's DP
    pricing (`dp_comm_overhead_s`, `dp_ring_step_latency_us`, ZeRO-1 not overlapped) ZeRO-1 is within
    0.90-1.10 of measured with either estimator, ZeRO-0 within 0.95-1.10 (both release the buckets block by
    block, after the LM head's backward; the analytic released them in proportion to their bytes from the
    backward's start until 2026-11-25 and read up to 1.15). Apart: a slow-state ZeRO-0 job that ran twice
    as slow as its healthy twin (not priced: nothing in its probes says why)."""
    runs = fit_successes(lambda r: r.pp == 1 and r.tp == 1 and r.dp >= 64 and r.tokens_per_s_per_gpu)
    assert len(runs) == 15
    outlier = [r for r in runs if r.job_id == "14113367"]
    runs = [r for r in runs if r.job_id != "14113367"]
    for estimator in ("analytic", "engine"):
        z1 = predicted_over_measured([r for r in runs if r.zero == 1], estimator)
        assert len(z1) == 10 and min(z1) > 0.90 and max(z1) < 1.10, (estimator, z1)
        z0 = predicted_over_measured([r for r in runs if r.zero == 0], estimator)
        assert len(z0) == 4 and min(z0) > 0.95 and max(z0) < 1.10, (estimator, z0)
        assert predicted_over_measured(outlier, estimator)[0] > 1.5


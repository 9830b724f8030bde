"""`validate`: the stratified sample, the scoring, the published references and the command line."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.validate.playbook import run_from_row
from simulator.validate.accuracy import (Case, Outcome, pipeline_sends, reference_cases, score, slow_sends, stratified_sample,
                                summarize)
from simulator.validate.tables import markdown_table
from test_playbook import row, write_csv

ROOT = Path(__file__).resolve().parent.parent


def cases(n_per=(6, 3, 1)):
    out = []
    for label, n_ran, n_oom, n_other in (("1B", *n_per), ("80B", 2, 5, 1)):
        for status, n in (("Success", n_ran), ("OOM", n_oom), ("Other", n_other)):
            for i in range(n):
                out.append(Case(set="playbook", id=f"{label}-{status}-{i}", label=label,
                                split="fit" if label == "1B" else "validation", status=status,
                                tokens_per_s_per_gpu=1000.0 if status == "Success" else None))
    return out


def test_sample_is_deterministic_and_independent_of_input_order():
    c = cases()
    a = [x.id for x in stratified_sample(c, 7)]
    assert a == [x.id for x in stratified_sample(c, 7)]
    assert sorted(a) == sorted(x.id for x in stratified_sample(list(reversed(c)), 7))


def test_sample_takes_every_stratum_then_proportional_shares():
    c = cases()
    s = stratified_sample(c, 7)
    assert len(s) == 7
    assert {x.stratum for x in s} == {x.stratum for x in c}  # 6 strata, each represented
    big = stratified_sample(cases((40, 10, 2)), 20)
    ran_1b = sum(x.label == "1B" and x.status == "Success" for x in big)
    assert ran_1b > sum(x.label == "1B" and x.status == "OOM" for x in big) >= 1
    assert stratified_sample(c, 1000) == c


def outcome(case, tps=None, fits=True, states=None):
    return Outcome(case, predicted={"tokens_per_s_per_gpu": tps, "step_time_s": None, "model_tflops_per_gpu": None,
                                    "mem_states_gib": states, "mem_peak_gib": None, "fits": fits})


def test_score_gives_mape_worst_case_and_oom_accuracy():
    ran = [Case(set="playbook", id=f"r{i}", label="1B", split="fit", tokens_per_s_per_gpu=100.0, mem_gib=10.0)
           for i in range(3)]
    oom = Case(set="playbook", id="o", label="1B", split="fit", status="OOM")
    other = Case(set="playbook", id="x", label="1B", split="fit", status="Other")
    outs = [outcome(ran[0], 110.0, True, 11.0), outcome(ran[1], 80.0, True, 10.0), outcome(ran[2], 100.0, False, 9.0),
            outcome(oom, None, False), Outcome(other, error="status Other: no measurement")]
    s = score(outs)
    assert s["throughput"]["n"] == 3 and s["throughput"]["mape_pct"] == pytest.approx(10.0)
    assert s["throughput"]["worst"] == {"id": "r1", "error_pct": pytest.approx(-20.0)}
    assert s["memory"]["mape_pct"] == pytest.approx(20 / 3)
    assert s["oom"] == {"n": 4, "correct": 3, "accuracy_pct": 75.0, "predicted_fits_but_oom": 0, "predicted_oom_but_ran": 1,
                        "tight_but_ran": 0, "tight_and_oom": 0}
    assert s["excluded"]["status_other"] == 1
    rows = summarize(outs)
    assert len(rows) == 1 and rows[0]["split"] == "fit"
    table = markdown_table({"estimator": "analytic", "cases": {"evaluated": 5, "population": 5, "sample": None},
                            "summary": rows, "noise_floor": None})
    assert "| playbook | fit (1B) | main | 5 | 3 | 10.0% | 10.0% | 100% | 0.0% |" in table


def test_score_counts_runs_that_ran_but_read_tight():
    """A run that ran and fits the GPU but not the headroom is right on OOM (peak <= capacity) and counted tight;
    so is one that ran out of memory at a tight reading (wrong on OOM)."""
    ran = Case(set="published", id="t", label="8B", split="validation", tokens_per_s_per_gpu=100.0)
    tight = Outcome(ran, predicted={**outcome(ran, 100.0).predicted, "verdict": "tight"})
    oom = Case(set="published", id="o", label="8B", split="validation", status="OOM")
    tight_oom = Outcome(oom, predicted={**outcome(oom, None).predicted, "verdict": "tight"})
    s = score([tight, outcome(ran, 100.0), tight_oom])
    assert s["oom"]["correct"] == 2 and s["oom"]["tight_but_ran"] == 1 and s["oom"]["tight_and_oom"] == 1
    rows = summarize([tight])
    table = markdown_table({"estimator": "analytic", "cases": {"evaluated": 1, "population": 1, "sample": None},
                            "summary": rows, "noise_floor": None})
    assert "1/1 (100%); read tight: 1 ran, 0 ran out" in table


def test_slow_sends_flags_pipelines_that_lost_a_blocking_send_worth_each_and_keeps_them_scored():
    """pp = 4, 16 micro-batches: 4 x 15 + 2 x 3 = 66 blocking sends on an interior stage. A run whose step
    took 66 x 0.2 s longer than predicted shows the signature; 66 x 0.05 s does not, nor does pp = 1."""
    def case(i, pp, extra_s):
        run = run_from_row(row("1B", dp=32 // pp, pp=pp, mbs=1, grad_accum=16 if pp > 1 else 8, job_id=str(i)))
        pred = 10.0
        return Outcome(Case(set="playbook", id=str(i), label="1B", split="fit", tokens_per_s_per_gpu=100.0 * pred / (pred + extra_s),
                            step_time_s=pred + extra_s, run=run),
                       predicted={"tokens_per_s_per_gpu": 100.0, "step_time_s": pred, "fits": True})
    assert pipeline_sends(case(0, 4, 0).case.run) == 66
    outs = [case(1, 4, 66 * 0.2), case(2, 4, 66 * 0.05), case(3, 1, 66 * 0.2), case(4, 4, 0.0)]
    s = slow_sends(outs)["fit"]
    assert s["runs"] == 1 and s["of"] == 4 and s["ids"] == ["1"]
    e1 = 100 * (10 + 66 * 0.2) / 10 - 100
    assert s["mape_points"] == pytest.approx(e1 / 4)
    assert score(outs)["throughput"]["n"] == 4  # a diagnostic: the run stays in the score


def test_published_references_state_their_source_and_build():
    refs = reference_cases()
    assert {c.label for c in refs} >= {"Llama-3-405B", "GPT-1T", "GPT-22B", "GPT-175B", "GPT-530B"}
    from simulator.validate.accuracy import case_scenario
    for c in refs:
        assert c.source and c.split in ("fit", "validation") and (c.tokens_per_s_per_gpu or c.model_tflops_per_gpu)
        sc = case_scenario(c)
        if c.tokens_per_s_per_gpu and c.step_time_s:  # both stated: the same measurement
            tokens = sc.training.global_batch * sc.training.seq_len
            assert c.tokens_per_s_per_gpu == pytest.approx(tokens / (c.step_time_s * sc.gpus), rel=1e-3)


def test_selective_recompute_speedup_matches_kor22_table5():
    """KOR22 Table 5 times each model with full recomputation and with selective recomputation + SP (same
    model, layout and batch): 1.29-1.32x faster. clustersim's ratio of the two predictions is within 5 % of
    the measured one for each of the four models (it prices the full pass it drops and the SP collectives)."""
    from simulator.run import simulate
    from simulator.validate.accuracy import case_scenario
    refs = {c.id: c for c in reference_cases() if c.id.startswith("megatron_kor22:")}
    for size in ("22b", "175b", "530b", "1t"):
        full, sel = refs[f"megatron_kor22:{size}-full"], refs[f"megatron_kor22:{size}-selective"]
        measured = full.step_time_s / sel.step_time_s
        predicted = (simulate(case_scenario(full))["iteration_time_s"] / simulate(case_scenario(sel))["iteration_time_s"])
        assert predicted == pytest.approx(measured, rel=0.05), size


def cli(*args):
    return subprocess.run([sys.executable, "-m", "simulator", "validate", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory):
    rows = [row("1B", dp=8), row("1B", dp=4, tp=2, zero=1), row("3B", dp=2, tp=2, pp=2), row("8B", dp=1, tp=8, pp=1, status="OOM"),
            row("80B", dp=1, tp=8, pp=4), row("80B", kv=8, dp=1, tp=8, pp=8, status="OOM"), row("469G", dp=1, tp=8, pp=8, status="Other")]
    return write_csv(tmp_path_factory.mktemp("csv") / "runs.csv", rows)


def test_cli_sample_end_to_end_json_markdown_and_plot(small_csv, tmp_path):
    t0 = time.perf_counter()
    r = cli("--set", "playbook", "--csv", small_csv, "--sample", 6, "--json", "--verbose")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["estimator"] == "analytic" and out["cases"] == {"population": 7, "evaluated": 6, "sample": 6}
    assert {s["split"] for s in out["summary"]} == {"fit", "validation"}
    assert len(out["runs"]) == 6 and all("predicted" in x for x in out["runs"])
    r = cli("--set", "playbook", "--csv", small_csv, "--markdown", "--plot", tmp_path / "acc.png")
    assert r.returncode == 0, r.stderr
    assert r.stdout.lstrip().startswith("Estimator") and "| set | split |" in r.stdout
    assert (tmp_path / "acc.png").stat().st_size > 10_000
    assert time.perf_counter() - t0 < 60


@pytest.mark.parametrize("args", [("--sample", "0"), ("--split", "train"), ("--set", "mlperf"), ("--estimator", "magic"),
                                  ("--plot", "/no/such/dir/x.png"), ("--plot", "x.txt"), ("--csv", "/no/such.csv"),
                                  ("--json", "--markdown")])
def test_bad_options_exit_2_with_one_line(args):
    r = cli(*args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert len([x for x in r.stderr.splitlines() if x.startswith("error")]) == 1


@pytest.mark.slow
def test_cli_sample_on_the_real_csv_covers_both_splits_and_the_published_set():
    r = cli("--sample", 40, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    sets = {(s["set"], s["split"]) for s in out["summary"]}
    assert {("playbook", "fit"), ("playbook", "validation"), ("published", "validation")} <= sets
    assert out["noise_floor"]["zero_twins"]["layouts"] > 0 and out["busbw"]
    assert out["wall_s"] < 120

"""`calibrate replay` for real: every parallel plan trains to the single-process reference's losses and
gradient norms (fp32, rtol 1e-4; measured differences are ~1e-7 for losses, ~1e-6 for norms), and a
failing or hanging rank stops the world with a clear error.

Each world size is started once and runs all its plans in turn (`launch_many`), and plans that train
the same model on the same data share one reference run, so the whole file costs a few minutes on
2 cores (most of it process start-up and the references).
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torch")

from calibrate.replay.launch import ReplayFailed, launch, launch_many  # noqa: E402
from calibrate.replay.plan import ReplayOptions, plan_replay  # noqa: E402
from calibrate.replay.report import loss_comparison  # noqa: E402
from calibrate.replay.train import run_reference  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SCEN = ROOT / "scenarios" / "replay"
RTOL = 1e-4
OPTIONS = ReplayOptions(steps=3, warmup=1, timeout_s=600)
SMALL = ["training.global_batch=4"]  # 2-4 micro-batches: enough for every schedule, half the time

TWO_RANKS = {
    "dp2": ("dp2.yaml", []),
    "tp2-sp": ("tp2-sp.yaml", []),
    "pp2-1f1b": ("pp2-1f1b.yaml", []),
    "zero3-dp2": ("zero3-dp2.yaml", []),
    "cp2": ("cp2.yaml", []),
    "moe-ep2": ("moe-ep2.yaml", []),
    "zero1-dp2": ("zero3-dp2.yaml", ["parallel.zero=1"]),
    "zero2-dp2": ("zero3-dp2.yaml", ["parallel.zero=2"]),
    "tp2-no-sp-full-recompute": ("tp2-sp.yaml", ["parallel.sp=false", "training.recompute=full"]),
    "pp2-afab": ("pp2-1f1b.yaml", ["parallel.pp_schedule=afab"]),
    "pp2-interleaved": ("pp2-1f1b.yaml", ["parallel.pp_schedule=interleaved-1f1b", "parallel.vpp=2"]),
    "pp2-zb-h1": ("pp2-1f1b.yaml", ["parallel.pp_schedule=zb-h1"]),
    "pp2-zbv": ("pp2-1f1b.yaml", ["parallel.pp_schedule=zbv", "parallel.vpp=2"]),
    "pp2-dualpipev": ("pp2-1f1b.yaml", ["parallel.pp_schedule=dualpipev", "parallel.vpp=2"]),
    "cp2-selective-eager": ("cp2.yaml", ["training.recompute=selective", "training.attention=eager"]),
    "cp2-allgather": ("cp2.yaml", ["parallel.cp_comm=allgather"]),
    "dp2-no-overlap": ("dp2.yaml", ["parallel.overlap_dp=false"]),
}
FOUR_RANKS = {
    "dp2-tp2-sp-zero3": ("tp2-sp.yaml", ["cluster.gpus_per_node=4", "parallel.dp=2", "parallel.zero=3"]),
    "pp2-tp2-sp": ("tp2-sp.yaml", ["cluster.gpus_per_node=4", "parallel.pp=2"]),
    "moe-dp4-ep2": ("moe-ep2.yaml", ["cluster.gpus_per_node=4", "parallel.dp=4"]),
}


def _plan(file: str, sets: list[str]):
    return plan_replay(load_scenario(SCEN / file, SMALL + sets), OPTIONS)


def _reference_key(plan) -> tuple:
    """What the reference's numbers depend on (not the parallel layout, not recompute)."""
    t = plan.scenario.training
    return (plan.scenario.model, t.seq_len, t.global_batch, t.micro_batch, t.attention, t.optimizer, plan.dtype)


def _run(plans: dict) -> dict:
    names = list(plans)
    results = launch_many([plans[n] for n in names])
    references: dict = {}
    out = {}
    for name, measured in zip(names, results):
        key = _reference_key(plans[name])
        if key not in references:
            references[key] = run_reference(plans[name])
        out[name] = (measured, references[key])
    return out


@pytest.fixture(scope="module")
def two_rank_runs():
    return _run({name: _plan(*spec) for name, spec in TWO_RANKS.items()})


@pytest.fixture(scope="module")
def four_rank_runs():
    return _run({name: _plan(*spec) for name, spec in FOUR_RANKS.items()})


def _assert_matches(measured: dict, reference: dict) -> None:
    ok, worst = loss_comparison(measured["losses"], reference["losses"], RTOL)
    assert ok, f"losses {measured['losses']} vs reference {reference['losses']} (worst rel. diff {worst:.1e})"
    ok, worst = loss_comparison(measured["grad_norms"], reference["grad_norms"], RTOL)
    assert ok, f"grad norms {measured['grad_norms']} vs {reference['grad_norms']} (worst rel. diff {worst:.1e})"
    assert measured["losses"][-1] < measured["losses"][0]  # it trains
    assert measured["iteration_time_s"] > 0


@pytest.mark.parametrize("name", list(TWO_RANKS))
def test_two_rank_plan_matches_single_process_reference(two_rank_runs, name):
    _assert_matches(*two_rank_runs[name])


@pytest.mark.parametrize("name", list(FOUR_RANKS))
def test_four_rank_plan_matches_single_process_reference(four_rank_runs, name):
    _assert_matches(*four_rank_runs[name])


@pytest.mark.parametrize("fault, message", [(("raise", 1), "rank 1 failed: RuntimeError: injected fault"),
                                            (("hang", 1), "timed out")])
def test_a_failing_or_hanging_rank_stops_the_world(fault, message):
    plan = _plan("dp2.yaml", [])
    plan = replace(plan, options=replace(plan.options, fault=fault, timeout_s=30))
    with pytest.raises(ReplayFailed, match=message):
        launch(plan)


def test_command_prints_the_contract_json(tmp_path):
    """Also with --torch-trace: its extra, untimed step writes one trace per rank (with Python frames) and
    leaves the measured steps' host probes alone (it once added a probe without a step time, and the
    steady-host check indexed past the step times)."""
    cmd = [sys.executable, "-m", "calibrate", "replay", str(SCEN / "dp2.yaml"), "--json", "--steps", "2", "--warmup", "1",
           "--set", "training.global_batch=4", "--torch-trace", str(tmp_path / "trace")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout)
    # stdout stays one JSON object; the wall time goes to stderr (not necessarily its last line: a rank's torch
    # profiler may log its own "profiler_start" line after it, as it did once in CI on 2026-11-27)
    assert any(line.startswith("replay: wall time ") for line in proc.stderr.splitlines())
    assert set(r["predicted"]) == {"iteration_time_s", "peak_memory_gib"}
    assert {"iteration_time_s", "peak_memory_gib", "losses"} <= set(r["measured"])
    assert set(r["relative_error"]) == {"iteration_time_s", "peak_memory_gib"}
    assert r["loss_matches_reference"] is True and len(r["measured"]["losses"]) == 2
    assert r["measured"]["peak_memory_gib"] is None  # CPU cannot measure it
    assert [len(rank) for rank in r["speed_probes_s_per_rank"]] == [len(r["step_times_s"])] * 2
    assert all((tmp_path / f"trace.rank{rank}.json").stat().st_size > 0 for rank in (0, 1))
    events = json.loads((tmp_path / "trace.rank0.json").read_text())["traceEvents"]
    assert any(e.get("cat") == "python_function" for e in events)  # with Python frames


def test_routing_imbalance_is_measured_with_ep_only(two_rank_runs):
    """The MoE plan reports its routing's busiest-EP-rank / mean rows (1 <= x <= ep = 2, above 1 for an
    untrained router); dense plans report none."""
    moe, _ = two_rank_runs["moe-ep2"]
    assert 1.0 < moe["ep_imbalance"] <= 2.0
    dense, _ = two_rank_runs["dp2"]
    assert dense["ep_imbalance"] is None

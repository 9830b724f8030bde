"""Engine outputs: the Chrome trace validates in pure Python (docs/ecosystem.md §2.1) and the plots are written."""
import json

import pytest

from simulator.evaluate.engine import run_engine, simulate_engine
from simulator.evaluate.engine.trace import build_trace, validate_trace
from test_engine import CommCost, scenario


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    sc = scenario(pp=4, m=8, dp=2, tp=2, zero=1, sp=True, dp_bucket_mb=0.5)
    path = tmp_path_factory.mktemp("trace") / "step.json"
    res = simulate_engine(sc, CommCost(sc.topology), trace_path=path)
    return sc, res, json.loads(path.read_text())


def test_trace_validates(traced):
    _, _, obj = traced
    assert validate_trace(obj) == []


def test_trace_names_ranks_streams_and_ops(traced):
    sc, _, obj = traced
    evs = obj["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    assert len(procs) == sc.parallel.pp
    assert all(name.startswith(f"rank {pid} (stage ") for pid, name in procs.items())
    threads = {e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"compute", "tp", "dp", "pp send", "pp recv"} <= threads
    names = {e["name"] for e in evs if e["ph"] == "X"}
    assert "L0 mb5 F qkv" in names and "C0 mb5 F" in names
    cats = {e["cat"] for e in evs if e["ph"] == "X"}
    assert {"compute", "tp", "dp", "pp"} <= cats
    assert any(e["ph"] == "C" and e["name"] == "memory" for e in evs)


def test_every_pp_send_has_its_receive(traced):
    sc, _, obj = traced
    evs = obj["traceEvents"]
    starts = [e for e in evs if e["ph"] == "s"]
    ends = {e["id"]: e for e in evs if e["ph"] == "f"}
    # each boundary carries m activations forward and m gradients back
    assert len(starts) == 2 * sc.micro_batches * (sc.parallel.pp - 1)
    assert all(s["id"] in ends and ends[s["id"]]["pid"] != s["pid"] for s in starts)


def test_validator_rejects_overlaps_and_dangling_flows():
    bad = {"traceEvents": [
        {"name": "a", "cat": "compute", "ph": "X", "pid": 0, "tid": 1, "ts": 0.0, "dur": 10.0},
        {"name": "b", "cat": "compute", "ph": "X", "pid": 0, "tid": 1, "ts": 5.0, "dur": 10.0},
        {"name": "c", "cat": "compute", "ph": "X", "pid": 0, "tid": 1, "ts": 1.0, "dur": -1.0},
        {"name": "pp", "cat": "pp", "ph": "s", "id": 7, "pid": 0, "tid": 6, "ts": 1.0},
        {"name": "x", "ph": "X", "pid": 0, "tid": 1, "ts": 1.0, "dur": 1.0},
    ]}
    errs = validate_trace(bad)
    assert any("overlaps" in e for e in errs)
    assert any("dur" in e for e in errs)
    assert any("flow 7" in e for e in errs)
    assert any("missing" in e for e in errs)


def test_capped_trace_keeps_first_and_last_micro_batches_and_stays_valid():
    sc = scenario(pp=2, m=8, tp=2, sp=True)
    eng, static = run_engine(sc, CommCost(sc.topology))
    full = build_trace(sc, eng, eng.ranks, static)
    capped = build_trace(sc, eng, eng.ranks, static, max_op_slices=200)
    assert validate_trace(capped) == []
    assert len(capped["traceEvents"]) < len(full["traceEvents"])
    names = {e["name"] for e in capped["traceEvents"] if e["ph"] == "X"}
    assert "L0 mb0 F qkv" in names and "L0 mb4 F qkv" not in names and "L0 mb4 F" in names


def test_full_mode_traces_only_representative_ranks(tmp_path):
    sc = scenario(pp=2, m=4, dp=2, tp=2)
    path = tmp_path / "full.json"
    simulate_engine(sc, CommCost(sc.topology), full=True, trace_path=path)
    obj = json.loads(path.read_text())
    assert validate_trace(obj) == []
    pids = {e["pid"] for e in obj["traceEvents"]}
    assert len(pids) == sc.parallel.pp


def test_timeline_and_memory_plots_are_written(tmp_path):
    sc = scenario(pp=2, m=4, dp=2, tp=2, zero=1)
    simulate_engine(sc, CommCost(sc.topology), plot_path=tmp_path / "t.png", memory_plot_path=tmp_path / "m.png")
    for name in ("t.png", "m.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_two_step_memory_shows_optimizer_states_appearing_at_the_first_step():
    from simulator.evaluate.engine.plot import memory_series
    from simulator.plan.memory import memory_report
    sc = scenario(pp=2, m=4, dp=2, zero=1)
    eng, _ = run_engine(sc, CommCost(sc.topology), steps=2)
    rk = eng.ranks[0]
    mem = memory_report(sc).per_stage[0]
    times, comps = memory_series(sc, rk)
    opt = comps["optimizer state"]
    assert opt[0] < opt[-1] == pytest.approx(mem.optimizer) and mem.optimizer > 0
    first_opt = rk.rec.optimizer[0][0]
    assert all(v == opt[0] for t, v in zip(times, opt) if t < first_opt)
    act = comps["activations"]
    assert max(act) == pytest.approx(rk.act_peak) and act[-1] == pytest.approx(0.0)
    assert len(rk.rec.optimizer) == 2 and rk.rec.optimizer[1][0] > rk.rec.optimizer[0][1]


def test_trace_memory_counter_reaches_the_engine_peak_and_dips_in_the_steady_state(traced):
    sc, res, obj = traced
    by_pid: dict = {}
    for e in obj["traceEvents"]:
        if e["ph"] == "C" and e["name"] == "memory":
            by_pid.setdefault(e["pid"], []).append((e["ts"], e["args"]["GiB"]))
    stage0 = by_pid[min(by_pid)]
    assert [t for t, _ in stage0] == sorted({t for t, _ in stage0})
    values = [v for _, v in stage0]
    assert max(values) == pytest.approx(res.memory_peak_bytes[0] / 2 ** 30, rel=1e-9)
    # 1F1B's steady state alternates F and B on stage 0: the counter falls and rises again each time
    dips = sum(1 for a, b, c in zip(values, values[1:], values[2:]) if b < a and c > b)
    assert dips >= sc.micro_batches - sc.parallel.pp


def test_memory_plot_y_axis_holds_the_capacity_line():
    from simulator.evaluate.engine.plot import memory_ylim
    assert memory_ylim(79.65, 20.0) > 79.65
    assert memory_ylim(79.65, 95.0) > 95.0

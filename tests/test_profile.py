"""Calibration profiles in the simulator (simulator/profile.py): strict loading, interpolation that is exact at
measured points, monotone between them and None outside the accepted range, and coverage of a cpu-host
scenario by the shipped CPU profile."""
import json
from pathlib import Path

import pytest

from simulator.cost.costs import build_cost_model
from simulator.errors import ScenarioError
from simulator.plan.layout import GroupShape
from simulator.plan.opgraph import Comm, Compute
from simulator.cost.profile_load import load_profile, profile_from_mapping
from simulator.cost.profile_schema import (COMM_ABOVE, GEMM_DIM_ABOVE, GEMM_DIM_BELOW, STREAM_ABOVE, STREAM_BELOW,
                                      SCHEMA_VERSION)
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
CPU_PROFILE = ROOT / "calibrate" / "profiles" / "cpu-host.json"

PROVENANCE = {"device_type": "cpu", "device_name": "test CPU", "torch_version": "2.13.0", "cpu_model": "test CPU",
              "cpu_count": 2, "threads": 1, "hostname": "h", "date": "2026-01-01T00:00:00+00:00",
              "command": "python -m calibrate --device cpu", "python_version": "3.11", "clustersim_version": "0.1.0"}
AXIS = (64, 256, 1024)


def timed(t: float) -> dict:
    return {"time_s": t, "p10_s": t * 0.9, "p90_s": t * 1.1, "reps": 5}


def gemm_point(m, n, k, tflops_at_1024=1.0):
    """Throughput rising with size (small GEMMs are less efficient), as on real hardware."""
    eff = tflops_at_1024 * (min(m, n, k) / 1024) ** 0.3
    t = 2.0 * m * n * k / (eff * 1e12)
    return {"dtype": "fp32", "m": m, "n": n, "k": k, "set": "grid", **timed(t), "tflops": eff}


def make_profile() -> dict:
    gemm = [gemm_point(m, n, k) for m in AXIS for n in AXIS for k in AXIS]
    attention = [{"dtype": "fp32", "backend": "flash", "batch_heads": 8, "s_q": s, "s_kv": s, "d_head": 64,
                  "causal": True, "phase": "fwd", **timed(1e-4 * (s / 128) ** 2), "tflops": 0.1}
                 for s in (128, 256, 512)]
    elementwise = [{"op": "rmsnorm", "phase": "fwd", "dtype": "fp32", "elements": e, "bytes": 8.0 * e,
                    **timed(5e-6 + 8.0 * e / 5e9), "gbs": 5.0} for e in (1 << 12, 1 << 16, 1 << 20)]
    elementwise += [{"op": "copy", "phase": "fwd", "dtype": "fp32", "elements": e, "bytes": 8.0 * e,
                     **timed(2e-6 + 8.0 * e / 8e9), "gbs": 8.0} for e in (1 << 12, 1 << 20)]
    optimizer = [{"optimizer": "adamw", "impl": "default", "params": p, "tensors": 1, **timed(1e-5 + p * 4e-9)}
                 for p in (1 << 16, 1 << 20)]
    collectives = []
    for coll in ("all_reduce", "all_gather", "send_recv"):
        for size in (1024, 1 << 20, 1 << 26):
            t = 1e-4 + size / 1e9
            collectives.append({"collective": coll, "backend": "gloo", "group_size": 2, "tier": "intra_node",
                                "size_bytes": float(size), **timed(t), "algbw_gbs": size / t / 1e9,
                                "busbw_gbs": size / t / 1e9})
    return {"schema_version": SCHEMA_VERSION, "provenance": dict(PROVENANCE), "spec": None, "gemm": gemm,
            "attention": attention, "elementwise": elementwise, "host_device": [], "optimizer": optimizer,
            "collectives": collectives, "checks": [], "skipped": []}


@pytest.fixture
def prof():
    return profile_from_mapping(make_profile())


def write(tmp_path, obj, name="p.json"):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


# ----------------------------------------------------------------------------------- schema

def test_a_valid_profile_loads_and_remembers_its_file(tmp_path):
    p = write(tmp_path, make_profile())
    prof = load_profile(p)
    assert prof.source == str(p) and len(prof.gemm) == 27


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d.pop("schema_version"), "missing schema_version"),
    (lambda d: d.update(schema_version=99), "schema_version 99"),
    (lambda d: d["gemm"][0].update(bogus=1), "gemm[0].bogus: unknown key"),
    (lambda d: d["gemm"][3].update(m="big"), "gemm[3].m: expected an integer"),
    (lambda d: d["gemm"][0].pop("time_s"), "gemm[0].time_s: missing required key"),
    (lambda d: d["attention"][0].update(phase="sideways"), "attention[0].phase"),
    (lambda d: d["collectives"][0].update(group_size=1), "collectives[0].group_size"),
    (lambda d: d["elementwise"][1].update(time_s=0.0, p10_s=0.0), "elementwise[1].time_s"),
    (lambda d: d["optimizer"][0].update(p90_s=1e-12), "optimizer[0]: expected p10_s <= time_s <= p90_s"),
    (lambda d: d["gemm"][2].update(mean_s=float("nan")), "gemm[2].mean_s"),
    (lambda d: d["provenance"].pop("hostname"), "provenance.hostname: missing required key"),
    (lambda d: d.update(extra_table=[]), "extra_table: unknown key"),
])
def test_a_bad_profile_is_a_scenario_error_naming_the_file_and_the_problem(tmp_path, mutate, expected):
    d = make_profile()
    mutate(d)
    p = write(tmp_path, d, "bad.json")
    with pytest.raises(ScenarioError) as e:
        load_profile(p)
    assert str(p) in str(e.value) and expected in str(e.value)


@pytest.mark.parametrize("text, expected", [("{", "not valid JSON"), ("[1, 2]", "must be a JSON object"),
                                            ('"x"', "must be a JSON object")])
def test_a_file_that_is_not_a_profile_is_refused(tmp_path, text, expected):
    p = write(tmp_path, text, "x.json")
    with pytest.raises(ScenarioError, match=expected):
        load_profile(p)


def test_a_missing_profile_file_is_named(tmp_path):
    with pytest.raises(ScenarioError, match="nope.json: cannot read"):
        load_profile(tmp_path / "nope.json")


# ----------------------------------------------------------------------------------- GEMM

def g(m, n, k):
    return Compute("x", "gemm", 2.0 * m * n * k, 0.0, "fp32", (m, n, k))


def test_gemm_is_exact_at_every_measured_point(prof):
    for p in make_profile()["gemm"]:
        assert prof.compute_time(g(p["m"], p["n"], p["k"])) == pytest.approx(p["time_s"], rel=1e-12)


def test_points_are_priced_at_their_mean_when_the_profile_has_one():
    """A step pays each op's expected time: a skewed point (mean above median) is priced at its mean; an
    older profile without means at its median."""
    d = make_profile()
    gp, cp = d["gemm"][13], d["collectives"][4]
    gp["mean_s"], cp["mean_s"] = 1.25 * gp["time_s"], 1.5 * cp["time_s"]
    prof = profile_from_mapping(d)
    assert prof.compute_time(g(gp["m"], gp["n"], gp["k"])) == pytest.approx(gp["mean_s"], rel=1e-12)
    op = Comm("x", "dp", cp["collective"], cp["size_bytes"])
    assert prof.comm_time(op, GroupShape(dim="dp", size=2, nodes=1, per_node=2, ranks=(0, 1))) == pytest.approx(cp["mean_s"], rel=1e-12)
    other = d["gemm"][0]
    assert prof.compute_time(g(other["m"], other["n"], other["k"])) == pytest.approx(other["time_s"], rel=1e-12)


def test_gemm_time_is_monotone_between_measured_points(prof):
    ms = [int(64 * 2 ** (i / 8)) for i in range(0, 33)]  # 64 .. 1024 in small log steps
    ts = [prof.compute_time(g(m, 256, 512)) for m in ms]
    assert all(a < b for a, b in zip(ts, ts[1:]))
    lo, hi = prof.compute_time(g(256, 256, 512)), prof.compute_time(g(1024, 256, 512))
    assert lo < prof.compute_time(g(512, 256, 512)) < hi


def test_gemm_repeat_multiplies(prof):
    op = g(256, 256, 256)
    grouped = Compute("e", "gemm", op.flops * 4, 0.0, "fp32", op.shape, repeat=4)
    assert prof.compute_time(grouped) == pytest.approx(4 * prof.compute_time(op))


def test_gemm_above_the_grid_runs_at_the_largest_dims_throughput(prof):
    t = prof.compute_time(g(1024, 1024, 1024))
    assert prof.compute_time(g(1024, 8 * 1024, 1024)) == pytest.approx(8 * t)


def test_gemm_outside_the_accepted_range_is_none(prof):
    assert prof.compute_time(g(int(64 / GEMM_DIM_BELOW) - 1, 256, 256)) is None
    assert prof.compute_time(g(256, int(1024 * GEMM_DIM_ABOVE) + 1, 256)) is None
    assert prof.compute_time(Compute("x", "gemm", 1.0, 0.0, "bf16", (256, 256, 256))) is None  # dtype not measured


def test_gemm_without_a_grid_uses_nearby_exact_shapes_only(tmp_path):
    d = make_profile()
    d["gemm"] = [dict(p, set="scenario") for p in d["gemm"] if p["m"] != 1024]  # not a full product any more
    prof = profile_from_mapping(d)
    t256 = gemm_point(256, 256, 256)["time_s"]
    assert prof.compute_time(g(256, 256, 256)) == pytest.approx(t256)
    # the only shape within a factor 2 in every dim is 256^3: its throughput, at 300/256 of the work
    assert prof.compute_time(g(300, 256, 256)) == pytest.approx(t256 * 300 / 256)
    assert prof.compute_time(g(4096, 256, 256)) is None


# ----------------------------------------------------------------------------------- attention, memory-bound, optimizer

def attn(s, d=64, bh=8, frac=0.5, phase="fwd"):
    return Compute("attn", "attention", 1.0, 0.0, "fp32", (bh, s, s, d, frac, phase))


def test_attention_exact_monotone_and_bounded(prof):
    assert prof.compute_time(attn(256)) == pytest.approx(4e-4)
    ts = [prof.compute_time(attn(s)) for s in (128, 160, 200, 256, 300, 400, 512)]
    assert all(a < b for a, b in zip(ts, ts[1:]))
    assert prof.compute_time(attn(256, bh=16)) == pytest.approx(prof.compute_time(attn(362)), rel=0.02)  # same work
    assert prof.compute_time(attn(256, d=32)) is None  # head dim not measured, more than 1.5x away
    assert prof.compute_time(attn(256, phase="bwd")) is None  # backward not measured
    assert prof.compute_time(attn(16)) is None  # far below the measured work


def test_attention_prefers_what_sdpa_picks_unasked_over_a_faster_forced_back_end():
    d = make_profile()
    point = dict(d["attention"][1])
    d["attention"].append(dict(point, backend="default", **timed(point["time_s"] * 1.5)))
    d["attention"].append(dict(point, backend="math", **timed(point["time_s"] * 3)))
    assert profile_from_mapping(d).compute_time(attn(256)) == pytest.approx(point["time_s"] * 1.5)
    d["attention"] = [a for a in d["attention"] if a["backend"] != "default"]
    assert profile_from_mapping(d).compute_time(attn(256)) == pytest.approx(point["time_s"])  # else the fastest


def ew(name, nbytes):
    return Compute(name, "elementwise", 0.0, float(nbytes), "fp32", (int(nbytes // 8),))


def test_elementwise_is_priced_by_bytes_through_the_measured_bandwidth(prof):
    for p in make_profile()["elementwise"][:3]:
        assert prof.compute_time(ew("norm1", p["bytes"])) == pytest.approx(p["time_s"])
    ts = [prof.compute_time(ew("norm2", 8 * e)) for e in (1 << 12, 1 << 13, 1 << 15, 1 << 18, 1 << 20)]
    assert all(a < b for a, b in zip(ts, ts[1:]))
    big = 8.0 * (1 << 20)
    assert prof.compute_time(ew("norm1", 4 * big)) == pytest.approx(4 * prof.compute_time(ew("norm1", big)))
    assert prof.compute_time(ew("norm1", big * STREAM_ABOVE * 2)) is None
    assert prof.compute_time(ew("norm1", 8.0 * (1 << 12) / STREAM_BELOW / 2)) is None
    # backward borrows the forward's bandwidth; an op with no kernel of its own is a device copy
    assert prof.compute_time(ew("norm1_bwd", big)) == prof.compute_time(ew("norm1", big))
    assert prof.compute_time(ew("permute", big)) == pytest.approx(make_profile()["elementwise"][-1]["time_s"])


def test_moe_routing_ops_are_priced_by_their_measured_gathers_when_the_profile_has_them():
    """permute / unpermute / ep_sort / ep_unsort: their own kernels (moe_permute, moe_unpermute, row_gather),
    forward and backward; a device copy of the same bytes in a profile measured before those kinds."""
    d = make_profile()
    big = 8.0 * (1 << 20)
    kinds = {"moe_permute": 3.0, "moe_unpermute": 4.0, "row_gather": 5.0}  # x the copy's time
    for kind, slow in kinds.items():
        for phase in ("fwd", "bwd"):
            d["elementwise"].append({"op": kind, "phase": phase, "dtype": "fp32", "elements": 1 << 20, "bytes": big,
                                     **timed(slow * (2 if phase == "bwd" else 1) * (2e-6 + big / 8e9)), "gbs": 1.0})
    prof = profile_from_mapping(d)
    copy = prof.compute_time(ew("permute", big))
    old = profile_from_mapping(make_profile())
    for name, kind in (("permute", "moe_permute"), ("unpermute", "moe_unpermute"), ("ep_sort", "row_gather"),
                       ("ep_unsort", "row_gather")):
        assert old.compute_time(ew(name, big)) == pytest.approx(copy / kinds["moe_permute"])
        assert prof.compute_time(ew(name, big)) == pytest.approx(copy / kinds["moe_permute"] * kinds[kind])
        assert prof.compute_time(ew(name + "_bwd", big)) == pytest.approx(2 * prof.compute_time(ew(name, big)))


def test_optimizer_exact_and_linear_above(prof):
    op = lambda p: Compute("optimizer_step", "optimizer", 0.0, 30.0 * p, "fp32", (p,))  # noqa: E731
    assert prof.compute_time(op(1 << 16)) == pytest.approx(1e-5 + (1 << 16) * 4e-9)
    assert prof.compute_time(op(1 << 22)) == pytest.approx(4 * prof.compute_time(op(1 << 20)))
    assert prof.compute_time(op((1 << 20) * 65)) is None


# ----------------------------------------------------------------------------------- collectives

def grp(size, nodes=1):
    return GroupShape(dim="dp", size=size, nodes=nodes, per_node=size // nodes, ranks=tuple(range(size)))


def test_collectives_exact_interpolated_and_none_where_not_measured(prof):
    ar = lambda b, coll="all_reduce": Comm("x", "dp", coll, float(b))  # noqa: E731
    assert prof.comm_time(ar(1 << 20), grp(2)) == pytest.approx(1e-4 + (1 << 20) / 1e9)
    ts = [prof.comm_time(ar(b), grp(2)) for b in (1024, 4096, 1 << 16, 1 << 20, 1 << 24, 1 << 26)]
    assert all(a < b for a, b in zip(ts, ts[1:]))
    assert prof.comm_time(ar(16), grp(2)) == prof.comm_time(ar(1024), grp(2))  # latency floor below
    assert prof.comm_time(ar(1 << 27), grp(2)) == pytest.approx(2 * prof.comm_time(ar(1 << 26), grp(2)))
    assert prof.comm_time(ar((1 << 26) * COMM_ABOVE * 2), grp(2)) is None
    assert prof.comm_time(ar(1 << 20), grp(4)) is None  # group size not measured
    assert prof.comm_time(ar(1 << 20), grp(2, nodes=2)) is None  # inter-node tier not measured
    assert prof.comm_time(ar(1 << 20, "reduce_scatter"), grp(2)) is None  # collective not measured
    # point to point is a pair whatever the group it belongs to
    assert prof.comm_time(ar(1 << 20, "send_recv"), grp(8)) == prof.comm_time(ar(1 << 20, "send_recv"), grp(2))


def test_a_collectives_in_step_cost_prices_it_where_measured():
    """CPU profiles carry each collective's cost inside a step (`in_step_s`); the simulator uses it."""
    raw = make_profile()
    for c in raw["collectives"]:
        if c["collective"] == "send_recv":
            c["in_step_s"] = c["time_s"] + 1e-3
    p = profile_from_mapping(raw)
    op = lambda coll: Comm("x", "cp", coll, float(1 << 20))  # noqa: E731
    base = profile_from_mapping(make_profile())
    assert p.comm_time(op("send_recv"), grp(2)) == pytest.approx(base.comm_time(op("send_recv"), grp(2)) + 1e-3)
    assert p.comm_time(op("all_reduce"), grp(2)) == base.comm_time(op("all_reduce"), grp(2))  # none measured


# ----------------------------------------------------------------------------------- the shipped CPU profile

def scenario_coverage(sc) -> tuple[float, float]:
    """Price every compute op of one step on every pipeline rank (layers, embedding, head, optimizer) with the
    scenario's cost model, as often as the plan runs it; return (measured seconds, total seconds)."""
    from simulator.plan.lower import build_plan, step_compute_ops
    cm = build_cost_model(sc)
    measured = total = 0.0
    for op, n in step_compute_ops(build_plan(sc)).items():
        t = cm.compute_time(op) * n
        total += t
        measured += t if cm.profile.compute_time(op) is not None else 0.0
    return measured, total


@pytest.mark.skipif(not CPU_PROFILE.exists(), reason="calibrate/profiles/cpu-host.json not generated yet")
def test_the_shipped_cpu_profile_loads_with_provenance():
    prof = load_profile(CPU_PROFILE)
    p = prof.provenance
    assert p.device_type == "cpu" and p.hostname and p.torch_version and p.command.startswith("python -m calibrate")
    assert prof.gemm and prof.attention and prof.elementwise and prof.optimizer and prof.collectives
    assert all(c.ok for c in prof.checks)


@pytest.mark.skipif(not CPU_PROFILE.exists(), reason="calibrate/profiles/cpu-host.json not generated yet")
@pytest.mark.parametrize("scenario", ["tp2-sp.yaml", "dp2.yaml", "cp2.yaml", "pp2-1f1b.yaml", "moe-ep2.yaml", "tiny"])
def test_a_cpu_host_scenario_prices_95_percent_of_compute_from_the_cpu_profile(tmp_path, scenario):
    if scenario == "tiny":
        path = tmp_path / "tiny.yaml"
        path.write_text(f"""
name: tiny llama, 1 process
model: {{arch: llama, layers: 2, hidden: 128, ffn_hidden: 384, heads: 4, kv_heads: 2, vocab: 2048}}
training: {{seq_len: 128, global_batch: 2, micro_batch: 1, precision: fp32, recompute: none}}
cluster: {{topology: cpu-host, nodes: 1, gpus_per_node: 1, profile: {CPU_PROFILE}}}
parallel: {{tp: 1}}
""")
    else:
        path = ROOT / "scenarios" / "replay" / scenario
        if not path.exists():
            pytest.skip(f"{path} not in this checkout")
    sc = load_scenario(path)
    assert sc.cluster.profile != "default"
    measured, total = scenario_coverage(sc)
    assert total > 0 and measured / total >= 0.95, f"{measured / total:.1%} of compute time measured"


# ----------------------------------------------------------------------------------- parallel host overheads

def _fw(mode, op, phase, t, nbytes=0.0):
    return {"mode": mode, "op": op, "phase": phase, "bytes": nbytes, **timed(t)}


def test_fsdp_overhead_per_collective_is_block_less_eager_less_raw_collectives_over_three():
    raw = make_profile()
    raw["framework"] = []
    for nbytes, fsdp, eager, coll in ((1e3, 4e-3, 1e-4, 1e-3), (1e6, 10e-3, 1e-3, 3e-3)):
        raw["framework"] += [_fw("fsdp", "fsdp_block", "fwd", fsdp / 2, nbytes), _fw("fsdp", "fsdp_block", "bwd", fsdp / 2, nbytes),
                             _fw("eager", "fsdp_block", "fwd", eager / 2, nbytes), _fw("eager", "fsdp_block", "bwd", eager / 2, nbytes),
                             _fw("plain", "fsdp_collectives", "step", coll, nbytes)]
    p = profile_from_mapping(raw)
    small, large = (4e-3 - 1e-4 - 1e-3) / 3, (10e-3 - 1e-3 - 3e-3) / 3
    assert p.zero_comm_overhead(1e3) == pytest.approx(small)
    assert p.zero_comm_overhead(10.0) == pytest.approx(small)  # flat below the smallest unit
    assert p.zero_comm_overhead(1e6) == pytest.approx(large)
    assert small < p.zero_comm_overhead(5e5) < large  # the copies grow with the bytes
    assert p.zero_comm_overhead(2e6) > large
    assert profile_from_mapping(make_profile()).zero_comm_overhead(1e6) == 0.0  # no rows: nothing added


def test_tp_overhead_grows_with_the_collective_and_an_old_single_size_profile_still_reads():
    raw = make_profile()
    lin = [_fw("dtensor", "linear", "fwd", 1e-4), _fw("dtensor", "linear", "bwd", 2e-4)]
    raw["framework"] = lin + [_fw("dtensor", "tp_block", "fwd", 2e-3), _fw("dtensor", "tp_block", "bwd", 3e-3),
                              _fw("plain", "collective", "step", 3e-4)]
    old = profile_from_mapping(raw)
    fixed = (5e-3 - 2 * 3e-4 - 4 * 3e-4) / 4
    assert old.tp_comm_overhead(1e6) == pytest.approx(fixed)
    raw["framework"] = [dict(e, bytes=128.0) for e in raw["framework"][2:]] + lin + [
        _fw("dtensor", "tp_block", "fwd", 4e-3, 2.6e5), _fw("dtensor", "tp_block", "bwd", 5e-3, 2.6e5),
        _fw("eager", "tp_block", "fwd", 3e-4, 2.6e5), _fw("eager", "tp_block", "bwd", 5e-4, 2.6e5),
        _fw("plain", "collective", "step", 5e-4, 2.6e5)]
    new = profile_from_mapping(raw)
    assert new.tp_comm_overhead(128.0) == pytest.approx(fixed)
    assert new.tp_comm_overhead(2.6e5) == pytest.approx((9e-3 - 6e-4 - 8e-4 - 2e-3) / 4)
    assert new.tp_comm_overhead(2.6e5) > new.tp_comm_overhead(1.3e5) > fixed


def test_a_profile_is_read_once_per_text_and_again_when_the_file_changes(tmp_path):
    """A sweep or `validate --profile` prices hundreds of scenarios from one file: the converted profile is shared
    while the file's text is unchanged, and read again when it changes (here with the same size, within the file
    system's timestamp granularity)."""
    from simulator.cost.profile_load import load_profile

    src = (Path(__file__).resolve().parent.parent / "calibrate" / "profiles" / "a100-sxm-published.json").read_text()
    path = tmp_path / "p.json"
    path.write_text(src)
    first = load_profile(path)
    assert load_profile(path) is first and load_profile(str(path)) is first
    changed = src.replace("0.00173145", "0.00273145")  # the point's median, p10 and p90 alike
    assert changed != src and len(changed) == len(src)
    path.write_text(changed)
    again = load_profile(path)
    assert again is not first and again.gemm[0].time_s == pytest.approx(0.00273145)
    assert first.gemm[0].time_s == pytest.approx(0.00173145)

"""Hostile and absurd input (issue 40): every case ends in exit 0 or 2 with one line on stderr and no
traceback, within seconds and bounded memory; outputs are whole or absent; JSON on stdout is strict.

Cases that could hang or eat memory if a check were missing run in a subprocess under a time limit and
`RLIMIT_AS` (3 GiB); the rest call `simulator.cli.main.main` in-process (fast).
"""
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
S70B = ROOT / "scenarios" / "70b_512gpu.yaml"
S1B = ROOT / "scenarios" / "1b_1gpu.yaml"
MIXTRAL = ROOT / "scenarios" / "mixtral_ep.yaml"
CPU_PROFILE = ROOT / "calibrate" / "profiles" / "cpu-host.json"
TOPOLOGY = ROOT / "topologies" / "dgx-h100.yaml"
LIMIT_BYTES = 3 << 30
TIME_LIMIT_S = 60


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def cli(*args, module="simulator", limit_memory=True, timeout=TIME_LIMIT_S):
    """(exit code, stdout, stderr, seconds) of `python -m module args` under the time and memory limits."""
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                       timeout=timeout, preexec_fn=_limit_memory if limit_memory else None)
    return r.returncode, r.stdout, r.stderr, time.monotonic() - t0


def inproc(capsys, *args):
    """(exit code, stdout, stderr) of `python -m simulator args` run in this process."""
    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(rc, err, *words):
    """Exit 2, exactly one short line on stderr, no traceback, and the line names each of `words`."""
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2, err[-2000:]
    assert "Traceback" not in err
    assert len(lines) == 1, err[-2000:]
    assert len(lines[0]) < 400, lines[0][:400]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def scenario(tmp_path, text, name="s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text) if isinstance(text, str) else p.write_bytes(text)
    return p


def alias_bomb(levels: int, width: int = 9) -> str:
    """A "billion laughs" YAML flow value: a list of `levels` anchored lists, each holding `width` aliases of
    the one before (width**levels strings when expanded)."""
    parts = ["&a0 [" + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        parts.append(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "[" + ", ".join(parts) + "]"


def hf_config(tmp_path, **changes) -> Path:
    cfg = json.loads((ROOT / "simulator" / "presets" / "llama3-8b.json").read_text())
    cfg.update(changes)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


def run_with_model(capsys, tmp_path, model_path):
    text = S70B.read_text().replace("model: llama3-70b", f"model: {model_path}")
    return inproc(capsys, "run", scenario(tmp_path, text), "--estimator", "analytic")


# ----------------------------------------------------------------------------------- alias bombs

def test_an_alias_bomb_in_a_scenario_ends_at_once_with_a_short_message(tmp_path):
    text = S70B.read_text().replace("  seq_len: 4096", "  seq_len: " + alias_bomb(9))
    rc, out, err, secs = cli("run", scenario(tmp_path, text))
    one_line_error(rc, err, "training.seq_len")
    assert secs < 20


def test_an_alias_bomb_as_a_set_value_ends_at_once_with_a_short_message():
    rc, out, err, secs = cli("run", S70B, "--set", f"training.seq_len={alias_bomb(9)}")
    one_line_error(rc, err, "training.seq_len")
    assert secs < 20


def test_a_long_set_value_is_quoted_short(capsys):
    rc, out, err = inproc(capsys, "run", S70B, "--set", "training.seq_len=" + "x" * 306)
    line = one_line_error(rc, err, "training.seq_len")
    assert "x" * 100 not in line


# ----------------------------------------------------------------------------------- deep nesting, encodings

def test_a_scenario_nested_20000_deep_is_exit_2(tmp_path):
    rc, out, err, secs = cli("run", scenario(tmp_path, "name: " + "[" * 20000 + "]" * 20000 + "\n"))
    one_line_error(rc, err, "nested")


def test_a_config_json_nested_20000_deep_is_exit_2(capsys, tmp_path):
    p = tmp_path / "deep.json"
    p.write_text('{"hidden_size": ' + "[" * 20000 + "]" * 20000 + "}")
    rc, out, err = run_with_model(capsys, tmp_path, p)
    one_line_error(rc, err, "nested")


def test_a_set_value_nested_deep_is_exit_2(capsys):
    rc, out, err = inproc(capsys, "run", S70B, "--set", "training.seq_len=" + "[" * 5000 + "]" * 5000)
    one_line_error(rc, err, "nested")


NOT_UTF8 = b"name: caf\xe9\nmodel: llama3-70b\n"


def test_a_scenario_that_is_not_utf8_is_exit_2_naming_the_file(capsys, tmp_path):
    rc, out, err = inproc(capsys, "run", scenario(tmp_path, NOT_UTF8))
    one_line_error(rc, err, "s.yaml", "UTF-8")


def test_a_config_json_that_is_not_utf8_is_exit_2(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b'{"hidden_size": 4096, "name": "\xff\xfe"}')
    rc, out, err = run_with_model(capsys, tmp_path, p)
    one_line_error(rc, err, "config.json", "UTF-8")


def test_a_profile_that_is_not_utf8_is_exit_2(capsys, tmp_path):
    p = tmp_path / "prof.json"
    p.write_bytes(CPU_PROFILE.read_bytes().replace(b"Intel", b"Int\xe9l", 1))
    rc, out, err = inproc(capsys, "run", ROOT / "scenarios" / "replay" / "dp2.yaml", "--set", f"cluster.profile={p}")
    one_line_error(rc, err, "prof.json", "UTF-8")


def test_a_topology_that_is_not_utf8_is_exit_2(capsys, tmp_path):
    p = tmp_path / "topo.yaml"
    p.write_bytes(TOPOLOGY.read_bytes().replace(b"H100", b"H1\xff0", 1))
    rc, out, err = inproc(capsys, "run", S70B, "--set", f"cluster.topology={p}")
    one_line_error(rc, err, "topo.yaml", "UTF-8")


# ----------------------------------------------------------------------------------- NaN and infinities

@pytest.mark.parametrize("override", [
    "parallel.ep_imbalance=.nan", "parallel.ep_imbalance=.inf", "parallel.dp_bucket_mb=.nan",
    "parallel.dp_bucket_mb=.inf", "cluster.efficiency.tp_comm_overhead_s=.inf", "cluster.efficiency.gemm=.nan",
])
def test_nan_and_infinity_are_refused_with_the_key(capsys, override):
    scen = MIXTRAL if "ep_imbalance" in override else S70B
    rc, out, err = inproc(capsys, "run", scen, "--set", override)
    one_line_error(rc, err, override.split("=")[0], "finite")


def test_nan_bandwidth_in_a_topology_is_refused(capsys, tmp_path):
    p = tmp_path / "topo.yaml"
    p.write_text(TOPOLOGY.read_text().replace("bandwidth_gbs: 450", "bandwidth_gbs: .nan", 1))
    assert ".nan" in p.read_text()
    rc, out, err = inproc(capsys, "run", S70B, "--set", f"cluster.topology={p}")
    one_line_error(rc, err, "bandwidth_gbs", "finite")


def _profile_with(tmp_path, table, field_values, pick=lambda rows: rows[0]) -> Path:
    d = json.loads(CPU_PROFILE.read_text())
    pick(d[table]).update(field_values)
    p = tmp_path / "prof.json"
    p.write_text(json.dumps(d))  # NaN and Infinity as Python's json writes them
    return p


@pytest.mark.parametrize("table,values,words", [
    ("collectives", {"in_step_s": float("nan")}, ["in_step_s", "finite"]),
    ("gemm", {"time_s": float("inf")}, ["time_s", "finite"]),
    ("gemm", {"time_s": 1e-300, "p10_s": 1e-300, "mean_s": 1e-300}, ["time_s"]),
    ("gemm", {"time_s": 1e-9, "p10_s": 1e-9, "mean_s": 1e-9}, ["FLOP/s"]),
])
def test_a_profile_with_non_finite_or_absurd_times_is_refused(capsys, tmp_path, table, values, words):
    biggest = lambda rows: max(rows, key=lambda r: r.get("m", 0) * r.get("n", 0) * r.get("k", 0) or r.get("in_step_s") or 0)  # noqa: E731
    p = _profile_with(tmp_path, table, values, biggest)
    rc, out, err = inproc(capsys, "run", ROOT / "scenarios" / "replay" / "dp2.yaml", "--set", f"cluster.profile={p}")
    one_line_error(rc, err, "prof.json", *words)


# ----------------------------------------------------------------------------------- HF configs: same checks as mappings

@pytest.mark.parametrize("changes,words", [
    ({"num_attention_heads": 0}, ["num_attention_heads", "minimum"]),
    ({"hidden_size": float("inf")}, ["hidden_size", "integer"]),
    ({"hidden_size": -2048}, ["hidden_size", "minimum"]),
    ({"intermediate_size": "big"}, ["intermediate_size", "integer"]),
    ({"num_key_value_heads": "eight"}, ["num_key_value_heads", "integer"]),
    ({"num_key_value_heads": -8}, ["num_key_value_heads", "minimum"]),
    ({"head_dim": -64}, ["head_dim", "minimum"]),
    ({"num_hidden_layers": 0}, ["num_hidden_layers", "minimum"]),
    ({"num_local_experts": 8, "num_experts_per_tok": 0}, ["num_experts_per_tok", "minimum"]),
    ({"vocab_size": 10**9}, ["vocab_size", "maximum"]),
])
def test_a_bad_hf_config_is_refused_naming_its_key(capsys, tmp_path, changes, words):
    rc, out, err = run_with_model(capsys, tmp_path, hf_config(tmp_path, **changes))
    one_line_error(rc, err, *words)


@pytest.mark.parametrize("override,key", [("model.kv_heads=0", "model.kv_heads"), ("model.head_dim=0", "model.head_dim"),
                                          ("model.kv_heads=-8", "model.kv_heads")])
def test_zero_heads_in_a_mapping_are_refused(capsys, override, key):
    rc, out, err = inproc(capsys, "run", S70B, "--set", override)
    one_line_error(rc, err, key)


# ----------------------------------------------------------------------------------- command-line numbers

@pytest.mark.parametrize("args,word", [
    (["-b", "infK"], "--minbytes"), (["-b", "nan"], "--minbytes"), (["-e", "1e30"], "--maxbytes"),
    (["--nodes", "0"], "--nodes"), (["--stepfactor", "1"], "--stepfactor"),
])
def test_collectives_numbers_are_checked(capsys, args, word):
    rc, out, err = inproc(capsys, "collectives", "dgx-h100", *args)
    one_line_error(rc, err, word)


@pytest.mark.parametrize("args,word", [(["--headroom", "nan"], "--headroom"), (["--jobs", "0"], "--jobs"),
                                       (["--top", "-1"], "--top")])
def test_sweep_numbers_are_checked_before_sweeping(capsys, args, word):
    rc, out, err = inproc(capsys, "sweep", S1B, *args)
    one_line_error(rc, err, word)


@pytest.mark.parametrize("args", [["run"], ["run", S70B, "--bogus"], ["run", S70B, "--estimator", "magic"],
                                  ["collectives", "dgx-h100", "--nodes", "many"], ["frobnicate"]])
def test_argparse_errors_are_one_line_without_usage(capsys, args):
    rc, out, err = inproc(capsys, *args)
    line = one_line_error(rc, err)
    assert "usage" not in line


def test_sweep_with_a_fix_that_leaves_no_layout_is_a_clear_error(capsys):
    rc, out, err = inproc(capsys, "sweep", S1B, "--fix", "parallel.tp=3", "--jobs", "1")
    one_line_error(rc, err, "--fix", "tp=3")


# ----------------------------------------------------------------------------------- upper bounds

@pytest.mark.parametrize("args,word", [
    (["run", S70B, "--set", "model.layers=1000000000"], "model.layers"),
    (["run", S70B, "--set", "training.global_batch=1000000000000"], "training.global_batch"),
    (["run", S70B, "--set", "training.global_batch=" + "1" + "0" * 400], "training.global_batch"),
    (["run", S70B, "--set", "cluster.nodes=10000000", "--set", "parallel.dp=null"], "cluster.nodes"),
    (["sweep", S70B, "--set", "cluster.nodes=1000000", "--set", "parallel.dp=null", "--jobs", "1"], "cluster.nodes"),
    (["collectives", "dgx-h100", "--nodes", "10000000"], "--nodes"),
    (["run", S70B, "--set", "parallel.dp_bucket_mb=0.001", "--set", "parallel.dp_bucketing=even"], "parallel.dp_bucket_mb"),
    (["run", S70B, "--full", "--set", "cluster.nodes=2048", "--set", "parallel.dp=null",
      "--set", "training.global_batch=16384"], "--full"),
])
def test_absurd_sizes_are_refused_quickly_in_bounded_memory(args, word):
    rc, out, err, secs = cli(*args)
    one_line_error(rc, err, word)
    assert secs < 30


def test_frontier_scale_layouts_are_still_accepted(capsys):
    """100 K GPUs, a 1 M-token sequence with CP, a 128 K vocabulary: the bounds leave real runs alone."""
    rc, out, err = inproc(capsys, "run", S70B, "--estimator", "analytic", "--json", "--set", "cluster.nodes=12800",
                          "--set", "parallel.dp=null", "--set", "training.global_batch=12800")
    assert rc == 0, err
    assert json.loads(out)["gpus"] == 102_400
    rc, out, err = inproc(capsys, "run", S70B, "--estimator", "analytic", "--json", "--set", "training.seq_len=1048576",
                          "--set", "parallel.cp=8", "--set", "parallel.dp=1", "--set", "training.global_batch=8")
    assert rc == 0, err
    assert json.loads(out)["model"]["params"] > 70e9


# ----------------------------------------------------------------------------------- other absurd values

def test_a_duplicate_key_is_refused(capsys, tmp_path):
    text = S70B.read_text() + "training:\n  seq_len: 8192\n  global_batch: 1024\n"
    rc, out, err = inproc(capsys, "run", scenario(tmp_path, text))
    one_line_error(rc, err, "duplicate key 'training'")


def test_more_gpus_per_node_than_the_node_has_is_refused(capsys):
    rc, out, err = inproc(capsys, "run", S70B, "--set", "cluster.gpus_per_node=16", "--set", "parallel.dp=16")
    one_line_error(rc, err, "cluster.gpus_per_node")


def test_a_negative_capacity_factor_is_refused(capsys):
    rc, out, err = inproc(capsys, "run", MIXTRAL, "--set", "model.moe.capacity_factor=-1")
    one_line_error(rc, err, "capacity_factor")


def test_unknown_keys_are_still_refused_at_every_level(capsys):
    for key in ("bogus", "training.bogus", "cluster.bogus", "parallel.bogus", "model.moe.bogus"):
        rc, out, err = inproc(capsys, "run", MIXTRAL, "--set", f"{key}=1")
        one_line_error(rc, err, "unknown key")


def test_python_tags_are_never_executed(capsys, tmp_path):
    marker = tmp_path / "hacked"
    text = f"name: !!python/object/apply:os.system ['touch {marker}']\n" + S70B.read_text().split("\n", 1)[1]
    rc, out, err = inproc(capsys, "run", scenario(tmp_path, text))
    one_line_error(rc, err)
    assert not marker.exists()


# ----------------------------------------------------------------------------------- profiles that fit

def test_a_cpu_profile_on_an_h100_topology_is_refused(capsys):
    rc, out, err = inproc(capsys, "run", S70B, "--set", f"cluster.profile={CPU_PROFILE}")
    one_line_error(rc, err, "cluster.profile", "dgx-h100")


def test_a_mismatched_profile_is_used_only_with_the_flag_and_then_warned_about(capsys):
    args = ["run", S1B, "--estimator", "analytic", "--set", f"cluster.profile={CPU_PROFILE}", "--allow-profile-mismatch"]
    rc, out, err = inproc(capsys, *args, "--json")
    assert rc == 0, err
    warnings = json.loads(out)["warnings"]
    assert len(warnings) == 1 and "H100" in warnings[0]
    rc, out, err = inproc(capsys, *args)
    assert rc == 0 and "warning: profile measured on cpu" in out


def test_a_matching_profile_gives_no_warning(capsys):
    rc, out, err = inproc(capsys, "run", ROOT / "scenarios" / "replay" / "dp2.yaml", "--estimator", "analytic", "--json")
    assert rc == 0, err
    assert json.loads(out)["warnings"] == []


# ----------------------------------------------------------------------------------- outputs: whole or not at all

def _strict(text):
    def refuse(name):
        raise ValueError(name)
    return json.loads(text, parse_constant=refuse)


def test_json_on_stdout_is_strict(capsys):
    rc, out, err = inproc(capsys, "run", S70B, "--json", "--estimator", "analytic")
    assert rc == 0
    _strict(out)


def test_a_trace_into_an_existing_directory_is_refused_before_simulating(capsys, tmp_path):
    rc, out, err = inproc(capsys, "run", S1B, "--trace", tmp_path)
    one_line_error(rc, err, "--trace", "directory")


def test_a_plot_under_a_file_or_missing_directory_is_refused(capsys, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    for target in (f / "p.png", tmp_path / "missing" / "p.png"):
        rc, out, err = inproc(capsys, "run", S1B, "--plot", target)
        one_line_error(rc, err, "--plot")


def readonly_dir(tmp_path) -> Path:
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    if not os.access(d, os.W_OK):
        return d
    if Path("/proc/1").is_dir() and not os.access("/proc/1", os.W_OK):  # root ignores modes; /proc is not writable
        return Path("/proc/1")
    pytest.skip("no read-only directory available to this user")


def test_a_trace_into_a_read_only_directory_is_refused_before_simulating(capsys, tmp_path):
    rc, out, err = inproc(capsys, "run", S1B, "--trace", readonly_dir(tmp_path) / "t.json")
    one_line_error(rc, err, "--trace", "not writable")


def test_a_bad_plot_extension_leaves_no_trace_behind(capsys, tmp_path):
    trace, plot = tmp_path / "T.json", tmp_path / "P.xyz"
    rc, out, err = inproc(capsys, "run", S1B, "--trace", trace, "--plot", plot)
    one_line_error(rc, err, "--plot")
    assert list(tmp_path.iterdir()) == []


def test_a_failure_while_writing_removes_every_file_of_the_run(capsys, tmp_path, monkeypatch):
    """The trace is written, then the plot fails (a full disk): neither file, nor a temporary, remains."""
    import errno
    import simulator.evaluate.engine.plot as plot

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "P.png"))
    monkeypatch.setattr(plot, "plot_timeline", full_disk)
    rc, out, err = inproc(capsys, "run", S1B, "--trace", tmp_path / "T.json", "--plot", tmp_path / "P.png")
    one_line_error(rc, err, "No space left")
    assert list(tmp_path.iterdir()) == []


def test_trace_and_plot_land_whole_on_success(capsys, tmp_path):
    rc, out, err = inproc(capsys, "run", S1B, "--trace", tmp_path / "T.json", "--plot", tmp_path / "P.png")
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["P.png", "T.json"]
    _strict((tmp_path / "T.json").read_text())


def test_the_same_file_for_two_outputs_is_refused(capsys, tmp_path):
    rc, out, err = inproc(capsys, "run", S1B, "--plot", tmp_path / "x.png", "--memory-plot", tmp_path / "x.png")
    one_line_error(rc, err, "--memory-plot")


def test_sweep_outputs_are_checked_before_sweeping(capsys, tmp_path):
    rc, out, err = inproc(capsys, "sweep", S1B, "--export", "torchtitan", "--export-out", tmp_path, "--jobs", "1")
    one_line_error(rc, err, "--export-out", "directory")
    (tmp_path / "p_scatter.png").mkdir()
    rc, out, err = inproc(capsys, "sweep", S1B, "--plot", tmp_path / "p", "--jobs", "1")
    one_line_error(rc, err, "--plot")


# ----------------------------------------------------------------------------------- calibrate and replay processes

def test_calibrate_out_into_a_read_only_place_fails_before_measuring(tmp_path):
    rc, out, err, secs = cli("--device", "cpu", "--quick", "--out", readonly_dir(tmp_path) / "p.json", module="calibrate",
                             limit_memory=False)
    assert rc == 2 and "--out" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1
    assert secs < 30  # measuring takes minutes


@pytest.mark.parametrize("args,word", [(["--threads", "0"], "--threads"), (["--cpu-ranks", "100000"], "--cpu-ranks"),
                                       (["--bogus"], "--bogus")])
def test_calibrate_flags_are_checked_before_anything_starts(args, word):
    rc, out, err, secs = cli("--device", "cpu", *args, module="calibrate", limit_memory=False)
    assert rc == 2 and word in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("args,word", [(["--timeout", "-1"], "--timeout"), (["--timeout", "nan"], "--timeout"),
                                       (["--steps", "0"], "--steps"), (["--rtol", "inf"], "--rtol"),
                                       (["--steps", "x"], "--steps")])
def test_replay_numbers_are_exit_2_before_any_rank_starts(args, word):
    rc, out, err, secs = cli("replay", ROOT / "scenarios" / "replay" / "dp2.yaml", *args, module="calibrate",
                             limit_memory=False)
    line = one_line_error(rc, err, word)
    assert "rank" not in line


def _children(pid: int) -> set[int]:
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.add(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_to_calibrate_ends_its_worker_processes(tmp_path):
    """The collectives probe spawns gloo workers; SIGTERM to calibrate ends them within seconds, as Ctrl-C does."""
    p = subprocess.Popen([sys.executable, "-m", "calibrate", "--device", "cpu", "--quick", "--only", "collectives",
                          "--no-progress", "--out", str(tmp_path / "p.json")], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    workers: set[int] = set()
    while time.monotonic() < deadline and len(workers) < 2 and p.poll() is None:
        workers = {c for c in _children(p.pid) if "spawn_main" in Path(f"/proc/{c}/cmdline").read_text(errors="replace")} \
            if Path(f"/proc/{p.pid}").exists() else set()
        time.sleep(0.2)
    if len(workers) < 2:
        p.kill()
        pytest.skip("the collectives workers did not start within 120 s")
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    end = time.monotonic() + 15  # (the workers hold our pipes: communicate() would wait for them)
    while time.monotonic() < end and any(_alive(w) for w in workers):
        time.sleep(0.2)
    left = [w for w in workers if _alive(w)]
    for w in left:
        os.kill(w, signal.SIGKILL)
    _, err = p.communicate(timeout=60)
    assert not left, f"workers still running 15 s after SIGTERM: {left}"
    assert p.returncode == 130 and "Traceback" not in err, err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_to_replay_stops_every_rank():
    p = subprocess.Popen([sys.executable, "-m", "calibrate", "replay", str(ROOT / "scenarios" / "replay" / "dp2.yaml"),
                          "--steps", "200", "--warmup", "1", "--no-reference"], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    ranks: set[int] = set()
    while time.monotonic() < deadline and len(ranks) < 2 and p.poll() is None:
        ranks = {c for c in _children(p.pid) if "spawn_main" in Path(f"/proc/{c}/cmdline").read_text(errors="replace")} \
            if Path(f"/proc/{p.pid}").exists() else set()
        time.sleep(0.2)
    if len(ranks) < 2:
        p.kill()
        pytest.skip("the replay ranks did not start within 120 s")
    time.sleep(2.0)
    p.send_signal(signal.SIGTERM)
    end = time.monotonic() + 15
    while time.monotonic() < end and any(_alive(r) for r in ranks):
        time.sleep(0.2)
    left = [r for r in ranks if _alive(r)]
    for r in left:
        os.kill(r, signal.SIGKILL)
    _, err = p.communicate(timeout=60)
    assert not left, f"ranks still running 15 s after SIGTERM: {left}"
    assert p.returncode == 130 and "Traceback" not in err, err


def test_a_scenario_error_survives_pickling_so_a_process_pool_reports_it():
    """Sweep workers run in a process pool: an error raised there must reach the parent whole (path, problem,
    allowed), not as a broken pool."""
    import pickle
    from simulator.errors import ScenarioError
    e = pickle.loads(pickle.dumps(ScenarioError("parallel.etp", "4 with tp 2", "1, 2 or null")))
    assert (e.path, e.problem, e.allowed, str(e)) == ("parallel.etp", "4 with tp 2", "1, 2 or null",
                                                      "parallel.etp: 4 with tp 2 (allowed: 1, 2 or null)")

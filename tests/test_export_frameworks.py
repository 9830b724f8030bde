"""Each export is read by the framework release it targets, installed from the package registry.

  torchtitan 0.3.0 and 0.2.2: torchtitan's ConfigManager.parse_args (0.3: the command-line overrides of
    a config_registry function; 0.2: the TOML job file). Both import the model registry, which imports
    triton: it installs from the registry as a wheel and imports without a GPU.
  nanotron 0.4: nanotron's get_config_from_file (strict dacite over its Config dataclasses); see
    frameworks/nanotron_parse.py for the import loop of the published 0.4 that the script breaks.
  Megatron-LM: its argument parser is not on the registry (megatron-core ships megatron/core only),
    so megatron-core 0.16.1's TransformerConfig is built from the flags and checks the model against
    the layout, and every flag name is checked (frameworks/megatron_core_parse.py).

Slow: the first run installs each framework into a cached virtual environment (registry.venv_with).
"""
import json

import pytest

from registry import ROOT, run_python, venv_with
from simulator.report.export import to_megatron, to_nanotron, to_torchtitan, to_torchtitan_toml, unsupported
from simulator.scenario import load_scenario

pytestmark = pytest.mark.slow

S70, S8B, MIXTRAL = "scenarios/70b_512gpu.yaml", "scenarios/8b_8gpu.yaml", "scenarios/mixtral_ep.yaml"
CASES = {
    "70b_tp8_pp8_zero1": (S70, ["parallel.tp=8", "parallel.pp=8", "parallel.dp=8", "parallel.zero=1"]),
    "70b_interleaved_full": (S70, ["parallel.tp=4", "parallel.pp=4", "parallel.dp=32", "parallel.zero=0",
                                   "parallel.pp_schedule=interleaved-1f1b", "parallel.vpp=2", "training.recompute=full",
                                   "training.micro_batch=2"]),
    "70b_cp2_zero3": (S70, ["parallel.tp=2", "parallel.pp=1", "parallel.dp=128", "parallel.cp=2", "parallel.zero=3",
                            "training.recompute=none"]),
    "70b_cp2_zero2_nosp": (S70, ["parallel.tp=8", "parallel.pp=2", "parallel.dp=16", "parallel.cp=2", "parallel.zero=2",
                                 "parallel.sp=false"]),
    "8b_fp8": (S8B, ["training.precision=fp8"]),
    "8b_tp2_pp2_afab": (S8B, ["parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "parallel.zero=1",
                              "parallel.pp_schedule=afab"]),
    "mixtral_ep8": (MIXTRAL, []),
    "deepseek_v3_mla_moe": (S70, ["model=deepseek-v3", "parallel.ep=8", "parallel.tp=8", "parallel.pp=1",
                                  "parallel.dp=64", "parallel.zero=1"]),
    "gpt3": (S70, ["model=gpt3-175b", "training.seq_len=2048"]),
    "8b_fp8_fsdp_float8": (S8B, ["framework.float8=true", "framework.float8_fsdp_all_gather=true",
                                 "framework.float8_precompute_scale=true", "framework.float8_filter_output=true",
                                 "training.precision=fp8"]),
}


def _scenarios(names):
    return {n: load_scenario(*CASES[n]) for n in names}


def _write(tmp_path, writer, scenarios, suffix):
    paths = {}
    for name, sc in scenarios.items():
        paths[name] = tmp_path / f"{name}.{suffix}"
        paths[name].write_text(writer(sc))
    return paths


def _parse(python, script, args, timeout_s=300) -> dict:
    proc = run_python(python, [str(ROOT / "tests" / "frameworks" / script), *map(str, args)], timeout_s=timeout_s)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {row["path"]: row for row in rows}


def _check_torchtitan(rows, paths, scenarios, form):
    for name, sc in scenarios.items():
        row, p, t = rows[str(paths[name])], sc.parallel, sc.training
        assert row["replicate"] * row["shard"] == sc.dp and (row["shard"] > 1) == (p.zero >= 1), name
        assert (row["tp"], row["pp"], row["cp"], row["ep"]) == (p.tp, p.pp, p.cp, p.ep), name
        assert (row["global_batch"], row["seq_len"]) == (t.global_batch, t.seq_len), name
        assert row["reshard"] == ("never" if p.zero in (1, 2) else "default"), name
        if p.pp > 1:
            assert row["microbatch"] == t.micro_batch and row["local_batch"] * sc.dp == t.global_batch, name
        expected_ac = {"0.3": {"none": "none", "selective": "SelectiveAC.Config", "full": "FullAC.Config"},
                       "0.2": {"none": "none", "selective": "selective", "full": "full"}}[form][t.recompute]
        assert row["activation_checkpoint"] == expected_ac, name


TORCHTITAN_CASES = ["70b_tp8_pp8_zero1", "70b_interleaved_full", "70b_cp2_zero3", "70b_cp2_zero2_nosp", "8b_fp8",
                    "8b_tp2_pp2_afab", "deepseek_v3_mla_moe"]


def test_torchtitan_03_config_manager_reads_the_exports(tmp_path):
    python = venv_with("torchtitan==0.3.0", "triton==3.9.0")
    scenarios = _scenarios(TORCHTITAN_CASES)
    paths = _write(tmp_path, to_torchtitan, scenarios, "args")
    _check_torchtitan(_parse(python, "torchtitan_parse.py", ["0.3", *paths.values()]), paths, scenarios, "0.3")


def test_torchtitan_02_config_manager_reads_the_toml_exports(tmp_path):
    python = venv_with("torchtitan==0.2.2", "triton==3.9.0")
    scenarios = _scenarios(TORCHTITAN_CASES + ["8b_fp8_fsdp_float8"])
    paths = _write(tmp_path, to_torchtitan_toml, scenarios, "toml")
    rows = _parse(python, "torchtitan_parse.py", ["0.2", *paths.values()])
    _check_torchtitan(rows, paths, scenarios, "0.2")
    assert rows[str(paths["8b_fp8_fsdp_float8"])]["float8"] == [True, True, ["output"]]
    assert rows[str(paths["8b_fp8"])]["float8"] == [False, False, []]


def test_nanotron_04_loader_reads_the_exports(tmp_path):
    python = venv_with("nanotron==0.4")
    scenarios = _scenarios(["70b_tp8_pp8_zero1", "8b_tp2_pp2_afab"])
    scenarios["70b_tp4_pp4_mb2"] = load_scenario(S70, ["parallel.tp=4", "parallel.pp=4", "parallel.dp=32",
                                                       "training.micro_batch=2"])
    paths = _write(tmp_path, to_nanotron, scenarios, "yaml")
    rows = _parse(python, "nanotron_parse.py", paths.values())
    for name, sc in scenarios.items():
        row, p = rows[str(paths[name])], sc.parallel
        assert (row["dp"], row["tp"], row["pp"], row["zero_stage"]) == (p.dp, p.tp, p.pp, p.zero), name
        assert row["pp_engine"] == {"1f1b": "OneForwardOneBackwardPipelineEngine",
                                    "afab": "AllForwardAllBackwardPipelineEngine"}[p.pp_schedule if p.pp > 1 else "1f1b"]
        assert row["global_batch"] == sc.training.global_batch and row["seq_len"] == sc.training.seq_len, name
        assert (row["model"], row["layers"], row["kv_heads"]) == ("LlamaConfig", sc.model.layers, sc.model.n_kv), name
        assert row["tp_mode"] == ("REDUCE_SCATTER" if p.sp and p.tp > 1 else "ALL_REDUCE"), name


@pytest.fixture(scope="module")
def megatron_core():
    return venv_with("megatron-core==0.16.1")


def test_megatron_core_builds_the_model_config_from_the_exports(tmp_path, megatron_core):
    scenarios = {n: sc for n, sc in _scenarios(CASES).items() if not unsupported(sc, "megatron")}
    assert len(scenarios) == len(CASES) - 1  # all but the AFAB pipeline
    paths = _write(tmp_path, to_megatron, scenarios, "args")
    rows = _parse(megatron_core, "megatron_core_parse.py", paths.values())
    for name, sc in scenarios.items():
        row, p, m = rows[str(paths[name])], sc.parallel, sc.model
        assert row["unknown_flags"] == [], name
        assert (row["tp"], row["pp"], row["cp"], row["ep"]) == (p.tp, p.pp, p.cp, p.ep), name
        assert row["sp"] == (p.sp and p.tp > 1) and row["vpp"] == (p.vpp if p.pp_schedule == "interleaved-1f1b" else None), name
        assert (row["layers"], row["hidden"], row["ffn"], row["heads"]) == (m.layers, m.hidden, m.ffn_hidden, m.heads), name
        assert row["config"] == ("MLATransformerConfig" if m.mla else "TransformerConfig"), name
        if not m.mla:
            assert (row["query_groups"], row["kv_channels"]) == (m.n_kv, m.d_head), name
        assert row["experts"] == (m.moe.experts if m.moe else None), name
        assert row["gated"] == (m.arch == "llama") and row["normalization"] == ("RMSNorm" if m.arch == "llama" else "LayerNorm"), name
        assert row["recompute"] == (None if sc.training.recompute == "none" else sc.training.recompute), name


def test_megatron_core_rejects_a_layout_that_does_not_divide_the_heads(tmp_path, megatron_core):
    """The check above can fail: 64 heads over TP 8 pass, 63 do not."""
    text = to_megatron(load_scenario(*CASES["70b_tp8_pp8_zero1"])).replace("--num-attention-heads 64", "--num-attention-heads 63")
    bad = tmp_path / "bad.args"
    bad.write_text(text)
    proc = run_python(megatron_core, [str(ROOT / "tests" / "frameworks" / "megatron_core_parse.py"), str(bad)])
    assert proc.returncode != 0 and "num_attention_heads" in proc.stderr

"""FP8 attention (Megatron's --fp8-dot-product-attention, Transformer Engine's FP8 fused attention through cuDNN): the
kernel at cuDNN's published FP8 / BF16 ratio, the casts around it, Q, K, V kept in FP8, and the combinations TE
refuses (`simulator/plan/fp8_attention.py`)."""
import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simulator.cost.costs import build_cost_model
from simulator.cost.kernel_data import load_data
from simulator.errors import ScenarioError
from simulator.plan.activations import layer_activation_terms
from simulator.plan.fp8_attention import CONCAT_BYTES, DEQUANTIZE_BYTES, QUANTIZE_BYTES, QUANTIZE_KERNELS
from simulator.plan.lower import build_plan, step_compute_ops
from simulator.plan.opgraph import shard
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping

ROOT = Path(__file__).resolve().parents[1]
BASE = {
    "name": "Llama 3.1 8B on 8 GB200, FP8 attention",
    "framework": {"name": "megatron", "distributed_optimizer": True, "fp8_recipe": "tensorwise",
                  "fp8_dot_product_attention": True},
    "model": "llama3-8b",
    "training": {"seq_len": 8192, "global_batch": 16, "micro_batch": 2, "precision": "fp8", "recompute": "none"},
    "cluster": {"topology": "gb200-nvl72", "nodes": 1, "gpus_per_node": 8},
    "parallel": {"dp": 8, "tp": 1, "pp": 1, "cp": 1, "zero": 1},
}


def _sc(**changes):
    m = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *path, key = dotted.split("__")
        d = m
        for p in path:
            d = d[p]
        d[key] = value
    return scenario_from_mapping(m)


def _ops(sc) -> dict:
    return {op.name: op for op in step_compute_ops(build_plan(sc))}


def test_without_the_option_attention_stays_bf16_under_fp8_and_fp4_linears():
    for precision in ("fp8", "fp4"):
        ops = _ops(_sc(framework__fp8_dot_product_attention=False, training__precision=precision))
        assert {o.dtype for o in ops.values() if o.kind == "attention"} == {"bf16"}
        assert not any(n.startswith("fp8_attn_") for n in ops)


def test_current_scaling_quantizes_qkv_and_do_and_keeps_o_and_the_gradients_in_bf16():
    sc = _sc()
    z, ops = shard(sc), _ops(sc)
    assert {o.dtype for o in ops.values() if o.kind == "attention"} == {"fp8"}
    qkv = z.T * (z.q + 2 * z.kv)
    q = ops["fp8_attn_quantize_qkv"]
    assert q.bytes == qkv * (CONCAT_BYTES + QUANTIZE_BYTES["tensorwise"]) and q.repeat == 1 + QUANTIZE_KERNELS["tensorwise"]
    assert ops["fp8_attn_quantize_do"].bytes == z.T * z.q * QUANTIZE_BYTES["tensorwise"]
    assert not any("dequantize" in n for n in ops)
    assert "fp8_attn_quantize_qkv_bwd" not in ops, "the forward's casts have no backward of their own"


def test_delayed_scaling_dequantizes_o_and_the_input_gradients():
    sc = _sc(framework__fp8_recipe="delayed")
    z, ops = shard(sc), _ops(sc)
    assert ops["fp8_attn_quantize_qkv"].bytes == z.T * (z.q + 2 * z.kv) * (CONCAT_BYTES + QUANTIZE_BYTES["delayed"])
    assert ops["fp8_attn_dequantize_o"].bytes == z.T * z.q * DEQUANTIZE_BYTES
    assert ops["fp8_attn_dequantize_dqkv"].bytes == z.T * (z.q + 2 * z.kv) * DEQUANTIZE_BYTES


def test_q_k_v_are_kept_in_fp8_unless_the_core_attention_is_recomputed():
    z = shard(_sc())
    on, off = (layer_activation_terms(_sc(framework__fp8_dot_product_attention=v), 0) for v in (True, False))
    assert on["q"] == z.T * z.q and off["q"] == 2 * z.T * z.q
    assert on["k"] * 2 == off["k"] and on["v"] * 2 == off["v"]
    sel = layer_activation_terms(_sc(training__recompute="selective"), 0)
    assert sel["q"] == 2 * z.T * z.q, "Megatron's core-attention checkpoint keeps its BF16 inputs"


def test_the_attention_kernels_run_at_the_published_ratio_and_the_step_gains_less_than_attention_takes():
    on, off = _sc(), _sc(framework__fp8_dot_product_attention=False)
    cm = build_cost_model(on)
    att = {n: o for n, o in _ops(on).items() if o.kind == "attention"}
    ref = {n: o for n, o in _ops(off).items() if o.kind == "attention"}
    for name, op in att.items():
        r = cm.fp8_attention_ratio(op)
        assert 0.5 < r < 2.0
        assert cm.compute_time(ref[name]) / cm.compute_time(op) == pytest.approx(r, rel=0.02)
    t_on, t_off = simulate(on, "analytic")["iteration_time_s"], simulate(off, "analytic")["iteration_time_s"]
    attention_s = sum(cm.compute_time(o) * n for o, n in step_compute_ops(build_plan(off)).items() if o.kind == "attention")
    assert t_on < t_off and t_off - t_on < attention_s


def test_the_ratio_is_taken_at_the_runs_cudnn_release_or_the_oldest_published():
    pairs = load_data()["gpus"]["B300 (GB300 superchip)"]["fp8_attention"]

    def ratio(version, phase="fwd"):
        p = next(p for p in pairs if p["cudnn_version"] == version and p["phase"] == phase and p["causal"] and p["seq"] == 8192)
        return p["tflops"] / p["bf16_tflops"]
    for version, want in (("9.13.1", "9.13.1"), ("9.19.1", "9.19.1"), ("9.20.0", "9.19.1"), (None, "9.22.0")):
        sc = _sc(cluster__topology="gb300-nvl72", cluster__cudnn_version=version) if version else _sc(cluster__topology="gb300-nvl72")
        cm = build_cost_model(sc)
        op = next(o for o in _ops(sc).values() if o.kind == "attention" and o.shape[5] == "fwd")
        assert cm.fp8_attention_ratio(op) == pytest.approx(ratio(want), rel=1e-6), version
    sc = _sc(cluster__cudnn_version="9.13.1")  # the GB200 has no 9.13.1 pair: its oldest, 9.19.1
    assert "FP8 attention (tensorwise scaling)" in build_cost_model(sc).kernel_source()
    assert "9.19.1 (cluster.cudnn_version 9.13.1 is older than any published)" in build_cost_model(sc).kernel_source()


@pytest.mark.parametrize("changes,key", [
    ({"training__precision": "bf16"}, "framework.fp8_dot_product_attention"),
    ({"framework__fp8_recipe": "mxfp8"}, "framework.dpa_fp8_recipe"),
    ({"training__attention": "eager"}, "framework.fp8_dot_product_attention"),
    ({"parallel__cp": 2, "parallel__dp": 4, "parallel__cp_comm": "allgather"}, "parallel.cp_comm"),
])
def test_combinations_transformer_engine_refuses_are_errors(changes, key):
    with pytest.raises(ScenarioError) as e:
        build_plan(_sc(**changes))
    assert e.value.path == key and "Traceback" not in str(e.value)


def test_the_error_for_block_scaled_linears_names_the_recipe_in_the_scenarios_words():
    with pytest.raises(ScenarioError, match="follow with MXFP8 \\(fp8_recipe mxfp8\\) linears"):
        build_plan(_sc(framework__fp8_recipe="mxfp8"))
    with pytest.raises(ScenarioError, match="NVFP4 \\(training.precision fp4\\)"):
        build_plan(_sc(training__precision="fp4"))


def test_mxfp8_or_nvfp4_linears_take_a_named_attention_recipe():
    for precision, recipe in (("fp8", "mxfp8"), ("fp4", None)):
        changes = {"training__precision": precision, "framework__dpa_fp8_recipe": "tensorwise"}
        if recipe:
            changes["framework__fp8_recipe"] = recipe
        assert "fp8_attn_quantize_qkv" in _ops(_sc(**changes))


def test_a_gpu_without_published_fp8_attention_is_a_clear_error(tmp_path):
    m = copy.deepcopy(BASE)
    m["cluster"] = {"topology": "pcie-l40s", "nodes": 1, "gpus_per_node": 8}
    path = tmp_path / "l40s.yaml"
    path.write_text(yaml.safe_dump(m))
    r = subprocess.run([sys.executable, "-m", "simulator", "run", str(path)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert "framework.fp8_dot_product_attention" in r.stderr and "Traceback" not in r.stderr
    assert "no published FP8 attention" in r.stderr


def test_the_megatron_export_asks_for_fp8_attention_and_names_its_recipe():
    from simulator.report.export import megatron_args, to_megatron
    sc = _sc(framework__dpa_fp8_recipe="tensorwise")
    assert "--fp8-dot-product-attention" in megatron_args(sc)
    assert "NVTE_DPA_FP8_RECIPE=Float8CurrentScaling " in to_megatron(sc)
    plain = _sc(framework__fp8_dot_product_attention=False)
    assert "--fp8-dot-product-attention" not in megatron_args(plain) and "NVTE_DPA" not in to_megatron(plain)


def _cp_comms(sc) -> tuple[list, list]:
    """One layer's CP collectives, forward and backward (`plan.layer_ops.layer_passes`)."""
    from simulator.plan.layer_ops import layer_passes
    lp = layer_passes(sc, 0)
    return ([n.op for n in lp.F if getattr(n.op, "dim", "") == "cp"],
            [n.op for n in lp.B if getattr(n.op, "dim", "") == "cp"])


def test_fp8_attention_passes_k_and_v_around_the_cp_ring_in_fp8_and_swaps_the_dkv_ring_for_one_all_to_all():
    """TransformerEngine v2.8 AttnFuncWithCPAndKVP2P under FP8: the K/V chunks travel as uint8 (1 B, half of BF16's),
    forward and backward; dK/dV partials are not passed around the ring but exchanged once, an all-to-all of cp
    FP8 chunks after the last step (`fp8_attention` module docstring)."""
    cp = {"parallel__cp": 4, "parallel__dp": 2, "training__seq_len": 16384}
    fp8, bf16 = _sc(**cp), _sc(framework__fp8_dot_product_attention=False, **cp)
    z = shard(fp8)
    chunk = 2 * z.T * z.kv  # elements of this rank's K and V chunk
    (f8_fwd, f8_bwd), (bf_fwd, bf_bwd) = _cp_comms(fp8), _cp_comms(bf16)
    assert [c.bytes for c in f8_fwd] == [chunk * 1] * 3 and [c.bytes for c in bf_fwd] == [chunk * 2] * 3
    assert [(c.collective, c.bytes) for c in bf_bwd] == [("send_recv", chunk * 2)] * 7  # 3 K/V + 4 dK/dV steps
    assert [(c.collective, c.bytes) for c in f8_bwd] == [("send_recv", chunk)] * 3 + [("all_to_all", 4 * chunk)]
    assert f8_bwd[-1].blocking, "the dK/dV exchange is waited for before the backward goes on"

"""`model.parallel_block`: attention and MLP side by side on one normalised input (GPT-J, PaLM, MegaScale's PTB)."""
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.errors import ScenarioError
from simulator.model import model_from_hf_config
from simulator.params import layer_params
from simulator.plan.activations import layer_activation_terms
from simulator.plan.flops import scenario_model_flops
from simulator.plan.layer_ops import layer_passes
from simulator.plan.opgraph import Comm, shard
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping

ROOT = Path(__file__).resolve().parents[1]


def _scenario(parallel_block: bool, sp: bool = True, tp: int = 4, arch: str = "gpt", **par):
    return scenario_from_mapping({
        "model": {"arch": arch, "layers": 4, "hidden": 1024, "heads": 16, "vocab": 32000, "positions": 2048,
                  "parallel_block": parallel_block},
        "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus_per_node": tp},
        "parallel": {"tp": tp, "sp": sp, "tp_linear_async": False, **par},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 4}})


def _tp_collectives(nodes) -> list[str]:
    return [n.op.collective for n in nodes if isinstance(n.op, Comm) and n.op.dim == "tp"]


def test_with_sequence_parallelism_a_parallel_block_gathers_and_reduce_scatters_once_each_way():
    seq, par = (layer_passes(_scenario(pb), 0) for pb in (False, True))
    assert sorted(_tp_collectives(seq.F)) == ["all_gather", "all_gather", "reduce_scatter", "reduce_scatter"]
    assert sorted(_tp_collectives(par.F)) == ["all_gather", "reduce_scatter"]
    # backward: the output gradient gathered once, the two branches' input gradients reduce-scattered once
    assert sorted(_tp_collectives(par.B)) == ["all_gather", "reduce_scatter"]


def test_without_sequence_parallelism_a_parallel_block_all_reduces_once_each_way():
    seq, par = (layer_passes(_scenario(pb, sp=False), 0) for pb in (False, True))
    assert _tp_collectives(seq.F) == ["all_reduce", "all_reduce"] and _tp_collectives(seq.B) == ["all_reduce", "all_reduce"]
    assert _tp_collectives(par.F) == ["all_reduce"] and _tp_collectives(par.B) == ["all_reduce"]


@pytest.mark.parametrize("par", [{}, {"tp_linear_async": True}, {"overlap_tp": True}])
def test_every_weight_gradient_is_still_computed(par):
    def wgrads(sc):
        p = layer_passes(sc, 0)
        return {n.op.name.split("_wgrad")[0] for n in p.B + p.W if "_wgrad" in n.op.name and not isinstance(n.op, Comm)}
    assert wgrads(_scenario(True, **par)) == wgrads(_scenario(False, **par))


def test_one_norm_and_one_shared_projection_input_are_stored_instead_of_two():
    seq, par = (layer_activation_terms(_scenario(pb), 0) for pb in (False, True))
    assert set(seq) - set(par) == {"norm2_input", "fc1_input", "attn_dropout_mask"}
    z = shard(_scenario(True))
    assert sum(seq.values()) - sum(par.values()) == pytest.approx(2 * z.ab * z.T_sp * z.h + z.T_sp * z.h)


def test_the_model_flops_are_the_same_and_the_norm_parameters_halve():
    seq, par = _scenario(False), _scenario(True)
    assert scenario_model_flops(seq)[0] == scenario_model_flops(par)[0]
    assert 2 * layer_params(par.model, 0).norms == layer_params(seq.model, 0).norms


def test_under_tensor_parallelism_the_step_is_faster_by_about_the_tp_communication_it_saves():
    seq, par = (simulate(_scenario(pb)) for pb in (False, True))
    saved = seq["iteration_time_s"] - par["iteration_time_s"]
    assert 0 < saved
    # half the layers' TP collectives; the embedding's and the head's are unchanged
    assert 0.5 < par["comm"]["tp"]["time_s"] / seq["comm"]["tp"]["time_s"] < 0.6


@pytest.mark.parametrize("par", [{}, {"sp": False}, {"overlap_tp": True}, {"tp_linear_async": True}])
def test_both_estimators_agree_on_a_parallel_block(par):
    sc = _scenario(True, **par)
    a = simulate(sc, estimator="analytic")["iteration_time_s"]
    e = simulate(sc, estimator="engine")["iteration_time_s"]
    assert a == pytest.approx(e, rel=1e-6)


@pytest.mark.parametrize("cfg, want", [
    ({"model_type": "gptj"}, True),
    ({"model_type": "gpt_neox"}, True),                      # GPTNeoXConfig's default
    ({"model_type": "gpt_neox", "use_parallel_residual": False}, False),
    ({"model_type": "falcon", "parallel_attn": False}, False),
    ({"model_type": "stablelm"}, False),
    ({"model_type": "cohere"}, True),
    ({"model_type": "llama"}, False),
])
def test_hugging_face_configs_say_whether_the_block_is_parallel(cfg, want):
    base = {"hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 1000}
    assert model_from_hf_config({**base, **cfg}).parallel_block is want


def test_a_parallel_block_with_moe_layers_is_refused_with_its_key():
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping({
            "model": {"arch": "llama", "layers": 2, "hidden": 256, "heads": 4, "vocab": 1000, "parallel_block": True,
                      "moe": {"experts": 4, "top_k": 2, "expert_ffn_hidden": 256}},
            "cluster": {"topology": "dgx-h100", "nodes": 1}, "training": {"seq_len": 128, "global_batch": 8}})
    assert e.value.path == "model.parallel_block"


def test_the_command_line_refuses_a_non_boolean_parallel_block(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: {arch: gpt, layers: 2, hidden: 256, heads: 4, vocab: 1000, parallel_block: sometimes}\n"
                 "cluster: {topology: dgx-h100, nodes: 1}\ntraining: {seq_len: 128, global_batch: 8}\n")
    r = subprocess.run([sys.executable, "-m", "simulator", "run", str(f)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "model.parallel_block" in r.stderr and "Traceback" not in r.stderr

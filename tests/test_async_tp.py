"""torchtitan's async TP as PyTorch's micro-pipeline TP pass runs it (simulator/plan/tp_overlap.py `micro_pipeline`,
the framework file's `tp_overlap` and `tp_wgrad_input`), against Megatron's userbuffers overlap."""
from dataclasses import replace

import pytest

from simulator.errors import ScenarioError
from simulator.evaluate.engine import simulate_engine
from simulator.frameworks.spec import Sourced, _check, load_framework
from simulator.plan.activations import layer_activation_terms
from simulator.plan.layer_ops import layer_passes
from simulator.plan.opgraph import Comm, Compute, Node
from simulator.plan.tp_overlap import chunk_tp_overlap
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping


def _gemm(name, m=4096, n=4096, k=4096):
    return Compute(name, "gemm", 2.0 * m * n * k, 3.0 * m * n * 2, "bf16", (m, n, k))


def _ag(name="ag", nbytes=8e6):
    return Comm(name, "tp", "all_gather", nbytes, blocking=False)


def test_micro_pipeline_all_gather_runs_the_local_chunk_first_and_moves_the_whole_gather_under_the_gemm():
    nodes = [Node(_gemm("prev")), Node(_ag(), (0,)), Node(_gemm("qkv"), (0,))]
    out = chunk_tp_overlap(nodes, 4, "micro_pipeline")
    assert [n.op.name for n in out] == ["prev", "ag_local_copy", "ag_pulls", "qkv_local", "qkv_chunks", "qkv_last"]
    copy, pulls, local, chunks, last = out[1:]
    assert copy.op.kind == "elementwise" and copy.op.bytes == pytest.approx(2 * 8e6 / 4), "the shard read and written once"
    assert pulls.op.bytes == 8e6 and not pulls.op.blocking, "every remote shard moves beside the GEMM"
    assert set(local.deps) == {0, 1}, "the local shard's GEMM waits for the local copy, not for a transfer"
    assert chunks.op.repeat == 2 and chunks.op.shape == (1024, 4096, 4096)
    assert set(last.deps) == {2, 4}, "the last chunk after the pulls"


def test_micro_pipeline_reduce_scatter_leaves_the_reduction_of_the_stacked_partials_exposed():
    nodes = [Node(_gemm("fc2")), Node(Comm("rs", "tp", "reduce_scatter", 8e6, blocking=False), (0,)),
             Node(Compute("residual", "elementwise", 0.0, 1e6, "bf16", (1,)), (0,))]
    out = chunk_tp_overlap(nodes, 4, "micro_pipeline")
    assert [n.op.name for n in out] == ["fc2_first", "rs_pulls", "fc2_chunks", "rs_reduce", "residual"]
    assert out[1].op.bytes == 8e6
    assert out[3].op.kind == "elementwise" and out[3].op.bytes == pytest.approx(8e6 * (1 + 1 / 4))
    assert set(out[3].deps) == {1, 2} and out[4].deps == (3,), "the residual reads the reduced output"


def test_micro_pipeline_leaves_an_unmatched_collective_blocking_its_next_compute():
    nodes = [Node(_gemm("prev")), Node(_ag(), (0,)), Node(Compute("rope", "elementwise", 0.0, 1e6, "bf16", (1,)), (0,))]
    out = chunk_tp_overlap(nodes, 4, "micro_pipeline")
    assert [n.op.name for n in out] == ["prev", "ag", "rope"]
    assert out[1].op.blocking and 1 in out[2].deps
    ub = chunk_tp_overlap(nodes, 4, "userbuffers")
    assert not ub[1].op.blocking and 1 not in ub[2].deps


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError):
        chunk_tp_overlap([Node(_gemm("a"))], 4, "nccl")


def _llama(framework, overlap_tp=True, recompute="full", tp=4):
    raw = {"name": "async tp", "framework": framework,
           "model": {"arch": "llama", "layers": 2, "hidden": 1024, "ffn_hidden": 4096, "heads": 8, "vocab": 1000},
           "training": {"seq_len": 2048, "global_batch": 2, "micro_batch": 1, "recompute": recompute},
           "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus_per_node": tp},
           "parallel": {"tp": tp, "sp": True, "overlap_tp": overlap_tp}}
    return scenario_from_mapping(raw)


def _names(nodes):
    return [n.op.name for n in nodes]


TORCHTITAN = {"name": "torchtitan", "compile": True}


def test_torchtitan_leaves_the_gated_mlp_dgrad_reduce_scatter_unfused_and_fuses_the_qkv_one():
    """w1's and w3's dgrads are summed before the reduce-scatter (no matmul produces its input); Q, K and V
    are one linear at the commit read."""
    b = layer_passes(_llama(TORCHTITAN), 0).B
    mlp = next(n for n in b if n.op.name.startswith("sp_allgather_mlp_bwd"))
    assert mlp.op.name == "sp_allgather_mlp_bwd" and mlp.op.blocking
    assert "sp_allgather_attn_bwd_reduce" in _names(b) and "sp_allgather_attn_bwd_pulls" in _names(b)
    ub = _names(layer_passes(_llama("megatron"), 0).B)
    assert "sp_allgather_mlp_bwd_rest" in ub, "Megatron's userbuffers overlap the dgrad reduce-scatter too"


def test_torchtitan_weight_gradients_read_the_saved_gathered_input_megatrons_re_gather_it():
    for overlap in (True, False):
        tt = layer_passes(_llama(TORCHTITAN, overlap_tp=overlap), 0).W
        assert not any(isinstance(n.op, Comm) for n in tt)
        mg = layer_passes(_llama("megatron", overlap_tp=overlap), 0)
        if overlap:  # userbuffers: in the weight-gradient pass
            assert any(isinstance(n.op, Comm) and n.op.name.startswith("sp_allgather") for n in mg.W)
        else:  # under the dgrad GEMM (parallel.tp_linear_async, Megatron's default)
            assert any(isinstance(n.op, Comm) and n.op.name.endswith("_regather_wgrad") for n in mg.B)


def test_torchtitan_without_recompute_stores_the_gathered_linear_inputs():
    tt = layer_activation_terms(_llama(TORCHTITAN, recompute="none"), 0)
    mg = layer_activation_terms(_llama("megatron", recompute="none"), 0)
    assert tt["qkv_input"] == pytest.approx(4 * mg["qkv_input"]) and tt["fc1_input"] == pytest.approx(4 * mg["fc1_input"])
    assert tt["norm1_input"] == mg["norm1_input"]


def test_torchtitan_async_tp_hides_less_than_userbuffers_on_the_same_layout():
    tt = simulate(_llama(TORCHTITAN), estimator="analytic")
    tt_off = simulate(_llama(TORCHTITAN, overlap_tp=False), estimator="analytic")
    assert tt["iteration_time_s"] < tt_off["iteration_time_s"]
    assert tt["comm"]["tp"]["exposed_s"] > 0.15 * tt_off["comm"]["tp"]["exposed_s"]


@pytest.mark.parametrize("recompute", ["full", "selective", "none"])
def test_analytic_and_engine_agree_on_torchtitan_async_tp(recompute):
    sc = _llama(TORCHTITAN, recompute=recompute)
    a = simulate(sc, estimator="analytic")
    e = simulate(sc, estimator="engine")
    assert a["iteration_time_s"] == pytest.approx(e["iteration_time_s"], rel=1e-9)
    assert a["comm"]["tp"]["exposed_s"] == pytest.approx(e["comm"]["tp"]["exposed_s"], rel=1e-9)


def test_a_framework_file_with_an_unknown_tp_overlap_is_refused():
    fw = replace(load_framework("torchtitan"), tp_overlap=Sourced(value="nccl", source="x"))
    with pytest.raises(ScenarioError) as e:
        _check(fw, "framework file torchtitan.yaml")
    assert e.value.path.endswith("tp_overlap")

"""The kernels `torch.autocast` adds around the fused-kernel plan (simulator/plan/autocast_ops.py): the fp32 residual
stream, one downcast per projection that reads a norm output and its upcast and sum in the backward, the weight
gradients' upcast. Seen in a traced H200 step of the 1B replay (validation/results/step_trace_h200.md)."""
from pathlib import Path

import pytest

from simulator.plan.autocast_ops import CAST_BYTES, GRAD_ADD_BYTES, RESIDUAL_ADD_BYTES
from simulator.plan.autocast_saved import projection_casts
from simulator.plan.layer_ops import layer_passes
from simulator.plan.opgraph import NORM_PASSES, shard
from simulator.plan.step_ops import head_backward, head_forward
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
REPLAY = ROOT / "scenarios" / "replay" / "gpu" / "1b-accum.yaml"


def _ops(nodes):
    return {n.op.name: n.op for n in nodes if hasattr(n.op, "kind")}


def test_each_projection_casts_the_fp32_norm_output_afresh_and_its_backward_upcasts_and_sums_the_gradients():
    """Llama's wq, wk, wv read one norm output (3 casts), w1 and w3 the other (2): 81 casts per micro-batch in the
    traced 1B step (16 layers x 5 and the head's one). Backward: as many upcasts and n - 1 fp32 sums."""
    sc = load_scenario(REPLAY)
    z = shard(sc)
    lp = layer_passes(sc, 0)
    f, b = _ops(lp.F), _ops(lp.B)
    act = z.T * z.h
    for reader, n in (("qkv", 3), ("fc1", 2)):
        assert projection_casts(sc.model, reader) == n
        cast = f[f"cast_{reader}_input"]
        assert (cast.repeat, cast.bytes) == (n, n * act * CAST_BYTES)
        up = b[f"upcast_{reader}_input_grad"]
        assert (up.repeat, up.bytes, up.dtype) == (n, n * act * CAST_BYTES, "bf16")
        assert b[f"sum_{reader}_input_grads"].bytes == (n - 1) * act * GRAD_ADD_BYTES
    names = [n.op.name for n in lp.F]
    assert names.index("norm1") < names.index("cast_qkv_input") < names.index("qkv")
    assert names.index("norm2") < names.index("cast_fc1_input") < names.index("fc1")
    bnames = [n.op.name for n in lp.B]
    assert bnames.index("qkv_dgrad") < bnames.index("upcast_qkv_input_grad") < bnames.index("norm1_bwd")
    head = _ops(head_forward(sc))
    assert head["cast_lm_head_input"].repeat == 1
    hb, _ = head_backward(sc)
    assert "upcast_lm_head_input_grad" in _ops(hb) and "sum_lm_head_input_grads" not in _ops(hb)


def test_norms_and_residual_adds_run_on_the_fp32_stream():
    """Norms read and write fp32 (twice the plan's bf16 bytes); the residual add reads fp32 + bf16 and writes fp32
    (10 B), its backward sums two fp32 gradients and casts one to bf16 (18 B)."""
    base = load_scenario(REPLAY, ["training.autocast=false"])
    sc = load_scenario(REPLAY)
    z = shard(sc)
    act = z.T_sp * z.h
    plain, auto = layer_passes(base, 0), layer_passes(sc, 0)
    f0, f1, b1 = _ops(plain.F), _ops(auto.F), _ops(auto.B)
    assert f1["norm1"].bytes == 2 * f0["norm1"].bytes == act * NORM_PASSES[0] * 4 and f1["norm1"].dtype == "fp32"
    assert b1["norm1_bwd"].bytes == act * NORM_PASSES[1] * 4
    assert f1["residual1"].bytes == act * RESIDUAL_ADD_BYTES[0] and b1["residual1_bwd"].bytes == act * RESIDUAL_ADD_BYTES[1]
    assert _ops(head_forward(sc))["final_norm"].dtype == "fp32"
    assert not any(n.op.name.startswith(("cast_", "upcast_", "sum_")) for n in plain.F + plain.B)


def test_a_full_recompute_replays_the_activation_casts_but_not_the_weight_casts():
    sc = load_scenario(REPLAY, ["training.recompute=full"])
    b = [n.op.name for n in layer_passes(sc, 0).B]
    assert b.count("cast_qkv_input") == 1 and b.count("cast_fc1_input") == 1
    assert "autocast_cast" not in b


def test_a_gelu_mlp_casts_its_input_once_and_a_parallel_block_casts_one_norm_output_for_all_five_projections():
    from types import SimpleNamespace
    gpt = SimpleNamespace(gated_mlp=False, parallel_block=False)
    assert (projection_casts(gpt, "qkv"), projection_casts(gpt, "fc1")) == (3, 1)
    parallel = SimpleNamespace(gated_mlp=True, parallel_block=True)
    assert projection_casts(parallel, "qkv") == 5


@pytest.mark.parametrize("mode", ["none", "full"])
def test_the_replay_step_prices_the_autocast_kernels_in_both_evaluators(mode):
    """The added kernels are in the plan both evaluators read: the engine and the analytic estimate agree."""
    from simulator.run import simulate
    sc = load_scenario(REPLAY, [f"training.recompute={mode}"])
    engine = simulate(sc)["iteration_time_s"]
    analytic = simulate(sc, estimator="analytic")["iteration_time_s"]
    assert engine == pytest.approx(analytic, rel=1e-6)


def test_gpt_residual_adds_keep_their_dropout_mask_on_the_fp32_stream():
    """GPT's bias-dropout-add also writes the byte mask (and its backward reads it): 10 + 1 and 18 + 1 B."""
    sc = load_scenario(REPLAY, ["model=gpt3-175b", "cluster.topology=hgx-h200"])
    z = shard(sc)
    lp = layer_passes(sc, 0)
    f, b = _ops(lp.F), _ops(lp.B)
    act = z.T_sp * z.h
    assert f["residual1"].bytes == act * (RESIDUAL_ADD_BYTES[0] + 1) and b["residual1_bwd"].bytes == act * (RESIDUAL_ADD_BYTES[1] + 1)
    assert f["cast_fc1_input"].repeat == 1  # GeLU MLP: one projection reads the norm output

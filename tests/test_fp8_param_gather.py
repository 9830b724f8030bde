"""Megatron's --fp8-param-gather (every Megatron-Bridge FP8 recipe sets it): the float8 linears' weights are kept
only in FP8 (no 16-bit copy beside the FP8 weight and its transpose), and with a per-tensor recipe the distributed
optimizer gathers them at 1 byte; MXFP8 parameters are gathered in bf16 through the gradient buffer."""
import copy

import pytest

from simulator.plan.float8_comm import fp8_param_gathers, fp8_params, fp8_weight_params
from simulator.plan.lower import build_plan
from simulator.plan.memory import buffer_bytes, static_bytes
from simulator.plan.sharded_params import rank_params
from simulator.scenario import scenario_from_mapping
from simulator.validate.corpus import corpus_runs

ROW = "corpus/megatron_bridge_25_09:llama3-8b-dgx-b200-8gpu-fp8-cs"  # distributed optimizer over 8 GPUs


def _scenario(recipe="tensorwise", gather=True, precision="fp8", zero=None):
    m = copy.deepcopy(next(c["mapping"] for c in corpus_runs()[0] if c["id"] == ROW))
    m["framework"]["fp8_recipe"] = recipe
    m["framework"]["fp8_param_gather"] = gather
    m["training"]["precision"] = precision
    if zero is not None:
        m["parallel"]["zero"] = zero
        m["framework"].pop("distributed_optimizer", None)
        m["framework"].pop("overlap_param_gather", None)
    return scenario_from_mapping(m)


def _gather_bytes(sc) -> float:
    """Bytes of the distributed optimizer's parameter all-gathers of stage 0 (one per bucket)."""
    return sum(b.comm.bytes for chunk in build_plan(sc).stages[0].dp.values() for b in chunk.params)


def test_the_corpus_rows_run_their_recipes_fp8_parameters():
    rows = [c for c in corpus_runs()[0] if c["release"].endswith("(Megatron-Bridge)")
            and c["mapping"]["training"]["precision"] == "fp8"]
    assert len(rows) >= 30
    assert all(c["mapping"]["framework"].get("fp8_param_gather") is True for c in rows)


def test_it_means_nothing_without_fp8_training():
    assert not fp8_params(_scenario(precision="bf16"))
    assert fp8_params(_scenario()) and not fp8_params(_scenario(gather=False))


def test_the_linears_16_bit_weights_are_gone_and_the_rest_stay():
    """The FP8 weight (1 B) counts as the weight, its transpose (1 B) stays in the FP8 cache; 2 B per linear weight
    element fewer on the rank."""
    on, off = _scenario(), _scenario(gather=False)
    fd, fe = fp8_weight_params(on, 0)
    rp = rank_params(on, 0)
    assert 0.8 * rp.total < fd + fe < rp.total  # the embedding, the head (BF16 in Megatron) and norms stay 16-bit
    assert static_bytes(off, 0)["weights"] - static_bytes(on, 0)["weights"] == pytest.approx(fd + fe)
    assert buffer_bytes(off, 0)["quantized_weight_cache"] - buffer_bytes(on, 0)["quantized_weight_cache"] == pytest.approx(fd + fe)
    assert static_bytes(on, 0)["grads"] == static_bytes(off, 0)["grads"]


def test_under_zero_3_the_shard_is_kept_in_fp8():
    on, off = _scenario(zero=3), _scenario(zero=3, gather=False)
    fd, _ = fp8_weight_params(on, 0)
    assert static_bytes(off, 0)["weights"] - static_bytes(on, 0)["weights"] == pytest.approx(fd * (2 - 1) / 8)


def test_a_per_tensor_recipe_gathers_fp8_and_mxfp8_gathers_bf16():
    assert fp8_param_gathers(_scenario("tensorwise")) and fp8_param_gathers(_scenario("delayed"))
    assert not fp8_param_gathers(_scenario("mxfp8")) and fp8_params(_scenario("mxfp8"))
    assert not fp8_param_gathers(_scenario(gather=False))


def test_the_distributed_optimizer_gathers_fp8_linears_at_one_byte():
    on, off, mx = _scenario(), _scenario(gather=False), _scenario("mxfp8")
    fd, fe = fp8_weight_params(on, 0)
    assert _gather_bytes(off) - _gather_bytes(on) == pytest.approx(fd + fe, rel=1e-6)  # 2 -> 1 byte each
    assert _gather_bytes(mx) == pytest.approx(_gather_bytes(off))


@pytest.mark.parametrize("recipe, extra", [("tensorwise", []), ("mxfp8", ["--reuse-grad-buf-for-mxfp8-param-ag"])])
def test_the_megatron_export_writes_the_recipe_and_the_fp8_parameters(recipe, extra):
    from simulator.report.export import megatron_args
    args = megatron_args(_scenario(recipe))
    assert args[args.index("--fp8-recipe") + 1] == recipe
    assert "--fp8-param-gather" in args and all(x in args for x in extra)
    off = megatron_args(_scenario(recipe, gather=False))
    assert "--fp8-param-gather" not in off and "--reuse-grad-buf-for-mxfp8-param-ag" not in off

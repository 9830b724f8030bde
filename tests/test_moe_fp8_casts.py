"""FP8 casts of a grouped expert GEMM by recipe (`plan/opgraph.py` Fp8Casts): Transformer Engine's delayed scaling
quantizes all experts' tensors in one multi-tensor kernel, its current scaling (Megatron's --fp8-recipe tensorwise,
Megatron-Bridge's FP8-CS) expert by expert, three kernels each (amax, scale, cast), reading each tensor twice."""
import copy

import pytest

from simulator.cost.costs import KERNEL_OVERHEAD_S, build_cost_model
from simulator.errors import ScenarioError
from simulator.plan.lower import build_plan, step_compute_ops
from simulator.plan.opgraph import FP8_CASTS, TE_CURRENT, TE_DELAYED, Compute, fp8_cast
from simulator.scenario import scenario_from_mapping
from simulator.validate.corpus import corpus_runs

ROW = "corpus/megatron_bridge_25_09:qwen3-30b-a3b-dgx-b200-8gpu-fp8-cs"
EXPERTS_PER_RANK = 16  # Qwen3 30B-A3B: 128 experts over EP 8


def _mapping(recipe: str | None) -> dict:
    m = copy.deepcopy(next(c["mapping"] for c in corpus_runs()[0] if c["id"] == ROW))
    m["framework"].pop("fp8_recipe", None)
    if recipe is not None:
        m["framework"]["fp8_recipe"] = recipe
    return m


def _scenario(recipe: str | None):
    return scenario_from_mapping(_mapping(recipe))


def _expert_gemm(sc) -> Compute:
    return next(op for op in step_compute_ops(build_plan(sc)) if op.name == "expert_fc1")


def test_megatron_runs_delayed_scaling_unless_the_scenario_says_tensorwise():
    assert _scenario(None).framework.fp8_recipe == "te_delayed"
    assert _scenario("delayed").framework.fp8_recipe == "te_delayed"
    assert _scenario("tensorwise").framework.fp8_recipe == "te_current"


def test_an_unknown_fp8_recipe_is_refused_with_the_allowed_values():
    with pytest.raises(ScenarioError) as e:
        _scenario("blockwise")
    assert "fp8_recipe" in e.value.path and "tensorwise" in str(e.value) and "mxfp8" in str(e.value)


def test_current_scaling_quantizes_each_expert_with_three_kernels():
    sc = _scenario("tensorwise")
    g = _expert_gemm(sc)
    assert g.repeat == EXPERTS_PER_RANK
    assert fp8_cast(sc, g).repeat == 3 * EXPERTS_PER_RANK


def test_delayed_scaling_quantizes_all_experts_in_one_kernel():
    sc = _scenario("delayed")
    assert fp8_cast(sc, _expert_gemm(sc)).repeat == 1


def test_the_backward_quantizes_the_output_gradient_the_same_way():
    ops = step_compute_ops(build_plan(_scenario("tensorwise")))
    bwd = next(op for op in ops if op.name == "fp8_cast_expert_fc1_bwd")
    assert bwd.repeat == 3 * EXPERTS_PER_RANK


def test_current_scaling_reads_each_tensor_twice():
    assert TE_CURRENT.per_element() - TE_DELAYED.per_element() == 2  # one more read of a bf16 element
    assert FP8_CASTS["te_current"] is TE_CURRENT


def test_an_expert_cast_costs_its_extra_launches_and_its_second_read():
    """The same op under both recipes: current scaling adds (3 x 16 - 1) launch gaps and 2 B per activation element."""
    cur, old = _scenario("tensorwise"), _scenario("delayed")
    cm = build_cost_model(cur)
    a, b = fp8_cast(cur, _expert_gemm(cur)), fp8_cast(old, _expert_gemm(old))
    extra_launches = (a.repeat - b.repeat) * KERNEL_OVERHEAD_S
    assert a.bytes > b.bytes
    assert cm.compute_time(a) - cm.compute_time(b) >= extra_launches

"""`training.optimizer: lamb`: Adam's states, and the trust ratio's two extra passes (apex FusedLAMB)."""
import pytest

from simulator.plan.memory import static_bytes
from simulator.plan.step_ops import LAMB_EXTRA_BYTES, optimizer_bytes_per_param, optimizer_op
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping


def _scenario(optimizer: str, zero: int = 1):
    return scenario_from_mapping({
        "model": {"arch": "llama", "layers": 4, "hidden": 1024, "heads": 16, "vocab": 32000},
        "cluster": {"topology": "dgx-h100", "nodes": 1},
        "parallel": {"dp": 8, "zero": zero},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "optimizer": optimizer}})


def test_lamb_keeps_the_same_states_as_adamw():
    adam, lamb = (static_bytes(_scenario(o), 0) for o in ("adamw", "lamb"))
    assert lamb == adam and adam["optimizer"] > 0


def test_lamb_moves_its_trust_ratio_passes_more_per_parameter():
    adam, lamb = _scenario("adamw"), _scenario("lamb")
    assert optimizer_bytes_per_param(lamb) - optimizer_bytes_per_param(adam) == LAMB_EXTRA_BYTES
    op = optimizer_op(lamb, 1e6)
    assert op.shape[1] == pytest.approx(optimizer_bytes_per_param(lamb) / optimizer_bytes_per_param(adam))


def test_lamb_costs_more_optimizer_time_and_nothing_else():
    adam, lamb = (simulate(_scenario(o)) for o in ("adamw", "lamb"))
    ratio = optimizer_bytes_per_param(_scenario("lamb")) / optimizer_bytes_per_param(_scenario("adamw"))
    assert lamb["breakdown"]["optimizer_s"] == pytest.approx(adam["breakdown"]["optimizer_s"] * ratio, rel=0.05)
    assert lamb["breakdown"]["compute_s"] == adam["breakdown"]["compute_s"]


def test_a_measured_adamw_curve_prices_lamb_by_its_bytes():
    from test_optimizer_impl import _step
    adam, lamb = _step("framework=megatron"), _step("framework=megatron", "training.optimizer=lamb")
    ratio = (4 * 4 + 3 * 4 + 2 + 4 + LAMB_EXTRA_BYTES) / (4 * 4 + 3 * 4 + 2 + 4)
    assert lamb == pytest.approx(adam * ratio)

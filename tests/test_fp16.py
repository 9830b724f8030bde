"""fp16 mixed precision (`training.precision: fp16`, what Megatron's `--fp16` and the 2021-2022 papers ran): priced
as bf16 (the same tensor-core peak on every GPU described here, the published points being BF16's) plus the dynamic
loss scaler's unscale-and-check pass over the fp32 gradients before the optimizer step (`step_ops.LOSS_SCALE_BYTES`);
the same memory; exported as `--fp16` / float16; refused by the replay executor, which has no loss scaler."""
from pathlib import Path

import pytest

from simulator.plan.flops import gemm_dtype, mfu_peak_flops
from simulator.plan.memory import memory_report
from simulator.plan.step_ops import LOSS_SCALE_BYTES, optimizer_bytes_per_param, optimizer_op
from simulator.report.export import to_megatron, to_torchtitan
from simulator.run import simulate
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
S70 = str(ROOT / "scenarios/70b_512gpu.yaml")


def _pair(*sets):
    return (load_scenario(S70, ["training.precision=bf16", *sets]), load_scenario(S70, ["training.precision=fp16", *sets]))


def test_fp16_gemms_are_priced_as_bf16_and_mfu_divides_by_the_same_peak():
    bf16, fp16 = _pair()
    assert gemm_dtype(fp16) == "bf16" and mfu_peak_flops(fp16) == mfu_peak_flops(bf16)
    assert fp16.topology.gpu.peak_tflops["fp16"] == fp16.topology.gpu.peak_tflops["bf16"]


def test_the_loss_scaler_adds_one_read_and_write_of_the_fp32_gradients_to_the_step():
    bf16, fp16 = _pair()
    assert optimizer_bytes_per_param(fp16) - optimizer_bytes_per_param(bf16) == LOSS_SCALE_BYTES == 8
    op = optimizer_op(fp16, 1e9)
    assert op.shape[1] == pytest.approx(optimizer_bytes_per_param(fp16) / optimizer_bytes_per_param(bf16))


@pytest.mark.parametrize("estimator", ["analytic", "engine"])
def test_an_fp16_step_is_the_bf16_step_and_its_unscale_pass(estimator):
    bf16, fp16 = _pair()
    a, b = simulate(bf16, estimator), simulate(fp16, estimator)
    extra = b["breakdown"]["optimizer_s"] - a["breakdown"]["optimizer_s"]
    assert extra > 0 and b["iteration_time_s"] == pytest.approx(a["iteration_time_s"] + extra, rel=1e-6)
    assert b["breakdown"]["compute_s"] == pytest.approx(a["breakdown"]["compute_s"], rel=1e-9)
    assert memory_report(fp16).peak_gib == pytest.approx(memory_report(bf16).peak_gib, rel=1e-9)


def test_fp16_exports_as_megatrons_fp16_flag_and_torchtitans_float16():
    _, fp16 = _pair()
    args = to_megatron(fp16)
    assert "--fp16" in args and "--bf16" not in args
    tt = load_scenario(S70, ["training.precision=fp16", "framework=torchtitan"])
    assert "float16" in str(to_torchtitan(tt))


def test_fp16_gradients_are_two_bytes():
    sc = load_scenario(S70, ["training.precision=fp16", "training.grad_dtype=fp16"])
    assert sc.training.grad_bytes == 2


def test_the_replay_executor_refuses_fp16_it_has_no_loss_scaler():
    from calibrate.replay.plan import ReplayOptions, plan_replay
    from simulator.errors import ScenarioError
    sc = load_scenario(str(ROOT / "scenarios/replay/dp2.yaml"), ["training.precision=fp16"])
    with pytest.raises(ScenarioError) as e:
        plan_replay(sc, ReplayOptions(steps=2, warmup=1, device="cpu"))
    assert e.value.path == "training.precision" and "fp16" in e.value.problem

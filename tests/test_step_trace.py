"""validation/step_trace.py: a traced step's kernels by class (GEMM, attention, optimizer, memory-bound), the GPU's
busy time and the step's span, beside the simulator's price of the same step by op kind."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import step_trace  # noqa: E402

H200_PROFILE = ROOT / "calibrate" / "profiles" / "h200-sxm-measured.json"
SCENARIO = ROOT / "scenarios" / "replay" / "gpu" / "1b-accum.yaml"


@pytest.mark.parametrize("name, cls", [
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1", "gemm"),
    ("cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_bf16_bf16_128x256x64", "gemm"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "attention"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>", "attention"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "memory-bound"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "memory-bound"),
])
def test_kernels_are_classed_by_name(name, cls):
    assert step_trace.kernel_class(name) == cls


def trace():
    """Three kernels in the step (two overlapping), one launched inside the optimizer's range (through the driver API)."""
    return {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "Optimizer.step#AdamW.step", "ts": 1000.0, "dur": 1000.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 100.0, "dur": 5.0, "args": {"correlation": 1}},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "ts": 1500.0, "dur": 5.0, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "nvjet_tst_128x256", "ts": 200.0, "dur": 300.0, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "ts": 400.0, "dur": 200.0},
        {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "ts": 1600.0, "dur": 100.0,
         "args": {"correlation": 7}},
    ]}


def test_a_traced_step_sums_kernel_time_by_class_and_its_busy_time_and_span():
    k = step_trace.traced_kernels(trace())
    assert k.kernels == 3
    assert k.by_class_s == pytest.approx({"gemm": 300e-6, "attention": 0.0, "memory-bound": 200e-6, "optimizer": 100e-6})
    assert k.busy_s == pytest.approx(500e-6)  # 200-600 and 1600-1700: the overlap counted once
    assert k.span_s == pytest.approx(1500e-6)


def test_the_simulators_side_sums_to_its_step(tmp_path, capsys):
    """The predicted classes add up to the step the simulator reports (one GPU, nothing exposed), and the command
    prints a row per class from a trace file."""
    from calibrate.replay.plan import as_replayed
    from simulator.run import simulate
    from simulator.scenario import load_scenario
    sets = ["cluster.topology=hgx-h200", f"cluster.profile={H200_PROFILE}"]
    predicted = step_trace.predicted_by_class(load_scenario(SCENARIO, sets))
    step = simulate(as_replayed(load_scenario(SCENARIO, sets)))["iteration_time_s"]
    assert sum(predicted.values()) == pytest.approx(step, rel=1e-6)
    assert min(predicted.values()) > 0
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace()))
    assert step_trace.main([str(path), "--scenario", str(SCENARIO), "--profile", str(H200_PROFILE)]) == 0
    out = capsys.readouterr().out
    assert all(c in out for c in step_trace.CLASSES) and "GPU busy 0.5 ms of a 1.5 ms span" in out

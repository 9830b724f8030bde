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


def test_kernels_are_grouped_by_the_autograd_node_or_forward_op_that_launched_them():
    """Forward: the outermost ATen op open at the launch; backward: the autograd node; the optimizer's range first.
    A kernel whose launch is not in the trace counts as `other`."""
    def op(name, ts, dur, tid=1):
        return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": tid}

    def launch(ts, corr, tid=1):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 1.0, "tid": tid,
                "args": {"correlation": corr}}

    def kernel(name, dur, corr):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": 0.0, "dur": dur, "args": {"correlation": corr}}
    events = [
        op("aten::linear", 0.0, 50.0), op("aten::to", 5.0, 10.0), launch(6.0, 1), op("aten::mm", 20.0, 20.0),
        launch(21.0, 2),
        op("autograd::engine::evaluate_function: ToCopyBackward0", 100.0, 30.0), op("aten::to", 101.0, 20.0),
        launch(102.0, 3),
        op("Optimizer.step#AdamW.step", 200.0, 100.0), op("aten::add_", 210.0, 5.0), launch(211.0, 4),
        op("aten::add", 400.0, 5.0, tid=2), launch(401.0, 5, tid=2),
        kernel("bfloat16_copy_kernel", 10.0, 1), kernel("nvjet_tst_NNT", 100.0, 2), kernel("direct_copy_kernel", 20.0, 3),
        kernel("multi_tensor_apply_kernel", 30.0, 4), kernel("CUDAFunctor_add", 5.0, 5), kernel("elementwise", 7.0, 99),
    ]
    assert step_trace.launchers(events) == {1: "aten::linear", 2: "aten::linear", 3: "ToCopyBackward0",
                                           4: "Optimizer.step", 5: "aten::add"}
    groups = {(g["launcher"], g["class"]): (g["kernels"], g["traced_s"]) for g in step_trace.by_launcher(events)}
    assert groups == {("aten::linear", "gemm"): (1, pytest.approx(100e-6)),
                      ("aten::linear", "memory-bound"): (1, pytest.approx(10e-6)),
                      ("ToCopyBackward0", "memory-bound"): (1, pytest.approx(20e-6)),
                      ("Optimizer.step", "memory-bound"): (1, pytest.approx(30e-6)),
                      ("aten::add", "memory-bound"): (1, pytest.approx(5e-6)),
                      ("other", "memory-bound"): (1, pytest.approx(7e-6))}


def test_kernels_an_sdpa_call_launches_are_attention_whatever_their_name():
    """calibrate times the whole SDPA call: the memory-bound helper kernels of its backward (cuDNN's dO.O pass, the
    dQ accumulator) belong to attention, as do the forward's; a copy in another node stays memory-bound."""
    def op(name, ts, dur):
        return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": 1}

    def launch(ts, corr):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 1.0, "tid": 1,
                "args": {"correlation": corr}}

    def kernel(name, ts, dur, corr):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"correlation": corr}}
    events = [
        op("aten::scaled_dot_product_attention", 0.0, 10.0), launch(1.0, 1),
        op("autograd::engine::evaluate_function: ScaledDotProductCudnnAttentionBackward0", 20.0, 10.0),
        launch(21.0, 2), launch(22.0, 3),
        op("autograd::engine::evaluate_function: ToCopyBackward0", 40.0, 5.0), launch(41.0, 4),
        kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 100.0, 50.0, 1),
        kernel("cudnn_generated_fort_native_sdpa_sm90_flash_bprop", 200.0, 100.0, 2),
        kernel("vectorized_elementwise_kernel", 300.0, 20.0, 3),
        kernel("direct_copy_kernel", 400.0, 10.0, 4),
    ]
    k = step_trace.traced_kernels({"traceEvents": events})
    assert k.by_class_s == pytest.approx({"gemm": 0.0, "attention": 170e-6, "memory-bound": 10e-6, "optimizer": 0.0})

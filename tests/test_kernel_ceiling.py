"""A layout can never beat the kernels it is made of (issue 38's kernel-ceiling bar), and FP8's end-to-end gain over
BF16 is bounded by the GEMM share of the step.

Ceiling: the step's compute runs on one stream per rank, so the step takes at least each pipeline stage's kernel
time K_s, and the model FLOPs are at most what the ranks execute. Hence MFU <= sum_s F_s / (sum_s K_s x peak): the
FLOP-weighted efficiency of the step's GEMM and attention kernels at their shapes, from the cost model's own op
times (`step_compute_ops`: every op of one rank per stage, with its count)."""
import glob
import random

import pytest

from simulator.cost.costs import build_cost_model
from simulator.plan.flops import mfu_peak_flops, model_flops_per_step
from simulator.plan.lower import build_plan, step_compute_ops
from simulator.run import simulate
from simulator.scenario import load_scenario
from simulator.sweep.search import sweep_base
from simulator.sweep.space import enumerate_layouts
from simulator.sweep.tasks import candidate_scenario

SCENARIOS = sorted(glob.glob("scenarios/*.yaml"))
SWEEP_SAMPLE = 3
"""Sweep layouts sampled per shipped scenario (seeded), beside the scenario's own layout."""


def kernel_ceiling(sc) -> tuple[float, float, float]:
    """(ceiling, executed kernel FLOPs per replica, model FLOPs per replica) of one step: the ceiling is
    sum of GEMM and attention FLOPs / (sum of their times x the MFU peak), over one rank per stage."""
    cost = build_cost_model(sc)
    flops = secs = 0.0
    for op, n in step_compute_ops(build_plan(sc)).items():
        if getattr(op, "kind", "") in ("gemm", "attention"):
            flops += op.flops * n
            secs += cost.compute_time(op) * n
    p = sc.parallel
    model = model_flops_per_step(sc.model, sc.training.seq_len, sc.training.global_batch) / (sc.gpus // (p.tp * p.pp * p.cp)) / (p.tp * p.cp)
    return flops / (secs * mfu_peak_flops(sc)), flops, model


def _layouts():
    rng = random.Random(38)
    out = []
    for path in SCENARIOS:
        sc = load_scenario(path)
        out.append(pytest.param(path, None, id=path.split("/")[-1]))
        lays = enumerate_layouts(sc)
        for i, lay in enumerate(rng.sample(lays, min(SWEEP_SAMPLE, len(lays)))):
            out.append(pytest.param(path, lay, id=f"{path.split('/')[-1]}-sweep{i}"))
    return out


@pytest.mark.parametrize("path,layout", _layouts())
def test_reported_mfu_never_exceeds_the_flop_weighted_efficiency_of_its_kernels(path, layout):
    sc = load_scenario(path)
    if layout is not None:
        _, raw, base_dir = sweep_base(path)
        sc = candidate_scenario(raw, base_dir, layout)
    ceiling, executed, model = kernel_ceiling(sc)
    assert model <= executed * (1 + 1e-9), "the model FLOPs are executed by the kernels counted"
    mfu = simulate(sc, "analytic")["mfu"]
    assert 0 < mfu <= ceiling * (1 + 1e-9), (mfu, ceiling)


def _gemm_share_and_ratio(sc_bf16, sc_fp8) -> tuple[float, float]:
    """(share of the BF16 step's compute time in GEMMs, BF16 / FP8 time of those GEMMs), from the cost model's op
    times, over one rank per stage."""
    def gemm_s(sc):
        cost = build_cost_model(sc)
        g = c = 0.0
        for op, n in step_compute_ops(build_plan(sc)).items():
            t = cost.compute_time(op) * n
            c += t
            g += t if op.kind == "gemm" else 0.0
        return g, c
    g16, c16 = gemm_s(sc_bf16)
    g8, _ = gemm_s(sc_fp8)
    return g16 / c16, g16 / g8


@pytest.mark.parametrize("path", SCENARIOS)
def test_fp8_gain_over_bf16_is_bounded_by_the_gemm_share_of_the_step(path):
    """Amdahl: only the GEMMs speed up, so step_bf16 / step_fp8 <= 1 / (1 - share x (1 - 1/ratio)), with share
    the GEMMs' part of the BF16 step's compute and ratio their BF16/FP8 time. The casts FP8 adds only lower it."""
    sc16 = load_scenario(path, ["training.precision=bf16"])
    sc8 = load_scenario(path, ["training.precision=fp8"])
    share, ratio = _gemm_share_and_ratio(sc16, sc8)
    bound = 1 / (1 - share * (1 - 1 / ratio))
    gain = simulate(sc16, "analytic")["iteration_time_s"] / simulate(sc8, "analytic")["iteration_time_s"]
    assert 1 < ratio and gain <= bound * (1 + 1e-6), (gain, bound, share, ratio)


def test_fp8_adds_a_quantization_before_every_fp8_gemm_and_one_for_its_gradient():
    from simulator.plan.layer_ops import layer_passes
    from simulator.plan.opgraph import Compute
    sc = load_scenario("scenarios/8b_8gpu.yaml", ["training.precision=fp8"])
    lp = layer_passes(sc, 0)
    fwd = [n.op for n in lp.F if isinstance(n.op, Compute)]
    gemms = [op.name for op in fwd if op.kind == "gemm"]
    casts = [op.name for op in fwd if op.name.startswith("fp8_cast_")]
    assert casts == ["fp8_cast_" + g for g in gemms]
    # the op-level SAC replay (tag R: torchtitan's selective recompute) re-runs the forward's casts; not counted here
    bwd = [n.op.name for n in lp.B + lp.W
           if isinstance(n.op, Compute) and n.op.name.startswith("fp8_cast_") and n.tag != "R"]
    assert sorted(bwd) == sorted(c + "_bwd" for c in casts)
    bf16 = layer_passes(load_scenario("scenarios/8b_8gpu.yaml", ["training.precision=bf16"]), 0)
    assert not any(isinstance(n.op, Compute) and n.op.name.startswith("fp8_cast_") for n in bf16.F + bf16.B)


def test_torchao_dynamic_scaling_moves_more_bytes_per_cast_than_te_delayed_and_recasts_weights_every_micro_batch():
    """torchtitan's float8 (torchao, dynamic tensorwise): read 2 x 2 B, write 1, a transposed copy later (2) = 7 B per
    element, the weight every micro-batch; TE's delayed scaling (Megatron's default): read 2, write fp8 + transpose
    = 4 B, the weight once per step."""
    from simulator.plan.layer_ops import layer_forward
    from simulator.plan.opgraph import shard
    def qkv_cast(framework):  # the recipe's cast, before plan/fusion.py says how torchtitan's kernels run it
        sc = load_scenario("scenarios/8b_8gpu.yaml", ["training.precision=fp8", f"framework={framework}"])
        return sc, next(n.op for n in layer_forward(sc, 0, shard(sc)).nodes if n.op.name == "fp8_cast_qkv")
    (sc, cur), (_, dly) = qkv_cast("torchtitan"), qkv_cast("megatron")
    act, weight, _, per_elt = cur.shape
    assert per_elt == 7 and dly.shape[3] == 4
    assert cur.bytes == 7 * (act + weight)
    assert dly.bytes == pytest.approx(4 * (act + weight / sc.micro_batches))

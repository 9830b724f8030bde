"""A memory-bound profile point prices exactly the op the simulator emits for the same tensor as PyTorch runs it:
the probe's byte count (calibrate/probes/memory.py `conventional_bytes`) is the simulator's for the op's eager
form (simulator/plan/fusion.py `eager_op`: RoPE and SwiGLU as their chains of ATen kernels, the rest as the plan
counts them), op by op, for a scenario's whole step. Measured on an H200, a cross-entropy counted at 12 B per
logit by the probe and 38 by the simulator priced the 1B replay's loss three times too slow; RoPE counted at its
fused 4 B per element priced torchtitan's eager RoPE (20 B) five times its measured time."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

from calibrate.plan import elementwise_spec, scenario_compute_ops  # noqa: E402
from calibrate.probes.memory import conventional_bytes  # noqa: E402
from simulator.cost.profile_schema import elementwise_phase  # noqa: E402
from simulator.plan.autocast_ops import RESIDUAL_NAMES  # noqa: E402
from simulator.plan.fusion import eager_op, runs_eager_kernels  # noqa: E402
from simulator.plan.opgraph import CROSS_ENTROPY_BYTES  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BANDWIDTH_KINDS = ("copy", "upcast")
"""Priced by bytes on the device-copy curve, whatever their element count (casts, gradient accumulation)."""
MIXED_DTYPE_OPS = RESIDUAL_NAMES
"""Under autocast the residual add reads the fp32 stream and a bf16 projection output (10 B per element) and its
backward also casts a gradient to bf16 (18 B): the probe's same-dtype fp32 add (12 B) prices them by bytes on its
curve (`autocast_ops.RESIDUAL_ADD_BYTES`)."""


@pytest.mark.parametrize("scenario", ["scenarios/1b_1gpu.yaml", "scenarios/70b_512gpu.yaml", "scenarios/8b_8gpu.yaml",
                                      "scenarios/mixtral_ep.yaml", "scenarios/replay/gpu/1b-accum.yaml"])
def test_the_probe_counts_the_bytes_the_simulator_counts_for_every_memory_bound_op(scenario):
    sc = load_scenario(ROOT / scenario)
    checked = 0
    for op in scenario_compute_ops(sc):
        if op.kind != "elementwise":
            continue
        spec = elementwise_spec(sc, op)
        if spec.op in BANDWIDTH_KINDS or (sc.training.autocast and op.name.removesuffix("_bwd") in MIXED_DTYPE_OPS):
            continue
        eager = op.bytes if runs_eager_kernels(sc) else eager_op(op).bytes  # an eager plan holds the chains already
        assert conventional_bytes(spec, elementwise_phase(op.name)) == pytest.approx(eager, rel=1e-6), op.name
        checked += 1
    assert checked >= 10


def test_a_fused_rope_costs_the_eager_chains_time_on_the_same_tensor_times_its_share_of_the_bytes():
    """torchtitan without compile runs the probe's chain (20 B per element): its RoPE costs the measured time;
    Megatron's fused kernel on the same tensor moves 4 of the chain's 20 B at the bandwidth the chain reached."""
    from simulator.cost.costs import build_cost_model  # noqa: PLC0415
    profile = ROOT / "calibrate" / "profiles" / "h200-sxm-measured.json"
    priced = {}
    for fw in ("torchtitan", "megatron"):
        sc = load_scenario(ROOT / "scenarios" / "1b_1gpu.yaml", [f"framework={fw}", "cluster.topology=hgx-h200",
                                                                 f"cluster.profile={profile}"])
        rope = next(o for o in scenario_compute_ops(sc) if o.name == "rope")
        priced[fw] = (rope, build_cost_model(sc).compute_time(rope))
    (eager, t_eager), (fused, t_fused) = priced["torchtitan"], priced["megatron"]
    assert eager.bytes == pytest.approx(5 * fused.bytes)
    assert t_fused == pytest.approx(t_eager / 5, rel=1e-9)

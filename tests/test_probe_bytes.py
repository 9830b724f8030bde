"""A memory-bound profile point prices exactly the op the simulator emits for the same tensor: the probe's
byte count (calibrate/probes/memory.py `conventional_bytes`) is the simulator's (simulator.plan.opgraph), op
by op, for a scenario's whole step. Measured on an H200, a cross-entropy counted at 12 B per logit by the
probe and 38 by the simulator priced the 1B replay's loss three times too slow."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

from calibrate.plan import elementwise_spec, scenario_compute_ops  # noqa: E402
from calibrate.probes.memory import conventional_bytes  # noqa: E402
from simulator.cost.profile_schema import elementwise_phase  # noqa: E402
from simulator.plan.opgraph import CROSS_ENTROPY_BYTES  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BANDWIDTH_KINDS = ("copy",)
"""Priced by bytes on the device-copy curve, whatever their element count (casts, gradient accumulation)."""


@pytest.mark.parametrize("scenario", ["scenarios/1b_1gpu.yaml", "scenarios/70b_512gpu.yaml",
                                      "scenarios/mixtral_ep.yaml", "scenarios/replay/gpu/1b-accum.yaml"])
def test_the_probe_counts_the_bytes_the_simulator_counts_for_every_memory_bound_op(scenario):
    sc = load_scenario(ROOT / scenario)
    checked = 0
    for op in scenario_compute_ops(sc):
        if op.kind != "elementwise":
            continue
        spec = elementwise_spec(sc, op)
        if spec.op in BANDWIDTH_KINDS:
            continue
        assert conventional_bytes(spec, elementwise_phase(op.name)) == pytest.approx(op.bytes, rel=1e-6), op.name
        checked += 1
    assert checked >= 10


def test_the_cross_entropy_probe_counts_the_simulators_bytes_per_logit():
    from calibrate.plan import ElementwiseSpec  # noqa: PLC0415
    spec = ElementwiseSpec(op="cross_entropy", dtype="bf16", elements=1 << 20, width=1 << 14)
    assert conventional_bytes(spec, "fwd") == (1 << 20) * CROSS_ENTROPY_BYTES[0]
    assert conventional_bytes(spec, "bwd") == (1 << 20) * CROSS_ENTROPY_BYTES[1]

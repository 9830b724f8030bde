"""Block recomputation (`training.recompute_layers`, Megatron's --recompute-method block
--recompute-num-layers N): the first N layers of each model chunk are recomputed in full, the rest store
everything. Memory and step time lie between no recompute and full recompute and move monotonically in N."""
import pytest

from simulator.errors import ScenarioError
from simulator.plan import memory as mem
from simulator.plan.layout import layer_recompute
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping


def llama8b(recompute="none", layers=None, pp=1, vpp=1):
    """Llama-3-8B (32 layers) on one DGX-H100, FP8, as the 8B FP8-CS perf recipe runs it (TP1 PP1 CP1)."""
    tr = {"seq_len": 8192, "global_batch": 16, "micro_batch": 1, "precision": "fp8", "recompute": recompute}
    if layers is not None:
        tr["recompute_layers"] = layers
    par = {"tp": 1, "pp": pp, "zero": 1}
    if vpp > 1:
        par.update(pp_schedule="interleaved-1f1b", vpp=vpp)
    return scenario_from_mapping({"model": "llama3-8b", "training": tr,
                                  "cluster": {"topology": "dgx-h100", "nodes": 1}, "parallel": par})


def peak_gib(sc) -> float:
    return mem.memory_report(sc).peak_gib


def step_s(sc) -> float:
    return simulate(sc, estimator="analytic")["iteration_time_s"]


def test_only_the_first_n_layers_of_each_chunk_are_recomputed():
    sc = llama8b("full", 2, pp=2, vpp=2)  # 4 chunks of 8 layers
    full = [layer_recompute(sc, i) == "full" for i in range(32)]
    assert [i for i, f in enumerate(full) if f] == [0, 1, 8, 9, 16, 17, 24, 25]


def test_null_recomputes_every_layer_and_zero_none():
    assert all(layer_recompute(llama8b("full"), i) == "full" for i in range(32))
    assert all(layer_recompute(llama8b("full", 0), i) == "none" for i in range(32))


def test_zero_layers_is_no_recompute_and_all_layers_is_full():
    assert peak_gib(llama8b("full", 0)) == pytest.approx(peak_gib(llama8b("none")), rel=1e-12)
    assert peak_gib(llama8b("full", 32)) == pytest.approx(peak_gib(llama8b("full")), rel=1e-12)
    assert step_s(llama8b("full", 0)) == pytest.approx(step_s(llama8b("none")), rel=1e-9)
    assert step_s(llama8b("full", 32)) == pytest.approx(step_s(llama8b("full")), rel=1e-9)


def test_memory_falls_and_time_rises_with_more_recomputed_layers():
    ns = (0, 5, 16, 32)
    peaks = [peak_gib(llama8b("full", n)) for n in ns]
    steps = [step_s(llama8b("full", n)) for n in ns]
    assert all(a > b for a, b in zip(peaks, peaks[1:])), peaks
    assert all(a < b for a, b in zip(steps, steps[1:])), steps


def test_five_layers_lie_between_none_and_full():
    none, five, full = (llama8b("none"), llama8b("full", 5), llama8b("full"))
    assert peak_gib(full) < peak_gib(five) < peak_gib(none)
    assert step_s(none) < step_s(five) < step_s(full)


def test_recomputed_layers_store_only_their_input():
    sc = llama8b("full", 5)
    assert mem.activation_bytes_per_layer(sc, 4) == mem.activation_bytes_per_layer(llama8b("full"), 4)
    assert mem.activation_bytes_per_layer(sc, 5) == mem.activation_bytes_per_layer(llama8b("none"), 5)


def test_recompute_layers_without_full_recompute_is_an_error():
    with pytest.raises(ScenarioError, match="training.recompute_layers"):
        llama8b("selective", 5)


def test_negative_recompute_layers_is_an_error():
    with pytest.raises(ScenarioError, match="recompute_layers"):
        llama8b("full", -1)


def test_megatron_export_writes_block_recompute_of_n_layers():
    from simulator.report.export import megatron_args
    args = megatron_args(llama8b("full", 5))
    i = args.index("--recompute-method")
    assert args[i:i + 4] == ["--recompute-method", "block", "--recompute-num-layers", "5"]


def test_the_sweep_tries_whole_model_recompute_modes_only():
    """A sweep layout sets recompute none/selective/full for every layer: a base scenario's recompute_layers
    would be an error beside none/selective, so each layout resets it."""
    from simulator.sweep.space import layout_of
    assert layout_of(llama8b("full", 5)).overrides()["training"]["recompute_layers"] is None

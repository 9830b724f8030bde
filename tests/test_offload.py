"""Activation offloading (`training.offload_layers`, Megatron's --cpu-offloading-num-layers through Transformer Engine):
which bytes leave the GPU, when each copy is issued and waited for (TE's v1 window map, v2's deadlines), what the step
pays when the host link is slow, and what Megatron refuses."""
import copy
import json
import re
from pathlib import Path

import pytest

from simulator.cost.costs import build_cost_model
from simulator.errors import ScenarioError
from simulator.evaluate.engine import run_engine, simulate_engine
from simulator.evaluate.engine.trace import rank_memory_events
from simulator.plan.activations import activation_bytes_per_layer, layer_activation_terms
from simulator.plan.memory import chunk_activation_bytes, memory_report
from simulator.plan.memory_timeline import peak_bytes
from simulator.plan.offload import V1_KEPT, V2_MIN_ELEMENTS, moved_bytes, moved_terms, offload_plan, v1_windows
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping

LAYERS = 8
ROOT = Path(__file__).resolve().parent.parent


def _mapping(n: int = 4, v1: bool = False, topology="gb200-nvl72", moe: bool = False, **training) -> dict:
    """An 8-layer Llama-shaped model on 8 GPUs under Megatron FSDP, `n` layers offloaded."""
    model = {"arch": "llama", "layers": LAYERS, "hidden": 4096, "ffn_hidden": 14336, "heads": 32, "kv_heads": 8,
             "vocab": 32000}
    if moe:
        model["moe"] = {"experts": 8, "top_k": 2, "expert_ffn_hidden": 4096}
    fw = {"name": "megatron", "overlap_grad_reduce": True}
    if n:
        fw["cpu_offloading_num_layers"] = n
    if v1:
        fw["cpu_offload_v1"] = True
    return {"name": "offload test", "framework": fw, "model": model,
            "training": {"seq_len": 4096, "global_batch": 16, "micro_batch": 2, **training},
            "cluster": {"topology": topology, "nodes": 1, "gpus_per_node": 8},
            "parallel": {"dp": 8, "zero": 3}}


def _sc(*a, **k):
    return scenario_from_mapping(_mapping(*a, **k))


def _host_link(tmp_path, gbs: float) -> str:
    """gb200-nvl72 with its host link at `gbs` GB/s."""
    src = (ROOT / "topologies" / "gb200-nvl72.yaml").read_text()
    path = tmp_path / "slow-host.yaml"
    path.write_text(re.sub(r"host_link_gbs: [0-9.]+", f"host_link_gbs: {gbs}", src.replace("name: gb200-nvl72", "name: slow-host")))
    return str(path)


# ------------------------------------------------------------------------------- the framework's words

def test_megatron_runs_te_v2_unless_cpu_offload_v1():
    assert _sc(4).framework.activation_offload == "te_v2"
    assert _sc(4, v1=True).framework.activation_offload == "te_v1"
    assert _sc(4).training.offload_layers == 4 and _sc(0).training.offload_layers == 0


def test_v1_window_map_ends_at_the_last_layer_and_leaves_each_copy_at_least_a_layer():
    """TransformerEngine release_v2.9 cpu_offload.py:343-350: L 80, N 40 waits at the odd layers; L 80, N 20 every
    fourth; L 126, N 95 (the 405B recipe) packs the remainder first."""
    assert v1_windows(80, 40) == list(range(1, 80, 2))
    assert v1_windows(80, 20) == list(range(3, 80, 4))
    for L, n in ((80, 40), (80, 20), (126, 95), (126, 125), (7, 3), (32, 31)):
        w = v1_windows(L, n)
        assert w[-1] == L - 1 and all(b > a for a, b in zip(w, w[1:]))
        assert all(w[i] >= i + 1 for i in range(n))  # a group's copy is waited for after its own layer


@pytest.mark.parametrize("v1", [False, True])
def test_every_offloaded_layer_is_copied_out_and_back_once_and_waited_for_after_it_is_issued(v1):
    plan = offload_plan(_sc(5, v1=v1))
    for table in (plan.forward, plan.backward):
        issued = sorted(c.key for lc in table.values() for c in lc.issue)
        waited = sorted(k for lc in table.values() for k, _ in lc.wait)
        assert issued == waited == sorted(f"L{i}" for i in range(5))
    issue_at = {c.key: layer for layer, lc in plan.forward.items() for c in lc.issue}
    for layer, lc in plan.forward.items():  # the forward waits at or after the layer that issued the copy
        assert all(layer >= issue_at[k] for k, _ in lc.wait)
    reload_at = {c.key: layer for layer, lc in plan.backward.items() for c in lc.issue}
    for layer, lc in plan.backward.items():  # the backward runs from the last layer down: a wait comes later
        assert all(layer <= reload_at[k] for k, _ in lc.wait)
    assert {c.stream for lc in plan.forward.values() for c in lc.issue} == ({"d2h"} if v1 else {"host"})


def test_v2_keeps_at_most_layers_minus_n_resident_in_the_forward():
    """TransformerEngine 5671fd36 cpu_offload.py:302-317: layer i's copy is waited for before layer L - N + i."""
    plan = offload_plan(_sc(5))
    waits = {k: layer + 1 for layer, lc in plan.forward.items() for k, _ in lc.wait}
    assert waits == {f"L{i}": LAYERS - 5 + i for i in range(5)}


# ------------------------------------------------------------------------------- memory

@pytest.mark.parametrize("v1", [False, True])
def test_offloaded_layers_leave_the_activations_in_flight(v1):
    base, off = _sc(0), _sc(4, v1=v1)
    moved = sum(moved_bytes(off, i) for i in range(4))
    assert moved > 0.9 * 4 * activation_bytes_per_layer(base, 0)
    assert chunk_activation_bytes(off, 0, 0) == pytest.approx(chunk_activation_bytes(base, 0, 0) - moved)
    mem, mem0 = memory_report(off).per_stage[0], memory_report(base).per_stage[0]
    assert mem.activations == pytest.approx(mem0.activations - moved)
    assert mem.buffer_kinds["offload_in_flight"] == pytest.approx(moved_bytes(off, 3) if v1 else 0.0)
    assert mem.peak < mem0.peak


def test_v1_leaves_the_experts_grouped_linear_inputs_on_the_gpu_and_v2_moves_them():
    v1, v2 = _sc(2, v1=True, moe=True), _sc(2, moe=True)
    terms = layer_activation_terms(v1, 0)
    kept = sum(v for k, v in terms.items() if k in V1_KEPT)
    assert kept > 0 and moved_bytes(v1, 0) == pytest.approx(sum(terms.values()) - kept)
    moved = moved_terms(v2, 0)  # v2: every saved tensor of 256K elements or more
    assert {"expert_fc1_input", "expert_fc2_input"} <= set(moved)
    assert set(terms) - set(moved) == {k for k, v in terms.items() if v / 2 < V2_MIN_ELEMENTS}
    assert moved_bytes(v2, 2) == 0.0  # layer 2 is not offloaded


@pytest.mark.parametrize("v1", [False, True])
def test_memory_timeline_draws_the_copies_and_stays_within_the_model(v1):
    sc = _sc(4, v1=v1)
    eng, _ = run_engine(sc, build_cost_model(sc), steps=2)
    rep = memory_report(sc).per_stage[0]
    ev = rank_memory_events(sc, eng.ranks[0])
    assert any("offloaded" in e.what for e in ev) and any("reloaded" in e.what for e in ev)
    peak = peak_bytes(ev)
    assert peak <= rep.peak * (1 + 1e-9)
    assert peak >= rep.peak - rep.buffer_kinds["offload_in_flight"] * (1 + 1e-9) - 1.0


# ------------------------------------------------------------------------------- time

def test_a_fast_host_link_hides_every_copy(tmp_path):
    fast = _host_link(tmp_path, 5000)
    off, base = (simulate(scenario_from_mapping(_mapping(n, topology=fast)), "analytic") for n in (4, 0))
    assert off["comm"]["offload"]["time_s"] > 0 and off["comm"]["offload"]["exposed_s"] == 0.0
    assert off["iteration_time_s"] == pytest.approx(base["iteration_time_s"], rel=1e-9)


@pytest.mark.parametrize("v1", [False, True])
def test_a_slow_host_link_makes_the_compute_wait_for_the_copies(tmp_path, v1):
    """At 0.5 GB/s a layer's copy outlasts the whole pass: the step pays at least every copy out and back once (each
    direction runs one copy at a time, the forward's before the backward's), and the wait is exposed offload time."""
    m = _mapping(4, v1=v1, topology=_host_link(tmp_path, 0.5))
    sc = scenario_from_mapping(m)
    moved = sum(moved_bytes(sc, i) for i in range(4))
    copies = 2 * moved / 0.5e9 * sc.micro_batches
    base = simulate(scenario_from_mapping({**m, "framework": {"name": "megatron", "overlap_grad_reduce": True}}), "analytic")
    for est in ("analytic", "engine"):
        r = simulate(sc, est)
        assert r["iteration_time_s"] >= copies
        assert r["comm"]["offload"]["exposed_s"] > 0.5 * copies
        assert r["iteration_time_s"] > base["iteration_time_s"] + 0.5 * copies


def test_the_trace_shows_the_copies_on_their_own_thread(tmp_path):
    sc = _sc(4)
    path = tmp_path / "t.json"
    simulate_engine(sc, build_cost_model(sc), trace_path=path)
    evs = json.loads(path.read_text())["traceEvents"]
    threads = {e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "offload" in threads
    names = {e["name"] for e in evs if e["ph"] == "X" and e["cat"] == "offload"}
    assert any(n.endswith("offload L0") for n in names) and any(n.endswith("reload L3") for n in names)


# ------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("change, key, words", [
    (lambda m: m.update(framework={"name": "torchtitan"}, training={**m["training"], "offload_layers": 2}),
     "training.offload_layers", "does not offload"),
    (lambda m: m["framework"].update(cpu_offloading_num_layers=LAYERS), "training.offload_layers", "fewer than"),
    (lambda m: m["parallel"].update(pp=2, dp=4), "training.offload_layers", "Pipeline parallelism"),
    (lambda m: m["training"].update(recompute="full"), "training.offload_layers", "recompute"),
    (lambda m: m["cluster"].update(topology="dgx-a100"), "training.offload_layers", "host_link_gbs"),
    (lambda m: m.update(model={**m["model"], "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 4096}},
                        parallel={**m["parallel"], "ep": 8, "ep_overlap": True, "zero": 1}), "training.offload_layers", "combined 1F1B"),
])
def test_what_megatron_refuses_is_refused_with_the_key(change, key, words):
    m = copy.deepcopy(_mapping(4))
    change(m)
    with pytest.raises(ScenarioError) as e:
        scenario_from_mapping(m)
    assert e.value.path == key and words in str(e.value)


def test_the_corpus_offload_rows_are_scored():
    from simulator.validate.corpus import corpus_runs
    runs = {c["id"]: c for c in corpus_runs()[0]}
    for row, n, how in (("corpus/megatron_bridge_26_02:llama3-70b-dgx-gb300-64gpu-fp8", 20, "te_v2"),
                        ("corpus/megatron_bridge_25_09:llama31-405b-dgx-gb200-128gpu-fp8-cs", 95, "te_v1")):
        sc = scenario_from_mapping(runs[row]["mapping"])
        assert sc.training.offload_layers == n and sc.framework.activation_offload == how


def test_the_megatron_export_says_the_layers_and_other_frameworks_refuse_it():
    from simulator.report.export import megatron_args, unsupported
    sc = _sc(4)
    args = megatron_args(sc)
    assert args[args.index("--cpu-offloading-num-layers") + 1] == "4"
    assert "--cpu-offloading-num-layers" not in megatron_args(_sc(0))
    assert any("offloading" in why for why in unsupported(sc, "torchtitan"))
    assert not any("offloading" in why for why in unsupported(sc, "megatron"))


def test_grace_host_links_are_the_fitted_gb200_figure_and_x86_nodes_pcie_gen5():
    """GB200's host link is fitted on NeMo 25.09's two GB200 offloading rows (fit split; the grid in its source), GB300
    takes it (the same Grace and NVLink-C2C); x86 DGX nodes copy over PCIe Gen5 x16; a GPU that does not say has none."""
    from simulator.topology import load_topology
    gb200, gb300 = load_topology("gb200-nvl72").gpu, load_topology("gb300-nvl72").gpu
    assert gb200.host_link_gbs == gb300.host_link_gbs == 95
    assert any("fitted on the corpus fit split" in s for s in gb200.sources)
    assert all(load_topology(n).gpu.host_link_gbs == 50 for n in ("dgx-h100", "hgx-h200", "dgx-b200"))
    assert load_topology("dgx-a100").gpu.host_link_gbs is None

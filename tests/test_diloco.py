"""DiLoCo across datacenters (`parallel.diloco`, simulator/evaluate/diloco.py)."""
import pytest

from simulator.errors import ScenarioError
from simulator.run import simulate
from simulator.scenario import scenario_from_mapping


def _sc(topology="two-dc-h100", nodes=32, **diloco):
    raw = {"model": "llama3-8b", "framework": {"name": "megatron", "distributed_optimizer": True, "overlap_grad_reduce": True},
           "training": {"seq_len": 8192, "global_batch": 256, "micro_batch": 1, "recompute": "selective"},
           "cluster": {"topology": topology, "nodes": nodes},
           "parallel": {"tp": 1, "pp": 1, "zero": 1, "diloco": {"outer_every": 10, "compression": "bf16", **diloco}}}
    return scenario_from_mapping(raw)


def _run(**diloco):
    return simulate(_sc(**diloco), estimator="analytic")


def test_the_wan_share_of_the_step_falls_as_one_over_h():
    shares = {h: _run(outer_every=h)["diloco"]["wan_share"] for h in (1, 10, 100)}
    assert shares[1] > shares[10] > shares[100] > 0
    assert shares[10] / shares[100] == pytest.approx(10, rel=0.02)


def test_the_inner_step_never_crosses_the_wan():
    """One site's inner step equals the same layout on a one-site cluster of half the nodes."""
    r = _run()
    raw_site = {"model": "llama3-8b", "framework": {"name": "megatron", "distributed_optimizer": True, "overlap_grad_reduce": True},
                "training": {"seq_len": 8192, "global_batch": 128, "micro_batch": 1, "recompute": "selective"},
                "cluster": {"topology": "dgx-h100", "nodes": 16}, "parallel": {"tp": 1, "pp": 1, "zero": 1}}
    site = simulate(scenario_from_mapping(raw_site), estimator="analytic")
    assert r["diloco"]["inner_step_s"] == pytest.approx(site["iteration_time_s"], rel=1e-9)
    assert r["gpus"] == 256 and r["tokens_per_s"] == pytest.approx(256 * 8192 / r["iteration_time_s"])


def test_overlap_hides_an_outer_sync_shorter_than_h_inner_steps():
    off, on = _run(overlap=False), _run(overlap=True)
    assert off["diloco"]["wan_share"] > 0 and on["diloco"]["wan_share"] == 0.0
    assert on["iteration_time_s"] == pytest.approx(on["diloco"]["inner_step_s"])


def test_compression_shrinks_what_crosses_the_wan():
    fp32, int4 = _run(compression="fp32"), _run(compression="int4")
    assert int4["diloco"]["outer_bytes_per_gpu"] == pytest.approx(fp32["diloco"]["outer_bytes_per_gpu"] / 8)
    assert int4["diloco"]["outer_sync_s"] < fp32["diloco"]["outer_sync_s"]


def test_diloco_needs_several_sites_and_nodes_that_split_over_them():
    with pytest.raises(ScenarioError) as e:
        _sc(topology="dgx-h100")
    assert e.value.path == "parallel.diloco"
    with pytest.raises(ScenarioError) as e:
        _sc(nodes=33)
    assert e.value.path in ("cluster.nodes", "parallel")

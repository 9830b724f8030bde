"""Topology files load strictly, and the network placement / routes agree with the cluster graph."""
from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from simulator.errors import ScenarioError
from simulator.cost.network import build_graph, group_layout, group_links, locate, path
from simulator.topology import load_topology, topology_from_mapping, topology_names

REQUIRED = ("dgx-a100", "dgx-h100", "hgx-h200", "gb200-nvl72", "pcie-l40s", "cpu-host", "two-dc-h100")


def raw(name: str) -> dict:
    return yaml.safe_load((load_topology.__globals__["TOPOLOGY_DIR"] / f"{name}.yaml").read_text())


@pytest.mark.parametrize("name", REQUIRED)
def test_required_topologies_load_with_gpu_specs_and_sources(name):
    t = load_topology(name)
    assert name in topology_names()
    assert t.gpu.memory_gib > 0 and t.gpu.hbm_bandwidth_gbs > 0
    assert t.peak_flops("bf16") > 0
    assert t.gpu.sources, "every GPU spec names its sources"


def test_gpu_peaks_match_modeling_table():
    assert load_topology("dgx-h100").peak_flops("bf16") == pytest.approx(989.4e12)
    assert load_topology("dgx-a100").peak_flops("bf16") == pytest.approx(312e12)
    assert "fp8" not in load_topology("dgx-a100").gpu.peak_tflops  # Ampere has no FP8
    assert load_topology("hgx-h200").gpu.hbm_bandwidth_gbs == 4800
    assert load_topology("gb200-nvl72").node.gpus == 72


@pytest.mark.parametrize("name", ("hgx-h200", "gb200-nvl72"))
def test_secondary_figures_are_marked_unverified(name):
    assert any("unverified" in s for s in load_topology(name).gpu.sources)


def test_equal_topologies_hash_equal():
    a, b = load_topology("dgx-h100"), load_topology("dgx-h100")
    assert a == b and hash(a) == hash(b)
    assert hash(replace(a, node=replace(a.node, nics=4))) != hash(a)


def test_unknown_topology_names_the_choices():
    with pytest.raises(ScenarioError, match="unknown topology 'nope'.*dgx-h100"):
        load_topology("nope")


@pytest.mark.parametrize("edit, where", [
    (lambda r: r["node"].update(nvlinks=18), "node.nvlinks: unknown key"),
    (lambda r: r["gpu"].pop("memory_gib"), "gpu.memory_gib: missing required key"),
    (lambda r: r["node"].update(gpus="eight"), "node.gpus: expected an integer"),
    (lambda r: r["node"].update(interconnect="infinityfabric"), "node.interconnect"),
    (lambda r: r["gpu"]["peak_tflops"].update(int4=4000), "peak_tflops.int4: unknown dtype"),
    (lambda r: r["node"].update(interconnect="pcie"), "node.nvls"),
    (lambda r: r["node"].update(nics=3), "node.nics"),
    (lambda r: r["node"].update(nic_bandwidth_gbs=0), "node.nic_bandwidth_gbs"),
    (lambda r: r["node"].update(bus_efficiency=1.2), "node.bus_efficiency"),
    (lambda r: r["fabric"].update(oversubscription=0.5), "fabric.oversubscription"),
    (lambda r: r.update(datacenters={"sites": 2, "nodes_per_site": 4}), "datacenters.link"),
    (lambda r: r.update(datacenters={"sites": 2, "link": {"bandwidth_gbs": 10}}), "datacenters.nodes_per_site"),
    (lambda r: r.update(datacenters={"sites": 2, "nodes_per_site": 4, "arrangement": "loop", "link": {"bandwidth_gbs": 10}}),
     "datacenters.arrangement"),
])
def test_strict_loading_names_the_key(edit, where):
    r = raw("dgx-h100")
    edit(r)
    with pytest.raises(ScenarioError, match=where.replace(".", r"\.")):
        topology_from_mapping(r)


def test_rank_placement_is_rank_div_gpus_per_node():
    t = load_topology("dgx-h100")
    loc = locate(t, 8 * 33 + 5)
    assert (loc.node, loc.local, loc.nic, loc.domain) == (33, 5, 5, 1)  # 32 nodes per scalable unit


def test_group_layout_counts():
    t = load_topology("dgx-h100")
    L = group_layout(t, tuple(range(0, 8 * 64, 8)))  # a DP group, one GPU per node, 64 nodes
    assert (L.size, L.nodes, L.per_node, L.domains, L.nodes_per_domain) == (64, 64, 1, 2, 32)
    L = group_layout(load_topology("pcie-l40s"), tuple(range(8)))
    assert (L.nodes, L.switches, L.per_switch) == (1, 2, 4)


@pytest.mark.parametrize("name, nodes", [("dgx-h100", 40), ("pcie-l40s", 3), ("two-dc-h100", 66), ("aws-p5", 3)])
def test_routes_are_paths_in_the_cluster_graph(name, nodes):
    t = load_topology(name)
    G = build_graph(t, nodes)
    g = t.node.gpus
    for src, dst in [(0, 1), (0, g - 1), (0, g), (3, 2 * g + 5), (0, (nodes - 1) * g + 1)]:
        links = path(t, src, dst)
        assert links[0][0] == f"n{src // g}.gpu{src % g}" and links[-1][1] == f"n{dst // g}.gpu{dst % g}"
        assert all(a[1] == b[0] for a, b in zip(links, links[1:])), "consecutive links"
        missing = [l for l in links if not G.has_edge(*l)]
        assert not missing, missing


def test_two_sites_route_through_the_wan():
    t = load_topology("two-dc-h100")
    kinds = group_links(t, [0, 64 * 8])
    assert kinds["wan"] == [("s0.gw", "s1.gw"), ("s1.gw", "s0.gw")]


# ----------------------------------------------------------------------------------- power limit

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def _capped(watts):
    import yaml
    raw = yaml.safe_load((ROOT / "topologies" / "dgx-h100.yaml").read_text())
    raw["gpu"]["power_limit_w"] = watts
    return topology_from_mapping(raw)


def test_a_power_limit_slows_tensor_core_work_in_proportion_and_leaves_hbm_alone():
    from simulator.cost.costs import CostModel
    from simulator.plan.opgraph import Compute
    full, capped = load_topology("dgx-h100"), _capped(500)
    assert capped.peak_flops("bf16") == pytest.approx(full.peak_flops("bf16") * 500 / 700)
    assert capped.nominal_peak_flops("bf16") == full.peak_flops("bf16"), "MFU still divides by the datasheet's peak"
    big = Compute("g", "gemm", 2 * 8192 ** 3, 3 * 2 * 8192 ** 2, "bf16", (8192, 8192, 8192))
    copy = Compute("c", "elementwise", 0.0, 4e9, "bf16", (1,))
    t = {name: CostModel(topology=topo).compute_time(op) for name, topo in (("full", full), ("capped", capped))
         for op in (big,)}
    assert t["capped"] / t["full"] == pytest.approx(700 / 500, rel=0.01)
    assert CostModel(topology=capped).compute_time(copy) == CostModel(topology=full).compute_time(copy)


def test_a_power_limit_needs_the_rated_power_and_cannot_exceed_it():
    import yaml
    raw = yaml.safe_load((ROOT / "topologies" / "dgx-h100.yaml").read_text())
    raw["gpu"]["power_limit_w"] = 800
    with pytest.raises(ScenarioError, match="above the rated 700"):
        topology_from_mapping(raw)
    del raw["gpu"]["tdp_w"]
    raw["gpu"]["power_limit_w"] = 500
    with pytest.raises(ScenarioError, match="tdp_w"):
        topology_from_mapping(raw)


def test_a_clock_lock_slows_tensor_core_work_by_the_clocks_ratio_and_leaves_hbm_alone():
    """nvidia-smi -lgc 1500 on an H100 SXM, whose peaks hold at 1,830 MHz: GEMMs at 1500 / 1830 of their speed; a
    lock at or above the rated clock changes nothing; with a power limit as well the lower of the two holds."""
    from simulator.cost.costs import CostModel
    from simulator.plan.opgraph import Compute
    full, locked = load_topology("dgx-h100"), _variant(locked_clock_mhz=1500)
    assert full.gpu.peak_clock_mhz == 1830 and load_topology("dgx-a100").gpu.peak_clock_mhz == 1410
    assert locked.peak_flops("bf16") == pytest.approx(full.peak_flops("bf16") * 1500 / 1830)
    assert locked.nominal_peak_flops("bf16") == full.peak_flops("bf16"), "MFU still divides by the datasheet's peak"
    big = Compute("g", "gemm", 2 * 8192 ** 3, 3 * 2 * 8192 ** 2, "bf16", (8192, 8192, 8192))
    copy = Compute("c", "elementwise", 0.0, 4e9, "bf16", (1,))
    t_full, t_locked = (CostModel(topology=topo).compute_time(big) for topo in (full, locked))
    assert t_locked / t_full == pytest.approx(1830 / 1500, rel=0.01)
    assert CostModel(topology=locked).compute_time(copy) == CostModel(topology=full).compute_time(copy)
    assert "SM clock locked at 1500 MHz (rated 1830 MHz)" in CostModel(topology=locked).kernel_source()
    assert _variant(locked_clock_mhz=1980).gpu.compute_clock_fraction == 1.0
    both = _variant(locked_clock_mhz=1500, power_limit_w=400)
    assert both.gpu.compute_clock_fraction == pytest.approx(400 / 700)
    assert "400 W power limit" in CostModel(topology=both).kernel_source()


def test_a_clock_lock_needs_the_rated_clock():
    with pytest.raises(ScenarioError, match="peak_clock_mhz"):
        _variant(locked_clock_mhz=1500, peak_clock_mhz=None)


def test_the_h200_table_under_its_stated_clock_lock_prices_tensor_work_slower_and_memory_work_alike():
    """validation/clock_lock_h200.py: every row priced under the 1,500 MHz lock is slower than at free clocks, by
    less than the clock ratio 1500 / 1830 alone (memory-bound kernels and the host do not slow)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("clock_lock_h200", ROOT / "validation" / "clock_lock_h200.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.rows()
    assert len(rows) == 12 and {r["mhz"] for r in rows} == {1500.0}
    for r in rows:
        assert 1500 / 1830 < r["locked"] / r["free"] < 1.0, r


# ----------------------------------------------------------------------------------- chip variants

def _variant(**gpu):
    import yaml
    raw = yaml.safe_load((ROOT / "topologies" / "dgx-h100.yaml").read_text())
    raw["gpu"].update(gpu)
    return topology_from_mapping(raw)


def test_a_variant_of_a_chip_is_priced_by_that_chips_published_kernels():
    from simulator.cost.costs import CostModel
    from simulator.plan.opgraph import Compute
    big = Compute("g", "gemm", 2 * 8192 ** 3, 3 * 2 * 8192 ** 2, "bf16", (8192, 8192, 8192))
    h100 = CostModel(topology=load_topology("dgx-h100"))
    renamed = CostModel(topology=_variant(name="H100 SXM5 96GB HBM2e"))
    variant = CostModel(topology=_variant(name="H100 SXM5 96GB HBM2e", chip="H100 SXM5 80GB"))
    assert renamed.kernels() is None, "a name the data file lacks has no published points of its own"
    assert variant.compute_time(big) == pytest.approx(h100.compute_time(big))
    assert variant.sustained_gemm_fraction() == h100.sustained_gemm_fraction() < 1.0
    assert "H100 SXM5 80GB, the chip of H100 SXM5 96GB HBM2e" in variant.kernel_source()


def test_a_variant_keeps_its_own_hbm_and_power_limit():
    from simulator.cost.costs import CostModel
    from simulator.plan.opgraph import Compute
    big = Compute("g", "gemm", 2 * 8192 ** 3, 3 * 2 * 8192 ** 2, "bf16", (8192, 8192, 8192))
    copy = Compute("c", "elementwise", 0.0, 4e9, "bf16", (1,))
    h100 = CostModel(topology=load_topology("dgx-h100"))
    teton = CostModel(topology=load_topology("grand-teton-h100"))
    assert teton.compute_time(big) / h100.compute_time(big) == pytest.approx(700 / 500, rel=0.01)
    assert teton.compute_time(copy) / h100.compute_time(copy) == pytest.approx(3350 / 2400, rel=0.01)
    assert "500 W power limit" in teton.kernel_source()


def test_a_chip_without_published_kernels_is_a_clear_error():
    from simulator.cost.costs import CostModel
    with pytest.raises(ScenarioError, match="gpu.chip.*no published kernel data.*H100 SXM5 80GB"):
        CostModel(topology=_variant(name="H100 SXM5 96GB HBM2e", chip="H100 PCIe"))


def test_the_h800_is_priced_as_the_h100_chip():
    from simulator.cost.costs import CostModel
    h800, h100 = CostModel(topology=load_topology("h800")), CostModel(topology=load_topology("dgx-h100"))
    assert h800.kernels().gemm["bf16"] == h100.kernels().gemm["bf16"]
    assert h800.sustained_gemm_fraction() == h100.sustained_gemm_fraction()

"""Mixed GPU pools and degraded links (issue 42, items 1 and 2): a 50/50 H100 / A100 cluster with the pipeline
across the pools, its layers split evenly and by speed (`parallel.pp_balance`), next to the all-H100 and all-A100
clusters; and one degraded link. Prints a table of step times from both estimators; run on an idle machine.

    python benchmarks/mixed_pools.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.run import simulate  # noqa: E402
from simulator.scenario import scenario_from_mapping  # noqa: E402


def _scenario(model: str, nodes: int, pp: int, pools, balance: str = "even", links=(), order: str = "tp-cp-ep-dp-pp",
              dp_balance: str = "even") -> dict:
    return {"name": model, "model": model,
            "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1, "recompute": "selective"},
            "cluster": {"topology": "dgx-h100", "nodes": nodes, "pools": pools, "degraded_links": list(links)},
            "parallel": {"tp": 8, "pp": pp, "zero": 1, "pp_balance": balance, "order": order, "dp_balance": dp_balance}}


def _half(nodes: int) -> list:
    return [{"gpu": "dgx-h100", "nodes": nodes // 2}, {"gpu": "dgx-a100", "nodes": nodes // 2}]


CASES = []
for model, nodes, pp in (("llama3-8b", 2, 2), ("llama3-70b", 8, 8)):
    CASES += [
        (f"{model}, {nodes} H100 nodes", _scenario(model, nodes, pp, [])),
        (f"{model}, {nodes} A100 nodes", _scenario(model, nodes, pp, [{"gpu": "dgx-a100", "nodes": nodes}])),
        (f"{model}, {nodes // 2} H100 + {nodes // 2} A100, even", _scenario(model, nodes, pp, _half(nodes))),
        (f"{model}, {nodes // 2} H100 + {nodes // 2} A100, speed", _scenario(model, nodes, pp, _half(nodes), "speed")),
    ]
CASES += [
    ("llama3-70b, PP4 DP2, 8 H100 nodes", _scenario("llama3-70b", 8, 4, [], order="tp-cp-pp-ep-dp")),
    ("llama3-70b, PP4 DP2, a replica per pool, even", _scenario("llama3-70b", 8, 4, _half(8), order="tp-cp-pp-ep-dp")),
    ("llama3-70b, PP4 DP2, a replica per pool, speed", _scenario("llama3-70b", 8, 4, _half(8), order="tp-cp-pp-ep-dp",
                                                                  dp_balance="speed")),
    ("llama3-70b, PP4 DP2, 8 A100 nodes", _scenario("llama3-70b", 8, 4, [{"gpu": "dgx-a100", "nodes": 8}], order="tp-cp-pp-ep-dp")),
    ("llama3-70b, 8 H100 nodes, node 3 NIC at 25 %", _scenario("llama3-70b", 8, 8, [], links=[{"node": 3, "link": "nic", "bandwidth": 0.25}])),
    ("llama3-70b, 8 H100 nodes, node 3 NVLink at 25 %", _scenario("llama3-70b", 8, 8, [], links=[{"node": 3, "link": "nvlink", "bandwidth": 0.25}])),
    ("  same, speed-balanced", _scenario("llama3-70b", 8, 8, [], "speed", [{"node": 3, "link": "nvlink", "bandwidth": 0.25}])),
]


def main() -> int:
    print(f"{'case':<46} {'analytic s':>10} {'engine s':>9} {'wall s':>7}  layers per stage / memory")
    for label, raw in CASES:
        sc = scenario_from_mapping(raw)
        t0 = time.perf_counter()
        a = simulate(sc, estimator="analytic")
        e = simulate(sc, estimator="engine")
        wall = time.perf_counter() - t0
        pools = e["pools"]
        note = ""
        if pools:
            shares = pools["dp_shares"]
            note = (f"micro-batches {'/'.join(str(x['micro_batches']) for x in shares)}; " if shares else "") + \
                f"{pools['pp_layers']}; " + ", ".join(f"{p['gpu']} {p['peak_gib']:.1f}/{p['capacity_gib']:.1f} GiB {'fits' if p['fits'] else 'OOM'}"
                                                          for p in pools["pools"])
        elif e["degraded_links"]:
            d = e["degraded_links"]
            note = f"+{d['cost_s']:.3f} s over healthy; crosses {', '.join(d['links'][0]['groups'])}"
        print(f"{label:<46} {a['iteration_time_s']:10.3f} {e['iteration_time_s']:9.3f} {wall:7.2f}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

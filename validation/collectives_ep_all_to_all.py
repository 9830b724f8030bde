"""The MoE dispatch and combine all-to-all against published latencies (NVIDIA's Megatron Core MoE report, Table 7).

    python validation/collectives_ep_all_to_all.py

Reads validation/references/collectives/moe_all_to_all_megatron_core.yaml: per GPU, the latency of one token
dispatch and one combine all-to-all at EP 8 to 64 (hidden size 7168, 4,096 tokens per rank, 256 experts; the
file says what the paper leaves out and how it is read). For each point it builds the scenario that runs that
all-to-all (DeepSeek-V3 on `ep` GPUs, ep = dp, Megatron's alltoall dispatcher, BF16, even routing), takes the
dispatch and combine ops of its plan (`plan/layer_ops.py`: bytes from `ep_dispatch.ep_message_bytes`) and prices
them as both evaluators do (`evaluate/passes.OpTimes`: the EP group's shape on the topology, every other group
of its dimension busy). It prints published and predicted microseconds, their ratio, and the mean absolute
percentage error per GPU and over both.

A report, not a gate: it exits 0 whatever the error (tests/test_collectives_ep_all_to_all.py holds the band).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.cost.costs import build_cost_model  # noqa: E402
from simulator.evaluate.passes import OpTimes  # noqa: E402
from simulator.plan.lower import build_plan  # noqa: E402
from simulator.plan.opgraph import Comm  # noqa: E402
from simulator.scenario import scenario_from_mapping  # noqa: E402

REFERENCE = ROOT / "validation" / "references" / "collectives" / "moe_all_to_all_megatron_core.yaml"
PHASES = ("dispatch", "combine")
"""The two all-to-alls of an MoE layer, in the table's order (ops `ep_dispatch`, `ep_combine`)."""


@dataclass(frozen=True)
class Row:
    table: str
    ep: int
    phase: str
    nbytes: float
    published_us: float
    predicted_us: float

    @property
    def ratio(self) -> float:
        return self.predicted_us / self.published_us

    @property
    def error(self) -> float:
        return abs(self.ratio - 1)


def load(path: Path = REFERENCE) -> dict:
    data = yaml.safe_load(path.read_text())
    for t in data["tables"]:
        missing = {"id", "topology", "gpus_per_node", "points"} - set(t)
        if missing:
            raise ValueError(f"{path}: table {t.get('id', '?')} lacks {sorted(missing)}")
    return data


def scenario(assumed: dict, topology: str, gpus_per_node: int, ep: int):
    """The run whose MoE layers send what the table's all-to-all sends: `ep` ranks, one `tokens_per_rank`
    sequence each, every rank in the one EP group (ep = dp), nothing else sharded."""
    per_node = min(ep, gpus_per_node)
    mapping = {
        "name": f"{assumed['model']} all-to-all, EP {ep} on {topology}",
        "model": assumed["model"],
        "framework": {"name": "megatron"},
        "training": {"seq_len": assumed["tokens_per_rank"], "global_batch": ep, "micro_batch": 1,
                     "precision": assumed["dtype"], "recompute": "full"},
        "cluster": {"topology": topology, "nodes": ep // per_node, "gpus_per_node": per_node},
        "parallel": {"dp": ep, "tp": 1, "pp": 1, "ep": ep, "zero": 1, "ep_dispatcher": "alltoall",
                     "ep_imbalance": 1.0},
    }
    return scenario_from_mapping(mapping, base_dir=ROOT)


def priced_all_to_alls(sc) -> dict[str, tuple[float, float]]:
    """phase -> (bytes per rank, seconds) of the first MoE layer's dispatch and combine in the forward."""
    plan = build_plan(sc)
    times = OpTimes(sc, build_cost_model(sc))
    out: dict[str, tuple[float, float]] = {}
    for block in plan.blocks[(0, "F")]:
        for node in block.nodes:
            op = node.op
            if isinstance(op, Comm) and op.name in ("ep_dispatch", "ep_combine"):
                out.setdefault(op.name[len("ep_"):], (op.bytes, times(op)))
    missing = set(PHASES) - set(out)
    if missing:
        raise ValueError(f"{sc.name}: the plan has no {sorted(missing)} all-to-all")
    return out


def predict(data: dict) -> list[Row]:
    assumed = data["assumed"]
    rows = []
    for t in data["tables"]:
        for ep, *published in t["points"]:
            priced = priced_all_to_alls(scenario(assumed, t["topology"], int(t["gpus_per_node"]), int(ep)))
            for phase, us in zip(PHASES, published):
                nbytes, seconds = priced[phase]
                rows.append(Row(t["id"], int(ep), phase, nbytes, float(us), seconds * 1e6))
    return rows


def mape(rows: list[Row]) -> float:
    return sum(r.error for r in rows) / len(rows)


def report(data: dict) -> list[Row]:
    rows = predict(data)
    a = data["assumed"]
    print(f"{data['source']['title']}, {data['source']['where']}: all-to-all latency, published against clustersim")
    print(f"(read as: {a['model']}, {a['tokens_per_rank']} tokens per rank, top-{a['top_k']}, {a['dtype']}, "
          f"{a['routing']} routing)")
    for t in data["tables"]:
        mine = [r for r in rows if r.table == t["id"]]
        print(f"\n{t['id']}: {t['hardware']}; topology {t['topology']}")
        print(f"  {'ep':>3s} {'phase':>8s} {'MB/rank':>8s} {'published':>10s} {'clustersim':>11s} {'ratio':>6s}")
        for r in mine:
            print(f"  {r.ep:3d} {r.phase:>8s} {r.nbytes / 1e6:8.0f} {r.published_us:8.0f} us {r.predicted_us:8.0f} us"
                  f" {r.ratio:6.2f}")
        print(f"  MAPE {mape(mine):.1%} ({len(mine)} points)")
    print(f"\nall: MAPE {mape(rows):.1%} ({len(rows)} points)")
    return rows


def main() -> int:
    report(load())
    return 0


if __name__ == "__main__":
    sys.exit(main())

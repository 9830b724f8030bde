"""NVIDIA's Llama 3.2 1B H200 table priced at free clocks and under the clock lock its README states (not scored).

The benchmark's README says the H200 ran with its SM clock locked at 1,500 MHz; no log of that run is published, and
the B200 run's log shows the same script's lock failing. clustersim prices a lock (`gpu.locked_clock_mhz`: tensor-core
work at locked / peak_clock_mhz of its rated speed, topology.GPUSpec.compute_clock_fraction), so the table can say
which reading it agrees with: each row priced on the hgx-h200 topology as shipped (free clocks) and with
`locked_clock_mhz` set to the file's `clock_lock_mhz`.

    python validation/clock_lock_h200.py [--markdown]

Data: validation/references/unscored/hf_llama32_1b_h200.yaml (a directory `validate` does not read).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from simulator.run import simulate  # noqa: E402
from simulator.scenario import scenario_from_mapping  # noqa: E402

DATA = ROOT / "validation" / "references" / "unscored" / "hf_llama32_1b_h200.yaml"


def locked_topology(name: str, mhz: float, directory: Path) -> Path:
    """A copy of topology `name` with its GPUs locked at `mhz` (gpu.locked_clock_mhz), written under `directory`."""
    raw = yaml.safe_load((ROOT / "topologies" / f"{name}.yaml").read_text())
    raw["gpu"]["locked_clock_mhz"] = mhz
    path = directory / f"{name}-{mhz:g}mhz.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def priced(mapping: dict, topology: str | None = None) -> float:
    """tokens/s/GPU of a run's scenario (analytic), on another topology file where given."""
    m = {**mapping, "cluster": {**mapping["cluster"], **({"topology": topology} if topology else {})}}
    return simulate(scenario_from_mapping(m), estimator="analytic")["tokens_per_s_per_gpu"]


def rows(data: Path = DATA) -> list[dict]:
    doc = yaml.safe_load(data.read_text())
    mhz = float(doc["clock_lock_mhz"])
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        topo = {}
        for run in doc["runs"]:
            name = run["scenario"]["cluster"]["topology"]
            topo.setdefault(name, str(locked_topology(name, mhz, Path(tmp))))
            meas = run["measured"]["tokens_per_s_per_gpu"]
            free, locked = priced(run["scenario"]), priced(run["scenario"], topo[name])
            out.append({"id": run["id"], "measured": meas, "free": free, "locked": locked,
                        "free_err": free / meas - 1, "locked_err": locked / meas - 1, "mhz": mhz})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = ap.parse_args(argv)
    rs = rows()
    mhz = rs[0]["mhz"]
    head = ["run", "measured tok/s", "free clocks", "error", f"locked {mhz:g} MHz", "error"]
    lines = [[r["id"], f"{r['measured']:,.0f}", f"{r['free']:,.0f}", f"{r['free_err']:+.1%}", f"{r['locked']:,.0f}",
              f"{r['locked_err']:+.1%}"] for r in rs]
    if args.markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
        for line in [head, *lines]:
            print("  ".join(x.rjust(w) if i else x.ljust(w) for i, (x, w) in enumerate(zip(line, widths))))
    for key, what in (("free_err", "free clocks"), ("locked_err", f"locked at {mhz:g} MHz")):
        errs = [abs(r[key]) for r in rs]
        print(f"{what}: MAPE {statistics.mean(errs):.1%}, median signed {statistics.median(r[key] for r in rs):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

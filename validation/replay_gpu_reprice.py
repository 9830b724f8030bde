"""The GPU replays measured once (validation/results/replay_gpu_h200.json), priced again by the current code from
the profile measured on the same GPU (calibrate/profiles/h200-sxm-measured.json): issue 6's GPU bar (step time
within 10 %, peak memory within 5 %) judged at every commit without a GPU.

    python validation/replay_gpu_reprice.py [--results FILE] [--profile FILE]

The measured side is what `validation/replay_gpu.py` wrote on the GPU (median step time after warm-up,
torch.cuda.max_memory_allocated); the predicted side is `simulator run` of the same scenario and recompute mode
on the topology of the profile's GPU. The profile is the generic grid of `python -m calibrate --gpu 0` (shapes
interpolated), not the scenario-exact one the replay was priced from when it ran.
Exit 0 when every mode meets both bars, 1 otherwise, 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from simulator.errors import ScenarioError  # noqa: E402
from simulator.run import simulate  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

RESULTS = ROOT / "validation" / "results" / "replay_gpu_h200.json"
PROFILE = ROOT / "calibrate" / "profiles" / "h200-sxm-measured.json"
SCENARIOS = ROOT / "scenarios" / "replay" / "gpu"
TIME_BAR, MEMORY_BAR = 0.10, 0.05


def reprice(results: dict, profile: Path) -> list[dict]:
    """One row per measured replay: measured and predicted step time and peak memory, and their errors."""
    topology = json.loads(profile.read_text())["spec"]["topology"]
    rows = []
    for r in results["replays"]:
        if "measured" not in r:
            continue
        sc = load_scenario(SCENARIOS / results["scenario"], [  # the optimizer as the replay steps it (report.predict)
            f"training.recompute={r['recompute']}", f"cluster.topology={topology}", f"cluster.profile={profile}",
            "training.optimizer_impl=for_loop"])
        out = simulate(sc)
        pred_s, pred_gib = out["iteration_time_s"], out["memory"]["per_stage"][0]["allocated_peak_gib"]
        meas_s, meas_gib = r["measured"]["iteration_time_s"], r["measured"]["peak_memory_gib"]
        rows.append({"recompute": r["recompute"], "measured_s": meas_s, "predicted_s": pred_s,
                     "time_error": pred_s / meas_s - 1, "measured_gib": meas_gib, "predicted_gib": pred_gib,
                     "memory_error": pred_gib / meas_gib - 1})
    return rows


def table(rows: list[dict]) -> str:
    out = ["| recompute | measured s | predicted s | error | <= 10 % | measured GiB | predicted GiB | error | <= 5 % |",
           "|---|---|---|---|---|---|---|---|---|"]
    for v in rows:
        out.append(f"| {v['recompute']} | {v['measured_s']:.4f} | {v['predicted_s']:.4f} | {v['time_error']:+.1%} | "
                   f"{'yes' if abs(v['time_error']) <= TIME_BAR else 'NO'} | {v['measured_gib']:.2f} | "
                   f"{v['predicted_gib']:.2f} | {v['memory_error']:+.1%} | "
                   f"{'yes' if abs(v['memory_error']) <= MEMORY_BAR else 'NO'} |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(RESULTS), help="default: %(default)s")
    ap.add_argument("--profile", default=str(PROFILE), help="default: %(default)s")
    args = ap.parse_args(argv)
    for flag, path in (("--results", args.results), ("--profile", args.profile)):
        if not Path(path).is_file():
            print(f"replay_gpu_reprice: {flag}: {path} is not a file", file=sys.stderr)
            return 2
    results = json.loads(Path(args.results).read_text())
    try:
        rows = reprice(results, Path(args.profile).resolve())
    except ScenarioError as e:
        print(f"replay_gpu_reprice: {e}", file=sys.stderr)
        return 2
    ok = bool(rows) and all(abs(v["time_error"]) <= TIME_BAR and abs(v["memory_error"]) <= MEMORY_BAR for v in rows)
    print(f"{results['scenario']} measured on {results['device_name']} (commit {results['commit']}), priced now from "
          f"{Path(args.profile).name}; bars: step time {TIME_BAR:.0%}, peak memory {MEMORY_BAR:.0%}: "
          f"{'met' if ok else 'NOT met'}\n")
    print(table(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

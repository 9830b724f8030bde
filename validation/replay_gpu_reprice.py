"""The GPU replays measured once (validation/results/replay_gpu_h200.json), priced again by the current code from
the profile measured for them on the same kind of GPU (validation/results/replay_gpu_h200_profile.json): issue 6's
GPU bar (step time within 10 %, peak memory within 5 %) judged at every commit without a GPU.

    python validation/replay_gpu_reprice.py [--results FILE] [--profile FILE]

The measured side is what `validation/replay_gpu.py` wrote on the GPU (median step time after warm-up,
torch.cuda.max_memory_allocated); the predicted side is the replay's own prediction (`calibrate replay`:
`simulate` of the scenario as the executor runs it, `calibrate.replay.plan.as_replayed`) in each recompute mode,
on the topology of the profile's GPU. The default profile is the one the replay calibrated for its own shapes
(`calibrate --gpu 0 --scenario`), its memory-bound table re-measured for the kinds the plan has since gained
(its provenance's `merged_from`); `--profile calibrate/profiles/h200-sxm-measured.json` prices from the generic
grid instead (shapes interpolated). The rows are judged and printed
by replay_gpu.py's own `verdict`, `passed` and `table`.
Exit 0 when every mode meets both bars, 1 otherwise, 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))
from calibrate.replay.plan import as_replayed  # noqa: E402 (no torch)
from replay_gpu import passed, table, verdict  # noqa: E402
from simulator.errors import ScenarioError  # noqa: E402
from simulator.run import simulate  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

RESULTS = ROOT / "validation" / "results" / "replay_gpu_h200.json"
PROFILE = ROOT / "validation" / "results" / "replay_gpu_h200_profile.json"
SCENARIOS = ROOT / "scenarios" / "replay" / "gpu"


def reprice(results: dict, profile: Path) -> list[dict]:
    """Each measured replay of `results` with its prediction and errors replaced by the current code's."""
    topology = json.loads(profile.read_text())["spec"]["topology"]
    out = []
    for r in results["replays"]:
        if "measured" not in r:
            continue
        sc = load_scenario(SCENARIOS / results["scenario"], [
            f"training.recompute={r['recompute']}", f"cluster.topology={topology}", f"cluster.profile={profile}"])
        rep = simulate(as_replayed(sc))
        pred = {"iteration_time_s": rep["iteration_time_s"],
                "peak_memory_gib": rep["memory"]["per_stage"][0]["allocated_peak_gib"]}
        out.append({**r, "predicted": pred, "relative_error": {
            k: pred[k] / r["measured"][k] - 1 for k in ("iteration_time_s", "peak_memory_gib")}})
    return out


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
        rows = [verdict(r) for r in reprice(results, Path(args.profile).resolve())]
    except ScenarioError as e:
        print(f"replay_gpu_reprice: {e}", file=sys.stderr)
        return 2
    ok = bool(rows) and passed(rows, "cuda")
    print(f"{results['scenario']} measured on {results['device_name']} (commit {results['commit']}), priced now from "
          f"{Path(args.profile).name}: {'met' if ok else 'NOT met'}\n")
    print(table(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

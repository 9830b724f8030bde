"""Would clustersim have picked the right layout? Regret on the Ultra-Scale Playbook's runs.

    python validation/playbook_regret.py [--topology NAME] [--network measured|spec] [--estimator analytic|engine]
                                         [--jobs J] [--json]

For each group of the Playbook's successful runs with the same model, node count and global batch,
clustersim ranks the group's measured layouts the way `sweep` would (tokens/s per GPU, among those its
memory model says fit; all of them if it says none does) and takes its first. The regret is how far
that layout's measured throughput falls short of the group's measured best:
    regret = 1 - measured(clustersim's pick) / max(measured)
The bar (issue 7) is regret <= 2 %, reported separately on the fit split (1B/3B/8B) and the
validation split (80B/469G), which nothing was tuned on (validation/data/playbook/README.md).

Runs with pp > 1 from before nanotron's pipeline fix (`after_pp_fix` false) are left out: they measure
a since-fixed slowdown, not the layout (validation/data/playbook/README.md). A layout run more than once counts with its best
measurement. Scenarios come from `simulator.validate.playbook` (issue 8's CSV-to-scenario mapping: nanotron's
uneven pipeline split, DDP buckets, async TP), on the topology given (default aws-p5, the playbook's
cluster), each job's network set to the busbw nanotron measured for it (`--network spec`: the YAML's).

How much of the regret could any predictor avoid? Each number is one job's timed step, and jobs do not
repeat exactly (`validate.noise_floor`). `noise_floor` asks what a predictor that knew every layout's true
speed would score: each group's measured numbers are taken as the true speeds, every one is redrawn with
log-normal noise of a per-run sigma, and the true best (the measured best) is scored against the redrawn
best, over `FLOOR_DRAWS` seeded draws. The sigma comes from the ZeRO-0/ZeRO-1 twins (`twin_sigma`): on one
node, where ZeRO changes little, their spread bounds the noise from above; across nodes ZeRO also changes
the DP traffic, so the multi-node twins' sigma is a looser bound. Both floors are printed.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.errors import ScenarioError  # noqa: E402
from simulator.validate.playbook import FIT_LABELS, NETWORK, NETWORK_CHOICES, network_state, read_runs, zero_twins  # noqa: E402
from simulator.sweep.runners import make_runner  # noqa: E402

BAR = 0.02
"""Issue 7: clustersim's pick within 2 % of the measured best."""
FLOOR_DRAWS = 2000
"""Noise draws per floor (`noise_floor`); seeded, so the floor is the same on every run."""


def predict(run, topology: str, estimator: str, network: str = NETWORK) -> dict:
    """clustersim's numbers for one run's layout (a task for the process pool)."""
    from simulator.validate.playbook import build_scenario  # noqa: PLC0415
    from simulator.run import simulate  # noqa: PLC0415
    try:
        sc = build_scenario(run, topology, network)
    except ScenarioError as e:
        return {"ok": False, "problem": str(e)}
    r = simulate(sc, estimator=estimator)
    return {"ok": True, "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"], "fits": r["memory"]["fits"],
            "peak_gib": r["memory"]["peak_gib"]}


DEFAULT_VOCAB = 131072
"""The vocabulary of every playbook model but a few 80B / 469G variants (131k in the run names)."""


def layout_name(run) -> str:
    return f"dp{run.dp} tp{run.tp} pp{run.pp} z{run.zero} mb{run.micro_batch} x{run.grad_accum}"


def group_members(runs: list, predictions: list[dict]) -> dict[tuple, list]:
    """(label, kv_heads, vocab, nodes, global_batch) -> [(run, prediction)], one entry per layout (its best
    run). kv_heads and vocab are part of the model: the playbook's 80B ran with 64 and 8 KV heads and with
    131k and 49k vocabularies, different models whose layouts a user never chooses between."""
    best_of: dict[tuple, tuple] = {}
    for run, pred in zip(runs, predictions):
        if not pred["ok"]:
            continue
        key = run.layout_key
        if key not in best_of or run.tokens_per_s_per_gpu > best_of[key][0].tokens_per_s_per_gpu:
            best_of[key] = (run, pred)
    groups: dict[tuple, list] = defaultdict(list)
    for run, pred in best_of.values():
        groups[(run.label, run.kv_heads, run.vocab, run.nodes, run.global_batch)].append((run, pred))
    return {k: sorted(v, key=lambda m: layout_name(m[0])) for k, v in sorted(groups.items()) if len(v) >= 2}


def model_name(label: str, kv_heads: int, vocab: int, heads: int) -> str:
    """The playbook's label, with what sets a variant apart: "80B (gqa8)", "80B (vocab49k)"."""
    extra = ([] if kv_heads == heads else [f"gqa{kv_heads}"]) + ([] if vocab == DEFAULT_VOCAB else [f"vocab{round(vocab / 1000)}k"])
    return label + (f" ({', '.join(extra)})" if extra else "")


def ranked(members: list) -> list:
    """The sweep's order: predicted tokens/s per GPU among those predicted to fit (all if none fits);
    layouts the engine re-simulated (`engine` key) first, by the engine's number."""
    fit = [m for m in members if m[1]["fits"]] or members
    return sorted(fit, key=lambda m: ("engine" not in m[1], -m[1].get("engine", m[1]["tokens_per_s_per_gpu"]), layout_name(m[0])))


def regret_groups(groups: dict[tuple, list]) -> list[dict]:
    """Per group: measured best, clustersim's pick and its regret."""
    out = []
    for (label, kv, vocab, nodes, gb), members in groups.items():
        pick = ranked(members)[0]
        best = max(members, key=lambda m: m[0].tokens_per_s_per_gpu)
        out.append({
            "model": model_name(label, kv, vocab, members[0][0].heads), "split": "fit" if label in FIT_LABELS else "validation",
            "nodes": nodes, "global_batch": gb, "layouts": len(members), "predicted_fit": sum(1 for m in members if m[1]["fits"]),
            "best": layout_name(best[0]), "best_measured": best[0].tokens_per_s_per_gpu, "best_state": network_state(best[0]),
            "pick": layout_name(pick[0]), "pick_measured": pick[0].tokens_per_s_per_gpu, "pick_state": network_state(pick[0]),
            "pick_predicted": pick[1].get("engine", pick[1]["tokens_per_s_per_gpu"]), "pick_by": "engine" if "engine" in pick[1] else "analytic",
            "pick_rank_measured": 1 + sum(1 for m in members if m[0].tokens_per_s_per_gpu > pick[0].tokens_per_s_per_gpu),
            "regret": 1 - pick[0].tokens_per_s_per_gpu / best[0].tokens_per_s_per_gpu,
        })
    return out


def summary(groups: list[dict]) -> dict:
    out = {}
    for split in ("fit", "validation"):
        rs = [g["regret"] for g in groups if g["split"] == split]
        if rs:
            out[split] = {"groups": len(rs), "mean_regret": statistics.fmean(rs), "median_regret": statistics.median(rs),
                          "max_regret": max(rs), "within_bar": sum(1 for r in rs if r <= BAR) / len(rs)}
    return out


def state_mix(groups: list[dict]) -> dict:
    """Groups whose pick ran in another network state than their best (`playbook.network_state`): the
    measured order of those two layouts mixes the layout with the cluster's state at the time, which the
    prediction prices per job from its probes."""
    out = {}
    for split in ("fit", "validation"):
        gs = [g for g in groups if g["split"] == split and g["regret"] > 0]
        mixed = [g for g in gs if g["pick_state"] != g["best_state"]]
        if gs:
            out[split] = {"groups_with_regret": len(gs), "mixed_states": len(mixed),
                          "regret_points_mixed": sum(g["regret"] for g in mixed) / sum(1 for g in groups if g["split"] == split)}
    return out


def twin_sigma(runs: list) -> dict:
    """Per-run noise of log throughput from ZeRO-0/ZeRO-1 twins (`playbook.zero_twins`, the pairs among them):
    a pair's log ratio is the difference of two runs' noise, so sigma = 1.4826 x median |log ratio| / sqrt(2)
    (the median absolute deviation's normal sigma).
    Keys `one_node` and `multi_node`, each {"pairs", "sigma"} (sigma None without a pair)."""
    out = {}
    for name, twins in zip(("one_node", "multi_node"), zero_twins([r for r in runs if r.tokens_per_s_per_gpu])):
        logs = [abs(math.log(v[0].tokens_per_s_per_gpu / v[1].tokens_per_s_per_gpu)) for v in twins if len(v) == 2]
        out[name] = {"pairs": len(logs), "sigma": 1.4826 * statistics.median(logs) / math.sqrt(2) if logs else None}
    return out


def noise_floor(groups: dict[tuple, list], sigma_one_node: float, sigma_multi_node: float,
                draws: int = FLOOR_DRAWS, seed: int = 0) -> dict:
    """What a predictor that knew every layout's true speed would score, per split: each group's measured
    numbers taken as the truth, redrawn `draws` times as truth x exp(sigma x N(0, 1)) (sigma by whether the
    group is on one node), regret = 1 - redrawn(true best) / max(redrawn). Returns per split the mean share
    of groups within BAR, the share of draws with every group within it, and the mean regret."""
    rng = np.random.default_rng(seed)
    per_split: dict[str, list] = defaultdict(list)
    for key, members in groups.items():
        truth = np.array([m[0].tokens_per_s_per_gpu for m in members])
        sigma = sigma_one_node if key[3] == 1 else sigma_multi_node
        redrawn = truth * np.exp(sigma * rng.standard_normal((draws, len(truth))))
        regret = 1 - redrawn[:, int(np.argmax(truth))] / redrawn.max(axis=1)
        per_split["fit" if key[0] in FIT_LABELS else "validation"].append(regret)
    out = {}
    for split in ("fit", "validation"):
        if per_split[split]:
            r = np.stack(per_split[split], axis=1)  # draws x groups
            within = r <= BAR
            out[split] = {"groups": r.shape[1], "within_bar": float(within.mean()),
                          "all_within_bar": float(within.all(axis=1).mean()), "mean_regret": float(r.mean())}
    return out


def noise_floors(runs: list, groups: dict[tuple, list]) -> dict:
    """The floor at the one-node twins' sigma everywhere, and with the multi-node twins' sigma across nodes."""
    sig = twin_sigma(runs)
    one, multi = sig["one_node"]["sigma"], sig["multi_node"]["sigma"]
    if one is None or multi is None:
        return {"twin_sigma": sig, "floors": []}
    return {"twin_sigma": sig, "floors": [
        {"sigma_one_node": one, "sigma_multi_node": one, "splits": noise_floor(groups, one, one)},
        {"sigma_one_node": one, "sigma_multi_node": multi, "splits": noise_floor(groups, one, multi)}]}


def floor_text(floors: dict) -> list[str]:
    lines = []
    sig = floors["twin_sigma"]
    for f in floors["floors"]:
        where = (f"sigma {f['sigma_one_node']:.1%} per run everywhere (one-node ZeRO twins, {sig['one_node']['pairs']} pairs)"
                 if f["sigma_one_node"] == f["sigma_multi_node"] else
                 f"sigma {f['sigma_one_node']:.1%} on one node, {f['sigma_multi_node']:.1%} across nodes (multi-node "
                 f"ZeRO twins, {sig['multi_node']['pairs']} pairs, which also differ by ZeRO's real DP cost)")
        parts = [f"{s['within_bar']:.0%} of the {split} groups (all {s['groups']} in {s['all_within_bar']:.1%} of draws, "
                 f"mean regret {s['mean_regret']:.1%})" for split, s in f["splits"].items()]
        lines.append(f"noise floor at {where}: a predictor that knew every layout's true speed would be within "
                     f"{BAR:.0%} in " + " and ".join(parts))
    return lines


def format_text(groups: list[dict], summ: dict, topology: str, estimator: str, floors: dict | None = None) -> str:
    lines = [f"Regret of clustersim's pick on the Playbook runs ({estimator} estimator, topology {topology}; bar {BAR:.0%})", ""]
    head = ["model", "nodes", "gbs", "layouts", "best measured", "tok/s/GPU", "state", "clustersim's pick", "tok/s/GPU",
            "state", "pred/meas", "rank", "regret"]
    rows = [[g["model"], str(g["nodes"]), str(g["global_batch"]), str(g["layouts"]), g["best"], f"{g['best_measured']:,.0f}",
             g["best_state"], g["pick"], f"{g['pick_measured']:,.0f}", g["pick_state"],
             f"{g['pick_predicted'] / g['pick_measured']:.2f}", str(g["pick_rank_measured"]), f"{g['regret']:.1%}"]
            for g in groups]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    lines += ["  ".join(c.ljust(w) if i in (0, 4, 6, 7, 9) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
              for r in [head] + rows]
    lines.append("")
    for split, s in summ.items():
        lines.append(f"{split:10s} split: {s['groups']} groups, regret mean {s['mean_regret']:.1%}, median {s['median_regret']:.1%}, "
                     f"max {s['max_regret']:.1%}; within {BAR:.0%} in {s['within_bar']:.0%} of groups")
    for split, m in state_mix(groups).items():
        lines.append(f"{split:10s} split: {m['mixed_states']} of the {m['groups_with_regret']} groups with regret picked a layout that "
                     f"ran in another network state than the best (state: the job's one-node probe); they carry "
                     f"{m['regret_points_mixed']:.1%} of the mean regret")
    if floors:
        lines += floor_text(floors)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default="aws-p5", help="topology for every run (default aws-p5, the playbook's cluster)")
    ap.add_argument("--network", choices=NETWORK_CHOICES, default=NETWORK,
                    help="each job's NVLink/EFA speed from its measured busbw (default), or the topology's for all")
    ap.add_argument("--estimator", choices=("analytic", "engine"), default="analytic", help="for every run")
    ap.add_argument("--engine-top", type=int, default=0, metavar="K",
                    help="as sweep does: re-simulate each group's K best analytic layouts with the engine and pick by it")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--csv", help="the playbook CSV (default: validation/data/playbook/nanotron_ultrascale_runs.csv)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    runs = [r for r in read_runs(args.csv) if r.status == "Success" and r.tokens_per_s_per_gpu
            and (r.pp == 1 or r.after_pp_fix)]
    runner = make_runner(args.jobs)
    try:
        predictions = runner.map(predict, [(r, args.topology, args.estimator, args.network) for r in runs])
        members = group_members(runs, predictions)
        todo = [m for ms in members.values() for m in ranked(ms)[: args.engine_top]]
        for (run, pred), eng in zip(todo, runner.map(predict, [(m[0], args.topology, "engine", args.network) for m in todo])):
            pred["engine"] = eng["tokens_per_s_per_gpu"]
    finally:
        runner.close()
    groups = regret_groups(members)
    summ = summary(groups)
    floors = noise_floors(runs, members)
    estimator = args.estimator + (f", engine on each group's top {args.engine_top}" if args.engine_top else "")
    if args.json:
        print(json.dumps({"topology": args.topology, "network": args.network, "estimator": estimator, "bar": BAR, "summary": summ,
                          "state_mix": state_mix(groups), "noise_floor": floors, "groups": groups}, indent=2))
    else:
        print(format_text(groups, summ, f"{args.topology} (network: {args.network})", estimator, floors), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
